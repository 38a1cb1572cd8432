//! smelt's graph IR.
//!
//! A [`Graph`] is an arena of [`Node`]s addressed by [`NodeId`]; every operand precedes its
//! users and every node carries its [`TensorType`] (dtype and static shape). The op set
//! ([`Op`]) is small and primitive; typing rules live in [`infer`], invariants are checked by
//! [`verify()`], value semantics are defined by the reference interpreter ([`interp`]).
//!
//! Semantics follow PyTorch wherever a choice exists: broadcasting, type promotion (applied by
//! the frontend, which inserts explicit casts), integer division and remainder, NaN propagation
//! in `maximum`/`minimum` and in `max`/`min` reductions.

#[cfg(feature = "arbitrary")]
pub mod arbitrary;
pub mod dtype;
pub mod error;
pub mod graph;
pub mod infer;
pub mod interp;
pub mod op;
pub mod shape;
pub mod signature;
pub mod tensor;
pub mod text;
pub mod verify;

pub use dtype::{Category, DType, Scalar};
pub use error::{IrError, Result};
pub use graph::{Graph, Node, NodeId, TensorType};
pub use op::{BinaryOp, Op, ReduceOp, SliceRange, UnaryOp};
pub use shape::Shape;
pub use signature::{BindingSpec, Signature};
pub use tensor::{HostTensor, TensorData};
pub use verify::verify;
