//! Measuring one case: compile (cold and from the in-process cache), fused and unfused, then
//! time `run_into` (preallocated outputs) and `run` (fresh outputs) of both plans, the two
//! plans alternately call by call (so the speedup is a side-by-side ratio), then the fused
//! plan's two series again on their own, call after call (what a program that runs only the
//! fused plan sees, and what `benches/peers/` sets PyTorch's back-to-back timings against:
//! alternating with the unfused plan evicts the fused plan's data from the caches between its
//! calls).
//!
//! Timing is wall clock around whole calls. Every backend's runs return only when their outputs
//! are complete (the GPU backend synchronises its stream first), so no device-specific timer is
//! needed. On a GPU the timed calls are the device-tensor runs (`run_device_into` for
//! preallocated outputs, `run_device` for fresh ones): inputs and outputs stay on the device, so
//! the figures are the kernels', not the PCIe bus's.

use super::cases::{self, Case, Size};
use crate::{compile_with, Compiled, CudaProgram, Device, DeviceTensor, Options, Result};
use serde::Serialize;
use smelt_ir::HostTensor;
use smelt_passes::SaturationReport;
use smelt_runtime::cpu::CpuDiskCache;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long to measure.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Keep timing a series until it has run about this long (two series alternating: twice
    /// this for the pair) …
    pub min_time: Duration,
    /// … and at least this many timed calls.
    pub min_iters: usize,
    /// Never more than this many timed calls.
    pub max_iters: usize,
}

impl Budget {
    /// The default: 0.5 s and 5 calls per series (the whole suite takes a few minutes on
    /// two cores).
    pub fn standard() -> Budget {
        Budget {
            min_time: Duration::from_millis(500),
            min_iters: 5,
            max_iters: 100_000,
        }
    }

    /// `--quick`: a handful of calls.
    pub fn quick() -> Budget {
        Budget {
            min_time: Duration::from_millis(20),
            min_iters: 3,
            max_iters: 1_000,
        }
    }
}

/// One timed series.
#[derive(Clone, Debug, Serialize)]
pub struct Timing {
    pub median_ms: f64,
    pub min_ms: f64,
    pub iterations: usize,
    /// Minimal bytes over the median time, GB/s (10^9 bytes per second).
    pub gbps: f64,
    /// `gbps` as a percentage of the measured copy bandwidth, when measured.
    pub pct_of_copy: Option<f64>,
}

impl Timing {
    /// Recomputes `pct_of_copy` against `copy_gbps`.
    pub fn set_copy_reference(&mut self, copy_gbps: Option<f64>) {
        self.pct_of_copy = copy_gbps
            .filter(|c| *c > 0.0)
            .map(|c| 100.0 * self.gbps / c);
    }
}

/// Both series of one plan.
#[derive(Clone, Debug, Serialize)]
pub struct PlanTimes {
    /// Preallocated outputs (`run_into`).
    pub run_into: Timing,
    /// Fresh outputs (`run`).
    pub run: Timing,
}

impl CaseResult {
    /// Recomputes every `pct_of_copy` against `copy_gbps`.
    pub fn set_copy_reference(&mut self, copy_gbps: Option<f64>) {
        for p in [&mut self.unfused, &mut self.fused, &mut self.fused_alone] {
            p.run_into.set_copy_reference(copy_gbps);
            p.run.set_copy_reference(copy_gbps);
        }
        if let Some(g) = &mut self.fused_gpu {
            g.set_copy_reference(copy_gbps);
        }
    }
}

/// Compile times, milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct CompileTimes {
    /// With the in-process JIT cache emptied first and no disk cache.
    pub fused_cold_ms: f64,
    /// The same graph again: kernels come from the cache.
    pub fused_cached_ms: f64,
    /// On the CPU: the in-process cache emptied, the kernel modules loaded from a disk cache
    /// an earlier compile filled (what a new process compiling the graph again pays).
    pub fused_from_disk_ms: Option<f64>,
    pub unfused_cold_ms: f64,
    pub unfused_cached_ms: f64,
}

/// An e-graph run, as `smelt explain` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct EgraphStats {
    pub nodes: usize,
    pub classes: usize,
    pub iterations: usize,
    pub stop_reason: String,
}

impl From<&SaturationReport> for EgraphStats {
    fn from(r: &SaturationReport) -> EgraphStats {
        EgraphStats {
            nodes: r.egraph_nodes,
            classes: r.egraph_classes,
            iterations: r.iterations,
            stop_reason: r.stop_reason.clone(),
        }
    }
}

/// Everything measured for one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub description: String,
    pub graph: String,
    pub shape: String,
    /// Nodes of the traced graph (inputs, parameters and constants included).
    pub graph_nodes: usize,
    /// Every input and parameter read once, every output written once.
    pub min_bytes: u64,
    pub kernels_unfused: usize,
    pub kernels_fused: usize,
    pub unfused: PlanTimes,
    pub fused: PlanTimes,
    /// The fused plan's series again, its calls back to back rather than alternating with
    /// the unfused plan's.
    pub fused_alone: PlanTimes,
    /// On a GPU: the fused plan's `run_device_into` calls timed by CUDA events around their
    /// work (the kernels' time, without the host's launch and synchronisation latency that
    /// every wall time above includes); `None` on the CPU.
    pub fused_gpu: Option<Timing>,
    /// Unfused median over fused median, `run_into`.
    pub speedup_run_into: f64,
    /// Unfused median over fused median, `run`.
    pub speedup_run: f64,
    pub compile: CompileTimes,
    /// The fused compile's simplification and fusion e-graphs.
    pub egraph_simplify: EgraphStats,
    pub egraph_fusion: EgraphStats,
    /// Largest |fused − unfused| over all outputs (a sanity check, not a tolerance test).
    pub max_abs_diff_fused_vs_unfused: f64,
}

/// Median, minimum and count of a series of wall times.
pub(super) type Series = (Duration, Duration, usize);

fn summary(mut times: Vec<Duration>) -> Series {
    times.sort();
    (times[times.len() / 2], times[0], times.len())
}

/// Wall times of each of `calls` under `budget`, after one untimed call each, measured in
/// rounds (every call once per round, every other round in reverse) for `budget.min_time`
/// per call: a change in the machine's load during the series affects them all alike.
fn time_rounds(
    budget: &Budget,
    calls: &mut [&mut dyn FnMut() -> Result<()>],
) -> Result<Vec<Series>> {
    sample_rounds(budget, calls.len(), |i| {
        let s = Instant::now();
        calls[i]()?;
        Ok(s.elapsed())
    })
}

/// The rounds of [`time_rounds`] for `n` series, where `sample(i)` runs series `i` once and
/// says how long it took (a wall time, or a time the call itself reports).
fn sample_rounds(
    budget: &Budget,
    n: usize,
    mut sample: impl FnMut(usize) -> Result<Duration>,
) -> Result<Vec<Series>> {
    for i in 0..n {
        sample(i)?;
    }
    let mut times = vec![Vec::new(); n];
    let limit = budget.min_time * n as u32;
    let start = Instant::now();
    let mut round = 0usize;
    while times[0].len() < budget.max_iters.max(1)
        && (times[0].len() < budget.min_iters.max(1) || start.elapsed() < limit)
    {
        // Every other round in reverse (a, b, then b, a): where a series sits in a round
        // moved the time of one and the same kernel by 5–7% on the AMD Zen 3 VM (forty-first
        // session), which a fixed order would have added to every ratio.
        for k in 0..n {
            let i = if round.is_multiple_of(2) {
                k
            } else {
                n - 1 - k
            };
            times[i].push(sample(i)?);
        }
        round += 1;
    }
    Ok(times.into_iter().map(summary).collect())
}

/// Wall times of `a` and `b` measured *alternately* (a, b, b, a, a, b, …; see
/// [`time_rounds`]), so that their ratio is measured side by side.
fn time_pair(
    budget: &Budget,
    mut a: impl FnMut() -> Result<()>,
    mut b: impl FnMut() -> Result<()>,
) -> Result<(Series, Series)> {
    let s = time_rounds(budget, &mut [&mut a, &mut b])?;
    Ok((s[0], s[1]))
}

/// The times `f` reports (the GPU time of each run: CUDA events), call after call, under the
/// same budget as [`time_rounds`], after one unreported call.
fn reported_times(budget: &Budget, mut f: impl FnMut() -> Result<Duration>) -> Result<Series> {
    Ok(sample_rounds(budget, 1, |_| f())?[0])
}

/// Wall times of `f` alone, call after call (see [`time_rounds`]).
fn time_alone(budget: &Budget, mut f: impl FnMut() -> Result<()>) -> Result<Series> {
    Ok(time_rounds(budget, &mut [&mut f])?[0])
}

pub(super) fn timing(t: Series, min_bytes: u64, copy_gbps: Option<f64>) -> Timing {
    let median = t.0.as_secs_f64();
    let gbps = min_bytes as f64 / median.max(1e-12) / 1e9;
    Timing {
        median_ms: median * 1e3,
        min_ms: t.1.as_secs_f64() * 1e3,
        iterations: t.2,
        gbps,
        pct_of_copy: copy_gbps.filter(|c| *c > 0.0).map(|c| 100.0 * gbps / c),
    }
}

/// Compiles `graph` under `base` (fused or not as `no_fuse` says) with `params` bound.
pub(super) fn compile(
    graph: &smelt_ir::Graph,
    base: &Options,
    no_fuse: bool,
    params: &HashMap<String, HostTensor>,
) -> Result<(Compiled, Duration)> {
    // The copy of the parameters is the harness's, not the compiler's: made before the clock
    // starts.
    let options = Options {
        no_fuse,
        params: params.clone(),
        ..base.clone()
    };
    let start = Instant::now();
    let c = compile_with(graph, options)?;
    Ok((c, start.elapsed()))
}

/// The time of a fused compile whose kernel modules come from a disk cache: a fresh folder
/// filled by one compile, the in-process cache emptied, then the timed compile (which reads
/// the folder through a new cache instance, so from disk, not from memory).
fn from_disk(
    graph: &smelt_ir::Graph,
    base: &Options,
    params: &HashMap<String, HostTensor>,
) -> Result<Duration> {
    static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "smelt-bench-cache-{}-{}",
        std::process::id(),
        RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let options = Options {
        cpu_disk_cache: CpuDiskCache::At(dir.clone()),
        ..base.clone()
    };
    smelt_runtime::cpu::clear_jit_cache();
    let filled = compile(graph, &options, false, params);
    smelt_runtime::cpu::clear_jit_cache();
    let timed = filled.and_then(|_| compile(graph, &options, false, params));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(timed?.1)
}

fn cuda_err(e: smelt_runtime::cuda::CudaExecError) -> crate::Error {
    crate::Error::Runtime(e.into())
}

/// Device copies of the inputs `program` reads.
fn upload(
    program: &CudaProgram,
    inputs: &HashMap<String, HostTensor>,
) -> Result<HashMap<String, DeviceTensor>> {
    inputs
        .iter()
        .map(|(k, v)| Ok((k.clone(), program.upload(v).map_err(cuda_err)?)))
        .collect()
}

/// Zeroed device tensors for `program`'s outputs.
fn device_outputs(program: &CudaProgram) -> Result<Vec<DeviceTensor>> {
    program
        .outputs()
        .map(|(_, dtype, shape)| {
            DeviceTensor::zeros(program.context(), dtype, shape.clone()).map_err(cuda_err)
        })
        .collect()
}

pub(super) fn max_abs_diff(a: &[HostTensor], b: &[HostTensor]) -> f64 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            (0..x.numel().min(y.numel()))
                .map(move |i| (x.data().get_f64(i) - y.data().get_f64(i)).abs())
        })
        .fold(0.0, f64::max)
}

/// The series [`time_plans`] measures.
pub(super) struct PairSeries {
    /// `run_into` (on a GPU `run_device_into`) of the two plans, alternately.
    pub into: (Series, Series),
    /// `run` (`run_device`), alternately.
    pub fresh: (Series, Series),
    /// The second plan's `run_into` and `run` alone, call after call, when asked for.
    pub alone: Option<(Series, Series)>,
    /// On a GPU, with `alone`: the GPU time of the second plan's `run_device_into` calls.
    pub gpu: Option<Series>,
}

/// Times plans `a` and `b` (`labels` name them in progress lines) on `inputs`: preallocated
/// outputs alternately, fresh outputs alternately, then `b` alone when `b_alone` says so. On a
/// GPU inputs and outputs stay in device memory, so the times are the kernels' (and the copy
/// of outputs out of the arena), not PCIe transfers.
pub(super) fn time_plans(
    budget: &Budget,
    (a, b): (&Compiled, &Compiled),
    (la, lb): (&str, &str),
    b_alone: bool,
    inputs: &HashMap<String, HostTensor>,
    progress: &mut dyn FnMut(&str),
) -> Result<PairSeries> {
    match (a.cuda_program(), b.cuda_program()) {
        (Some(a), Some(b)) => {
            progress("upload inputs to the device");
            let (dev_a, dev_b) = (upload(a, inputs)?, upload(b, inputs)?);
            let (mut out_a, mut out_b) = (device_outputs(a)?, device_outputs(b)?);
            progress(&format!("run_device_into, {la} and {lb} alternately"));
            let into = time_pair(
                budget,
                || a.run_device_into(&dev_a, &mut out_a).map_err(cuda_err),
                || b.run_device_into(&dev_b, &mut out_b).map_err(cuda_err),
            )?;
            progress(&format!("run_device, {la} and {lb} alternately"));
            let fresh = time_pair(
                budget,
                || a.run_device(&dev_a).map(drop).map_err(cuda_err),
                || b.run_device(&dev_b).map(drop).map_err(cuda_err),
            )?;
            let (alone, gpu) = if b_alone {
                progress(&format!("run_device_into and run_device, {lb} alone"));
                let alone = (
                    time_alone(budget, || {
                        b.run_device_into(&dev_b, &mut out_b).map_err(cuda_err)
                    })?,
                    time_alone(budget, || b.run_device(&dev_b).map(drop).map_err(cuda_err))?,
                );
                progress(&format!(
                    "run_device_into, {lb} alone, GPU time (CUDA events)"
                ));
                let gpu = reported_times(budget, || {
                    b.run_device_into_timed(&dev_b, &mut out_b)
                        .map_err(cuda_err)
                })?;
                (Some(alone), Some(gpu))
            } else {
                (None, None)
            };
            Ok(PairSeries {
                into,
                fresh,
                alone,
                gpu,
            })
        }
        _ => {
            let (mut out_a, mut out_b) = (cases::zeroed_outputs(a), cases::zeroed_outputs(b));
            progress(&format!("run_into, {la} and {lb} alternately"));
            let into = time_pair(
                budget,
                || a.run_into(inputs, &mut out_a),
                || b.run_into(inputs, &mut out_b),
            )?;
            progress(&format!("run, {la} and {lb} alternately"));
            let fresh = time_pair(
                budget,
                || a.run(inputs).map(drop),
                || b.run(inputs).map(drop),
            )?;
            let alone = if b_alone {
                progress(&format!("run_into and run, {lb} alone"));
                Some((
                    time_alone(budget, || b.run_into(inputs, &mut out_b))?,
                    time_alone(budget, || b.run(inputs).map(drop))?,
                ))
            } else {
                None
            };
            Ok(PairSeries {
                into,
                fresh,
                alone,
                gpu: None,
            })
        }
    }
}

/// Measures `case` at `size`, compiled under `options` (its device and CPU code generation;
/// fusion and parameters are set per plan); `copy_gbps` is the copy bandwidth percentages
/// refer to; `progress` is told each step.
pub fn measure(
    case: &Case,
    size: Size,
    options: &Options,
    budget: &Budget,
    copy_gbps: Option<f64>,
    progress: &mut dyn FnMut(&str),
) -> Result<CaseResult> {
    progress("trace");
    let graph = case.build(size)?;
    let (inputs, params) = cases::data(&graph, 1)?;
    let min_bytes = cases::min_bytes(&graph);

    progress("compile");
    // Cold: neither the in-process cache nor the disk cache has the kernels.
    let cold = Options {
        cpu_disk_cache: CpuDiskCache::Off,
        ..options.clone()
    };
    smelt_runtime::cpu::clear_jit_cache();
    let (fused, fused_cold) = compile(&graph, &cold, false, &params)?;
    let fused_cached = compile(&graph, &cold, false, &params)?.1;
    smelt_runtime::cpu::clear_jit_cache();
    let (unfused, unfused_cold) = compile(&graph, &cold, true, &params)?;
    let unfused_cached = compile(&graph, &cold, true, &params)?.1;
    let fused_from_disk = if fused.device() == Device::Cpu {
        progress("compile from the disk cache");
        Some(from_disk(&graph, options, &params)?)
    } else {
        None
    };

    let PairSeries {
        into: (ui, fi),
        fresh: (ur, fr),
        alone,
        gpu,
    } = time_plans(
        budget,
        (&unfused, &fused),
        ("unfused", "fused"),
        true,
        &inputs,
        progress,
    )?;
    let (ai, ar) = alone.expect("time_plans times the second plan alone when asked to");
    let (mut out_fused, mut out_unfused) = (
        cases::zeroed_outputs(&fused),
        cases::zeroed_outputs(&unfused),
    );
    // Not timed: the figures' sanity check.
    unfused.run_into(&inputs, &mut out_unfused)?;
    fused.run_into(&inputs, &mut out_fused)?;

    let opt = fused.optimized();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ratio = |u: &Timing, f: &Timing| u.median_ms / f.median_ms.max(1e-12);
    let unfused_times = PlanTimes {
        run_into: timing(ui, min_bytes, copy_gbps),
        run: timing(ur, min_bytes, copy_gbps),
    };
    let fused_times = PlanTimes {
        run_into: timing(fi, min_bytes, copy_gbps),
        run: timing(fr, min_bytes, copy_gbps),
    };
    Ok(CaseResult {
        name: case.name.to_string(),
        description: case.description.to_string(),
        graph: case.graph.to_string(),
        shape: case.shape(size),
        graph_nodes: graph.len(),
        min_bytes,
        kernels_unfused: unfused.optimized().plan.kernel_count(),
        kernels_fused: opt.plan.kernel_count(),
        speedup_run_into: ratio(&unfused_times.run_into, &fused_times.run_into),
        speedup_run: ratio(&unfused_times.run, &fused_times.run),
        unfused: unfused_times,
        fused: fused_times,
        fused_alone: PlanTimes {
            run_into: timing(ai, min_bytes, copy_gbps),
            run: timing(ar, min_bytes, copy_gbps),
        },
        fused_gpu: gpu.map(|g| timing(g, min_bytes, copy_gbps)),
        compile: CompileTimes {
            fused_cold_ms: ms(fused_cold),
            fused_from_disk_ms: fused_from_disk.map(ms),
            fused_cached_ms: ms(fused_cached),
            unfused_cold_ms: ms(unfused_cold),
            unfused_cached_ms: ms(unfused_cached),
        },
        egraph_simplify: (&opt.simplify).into(),
        egraph_fusion: (&opt.fusion).into(),
        max_abs_diff_fused_vs_unfused: max_abs_diff(&out_fused, &out_unfused),
    })
}
