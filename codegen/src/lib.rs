//! Code generation from the kernel IR (`smelt_passes::kernel`).
//!
//! - [`llvm`]: the host JIT (inkwell/LLVM 14, feature `llvm`) and [`llvm::kernel`], which turns
//!   kernels into LLVM functions in the CPU calling convention of `smelt_runtime::cpu`.
//! - [`cuda`]: CUDA C for NVRTC, one translation unit per program, with launch configurations.
//! - [`transposed`]: which loads of an elementwise kernel read their operand transposed, the
//!   test both code generators compute tiles by.
//!
//! Both are pure functions of the kernel IR: same kernel, same text (a cache key). The LLVM
//! NVPTX path (`llvm::nvptx`, selected by [`cuda::CudaCodegen::Llvm`]) prints PTX from the same
//! LLVM bodies as the host JIT.

pub mod cuda;
pub mod llvm;
pub mod transposed;
