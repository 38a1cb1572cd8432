//! Kernels with inner loops (reductions, row kernels such as softmax and layer_norm).
//!
//! Three strategies, chosen from `R`, the largest inner extent of any stage:
//!
//! - **Thread per outer index** (`R ≤ 32`, e.g. a reduction over a short axis; or a column
//!   reduction — loads contiguous in the outer dim, not in the inner one — with at least 2048
//!   outer indices): a grid-stride loop over outer indices; each thread runs every stage's
//!   inner loop sequentially, in the IR's order (blocks of 256 threads). Short rows would leave
//!   most of a warp idle in the other strategies, and columns read this way are coalesced
//!   across the warp. (Column reductions with few columns still use blocks, with strided reads;
//!   tiling them is future work.)
//! - **Warp per outer index** (`32 < R ≤ 1024`: softmax and layer_norm at transformer widths):
//!   a grid-stride loop over outer indices with one warp per index, 4 warps per block from
//!   4096 outer indices (1 below, to spread few rows over many multiprocessors). Each stage's
//!   inner index is strided across the 32 lanes (`j = lane + k·32`), every stage's row fits in
//!   registers (`K = ⌈R/32⌉ ≤ 32` per lane, so all of a lane's loads are in flight at once),
//!   and a reduction ends in `sm_warp_reduce` (the prelude: the xor butterfly of warp
//!   shuffles), with no shared memory and no barrier. Rows of a warp are independent, so the
//!   loop exit is uniform within the warp, as the shuffles need.
//! - **Block per outer index** (`R > 1024`): a grid-stride loop over outer indices with one
//!   block of `B = clamp(next_pow2(⌈R/4⌉), 32, 512)` threads per index. Each stage's inner
//!   index `j` is strided across the threads (`j = tid + k·B`); a reduction combines each
//!   thread's elements in order, then `sm_block_reduce` (the prelude) combines the `B` partials
//!   with a fixed xor-butterfly tree (warp shuffles, then the warps' results through shared
//!   memory), so the result does not depend on timing and every thread holds it for the later
//!   stages. argmax/argmin combine (value, index) pairs with ties to the smaller index and NaN
//!   winning, which gives the first extreme element in any combining order (in both parallel
//!   strategies).
//!
//! **Row caching.** When a stage's row fits in `K ≤ 8` elements per thread (`R ≤ 8·B`, up to
//! 4096 elements; `K ≤ 32` per lane in the warp strategy), its loop is fully unrolled over
//! `k`; a load of the same buffer and affine access in several such stages with equal inner
//! dims (softmax's `x`) is read from global memory once, by the first stage, into a
//! per-thread register array `c[k]` and reused.
//! **Fallback:** longer rows use a plain strided loop and every stage re-reads its inputs from
//! global memory (usually from L2). A single huge reduction (one outer index) runs on one block:
//! correct but slow; splitting it across blocks is future work.

use super::body::{binary, cast, emit_body, store_stmt, LoadHow};
use super::ctx::{compute_type, const_lit, decompose, is_arg, numel, Ctx};
use super::elementwise::BLOCK;
use super::LaunchConfig;
use smelt_ir::{BinaryOp, DType, Scalar};
use smelt_passes::kernel::{Access, BufferId, Combiner, InstOp, Stage, StageEffect, Ty, ValueId};
use std::fmt::Write;

/// Rows up to this long run one thread per outer index.
const SERIAL_MAX: u64 = 32;
/// Column reductions with at least this many outer indices run one thread per outer index.
const COLUMN_MIN: u64 = 2048;
/// At most this many elements per thread are held in registers.
const CACHE_MAX: u64 = 8;
/// Rows up to this long (and longer than `SERIAL_MAX`) run one warp per outer index.
const WARP_MAX: u64 = 1024;
/// At most this many elements per lane are held in registers by the warp-per-row strategy
/// (`WARP_MAX / 32`: every row it takes is cached).
const WARP_CACHE_MAX: u64 = WARP_MAX / 32;
/// Warps (rows in flight) per block of the warp-per-row strategy: 4 (blocks of 128 threads,
/// so 16 resident blocks fill a multiprocessor) from `WARP_BLOCK_ROWS` rows, else 1 (small
/// row counts spread over as many multiprocessors as they can).
fn warps_per_block(n: u64) -> u32 {
    if n >= WARP_BLOCK_ROWS {
        4
    } else {
        1
    }
}
const WARP_BLOCK_ROWS: u64 = 4096;
/// The largest grid of the row strategies; blocks loop beyond it.
const ROW_GRID_CAP: u64 = 1 << 20;

/// The block size of the block-per-row strategy for rows of `r` elements.
pub(super) fn row_block(r: u64) -> u32 {
    r.div_ceil(4).next_power_of_two().clamp(32, 512) as u32
}

/// Prints a kernel with inner loops and returns its launch.
pub(super) fn emit(cx: &mut Ctx, out: &mut String) -> (LaunchConfig, String) {
    let k = cx.k;
    let n = numel(&k.outer);
    let r = k.stages.iter().map(|s| numel(&s.inner)).max().unwrap_or(1);
    if n == 0 {
        out.push_str("    // empty index space: nothing to do\n");
        return (LaunchConfig::threads(0, BLOCK, 1), "empty".into());
    }
    let idx = cx.idx;
    if r <= SERIAL_MAX || column_major(cx.k, n) {
        out.push_str("    // one thread per outer index; inner loops run sequentially\n");
        out.push_str(
            "    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n;\n         t += (long long)gridDim.x * blockDim.x) {\n",
        );
        let _ = writeln!(out, "        const {idx} f = ({idx})t;");
        decompose(out, "        ", idx, "f", &k.outer, 0);
        for (s, stage) in k.stages.iter().enumerate() {
            emit_stage(cx, out, s, stage, &Form::Serial);
        }
        out.push_str("    }\n");
        return (
            LaunchConfig::threads(n, BLOCK, 1),
            "thread per outer index".into(),
        );
    }
    // Rows up to WARP_MAX run a warp each; longer rows a block each.
    let warp = r <= WARP_MAX;
    let wpb = warps_per_block(n);
    let b = if warp { 32 } else { row_block(r) };
    let cache_max = if warp { WARP_CACHE_MAX } else { CACHE_MAX };
    if warp {
        let _ = writeln!(
            out,
            "    // one warp per outer index, {wpb} per block; inner loops strided across the lanes"
        );
    } else {
        let _ = writeln!(
            out,
            "    // one block of {b} threads per outer index; inner loops strided across threads"
        );
        for (s, stage) in k.stages.iter().enumerate() {
            if let StageEffect::Reduce {
                value, combiner, ..
            } = &stage.effect
            {
                let t = acc_type(cx, stage, *value, *combiner);
                let _ = writeln!(out, "    __shared__ {t} sm_red{s}[32];");
            }
        }
    }
    let caches = plan_caches(cx, b, cache_max);
    if warp {
        let _ = writeln!(out, "    const {idx} tid = threadIdx.x & 31;");
        let _ = writeln!(
            out,
            "    for (long long row = blockIdx.x * {wpb}LL + (threadIdx.x >> 5); row < n;\n         row += (long long)gridDim.x * {wpb}) {{"
        );
    } else {
        let _ = writeln!(out, "    const {idx} tid = threadIdx.x;");
        out.push_str("    for (long long row = blockIdx.x; row < n; row += gridDim.x) {\n");
    }
    let _ = writeln!(out, "        const {idx} f = ({idx})row;");
    decompose(out, "        ", idx, "f", &k.outer, 0);
    for (i, c) in caches.iter().enumerate() {
        let _ = writeln!(
            out,
            "        {} c{i}[{}]; // b{} row cache",
            compute_type(cx.dtype(c.buffer)),
            c.k,
            c.buffer.0
        );
    }
    for (s, stage) in k.stages.iter().enumerate() {
        let kk = numel(&stage.inner).div_ceil(u64::from(b));
        let form = if stage.inner.is_empty() {
            Form::Strided { b, warp }
        } else if kk <= cache_max {
            Form::Unrolled {
                b,
                k: kk,
                caches: &caches,
                stage: s,
                warp,
            }
        } else {
            Form::Strided { b, warp }
        };
        emit_stage(cx, out, s, stage, &form);
    }
    out.push_str("    }\n");
    if warp {
        let launch = LaunchConfig {
            grid: n.div_ceil(u64::from(wpb)).clamp(1, ROW_GRID_CAP) as u32,
            block: 32 * wpb,
            shared_bytes: 0,
        };
        return (launch, "warp per outer index".into());
    }
    let launch = LaunchConfig {
        grid: n.clamp(1, ROW_GRID_CAP) as u32,
        block: b,
        shared_bytes: 0,
    };
    (launch, "block per outer index".into())
}

/// Whether a reduction reads along columns: no load is contiguous in a stage's innermost
/// inner dim, but some load is contiguous in the innermost outer dim, and there are enough
/// outer indices to fill the GPU with one thread each. Then a thread per outer index reads
/// coalesced across the warp, which a block per outer index (strided reads) does not.
fn column_major(k: &smelt_passes::kernel::Kernel, n: u64) -> bool {
    let no = k.outer.len();
    if no == 0 || n < COLUMN_MIN {
        return false;
    }
    let (mut along_rows, mut along_cols) = (false, false);
    for stage in k.stages.iter().filter(|s| !s.inner.is_empty()) {
        let last_inner = no + stage.inner.len() - 1;
        for inst in &stage.body {
            if let InstOp::Load {
                access: Access::Affine { strides, .. },
                ..
            } = &inst.op
            {
                along_rows |= strides.get(last_inner) == Some(&1);
                along_cols |= strides.get(no - 1) == Some(&1);
            }
        }
    }
    along_cols && !along_rows
}

/// A row cache: one register array shared by the stages that load (`buffer`, `access`).
struct Cache {
    buffer: BufferId,
    access: Access,
    inner: Vec<usize>,
    k: u64,
    /// The stages that read it, in order (the first one fills it).
    stages: Vec<usize>,
}

fn plan_caches(cx: &Ctx, b: u32, cache_max: u64) -> Vec<Cache> {
    let mut caches: Vec<Cache> = Vec::new();
    for (s, stage) in cx.k.stages.iter().enumerate() {
        let k = numel(&stage.inner).div_ceil(u64::from(b));
        if k > cache_max || k == 0 || stage.inner.is_empty() {
            continue;
        }
        for inst in &stage.body {
            let InstOp::Load { buffer, access } = &inst.op else {
                continue;
            };
            if !matches!(access, Access::Affine { .. }) {
                continue;
            }
            match caches
                .iter_mut()
                .find(|c| c.buffer == *buffer && c.access == *access && c.inner == stage.inner)
            {
                Some(c) if !c.stages.contains(&s) => c.stages.push(s),
                Some(_) => {}
                None => caches.push(Cache {
                    buffer: *buffer,
                    access: access.clone(),
                    inner: stage.inner.clone(),
                    k,
                    stages: vec![s],
                }),
            }
        }
    }
    caches.retain(|c| c.stages.len() > 1);
    caches
}

/// How a stage's inner loop is laid out.
enum Form<'a> {
    /// One thread runs the whole loop.
    Serial,
    /// `for k < K` unrolled, `j = tid + k·B`, with row caches; `warp`: the `B = 32` lanes of
    /// one warp share the index (reductions through `sm_warp_reduce`), else the whole block
    /// (`sm_block_reduce`).
    Unrolled {
        b: u32,
        k: u64,
        caches: &'a [Cache],
        stage: usize,
        warp: bool,
    },
    /// `for (j = tid; j < R; j += B)`.
    Strided { b: u32, warp: bool },
}

/// The C type of a reduction's per-thread partial (`sm_arg<T>` for arg reductions).
fn acc_type(cx: &mut Ctx, stage: &Stage, value: ValueId, c: Combiner) -> String {
    if is_arg(c) {
        format!("sm_arg<{}>", cx.value_ctype(value))
    } else {
        match &stage.effect {
            StageEffect::Reduce { acc, .. } => compute_type(*acc).to_string(),
            StageEffect::Store(_) => "float".into(),
        }
    }
}

fn emit_stage(cx: &mut Ctx, out: &mut String, s: usize, stage: &Stage, form: &Form) {
    let idx = cx.idx;
    let ind = "        ";
    let r = numel(&stage.inner);
    let what = match &stage.effect {
        StageEffect::Reduce { combiner, acc, .. } => format!("{combiner:?} ({})", acc.name()),
        StageEffect::Store(_) => "store".into(),
    };
    let _ = writeln!(out, "{ind}// stage {s}: {what} over {:?}", stage.inner);
    // Accumulator declarations.
    let reduce = match &stage.effect {
        StageEffect::Reduce {
            value,
            combiner,
            acc,
            result,
        } => Some((*value, *combiner, *acc, *result)),
        StageEffect::Store(_) => None,
    };
    if let Some((value, combiner, acc, _)) = reduce {
        if is_arg(combiner) {
            let t = cx.value_ctype(value);
            let _ = writeln!(out, "{ind}{t} a{s}_v = 0;");
            let _ = writeln!(out, "{ind}long long a{s}_i = -1;");
        } else {
            let _ = writeln!(
                out,
                "{ind}{} a{s} = {};",
                compute_type(acc),
                identity(combiner, acc)
            );
        }
    }
    // The loop.
    let inner_ind = "            ";
    let mut body_ind = inner_ind.to_string();
    if r > 0 {
        match form {
            _ if stage.inner.is_empty() => {
                // One element: every thread (serial) or thread 0 of the block computes it.
                let guard = match form {
                    Form::Serial => "{",
                    _ => "if (tid == 0) {",
                };
                let _ = writeln!(out, "{ind}{guard}");
                let _ = writeln!(out, "{inner_ind}const {idx} j = 0;");
            }
            Form::Serial => {
                let _ = writeln!(out, "{ind}for ({idx} j = 0; j < {r}; ++j) {{");
            }
            Form::Strided { b, .. } => {
                let _ = writeln!(out, "{ind}for ({idx} j = tid; j < {r}; j += {b}) {{");
            }
            Form::Unrolled { b, k, .. } => {
                let _ = writeln!(out, "{ind}#pragma unroll");
                let _ = writeln!(out, "{ind}for (int k = 0; k < {k}; ++k) {{");
                let _ = writeln!(out, "{inner_ind}const {idx} j = tid + k * {b};");
                if u64::from(*b) * k != r {
                    let _ = writeln!(out, "{inner_ind}if (j < {r}) {{");
                    body_ind = format!("{inner_ind}    ");
                }
            }
        }
        let bi = body_ind.as_str();
        decompose(out, bi, idx, "j", &stage.inner, cx.k.outer.len());
        let loads = |b: BufferId, a: &Access| -> LoadHow {
            let Form::Unrolled {
                caches, stage: st, ..
            } = form
            else {
                return LoadHow::Global;
            };
            for (i, c) in caches.iter().enumerate() {
                if c.buffer == b && c.access == *a && c.stages.contains(st) {
                    return if c.stages[0] == *st {
                        LoadHow::GlobalAndCache(format!("c{i}[k]"))
                    } else {
                        LoadHow::Cached(format!("c{i}[k]"))
                    };
                }
            }
            LoadHow::Global
        };
        emit_body(cx, out, bi, &stage.body, &loads);
        match &stage.effect {
            StageEffect::Store(stores) => {
                for st in stores {
                    let line = store_stmt(cx, st);
                    let _ = writeln!(out, "{bi}{line}");
                }
            }
            StageEffect::Reduce {
                value,
                combiner,
                acc,
                ..
            } => {
                let x = format!("v{}", value.0);
                if is_arg(*combiner) {
                    let max = *combiner == Combiner::ArgMax;
                    let _ = writeln!(
                        out,
                        "{bi}if (sm_arg_better({max}, {x}, (long long)j, a{s}_v, a{s}_i)) {{ a{s}_v = {x}; a{s}_i = j; }}"
                    );
                } else {
                    let vd = match cx.ty(*value) {
                        Ty::Data(d) => d,
                        Ty::Index => DType::I64,
                    };
                    let xv = cast(vd, *acc, &x);
                    let comb = combine(*combiner, *acc, &format!("a{s}"), &xv);
                    let _ = writeln!(out, "{bi}a{s} = {comb};");
                }
            }
        }
        if body_ind != inner_ind {
            let _ = writeln!(out, "{inner_ind}}}");
        }
        let _ = writeln!(out, "{ind}}}");
    }
    // The result.
    let Some((value, combiner, acc, result)) = reduce else {
        return;
    };
    let parallel = !matches!(form, Form::Serial);
    let warp = matches!(
        form,
        Form::Unrolled { warp: true, .. } | Form::Strided { warp: true, .. }
    );
    if is_arg(combiner) {
        if parallel {
            let t = cx.value_ctype(value);
            let max = combiner == Combiner::ArgMax;
            let _ = writeln!(out, "{ind}sm_arg<{t}> p{s};");
            let _ = writeln!(out, "{ind}p{s}.v = a{s}_v;");
            let _ = writeln!(out, "{ind}p{s}.i = a{s}_i;");
            let pick =
                format!("[](sm_arg<{t}> a, sm_arg<{t}> b) {{ return sm_arg_pick({max}, a, b); }}");
            let call = if warp {
                format!("sm_warp_reduce(p{s}, {pick})")
            } else {
                format!("sm_block_reduce(p{s}, {pick}, sm_red{s})")
            };
            let _ = writeln!(out, "{ind}p{s} = {call};");
            let _ = writeln!(out, "{ind}a{s}_i = p{s}.i;");
        }
        let _ = writeln!(
            out,
            "{ind}const long long v{} = a{s}_i < 0 ? 0 : a{s}_i;",
            result.0
        );
    } else {
        let t = compute_type(acc);
        if parallel {
            let comb = combine(combiner, acc, "a", "b");
            let f = format!("[]({t} a, {t} b) {{ return {comb}; }}");
            let call = if warp {
                format!("sm_warp_reduce(a{s}, {f})")
            } else {
                format!("sm_block_reduce(a{s}, {f}, sm_red{s})")
            };
            let _ = writeln!(out, "{ind}a{s} = {call};");
        }
        let _ = writeln!(out, "{ind}const {t} v{} = a{s};", result.0);
    }
}

/// `combine(a, x)` in the accumulator dtype.
fn combine(c: Combiner, acc: DType, a: &str, x: &str) -> String {
    let op = match c {
        Combiner::Sum => BinaryOp::Add,
        Combiner::Prod => BinaryOp::Mul,
        Combiner::Max => BinaryOp::Maximum,
        _ => BinaryOp::Minimum,
    };
    binary(op, acc, a, x)
}

/// The combiner's identity in the accumulator dtype.
fn identity(c: Combiner, acc: DType) -> String {
    let s = match (c, acc) {
        (Combiner::Sum, _) => Scalar::Int(0),
        (Combiner::Prod, _) => Scalar::Int(1),
        (Combiner::Max, DType::Bool) => Scalar::Bool(false),
        (Combiner::Min, DType::Bool) => Scalar::Bool(true),
        (Combiner::Max, DType::I32) => Scalar::Int(i32::MIN as i64),
        (Combiner::Min, DType::I32) => Scalar::Int(i32::MAX as i64),
        (Combiner::Max, DType::I64) => Scalar::Int(i64::MIN),
        (Combiner::Min, DType::I64) => Scalar::Int(i64::MAX),
        (Combiner::Max, _) => Scalar::Float(f64::NEG_INFINITY),
        _ => Scalar::Float(f64::INFINITY),
    };
    const_lit(acc, s)
}
