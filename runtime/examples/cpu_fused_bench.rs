//! Fused vs unfused CPU programs, and a STREAM-style copy with the same threads.
//!
//! ```text
//! cargo run -p smelt-runtime --release --example cpu_fused_bench [-- REPS [CASE..]]
//! ```
//!
//! For every case it compiles the graph twice (`PassOptions { fuse: true }` and `fuse: false`),
//! runs both through [`CpuProgram::run_into`] alternately `REPS` times (default 7) and prints the
//! median milliseconds, the fused program's effective bandwidth (bytes of its inputs read plus
//! outputs written, per second) as a share of the copy bandwidth, and the speed-up. Timings on a
//! shared machine are noisy: compare figures from one process.

use smelt_frontend::{GeluApproximation, Tensor, Tracer};
use smelt_ir::{DType, Graph, HostTensor};
use smelt_passes::PassOptions;
use smelt_runtime::cpu::{CpuPool, CpuProgram};
use std::collections::HashMap;
use std::time::Instant;

type Build = fn(&Tracer) -> smelt_frontend::Result<Vec<Tensor>>;

struct Case {
    name: &'static str,
    inputs: Vec<(&'static str, Vec<usize>)>,
    build: Build,
}

fn chain8(t: &Tracer) -> smelt_frontend::Result<Vec<Tensor>> {
    let n = 16 << 20;
    let x = t.input("x", DType::F32, [n])?;
    let z = t.input("z", DType::F32, [n])?;
    let y = x
        .mul(1.5)?
        .add(&z)?
        .sub(0.25)?
        .div(3.0)?
        .mul(&z)?
        .add(0.5)?;
    Ok(vec![y.relu()?.mul(2.0)?])
}

fn layer_norm(t: &Tracer, rows: usize) -> smelt_frontend::Result<Vec<Tensor>> {
    let x = t.input("x", DType::F32, [rows, 768])?;
    let w = t.input("w", DType::F32, [768])?;
    let b = t.input("b", DType::F32, [768])?;
    Ok(vec![smelt_frontend::nn::layer_norm(
        &x,
        &[768],
        Some(&w),
        Some(&b),
        1e-5,
    )?])
}

fn softmax(t: &Tracer, rows: usize, n: usize) -> smelt_frontend::Result<Vec<Tensor>> {
    let x = t.input("x", DType::F32, [rows, n])?;
    Ok(vec![x.softmax(-1)?])
}

fn bias_gelu_residual(t: &Tracer) -> smelt_frontend::Result<Vec<Tensor>> {
    let x = t.input("x", DType::F32, [65536, 768])?;
    let b = t.input("b", DType::F32, [768])?;
    let r = t.input("r", DType::F32, [65536, 768])?;
    Ok(vec![x.add(&b)?.gelu(GeluApproximation::None)?.add(&r)?])
}

fn linear(t: &Tracer) -> smelt_frontend::Result<Vec<Tensor>> {
    let x = t.input("x", DType::F32, [128, 768])?;
    let w = t.input("w", DType::F32, [3072, 768])?;
    let b = t.input("b", DType::F32, [3072])?;
    Ok(vec![smelt_frontend::nn::linear(&x, &w, Some(&b))?])
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "linear_128x768x3072",
            inputs: vec![
                ("x", vec![128, 768]),
                ("w", vec![3072, 768]),
                ("b", vec![3072]),
            ],
            build: linear,
        },
        Case {
            name: "chain8_16M",
            inputs: vec![("x", vec![16 << 20]), ("z", vec![16 << 20])],
            build: chain8,
        },
        Case {
            name: "layer_norm_65536x768",
            inputs: vec![("x", vec![65536, 768]), ("w", vec![768]), ("b", vec![768])],
            build: |t| layer_norm(t, 65536),
        },
        Case {
            name: "layer_norm_128x768",
            inputs: vec![("x", vec![128, 768]), ("w", vec![768]), ("b", vec![768])],
            build: |t| layer_norm(t, 128),
        },
        Case {
            name: "softmax_65536x768",
            inputs: vec![("x", vec![65536, 768])],
            build: |t| softmax(t, 65536, 768),
        },
        Case {
            name: "softmax_1536x128",
            inputs: vec![("x", vec![1536, 128])],
            build: |t| softmax(t, 1536, 128),
        },
        Case {
            name: "bias_gelu_residual_65536x768",
            inputs: vec![
                ("x", vec![65536, 768]),
                ("b", vec![768]),
                ("r", vec![65536, 768]),
            ],
            build: bias_gelu_residual,
        },
    ]
}

fn graph(case: &Case) -> Graph {
    let t = Tracer::new();
    let outs = (case.build)(&t).expect("trace");
    for (i, o) in outs.iter().enumerate() {
        t.output(format!("y{i}"), o).expect("output");
    }
    t.finish().expect("graph")
}

fn program(g: &Graph, fuse: bool) -> CpuProgram {
    let opts = PassOptions {
        fuse,
        ..PassOptions::default()
    };
    let o = smelt_passes::optimize(g, &opts).expect("optimize");
    let p = smelt_passes::kernel::lower(&o.graph, &o.plan).expect("lower");
    if std::env::var_os("SMELT_BENCH_PRINT").is_some() {
        eprintln!("{p}");
    }
    if fuse && std::env::var_os("SMELT_BENCH_IR").is_some() {
        for s in &p.steps {
            if let smelt_passes::kernel::Step::Kernel(k) = s {
                let ir = smelt_codegen::llvm::kernel::optimized_kernel_ir(
                    k,
                    &p.buffers,
                    &Default::default(),
                )
                .expect("ir");
                eprintln!("{ir}");
            }
        }
    }
    CpuProgram::compile(&p, &HashMap::new()).expect("compile")
}

fn inputs(case: &Case) -> HashMap<String, HostTensor> {
    case.inputs
        .iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|i| ((i.wrapping_mul(2654435761) % 2001) as f32 - 1000.0) / 250.0)
                .collect();
            (
                name.to_string(),
                HostTensor::from_f32(shape.as_slice(), v).unwrap(),
            )
        })
        .collect()
}

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU seconds used by the whole process so far (all threads): less sensitive than wall time
/// to other processes competing for the cores.
fn cpu_seconds() -> f64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid `struct timespec` (two 64-bit fields on 64-bit Linux);
    // 2 is CLOCK_PROCESS_CPUTIME_ID.
    unsafe { clock_gettime(2, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// STREAM copy: `dst = src` over `n` f32, split like a kernel launch on the global pool.
fn stream_copy(reps: usize) -> f64 {
    let n = 64usize << 20;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let pool = CpuPool::global().unwrap();
    let mut times = Vec::new();
    for _ in 0..reps {
        let d = dst.as_mut_ptr() as usize;
        let s = src.as_ptr() as usize;
        let t0 = Instant::now();
        pool.for_each_chunk(n as i64, 1 << 16, |a, b| {
            let (a, b) = (a as usize, b as usize);
            // SAFETY: chunks are disjoint sub-ranges of `0..n`, and both vectors hold `n`
            // elements and outlive the call.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (s as *const f32).add(a),
                    (d as *mut f32).add(a),
                    b - a,
                )
            }
        })
        .unwrap();
        times.push(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    (2 * n * 4) as f64 / median(times) / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(7);
    let only: Vec<&String> = args.iter().skip(1).collect();
    let copy = stream_copy(reps);
    println!(
        "threads {}  STREAM copy {copy:.2} GB/s",
        CpuPool::global().unwrap().threads()
    );
    println!(
        "{:<30} {:>10} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8}",
        "case",
        "fused ms",
        "unfused ms",
        "GB/s",
        "%copy",
        "speedup",
        "f cpu ms",
        "u cpu ms",
        "cpu x"
    );
    for case in cases() {
        if !only.is_empty() && !only.iter().any(|o| case.name.contains(o.as_str())) {
            continue;
        }
        let g = graph(&case);
        let fused = program(&g, true);
        let unfused = program(&g, false);
        let ins = inputs(&case);
        let mut outs_f: Vec<HostTensor> = fused
            .outputs()
            .map(|(_, d, s)| HostTensor::zeros(d, s.clone()))
            .collect();
        let mut outs_u: Vec<HostTensor> = unfused
            .outputs()
            .map(|(_, d, s)| HostTensor::zeros(d, s.clone()))
            .collect();
        let bytes: usize = ins
            .values()
            .chain(outs_f.iter())
            .map(|t| t.numel() * t.dtype().size_bytes())
            .sum();
        // Warm up (page faults of the arena and outputs).
        fused.run_into(&ins, &mut outs_f).unwrap();
        unfused.run_into(&ins, &mut outs_u).unwrap();
        let (mut tf, mut tu, mut cf, mut cu) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..reps {
            let (t0, c0) = (Instant::now(), cpu_seconds());
            fused.run_into(&ins, &mut outs_f).unwrap();
            tf.push(t0.elapsed().as_secs_f64());
            cf.push(cpu_seconds() - c0);
            let (t0, c0) = (Instant::now(), cpu_seconds());
            unfused.run_into(&ins, &mut outs_u).unwrap();
            tu.push(t0.elapsed().as_secs_f64());
            cu.push(cpu_seconds() - c0);
        }
        let (f, u) = (median(tf), median(tu));
        let (fc, uc) = (median(cf), median(cu));
        let gbs = bytes as f64 / f / 1e9;
        println!(
            "{:<30} {:>10.3} {:>10.3} {:>8.2} {:>7.0}% {:>7.2}x {:>10.3} {:>10.3} {:>7.2}x",
            case.name,
            f * 1e3,
            u * 1e3,
            gbs,
            100.0 * gbs / copy,
            u / f,
            fc * 1e3,
            uc * 1e3,
            uc / fc
        );
    }
}
