//! The CPU backend's device layer: a worker pool that runs JIT-compiled kernels over chunks of
//! an outer range, and matmul through the `gemm` crate.
//!
//! # Kernel calling convention
//!
//! Every kernel the LLVM code generator emits for the CPU has the C signature
//!
//! ```text
//! void kernel(i8** args, i64 start, i64 end)      // Rust: KernelFn
//! ```
//!
//! - **`args`** points to an array of pointers, one per kernel argument, in the order the
//!   kernel's IR lists them: input buffers, then output buffers, then scalar parameters. A
//!   buffer pointer points to the element at offset 0 of the kernel's view of that buffer
//!   (strides, broadcasts and offsets are compiled into the kernel's index arithmetic), aligned
//!   at least for its element type. A scalar parameter is passed as a pointer to the value.
//!   The array and every buffer stay valid for the whole launch.
//! - **`start..end`** is a range of the kernel's *outer index*, `0 <= start < end <= extent`,
//!   where `extent` is the size of the outer (parallel) dimension of the kernel's output index
//!   space, chosen by the code generator and passed to [`CpuPool::launch`]. The call computes
//!   exactly the output elements whose outer index lies in `start..end`, and writes nothing
//!   else.
//! - **Determinism.** Each output element is computed entirely inside one call: a reduction
//!   into one element is never split across chunks, and its order of accumulation depends only
//!   on the element, never on `start`/`end`. Results are therefore bitwise identical across
//!   runs, thread counts and chunk sizes.
//! - **Concurrency.** Calls with disjoint ranges run concurrently on the pool's threads. A
//!   kernel keeps no state between calls, allocates nothing, calls nothing back, and never
//!   unwinds. Inputs are read-only; an output may share memory with an input only where the
//!   kernel IR allows it (same element read then written by one call).
//! - **Range of indices.** `start`/`end` are always 64-bit; the kernel may narrow its inner
//!   index arithmetic to 32 bits when every byte offset fits (kernel IR invariant 5).
//!
//! `smelt_codegen::llvm::demo` has hand-built kernels in this
//! convention (`axpy_chunk`, `row_sum_chunk`); `runtime/tests/cpu_parallel.rs` runs them.
//!
//! # Without LLVM
//!
//! The pool and matmul are plain Rust and always present. Without the `llvm` feature a
//! [`CpuKernel`] cannot be made (no `JitModule` exists) and [`jit_target`] answers
//! [`LlvmError::NotCompiledIn`](smelt_codegen::llvm::LlvmError::NotCompiledIn) inside
//! [`CpuError::Jit`].

mod error;
mod gemm;
mod kernel;
mod pool;

pub use self::gemm::{matmul_host, Element, MatmulOperand, MatmulPlan};
pub use error::{CpuError, Result};
pub use kernel::CpuKernel;
pub use pool::{CpuPool, CHUNKS_PER_THREAD};

/// A CPU kernel entry point (see the calling convention above).
pub type KernelFn = unsafe extern "C" fn(args: *const *mut u8, start: i64, end: i64);

/// The LLVM version and host CPU the JIT compiles for (for kernel cache keys), or
/// [`CpuError::Jit`] with `NotCompiledIn` in a build without the `llvm` feature.
pub fn jit_target() -> Result<&'static smelt_codegen::llvm::HostTarget> {
    Ok(smelt_codegen::llvm::host_target()?)
}
