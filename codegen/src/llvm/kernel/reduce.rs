//! Reduction stages: accumulators (allocas promoted to registers), the combiners' identities
//! and update rules (NaN-propagating max/min; arg reductions keep the first extreme, NaN
//! counting as the extreme), and the result after the loop.
//!
//! # Order of accumulation
//!
//! A float sum, product, max or min over one inner dim of `n >= 2 * LANES` elements is split
//! into [`LANES`] interleaved partial accumulators, so that its loop vectorises without
//! reassociating anything at run time: element `i < n - n % LANES` goes to lane `i % LANES`
//! (each lane in increasing `i`), the lanes are combined by a fixed halving tree (lane `l` with
//! lane `l + h` for `h = LANES/2, …, 1`), then the last `n % LANES` elements are combined into
//! the result in order. The blocks of 16 elements may be computed several at a time
//! ([`Split::group`], `JitOptions::interleave_vectors` on the CPU, for kernels whose data fits
//! in cache): their vectors are still
//! combined into the lanes one block after another, in block order, so the order is the same.
//! Every other reduction runs sequentially in index order. Either order
//! depends only on the stage's shape, never on the chunking or the target, so results stay
//! bitwise identical across thread counts and machines.
//!
//! A float max or min runs without its NaN rule first (a plain compare-and-select, one
//! `maxps`/`minps` or `maxss`/`minss`, where the rule doubles the dependency chain), noting NaN
//! on the side, and runs again from the identity with the rule only if it saw one
//! ([`Emitter::reduce_nan_rule_last`]): the split form over its blocks and tree, the in-order
//! forms over their elements. Without NaN both passes give the same bits. The cost: the body
//! is emitted once more, and a row with NaN computes it twice.
//!
//! # Arg reductions in two passes
//!
//! A float `argmax` or `argmin` over one inner dim of `n >= 2 * LANES` elements runs in two
//! passes ([`Emitter::reduce_arg_two_pass`]): the extreme `m` as a split max or min (above,
//! NaN-propagating), then the first index `i` whose value equals `m` or is NaN (the first NaN
//! when `m` is NaN; no value is NaN otherwise), as an integer min of `hit ? i : n`, which the
//! loop vectoriser widens. The one-pass form (kept for other arg reductions) carries a
//! compare, a select of the value and a select of the index from each element to the next,
//! which no vectoriser widens: about 3 ns per element on the 2-core VM, 50 times a
//! memory-bound pass. Both give the first element no other is greater (less) than, the first
//! NaN if any, so the same index: `-0.0` and `+0.0` are equal to both, as to `>`.
//!
//! # Staged short reductions
//!
//! A float sum, product, max or min over one inner dim of `2 ≤ n < 2 * LANES` elements whose
//! body computes something (softmax's `exp` over a row of 24) is **staged**: the body runs for
//! every element in a loop of its own that stores the values into a scratch array (no
//! loop-carried dependency, so the loop vectoriser widens it, masking its last partial vector),
//! and a second loop combines the scratch in index order. The order, and so every bit, is the
//! one-loop form's; that form stays scalar, since the in-order combine cannot be vectorised
//! under strict FP semantics and takes the body with it.

use super::{Emitter, Hint, Val, LANE_LOOP, MASKED_TAIL, NO_UNROLL};
use crate::llvm::error::Result;
use inkwell::types::{BasicTypeEnum, FloatType, IntType, VectorType};
use inkwell::values::{BasicValue, BasicValueEnum, IntValue, PointerValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};
use smelt_ir::{BinaryOp, DType};
use smelt_passes::kernel::{Combiner, Inst, InstOp, Ty, ValueId};

/// Partial accumulators of a split float reduction (see the module docs). Fixed, not the
/// target's vector width, so that the order of accumulation is the same on every machine.
pub(crate) const LANES: usize = 16;

/// A reduction in progress: accumulator slots and what they combine.
#[derive(Clone, Copy)]
pub(crate) struct Reduction<'ctx> {
    combiner: Combiner,
    acc: DType,
    value: ValueId,
    /// The accumulator (the best value for arg reductions).
    slot: PointerValue<'ctx>,
    /// Arg reductions: the best index and the running index.
    index: Option<(PointerValue<'ctx>, PointerValue<'ctx>)>,
    value_ty: Ty,
    /// Set for the first pass of an in-order float max or min (see
    /// [`Emitter::reduce_nan_rule_last`]): combine without the NaN rule and note NaN here (`i1`).
    nan_seen: Option<PointerValue<'ctx>>,
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
            nan_seen: None,
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
                let gt = b.build_float_compare(better_than(r.combiner), x, c, "gt")?;
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
        let nv = match r.nan_seen {
            Some(seen) => {
                // The NaN rule's `m` term alone (see `reduce_nan_rule_last`).
                let (c, x) = (cur.into_float_value(), x.into_float_value());
                let better = b.build_float_compare(better_than(r.combiner), c, x, "fbt")?;
                let nan = b.build_float_compare(F::UNO, x, x, "fnan")?;
                let old = b.build_load(seen, "fseen")?.into_int_value();
                b.build_store(seen, b.build_or(old, nan, "fseen1")?)?;
                b.build_select(better, c, x, "fm")?
            }
            None => self.combine(r.combiner, r.acc, cur, x)?,
        };
        self.b.build_store(r.slot, nv)?;
        Ok(())
    }

    /// Runs `pass`, which combines every value of `red` into its slot (an in-order loop of
    /// [`Emitter::reduce_step`], or a split reduction's blocks and tree). A float max or min
    /// runs it twice over: first without the NaN rule (one compare-and-select per value, half
    /// the dependency chain), noting in `nan_seen` whether a value was NaN, and again from the
    /// identity with the rule only if one was. Without NaN the two passes give the same bits
    /// (the same selects in the same order).
    pub(crate) fn reduce_nan_rule_last(
        &mut self,
        red: &Reduction<'ctx>,
        pass: &mut dyn FnMut(&mut Self, &Reduction<'ctx>) -> Result<()>,
    ) -> Result<()> {
        let extreme = matches!(red.combiner, Combiner::Max | Combiner::Min)
            && red.index.is_none()
            && matches!(red.acc, DType::F32 | DType::F64);
        if !extreme {
            return pass(self, red);
        }
        let bool_t = self.ctx.bool_type();
        let seen = self.entry_alloca(bool_t.into(), "nanseen")?;
        self.b.build_store(seen, bool_t.const_zero())?;
        let identity = self.b.build_load(red.slot, "ident")?;
        let fast = Reduction {
            nan_seen: Some(seen),
            ..*red
        };
        pass(self, &fast)?;
        let any = self.b.build_load(seen, "anynan")?.into_int_value();
        let (again, done) = (self.block("inorder.nan"), self.block("inorder.done"));
        self.b.build_conditional_branch(any, again, done)?;
        self.b.position_at_end(again);
        self.b.build_store(red.slot, identity)?;
        pass(self, red)?;
        self.b.build_unconditional_branch(done)?;
        self.b.position_at_end(done);
        Ok(())
    }

    /// `combiner(acc, x)` for a non-arg reduction, both of the accumulator's type.
    fn combine(
        &self,
        combiner: Combiner,
        acc: DType,
        cur: BasicValueEnum<'ctx>,
        x: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let acc_val = Val {
            v: cur,
            ty: Ty::Data(acc),
        };
        let xv = Val {
            v: x,
            ty: Ty::Data(acc),
        };
        let op = match combiner {
            Combiner::Sum if acc == DType::Bool => BinaryOp::LogicalOr,
            Combiner::Prod if acc == DType::Bool => BinaryOp::LogicalAnd,
            Combiner::Sum => BinaryOp::Add,
            Combiner::Prod => BinaryOp::Mul,
            Combiner::Max => BinaryOp::Maximum,
            _ => BinaryOp::Minimum,
        };
        self.binary(op, acc_val, xv, Ty::Data(acc))
    }

    /// The length of the one inner dim of a float sum, product, max or min: the reductions
    /// that may be split or staged (see the module docs).
    fn float_row(combiner: Combiner, acc: DType, inner: &[usize]) -> Option<usize> {
        let float = matches!(
            combiner,
            Combiner::Sum | Combiner::Prod | Combiner::Max | Combiner::Min
        ) && matches!(acc, DType::F32 | DType::F64);
        match inner {
            [n] if float => Some(*n),
            _ => None,
        }
    }

    /// Whether a reduction over `inner` is split into lanes (see the module docs).
    pub(crate) fn split_reduction(combiner: Combiner, acc: DType, inner: &[usize]) -> bool {
        Self::float_row(combiner, acc, inner).is_some_and(|n| n >= 2 * LANES)
    }

    /// Whether an arg reduction over `inner` runs in two passes (see the module docs): a
    /// float `argmax` or `argmin` over one dim long enough to split its extreme.
    pub(crate) fn two_pass_arg(combiner: Combiner, acc: DType, inner: &[usize]) -> bool {
        matches!(combiner, Combiner::ArgMax | Combiner::ArgMin)
            && Self::split_reduction(extreme_of(combiner), acc, inner)
    }

    /// A float `argmax`/`argmin` over `n` elements in two passes (see the module docs): the
    /// extreme `m` by a split max/min (NaN-propagating), then the first index whose value is
    /// `m`, or NaN (when `m` is NaN, the first NaN), by an integer min over `hit ? i : n`, a
    /// loop the vectoriser widens. The index the one-pass form finds: the first element no
    /// other beats, the first NaN if there is one.
    pub(crate) fn reduce_arg_two_pass(
        &mut self,
        body: &[Inst],
        n: usize,
        combiner: Combiner,
        acc: DType,
        value: ValueId,
    ) -> Result<Val<'ctx>> {
        let m = self
            .reduce_split(body, n, extreme_of(combiner), acc, value)?
            .v
            .into_float_value();
        let i64t = self.ctx.i64_type();
        let none = i64t.const_int(n as u64, false);
        let best = self.entry_alloca(i64t.into(), "argfirst")?;
        self.b.build_store(best, none)?;
        self.loop_nest(&[n], None, &mut |em| {
            em.body(body)?;
            let x = em.value(value)?.v.into_float_value();
            let i = *em.vars.last().ok_or_else(|| em.err("no loop variable"))?;
            let b = &em.b;
            let eq = b.build_float_compare(FloatPredicate::OEQ, x, m, "argeq")?;
            let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "argnan")?;
            let hit = b.build_or(eq, nan, "arghit")?;
            let cand = b.build_select(hit, i, none, "argcand")?.into_int_value();
            let cur = b.build_load(best, "argcur")?.into_int_value();
            let lower = b.build_int_compare(IntPredicate::SLT, cand, cur, "arglt")?;
            b.build_store(best, b.build_select(lower, cand, cur, "argmin")?)?;
            Ok(())
        })?;
        Ok(Val {
            v: self.b.build_load(best, "argres")?,
            ty: Ty::Data(DType::I64),
        })
    }

    /// Whether a reduction over `inner` too short to split is staged (see the module docs):
    /// a float sum, product, max or min over one dim of 2 to `2 * LANES - 1` elements whose
    /// body computes something (not only loads and casts).
    pub(crate) fn staged_reduction(
        combiner: Combiner,
        acc: DType,
        inner: &[usize],
        body: &[Inst],
    ) -> bool {
        Self::float_row(combiner, acc, inner).is_some_and(|n| (2..2 * LANES).contains(&n))
            && body
                .iter()
                .any(|i| matches!(i.op, InstOp::Unary(..) | InstOp::Binary(..)))
    }

    /// A staged reduction (see the module docs): the body for every element into a scratch
    /// array (a loop without a loop-carried dependency, which the loop vectoriser widens),
    /// then the scratch combined in index order. Returns the result.
    pub(crate) fn reduce_staged(
        &mut self,
        body: &[Inst],
        n: usize,
        combiner: Combiner,
        acc: DType,
        value: ValueId,
    ) -> Result<Val<'ctx>> {
        let red = self.reduce_begin(combiner, acc, body, value)?;
        let acc_t = self.float_acc(acc, "staged")?;
        let scratch = self.entry_alloca(acc_t.array_type(n as u32).into(), "staged")?;
        // Written and read as vectors: on a cache line, so that none of them splits one.
        set_alignment(scratch, super::KEEP_ALIGN)?;
        let i64t = self.ctx.i64_type();
        let depth = self.vars.len();
        let (lo, hi) = (self.i64c(0), self.i64c(n as i64));
        self.counted_loop_hinted(lo, hi, "stage", MASKED_TAIL, |em, i| {
            // `i < n`, the scratch's length.
            em.body_to_scratch(body, value, acc, depth, i, scratch, i)
        })?;
        self.reduce_nan_rule_last(&red, &mut |em, red| {
            em.counted_loop(lo, hi, "fold", |em, i| {
                // SAFETY (of the generated code): `i < n`, the array's length.
                let p = unsafe {
                    em.b.build_in_bounds_gep(scratch, &[i64t.const_zero(), i], "sf")?
                };
                let x = em.b.build_load(p, "sv")?;
                em.values.insert(
                    value,
                    Val {
                        v: x,
                        ty: Ty::Data(acc),
                    },
                );
                em.reduce_step(red)
            })
        })?;
        self.vars.truncate(depth);
        self.reduce_end(&red)
    }

    /// The float type a `what` (split or staged) reduction accumulates `acc` in.
    fn float_acc(&self, acc: DType, what: &str) -> Result<FloatType<'ctx>> {
        match self.compute_type(Ty::Data(acc)) {
            BasicTypeEnum::FloatType(t) => Ok(t),
            _ => Err(self.err(format!("a {what} reduction of a non-float accumulator"))),
        }
    }

    /// The body at element `i` of the reduced dim (pushed after the first `depth` loop
    /// variables), its reduced value cast to `acc` and stored at `slot` of `scratch`, an
    /// array of `acc`; the caller guarantees `slot` is inside it.
    #[allow(clippy::too_many_arguments)]
    fn body_to_scratch(
        &mut self,
        body: &[Inst],
        value: ValueId,
        acc: DType,
        depth: usize,
        i: IntValue<'ctx>,
        scratch: PointerValue<'ctx>,
        slot: IntValue<'ctx>,
    ) -> Result<()> {
        self.vars.truncate(depth);
        self.vars.push(i);
        self.body(body)?;
        let v = self.value(value)?;
        let x = self.cast(v, Ty::Data(acc))?;
        let zero = self.ctx.i64_type().const_zero();
        // SAFETY (of the generated code): `slot` is inside the array (the caller's promise).
        let p = unsafe { self.b.build_in_bounds_gep(scratch, &[zero, slot], "slot")? };
        self.b.build_store(p, x)?;
        Ok(())
    }

    /// A split reduction stage (see the module docs): `LANES` partial accumulators held in
    /// one `<LANES x T>` vector, the halving tree, the tail in order. Each block of `LANES`
    /// elements runs the body in a lane loop (which the loop vectoriser widens) that stores the
    /// values into a scratch array; the block then combines the scratch, loaded as one vector,
    /// into the accumulator vector with the combiner's vector form, so the accumulators stay
    /// in registers and the chain from block to block is one vector operation. The widened
    /// lane loop runs once, so the unroller removes it ([`LANE_LOOP`]) and instcombine then
    /// forwards the stored vector to the load and drops the scratch: the block loop is the
    /// body's vector code and one combine, with no stack round trip. Returns the result.
    ///
    /// A max or min runs its blocks and tree through [`Emitter::reduce_nan_rule_last`]: first
    /// without the NaN rule (one `maxps`/`minps` per block, half the chain), again with it
    /// only if a value was NaN. Without NaN the two give the same bits, so the result never
    /// depends on which one ran.
    pub(crate) fn reduce_split(
        &mut self,
        body: &[Inst],
        n: usize,
        combiner: Combiner,
        acc: DType,
        value: ValueId,
    ) -> Result<Val<'ctx>> {
        let init = self.reduce_begin(combiner, acc, body, value)?;
        let identity = self.b.build_load(init.slot, "id")?.into_float_value();
        let acc_t = self.float_acc(acc, "split")?;
        let vec_t = acc_t.vec_type(LANES as u32);
        let align = (LANES * acc.size_bytes()) as u32;
        let group = i64::from(self.reduce_group.max(1));
        let scratch_len = group as u32 * LANES as u32;
        let scratch = self.entry_alloca(acc_t.array_type(scratch_len).into(), "lanes")?;
        set_alignment(scratch, align)?;
        let accv = self.entry_alloca(vec_t.into(), "accv")?;
        let mut splat = vec_t.get_undef();
        let i32t = self.ctx.i32_type();
        for l in 0..LANES {
            let at = i32t.const_int(l as u64, false);
            splat = self.b.build_insert_element(splat, identity, at, "idv")?;
        }
        let split = Split {
            body,
            value,
            combiner,
            acc,
            blocks: (n / LANES) as i64,
            group,
            depth: self.vars.len(),
            scratch,
            accv,
            splat,
            align,
        };
        // Max and min: first without the NaN rule, see `reduce_nan_rule_last`.
        self.reduce_nan_rule_last(&init, &mut |em, red| {
            em.split_blocks(&split, red.nan_seen)?;
            em.split_tree(&split, red.slot, red.nan_seen.is_none())
        })?;
        let depth = split.depth;
        let tail_start = self.i64c(split.blocks * LANES as i64);
        self.counted_loop(tail_start, self.i64c(n as i64), "tail", |em, i| {
            em.vars.truncate(depth);
            em.vars.push(i);
            em.body(body)?;
            em.reduce_step(&init)
        })?;
        self.vars.truncate(depth);
        self.reduce_end(&init)
    }

    /// The blocks of a split reduction into its accumulator vector (reset to the identity
    /// first): [`Split::group`] blocks per iteration of a first loop, then the remaining
    /// blocks one at a time. With `nan_seen` (an `i1` slot, see
    /// [`Emitter::reduce_nan_rule_last`]), a max or min combines without its NaN rule, keeps
    /// the largest magnitude bits each lane saw ([`Self::magnitude_lanes`]: one AND and one
    /// integer max per vector, where comparing for NaN into `<LANES x i1>` took packing
    /// instructions on AVX2 and made softmax's rows up to 4% slower) and ORs whether one was a
    /// NaN into that slot after the loops.
    fn split_blocks(
        &mut self,
        s: &Split<'_, 'ctx>,
        nan_seen: Option<PointerValue<'ctx>>,
    ) -> Result<()> {
        self.b.build_store(s.accv, s.splat)?;
        let (lane_t, _, inf_bits) = self.magnitude_lanes(s);
        let mag_t = lane_t.vec_type(LANES as u32);
        let lanes_seen = match nan_seen {
            Some(_) => {
                let p = self.entry_alloca(mag_t.into(), "nanlanes")?;
                self.b.build_store(p, mag_t.const_zero())?;
                Some(p)
            }
            None => None,
        };
        // Blocks `0..grouped` a group at a time, the rest one at a time.
        let grouped = if s.group > 1 {
            s.blocks / s.group * s.group
        } else {
            0
        };
        if grouped > 0 {
            self.split_block_loop(s, s.group, 0, grouped, nan_seen, lanes_seen)?;
        }
        if grouped < s.blocks {
            self.split_block_loop(s, 1, grouped, s.blocks, nan_seen, lanes_seen)?;
        }
        self.vars.truncate(s.depth);
        if let (Some(slot), Some(lanes)) = (nan_seen, lanes_seen) {
            let largest = self.b.build_load(lanes, "nanmag")?.into_vector_value();
            let inf = VectorType::const_vector(&[lane_t.const_int(inf_bits, false); LANES]);
            let lanes = self
                .b
                .build_int_compare(IntPredicate::SGT, largest, inf, "nanv")?;
            // One bit per lane (`LANES` is 16).
            const _: () = assert!(LANES == 16);
            let i16t = self.ctx.i16_type();
            let bits = self
                .b
                .build_bit_cast(lanes, i16t, "nanbits")?
                .into_int_value();
            let any =
                self.b
                    .build_int_compare(IntPredicate::NE, bits, i16t.const_zero(), "anynan")?;
            let old = self.b.build_load(slot, "seen")?.into_int_value();
            self.b
                .build_store(slot, self.b.build_or(old, any, "seen1")?)?;
        }
        Ok(())
    }

    /// The integer lanes of a split reduction's values (`i32` for f32, `i64` for f64), the
    /// mask of every bit but the sign, and the bits of +inf: a value's magnitude bits (its
    /// bits under that mask), read as a signed integer, exceed +inf's exactly when it is NaN.
    fn magnitude_lanes(&self, s: &Split<'_, 'ctx>) -> (IntType<'ctx>, u64, u64) {
        if s.splat.get_type().get_element_type() == self.ctx.f64_type().into() {
            (
                self.ctx.i64_type(),
                i64::MAX as u64,
                f64::INFINITY.to_bits(),
            )
        } else {
            (
                self.ctx.i32_type(),
                i32::MAX as u64,
                u64::from(f32::INFINITY.to_bits()),
            )
        }
    }

    /// Blocks `first..last` of a split reduction, `group` per iteration (`last - first` a
    /// multiple of it): one lane loop over the group's `group * LANES` elements into the
    /// scratch (vectorised `LANES` wide, `group` vectors interleaved, so that the blocks'
    /// bodies overlap instead of forming one chain), then each block's vector combined into
    /// the accumulators in block order, exactly as one block per iteration would.
    fn split_block_loop(
        &mut self,
        s: &Split<'_, 'ctx>,
        group: i64,
        first: i64,
        last: i64,
        nan_seen: Option<PointerValue<'ctx>>,
        lanes_seen: Option<PointerValue<'ctx>>,
    ) -> Result<()> {
        let i64t = self.ctx.i64_type();
        let width = self.i64c(group * LANES as i64);
        let mut hints = LANE_LOOP.to_vec();
        if group > 1 {
            hints.push(("llvm.loop.interleave.count", Hint::Int(group as u32)));
        }
        self.counted_loop_hinted(
            self.i64c(0),
            self.i64c((last - first) / group),
            "blk",
            NO_UNROLL,
            |em, g| {
                let base = em.b.build_int_nsw_mul(g, width, "gbase")?;
                let base =
                    em.b.build_int_nsw_add(base, em.i64c(first * LANES as i64), "bbase")?;
                em.counted_loop_hinted(em.i64c(0), width, "ln", &hints, |em, l| {
                    let i = em.b.build_int_nsw_add(base, l, "li")?;
                    // `l < group * LANES`, within the scratch's length.
                    em.body_to_scratch(s.body, s.value, s.acc, s.depth, i, s.scratch, l)
                })?;
                let vec_ptr = s.splat.get_type().ptr_type(Default::default());
                for k in 0..group {
                    let at = i64t.const_int((k as usize * LANES) as u64, false);
                    // SAFETY (of the generated code): `k * LANES + LANES <= group * LANES`,
                    // within the scratch.
                    let p = unsafe {
                        em.b.build_in_bounds_gep(s.scratch, &[i64t.const_zero(), at], "blkp")?
                    };
                    let vp =
                        em.b.build_bit_cast(p, vec_ptr, "lanesv")?
                            .into_pointer_value();
                    let v = em.b.build_load(vp, "blkv")?;
                    set_alignment(v, s.align)?;
                    let v = v.into_vector_value();
                    let cur = em.b.build_load(s.accv, "accc")?.into_vector_value();
                    let nv = em.combine_vector(s.combiner, cur, v, nan_seen.is_none())?;
                    em.b.build_store(s.accv, nv)?;
                    if let Some(seen) = lanes_seen {
                        let old = em.b.build_load(seen, "seen")?.into_vector_value();
                        let bits = em.b.build_bit_cast(v, old.get_type(), "vbits")?;
                        let (lane_t, abs, _) = em.magnitude_lanes(s);
                        let abs = VectorType::const_vector(&[lane_t.const_int(abs, false); LANES]);
                        let mag = em.b.build_and(bits.into_vector_value(), abs, "vmag")?;
                        let more =
                            em.b.build_int_compare(IntPredicate::SGT, mag, old, "more")?;
                        let largest = em.b.build_select(more, mag, old, "seen1")?;
                        em.b.build_store(seen, largest)?;
                    }
                }
                Ok(())
            },
        )
    }

    /// The halving tree of a split reduction's accumulator vector (lanes `0..h` combined with
    /// lanes `h..2h`), its lane 0 stored at `slot`; `nan_rule` as in
    /// [`Emitter::combine_vector`].
    fn split_tree(
        &mut self,
        s: &Split<'_, 'ctx>,
        slot: PointerValue<'ctx>,
        nan_rule: bool,
    ) -> Result<()> {
        let i32t = self.ctx.i32_type();
        let mut lanes = self.b.build_load(s.accv, "accf")?.into_vector_value();
        let mut h = LANES / 2;
        while h > 0 {
            let half = |from: usize| {
                VectorType::const_vector(
                    &(from..from + h)
                        .map(|l| i32t.const_int(l as u64, false))
                        .collect::<Vec<_>>(),
                )
            };
            let undef = lanes.get_type().get_undef();
            let lo = self.b.build_shuffle_vector(lanes, undef, half(0), "tlo")?;
            let hi = self.b.build_shuffle_vector(lanes, undef, half(h), "thi")?;
            lanes = self.combine_vector(s.combiner, lo, hi, nan_rule)?;
            h /= 2;
        }
        let first = self
            .b
            .build_extract_element(lanes, i32t.const_zero(), "tree")?;
        self.b.build_store(slot, first)?;
        Ok(())
    }

    /// `combiner(acc, x)` lane by lane on float vectors: the same operations, in the same
    /// order, as [`Emitter::combine`]'s scalar form (`scalar::float_binary`), so each lane
    /// rounds exactly as the scalar code would. Without `nan_rule`, a max or min leaves out
    /// the NaN rule (a NaN operand giving NaN): right, bit for bit, when neither operand is
    /// NaN.
    fn combine_vector(
        &self,
        combiner: Combiner,
        acc: VectorValue<'ctx>,
        x: VectorValue<'ctx>,
        nan_rule: bool,
    ) -> Result<VectorValue<'ctx>> {
        use FloatPredicate as F;
        let b = &self.b;
        Ok(match combiner {
            Combiner::Sum => b.build_float_add(acc, x, "vsum")?,
            Combiner::Prod => b.build_float_mul(acc, x, "vprod")?,
            Combiner::Max | Combiner::Min => {
                let better = b.build_float_compare(better_than(combiner), acc, x, "vbt")?;
                let m = b.build_select(better, acc, x, "vm")?.into_vector_value();
                if !nan_rule {
                    return Ok(m);
                }
                let uno = b.build_float_compare(F::UNO, acc, x, "vuno")?;
                let nan = b.build_float_add(acc, x, "vnan")?;
                b.build_select(uno, nan, m, "vmm")?.into_vector_value()
            }
            _ => return Err(self.err(format!("a split {combiner:?} reduction"))),
        })
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

/// The extreme an arg reduction looks for: `Max` for `ArgMax`, `Min` for `ArgMin`.
fn extreme_of(combiner: Combiner) -> Combiner {
    match combiner {
        Combiner::ArgMax => Combiner::Max,
        Combiner::ArgMin => Combiner::Min,
        c => c,
    }
}

/// The comparison by which `a` is a better extreme than `b` for a max or min (arg or not):
/// `a > b` or `a < b`, false when either is NaN.
fn better_than(combiner: Combiner) -> FloatPredicate {
    if matches!(combiner, Combiner::Max | Combiner::ArgMax) {
        FloatPredicate::OGT
    } else {
        FloatPredicate::OLT
    }
}

/// Sets the alignment of an alloca or a load (also the kept values' arrays, `keep_scratch`).
pub(super) fn set_alignment<'ctx>(v: impl BasicValue<'ctx>, align: u32) -> Result<()> {
    if let Some(i) = v.as_instruction_value() {
        i.set_alignment(align)
            .map_err(|e| crate::llvm::error::LlvmError::Build {
                message: format!("alignment {align}: {e}"),
            })?;
    }
    Ok(())
}

/// What the passes of a split reduction share (see [`Emitter::reduce_split`]).
struct Split<'b, 'ctx> {
    body: &'b [Inst],
    value: ValueId,
    combiner: Combiner,
    acc: DType,
    /// Whole blocks of `LANES` elements.
    blocks: i64,
    /// Blocks computed side by side in each iteration of the block loop (the rest one at a
    /// time): [`JitOptions::interleave_vectors`](crate::llvm::JitOptions::interleave_vectors)
    /// for a kernel whose data fits in cache, else 1 (`kernel::reduce_group`).
    group: i64,
    /// Loop variables outside the reduced dim.
    depth: usize,
    /// `[group * LANES x T]`: one group's values.
    scratch: PointerValue<'ctx>,
    /// `<LANES x T>`: the partial accumulators.
    accv: PointerValue<'ctx>,
    /// The identity in every lane.
    splat: VectorValue<'ctx>,
    align: u32,
}
