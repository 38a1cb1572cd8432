//! `+ - * /` and unary `-` on tensors and scalars.
//!
//! Operators cannot return `Result`, so a failing operator records its error, wrapped in
//! [`FrontendError::At`] with the caller's source location, in its tracer (the first error
//! wins; [`crate::Tracer::finish`] returns it) and returns a poisoned tensor. An operator with
//! a poisoned operand returns a poisoned tensor without recording anything new.
//!
//! A scalar on the right may be any [`IntoScalar`] (`f32`, `f64`, `i32`, `i64`, `bool`,
//! [`smelt_ir::Scalar`]); on the left, `f32`, `f64`, `i32` or `i64`. Because the left-hand
//! impls differ by type, an unsuffixed literal on the left leaves the result's type open until
//! the end of type checking: `let y: Tensor = 1.0 - &x;` or `(1.0f64 - &x).exp()` rather than
//! `(1.0 - &x).exp()`.

use crate::elementwise::binary;
use crate::error::{FrontendError, Result};
use crate::tensor::{IntoScalar, Tensor};
use smelt_ir::{BinaryOp, UnaryOp};
use std::panic::Location;
use std::rc::Rc;

/// Runs `f` for an operator whose tensor operands are `owner` and `other`, turning a failure
/// into a recorded error and a poisoned result.
fn run_traced(
    owner: &Tensor,
    other: Option<&Tensor>,
    location: &'static Location<'static>,
    op: &'static str,
    f: impl FnOnce() -> Result<Tensor>,
) -> Tensor {
    let fail = |e: FrontendError| {
        let e = FrontendError::At {
            location,
            source: Box::new(e),
        };
        owner.state.record(e.clone());
        if let Some(o) = other {
            if !Rc::ptr_eq(&o.state, &owner.state) {
                o.state.record(e.clone());
            }
        }
        Tensor::poisoned(owner.state.clone(), Rc::new(e))
    };
    if let Some(o) = other {
        if let Err(e) = owner.same_tracer(o, op) {
            return fail(e);
        }
    }
    let poison = owner.poison().or_else(|| other.and_then(Tensor::poison));
    if let Some(cause) = poison {
        return Tensor::poisoned(owner.state.clone(), cause.clone());
    }
    f().unwrap_or_else(fail)
}

#[track_caller]
fn tensor_tensor(op: BinaryOp, a: &Tensor, b: &Tensor) -> Tensor {
    let location = Location::caller();
    run_traced(a, Some(b), location, op.name(), || binary(op, a, b))
}

#[track_caller]
fn tensor_scalar(op: BinaryOp, a: &Tensor, s: impl IntoScalar) -> Tensor {
    let location = Location::caller();
    run_traced(a, None, location, op.name(), || {
        binary(op, a, s.into_scalar())
    })
}

#[track_caller]
fn scalar_tensor(op: BinaryOp, s: impl IntoScalar, b: &Tensor) -> Tensor {
    let location = Location::caller();
    run_traced(b, None, location, op.name(), || {
        binary(op, s.into_scalar(), b)
    })
}

macro_rules! tensor_operators {
    ($($tr:ident $method:ident $assign_tr:ident $assign:ident => $op:ident;)*) => {$(
        impl std::ops::$tr<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                tensor_tensor(BinaryOp::$op, &self, &rhs)
            }
        }
        impl std::ops::$tr<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                tensor_tensor(BinaryOp::$op, &self, rhs)
            }
        }
        impl std::ops::$tr<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                tensor_tensor(BinaryOp::$op, self, &rhs)
            }
        }
        impl std::ops::$tr<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                tensor_tensor(BinaryOp::$op, self, rhs)
            }
        }
        impl std::ops::$assign_tr<Tensor> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: Tensor) {
                *self = tensor_tensor(BinaryOp::$op, self, &rhs);
            }
        }
        impl std::ops::$assign_tr<&Tensor> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: &Tensor) {
                *self = tensor_tensor(BinaryOp::$op, self, rhs);
            }
        }
        scalar_operators!($tr $method $assign_tr $assign => $op; f32, f64, i32, i64);
    )*};
}

macro_rules! scalar_operators {
    ($tr:ident $method:ident $assign_tr:ident $assign:ident => $op:ident; $($s:ty),*) => {
        // One generic impl per receiver, so that `x * 2.0` needs no literal suffix.
        impl<S: IntoScalar> std::ops::$tr<S> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor {
                tensor_scalar(BinaryOp::$op, &self, rhs)
            }
        }
        impl<S: IntoScalar> std::ops::$tr<S> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: S) -> Tensor {
                tensor_scalar(BinaryOp::$op, self, rhs)
            }
        }
        impl<S: IntoScalar> std::ops::$assign_tr<S> for Tensor {
            #[track_caller]
            fn $assign(&mut self, rhs: S) {
                *self = tensor_scalar(BinaryOp::$op, self, rhs);
            }
        }
        $(
        impl std::ops::$tr<Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                scalar_tensor(BinaryOp::$op, self, &rhs)
            }
        }
        impl std::ops::$tr<&Tensor> for $s {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                scalar_tensor(BinaryOp::$op, self, rhs)
            }
        }
        )*
    };
}

tensor_operators! {
    Add add AddAssign add_assign => Add;
    Sub sub SubAssign sub_assign => Sub;
    Mul mul MulAssign mul_assign => Mul;
    Div div DivAssign div_assign => Div;
}

impl std::ops::Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        -&self
    }
}

impl std::ops::Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        let location = Location::caller();
        run_traced(self, None, location, "neg", || self.unary(UnaryOp::Neg))
    }
}
