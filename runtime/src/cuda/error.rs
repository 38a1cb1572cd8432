//! Errors of the CUDA backend: a missing library, a bad architecture name, a failed compile.
//! Every one names what went wrong and where smelt looked; none is ever a panic.

use std::fmt;
use std::path::PathBuf;

pub type CudaResult<T> = std::result::Result<T, CudaError>;

/// Which CUDA component a probe was looking for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaComponent {
    /// `libnvrtc.so.*`: the run-time compiler (needs no GPU).
    Nvrtc,
    /// `libcuda.so.1`: the driver, installed with the NVIDIA kernel driver.
    Driver,
    /// `libcublas.so.*`.
    Cublas,
    /// The folder holding `cuda_fp16.h` and `cuda_bf16.h`.
    Headers,
    /// The `ptxas` assembler.
    Ptxas,
}

impl fmt::Display for CudaComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CudaComponent::Nvrtc => "NVRTC (libnvrtc)",
            CudaComponent::Driver => "the CUDA driver (libcuda)",
            CudaComponent::Cublas => "cuBLAS (libcublas)",
            CudaComponent::Headers => "the CUDA headers (cuda_fp16.h)",
            CudaComponent::Ptxas => "ptxas",
        })
    }
}

impl CudaComponent {
    /// How to get this component on a typical Linux machine.
    pub fn install_hint(self) -> &'static str {
        match self {
            CudaComponent::Driver => {
                "libcuda comes with the NVIDIA driver; a machine without an NVIDIA GPU has none \
                 (use the CPU backend)"
            }
            CudaComponent::Cublas => "install cuBLAS (e.g. pip install nvidia-cublas-cu12)",
            _ => "run scripts/install-cuda-tools.sh",
        }
    }
}

/// One place a probe tried, and why it did not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// A path, or a bare library name handed to the system loader.
    pub tried: String,
    /// Why it was rejected ("no such file", the loader's message, …).
    pub reason: String,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tried, self.reason)
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// A library, header folder or tool was not found anywhere smelt looks.
    #[error(
        "{component} not found; looked at:\n{}\nhint: {}, or set {env_var} (see docs/cuda.md)",
        attempts.iter().map(|a| format!("  - {a}")).collect::<Vec<_>>().join("\n"),
        component.install_hint()
    )]
    NotFound {
        component: CudaComponent,
        env_var: &'static str,
        attempts: Vec<Attempt>,
    },
    /// A library was found and opened but lacks a function smelt needs (too old, or not NVRTC).
    #[error("{path} is not a usable {component}: missing symbol {symbol}")]
    MissingSymbol {
        component: CudaComponent,
        path: PathBuf,
        symbol: &'static str,
    },
    /// cudarc resolved its own copy of a library, different from the one smelt probed.
    #[error(
        "{component}: the library loaded by cudarc is not the probed {path} ({detail}); \
         remove the other copy from the loader path or point {env_var} at it"
    )]
    LoaderMismatch {
        component: CudaComponent,
        path: PathBuf,
        env_var: &'static str,
        detail: String,
    },
    /// An architecture string that is not `sm_XY` / `compute_XY`.
    #[error("invalid GPU architecture {0:?} (expected sm_XY, e.g. sm_80 or sm_90)")]
    InvalidArch(String),
    /// NVRTC cannot compile for this architecture at all.
    #[error("NVRTC {nvrtc_version} cannot compile for {arch}; it supports {}", supported.join(", "))]
    UnsupportedArch {
        arch: String,
        nvrtc_version: String,
        supported: Vec<String>,
    },
    /// Source, kernel name or an option holds a NUL byte (NVRTC takes C strings).
    #[error("{what} contains a NUL byte")]
    InteriorNul { what: String },
    /// The kernel failed to compile; carries NVRTC's log and the source with line numbers.
    #[error("{0}")]
    Compile(Box<CompileFailure>),
    /// An NVRTC call other than the compile itself failed.
    #[error("NVRTC call {call} failed: {status}")]
    Nvrtc { call: &'static str, status: String },
    /// ptxas ran and rejected its input.
    #[error("ptxas failed for {arch} (exit status {status}):\n{stderr}")]
    Ptxas {
        arch: String,
        status: String,
        stderr: String,
    },
    #[error("I/O error while {context}: {message}")]
    Io { context: String, message: String },
}

/// A failed NVRTC compile: everything needed to read the error without rerunning it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileFailure {
    /// The program name (NVRTC's file name in the log).
    pub name: String,
    pub arch: String,
    /// NVRTC's status, e.g. `NVRTC_ERROR_COMPILATION (6)`.
    pub status: String,
    /// NVRTC's log: `name(line): error: …` lines.
    pub log: String,
    /// The options the compile used.
    pub options: Vec<String>,
    /// The source, each line prefixed with its number (see [`numbered_source`]).
    pub numbered_source: String,
}

impl fmt::Display for CompileFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NVRTC failed to compile kernel {} for {} ({})\noptions: {}\n--- NVRTC log ---\n{}\n--- source ---\n{}",
            self.name,
            self.arch,
            self.status,
            self.options.join(" "),
            self.log,
            self.numbered_source
        )
    }
}

impl CudaError {
    pub(crate) fn io(context: impl Into<String>, err: &std::io::Error) -> Self {
        CudaError::Io {
            context: context.into(),
            message: err.to_string(),
        }
    }
}

/// `source` with each line prefixed by its 1-based number, right-aligned: the form a compile
/// error shows, so that NVRTC's `kernel.cu(12): error …` lines can be matched by eye.
pub fn numbered_source(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let width = lines.len().max(1).to_string().len();
    let mut out = String::with_capacity(source.len() + lines.len() * (width + 3));
    for (i, line) in lines.iter().enumerate() {
        out.push_str(&format!("{:>width$} | {line}\n", i + 1));
    }
    out
}
