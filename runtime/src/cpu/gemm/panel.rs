//! Few-row f32 products on AVX-512, and on AVX2 with FMA: the "panel" kernel behind
//! [`MatmulPlan`](super::MatmulPlan) for single f32 matrix products of at most
//! [`PANEL_MAX_ROWS`] rows (a linear layer applied to a few tokens; batched products such as
//! attention's stay with `gemm`).
//!
//! With few rows, each panel of the right operand that `gemm` packs is used by few rows, so the
//! packing (a read and a write of the whole weight on every call) costs as much as the
//! arithmetic. Here the right operand is read in panels of [`PANEL`] columns laid out
//! `[k][16]`: packed once at compile time for bound weights
//! ([`MatmulPlan::panel_rhs`](super::MatmulPlan::panel_rhs),
//! [`MatmulPlan::pack_panels`](super::MatmulPlan::pack_panels)), or copied per call into a
//! small scratch otherwise ([`pack_strided`]); both copies transpose 16 x 16 tiles in
//! registers where the operand's rows are contiguous, as a linear layer's weight's are. A
//! micro-tile is up to [`MR`] rows by two panels (32 columns) held in 24 `zmm` accumulators;
//! for each `k` it loads the two panel vectors and broadcasts one left element per row; while
//! the first row block reads a pair, the next pair is prefetched. Measured on the 2-core
//! development VM (see BENCHMARKS.md), the BERT layer's linear layers at 32 tokens: 32 x 768 x
//! 3072 0.77 ms instead of 1.67 ms with `gemm`, 32 x 3072 x 768 0.79 instead of 1.42 ms, 32 x
//! 768 x 768 0.17 instead of 0.35–0.41 ms. At 128 rows the gain is smaller, about 5% on the
//! MLP and encoder-layer cases of `smelt bench` (with the packed weights 64-byte aligned, see
//! `cpu/exec.rs`); larger products stay with `gemm`.
//!
//! **AVX2.** Where the CPU has AVX2 and FMA but not AVX-512F, the same packed panels are read
//! by [`avx2`]'s micro-tiles (6 rows by one 16-column panel, in 12 `ymm` accumulators), and
//! copied per call by 8 x 8 transposes in registers. On the AMD EPYC Zen 3 VM (2 cores,
//! AVX2), with bound weights the MLP and encoder-layer cases of `smelt bench` ran 1.09–1.17x
//! as fast as on `gemm` (`--compare gemm-panel-rows`), and with weights given at run time
//! 128 x 768 x 3072, 128 x 3072 x 768 and 32 x 768 x 768 products 1.05–1.23x (BENCHMARKS.md).
//! Before the 8 x 8 transposes (an element at a time) the last was 1.19x slower than `gemm`.
//!
//! **Order of accumulation:** every output element is one fused multiply-add chain over `k`
//! in increasing order, starting from +0. It depends neither on the tiling, the thread count
//! nor on whether the right operand was packed, so results are bitwise identical across pool
//! sizes and between bound and run-time weights.

use std::mem::MaybeUninit;
use std::ops::Range;

/// Columns per panel (one 512-bit vector of f32).
pub(super) const PANEL: usize = 16;
/// Columns per micro-tile: two panels.
pub(super) const PAIR: usize = 2 * PANEL;
/// Rows per micro-tile (24 accumulators, 2 panel vectors and broadcasts fit in 32 registers).
const MR: usize = 12;
/// Products with at most this many rows use the panel kernel (where the CPU runs it: with
/// AVX-512F, or AVX2 and FMA).
/// 128 since the seventeenth session (64 before): a BERT layer's 128-token linear layers run
/// about 5% faster here than on `gemm`, whose per-call packing of the weight they then skip
/// (`smelt bench --compare gemm-panel-rows`, BENCHMARKS.md).
pub const PANEL_MAX_ROWS: usize = 128;

/// Whether this CPU runs the panel kernel: x86-64 with AVX-512F ([`avx512`]'s micro-tiles),
/// or with AVX2 and FMA ([`avx2`]'s).
pub(super) fn available() -> bool {
    avx512_available() || avx2_available()
}

/// Whether this CPU has AVX-512F: the panel kernel's 512-bit micro-tiles, and its 16 x 16
/// in-register transposes for packing panels.
fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU has AVX2 and FMA: the panel kernel's 256-bit micro-tiles and 8 x 8
/// transposes (used where AVX-512F is missing).
fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Where a tile reads its right operand.
#[derive(Clone, Copy)]
pub(super) enum Rhs {
    /// Packed by [`MatmulPlan::pack_panels`](super::MatmulPlan::pack_panels): pairs of
    /// `[k][16]` panels from the tile's first column, the columns past the end of the matrix
    /// zero.
    Panels(*const f32),
    /// Element `(i, j)` of the tile's columns at `ptr + i * rs + j * cs`.
    Strided {
        ptr: *const f32,
        rs: isize,
        cs: isize,
    },
}

/// The element count of `cols` columns of a `k`-row operand in panel layout (whole pairs).
pub(super) fn packed_len(k: usize, cols: usize) -> usize {
    k * cols.div_ceil(PAIR) * PAIR
}

/// Appends the columns `cols` of the `k`-row operand whose element `(i, j)` is at
/// `ptr + i * rs + j * cs` to `out` in panel layout (see [`Rhs::Panels`]): pair `p` holds
/// columns `cols.start + 32 p ..`, panel `h` of it element `(i, j)` at
/// `(2 p + h) * k * 16 + i * 16 + j % 16`; columns past `cols.end` are zero. The panel
/// kernel's per-call copy of a right operand that is not packed ahead (a weight given at run
/// time).
///
/// # Safety
/// Every element with `i < k` and `j < cols.end` is readable.
unsafe fn pack_strided(
    out: &mut Vec<f32>,
    k: usize,
    cols: Range<usize>,
    ptr: *const f32,
    rs: isize,
    cs: isize,
) {
    let len = packed_len(k, cols.len());
    out.reserve(len);
    if k > 0 {
        for (p, panel) in out.spare_capacity_mut()[..len]
            .chunks_exact_mut(k * PANEL)
            .enumerate()
        {
            // SAFETY: the panel's columns below `cols.end`, rows below `k`: readable.
            unsafe { fill_panel_strided(panel, k, cols.start + p * PANEL, cols.end, ptr, rs, cs) };
        }
    }
    // SAFETY: `reserve` made room for `len` more elements, and `fill_panel_strided` wrote
    // every element of each of the `len / (k * 16)` panels (`len` is 0 when `k` is).
    unsafe { out.set_len(out.len() + len) };
}

/// [`fill_panel`] of the operand whose element `(i, j)` is at `ptr + i * rs + j * cs`. Where
/// the CPU has AVX-512F: when rows are contiguous (`rs == 1`: a linear layer's `[n, k]` weight
/// read as `[k, n]`), by 16 x 16 tiles transposed in registers; when columns are (`cs == 1`:
/// a row-major `[k, n]` operand), by one masked vector copy per panel row
/// ([`avx512::fill_panel_contiguous`]). Where it has AVX2 instead, the same by 8 x 8 tiles and
/// two vector copies per row, the ragged edges element by element
/// ([`avx2::fill_panel_contiguous`]).
///
/// A function of its own, outside the AVX-512 module, on purpose: a closure written inside a
/// `#[target_feature]` function carries that feature, and a function without it (here
/// `fill_panel`) cannot inline it, so every element was a call; the MLP case with its weights
/// given at run time spent half its time copying them that way (BENCHMARKS.md).
///
/// # Safety
/// Every element with `i < k` and `first <= j < end` is readable.
pub(super) unsafe fn fill_panel_strided(
    panel: &mut [MaybeUninit<f32>],
    k: usize,
    first: usize,
    end: usize,
    ptr: *const f32,
    rs: isize,
    cs: isize,
) {
    #[cfg(target_arch = "x86_64")]
    if rs == 1 || cs == 1 {
        if avx512_available() {
            // SAFETY: AVX-512F is available, rows or columns are contiguous; the caller's
            // promise covers the reads.
            unsafe { avx512::fill_panel_contiguous(panel, k, first, end, ptr, (rs, cs)) };
            return;
        }
        if avx2_available() {
            // SAFETY: AVX2 is available, rows or columns are contiguous; the caller's promise
            // covers the reads.
            unsafe { avx2::fill_panel_contiguous(panel, k, first, end, ptr, (rs, cs)) };
            return;
        }
    }
    fill_panel(panel, k, first, end, |i, j| {
        // SAFETY: `fill_panel` asks only for rows below `k` and columns in `first..end`,
        // readable by the caller's promise.
        unsafe { *ptr.offset(i as isize * rs + j as isize * cs) }
    });
}

/// Copies the `rows x cols` f32 block (each at most 16) whose element `(i, j)` is at
/// `src + i + j * cs` to `dst + i * ds + j` by a transpose in registers, where the CPU has
/// AVX-512F; returns whether it did (it copies nothing otherwise).
///
/// # Safety
/// Elements `i < rows` of each column `j < cols` are readable; for each `i < rows`, `cols`
/// elements from `dst + i * ds` are writable.
pub(crate) unsafe fn transpose_tile(
    src: *const f32,
    cs: isize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    ds: usize,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx512_available() && rows <= PANEL && cols <= PANEL {
        // SAFETY: AVX-512F is available; the caller's promise covers the accesses (only `cols`
        // elements of each row are stored).
        unsafe { avx512::transpose_tile(src, cs, rows, cols, dst, ds, false) };
        return true;
    }
    let _ = (src, cs, rows, cols, dst, ds);
    false
}

/// Writes the panel of the `k`-row operand `at(i, j)` whose first column is `first` (columns
/// from `end` on are zero) to `panel`: every one of its `k * 16` elements.
///
/// In tiles of 16 x 16, column after column: a weight stored transposed (`at(i, j)` at
/// `i + j * stride`, a linear layer's) is then read a cache line at a time while the tile's
/// writes stay in the L1 cache.
pub(super) fn fill_panel(
    panel: &mut [MaybeUninit<f32>],
    k: usize,
    first: usize,
    end: usize,
    at: impl Fn(usize, usize) -> f32,
) {
    const TILE: usize = 16;
    debug_assert_eq!(panel.len(), k * PANEL);
    let width = end.saturating_sub(first).min(PANEL);
    for i0 in (0..k).step_by(TILE) {
        let rows = i0..(i0 + TILE).min(k);
        for j in 0..PANEL {
            for i in rows.clone() {
                panel[i * PANEL + j].write(if j < width { at(i, first + j) } else { 0.0 });
            }
        }
    }
}

/// `c[r * ldc + j] = Σ_i a[r * ars + i * acs] · B(i, j)` for `r < rows`, `j < cols`, the sums
/// in the order of the module docs.
///
/// # Safety
/// [`available`] is true; `a` addresses `rows x k` readable elements through its strides;
/// `rhs` addresses `k x cols` readable elements (for `Panels`, the whole pairs of
/// [`packed_len`]`(k, cols)` elements); `c` addresses `rows` rows of `cols` writable elements
/// `ldc` apart that nothing else accesses during the call; `k >= 1`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    a: *const f32,
    ars: isize,
    acs: isize,
    rows: usize,
    k: usize,
    rhs: Rhs,
    cols: usize,
    c: *mut f32,
    ldc: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if avx512_available() {
        // SAFETY: forwarded contract, AVX-512F is available.
        unsafe { avx512::tile(a, ars, acs, rows, k, rhs, cols, c, ldc) }
    } else {
        // SAFETY: forwarded contract; `available()` is true without AVX-512F, so AVX2 and
        // FMA are available.
        unsafe { avx2::tile(a, ars, acs, rows, k, rhs, cols, c, ldc) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (a, ars, acs, rows, k, rhs, cols, c, ldc);
        unreachable!("the panel kernel is only chosen where `available()` is true");
    }
}

/// The first of the two panels of pair `pair` (columns `32 pair ..`) of a tile's right
/// operand, packed into `scratch` first when the operand is strided, and, for a packed
/// operand with a pair after this one, that pair's first panel: while the first row block
/// reads this pair (from memory; the later ones find it in cache), the kernels prefetch the
/// next (a hint only: that pointer is never dereferenced).
///
/// # Safety
/// [`tile`]'s contract for `rhs`, `k` and `cols`; `pair < cols.div_ceil(32)`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn pair_panels(
    rhs: Rhs,
    pair: usize,
    k: usize,
    cols: usize,
    scratch: &mut Vec<f32>,
) -> (*const f32, Option<*const f32>) {
    let first = pair * PAIR;
    let p0 = match rhs {
        // SAFETY: pair `pair` of the packed block (the caller's promise).
        Rhs::Panels(p) => unsafe { p.add(pair * 2 * k * PANEL) },
        Rhs::Strided { ptr, rs, cs } => {
            scratch.clear();
            let pair_cols = first..(first + PAIR).min(cols);
            // SAFETY: rows below `k`, columns below `cols`: readable (the caller's promise).
            unsafe { pack_strided(scratch, k, pair_cols, ptr, rs, cs) };
            scratch.as_ptr()
        }
    };
    let next = match rhs {
        Rhs::Panels(p) if first + PAIR < cols => Some(p.wrapping_add((pair + 1) * 2 * k * PANEL)),
        _ => None,
    };
    (p0, next)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Rhs, MR, PAIR, PANEL};
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// [`super::fill_panel`] of the operand whose element `(i, j)` is at
    /// `ptr + i * rs + j * cs`, where rows or columns are contiguous: with `rs == 1`, each
    /// 16-row tile of the panel's (up to) 16 columns by [`transpose_tile`]; with `cs == 1`,
    /// each panel row by one masked load of its (up to) 16 columns. Columns past `end` are
    /// written as zeros.
    ///
    /// # Safety
    /// AVX-512F is available; `rs == 1` or `cs == 1`; every element with `i < k` and
    /// `first <= j < end` is readable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fill_panel_contiguous(
        panel: &mut [MaybeUninit<f32>],
        k: usize,
        first: usize,
        end: usize,
        ptr: *const f32,
        (rs, cs): (isize, isize),
    ) {
        assert_eq!(panel.len(), k * PANEL, "a panel is k x 16");
        let width = end.saturating_sub(first).min(PANEL);
        let src = ptr.wrapping_offset(first as isize * cs);
        let dst = panel.as_mut_ptr().cast::<f32>();
        if rs == 1 {
            for i0 in (0..k).step_by(PANEL) {
                // SAFETY: rows `i0..i0 + rows` (below `k`) of columns `first..first + width`
                // (below `end`) are readable; panel rows `i0..i0 + rows` are 16 elements each
                // inside `panel`.
                unsafe {
                    transpose_tile(
                        src.wrapping_add(i0),
                        cs,
                        (k - i0).min(PANEL),
                        width,
                        dst.add(i0 * PANEL),
                        PANEL,
                        true,
                    )
                };
            }
            return;
        }
        debug_assert_eq!(cs, 1, "rows or columns are contiguous");
        let mask = ((1u32 << width) - 1) as __mmask16;
        for i in 0..k {
            // SAFETY: row `i < k`, columns `first..first + width` (below `end`): readable, the
            // masked-off lanes not accessed; panel row `i` is 16 elements inside `panel`.
            unsafe {
                let v = _mm512_maskz_loadu_ps(mask, src.wrapping_offset(i as isize * rs));
                _mm512_storeu_ps(dst.add(i * PANEL), v);
            }
        }
    }

    /// Copies the `rows x cols` (each at most 16) block whose element `(i, j)` is at
    /// `src + i + j * cs` to `dst + i * ds + j`: 16 masked row loads (one per column; the
    /// missing ones zero), a 16 x 16 [`transpose`], and one store per row `i < rows`, of all
    /// 16 lanes when `whole_rows` (the lanes from `cols` on zero) or of the first `cols`.
    ///
    /// # Safety
    /// AVX-512F is available; elements `i < rows` of each column `j < cols` are readable; for
    /// each `i < rows`, 16 (`whole_rows`) or `cols` elements from `dst + i * ds` are writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_tile(
        src: *const f32,
        cs: isize,
        rows: usize,
        cols: usize,
        dst: *mut f32,
        ds: usize,
        whole_rows: bool,
    ) {
        debug_assert!(rows <= 16 && cols <= 16);
        let mask = |n: usize| -> __mmask16 { ((1u32 << n) - 1) as __mmask16 };
        let mut r = [_mm512_setzero_ps(); 16];
        for (j, row) in r.iter_mut().enumerate().take(cols) {
            // SAFETY: elements `0..rows` of column `j < cols` are readable; the masked-off
            // lanes are not accessed.
            *row =
                unsafe { _mm512_maskz_loadu_ps(mask(rows), src.wrapping_offset(j as isize * cs)) };
        }
        let t = transpose(r);
        for (i, v) in t.iter().enumerate().take(rows) {
            // SAFETY: row `i < rows` of `dst`: 16 or `cols` writable elements.
            unsafe {
                if whole_rows {
                    _mm512_storeu_ps(dst.add(i * ds), *v);
                } else {
                    _mm512_mask_storeu_ps(dst.add(i * ds), mask(cols), *v);
                }
            }
        }
    }

    /// The transpose of the 16 x 16 matrix whose row `j` is `r[j]`: row `i` of the result
    /// holds element `i` of every `r[j]`, in order of `j`. Four rounds of shuffles: 32-bit
    /// elements of row pairs, 64-bit pairs of those, 128-bit lanes, 128-bit lanes again.
    #[target_feature(enable = "avx512f")]
    fn transpose(r: [__m512; 16]) -> [__m512; 16] {
        let mut t = [_mm512_setzero_ps(); 16];
        // Round 1: t[2p] = unpacklo(r[2p], r[2p+1]), t[2p+1] = unpackhi(..).
        for p in 0..8 {
            t[2 * p] = _mm512_unpacklo_ps(r[2 * p], r[2 * p + 1]);
            t[2 * p + 1] = _mm512_unpackhi_ps(r[2 * p], r[2 * p + 1]);
        }
        // Round 2: 64-bit pairs of rows four apart within each group of four.
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let b = 4 * g;
            let pd = |x: __m512| _mm512_castps_pd(x);
            u[b] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b]), pd(t[b + 2])));
            u[b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b]), pd(t[b + 2])));
            u[b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[b + 1]), pd(t[b + 3])));
            u[b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[b + 1]), pd(t[b + 3])));
        }
        // Round 3: 128-bit lanes 0 and 2 (0x88), 1 and 3 (0xdd) of groups four apart.
        for h in 0..2 {
            let b = 8 * h;
            for q in 0..4 {
                t[b + q] = _mm512_shuffle_f32x4::<0x88>(u[b + q], u[b + 4 + q]);
                t[b + 4 + q] = _mm512_shuffle_f32x4::<0xdd>(u[b + q], u[b + 4 + q]);
            }
        }
        // Round 4: the same between the two halves.
        let mut out = [_mm512_setzero_ps(); 16];
        for q in 0..8 {
            out[q] = _mm512_shuffle_f32x4::<0x88>(t[q], t[8 + q]);
            out[8 + q] = _mm512_shuffle_f32x4::<0xdd>(t[q], t[8 + q]);
        }
        out
    }

    /// See [`super::tile`].
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        a: *const f32,
        ars: isize,
        acs: isize,
        rows: usize,
        k: usize,
        rhs: Rhs,
        cols: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut scratch: Vec<f32> = Vec::new();
        for pair in 0..cols.div_ceil(PAIR) {
            let first = pair * PAIR;
            // SAFETY: forwarded contract of `tile`.
            let (p0, next) = unsafe { super::pair_panels(rhs, pair, k, cols, &mut scratch) };
            // SAFETY: the second panel of the pair, `k * 16` elements after the first.
            let p1 = unsafe { p0.add(k * PANEL) };
            let valid = (cols - first).min(PAIR);
            let m0: __mmask16 = if valid >= PANEL {
                0xffff
            } else {
                (1u16 << valid) - 1
            };
            let m1: __mmask16 = if valid >= PAIR {
                0xffff
            } else if valid > PANEL {
                (1u16 << (valid - PANEL)) - 1
            } else {
                0
            };
            let mut r0 = 0;
            while r0 < rows {
                let r = (rows - r0).min(MR);
                let pf = if r0 == 0 { next } else { None };
                // SAFETY: rows `r0..r0 + r` of `a` and `c`, the pair's columns of `c`.
                unsafe {
                    let at = a.offset(r0 as isize * ars);
                    let ct = c.add(r0 * ldc + first);
                    let p = Panels { p0, p1, k, pf };
                    match r {
                        12 => micro::<12>(at, ars, acs, p, ct, ldc, m0, m1),
                        11 => micro::<11>(at, ars, acs, p, ct, ldc, m0, m1),
                        10 => micro::<10>(at, ars, acs, p, ct, ldc, m0, m1),
                        9 => micro::<9>(at, ars, acs, p, ct, ldc, m0, m1),
                        8 => micro::<8>(at, ars, acs, p, ct, ldc, m0, m1),
                        7 => micro::<7>(at, ars, acs, p, ct, ldc, m0, m1),
                        6 => micro::<6>(at, ars, acs, p, ct, ldc, m0, m1),
                        5 => micro::<5>(at, ars, acs, p, ct, ldc, m0, m1),
                        4 => micro::<4>(at, ars, acs, p, ct, ldc, m0, m1),
                        3 => micro::<3>(at, ars, acs, p, ct, ldc, m0, m1),
                        2 => micro::<2>(at, ars, acs, p, ct, ldc, m0, m1),
                        _ => micro::<1>(at, ars, acs, p, ct, ldc, m0, m1),
                    }
                }
                r0 += r;
            }
        }
    }

    /// The pair of `k`-row panels a micro-tile reads, and the next pair to prefetch.
    #[derive(Clone, Copy)]
    struct Panels {
        p0: *const f32,
        p1: *const f32,
        k: usize,
        pf: Option<*const f32>,
    }

    /// `R` rows by one pair of panels: `c[r][j] = Σ_i a[r][i] · p(i, j)`, stored through the
    /// masks of valid columns (`m0` for the first panel, `m1` for the second).
    ///
    /// # Safety
    /// Called from [`tile`] only (AVX-512F enabled): `a` addresses `R` rows of `k` readable
    /// elements, both panels `k * 16` readable elements, `c` `R` rows (`ldc` apart) writable
    /// where the masks are set.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn micro<const R: usize>(
        a: *const f32,
        ars: isize,
        acs: isize,
        p: Panels,
        c: *mut f32,
        ldc: usize,
        m0: __mmask16,
        m1: __mmask16,
    ) {
        let Panels { p0, p1, k, pf } = p;
        let mut acc0 = [_mm512_setzero_ps(); R];
        let mut acc1 = [_mm512_setzero_ps(); R];
        for i in 0..k {
            if let Some(f) = pf {
                // A hint only: the addresses are inside the next pair (`tile`'s promise).
                let f = f.wrapping_add(i * PANEL);
                _mm_prefetch::<_MM_HINT_T0>(f.cast());
                _mm_prefetch::<_MM_HINT_T0>(f.wrapping_add(k * PANEL).cast());
            }
            // SAFETY (this block): row `i` of both panels and element `i` of rows `0..R` of
            // `a`, inside what the caller of `tile` guarantees readable.
            unsafe {
                let b0 = _mm512_loadu_ps(p0.add(i * PANEL));
                let b1 = _mm512_loadu_ps(p1.add(i * PANEL));
                for r in 0..R {
                    let x = _mm512_set1_ps(*a.offset(r as isize * ars + i as isize * acs));
                    acc0[r] = _mm512_fmadd_ps(x, b0, acc0[r]);
                    acc1[r] = _mm512_fmadd_ps(x, b1, acc1[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: row `r` of the tile's output, the masks' columns only.
            unsafe {
                _mm512_mask_storeu_ps(c.add(r * ldc), m0, acc0[r]);
                _mm512_mask_storeu_ps(c.add(r * ldc + PANEL), m1, acc1[r]);
            }
        }
    }
}

/// The panel kernel on CPUs with AVX2 and FMA but not AVX-512F: the same packed panels
/// (`[k][16]`, in pairs), read as two 256-bit vectors per panel row; a micro-tile is up to
/// [`avx2::MR`] rows by one panel (16 columns) in 12 `ymm` accumulators, which with the two
/// panel vectors and a broadcast fill 15 of the 16 registers. Each output element is the same
/// fused multiply-add chain over `k` as on AVX-512, so both give the same bits.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Rhs, PAIR, PANEL};
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// Rows per micro-tile.
    pub(super) const MR: usize = 6;

    /// [`super::fill_panel`] of the operand whose element `(i, j)` is at
    /// `ptr + i * rs + j * cs`, where rows or columns are contiguous: with `rs == 1`, each
    /// whole 8 x 8 tile of the panel by [`transpose8`]; with `cs == 1`, each row of a whole
    /// group of 8 columns by one vector copy. The rest (the last `k % 8` rows of a transposed
    /// read, a group of fewer than 8 columns, the zeros past `end`) element by element.
    ///
    /// # Safety
    /// AVX2 is available; `rs == 1` or `cs == 1`; every element with `i < k` and
    /// `first <= j < end` is readable.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn fill_panel_contiguous(
        panel: &mut [MaybeUninit<f32>],
        k: usize,
        first: usize,
        end: usize,
        ptr: *const f32,
        (rs, cs): (isize, isize),
    ) {
        assert_eq!(panel.len(), k * PANEL, "a panel is k x 16");
        let width = end.saturating_sub(first).min(PANEL);
        let src = ptr.wrapping_offset(first as isize * cs);
        let dst = panel.as_mut_ptr().cast::<f32>();
        // Element `(i, j)` of the panel's columns, `j < width`.
        let at = |i: usize, j: usize| src.wrapping_offset(i as isize * rs + j as isize * cs);
        for j0 in [0, 8] {
            let cols = width.saturating_sub(j0).min(8);
            let whole_rows = if cols < 8 {
                0
            } else if rs == 1 {
                k / 8 * 8
            } else {
                k
            };
            if rs == 1 {
                for i0 in (0..whole_rows).step_by(8) {
                    // SAFETY: rows `i0..i0 + 8` (below `k`) of columns `j0..j0 + 8` (below
                    // `width`, so below `end`) are readable, each column's 8 contiguous; the
                    // panel rows are 16 elements each inside `panel`.
                    unsafe {
                        let mut r = [_mm256_setzero_ps(); 8];
                        for (j, v) in r.iter_mut().enumerate() {
                            *v = _mm256_loadu_ps(at(i0, j0 + j));
                        }
                        for (ii, v) in transpose8(r).iter().enumerate() {
                            _mm256_storeu_ps(dst.add((i0 + ii) * PANEL + j0), *v);
                        }
                    }
                }
            } else {
                for i in 0..whole_rows {
                    // SAFETY: row `i < k`, columns `j0..j0 + 8` (below `end`), contiguous.
                    unsafe {
                        _mm256_storeu_ps(dst.add(i * PANEL + j0), _mm256_loadu_ps(at(i, j0)))
                    };
                }
            }
            for i in whole_rows..k {
                for j in j0..j0 + 8 {
                    // SAFETY: row `i < k`; column `j` read only below `width` (below `end`);
                    // the panel element is inside `panel`.
                    unsafe { *dst.add(i * PANEL + j) = if j < width { *at(i, j) } else { 0.0 } };
                }
            }
        }
    }

    /// The transpose of the 8 x 8 matrix whose row `j` is `r[j]`: row `i` of the result holds
    /// element `i` of every `r[j]`, in order of `j`. Three rounds of shuffles: 32-bit elements
    /// of row pairs, 64-bit pairs of those, 128-bit lanes.
    #[target_feature(enable = "avx2")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xee>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xee>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xee>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xee>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// See [`super::tile`] (AVX2 and FMA instead of AVX-512F).
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        a: *const f32,
        ars: isize,
        acs: isize,
        rows: usize,
        k: usize,
        rhs: Rhs,
        cols: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut scratch: Vec<f32> = Vec::new();
        for pair in 0..cols.div_ceil(PAIR) {
            let first = pair * PAIR;
            // SAFETY: forwarded contract of `tile`. The first row block of each panel
            // prefetches the same panel of the next pair.
            let (p0, next) = unsafe { super::pair_panels(rhs, pair, k, cols, &mut scratch) };
            let valid = (cols - first).min(PAIR);
            for h in 0..2 {
                let width = valid.saturating_sub(h * PANEL).min(PANEL);
                if width == 0 {
                    break;
                }
                // SAFETY: panel `h` of the pair, `k * 16` elements from `p0 + h * k * 16`.
                let panel = unsafe { p0.add(h * k * PANEL) };
                let pf = next.map(|p| p.wrapping_add(h * k * PANEL));
                let mut r0 = 0;
                while r0 < rows {
                    let r = (rows - r0).min(MR);
                    let pf = if r0 == 0 { pf } else { None };
                    // SAFETY: rows `r0..r0 + r` of `a` and `c`, the panel's `width` columns
                    // of `c`.
                    unsafe {
                        let at = a.offset(r0 as isize * ars);
                        let ct = c.add(r0 * ldc + first + h * PANEL);
                        let p = Panel { p: panel, k, pf };
                        match r {
                            6 => micro::<6>(at, ars, acs, p, ct, ldc, width),
                            5 => micro::<5>(at, ars, acs, p, ct, ldc, width),
                            4 => micro::<4>(at, ars, acs, p, ct, ldc, width),
                            3 => micro::<3>(at, ars, acs, p, ct, ldc, width),
                            2 => micro::<2>(at, ars, acs, p, ct, ldc, width),
                            _ => micro::<1>(at, ars, acs, p, ct, ldc, width),
                        }
                    }
                    r0 += r;
                }
            }
        }
    }

    /// The `k`-row panel a micro-tile reads, and the one to prefetch.
    #[derive(Clone, Copy)]
    struct Panel {
        p: *const f32,
        k: usize,
        pf: Option<*const f32>,
    }

    /// `R` rows by one panel: `c[r][j] = Σ_i a[r][i] · p(i, j)` for `j < width`.
    ///
    /// # Safety
    /// Called from [`tile`] only (AVX2 and FMA enabled): `a` addresses `R` rows of `k`
    /// readable elements, the panel `k * 16` readable elements, `c` `R` rows (`ldc` apart) of
    /// `width` (at most 16) writable elements.
    #[inline(always)]
    unsafe fn micro<const R: usize>(
        a: *const f32,
        ars: isize,
        acs: isize,
        p: Panel,
        c: *mut f32,
        ldc: usize,
        width: usize,
    ) {
        let Panel { p, k, pf } = p;
        let mut acc0 = [_mm256_setzero_ps(); R];
        let mut acc1 = [_mm256_setzero_ps(); R];
        for i in 0..k {
            if let Some(f) = pf {
                // A hint only: one line of the next pair's panel.
                _mm_prefetch::<_MM_HINT_T0>(f.wrapping_add(i * PANEL).cast());
            }
            // SAFETY (this block): row `i` of the panel and element `i` of rows `0..R` of
            // `a`, inside what the caller of `tile` guarantees readable.
            unsafe {
                let b0 = _mm256_loadu_ps(p.add(i * PANEL));
                let b1 = _mm256_loadu_ps(p.add(i * PANEL + 8));
                for r in 0..R {
                    let x = _mm256_set1_ps(*a.offset(r as isize * ars + i as isize * acs));
                    acc0[r] = _mm256_fmadd_ps(x, b0, acc0[r]);
                    acc1[r] = _mm256_fmadd_ps(x, b1, acc1[r]);
                }
            }
        }
        // Lanes `j` below `n`: all ones.
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let below = |n: usize| _mm256_cmpgt_epi32(_mm256_set1_epi32(n.min(8) as i32), lanes);
        for r in 0..R {
            // SAFETY: row `r` of the tile's output, its first `width` columns only (the
            // masked stores touch no other element).
            unsafe {
                let row = c.add(r * ldc);
                if width == PANEL {
                    _mm256_storeu_ps(row, acc0[r]);
                    _mm256_storeu_ps(row.add(8), acc1[r]);
                } else {
                    _mm256_maskstore_ps(row, below(width), acc0[r]);
                    if width > 8 {
                        _mm256_maskstore_ps(row.add(8), below(width - 8), acc1[r]);
                    }
                }
            }
        }
    }
}
