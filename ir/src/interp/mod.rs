//! The reference interpreter: evaluates a [`Graph`] op by op on [`HostTensor`]s.
//!
//! It is slow and meant to be obviously correct; it *defines* the value semantics of every op,
//! and every backend and pass is tested against it. Each node is evaluated unfused into a fresh
//! dense row-major tensor; views (reshape, permute, expand, slice) and pad/concat materialise
//! copies.
//!
//! # Semantics (PyTorch's, except where noted)
//!
//! - **Precision.** f16 and bf16 are computed in f32 and rounded to nearest-even after every op;
//!   f32 in f32 (erf: `libm::erff`); f64 in f64. Integers use wrapping arithmetic in their own
//!   width (i32 stays i32).
//! - **Division.** `floor_div` is `floor(a / b)` (floats: PyTorch's `div_floor_floating`, which
//!   computes `(a - fmod(a, b)) / b` and corrects it; division by zero gives the IEEE quotient);
//!   `remainder` has the sign of the divisor (floats: `fmod`, then `+ b` when the signs differ).
//!   Integer `floor_div`/`remainder` by zero is [`EvalError::DivisionByZero`];
//!   `MIN floor_div -1` wraps to `MIN` and `MIN remainder -1` is 0 (PyTorch: undefined
//!   behaviour, usually a crash).
//! - **pow.** Floats: `powf`. Integers: square-and-multiply with wrapping multiplication;
//!   a negative exponent gives 1 for base 1, ±1 by parity for base -1 and 0 otherwise.
//! - **NaN.** `maximum`/`minimum` and the `max`/`min` reductions propagate NaN; `argmax`/`argmin`
//!   treat NaN as the extreme value (the first NaN wins); comparisons follow IEEE; logical ops
//!   and casts to bool treat NaN (and every nonzero) as true; `relu(NaN)` is NaN. Which NaN
//!   (sign, payload) comes out is unspecified, and so is the sign of `maximum(-0.0, 0.0)`
//!   (PyTorch's scalar and vectorised kernels differ there too).
//! - **Unary.** `sigmoid(x) = 1 / (1 + exp(-x))`, `rsqrt(x) = 1 / sqrt(x)`, `reciprocal(x) = 1 / x`;
//!   `floor`/`ceil` of integers are the identity; `abs`/`neg` of integers wrap.
//! - **Casts.** Float to integer truncates toward zero and *saturates*, NaN becomes 0 (Rust `as`).
//!   **Deviation:** PyTorch leaves out-of-range conversions undefined. Integers narrow by
//!   wrapping. f64 (and i64) to f16/bf16 goes through f32, as PyTorch does.
//! - **Reductions.** `sum`/`prod` of bool and integer inputs accumulate in i64 (wrapping);
//!   float `sum`/`prod`/`mean` accumulate in f64 and round once to the output dtype.
//!   **Deviation:** PyTorch accumulates f32 in f32 (and f16/bf16 in f32), so its results differ
//!   by rounding (the interpreter is the more accurate one, within test tolerances), and an f32
//!   partial sum or product that overflows in PyTorch may stay finite here. `mean` of an empty
//!   set is NaN. A reduction over an empty axis list is the identity on values (with the dtype
//!   the typing rule gives: `sum` of i32 over `[]` is the values as i64); note that PyTorch's
//!   `sum(dim=[])` reduces *every* axis instead, so a frontend must spell those axes out.
//! - **matmul.** `torch.matmul` semantics (1-D operands, broadcast batch dims); floats
//!   accumulate in f64 and round once at the end (f16/bf16 included), integers in wrapping i64;
//!   `k = 0` gives zeros. **Deviation:** PyTorch's GEMMs accumulate f32 in f32 (in a blocked
//!   order), so results differ by rounding, as for reductions.
//! - **Indexing.** `gather`/`index_select` indices must lie in `0..size`; anything else,
//!   negative indices included, is [`EvalError::IndexOutOfRange`].
//! - **pad** converts its scalar value to the tensor's dtype like a cast.
//!
//! Unknown names in the bindings are ignored. A node whose element count overflows is refused
//! with [`EvalError::TooLarge`] before anything is allocated for it.

mod cast;
mod elementwise;
mod index;
mod layout;
mod matmul;
mod reduce;
mod view;

use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Graph, NodeId, TensorType};
use crate::op::Op;
use crate::signature::Signature;
use crate::tensor::{HostTensor, TensorData};
use std::collections::HashMap;

/// An error of [`eval`]: a bad binding, a data-dependent failure, or a graph that fails
/// [`crate::verify()`].
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// An input or parameter of the graph has no entry in the bindings.
    #[error("no binding for {kind} {name:?}; the graph expects:\n{expected}")]
    MissingBinding {
        /// The first input or parameter without a binding.
        name: String,
        /// `"input"` or `"param"`.
        kind: &'static str,
        /// Every input and parameter of the graph.
        expected: Signature,
    },
    /// A binding's dtype or shape differs from the declared type of its input or parameter.
    #[error("binding {name:?}: expected {expected}, got {got}")]
    BindingType {
        name: String,
        /// The declared type.
        expected: Box<TensorType>,
        /// The bound tensor's dtype and shape.
        got: Box<TensorType>,
    },
    /// A `gather`/`index_select` index outside `0..size`.
    #[error("{op} at node {node}: index {index} is out of range for axis {axis} of size {size}")]
    IndexOutOfRange {
        node: NodeId,
        op: &'static str,
        /// The offending index value.
        index: i64,
        /// The indexed axis of the input, and its size.
        axis: usize,
        size: usize,
    },
    /// Integer `floor_div` or `remainder` by zero.
    #[error("{op} at node {node}: integer division by zero")]
    DivisionByZero { node: NodeId, op: &'static str },
    /// A node whose value would not fit in memory (its element count overflows).
    #[error("{op} at node {node}: a value of type {ty} is too large to materialise")]
    TooLarge {
        node: NodeId,
        op: &'static str,
        ty: TensorType,
    },
    /// The graph does not verify (boxed: [`IrError`] is large).
    #[error("invalid graph: {0}")]
    Graph(Box<IrError>),
}

impl From<IrError> for EvalError {
    fn from(e: IrError) -> EvalError {
        EvalError::Graph(Box::new(e))
    }
}

/// Evaluates `graph` and returns its outputs in graph output order.
///
/// Inputs and parameters are both looked up by name in `bindings`; the graph is verified first.
pub fn eval(
    graph: &Graph,
    bindings: &HashMap<String, HostTensor>,
) -> Result<Vec<(String, HostTensor)>, EvalError> {
    let values = eval_nodes(graph, bindings)?;
    Ok(graph
        .outputs()
        .iter()
        .map(|(name, id)| (name.clone(), values[id.index()].clone()))
        .collect())
}

/// Evaluates `graph` and returns the value of every node, indexed by [`NodeId::index`].
pub fn eval_nodes(
    graph: &Graph,
    bindings: &HashMap<String, HostTensor>,
) -> Result<Vec<HostTensor>, EvalError> {
    crate::verify(graph)?;
    check_bindings(graph, bindings)?;
    let mut values: Vec<HostTensor> = Vec::with_capacity(graph.len());
    for id in graph.ids() {
        let node = graph.node(id);
        check_size(id, node.op.name(), &node.ty)?;
        let value = match &node.op {
            Op::Input { name, .. } | Op::Param { name, .. } => match bindings.get(name) {
                Some(t) => t.clone(),
                None => return Err(missing(graph, name)),
            },
            Op::Constant(t) => t.clone(),
            op => {
                let data = eval_op(id, op, &node.ty, &values)?;
                HostTensor::new(node.ty.shape.clone(), data).map_err(|e| e.at(id))?
            }
        };
        values.push(value);
    }
    Ok(values)
}

/// Computes the data of one non-leaf node from its operands' values.
fn eval_op(
    node: NodeId,
    op: &Op,
    ty: &TensorType,
    values: &[HostTensor],
) -> Result<TensorData, EvalError> {
    let v = |id: NodeId| &values[id.index()];
    let out = &ty.shape;
    Ok(match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => {
            return Err(IrError::invalid(op.name(), "is a leaf, not computed", &[]).into())
        }
        Op::Unary(u, a) => elementwise::unary(*u, v(*a).data())?,
        Op::Binary(b, x, y) => elementwise::binary(node, *b, v(*x), v(*y), out)?,
        Op::Where(c, a, b) => elementwise::select(v(*c), v(*a), v(*b), out)?,
        Op::Cast { input, to } => cast::cast(v(*input).data(), *to),
        Op::Reduce {
            op: r, input, axes, ..
        } => reduce::reduce(*r, v(*input), axes)?,
        Op::Reshape { input, .. } => v(*input).data().clone(),
        Op::Permute { input, perm } => view::permute(v(*input), perm),
        Op::Expand { input, .. } => view::expand(v(*input), out),
        Op::Slice { input, ranges } => view::slice(v(*input), ranges),
        Op::Concat { inputs, axis } => {
            let parts: Vec<&HostTensor> = inputs.iter().map(|&i| v(i)).collect();
            view::concat(&parts, *axis, out)?
        }
        Op::Pad { input, pads, value } => view::pad(v(*input), pads, *value, out)?,
        Op::MatMul(x, y) => matmul::matmul(v(*x), v(*y))?,
        Op::Gather { input, index, axis } => index::gather(node, v(*input), v(*index), *axis)?,
        Op::IndexSelect { input, index, axis } => {
            index::index_select(node, v(*input), v(*index), *axis, out)?
        }
    })
}

fn check_bindings(graph: &Graph, bindings: &HashMap<String, HostTensor>) -> Result<(), EvalError> {
    for (name, _, ty, _) in graph.bindings() {
        let Some(t) = bindings.get(name) else {
            return Err(missing(graph, name));
        };
        if t.dtype() != ty.dtype || t.shape() != &ty.shape {
            return Err(EvalError::BindingType {
                name: name.to_string(),
                expected: Box::new(ty.clone()),
                got: Box::new(TensorType::new(t.dtype(), t.shape().clone())),
            });
        }
    }
    Ok(())
}

fn missing(graph: &Graph, name: &str) -> EvalError {
    let expected = Signature::of(graph);
    let is_param = expected.0.iter().any(|b| b.name == name && b.is_param);
    EvalError::MissingBinding {
        name: name.to_string(),
        kind: if is_param { "param" } else { "input" },
        expected,
    }
}

/// Rejects values whose element count overflows, or whose data or index maps (up to 8 bytes an
/// element) could not be allocated, before anything is allocated for them.
fn check_size(node: NodeId, op: &'static str, ty: &TensorType) -> Result<(), EvalError> {
    let dims = ty.shape.dims();
    let numel = if dims.contains(&0) {
        Some(0)
    } else {
        dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    };
    match numel {
        Some(n) if n <= isize::MAX as usize / 8 => Ok(()),
        _ => Err(EvalError::TooLarge {
            node,
            op,
            ty: ty.clone(),
        }),
    }
}

/// The error for an operand dtype the typing rules should have rejected (unreachable for a
/// verified graph; kept so that a disagreement with [`crate::infer`] is an error, not a panic).
fn unsupported(op: &'static str, dtype: DType) -> EvalError {
    IrError::UnsupportedDType {
        op,
        dtype,
        expected: "a dtype the interpreter implements for this op",
    }
    .into()
}
