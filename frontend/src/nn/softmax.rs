//! `softmax` and `log_softmax`, numerically stable (the maximum is subtracted first).

use super::{composite, opmath};
use crate::axes::axis;
use crate::error::Result;
use crate::tensor::Tensor;

impl Tensor {
    /// `torch.softmax(x, axis)`: `exp(x - max) / sum(exp(x - max))` along `axis`.
    ///
    /// Computed as PyTorch's CPU kernel computes it: `exp(x - max) * (1 / sum)`, one reciprocal
    /// per row and a multiplication per element (a division per element is several times
    /// slower; the two differ by at most two ulps).
    ///
    /// f16/bf16 are computed in f32 and rounded once at the end (see [`crate::nn`]). A row
    /// holding `+inf` or NaN gives NaN, as in PyTorch.
    pub fn softmax(&self, axis_: i64) -> Result<Tensor> {
        composite("softmax", || {
            let (x, a, out) = prepare(self, axis_, "softmax")?;
            let Some(a) = a else { return x.cast(out) };
            let m = x.max(&a, true)?;
            let e = x.sub(&m)?.exp()?;
            let s = e.sum(&a, true)?;
            e.mul(&s.reciprocal()?)?.cast(out)
        })
    }

    /// `torch.log_softmax(x, axis)`: `(x - max) - log(sum(exp(x - max)))` along `axis`.
    pub fn log_softmax(&self, axis_: i64) -> Result<Tensor> {
        composite("log_softmax", || {
            let (x, a, out) = prepare(self, axis_, "log_softmax")?;
            let Some(a) = a else { return x.cast(out) };
            let m = x.max(&a, true)?;
            let shifted = x.sub(&m)?;
            let lse = shifted.exp()?.sum(&a, true)?.log()?;
            shifted.sub(&lse)?.cast(out)
        })
    }
}

/// The input in its compute dtype, the axes to normalise over (`[axis]`, or `[]` for a 0-d
/// input, which is its own one-element row; `None` when the axis is empty and there is
/// nothing to compute) and the output dtype.
fn prepare(
    x: &Tensor,
    axis_: i64,
    op: &'static str,
) -> Result<(Tensor, Option<Vec<i64>>, smelt_ir::DType)> {
    let ty = x.value(op)?.ty.clone();
    let (compute, out) = opmath(ty.dtype);
    let a = if ty.shape.rank() == 0 {
        crate::axes::wrap(axis_, 1, op, &ty)?;
        Some(Vec::new())
    } else {
        let a = axis(&ty.shape, axis_, op, &ty)?;
        (ty.shape.dims()[a] > 0).then(|| vec![a as i64])
    };
    Ok((x.cast(compute)?, a, out))
}
