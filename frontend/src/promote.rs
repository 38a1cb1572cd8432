//! PyTorch's type promotion (`torch.result_type`), applied by inserting casts.
//!
//! Operands fall into three tiers: tensors with at least one dimension, 0-d tensors, and
//! scalars. The result starts as [`DType::promote`] of the dimensioned tensors; a higher
//! *category* (bool < int < float) among 0-d tensors overrides it with their promoted dtype;
//! a higher category among scalars overrides it with that category's default dtype (i64 or
//! f32), see [`DType::promote_with_scalar`]. Inside a category, 0-d tensors and scalars never
//! widen the result: `f16[3] + 1.0` and `f16[3] + f32[]` are f16, `i32[3] + 2` is i32, while
//! `f16[3] + f32[3]` is f32 and `i32[3] + 2.5` is f32.

use crate::error::{FrontendError, Result};
use crate::tensor::{Operand, Tensor, Value};
use smelt_ir::graph::scalar_tensor;
use smelt_ir::{Category, DType, NodeId, Op, Scalar};

/// `torch.result_type`: the dtype an elementwise op of `operands` computes in (before the
/// op-specific rules: true division and float-only ops turn integers into f32, comparisons
/// return bool). Errors if there is no tensor operand, the tensors come from two tracers or
/// one is poisoned.
pub fn result_type(operands: &[Operand]) -> Result<DType> {
    let (_, r) = resolve("result_type", operands)?;
    Ok(promoted(&r))
}

/// [`result_type`] of checked operands.
pub(crate) fn promoted(operands: &[Resolved<'_>]) -> DType {
    let mut dimmed: Option<DType> = None;
    let mut zero_dim: Option<DType> = None;
    let mut scalar: Option<Category> = None;
    for o in operands {
        match o {
            Resolved::Tensor(_, v) if v.ty.shape.rank() > 0 => {
                dimmed = Some(dimmed.map_or(v.ty.dtype, |d| d.promote(v.ty.dtype)));
            }
            Resolved::Tensor(_, v) => {
                zero_dim = Some(zero_dim.map_or(v.ty.dtype, |d| d.promote(v.ty.dtype)));
            }
            Resolved::Scalar(s) => {
                scalar = Some(scalar.map_or(s.category(), |c| c.max(s.category())));
            }
        }
    }
    let mut result = dimmed;
    if let Some(z) = zero_dim {
        result = match result {
            Some(d) if d.category() >= z.category() => Some(d),
            _ => Some(z),
        };
    }
    match (result, scalar) {
        (Some(d), Some(c)) => d.promote_with_scalar(c),
        (Some(d), None) => d,
        (None, Some(c)) => DType::Bool.promote_with_scalar(c),
        // Callers always pass at least one operand.
        (None, None) => DType::F32,
    }
}

/// An operand whose tracer and poison state have been checked.
pub(crate) enum Resolved<'a> {
    Tensor(&'a Tensor, &'a Value),
    Scalar(Scalar),
}

impl Resolved<'_> {
    /// The node holding this operand as `dtype`: a cast for a tensor of another dtype, a 0-d
    /// constant for a scalar.
    pub(crate) fn as_dtype(&self, owner: &Tensor, dtype: DType) -> Result<NodeId> {
        match self {
            Resolved::Tensor(_, v) if v.ty.dtype == dtype => Ok(v.id),
            Resolved::Tensor(t, v) => {
                let id = v.id;
                let c = t.emit(Op::Cast {
                    input: id,
                    to: dtype,
                })?;
                Ok(c.value("cast")?.id)
            }
            Resolved::Scalar(s) => {
                let s = *s;
                let c = owner.emit(Op::Constant(scalar_tensor(s, dtype)))?;
                Ok(c.value("const")?.id)
            }
        }
    }
}

/// Checks the operands of one op: every tensor comes from one tracer and none is poisoned.
/// Returns the first tensor (the op's owner) and the resolved operands.
pub(crate) fn resolve<'a>(
    op: &'static str,
    operands: &'a [Operand],
) -> Result<(&'a Tensor, Vec<Resolved<'a>>)> {
    let owner = operands
        .iter()
        .find_map(|o| match o {
            Operand::Tensor(t) => Some(t),
            Operand::Scalar(_) => None,
        })
        .ok_or_else(|| FrontendError::invalid(op, "needs at least one tensor operand", &[]))?;
    let mut out = Vec::with_capacity(operands.len());
    for o in operands {
        out.push(match o {
            Operand::Tensor(t) => {
                owner.same_tracer(t, op)?;
                Resolved::Tensor(t, t.value(op)?)
            }
            Operand::Scalar(s) => Resolved::Scalar(*s),
        });
    }
    Ok((owner, out))
}
