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
//! A row kernel (softmax, layer_norm: a reduction stage, then passes that read the row again)
//! reads memory only in its first pass over a row; its later passes find the row in L1. With
//! prefetches a fixed 2 KiB ahead, those passes request only what the first pass already did,
//! so the memory system idles while the row is computed and the next row's first pass waits on
//! memory: arithmetic and memory traffic add up instead of overlapping. So a kernel
//! [`row_distance`] finds rows in (with [`JitOptions::row_prefetch`]) carries the distance of
//! [`ROW_PREFETCH_ROWS`] rows as the function attribute [`PREFETCH_ATTR`], and its accesses
//! prefetch that far ahead when it is further than the module's distance: every pass over a
//! row requests the lines of the row two further on (in kernels whose data does not fit in
//! cache). Measured on the 2-core VM (BENCHMARKS.md,
//! `smelt bench --compare row-prefetch`).
//!
//! A prefetch never faults and never changes a value: the address may lie past the end of a
//! buffer (it is computed with a plain, not `inbounds`, GEP, so it is not poison either), and
//! the kernel's results are the same bits with and without. Measured side by side
//! (BENCHMARKS.md): the fused elementwise chain over 16M floats went from about 10 ms to 7 ms,
//! bias + GELU over 65536 x 768 from 40 to 27 ms, kernels on data in cache unchanged.

use super::declare;
use super::interleave::{kernel_bytes, INTERLEAVE_MAX_BYTES};
use super::stream::from_stack;
use crate::llvm::error::Result;
#[allow(unused_imports)] // named by the module docs
use crate::llvm::options::JitOptions;
use crate::llvm::options::{ROW_PREFETCH_MAX_BYTES, ROW_PREFETCH_ROWS};
use inkwell::attributes::AttributeLoc;
use inkwell::module::Module;
use inkwell::targets::TargetData;
use inkwell::types::{AnyTypeEnum, BasicType};
use inkwell::values::{BasicValueEnum, InstructionOpcode, InstructionValue, Operand};
use inkwell::AddressSpace;
use smelt_passes::kernel::{Access, BufferDecl, InstOp, Kernel, StageEffect};

/// The function attribute holding a kernel's own prefetch distance in bytes (decimal), set by
/// `build_kernel` from [`row_distance`].
pub(crate) const PREFETCH_ATTR: &str = "smelt-prefetch-bytes";

/// The prefetch distance of a row kernel: [`ROW_PREFETCH_ROWS`] times the bytes from one row
/// of its loads to the next, capped at [`ROW_PREFETCH_MAX_BYTES`] and rounded up to a cache
/// line. A row kernel here has outer dims, a reduction stage and a later stage, and its rows
/// are the steps of the last outer dim: the largest step, in bytes, of any affine load in its
/// stages. `None` for other kernels (an elementwise kernel's one pass already streams), for
/// rows that do not move the loads (a reduction over leading axes, whose last outer dim steps
/// one element), and for kernels whose data fits in cache (at most [`INTERLEAVE_MAX_BYTES`],
/// the line `interleaves` draws too: layer_norm over 128 x 768 ran 4–8% slower with it).
pub(crate) fn row_distance(kernel: &Kernel, buffers: &[BufferDecl]) -> Option<u32> {
    if kernel_bytes(kernel, buffers) <= INTERLEAVE_MAX_BYTES {
        return None;
    }
    let last = kernel.outer.len().checked_sub(1)?;
    let reduces = kernel
        .stages
        .iter()
        .position(|s| matches!(s.effect, StageEffect::Reduce { .. }))?;
    if reduces + 1 >= kernel.stages.len() {
        return None;
    }
    let step = kernel
        .stages
        .iter()
        .flat_map(|s| &s.body)
        .filter_map(|inst| match &inst.op {
            InstOp::Load {
                buffer,
                access: Access::Affine { strides, .. },
            } => {
                let size = buffers.get(buffer.0 as usize)?.dtype.size_bytes() as u64;
                Some(strides.get(last)?.unsigned_abs().saturating_mul(size))
            }
            _ => None,
        })
        .max()?;
    let ahead = step.saturating_mul(u64::from(ROW_PREFETCH_ROWS));
    // Rows shorter than a line gain nothing over the module's distance.
    (ahead >= 64).then(|| {
        ahead
            .min(u64::from(ROW_PREFETCH_MAX_BYTES))
            .next_multiple_of(64) as u32
    })
}

/// The smallest access that gets a prefetch: an AVX2 vector, half a cache line (narrower
/// vectors would spend a prefetch on a quarter line or less).
const MIN_BYTES: u64 = 32;

/// Inserts the prefetches of the module docs into every function of `module` (optimised,
/// with its data layout set): `distance` bytes ahead, or a function's own [`PREFETCH_ATTR`]
/// distance where that is further.
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
    let nontemporal = ctx.get_kind_id("nontemporal");
    let b = ctx.create_builder();
    for f in module.get_functions() {
        let own = f
            .get_string_attribute(AttributeLoc::Function, PREFETCH_ATTR)
            .and_then(|a| a.get_string_value().to_str().ok()?.parse::<u32>().ok());
        let ahead = own.map_or(distance, |own| own.max(distance));
        let ahead = ctx.i64_type().const_int(u64::from(ahead), false);
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
