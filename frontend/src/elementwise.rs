//! Elementwise primitives: unary and binary ops, `where`, with PyTorch's promotion.

use crate::error::Result;
use crate::promote::{promoted, resolve};
use crate::tensor::{Operand, Tensor};
use smelt_ir::{BinaryOp, DType, Op, UnaryOp};

impl Tensor {
    /// Applies unary `op`; integer and bool inputs of float-only ops (`exp`, `sqrt` …) are cast
    /// to f32 first, as in PyTorch.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let name = op.name();
        let dtype = self.value(name)?.ty.dtype;
        let x = if op.float_only() {
            self.cast(dtype.to_float())?
        } else {
            self.clone()
        };
        let id = x.value(name)?.id;
        x.emit(Op::Unary(op, id))
    }
}

macro_rules! unary_methods {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$m])*
            pub fn $name(&self) -> Result<Tensor> {
                self.unary(UnaryOp::$op)
            }
        )*}
    };
}

unary_methods! {
    /// `-x` (bool is rejected, as in PyTorch).
    neg => Neg;
    abs => Abs;
    /// `e^x` (integers computed in f32).
    exp => Exp;
    /// Natural logarithm (integers computed in f32).
    log => Log;
    sqrt => Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt;
    /// `1 / x` (integers computed in f32).
    reciprocal => Reciprocal;
    sin => Sin;
    cos => Cos;
    tanh => Tanh;
    erf => Erf;
    /// `1 / (1 + e^-x)`.
    sigmoid => Sigmoid;
    /// `max(x, 0)`.
    relu => Relu;
    floor => Floor;
    ceil => Ceil;
    /// `x == 0`, as bool, for any dtype.
    logical_not => LogicalNot;
}

/// Applies binary `op` to two operands (at least one a tensor), with PyTorch's promotion:
/// operands are cast to [`crate::promote`]'s result dtype (scalars become 0-d constants of
/// it); true division computes integers in f32; `logical_and`/`logical_or` test each operand
/// against zero in its own dtype; comparisons and logical ops return bool.
pub fn binary(op: BinaryOp, lhs: impl Into<Operand>, rhs: impl Into<Operand>) -> Result<Tensor> {
    let name = op.name();
    let operands = [lhs.into(), rhs.into()];
    let (owner, r) = resolve(name, &operands)?;
    let dtype = match op {
        BinaryOp::Div => promoted(&r).to_float(),
        BinaryOp::LogicalAnd | BinaryOp::LogicalOr => DType::Bool,
        _ => promoted(&r),
    };
    let a = r[0].as_dtype(owner, dtype)?;
    let b = r[1].as_dtype(owner, dtype)?;
    owner.emit(Op::Binary(op, a, b))
}

macro_rules! binary_methods {
    ($($(#[$m:meta])* $name:ident => $op:ident;)*) => {
        impl Tensor {$(
            $(#[$m])*
            pub fn $name(&self, rhs: impl Into<Operand>) -> Result<Tensor> {
                binary(BinaryOp::$op, self, rhs)
            }
        )*}
    };
}

binary_methods! {
    /// `self + rhs` (`rhs` a tensor or a scalar; promoted like PyTorch).
    add => Add;
    sub => Sub;
    mul => Mul;
    /// True division: integer operands are computed in f32 (`torch.div`).
    div => Div;
    /// Division rounded toward negative infinity (`torch.floor_divide`).
    floor_div => FloorDiv;
    /// Remainder with the sign of the divisor (`torch.remainder`, Python's `%`).
    remainder => Remainder;
    pow => Pow;
    /// Elementwise maximum, NaN-propagating (`torch.maximum`).
    maximum => Maximum;
    minimum => Minimum;
    /// `self == rhs` as bool (operands promoted first).
    eq => Eq;
    ne => Ne;
    lt => Lt;
    le => Le;
    gt => Gt;
    ge => Ge;
    /// Both nonzero, as bool.
    logical_and => LogicalAnd;
    logical_or => LogicalOr;
}

impl Tensor {
    /// `torch.Tensor.where`: `self` where `cond` is true, else `other`.
    pub fn where_(&self, cond: &Tensor, other: impl Into<Operand>) -> Result<Tensor> {
        where_(cond, self, other)
    }
}

/// `torch.where(cond, a, b)`: `cond` must be bool; `a` and `b` (tensors or scalars) are
/// promoted to their result dtype; all three broadcast.
pub fn where_(cond: &Tensor, a: impl Into<Operand>, b: impl Into<Operand>) -> Result<Tensor> {
    let operands = [Operand::from(cond), a.into(), b.into()];
    let (owner, r) = resolve("where", &operands)?;
    let dtype = promoted(&r[1..]);
    let c = cond.value("where")?.id;
    let a = r[1].as_dtype(owner, dtype)?;
    let b = r[2].as_dtype(owner, dtype)?;
    owner.emit(Op::Where(c, a, b))
}
