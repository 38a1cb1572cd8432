//! The per-dtype matmul loops behind [`MatmulPlan::run_raw`]: `gemm` for f32/f64, `gemm` in f32
//! for f16/bf16, a plain wrapping loop for integers.

use super::{overflow, panel, CpuError, Element, MatmulPlan, Result};
use crate::cpu::pool::CpuPool;
use gemm::Parallelism;
use half::{bf16, f16};
use smelt_ir::DType;

impl MatmulPlan {
    /// f32 and f64 straight through `gemm`, one single-threaded `gemm` per tile of the output
    /// (see [`MatmulPlan::tiles`]), the tiles spread over the pool.
    ///
    /// # Safety
    /// As [`MatmulPlan::run_raw`], with `T` the plan's dtype.
    pub(super) unsafe fn gemm_typed<T: GemmFloat>(
        &self,
        pool: &CpuPool,
        lhs: *const T,
        rhs: *const T,
        out: *mut T,
    ) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        let (lhs, rhs, out) = (Ptr(lhs.cast_mut()), Ptr(rhs.cast_mut()), Ptr(out));
        let tiles = self.tiles(pool.threads());
        if let Some(threads) = self.rhs_blocked {
            if threads != pool.threads() {
                return Err(CpuError::Pool {
                    threads: pool.threads(),
                    message: format!(
                        "this matmul's right operand is stored in column blocks for a pool \
                         of {threads} threads"
                    ),
                });
            }
        }
        let per_batch = tiles.per_batch();
        let total = self.batches.saturating_mul(per_batch);
        // `T` is f32 when its dtype is (the sealed `Element` of dtype F32).
        let panels = T::DTYPE == DType::F32 && self.uses_panels();
        pool.for_each_chunk(total as i64, 1, |start, end| {
            for t in start as usize..end as usize {
                let b = t / per_batch;
                let (rows, cols) = tiles.tile(t % per_batch, m, n);
                if rows.is_empty() || cols.is_empty() {
                    continue;
                }
                let (lo, ro) = self.batch_offsets(b);
                let (r0, c0) = (rows.start as isize, cols.start as isize);
                // A blocked right operand (`block_rhs`): this tile's columns are one block,
                // row-major `[k, cols.len()]` from element `k * c0`.
                let (rhs_at, rhs_rs) = match self.rhs_blocked {
                    Some(_) => (k as isize * c0, cols.len() as isize),
                    None => (ro + c0 * self.rhs.cs, self.rhs.rs),
                };
                // SAFETY: the tile's output block (rows x cols of batch `b`) lies inside the
                // `out_len` writable elements and is written by this call only (tiles are
                // disjoint); operand offsets stay within the spans the caller guarantees
                // readable (a row block of lhs, a column block of rhs).
                unsafe {
                    let dst = out.get().add(b * m * n).offset(r0 * n as isize + c0);
                    if k == 0 {
                        for r in 0..rows.len() {
                            std::ptr::write_bytes(dst.add(r * n), 0, cols.len());
                        }
                        continue;
                    }
                    if panels {
                        let rhs = if self.rhs_panels {
                            panel::Rhs::Panels(rhs.get().offset(k as isize * c0).cast())
                        } else {
                            panel::Rhs::Strided {
                                ptr: rhs.get().offset(rhs_at).cast(),
                                rs: rhs_rs,
                                cs: self.rhs.cs,
                            }
                        };
                        panel::tile(
                            lhs.get().offset(lo + r0 * self.lhs.rs).cast(),
                            self.lhs.rs,
                            self.lhs.cs,
                            rows.len(),
                            k,
                            rhs,
                            cols.len(),
                            dst.cast(),
                            n,
                        );
                        continue;
                    }
                    gemm::gemm(
                        rows.len(),
                        cols.len(),
                        k,
                        dst,
                        1,
                        n as isize,
                        false,
                        lhs.get().offset(lo + r0 * self.lhs.rs),
                        self.lhs.cs,
                        self.lhs.rs,
                        rhs.get().offset(rhs_at),
                        self.rhs.cs,
                        rhs_rs,
                        T::ZERO,
                        T::ONE,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
            }
        })
    }

    /// f16 and bf16 through f32 (see the module docs).
    ///
    /// # Safety
    /// As [`MatmulPlan::run_raw`] for `T`.
    pub(super) unsafe fn gemm_widened<T: Element + Half>(
        &self,
        pool: &CpuPool,
        lhs: *const T,
        rhs: *const T,
        out: *mut T,
    ) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        // The scratch sizes (`m * n` fits: it is at most the output size).
        if m.checked_mul(k).is_none() || k.checked_mul(n).is_none() {
            return Err(overflow("the f32 scratch size".into()));
        }
        let (lhs, rhs, out) = (Ptr(lhs.cast_mut()), Ptr(rhs.cast_mut()), Ptr(out));
        self.schedule(pool, |range, par| {
            let mut a = vec![0f32; m * k];
            let mut bm = vec![0f32; k * n];
            let mut c = vec![0f32; m * n];
            for b in range {
                let (lo, ro) = self.batch_offsets(b);
                // SAFETY: reads stay within the operand spans, writes within batch `b`'s
                // output rows (as in `gemm_typed`); the scratch buffers are dense row-major
                // `m x k`, `k x n`, `m x n`.
                unsafe {
                    widen(&mut a, lhs.get().offset(lo), m, k, self.lhs.rs, self.lhs.cs);
                    widen(
                        &mut bm,
                        rhs.get().offset(ro),
                        k,
                        n,
                        self.rhs.rs,
                        self.rhs.cs,
                    );
                    if k > 0 {
                        gemm::gemm(
                            m,
                            n,
                            k,
                            c.as_mut_ptr(),
                            1,
                            n as isize,
                            false,
                            a.as_ptr(),
                            1,
                            k as isize,
                            bm.as_ptr(),
                            1,
                            n as isize,
                            0.0f32,
                            1.0f32,
                            false,
                            false,
                            false,
                            par,
                        );
                    } else {
                        c.fill(0.0);
                    }
                    let dst = std::slice::from_raw_parts_mut(out.get().add(b * m * n), m * n);
                    for (d, &v) in dst.iter_mut().zip(&c) {
                        *d = T::narrow(v);
                    }
                }
            }
        })
    }

    /// Integer matmul: rows of all batches split across the pool, wrapping arithmetic.
    ///
    /// # Safety
    /// As [`MatmulPlan::run_raw`] for `T`.
    pub(super) unsafe fn int_loop<T: Element + WrappingInt>(
        &self,
        pool: &CpuPool,
        lhs: *const T,
        rhs: *const T,
        out: *mut T,
    ) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        let (lhs, rhs, out) = (Ptr(lhs.cast_mut()), Ptr(rhs.cast_mut()), Ptr(out));
        let (l, r) = (&self.lhs, &self.rhs);
        let grain = (1 << 14) / n.saturating_mul(k).max(1);
        pool.for_each_chunk((self.batches * m) as i64, grain as i64, |start, end| {
            for row in start as usize..end as usize {
                let (b, i) = (row / m, row % m);
                let (lo, ro) = self.batch_offsets(b);
                // SAFETY: output row `row` (n elements) lies inside `out_len` and belongs to
                // this chunk only; reads stay within the operand spans.
                unsafe {
                    let dst = std::slice::from_raw_parts_mut(out.get().add(row * n), n);
                    dst.fill(T::ZERO);
                    let a_row = lhs.get().offset(lo + i as isize * l.rs);
                    for p in 0..k as isize {
                        let a = *a_row.offset(p * l.cs);
                        let b_row = rhs.get().offset(ro + p * r.rs);
                        for (j, d) in dst.iter_mut().enumerate() {
                            *d = d.wadd(a.wmul(*b_row.offset(j as isize * r.cs)));
                        }
                    }
                }
            }
        })
    }
}

/// Copies a strided `rows x cols` f16/bf16 matrix into dense row-major f32.
///
/// # Safety
/// Every `src + i * rs + j * cs` for `i < rows`, `j < cols` is readable.
unsafe fn widen<T: Half>(
    dst: &mut [f32],
    src: *const T,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
) {
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: in range by this function's contract.
            let v = unsafe { *src.offset(i as isize * rs + j as isize * cs) };
            dst[i * cols + j] = v.widen();
        }
    }
}

/// The element types `gemm` multiplies natively (it panics on any other type).
pub(super) trait GemmFloat: Element {
    const ZERO: Self;
    const ONE: Self;
}

impl GemmFloat for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl GemmFloat for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

/// 16-bit floats computed through f32.
pub(super) trait Half: Copy {
    fn widen(self) -> f32;
    /// Rounds to nearest even; NaN stays NaN.
    fn narrow(v: f32) -> Self;
}

impl Half for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Half for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Wrapping integer arithmetic for the integer matmul loop.
pub(super) trait WrappingInt: Copy {
    const ZERO: Self;
    fn wadd(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
}

macro_rules! wrapping_int {
    ($($t:ty),*) => {$(
        impl WrappingInt for $t {
            const ZERO: Self = 0;
            fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
    )*};
}
wrapping_int!(i32, i64);

/// A raw pointer shared by the chunks of one matmul.
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);

impl<T> Ptr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

// SAFETY: a matmul's chunks read the operands concurrently (shared reads are fine) and write
// disjoint output elements (each batch or row belongs to one chunk); the buffers outlive the
// call, which returns after every chunk has finished.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as for `Send`.
unsafe impl<T> Sync for Ptr<T> {}
