//! The CUDA driver and cuBLAS, which smelt uses through cudarc.
//!
//! cudarc's `dynamic-loading` opens libraries by bare name (`libcuda.so`, `libcuda.so.1`, …) and
//! panics when none loads. So before anything of cudarc's runs, smelt probes the library itself
//! and keeps the probed file open: the dynamic loader matches a bare name against the SONAME of
//! a library already loaded, so cudarc's later `dlopen("libcuda.so.1")` returns that same
//! library. [`bind`] then checks that cudarc resolved the very file smelt probed (same address
//! for the probe symbol); if some other copy wins (say an unrelated `libcuda.so` on the loader
//! path), the result is [`CudaError::LoaderMismatch`], not a silent mix.

use super::error::{CudaComponent, CudaError, CudaResult};
use super::probe::{find_cublas, find_driver, LibraryLocation, ProbeConfig};
use std::ffi::c_int;
use std::sync::OnceLock;

/// A library loaded at its probed path and verified to be the one cudarc uses.
#[derive(Debug)]
pub struct BoundLibrary {
    pub location: LibraryLocation,
    // Holding the handle keeps the library resident for cudarc's bare-name lookups.
    _lib: libloading::Library,
}

type Present = unsafe fn() -> bool;
type Culib = unsafe fn() -> &'static libloading::Library;

fn symbol_addr(lib: &libloading::Library, symbol: &str) -> Option<usize> {
    // SAFETY: the symbol is only looked up and its address compared, never called.
    unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }
        .ok()
        .map(|s| *s as usize)
}

/// Loads `location` and makes sure cudarc's lazily loaded copy is the same library.
fn bind(
    location: LibraryLocation,
    env_var: &'static str,
    symbol: &'static str,
    present: Present,
    culib: Culib,
) -> CudaResult<BoundLibrary> {
    let component = location.component;
    // SAFETY: the probe opened this file and found `symbol` in it; loading a CUDA library runs
    // only its own initialisers, which have no preconditions.
    let lib = unsafe { libloading::Library::new(&location.path) }.map_err(|e| {
        CudaError::LoaderMismatch {
            component,
            path: location.path.clone(),
            env_var,
            detail: format!("could not reopen it: {}", super::probe::error_chain(&e)),
        }
    })?;
    let mismatch = |detail: String| CudaError::LoaderMismatch {
        component,
        path: location.path.clone(),
        env_var,
        detail,
    };
    // SAFETY: `present` only tries to dlopen cudarc's candidate names; it calls nothing.
    if !unsafe { present() } {
        return Err(mismatch("cudarc finds no library under its names".into()));
    }
    // SAFETY: `present()` just returned true, so one of cudarc's candidate names loads and
    // `culib()` returns it instead of panicking.
    let theirs = unsafe { culib() };
    let ours_addr = symbol_addr(&lib, symbol);
    let theirs_addr = symbol_addr(theirs, symbol);
    if ours_addr.is_none() || ours_addr != theirs_addr {
        return Err(mismatch(format!(
            "{symbol} resolves to a different address in cudarc's copy"
        )));
    }
    Ok(BoundLibrary {
        location,
        _lib: lib,
    })
}

/// The CUDA driver library, bound for cudarc, and its version.
#[derive(Debug)]
pub struct Driver {
    pub library: BoundLibrary,
    /// `cuDriverGetVersion`: 12040 for CUDA 12.4.
    pub version: i32,
}

impl Driver {
    /// Probes and binds the driver with `cfg`. Does not call `cuInit`, so it succeeds on a
    /// machine that has the driver library but no usable GPU; device queries come later.
    pub fn load(cfg: &ProbeConfig) -> CudaResult<Driver> {
        let location = find_driver(cfg)?;
        let library = bind(
            location,
            "SMELT_CUDA_DRIVER_LIB",
            "cuDriverGetVersion",
            cudarc::driver::sys::is_culib_present,
            cudarc::driver::sys::culib,
        )?;
        let mut version: c_int = 0;
        // SAFETY: `bind` verified cudarc's driver library is loaded and exports this function;
        // `version` is a valid out-pointer. cuDriverGetVersion needs no cuInit.
        let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) };
        if status != cudarc::driver::sys::cudaError_enum::CUDA_SUCCESS {
            return Err(CudaError::LoaderMismatch {
                component: CudaComponent::Driver,
                path: library.location.path.clone(),
                env_var: "SMELT_CUDA_DRIVER_LIB",
                detail: format!("cuDriverGetVersion failed: {status:?}"),
            });
        }
        Ok(Driver { library, version })
    }
}

/// The process-wide driver, probed from the environment on first use (errors are kept too).
/// Call this before any `cudarc::driver` function: it is what makes those calls safe from
/// cudarc's "library not found" panic.
pub fn driver() -> CudaResult<&'static Driver> {
    static DRIVER: OnceLock<CudaResult<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| Driver::load(&ProbeConfig::from_env()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The process-wide cuBLAS, bound for cudarc like the driver. Call before `cudarc::cublas`.
pub fn cublas() -> CudaResult<&'static BoundLibrary> {
    static CUBLAS: OnceLock<CudaResult<BoundLibrary>> = OnceLock::new();
    CUBLAS
        .get_or_init(|| {
            let location = find_cublas(&ProbeConfig::from_env())?;
            bind(
                location,
                "SMELT_CUBLAS_LIB",
                "cublasCreate_v2",
                cudarc::cublas::sys::is_culib_present,
                cudarc::cublas::sys::culib,
            )
        })
        .as_ref()
        .map_err(Clone::clone)
}
