//! `layer_norm` and `rms_norm` over the trailing `normalized_shape` axes.

use super::{composite, opmath};
use crate::error::{FrontendError, Result};
use crate::tensor::Tensor;
use smelt_ir::{DType, TensorType};

/// `torch.nn.functional.layer_norm`: normalises over the last `normalized_shape.len()` axes,
/// whose sizes must equal `normalized_shape`:
/// `(x - mean) * rsqrt(var + eps) * weight + bias`, with the biased variance (divided by `N`).
/// `weight` and `bias`, when given, must have shape `normalized_shape`. PyTorch's usual `eps`
/// is `1e-5`. f16/bf16 inputs are computed in f32 (weight and bias too) and the result is cast
/// back to the input dtype.
pub fn layer_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    composite("layer_norm", || {
        let ty = x.value("layer_norm")?.ty.clone();
        let axes = trailing_axes("layer_norm", &ty, normalized_shape)?;
        for (what, t) in [("weight", weight), ("bias", bias)] {
            if let Some(t) = t {
                check_affine("layer_norm", what, x, t, normalized_shape)?;
            }
        }
        let (compute, out) = opmath(ty.dtype);
        let xc = x.cast(compute)?;
        let centered = xc.sub(&xc.mean(&axes, true)?)?;
        let var = centered.mul(&centered)?.mean(&axes, true)?;
        let mut y = centered.mul(&var.add(eps)?.rsqrt()?)?;
        if let Some(w) = weight {
            y = y.mul(&w.cast(compute)?)?;
        }
        if let Some(b) = bias {
            y = y.add(&b.cast(compute)?)?;
        }
        y.cast(out)
    })
}

/// `torch.nn.functional.rms_norm`: `x * rsqrt(mean(x², trailing axes) + eps)`, computed in
/// f32 for f16/bf16 inputs and cast back to the input dtype, then multiplied by `weight`
/// (promoting as `*` does), exactly in PyTorch's order.
///
/// `eps = None` means the machine epsilon of the compute dtype (`f32::EPSILON`, or
/// `f64::EPSILON` for f64 inputs), as PyTorch. Like PyTorch, an explicit `eps` is first
/// rounded to the input's dtype.
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    composite("rms_norm", || {
        let ty = x.value("rms_norm")?.ty.clone();
        let axes = trailing_axes("rms_norm", &ty, normalized_shape)?;
        if let Some(w) = weight {
            check_affine("rms_norm", "weight", x, w, normalized_shape)?;
        }
        let (compute, out) = opmath(ty.dtype);
        let eps = match eps {
            None if compute == DType::F64 => f64::EPSILON,
            None => f64::from(f32::EPSILON),
            Some(e) => round_to(e, out),
        };
        let xc = x.cast(compute)?;
        let ms = xc.mul(&xc)?.mean(&axes, true)?;
        let y = xc.mul(&ms.add(eps)?.rsqrt()?)?.cast(out)?;
        match weight {
            Some(w) => y.mul(w),
            None => Ok(y),
        }
    })
}

/// `e` rounded to `dtype` (through f32 for half precision, as C++'s `Half(double)`).
fn round_to(e: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f32(e as f32).to_f64(),
        DType::BF16 => half::bf16::from_f32(e as f32).to_f64(),
        DType::F32 => f64::from(e as f32),
        _ => e,
    }
}

/// The trailing axes matching `normalized_shape`, as signed axes.
fn trailing_axes(
    op: &'static str,
    ty: &TensorType,
    normalized_shape: &[usize],
) -> Result<Vec<i64>> {
    let (k, rank) = (normalized_shape.len(), ty.shape.rank());
    if k == 0 || k > rank || ty.shape.dims()[rank - k..] != *normalized_shape {
        return Err(FrontendError::invalid(
            op,
            format!("normalized_shape {normalized_shape:?} must be non-empty and equal the input's trailing sizes"),
            &[ty],
        ));
    }
    Ok((rank - k..rank).map(|a| a as i64).collect())
}

fn check_affine(
    op: &'static str,
    what: &str,
    x: &Tensor,
    t: &Tensor,
    normalized_shape: &[usize],
) -> Result<()> {
    x.same_tracer(t, op)?;
    let ty = t.value(op)?.ty.clone();
    if ty.shape.dims() != normalized_shape {
        return Err(FrontendError::invalid(
            op,
            format!("{what} must have shape {normalized_shape:?}"),
            &[&x.value(op)?.ty, &ty],
        ));
    }
    Ok(())
}
