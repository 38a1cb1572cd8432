//! Interleaved rows: a row kernel over short rows in cache computes the points of its last
//! outer dim two at a time, stage by stage (the first row's max, the second's, the first row's
//! sum, the second's, then both rows' stores), so that the two rows' chains of dependent passes
//! overlap. One row's softmax over 128 elements is such a chain: a max, its horizontal
//! reduction, `exp` and a sum, another horizontal reduction, a reciprocal, the scaled stores;
//! with one row at a time the vector units wait on each link.
//!
//! Both rows' stages are written out (the body is emitted twice). Tried first and not kept:
//! each stage once, in a two-iteration loop over the pair's rows, with the values crossing
//! stages in two-element arrays; it ran the same instruction sequence, yet gained 0–4% on
//! softmax over rows of 128 where the written-out form gains 7–10% (BENCHMARKS.md). An odd
//! count's last pair is the last row twice (rather than a third copy of the body for it): it
//! writes the same values twice, so kernels that read a buffer they write are not
//! interleaved. Each row is computed by exactly the instructions [`Emitter::point`] would run
//! for it, in the same order, so the results are the same bits; `JitOptions::interleave_rows`
//! turns it off.

use super::{Emitter, Kept, Val};
use crate::llvm::error::Result;
use inkwell::values::IntValue;
use inkwell::IntPredicate;
use smelt_passes::kernel::{BufferDecl, Kernel, StageEffect, ValueId};
use std::collections::HashMap;

/// The most bytes a kernel may read and write in all for its rows to be interleaved. Measured
/// on the 2-core development VM (BENCHMARKS.md): softmax over 1.6 MB ran 7–10% faster
/// interleaved; softmax and layer_norm over 400–600 MB, bound by memory, up to 8% slower.
pub const INTERLEAVE_MAX_BYTES: u64 = 4 << 20;

/// The longest reduced row (elements) of a kernel whose rows are interleaved. Softmax over
/// rows of 128 gained 7–10%; layer_norm over rows of 768, in cache, 1–2%.
pub const INTERLEAVE_MAX_ROW: usize = 256;

/// Whether a kernel's rows are interleaved when `interleave_rows` is on: it has a reduction
/// stage (a row kernel), none over more than [`INTERLEAVE_MAX_ROW`] elements, it reads and
/// writes at most [`INTERLEAVE_MAX_BYTES`] in all, and it reads no buffer it writes (see the
/// module docs).
pub fn interleaves(kernel: &Kernel, buffers: &[BufferDecl]) -> bool {
    let bytes = kernel_bytes(kernel, buffers);
    let reductions = || {
        kernel
            .stages
            .iter()
            .filter(|s| matches!(s.effect, StageEffect::Reduce { .. }))
    };
    !kernel.outer.is_empty()
        && reductions().next().is_some()
        && reductions().all(|s| s.inner.iter().product::<usize>() <= INTERLEAVE_MAX_ROW)
        && bytes <= INTERLEAVE_MAX_BYTES
        && !kernel.reads.iter().any(|id| kernel.writes.contains(id))
}

/// The bytes of every buffer `kernel` reads or writes, in all.
pub(crate) fn kernel_bytes(kernel: &Kernel, buffers: &[BufferDecl]) -> u64 {
    kernel
        .reads
        .iter()
        .chain(&kernel.writes)
        .filter_map(|id| buffers.get(id.0 as usize))
        .map(|b| (b.numel as u64).saturating_mul(b.dtype.size_bytes() as u64))
        .sum()
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// Points `lo..hi` of the last outer dim (after the outer variables `prefix`) in pairs,
    /// stage by stage (see the module docs); an odd count's last pair is its last point twice.
    pub(crate) fn interleaved_points(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        prefix: &[IntValue<'ctx>],
    ) -> Result<()> {
        let one = self.i64c(1);
        let count = self.b.build_int_sub(hi, lo, "jn")?;
        let count = self.b.build_int_add(count, one, "jn1")?;
        let pairs = self.b.build_right_shift(count, one, true, "jpairs")?;
        let last = self.b.build_int_sub(hi, one, "jlast")?;
        self.counted_loop(self.i64c(0), pairs, "jj", |em, p| {
            let off = em.b.build_int_nsw_mul(p, em.i64c(2), "jo")?;
            let j0 = em.b.build_int_nsw_add(lo, off, "j0")?;
            let j1 = em.b.build_int_nsw_add(j0, one, "j1")?;
            let past =
                em.b.build_int_compare(IntPredicate::SGT, j1, last, "jpast")?;
            let j1 = em.b.build_select(past, j0, j1, "j1c")?.into_int_value();
            em.pair(prefix, [j0, j1])
        })
    }

    /// Points `rows` of the last outer dim, stage by stage: each stage for the first, then for
    /// the second. Each row has its own values and its own row of the kept values' scratch
    /// (`[2 x [n x T]]` arrays, see `keep_scratch`).
    fn pair(&mut self, prefix: &[IntValue<'ctx>], rows: [IntValue<'ctx>; 2]) -> Result<()> {
        let (stash2, reuse2) = (self.stash.clone(), self.reuse.clone());
        let i64t = self.ctx.i64_type();
        let mut state = Vec::with_capacity(2);
        for (k, j) in rows.into_iter().enumerate() {
            let mut outer = prefix.to_vec();
            outer.push(j);
            // Each kept value's row `k` of its `[2 x [n x T]]` array.
            let at = |m: &Kept<'ctx>| -> Result<Kept<'ctx>> {
                m.iter()
                    .map(|(&id, &arr)| {
                        let idx = [i64t.const_zero(), i64t.const_int(k as u64, false)];
                        // SAFETY (of the generated code): `k < 2`, the array's outer length.
                        let p = unsafe { self.b.build_in_bounds_gep(arr, &idx, "keepk")? };
                        Ok((id, p))
                    })
                    .collect()
            };
            state.push(Row {
                outer,
                values: self.values.clone(),
                stash: at(&stash2)?,
                reuse: at(&reuse2)?,
            });
        }
        for index in 0..self.kernel.stages.len() {
            for row in &mut state {
                self.swap_row(row);
                let done = self.stage(index, &row.outer);
                self.swap_row(row);
                done?;
            }
        }
        (self.stash, self.reuse) = (stash2, reuse2);
        Ok(())
    }

    /// Swaps the emitter's per-point state (values, kept values' scratch) with `row`'s.
    fn swap_row(&mut self, row: &mut Row<'ctx>) {
        std::mem::swap(&mut self.values, &mut row.values);
        std::mem::swap(&mut self.stash, &mut row.stash);
        std::mem::swap(&mut self.reuse, &mut row.reuse);
    }
}

/// One row of an interleaved pair while its stages are emitted.
struct Row<'ctx> {
    /// The outer loop variables, the row's last.
    outer: Vec<IntValue<'ctx>>,
    values: HashMap<ValueId, Val<'ctx>>,
    /// Its kept values' rows of the scratch (`[n x T]` each).
    stash: Kept<'ctx>,
    reuse: Kept<'ctx>,
}
