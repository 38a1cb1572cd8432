//! Matrix multiplication and indexing primitives (no type promotion, as in PyTorch).

use crate::axes::axis;
use crate::error::Result;
use crate::tensor::Tensor;
use smelt_ir::Op;

impl Tensor {
    /// `torch.matmul`: 1-D operands are vectors, leading axes are batch axes and broadcast.
    /// Both operands must have the same dtype (PyTorch does not promote here either).
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.same_tracer(rhs, "matmul")?;
        let (a, b) = (self.value("matmul")?.id, rhs.value("matmul")?.id);
        self.emit(Op::MatMul(a, b))
    }

    /// `torch.gather(self, axis, index)`: `index` (i32 or i64) has the rank of `self`; the
    /// result has the shape of `index`.
    pub fn gather(&self, axis_: i64, index: &Tensor) -> Result<Tensor> {
        self.same_tracer(index, "gather")?;
        let v = self.value("gather")?;
        let a = axis(&v.ty.shape, axis_, "gather", &v.ty)?;
        let (x, i) = (v.id, index.value("gather")?.id);
        self.emit(Op::Gather {
            input: x,
            index: i,
            axis: a,
        })
    }

    /// `torch.index_select(self, axis, index)`: `index` is a 1-D i32 or i64 tensor.
    pub fn index_select(&self, axis_: i64, index: &Tensor) -> Result<Tensor> {
        self.same_tracer(index, "index_select")?;
        let v = self.value("index_select")?;
        let a = axis(&v.ty.shape, axis_, "index_select", &v.ty)?;
        let (x, i) = (v.id, index.value("index_select")?.id);
        self.emit(Op::IndexSelect {
            input: x,
            index: i,
            axis: a,
        })
    }
}
