//! `scaled_dot_product_attention`.

use super::{composite, opmath};
use crate::elementwise::where_;
use crate::error::{FrontendError, Result};
use crate::tensor::Tensor;
use smelt_ir::{DType, HostTensor, TensorData};

/// `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=…,
/// scale=…)` for `q: [..., L, E]`, `k: [..., S, E]`, `v: [..., S, Ev]` (batch axes broadcast)
/// giving `[..., L, Ev]`:
///
/// ```text
/// scores = q @ kᵀ * scale              (scale defaults to 1/√E)
/// scores = where(mask, scores, -inf)   (bool mask: true = attend, as in PyTorch)
///        | scores + mask               (float mask: additive, same dtype as q)
/// out    = softmax(scores, -1) @ v
/// ```
///
/// `is_causal` applies the lower-triangular `[L, S]` mask `j <= i` (top-left aligned, as in
/// PyTorch); it cannot be combined with `attn_mask`. The mask broadcasts against
/// `[..., L, S]`. Rows whose every score is masked give 0, as PyTorch's math backend does
/// (its `_safe_softmax`), rather than NaN. Following PyTorch's math backend, f16/bf16 inputs
/// are computed entirely in f32 and the output is cast back. `q`, `k` and `v` must share a
/// dtype.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attn_mask: Option<&Tensor>,
    is_causal: bool,
    scale: Option<f64>,
) -> Result<Tensor> {
    const OP: &str = "scaled_dot_product_attention";
    composite(OP, || {
        q.same_tracer(k, OP)?;
        q.same_tracer(v, OP)?;
        let (qt, kt, vt) = (&q.value(OP)?.ty, &k.value(OP)?.ty, &v.value(OP)?.ty);
        let bad = |message: &str| FrontendError::invalid(OP, message, &[qt, kt, vt]);
        if qt.shape.rank() < 2 || kt.shape.rank() < 2 || vt.shape.rank() < 2 {
            return Err(bad("q, k and v need at least 2 dimensions"));
        }
        if qt.dtype != kt.dtype || qt.dtype != vt.dtype {
            return Err(bad("q, k and v must have the same dtype"));
        }
        let (qd, kd, vd) = (qt.shape.dims(), kt.shape.dims(), vt.shape.dims());
        let (l, s, e) = (qd[qd.len() - 2], kd[kd.len() - 2], qd[qd.len() - 1]);
        if kd[kd.len() - 1] != e || vd[vd.len() - 2] != s {
            return Err(bad("need q [..., L, E], k [..., S, E] and v [..., S, Ev]"));
        }
        if is_causal && attn_mask.is_some() {
            return Err(bad("attn_mask cannot be combined with is_causal"));
        }
        let (compute, out) = opmath(qt.dtype);
        let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
        let (qc, kc, vc) = (q.cast(compute)?, k.cast(compute)?, v.cast(compute)?);
        let mut scores = qc.matmul(&kc.transpose(-2, -1)?)?.mul(scale)?;
        if is_causal {
            let keep: Vec<bool> = (0..l * s).map(|i| i % s.max(1) <= i / s.max(1)).collect();
            let mask = HostTensor::new([l, s], TensorData::Bool(keep))?;
            scores = where_(&q.tracer().constant(mask)?, &scores, f64::NEG_INFINITY)?;
        }
        if let Some(m) = attn_mask {
            q.same_tracer(m, OP)?;
            let mt = &m.value(OP)?.ty;
            scores = match mt.dtype {
                DType::Bool => where_(m, &scores, f64::NEG_INFINITY)?,
                d if d == qt.dtype => scores.add(&m.cast(compute)?)?,
                _ => {
                    return Err(FrontendError::invalid(
                        OP,
                        "attn_mask must be bool or have the dtype of q",
                        &[qt, mt],
                    ))
                }
            };
        }
        let mut probs = scores.softmax(-1)?;
        if s > 0 {
            let masked_row = scores.max(&[-1], true)?.eq(f64::NEG_INFINITY)?;
            probs = where_(&masked_row, 0.0, &probs)?;
        }
        probs.matmul(&vc)?.cast(out)
    })
}
