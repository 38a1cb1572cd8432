//! `torch.matmul`: 1-D operands, batched operands and broadcast batch dims.
//!
//! A 1-D left operand is treated as `[1, k]` and a 1-D right operand as `[k, 1]`; the added dim
//! is absent from the output, which leaves the row-major order of the result unchanged. Floats
//! accumulate in f64 and round once at the end (f16 and bf16 included); integers accumulate in
//! wrapping i64 and are then narrowed (which equals wrapping arithmetic in i32). `k = 0` gives
//! zeros.

use super::cast::{f64_to_bf16, f64_to_f16};
use super::layout::broadcast_map;
use super::{unsupported, EvalError};
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};

/// Operand dims as a matrix stack: `(batch dims, rows, cols)`.
fn as_matrices(dims: &[usize], left: bool) -> Option<(Shape, usize, usize)> {
    match dims {
        [] => None,
        [k] if left => Some((Shape::scalar(), 1, *k)),
        [k] => Some((Shape::scalar(), *k, 1)),
        [batch @ .., r, c] => Some((Shape::new(batch), *r, *c)),
    }
}

/// The product of `x` and `y` in row-major order of the output.
pub(super) fn matmul(x: &HostTensor, y: &HostTensor) -> Result<TensorData, EvalError> {
    let bad = || unsupported("matmul", x.dtype());
    let (xb, m, k) = as_matrices(x.shape().dims(), true).ok_or_else(bad)?;
    let (yb, k2, n) = as_matrices(y.shape().dims(), false).ok_or_else(bad)?;
    let batch = xb.broadcast(&yb).ok_or_else(bad)?;
    if k != k2 {
        return Err(bad());
    }
    let plan = Plan {
        bx: broadcast_map(&xb, &batch),
        by: broadcast_map(&yb, &batch),
        m,
        k,
        n,
    };
    let (xd, yd) = (x.data(), y.data());
    Ok(match xd {
        TensorData::F16(_) | TensorData::BF16(_) | TensorData::F32(_) | TensorData::F64(_) => {
            let xv: Vec<f64> = (0..xd.len()).map(|i| xd.get_f64(i)).collect();
            let yv: Vec<f64> = (0..yd.len()).map(|i| yd.get_f64(i)).collect();
            let acc = plan.run(&xv, &yv, 0.0, |s, a, b| s + a * b);
            match xd {
                TensorData::F16(_) => TensorData::F16(acc.into_iter().map(f64_to_f16).collect()),
                TensorData::BF16(_) => TensorData::BF16(acc.into_iter().map(f64_to_bf16).collect()),
                TensorData::F32(_) => TensorData::F32(acc.into_iter().map(|v| v as f32).collect()),
                _ => TensorData::F64(acc),
            }
        }
        TensorData::I32(_) | TensorData::I64(_) => {
            let (Some(xv), Some(yv)) = (ints(xd), ints(yd)) else {
                return Err(bad());
            };
            let acc = plan.run(&xv, &yv, 0, |s, a, b| s.wrapping_add(a.wrapping_mul(b)));
            match xd {
                TensorData::I32(_) => TensorData::I32(acc.into_iter().map(|v| v as i32).collect()),
                _ => TensorData::I64(acc),
            }
        }
        TensorData::Bool(_) => return Err(bad()),
    })
}

fn ints(d: &TensorData) -> Option<Vec<i64>> {
    match d {
        TensorData::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
        TensorData::I64(v) => Some(v.clone()),
        _ => None,
    }
}

/// A batched product: for each output batch, the operand batch each operand reads.
struct Plan {
    bx: Vec<usize>,
    by: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
}

impl Plan {
    /// `out[b, i, j] = sum_p x[bx[b], i, p] * y[by[b], p, j]`, summed in order of `p` with `fma`.
    fn run<T: Copy>(&self, x: &[T], y: &[T], zero: T, fma: impl Fn(T, T, T) -> T) -> Vec<T> {
        let (m, k, n) = (self.m, self.k, self.n);
        let mut out = Vec::with_capacity(self.bx.len() * m * n);
        for (&bx, &by) in self.bx.iter().zip(&self.by) {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = zero;
                    for p in 0..k {
                        acc = fma(acc, x[(bx * m + i) * k + p], y[(by * k + p) * n + j]);
                    }
                    out.push(acc);
                }
            }
        }
        out
    }
}
