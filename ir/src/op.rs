//! The primitive operations of smelt's IR.
//!
//! Every op's typing rule lives in [`crate::infer`]; its value semantics in [`crate::interp`].
//! The frontend decomposes everything else (softmax, layer_norm, attention …) into these.

use crate::dtype::{DType, Scalar};
use crate::graph::NodeId;
use crate::shape::Shape;
use crate::tensor::HostTensor;
use smallvec::SmallVec;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident => $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),* }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The op's name in the `.smelt` text format and in error messages.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),* }
            }

            pub fn from_name(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)* _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum! {
    /// Elementwise ops of one operand.
    UnaryOp {
        Neg => "neg",
        Abs => "abs",
        Exp => "exp",
        Log => "log",
        Sqrt => "sqrt",
        Rsqrt => "rsqrt",
        Reciprocal => "reciprocal",
        Sin => "sin",
        Cos => "cos",
        Tanh => "tanh",
        Erf => "erf",
        Sigmoid => "sigmoid",
        Relu => "relu",
        Floor => "floor",
        Ceil => "ceil",
        LogicalNot => "logical_not",
    }
}

named_enum! {
    /// Elementwise ops of two operands, which broadcast against each other.
    BinaryOp {
        Add => "add",
        Sub => "sub",
        Mul => "mul",
        Div => "div",
        FloorDiv => "floor_div",
        Remainder => "remainder",
        Pow => "pow",
        Maximum => "maximum",
        Minimum => "minimum",
        Eq => "eq",
        Ne => "ne",
        Lt => "lt",
        Le => "le",
        Gt => "gt",
        Ge => "ge",
        LogicalAnd => "logical_and",
        LogicalOr => "logical_or",
    }
}

named_enum! {
    /// Reductions over a set of axes.
    ReduceOp {
        Sum => "sum",
        Mean => "mean",
        Max => "max",
        Min => "min",
        Prod => "prod",
        ArgMax => "argmax",
        ArgMin => "argmin",
    }
}

impl UnaryOp {
    /// Ops defined only on floating-point dtypes (the frontend casts integers to f32 first,
    /// as PyTorch does).
    pub fn float_only(self) -> bool {
        use UnaryOp::*;
        matches!(
            self,
            Exp | Log | Sqrt | Rsqrt | Reciprocal | Sin | Cos | Tanh | Erf | Sigmoid
        )
    }
}

impl BinaryOp {
    /// Comparisons and logical ops, whose result is bool.
    pub fn returns_bool(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr)
    }
}

/// One slice range of one axis: elements `start, start + step, …` below `stop`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceRange {
    pub start: usize,
    pub stop: usize,
    pub step: usize,
}

impl SliceRange {
    /// The whole of an axis of size `dim`.
    pub fn full(dim: usize) -> SliceRange {
        SliceRange {
            start: 0,
            stop: dim,
            step: 1,
        }
    }

    /// Number of elements selected (the range must be valid).
    pub fn len(&self) -> usize {
        if self.stop <= self.start || self.step == 0 {
            0
        } else {
            (self.stop - self.start).div_ceil(self.step)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A list of axes of a reduction (small, sorted not required, unique).
pub type Axes = SmallVec<[usize; 4]>;

/// A node's operation. Operands are [`NodeId`]s of earlier nodes.
///
/// The result type of every op follows from its operands' types and its attributes (see
/// [`crate::infer::infer`]); ops whose result cannot be inferred carry it as an attribute
/// (`Cast::to`, `Reshape::shape`, `Expand::shape`, the declared type of inputs and parameters).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A graph input, supplied on every run.
    Input {
        name: String,
        dtype: DType,
        shape: Shape,
    },
    /// A weight: bound once at compile time or supplied at run time.
    Param {
        name: String,
        dtype: DType,
        shape: Shape,
    },
    /// A constant tensor (a 0-d tensor for scalars).
    Constant(HostTensor),
    Unary(UnaryOp, NodeId),
    Binary(BinaryOp, NodeId, NodeId),
    /// `where(cond, a, b)`: `cond` is bool; all three broadcast.
    Where(NodeId, NodeId, NodeId),
    Cast {
        input: NodeId,
        to: DType,
    },
    Reduce {
        op: ReduceOp,
        input: NodeId,
        axes: Axes,
        keepdim: bool,
    },
    Reshape {
        input: NodeId,
        shape: Shape,
    },
    Permute {
        input: NodeId,
        perm: SmallVec<[usize; 6]>,
    },
    Expand {
        input: NodeId,
        shape: Shape,
    },
    /// One range per axis.
    Slice {
        input: NodeId,
        ranges: SmallVec<[SliceRange; 6]>,
    },
    Concat {
        inputs: SmallVec<[NodeId; 4]>,
        axis: usize,
    },
    /// Constant padding: `(before, after)` per axis.
    Pad {
        input: NodeId,
        pads: SmallVec<[(usize, usize); 6]>,
        value: Scalar,
    },
    /// `torch.matmul` semantics: 1-D operands, batching and broadcast batch dims.
    MatMul(NodeId, NodeId),
    /// `torch.gather(input, axis, index)`: `index` has the rank of `input`; out shape = index shape.
    Gather {
        input: NodeId,
        index: NodeId,
        axis: usize,
    },
    /// `torch.index_select(input, axis, index)`: `index` is 1-D.
    IndexSelect {
        input: NodeId,
        index: NodeId,
        axis: usize,
    },
}

impl Op {
    /// The op's name as written in the `.smelt` text format.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Param { .. } => "param",
            Op::Constant(_) => "const",
            Op::Unary(u, _) => u.name(),
            Op::Binary(b, _, _) => b.name(),
            Op::Where(..) => "where",
            Op::Cast { .. } => "cast",
            Op::Reduce { op, .. } => op.name(),
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Expand { .. } => "expand",
            Op::Slice { .. } => "slice",
            Op::Concat { .. } => "concat",
            Op::Pad { .. } => "pad",
            Op::MatMul(..) => "matmul",
            Op::Gather { .. } => "gather",
            Op::IndexSelect { .. } => "index_select",
        }
    }

    /// The operands, in order.
    pub fn operands(&self) -> SmallVec<[NodeId; 4]> {
        match self {
            Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => SmallVec::new(),
            Op::Unary(_, a)
            | Op::Cast { input: a, .. }
            | Op::Reduce { input: a, .. }
            | Op::Reshape { input: a, .. }
            | Op::Permute { input: a, .. }
            | Op::Expand { input: a, .. }
            | Op::Slice { input: a, .. }
            | Op::Pad { input: a, .. } => smallvec::smallvec![*a],
            Op::Binary(_, a, b)
            | Op::MatMul(a, b)
            | Op::Gather {
                input: a, index: b, ..
            }
            | Op::IndexSelect {
                input: a, index: b, ..
            } => smallvec::smallvec![*a, *b],
            Op::Where(c, a, b) => smallvec::smallvec![*c, *a, *b],
            Op::Concat { inputs, .. } => inputs.clone(),
        }
    }

    /// Calls `f` on each operand, in order, to read or replace it (what [`Op::operands`]
    /// lists).
    pub fn operands_mut(&mut self, mut f: impl FnMut(&mut NodeId)) {
        match self {
            Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => {}
            Op::Unary(_, a)
            | Op::Cast { input: a, .. }
            | Op::Reduce { input: a, .. }
            | Op::Reshape { input: a, .. }
            | Op::Permute { input: a, .. }
            | Op::Expand { input: a, .. }
            | Op::Slice { input: a, .. }
            | Op::Pad { input: a, .. } => f(a),
            Op::Binary(_, a, b)
            | Op::MatMul(a, b)
            | Op::Gather {
                input: a, index: b, ..
            }
            | Op::IndexSelect {
                input: a, index: b, ..
            } => {
                f(a);
                f(b);
            }
            Op::Where(c, a, b) => {
                f(c);
                f(a);
                f(b);
            }
            Op::Concat { inputs, .. } => inputs.iter_mut().for_each(f),
        }
    }

    /// Whether this op only changes how elements are addressed (no arithmetic).
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. } | Op::Permute { .. } | Op::Expand { .. } | Op::Slice { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `operands_mut` visits what `operands` lists, in the same order.
    #[test]
    fn operands_mut_visits_the_operands_in_order() {
        let n = NodeId;
        let mut ops = vec![
            Op::Unary(UnaryOp::Neg, n(3)),
            Op::Binary(BinaryOp::Add, n(1), n(2)),
            Op::Where(n(4), n(5), n(6)),
            Op::Gather {
                input: n(7),
                index: n(8),
                axis: 0,
            },
            Op::Concat {
                inputs: smallvec::smallvec![n(9), n(1), n(9)],
                axis: 1,
            },
        ];
        for op in &mut ops {
            let before = op.operands();
            let mut seen = Vec::new();
            op.operands_mut(|o| {
                seen.push(*o);
                *o = NodeId(o.0 + 100);
            });
            assert_eq!(seen.as_slice(), before.as_slice());
            let after: Vec<u32> = op.operands().iter().map(|o| o.0).collect();
            let want: Vec<u32> = before.iter().map(|o| o.0 + 100).collect();
            assert_eq!(after, want);
        }
    }
}
