//! Views and layout ops, materialised as copies: permute, expand, slice, concat, pad.
//! (Reshape keeps the row-major data as it is.)
//!
//! Each op computes an index map (for every output element, the source element it copies) and
//! gathers through it; concat and pad first append their extra sources (the other operands,
//! the pad value) to one buffer.

use super::cast;
use super::layout::{append, broadcast_map, index_map, strides, take};
use super::{unsupported, EvalError};
use crate::dtype::{DType, Scalar};
use crate::op::SliceRange;
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};

/// Output axis `i` is input axis `perm[i]`.
pub(super) fn permute(a: &HostTensor, perm: &[usize]) -> TensorData {
    let dims = a.shape().dims();
    let st = strides(dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let map = index_map(&out_dims, |idx| {
        idx.iter().zip(perm).map(|(&i, &p)| i * st[p]).sum()
    });
    take(a.data(), &map)
}

/// Broadcasts `a` to `out`.
pub(super) fn expand(a: &HostTensor, out: &Shape) -> TensorData {
    take(a.data(), &broadcast_map(a.shape(), out))
}

/// Elements `start, start + step, …` below `stop` of every axis.
pub(super) fn slice(a: &HostTensor, ranges: &[SliceRange]) -> TensorData {
    let st = strides(a.shape().dims());
    let out_dims: Vec<usize> = ranges.iter().map(SliceRange::len).collect();
    let map = index_map(&out_dims, |idx| {
        idx.iter()
            .zip(ranges)
            .zip(&st)
            .map(|((&i, r), &s)| (r.start + i * r.step) * s)
            .sum()
    });
    take(a.data(), &map)
}

/// `parts` joined along `axis` into `out`.
pub(super) fn concat(
    parts: &[&HostTensor],
    axis: usize,
    out: &Shape,
) -> Result<TensorData, EvalError> {
    let datas: Vec<&TensorData> = parts.iter().map(|p| p.data()).collect();
    let Some(all) = append(&datas) else {
        let dtype = parts.last().map_or(DType::Bool, |p| p.dtype());
        return Err(unsupported("concat", dtype));
    };
    // Where each part starts in `all`, and its strides.
    let mut bases = Vec::with_capacity(parts.len());
    let mut base = 0;
    for p in parts {
        bases.push(base);
        base += p.numel();
    }
    let part_strides: Vec<Vec<usize>> = parts.iter().map(|p| strides(p.shape().dims())).collect();
    let map = index_map(out.dims(), |idx| {
        // The part holding position `idx[axis]`: skip whole parts (zero-size ones included).
        let mut pos = idx[axis];
        let mut k = 0;
        while k + 1 < parts.len() && pos >= parts[k].shape().dims()[axis] {
            pos -= parts[k].shape().dims()[axis];
            k += 1;
        }
        let local: usize = idx
            .iter()
            .enumerate()
            .zip(&part_strides[k])
            .map(|((ax, &i), &s)| if ax == axis { pos * s } else { i * s })
            .sum();
        bases[k] + local
    });
    Ok(take(&all, &map))
}

/// `a` surrounded by `pads[axis] = (before, after)` copies of `value` (converted like a cast).
pub(super) fn pad(
    a: &HostTensor,
    pads: &[(usize, usize)],
    value: Scalar,
    out: &Shape,
) -> Result<TensorData, EvalError> {
    let fill = cast::scalar(value, a.dtype());
    let Some(all) = append(&[a.data(), &fill]) else {
        return Err(unsupported("pad", a.dtype()));
    };
    let fill_at = a.numel();
    let dims = a.shape().dims();
    let st = strides(dims);
    let map = index_map(out.dims(), |idx| {
        let mut lin = 0;
        for (ax, &i) in idx.iter().enumerate() {
            let lo = pads[ax].0;
            if i < lo || i >= lo + dims[ax] {
                return fill_at;
            }
            lin += (i - lo) * st[ax];
        }
        lin
    });
    Ok(take(&all, &map))
}
