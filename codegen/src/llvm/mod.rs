//! LLVM for the host CPU: a small JIT layer over inkwell (LLVM 14).
//!
//! - [`host_target`]: LLVM version, host triple, CPU name and feature string, the compiler and
//!   machine half of a kernel cache key.
//! - `compile` / [`compile_ir`]: build (or parse) a module, verify it, optimise it for the host
//!   at `-O3` with loop and SLP vectorisation, write it as an object file and load that with
//!   ORC's LLJIT, and get back a [`JitModule`]: function addresses, the optimised IR text (for
//!   snapshots) and the object file, which [`JitModule::load`] loads again (a cache's hit).
//!   `optimize` stops before machine code; `assemble` writes assembly instead of loading it
//!   ([`program_listing`]: a program's kernels as optimised IR and host assembly).
//! - [`kernel`]: the kernel IR code generator: every kernel of a program → one function in the
//!   CPU runtime's chunked calling convention, all in one module (`compile_program_kernels`).
//! - [`nvptx`]: the same kernel bodies as PTX through LLVM's NVPTX back end, with the NVRTC
//!   kernels' launch contract (`crate::cuda::CudaCodegen::Llvm`).
//! - `demo`: hand-built kernels (axpy, and two kernels in the CPU runtime's chunked calling
//!   convention) used by tests and as the pattern for the kernel IR code generator.
//!
//! Everything here is behind the `llvm` cargo feature (on by default). Without it the same
//! names exist (minus the inkwell-typed `compile`, `optimize` and `demo`) and every entry
//! point answers [`LlvmError::NotCompiledIn`], so GPU-only binaries build without libLLVM.
//!
//! Errors are [`LlvmError`]s carrying LLVM's own message (verifier output, IR parse errors,
//! pipeline errors); a missing function is [`LlvmError::MissingSymbol`] listing what the
//! module does define. One caveat: LLVM reports some back end failures (an intrinsic the target
//! cannot select) with `report_fatal_error`, which aborts the process; generated IR must stay
//! within what the host back end supports.

mod error;
mod options;

pub use error::{LlvmError, Result};
pub use options::{
    zen3, ByCpu, CpuTarget, HostTarget, JitOptions, MachineSchedule, MathMode, OptLevel,
    RowPrefetch, INTERLEAVE_VECTORS, MACHINE_SCHEDULE_VAR, NONTEMPORAL_MIN_BYTES, PREFETCH_BYTES,
    ROW_PREFETCH_MAX_BYTES, ROW_PREFETCH_ROWS,
};

#[cfg(feature = "llvm")]
pub mod demo;
#[cfg(feature = "llvm")]
mod diagnostics;
#[cfg(feature = "llvm")]
mod jit;
#[cfg(feature = "llvm")]
pub mod kernel;
#[cfg(feature = "llvm")]
mod orc;
// Present without the `llvm` feature too (its entry points answer `NotCompiledIn`).
pub mod nvptx;
#[cfg(feature = "llvm")]
mod target;

#[cfg(feature = "llvm")]
pub use inkwell;
#[cfg(feature = "llvm")]
pub use jit::{assemble, compile, compile_ir, optimize, JitModule};
#[cfg(feature = "llvm")]
pub use kernel::program_listing;
#[cfg(feature = "llvm")]
pub use target::{host_target, LLVM_VERSION};

#[cfg(not(feature = "llvm"))]
mod dummy;
#[cfg(not(feature = "llvm"))]
pub use dummy::{compile_ir, host_target, program_listing, JitModule, LLVM_VERSION};

/// A hash of this crate's sources at build time (`build.rs`): part of the key of machine code
/// cached on disk, so that a changed code generator never loads code the old one wrote.
pub const CODEGEN_SOURCE_HASH: &str = env!("SMELT_CODEGEN_SOURCE_HASH");

/// Whether this build has the LLVM backend (the `llvm` cargo feature).
pub const COMPILED_IN: bool = cfg!(feature = "llvm");
