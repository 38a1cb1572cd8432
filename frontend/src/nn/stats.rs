//! `var` and `std` with PyTorch's `correction` (Bessel's correction by default).

use super::{composite, opmath};
use crate::axes::reduce_axes;
use crate::error::Result;
use crate::tensor::Tensor;

impl Tensor {
    /// `torch.var(x, axes, correction=…, keepdim=…)`: `sum((x - mean)²) / max(0, N - correction)`
    /// where `N` is the number of reduced elements; `correction` defaults to 1 (the unbiased
    /// estimator; 0 gives the population variance). An empty `axes` reduces every axis. A
    /// non-positive `N - correction` divides by zero (inf or NaN), as in PyTorch.
    pub fn var(&self, axes: &[i64], correction: Option<f64>, keepdim: bool) -> Result<Tensor> {
        composite("var", || {
            let ty = self.value("var")?.ty.clone();
            let axes = reduce_axes(axes, "var", &ty)?;
            let n: usize = axes.iter().map(|&a| ty.shape.dims()[a]).product();
            let denom = (n as f64 - correction.unwrap_or(1.0)).max(0.0);
            // Normalised axes; empty only for a 0-d input, where the reductions are identities.
            let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
            let (compute, out) = opmath(ty.dtype);
            let x = self.cast(compute)?;
            let d = x.sub(&x.mean(&axes, true)?)?;
            let ss = d.mul(&d)?.sum(&axes, keepdim)?;
            ss.div(denom)?.cast(out)
        })
    }

    /// `torch.std`: the square root of [`Tensor::var`].
    pub fn std(&self, axes: &[i64], correction: Option<f64>, keepdim: bool) -> Result<Tensor> {
        composite("std", || self.var(axes, correction, keepdim)?.sqrt())
    }
}
