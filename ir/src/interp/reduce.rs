//! Reductions over a set of axes.
//!
//! Every input element is sent, in row-major order, to its output slot (its multi-index with
//! the reduced axes dropped) and combined there, so ties and NaNs resolve in favour of the
//! element with the smallest index along the reduced axes. `keepdim` only changes the output
//! shape, not the order of its elements, so it is not needed here.
//!
//! Accumulators: float `sum`/`prod`/`mean` in f64, rounded once to the output dtype; bool and
//! integer `sum`/`prod` in wrapping i64. `max`/`min` propagate NaN; `argmax`/`argmin` return
//! the first index of the extreme value, NaN counting as the extreme.

use super::cast::{f64_to_bf16, f64_to_f16};
use super::layout::{index_map, strides};
use super::{unsupported, EvalError};
use crate::op::ReduceOp;
use crate::tensor::{HostTensor, TensorData};
use half::{bf16, f16};

/// Where the elements of the input go: the output slot of each, the coordinate of each along
/// the first reduced axis, the number of slots and the number of elements per slot.
struct Plan {
    slot: Vec<usize>,
    coord: Vec<usize>,
    slots: usize,
    count: f64,
}

fn plan(dims: &[usize], axes: &[usize]) -> Plan {
    let reduced: Vec<bool> = (0..dims.len()).map(|ax| axes.contains(&ax)).collect();
    let kept: Vec<usize> = dims
        .iter()
        .zip(&reduced)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    let kept_strides = strides(&kept);
    let first_axis = axes.first().copied();
    let (slot, coord) = index_map(dims, |idx| {
        let slot = idx
            .iter()
            .zip(&kept_strides)
            .zip(&reduced)
            .map(|((&i, &s), &r)| if r { 0 } else { i * s })
            .sum::<usize>();
        (slot, first_axis.map_or(0, |ax| idx[ax]))
    })
    .into_iter()
    .unzip();
    Plan {
        slot,
        coord,
        slots: numel(kept.iter().copied()),
        // Only used by `mean`; exact whenever the input has elements.
        count: axes.iter().map(|&ax| dims[ax] as f64).product(),
    }
}

/// The product of `dims` (the output's, whose size was checked), 0 if one of them is 0.
fn numel(dims: impl Iterator<Item = usize>) -> usize {
    let dims: Vec<usize> = dims.collect();
    if dims.contains(&0) {
        0
    } else {
        dims.iter().product()
    }
}

/// Evaluates `op` over `axes` of `a`; the result is in row-major order of the output.
pub(super) fn reduce(
    op: ReduceOp,
    a: &HostTensor,
    axes: &[usize],
) -> Result<TensorData, EvalError> {
    let p = plan(a.shape().dims(), axes);
    let data = a.data();
    Ok(match op {
        ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Mean if data.dtype().is_float() => {
            let prod = op == ReduceOp::Prod;
            let mut acc = vec![if prod { 1.0 } else { 0.0 }; p.slots];
            for (i, &s) in p.slot.iter().enumerate() {
                let x = data.get_f64(i);
                acc[s] = if prod { acc[s] * x } else { acc[s] + x };
            }
            if op == ReduceOp::Mean {
                // An empty set gives 0 / 0 = NaN.
                acc.iter_mut().for_each(|x| *x /= p.count);
            }
            round_f64(acc, data)
        }
        ReduceOp::Sum | ReduceOp::Prod => {
            let prod = op == ReduceOp::Prod;
            let mut acc = vec![prod as i64; p.slots];
            for (i, &s) in p.slot.iter().enumerate() {
                let Some(x) = get_i64(data, i) else {
                    return Err(unsupported(op.name(), data.dtype()));
                };
                acc[s] = if prod {
                    acc[s].wrapping_mul(x)
                } else {
                    acc[s].wrapping_add(x)
                };
            }
            TensorData::I64(acc)
        }
        ReduceOp::Mean => return Err(unsupported(op.name(), data.dtype())),
        ReduceOp::Max | ReduceOp::Min => {
            let max = op == ReduceOp::Max;
            match data {
                TensorData::Bool(v) => TensorData::Bool(extreme(v, &p, max, never)),
                TensorData::I32(v) => TensorData::I32(extreme(v, &p, max, never)),
                TensorData::I64(v) => TensorData::I64(extreme(v, &p, max, never)),
                TensorData::F16(v) => TensorData::F16(extreme(v, &p, max, |x: f16| x.is_nan())),
                TensorData::BF16(v) => TensorData::BF16(extreme(v, &p, max, |x: bf16| x.is_nan())),
                TensorData::F32(v) => TensorData::F32(extreme(v, &p, max, f32::is_nan)),
                TensorData::F64(v) => TensorData::F64(extreme(v, &p, max, f64::is_nan)),
            }
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            let max = op == ReduceOp::ArgMax;
            TensorData::I64(match data {
                TensorData::I32(v) => arg_extreme(v, &p, max, never),
                TensorData::I64(v) => arg_extreme(v, &p, max, never),
                TensorData::F16(v) => arg_extreme(v, &p, max, |x: f16| x.is_nan()),
                TensorData::BF16(v) => arg_extreme(v, &p, max, |x: bf16| x.is_nan()),
                TensorData::F32(v) => arg_extreme(v, &p, max, f32::is_nan),
                TensorData::F64(v) => arg_extreme(v, &p, max, f64::is_nan),
                TensorData::Bool(_) => return Err(unsupported(op.name(), data.dtype())),
            })
        }
    })
}

/// The NaN test of types without NaN.
fn never<T>(_: T) -> bool {
    false
}

/// Element `i` of bool or integer data as i64.
fn get_i64(data: &TensorData, i: usize) -> Option<i64> {
    match data {
        TensorData::Bool(v) => Some(v[i] as i64),
        TensorData::I32(v) => Some(v[i] as i64),
        TensorData::I64(v) => Some(v[i]),
        _ => None,
    }
}

/// f64 accumulators rounded once (to nearest-even) to the float dtype of `like`.
fn round_f64(acc: Vec<f64>, like: &TensorData) -> TensorData {
    match like {
        TensorData::F16(_) => TensorData::F16(acc.into_iter().map(f64_to_f16).collect()),
        TensorData::BF16(_) => TensorData::BF16(acc.into_iter().map(f64_to_bf16).collect()),
        TensorData::F32(_) => TensorData::F32(acc.into_iter().map(|x| x as f32).collect()),
        _ => TensorData::F64(acc),
    }
}

/// Whether `x` replaces the current extreme `cur`: a NaN is never replaced and always
/// replaces; otherwise only a strictly larger (smaller) value does, so the first one wins.
fn better<T: PartialOrd + Copy>(x: T, cur: T, max: bool, is_nan: &impl Fn(T) -> bool) -> bool {
    !is_nan(cur) && (is_nan(x) || if max { x > cur } else { x < cur })
}

fn extreme<T: Copy + PartialOrd + Default>(
    v: &[T],
    p: &Plan,
    max: bool,
    is_nan: impl Fn(T) -> bool,
) -> Vec<T> {
    let mut acc: Vec<Option<T>> = vec![None; p.slots];
    for (&x, &s) in v.iter().zip(&p.slot) {
        match acc[s] {
            Some(cur) if !better(x, cur, max, &is_nan) => {}
            _ => acc[s] = Some(x),
        }
    }
    // Every slot received an element: the typing rules reject reducing a zero-size axis.
    acc.into_iter().map(Option::unwrap_or_default).collect()
}

fn arg_extreme<T: Copy + PartialOrd>(
    v: &[T],
    p: &Plan,
    max: bool,
    is_nan: impl Fn(T) -> bool,
) -> Vec<i64> {
    let mut acc: Vec<Option<(T, usize)>> = vec![None; p.slots];
    for ((&x, &s), &c) in v.iter().zip(&p.slot).zip(&p.coord) {
        match acc[s] {
            Some((cur, _)) if !better(x, cur, max, &is_nan) => {}
            _ => acc[s] = Some((x, c)),
        }
    }
    acc.into_iter()
        .map(|o| o.map_or(0, |(_, c)| c as i64))
        .collect()
}
