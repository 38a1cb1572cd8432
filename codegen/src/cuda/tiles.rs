//! Elementwise kernels that read an operand transposed (`crate::transposed`): 32 x 32 tiles
//! through shared memory.
//!
//! The grid-stride elementwise kernel gives consecutive threads consecutive points of the last
//! outer dim, so a transposed operand (stride 1 along the second-to-last outer dim, 32 bytes,
//! one memory sector, or more along the last) is read one sector per element by every warp:
//! its loads are not coalesced, and the kernel cannot use 16-byte packs either. Such a kernel
//! computes tiles of 32 points of the second-to-last outer dim by 32 of the last instead, one
//! tile per block iteration (blocks of 256 threads, 32 x 8, grid-stride over the tiles of
//! every leading index):
//!
//! 1. each transposed operand's part of the tile is read with consecutive threads on
//!    consecutive points of the second-to-last dim (the operand's own rows, coalesced), four
//!    rows per thread, into a `__shared__` array of 32 x 33 elements (the padding column keeps
//!    the transposed reads of step 2 on 32 different banks);
//! 2. after a barrier, each thread computes four output points with consecutive threads on
//!    consecutive points of the last dim, as the plain kernel does, the transposed loads served
//!    from shared memory, every other access (and every store) coalesced;
//! 3. a second barrier before the next tile overwrites the shared arrays.
//!
//! Points outside the dims (the last tile of each dim) are skipped in both steps. Every output
//! point is computed by the same body from the same values as the plain kernel, so results are
//! the same. The CPU tiles in registers instead (`llvm::kernel`, `tile.rs`).

use super::body::{emit_body, load_param, store_stmt, LoadHow};
use super::ctx::{decompose, numel, storage_type, Ctx};
use super::elementwise::{BLOCK, GRID_CAP};
use super::LaunchConfig;
use crate::transposed::transposed_reads;
use smelt_passes::kernel::{Access, BufferId, Stage, StageEffect};
use std::fmt::Write;

/// A tile's side: a warp.
pub const SIDE: u64 = 32;

/// Rows of a tile each thread computes: `SIDE` over the `BLOCK / SIDE` rows of threads.
const ROWS_PER_THREAD: u64 = SIDE * SIDE / BLOCK as u64;

/// The smallest step along the last outer dim, in bytes, of a read served by tiles: a memory
/// sector, so that each point of a warp's row reads a sector of its own.
pub const SECTOR: u64 = 32;

/// The most transposed operands one kernel stages in shared memory (32 x 33 elements each,
/// 8.4 KB for 8-byte ones; a kernel with more keeps the plain form).
const MAX_READS: usize = 4;

/// The transposed reads `stage` (the kernel's only stage) gets tiles for: those of
/// `crate::transposed::transposed_reads` at [`SECTOR`], at most [`MAX_READS`] of them, in a
/// kernel whose last two outer dims are at least [`SIDE`] each. `None`: the plain kernel.
pub(super) fn tiled_reads(cx: &Ctx) -> Option<Vec<(BufferId, Access)>> {
    let outer = &cx.k.outer;
    let n = outer.len();
    if n < 2 || (outer[n - 1] as u64) < SIDE || (outer[n - 2] as u64) < SIDE {
        return None;
    }
    let reads = transposed_reads(cx.k, |b| cx.dtypes.get(&b).copied(), SECTOR)?;
    (reads.len() <= MAX_READS).then_some(reads)
}

/// Prints the body of an elementwise kernel whose transposed `reads` go through shared-memory
/// tiles (see the module docs), and its launch.
pub(super) fn emit(
    cx: &mut Ctx,
    stage: &Stage,
    reads: &[(BufferId, Access)],
    out: &mut String,
) -> (LaunchConfig, String) {
    let StageEffect::Store(stores) = &stage.effect else {
        return (LaunchConfig::threads(0, BLOCK, 1), "elementwise".into());
    };
    let outer = cx.k.outer.clone();
    let n = outer.len();
    let (rows, cols) = (outer[n - 2] as u64, outer[n - 1] as u64);
    let (tile_rows, tile_cols) = (rows.div_ceil(SIDE), cols.div_ceil(SIDE));
    let tiles = numel(&outer[..n - 2]) * tile_rows * tile_cols;
    let idx = cx.idx;
    let (row_var, col_var) = (format!("x{}", n - 2), format!("x{}", n - 1));
    let names: Vec<String> = (0..reads.len()).map(|i| format!("tile{i}")).collect();
    let _ = writeln!(
        out,
        "    // {SIDE} x {SIDE} tiles, {ROWS_PER_THREAD} rows per thread: the transposed operands through shared\n    // memory (read along their own rows, coalesced), everything else as in the plain kernel"
    );
    for ((b, _), name) in reads.iter().zip(&names) {
        let ty = storage_type(cx.dtype(*b));
        let _ = writeln!(out, "    __shared__ {ty} {name}[{SIDE}][{}];", SIDE + 1);
    }
    let _ = writeln!(
        out,
        "    const int tx = threadIdx.x % {SIDE}, ty = threadIdx.x / {SIDE};"
    );
    let _ = writeln!(
        out,
        "    for (long long t = blockIdx.x; t < {tiles}LL; t += gridDim.x) {{"
    );
    let _ = writeln!(out, "        const long long tc = t % {tile_cols}LL;");
    let _ = writeln!(
        out,
        "        const long long tr = t / {tile_cols}LL % {tile_rows}LL;"
    );
    if n > 2 {
        let _ = writeln!(
            out,
            "        const long long lead = t / {}LL;",
            tile_cols * tile_rows
        );
        decompose(out, "        ", idx, "lead", &outer[..n - 2], 0);
    }
    let step = BLOCK as u64 / SIDE;
    let point = |out: &mut String, row: &str, col: &str| {
        let _ = writeln!(
            out,
            "            const {idx} {row_var} = ({idx})(tr * {SIDE}) + {row};"
        );
        let _ = writeln!(
            out,
            "            const {idx} {col_var} = ({idx})(tc * {SIDE}) + {col};"
        );
        let _ = writeln!(
            out,
            "            if ({row_var} < {rows} && {col_var} < {cols}) {{"
        );
    };
    // Step 1: the transposed operands' tiles, along their rows.
    let _ = writeln!(
        out,
        "        #pragma unroll\n        for (int k = 0; k < {ROWS_PER_THREAD}; ++k) {{"
    );
    point(out, "tx", &format!("ty + {step} * k"));
    for ((b, a), name) in reads.iter().zip(&names) {
        let param = load_param(cx, *b);
        let e = cx.checked_load(&param, *b, a);
        let _ = writeln!(out, "                {name}[ty + {step} * k][tx] = {e};");
    }
    out.push_str("            }\n        }\n        __syncthreads();\n");
    // Step 2: the points, along the output's rows.
    let _ = writeln!(
        out,
        "        #pragma unroll\n        for (int k = 0; k < {ROWS_PER_THREAD}; ++k) {{"
    );
    point(out, &format!("ty + {step} * k"), "tx");
    let staged: Vec<(BufferId, Access, String)> = reads
        .iter()
        .zip(&names)
        .map(|((b, a), name)| (*b, a.clone(), format!("{name}[tx][ty + {step} * k]")))
        .collect();
    emit_body(
        cx,
        out,
        "                ",
        &stage.body,
        &|b, a| match staged.iter().find(|(sb, sa, _)| *sb == b && sa == a) {
            Some((_, _, e)) => LoadHow::Raw(e.clone()),
            None => LoadHow::Global,
        },
    );
    for s in stores {
        let st = store_stmt(cx, s);
        let _ = writeln!(out, "                {st}");
    }
    out.push_str("            }\n        }\n        __syncthreads();\n    }\n");
    let launch = LaunchConfig {
        grid: tiles.clamp(1, GRID_CAP) as u32,
        block: BLOCK,
        shared_bytes: 0,
    };
    let strategy = format!(
        "elementwise, {SIDE} x {SIDE} tiles through shared memory ({} transposed read{})",
        reads.len(),
        if reads.len() == 1 { "" } else { "s" }
    );
    (launch, strategy)
}
