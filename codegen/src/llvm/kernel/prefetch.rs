//! Software prefetch in kernels' vector loops ([`JitOptions::prefetch_bytes`], on by default).
//!
//! A kernel that computes much per element (`tanh`, `erf`, `exp`) keeps the core's
//! out-of-order window full of arithmetic, and the hardware prefetchers, which follow the
//! demand misses, then run too little ahead: measured on a 2-core AVX-512 VM, such a loop over
//! memory took about as long as its arithmetic in cache plus a plain copy of its data, the
//! two barely overlapping. Requesting each line some distance ahead of its use lets memory
//! and arithmetic overlap. So, after optimisation (when the loop vectoriser has made the
//! vector loads and stores), every load of a vector of at least 32 bytes (AVX2's width; a
//! 64-byte AVX-512 vector is one cache line) and every such store, to memory other than the
//! stack, is preceded by `llvm.prefetch` of the address `prefetch_bytes` further on
//! (`prefetcht0` for a load, `prefetchw` for a store on x86-64; none for a streaming store,
//! see `stream.rs`). Rows of a row kernel follow each other in memory, so a row's prefetches
//! fetch the start of the next rows while it computes.
//!
//! A prefetch never faults and never changes a value: the address may lie past the end of a
//! buffer (it is computed with a plain, not `inbounds`, GEP, so it is not poison either), and
//! the kernel's results are the same bits with and without. Measured side by side
//! (BENCHMARKS.md): the fused elementwise chain over 16M floats went from about 10 ms to 7 ms,
//! bias + GELU over 65536 x 768 from 40 to 27 ms, kernels on data in cache unchanged.

use super::declare;
use super::stream::from_stack;
use crate::llvm::error::Result;
#[allow(unused_imports)] // named by the module docs
use crate::llvm::options::JitOptions;
use inkwell::module::Module;
use inkwell::targets::TargetData;
use inkwell::types::{AnyTypeEnum, BasicType};
use inkwell::values::{BasicValueEnum, InstructionOpcode, InstructionValue, Operand};
use inkwell::AddressSpace;

/// The smallest access that gets a prefetch: an AVX2 vector, half a cache line (narrower
/// vectors would spend a prefetch on a quarter line or less).
const MIN_BYTES: u64 = 32;

/// Inserts the prefetches of the module docs, `distance` bytes ahead, into every function
/// of `module` (optimised, with its data layout set).
pub(crate) fn insert_prefetches(module: &Module<'_>, distance: u32) -> Result<()> {
    let ctx = module.get_context();
    let layout = module.get_data_layout();
    let data = TargetData::create(layout.as_str().to_str().unwrap_or_default());
    let i8p = ctx.i8_type().ptr_type(AddressSpace::default());
    let i32t = ctx.i32_type();
    // llvm.prefetch(address, rw, locality, cache type): locality 3 (keep in all levels),
    // cache type 1 (data).
    let prefetch = declare(
        module,
        "llvm.prefetch.p0i8",
        ctx.void_type()
            .fn_type(&[i8p.into(), i32t.into(), i32t.into(), i32t.into()], false),
    );
    let ahead = ctx.i64_type().const_int(u64::from(distance), false);
    let nontemporal = ctx.get_kind_id("nontemporal");
    let b = ctx.create_builder();
    for f in module.get_functions() {
        for bb in f.get_basic_blocks() {
            let mut next = bb.get_first_instruction();
            while let Some(inst) = next {
                next = inst.get_next_instruction();
                let Some((p, write)) = line_access(&data, inst) else {
                    continue;
                };
                // A streaming store (`stream.rs`) writes its line without reading it: a write
                // prefetch would fetch the line it avoids.
                if write && inst.get_metadata(nontemporal).is_some() {
                    continue;
                }
                if from_stack(p) {
                    continue;
                }
                b.position_before(&inst);
                let raw = b.build_pointer_cast(p, i8p, "pf.p")?;
                // SAFETY (of the generated code): a plain GEP, defined for any offset; the
                // prefetch it feeds never faults.
                let at = unsafe { b.build_gep(raw, &[ahead], "pf.at")? };
                b.build_call(
                    prefetch,
                    &[
                        at.into(),
                        i32t.const_int(u64::from(write), false).into(),
                        i32t.const_int(3, false).into(),
                        i32t.const_int(1, false).into(),
                    ],
                    "",
                )?;
            }
        }
    }
    Ok(())
}

/// The address of a load or store of a vector of at least [`MIN_BYTES`] bytes, and whether
/// it writes.
fn line_access<'ctx>(
    data: &TargetData,
    inst: InstructionValue<'ctx>,
) -> Option<(inkwell::values::PointerValue<'ctx>, bool)> {
    let (ty, address, write): (AnyTypeEnum, _, _) = match inst.get_opcode() {
        InstructionOpcode::Load => (inst.get_type(), inst.get_operand(0), false),
        InstructionOpcode::Store => match inst.get_operand(0) {
            Some(Operand::Value(BasicValueEnum::VectorValue(v))) => {
                (v.get_type().into(), inst.get_operand(1), true)
            }
            _ => return None,
        },
        _ => return None,
    };
    if !ty.is_vector_type()
        || data.get_store_size(&ty.into_vector_type().as_basic_type_enum()) < MIN_BYTES
    {
        return None;
    }
    match address {
        Some(Operand::Value(BasicValueEnum::PointerValue(p))) => Some((p, write)),
        _ => None,
    }
}
