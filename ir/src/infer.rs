//! Typing rules: the result type of every op from its operands' types and its attributes.
//!
//! The IR is strict where PyTorch is implicit: operands of elementwise ops must already share a
//! dtype (the frontend inserts the casts PyTorch's promotion would), and float-only ops reject
//! integers. Broadcasting, however, is implicit in every elementwise op.

use crate::dtype::DType;
use crate::error::{IrError, Result, Types};
use crate::graph::{NodeId, TensorType};
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::shape::Shape;
use smallvec::SmallVec;

/// Infers the type of `op`; `ty` gives the type of an operand (which must exist).
pub fn infer<'g>(op: &Op, ty: impl Fn(NodeId) -> &'g TensorType) -> Result<TensorType> {
    let name = op.name();
    match op {
        Op::Input { dtype, shape, .. } | Op::Param { dtype, shape, .. } => {
            Ok(TensorType::new(*dtype, shape.clone()))
        }
        Op::Constant(t) => Ok(TensorType::new(t.dtype(), t.shape().clone())),
        Op::Unary(u, a) => infer_unary(*u, ty(*a)),
        Op::Binary(b, x, y) => infer_binary(*b, ty(*x), ty(*y)),
        Op::Where(c, a, b) => {
            let (c, a, b) = (ty(*c), ty(*a), ty(*b));
            if c.dtype != DType::Bool {
                return Err(IrError::UnsupportedDType {
                    op: name,
                    dtype: c.dtype,
                    expected: "a bool condition",
                });
            }
            same_dtype(name, &[a, b])?;
            let s = broadcast(name, a, b)?;
            let s = broadcast(name, &TensorType::new(a.dtype, s), c)?;
            Ok(TensorType::new(a.dtype, s))
        }
        Op::Cast { input, to } => Ok(TensorType::new(*to, ty(*input).shape.clone())),
        Op::Reduce {
            op: r,
            input,
            axes,
            keepdim,
        } => infer_reduce(*r, ty(*input), axes, *keepdim),
        Op::Reshape { input, shape } => {
            let a = ty(*input);
            if a.shape.numel() != shape.numel() {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "cannot reshape {} elements to {shape} ({} elements)",
                        a.shape.numel(),
                        shape.numel()
                    ),
                    &[a],
                ));
            }
            Ok(TensorType::new(a.dtype, shape.clone()))
        }
        Op::Permute { input, perm } => {
            let a = ty(*input);
            let mut seen = vec![false; a.shape.rank()];
            let valid = perm.len() == a.shape.rank()
                && perm
                    .iter()
                    .all(|&p| p < seen.len() && !std::mem::replace(&mut seen[p], true));
            if !valid {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "{perm:?} is not a permutation of the {} axes",
                        a.shape.rank()
                    ),
                    &[a],
                ));
            }
            let dims: Vec<usize> = perm.iter().map(|&p| a.shape.dims()[p]).collect();
            Ok(TensorType::new(a.dtype, dims))
        }
        Op::Expand { input, shape } => {
            let a = ty(*input);
            if !a.shape.broadcasts_to(shape) {
                return Err(IrError::invalid(
                    name,
                    format!("cannot expand {} to {shape}", a.shape),
                    &[a],
                ));
            }
            Ok(TensorType::new(a.dtype, shape.clone()))
        }
        Op::Slice { input, ranges } => {
            let a = ty(*input);
            if ranges.len() != a.shape.rank() {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "{} ranges given for a rank-{} tensor",
                        ranges.len(),
                        a.shape.rank()
                    ),
                    &[a],
                ));
            }
            let mut dims = Vec::with_capacity(ranges.len());
            for (axis, (r, &d)) in ranges.iter().zip(a.shape.dims()).enumerate() {
                if r.step == 0 || r.start > r.stop || r.stop > d {
                    return Err(IrError::invalid(
                        name,
                        format!(
                            "range {}:{}:{} is out of bounds for axis {axis} of size {d} \
                             (need start <= stop <= size and step >= 1)",
                            r.start, r.stop, r.step
                        ),
                        &[a],
                    ));
                }
                dims.push(r.len());
            }
            Ok(TensorType::new(a.dtype, dims))
        }
        Op::Concat { inputs, axis } => {
            let tys: Vec<&TensorType> = inputs.iter().map(|&i| ty(i)).collect();
            let Some(first) = tys.first() else {
                return Err(IrError::invalid(name, "needs at least one operand", &[]));
            };
            same_dtype(name, &tys)?;
            if *axis >= first.shape.rank() {
                return Err(IrError::Axis {
                    op: name,
                    axis: *axis as i64,
                    ty: Box::new((*first).clone()),
                });
            }
            let mut dims = first.shape.dims().to_vec();
            for t in &tys[1..] {
                let ok = t.shape.rank() == dims.len()
                    && t.shape
                        .dims()
                        .iter()
                        .zip(&dims)
                        .enumerate()
                        .all(|(i, (a, b))| i == *axis || a == b);
                if !ok {
                    return Err(IrError::invalid(
                        name,
                        format!("shapes must match except on axis {axis}"),
                        &tys,
                    ));
                }
                dims[*axis] = dims[*axis]
                    .checked_add(t.shape.dims()[*axis])
                    .ok_or_else(|| IrError::invalid(name, "result size overflows", &tys))?;
            }
            Ok(TensorType::new(first.dtype, dims))
        }
        Op::Pad { input, pads, .. } => {
            let a = ty(*input);
            if pads.len() != a.shape.rank() {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "{} (before, after) pairs given for a rank-{} tensor",
                        pads.len(),
                        a.shape.rank()
                    ),
                    &[a],
                ));
            }
            let dims = a
                .shape
                .dims()
                .iter()
                .zip(pads)
                .map(|(&d, &(lo, hi))| d.checked_add(lo)?.checked_add(hi))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| IrError::invalid(name, "result size overflows", &[a]))?;
            Ok(TensorType::new(a.dtype, dims))
        }
        Op::MatMul(x, y) => infer_matmul(ty(*x), ty(*y)),
        Op::Gather { input, index, axis } => {
            let (a, i) = (ty(*input), ty(*index));
            index_dtype(name, i)?;
            check_axis(name, *axis, a)?;
            let ok = i.shape.rank() == a.shape.rank()
                && i.shape
                    .dims()
                    .iter()
                    .zip(a.shape.dims())
                    .enumerate()
                    .all(|(d, (&n, &m))| d == *axis || n <= m);
            if !ok {
                return Err(IrError::invalid(
                    name,
                    format!(
                        "index must have the input's rank and no larger size on axes other than {axis}"
                    ),
                    &[a, i],
                ));
            }
            Ok(TensorType::new(a.dtype, i.shape.clone()))
        }
        Op::IndexSelect { input, index, axis } => {
            let (a, i) = (ty(*input), ty(*index));
            index_dtype(name, i)?;
            check_axis(name, *axis, a)?;
            if i.shape.rank() != 1 {
                return Err(IrError::invalid(name, "index must be 1-D", &[a, i]));
            }
            let mut dims = a.shape.dims().to_vec();
            dims[*axis] = i.shape.dims()[0];
            Ok(TensorType::new(a.dtype, dims))
        }
    }
}

fn infer_unary(u: UnaryOp, a: &TensorType) -> Result<TensorType> {
    let bad = |expected| IrError::UnsupportedDType {
        op: u.name(),
        dtype: a.dtype,
        expected,
    };
    let dtype = match u {
        UnaryOp::LogicalNot => DType::Bool,
        _ if u.float_only() => {
            if !a.dtype.is_float() {
                return Err(bad("a float dtype (cast integers to a float first)"));
            }
            a.dtype
        }
        _ => {
            if a.dtype.is_bool() {
                return Err(bad("a numeric dtype"));
            }
            a.dtype
        }
    };
    Ok(TensorType::new(dtype, a.shape.clone()))
}

fn infer_binary(b: BinaryOp, x: &TensorType, y: &TensorType) -> Result<TensorType> {
    use BinaryOp::*;
    let name = b.name();
    same_dtype(name, &[x, y])?;
    let shape = broadcast(name, x, y)?;
    let dtype = match b {
        Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => DType::Bool,
        Div => {
            if !x.dtype.is_float() {
                return Err(IrError::UnsupportedDType {
                    op: name,
                    dtype: x.dtype,
                    expected: "a float dtype (true division; cast integers first or use floor_div)",
                });
            }
            x.dtype
        }
        Add | Sub | Mul | FloorDiv | Remainder | Pow | Maximum | Minimum => {
            if x.dtype.is_bool() {
                return Err(IrError::UnsupportedDType {
                    op: name,
                    dtype: x.dtype,
                    expected: "a numeric dtype",
                });
            }
            x.dtype
        }
    };
    Ok(TensorType::new(dtype, shape))
}

fn infer_reduce(r: ReduceOp, a: &TensorType, axes: &[usize], keepdim: bool) -> Result<TensorType> {
    let name = r.name();
    let rank = a.shape.rank();
    let mut seen = vec![false; rank];
    for &ax in axes {
        check_axis(name, ax, a)?;
        if std::mem::replace(&mut seen[ax], true) {
            return Err(IrError::invalid(
                name,
                format!("axis {ax} appears twice in {axes:?}"),
                &[a],
            ));
        }
    }
    let dtype = match r {
        ReduceOp::Sum | ReduceOp::Prod => {
            if a.dtype.is_float() {
                a.dtype
            } else {
                DType::I64
            }
        }
        ReduceOp::Mean => {
            if !a.dtype.is_float() {
                return Err(IrError::UnsupportedDType {
                    op: name,
                    dtype: a.dtype,
                    expected: "a float dtype",
                });
            }
            a.dtype
        }
        ReduceOp::Max | ReduceOp::Min => a.dtype,
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            if a.dtype.is_bool() {
                return Err(IrError::UnsupportedDType {
                    op: name,
                    dtype: a.dtype,
                    expected: "a numeric dtype",
                });
            }
            if axes.len() != 1 && !(rank == 0 && axes.is_empty()) {
                return Err(IrError::invalid(
                    name,
                    format!("reduces exactly one axis, got {axes:?}"),
                    &[a],
                ));
            }
            DType::I64
        }
    };
    if matches!(
        r,
        ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
    ) {
        if let Some(&ax) = axes.iter().find(|&&ax| a.shape.dims()[ax] == 0) {
            return Err(IrError::invalid(
                name,
                format!("cannot reduce axis {ax} of size 0 (no identity)"),
                &[a],
            ));
        }
    }
    let dims: Vec<usize> = a
        .shape
        .dims()
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (seen[i], keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(dtype, dims))
}

fn infer_matmul(x: &TensorType, y: &TensorType) -> Result<TensorType> {
    let name = "matmul";
    same_dtype(name, &[x, y])?;
    if x.dtype.is_bool() {
        return Err(IrError::UnsupportedDType {
            op: name,
            dtype: x.dtype,
            expected: "a numeric dtype",
        });
    }
    let (xs, ys) = (x.shape.dims(), y.shape.dims());
    if xs.is_empty() || ys.is_empty() {
        return Err(IrError::invalid(
            name,
            "both operands need at least one dimension",
            &[x, y],
        ));
    }
    let (xb, yb, m, k1, k2, n) = matmul_parts(xs, ys);
    if k1 != k2 {
        return Err(IrError::invalid(
            name,
            format!("contraction dims differ ({k1} vs {k2})"),
            &[x, y],
        ));
    }
    let Some(batch) = xb.broadcast(&yb) else {
        return Err(IrError::invalid(
            name,
            format!("batch dims {xb} and {yb} do not broadcast"),
            &[x, y],
        ));
    };
    let mut dims: Vec<usize> = batch.dims().to_vec();
    if xs.len() > 1 {
        dims.push(m);
    }
    if ys.len() > 1 {
        dims.push(n);
    }
    Ok(TensorType::new(x.dtype, dims))
}

fn same_dtype(op: &'static str, tys: &[&TensorType]) -> Result<()> {
    if tys.windows(2).any(|w| w[0].dtype != w[1].dtype) {
        return Err(IrError::DTypeMismatch {
            op,
            operands: Types(tys.iter().map(|t| (*t).clone()).collect()),
        });
    }
    Ok(())
}

fn broadcast(op: &'static str, x: &TensorType, y: &TensorType) -> Result<Shape> {
    x.shape
        .broadcast(&y.shape)
        .ok_or_else(|| IrError::Broadcast {
            op,
            lhs: Box::new(x.clone()),
            rhs: Box::new(y.clone()),
        })
}

fn check_axis(op: &'static str, axis: usize, a: &TensorType) -> Result<()> {
    if axis >= a.shape.rank() {
        return Err(IrError::Axis {
            op,
            axis: axis as i64,
            ty: Box::new(a.clone()),
        });
    }
    Ok(())
}

fn index_dtype(op: &'static str, i: &TensorType) -> Result<()> {
    if !i.dtype.is_int() {
        return Err(IrError::UnsupportedDType {
            op,
            dtype: i.dtype,
            expected: "an i32 or i64 index",
        });
    }
    Ok(())
}

/// Splits matmul operand dims (both of rank >= 1) into `(x batch, y batch, m, k of x, k of y,
/// n)`, promoting a 1-D `x` to `[1, k]` and a 1-D `y` to `[k, 1]` as torch.matmul does. For
/// backends that check the operands themselves (and report which rule failed).
pub fn matmul_parts(xs: &[usize], ys: &[usize]) -> (Shape, Shape, usize, usize, usize, usize) {
    let xm: SmallVec<[usize; 6]> = if xs.len() == 1 {
        smallvec::smallvec![1, xs[0]]
    } else {
        SmallVec::from_slice(xs)
    };
    let ym: SmallVec<[usize; 6]> = if ys.len() == 1 {
        smallvec::smallvec![ys[0], 1]
    } else {
        SmallVec::from_slice(ys)
    };
    let (xr, yr) = (xm.len(), ym.len());
    (
        Shape::new(&xm[..xr - 2]),
        Shape::new(&ym[..yr - 2]),
        xm[xr - 2],
        xm[xr - 1],
        ym[yr - 2],
        ym[yr - 1],
    )
}
