//! Errors of the CPU backend.

use smelt_codegen::llvm::LlvmError;
use smelt_ir::DType;

/// `Result` with [`CpuError`].
pub type Result<T, E = CpuError> = std::result::Result<T, E>;

/// An error of the CPU backend: bad arguments to a launch or a matmul, or the JIT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuError {
    /// The LLVM JIT failed, or is not compiled in (`llvm` feature off).
    #[error(transparent)]
    Jit(#[from] LlvmError),
    /// The worker pool could not be started.
    #[error("could not start a pool of {threads} CPU worker threads: {message}")]
    Pool { threads: usize, message: String },
    /// A launch over a negative number of outer indices.
    #[error("a CPU kernel launch needs a non-negative extent, got {extent}")]
    NegativeExtent { extent: i64 },
    /// Operand shapes or strides a matmul cannot take (`lhs`, `rhs` are `dims / strides`).
    #[error("matmul of {lhs} and {rhs}: {reason}")]
    MatmulShape {
        reason: String,
        lhs: String,
        rhs: String,
    },
    /// A dtype the operation does not support.
    #[error("{op} does not support dtype {dtype}")]
    UnsupportedDType { op: &'static str, dtype: DType },
    /// A buffer of another dtype than the operation was planned for.
    #[error("{op}: {operand} is {got}, expected {expected}")]
    DTypeMismatch {
        op: &'static str,
        operand: &'static str,
        expected: DType,
        got: DType,
    },
    /// A buffer too short for the elements its shape and strides reach (or a negative offset).
    #[error("{op}: {operand} needs {needed} elements, the buffer has {len}")]
    BufferTooSmall {
        op: &'static str,
        operand: &'static str,
        needed: usize,
        len: usize,
    },
    /// A size or offset computation overflowed.
    #[error("{op}: {what} overflows")]
    Overflow { op: &'static str, what: String },
    /// A program the CPU backend cannot run (a bug in lowering, or a hand-built program).
    #[error("invalid program: {reason}")]
    InvalidProgram { reason: String },
    /// An input (or unbound parameter) of the program has no tensor in the run's bindings.
    #[error("no binding for input {name:?}")]
    MissingBinding { name: String },
    /// A bound tensor of the wrong dtype or size.
    #[error("binding {name:?}: expected {expected}, got {got}")]
    Binding {
        name: String,
        expected: String,
        got: String,
    },
    /// An output tensor (of `run_into`) of the wrong dtype or shape, or the wrong count.
    #[error("output {name:?}: expected {expected}, got {got}")]
    Output {
        name: String,
        expected: String,
        got: String,
    },
    /// A kernel met a computed index outside its buffer (e.g. a gather index out of range).
    #[error("kernel {kernel}: an index is out of range (e.g. a gather index outside its axis)")]
    IndexOutOfRange { kernel: String },
}
