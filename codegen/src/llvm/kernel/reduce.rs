//! Reduction stages: accumulators (allocas promoted to registers), the combiners' identities
//! and update rules (NaN-propagating max/min; arg reductions keep the first extreme, NaN
//! counting as the extreme), and the result after the loop.

use super::{Emitter, Val};
use crate::llvm::error::Result;
use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, PointerValue};
use inkwell::{FloatPredicate, IntPredicate};
use smelt_ir::{BinaryOp, DType};
use smelt_passes::kernel::{Combiner, Inst, Ty, ValueId};

/// A reduction in progress: accumulator slots and what they combine.
pub(crate) struct Reduction<'ctx> {
    combiner: Combiner,
    acc: DType,
    value: ValueId,
    /// The accumulator (the best value for arg reductions).
    slot: PointerValue<'ctx>,
    /// Arg reductions: the best index and the running index.
    index: Option<(PointerValue<'ctx>, PointerValue<'ctx>)>,
    value_ty: Ty,
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Accumulator slots for a reduction stage, initialised to the combiner's identity.
    pub(crate) fn reduce_begin(
        &mut self,
        combiner: Combiner,
        acc: DType,
        body: &[Inst],
        value: ValueId,
    ) -> Result<Reduction<'ctx>> {
        let value_ty = body
            .iter()
            .find(|i| i.dst == value)
            .map(|i| i.ty)
            .or_else(|| self.values.get(&value).map(|v| v.ty))
            .ok_or_else(|| self.err(format!("reduced value {value:?} is not defined")))?;
        let arg = matches!(combiner, Combiner::ArgMax | Combiner::ArgMin);
        let slot_ty = if arg {
            self.compute_type(value_ty)
        } else {
            self.compute_type(Ty::Data(acc))
        };
        let slot = self.entry_alloca(slot_ty, "acc")?;
        let i64t = self.ctx.i64_type();
        let init: BasicValueEnum = if arg {
            slot_ty.const_zero()
        } else {
            let (f, i, bo) = match combiner {
                Combiner::Sum => (0.0, 0i64, false),
                Combiner::Prod => (1.0, 1, true),
                Combiner::Max => (f64::NEG_INFINITY, i64::MIN, false),
                _ => (f64::INFINITY, i64::MAX, true),
            };
            match acc {
                DType::Bool => self.ctx.bool_type().const_int(bo as u64, false).into(),
                DType::I32 => self
                    .ctx
                    .i32_type()
                    .const_int(i.clamp(i32::MIN as i64, i32::MAX as i64) as u64, true)
                    .into(),
                DType::I64 => i64t.const_int(i as u64, true).into(),
                DType::F64 => self.ctx.f64_type().const_float(f).into(),
                _ => self.f32t().const_float(f).into(),
            }
        };
        self.b.build_store(slot, init)?;
        let index = if arg {
            let best = self.entry_alloca(i64t.into(), "best")?;
            let count = self.entry_alloca(i64t.into(), "count")?;
            self.b.build_store(best, i64t.const_zero())?;
            self.b.build_store(count, i64t.const_zero())?;
            Some((best, count))
        } else {
            None
        };
        Ok(Reduction {
            combiner,
            acc,
            value,
            slot,
            index,
            value_ty,
        })
    }

    fn entry_alloca(&self, ty: BasicTypeEnum<'ctx>, name: &str) -> Result<PointerValue<'ctx>> {
        let entry = self
            .function
            .get_first_basic_block()
            .ok_or_else(|| self.err("function has no entry block"))?;
        let tmp = self.ctx.create_builder();
        match entry.get_first_instruction() {
            Some(i) => tmp.position_before(&i),
            None => tmp.position_at_end(entry),
        }
        Ok(tmp.build_alloca(ty, name)?)
    }

    /// Combines the current body value into the accumulator.
    pub(crate) fn reduce_step(&mut self, r: &Reduction<'ctx>) -> Result<()> {
        use FloatPredicate as F;
        let v = self.value(r.value)?;
        let b = &self.b;
        let cur = b.build_load(r.slot, "cur")?;
        if let Some((best, count)) = r.index {
            let d = self.data(v)?;
            let better = if d.is_float() {
                let (x, c) = (v.v.into_float_value(), cur.into_float_value());
                let pred = if r.combiner == Combiner::ArgMax {
                    F::OGT
                } else {
                    F::OLT
                };
                let gt = b.build_float_compare(pred, x, c, "gt")?;
                let xnan = b.build_float_compare(F::UNO, x, x, "xn")?;
                let cnan = b.build_float_compare(F::UNO, c, c, "cn")?;
                let cand = b.build_or(gt, xnan, "cand")?;
                b.build_and(cand, b.build_not(cnan, "ncn")?, "better")?
            } else {
                let (x, c) = (v.v.into_int_value(), cur.into_int_value());
                let bool_ = d == DType::Bool;
                let pred = match (r.combiner == Combiner::ArgMax, bool_) {
                    (true, false) => IntPredicate::SGT,
                    (true, true) => IntPredicate::UGT,
                    (false, false) => IntPredicate::SLT,
                    (false, true) => IntPredicate::ULT,
                };
                b.build_int_compare(pred, x, c, "better")?
            };
            let n = b.build_load(count, "n")?.into_int_value();
            let i64t = self.ctx.i64_type();
            let first = b.build_int_compare(IntPredicate::EQ, n, i64t.const_zero(), "first")?;
            let take = b.build_or(first, better, "take")?;
            let nv = b.build_select(take, v.v, cur, "nv")?;
            b.build_store(r.slot, nv)?;
            let bi = b.build_load(best, "bi")?;
            let ni = b.build_select(take, n.into(), bi, "ni")?;
            b.build_store(best, ni)?;
            b.build_store(count, b.build_int_add(n, i64t.const_int(1, false), "n1")?)?;
            return Ok(());
        }
        let x = self.cast(v, Ty::Data(r.acc))?;
        let acc_val = Val {
            v: cur,
            ty: Ty::Data(r.acc),
        };
        let xv = Val {
            v: x,
            ty: Ty::Data(r.acc),
        };
        let op = match r.combiner {
            Combiner::Sum if r.acc == DType::Bool => BinaryOp::LogicalOr,
            Combiner::Prod if r.acc == DType::Bool => BinaryOp::LogicalAnd,
            Combiner::Sum => BinaryOp::Add,
            Combiner::Prod => BinaryOp::Mul,
            Combiner::Max => BinaryOp::Maximum,
            _ => BinaryOp::Minimum,
        };
        let nv = self.binary(op, acc_val, xv, Ty::Data(r.acc))?;
        self.b.build_store(r.slot, nv)?;
        Ok(())
    }

    /// The reduction's result after its loop.
    pub(crate) fn reduce_end(&mut self, r: &Reduction<'ctx>) -> Result<Val<'ctx>> {
        let _ = r.value_ty;
        Ok(match r.index {
            Some((best, _)) => Val {
                v: self.b.build_load(best, "argres")?,
                ty: Ty::Data(DType::I64),
            },
            None => Val {
                v: self.b.build_load(r.slot, "res")?,
                ty: Ty::Data(r.acc),
            },
        })
    }
}
