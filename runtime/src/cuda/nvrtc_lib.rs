//! The loaded NVRTC library: the exact file the probe found, and the few functions smelt calls.
//!
//! NVRTC is called through this table rather than through `cudarc::nvrtc`: cudarc's dynamic
//! loading opens NVRTC by bare library name (the loader decides which file), panics when none
//! is found, and decodes status codes into a Rust enum, which a newer NVRTC can overflow. Here
//! the library is the probed path, a missing one is a typed error, and status codes stay
//! integers. (The driver and cuBLAS do go through cudarc; see `driver.rs`.)

use super::error::{CudaComponent, CudaError, CudaResult};
use super::probe::{find_include_dir, find_nvrtc, LibraryLocation, ProbeConfig};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub(crate) type Program = *mut c_void;
type Status = c_int;

/// The NVRTC entry points smelt uses (all present since CUDA 11.2).
#[derive(Clone, Copy)]
pub(crate) struct Api {
    pub version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    pub get_num_supported_archs: unsafe extern "C" fn(*mut c_int) -> Status,
    pub get_supported_archs: unsafe extern "C" fn(*mut c_int) -> Status,
    pub get_error_string: unsafe extern "C" fn(Status) -> *const c_char,
    pub create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    pub destroy_program: unsafe extern "C" fn(*mut Program) -> Status,
    pub compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    pub get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    pub get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    pub get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    pub get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    pub get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    pub get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
}

/// NVRTC, loaded and asked for its version and the architectures it can target.
pub struct Nvrtc {
    location: LibraryLocation,
    pub(crate) api: Api,
    version: (i32, i32),
    supported_archs: Vec<u32>,
    include_dir: Option<PathBuf>,
    // Keeps the library mapped while `api` is in use; declared last so it drops last.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc")
            .field("path", &self.location.path)
            .field("version", &self.version)
            .field("include_dir", &self.include_dir)
            .finish()
    }
}

fn symbol<T: Copy>(lib: &libloading::Library, path: &Path, name: &'static str) -> CudaResult<T> {
    // SAFETY: every `T` used with this function is the C signature of the NVRTC function
    // `name` as declared in nvrtc.h (CUDA 11.2 to 13.x); the pointer is copied out but only
    // used while `Nvrtc` (which owns `lib`) is alive.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| CudaError::MissingSymbol {
            component: CudaComponent::Nvrtc,
            path: path.to_path_buf(),
            symbol: name,
        })
}

impl Nvrtc {
    /// Probes with `cfg`, loads that exact file and queries it. Independent of [`nvrtc()`]:
    /// tests use it with their own configuration.
    pub fn load(cfg: &ProbeConfig) -> CudaResult<Nvrtc> {
        let location = find_nvrtc(cfg)?;
        let path = location.path.clone();
        // SAFETY: the probe already opened this file and found `nvrtcVersion` in it, so it is
        // NVRTC; loading it runs only NVRTC's own initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| CudaError::NotFound {
            component: CudaComponent::Nvrtc,
            env_var: "SMELT_NVRTC_LIB",
            attempts: vec![super::error::Attempt {
                tried: path.display().to_string(),
                reason: super::probe::error_chain(&e),
            }],
        })?;
        let api = Api {
            version: symbol(&lib, &path, "nvrtcVersion")?,
            get_num_supported_archs: symbol(&lib, &path, "nvrtcGetNumSupportedArchs")?,
            get_supported_archs: symbol(&lib, &path, "nvrtcGetSupportedArchs")?,
            get_error_string: symbol(&lib, &path, "nvrtcGetErrorString")?,
            create_program: symbol(&lib, &path, "nvrtcCreateProgram")?,
            destroy_program: symbol(&lib, &path, "nvrtcDestroyProgram")?,
            compile_program: symbol(&lib, &path, "nvrtcCompileProgram")?,
            get_program_log_size: symbol(&lib, &path, "nvrtcGetProgramLogSize")?,
            get_program_log: symbol(&lib, &path, "nvrtcGetProgramLog")?,
            get_ptx_size: symbol(&lib, &path, "nvrtcGetPTXSize")?,
            get_ptx: symbol(&lib, &path, "nvrtcGetPTX")?,
            get_cubin_size: symbol(&lib, &path, "nvrtcGetCUBINSize")?,
            get_cubin: symbol(&lib, &path, "nvrtcGetCUBIN")?,
        };
        let mut nvrtc = Nvrtc {
            location,
            api,
            version: (0, 0),
            supported_archs: Vec::new(),
            include_dir: find_include_dir(cfg).ok(),
            _lib: lib,
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both pointers are to live local integers, as nvrtcVersion requires.
        nvrtc.check("nvrtcVersion", unsafe {
            (api.version)(&mut major, &mut minor)
        })?;
        nvrtc.version = (major, minor);
        let mut n: c_int = 0;
        // SAFETY: `n` is a live local integer.
        nvrtc.check("nvrtcGetNumSupportedArchs", unsafe {
            (api.get_num_supported_archs)(&mut n)
        })?;
        let mut archs = vec![0 as c_int; usize::try_from(n).unwrap_or(0)];
        if !archs.is_empty() {
            // SAFETY: `archs` has room for the `n` integers NVRTC said it will write.
            nvrtc.check("nvrtcGetSupportedArchs", unsafe {
                (api.get_supported_archs)(archs.as_mut_ptr())
            })?;
        }
        nvrtc.supported_archs = archs
            .into_iter()
            .filter_map(|a| u32::try_from(a).ok())
            .collect();
        Ok(nvrtc)
    }

    /// `Ok` for NVRTC_SUCCESS, else an [`CudaError::Nvrtc`] naming the call.
    pub(crate) fn check(&self, call: &'static str, status: Status) -> CudaResult<()> {
        if status == 0 {
            Ok(())
        } else {
            Err(CudaError::Nvrtc {
                call,
                status: self.status_name(status),
            })
        }
    }

    /// NVRTC's name for a status code (`NVRTC_ERROR_COMPILATION`), or the number.
    pub(crate) fn status_name(&self, status: Status) -> String {
        // SAFETY: nvrtcGetErrorString accepts any value and returns a pointer to a static
        // NUL-terminated string (or NULL in broken builds, handled below).
        let ptr = unsafe { (self.api.get_error_string)(status) };
        if ptr.is_null() {
            return format!("NVRTC status {status}");
        }
        // SAFETY: non-null, static and NUL-terminated, per the NVRTC documentation.
        let name = unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned();
        format!("{name} ({status})")
    }

    /// Where the library was found.
    pub fn location(&self) -> &LibraryLocation {
        &self.location
    }

    /// `(major, minor)` from `nvrtcVersion`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The compiler identity for cache keys: `nvrtc-12.9`.
    pub fn version_string(&self) -> String {
        format!("nvrtc-{}.{}", self.version.0, self.version.1)
    }

    /// The real architectures (`80` for sm_80) NVRTC can emit cubins for, ascending.
    pub fn supported_archs(&self) -> &[u32] {
        &self.supported_archs
    }

    /// The folder with `cuda_fp16.h`/`cuda_bf16.h` passed as `-I`, if one was found.
    pub fn include_dir(&self) -> Option<&Path> {
        self.include_dir.as_deref()
    }
}

/// The process-wide NVRTC, probed from the environment ([`ProbeConfig::from_env`]) on first use.
/// The result, error included, is kept for the life of the process.
pub fn nvrtc() -> CudaResult<&'static Nvrtc> {
    static NVRTC: OnceLock<CudaResult<Nvrtc>> = OnceLock::new();
    NVRTC
        .get_or_init(|| Nvrtc::load(&ProbeConfig::from_env()))
        .as_ref()
        .map_err(Clone::clone)
}
