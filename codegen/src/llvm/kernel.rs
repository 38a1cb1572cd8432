//! Kernel IR → LLVM IR for the host, in the CPU runtime's chunked calling convention.
//!
//! Every [`Kernel`] of a program becomes one external function
//!
//! ```text
//! void name(i8** args, i64 start, i64 end)
//! ```
//!
//! with `args = [reads.., writes.., status]`: one pointer to element 0 of each buffer the kernel
//! reads, then of each buffer it writes (the kernel IR's parameter order), then a pointer to an
//! `i32` **status word**. The call computes the outer indices `start..end` of the kernel's
//! **flattened** outer index space (row-major over `Kernel::outer`, extent = the product of the
//! outer dims, 1 for a kernel without outer dims); see [`kernel_extent`].
//!
//! # Code shape
//!
//! The external function loads the pointers and calls an internal, always-inlined body whose
//! buffer parameters are `noalias` (except a buffer that is both read and written), so after
//! inlining every access carries alias-scope metadata and inner loops vectorise without runtime
//! alias checks. The body walks the flat range row by row: the outer dims but the last are
//! decomposed from the row number once per row (division by constants), the last outer dim is a
//! counted loop (the loop that vectorises for elementwise kernels), and inside one outer index
//! each [`Stage`](smelt_passes::kernel::Stage) runs its own sequential loop nest over its inner
//! dims: a reduction into accumulators (promoted to registers), or stores.
//!
//! What makes the hot loops fast: long float reductions are split into 16 lanes in a fixed
//! order so that they vectorise under strict FP semantics, and short ones compute their body in
//! a vectorised loop of its own before combining in order; float max and min run first without
//! their NaN rule, again with it only where a value was NaN (`reduce`); f32 `exp`, `tanh` and
//! `erf` are branch-free code the vectoriser widens: f32 polynomials within an ulp or two by
//! default (`poly`; on AVX-512 their `2^q` is a call whose vector variants, `vscalefps`, are
//! inlined after vectorising, `scalef`), or the C library's algorithms bit for bit with
//! [`MathMode::Libm`] (`math`); a value a store stage would recompute from an earlier reduction stage (softmax's
//! `exp(x - max)`) is kept per element in a stack buffer instead (`reuse`); a row kernel over
//! short rows in cache computes two rows stage by stage, so that their chains of dependent
//! passes overlap (`interleave`).
//!
//! # Values
//!
//! The semantics are `smelt_ir::interp`'s, see `scalar.rs` for each op: f16/bf16 values are held
//! as f32 values that are exactly representable in their dtype (rounded to nearest-even after
//! every op; f16 through LLVM `half`, bf16 by bit arithmetic with NaN kept quiet), integers wrap,
//! float → int casts saturate (`llvm.fptosi.sat`, NaN → 0). **Integer `floor_div`/`remainder` by
//! zero give 0** (the interpreter reports an error instead; a kernel cannot).
//!
//! # Addressing and safety
//!
//! Affine accesses are checked at compile time: every address any loop iteration can form lies
//! inside its buffer (else a typed error), so they compile to `inbounds` GEPs. Computed
//! accesses (div/mod views, gathered indices) are checked at run time: an index outside the
//! buffer sets the status word to 1 (atomically), reads 0 and writes nothing; the runtime turns
//! a nonzero status into an error. Index arithmetic (`Ty::Index`) is `index_width` bits and
//! wraps; it is sign-extended to 64 bits for addressing.

mod access;
mod convert;
mod fission;
mod inflight;
mod interleave;
mod math;
mod pick;
mod poly;
mod prefetch;
mod reduce;
mod reuse;
mod scalar;
mod scalef;
mod stream;
mod tile;

pub use interleave::{interleaves, INTERLEAVE_MAX_BYTES, INTERLEAVE_MAX_ROW};

use crate::transposed::stores_walk_last_outer_dim;
use access::check_affine_bounds;
pub use pick::Pick;
pub(crate) use prefetch::insert_prefetches;
use prefetch::{first_pass_loads, row_distance, FIRST_PASS_ATTR, NO_PREFETCH_ATTR, PREFETCH_ATTR};
pub(crate) use scalef::inline_after_vectorizing;
pub use scalef::Scalef;
pub(crate) use stream::mark_streaming_stores;
use stream::{contiguous_store, streams, AlignedStore, STREAMING_ATTR};

use super::error::{LlvmError, Result};
use super::jit::{assemble, compile, optimize, JitModule};
use super::options::{zen3, JitOptions, MathMode, RowPrefetch, ROW_PREFETCH_ROWS};
use super::target::cpu_and_features;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::types::{BasicMetadataTypeEnum, BasicType, BasicTypeEnum, FunctionType, IntType};
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};
use smelt_ir::DType;
use smelt_passes::kernel::{
    Access, BufferDecl, BufferId, IndexWidth, Inst, Kernel, Program, StageEffect, Ty, ValueId,
};
use std::collections::{HashMap, HashSet};

/// The value of one loop hint (`!{!"name", value}` in a loop ID).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hint {
    /// No value: `!{!"llvm.loop.unroll.disable"}`.
    Flag,
    /// An `i1`: `!{!"llvm.loop.vectorize.enable", i1 true}`.
    Bool(bool),
    /// An `i32`: `!{!"llvm.loop.vectorize.width", i32 16}`.
    Int(u32),
    /// One flag for the loop a transformation makes (LLVM's follow-up loop attributes):
    /// `!{!"llvm.loop.vectorize.followup_vectorized", !{!"llvm.loop.unroll.full"}}`.
    Followup(&'static str),
}

/// Named loop hints for [`Emitter::counted_loop_hinted`].
pub(crate) type LoopHints = &'static [(&'static str, Hint)];

/// Loop hints for a short loop the loop vectoriser should widen, which LLVM's unroller is to
/// leave alone (after a full unroll only the SLP vectoriser could, and poorly, see the lanes).
pub(crate) const NO_UNROLL: LoopHints = &[("llvm.loop.unroll.disable", Hint::Flag)];

/// Loop hints for a split reduction's lane loop (`kernel/reduce.rs`): vectorise it, all
/// [`LANES`](reduce::LANES) iterations as one vector (two 256-bit or four 128-bit registers
/// where the CPU has no 512-bit ones), and nothing else. Once widened it runs once, and
/// LLVM's unroller (which [`NO_UNROLL`] would stop) removes that loop; instcombine then
/// forwards the lanes stored into the scratch array to their load and drops the array.
/// Left as a loop, every block stored its vector to the stack and loaded it back, with two
/// extra branches (measured: layer_norm and softmax rows 2–11% faster without, same bits).
///
/// The widened loop is marked for a full unroll (a follow-up attribute, which the unroller
/// honours whatever the body's size; before vectorising, the scalar loop must stay a loop):
/// the unroller's own cost threshold kept long bodies as a loop once several blocks shared it
/// (`JitOptions::interleave_vectors`), and the scratch array with them.
pub(crate) const LANE_LOOP: LoopHints = &[
    ("llvm.loop.vectorize.enable", Hint::Bool(true)),
    ("llvm.loop.vectorize.width", Hint::Int(reduce::LANES as u32)),
    (
        "llvm.loop.vectorize.followup_vectorized",
        Hint::Followup("llvm.loop.unroll.full"),
    ),
];

/// Loop hints for a short loop of expensive iterations whose vectorised form is to mask its
/// last, partial vector (`llvm.loop.vectorize.predicate.enable`) instead of finishing in scalar
/// code, where a remainder of up to 15 iterations would cost as much as the vector part.
pub(crate) const MASKED_TAIL: LoopHints = &[
    ("llvm.loop.vectorize.enable", Hint::Bool(true)),
    ("llvm.loop.vectorize.predicate.enable", Hint::Bool(true)),
];

/// A program's kernels JIT-compiled into one module.
#[derive(Debug)]
pub struct CompiledKernels {
    pub module: JitModule,
    /// The entry point of each kernel, in the order they were given.
    pub entries: Vec<String>,
}

/// The number of outer indices of `kernel` (the product of its outer dims), or `None` if it
/// overflows `i64`.
pub fn kernel_extent(kernel: &Kernel) -> Option<i64> {
    kernel
        .outer
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(i64::try_from(d).ok()?))
}

/// The entry point names for `kernels`: each kernel's name made a C identifier, with `_N`
/// appended where names repeat.
pub fn entry_names(kernels: &[&Kernel]) -> Vec<String> {
    let mut seen = HashMap::new();
    kernels
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut name: String = k
                .name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
                name.insert_str(0, "k_");
            }
            if seen.insert(name.clone(), i).is_some() {
                name = format!("{name}_{i}");
            }
            name
        })
        .collect()
}

/// Compiles every kernel step of `program` into one module.
pub fn compile_program(program: &Program, options: &JitOptions) -> Result<CompiledKernels> {
    let kernels: Vec<&Kernel> = program.kernels().collect();
    compile_program_kernels_with_twins(&kernels, &program.buffers, &output_ids(program), options)
}

/// The buffers `program` returns as outputs.
pub fn output_ids(program: &Program) -> Vec<BufferId> {
    program.outputs.iter().map(|(_, b)| *b).collect()
}

/// Compiles `kernels` (reading and writing `buffers`, indexed by [`BufferId`]) into one module
/// with one entry point each (see [`entry_names`]), none with a plain-store twin.
pub fn compile_program_kernels(
    kernels: &[&Kernel],
    buffers: &[BufferDecl],
    options: &JitOptions,
) -> Result<CompiledKernels> {
    compile_program_kernels_with_twins(kernels, buffers, &[], options)
}

/// [`compile_program_kernels`], and the plain-store twin of every kernel that
/// [`has_plain_twin`] says has one, given the program's `outputs`.
pub fn compile_program_kernels_with_twins(
    kernels: &[&Kernel],
    buffers: &[BufferDecl],
    outputs: &[BufferId],
    options: &JitOptions,
) -> Result<CompiledKernels> {
    let entries = entry_names(kernels);
    let body = KernelOptions::for_jit(options)?;
    let module = compile("smelt_kernels", options, |ctx, module| {
        for (k, name) in kernels.iter().zip(&entries) {
            build_with_twin(ctx, module, k, buffers, outputs, name, &body)?;
        }
        Ok(())
    })?;
    Ok(CompiledKernels { module, entries })
}

/// The name of the plain-store twin of entry `entry` (see [`has_plain_twin`]).
pub fn plain_twin_name(entry: &str) -> String {
    format!("{entry}.plain")
}

/// Whether a module compiled under `options` for a program returning `outputs` holds, beside
/// `kernel`'s entry point, a twin with plain stores named by [`plain_twin_name`]: for kernels
/// whose stores stream ([`JitOptions::nontemporal_min_bytes`]) and that write an output. A
/// streaming store to a line in cache writes the line back and then writes around it, so into
/// fresh memory, whose pages the OS has just zeroed through the cache, plain stores are
/// faster; the runtime calls the twin when a kernel writes outputs it has just allocated
/// (`run`), the streaming entry for the caller's tensors (`run_into`). A kernel writing only
/// the program's own temporaries never needs one.
pub fn has_plain_twin(
    kernel: &Kernel,
    buffers: &[BufferDecl],
    outputs: &[BufferId],
    options: &JitOptions,
) -> bool {
    twinned(
        kernel,
        buffers,
        outputs,
        options.nontemporal_min_bytes,
        options.tile_transposes,
    )
}

/// [`has_plain_twin`] under the streaming threshold `min_bytes`, with transposed reads tiled
/// or not.
fn twinned(
    kernel: &Kernel,
    buffers: &[BufferDecl],
    outputs: &[BufferId],
    min_bytes: Option<u64>,
    tile_transposes: bool,
) -> bool {
    streaming_stores(kernel, buffers, min_bytes, tile_transposes)
        && kernel.writes.iter().any(|w| outputs.contains(w))
}

/// What the CPU code generator does with `kernel` under `options` beyond its plain loops, a
/// few words per choice, for `smelt explain`: transposed reads in tiles (`tile`), streaming
/// stores (`stream`, with the plain-store twin of [`has_plain_twin`] for a program returning
/// `outputs`), two rows interleaved (`interleave`), row prefetch (`prefetch`). Buffers are
/// named by the graph values they hold (`%12`). Empty for a kernel with none of them.
pub fn describe(
    kernel: &Kernel,
    buffers: &[BufferDecl],
    outputs: &[BufferId],
    options: &JitOptions,
) -> Vec<String> {
    let mut notes = Vec::new();
    let name = |b: &BufferId| {
        buffers
            .get(b.0 as usize)
            .map_or_else(|| format!("{b:?}"), |d| format!("%{}", d.value.index()))
    };
    if let Some(t) = options
        .tile_transposes
        .then(|| tile::tiling(kernel, buffers))
        .flatten()
    {
        let mut read: Vec<String> = t.reads.iter().map(|(b, _)| name(b)).collect();
        read.dedup();
        notes.push(format!(
            "{} x {} tiles, {} read transposed in registers",
            t.side,
            t.side,
            read.join(", ")
        ));
    }
    let (min, tiles) = (options.nontemporal_min_bytes, options.tile_transposes);
    if twinned(kernel, buffers, outputs, min, tiles) {
        notes.push("streaming stores (plain stores into fresh outputs)".into());
    } else if streaming_stores(kernel, buffers, min, tiles) {
        notes.push("streaming stores".into());
    }
    if options.interleave_rows && interleave::interleaves(kernel, buffers) {
        notes.push("two rows at a time, interleaved".into());
    }
    // The row prefetch `build_kernel` gets (resolved for the target CPU); a target that does
    // not resolve builds no kernel, and gets no note.
    let rows = KernelOptions::for_jit(options).map_or(RowPrefetch::Module, |k| k.row_prefetch);
    if let Some((module, own)) = options
        .prefetch_bytes
        .and_then(|module| Some((module, row_distance(kernel, buffers)?)))
    {
        match rows {
            RowPrefetch::Rows if own > module => notes.push(format!(
                "prefetches {own} bytes ahead ({ROW_PREFETCH_ROWS} rows)"
            )),
            RowPrefetch::Off => {
                notes.push("no software prefetch (rows left to the hardware prefetchers)".into())
            }
            _ => {}
        }
    }
    notes
}

/// Whether `kernel`'s stores stream (see `stream`) under the threshold `min_bytes`: never in a
/// kernel that computes tiles (see `tile`), whose output rows are written a tile's width at a
/// time.
fn streaming_stores(
    kernel: &Kernel,
    buffers: &[BufferDecl],
    min_bytes: Option<u64>,
    tile_transposes: bool,
) -> bool {
    streams(kernel, buffers, min_bytes) && !(tile_transposes && tile::tiles(kernel, buffers))
}

/// [`build_kernel`] of `kernel` as `name`, and of its plain-store twin where it has one (see
/// [`has_plain_twin`]).
fn build_with_twin<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    kernel: &Kernel,
    buffers: &[BufferDecl],
    outputs: &[BufferId],
    name: &str,
    options: &KernelOptions,
) -> Result<()> {
    build_kernel(ctx, module, kernel, buffers, name, options)?;
    if twinned(
        kernel,
        buffers,
        outputs,
        options.nontemporal_min_bytes,
        options.tile_transposes,
    ) {
        let plain = KernelOptions {
            nontemporal_min_bytes: None,
            ..*options
        };
        build_kernel(ctx, module, kernel, buffers, &plain_twin_name(name), &plain)?;
    }
    Ok(())
}

/// Every kernel step of `program` in one module, as the CPU runtime would JIT-compile it under
/// `options`: the optimised LLVM IR and the host assembly the back end writes for it (for
/// `smelt explain --emit`; each kernel is one function named by [`entry_names`], followed by
/// its plain-store twin where it has one, see [`has_plain_twin`]).
pub fn program_listing(program: &Program, options: &JitOptions) -> Result<(String, String)> {
    let kernels: Vec<&Kernel> = program.kernels().collect();
    let entries = entry_names(&kernels);
    let body = KernelOptions::for_jit(options)?;
    let outputs = output_ids(program);
    assemble("smelt_kernels", options, |ctx, module| {
        for (k, name) in kernels.iter().zip(&entries) {
            build_with_twin(ctx, module, k, &program.buffers, &outputs, name, &body)?;
        }
        Ok(())
    })
}

/// The optimised LLVM IR of one kernel (for snapshots and vectorisation checks; pass a
/// [`super::CpuTarget::Named`] target for machine-independent text).
pub fn optimized_kernel_ir(
    kernel: &Kernel,
    buffers: &[BufferDecl],
    options: &JitOptions,
) -> Result<String> {
    let name = entry_names(&[kernel]).remove(0);
    let body = KernelOptions::for_jit(options)?;
    optimize("smelt_kernel", options, |ctx, module| {
        build_kernel(ctx, module, kernel, buffers, &name, &body)
    })
}

/// The function `name` of `module`, declared with type `ty` if it is not there yet (C library
/// functions and LLVM intrinsics the kernels call).
pub(crate) fn declare<'ctx>(
    module: &Module<'ctx>,
    name: &str,
    ty: FunctionType<'ctx>,
) -> FunctionValue<'ctx> {
    module
        .get_function(name)
        .unwrap_or_else(|| module.add_function(name, ty, None))
}

pub(crate) fn bad(kernel: &Kernel, message: impl std::fmt::Display) -> LlvmError {
    LlvmError::Build {
        message: format!("kernel {:?}: {message}", kernel.name),
    }
}

/// How [`build_kernel`] generates a kernel body beyond what the kernel says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOptions {
    /// How f32 `exp`, `tanh` and `erf` are computed.
    pub math: MathMode,
    /// Streaming stores when every buffer a kernel writes is at least this long (see
    /// `stream`; `None` for never, and for targets other than the host CPU).
    pub nontemporal_min_bytes: Option<u64>,
    /// The AVX-512 `vscalefps` forms the polynomials may use (see `scalef`); `Generic` for
    /// other targets.
    pub scalef: Scalef,
    /// The `vpermilps` forms per-lane table lookups may use (see `pick`); `Generic` for
    /// other targets.
    pub pick: Pick,
    /// Row kernels compute two rows at a time, stage by stage (see `interleaved_points`).
    pub interleave_rows: bool,
    /// How row kernels out of cache prefetch (`JitOptions::row_prefetch` for the target CPU,
    /// see `prefetch::row_distance`; `Auto`, the default here, is taken as `Module`); only
    /// marks the kernel, the prefetches themselves are inserted after optimisation.
    pub row_prefetch: RowPrefetch,
    /// Row kernels keep their first pass's prefetches where a later pass computes a
    /// transcendental op (`JitOptions::first_pass_prefetch`; see `prefetch::first_pass_loads`).
    pub first_pass_prefetch: bool,
    /// The vectoriser's interleave count for store loops (`llvm.loop.interleave.count`;
    /// `None`: its own choice). See `JitOptions::interleave_vectors`.
    pub interleave_vectors: Option<u32>,
    /// Elementwise kernels with transposed reads compute square tiles (see `tile`).
    pub tile_transposes: bool,
    /// Elementwise bodies with a long op run in two loops per block (see `fission`).
    pub split_long_bodies: bool,
    /// f32 constants are loads of globals (`Emitter::f32_constant`).
    pub constant_loads: bool,
}

impl KernelOptions {
    /// The options a JIT compilation under `options` builds its kernels with: its math mode
    /// and streaming threshold, whether row kernels interleave rows, and the `vscalefps`
    /// forms of its target CPU.
    pub fn for_jit(options: &JitOptions) -> Result<KernelOptions> {
        let (cpu, features) = cpu_and_features(&options.target)?;
        Ok(KernelOptions {
            math: options.math,
            nontemporal_min_bytes: options.nontemporal_min_bytes,
            scalef: Scalef::for_features(&features),
            pick: Pick::for_features(&features),
            interleave_rows: options.interleave_rows,
            row_prefetch: options.row_prefetch.for_cpu(&cpu, &features),
            first_pass_prefetch: options.first_pass_prefetch,
            interleave_vectors: options.interleave_vectors,
            tile_transposes: options.tile_transposes,
            split_long_bodies: options.loop_fission.on(zen3(&cpu, &features)),
            constant_loads: options.constant_loads.on(zen3(&cpu, &features)),
        })
    }
}

/// Adds `void name(i8** args, i64 start, i64 end)` computing `kernel` to `module`, as
/// `options` says.
pub fn build_kernel<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    kernel: &Kernel,
    buffers: &[BufferDecl],
    name: &str,
    options: &KernelOptions,
) -> Result<()> {
    let decls = kernel
        .reads
        .iter()
        .chain(&kernel.writes)
        .map(|id| {
            buffers
                .get(id.0 as usize)
                .filter(|b| b.id == *id)
                .ok_or_else(|| bad(kernel, format!("unknown buffer {id:?}")))
        })
        .collect::<Result<Vec<_>>>()?;
    check_affine_bounds(kernel, buffers)?;
    let i64t = ctx.i64_type();
    let ptr_of = |d: DType| storage_type(ctx, d).ptr_type(AddressSpace::default());
    let status_t = ctx.i32_type().ptr_type(AddressSpace::default());
    // The body: typed, noalias buffer pointers.
    let mut params: Vec<BasicMetadataTypeEnum> =
        decls.iter().map(|d| ptr_of(d.dtype).into()).collect();
    params.extend::<[BasicMetadataTypeEnum; 3]>([status_t.into(), i64t.into(), i64t.into()]);
    let body_fn = module.add_function(
        &format!("{name}.body"),
        ctx.void_type().fn_type(&params, false),
        Some(Linkage::Internal),
    );
    let attr = |n: &str| ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(n), 0);
    body_fn.add_attribute(AttributeLoc::Function, attr("alwaysinline"));
    body_fn.add_attribute(AttributeLoc::Function, attr("nounwind"));
    for (i, id) in kernel.reads.iter().chain(&kernel.writes).enumerate() {
        let read = kernel.reads.contains(id);
        let written = kernel.writes.contains(id);
        if !(read && written) {
            body_fn.add_attribute(AttributeLoc::Param(i as u32), attr("noalias"));
        }
    }
    // The entry point: unpack `args`, call the body.
    let args_t = ctx
        .i8_type()
        .ptr_type(AddressSpace::default())
        .ptr_type(AddressSpace::default());
    let entry_fn = module.add_function(
        name,
        ctx.void_type()
            .fn_type(&[args_t.into(), i64t.into(), i64t.into()], false),
        None,
    );
    entry_fn.add_attribute(AttributeLoc::Function, attr("nounwind"));
    // The stack on a cache line ([`KEEP_ALIGN`]): a loop that runs out of vector registers
    // spills whole AVX-512 vectors to it, and on a frame at the ABI's 16 bytes three in four
    // of those split a line, how many depending on the caller's stack depth. Measured on the
    // 2-core AMD EPYC host (BENCHMARKS.md): the 8-op chain over 16M floats took 3.9 or 4.8 ms
    // by the environment's size alone (which moves the main thread's stack), 3.9 ms with this.
    entry_fn.add_attribute(
        AttributeLoc::Function,
        ctx.create_enum_attribute(
            Attribute::get_named_enum_kind_id("alignstack"),
            u64::from(KEEP_ALIGN),
        ),
    );
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(entry_fn, "entry"));
    let args = param(entry_fn, 0)?.into_pointer_value();
    let mut call_args = Vec::new();
    for (i, d) in decls.iter().enumerate() {
        let slot_t: BasicTypeEnum = ptr_of(d.dtype).into();
        call_args.push(arg_pointer(ctx, &b, args, i as u64, slot_t)?.into());
    }
    call_args.push(arg_pointer(ctx, &b, args, decls.len() as u64, status_t.into())?.into());
    call_args.push(param(entry_fn, 1)?.into());
    call_args.push(param(entry_fn, 2)?.into());
    b.build_call(body_fn, &call_args, "")?;
    let streaming = streaming_stores(
        kernel,
        buffers,
        options.nontemporal_min_bytes,
        options.tile_transposes,
    );
    if streaming {
        entry_fn.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute(STREAMING_ATTR, ""),
        );
        if cfg!(target_arch = "x86_64") {
            // Streaming stores are weakly ordered: drain them before the chunk is reported
            // done to the thread that will read its outputs.
            let f = declare(
                module,
                "llvm.x86.sse.sfence",
                ctx.void_type().fn_type(&[], false),
            );
            b.build_call(f, &[], "")?;
        }
    }
    b.build_return(None)?;
    // Whether the kernel lists its first stage's buffers (see `prefetch`), so that its later
    // stages' loads must say which they are.
    let mut first_pass_listed = false;
    let row = row_distance(kernel, buffers);
    if row.is_some() && options.row_prefetch == RowPrefetch::Off {
        entry_fn.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute(NO_PREFETCH_ATTR, ""),
        );
    }
    if let Some(distance) = row.filter(|_| options.row_prefetch == RowPrefetch::Rows) {
        entry_fn.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute(PREFETCH_ATTR, &distance.to_string()),
        );
        if let Some(first) = first_pass_loads(kernel).filter(|_| !options.first_pass_prefetch) {
            entry_fn.add_attribute(
                AttributeLoc::Function,
                ctx.create_string_attribute(FIRST_PASS_ATTR, &first),
            );
            first_pass_listed = true;
        }
    }

    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(body_fn, "entry"));
    let mut ptrs = Vec::new();
    for i in 0..decls.len() {
        ptrs.push(param(body_fn, i as u32)?.into_pointer_value());
    }
    let n = decls.len() as u32;
    let mut em = Emitter {
        ctx,
        module,
        b: builder,
        function: body_fn,
        kernel,
        buffers,
        ptrs,
        status: param(body_fn, n)?.into_pointer_value(),
        index_t: match kernel.index_width {
            IndexWidth::I32 => ctx.i32_type(),
            IndexWidth::I64 => ctx.i64_type(),
        },
        values: HashMap::new(),
        vars: Vec::new(),
        stash: HashMap::new(),
        reuse: HashMap::new(),
        math: options.math,
        scalef: options.scalef,
        pick: options.pick,
        streaming,
        aligned: None,
        interleave: options.interleave_rows && interleave::interleaves(kernel, buffers),
        interleave_vectors: options.interleave_vectors,
        reduce_group: reduce_group(options.interleave_vectors, kernel, buffers),
        nonpositive: reuse::nonpositive(kernel),
        tag_stage_loads: first_pass_listed,
        stage_index: 0,
        tiling: None,
        tile_ptrs: Vec::new(),
        tile_at: None,
        split: None,
        opaque_constants: false,
    };
    // Per-element scratch of values kept across stages (see `reuse`), in the entry block:
    // one row's, or two rows' when they are interleaved.
    (em.stash, em.reuse) = keep_scratch(&em, if em.interleave { 2 } else { 1 })?;
    if options.tile_transposes && !em.interleave {
        if let Some(tiling) = tile::tiling(kernel, buffers) {
            em.tile_ptrs = em.tile_scratch(&tiling)?;
            em.tiling = Some(tiling);
        }
    }
    // Only where a transcendental op brings its polynomial's constants: add + layer_norm over
    // 128 x 768, a dozen constants, ran 1.12x–1.14x as long with them loaded.
    em.opaque_constants = options.constant_loads
        && kernel
            .stages
            .iter()
            .any(|s| s.body.iter().any(|i| reuse::transcendental(&i.op)));
    if options.split_long_bodies && em.tiling.is_none() && !em.interleave {
        if let Some(plan) = fission::plan(kernel, options.math) {
            em.split = Some(em.split_scratch(plan)?);
        }
    }
    let start = param(body_fn, n + 1)?.into_int_value();
    let end = param(body_fn, n + 2)?.into_int_value();
    em.outer_loops(start, end)?;
    em.b.build_return(None)?;
    Ok(())
}

/// How many 16-lane blocks a split reduction of `kernel` computes side by side: the interleave
/// count (`JitOptions::interleave_vectors`) for a kernel whose data fits in cache (at most
/// `interleave::INTERLEAVE_MAX_BYTES`), one for larger ones. Out of cache the grouped form
/// measured slower: softmax over 65536 x 768 4–5% (alternating and called alone, three rounds
/// each; BENCHMARKS.md), layer_norm over 65536 x 768 unchanged; in cache it is faster (the
/// sixteenth and seventeenth sessions' figures). Same bits either way (see `reduce`).
pub fn reduce_group(
    interleave_vectors: Option<u32>,
    kernel: &Kernel,
    buffers: &[BufferDecl],
) -> u32 {
    match interleave_vectors {
        Some(n)
            if interleave::kernel_bytes(kernel, buffers) <= interleave::INTERLEAVE_MAX_BYTES =>
        {
            n.max(1)
        }
        _ => 1,
    }
}

/// The alignment of scratch arrays written and read back as whole vectors (the kept values'
/// here, a staged reduction's in `reduce`): a cache line (an AVX-512 vector).
const KEEP_ALIGN: u32 = 64;

/// Values kept across stages (see `reuse`): value → its scratch array.
type Kept<'ctx> = HashMap<ValueId, PointerValue<'ctx>>;

/// The kept values' scratch arrays (stash, reuse), allocated at the builder (the entry
/// block): `[n x T]` per value, or `[rows x [n x T]]` for `rows > 1` (interleaved rows, see
/// `interleave`).
fn keep_scratch<'ctx>(em: &Emitter<'_, 'ctx>, rows: u32) -> Result<(Kept<'ctx>, Kept<'ctx>)> {
    let (mut stash, mut reuse) = (HashMap::new(), HashMap::new());
    let mut scratch: HashMap<ValueId, PointerValue> = HashMap::new();
    for kept in reuse::plan(em.kernel) {
        let ty = em.compute_type(kept.ty);
        let p = match scratch.get(&kept.from) {
            Some(&p) => p,
            None => {
                let arr = match ty {
                    BasicTypeEnum::FloatType(t) => t.array_type(kept.n as u32),
                    _ => return Err(em.err("a kept value that is not a float")),
                };
                let arr: BasicTypeEnum = match rows {
                    1 => arr.into(),
                    _ => arr.array_type(rows).into(),
                };
                let p = em.b.build_alloca(arr, "keep")?;
                // On a cache line: the kept values are written and read back as whole vectors,
                // and at the stack's own alignment (16) three in four of those split a line
                // (measured: softmax 65536 x 768 about 13% slower, how much varying with the
                // caller's stack depth).
                reduce::set_alignment(p, KEEP_ALIGN)?;
                scratch.insert(kept.from, p);
                p
            }
        };
        stash.insert(kept.from, p);
        reuse.insert(kept.to, p);
    }
    Ok((stash, reuse))
}

/// How a dtype is stored in memory: bool as `i8` (0 or 1), f16 as `half`, bf16 as `i16` bits.
pub(crate) fn storage_type(ctx: &Context, d: DType) -> BasicTypeEnum<'_> {
    match d {
        DType::Bool => ctx.i8_type().into(),
        DType::I32 => ctx.i32_type().into(),
        DType::I64 => ctx.i64_type().into(),
        DType::F16 => ctx.f16_type().into(),
        DType::BF16 => ctx.i16_type().into(),
        DType::F32 => ctx.f32_type().into(),
        DType::F64 => ctx.f64_type().into(),
    }
}

fn arg_pointer<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    args: PointerValue<'ctx>,
    i: u64,
    ty: BasicTypeEnum<'ctx>,
) -> Result<PointerValue<'ctx>> {
    // SAFETY (of the generated code): the calling convention passes one pointer per read and
    // written buffer plus the status word, so slot `i` exists.
    let slot =
        unsafe { b.build_in_bounds_gep(args, &[ctx.i64_type().const_int(i, false)], "slot")? };
    let raw = b.build_load(slot, "arg")?.into_pointer_value();
    Ok(b.build_pointer_cast(raw, ty.into_pointer_type(), "argp")?)
}

fn param<'ctx>(f: FunctionValue<'ctx>, n: u32) -> Result<BasicValueEnum<'ctx>> {
    f.get_nth_param(n).ok_or_else(|| LlvmError::Build {
        message: format!("function has no parameter {n}"),
    })
}

/// A value of the kernel body: its LLVM value and its kernel IR type.
#[derive(Clone, Copy)]
pub(crate) struct Val<'ctx> {
    pub v: BasicValueEnum<'ctx>,
    pub ty: Ty,
}

/// The state of code generation for one kernel body.
pub(crate) struct Emitter<'a, 'ctx> {
    pub ctx: &'ctx Context,
    pub module: &'a Module<'ctx>,
    pub b: Builder<'ctx>,
    pub function: FunctionValue<'ctx>,
    pub kernel: &'a Kernel,
    pub buffers: &'a [BufferDecl],
    /// One pointer per read then written buffer.
    pub ptrs: Vec<PointerValue<'ctx>>,
    pub status: PointerValue<'ctx>,
    pub index_t: IntType<'ctx>,
    pub values: HashMap<ValueId, Val<'ctx>>,
    /// The current loop variables as i64 (outer dims, then the current stage's inner dims).
    pub vars: Vec<IntValue<'ctx>>,
    /// Values a reduction stage stores per element for a later store stage (see `reuse`):
    /// value → scratch array indexed by the stage's one inner loop variable.
    pub stash: Kept<'ctx>,
    /// Values a store stage loads from that scratch instead of computing them.
    pub reuse: Kept<'ctx>,
    /// How f32 `exp`, `tanh` and `erf` are computed.
    pub math: MathMode,
    /// The AVX-512 `vscalefps` forms `exp`'s `2^q` may use (see `scalef`).
    pub scalef: Scalef,
    /// The `vpermilps` forms per-lane table lookups may use (see `pick`).
    pub pick: Pick,
    /// Whether contiguous store loops are peeled for streaming stores (see `stream`).
    pub streaming: bool,
    /// Inside such a loop's aligned part: the store addressed from the aligned pointer.
    aligned: Option<AlignedStore<'ctx>>,
    /// Whether the last outer dim's points are computed two at a time (see `interleave`).
    pub interleave: bool,
    /// The interleave count asked of the loop vectoriser for store loops, if any.
    pub interleave_vectors: Option<u32>,
    /// How many blocks a split reduction computes side by side ([`reduce_group`]).
    pub reduce_group: u32,
    /// Values known to be `≤ 0` or NaN (`reuse::nonpositive`), whose `exp` needs no upper limit.
    pub nonpositive: HashSet<ValueId>,
    /// Whether loads carry the stage and buffer they belong to (a row kernel with its own
    /// prefetch distance; see `prefetch::tag_load`).
    pub tag_stage_loads: bool,
    /// The index in `kernel.stages` of the stage being emitted.
    pub stage_index: usize,
    /// The transposed reads an elementwise kernel computes tiles for (see `tile`), if any.
    pub tiling: Option<tile::Tiling>,
    /// Their stack tiles, in the order of `tiling.reads`.
    pub tile_ptrs: Vec<PointerValue<'ctx>>,
    /// Inside a tile's body: its row and column variables, from 0.
    pub tile_at: Option<(IntValue<'ctx>, IntValue<'ctx>)>,
    /// How an elementwise body with a long op is split into two loops, if it is (see
    /// `fission`).
    pub split: Option<fission::Split<'ctx>>,
    /// Whether f32 constants are loads of globals rather than LLVM constants
    /// (`Emitter::f32_constant`, `JitOptions::constant_loads`).
    pub opaque_constants: bool,
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    pub(crate) fn err(&self, message: impl std::fmt::Display) -> LlvmError {
        bad(self.kernel, message)
    }

    pub(crate) fn value(&self, id: ValueId) -> Result<Val<'ctx>> {
        self.values
            .get(&id)
            .copied()
            .ok_or_else(|| self.err(format!("value {id:?} is used before it is defined")))
    }

    pub(crate) fn i64c(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i64_type().const_int(v as u64, true)
    }

    /// The flat range `start..end`, row by row (see the module docs).
    fn outer_loops(&mut self, start: IntValue<'ctx>, end: IntValue<'ctx>) -> Result<()> {
        let outer = self.kernel.outer.clone();
        let Some(&last) = outer.last() else {
            // No outer dims: one outer index.
            let nonempty = self
                .b
                .build_int_compare(IntPredicate::SLT, start, end, "ne")?;
            let (body, exit) = (self.block("point"), self.block("done"));
            self.b.build_conditional_branch(nonempty, body, exit)?;
            self.b.position_at_end(body);
            self.vars.clear();
            self.point()?;
            self.b.build_unconditional_branch(exit)?;
            self.b.position_at_end(exit);
            return Ok(());
        };
        if outer.contains(&0) {
            return Ok(());
        }
        // An elementwise kernel's stores walk the last outer dim: that loop may stream.
        let elementwise = self.streaming && stores_walk_last_outer_dim(self.kernel);
        let d_last = self.i64c(last as i64);
        let one = self.i64c(1);
        let row0 = self.b.build_int_signed_div(start, d_last, "row0")?;
        let end1 = self.b.build_int_sub(end, one, "end1")?;
        let row_end = self.b.build_int_signed_div(end1, d_last, "rowl")?;
        let row_end = self.b.build_int_add(row_end, one, "rowe")?;
        if let Some(side) = self.tiling.as_ref().map(|t| t.side) {
            return self.tiled_outer_loops(start, end, row0, row_end, side);
        }
        self.counted_loop(row0, row_end, "row", |em, r| {
            em.outer_row(r, start, end, elementwise)
        })
    }

    /// The outer indices of row `r` (a point of every outer dim but the last) that lie in
    /// `start..end`, along the last outer dim; streaming stores where `elementwise` says so.
    fn outer_row(
        &mut self,
        r: IntValue<'ctx>,
        start: IntValue<'ctx>,
        end: IntValue<'ctx>,
        elementwise: bool,
    ) -> Result<()> {
        let outer = self.kernel.outer.clone();
        let last = outer[outer.len() - 1];
        let d_last = self.i64c(last as i64);
        let base = self.b.build_int_nsw_mul(r, d_last, "base")?;
        let prefix = self.row_prefix(r)?;
        let lo = self.b.build_int_sub(start, base, "lo")?;
        let neg = self
            .b
            .build_int_compare(IntPredicate::SLT, lo, self.i64c(0), "neg")?;
        let lo = self
            .b
            .build_select(neg, self.i64c(0), lo, "j0")?
            .into_int_value();
        let hi = self.b.build_int_sub(end, base, "hi")?;
        let over = self
            .b
            .build_int_compare(IntPredicate::SGT, hi, d_last, "over")?;
        let hi = self
            .b
            .build_select(over, d_last, hi, "j1")?
            .into_int_value();
        self.vars.clone_from(&prefix);
        if self.interleave {
            return self.interleaved_points(lo, hi, &prefix);
        }
        let target = elementwise
            .then(|| contiguous_store(&self.kernel.stages, outer.len() - 1))
            .flatten();
        self.streaming_loop(lo, hi, last as u64, "j", target, &mut |em, j| {
            em.vars.clone_from(&prefix);
            em.vars.push(j);
            em.point()
        })
    }

    /// The outer indices of row `r` but the last (see [`Emitter::outer_row`]).
    fn row_prefix(&mut self, r: IntValue<'ctx>) -> Result<Vec<IntValue<'ctx>>> {
        let outer = &self.kernel.outer;
        let mut prefix = vec![self.i64c(0); outer.len() - 1];
        let mut rest = r;
        for d in (0..outer.len() - 1).rev() {
            let dim = self.i64c(outer[d] as i64);
            prefix[d] = self.b.build_int_signed_rem(rest, dim, "o")?;
            rest = self.b.build_int_signed_div(rest, dim, "r")?;
        }
        Ok(prefix)
    }

    /// Rows `row0..row_end` of `start..end` in a kernel that computes tiles (see `tile`):
    /// `side` rows at a time where they are whole rows of the range in one tile (the same
    /// outer dims before the second-to-last, which has `side` points left), else one row.
    fn tiled_outer_loops(
        &mut self,
        start: IntValue<'ctx>,
        end: IntValue<'ctx>,
        row0: IntValue<'ctx>,
        row_end: IntValue<'ctx>,
        side: u32,
    ) -> Result<()> {
        let outer = self.kernel.outer.clone();
        let d_last = self.i64c(outer[outer.len() - 1] as i64);
        let d_rows = self.i64c(outer[outer.len() - 2] as i64);
        let side = self.i64c(i64::from(side));
        let i64t = self.ctx.i64_type();
        let pre = self.current_block()?;
        let (head, body, exit) = (
            self.block("trows"),
            self.block("trows.body"),
            self.block("trows.exit"),
        );
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(head);
        let phi = self.b.build_phi(i64t, "r")?;
        phi.add_incoming(&[(&row0, pre)]);
        let r = phi.as_basic_value().into_int_value();
        let more = self
            .b
            .build_int_compare(IntPredicate::SLT, r, row_end, "more")?;
        self.b.build_conditional_branch(more, body, exit)?;
        self.b.position_at_end(body);
        let base = self.b.build_int_nsw_mul(r, d_last, "base")?;
        let r_next = self.b.build_int_nsw_add(r, side, "rt")?;
        let base_next = self.b.build_int_nsw_mul(r_next, d_last, "baset")?;
        let p = self.b.build_int_signed_rem(r, d_rows, "p")?;
        let p_next = self.b.build_int_nsw_add(p, side, "pt")?;
        let from_start = self
            .b
            .build_int_compare(IntPredicate::SGE, base, start, "whole0")?;
        let to_end = self
            .b
            .build_int_compare(IntPredicate::SLE, base_next, end, "whole1")?;
        let in_dim = self
            .b
            .build_int_compare(IntPredicate::SLE, p_next, d_rows, "indim")?;
        let whole = self.b.build_and(from_start, to_end, "whole")?;
        let whole = self.b.build_and(whole, in_dim, "tile")?;
        let (tiled, single, latch) = (
            self.block("trows.tile"),
            self.block("trows.row"),
            self.block("trows.next"),
        );
        self.b.build_conditional_branch(whole, tiled, single)?;
        self.b.position_at_end(tiled);
        let prefix = self.row_prefix(r)?;
        self.tiled_rows(&prefix)?;
        let tiled_end = self.current_block()?;
        self.b.build_unconditional_branch(latch)?;
        self.b.position_at_end(single);
        self.outer_row(r, start, end, false)?;
        let r_one = self.b.build_int_nsw_add(r, self.i64c(1), "r1")?;
        let single_end = self.current_block()?;
        self.b.build_unconditional_branch(latch)?;
        self.b.position_at_end(latch);
        let next = self.b.build_phi(i64t, "rn")?;
        next.add_incoming(&[(&r_next, tiled_end), (&r_one, single_end)]);
        phi.add_incoming(&[(&next.as_basic_value(), latch)]);
        self.b.build_unconditional_branch(head)?;
        self.b.position_at_end(exit);
        Ok(())
    }

    /// One outer index: every stage in order.
    fn point(&mut self) -> Result<()> {
        let outer_vars = self.vars.clone();
        for index in 0..self.kernel.stages.len() {
            self.stage(index, &outer_vars)?;
        }
        Ok(())
    }

    /// The kernel's stage `index` at the outer index `outer_vars`.
    pub(crate) fn stage(&mut self, index: usize, outer_vars: &[IntValue<'ctx>]) -> Result<()> {
        let stage = &self.kernel.stages[index];
        self.vars = outer_vars.to_vec();
        self.stage_index = index;
        match &stage.effect {
            StageEffect::Reduce {
                value,
                combiner,
                acc,
                result,
            } => {
                let (body, inner) = (&stage.body, &stage.inner);
                let (c, a, v) = (*combiner, *acc, *value);
                let r = if Self::two_pass_arg(c, a, inner) {
                    self.reduce_arg_two_pass(body, inner[0], c, a, v)?
                } else if Self::split_reduction(c, a, inner) {
                    self.reduce_split(body, inner[0], c, a, v)?
                } else if Self::staged_reduction(c, a, inner, body) {
                    self.reduce_staged(body, inner[0], c, a, v)?
                } else {
                    let red = self.reduce_begin(c, a, body, v)?;
                    self.reduce_nan_rule_last(&red, &mut |em, red| {
                        em.loop_nest(inner, None, &mut |em| {
                            em.body(body)?;
                            em.reduce_step(red)
                        })
                    })?;
                    self.reduce_end(&red)?
                };
                self.values.insert(*result, r);
            }
            StageEffect::Store(stores) => {
                let innermost = outer_vars.len() + stage.inner.len();
                let target = (self.streaming && !stage.inner.is_empty())
                    .then(|| contiguous_store([stage], innermost - 1))
                    .flatten();
                self.loop_nest(&stage.inner, target, &mut |em| {
                    em.body(&stage.body)?;
                    if em.in_first_pass() {
                        return Ok(());
                    }
                    for st in stores {
                        let v = em.value(st.value)?;
                        em.store(st.buffer, &st.access, v)?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    /// Nested counted loops over `dims` (pushing their variables), running `f` innermost; the
    /// innermost loop streams `target`'s store when there is one (see `stream`).
    fn loop_nest(
        &mut self,
        dims: &[usize],
        target: Option<(BufferId, Access)>,
        f: &mut dyn FnMut(&mut Emitter<'a, 'ctx>) -> Result<()>,
    ) -> Result<()> {
        let Some((&first, rest)) = dims.split_first() else {
            return f(self);
        };
        let depth = self.vars.len();
        let hi = self.i64c(first as i64);
        let lo = self.i64c(0);
        if rest.is_empty() {
            self.streaming_loop(lo, hi, first as u64, "inner", target, &mut |em, i| {
                em.vars.truncate(depth);
                em.vars.push(i);
                f(em)
            })?;
        } else {
            self.counted_loop(lo, hi, "inner", |em, i| {
                em.vars.truncate(depth);
                em.vars.push(i);
                em.loop_nest(rest, target, f)
            })?;
        }
        self.vars.truncate(depth);
        Ok(())
    }

    pub(crate) fn block(&self, name: &str) -> inkwell::basic_block::BasicBlock<'ctx> {
        self.ctx.append_basic_block(self.function, name)
    }

    /// `for (i = lo; i < hi; i++) f(i)`; leaves the builder after the loop.
    pub(crate) fn counted_loop(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        name: &str,
        f: impl FnOnce(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<()> {
        self.counted_loop_latch(lo, hi, name, f).map(|_| ())
    }

    /// [`Emitter::counted_loop`] with loop `hints` ([`NO_UNROLL`], [`MASKED_TAIL`]) on its
    /// latch branch.
    pub(crate) fn counted_loop_hinted(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        name: &str,
        hints: &[(&'static str, Hint)],
        f: impl FnOnce(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<()> {
        let latch = self.counted_loop_latch(lo, hi, name, f)?;
        self.attach_hints(latch, hints);
        Ok(())
    }

    /// Attaches `hints` to a loop's latch branch, those the target ignores left out.
    pub(crate) fn attach_hints(
        &self,
        latch: inkwell::values::InstructionValue<'ctx>,
        hints: &[(&'static str, Hint)],
    ) {
        // The NVPTX back end (`nvptx.rs` reuses these bodies) never vectorises loops, so a
        // vectorisation request there would only make LLVM warn that it failed.
        let gpu = self
            .module
            .get_triple()
            .as_str()
            .to_bytes()
            .starts_with(b"nvptx");
        let hints: Vec<_> = hints
            .iter()
            .copied()
            .filter(|(name, _)| !(gpu && name.starts_with("llvm.loop.vectorize.")))
            .collect();
        if !hints.is_empty() {
            self.loop_hints(latch, &hints);
        }
    }

    /// Attaches a loop ID `!0 = !{!0, !{name}, !{name, i1 flag}, !{name, i32 n},
    /// !{name, !{then}}, …}` with
    /// `hints` to a loop's latch branch.
    fn loop_hints(&self, latch: inkwell::values::InstructionValue<'ctx>, hints: &[(&str, Hint)]) {
        use inkwell::context::AsContextRef;
        use inkwell::llvm_sys::core::{
            LLVMGetMDKindIDInContext, LLVMMDNodeInContext2, LLVMMDStringInContext2,
            LLVMMetadataAsValue, LLVMSetMetadata, LLVMValueAsMetadata,
        };
        use inkwell::llvm_sys::debuginfo::{LLVMMetadataReplaceAllUsesWith, LLVMTemporaryMDNode};
        use inkwell::values::AsValueRef;
        let ctx = self.ctx.as_ctx_ref();
        let kind = "llvm.loop";
        // SAFETY: plain LLVM C API calls on live objects of this emitter's context: a loop ID
        // made self-referential the way the C API allows (a temporary first operand replaced
        // by the node itself, which LLVM turns into a distinct node), attached to the loop's
        // latch branch. The string pointers are valid for their given lengths during each
        // call, and every operand array outlives the call that reads it.
        unsafe {
            let temp = LLVMTemporaryMDNode(ctx, std::ptr::null_mut(), 0);
            let mut ops = vec![temp];
            for &(name, flag) in hints {
                let mut parts = vec![LLVMMDStringInContext2(
                    ctx,
                    name.as_ptr().cast(),
                    name.len(),
                )];
                let v = match flag {
                    Hint::Flag | Hint::Followup(_) => None,
                    Hint::Bool(on) => Some(self.ctx.bool_type().const_int(u64::from(on), false)),
                    Hint::Int(n) => Some(self.ctx.i32_type().const_int(u64::from(n), false)),
                };
                if let Some(v) = v {
                    parts.push(LLVMValueAsMetadata(v.as_value_ref()));
                }
                if let Hint::Followup(then) = flag {
                    let mut attr = [LLVMMDStringInContext2(
                        ctx,
                        then.as_ptr().cast(),
                        then.len(),
                    )];
                    parts.push(LLVMMDNodeInContext2(ctx, attr.as_mut_ptr(), attr.len()));
                }
                ops.push(LLVMMDNodeInContext2(ctx, parts.as_mut_ptr(), parts.len()));
            }
            let id = LLVMMDNodeInContext2(ctx, ops.as_mut_ptr(), ops.len());
            LLVMMetadataReplaceAllUsesWith(temp, id);
            let kind = LLVMGetMDKindIDInContext(ctx, kind.as_ptr().cast(), kind.len() as u32);
            LLVMSetMetadata(latch.as_value_ref(), kind, LLVMMetadataAsValue(ctx, id));
        }
    }

    fn counted_loop_latch(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        name: &str,
        f: impl FnOnce(&mut Self, IntValue<'ctx>) -> Result<()>,
    ) -> Result<inkwell::values::InstructionValue<'ctx>> {
        let i64t = self.ctx.i64_type();
        let pre = self.current_block()?;
        let body = self.block(name);
        let exit = self.block(&format!("{name}.exit"));
        let nonempty = self
            .b
            .build_int_compare(IntPredicate::SLT, lo, hi, "nonempty")?;
        self.b.build_conditional_branch(nonempty, body, exit)?;
        self.b.position_at_end(body);
        let phi = self.b.build_phi(i64t, name)?;
        phi.add_incoming(&[(&lo, pre)]);
        let i = phi.as_basic_value().into_int_value();
        f(self, i)?;
        let next = self.b.build_int_nsw_add(i, self.i64c(1), "next")?;
        let latch = self.current_block()?;
        phi.add_incoming(&[(&next, latch)]);
        let more = self
            .b
            .build_int_compare(IntPredicate::SLT, next, hi, "more")?;
        let latch_br = self.b.build_conditional_branch(more, body, exit)?;
        self.b.position_at_end(exit);
        Ok(latch_br)
    }

    pub(crate) fn current_block(&self) -> Result<inkwell::basic_block::BasicBlock<'ctx>> {
        self.b
            .get_insert_block()
            .ok_or_else(|| self.err("builder is not positioned"))
    }

    /// Emits a stage body's instructions.
    fn body(&mut self, insts: &[Inst]) -> Result<()> {
        if self.split_body(insts)? {
            return Ok(());
        }
        for inst in insts {
            let v = match self.kept(&self.reuse, inst.dst)? {
                Some(p) => self.b.build_load(p, "reused")?,
                None => self.inst(inst)?,
            };
            if let Some(p) = self.kept(&self.stash, inst.dst)? {
                self.b.build_store(p, v)?;
            }
            self.values.insert(inst.dst, Val { v, ty: inst.ty });
        }
        Ok(())
    }

    /// The scratch element of kept value `id` at the current inner index, if `m` has it.
    fn kept(
        &self,
        m: &HashMap<ValueId, PointerValue<'ctx>>,
        id: ValueId,
    ) -> Result<Option<PointerValue<'ctx>>> {
        let Some(&arr) = m.get(&id) else {
            return Ok(None);
        };
        let i = *self
            .vars
            .last()
            .ok_or_else(|| self.err("a kept value outside an inner loop"))?;
        let zero = self.ctx.i64_type().const_zero();
        // SAFETY (of the generated code): `reuse::plan` keeps values only in stages with one
        // inner dim of the array's length, whose variable `i` is in range.
        Ok(Some(unsafe {
            self.b.build_in_bounds_gep(arr, &[zero, i], "kept")?
        }))
    }
}
