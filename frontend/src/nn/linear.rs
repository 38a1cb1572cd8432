//! `linear` and `embedding`.

use super::composite;
use crate::error::{FrontendError, Result};
use crate::tensor::Tensor;

/// `torch.nn.functional.linear`: `x @ weightᵀ + bias` with `weight` of shape
/// `[out_features, in_features]` and `bias` of shape `[out_features]`. Computed in the input
/// dtype (the matmul needs `x` and `weight` to share it, as in PyTorch).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    composite("linear", || {
        x.same_tracer(weight, "linear")?;
        let (xt, wt) = (&x.value("linear")?.ty, &weight.value("linear")?.ty);
        let ok = wt.shape.rank() == 2
            && xt.shape.rank() >= 1
            && xt.shape.dims().last() == wt.shape.dims().get(1);
        if !ok {
            return Err(FrontendError::invalid(
                "linear",
                "weight must be [out_features, in_features] with in_features = the input's last size",
                &[xt, wt],
            ));
        }
        if let Some(b) = bias {
            x.same_tracer(b, "linear")?;
            let bt = &b.value("linear")?.ty;
            if bt.shape.dims() != [wt.shape.dims()[0]] {
                return Err(FrontendError::invalid(
                    "linear",
                    "bias must be [out_features]",
                    &[xt, wt, bt],
                ));
            }
        }
        let y = x.matmul(&weight.transpose(0, 1)?)?;
        match bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    })
}

/// `torch.nn.functional.embedding(ids, weight)`: rows of `weight` (`[num_embeddings, dim]`)
/// selected by the integer `ids` of any shape; the result has shape `ids.shape + [dim]`.
pub fn embedding(ids: &Tensor, weight: &Tensor) -> Result<Tensor> {
    composite("embedding", || {
        ids.same_tracer(weight, "embedding")?;
        let (it, wt) = (
            ids.value("embedding")?.ty.clone(),
            weight.value("embedding")?.ty.clone(),
        );
        if wt.shape.rank() != 2 || !it.dtype.is_int() {
            return Err(FrontendError::invalid(
                "embedding",
                "weight must be 2-D and ids i32 or i64",
                &[&it, &wt],
            ));
        }
        let rows = weight.index_select(0, &ids.flatten()?)?;
        let mut dims = it.shape.dims().to_vec();
        dims.push(wt.shape.dims()[1]);
        rows.reshape_to(&dims)
    })
}
