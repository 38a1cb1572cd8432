//! Code generation from kernel IR: CUDA C for NVRTC and LLVM IR for NVPTX and the host.
//!
//! Not built yet (issues 4 and 5).

pub mod cuda;
pub mod llvm;
