//! The worker pool and the chunked launch of kernels (see the calling convention in
//! [`super`]).
//!
//! An outer range `0..extent` is cut into at most `CHUNKS_PER_THREAD * threads` contiguous
//! chunks of at least `grain` indices (the last few chunks may be one index shorter), which the
//! pool's threads run with work stealing. Which thread runs which chunk varies; what each chunk
//! computes does not, and each output element belongs to exactly one chunk, so results are
//! bitwise identical across runs, thread counts and grain sizes.

use super::error::{CpuError, Result};
use super::KernelFn;
use rayon::prelude::*;
use std::ops::Range;
use std::sync::OnceLock;

/// Chunks per worker thread when the range is long enough: more than one so that work
/// stealing evens out threads that start late or run slower.
pub const CHUNKS_PER_THREAD: i64 = 4;

/// A fixed set of worker threads that runs kernels over chunks of an outer range.
pub struct CpuPool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl std::fmt::Debug for CpuPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl CpuPool {
    /// A pool of `threads` workers; 0 means one per available core.
    pub fn new(threads: usize) -> Result<CpuPool> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("smelt-cpu-{i}"))
            .build()
            .map_err(|e| CpuError::Pool {
                threads,
                message: e.to_string(),
            })?;
        Ok(CpuPool { pool, threads })
    }

    /// The process-wide pool, one worker per core, started on first use.
    pub fn global() -> Result<&'static CpuPool> {
        static GLOBAL: OnceLock<Result<CpuPool>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| CpuPool::new(0))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` inside the pool: rayon work it starts (e.g. `gemm`'s) uses this pool's threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }

    /// The chunks `0..extent` is split into for `grain` (minimum chunk length, at least 1).
    /// Contiguous, in order, covering `0..extent` exactly; empty for `extent <= 0`.
    pub fn chunks(&self, extent: i64, grain: i64) -> impl Iterator<Item = Range<i64>> {
        let n = self.chunk_count(extent, grain);
        (0..n).map(move |i| chunk(extent, n, i))
    }

    fn chunk_count(&self, extent: i64, grain: i64) -> i64 {
        if extent <= 0 {
            return 0;
        }
        let by_grain = extent / grain.max(1);
        let by_threads = (self.threads as i64).saturating_mul(CHUNKS_PER_THREAD);
        by_grain.clamp(1, by_threads.max(1))
    }

    /// Calls `f(start, end)` once per chunk of `0..extent` (see [`CpuPool::chunks`]), in
    /// parallel; returns when every call has. A single chunk runs on the calling thread.
    pub fn for_each_chunk(
        &self,
        extent: i64,
        grain: i64,
        f: impl Fn(i64, i64) + Send + Sync,
    ) -> Result<()> {
        if extent < 0 {
            return Err(CpuError::NegativeExtent { extent });
        }
        let n = self.chunk_count(extent, grain);
        match n {
            0 => {}
            1 => f(0, extent),
            _ => self.pool.install(|| {
                (0..n).into_par_iter().for_each(|i| {
                    let r = chunk(extent, n, i);
                    f(r.start, r.end)
                })
            }),
        }
        Ok(())
    }

    /// Launches `kernel` over `0..extent` in chunks of at least `grain` outer indices.
    ///
    /// # Safety
    /// `kernel` must follow the calling convention of [`super`] for these `args` and this
    /// `extent`: every pointer in `args` is valid for what the kernel reads or writes at any
    /// outer index in `0..extent`, writes for different outer indices go to disjoint memory,
    /// and nothing else reads or writes the outputs during the call.
    pub unsafe fn launch(
        &self,
        kernel: KernelFn,
        args: &[*mut u8],
        extent: i64,
        grain: i64,
    ) -> Result<()> {
        let args = SharedArgs(args.as_ptr());
        self.for_each_chunk(extent, grain, move |start, end| {
            let args = &args;
            // SAFETY: `0 <= start < end <= extent` (from `chunks`); the caller guarantees the
            // kernel is sound for any such range of these arguments, and chunks are disjoint,
            // so concurrent calls write disjoint memory.
            unsafe { kernel(args.0, start, end) }
        })
    }
}

/// Chunk `i` of `n` equal-as-possible contiguous chunks of `0..extent` (no overflow: `i < n`
/// and the parts stay below `extent`).
fn chunk(extent: i64, n: i64, i: i64) -> Range<i64> {
    let (base, rem) = (extent / n, extent % n);
    let start = i * base + i.min(rem);
    let len = base + i64::from(i < rem);
    start..start + len
}

/// The argument array of a launch, shared by the chunks.
struct SharedArgs(*const *mut u8);

// SAFETY: the array and the buffers it points to outlive the launch (`launch` borrows `args`
// for its whole duration and returns only after every chunk has run); the chunks only read the
// array, and what they do with the buffers is covered by `launch`'s contract (disjoint writes).
unsafe impl Send for SharedArgs {}
// SAFETY: as for `Send`: shared read-only access to the array.
unsafe impl Sync for SharedArgs {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_range_in_order() {
        for threads in [1, 2, 3, 8] {
            let pool = CpuPool::new(threads).unwrap();
            for extent in [0i64, 1, 2, 7, 13, 64, 1000, 1031] {
                for grain in [0i64, 1, 5, 1 << 20] {
                    let chunks: Vec<_> = pool.chunks(extent, grain).collect();
                    let mut next = 0;
                    for c in &chunks {
                        assert_eq!(c.start, next);
                        assert!(c.end > c.start);
                        next = c.end;
                    }
                    assert_eq!(next, extent.max(0));
                    assert!(chunks.len() as i64 <= threads as i64 * CHUNKS_PER_THREAD);
                }
            }
        }
    }

    #[test]
    fn huge_extents_do_not_overflow() {
        let pool = CpuPool::new(3).unwrap();
        let last = pool.chunks(i64::MAX, 1).last().unwrap();
        assert_eq!(last.end, i64::MAX);
    }
}
