//! The benchmark harness of `smelt bench` (issue 6): every case of [`cases`] fused and
//! unfused on one device, timed with preallocated outputs (`run_into`) and fresh ones (`run`),
//! next to a copy-bandwidth reference ([`stream`]) measured before and after the suite.
//!
//! - [`compare`]: `--compare KNOB`, one option flipped, measured side by side.
//! - [`cases`]: the case list (shared with `cargo bench --bench cases` and mirrored by
//!   `benches/peers/peers.py`), minimal bytes, deterministic data.
//! - [`stream`]: the copy bandwidth reference.
//! - [`run`]: measuring one case.
//! - [`report`]: the printed tables and the JSON form.
//! - [`chart`]: an SVG bar chart, fused vs unfused per case.

pub mod cases;
pub mod chart;
pub mod compare;
pub mod report;
pub mod run;
pub mod stream;

use crate::{Device, Error, MathMode, Result};
use cases::Size;
use run::Budget;
use serde::Serialize;
use smelt_ir::{DType, HostTensor};
use std::time::Duration;
use stream::{StreamPlan, StreamResult, StreamSize};

/// How much the two copy-bandwidth measurements may differ before the run is flagged.
pub const STREAM_TOLERANCE: f64 = 0.10;

/// What `smelt bench` was asked to do.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub device: Device,
    /// Case names or substrings (see [`cases::select`]); empty = all.
    pub cases: Vec<String>,
    /// Small shapes and short series.
    pub quick: bool,
    /// Overrides the budget's minimum time per series.
    pub min_time: Option<Duration>,
    /// `None`: no copy-bandwidth reference.
    pub stream: Option<StreamSize>,
    /// The command line, recorded in the report.
    pub command: String,
    /// How CPU kernels compute f32 `exp`/`tanh`/`erf` (`--libm-math`: the C library's way).
    pub math: MathMode,
    /// CPU kernels without software prefetch (`--no-prefetch`; see
    /// [`crate::Options::no_prefetch`]).
    pub no_prefetch: bool,
    /// How CPU row kernels out of cache prefetch (`--row-prefetch`, `--no-row-prefetch`; see
    /// [`crate::Options::row_prefetch`]).
    pub row_prefetch: crate::RowPrefetch,
    /// CPU kernels use plain stores only (`--no-streaming-stores`; see
    /// [`crate::Options::no_streaming_stores`]).
    pub no_streaming_stores: bool,
    /// CPU row kernels one row at a time (`--no-interleave-rows`; see
    /// [`crate::Options::no_interleave_rows`]).
    pub no_interleave_rows: bool,
    /// CPU store loops as the loop vectoriser makes them (`--no-interleave-vectors`; see
    /// [`crate::Options::no_interleave_vectors`]).
    pub no_interleave_vectors: bool,
    /// `--compare KNOB`: instead of fused against unfused, the fused plan as the options
    /// above say (A) against the same with `KNOB` flipped (B); see [`compare`].
    pub compare: Option<compare::Knob>,
}

/// The copy-bandwidth reference of a run.
#[derive(Clone, Debug, Serialize)]
pub struct StreamReport {
    pub plan: StreamPlan,
    pub before: StreamResult,
    pub after: StreamResult,
    /// |after − before| / before.
    pub change: f64,
    /// The reference percentages refer to: the mean of before and after, GB/s.
    pub reference_gbps: f64,
    /// Set when `change` exceeds 10%: the machine was not in the same state throughout.
    pub flagged: bool,
}

/// Where and when the run happened.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub threads: usize,
    pub memory_bytes: Option<u64>,
    pub os: String,
}

/// The whole run: what `--json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub smelt_version: String,
    /// UTC, ISO 8601.
    pub date: String,
    pub command: String,
    pub machine: Machine,
    /// The resolved device.
    pub device: String,
    /// On a GPU: its name, architecture, memory, and the driver and NVRTC versions.
    pub gpu: Option<String>,
    pub quick: bool,
    /// The CPU kernels' f32 math (`polynomial` or `libm`, see [`MathMode`]).
    pub math: String,
    /// How far ahead CPU kernels' vector loops prefetch, in bytes; `None`: no software
    /// prefetch (`--no-prefetch`).
    pub prefetch_bytes: Option<u32>,
    /// How CPU row kernels over data out of cache prefetch, as resolved for this CPU
    /// ([`crate::Options::host_row_prefetch`]): `rows` (two rows ahead), `module` (at
    /// `prefetch_bytes`, `--no-row-prefetch`) or `off` (none, the default on AMD Zen 4).
    pub row_prefetch: String,
    /// CPU kernels whose outputs are all at least this many bytes use streaming stores (16 MiB
    /// by default); `None`: none do (`--no-streaming-stores`).
    pub streaming_stores_min_bytes: Option<u64>,
    /// Whether CPU row kernels compute two rows interleaved (the default) or one at a time
    /// (`--no-interleave-rows`).
    pub interleave_rows: bool,
    /// How many vectors CPU store loops compute per iteration; `None`: as the loop
    /// vectoriser chooses (`--no-interleave-vectors`).
    pub interleave_vectors: Option<u32>,
    /// The direction LLVM's machine scheduler orders CPU kernels' instructions in, for this
    /// host or as `SMELT_MACHINE_SCHEDULE` set it (`bottom-up` unless it says `top-down`;
    /// see `MachineSchedule`); `None` in a build without the CPU backend.
    pub machine_schedule: Option<String>,
    /// Whether CPU elementwise kernels with an f32 `tanh` or `erf` run in two loops per
    /// block on this host (`Options::loop_fission`, by default on AMD Zen 3); `None` in a
    /// build without the CPU backend.
    pub loop_fission: Option<bool>,
    /// Whether CPU kernels with a transcendental op load their f32 constants once from
    /// memory on this host (`Options::constant_loads`, by default on AMD Zen 3); `None` in a
    /// build without the CPU backend.
    pub constant_loads: Option<bool>,
    /// The alignment, in bytes, of a large tensor's data in this process
    /// ([`large_tensor_alignment`]): 64 or more under [`crate::LargeAligned`] (the `smelt`
    /// tool's allocator), usually 16 under the system allocator, on which memory-bound kernels
    /// run slower.
    pub tensor_alignment: usize,
    /// Whether large tensors were on transparent huge pages ([`huge_pages`]); `None` where
    /// the kernel does not say (not Linux).
    pub huge_pages: Option<HugePages>,
    /// How many bytes of freed tensors of at least 32 MiB [`crate::LargeAligned`] keeps for
    /// reuse (`smelt_runtime::alloc::block_cache_limit`; 0 with `--no-block-cache`).
    pub block_cache_bytes: u64,
    pub min_time_ms: f64,
    pub min_iters: usize,
    pub stream: Option<StreamReport>,
    /// Fused against unfused, per case (empty in a `--compare` run).
    pub cases: Vec<run::CaseResult>,
    /// A `--compare` run's figures (`None` otherwise).
    pub comparison: Option<compare::Comparison>,
}

/// The alignment (a power of two, at most 4096 bytes) at which this process's global
/// allocator places the data of a large tensor, as the benchmark's inputs and outputs get
/// theirs: measured on a fresh 4 MiB `HostTensor`.
pub fn large_tensor_alignment() -> usize {
    let mut t = HostTensor::zeros(DType::F32, [1usize << 20].as_slice());
    let addr = t.data_mut_ptr() as usize;
    1 << addr.trailing_zeros().min(12)
}

/// Transparent huge pages for large tensors, as measured by [`huge_pages`].
#[derive(Clone, Debug, Serialize)]
pub struct HugePages {
    /// The kernel's mode ([`smelt_runtime::alloc::thp_mode`]); `None` if it cannot be read.
    pub mode: Option<String>,
    /// Whether blocks of at least 32 MiB ask for huge pages ([`crate::LargeAligned`], the
    /// `smelt` tool's allocator, does unless `--no-huge-pages`).
    pub asked: bool,
    /// The fraction of a fresh 64 MiB tensor, written once, that the kernel put on huge
    /// pages.
    pub share: f64,
}

/// Whether this process's large tensors get transparent huge pages: a fresh 64 MiB buffer,
/// allocated as a tensor's data is and written once, and what `/proc/self/smaps` says of its
/// mapping. Under 4 KiB pages a streaming kernel takes a TLB miss every 4 KiB; on the 2-core
/// development VM huge pages made the large fused cases 8–25% faster, the copy reference 10%
/// (BENCHMARKS.md).
pub fn huge_pages() -> Option<HugePages> {
    // Zeroed, so that it is a fresh mapping (`alloc_zeroed` never takes a block
    // `LargeAligned` kept), then written once.
    let mut probe = std::hint::black_box(vec![0.0f32; 1 << 24]);
    probe.fill(1.0);
    let bytes = std::mem::size_of_val(probe.as_slice()) as u64;
    let m = smelt_runtime::alloc::mapping_of(probe.as_ptr().cast())?;
    Some(HugePages {
        mode: smelt_runtime::alloc::thp_mode(),
        asked: m.huge_page_advice,
        share: m.huge_page_bytes.min(bytes) as f64 / bytes as f64,
    })
}

/// What `Report::gpu` says about CUDA device `n` (what could not be read is left out).
fn gpu_description(n: usize) -> String {
    let mut s = match smelt_runtime::cuda::cuda_device(n) {
        Ok(i) => format!(
            "{} ({}, {} MiB), driver {}.{}{}",
            i.name,
            i.arch,
            i.total_mem >> 20,
            i.driver_version / 1000,
            i.driver_version % 1000 / 10,
            if i.is_fake() {
                "; the fake CUDA driver: these times say nothing about a GPU"
            } else {
                ""
            }
        ),
        Err(e) => format!("cuda:{n} ({e})"),
    };
    if let Ok(nvrtc) = smelt_runtime::cuda::nvrtc() {
        s.push_str(&format!(", {}", nvrtc.version_string()));
    }
    s
}

/// Runs the suite; `progress` gets one line per step (the CLI prints them on stderr).
pub fn run_suite(opts: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Result<Report> {
    // Fail before measuring anything: an unknown case or an unusable device.
    let selected = cases::select(&opts.cases)?;
    let device = opts.device.resolve()?;
    if device == Device::CudaEmulated {
        return Err(Error::Usage(
            "cuda-emulated runs the CUDA kernels on a CPU emulator, whose timings say nothing \
             about a GPU: benchmark --device cpu or cuda"
                .into(),
        ));
    }
    if let Some(k) = opts.compare {
        if k.cpu_only() && !matches!(device, Device::Cpu) {
            return Err(Error::Usage(format!(
                "--compare {k} flips an option of the CPU code generator, which has no effect \
                 on {device}: benchmark it with --device cpu"
            )));
        }
    }
    let size = if opts.quick { Size::Quick } else { Size::Full };
    let mut budget = if opts.quick {
        Budget::quick()
    } else {
        Budget::standard()
    };
    if let Some(t) = opts.min_time {
        budget.min_time = t;
    }
    let reps = if opts.quick { 2 } else { 5 };

    // On a GPU the reference is a device-to-device copy, and cases are timed on device
    // tensors (see `run`); on the CPU, a STREAM copy with the pool's threads.
    let gpu = match device {
        Device::Cuda(n) => Some(n),
        _ => None,
    };
    let stream_plan = opts.stream.map(|s| match gpu {
        Some(_) => stream::gpu_plan(),
        None => stream::plan(s),
    });
    let measure_copy = |p: &StreamPlan| -> Result<StreamResult> {
        match gpu {
            Some(n) => stream::measure_gpu(n, p, reps),
            None => Ok(stream::measure(p, reps)),
        }
    };
    let before = match &stream_plan {
        Some(p) => {
            progress(&format!(
                "copy bandwidth (before): 2 x {:.0} MB arrays, {}",
                p.array_bytes as f64 / 1e6,
                if gpu.is_some() {
                    "device to device".to_string()
                } else {
                    format!("{} threads", p.threads)
                }
            ));
            Some(measure_copy(p)?)
        }
        None => None,
    };
    let compile_options = crate::Options {
        device,
        math: opts.math,
        no_prefetch: opts.no_prefetch,
        row_prefetch: opts.row_prefetch,
        no_streaming_stores: opts.no_streaming_stores,
        no_interleave_rows: opts.no_interleave_rows,
        no_interleave_vectors: opts.no_interleave_vectors,
        ..crate::Options::default()
    };
    let n = selected.len();
    let copy = before.map(|b| b.gbps);
    let mut results = Vec::with_capacity(n);
    let mut comparison = None;
    match opts.compare {
        None => {
            for (i, case) in selected.iter().enumerate() {
                let mut step = |what: &str| {
                    progress(&format!("[{}/{n}] {}: {what}", i + 1, case.name));
                };
                let r = run::measure(case, size, &compile_options, &budget, copy, &mut step)?;
                progress(&format!("[{}/{n}] {}", i + 1, report::summary(&r)));
                results.push(r);
            }
        }
        Some(knob) => {
            let b = knob.flip(&compile_options);
            let mut c = compare::Comparison {
                knob: knob.to_string(),
                a: knob.describe(&compile_options),
                b: knob.describe(&b),
                cases: Vec::with_capacity(n),
            };
            for (i, case) in selected.iter().enumerate() {
                let mut step = |what: &str| {
                    progress(&format!("[{}/{n}] {}: {what}", i + 1, case.name));
                };
                let r =
                    compare::measure(case, size, &compile_options, &b, &budget, copy, &mut step)?;
                progress(&format!("[{}/{n}] {}", i + 1, report::ab_summary(&c, &r)));
                c.cases.push(r);
            }
            comparison = Some(c);
        }
    }
    let stream = match (stream_plan, before) {
        (Some(plan), Some(before)) => {
            progress("copy bandwidth (after)");
            let after = measure_copy(&plan)?;
            let change = (after.gbps - before.gbps).abs() / before.gbps.max(1e-12);
            let reference_gbps = (before.gbps + after.gbps) / 2.0;
            for r in &mut results {
                r.set_copy_reference(Some(reference_gbps));
            }
            for r in comparison.iter_mut().flat_map(|c| &mut c.cases) {
                r.set_copy_reference(Some(reference_gbps));
            }
            Some(StreamReport {
                plan,
                before,
                after,
                change,
                reference_gbps,
                flagged: change > STREAM_TOLERANCE,
            })
        }
        _ => None,
    };
    let jit = compile_options.jit_options();
    // The host CPU's choices (none in a build without the CPU backend).
    let host = smelt_codegen::llvm::host_target().ok();
    let zen3 = host.map(|h| smelt_codegen::llvm::zen3(&h.cpu, &h.features));
    Ok(Report {
        smelt_version: env!("CARGO_PKG_VERSION").to_string(),
        date: report::utc_now(),
        command: opts.command.clone(),
        machine: report::machine(),
        device: device.to_string(),
        gpu: gpu.map(gpu_description),
        quick: opts.quick,
        math: opts.math.to_string(),
        prefetch_bytes: jit.prefetch_bytes,
        row_prefetch: compile_options.host_row_prefetch().to_string(),
        streaming_stores_min_bytes: jit.nontemporal_min_bytes,
        interleave_rows: jit.interleave_rows,
        interleave_vectors: jit.interleave_vectors,
        machine_schedule: host.map(|h| h.schedule.to_string()),
        loop_fission: zen3.map(|z| jit.loop_fission.on(z)),
        constant_loads: zen3.map(|z| jit.constant_loads.on(z)),
        tensor_alignment: large_tensor_alignment(),
        huge_pages: huge_pages(),
        block_cache_bytes: smelt_runtime::alloc::block_cache_limit() as u64,
        min_time_ms: budget.min_time.as_secs_f64() * 1e3,
        min_iters: budget.min_iters,
        stream,
        cases: results,
        comparison,
    })
}
