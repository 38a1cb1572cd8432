//! Concat, pad and gather in a loop body: selects between clamped loads.
//!
//! - **concat**: part `k` covers `start_k <= i < start_k + len_k` of the concat axis; each part
//!   is read at its local index clamped into range (so every load is in bounds whatever the
//!   lane), and a chain of `Select(i < end_k, part_k, rest)` picks the value;
//! - **pad**: per padded axis `lo <= i < lo + dim`, the input read at the clamped local index,
//!   `Select(inside, value, fill)`;
//! - **gather / index_select**: the index value is range-checked in its own dtype; an index
//!   outside `0..size` replaces the load's address by -1 (an out-of-bounds load, which
//!   `eval_program` reports as an error and backends must not perform unchecked).

use super::body::{err, BodyBuilder};
use super::index::{Idx, Ix};
use super::ir::{InstOp, Ty, ValueId};
use crate::PassError;
use smelt_ir::{BinaryOp, DType, NodeId, Scalar};

impl BodyBuilder<'_> {
    pub(super) fn concat(
        &mut self,
        inputs: &[NodeId],
        axis: usize,
        idx: &Idx,
        out: &[usize],
        dt: DType,
    ) -> Result<ValueId, PassError> {
        let ix = self.dims_of(idx, out);
        let i = ix[axis].clone();
        let mut parts = Vec::new();
        let mut start = 0i64;
        for &p in inputs {
            let len = self.graph.ty(p).shape.dims()[axis] as i64;
            if len > 0 {
                parts.push((p, start, len));
            }
            start += len;
        }
        if parts.is_empty() {
            return Ok(self.constant(Scalar::Int(0), dt));
        }
        let single = parts.len() == 1;
        let mut acc: Option<ValueId> = None;
        for (k, &(p, s, len)) in parts.iter().enumerate().rev() {
            let neg = self.konst(-s);
            let mut local = self.add(&i, &neg);
            if !single {
                let zero = self.konst(0);
                if k + 1 < parts.len() {
                    let c = self.lt(&i, s + len);
                    local = self.select_ix(c, &local, &zero);
                }
                if k > 0 {
                    let c = self.lt(&i, s);
                    local = self.select_ix(c, &zero, &local);
                }
            }
            let mut pix = ix.clone();
            pix[axis] = local;
            let v = self.value(p, &Idx::Dims(pix))?;
            acc = Some(match acc {
                None => v,
                Some(rest) => {
                    let c = self.lt(&i, s + len);
                    self.emit(Ty::Data(dt), InstOp::Select(c, v, rest))
                }
            });
        }
        acc.ok_or_else(|| err("concat without parts"))
    }

    pub(super) fn pad(
        &mut self,
        input: NodeId,
        pads: &[(usize, usize)],
        fill: Scalar,
        idx: &Idx,
        out: &[usize],
        dt: DType,
    ) -> Result<ValueId, PassError> {
        let dims = self.dims(input);
        if dims.contains(&0) {
            return Ok(self.constant(fill, dt));
        }
        let ix = self.dims_of(idx, out);
        let mut ok: Option<ValueId> = None;
        let mut local = Vec::with_capacity(ix.len());
        for (k, i) in ix.iter().enumerate() {
            let (lo, hi) = pads[k];
            let neg = self.konst(-(lo as i64));
            let mut l = self.add(i, &neg);
            let mut ok_ax: Option<ValueId> = None;
            if lo > 0 {
                let c = self.gt(i, lo as i64 - 1);
                ok_ax = Some(c);
            }
            if hi > 0 {
                let c = self.lt(i, (lo + dims[k]) as i64);
                ok_ax = Some(self.and(ok_ax, c));
            }
            if let Some(c) = ok_ax {
                let zero = self.konst(0);
                l = self.select_ix(c, &l, &zero);
                ok = Some(self.and(ok, c));
            }
            local.push(l);
        }
        let v = self.value(input, &Idx::Dims(local))?;
        Ok(match ok {
            None => v,
            Some(c) => {
                let f = self.constant(fill, dt);
                self.emit(Ty::Data(dt), InstOp::Select(c, v, f))
            }
        })
    }

    /// `input` at `ix` with component `axis` replaced by the gathered index value `iv`; an
    /// index outside `0..size` poisons the load's address (-1, an out-of-bounds load).
    pub(super) fn gathered(
        &mut self,
        input: NodeId,
        mut ix: Vec<Ix>,
        axis: usize,
        iv: ValueId,
    ) -> Result<ValueId, PassError> {
        let size = self.graph.ty(input).shape.dims()[axis] as i64;
        let vdt = self.index_dtype(iv)?;
        let zero = self.constant(Scalar::Int(0), vdt);
        let sz = self.constant(Scalar::Int(size), vdt);
        let ge = self.emit(
            Ty::Data(DType::Bool),
            InstOp::Binary(BinaryOp::Ge, iv, zero),
        );
        let lt = self.emit(Ty::Data(DType::Bool), InstOp::Binary(BinaryOp::Lt, iv, sz));
        let ok = self.and(Some(ge), lt);
        let i = self.emit(Ty::Index, InstOp::ToIndex(iv));
        ix[axis] = Ix::Val(i);
        let saved = self.guard.replace(ok);
        let v = self.value(input, &Idx::Dims(ix));
        self.guard = saved;
        v
    }

    fn index_dtype(&self, v: ValueId) -> Result<DType, PassError> {
        match self.insts.iter().rev().find(|i| i.dst == v).map(|i| i.ty) {
            Some(Ty::Data(d)) if matches!(d, DType::I32 | DType::I64) => Ok(d),
            _ => Err(err(
                "a gather index must be an i32 or i64 value of this stage",
            )),
        }
    }
}
