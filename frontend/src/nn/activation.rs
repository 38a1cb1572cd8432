//! `gelu` (exact and tanh forms) and `silu`.

use super::{composite, opmath};
use crate::error::Result;
use crate::tensor::Tensor;
use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, SQRT_2};

/// The `approximate` argument of `torch.nn.functional.gelu`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GeluApproximation {
    /// `x * 0.5 * (1 + erf(x / √2))` (PyTorch's `approximate='none'`).
    #[default]
    None,
    /// `0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 x³)))` (`approximate='tanh'`).
    Tanh,
}

impl Tensor {
    /// `torch.nn.functional.gelu`, with PyTorch's operation order (`x * 0.5 * (1 + erf(x *
    /// (1/√2)))`, and `0.5 * x * (1 + tanh(β (x + κ x³)))` with `β = √2 · (2/√π) · 0.5`,
    /// `κ = 0.044715`). f16/bf16 are computed in f32 and rounded once.
    pub fn gelu(&self, approximate: GeluApproximation) -> Result<Tensor> {
        composite("gelu", || {
            let (compute, out) = opmath(self.value("gelu")?.ty.dtype);
            let x = self.cast(compute)?;
            let y = match approximate {
                GeluApproximation::None => {
                    let cdf = x.mul(FRAC_1_SQRT_2)?.erf()?.add(1.0)?;
                    x.mul(0.5)?.mul(&cdf)?
                }
                GeluApproximation::Tanh => {
                    let beta = SQRT_2 * FRAC_2_SQRT_PI * 0.5;
                    let cube = x.mul(&x)?.mul(&x)?;
                    let inner = x.add(&cube.mul(0.044715)?)?.mul(beta)?;
                    x.mul(0.5)?.mul(&inner.tanh()?.add(1.0)?)?
                }
            };
            y.cast(out)
        })
    }

    /// `torch.nn.functional.silu` (swish): `x / (1 + exp(-x))`, PyTorch's formula; f16/bf16
    /// computed in f32.
    pub fn silu(&self) -> Result<Tensor> {
        composite("silu", || {
            let (compute, out) = opmath(self.value("silu")?.ty.dtype);
            let x = self.cast(compute)?;
            x.div(&x.neg()?.exp()?.add(1.0)?)?.cast(out)
        })
    }
}
