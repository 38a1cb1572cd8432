//! Data-dependent indexing: `gather` and `index_select`.
//!
//! Index values (i32 or i64) must lie in `0..size` of the indexed axis; anything else, a
//! negative index included, is [`EvalError::IndexOutOfRange`] naming the node, the value and
//! the axis (PyTorch's `gather` rejects negative indices too; we do not wrap them Python-style
//! in `index_select` either).

use super::layout::{index_map, strides, take};
use super::{unsupported, EvalError};
use crate::graph::NodeId;
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};

/// The index values as i64.
fn index_values(op: &'static str, index: &HostTensor) -> Result<Vec<i64>, EvalError> {
    match index.data() {
        TensorData::I32(v) => Ok(v.iter().map(|&x| x as i64).collect()),
        TensorData::I64(v) => Ok(v.clone()),
        other => Err(unsupported(op, other.dtype())),
    }
}

/// `value` as a position on an axis of `size`, or the error naming it.
fn check(
    node: NodeId,
    op: &'static str,
    value: i64,
    axis: usize,
    size: usize,
) -> Result<usize, EvalError> {
    match usize::try_from(value) {
        Ok(i) if i < size => Ok(i),
        _ => Err(EvalError::IndexOutOfRange {
            node,
            op,
            index: value,
            axis,
            size,
        }),
    }
}

/// `out[p] = input[p with p[axis] replaced by index[p]]`; the output has the index's shape.
pub(super) fn gather(
    node: NodeId,
    input: &HostTensor,
    index: &HostTensor,
    axis: usize,
) -> Result<TensorData, EvalError> {
    let values = index_values("gather", index)?;
    let dims = input.shape().dims();
    let st = strides(dims);
    let mut next = 0;
    let map = index_map(index.shape().dims(), |pos| {
        // `index_map` visits positions in row-major order, the order of `values`.
        let value = values[next];
        next += 1;
        let i = check(node, "gather", value, axis, dims[axis])?;
        Ok(pos
            .iter()
            .zip(&st)
            .enumerate()
            .map(|(ax, (&p, &s))| if ax == axis { i * s } else { p * s })
            .sum())
    })
    .into_iter()
    .collect::<Result<Vec<usize>, EvalError>>()?;
    Ok(take(input.data(), &map))
}

/// The slices `index[0], index[1], …` of `input` along `axis`, stacked along `axis` into `out`.
/// Every index is checked, even when the output is empty.
pub(super) fn index_select(
    node: NodeId,
    input: &HostTensor,
    index: &HostTensor,
    axis: usize,
    out: &Shape,
) -> Result<TensorData, EvalError> {
    let dims = input.shape().dims();
    let positions = index_values("index_select", index)?
        .into_iter()
        .map(|v| check(node, "index_select", v, axis, dims[axis]))
        .collect::<Result<Vec<usize>, EvalError>>()?;
    let st = strides(dims);
    let map = index_map(out.dims(), |pos| {
        pos.iter()
            .zip(&st)
            .enumerate()
            .map(|(ax, (&p, &s))| if ax == axis { positions[p] * s } else { p * s })
            .sum()
    });
    Ok(take(input.data(), &map))
}
