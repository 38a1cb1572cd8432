//! Issue 6's cases under criterion: every case of `smelt::bench::cases` fused and unfused, on
//! the CPU and on CUDA device 0 when it resolves, with `Throughput::Bytes` of the case's
//! minimal bytes (each input and parameter read once, each output written once), so criterion
//! prints achieved bandwidth. Timed calls are `run_into` with preallocated outputs; the GPU
//! backend's `run_into` synchronises before returning, so wall-clock timing is valid there.
//!
//! `cargo bench --bench cases` (all), `cargo bench --bench cases -- softmax` (a filter).
//! `smelt bench` measures the same cases with a copy-bandwidth reference and more detail.
//!
//! The `compile-<case>` groups time a fused CPU compile with the case's weights bound, for the
//! cases with weight matrices (the MLP and the encoder layer), from the in-process kernel
//! cache: what is left is planning and the copies of the weights that linear layers read
//! packed. `default` packs them for the panel kernel (AVX-512F, or AVX2 and FMA; up to 128
//! rows), `gemm-crate` for the `gemm` crate, as on a CPU without either or for more than 128
//! tokens.
//! `cargo bench --bench cases -- compile` runs only these.
//!
//! The `weights-<case>` groups run the same cases fused on the CPU with the weights bound at
//! compile time (`bound`, packed once) and given with every call's inputs (`per-call`, copied
//! into the GEMM's layout on every call), as a program that feeds its weights at run time does.
//!
//! The `short-rows-<cols>` groups add a broadcast row to a 24 MiB tensor of rows of 16, 32 and
//! 64 floats, fused on the CPU, with the default options and with plain stores only
//! (`cargo bench --bench cases -- short-rows`).
//!
//! The `transpose-add-<shape>` groups add a transposed operand (`x + y.T`, and a batched
//! `x + y.transpose(1, 2)`) fused on the CPU, with transposed reads in tiles and without, next
//! to the same add with `y` not transposed (`cargo bench --bench cases -- transpose-add`).

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput,
};
use smelt::bench::cases::{self, Size};
use smelt::ir::{Graph, HostTensor};
use smelt::{compile_with, Device, Options};
use std::collections::HashMap;
use std::time::Duration;

/// As in the `smelt` tool: large tensors start on a 64-byte boundary (`smelt::LargeAligned`).
#[global_allocator]
static ALLOC: smelt::LargeAligned = smelt::LargeAligned;

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if Device::Cuda(0).resolve().is_ok() {
        d.push(Device::Cuda(0));
    }
    d
}

/// Criterion's name filter (the first free argument), so that filtered-out cases are not even
/// traced and compiled: the big ones allocate hundreds of megabytes.
fn filter() -> Option<String> {
    const WITH_VALUE: &[&str] = &[
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--profile-time",
        "--color",
        "--output-format",
        "--plotting-backend",
        "--format",
    ];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if WITH_VALUE.contains(&a.as_str()) {
            args.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// Whether the filter (see [`filter`]) selects the group `name`: either contains the other.
fn selected(filter: &Option<String>, name: &str) -> bool {
    filter
        .as_deref()
        .is_none_or(|f| f.contains(name) || name.contains(f))
}

/// Compiles `graph` under `options` and times `run_into` on `inputs`, into preallocated
/// outputs, as `label` in `group`.
fn time_run_into(
    group: &mut BenchmarkGroup<'_, WallTime>,
    label: impl Into<String>,
    graph: &Graph,
    options: Options,
    inputs: &HashMap<String, HostTensor>,
) {
    let compiled = compile_with(graph, options).expect("the case compiles");
    let mut outputs = cases::zeroed_outputs(&compiled);
    group.bench_function(label.into(), |b| {
        b.iter(|| {
            compiled
                .run_into(inputs, &mut outputs)
                .expect("the case runs")
        })
    });
}

fn bench_cases(c: &mut Criterion) {
    let devices = devices();
    let filter = filter();
    for case in cases::all() {
        if !selected(&filter, case.name) {
            continue;
        }
        let graph = case.build(Size::Full).expect("the case traces");
        let (inputs, params) = cases::data(&graph, 1).expect("f32 data");
        let mut group = c.benchmark_group(case.name);
        group
            .throughput(Throughput::Bytes(cases::min_bytes(&graph)))
            .sample_size(10)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for &device in &devices {
            for (label, no_fuse) in [("unfused", true), ("fused", false)] {
                let options = Options {
                    device,
                    no_fuse,
                    params: params.clone(),
                    ..Options::default()
                };
                time_run_into(
                    &mut group,
                    format!("{label}-{device}"),
                    &graph,
                    options,
                    &inputs,
                );
            }
        }
        group.finish();
    }
}

/// A case with weight matrices that the filter selects for the group `prefix` + its name.
struct WeightCase {
    group: String,
    graph: Graph,
    inputs: HashMap<String, HostTensor>,
    params: HashMap<String, HostTensor>,
}

/// The cases with weight matrices (2-D parameters: the MLP and the encoder layer) whose group
/// `prefix` + name the filter selects, traced at full size with their data, one at a time.
fn weight_cases(prefix: &'static str) -> impl Iterator<Item = WeightCase> {
    let filter = filter();
    cases::all().iter().filter_map(move |case| {
        let group = format!("{prefix}{}", case.name);
        if !selected(&filter, &group) {
            return None;
        }
        let graph = case.build(Size::Full).expect("the case traces");
        let (inputs, params) = cases::data(&graph, 1).expect("f32 data");
        params
            .values()
            .any(|t| t.shape().rank() == 2)
            .then_some(WeightCase {
                group,
                graph,
                inputs,
                params,
            })
    })
}

fn bench_compile(c: &mut Criterion) {
    for WeightCase {
        group,
        graph,
        params,
        ..
    } in weight_cases("compile-")
    {
        let mut group = c.benchmark_group(group);
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(4));
        for (label, panel_rows) in [("default", None), ("gemm-crate", Some(0))] {
            let options = Options {
                device: Device::Cpu,
                params: params.clone(),
                gemm_panel_max_rows: panel_rows,
                ..Options::default()
            };
            group.bench_function(label, |b| {
                b.iter_batched(
                    || options.clone(),
                    |o| compile_with(&graph, o).expect("the case compiles"),
                    BatchSize::PerIteration,
                )
            });
        }
        group.finish();
    }
}

fn bench_weights(c: &mut Criterion) {
    for WeightCase {
        group,
        graph,
        inputs,
        params,
    } in weight_cases("weights-")
    {
        let mut group = c.benchmark_group(group);
        group
            .throughput(Throughput::Bytes(cases::min_bytes(&graph)))
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        let mut all = inputs.clone();
        all.extend(params.clone());
        for (label, bound, given) in [
            ("bound", params.clone(), &inputs),
            ("per-call", HashMap::new(), &all),
        ] {
            let options = Options {
                device: Device::Cpu,
                params: bound,
                ..Options::default()
            };
            time_run_into(&mut group, label, &graph, options, given);
        }
        group.finish();
    }
}

/// Rows of `cols` floats of a 24 MiB tensor plus a broadcast row, fused on the CPU, as the
/// defaults compile it and with plain stores only. Rows of 16 and 32 floats are too short for
/// streaming stores' groups of four lines: the defaults must not peel them for nothing.
fn bench_short_rows(c: &mut Criterion) {
    let filter = filter();
    for cols in [16, 32, 64] {
        let name = format!("short-rows-{cols}");
        if !selected(&filter, &name) {
            continue;
        }
        let rows = (24 << 20) / 4 / cols;
        let t = smelt::frontend::Tracer::new();
        let trace = || -> smelt::Result<Graph> {
            let x = t.input("x", smelt::ir::DType::F32, [rows, cols])?;
            let b = t.input("b", smelt::ir::DType::F32, [cols])?;
            t.output("y", &x.add(&b)?)?;
            Ok(t.finish()?)
        };
        let graph = trace().expect("the case traces");
        let (inputs, _) = cases::data(&graph, 1).expect("f32 data");
        let mut group = c.benchmark_group(name);
        group
            .throughput(Throughput::Bytes(cases::min_bytes(&graph)))
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for (label, no_streaming_stores) in [("default", false), ("plain-stores", true)] {
            let options = Options {
                device: Device::Cpu,
                no_streaming_stores,
                ..Options::default()
            };
            time_run_into(&mut group, label, &graph, options, &inputs);
        }
        group.finish();
    }
}

/// `x + y.T` over 2048 x 3072 floats and, batched, `x + y.transpose(1, 2)` over 16 x 512 x
/// 768, fused on the CPU: with transposed reads in tiles (the default; `run_into`, and `run`
/// with fresh outputs as `tiles-run`), without, and, for reference, `x + y` with `y` not
/// transposed.
fn bench_transpose_add(c: &mut Criterion) {
    let filter = filter();
    for dims in [[1, 2048, 3072], [16, 512, 768]] {
        let name = match dims {
            [1, m, n] => format!("transpose-add-{m}x{n}"),
            [b, m, n] => format!("transpose-add-{b}x{m}x{n}"),
        };
        if !selected(&filter, &name) {
            continue;
        }
        let [b, m, n] = dims;
        let trace = |transposed: bool| -> smelt::Result<Graph> {
            let t = smelt::frontend::Tracer::new();
            let x = t.input("x", smelt::ir::DType::F32, [b, m, n])?;
            let y = if transposed {
                t.input("y", smelt::ir::DType::F32, [b, n, m])?
                    .permute(&[0, 2, 1])?
            } else {
                t.input("y", smelt::ir::DType::F32, [b, m, n])?
            };
            t.output("z", &x.add(&y)?)?;
            Ok(t.finish()?)
        };
        let mut group = c.benchmark_group(name);
        group
            .sample_size(20)
            .warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(2));
        for (label, transposed, no_tiled_transposes) in [
            ("tiles", true, false),
            ("rows", true, true),
            ("not-transposed", false, false),
        ] {
            let graph = trace(transposed).expect("the case traces");
            let (inputs, _) = cases::data(&graph, 1).expect("f32 data");
            group.throughput(Throughput::Bytes(cases::min_bytes(&graph)));
            let options = Options {
                device: Device::Cpu,
                no_tiled_transposes,
                ..Options::default()
            };
            if label == "tiles" {
                // Fresh outputs, as PyTorch's `x + y.T` (eager or torch.compile) makes them.
                let compiled = compile_with(&graph, options.clone()).expect("the case compiles");
                group.bench_function("tiles-run", |b| {
                    b.iter(|| compiled.run(&inputs).expect("the case runs"))
                });
            }
            time_run_into(&mut group, label, &graph, options, &inputs);
        }
        group.finish();
    }
}

criterion_group!(
    benches,
    bench_cases,
    bench_compile,
    bench_weights,
    bench_short_rows,
    bench_transpose_add
);
criterion_main!(benches);
