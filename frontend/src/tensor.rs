//! [`Tensor`] handles, scalar operands and the checks every op starts with.

use crate::error::{FrontendError, Result};
use crate::tracer::{emit, State, Tracer};
use smelt_ir::{DType, NodeId, Op, Scalar, Shape, TensorType};
use std::fmt;
use std::rc::Rc;

/// A traced node and its type.
#[derive(Clone)]
pub(crate) struct Value {
    pub(crate) id: NodeId,
    pub(crate) ty: TensorType,
}

/// A handle to a value in a [`Tracer`]'s graph: a node id, its type and an `Rc` to the
/// tracer. Cloning is cheap.
///
/// A tensor is *poisoned* when the operator that produced it failed; it then holds the error
/// instead of a node. Operators propagate poison silently; named methods return
/// [`FrontendError::Poisoned`].
#[derive(Clone)]
pub struct Tensor {
    pub(crate) state: Rc<State>,
    value: std::result::Result<Value, Rc<FrontendError>>,
}

impl Tensor {
    pub(crate) fn from_value(state: Rc<State>, v: Value) -> Tensor {
        Tensor {
            state,
            value: Ok(v),
        }
    }

    pub(crate) fn poisoned(state: Rc<State>, cause: Rc<FrontendError>) -> Tensor {
        Tensor {
            state,
            value: Err(cause),
        }
    }

    /// The node and type, or [`FrontendError::Poisoned`] naming `op`.
    pub(crate) fn value(&self, op: &'static str) -> Result<&Value> {
        self.value
            .as_ref()
            .map_err(|cause| FrontendError::Poisoned {
                op,
                first: Box::new((**cause).clone()),
            })
    }

    /// The error a poisoned tensor holds.
    pub(crate) fn poison(&self) -> Option<&Rc<FrontendError>> {
        self.value.as_ref().err()
    }

    /// Checks that `other` comes from the same tracer as `self`.
    pub(crate) fn same_tracer(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if Rc::ptr_eq(&self.state, &other.state) {
            Ok(())
        } else {
            Err(FrontendError::MixedTracers { op })
        }
    }

    /// Adds a node to this tensor's graph.
    pub(crate) fn emit(&self, op: Op) -> Result<Tensor> {
        emit(&self.state, op)
    }

    /// The tracer this tensor belongs to.
    pub fn tracer(&self) -> Tracer {
        Tracer {
            state: self.state.clone(),
        }
    }

    /// Whether an earlier operator failed to produce this tensor.
    pub fn is_poisoned(&self) -> bool {
        self.value.is_err()
    }

    /// The node id in the tracer's graph (`None` when poisoned).
    pub fn id(&self) -> Option<NodeId> {
        self.value.as_ref().ok().map(|v| v.id)
    }

    /// The inferred type (dtype and shape).
    pub fn ty(&self) -> Result<&TensorType> {
        Ok(&self.value("ty")?.ty)
    }

    pub fn dtype(&self) -> Result<DType> {
        Ok(self.ty()?.dtype)
    }

    pub fn shape(&self) -> Result<&Shape> {
        Ok(&self.ty()?.shape)
    }

    pub fn dims(&self) -> Result<&[usize]> {
        Ok(self.ty()?.shape.dims())
    }

    pub fn rank(&self) -> Result<usize> {
        Ok(self.ty()?.shape.rank())
    }

    /// Size of axis `axis` (negative counts from the end).
    pub fn dim(&self, axis: i64) -> Result<usize> {
        let ty = self.ty()?;
        let a = crate::axes::axis(&ty.shape, axis, "dim", ty)?;
        Ok(ty.shape.dims()[a])
    }

    pub fn numel(&self) -> Result<usize> {
        Ok(self.ty()?.shape.numel())
    }

    /// Casts to `dtype` (no node when the dtype already matches). Casting follows PyTorch:
    /// float to int truncates toward zero, nonzero to bool is true.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        let v = self.value("cast")?;
        if v.ty.dtype == dtype {
            return Ok(self.clone());
        }
        let id = v.id;
        self.emit(Op::Cast {
            input: id,
            to: dtype,
        })
    }

    /// Same as [`Tensor::cast`] (PyTorch's `Tensor.to(dtype)`).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        self.cast(dtype)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Ok(v) => write!(f, "Tensor({}: {})", v.id, v.ty),
            Err(e) => write!(f, "Tensor(poisoned: {e})"),
        }
    }
}

/// A Rust number usable as a PyTorch-style scalar operand.
///
/// Floats are float scalars, integers int scalars, `bool` a bool scalar: the category decides
/// promotion (see [`DType::promote_with_scalar`]), never the Rust width.
pub trait IntoScalar: Copy {
    fn into_scalar(self) -> Scalar;
}

macro_rules! into_scalar {
    ($($t:ty => $v:ident($conv:ty)),*) => {$(
        impl IntoScalar for $t {
            fn into_scalar(self) -> Scalar {
                Scalar::$v(self as $conv)
            }
        }
    )*};
}
into_scalar!(f32 => Float(f64), f64 => Float(f64), i32 => Int(i64), i64 => Int(i64));

impl IntoScalar for bool {
    fn into_scalar(self) -> Scalar {
        Scalar::Bool(self)
    }
}

impl IntoScalar for Scalar {
    fn into_scalar(self) -> Scalar {
        self
    }
}

/// The right-hand side of a binary op: a tensor or a scalar.
#[derive(Clone, Debug)]
pub enum Operand {
    Tensor(Tensor),
    Scalar(Scalar),
}

impl From<Tensor> for Operand {
    fn from(t: Tensor) -> Operand {
        Operand::Tensor(t)
    }
}

impl From<&Tensor> for Operand {
    fn from(t: &Tensor) -> Operand {
        Operand::Tensor(t.clone())
    }
}

macro_rules! operand_from_scalar {
    ($($t:ty),*) => {$(
        impl From<$t> for Operand {
            fn from(x: $t) -> Operand {
                Operand::Scalar(x.into_scalar())
            }
        }
    )*};
}
operand_from_scalar!(f32, f64, i32, i64, bool, Scalar);
