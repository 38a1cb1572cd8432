//! Reduction stages of [`eval_program`](super::eval_program): each outer index combines its
//! inner iterations in order, in the accumulator dtype.

use super::ir::Combiner;
use smelt_ir::{DType, TensorData};

/// Whether `x` replaces the current extreme `cur` of an arg reduction: a NaN is never replaced
/// and always replaces; otherwise only a strictly larger (smaller) value does.
fn better<T: PartialOrd + Copy>(x: T, cur: T, max: bool, nan: impl Fn(T) -> bool) -> bool {
    !nan(cur) && (nan(x) || if max { x > cur } else { x < cur })
}

/// NaN-propagating max/min step.
fn extreme_f<T: num_like::Float>(acc: T, x: T, max: bool) -> T {
    if acc.nan() {
        acc
    } else if x.nan() || (max && x > acc) || (!max && x < acc) {
        x
    } else {
        acc
    }
}

mod num_like {
    pub trait Float: Copy + PartialOrd {
        fn nan(self) -> bool;
    }
    impl Float for f32 {
        fn nan(self) -> bool {
            self.is_nan()
        }
    }
    impl Float for f64 {
        fn nan(self) -> bool {
            self.is_nan()
        }
    }
}

fn rows<T: Copy>(v: &[T], outer: usize, inner: usize) -> impl Iterator<Item = &[T]> {
    (0..outer).map(move |o| &v[o * inner..(o + 1) * inner])
}

fn arg<T: Copy + PartialOrd>(
    v: &[T],
    outer: usize,
    inner: usize,
    max: bool,
    nan: impl Fn(T) -> bool + Copy,
) -> TensorData {
    TensorData::I64(
        rows(v, outer, inner)
            .map(|row| {
                let mut best: Option<(T, usize)> = None;
                for (i, &x) in row.iter().enumerate() {
                    match best {
                        Some((cur, _)) if !better(x, cur, max, nan) => {}
                        _ => best = Some((x, i)),
                    }
                }
                best.map_or(0, |(_, i)| i as i64)
            })
            .collect(),
    )
}

/// Reduces `v` (`outer * inner` values of dtype `acc`, row-major) over its inner iterations.
pub(super) fn reduce(
    v: &TensorData,
    combiner: Combiner,
    acc: DType,
    outer: usize,
    inner: usize,
) -> Result<TensorData, String> {
    if v.dtype() != acc {
        return Err(format!(
            "reduces a {} value into a {acc} accumulator",
            v.dtype()
        ));
    }
    if v.len() != outer * inner {
        return Err("reduction column has the wrong length".into());
    }
    use Combiner::*;
    let max = matches!(combiner, Max | ArgMax);
    Ok(match (v, combiner) {
        (TensorData::F32(x), Sum) => TensorData::F32(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(0.0f32, |a, &b| a + b))
                .collect(),
        ),
        (TensorData::F32(x), Prod) => TensorData::F32(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(1.0f32, |a, &b| a * b))
                .collect(),
        ),
        (TensorData::F64(x), Sum) => TensorData::F64(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(0.0f64, |a, &b| a + b))
                .collect(),
        ),
        (TensorData::F64(x), Prod) => TensorData::F64(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(1.0f64, |a, &b| a * b))
                .collect(),
        ),
        (TensorData::I64(x), Sum) => TensorData::I64(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(0i64, |a, &b| a.wrapping_add(b)))
                .collect(),
        ),
        (TensorData::I64(x), Prod) => TensorData::I64(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(1i64, |a, &b| a.wrapping_mul(b)))
                .collect(),
        ),
        (TensorData::I32(x), Sum) => TensorData::I32(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(0i32, |a, &b| a.wrapping_add(b)))
                .collect(),
        ),
        (TensorData::I32(x), Prod) => TensorData::I32(
            rows(x, outer, inner)
                .map(|r| r.iter().fold(1i32, |a, &b| a.wrapping_mul(b)))
                .collect(),
        ),
        (TensorData::F32(x), Max | Min) => {
            let id = if max {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
            TensorData::F32(
                rows(x, outer, inner)
                    .map(|r| r.iter().fold(id, |a, &b| extreme_f(a, b, max)))
                    .collect(),
            )
        }
        (TensorData::F64(x), Max | Min) => {
            let id = if max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            TensorData::F64(
                rows(x, outer, inner)
                    .map(|r| r.iter().fold(id, |a, &b| extreme_f(a, b, max)))
                    .collect(),
            )
        }
        (TensorData::I64(x), Max | Min) => TensorData::I64(
            rows(x, outer, inner)
                .map(|r| {
                    r.iter()
                        .fold(if max { i64::MIN } else { i64::MAX }, |a, &b| {
                            if max {
                                a.max(b)
                            } else {
                                a.min(b)
                            }
                        })
                })
                .collect(),
        ),
        (TensorData::I32(x), Max | Min) => TensorData::I32(
            rows(x, outer, inner)
                .map(|r| {
                    r.iter()
                        .fold(if max { i32::MIN } else { i32::MAX }, |a, &b| {
                            if max {
                                a.max(b)
                            } else {
                                a.min(b)
                            }
                        })
                })
                .collect(),
        ),
        (TensorData::F32(x), ArgMax | ArgMin) => arg(x, outer, inner, max, f32::is_nan),
        (TensorData::F64(x), ArgMax | ArgMin) => arg(x, outer, inner, max, f64::is_nan),
        (TensorData::I64(x), ArgMax | ArgMin) => arg(x, outer, inner, max, |_| false),
        (TensorData::I32(x), ArgMax | ArgMin) => arg(x, outer, inner, max, |_| false),
        _ => return Err(format!("no {combiner} reduction in a {acc} accumulator")),
    })
}
