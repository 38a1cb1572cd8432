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
//! `smelt bench --compare row-prefetch`). That is [`RowPrefetch::Rows`], the default on Intel
//! and on AMD Zen 3 (where it made softmax over 65536 x 768 1.25x–1.33x as fast as none); on
//! AMD Zen 4, the default is [`RowPrefetch::Off`]: such a kernel carries
//! [`NO_PREFETCH_ATTR`] and gets no prefetch at all, the hardware prefetchers alone fetching
//! its rows, which ran add + layer_norm over 65536 x 768 1.17x–1.38x as fast as rows ahead
//! (and 2 KiB ahead in between).
//!
//! Which pass requests the rows ahead matters as much as how far ahead. The first pass over a
//! row (softmax's max) is a tight loop of loads; were its loads to carry the prefetches, the
//! row two further on would be requested in one burst that stalls that loop on the core's few
//! line-fill buffers, and nothing would be requested during the arithmetic of the later passes
//! (softmax's `exp`), so memory traffic and arithmetic would again add up. So in a row kernel
//! whose later stage computes a transcendental op ([`first_pass_loads`]; where every pass is
//! light, as in layer_norm, the first pass's prefetches measured better), the first stage's
//! loads of a buffer that a later stage loads again get no prefetch: the later,
//! arithmetic-heavy pass alone requests the lines, spread over its arithmetic
//! ([`JitOptions::first_pass_prefetch`] keeps them, to measure the difference). A probe
//! in C of softmax over 65536 x 768 on the Intel host ran in 8.8 ms that way against 11.1 ms
//! with both passes prefetching (BENCHMARKS.md). The kernel IR's stages are gone once LLVM has
//! optimised the function, so the kernel carries the buffers its first stage loads as the
//! attribute [`FIRST_PASS_ATTR`], and each load of a later stage carries its stage and buffer
//! in an alias scope of its own ([`tag_load`]): LLVM keeps alias scopes through vectorising,
//! unrolling and inlining, and no `!noalias` names these scopes, so they change no alias
//! query. Where every buffer of the first stage has a tagged load after optimisation, only
//! tagged loads get prefetches; otherwise (a first-stage buffer read from nowhere else, or a
//! tag LLVM dropped) every load keeps its prefetch, as before. (The first stage's own loads
//! cannot carry a tag: softmax's max pass is a copy into the reduction's lanes, which LLVM
//! turns into a `memcpy` and back, dropping the loads' metadata.)
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
use crate::llvm::options::{JitOptions, RowPrefetch};
use crate::llvm::options::{ROW_PREFETCH_MAX_BYTES, ROW_PREFETCH_ROWS};
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::targets::TargetData;
use inkwell::types::{AnyTypeEnum, BasicType};
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, InstructionOpcode, InstructionValue, MetadataValue,
    Operand,
};
use inkwell::AddressSpace;
use smelt_passes::kernel::{Access, BufferDecl, BufferId, InstOp, Kernel, StageEffect};
use std::collections::HashSet;

/// The prefix of the alias scopes [`tag_load`] gives loads: `smelt.load.s{stage}.b{buffer}`.
const TAG_PREFIX: &str = "smelt.load.s";

/// The function attribute of a row kernel (one with [`PREFETCH_ATTR`]) listing the buffers
/// its first stage loads, as decimal ids separated by commas ([`first_pass_loads`]).
pub(crate) const FIRST_PASS_ATTR: &str = "smelt-first-pass-loads";

/// The buffers `kernel`'s first stage loads, for [`FIRST_PASS_ATTR`], where a later stage
/// computes a transcendental op (`exp`, `tanh`, …; see the module docs): `None` where none
/// does. Where every pass is light (layer_norm: sums, a subtraction, a multiply-add), the
/// first pass's prefetches were the better place: moving them to the later passes made
/// add + layer_norm over 65536 x 768 about 5% slower on the Intel host.
pub(crate) fn first_pass_loads(kernel: &Kernel) -> Option<String> {
    let (first, later) = kernel.stages.split_first()?;
    let heavy = later
        .iter()
        .flat_map(|s| &s.body)
        .any(|inst| super::reuse::transcendental(&inst.op));
    if !heavy {
        return None;
    }
    let mut ids: Vec<u32> = first
        .body
        .iter()
        .filter_map(|inst| match &inst.op {
            InstOp::Load { buffer, .. } => Some(buffer.0),
            _ => None,
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Some(ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
}

/// Marks `load` as one of stage `stage`'s loads of `buffer` (see the module docs): an alias
/// scope named after both, in a domain of its own.
pub(crate) fn tag_load(
    ctx: &Context,
    load: InstructionValue<'_>,
    stage: usize,
    buffer: BufferId,
) -> Result<()> {
    let domain = ctx.metadata_node(&[ctx.metadata_string("smelt.load").into()]);
    let name = format!("{TAG_PREFIX}{stage}.b{}", buffer.0);
    let scope = ctx.metadata_node(&[ctx.metadata_string(&name).into(), domain.into()]);
    let list = ctx.metadata_node(&[scope.into()]);
    load.set_metadata(list, ctx.get_kind_id("alias.scope"))
        .map_err(|e| crate::llvm::LlvmError::Build {
            message: format!("tagging a load: {e}"),
        })
}

/// The (stage, buffer) tags [`tag_load`] left on `inst`, as LLVM kept them.
fn load_tags(inst: InstructionValue<'_>, kind: u32) -> Vec<(usize, u32)> {
    let Some(list) = inst.get_metadata(kind) else {
        return Vec::new();
    };
    let name = |m: MetadataValue<'_>| -> Option<String> {
        match m.get_node_values()?.first()? {
            BasicMetadataValueEnum::MetadataValue(s) if s.is_string() => {
                Some(std::str::from_utf8(s.get_string_value()?).ok()?.to_string())
            }
            _ => None,
        }
    };
    list.get_node_values()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|scope| match scope {
            BasicMetadataValueEnum::MetadataValue(m) if m.is_node() => name(m),
            _ => None,
        })
        .filter_map(|n| {
            let (s, b) = n.strip_prefix(TAG_PREFIX)?.split_once(".b")?;
            Some((s.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// The function attribute holding a kernel's own prefetch distance in bytes (decimal), set by
/// `build_kernel` from [`row_distance`].
pub(crate) const PREFETCH_ATTR: &str = "smelt-prefetch-bytes";

/// The function attribute of a row kernel that [`row_distance`] finds rows in, under
/// `RowPrefetch::Off`: none of its loads and stores get a prefetch.
pub(crate) const NO_PREFETCH_ATTR: &str = "smelt-no-prefetch";

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
    let alias_scope = ctx.get_kind_id("alias.scope");
    let tile_load = ctx.get_kind_id(super::tile::TILE_LOAD);
    let b = ctx.create_builder();
    for f in module.get_functions() {
        if f.get_string_attribute(AttributeLoc::Function, NO_PREFETCH_ATTR)
            .is_some()
        {
            continue;
        }
        let own = f
            .get_string_attribute(AttributeLoc::Function, PREFETCH_ATTR)
            .and_then(|a| a.get_string_value().to_str().ok()?.parse::<u32>().ok());
        let ahead = own.map_or(distance, |own| own.max(distance));
        let ahead = ctx.i64_type().const_int(u64::from(ahead), false);
        // A row kernel whose first stage's buffers are all loaded again by later stages: only
        // those later loads prefetch (see the module docs).
        let first: Option<HashSet<u32>> = own.and_then(|_| {
            let a = f.get_string_attribute(AttributeLoc::Function, FIRST_PASS_ATTR)?;
            let s = a.get_string_value().to_str().ok()?;
            s.split(',').map(|b| b.parse().ok()).collect()
        });
        // The loads tagged as a later stage's, and the buffers they load.
        let (mut later, mut reloaded) = (HashSet::new(), HashSet::new());
        if first.is_some() {
            for bb in f.get_basic_blocks() {
                let mut next = bb.get_first_instruction();
                while let Some(inst) = next {
                    next = inst.get_next_instruction();
                    let tags = load_tags(inst, alias_scope);
                    let mut buffers = tags.iter().filter(|t| t.0 > 0).map(|t| t.1).peekable();
                    if buffers.peek().is_some() {
                        later.insert(inst);
                    }
                    reloaded.extend(buffers);
                }
            }
        }
        let later_only = first.is_some_and(|f| !f.is_empty() && f.is_subset(&reloaded));
        for bb in f.get_basic_blocks() {
            let mut next = bb.get_first_instruction();
            while let Some(inst) = next {
                next = inst.get_next_instruction();
                let Some((p, write)) = line_access(&data, inst) else {
                    continue;
                };
                if later_only && !write && !later.contains(&inst) {
                    continue;
                }
                // A streaming store (`stream.rs`) writes its line without reading it: a write
                // prefetch would fetch the line it avoids.
                if write && inst.get_metadata(nontemporal).is_some() {
                    continue;
                }
                // A tile's load of a transposed operand (`tile.rs`): the line further along
                // its row is used only many tiles later.
                if from_stack(p) || inst.get_metadata(tile_load).is_some() {
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
