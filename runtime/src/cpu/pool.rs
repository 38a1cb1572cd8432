//! The worker pool and the chunked launch of kernels (see the calling convention in
//! [`super`]).
//!
//! An outer range `0..extent` is cut into at most `CHUNKS_PER_THREAD * threads` contiguous
//! chunks of at least `grain` indices (the last few chunks may be one index shorter). Each of
//! the `threads` threads (the caller and the pool's `threads - 1` workers) owns a contiguous
//! run of those chunks, the same run for every loop of the same length: it takes its own
//! chunks first, in order, then helps with the others' runs until no chunk is left. So, loop
//! after loop, a thread mostly computes the same rows, and the next kernel of a plan finds the
//! rows the last one wrote in that thread's own cache instead of another core's (on the AMD
//! EPYC VM, against one shared counter: the unfused softmax plan over 1536 x 128 in 50–51 µs
//! instead of 57–67, the unfused attention plan in 318–323 µs instead of 342–380;
//! BENCHMARKS.md). Which thread runs which chunk still varies; what each chunk computes does
//! not, and each output element belongs to exactly one chunk, so results are bitwise
//! identical across runs, thread counts and grain sizes.
//!
//! # Why not rayon
//!
//! A program is a sequence of short parallel loops (tens of microseconds each for the kernels
//! of a BERT layer). The pool is built for that: the caller works on its own loop instead of
//! handing it over and sleeping, and idle workers spin for [`SPIN`] before they sleep, so the
//! next step of a program starts on every thread without a futex wake-up (tens of
//! microseconds each on a virtual machine). A worker that does fall asleep costs the loop
//! nothing but its help: the caller starts on the chunks at once. `gemm`'s own threading
//! (used only for few large f16/bf16 products) still runs on a rayon pool, made on first use
//! ([`CpuPool::install`]).

use super::error::{CpuError, Result};
use super::KernelFn;
use std::any::Any;
use std::cell::Cell;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Chunks per worker thread when the range is long enough: more than one so that dynamic
/// scheduling evens out threads that start late or run slower.
pub const CHUNKS_PER_THREAD: i64 = 4;

/// How long an idle worker spins, watching for the next loop, before it sleeps.
pub const SPIN: Duration = Duration::from_micros(500);

thread_local! {
    /// Set on pool workers, and on a caller while it runs chunks of its own loop: a parallel
    /// loop started there runs inline (the pool's threads are busy with the outer one).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// A fixed set of worker threads that runs kernels over chunks of an outer range.
pub struct CpuPool {
    threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One parallel loop at a time: callers on other threads wait their turn. Holds the last
    /// loop's job for reuse, so a steady stream of loops allocates nothing.
    dispatch: Mutex<Option<Arc<Job>>>,
    /// For `gemm`'s own threading ([`CpuPool::install`]), made on first use.
    rayon: OnceLock<std::result::Result<rayon::ThreadPool, String>>,
}

/// What the caller and the workers share.
struct Shared {
    /// The latest loop and the shutdown flag, under a lock that sleeping workers wait on.
    slot: Mutex<Slot>,
    wake: Condvar,
    /// The number of the latest loop (or shutdown): bumped under `slot`'s lock, read without
    /// it by spinning workers.
    epoch: AtomicU64,
}

#[derive(Default)]
struct Slot {
    job: Option<Arc<Job>>,
    sleeping: usize,
    shutdown: bool,
}

impl Shared {
    /// Announces what the caller just put in `slot` (a loop, or shutdown): a new epoch, and a
    /// wake-up for the workers asleep on the lock.
    fn publish(&self, slot: &Slot) {
        self.epoch.fetch_add(1, Ordering::Release);
        if slot.sleeping > 0 {
            self.wake.notify_all();
        }
    }
}

/// One parallel loop: `n` chunks of a caller's closure. Thread `t` of `T` (the caller is 0,
/// worker `i` is `i`) owns the `t`-th of `T` contiguous runs of chunks ([`owned`]) and takes
/// its own in order from `next[t]`, then the others' from theirs: so that, loop after loop, a
/// thread computes the same rows and finds the ones earlier loops wrote in its own cache.
struct Job {
    /// The caller's `Fn(chunk index)`, its lifetime erased: it is called only for a chunk index
    /// below `n` taken from `next`, and the caller does not return (and the closure lives)
    /// until all `n` chunks are `done`.
    run: *const (dyn Fn(i64) + Sync),
    n: i64,
    next: Box<[Cursor]>,
    done: AtomicI64,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `run` points to a `Sync` closure that outlives every call made through it (see the
// field's doc); the rest is atomics and a mutex.
unsafe impl Send for Job {}
// SAFETY: as for `Send`; the closure is `Sync`, so calls from several threads are allowed.
unsafe impl Sync for Job {}

/// A thread's next chunk, on a cache line of its own.
#[repr(align(128))]
struct Cursor(AtomicI64);

/// The chunks thread `t` of `threads` owns among `n`: the `t`-th of `threads` contiguous runs.
fn owned(n: i64, threads: usize, t: usize) -> Range<i64> {
    let part = |t: usize| (n as i128 * t as i128 / threads as i128) as i64;
    part(t)..part(t + 1)
}

impl Job {
    fn new(run: *const (dyn Fn(i64) + Sync), n: i64, threads: usize) -> Job {
        let mut job = Job {
            run,
            n,
            next: (0..threads).map(|_| Cursor(AtomicI64::new(0))).collect(),
            done: AtomicI64::new(0),
            panic: Mutex::new(None),
        };
        job.reset(run, n);
        job
    }

    /// The job ready for a new loop of `n` chunks of `run`, its cursors reused.
    fn reset(&mut self, run: *const (dyn Fn(i64) + Sync), n: i64) {
        self.run = run;
        self.n = n;
        let threads = self.next.len();
        for (t, c) in self.next.iter_mut().enumerate() {
            *c.0.get_mut() = owned(n, threads, t).start;
        }
        *self.done.get_mut() = 0;
        *self.panic.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Runs chunks, thread `me`'s own first, until none are left; a panicking chunk still
    /// counts as done, and the first panic is kept for the caller.
    fn work(&self, me: usize) {
        let threads = self.next.len();
        for k in 0..threads {
            let t = (me + k) % threads;
            self.work_on(t, owned(self.n, threads, t).end);
        }
    }

    /// Runs the chunks left in thread `t`'s run, which ends at `end`.
    fn work_on(&self, t: usize, end: i64) {
        loop {
            let i = self.next[t].0.fetch_add(1, Ordering::Relaxed);
            if i >= end {
                return;
            }
            // SAFETY: `i < n` and chunk `i` is not yet done, so the caller is still waiting
            // in `CpuPool::run_chunks` and the closure is alive.
            let run = unsafe { &*self.run };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| run(i))) {
                lock(&self.panic).get_or_insert(p);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks (chunk panics are caught outside them).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn worker(shared: &Shared, me: usize) {
    INSIDE.with(|c| c.set(true));
    let mut seen = 0u64;
    loop {
        let started = Instant::now();
        let mut spins = 0u32;
        while shared.epoch.load(Ordering::Acquire) == seen {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && started.elapsed() >= SPIN {
                break;
            }
        }
        let job = {
            let mut slot = lock(&shared.slot);
            while shared.epoch.load(Ordering::Acquire) == seen && !slot.shutdown {
                slot.sleeping += 1;
                slot = shared
                    .wake
                    .wait(slot)
                    .unwrap_or_else(PoisonError::into_inner);
                slot.sleeping -= 1;
            }
            if slot.shutdown {
                return;
            }
            seen = shared.epoch.load(Ordering::Acquire);
            slot.job.clone()
        };
        if let Some(job) = job {
            job.work(me);
        }
    }
}

impl std::fmt::Debug for CpuPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuPool")
            .field("threads", &self.threads)
            .finish()
    }
}

impl CpuPool {
    /// A pool of `threads` threads (the caller of a loop and `threads - 1` workers); 0 means one
    /// per available core.
    pub fn new(threads: usize) -> Result<CpuPool> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let shared = Arc::new(Shared {
            slot: Mutex::new(Slot::default()),
            wake: Condvar::new(),
            epoch: AtomicU64::new(0),
        });
        let mut pool = CpuPool {
            threads,
            shared,
            workers: Vec::with_capacity(threads.saturating_sub(1)),
            dispatch: Mutex::new(None),
            rayon: OnceLock::new(),
        };
        for i in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let handle = std::thread::Builder::new()
                .name(format!("smelt-cpu-{i}"))
                .spawn(move || worker(&shared, i))
                .map_err(|e| CpuError::Pool {
                    threads,
                    message: e.to_string(),
                })?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// The process-wide pool, one thread per core, started on first use.
    pub fn global() -> Result<&'static CpuPool> {
        static GLOBAL: OnceLock<Result<CpuPool>> = OnceLock::new();
        GLOBAL
            .get_or_init(|| CpuPool::new(0))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The number of threads a loop runs on (the caller included).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` inside a rayon pool of [`CpuPool::threads`] threads (made on first use): rayon
    /// work it starts (`gemm`'s own threading) uses those threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let pool = self.rayon.get_or_init(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(self.threads)
                .thread_name(|i| format!("smelt-gemm-{i}"))
                .build()
                .map_err(|e| e.to_string())
        });
        match pool {
            Ok(pool) => Ok(pool.install(f)),
            Err(message) => Err(CpuError::Pool {
                threads: self.threads,
                message: message.clone(),
            }),
        }
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
    /// parallel; returns when every call has. A single chunk, a one-thread pool and a loop
    /// started from inside another loop's chunk run on the calling thread, in order. A panic in
    /// `f` is raised again on the calling thread once every chunk has finished.
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
        let each = |i: i64| {
            let r = chunk(extent, n, i);
            f(r.start, r.end)
        };
        if n <= 1 || self.workers.is_empty() || INSIDE.with(Cell::get) {
            (0..n).for_each(each);
        } else {
            self.run_chunks(n, &each);
        }
        Ok(())
    }

    /// Runs `each(0..n)` on the caller and the workers (`n >= 2`).
    fn run_chunks(&self, n: i64, each: &(dyn Fn(i64) + Sync)) {
        let mut spare = lock(&self.dispatch);
        // SAFETY (lifetime erasure): the pointer is used only through `Job::work`, which calls
        // it for chunks below `n` that are not done; this function returns only after all `n`
        // are done (below), so `each` outlives every call.
        let run: *const (dyn Fn(i64) + Sync + 'static) = unsafe { std::mem::transmute(each) };
        // Reuse the last loop's job unless a worker still holds it.
        let job = match spare.take() {
            Some(mut job) => match Arc::get_mut(&mut job) {
                Some(j) => {
                    j.reset(run, n);
                    job
                }
                None => Arc::new(Job::new(run, n, self.threads)),
            },
            None => Arc::new(Job::new(run, n, self.threads)),
        };
        {
            let mut slot = lock(&self.shared.slot);
            slot.job = Some(Arc::clone(&job));
            self.shared.publish(&slot);
        }
        INSIDE.with(|c| c.set(true));
        job.work(0);
        INSIDE.with(|c| c.set(false));
        let mut spins = 0u32;
        while job.done.load(Ordering::Acquire) < n {
            // A worker is finishing a chunk it took (or was preempted in one).
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) {
                std::thread::yield_now();
            }
        }
        lock(&self.shared.slot).job = None;
        let panic = lock(&job.panic).take();
        *spare = Some(job);
        drop(spare);
        if let Some(p) = panic {
            resume_unwind(p);
        }
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

impl Drop for CpuPool {
    fn drop(&mut self) {
        {
            let mut slot = lock(&self.shared.slot);
            slot.shutdown = true;
            self.shared.publish(&slot);
        }
        for w in self.workers.drain(..) {
            // A worker never panics (chunk panics are caught), so join only fails if one did
            // anyway; nothing is left to clean up then.
            let _ = w.join();
        }
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

    /// Each thread's run of chunks: contiguous, in thread order, covering `0..n` exactly.
    #[test]
    fn owned_runs_partition_the_chunks() {
        for threads in 1..=8 {
            for n in 0..=40 {
                let mut next = 0;
                for t in 0..threads {
                    let r = owned(n, threads, t);
                    assert_eq!(r.start, next, "n {n}, threads {threads}, t {t}");
                    assert!(r.end >= r.start);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
        assert_eq!(owned(8, 2, 0), 0..4);
        assert_eq!(owned(8, 2, 1), 4..8);
    }

    /// A thread takes its own run first, in order, then the others' (here one thread alone
    /// does a loop of three threads, starting as thread 1), each chunk once.
    #[test]
    fn a_thread_takes_its_own_chunks_first() {
        static ORDER: Mutex<Vec<i64>> = Mutex::new(Vec::new());
        let order = &ORDER;
        let each = |i: i64| lock(&ORDER).push(i);
        let run: *const (dyn Fn(i64) + Sync) = &each;
        let mut job = Job::new(run, 9, 3);
        job.work(1);
        assert_eq!(*lock(order), [3, 4, 5, 6, 7, 8, 0, 1, 2]);
        assert_eq!(job.done.load(Ordering::Relaxed), 9);
        lock(order).clear();
        job.reset(run, 5);
        job.work(2);
        job.work(0);
        assert_eq!(*lock(order), [3, 4, 0, 1, 2]);
    }

    #[test]
    fn huge_extents_do_not_overflow() {
        let pool = CpuPool::new(3).unwrap();
        let last = pool.chunks(i64::MAX, 1).last().unwrap();
        assert_eq!(last.end, i64::MAX);
    }
}
