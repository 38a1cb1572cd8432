//! The e-graph language of stage 1: one e-node per IR primitive, attributes as typed payloads.
//!
//! Every [`Op`] has an [`ENode`] variant. Attributes (permutations, axes, shapes, dtypes,
//! slice ranges, pads, constant payloads) are stored as typed values in the e-node and take
//! part in hashing, equality and ordering; they are never strings. Inputs and parameters are
//! interned: [`ENode::Leaf`] holds the position of the binding in the original graph, whose
//! name and type live in the analysis ([`super::analysis::TypeAnalysis`]).

use egg::{Id, Language};
use smallvec::SmallVec;
use smelt_ir::op::Axes;
use smelt_ir::UnaryOp;
use smelt_ir::{BinaryOp, DType, HostTensor, NodeId, Op, ReduceOp, Scalar, Shape, SliceRange};
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Dimensions of a shape attribute (`Reshape`, `Expand`).
pub type Dims = SmallVec<[usize; 6]>;
/// A permutation attribute.
pub type Perm = SmallVec<[usize; 6]>;

/// A constant payload: the tensor and a precomputed hash of its dtype, shape and bytes.
///
/// Equality and ordering are bitwise (two NaNs with the same payload are equal, `-0.0` differs
/// from `0.0`), so hash-consing never merges constants that differ in any bit.
#[derive(Clone, Debug)]
pub struct ConstVal {
    hash: u64,
    bytes: Arc<[u8]>,
    tensor: Arc<HostTensor>,
}

impl ConstVal {
    pub fn new(tensor: HostTensor) -> ConstVal {
        let bytes: Arc<[u8]> = tensor.data().to_le_bytes().into();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        tensor.dtype().hash(&mut h);
        tensor.shape().hash(&mut h);
        bytes.hash(&mut h);
        ConstVal {
            hash: h.finish(),
            bytes,
            tensor: Arc::new(tensor),
        }
    }

    pub fn tensor(&self) -> &HostTensor {
        &self.tensor
    }

    pub fn shared(&self) -> Arc<HostTensor> {
        self.tensor.clone()
    }

    fn key(&self) -> (u64, DType, &[usize], &[u8]) {
        (
            self.hash,
            self.tensor.dtype(),
            self.tensor.shape().dims(),
            &self.bytes,
        )
    }
}

impl PartialEq for ConstVal {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for ConstVal {}
impl Hash for ConstVal {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}
impl PartialOrd for ConstVal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ConstVal {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// A pad value with bitwise equality (floats compared by their bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PadValue {
    Bool(bool),
    Int(i64),
    Float(u64),
}

impl PadValue {
    pub fn new(s: Scalar) -> PadValue {
        match s {
            Scalar::Bool(b) => PadValue::Bool(b),
            Scalar::Int(i) => PadValue::Int(i),
            Scalar::Float(x) => PadValue::Float(x.to_bits()),
        }
    }

    pub fn scalar(self) -> Scalar {
        match self {
            PadValue::Bool(b) => Scalar::Bool(b),
            PadValue::Int(i) => Scalar::Int(i),
            PadValue::Float(x) => Scalar::Float(f64::from_bits(x)),
        }
    }
}

/// Whether a leaf is a graph input or a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeafKind {
    Input,
    Param,
}

/// An e-node: an IR primitive with typed attributes and e-class children.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ENode {
    /// The `index`-th input or parameter of the original graph (in arena order).
    Leaf(LeafKind, u32),
    Const(ConstVal),
    Unary(UnaryOp, [Id; 1]),
    Binary(BinaryOp, [Id; 2]),
    Where([Id; 3]),
    Cast(DType, [Id; 1]),
    Reduce {
        op: ReduceOp,
        axes: Axes,
        keepdim: bool,
        input: [Id; 1],
    },
    Reshape(Dims, [Id; 1]),
    Permute(Perm, [Id; 1]),
    Expand(Dims, [Id; 1]),
    /// `(start, stop, step)` per axis.
    Slice(SmallVec<[(usize, usize, usize); 6]>, [Id; 1]),
    Concat(usize, SmallVec<[Id; 4]>),
    Pad {
        pads: SmallVec<[(usize, usize); 6]>,
        value: PadValue,
        input: [Id; 1],
    },
    MatMul([Id; 2]),
    Gather(usize, [Id; 2]),
    IndexSelect(usize, [Id; 2]),
}

/// The kind of an e-node without attributes or children: egg's discriminant, used to find
/// the e-classes a rule's root can match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Leaf,
    Const,
    Unary(UnaryOp),
    Binary(BinaryOp),
    Where,
    Cast,
    Reduce,
    Reshape,
    Permute,
    Expand,
    Slice,
    Concat,
    Pad,
    MatMul,
    Gather,
    IndexSelect,
}

impl ENode {
    pub fn kind(&self) -> Kind {
        match self {
            ENode::Leaf(..) => Kind::Leaf,
            ENode::Const(_) => Kind::Const,
            ENode::Unary(u, _) => Kind::Unary(*u),
            ENode::Binary(b, _) => Kind::Binary(*b),
            ENode::Where(_) => Kind::Where,
            ENode::Cast(..) => Kind::Cast,
            ENode::Reduce { .. } => Kind::Reduce,
            ENode::Reshape(..) => Kind::Reshape,
            ENode::Permute(..) => Kind::Permute,
            ENode::Expand(..) => Kind::Expand,
            ENode::Slice(..) => Kind::Slice,
            ENode::Concat(..) => Kind::Concat,
            ENode::Pad { .. } => Kind::Pad,
            ENode::MatMul(_) => Kind::MatMul,
            ENode::Gather(..) => Kind::Gather,
            ENode::IndexSelect(..) => Kind::IndexSelect,
        }
    }

    /// The e-node of an IR op whose operands map to e-classes through `class`; `None` for
    /// inputs and parameters (see [`ENode::Leaf`]).
    pub fn from_op(op: &Op, class: impl Fn(NodeId) -> Id) -> Option<ENode> {
        let c1 = |a: &NodeId| [class(*a)];
        Some(match op {
            Op::Input { .. } | Op::Param { .. } => return None,
            Op::Constant(t) => ENode::Const(ConstVal::new(t.clone())),
            Op::Unary(u, a) => ENode::Unary(*u, c1(a)),
            Op::Binary(b, x, y) => ENode::Binary(*b, [class(*x), class(*y)]),
            Op::Where(c, a, b) => ENode::Where([class(*c), class(*a), class(*b)]),
            Op::Cast { input, to } => ENode::Cast(*to, c1(input)),
            Op::Reduce {
                op,
                input,
                axes,
                keepdim,
            } => ENode::Reduce {
                op: *op,
                axes: axes.clone(),
                keepdim: *keepdim,
                input: c1(input),
            },
            Op::Reshape { input, shape } => ENode::Reshape(shape.0.clone(), c1(input)),
            Op::Permute { input, perm } => ENode::Permute(perm.clone(), c1(input)),
            Op::Expand { input, shape } => ENode::Expand(shape.0.clone(), c1(input)),
            Op::Slice { input, ranges } => ENode::Slice(
                ranges.iter().map(|r| (r.start, r.stop, r.step)).collect(),
                c1(input),
            ),
            Op::Concat { inputs, axis } => {
                ENode::Concat(*axis, inputs.iter().map(|&i| class(i)).collect())
            }
            Op::Pad { input, pads, value } => ENode::Pad {
                pads: pads.clone(),
                value: PadValue::new(*value),
                input: c1(input),
            },
            Op::MatMul(x, y) => ENode::MatMul([class(*x), class(*y)]),
            Op::Gather { input, index, axis } => {
                ENode::Gather(*axis, [class(*input), class(*index)])
            }
            Op::IndexSelect { input, index, axis } => {
                ENode::IndexSelect(*axis, [class(*input), class(*index)])
            }
        })
    }

    /// The IR op of this e-node with children mapped to node ids through `node`; `None` for
    /// leaves (their op lives in the original graph).
    pub fn to_op(&self, node: impl Fn(Id) -> NodeId) -> Option<Op> {
        Some(match self {
            ENode::Leaf(..) => return None,
            ENode::Const(c) => Op::Constant(c.tensor().clone()),
            ENode::Unary(u, [a]) => Op::Unary(*u, node(*a)),
            ENode::Binary(b, [x, y]) => Op::Binary(*b, node(*x), node(*y)),
            ENode::Where([c, a, b]) => Op::Where(node(*c), node(*a), node(*b)),
            ENode::Cast(to, [a]) => Op::Cast {
                input: node(*a),
                to: *to,
            },
            ENode::Reduce {
                op,
                axes,
                keepdim,
                input: [a],
            } => Op::Reduce {
                op: *op,
                input: node(*a),
                axes: axes.clone(),
                keepdim: *keepdim,
            },
            ENode::Reshape(d, [a]) => Op::Reshape {
                input: node(*a),
                shape: Shape(d.clone()),
            },
            ENode::Permute(p, [a]) => Op::Permute {
                input: node(*a),
                perm: p.clone(),
            },
            ENode::Expand(d, [a]) => Op::Expand {
                input: node(*a),
                shape: Shape(d.clone()),
            },
            ENode::Slice(r, [a]) => Op::Slice {
                input: node(*a),
                ranges: r
                    .iter()
                    .map(|&(start, stop, step)| SliceRange { start, stop, step })
                    .collect(),
            },
            ENode::Concat(axis, xs) => Op::Concat {
                inputs: xs.iter().map(|&x| node(x)).collect(),
                axis: *axis,
            },
            ENode::Pad {
                pads,
                value,
                input: [a],
            } => Op::Pad {
                input: node(*a),
                pads: pads.clone(),
                value: value.scalar(),
            },
            ENode::MatMul([x, y]) => Op::MatMul(node(*x), node(*y)),
            ENode::Gather(axis, [a, i]) => Op::Gather {
                input: node(*a),
                index: node(*i),
                axis: *axis,
            },
            ENode::IndexSelect(axis, [a, i]) => Op::IndexSelect {
                input: node(*a),
                index: node(*i),
                axis: *axis,
            },
        })
    }

    /// A 0-d constant of `dtype` holding `value` (converted like a cast).
    pub fn scalar(value: f64, dtype: DType) -> ENode {
        ENode::Const(ConstVal::new(smelt_ir::graph::scalar_tensor(
            Scalar::Float(value),
            dtype,
        )))
    }
}

impl Language for ENode {
    type Discriminant = Kind;

    fn discriminant(&self) -> Kind {
        self.kind()
    }

    /// Same operator, same attributes, same arity (children ignored).
    fn matches(&self, other: &Self) -> bool {
        let mut a = self.clone();
        let mut b = other.clone();
        if a.children().len() != b.children().len() {
            return false;
        }
        a.children_mut().iter_mut().for_each(|c| *c = Id::from(0));
        b.children_mut().iter_mut().for_each(|c| *c = Id::from(0));
        a == b
    }

    fn children(&self) -> &[Id] {
        match self {
            ENode::Leaf(..) | ENode::Const(_) => &[],
            ENode::Unary(_, c)
            | ENode::Cast(_, c)
            | ENode::Reduce { input: c, .. }
            | ENode::Reshape(_, c)
            | ENode::Permute(_, c)
            | ENode::Expand(_, c)
            | ENode::Slice(_, c)
            | ENode::Pad { input: c, .. } => c,
            ENode::Binary(_, c)
            | ENode::MatMul(c)
            | ENode::Gather(_, c)
            | ENode::IndexSelect(_, c) => c,
            ENode::Where(c) => c,
            ENode::Concat(_, c) => c,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            ENode::Leaf(..) | ENode::Const(_) => &mut [],
            ENode::Unary(_, c)
            | ENode::Cast(_, c)
            | ENode::Reduce { input: c, .. }
            | ENode::Reshape(_, c)
            | ENode::Permute(_, c)
            | ENode::Expand(_, c)
            | ENode::Slice(_, c)
            | ENode::Pad { input: c, .. } => c,
            ENode::Binary(_, c)
            | ENode::MatMul(c)
            | ENode::Gather(_, c)
            | ENode::IndexSelect(_, c) => c,
            ENode::Where(c) => c,
            ENode::Concat(_, c) => c,
        }
    }
}
