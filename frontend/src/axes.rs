//! Python-style axis normalisation: negative axes count from the end.

use crate::error::{FrontendError, Result};
use smelt_ir::{Shape, TensorType};

/// Normalises `axis` for a tensor of `shape`: `-rank <= axis < rank`.
pub(crate) fn axis(shape: &Shape, axis: i64, op: &'static str, ty: &TensorType) -> Result<usize> {
    wrap(axis, shape.rank(), op, ty)
}

/// Normalises `axis` into `0..rank`.
pub(crate) fn wrap(axis: i64, rank: usize, op: &'static str, ty: &TensorType) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(a as usize)
    } else {
        Err(FrontendError::Axis {
            op,
            axis,
            ty: ty.clone(),
        })
    }
}

/// Normalises the axes of a reduction. An empty list means every axis (as in PyTorch); a
/// 0-d tensor accepts axis 0 or -1 (and reduces nothing). Repeated axes are an error.
pub(crate) fn reduce_axes(axes: &[i64], op: &'static str, ty: &TensorType) -> Result<Vec<usize>> {
    let rank = ty.shape.rank();
    if rank == 0 {
        return match axes.iter().find(|&&a| a != 0 && a != -1) {
            Some(&a) => Err(FrontendError::Axis {
                op,
                axis: a,
                ty: ty.clone(),
            }),
            None => Ok(Vec::new()),
        };
    }
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = wrap(a, rank, op, ty)?;
        if out.contains(&n) {
            return Err(FrontendError::invalid(
                op,
                format!("axis {a} appears more than once in {axes:?}"),
                &[ty],
            ));
        }
        out.push(n);
    }
    Ok(out)
}

/// Python slice normalisation of one bound: negative counts from the end, then clamped to
/// `0..=dim`.
pub(crate) fn slice_bound(b: i64, dim: usize) -> usize {
    let d = dim as i64;
    let b = if b < 0 { b + d } else { b };
    b.clamp(0, d) as usize
}
