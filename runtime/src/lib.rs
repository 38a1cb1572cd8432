//! smelt's runtime: devices, argument binding, kernel caches, the CPU worker pool and GEMM, and
//! the CUDA toolchain (NVRTC compilation, library probing).
//!
//! - [`cache`]: the on-disk + in-memory kernel cache, namespaced per target.
//! - [`cpu`]: the kernel calling convention of JIT'd CPU kernels, the worker pool, batched GEMM.
//! - [`cuda`]: finding libnvrtc/libcuda/ptxas without panicking, NVRTC compilation.
//!
//! Graphs still run on the reference interpreter (`smelt_ir::interp`): `Device::Cpu` and
//! `Device::Cuda(n)` answer [`RuntimeError::DeviceNotAvailable`] until kernel code generation
//! (issues 4 and 5) connects these pieces.

mod bindings;
pub mod cache;
pub mod cpu;
pub mod cuda;
mod device;
mod error;

pub use bindings::check_bindings;
pub use device::Device;
pub use error::{Result, RuntimeError};
