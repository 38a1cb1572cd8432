//! The graph: an arena of typed nodes, operands before users, plus named outputs.

use crate::dtype::{DType, Scalar};
use crate::error::{IrError, Result};
use crate::infer::infer;
use crate::op::{Axes, BinaryOp, Op, ReduceOp, SliceRange, UnaryOp};
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};
use smallvec::SmallVec;
use std::fmt;

/// Index of a node in its graph's arena; printed `%3`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A value's type: element dtype and static shape. Printed `f32[2, 3]`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Bytes of a dense buffer of this type.
    pub fn size_bytes(&self) -> usize {
        self.shape.numel().saturating_mul(self.dtype.size_bytes())
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One node: its op and its result type.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub ty: TensorType,
}

/// A tensor program: nodes in an arena (every operand precedes its users) and named outputs.
///
/// Nodes are only added through [`Graph::push`] (and the typed helpers built on it), which
/// infers the result type and rejects ill-typed ops, so a graph built this way always
/// verifies. [`Graph::from_parts`] skips the checks and is meant for passes and tests; run
/// [`crate::verify()`] on its result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    nodes: Vec<Node>,
    outputs: Vec<(String, NodeId)>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Assembles a graph without checking it; see [`crate::verify()`].
    pub fn from_parts(nodes: Vec<Node>, outputs: Vec<(String, NodeId)>) -> Graph {
        Graph { nodes, outputs }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node ids in arena (topological) order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// The node `id`, or `None` if it is not in the graph.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// The node `id`. Panics if `id` is not a node of this graph (ids come from this graph).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.node(id).ty
    }

    pub fn outputs(&self) -> &[(String, NodeId)] {
        &self.outputs
    }

    /// Runtime-bound tensors: `(name, node, type, is_param)` for every input and parameter.
    pub fn bindings(&self) -> impl Iterator<Item = (&str, NodeId, &TensorType, bool)> + '_ {
        self.ids().filter_map(move |id| match &self.node(id).op {
            Op::Input { name, .. } => Some((name.as_str(), id, self.ty(id), false)),
            Op::Param { name, .. } => Some((name.as_str(), id, self.ty(id), true)),
            _ => None,
        })
    }

    /// Number of users of each node (outputs count as users).
    pub fn use_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.nodes.len()];
        for n in &self.nodes {
            for o in n.op.operands() {
                if let Some(c) = counts.get_mut(o.index()) {
                    *c += 1;
                }
            }
        }
        for (_, o) in &self.outputs {
            if let Some(c) = counts.get_mut(o.index()) {
                *c += 1;
            }
        }
        counts
    }

    /// Adds a node after inferring and checking its type.
    pub fn push(&mut self, op: Op) -> Result<NodeId> {
        let id = NodeId(self.nodes.len() as u32);
        for o in op.operands() {
            if o.index() >= self.nodes.len() {
                return Err(IrError::ForwardRef {
                    node: id,
                    op: op.name(),
                    operand: o,
                });
            }
        }
        if let Op::Input { name, .. } | Op::Param { name, .. } = &op {
            if self.bindings().any(|(n, ..)| n == name) {
                return Err(IrError::DuplicateName {
                    kind: "input/param",
                    name: name.clone(),
                });
            }
        }
        let ty = infer(&op, |o| self.ty(o))?;
        self.nodes.push(Node { op, ty });
        Ok(id)
    }

    /// Names `id` as a graph output.
    pub fn set_output(&mut self, name: impl Into<String>, id: NodeId) -> Result<()> {
        let name = name.into();
        if id.index() >= self.nodes.len() {
            return Err(IrError::BadOutput { name, node: id });
        }
        if self.outputs.iter().any(|(n, _)| *n == name) {
            return Err(IrError::DuplicateName {
                kind: "output",
                name,
            });
        }
        self.outputs.push((name, id));
        Ok(())
    }

    // ---- typed builders -------------------------------------------------------------------

    pub fn input(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<NodeId> {
        self.push(Op::Input {
            name: name.into(),
            dtype,
            shape: shape.into(),
        })
    }

    pub fn param(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<NodeId> {
        self.push(Op::Param {
            name: name.into(),
            dtype,
            shape: shape.into(),
        })
    }

    pub fn constant(&mut self, t: HostTensor) -> Result<NodeId> {
        self.push(Op::Constant(t))
    }

    /// A 0-d constant of `dtype` holding `value` converted like a cast.
    pub fn scalar(&mut self, value: Scalar, dtype: DType) -> Result<NodeId> {
        self.constant(scalar_tensor(value, dtype))
    }

    pub fn unary(&mut self, op: UnaryOp, a: NodeId) -> Result<NodeId> {
        self.push(Op::Unary(op, a))
    }

    pub fn binary(&mut self, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::Binary(op, a, b))
    }

    pub fn where_(&mut self, cond: NodeId, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::Where(cond, a, b))
    }

    pub fn cast(&mut self, input: NodeId, to: DType) -> Result<NodeId> {
        self.push(Op::Cast { input, to })
    }

    pub fn reduce(
        &mut self,
        op: ReduceOp,
        input: NodeId,
        axes: &[usize],
        keepdim: bool,
    ) -> Result<NodeId> {
        self.push(Op::Reduce {
            op,
            input,
            axes: Axes::from_slice(axes),
            keepdim,
        })
    }

    pub fn reshape(&mut self, input: NodeId, shape: impl Into<Shape>) -> Result<NodeId> {
        self.push(Op::Reshape {
            input,
            shape: shape.into(),
        })
    }

    pub fn permute(&mut self, input: NodeId, perm: &[usize]) -> Result<NodeId> {
        self.push(Op::Permute {
            input,
            perm: SmallVec::from_slice(perm),
        })
    }

    pub fn expand(&mut self, input: NodeId, shape: impl Into<Shape>) -> Result<NodeId> {
        self.push(Op::Expand {
            input,
            shape: shape.into(),
        })
    }

    pub fn slice(&mut self, input: NodeId, ranges: &[SliceRange]) -> Result<NodeId> {
        self.push(Op::Slice {
            input,
            ranges: SmallVec::from_slice(ranges),
        })
    }

    pub fn concat(&mut self, inputs: &[NodeId], axis: usize) -> Result<NodeId> {
        self.push(Op::Concat {
            inputs: SmallVec::from_slice(inputs),
            axis,
        })
    }

    pub fn pad(&mut self, input: NodeId, pads: &[(usize, usize)], value: Scalar) -> Result<NodeId> {
        self.push(Op::Pad {
            input,
            pads: SmallVec::from_slice(pads),
            value,
        })
    }

    pub fn matmul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.push(Op::MatMul(a, b))
    }

    pub fn gather(&mut self, input: NodeId, index: NodeId, axis: usize) -> Result<NodeId> {
        self.push(Op::Gather { input, index, axis })
    }

    pub fn index_select(&mut self, input: NodeId, index: NodeId, axis: usize) -> Result<NodeId> {
        self.push(Op::IndexSelect { input, index, axis })
    }
}

/// A 0-d tensor of `dtype` holding `value`, converted with cast semantics.
pub fn scalar_tensor(value: Scalar, dtype: DType) -> HostTensor {
    use half::{bf16, f16};
    let data = match dtype {
        DType::Bool => TensorData::Bool(vec![value.as_bool()]),
        DType::I32 => TensorData::I32(vec![value.as_i64() as i32]),
        DType::I64 => TensorData::I64(vec![value.as_i64()]),
        // PyTorch converts a double to half through float.
        DType::F16 => TensorData::F16(vec![f16::from_f32(value.as_f64() as f32)]),
        DType::BF16 => TensorData::BF16(vec![bf16::from_f32(value.as_f64() as f32)]),
        DType::F32 => TensorData::F32(vec![value.as_f64() as f32]),
        DType::F64 => TensorData::F64(vec![value.as_f64()]),
    };
    HostTensor::scalar(data).expect("one element for a 0-d shape")
}
