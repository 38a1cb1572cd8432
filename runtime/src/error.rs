//! Runtime errors.

use crate::device::Device;
use smelt_ir::Signature;

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("device {device} is not available: {reason}")]
    DeviceNotAvailable { device: Device, reason: String },
    #[error("unknown device {0:?} (expected auto, reference, cpu, cuda, cuda:N or cuda-emulated)")]
    UnknownDevice(String),
    #[error("{}\nthe graph expects:\n{expected}", problems.join("\n"))]
    Bindings {
        problems: Vec<String>,
        expected: Signature,
    },
    #[error(transparent)]
    Eval(#[from] smelt_ir::interp::EvalError),
    #[error(transparent)]
    Cuda(#[from] crate::cuda::CudaError),
    #[error(transparent)]
    Cpu(#[from] crate::cpu::CpuError),
    #[error(transparent)]
    CudaExec(#[from] crate::cuda::CudaExecError),
}
