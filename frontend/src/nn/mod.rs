//! Composite ops, decomposed into primitives as `torch.nn.functional` defines them.
//!
//! | op | decomposition |
//! |---|---|
//! | [`crate::Tensor::softmax`] | `e = exp(x - max(x)); e / sum(e)` |
//! | [`crate::Tensor::log_softmax`] | `(x - max(x)) - log(sum(exp(x - max(x))))` |
//! | [`layer_norm`] | `(x - mean) * rsqrt(var + eps) * weight + bias`, biased variance |
//! | [`rms_norm`] | `x * rsqrt(mean(x²) + eps)`, cast back, then `* weight` |
//! | [`crate::Tensor::gelu`] | `x * 0.5 * (1 + erf(x / √2))` or the tanh form |
//! | [`crate::Tensor::silu`] | `x / (1 + exp(-x))` |
//! | [`crate::Tensor::var`], [`crate::Tensor::std`] | `sum((x - mean)²) / max(0, N - correction)` |
//! | [`linear`] | `x @ weightᵀ + bias` |
//! | [`embedding`] | `index_select(weight, 0, flatten(ids))` reshaped |
//! | [`scaled_dot_product_attention`] | `softmax(q @ kᵀ * scale + mask) @ v` |
//!
//! **Half precision.** Like PyTorch's kernels, which compute half-precision inputs in their
//! "opmath" type, every composite except `linear` and `embedding` casts f16 and bf16 inputs
//! to f32, computes in f32, and casts the result back to the input dtype (one rounding at the
//! end). `linear` stays in the input dtype (its matmul accumulates as the IR defines).
//! Integer and bool inputs are computed in f32 and give f32 (PyTorch rejects most of them).
//!
//! Errors raised inside a composite are wrapped in [`crate::FrontendError::InComposite`]
//! naming the composite; argument checks (shapes of weights, axes) are done up front.

mod activation;
mod attention;
mod linear;
mod norm;
mod softmax;
mod stats;

pub use activation::GeluApproximation;
pub use attention::scaled_dot_product_attention;
pub use linear::{embedding, linear};
pub use norm::{layer_norm, rms_norm};

use crate::error::Result;
use smelt_ir::DType;

/// `(compute dtype, output dtype)` of a composite on `dtype`: half precision is computed in
/// f32 (PyTorch's opmath type), integers and bool in f32 with an f32 result.
pub(crate) fn opmath(dtype: DType) -> (DType, DType) {
    let out = dtype.to_float();
    let compute = match out {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    (compute, out)
}

/// Runs the body of composite `op`, naming it in any error.
pub(crate) fn composite<T>(op: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    body().map_err(|e| e.in_composite(op))
}
