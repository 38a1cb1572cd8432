//! Shape ops: reshape, permute, expand, squeeze, slicing, padding and concatenation.
//!
//! Sizes and axes are signed and Python-style: negative axes count from the end, one `-1` in
//! a reshape is inferred, `-1` in an expand keeps the size, slice bounds are normalised and
//! clamped like Python slices.

use crate::axes::{axis, slice_bound, wrap};
use crate::error::{FrontendError, Result};
use crate::promote::{promoted, resolve};
use crate::tensor::{IntoScalar, Operand, Tensor};
use smelt_ir::{Op, SliceRange};
use std::borrow::Borrow;
use std::ops::{Bound, RangeBounds};

impl Tensor {
    /// Reshapes to `shape`, which may hold one `-1` (inferred from the element count).
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let v = self.value("reshape")?;
        let numel = v.ty.shape.numel();
        let bad = |message: String| FrontendError::invalid("reshape", message, &[&v.ty]);
        let mut inferred = None;
        let mut known = 1usize;
        let mut dims = Vec::with_capacity(shape.len());
        for (i, &d) in shape.iter().enumerate() {
            if d == -1 {
                if inferred.replace(i).is_some() {
                    return Err(bad(format!("only one size may be -1 in {shape:?}")));
                }
                dims.push(0);
            } else if d < 0 {
                return Err(bad(format!("invalid size {d} in {shape:?}")));
            } else {
                known = known.saturating_mul(d as usize);
                dims.push(d as usize);
            }
        }
        if let Some(i) = inferred {
            if known == 0 || numel % known != 0 {
                return Err(bad(format!(
                    "cannot reshape {numel} elements to {shape:?}: the -1 size is not determined"
                )));
            }
            dims[i] = numel / known;
        }
        self.reshape_to(&dims)
    }

    /// Reshapes to unsigned `dims` (no node if the shape is unchanged).
    pub(crate) fn reshape_to(&self, dims: &[usize]) -> Result<Tensor> {
        let v = self.value("reshape")?;
        if v.ty.shape.dims() == dims {
            return Ok(self.clone());
        }
        let id = v.id;
        let dims = dims.to_vec();
        self.emit(Op::Reshape {
            input: id,
            shape: dims.into(),
        })
    }

    /// Flattens to one dimension (a 0-d tensor becomes `[1]`).
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape(&[-1])
    }

    /// Reorders the axes: output axis `i` is input axis `perm[i]` (negative axes allowed).
    pub fn permute(&self, perm: &[i64]) -> Result<Tensor> {
        let v = self.value("permute")?;
        let rank = v.ty.shape.rank();
        let perm = perm
            .iter()
            .map(|&p| wrap(p, rank, "permute", &v.ty))
            .collect::<Result<Vec<usize>>>()?;
        let id = v.id;
        self.emit(Op::Permute {
            input: id,
            perm: perm.into_iter().collect(),
        })
    }

    /// Swaps axes `a` and `b`.
    pub fn transpose(&self, a: i64, b: i64) -> Result<Tensor> {
        let v = self.value("transpose")?;
        let (a, b) = (
            axis(&v.ty.shape, a, "transpose", &v.ty)?,
            axis(&v.ty.shape, b, "transpose", &v.ty)?,
        );
        let mut perm: Vec<i64> = (0..v.ty.shape.rank() as i64).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// `torch.Tensor.expand`: broadcasts size-1 axes to `shape` and may add leading axes; `-1`
    /// keeps an existing size.
    pub fn expand(&self, shape: &[i64]) -> Result<Tensor> {
        let v = self.value("expand")?;
        let (rank, n) = (v.ty.shape.rank(), shape.len());
        if n < rank {
            return Err(FrontendError::invalid(
                "expand",
                format!("{n} sizes given for a rank-{rank} tensor (need at least {rank})"),
                &[&v.ty],
            ));
        }
        let mut dims = Vec::with_capacity(n);
        for (i, &d) in shape.iter().enumerate() {
            dims.push(match (d, i.checked_sub(n - rank)) {
                (-1, Some(j)) => v.ty.shape.dims()[j],
                (d, _) if d >= 0 => d as usize,
                _ => {
                    return Err(FrontendError::invalid(
                        "expand",
                        format!("invalid size {d} at position {i} of {shape:?}"),
                        &[&v.ty],
                    ))
                }
            });
        }
        self.broadcast_to(&dims)
    }

    /// Broadcasts to `dims` (no node if the shape is unchanged).
    pub fn broadcast_to(&self, dims: &[usize]) -> Result<Tensor> {
        let v = self.value("expand")?;
        if v.ty.shape.dims() == dims {
            return Ok(self.clone());
        }
        let id = v.id;
        let dims = dims.to_vec();
        self.emit(Op::Expand {
            input: id,
            shape: dims.into(),
        })
    }

    /// Inserts a size-1 axis at `axis` (`-rank-1 <= axis <= rank`).
    pub fn unsqueeze(&self, axis: i64) -> Result<Tensor> {
        let v = self.value("unsqueeze")?;
        let a = wrap(axis, v.ty.shape.rank() + 1, "unsqueeze", &v.ty)?;
        let mut dims = v.ty.shape.dims().to_vec();
        dims.insert(a, 1);
        self.reshape_to(&dims)
    }

    /// Removes axis `axis` if its size is 1 (otherwise returns `self`, as PyTorch).
    pub fn squeeze(&self, axis: i64) -> Result<Tensor> {
        let v = self.value("squeeze")?;
        let a = wrap(axis, v.ty.shape.rank().max(1), "squeeze", &v.ty)?;
        let mut dims = v.ty.shape.dims().to_vec();
        if dims.get(a) == Some(&1) {
            dims.remove(a);
        }
        self.reshape_to(&dims)
    }

    /// Removes every size-1 axis.
    pub fn squeeze_all(&self) -> Result<Tensor> {
        let v = self.value("squeeze")?;
        let dims: Vec<usize> =
            v.ty.shape
                .dims()
                .iter()
                .copied()
                .filter(|&d| d != 1)
                .collect();
        self.reshape_to(&dims)
    }

    /// `x[..., range, ...]` on axis `axis`, with Python slice semantics: negative bounds count
    /// from the end and every bound is clamped into the axis (`x.slice(-1, ..-1)` drops the
    /// last element, `x.slice(0, 2..)` skips two).
    pub fn slice(&self, axis: i64, range: impl RangeBounds<i64>) -> Result<Tensor> {
        self.slice_step(axis, range, 1)
    }

    /// [`Tensor::slice`] with a step (`x[start:stop:step]`; `step >= 1`).
    pub fn slice_step(
        &self,
        axis_: i64,
        range: impl RangeBounds<i64>,
        step: usize,
    ) -> Result<Tensor> {
        let v = self.value("slice")?;
        let a = axis(&v.ty.shape, axis_, "slice", &v.ty)?;
        if step == 0 {
            return Err(FrontendError::invalid(
                "slice",
                "step must be at least 1",
                &[&v.ty],
            ));
        }
        let dim = v.ty.shape.dims()[a];
        // An inclusive bound `i` is the exclusive bound after the normalised `i`.
        let after = |i: i64| {
            (slice_bound(i, dim) + usize::from(i < dim as i64 && i >= -(dim as i64))).min(dim)
        };
        let start = match range.start_bound() {
            Bound::Included(&s) => slice_bound(s, dim),
            Bound::Excluded(&s) => after(s),
            Bound::Unbounded => 0,
        };
        let stop = match range.end_bound() {
            Bound::Excluded(&e) => slice_bound(e, dim),
            Bound::Included(&e) => after(e),
            Bound::Unbounded => dim,
        }
        .max(start);
        self.slice_ranges_at(a, SliceRange { start, stop, step })
    }

    /// `torch.narrow`: `length` elements from `start` (negative counts from the end) on `axis`;
    /// unlike [`Tensor::slice`], out-of-range bounds are an error.
    pub fn narrow(&self, axis_: i64, start: i64, length: usize) -> Result<Tensor> {
        let v = self.value("narrow")?;
        let a = axis(&v.ty.shape, axis_, "narrow", &v.ty)?;
        let dim = v.ty.shape.dims()[a];
        let s = if start < 0 { start + dim as i64 } else { start };
        if s < 0 || s as usize > dim || length > dim - s as usize {
            return Err(FrontendError::invalid(
                "narrow",
                format!("start {start} with length {length} is out of range for axis {axis_} of size {dim}"),
                &[&v.ty],
            ));
        }
        let start = s as usize;
        self.slice_ranges_at(
            a,
            SliceRange {
                start,
                stop: start + length,
                step: 1,
            },
        )
    }

    fn slice_ranges_at(&self, a: usize, range: SliceRange) -> Result<Tensor> {
        let v = self.value("slice")?;
        let mut ranges: Vec<SliceRange> =
            v.ty.shape
                .dims()
                .iter()
                .map(|&d| SliceRange::full(d))
                .collect();
        ranges[a] = range;
        let id = v.id;
        self.emit(Op::Slice {
            input: id,
            ranges: ranges.into_iter().collect(),
        })
    }

    /// Constant padding. `pads[i]` is `(before, after)` for one of the *last* `pads.len()`
    /// axes, in axis order (so `&[(1, 1)]` pads the last axis, and a full-rank list pads
    /// every axis). The value is converted to the tensor's dtype as by a cast.
    pub fn pad(&self, pads: &[(usize, usize)], value: impl IntoScalar) -> Result<Tensor> {
        let v = self.value("pad")?;
        let rank = v.ty.shape.rank();
        if pads.len() > rank {
            return Err(FrontendError::invalid(
                "pad",
                format!(
                    "{} (before, after) pairs given for a rank-{rank} tensor",
                    pads.len()
                ),
                &[&v.ty],
            ));
        }
        let mut all = vec![(0, 0); rank - pads.len()];
        all.extend_from_slice(pads);
        let (id, value) = (v.id, value.into_scalar());
        self.emit(Op::Pad {
            input: id,
            pads: all.into_iter().collect(),
            value,
        })
    }

    /// Concatenates `self` and `others` along `axis` (see [`concat()`]).
    pub fn cat<T: Borrow<Tensor>>(&self, others: &[T], axis: i64) -> Result<Tensor> {
        let mut all = vec![self.clone()];
        all.extend(others.iter().map(|t| t.borrow().clone()));
        concat(&all, axis)
    }
}

/// `torch.cat`: concatenates along `axis`; inputs are promoted to their common dtype.
pub fn concat<T: Borrow<Tensor>>(tensors: &[T], axis_: i64) -> Result<Tensor> {
    let operands: Vec<Operand> = tensors.iter().map(|t| Operand::from(t.borrow())).collect();
    let (owner, r) = resolve("concat", &operands)?;
    let first = &owner.value("concat")?.ty;
    let a = axis(&first.shape, axis_, "concat", first)?;
    let dtype = promoted(&r);
    let ids = r
        .iter()
        .map(|o| o.as_dtype(owner, dtype))
        .collect::<Result<Vec<_>>>()?;
    owner.emit(Op::Concat {
        inputs: ids.into_iter().collect(),
        axis: a,
    })
}
