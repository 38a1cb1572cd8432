//! Elementwise kernels (every dim outer, one store stage): a grid-stride loop over the flat
//! outer index, vectorised to 16-byte accesses when the addressing allows it.
//!
//! **Vectorisation.** Every thread handles `V` consecutive elements of the innermost dim, with
//! `V = 16 / (largest element size among unit-stride buffers)` (4 for f32, 8 for f16/bf16, 2
//! for f64/i64). It applies when every access is affine, its innermost stride is 1 (read or
//! written as an `sm_pack` of `V` elements: `float4`-sized for f32, `uint4`-sized for 8 halves)
//! or 0 (a broadcast, read as a scalar), the innermost extent is a multiple of `V`, and every
//! unit-stride access keeps the pack aligned: its offset and its other strides are multiples of
//! `V`. **Alignment assumption:** every buffer's base address is aligned to 16 bytes
//! (`cudaMalloc` gives 256; the runtime's memory plan must place buffers at 16-byte-aligned
//! offsets). Otherwise the kernel is scalar.

use super::body::{emit_body, load_param, store_param, store_stmt, store_value, LoadHow};
use super::ctx::{decompose, numel, storage_type, Ctx};
use super::LaunchConfig;
use smelt_passes::kernel::{Access, BufferId, InstOp, Stage, StageEffect};
use std::fmt::Write;

/// Threads per block of elementwise (and thread-per-row) kernels.
pub(super) const BLOCK: u32 = 256;
/// The largest grid of a grid-stride kernel; threads loop beyond it.
pub(super) const GRID_CAP: u64 = 65535;

/// Prints the body of an elementwise kernel (`stage` is its only stage) and its launch.
pub(super) fn emit(cx: &mut Ctx, stage: &Stage, out: &mut String) -> (LaunchConfig, String) {
    let outer = cx.k.outer.clone();
    let n = numel(&outer);
    let StageEffect::Store(stores) = &stage.effect else {
        return (LaunchConfig::threads(0, BLOCK, 1), "elementwise".into());
    };
    if n == 0 {
        out.push_str("    // empty index space: nothing to do\n");
        return (LaunchConfig::threads(0, BLOCK, 1), "elementwise".into());
    }
    if let Some(reads) = super::tiles::tiled_reads(cx) {
        return super::tiles::emit(cx, stage, &reads, out);
    }
    let width = vector_width(cx, stage, &outer);
    let mut per_thread = 1;
    if width > 1 {
        let unroll = emit_vector(cx, stage, stores, &outer, width, out);
        per_thread = width * unroll;
    } else {
        let idx = cx.idx;
        out.push_str(
            "    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n;\n         t += (long long)gridDim.x * blockDim.x) {\n",
        );
        let _ = writeln!(out, "        const {idx} f = ({idx})t;");
        decompose(out, "        ", idx, "f", &outer, 0);
        emit_body(cx, out, "        ", &stage.body, &|_, _| LoadHow::Global);
        for s in stores {
            let st = store_stmt(cx, s);
            let _ = writeln!(out, "        {st}");
        }
        out.push_str("    }\n");
    }
    let strategy = if width > 1 && per_thread == width {
        format!("elementwise, {width} elements per thread")
    } else if width > 1 {
        format!(
            "elementwise, {per_thread} elements per thread ({} packs of {width})",
            per_thread / width
        )
    } else {
        "elementwise".into()
    };
    (
        LaunchConfig::threads(n, BLOCK, u64::from(per_thread)),
        strategy,
    )
}

/// The vector width (1: scalar), following the rules in the module doc.
fn vector_width(cx: &Ctx, stage: &Stage, outer: &[usize]) -> u32 {
    let Some(&inner) = outer.last() else {
        return 1;
    };
    let last = outer.len() - 1;
    let mut accesses: Vec<(BufferId, &Access)> = Vec::new();
    for inst in &stage.body {
        if let InstOp::Load { buffer, access } = &inst.op {
            accesses.push((*buffer, access));
        }
    }
    if let StageEffect::Store(stores) = &stage.effect {
        if !stores.iter().all(|s| is_unit(&s.access, last)) {
            return 1;
        }
        accesses.extend(stores.iter().map(|s| (s.buffer, &s.access)));
    }
    let mut largest = 0;
    for (b, a) in &accesses {
        match a {
            Access::Computed(_) => return 1,
            Access::Affine { strides, .. } => match strides.get(last) {
                Some(0) => {}
                Some(1) => largest = largest.max(cx.dtype(*b).size_bytes()),
                _ => return 1,
            },
        }
    }
    if largest == 0 {
        return 1;
    }
    let v = 16 / largest;
    let aligned = accesses.iter().all(|(_, a)| match a {
        Access::Affine { offset, strides } if strides[last] == 1 => {
            offset.rem_euclid(v as i64) == 0
                && strides[..last].iter().all(|s| s.rem_euclid(v as i64) == 0)
        }
        _ => true,
    });
    if v > 1 && aligned && inner % v == 0 {
        v as u32
    } else {
        1
    }
}

fn is_unit(a: &Access, last: usize) -> bool {
    matches!(a, Access::Affine { strides, .. } if strides.get(last) == Some(&1))
}

fn emit_vector(
    cx: &mut Ctx,
    stage: &Stage,
    stores: &[smelt_passes::kernel::Store],
    outer: &[usize],
    width: u32,
    out: &mut String,
) -> u32 {
    let idx = cx.idx;
    let last = outer.len() - 1;
    // Input packs, one per distinct unit-stride (buffer, access), in body order.
    let mut packs: Vec<(BufferId, Access, String)> = Vec::new();
    for inst in &stage.body {
        if let InstOp::Load { buffer, access } = &inst.op {
            if is_unit(access, last) && !packs.iter().any(|(b, a, _)| b == buffer && a == access) {
                packs.push((*buffer, access.clone(), format!("p{}", packs.len())));
            }
        }
    }
    let unroll = packs_per_thread(packs.len(), numel(outer) / u64::from(width));
    let _ = writeln!(
        out,
        "    // {width} elements per pack (16-byte accesses: buffers are 16-byte aligned), {unroll} pack{}\n    // per thread, blockDim.x apart: every input pack is loaded before any is used",
        if unroll == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        out,
        "    for (long long t0 = blockIdx.x * (long long)blockDim.x * {unroll} + threadIdx.x; t0 < n / {width};\n         t0 += (long long)gridDim.x * blockDim.x * {unroll}) {{"
    );
    // The flat index of pack `u` and its coordinates (the innermost one as `x{last}_0`).
    let base = format!("x{last}");
    let mut dec = String::new();
    decompose(&mut dec, "                ", idx, "f", outer, 0);
    let dec = dec.replace(&format!("{base} ="), &format!("{base}_0 ="));
    let open_pack = |out: &mut String| {
        let _ = writeln!(
            out,
            "        #pragma unroll\n        for (int u = 0; u < {unroll}; ++u) {{\n            const long long t = t0 + (long long)u * blockDim.x;\n            if (t < n / {width}) {{\n                const {idx} f = ({idx})(t * {width});"
        );
        out.push_str(&dec);
    };
    let close_pack = |out: &mut String| out.push_str("            }\n        }\n");
    for (b, _, name) in &packs {
        let ty = pack_type(cx, *b, width);
        let _ = writeln!(out, "        {ty} {name}[{unroll}];");
    }
    // Phase 1: every input pack.
    if !packs.is_empty() {
        open_pack(out);
        cx.rename = Some((last, format!("{base}_0")));
        for (b, a, name) in &packs {
            let ty = pack_type(cx, *b, width);
            let param = load_param(cx, *b);
            let addr = cx.address(a);
            let _ = writeln!(
                out,
                "                {name}[u] = *reinterpret_cast<const {ty}*>({param} + ({addr}));"
            );
        }
        cx.rename = None;
        close_pack(out);
    }
    // Phase 2: compute and store.
    open_pack(out);
    let mut outs: Vec<(BufferId, Access, String)> = Vec::new();
    for s in stores {
        if !outs
            .iter()
            .any(|(b, a, _)| *b == s.buffer && *a == s.access)
        {
            let name = format!("q{}", outs.len());
            let ty = pack_type(cx, s.buffer, width);
            let _ = writeln!(out, "                {ty} {name};");
            outs.push((s.buffer, s.access.clone(), name));
        }
    }
    let _ = writeln!(
        out,
        "                #pragma unroll\n                for (int e = 0; e < {width}; ++e) {{"
    );
    let _ = writeln!(
        out,
        "                    const {idx} {base} = {base}_0 + e;"
    );
    let lanes: Vec<(BufferId, Access, String)> = packs.clone();
    emit_body(
        cx,
        out,
        "                    ",
        &stage.body,
        &|b, a| match lanes.iter().find(|(pb, pa, _)| *pb == b && pa == a) {
            Some((_, _, name)) => LoadHow::Raw(format!("{name}[u].v[e]")),
            None => LoadHow::Global,
        },
    );
    for s in stores {
        let value = store_value(cx, s);
        if let Some((_, _, name)) = outs
            .iter()
            .find(|(b, a, _)| *b == s.buffer && *a == s.access)
        {
            let _ = writeln!(out, "                    {name}.v[e] = {value};");
        }
    }
    out.push_str("                }\n");
    cx.rename = Some((last, format!("{base}_0")));
    for (b, a, name) in &outs {
        let ty = pack_type(cx, *b, width);
        let param = store_param(cx, *b);
        let addr = cx.address(a);
        let _ = writeln!(
            out,
            "                *reinterpret_cast<{ty}*>({param} + ({addr})) = {name};"
        );
    }
    cx.rename = None;
    close_pack(out);
    out.push_str("    }\n");
    unroll
}

/// The C type of a pack of `width` elements of buffer `b`.
fn pack_type(cx: &Ctx, b: BufferId, width: u32) -> String {
    format!("sm_pack<{}, {width}>", storage_type(cx.dtype(b)))
}

/// Packs per thread in a vectorised kernel of `packs` packs: enough independent 16-byte loads
/// in flight per thread to cover the memory latency (a GPU needs tens of KiB in flight per
/// multiprocessor to reach its bandwidth), fewer when many inputs would cost occupancy in
/// registers, and 1 when fewer threads would leave the grid under `MIN_BLOCKS` blocks (a
/// small kernel is bound by its latency, which spreading it over more multiprocessors cuts).
fn packs_per_thread(input_packs: usize, packs: u64) -> u32 {
    let mut unroll: u32 = match input_packs {
        0..=2 => 4,
        3..=4 => 2,
        _ => 1,
    };
    while unroll > 1 && packs / u64::from(BLOCK * unroll) < MIN_BLOCKS {
        unroll /= 2;
    }
    unroll
}

/// The fewest blocks a vectorised kernel with several packs per thread is launched with.
const MIN_BLOCKS: u64 = 128;
