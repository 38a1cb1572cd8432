//! smelt's tracing frontend: write a tensor program in Rust, get a [`smelt_ir::Graph`].
//!
//! A [`Tracer`] holds the graph under construction. It hands out [`Tensor`] handles for
//! inputs ([`Tracer::input`]), parameters ([`Tracer::param`]) and constants
//! ([`Tracer::constant`], [`Tracer::scalar`]); every op on a tensor adds a node to the same
//! graph, with its dtype and shape inferred on the spot. [`Tracer::output`] names results and
//! [`Tracer::finish`] returns the verified graph.
//!
//! ```
//! use smelt_frontend::{nn, DType, FrontendError, Tracer};
//!
//! fn main() -> Result<(), FrontendError> {
//!     let tr = Tracer::new();
//!     let x = tr.input("x", DType::F32, [2, 8])?;
//!     let w = tr.param("w", DType::F32, [4, 8])?;
//!     let b = tr.param("b", DType::F32, [4])?;
//!     let h = nn::linear(&x, &w, Some(&b))?;
//!     let y = (&h * 2.0 + 1.0).softmax(-1)?;
//!     assert_eq!(y.dims()?, &[2, 4]);
//!     tr.output("y", &y)?;
//!     let graph = tr.finish()?;
//!     assert_eq!(graph.outputs().len(), 1);
//!     Ok(())
//! }
//! ```
//!
//! # The API
//!
//! - Every IR primitive is a method returning `Result<Tensor, FrontendError>`: unary ops
//!   ([`Tensor::exp`], [`Tensor::relu`] …), binary ops taking a tensor or a scalar
//!   ([`Tensor::add`], [`Tensor::div`], [`Tensor::lt`] …, or [`binary()`] for a scalar on the
//!   left), [`where_()`], [`Tensor::cast`], reductions over signed axes with `keepdim`
//!   ([`Tensor::sum`], [`Tensor::argmax`] …, and whole-tensor `*_all` forms), shape ops
//!   ([`Tensor::reshape`] with one `-1`, [`Tensor::permute`], [`Tensor::transpose`],
//!   [`Tensor::expand`], [`Tensor::unsqueeze`], [`Tensor::squeeze`], [`Tensor::slice`] with
//!   Python slice bounds, [`Tensor::narrow`], [`Tensor::pad`], [`concat()`]) and
//!   [`Tensor::matmul`], [`Tensor::gather`], [`Tensor::index_select`].
//! - Axes are signed, Python-style: `-1` is the last axis.
//! - `+ - * /` work between tensors (owned or borrowed) and between a tensor and an `f32`,
//!   `f64`, `i32` or `i64` on either side; unary `-` too; and `+=` etc.
//! - Composite ops live in [`nn`] and as methods: [`Tensor::softmax`],
//!   [`Tensor::log_softmax`], [`nn::layer_norm`], [`nn::rms_norm`], [`Tensor::gelu`],
//!   [`Tensor::silu`], [`nn::linear`], [`Tensor::mean`], [`Tensor::var`],
//!   [`nn::scaled_dot_product_attention`], [`nn::embedding`]. They are decomposed into
//!   primitives; see [`nn`] for the formulas and for how half precision is computed.
//!
//! The `std::ops` traits are not in the prelude, so `x.add(&y)` calls the named method
//! (returning `Result`). With `use std::ops::Add` in scope it would resolve to the operator
//! instead; avoid importing the operator traits where the named methods are used.
//!
//! # Type promotion
//!
//! The IR is strict (operands of an elementwise op share a dtype, float-only ops reject
//! integers); the frontend applies PyTorch's promotion by inserting casts:
//!
//! - tensor with tensor: the common dtype ([`smelt_ir::DType::promote`]: `f16 + f32 → f32`,
//!   `i32 + i64 → i64`, `f16 + bf16 → f32`), except that a 0-d tensor only changes the result
//!   when it is of a higher category, as in `torch.result_type` (see [`promote`]);
//! - tensor with scalar: the scalar only promotes across categories
//!   ([`smelt_ir::DType::promote_with_scalar`]: `i32 + 2.5 → f32`, `f16 * 2.0 → f16`,
//!   `i32 + 1 → i32`), and becomes a 0-d constant of the result dtype;
//! - true division, `mean` and float-only unary ops (`exp`, `sqrt`, `sigmoid` …) compute
//!   integer and bool inputs in f32 (`i32 / i32 → f32`);
//! - comparisons promote their operands and return bool; `logical_and`/`logical_or` test each
//!   operand against zero and return bool;
//! - `where_` promotes its two value operands; `concat` promotes all inputs;
//! - `matmul`, `gather` and `index_select` do not promote (as in PyTorch).
//!
//! # Errors
//!
//! Every failure is a typed [`FrontendError`] raised at the call that caused it, naming the
//! op and the operand types (dtypes and shapes); errors from the IR's typing rules are
//! wrapped as [`FrontendError::Ir`].
//!
//! - Named methods and functions return the error directly.
//! - Operators cannot return `Result`. A failing operator records the error, wrapped in
//!   [`FrontendError::At`] with the source location of the operator expression, in its
//!   tracer, and returns a *poisoned* tensor. Operators on a poisoned tensor return poisoned
//!   tensors without recording anything; named methods on one return
//!   [`FrontendError::Poisoned`] (holding the original error); [`Tracer::finish`] returns
//!   the first recorded error instead of the graph.
//! - Tensors from two tracers never mix: [`FrontendError::MixedTracers`].
//!
//! ```
//! use smelt_frontend::{DType, FrontendError, Tracer};
//!
//! let tr = Tracer::new();
//! let a = tr.input("a", DType::F32, [2, 3]).unwrap();
//! let b = tr.input("b", DType::F32, [4]).unwrap();
//! let c = &a + &b; // cannot broadcast: recorded, `c` is poisoned
//! assert!(c.is_poisoned());
//! let d = c * 2.0; // poisoned too, nothing new recorded
//! assert!(d.is_poisoned());
//! let err = tr.finish().unwrap_err();
//! assert!(err.location().is_some());
//! assert!(matches!(err.root(), FrontendError::Ir(_)));
//! assert!(err.to_string().contains("cannot broadcast f32[2, 3] with f32[4]"));
//! ```

#![forbid(unsafe_code)]

mod axes;
mod elementwise;
pub mod error;
mod linalg;
pub mod nn;
mod operators;
pub mod promote;
mod reduce;
mod tensor;
mod tracer;
mod views;

pub use elementwise::{binary, where_};
pub use error::{FrontendError, Result};
pub use nn::GeluApproximation;
pub use smelt_ir::{
    BinaryOp, DType, Graph, HostTensor, ReduceOp, Scalar, Shape, TensorType, UnaryOp,
};
pub use tensor::{IntoScalar, Operand, Tensor};
pub use tracer::Tracer;
pub use views::concat;
