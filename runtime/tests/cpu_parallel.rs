//! The CPU worker pool and the chunked kernel calling convention: every outer index computed
//! exactly once, JIT-compiled kernels launched in chunks, results bitwise identical across
//! thread counts and chunk sizes, no writes past an output.

use smelt_runtime::cpu::{CpuError, CpuPool, KernelFn};
use std::sync::atomic::{AtomicU32, Ordering};

const THREADS: [usize; 4] = [1, 2, 3, 5];
const EXTENTS: [i64; 8] = [0, 1, 2, 7, 13, 97, 1000, 4099];

#[test]
fn every_outer_index_is_computed_exactly_once() {
    for threads in THREADS {
        let pool = CpuPool::new(threads).unwrap();
        for extent in EXTENTS {
            for grain in [0, 1, 3, 64, 1 << 30] {
                let hits: Vec<AtomicU32> = (0..extent).map(|_| AtomicU32::new(0)).collect();
                pool.for_each_chunk(extent, grain, |start, end| {
                    assert!(0 <= start && start < end && end <= extent);
                    for i in start..end {
                        hits[i as usize].fetch_add(1, Ordering::Relaxed);
                    }
                })
                .unwrap();
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "threads {threads}, extent {extent}, grain {grain}"
                );
            }
        }
    }
}

#[test]
fn a_negative_extent_is_a_typed_error() {
    let pool = CpuPool::new(2).unwrap();
    let e = pool.for_each_chunk(-1, 1, |_, _| {}).unwrap_err();
    assert_eq!(e, CpuError::NegativeExtent { extent: -1 });
}

#[test]
fn the_global_pool_uses_every_core() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(CpuPool::global().unwrap().threads(), cores);
}

/// `out[i] = 2 * in[i] + 1` in the calling convention: `args = [out: i64*, in: i64*]`.
unsafe extern "C" fn rust_kernel(args: *const *mut u8, start: i64, end: i64) {
    // SAFETY: the launch below passes two pointers to `extent` i64s each; this call touches
    // only indices in `start..end`, which the pool gives to no other call.
    unsafe {
        let out = (*args).cast::<i64>();
        let input = (*args.add(1)).cast::<i64>();
        for i in start as usize..end as usize {
            *out.add(i) = 2 * *input.add(i) + 1;
        }
    }
}

#[test]
fn a_kernel_in_the_calling_convention_runs_in_chunks() {
    let kernel: KernelFn = rust_kernel;
    for threads in THREADS {
        let pool = CpuPool::new(threads).unwrap();
        for extent in EXTENTS {
            let input: Vec<i64> = (0..extent).collect();
            let mut out = vec![-7i64; extent as usize + 64];
            let args = [
                out.as_mut_ptr().cast::<u8>(),
                input.as_ptr().cast_mut().cast(),
            ];
            // SAFETY: `args` holds the output (extent + 64 elements) and the input (extent
            // elements); `rust_kernel` reads and writes only indices below `extent`.
            unsafe { pool.launch(kernel, &args, extent, 1) }.unwrap();
            for (i, &v) in out[..extent as usize].iter().enumerate() {
                assert_eq!(v, 2 * i as i64 + 1);
            }
            assert!(out[extent as usize..].iter().all(|&v| v == -7), "red zone");
        }
    }
}

#[cfg(feature = "llvm")]
mod jit {
    use super::*;
    use smelt_codegen::llvm::demo::{
        build_axpy_chunk, build_row_sum_chunk, AXPY_CHUNK, ROW_SUM_CHUNK,
    };
    use smelt_codegen::llvm::{compile, JitOptions};
    use smelt_runtime::cpu::{jit_target, CpuKernel};
    use std::sync::Arc;

    /// A value that no kernel writes: a NaN with a recognisable payload.
    const POISON: u32 = 0x7fc0_dead;
    const RED_ZONE: usize = 1024;

    fn kernel(name: &str) -> CpuKernel {
        let module = compile("cpu_parallel", &JitOptions::default(), |ctx, m| {
            build_axpy_chunk(ctx, m)?;
            build_row_sum_chunk(ctx, m)
        })
        .unwrap();
        // SAFETY: both demo kernels are built with the signature `void (i8**, i64, i64)` and
        // follow the calling convention.
        unsafe { CpuKernel::new(Arc::new(module), name) }.unwrap()
    }

    #[test]
    fn jit_axpy_chunks_match_the_closed_form() {
        let axpy = kernel(AXPY_CHUNK);
        assert_eq!(axpy.name(), AXPY_CHUNK);
        for threads in THREADS {
            let pool = CpuPool::new(threads).unwrap();
            for n in EXTENTS {
                let n = n as usize;
                let mut a = 0.75f32;
                let x: Vec<f32> = (0..n).map(|i| i as f32 / 3.0).collect();
                let mut y: Vec<f32> = (0..n).map(|i| 2.0 - i as f32).collect();
                y.extend([f32::from_bits(POISON); RED_ZONE]);
                let args = [
                    y.as_mut_ptr().cast::<u8>(),
                    x.as_ptr().cast_mut().cast(),
                    (&mut a as *mut f32).cast(),
                ];
                // SAFETY: `y` and `x` hold at least `n` floats, `a` is one float; the kernel
                // touches indices below `n` only.
                unsafe { axpy.launch(&pool, &args, n as i64, 16) }.unwrap();
                for (i, got) in y[..n].iter().enumerate() {
                    let want = 0.75f32 * (i as f32 / 3.0) + (2.0 - i as f32);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "threads {threads}, n {n}, {i}"
                    );
                }
                assert!(y[n..].iter().all(|v| v.to_bits() == POISON), "red zone");
            }
        }
    }

    /// Row sums (a reduction per output element) are bitwise identical for every thread count
    /// and grain, and equal to a sequential sum in column order.
    #[test]
    fn jit_row_sums_are_bitwise_identical_across_thread_counts_and_grains() {
        let row_sum = kernel(ROW_SUM_CHUNK);
        let (rows, mut cols) = (1037usize, 333i64);
        let input: Vec<f32> = (0..rows * cols as usize)
            .map(|i| ((i * 7919) % 10007) as f32 * 1e-3 - 5.0)
            .collect();
        let want: Vec<u32> = input
            .chunks(cols as usize)
            .map(|row| row.iter().fold(0f32, |s, &v| s + v).to_bits())
            .collect();
        for threads in THREADS {
            let pool = CpuPool::new(threads).unwrap();
            for grain in [1, 7, 100, 4096] {
                let mut out = vec![f32::from_bits(POISON); rows + RED_ZONE];
                let args = [
                    out.as_mut_ptr().cast::<u8>(),
                    input.as_ptr().cast_mut().cast(),
                    (&mut cols as *mut i64).cast(),
                ];
                // SAFETY: `out` holds `rows` floats (plus the red zone), `input` is
                // `rows x cols`, `cols` is one i64; the kernel touches rows below `rows`.
                unsafe { row_sum.launch(&pool, &args, rows as i64, grain) }.unwrap();
                let got: Vec<u32> = out[..rows].iter().map(|v| v.to_bits()).collect();
                assert!(got == want, "threads {threads}, grain {grain}");
                assert!(
                    out[rows..].iter().all(|v| v.to_bits() == POISON),
                    "red zone"
                );
            }
        }
    }

    #[test]
    fn a_kernel_is_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CpuKernel>();
        assert!(jit_target().unwrap().llvm_version.starts_with("14."));
    }
}

#[cfg(not(feature = "llvm"))]
#[test]
fn without_llvm_the_jit_says_not_compiled_in() {
    use smelt_codegen::llvm::LlvmError;
    let e = smelt_runtime::cpu::jit_target().unwrap_err();
    assert_eq!(e, CpuError::Jit(LlvmError::NotCompiledIn));
    assert!(e.to_string().contains("not compiled in"), "{e}");
}

#[test]
fn a_panicking_chunk_is_raised_on_the_caller_after_every_chunk_ran() {
    let pool = CpuPool::new(3).unwrap();
    let ran = AtomicU32::new(0);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pool.for_each_chunk(12, 1, |start, _| {
            ran.fetch_add(1, Ordering::Relaxed);
            if start == 5 {
                panic!("chunk 5 fails");
            }
        })
    }));
    let payload = caught.expect_err("the chunk's panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"chunk 5 fails"));
    assert_eq!(
        ran.load(Ordering::Relaxed),
        12,
        "every chunk ran to the end"
    );
    // The pool is still usable.
    let sum = std::sync::atomic::AtomicI64::new(0);
    pool.for_each_chunk(100, 1, |s, e| {
        sum.fetch_add((s..e).sum::<i64>(), Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(sum.load(Ordering::Relaxed), 99 * 100 / 2);
}

#[test]
fn loops_inside_chunks_and_from_several_threads_cover_every_index_once() {
    let pool = CpuPool::new(3).unwrap();
    let (outer, inner) = (9i64, 50i64);
    let hits: Vec<AtomicU32> = (0..outer * inner).map(|_| AtomicU32::new(0)).collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                pool.for_each_chunk(outer, 1, |a, b| {
                    for o in a..b {
                        // A loop started inside a chunk runs on that chunk's thread.
                        pool.for_each_chunk(inner, 1, |c, d| {
                            for i in c..d {
                                hits[(o * inner + i) as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        })
                        .unwrap();
                    }
                })
                .unwrap()
            });
        }
    });
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 4));
}
