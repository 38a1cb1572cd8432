//! Non-temporal ("streaming") stores for kernels that write large buffers.
//!
//! A plain store to memory first reads the cache line it writes (read-for-ownership), so a
//! kernel that reads one buffer and writes another moves three bytes for every two it needs;
//! a non-temporal store writes whole lines without reading them, like `memcpy` does for large
//! copies. x86 has such stores only for whole vectors at aligned addresses (`vmovntps`), and
//! LLVM's loop vectoriser refuses to widen a scalar store marked `!nontemporal` unless it is
//! already aligned for a vector. So, for a kernel whose written buffers are all at least
//! [`JitOptions::nontemporal_min_bytes`](crate::llvm::JitOptions) long:
//!
//! 1. **Peeling** ([`Emitter::streaming_loop`]): the loop over the variable a store walks
//!    contiguously (an elementwise kernel's last outer dim, a row kernel's innermost store
//!    loop) is split in two: a head of at most `64 / element size - 1` iterations, up to the
//!    first element of that store's buffer at a 64-byte boundary, then the main loop, whose
//!    entry tells LLVM so (`llvm.assume((ptrtoint p & 63) == 0)`) and which addresses that
//!    buffer from the aligned pointer, indexed by the main loop's own count from 0. The main
//!    loop runs whole groups of [`TAIL_GROUP`] lines and a tail loop the rest; the head and
//!    the tail carry [`MASKED_TAIL`] hints, so each runs as masked vectors rather than the
//!    vectoriser's narrower epilogue and a scalar remainder (which, for rows of a tensor 16
//!    bytes off a line, cost as much as a third of a row's arithmetic). All three run the same
//!    body, so the values are unchanged. A loop shorter than one group ([`MIN_STREAM_RUN`],
//!    256 bytes) is not peeled: its main part would never run, so nothing would stream, and the
//!    peeling cost rows of 16 and 32 floats 1.3–2.5x their time; a kernel none of whose loops
//!    is that long does not stream at all (no twin).
//! 2. **Optimisation** as usual: the vectoriser widens the main loop, and instcombine derives
//!    that its vector stores are 64-byte aligned from the assumption.
//! 3. **Marking** ([`mark_streaming_stores`], after optimisation): in such a kernel's entry
//!    function every store of a whole 64-byte vector aligned to 64 bytes (one cache line),
//!    to memory other than the stack, gets `!nontemporal`; the back end then emits streaming
//!    stores for them. Stores LLVM could not prove aligned stay plain stores: marking is never
//!    wrong, only sometimes absent. On AVX-512, narrower vectors (the vectoriser's 32-byte
//!    epilogue) are left plain: half-line streaming stores made a permute kernel 18x slower
//!    when measured. On a target whose widest vectors are half a line (AVX2), the main loop's
//!    32-byte stores stream too, and only they: they fill its lines in consecutive pairs, as
//!    `memcpy`'s do, and are told apart by their address, derived from the main loop's
//!    aligned pointer (`llvm.launder.invariant.group`, which nothing else calls). Until the
//!    thirty-sixth session nothing streamed on AVX2, so the peeling cost something for
//!    nothing; on the AMD EPYC (Zen 3) host, streaming then made add + layer_norm and
//!    softmax over 65536 x 768 1.25–1.3x and permute-add 1.25–1.4x as fast, the elementwise
//!    chain 5–8% slower (its peeled loop, streaming or not; BENCHMARKS.md).
//!
//! Streaming is on by default for kernels writing at least 16 MiB
//! (`JitOptions::nontemporal_min_bytes`): on the 2-core VM it was measured on, with row kernels
//! prefetching rows ahead (`prefetch.rs`, which puts no write prefetch before a streaming
//! store), it made the large row kernels and the elementwise chain 7–20% faster and left the
//! other large kernels within ±4% (BENCHMARKS.md). Into memory just allocated, whose pages the
//! OS zeroed through the cache, it is slower: a kernel that streams and writes an output also
//! has a plain-store twin (`has_plain_twin`), which `run` uses for its fresh outputs.
//! 4. **Ordering**: streaming stores are weakly ordered, so the entry function ends with
//!    `sfence` (x86-64) before it returns and the pool reports the chunk done.

use super::{declare, inflight, Emitter, Hint, Scalef, MASKED_TAIL};
use crate::llvm::error::Result;
use inkwell::attributes::AttributeLoc;
use inkwell::module::Module;
use inkwell::targets::TargetData;
use inkwell::types::BasicType;
use inkwell::values::{
    BasicValue, BasicValueEnum, InstructionOpcode, InstructionValue, IntValue, Operand,
    PointerValue,
};
use inkwell::{AddressSpace, IntPredicate};
use smelt_passes::kernel::{Access, BufferDecl, BufferId, Kernel, Stage, StageEffect};

/// The function attribute that marks a kernel entry whose vector stores may stream.
pub(crate) const STREAMING_ATTR: &str = "smelt-streaming-stores";

/// The alignment the main loop starts at: one AVX-512 vector, one cache line.
const ALIGN: u64 = 64;

/// The main loop of a streaming store runs whole groups of this many lines (what one
/// iteration of a 4-vector AVX-512 loop stores); the rest runs in a masked tail loop.
const TAIL_GROUP: u64 = 4;

/// The fewest bytes a streaming loop must span for a whole group of [`TAIL_GROUP`] lines to
/// fit in it: a shorter loop would run its head and tail only, as masked vectors, which never
/// stream, and pay for the peeling on every row for nothing.
pub(crate) const MIN_STREAM_RUN: u64 = TAIL_GROUP * ALIGN;

/// Whether `kernel` streams its stores under `min_bytes` (see the module docs): every buffer
/// it writes is at least that long, and one of its store loops spans [`MIN_STREAM_RUN`] bytes
/// of the buffer it writes contiguously.
pub(crate) fn streams(kernel: &Kernel, buffers: &[BufferDecl], min_bytes: Option<u64>) -> bool {
    let Some(min) = min_bytes else {
        return false;
    };
    !kernel.writes.is_empty()
        && kernel.writes.iter().all(|id| {
            buffers.get(id.0 as usize).is_some_and(|b| {
                (b.numel as u64).saturating_mul(b.dtype.size_bytes() as u64) >= min
            })
        })
        && stream_runs(kernel, buffers).any(|bytes| bytes >= MIN_STREAM_RUN)
}

/// The bytes each loop of `kernel` that may stream (see [`Emitter::streaming_loop`]'s
/// callers) spans of the store it walks contiguously: an elementwise kernel's last outer
/// dim, a row kernel's innermost store loops.
fn stream_runs<'k>(
    kernel: &'k Kernel,
    buffers: &'k [BufferDecl],
) -> impl Iterator<Item = u64> + 'k {
    let size = |b: BufferId| {
        buffers
            .get(b.0 as usize)
            .map_or(0, |d| d.dtype.size_bytes() as u64)
    };
    let outer = kernel.outer.len();
    let whole = crate::transposed::stores_walk_last_outer_dim(kernel)
        .then(|| {
            let last = *kernel.outer.last()? as u64;
            let (b, _) = contiguous_store(&kernel.stages, outer.checked_sub(1)?)?;
            Some(last.saturating_mul(size(b)))
        })
        .flatten();
    let rows = kernel.stages.iter().filter_map(move |stage| {
        let last = *stage.inner.last()? as u64;
        let (b, _) = contiguous_store([stage], outer + stage.inner.len() - 1)?;
        Some(last.saturating_mul(size(b)))
    });
    whole.into_iter().chain(rows)
}

/// The main loop's aligned pointer into one buffer (see [`Emitter::streaming_loop`]).
pub(crate) struct AlignedStore<'ctx> {
    buffer: BufferId,
    access: Access,
    /// The element where the main loop starts, 64-byte aligned.
    base: PointerValue<'ctx>,
    /// In the main loop's body: its variable `i` and the count `k` from the start it is
    /// computed from, which addresses `base` directly (see [`Emitter::aligned_address`]).
    count: Option<(IntValue<'ctx>, IntValue<'ctx>)>,
}

/// The first store among `stages` whose access walks loop variable `var` with stride 1 (whole
/// contiguous vectors of it can stream).
pub(crate) fn contiguous_store<'k>(
    stages: impl IntoIterator<Item = &'k Stage>,
    var: usize,
) -> Option<(BufferId, Access)> {
    stages.into_iter().find_map(|stage| match &stage.effect {
        StageEffect::Store(stores) => stores.iter().find_map(|st| match &st.access {
            Access::Affine { strides, .. } if strides.get(var) == Some(&1) => {
                Some((st.buffer, st.access.clone()))
            }
            _ => None,
        }),
        StageEffect::Reduce { .. } => None,
    })
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `for (i = lo; i < hi; i++) f(i)`, the innermost loop of a store stage: with the
    /// interleave count of [`JitOptions::interleave_vectors`] when there is one.
    ///
    /// [`JitOptions::interleave_vectors`]: crate::llvm::JitOptions::interleave_vectors
    pub(crate) fn store_loop(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        name: &str,
        f: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<()> {
        if self.splits_next_loop() {
            return self.split_loop(lo, hi, name, f);
        }
        match self.interleave_vectors {
            Some(n) => {
                let before = self.function.get_last_basic_block();
                let latch = self.counted_loop_latch(lo, hi, name, f)?;
                let registers = if self.scalef == Scalef::Generic {
                    16
                } else {
                    32
                };
                let cost = inflight::body_cost(self.function, before);
                let m = inflight::vectors_in_flight(n, cost, registers);
                let count = ("llvm.loop.interleave.count", Hint::Int(m));
                if m > n {
                    // The vectoriser's copies are all such a loop needs: LLVM's unroller would
                    // write the widened body out once more, and past the register file.
                    self.attach_hints(latch, &[count, ("llvm.loop.unroll.disable", Hint::Flag)]);
                } else {
                    // Short bodies may be unrolled further (layer_norm's store pass over
                    // 128 x 768 measured 6–9% slower without).
                    self.attach_hints(latch, &[count]);
                }
                Ok(())
            }
            None => self.counted_loop(lo, hi, name, f),
        }
    }

    /// `for (i = lo; i < hi; i++) f(i)` with the current loop variables as they are and `i`
    /// pushed last; when `target` names a store walking `i` contiguously and the loop's
    /// `extent` (the most iterations it runs) spans [`MIN_STREAM_RUN`] bytes of it, peeled so
    /// that the main part starts where that store's address is 64-byte aligned (see the module
    /// docs).
    pub(crate) fn streaming_loop(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        extent: u64,
        name: &str,
        target: Option<(BufferId, Access)>,
        f: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<()> {
        let Some((buffer, access)) = target else {
            return self.store_loop(lo, hi, name, f);
        };
        let i64t = self.ctx.i64_type();
        // The loop body pushes its variable (and may change deeper ones): the addresses below
        // are taken at this depth.
        let depth = self.vars.len();
        let size = self.buffer(buffer)?.1.dtype.size_bytes() as u64;
        if !size.is_power_of_two() || size > ALIGN || extent.saturating_mul(size) < MIN_STREAM_RUN {
            return self.store_loop(lo, hi, name, f);
        }
        // Head: up to the first element at a 64-byte boundary (elements are aligned to their
        // size by the calling convention, so one is reached within 64 / size steps).
        let p_lo = self.address_at(buffer, &access, lo)?;
        let addr = self.b.build_ptr_to_int(p_lo, i64t, "addr")?;
        let mask = i64t.const_int(ALIGN - 1, false);
        let off = self.b.build_and(addr, mask, "mis")?;
        let gap = self
            .b
            .build_int_sub(i64t.const_int(ALIGN, false), off, "gap")?;
        let gap = self.b.build_and(gap, mask, "gapb")?;
        let skip = i64t.const_int(u64::from(size.trailing_zeros()), false);
        let head = self.b.build_right_shift(gap, skip, false, "head")?;
        let mid = self.b.build_int_nsw_add(lo, head, "mid")?;
        let any = self
            .b
            .build_int_compare(IntPredicate::SLT, mid, hi, "any")?;
        let head_end = self
            .b
            .build_select(any, mid, hi, "head_end")?
            .into_int_value();
        // At most `64 / size - 1` iterations: one masked vector, not a scalar loop.
        self.counted_loop_hinted(lo, head_end, &format!("{name}.head"), MASKED_TAIL, &mut *f)?;
        // Main part `mid..hi`, entered only when it is not empty (the assumption holds only
        // then; the head ended at `mid`).
        let (pre, exit) = (
            self.block(&format!("{name}.aligned")),
            self.block(&format!("{name}.done")),
        );
        self.b.build_conditional_branch(any, pre, exit)?;
        self.b.position_at_end(pre);
        self.vars.truncate(depth);
        let base = self.address_at(buffer, &access, mid)?;
        let base = self.opaque(base)?;
        let addr = self.b.build_ptr_to_int(base, i64t, "aaddr")?;
        let low = self.b.build_and(addr, mask, "alow")?;
        let aligned =
            self.b
                .build_int_compare(IntPredicate::EQ, low, i64t.const_zero(), "aligned")?;
        self.assume(aligned)?;
        let outer = self.aligned.replace(AlignedStore {
            buffer,
            access,
            base,
            count: None,
        });
        // The main loop counts `k` from 0 and runs the body at `i = mid + k`, so that the
        // aligned pointer is indexed by the loop's own counter. Indexed by `i - mid` instead,
        // the vectoriser's `mid + index` became `mid | index` wherever `mid` < 64 / size was
        // provable (a row kernel's chunk-independent start), `(mid | index) - mid` was not
        // simplified back, and the stores' 64-byte alignment, hence their streaming, was lost.
        let trip = self.b.build_int_nsw_sub(hi, mid, "trip")?;
        // The main loop runs whole groups of `TAIL_GROUP` lines; the rest, fewer, runs in a loop
        // of its own whose vectorised form masks its last vector, instead of the vectoriser's
        // narrower epilogue and a scalar remainder (every row of a tensor 16 bytes off a line
        // ends that way).
        let group = i64t.const_int(TAIL_GROUP * (ALIGN / size), false);
        let whole = self.b.build_int_unsigned_div(trip, group, "groups")?;
        let whole = self.b.build_int_nuw_mul(whole, group, "whole")?;
        let mut body = |e: &mut Self, k: IntValue<'ctx>| {
            let i = e.b.build_int_nsw_add(mid, k, "ik")?;
            if let Some(a) = e.aligned.as_mut() {
                a.count = Some((i, k));
            }
            f(e, i)
        };
        let r = self
            .store_loop(i64t.const_zero(), whole, name, &mut body)
            .and_then(|()| {
                self.vars.truncate(depth);
                let tail = format!("{name}.tail");
                self.counted_loop_hinted(whole, trip, &tail, MASKED_TAIL, &mut body)
            });
        self.aligned = outer;
        self.vars.truncate(depth);
        r?;
        self.b.build_unconditional_branch(exit)?;
        self.b.position_at_end(exit);
        Ok(())
    }

    /// The address of `access` into `buffer` with `i` pushed as the last loop variable.
    fn address_at(
        &mut self,
        buffer: BufferId,
        access: &Access,
        i: IntValue<'ctx>,
    ) -> Result<PointerValue<'ctx>> {
        self.vars.push(i);
        let p = self.address(buffer, access).map(|(p, _, _)| p);
        self.vars.pop();
        p
    }

    /// The main loop's address for `access` into `buffer`, when it is the aligned store's and
    /// the last loop variable is the main loop's: the aligned pointer plus the loop's count
    /// (the access has stride 1 in that variable and the others are fixed in the loop).
    /// `None` otherwise: the caller computes the address as usual.
    pub(crate) fn aligned_address(
        &mut self,
        buffer: BufferId,
        access: &Access,
    ) -> Result<Option<PointerValue<'ctx>>> {
        let Some(a) = &self.aligned else {
            return Ok(None);
        };
        if a.buffer != buffer || a.access != *access {
            return Ok(None);
        }
        let (base, count) = (a.base, a.count);
        let i = *self
            .vars
            .last()
            .ok_or_else(|| self.err("an aligned store outside its loop"))?;
        let d = match count {
            Some((ci, k)) if ci == i => k,
            _ => return Ok(None),
        };
        // SAFETY (of the generated code): `base + d` is the element the affine access names
        // at this iteration, which `check_affine_bounds` proved inside the buffer.
        Ok(Some(unsafe {
            self.b.build_in_bounds_gep(base, &[d], "pa")?
        }))
    }

    /// `p` through `llvm.launder.invariant.group`: the same address, based on the same object
    /// for alias analysis, but a call result that instcombine does not fold into the GEPs
    /// derived from it (else `gep(p_mid, j - mid)` becomes `gep(buffer, j + ..)` and the
    /// alignment known for `p_mid` is lost).
    fn opaque(&mut self, p: PointerValue<'ctx>) -> Result<PointerValue<'ctx>> {
        let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
        let raw = self.b.build_pointer_cast(p, i8p, "raw")?;
        let out = self.call(
            "llvm.launder.invariant.group.p0i8",
            i8p.into(),
            &[raw.into()],
        )?;
        Ok(self
            .b
            .build_pointer_cast(out.into_pointer_value(), p.get_type(), "aligned_p")?)
    }

    /// `llvm.assume(cond)`.
    fn assume(&mut self, cond: IntValue<'ctx>) -> Result<()> {
        let t = self
            .ctx
            .void_type()
            .fn_type(&[self.ctx.bool_type().into()], false);
        let f = declare(self.module, "llvm.assume", t);
        self.b.build_call(f, &[cond.into()], "")?;
        Ok(())
    }
}

/// Step 3 of the module docs: marks the streaming stores of every function carrying
/// [`STREAMING_ATTR`] in `module` (optimised, with its data layout set), for a target whose
/// widest vectors are `widest_vector` bytes.
pub(crate) fn mark_streaming_stores(module: &Module<'_>, widest_vector: u64) -> Result<()> {
    let ctx = module.get_context();
    let layout = module.get_data_layout();
    let data = TargetData::create(layout.as_str().to_str().unwrap_or_default());
    let kind = ctx.get_kind_id("nontemporal");
    let node = ctx.metadata_node(&[ctx.i32_type().const_int(1, false).into()]);
    for f in module.get_functions() {
        if f.get_string_attribute(AttributeLoc::Function, STREAMING_ATTR)
            .is_none()
        {
            continue;
        }
        for bb in f.get_basic_blocks() {
            let mut next = bb.get_first_instruction();
            while let Some(inst) = next {
                next = inst.get_next_instruction();
                if streaming_store(&data, inst, widest_vector) && !to_stack(inst) {
                    inst.set_metadata(node, kind)
                        .map_err(|e| crate::llvm::LlvmError::Build {
                            message: format!("marking a streaming store: {e}"),
                        })?;
                }
            }
        }
    }
    Ok(())
}

/// Whether `inst` may stream: a store of a vector aligned to at least its size, either of a
/// whole line or more, or, on a target whose widest vectors are narrower (`widest_vector`,
/// AVX2's 32 bytes), of a whole such vector into a main loop's aligned pointer
/// ([`Emitter::streaming_loop`]). The main loop stores the buffer contiguously from a line
/// boundary through whole groups of lines, so its consecutive half-line stores fill each
/// line together, as `memcpy`'s do; a narrower store elsewhere (a transposed tile's row)
/// may leave its line's other half for much later, which is what made half-line streaming
/// stores 18x slower in a permute kernel.
fn streaming_store(data: &TargetData, inst: InstructionValue<'_>, widest_vector: u64) -> bool {
    if inst.get_opcode() != InstructionOpcode::Store {
        return false;
    }
    let Some(Operand::Value(BasicValueEnum::VectorValue(v))) = inst.get_operand(0) else {
        return false;
    };
    let size = data.get_store_size(&v.get_type().as_basic_type_enum());
    let aligned = inst.get_alignment().is_ok_and(|a| u64::from(a) >= size);
    let main_loop = || match inst.get_operand(1) {
        Some(Operand::Value(BasicValueEnum::PointerValue(p))) => from_laundered(p),
        _ => false,
    };
    aligned && (size >= ALIGN || (widest_vector < ALIGN && size == widest_vector && main_loop()))
}

/// Whether a store's address is derived (through GEPs and casts) from a stack slot: scratch
/// that is read again soon, which streaming would push out of the cache.
fn to_stack(store: InstructionValue<'_>) -> bool {
    match store.get_operand(1) {
        Some(Operand::Value(BasicValueEnum::PointerValue(p))) => from_stack(p),
        _ => false,
    }
}

/// Whether an address is derived (through GEPs and casts) from a stack slot.
pub(crate) fn from_stack(p: PointerValue<'_>) -> bool {
    root(p).is_some_and(|i| i.get_opcode() == InstructionOpcode::Alloca)
}

/// Whether an address is derived (through GEPs and casts) from `llvm.launder.invariant.group`:
/// the aligned pointer of a streaming main loop (see `Emitter::opaque`), the only place
/// kernels call it.
fn from_laundered(p: PointerValue<'_>) -> bool {
    root(p)
        .and_then(|i| inkwell::values::CallSiteValue::try_from(i).ok())
        .and_then(|call| call.get_called_fn_value())
        .is_some_and(|f| {
            f.get_name()
                .to_bytes()
                .starts_with(b"llvm.launder.invariant.group")
        })
}

/// The instruction an address is derived from through GEPs and casts (at most 32 of them), if
/// it is one: a stack slot, a call, a load.
fn root(p: PointerValue<'_>) -> Option<InstructionValue<'_>> {
    let mut p = Some(Operand::Value(p.into()));
    for _ in 0..32 {
        let Some(Operand::Value(v)) = p else {
            return None;
        };
        let i = v.as_instruction_value()?;
        match i.get_opcode() {
            InstructionOpcode::GetElementPtr | InstructionOpcode::BitCast => {
                p = i.get_operand(0);
            }
            _ => return Some(i),
        }
    }
    None
}
