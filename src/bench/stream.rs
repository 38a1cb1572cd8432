//! A STREAM-style copy bandwidth reference: `b[i] = a[i]` over two arrays much larger than the
//! last-level cache, split over as many threads as the CPU backend's pool uses. Bandwidth is
//! counted as STREAM counts it: bytes read plus bytes written, per second (write-allocate
//! traffic is not counted), best of several repetitions.
//!
//! The copy is done two ways, and the reference is the faster: `memcpy` (`copy_from_slice`),
//! and on x86-64 a loop of non-temporal stores, which never read a destination line before
//! writing it. Which of the two `memcpy` is depends on the CPU: glibc streams its stores for
//! copies this large on some (the Intel development host of BENCHMARKS.md) and not on others
//! (on the AMD EPYC host, 2026-12-05: `memcpy` 33 GB/s, the streaming loop 52 GB/s). A
//! reference made of plain stores pays a read for every line written, which the fused
//! kernels' streaming stores do not, so they showed up to 143% of it there.

use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// The smallest array `--stream-bytes` accepts (1 MiB): smaller copies finish in
/// microseconds and say nothing about memory bandwidth.
pub const MIN_STREAM_BYTES: u64 = 1 << 20;

/// How large the arrays are to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamSize {
    /// Each array at least 8× the last-level cache, capped by the memory available.
    Auto,
    /// Each array exactly this many bytes (`--stream-bytes`, at least [`MIN_STREAM_BYTES`]
    /// there).
    Bytes(u64),
}

/// The cache and memory facts the array size is derived from.
#[derive(Clone, Debug, Serialize)]
pub struct StreamPlan {
    /// Bytes per array.
    pub array_bytes: u64,
    /// Worker threads (the CPU pool's).
    pub threads: usize,
    /// The last-level cache (bytes, level), when the OS reports it.
    pub llc_bytes: Option<u64>,
    pub llc_level: Option<u32>,
    /// What the rule asked for: 8× the LLC per array.
    pub wanted_array_bytes: Option<u64>,
    /// Set when the arrays are smaller than 8× the LLC (memory cap, override, or unknown LLC).
    pub capped: bool,
    /// Why, in words, when `capped`.
    pub note: Option<String>,
}

/// One measurement.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StreamResult {
    /// Best copy bandwidth, GB/s (10^9 bytes read + written per second): on the CPU the
    /// faster of `memcpy_gbps` and `streaming_gbps`.
    pub gbps: f64,
    /// Repetitions run (of each copy).
    pub reps: usize,
    /// The CPU's `memcpy` alone (None on the GPU).
    pub memcpy_gbps: Option<f64>,
    /// The CPU copy with non-temporal stores alone (None on the GPU and off x86-64).
    pub streaming_gbps: Option<f64>,
}

/// The GPU's reference: device-to-device copies of `GPU_COPY_BYTES` (far beyond any GPU's L2:
/// 50 MB on an H100/H200), best of `reps`
/// ([`smelt_runtime::cuda::device_copy_bandwidth`]).
pub fn gpu_plan() -> StreamPlan {
    StreamPlan {
        array_bytes: GPU_COPY_BYTES,
        threads: 0,
        llc_bytes: None,
        llc_level: None,
        wanted_array_bytes: None,
        capped: false,
        note: Some("device-to-device cuMemcpyDtoD on the GPU (threads: n/a)".into()),
    }
}

/// Bytes per array of the GPU copy reference (1 GiB).
pub const GPU_COPY_BYTES: u64 = 1 << 30;

/// Measures the GPU copy reference of device `ordinal`.
pub fn measure_gpu(ordinal: usize, plan: &StreamPlan, reps: usize) -> crate::Result<StreamResult> {
    let gbps = smelt_runtime::cuda::device_copy_bandwidth(ordinal, plan.array_bytes as usize, reps)
        .map_err(|e| crate::Error::Runtime(e.into()))?;
    Ok(StreamResult {
        gbps,
        reps,
        memcpy_gbps: None,
        streaming_gbps: None,
    })
}

/// The largest cache level the OS lists for cpu0 (data or unified), as (bytes, level).
pub fn last_level_cache() -> Option<(u64, u32)> {
    let dir = Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut best: Option<(u64, u32)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        if !p.file_name()?.to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
        if read("type").is_some_and(|t| t.trim() == "Instruction") {
            continue;
        }
        let (Some(level), Some(size)) = (read("level"), read("size")) else {
            continue;
        };
        let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), parse_size(size.trim()))
        else {
            continue;
        };
        if best.is_none_or(|(_, l)| level > l) {
            best = Some((bytes, level));
        }
    }
    best
}

/// `48K`, `2048K`, `32M`, `1G` or a plain byte count.
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The worker threads of the CPU backend (its global pool), else the available cores.
pub fn threads() -> usize {
    match smelt_runtime::cpu::CpuPool::global() {
        Ok(pool) => pool.threads(),
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Decides the array size: 8× the LLC per array, the two arrays together capped at a quarter
/// of `MemAvailable`; 256 MiB per array when the LLC is unknown.
pub fn plan(size: StreamSize) -> StreamPlan {
    let llc = last_level_cache();
    let wanted = llc.map(|(b, _)| b.saturating_mul(8));
    let threads = threads();
    let (array_bytes, capped, note) = match size {
        StreamSize::Bytes(b) => {
            let short = wanted.is_none_or(|w| b < w);
            let note = short.then(|| {
                format!(
                    "--stream-bytes {b}: arrays smaller than 8x the last-level cache ({})",
                    wanted.map_or("unknown".into(), |w| format!("{w} bytes"))
                )
            });
            (b, short, note)
        }
        StreamSize::Auto => {
            let want = wanted.unwrap_or(256 << 20);
            let cap = mem_available().map(|m| m / 4 / 2);
            match cap {
                Some(cap) if cap < want => (
                    cap,
                    true,
                    Some(format!(
                        "arrays capped at {} MB each (MemAvailable/4 for both) instead of \
                         8x the last-level cache ({} MB)",
                        cap / 1_000_000,
                        want / 1_000_000
                    )),
                ),
                _ if wanted.is_none() => (
                    want,
                    true,
                    Some("last-level cache size unknown: 256 MiB arrays".into()),
                ),
                _ => (want, false, None),
            }
        }
    };
    StreamPlan {
        // Whole f64 words per thread; at least one word each.
        array_bytes: array_bytes.max(8 * threads as u64) / 8 * 8,
        threads,
        llc_bytes: llc.map(|l| l.0),
        llc_level: llc.map(|l| l.1),
        wanted_array_bytes: wanted,
        capped,
        note,
    }
}

/// How a share of the copy is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    /// `copy_from_slice` (the C library's `memcpy`).
    Memcpy,
    /// [`copy_streaming`].
    Streaming,
}

/// Copies `a` into `b` on `threads` threads, each a contiguous share.
fn copy(a: &[f64], b: &mut [f64], threads: usize, method: Method) {
    let chunk = a.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (src, dst) in a.chunks(chunk).zip(b.chunks_mut(chunk)) {
            s.spawn(move || match method {
                Method::Memcpy => dst.copy_from_slice(src),
                Method::Streaming => copy_streaming(src, dst),
            });
        }
    });
}

/// `dst.copy_from_slice(src)` with non-temporal stores on x86-64 (SSE2's `movntpd`, 16 bytes
/// at a time; measured as fast as 64-byte `vmovntpd` on the AMD EPYC host), plain stores for
/// an unaligned first element; `copy_from_slice` elsewhere.
fn copy_streaming(src: &[f64], dst: &mut [f64]) {
    let n = src.len().min(dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_pd, _mm_sfence, _mm_stream_pd};
        // An f64 slice is 8-byte aligned: at most one element before a 16-byte boundary.
        let head = usize::from(!(dst.as_ptr() as usize).is_multiple_of(16)).min(n);
        dst[..head].copy_from_slice(&src[..head]);
        let mut i = head;
        // SAFETY: SSE2 is part of x86-64. Every access is in bounds: `i + 2 <= n` for both
        // slices; the stores go to `dst + i`, 16-byte aligned since `dst + head` is and `i`
        // advances by two elements; `_mm_loadu_pd` takes any alignment. The fence orders the
        // non-temporal stores before the thread's later work (and its join).
        unsafe {
            while i + 2 <= n {
                let v = _mm_loadu_pd(src.as_ptr().add(i));
                _mm_stream_pd(dst.as_mut_ptr().add(i), v);
                i += 2;
            }
            _mm_sfence();
        }
        dst[i..n].copy_from_slice(&src[i..n]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst[..n].copy_from_slice(&src[..n]);
}

/// The best of `reps` timed copies by `method`, GB/s.
fn best_copy(a: &[f64], b: &mut [f64], threads: usize, reps: usize, method: Method) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        copy(a, b, threads, method);
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(&mut *b);
    }
    2.0 * std::mem::size_of_val(a) as f64 / best.max(1e-12) / 1e9
}

/// Measures copy bandwidth with `plan`'s arrays: for each way of copying (see the module
/// docs), best of `reps` (after one untimed copy that faults the pages in); the reference is
/// the faster.
pub fn measure(plan: &StreamPlan, reps: usize) -> StreamResult {
    let n = usize::try_from(plan.array_bytes / 8).unwrap_or(usize::MAX);
    let a = vec![1.0f64; n];
    let mut b = vec![2.0f64; n];
    copy(&a, &mut b, plan.threads, Method::Memcpy);
    let reps = reps.max(1);
    let memcpy = best_copy(&a, &mut b, plan.threads, reps, Method::Memcpy);
    let streaming = cfg!(target_arch = "x86_64")
        .then(|| best_copy(&a, &mut b, plan.threads, reps, Method::Streaming));
    StreamResult {
        gbps: memcpy.max(streaming.unwrap_or(0.0)),
        reps,
        memcpy_gbps: Some(memcpy),
        streaming_gbps: streaming,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("48K"), Some(48 << 10));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("x"), None);
    }

    #[test]
    fn small_copy_measures() {
        let plan = plan(StreamSize::Bytes(1 << 16));
        assert!(plan.capped || plan.wanted_array_bytes.is_some_and(|w| w <= 1 << 16));
        let r = measure(&plan, 2);
        assert!(r.gbps > 0.0 && r.gbps.is_finite());
        let memcpy = r
            .memcpy_gbps
            .expect("a CPU measurement has its memcpy figure");
        assert_eq!(r.gbps, memcpy.max(r.streaming_gbps.unwrap_or(0.0)));
        assert_eq!(r.streaming_gbps.is_some(), cfg!(target_arch = "x86_64"));
    }

    /// The streaming copy copies every element, at every length and both alignments of the
    /// destination (an f64 slice starts on an 8- or a 16-byte boundary).
    #[test]
    fn streaming_copy_copies_everything() {
        let src: Vec<f64> = (0..67).map(|i| i as f64 * 0.5 - 3.0).collect();
        for skip in [0, 1] {
            for n in [0, 1, 2, 3, 17, 64] {
                let mut dst = vec![f64::NAN; 67];
                copy_streaming(&src[..n], &mut dst[skip..skip + n]);
                assert_eq!(&dst[skip..skip + n], &src[..n], "skip {skip}, n {n}");
                assert!(dst[..skip]
                    .iter()
                    .chain(&dst[skip + n..])
                    .all(|v| v.is_nan()));
            }
        }
    }
}
