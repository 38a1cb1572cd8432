//! Errors of the IR crate: every one names the op and the operand types involved.

use crate::dtype::DType;
use crate::graph::{NodeId, TensorType};
use std::fmt;

pub type Result<T, E = IrError> = std::result::Result<T, E>;

/// A list of tensor types, printed `f32[2, 3], i64[4]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Types(pub Vec<TensorType>);

impl fmt::Display for Types {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum IrError {
    #[error("{op}: cannot broadcast {lhs} with {rhs}")]
    Broadcast {
        op: &'static str,
        lhs: Box<TensorType>,
        rhs: Box<TensorType>,
    },
    #[error("{op}: operands must have the same dtype, got {operands} (insert a cast)")]
    DTypeMismatch { op: &'static str, operands: Types },
    #[error("{op}: dtype {dtype} is not supported, expected {expected}")]
    UnsupportedDType {
        op: &'static str,
        dtype: DType,
        expected: &'static str,
    },
    #[error("{op}: axis {axis} is out of range for {ty} (rank {})", ty.shape.rank())]
    Axis {
        op: &'static str,
        axis: i64,
        ty: Box<TensorType>,
    },
    #[error("{op}: {message} (operands: {operands})")]
    Invalid {
        op: &'static str,
        message: String,
        operands: Types,
    },
    #[error("{op}: operand {operand} is not defined before node {node}")]
    ForwardRef {
        node: NodeId,
        op: &'static str,
        operand: NodeId,
    },
    #[error("duplicate {kind} name {name:?}")]
    DuplicateName { kind: &'static str, name: String },
    #[error("{op}: stored type {found} differs from the type its operands give, {expected}")]
    TypeMismatch {
        op: &'static str,
        expected: Box<TensorType>,
        found: Box<TensorType>,
    },
    #[error("output {name:?} refers to {node}, which is not a node of the graph")]
    BadOutput { name: String, node: NodeId },
    #[error("invalid tensor data: {0}")]
    Data(String),
    #[error("node {node}: {source}")]
    AtNode {
        node: NodeId,
        #[source]
        source: Box<IrError>,
    },
}

impl IrError {
    /// Attaches the node the error was found at.
    pub fn at(self, node: NodeId) -> IrError {
        match self {
            e @ IrError::AtNode { .. } => e,
            e => IrError::AtNode {
                node,
                source: Box::new(e),
            },
        }
    }

    pub(crate) fn invalid(
        op: &'static str,
        message: impl Into<String>,
        operands: &[&TensorType],
    ) -> IrError {
        IrError::Invalid {
            op,
            message: message.into(),
            operands: Types(operands.iter().map(|t| (*t).clone()).collect()),
        }
    }
}
