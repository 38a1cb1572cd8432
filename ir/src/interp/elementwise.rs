//! Elementwise ops: unary, binary (with broadcasting) and `where`.
//!
//! f16 and bf16 operands are widened to f32, computed with the f32 formula and rounded back to
//! nearest-even, once per op. Integer arithmetic wraps in the operand's width.

use super::layout::{broadcast_map, take};
use super::{unsupported, EvalError};
use crate::graph::NodeId;
use crate::op::{BinaryOp, UnaryOp};
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};
use half::{bf16, f16};

/// One float formula per op, instantiated for f32 (`erf`: `libm::erff`) and f64 (`libm::erf`).
macro_rules! float_ops {
    ($unary:ident, $binary:ident, $t:ty, $erf:path) => {
        fn $unary(op: UnaryOp, x: $t) -> $t {
            use UnaryOp::*;
            match op {
                Neg => -x,
                Abs => x.abs(),
                Exp => x.exp(),
                Log => x.ln(),
                Sqrt => x.sqrt(),
                Rsqrt => 1.0 / x.sqrt(),
                Reciprocal => 1.0 / x,
                Sin => x.sin(),
                Cos => x.cos(),
                Tanh => x.tanh(),
                Erf => $erf(x),
                Sigmoid => 1.0 / (1.0 + (-x).exp()),
                // `x < 0` is false for NaN and -0.0, which pass through (PyTorch's clamp_min).
                Relu => {
                    if x < 0.0 {
                        0.0
                    } else {
                        x
                    }
                }
                Floor => x.floor(),
                Ceil => x.ceil(),
                // Handled before dispatch (its result is bool); 1.0 for "true" if ever reached.
                LogicalNot => (x == 0.0) as u8 as $t,
            }
        }

        /// `None` for comparisons and logical ops, which are computed elsewhere.
        fn $binary(op: BinaryOp, a: $t, b: $t) -> Option<$t> {
            use BinaryOp::*;
            Some(match op {
                Add => a + b,
                Sub => a - b,
                Mul => a * b,
                Div => a / b,
                // PyTorch's div_floor_floating (also numpy's npy_divmod).
                FloorDiv => {
                    if b == 0.0 {
                        return Some(a / b);
                    }
                    let rem = a % b;
                    let mut div = (a - rem) / b;
                    if rem != 0.0 && (b < 0.0) != (rem < 0.0) {
                        div -= 1.0;
                    }
                    if div != 0.0 {
                        let floor = div.floor();
                        if div - floor > 0.5 {
                            floor + 1.0
                        } else {
                            floor
                        }
                    } else {
                        (0.0 as $t).copysign(a / b)
                    }
                }
                // PyTorch: fmod, then add the divisor when the signs differ.
                Remainder => {
                    let rem = a % b;
                    if rem != 0.0 && (b < 0.0) != (rem < 0.0) {
                        rem + b
                    } else {
                        rem
                    }
                }
                Pow => a.powf(b),
                Maximum if a.is_nan() || b.is_nan() => a + b,
                Maximum => a.max(b),
                Minimum if a.is_nan() || b.is_nan() => a + b,
                Minimum => a.min(b),
                Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => return None,
            })
        }
    };
}

float_ops!(unary_f32, binary_f32, f32, libm::erff);
float_ops!(unary_f64, binary_f64, f64, libm::erf);

/// Integer formulas, instantiated for i32 and i64. `None` for division by zero; comparisons,
/// logical ops and true division never reach them.
macro_rules! int_ops {
    ($unary:ident, $binary:ident, $t:ty) => {
        fn $unary(op: UnaryOp, x: $t) -> $t {
            match op {
                UnaryOp::Neg => x.wrapping_neg(),
                UnaryOp::Abs => x.wrapping_abs(),
                UnaryOp::Relu => x.max(0),
                UnaryOp::LogicalNot => (x == 0) as $t,
                // floor/ceil are the identity; float-only ops are rejected by the typing rules.
                _ => x,
            }
        }

        fn $binary(op: BinaryOp, a: $t, b: $t) -> Option<$t> {
            use BinaryOp::*;
            Some(match op {
                Add => a.wrapping_add(b),
                Sub => a.wrapping_sub(b),
                Mul => a.wrapping_mul(b),
                FloorDiv => {
                    if b == 0 {
                        return None;
                    }
                    let (q, r) = (a.wrapping_div(b), a.wrapping_rem(b));
                    if r != 0 && (a < 0) != (b < 0) {
                        q - 1
                    } else {
                        q
                    }
                }
                Remainder => {
                    if b == 0 {
                        return None;
                    }
                    let r = a.wrapping_rem(b);
                    if r != 0 && (r < 0) != (b < 0) {
                        r + b
                    } else {
                        r
                    }
                }
                Pow => {
                    if b < 0 {
                        match a {
                            1 => 1,
                            -1 if b % 2 != 0 => -1,
                            -1 => 1,
                            _ => 0,
                        }
                    } else {
                        // Square and multiply, wrapping (PyTorch's powi_impl).
                        let (mut base, mut exp, mut acc): ($t, $t, $t) = (a, b, 1);
                        while exp != 0 {
                            if exp & 1 == 1 {
                                acc = acc.wrapping_mul(base);
                            }
                            exp /= 2;
                            base = base.wrapping_mul(base);
                        }
                        acc
                    }
                }
                Maximum => a.max(b),
                Minimum => a.min(b),
                // True division of integers is rejected by the typing rules.
                Div | Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => 0,
            })
        }
    };
}

int_ops!(unary_i32, binary_i32, i32);
int_ops!(unary_i64, binary_i64, i64);

/// Evaluates a unary op.
pub(super) fn unary(op: UnaryOp, a: &TensorData) -> Result<TensorData, EvalError> {
    if op == UnaryOp::LogicalNot {
        return Ok(TensorData::Bool(
            (0..a.len()).map(|i| !truthy(a, i)).collect(),
        ));
    }
    Ok(match a {
        TensorData::F16(v) => TensorData::F16(
            v.iter()
                .map(|x| f16::from_f32(unary_f32(op, x.to_f32())))
                .collect(),
        ),
        TensorData::BF16(v) => TensorData::BF16(
            v.iter()
                .map(|x| bf16::from_f32(unary_f32(op, x.to_f32())))
                .collect(),
        ),
        TensorData::F32(v) => TensorData::F32(v.iter().map(|&x| unary_f32(op, x)).collect()),
        TensorData::F64(v) => TensorData::F64(v.iter().map(|&x| unary_f64(op, x)).collect()),
        TensorData::I32(v) if !op.float_only() => {
            TensorData::I32(v.iter().map(|&x| unary_i32(op, x)).collect())
        }
        TensorData::I64(v) if !op.float_only() => {
            TensorData::I64(v.iter().map(|&x| unary_i64(op, x)).collect())
        }
        other => return Err(unsupported(op.name(), other.dtype())),
    })
}

/// Whether element `i` counts as true: nonzero, NaN included.
fn truthy(d: &TensorData, i: usize) -> bool {
    match d {
        TensorData::Bool(v) => v[i],
        TensorData::I32(v) => v[i] != 0,
        TensorData::I64(v) => v[i] != 0,
        TensorData::F16(v) => v[i].to_f32() != 0.0,
        TensorData::BF16(v) => v[i].to_f32() != 0.0,
        TensorData::F32(v) => v[i] != 0.0,
        TensorData::F64(v) => v[i] != 0.0,
    }
}

/// An IEEE comparison (false whenever NaN is involved, except `ne`).
fn compare<T: PartialOrd>(op: BinaryOp, a: T, b: T) -> bool {
    match op {
        BinaryOp::Eq => a == b,
        BinaryOp::Ne => a != b,
        BinaryOp::Lt => a < b,
        BinaryOp::Le => a <= b,
        BinaryOp::Gt => a > b,
        _ => a >= b,
    }
}

/// Evaluates a binary op on `a` and `b` broadcast to `out`.
pub(super) fn binary(
    node: NodeId,
    op: BinaryOp,
    a: &HostTensor,
    b: &HostTensor,
    out: &Shape,
) -> Result<TensorData, EvalError> {
    let (ia, ib) = (broadcast_map(a.shape(), out), broadcast_map(b.shape(), out));
    let pairs = || ia.iter().zip(&ib).map(|(&i, &j)| (i, j));
    let (x, y) = (a.data(), b.data());
    if matches!(op, BinaryOp::LogicalAnd | BinaryOp::LogicalOr) {
        let and = op == BinaryOp::LogicalAnd;
        return Ok(TensorData::Bool(
            pairs()
                .map(|(i, j)| {
                    let (p, q) = (truthy(x, i), truthy(y, j));
                    if and {
                        p && q
                    } else {
                        p || q
                    }
                })
                .collect(),
        ));
    }
    if op.returns_bool() {
        macro_rules! cmp {
            ($u:expr, $v:expr, $conv:expr) => {
                TensorData::Bool(
                    pairs()
                        .map(|(i, j)| compare(op, $conv($u[i]), $conv($v[j])))
                        .collect(),
                )
            };
        }
        return Ok(match (x, y) {
            (TensorData::Bool(u), TensorData::Bool(v)) => cmp!(u, v, |t: bool| t),
            (TensorData::I32(u), TensorData::I32(v)) => cmp!(u, v, |t: i32| t),
            (TensorData::I64(u), TensorData::I64(v)) => cmp!(u, v, |t: i64| t),
            (TensorData::F16(u), TensorData::F16(v)) => cmp!(u, v, |t: f16| t.to_f32()),
            (TensorData::BF16(u), TensorData::BF16(v)) => cmp!(u, v, |t: bf16| t.to_f32()),
            (TensorData::F32(u), TensorData::F32(v)) => cmp!(u, v, |t: f32| t),
            (TensorData::F64(u), TensorData::F64(v)) => cmp!(u, v, |t: f64| t),
            _ => return Err(unsupported(op.name(), y.dtype())),
        });
    }
    let zero_div = || EvalError::DivisionByZero {
        node,
        op: op.name(),
    };
    let bad = || unsupported(op.name(), x.dtype());
    macro_rules! arith {
        ($u:expr, $v:expr, $f:expr, $err:expr) => {
            pairs()
                .map(|(i, j)| $f($u[i], $v[j]).ok_or_else($err))
                .collect::<Result<Vec<_>, _>>()?
        };
    }
    let f16_op = |p: f16, q: f16| binary_f32(op, p.to_f32(), q.to_f32()).map(f16::from_f32);
    let bf16_op = |p: bf16, q: bf16| binary_f32(op, p.to_f32(), q.to_f32()).map(bf16::from_f32);
    Ok(match (x, y) {
        (TensorData::F16(u), TensorData::F16(v)) => TensorData::F16(arith!(u, v, f16_op, bad)),
        (TensorData::BF16(u), TensorData::BF16(v)) => TensorData::BF16(arith!(u, v, bf16_op, bad)),
        (TensorData::F32(u), TensorData::F32(v)) => {
            TensorData::F32(arith!(u, v, |p, q| binary_f32(op, p, q), bad))
        }
        (TensorData::F64(u), TensorData::F64(v)) => {
            TensorData::F64(arith!(u, v, |p, q| binary_f64(op, p, q), bad))
        }
        (TensorData::I32(u), TensorData::I32(v)) if op != BinaryOp::Div => {
            TensorData::I32(arith!(u, v, |p, q| binary_i32(op, p, q), zero_div))
        }
        (TensorData::I64(u), TensorData::I64(v)) if op != BinaryOp::Div => {
            TensorData::I64(arith!(u, v, |p, q| binary_i64(op, p, q), zero_div))
        }
        _ => return Err(bad()),
    })
}

/// `where(cond, a, b)` with all three broadcast to `out`.
pub(super) fn select(
    cond: &HostTensor,
    a: &HostTensor,
    b: &HostTensor,
    out: &Shape,
) -> Result<TensorData, EvalError> {
    let TensorData::Bool(c) = cond.data() else {
        return Err(unsupported("where", cond.dtype()));
    };
    let ic = broadcast_map(cond.shape(), out);
    let (ia, ib) = (broadcast_map(a.shape(), out), broadcast_map(b.shape(), out));
    // Gather each branch to `out`, then pick.
    let pa = take(a.data(), &ia);
    let pb = take(b.data(), &ib);
    let pick = |k: usize| c[ic[k]];
    let picked = match (&pa, &pb) {
        (TensorData::Bool(u), TensorData::Bool(v)) => TensorData::Bool(choose(u, v, pick)),
        (TensorData::I32(u), TensorData::I32(v)) => TensorData::I32(choose(u, v, pick)),
        (TensorData::I64(u), TensorData::I64(v)) => TensorData::I64(choose(u, v, pick)),
        (TensorData::F16(u), TensorData::F16(v)) => TensorData::F16(choose(u, v, pick)),
        (TensorData::BF16(u), TensorData::BF16(v)) => TensorData::BF16(choose(u, v, pick)),
        (TensorData::F32(u), TensorData::F32(v)) => TensorData::F32(choose(u, v, pick)),
        (TensorData::F64(u), TensorData::F64(v)) => TensorData::F64(choose(u, v, pick)),
        _ => return Err(unsupported("where", b.dtype())),
    };
    Ok(picked)
}

fn choose<T: Copy>(u: &[T], v: &[T], pick: impl Fn(usize) -> bool) -> Vec<T> {
    (0..u.len())
        .map(|k| if pick(k) { u[k] } else { v[k] })
        .collect()
}
