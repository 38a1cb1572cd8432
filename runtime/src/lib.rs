//! smelt's runtime: devices, argument binding, kernel caches, the CPU worker pool and GEMM, and
//! the CUDA toolchain (NVRTC compilation, library probing).
//!
//! - [`alloc`]: [`alloc::LargeAligned`], a global allocator giving large tensors 64-byte alignment.
//! - [`cache`]: the on-disk + in-memory kernel cache, namespaced per target.
//! - [`cpu`]: the kernel calling convention of JIT'd CPU kernels, the worker pool, batched GEMM.
//! - [`cuda`]: finding libnvrtc/libcuda/cuBLAS/ptxas without panicking, NVRTC compilation, and
//!   the launch path: [`cuda::launch::LaunchPlan`] (pure data, tested without a GPU) and
//!   [`cuda::CudaProgram`] (runs it: device arena, streams, cuBLAS, device tensors).
//!
//! [`Device::resolve`] picks where a graph runs: `Cuda(n)` when the driver loads, `cuInit`
//! succeeds and device `n` exists; `Auto` prefers GPU 0 (with NVRTC), then the CPU JIT, then the
//! reference interpreter (`smelt_ir::interp`).

pub mod alloc;
mod bindings;
pub mod cache;
pub mod cpu;
pub mod cuda;
mod device;
mod error;

pub use bindings::check_bindings;
pub use device::Device;
pub use error::{Result, RuntimeError};
