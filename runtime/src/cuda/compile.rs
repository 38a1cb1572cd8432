//! CUDA C → cubin or PTX with NVRTC.
//!
//! Output: with [`OutputKind::Auto`] (the default) a kernel for `sm_XY` is compiled with
//! `--gpu-architecture=sm_XY` and NVRTC's cubin (SASS for exactly that GPU) is returned, when
//! NVRTC lists `XY` among its supported architectures. When the GPU is newer than this NVRTC
//! knows (`XY` above its highest supported architecture), smelt compiles PTX for the newest
//! virtual architecture NVRTC has (`compute_<max>`) and the driver JIT-compiles it at load
//! time; the log says so. An architecture below NVRTC's oldest is an error.
//! [`OutputKind::Ptx`] always asks for PTX (`compute_XY`), for ptxas checks and debugging.

use super::error::{numbered_source, CompileFailure, CudaError, CudaResult};
use super::nvrtc_lib::{nvrtc, Nvrtc, Program};
use std::ffi::{c_char, CString};
use std::fmt;
use std::path::PathBuf;

/// A GPU architecture: `sm_80`, `sm_90`, `sm_90a` …
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// `major * 10 + minor`: 80 for sm_80.
    pub number: u32,
    /// The arch-specific suffix (`a` in sm_90a, `f` in sm_100f), if any.
    pub suffix: Option<char>,
}

impl Arch {
    /// The architecture of a device with compute capability `major.minor`.
    pub fn from_compute_capability(major: u32, minor: u32) -> Arch {
        Arch {
            number: major * 10 + minor,
            suffix: None,
        }
    }

    /// Parses `sm_XY` (also `sm_XYa` / `sm_XYf`, and `compute_XY`).
    pub fn parse(s: &str) -> CudaResult<Arch> {
        let bad = || CudaError::InvalidArch(s.to_string());
        let rest = s
            .strip_prefix("sm_")
            .or_else(|| s.strip_prefix("compute_"))
            .ok_or_else(bad)?;
        let (digits, suffix) = match rest.char_indices().last() {
            Some((i, c)) if c == 'a' || c == 'f' => (&rest[..i], Some(c)),
            _ => (rest, None),
        };
        if digits.len() < 2 || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let number: u32 = digits.parse().map_err(|_| bad())?;
        if number < 10 {
            return Err(bad());
        }
        Ok(Arch { number, suffix })
    }

    fn with_prefix(&self, prefix: &str) -> String {
        match self.suffix {
            Some(c) => format!("{prefix}_{}{c}", self.number),
            None => format!("{prefix}_{}", self.number),
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.with_prefix("sm"))
    }
}

/// Which artefact to ask NVRTC for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OutputKind {
    /// A cubin (`--gpu-architecture=sm_XY`) when NVRTC lists the architecture; for a GPU newer
    /// than NVRTC's newest architecture, PTX for that newest one (the driver JIT-compiles it).
    #[default]
    Auto,
    /// PTX for `compute_XY`.
    Ptx,
}

/// Compile options beyond the architecture.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub output: OutputKind,
    /// Extra NVRTC flags, passed as given (`--use_fast_math`, `-lineinfo`, `-DN=4`).
    pub flags: Vec<String>,
    /// Extra include folders; the probed CUDA include folder is always added after them.
    pub include_dirs: Vec<PathBuf>,
}

/// What NVRTC produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelImage {
    /// SASS for exactly one architecture, loadable with `cuModuleLoadData`.
    Cubin(Vec<u8>),
    /// PTX text (without the trailing NUL), JIT-compiled by the driver at load time.
    Ptx(String),
}

impl KernelImage {
    /// Serialises for the kernel cache: one tag byte (`C` or `P`), then the bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (tag, body) = match self {
            KernelImage::Cubin(b) => (b'C', b.as_slice()),
            KernelImage::Ptx(s) => (b'P', s.as_bytes()),
        };
        let mut out = Vec::with_capacity(body.len() + 1);
        out.push(tag);
        out.extend_from_slice(body);
        out
    }

    /// The inverse of [`KernelImage::to_bytes`]; `None` for bytes it did not write.
    pub fn from_bytes(bytes: &[u8]) -> Option<KernelImage> {
        match bytes.split_first()? {
            (b'C', rest) => Some(KernelImage::Cubin(rest.to_vec())),
            (b'P', rest) => String::from_utf8(rest.to_vec()).ok().map(KernelImage::Ptx),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            KernelImage::Cubin(b) => b.len(),
            KernelImage::Ptx(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A compiled kernel and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledKernel {
    /// The kernel's program name (also NVRTC's file name in the log).
    pub name: String,
    /// The architecture asked for.
    pub arch: Arch,
    pub image: KernelImage,
    /// NVRTC's log (warnings) plus smelt's notes, e.g. on a PTX fall-back; often empty.
    pub log: String,
    /// The exact NVRTC options used.
    pub options: Vec<String>,
    /// `nvrtc-12.9`.
    pub compiler_version: String,
}

/// Compiles `source` for `arch` with the process-wide NVRTC ([`nvrtc()`]).
pub fn compile_cuda(
    source: &str,
    name: &str,
    arch: &str,
    options: &CompileOptions,
) -> CudaResult<CompiledKernel> {
    nvrtc()?.compile(source, name, Arch::parse(arch)?, options)
}

fn c_string(what: impl FnOnce() -> String, s: &str) -> CudaResult<CString> {
    CString::new(s).map_err(|_| CudaError::InteriorNul { what: what() })
}

/// Destroys an NVRTC program when dropped, so every exit path frees it.
struct ProgramGuard<'a> {
    nvrtc: &'a Nvrtc,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `prog` came from a successful nvrtcCreateProgram and is destroyed only here.
        // A failure to destroy can only leak, so its status is ignored.
        let _ = unsafe { (self.nvrtc.api.destroy_program)(&mut self.prog) };
    }
}

impl Nvrtc {
    /// The architecture flag and output this NVRTC will use for `arch`, plus a note for the log.
    pub fn plan(
        &self,
        arch: Arch,
        output: OutputKind,
    ) -> CudaResult<(String, OutputKind, Option<String>)> {
        let supported = self.supported_archs();
        let (min, max) = match (supported.first(), supported.last()) {
            (Some(&lo), Some(&hi)) => (lo, hi),
            _ => (0, u32::MAX), // an NVRTC that lists nothing: let it decide
        };
        if arch.number < min {
            return Err(CudaError::UnsupportedArch {
                arch: arch.to_string(),
                nvrtc_version: self.version_string(),
                supported: supported.iter().map(|a| format!("sm_{a}")).collect(),
            });
        }
        if arch.number > max {
            let newest = Arch {
                number: max,
                suffix: None,
            };
            let note = format!(
                "note: {} does not know {arch}; compiled PTX for {} (the driver JIT-compiles it)",
                self.version_string(),
                newest.with_prefix("compute")
            );
            return Ok((
                format!("--gpu-architecture={}", newest.with_prefix("compute")),
                OutputKind::Ptx,
                Some(note),
            ));
        }
        Ok(match output {
            OutputKind::Auto => (format!("--gpu-architecture={arch}"), OutputKind::Auto, None),
            OutputKind::Ptx => (
                format!("--gpu-architecture={}", arch.with_prefix("compute")),
                OutputKind::Ptx,
                None,
            ),
        })
    }

    /// The full NVRTC option list for `arch` and `options` (also what a cache key should hash).
    pub fn options_for(&self, arch: Arch, options: &CompileOptions) -> CudaResult<Vec<String>> {
        let (arch_flag, _, _) = self.plan(arch, options.output)?;
        let mut all = vec![arch_flag];
        for dir in options
            .include_dirs
            .iter()
            .map(PathBuf::as_path)
            .chain(self.include_dir())
        {
            all.push(format!("--include-path={}", dir.display()));
        }
        all.extend(options.flags.iter().cloned());
        Ok(all)
    }

    /// Compiles `source` (program name `name`) for `arch`.
    pub fn compile(
        &self,
        source: &str,
        name: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> CudaResult<CompiledKernel> {
        let (_, output, note) = self.plan(arch, options.output)?;
        let opts = self.options_for(arch, options)?;
        let c_src = c_string(|| "kernel source".into(), source)?;
        let c_name = c_string(|| format!("kernel name {name:?}"), name)?;
        let c_opts = opts
            .iter()
            .map(|o| c_string(|| format!("NVRTC option {o:?}"), o))
            .collect::<CudaResult<Vec<_>>>()?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: `prog` is a valid out-pointer; source and name are NUL-terminated and outlive
        // the program (they live until the end of this function, after the guard drops);
        // zero headers are passed, with null arrays as NVRTC allows.
        let status = unsafe {
            (self.api.create_program)(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        self.check("nvrtcCreateProgram", status)?;
        let guard = ProgramGuard { nvrtc: self, prog };
        let n_opts = i32::try_from(opt_ptrs.len()).map_err(|_| CudaError::Nvrtc {
            call: "nvrtcCompileProgram",
            status: "too many options".into(),
        })?;
        // SAFETY: `guard.prog` is a live program; `opt_ptrs` holds `n_opts` pointers to
        // NUL-terminated strings kept alive by `c_opts`.
        let status = unsafe { (self.api.compile_program)(guard.prog, n_opts, opt_ptrs.as_ptr()) };
        let mut log = self.program_log(guard.prog)?;
        if status != 0 {
            return Err(CudaError::Compile(Box::new(CompileFailure {
                name: name.to_string(),
                arch: arch.to_string(),
                status: self.status_name(status),
                log,
                options: opts,
                numbered_source: numbered_source(source),
            })));
        }
        if let Some(note) = note {
            if !log.is_empty() && !log.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(&note);
        }
        let image = match output {
            OutputKind::Auto => KernelImage::Cubin(self.fetch(
                guard.prog,
                ("nvrtcGetCUBINSize", self.api.get_cubin_size),
                ("nvrtcGetCUBIN", self.api.get_cubin),
            )?),
            OutputKind::Ptx => {
                let mut bytes = self.fetch(
                    guard.prog,
                    ("nvrtcGetPTXSize", self.api.get_ptx_size),
                    ("nvrtcGetPTX", self.api.get_ptx),
                )?;
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
                KernelImage::Ptx(String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        drop(guard);
        Ok(CompiledKernel {
            name: name.to_string(),
            arch,
            image,
            log,
            options: opts,
            compiler_version: self.version_string(),
        })
    }

    fn program_log(&self, prog: Program) -> CudaResult<String> {
        let mut bytes = self.fetch(
            prog,
            ("nvrtcGetProgramLogSize", self.api.get_program_log_size),
            ("nvrtcGetProgramLog", self.api.get_program_log),
        )?;
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        Ok(String::from_utf8_lossy(&bytes).trim_end().to_string())
    }

    /// The size-then-copy pattern NVRTC uses for logs, PTX and cubins.
    #[allow(clippy::type_complexity)]
    fn fetch(
        &self,
        prog: Program,
        size: (
            &'static str,
            unsafe extern "C" fn(Program, *mut usize) -> i32,
        ),
        copy: (
            &'static str,
            unsafe extern "C" fn(Program, *mut c_char) -> i32,
        ),
    ) -> CudaResult<Vec<u8>> {
        let mut n: usize = 0;
        // SAFETY: `prog` is a live program and `n` a valid out-pointer.
        self.check(size.0, unsafe { (size.1)(prog, &mut n) })?;
        let mut buf = vec![0u8; n];
        if n > 0 {
            // SAFETY: `buf` has exactly the `n` bytes NVRTC reported it will write.
            self.check(copy.0, unsafe { (copy.1)(prog, buf.as_mut_ptr().cast()) })?;
        }
        Ok(buf)
    }
}
