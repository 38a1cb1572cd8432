//! Reductions over signed axes.
//!
//! Axes are Python-style (negative counts from the end); an empty axis list reduces every
//! axis, as PyTorch's `dim=[]`. Result dtypes follow PyTorch: `sum`/`prod` of integers and
//! bool give i64, `argmax`/`argmin` give i64, `max`/`min` keep the dtype. `mean` of an integer
//! or bool tensor is computed in f32 (PyTorch rejects it; smelt casts like other float-only
//! ops).

use crate::axes::reduce_axes;
use crate::error::Result;
use crate::tensor::Tensor;
use smelt_ir::{Op, ReduceOp};

impl Tensor {
    /// Reduction `op` over `axes` (see the module docs).
    pub fn reduce(&self, op: ReduceOp, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        let name = op.name();
        let v = self.value(name)?;
        let axes = reduce_axes(axes, name, &v.ty)?;
        let x = if op == ReduceOp::Mean {
            self.cast(v.ty.dtype.to_float())?
        } else {
            self.clone()
        };
        let id = x.value(name)?.id;
        x.emit(Op::Reduce {
            op,
            input: id,
            axes: axes.into_iter().collect(),
            keepdim,
        })
    }

    pub fn sum(&self, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axes, keepdim)
    }

    /// Arithmetic mean over `axes` (integers computed in f32).
    pub fn mean(&self, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axes, keepdim)
    }

    /// Maximum over `axes` (`torch.amax`; NaN propagates).
    pub fn max(&self, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axes, keepdim)
    }

    /// Minimum over `axes` (`torch.amin`).
    pub fn min(&self, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axes, keepdim)
    }

    pub fn prod(&self, axes: &[i64], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Prod, axes, keepdim)
    }

    /// Index of the maximum along one axis, as i64 (first occurrence).
    pub fn argmax(&self, axis: i64, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, &[axis], keepdim)
    }

    /// Index of the minimum along one axis, as i64.
    pub fn argmin(&self, axis: i64, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMin, &[axis], keepdim)
    }

    /// Sum of every element (0-d result).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&[], false)
    }

    pub fn mean_all(&self) -> Result<Tensor> {
        self.mean(&[], false)
    }

    pub fn max_all(&self) -> Result<Tensor> {
        self.max(&[], false)
    }

    pub fn min_all(&self) -> Result<Tensor> {
        self.min(&[], false)
    }

    pub fn prod_all(&self) -> Result<Tensor> {
        self.prod(&[], false)
    }

    /// Index of the maximum in the flattened tensor (`torch.argmax(x)`), 0-d i64.
    pub fn argmax_all(&self) -> Result<Tensor> {
        self.flatten()?.reduce(ReduceOp::ArgMax, &[0], false)
    }

    /// Index of the minimum in the flattened tensor, 0-d i64.
    pub fn argmin_all(&self) -> Result<Tensor> {
        self.flatten()?.reduce(ReduceOp::ArgMin, &[0], false)
    }
}
