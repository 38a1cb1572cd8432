//! Lowering the fusion plan to the kernel IR ([`ir`]), which every backend prints from.
//!
//! - [`lower`] turns a [`FusionPlan`](crate::FusionPlan) into a [`Program`] (`lower.rs`, with
//!   the per-stage body builder in `body.rs`, concat/pad/gather selects in `select.rs` and
//!   symbolic index forms in `index.rs`);
//! - `impl Display for Program` prints a stable text form for snapshots (`print.rs`);
//! - [`verify_program`] checks SSA, types, buffer use and affine bounds (`verify.rs`);
//! - [`eval_program`] runs a program on host tensors with the reference interpreter's
//!   semantics: the oracle the LLVM and CUDA backends are tested against (`eval.rs`).
//!
//! # Conventions of lowered programs (what backends may rely on)
//!
//! - A reduction stage's `value` already has the accumulator dtype (the lowering emits the
//!   `Cast`); `acc` is f32 for f16/bf16/f32, f64 for f64, i64 for bool and integers (see
//!   [`acc_dtype`]; [`LowerOptions::f64_accumulators`] makes float accumulators f64). The
//!   result is cast (and for `mean` divided by the count) in the stages that read it.
//! - `Const` values are exactly representable in their dtype.
//! - Every load is in bounds on every iteration, including the untaken side of a `Select`
//!   (concat and pad clamp their local indices), **except** a gather whose index is outside
//!   `0..size`: its computed address is -1, which [`eval_program`] reports as an error and a
//!   backend must check for (or clamp) rather than read.
//! - `ToIndex` converts to the index width by wrapping; the lowering only uses converted
//!   values that passed a range check.
//! - Index arithmetic never divides by zero, and `IndexDiv`/`IndexRem` operands are
//!   non-negative except on the poisoned path of an out-of-range gather index (whose load
//!   address is -1 whatever they give).
//!
//! Not handled: reductions with outputs at both row and element level in one kernel (the
//! planner never forms them), GEMM prologues/epilogues (separate kernels). A row kernel whose
//! epilogue reads the reduction of *another* row (a permute between row values) is lowered
//! as two kernels (the reductions, then the rest). Loop nests follow the plan's index space
//! as is: a reshape that splits a loop dim of a non-contiguous view is read through div/mod
//! even where a finer loop nest would make it affine.

mod body;
mod eval;
mod eval_reduce;
mod index;
pub mod ir;
mod lower;
mod print;
mod select;
mod verify;

pub use eval::eval_program;
pub use ir::*;
pub use lower::{acc_dtype, lower, lower_with, LowerOptions};
pub use verify::verify_program;
