//! Loop fission: an elementwise body with a long op (f32 `tanh` or `erf`) computed in two
//! loops over blocks of [`BLOCK`] elements instead of one.
//!
//! A vectorised `tanh` is one chain of some thirty dependent operations per vector. On AMD
//! Zen 3 such chains run at about 2.2 floating-point operations per cycle, against 4 for
//! short independent ones (two FMA and two add pipes): the scheduler cannot hold enough of
//! them to find independent work, so what a long body costs is set by its length, not by its
//! pipes (BENCHMARKS.md, thirty-ninth and fortieth sessions). Cutting the body in two halves
//! that run as separate loops halves the chain each loop's iterations carry:
//!
//! 1. The **first pass** computes, for each element of the block, what the long op's operand
//!    is computed from ([`Plan::first`]), and the op's first half ([`Cut`]: `tanh`'s
//!    `e^(2|x|) - 1` as two floats, `erf`'s interval and reduced argument). It stores those
//!    parts, and the results of transcendental ops of the first pass that the rest of the
//!    body uses ([`Plan::kept`]), to stack arrays of [`BLOCK`] elements, which stay in L1.
//! 2. The **second pass** loads them back, computes again the other values before the cut
//!    that the rest of the body needs ([`Plan::again`]: loads and plain arithmetic, which cost
//!    about what a store and a load do), finishes the long op and the rest of the body, and
//!    stores.
//!
//! The split loops need as many constants as the one loop, and on AVX2 they are what runs
//! out of registers: `JitOptions::constant_loads` (on where loop fission is) keeps them from
//! being broadcast again inside the loops.
//!
//! Each value is computed by the same operations on the same inputs as in one loop, so
//! results are the same, bit for bit. Only the store loop of a kernel with one elementwise
//! stage is split, and only its blocks of whole [`BLOCK`]s: the rest of a row, and the head
//! and tail of a peeled streaming loop (`stream`), run the body in one loop.

use super::reuse::{operands, transcendental};
use super::{reduce, Emitter, Hint, Val, KEEP_ALIGN};
use crate::llvm::error::Result;
use crate::llvm::options::MathMode;
use inkwell::values::{FloatValue, IntValue, PointerValue};
use smelt_ir::{DType, UnaryOp};
use smelt_passes::kernel::{Access, Inst, InstOp, Kernel, StageEffect, Ty, ValueId};
use std::collections::{HashMap, HashSet};

/// Elements per block: the first pass's stores of a block are still in L1 when the second
/// pass reads them (a few KiB for four arrays of 256 floats).
pub(crate) const BLOCK: u32 = 256;

/// The most arrays (the cut op's parts and kept values) a split loop writes per element.
const MAX_ARRAYS: usize = 6;

/// The long op a body is cut in, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cut {
    /// `tanh`, after `E = e^(2|x|) - 1` (`Emitter::tanh_first`).
    Tanh,
    /// `erf`, after its interval `k` and its `t = |x| - m` (`Emitter::erf_first`): of the
    /// cuts tried on bias-GELU in cache on AMD Zen 3 (forty-first session), the fastest,
    /// 5% faster than one loop, where a cut after the whole `erf` was 6% slower than this.
    Erf,
}

/// How one body is split (see the module docs).
pub(crate) struct Plan {
    /// The index in the body of the instruction cut in two.
    pub at: usize,
    pub cut: Cut,
    /// The values before the cut the first pass computes: the cut op's operand and what it is
    /// computed from.
    pub first: HashSet<ValueId>,
    /// Values of the first pass the second needs, directly or through cheap arithmetic, and
    /// loads back rather than compute again: results of transcendental ops.
    pub kept: Vec<ValueId>,
    /// Values before the cut the second pass computes again.
    pub again: HashSet<ValueId>,
}

/// Whether `ty` is computed in f32 (see `Emitter::compute_type`).
fn f32_computed(ty: Ty) -> bool {
    matches!(ty, Ty::Data(DType::F32 | DType::F16 | DType::BF16))
}

/// How `kernel` is split, if it is: one store stage with no inner loop whose body holds an
/// f32 `tanh` or `erf` computed by polynomials (the first is cut) and loads no buffer the
/// kernel writes.
pub(crate) fn plan(kernel: &Kernel, math: MathMode) -> Option<Plan> {
    if math != MathMode::Polynomial {
        return None;
    }
    let [stage] = &kernel.stages[..] else {
        return None;
    };
    let StageEffect::Store(stores) = &stage.effect else {
        return None;
    };
    if !stage.inner.is_empty() {
        return None;
    }
    let body = &stage.body;
    // A buffer the kernel also writes could be read after a store of the same block (the
    // second pass reads again what the first read).
    let reads_written = body.iter().any(
        |inst| matches!(&inst.op, InstOp::Load { buffer, .. } if kernel.writes.contains(buffer)),
    );
    if reads_written {
        return None;
    }
    let (at, cut, x) = body
        .iter()
        .enumerate()
        .find_map(|(i, inst)| match inst.op {
            InstOp::Unary(UnaryOp::Tanh, x) if f32_computed(inst.ty) => Some((i, Cut::Tanh, x)),
            InstOp::Unary(UnaryOp::Erf, x) if f32_computed(inst.ty) => Some((i, Cut::Erf, x)),
            _ => None,
        })?;
    let before: HashMap<ValueId, &Inst> = body[..at].iter().map(|i| (i.dst, i)).collect();
    // What the cut op's operand is computed from.
    let mut first = HashSet::new();
    let mut todo = vec![x];
    while let Some(v) = todo.pop() {
        if let Some(inst) = before.get(&v) {
            if first.insert(v) {
                todo.extend(operands(&inst.op));
            }
        }
    }
    // What the second pass uses from before the cut: the operand (the second half takes its
    // sign), every later instruction's operands, the stored values and computed addresses.
    let mut todo = vec![x];
    for inst in &body[at + 1..] {
        todo.extend(operands(&inst.op));
    }
    for st in stores {
        todo.push(st.value);
        if let Access::Computed(v) = st.access {
            todo.push(v);
        }
    }
    let (mut kept, mut again) = (Vec::new(), HashSet::new());
    while let Some(v) = todo.pop() {
        let Some(inst) = before.get(&v) else { continue };
        if first.contains(&v) && transcendental(&inst.op) {
            if !f32_computed(inst.ty) {
                return None;
            }
            if !kept.contains(&v) {
                kept.push(v);
            }
        } else if again.insert(v) {
            todo.extend(operands(&inst.op));
        }
    }
    if kept.len() + 2 > MAX_ARRAYS {
        return None;
    }
    Some(Plan {
        at,
        cut,
        first,
        kept,
        again,
    })
}

/// Which of the two loops is being emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    First,
    Second,
}

/// A kernel's split (see the module docs) while it is emitted.
pub(crate) struct Split<'ctx> {
    plan: Plan,
    /// The scratch arrays (`[BLOCK x float]`): the plan's kept values, in order, then the cut
    /// op's two parts.
    arrays: Vec<PointerValue<'ctx>>,
    /// While a pass's body is emitted: which, and its loop's variable (the scratch index).
    at: Option<(Pass, IntValue<'ctx>)>,
    /// Whether a store loop may be split now: not while one is.
    armed: bool,
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The scratch arrays of `plan`, allocated at the builder (the entry block).
    pub(crate) fn split_scratch(&self, plan: Plan) -> Result<Split<'ctx>> {
        let arr = self.f32t().array_type(BLOCK);
        let mut arrays = Vec::new();
        for _ in 0..plan.kept.len() + 2 {
            let p = self.b.build_alloca(arr, "split")?;
            reduce::set_alignment(p, KEEP_ALIGN)?;
            arrays.push(p);
        }
        Ok(Split {
            plan,
            arrays,
            at: None,
            armed: true,
        })
    }

    /// Whether the first pass of a split loop is being emitted (its body stores nothing).
    pub(crate) fn in_first_pass(&self) -> bool {
        matches!(
            self.split.as_ref().and_then(|s| s.at),
            Some((Pass::First, _))
        )
    }

    /// Whether the store loop about to be emitted is split.
    pub(crate) fn splits_next_loop(&self) -> bool {
        self.split.as_ref().is_some_and(|s| s.armed)
    }

    fn set_split(&mut self, at: Option<(Pass, IntValue<'ctx>)>, armed: bool) {
        if let Some(s) = self.split.as_mut() {
            s.at = at;
            s.armed = armed;
        }
    }

    /// `for (i = lo; i < hi; i++) f(i)` split (see the module docs): whole blocks of
    /// [`BLOCK`] elements in two loops each, then the rest in one.
    pub(crate) fn split_loop(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        name: &str,
        f: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<()> {
        let i64t = self.ctx.i64_type();
        let zero = i64t.const_zero();
        let block = i64t.const_int(u64::from(BLOCK), false);
        let n = self.b.build_int_sub(hi, lo, "sp.n")?;
        let neg = self
            .b
            .build_int_compare(inkwell::IntPredicate::SLT, n, zero, "sp.neg")?;
        let n = self.b.build_select(neg, zero, n, "sp.n0")?.into_int_value();
        let blocks = self.b.build_int_unsigned_div(n, block, "sp.blocks")?;
        let covered = self.b.build_int_nuw_mul(blocks, block, "sp.covered")?;
        let rest = self.b.build_int_nsw_add(lo, covered, "sp.rest")?;
        self.set_split(None, false);
        self.counted_loop(zero, blocks, &format!("{name}.blk"), |em, k| {
            let start = em.b.build_int_nsw_mul(k, block, "sp.k")?;
            let start = em.b.build_int_nsw_add(lo, start, "sp.start")?;
            for (pass, tag) in [(Pass::First, "a"), (Pass::Second, "b")] {
                let latch =
                    em.counted_loop_latch(zero, block, &format!("{name}.{tag}"), |em, j| {
                        em.set_split(Some((pass, j)), false);
                        let i = em.b.build_int_nsw_add(start, j, "sp.i")?;
                        f(em, i)
                    })?;
                // The interleave count asked for, and no unrolling: written out four times more
                // (the loop runs eight times), the passes spilled more registers, and the
                // chain and `tanh` ran 1–2.5% slower (bias-GELU 4% faster).
                let mut hints = vec![("llvm.loop.unroll.disable", Hint::Flag)];
                if let Some(n) = em.interleave_vectors {
                    hints.push(("llvm.loop.interleave.count", Hint::Int(n)));
                }
                em.attach_hints(latch, &hints);
                em.set_split(None, false);
            }
            Ok(())
        })?;
        self.store_loop(rest, hi, &format!("{name}.rest"), f)?;
        self.set_split(None, true);
        Ok(())
    }

    /// Emits a stage body inside a split loop's pass, if one is being emitted; `false`
    /// otherwise (the caller emits it whole).
    pub(crate) fn split_body(&mut self, insts: &[Inst]) -> Result<bool> {
        let Some((pass, j, at, cut)) = self
            .split
            .as_ref()
            .and_then(|s| s.at.map(|(p, j)| (p, j, s.plan.at, s.plan.cut)))
        else {
            return Ok(false);
        };
        for (i, inst) in insts.iter().enumerate() {
            let kept = self.kept_slot(inst.dst);
            let v = if i < at {
                let (first, again) = self.split.as_ref().map_or((false, false), |s| {
                    (
                        s.plan.first.contains(&inst.dst),
                        s.plan.again.contains(&inst.dst),
                    )
                });
                match (pass, kept) {
                    (Pass::First, _) if first => {
                        let v = self.inst(inst)?;
                        if let Some(k) = kept {
                            let p = self.slot(k, j)?;
                            self.b.build_store(p, v)?;
                        }
                        v
                    }
                    (Pass::Second, Some(k)) => {
                        let p = self.slot(k, j)?;
                        self.b.build_load(p, "sp.kept")?
                    }
                    (Pass::Second, None) if again => self.inst(inst)?,
                    _ => continue,
                }
            } else if i == at {
                let InstOp::Unary(_, xid) = inst.op else {
                    return Err(self.err("a split body cut at something other than tanh or erf"));
                };
                let x = self.value(xid)?;
                let xv = x.v.into_float_value();
                let parts = self.kept_parts();
                match pass {
                    Pass::First => {
                        let (p0, p1) = self.cut_first(cut, xv)?;
                        for (k, v) in [(parts, p0), (parts + 1, p1)] {
                            let p = self.slot(k, j)?;
                            self.b.build_store(p, v)?;
                        }
                        return Ok(true);
                    }
                    Pass::Second => {
                        let load = |em: &Self, k: usize| -> Result<FloatValue<'ctx>> {
                            let p = em.slot(k, j)?;
                            Ok(em.b.build_load(p, "sp.part")?.into_float_value())
                        };
                        let (p0, p1) = (load(self, parts)?, load(self, parts + 1)?);
                        let r = self.cut_second(cut, xv, p0, p1)?;
                        self.round(self.data(x)?, r)?.into()
                    }
                }
            } else {
                self.inst(inst)?
            };
            self.values.insert(inst.dst, Val { v, ty: inst.ty });
        }
        Ok(true)
    }

    /// The index among the scratch arrays of kept value `id`, if it is one.
    fn kept_slot(&self, id: ValueId) -> Option<usize> {
        self.split
            .as_ref()
            .and_then(|s| s.plan.kept.iter().position(|&k| k == id))
    }

    /// The index of the first of the cut op's two part arrays.
    fn kept_parts(&self) -> usize {
        self.split.as_ref().map_or(0, |s| s.plan.kept.len())
    }

    /// Element `j` of scratch array `k`.
    fn slot(&self, k: usize, j: IntValue<'ctx>) -> Result<PointerValue<'ctx>> {
        let arr = *self
            .split
            .as_ref()
            .and_then(|s| s.arrays.get(k))
            .ok_or_else(|| self.err("a split loop's scratch array is missing"))?;
        let zero = self.ctx.i64_type().const_zero();
        // SAFETY (of the generated code): `j` counts a pass's loop from 0 to `BLOCK`, the
        // array's length.
        Ok(unsafe { self.b.build_in_bounds_gep(arr, &[zero, j], "sp.slot")? })
    }

    fn cut_first(
        &self,
        cut: Cut,
        x: FloatValue<'ctx>,
    ) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        match cut {
            Cut::Tanh => self.tanh_first(x),
            Cut::Erf => self.erf_first(x),
        }
    }

    fn cut_second(
        &self,
        cut: Cut,
        x: FloatValue<'ctx>,
        p0: FloatValue<'ctx>,
        p1: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        match cut {
            Cut::Tanh => self.tanh_second(x, p0, p1),
            Cut::Erf => self.erf_second(x, p0, p1),
        }
    }
}
