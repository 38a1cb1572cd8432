//! Addressing: affine accesses (checked against their buffers at compile time, `inbounds`
//! GEPs) and computed accesses (checked at run time through the status word), loads and stores
//! in storage form.

use super::{bad, storage_type, Emitter, Val};
use crate::llvm::error::Result;
use inkwell::values::{BasicValue, IntValue, PointerValue};
use inkwell::{AtomicOrdering, AtomicRMWBinOp, IntPredicate};
use smelt_passes::kernel::{Access, BufferDecl, BufferId, InstOp, Kernel, StageEffect, Ty};

/// Every affine access of `kernel` stays inside its buffer for every loop iteration.
pub(crate) fn check_affine_bounds(kernel: &Kernel, buffers: &[BufferDecl]) -> Result<()> {
    if kernel.outer.contains(&0) {
        return Ok(());
    }
    for (s, stage) in kernel.stages.iter().enumerate() {
        if stage.inner.contains(&0) {
            continue;
        }
        let dims: Vec<usize> = kernel.outer.iter().chain(&stage.inner).copied().collect();
        let mut accesses: Vec<(BufferId, &Access)> = stage
            .body
            .iter()
            .filter_map(|i| match &i.op {
                InstOp::Load { buffer, access } => Some((*buffer, access)),
                _ => None,
            })
            .collect();
        if let StageEffect::Store(stores) = &stage.effect {
            accesses.extend(stores.iter().map(|st| (st.buffer, &st.access)));
        }
        for (buffer, access) in accesses {
            let Access::Affine { offset, strides } = access else {
                continue;
            };
            if strides.len() != dims.len() {
                return Err(bad(
                    kernel,
                    format!(
                        "stage {s}: an access of {buffer:?} has {} strides for {} loop variables",
                        strides.len(),
                        dims.len()
                    ),
                ));
            }
            let numel = buffers
                .get(buffer.0 as usize)
                .map(|b| b.numel as i128)
                .ok_or_else(|| bad(kernel, format!("unknown buffer {buffer:?}")))?;
            let (mut lo, mut hi) = (*offset as i128, *offset as i128);
            for (&st, &d) in strides.iter().zip(&dims) {
                let reach = st as i128 * (d as i128 - 1);
                if reach < 0 {
                    lo += reach;
                } else {
                    hi += reach;
                }
            }
            if lo < 0 || hi >= numel {
                return Err(bad(
                    kernel,
                    format!(
                        "stage {s}: an access of {buffer:?} reaches elements {lo}..={hi}, \
                         the buffer has {numel}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The pointer parameter of `buffer` and its declaration.
    pub(crate) fn buffer(&self, buffer: BufferId) -> Result<(PointerValue<'ctx>, &'a BufferDecl)> {
        let k = self.kernel;
        let pos = k
            .reads
            .iter()
            .chain(&k.writes)
            .position(|&b| b == buffer)
            .ok_or_else(|| self.err(format!("{buffer:?} is not a parameter")))?;
        let decl = self
            .buffers
            .get(buffer.0 as usize)
            .ok_or_else(|| self.err(format!("unknown buffer {buffer:?}")))?;
        Ok((self.ptrs[pos], decl))
    }

    /// The element pointer of an access, and whether it is in bounds (`None`: always, affine).
    pub(crate) fn address(
        &mut self,
        buffer: BufferId,
        access: &Access,
    ) -> Result<(PointerValue<'ctx>, Option<IntValue<'ctx>>, &'a BufferDecl)> {
        let (ptr, decl) = self.buffer(buffer)?;
        let i64t = self.ctx.i64_type();
        match access {
            Access::Affine { offset, strides } => {
                if let Some(p) = self.tile_address(buffer, access)? {
                    return Ok((p, None, decl));
                }
                if let Some(p) = self.aligned_address(buffer, access)? {
                    return Ok((p, None, decl));
                }
                if strides.len() != self.vars.len() {
                    return Err(self.err("access strides do not match the loop variables"));
                }
                let mut idx = self.i64c(*offset);
                for (&s, &v) in strides.iter().zip(&self.vars.clone()) {
                    if s != 0 {
                        let t = self.b.build_int_nsw_mul(v, self.i64c(s), "t")?;
                        idx = self.b.build_int_nsw_add(idx, t, "idx")?;
                    }
                }
                // SAFETY (of the generated code): `check_affine_bounds` proved the index is
                // inside the buffer for every loop iteration.
                let p = unsafe { self.b.build_in_bounds_gep(ptr, &[idx], "p")? };
                Ok((p, None, decl))
            }
            Access::Computed(id) => {
                let v = self.value(*id)?;
                let idx =
                    self.b
                        .build_int_s_extend_or_bit_cast(v.v.into_int_value(), i64t, "cidx")?;
                let numel = i64t.const_int(decl.numel as u64, false);
                let ok = self
                    .b
                    .build_int_compare(IntPredicate::ULT, idx, numel, "inb")?;
                let safe = self.b.build_select(ok, idx, self.i64c(0), "sidx")?;
                // SAFETY (of the generated code): `safe` is in bounds whenever `ok` holds, and
                // the pointer is dereferenced only then.
                let p = unsafe { self.b.build_gep(ptr, &[safe.into_int_value()], "cp")? };
                Ok((p, Some(ok), decl))
            }
        }
    }

    /// Sets the status word (atomically: chunks run concurrently).
    fn set_status(&mut self) -> Result<()> {
        self.b.build_atomicrmw(
            AtomicRMWBinOp::Or,
            self.status,
            self.ctx.i32_type().const_int(1, false),
            AtomicOrdering::Monotonic,
        )?;
        Ok(())
    }

    /// Sets the status word when `ok` is false.
    pub(crate) fn flag_unless(&mut self, ok: IntValue<'ctx>) -> Result<()> {
        let (bad_b, cont) = (self.block("oob"), self.block("inb"));
        self.b.build_conditional_branch(ok, cont, bad_b)?;
        self.b.position_at_end(bad_b);
        self.set_status()?;
        self.b.build_unconditional_branch(cont)?;
        self.b.position_at_end(cont);
        Ok(())
    }

    pub(crate) fn load(&mut self, buffer: BufferId, access: &Access, ty: Ty) -> Result<Val<'ctx>> {
        let (p, ok, decl) = self.address(buffer, access)?;
        if ty != Ty::Data(decl.dtype) {
            return Err(self.err(format!("load of {buffer:?} ({}) as {ty:?}", decl.dtype)));
        }
        let raw = match ok {
            None => self.b.build_load(p, "ld")?,
            Some(ok) => {
                self.flag_unless(ok)?;
                if decl.numel == 0 {
                    storage_type(self.ctx, decl.dtype).const_zero()
                } else {
                    self.b.build_load(p, "ld")?
                }
            }
        };
        if self.tag_stage_loads && self.stage_index > 0 {
            if let Some(inst) = raw.as_instruction_value() {
                super::prefetch::tag_load(self.ctx, inst, self.stage_index, buffer)?;
            }
        }
        let v = self.load_value(decl.dtype, raw)?;
        Ok(Val { v, ty })
    }

    pub(crate) fn store(&mut self, buffer: BufferId, access: &Access, v: Val<'ctx>) -> Result<()> {
        let (p, ok, decl) = self.address(buffer, access)?;
        if v.ty != Ty::Data(decl.dtype) {
            return Err(self.err(format!(
                "store of {:?} into {buffer:?} ({})",
                v.ty, decl.dtype
            )));
        }
        let raw = self.to_storage(decl.dtype, v.v)?;
        match ok {
            None => {
                self.b.build_store(p, raw)?;
            }
            Some(ok) => {
                let (yes, no, cont) = (self.block("st"), self.block("st.oob"), self.block("st.j"));
                self.b.build_conditional_branch(ok, yes, no)?;
                self.b.position_at_end(yes);
                self.b.build_store(p, raw)?;
                self.b.build_unconditional_branch(cont)?;
                self.b.position_at_end(no);
                self.set_status()?;
                self.b.build_unconditional_branch(cont)?;
                self.b.position_at_end(cont);
            }
        }
        Ok(())
    }
}
