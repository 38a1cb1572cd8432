//! Errors of the CUDA launch path ([`super::CudaProgram`]): no device, a driver or cuBLAS call
//! that failed, a program the launcher cannot run, bad bindings. None is ever a panic.

use super::error::CudaError;

/// What went wrong while resolving a GPU, compiling a program for it or running it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaExecError {
    /// A toolchain or library problem (libcuda / NVRTC / cuBLAS not found, NVRTC failed, …).
    #[error(transparent)]
    Toolchain(#[from] CudaError),
    /// `cuInit` failed: the driver library loaded but no GPU is usable (no device nodes, a
    /// driver/kernel-module mismatch, …).
    #[error("cuInit failed: {0} (the CUDA driver library loaded, but no GPU is usable)")]
    Init(String),
    /// Device `ordinal` does not exist.
    #[error("no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoDevice { ordinal: usize, count: usize },
    /// A CUDA driver call failed.
    #[error("CUDA driver call {call} failed: {message}")]
    Driver { call: &'static str, message: String },
    /// A cuBLAS call failed.
    #[error("cuBLAS call {call} failed: {status}")]
    Cublas { call: &'static str, status: String },
    /// The program violates what the launcher relies on (bad ids, a kernel writing a
    /// non-temporary, a GEMM operand outside its buffer, …).
    #[error("invalid program for the CUDA backend: {reason}")]
    InvalidProgram { reason: String },
    /// An input or parameter is missing.
    #[error("missing input or parameter {name:?}")]
    MissingBinding { name: String },
    /// An input, parameter or device tensor does not fit its buffer.
    #[error("{name:?}: expected {expected}, got {got}")]
    Binding {
        name: String,
        expected: String,
        got: String,
    },
    /// Output tensors given to `run_into` do not match the program's outputs.
    #[error("output {name:?}: expected {expected}, got {got}")]
    Output {
        name: String,
        expected: String,
        got: String,
    },
    /// A size does not fit the type the driver or a kernel needs.
    #[error("{what} overflows")]
    Overflow { what: String },
    /// A kernel met a computed index outside its buffer (a gather index outside its axis):
    /// the status word of its module was set. Out-of-range loads read 0 and out-of-range
    /// stores were skipped, so the run's outputs are not valid.
    #[error(
        "an index is out of range (e.g. a gather index outside its axis) in kernel(s) {kernels}; \
         the outputs of this run are not valid"
    )]
    IndexOutOfRange { kernels: String },
    /// The LLVM NVPTX path (`CudaCodegen::Llvm`) could not produce PTX (built without the
    /// `llvm` feature, libdevice missing for a kernel with transcendental math, …).
    #[error("LLVM NVPTX code generation failed: {0} (CudaCodegen::Nvrtc needs no LLVM)")]
    LlvmPtx(String),
    /// The CPU emulator of the CUDA C (`cuda::emulate`) could not build or run a program: no
    /// C++ compiler, a compile error, or a barrier that could never complete on a GPU.
    #[error("CUDA emulator: {0}")]
    Emulator(String),
}

pub type ExecResult<T> = std::result::Result<T, CudaExecError>;

pub(crate) fn invalid(reason: impl Into<String>) -> CudaExecError {
    CudaExecError::InvalidProgram {
        reason: reason.into(),
    }
}

pub(crate) fn driver_err(
    call: &'static str,
) -> impl Fn(cudarc::driver::DriverError) -> CudaExecError {
    move |e| CudaExecError::Driver {
        call,
        message: format!("{e:?}"),
    }
}
