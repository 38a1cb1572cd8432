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
//!   kernel IR lists them: the buffers it reads (`Kernel::reads`), then the buffers it writes
//!   (`Kernel::writes`), then a pointer to an `i32` **status word** (zero before the launch).
//!   A buffer pointer points to element 0 of the buffer (strides, broadcasts and offsets are
//!   compiled into the kernel's index arithmetic), aligned at least for its element type (arena
//!   buffers to 64 bytes; a program output is the caller's tensor itself, see [`exec`]). The
//!   array and every buffer stay valid for the whole launch. A kernel that meets a computed
//!   index outside its buffer (a bad gather index) ORs 1 into the status word atomically,
//!   reads 0 / skips the write, and carries on; the caller checks the word after the launch.
//! - **`start..end`** is a range of the kernel's *outer index*, `0 <= start < end <= extent`:
//!   the **flattened** outer index space, row-major over all of `Kernel::outer`, so `extent` is
//!   the product of the outer dims (1 for a kernel without outer dims; see
//!   `smelt_codegen::llvm::kernel::kernel_extent`), passed to [`CpuPool::launch`]. The call
//!   computes exactly the output elements whose outer index lies in `start..end`, and writes
//!   nothing else. (Flattening keeps every core busy when the outermost dim is small.)
//! - **Data.** Buffers hold the IR dtypes in their natural layout: bool one byte (0/1), f16
//!   IEEE binary16, bf16 the high half of an f32. Integer `floor_div`/`remainder` by zero give
//!   0 (the reference interpreter reports an error; a kernel cannot).
//! - **Determinism.** Each output element is computed entirely inside one call: a reduction
//!   into one element is never split across chunks, and its order of accumulation depends only
//!   on the element, never on `start`/`end` (long float reductions use a fixed 16-lane order,
//!   see `smelt_codegen::llvm::kernel`'s `reduce`). Results are therefore bitwise identical
//!   across runs, thread counts and chunk sizes.
//! - **Concurrency.** Calls with disjoint ranges run concurrently on the pool's threads. A
//!   kernel keeps no state between calls, allocates nothing, calls nothing back, and never
//!   unwinds. Inputs are read-only; an output may share memory with an input only where the
//!   kernel IR allows it (same element read then written by one call).
//! - **Range of indices.** `start`/`end` are always 64-bit; the kernel may narrow its inner
//!   index arithmetic to 32 bits when every byte offset fits (kernel IR invariant 5).
//!
//! `smelt_codegen::llvm::kernel` generates kernels in this convention from the kernel IR;
//! [`exec::CpuProgram`] runs whole programs of them (with GEMM steps and a planned arena,
//! [`memory`]). `smelt_codegen::llvm::demo` has hand-built kernels in an older form of the
//! convention (outputs first, no status word: `axpy_chunk`, `row_sum_chunk`);
//! `runtime/tests/cpu_parallel.rs` runs them.
//!
//! # Without LLVM
//!
//! The pool and matmul are plain Rust and always present. Without the `llvm` feature a
//! [`CpuKernel`] cannot be made (no `JitModule` exists) and [`jit_target`] answers
//! [`LlvmError::NotCompiledIn`](smelt_codegen::llvm::LlvmError::NotCompiledIn) inside
//! [`CpuError::Jit`].

mod disk_cache;
mod error;
pub mod exec;
mod gemm;
mod jit_cache;
mod kernel;
pub mod memory;
pub mod pages;
mod pool;

pub use self::gemm::{matmul_host, Element, MatmulOperand, MatmulPlan, PANEL_MAX_ROWS};
pub use disk_cache::{jit_disk_hits, CpuDiskCache};
pub use error::{CpuError, Result};
pub use exec::{CpuOptions, CpuProgram};
pub use jit_cache::{
    clear_jit_cache, jit_compilations, set_jit_cache_capacity, DEFAULT_JIT_CACHE_ENTRIES,
};
pub use kernel::CpuKernel;
pub use memory::{plan_memory, MemoryPlan};
pub use pool::{CpuPool, CHUNKS_PER_THREAD};

/// A CPU kernel entry point (see the calling convention above).
pub type KernelFn = unsafe extern "C" fn(args: *const *mut u8, start: i64, end: i64);

/// The LLVM version and host CPU the JIT compiles for (for kernel cache keys), or
/// [`CpuError::Jit`] with `NotCompiledIn` in a build without the `llvm` feature.
pub fn jit_target() -> Result<&'static smelt_codegen::llvm::HostTarget> {
    Ok(smelt_codegen::llvm::host_target()?)
}
