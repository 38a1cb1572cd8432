//! Matmul on the CPU with `torch.matmul` semantics, through the `gemm` crate.
//!
//! - **Shapes.** A 1-D left operand `[k]` is a row `[1, k]` and a 1-D right operand `[k]` a
//!   column `[k, 1]`; the added dim is absent from the output. Batch dims broadcast (PyTorch
//!   rules). The output is dense row-major with the shape `torch.matmul` gives.
//! - **Layouts.** Each operand is a [`MatmulOperand`]: logical dims plus element strides, read
//!   in place. A transposed operand ([`MatmulOperand::transposed`]) or a broadcast batch
//!   (stride 0) costs no copy: `gemm` packs panels through any row and column strides.
//! - **dtypes.** f32 and f64 go to `gemm` directly. f16 and bf16 are widened to f32 per batch
//!   (exact), multiplied by `gemm` in f32 and rounded once to the output dtype (nearest even, NaN
//!   kept): `gemm` has no bf16, and its own f16 path rounds the accumulator to f16 after every
//!   step in its matrix-vector kernels and after every `kc` block otherwise, which costs
//!   several ulps on long contractions. i32 and i64 use a plain loop with wrapping arithmetic
//!   (bit-exact with the reference interpreter, whose i64 accumulation narrowed to i32 equals
//!   wrapping i32). `k = 0` gives zeros. Bool is refused.
//! - **Threads.** f32/f64: many (or small) batches run in parallel on the pool, one
//!   single-threaded `gemm` per batch; fewer large batches than threads are each cut into
//!   column blocks (row blocks when there are too few columns), one single-threaded `gemm` per
//!   block, spread over the pool (faster than `gemm`'s own threading, which splits a
//!   128 x 3072 x 768 product with a transposed operand poorly). Each output element is one
//!   `gemm` dot product either way, its contraction cut into the same pieces (no split makes
//!   tiles `gemm` cuts otherwise, [`GEMM_SMALL_DIM`]), so results do not depend on the thread
//!   count. f16/bf16 (widened per batch) use `gemm`'s threading for few large batches.
//!   Integer loops split rows across the pool.
//! - **SIMD.** The `gemm` crate's AVX-512 kernels are compiled in (its `x86-v4` feature) and
//!   chosen at run time when the CPU has AVX-512; AVX2+FMA kernels otherwise. f32 products of
//!   at most [`PANEL_MAX_ROWS`](crate::cpu::PANEL_MAX_ROWS) rows run instead on smelt's own
//!   panel kernel (`panel.rs`) when the CPU has AVX-512F, or AVX2 and FMA: with so few rows,
//!   `gemm`'s per-call packing of the right operand costs as much as the arithmetic; bound
//!   weights are packed once, at compile time, in the kernel's layout
//!   ([`MatmulPlan::panel_rhs`]). Each output element is then one fused multiply-add chain
//!   in `k` order, the same bits on both instruction sets.
//! - **Accuracy.** `gemm` accumulates in f32 (f32, f16, bf16) or f64 in a
//!   blocked order, like PyTorch's GEMMs; the reference interpreter accumulates in f64. The
//!   difference is bounded by `γ_k · Σ_p |a_ip · b_pj|` with `γ_k ≈ k · 2⁻²⁴` for f32 (see
//!   `runtime/tests/cpu_gemm.rs` for the tolerances tested).

mod kernels;
mod operand;
mod panel;

pub use operand::MatmulOperand;
pub use panel::PANEL_MAX_ROWS;
// For `copy_blocks` (`cpu/exec.rs`), which copies bound weights into the `gemm` crate's layout.
pub(crate) use panel::transpose_tile;

use super::error::{CpuError, Result};
use super::pool::CpuPool;
use gemm::Parallelism;
use half::{bf16, f16};
use operand::{layout, Layout};
use smelt_ir::{DType, HostTensor, TensorData};
use std::mem::MaybeUninit;
use std::ops::Range;

const OP: &str = "matmul";

/// Batches whose `m * n * k` is at most this run in parallel across batches even when there are
/// fewer batches than threads (inner `gemm` threading does not pay off for them).
const SMALL_GEMM: usize = 64 * 64 * 64;

/// Column blocks of a split batch are multiples of this many columns (whole cache lines of
/// output, whole `gemm` register tiles) and at least this wide.
const MIN_TILE_COLS: usize = 32;
/// Products with at most this many rows may read their (bound) right operand in per-tile
/// column blocks ([`MatmulPlan::block_rhs`]): few rows share each panel `gemm` packs, so
/// packing it from a full-width row stride dominates (measured: 32 x 1536 x 768 tiles of a
/// 3072-wide weight 1.78 ms strided, 0.59 ms blocked; at 128 rows no gain).
pub const BLOCK_RHS_MAX_ROWS: usize = 64;

/// Row blocks of a split batch are multiples of this many rows and at least this tall.
const MIN_TILE_ROWS: usize = 16;

/// `gemm` 0.19 (`gemm-common`'s `gemm_basic_generic`) cuts the contraction of a product of at
/// most this many rows and columns into pieces of [`GEMM_SMALL_KC`], and that of a larger one
/// into pieces of its own cache-based size (on the Zen 3 host, 600 otherwise than into 512
/// and 88).
/// Each output element's sum is grouped by those pieces, so a tile of a split batch must be
/// small exactly when the whole product is ([`MatmulPlan::blocks_like_whole`]), or its bits
/// would depend on the thread count.
const GEMM_SMALL_DIM: usize = 64;
/// The contraction piece of `gemm`'s small products ([`GEMM_SMALL_DIM`]); a contraction no
/// longer than this is one piece for products of any size.
const GEMM_SMALL_KC: usize = 512;

/// A batch's output cut into `row_parts x col_parts` blocks, each computed by its own
/// single-threaded `gemm` call: every output element is still one `gemm` dot product over the
/// whole `k`, cut into the same pieces as in one call for the whole batch (see
/// [`GEMM_SMALL_DIM`]), so results do not depend on the thread count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tiles {
    row_parts: usize,
    col_parts: usize,
}

impl Tiles {
    fn per_batch(&self) -> usize {
        self.row_parts * self.col_parts
    }

    /// Rows and columns of tile `i` of a batch (possibly empty when alignment leaves fewer
    /// blocks than parts) for an `m x n` output.
    fn tile(&self, i: usize, m: usize, n: usize) -> (Range<usize>, Range<usize>) {
        let block = |len: usize, parts: usize, i: usize, align: usize| {
            let size = len.div_ceil(parts).div_ceil(align) * align;
            let start = (i * size).min(len);
            start..(start + size).min(len)
        };
        (
            block(m, self.row_parts, i / self.col_parts, MIN_TILE_ROWS),
            block(n, self.col_parts, i % self.col_parts, MIN_TILE_COLS),
        )
    }
}

/// An element type a matmul runs on.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}
element!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, i32 => I32, i64 => I64);

/// A checked, reusable matmul: shapes, strides and dtype fixed, buffers supplied per run.
#[derive(Clone, Debug)]
pub struct MatmulPlan {
    dtype: DType,
    out_dims: Vec<usize>,
    batch_dims: Vec<usize>,
    batches: usize,
    m: usize,
    k: usize,
    n: usize,
    lhs: Layout,
    rhs: Layout,
    /// Set by [`MatmulPlan::block_rhs`]: the right operand is stored in column blocks, one per
    /// tile of a pool of this many threads (see there).
    rhs_blocked: Option<usize>,
    /// Set by [`MatmulPlan::panel_rhs`]: each block is stored in the panel kernel's layout.
    rhs_panels: bool,
    /// The most rows a product may have to run on the panel kernel (see
    /// [`MatmulPlan::with_panel_max_rows`]).
    panel_max_rows: usize,
}

impl MatmulPlan {
    /// Checks `lhs @ rhs` of `dtype` (shapes, strides, broadcasting, dtype) and plans it.
    pub fn new(dtype: DType, lhs: &MatmulOperand, rhs: &MatmulOperand) -> Result<MatmulPlan> {
        let bad = |reason: String| CpuError::MatmulShape {
            reason,
            lhs: lhs.to_string(),
            rhs: rhs.to_string(),
        };
        if dtype == DType::Bool {
            return Err(CpuError::UnsupportedDType { op: OP, dtype });
        }
        for op in [lhs, rhs] {
            if op.dims().is_empty() {
                return Err(bad("both operands need at least one dimension".into()));
            }
            if op.dims().len() != op.strides().len() {
                return Err(bad("each operand needs one stride per dimension".into()));
            }
        }
        let (ld, rd) = (lhs.dims(), rhs.dims());
        let (lr, rr) = (ld.len(), rd.len());
        let (lb, rb, m, k, k2, n) = smelt_ir::infer::matmul_parts(ld, rd);
        if k != k2 {
            return Err(bad(format!("contraction dims differ ({k} vs {k2})")));
        }
        let batch = lb
            .broadcast(&rb)
            .ok_or_else(|| bad(format!("batch dims {lb} and {rb} do not broadcast")))?;
        let batch_dims = batch.dims().to_vec();
        let mut out_dims = batch_dims.clone();
        if lr > 1 {
            out_dims.push(m);
        }
        if rr > 1 {
            out_dims.push(n);
        }
        let batches = checked_product(&batch_dims, "the batch count")?;
        checked_product(&out_dims, "the output size")?;
        let plan = MatmulPlan {
            dtype,
            out_dims,
            batches,
            m,
            k,
            n,
            lhs: layout(lhs, true, &batch_dims)?,
            rhs: layout(rhs, false, &batch_dims)?,
            batch_dims,
            rhs_blocked: None,
            rhs_panels: false,
            panel_max_rows: PANEL_MAX_ROWS,
        };
        Ok(plan)
    }

    /// The plan with products of at most `rows` rows, instead of
    /// [`PANEL_MAX_ROWS`](crate::cpu::PANEL_MAX_ROWS), running on the panel kernel (the rest on
    /// `gemm`): for measuring one against the other. Call it before
    /// [`MatmulPlan::panel_rhs`].
    pub fn with_panel_max_rows(mut self, rows: usize) -> MatmulPlan {
        self.panel_max_rows = rows;
        self
    }

    /// Whether this product runs on the panel kernel (`panel.rs`): one f32 matrix product (no
    /// batch dims: a linear layer) with at most [`PANEL_MAX_ROWS`](crate::cpu::PANEL_MAX_ROWS)
    /// rows (or [`MatmulPlan::with_panel_max_rows`]'s), on a CPU with AVX-512F, or with AVX2
    /// and FMA. (Batched products, attention's, are small per batch; `gemm` runs them
    /// faster.)
    pub fn uses_panels(&self) -> bool {
        self.dtype == DType::F32
            && self.batch_dims.is_empty()
            && self.m <= self.panel_max_rows
            && panel::available()
    }

    /// Declares the right operand, a row-major `[k, n]` matrix of a product that
    /// [`uses_panels`](Self::uses_panels), stored instead as [`MatmulPlan::pack_panels`]
    /// writes it for a pool of `threads` threads: each column block of
    /// [`MatmulPlan::rhs_column_blocks`] (or all columns, when the product is not split) in
    /// the panel kernel's layout, block after block. The values read are the same, and so is
    /// every bit of the product (see `panel.rs`). Running the plan on a pool of another size
    /// is an error. Fails (leaves the plan as it was) for any other product.
    pub fn panel_rhs(&mut self, threads: usize) -> Result<()> {
        if !self.rhs_row_major() || !self.uses_panels() {
            return Err(self.not_storable("in panels".into()));
        }
        self.rhs_blocked = self.rhs_column_blocks(threads).map(|_| threads);
        self.rhs_panels = true;
        Ok(())
    }

    /// The right operand, element `(i, j)` (`i < k`, `j < n`) at `data[offset + i * rs + j *
    /// cs]` for `strides = [rs, cs]`, in the layout [`MatmulPlan::panel_rhs`] declared for
    /// `threads` threads: each block from element `k * c` of its first column `c` (a multiple
    /// of 32), whole 32-column pairs, zeros past the last column. Fails when `data` is too
    /// short for the elements the strides reach.
    pub fn pack_panels(
        &self,
        threads: usize,
        data: &[f32],
        offset: usize,
        strides: [usize; 2],
    ) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(panel::packed_len(self.k, self.n));
        self.pack_panels_into(&mut out, threads, data, offset, strides)?;
        Ok(out)
    }

    /// [`MatmulPlan::pack_panels`] after as many zeros (fewer than 16) as put the first packed
    /// element on a 64-byte boundary of the vector (whose heap block stays where it is when
    /// the vector moves), so that the panel kernel's vector loads never split a cache line;
    /// returns the vector and that number of zeros, the packed operand's element offset.
    pub fn pack_panels_aligned(
        &self,
        threads: usize,
        data: &[f32],
        offset: usize,
        strides: [usize; 2],
    ) -> Result<(Vec<f32>, usize)> {
        const LINE: usize = 64 / std::mem::size_of::<f32>();
        let mut out: Vec<f32> = Vec::with_capacity(LINE - 1 + panel::packed_len(self.k, self.n));
        let pad = out.as_ptr().align_offset(64).min(LINE - 1);
        out.resize(pad, 0.0);
        // Within the capacity: the vector is not reallocated, the alignment holds.
        self.pack_panels_into(&mut out, threads, data, offset, strides)?;
        Ok((out, pad))
    }

    /// Appends the packed operand of [`MatmulPlan::pack_panels`] to `out`, panel after panel
    /// through [`append_pieces`] (written once, on several threads when large).
    fn pack_panels_into(
        &self,
        out: &mut Vec<f32>,
        threads: usize,
        data: &[f32],
        offset: usize,
        [rs, cs]: [usize; 2],
    ) -> Result<()> {
        let (k, n) = (self.k, self.n);
        let strides = isize::try_from(rs).ok().zip(isize::try_from(cs).ok());
        let (rs, cs) = strides.ok_or_else(|| overflow("the right operand's strides".into()))?;
        // The elements read: the `[k, n]` operand's, from `offset`.
        if let Some(needed) = MatmulOperand::new(&[k, n], &[rs, cs]).needed_len(offset)? {
            if needed > data.len() {
                return Err(CpuError::BufferTooSmall {
                    op: OP,
                    operand: "rhs",
                    needed,
                    len: data.len(),
                });
            }
        }
        let blocks = self
            .rhs_column_blocks(threads)
            .unwrap_or_else(|| std::iter::once(0..n).collect());
        // Every panel, in storage order (blocks one after the other, each in whole pairs of
        // panels): its length, first column and the end of its block.
        let panels: Vec<(usize, (usize, usize))> = blocks
            .iter()
            .flat_map(|b| {
                let count = panel::packed_len(k, b.len()) / (k * panel::PANEL).max(1);
                (0..count).map(move |p| (k * panel::PANEL, (b.start + p * panel::PANEL, b.end)))
            })
            .collect();
        // SAFETY: `fill_panel_strided` writes all `k * 16` elements of the panel it is given;
        // it reads rows below `k` and columns below the block's end (at most `n`): inside
        // `data`, checked above.
        unsafe {
            append_pieces(out, &panels, threads, |&(first, end), dst| {
                let ptr = data.as_ptr().wrapping_add(offset);
                panel::fill_panel_strided(dst, k, first, end, ptr, rs, cs)
            })
        };
        Ok(())
    }

    /// The column ranges of the tiles a pool of `threads` threads splits this product into,
    /// when it has at most `BLOCK_RHS_MAX_ROWS` (64) rows and splits its one batch into column
    /// blocks only (a linear layer applied to a few tokens); `None` otherwise.
    pub fn rhs_column_blocks(&self, threads: usize) -> Option<Vec<Range<usize>>> {
        if self.batches != 1 || !self.batch_dims.is_empty() || self.m > BLOCK_RHS_MAX_ROWS {
            return None;
        }
        let tiles = self.tiles(threads);
        if tiles.row_parts != 1 || tiles.col_parts < 2 {
            return None;
        }
        Some(
            (0..tiles.col_parts)
                .map(|i| tiles.tile(i, self.m, self.n).1)
                .collect(),
        )
    }

    /// Declares the right operand, a row-major `[k, n]` matrix, stored instead in the column
    /// blocks of [`MatmulPlan::rhs_column_blocks`]`(threads)`, one after another, each
    /// row-major `[k, width]` (block `j`, columns `c..c + w`, starts at element `k * c`). Each
    /// tile's `gemm` then reads its block contiguously: with the full row stride, a
    /// 32 x 1536 x 768 tile of a 3072-wide weight ran about 3x slower (strided panel packing).
    /// The values read are the same, so the product is too. Running the plan on a pool of
    /// another size is an error. Fails (leaves the plan as it was) unless the operand is
    /// row-major `[k, n]` and the product splits into column blocks for `threads`.
    pub fn block_rhs(&mut self, threads: usize) -> Result<()> {
        let gemm_dtype = matches!(self.dtype, DType::F32 | DType::F64);
        if !self.rhs_row_major() || !gemm_dtype || self.rhs_column_blocks(threads).is_none() {
            return Err(self.not_storable(format!("in column blocks for {threads} threads")));
        }
        self.rhs_blocked = Some(threads);
        Ok(())
    }

    /// Whether the right operand is read as a row-major `[k, n]` matrix.
    fn rhs_row_major(&self) -> bool {
        self.rhs.rs == self.n as isize && self.rhs.cs == 1
    }

    /// The error of [`MatmulPlan::block_rhs`] / [`MatmulPlan::panel_rhs`]: the right operand
    /// cannot be stored `how`.
    fn not_storable(&self, how: String) -> CpuError {
        CpuError::MatmulShape {
            reason: format!("its right operand cannot be stored {how}"),
            lhs: format!("[{}, {}]", self.m, self.k),
            rhs: format!("[{}, {}]", self.k, self.n),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The output dims (`torch.matmul`'s result shape); the output is dense row-major.
    pub fn out_dims(&self) -> &[usize] {
        &self.out_dims
    }

    /// `(batches, m, k, n)`.
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        (self.batches, self.m, self.k, self.n)
    }

    /// The number of output elements.
    pub fn out_len(&self) -> usize {
        self.batches * self.m * self.n
    }

    /// Runs on typed slices: `lhs` and `rhs` start at element offset 0 of their operands,
    /// `out` holds at least [`MatmulPlan::out_len`] elements (the rest is left alone).
    pub fn run<T: Element>(
        &self,
        pool: &CpuPool,
        lhs: &[T],
        rhs: &[T],
        out: &mut [T],
    ) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(CpuError::DTypeMismatch {
                op: OP,
                operand: "buffer",
                expected: self.dtype,
                got: T::DTYPE,
            });
        }
        check_span(&self.lhs, lhs.len(), "lhs")?;
        check_span(&self.rhs, rhs.len(), "rhs")?;
        let panels = panel::packed_len(self.k, self.n);
        if self.rhs_panels && rhs.len() < panels {
            return Err(CpuError::BufferTooSmall {
                op: OP,
                operand: "rhs (in panels)",
                needed: panels,
                len: rhs.len(),
            });
        }
        if out.len() < self.out_len() {
            return Err(CpuError::BufferTooSmall {
                op: OP,
                operand: "out",
                needed: self.out_len(),
                len: out.len(),
            });
        }
        // SAFETY: the dtype matches `T` and every offset the plan reaches lies inside the
        // slices (checked just above); `out` is exclusively borrowed and does not overlap the
        // shared `lhs`/`rhs`.
        unsafe {
            self.run_raw(
                pool,
                lhs.as_ptr().cast(),
                rhs.as_ptr().cast(),
                out.as_mut_ptr().cast(),
            )
        }
    }

    /// Runs on host tensor data of the plan's dtype (see [`MatmulPlan::run`]).
    pub fn run_data(
        &self,
        pool: &CpuPool,
        lhs: &TensorData,
        rhs: &TensorData,
        out: &mut TensorData,
    ) -> Result<()> {
        let mismatch = |operand, got| CpuError::DTypeMismatch {
            op: OP,
            operand,
            expected: self.dtype,
            got,
        };
        macro_rules! go {
            ($($v:ident),*) => {
                match (lhs, rhs, out) {
                    $((TensorData::$v(a), TensorData::$v(b), TensorData::$v(c)) => self.run(pool, a, b, c),)*
                    (a, b, c) => Err(if a.dtype() != self.dtype {
                        mismatch("lhs", a.dtype())
                    } else if b.dtype() != self.dtype {
                        mismatch("rhs", b.dtype())
                    } else {
                        mismatch("out", c.dtype())
                    }),
                }
            };
        }
        go!(F32, F64, F16, BF16, I32, I64)
    }

    /// Runs on raw buffers.
    ///
    /// # Safety
    /// `lhs`, `rhs` and `out` point to elements of the plan's dtype, aligned for it; every
    /// element offset the operands' dims and strides reach from `lhs`/`rhs` is readable (for a
    /// right operand in panels, [`MatmulPlan::pack_panels`]'s whole length), the
    /// [`MatmulPlan::out_len`] elements from `out` are writable and overlap neither operand,
    /// and nothing else accesses `out` during the call.
    pub unsafe fn run_raw(
        &self,
        pool: &CpuPool,
        lhs: *const u8,
        rhs: *const u8,
        out: *mut u8,
    ) -> Result<()> {
        if self.out_len() == 0 {
            return Ok(());
        }
        // SAFETY (all arms): forwarded contract; the casts name the plan's dtype.
        unsafe {
            match self.dtype {
                DType::F32 => self.gemm_typed::<f32>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::F64 => self.gemm_typed::<f64>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::F16 => self.gemm_widened::<f16>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::BF16 => self.gemm_widened::<bf16>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::I32 => self.int_loop::<i32>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::I64 => self.int_loop::<i64>(pool, lhs.cast(), rhs.cast(), out.cast()),
                DType::Bool => Err(CpuError::UnsupportedDType {
                    op: OP,
                    dtype: DType::Bool,
                }),
            }
        }
    }

    /// Element offsets of batch `b` in the two operands.
    fn batch_offsets(&self, b: usize) -> (isize, isize) {
        let (mut rem, mut lo, mut ro) = (b, 0isize, 0isize);
        for (j, &d) in self.batch_dims.iter().enumerate().rev() {
            let i = (rem % d) as isize;
            rem /= d;
            lo += i * self.lhs.batch[j];
            ro += i * self.rhs.batch[j];
        }
        (lo, ro)
    }

    /// How f32/f64 batches are cut into tiles for `threads` workers (see [`Tiles`]): whole
    /// batches when there are enough of them (or they are small), else each batch split into
    /// `ceil(threads / batches)` column blocks, or row blocks when it has too few columns.
    fn tiles(&self, threads: usize) -> Tiles {
        let work = self.m.saturating_mul(self.n).saturating_mul(self.k);
        let whole = Tiles {
            row_parts: 1,
            col_parts: 1,
        };
        if threads <= 1 || self.batches >= threads || work <= SMALL_GEMM {
            return whole;
        }
        let parts = threads.div_ceil(self.batches.max(1));
        let columns = Tiles {
            row_parts: 1,
            col_parts: parts,
        };
        let rows = Tiles {
            row_parts: parts,
            col_parts: 1,
        };
        if self.n >= parts * MIN_TILE_COLS && self.blocks_like_whole(columns) {
            columns
        } else if self.m >= parts * MIN_TILE_ROWS && self.blocks_like_whole(rows) {
            rows
        } else {
            whole
        }
    }

    /// Whether `gemm` cuts the contraction of every tile of `tiles` into the same pieces as
    /// that of the whole batch (see [`GEMM_SMALL_DIM`]): always for contractions of up to
    /// [`GEMM_SMALL_KC`], else when each tile is as small as the batch or as large. (Before,
    /// 100 x 600 x 40 split into row blocks of 50 gave other bits on two threads than on one
    /// on an AVX2 host, where no panel kernel takes such products.)
    fn blocks_like_whole(&self, tiles: Tiles) -> bool {
        let small = |m: usize, n: usize| m <= GEMM_SMALL_DIM && n <= GEMM_SMALL_DIM;
        let whole = small(self.m, self.n);
        self.k <= GEMM_SMALL_KC
            || (0..tiles.per_batch()).all(|i| {
                let (r, c) = tiles.tile(i, self.m, self.n);
                r.is_empty() || c.is_empty() || small(r.len(), c.len()) == whole
            })
    }

    /// Calls `body(batches, parallelism)` over all batches: chunks of batches in parallel with
    /// serial `gemm`s, or all batches in order with threaded `gemm`s (see the module docs).
    fn schedule(
        &self,
        pool: &CpuPool,
        body: impl Fn(Range<usize>, Parallelism) + Send + Sync,
    ) -> Result<()> {
        let threads = pool.threads();
        let work = self.m.saturating_mul(self.n).saturating_mul(self.k);
        if self.batches > 1 && (self.batches >= threads || work <= SMALL_GEMM) {
            pool.for_each_chunk(self.batches as i64, 1, |s, e| {
                body(s as usize..e as usize, Parallelism::None)
            })
        } else {
            let par = if threads > 1 {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            };
            pool.install(|| body(0..self.batches, par))
        }
    }
}

/// `torch.matmul(lhs, rhs)` on host tensors, where `trans_lhs` / `trans_rhs` say that a tensor
/// holds its operand with the last two dims swapped (read through strides, see
/// [`MatmulOperand::transposed`]).
pub fn matmul_host(
    pool: &CpuPool,
    lhs: &HostTensor,
    trans_lhs: bool,
    rhs: &HostTensor,
    trans_rhs: bool,
) -> Result<HostTensor> {
    let operand = |t: &HostTensor, trans: bool| {
        if trans {
            MatmulOperand::transposed(t.shape().dims())
        } else {
            MatmulOperand::contiguous(t.shape().dims())
        }
    };
    if rhs.dtype() != lhs.dtype() {
        return Err(CpuError::DTypeMismatch {
            op: OP,
            operand: "rhs",
            expected: lhs.dtype(),
            got: rhs.dtype(),
        });
    }
    let plan = MatmulPlan::new(
        lhs.dtype(),
        &operand(lhs, trans_lhs),
        &operand(rhs, trans_rhs),
    )?;
    let mut out = TensorData::zeros(plan.dtype(), plan.out_len());
    plan.run_data(pool, lhs.data(), rhs.data(), &mut out)?;
    HostTensor::new(plan.out_dims(), out).map_err(|e| CpuError::MatmulShape {
        reason: e.to_string(),
        lhs: lhs.shape().to_string(),
        rhs: rhs.shape().to_string(),
    })
}

fn check_span(layout: &Layout, len: usize, operand: &'static str) -> Result<()> {
    let Some((lo, hi)) = layout.span else {
        return Ok(());
    };
    let needed = usize::try_from(hi).map_or(usize::MAX, |h| h.saturating_add(1));
    if lo < 0 || needed > len {
        return Err(CpuError::BufferTooSmall {
            op: OP,
            operand,
            needed,
            len,
        });
    }
    Ok(())
}

fn checked_product(dims: &[usize], what: &str) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| overflow(what.to_string()))
}

fn overflow(what: String) -> CpuError {
    CpuError::Overflow { op: OP, what }
}

/// Below this many elements, [`append_pieces`] writes on the calling thread alone (starting
/// a thread costs tens of microseconds).
const PARALLEL_MIN: usize = 1 << 18;

/// Appends to `out` one run of elements per piece of `pieces` (its length, and what `fill`
/// needs to write it), in order, each written by `fill` straight into `out`'s spare capacity
/// (no zeroing first). With at least [`PARALLEL_MIN`] elements in all, the pieces are divided
/// among up to `threads` scoped threads in contiguous groups, so each thread writes, and so
/// faults in, its own share. For the compile-time copies of bound weights (`pack_panels`
/// here, `copy_blocks` in `cpu/exec.rs`), whose cost is mostly cache misses and page faults:
/// on the development VM, compiling the MLP case with its weights bound (from the in-process
/// kernel cache) took 18–19 ms with those copies made element by element (`pack_panels`) or
/// zeroed first, on one thread, and 5.6–5.9 ms this way (3.1–3.3 ms with the panels'
/// transposes in registers; `cargo bench --bench cases -- compile`, BENCHMARKS.md).
///
/// # Safety
/// `fill(piece, dst)` writes every element of `dst` (the piece's length).
pub(crate) unsafe fn append_pieces<T: Send, P: Sync>(
    out: &mut Vec<T>,
    pieces: &[(usize, P)],
    threads: usize,
    fill: impl Fn(&P, &mut [MaybeUninit<T>]) + Sync,
) {
    let len: usize = pieces.iter().map(|p| p.0).sum();
    out.reserve(len);
    let mut spare = &mut out.spare_capacity_mut()[..len];
    let mut work = Vec::with_capacity(pieces.len());
    for (n, piece) in pieces {
        let (dst, rest) = std::mem::take(&mut spare).split_at_mut(*n);
        work.push((dst, piece));
        spare = rest;
    }
    let parts = if len < PARALLEL_MIN {
        1
    } else {
        threads.clamp(1, work.len().max(1))
    };
    let per = work.len().div_ceil(parts).max(1);
    let fill_group = |group: &mut [(&mut [MaybeUninit<T>], &P)]| {
        for (dst, piece) in group {
            fill(piece, dst);
        }
    };
    std::thread::scope(|s| {
        let mut groups = work.chunks_mut(per);
        let mine = groups.next();
        for group in groups {
            s.spawn(|| fill_group(group));
        }
        if let Some(group) = mine {
            fill_group(group);
        }
    });
    // SAFETY: `reserve` made room for `len` more elements; the pieces split exactly those
    // `len` (their lengths sum to it), and `fill` wrote every element of each (the caller's
    // promise).
    unsafe { out.set_len(out.len() + len) };
}
