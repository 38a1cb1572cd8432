//! The frontend's error type.
//!
//! Every variant names the op that failed; type errors carry the operand types (dtype and
//! shape), either inside the wrapped [`IrError`] or in the variant itself. Errors recorded by
//! an operator (`+ - * /`, unary `-`) are wrapped in [`FrontendError::At`] with the Rust
//! source location of the operator expression.

use smelt_ir::error::Types;
use smelt_ir::{IrError, TensorType};
use std::panic::Location;

pub type Result<T, E = FrontendError> = std::result::Result<T, E>;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FrontendError {
    /// The IR builder rejected a node: wrong shapes or dtypes for the op (the error names the
    /// op and the operand types).
    #[error(transparent)]
    Ir(Box<IrError>),
    /// An argument the frontend checks before building a node (reshape sizes, slice bounds,
    /// composite arguments …) is invalid.
    #[error("{op}: {message} (operands: {operands})")]
    Invalid {
        op: &'static str,
        message: String,
        operands: Types,
    },
    /// A signed axis outside `-rank..rank` (or `-rank-1..=rank` for `unsqueeze`).
    #[error("{op}: axis {axis} is out of range for {ty} (rank {})", ty.shape.rank())]
    Axis {
        op: &'static str,
        axis: i64,
        ty: TensorType,
    },
    /// The operands of one op were traced by two different [`crate::Tracer`]s.
    #[error("{op}: operands belong to different tracers")]
    MixedTracers { op: &'static str },
    /// An operand is a poisoned tensor: an earlier operator failed, and `first` is that
    /// operator's error (the first failure in the operand's history).
    #[error("{op}: an operand is poisoned by an earlier error: {first}")]
    Poisoned {
        op: &'static str,
        first: Box<FrontendError>,
    },
    /// An error raised by an operator, with the location of the operator in the caller's code.
    #[error("{location}: {source}")]
    At {
        location: &'static Location<'static>,
        #[source]
        source: Box<FrontendError>,
    },
    /// An error inside a composite op (softmax, layer_norm …), naming the composite.
    #[error("{op}: {source}")]
    InComposite {
        op: &'static str,
        #[source]
        source: Box<FrontendError>,
    },
    /// Operations were traced after [`crate::Tracer::finish`] took the graph.
    #[error("{op}: the tracer has already finished")]
    Finished { op: &'static str },
    /// The finished graph failed verification (a bug in the frontend).
    #[error("the traced graph does not verify: {0}")]
    Verify(Box<IrError>),
}

impl From<IrError> for FrontendError {
    fn from(e: IrError) -> FrontendError {
        FrontendError::Ir(Box::new(e))
    }
}

impl FrontendError {
    pub(crate) fn invalid(
        op: &'static str,
        message: impl Into<String>,
        operands: &[&TensorType],
    ) -> Self {
        FrontendError::Invalid {
            op,
            message: message.into(),
            operands: Types(operands.iter().map(|t| (*t).clone()).collect()),
        }
    }

    /// The innermost error, with [`FrontendError::At`] and [`FrontendError::InComposite`]
    /// wrappers removed.
    pub fn root(&self) -> &FrontendError {
        match self {
            FrontendError::At { source, .. } | FrontendError::InComposite { source, .. } => {
                source.root()
            }
            e => e,
        }
    }

    /// The caller location attached by an operator, if any.
    pub fn location(&self) -> Option<&'static Location<'static>> {
        match self {
            FrontendError::At { location, .. } => Some(location),
            FrontendError::InComposite { source, .. } => source.location(),
            _ => None,
        }
    }

    /// The op named by a frontend-level error (not by a wrapped [`IrError`]).
    pub fn op(&self) -> Option<&'static str> {
        match self {
            FrontendError::Invalid { op, .. }
            | FrontendError::Axis { op, .. }
            | FrontendError::MixedTracers { op }
            | FrontendError::Poisoned { op, .. }
            | FrontendError::InComposite { op, .. }
            | FrontendError::Finished { op } => Some(op),
            FrontendError::At { source, .. } => source.op(),
            FrontendError::Ir(_) | FrontendError::Verify(_) => None,
        }
    }

    /// Wraps `self` as an error inside composite `op` (poisoned-operand errors and errors
    /// that already name `op` are returned as they are).
    pub(crate) fn in_composite(self, op: &'static str) -> FrontendError {
        match self {
            e @ FrontendError::Poisoned { .. } => e,
            e if e.op() == Some(op) => e,
            e => FrontendError::InComposite {
                op,
                source: Box::new(e),
            },
        }
    }
}
