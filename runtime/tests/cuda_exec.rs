//! The CUDA launch path (issue 5).
//!
//! Everywhere: the launch plans of the corpus and of random graphs keep the launch contract
//! (arguments = reads, writes, `n`; 256-aligned arena offsets; simultaneously live buffers
//! disjoint) and their CUDA C — generated kernels plus fallback GEMMs of every dtype — compiles
//! with NVRTC for sm_90 (skipped without NVRTC unless `SMELT_REQUIRE_NVRTC=1`).
//!
//! On a GPU (skipped with a printed reason when `Device::Cuda(0).resolve()` fails, unless
//! `SMELT_REQUIRE_GPU=1`, then failing): the corpus and a differential fuzz over random graphs
//! against the reference interpreter (the tolerances of `cpu_exec_fuzz.rs`; `SMELT_FUZZ_CASES`
//! sets the count, default 64), run / run_into / device-buffer runs agree bitwise, two programs
//! on two streams (and one program from two threads) give identical results concurrently,
//! cuBLAS and the fallback GEMM agree, and bad inputs are typed errors.

mod cpu_exec_support;
#[path = "../../codegen/tests/cuda_corpus_graphs/mod.rs"]
mod cuda_corpus_graphs;

use cpu_exec_support::{
    assert_fuzz_results, check_bits, check_close_with, check_outputs, floats, fuzz_cases,
    fuzz_tolerance, gather_case, gather_ids, gemm_program, model_bindings, on_workers,
    random_programs, tensor,
};
use smelt_ir::interp::eval;
use smelt_ir::{DType, Graph, HostTensor, Shape};
use smelt_passes::kernel::{BufferId, BufferKind, Program, Step};
use smelt_runtime::cuda::launch::{
    BufferLoc, GemmBackend, KernelArg, LaunchPlan, LaunchStep, DEVICE_ALIGN,
};
use smelt_runtime::cuda::{
    cuda_context, cuda_device, nvrtc, Arch, CompileOptions, CudaExecError, CudaOptions,
    CudaProgram, DeviceTensor, FAKE_DEVICE_NAME,
};
use smelt_runtime::Device;
use std::collections::HashMap;
use std::sync::Arc;

fn gpu_or_skip(test: &str) -> bool {
    match Device::Cuda(0).resolve() {
        Ok(_) => true,
        Err(e) if std::env::var_os("SMELT_REQUIRE_GPU").is_some_and(|v| v == "1") => {
            panic!("{test}: SMELT_REQUIRE_GPU=1 but no usable GPU: {e}")
        }
        Err(e) => {
            println!("{test}: skipped, no usable GPU: {e}");
            false
        }
    }
}

fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc() {
        Ok(_) => true,
        Err(e) if std::env::var_os("SMELT_REQUIRE_NVRTC").is_some() => {
            panic!("{test}: SMELT_REQUIRE_NVRTC is set but NVRTC is not available: {e}")
        }
        Err(e) => {
            println!("{test}: skipped, NVRTC not available: {e}");
            false
        }
    }
}

// ---------------------------------------------------------------- plan checks (no GPU)

/// The launch contract and the memory invariants of `plan` for `program`.
fn check_plan(program: &Program, plan: &LaunchPlan) -> Result<(), String> {
    let mut entries = plan.entries.clone();
    entries.sort();
    entries.dedup();
    if entries.len() != plan.entries.len() {
        return Err(format!("duplicate entries {:?}", plan.entries));
    }
    if plan.steps.len() != program.steps.len() {
        return Err("one launch step per program step".into());
    }
    let buf = |b: &BufferId| KernelArg::Buffer {
        buffer: b.0 as usize,
        loc: plan.buffers[b.0 as usize],
    };
    for (s, (step, launch)) in program.steps.iter().zip(&plan.steps).enumerate() {
        match (step, launch) {
            (Step::Kernel(k), LaunchStep::Kernel(l)) => {
                let n: usize = k.outer.iter().product();
                let mut want: Vec<KernelArg> = k.reads.iter().chain(&k.writes).map(buf).collect();
                want.push(KernelArg::Count(n as i64));
                if l.args != want || l.step != s {
                    return Err(format!("step {s}: args {:?}, want {want:?}", l.args));
                }
                let entry = &plan.entries[l.entry];
                if !plan.source.contains(&format!(") {entry}(")) {
                    return Err(format!("step {s}: entry {entry} not in the source"));
                }
                if l.grid == 0 || l.block == 0 || l.block > 1024 || l.block % 32 != 0 {
                    return Err(format!("step {s}: grid {} block {}", l.grid, l.block));
                }
            }
            (Step::Gemm(g), LaunchStep::Kernel(l)) => {
                let want = [buf(&g.a.buffer), buf(&g.b.buffer), buf(&g.out)];
                if l.args[..3] != want[..] || !matches!(l.args[3], KernelArg::Count(_)) {
                    return Err(format!("gemm step {s}: args {:?}", l.args));
                }
            }
            (Step::Gemm(g), LaunchStep::Cublas(c)) => {
                if c.a != buf(&g.b.buffer) || c.b != buf(&g.a.buffer) || c.c != buf(&g.out) {
                    return Err(format!("gemm step {s}: cuBLAS operands {c:?}"));
                }
            }
            (Step::Gemm(_), LaunchStep::Zero { .. } | LaunchStep::Skip { .. }) => {}
            _ => return Err(format!("step {s}: {launch:?} for {step:?}")),
        }
    }
    // Temporaries: 256-aligned, inside the temp region, disjoint while simultaneously live.
    let temps: Vec<(usize, usize, (usize, usize))> = plan
        .buffers
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match l {
            BufferLoc::Arena { offset } => Some((i, *offset, plan.live[i]?)),
            _ => None,
        })
        .collect();
    for &(i, o, _) in &temps {
        if o % DEVICE_ALIGN != 0 || o + plan.bytes[i] > plan.temp_bytes {
            return Err(format!("temp b{i} at {o} (+{})", plan.bytes[i]));
        }
    }
    for (x, &(i, oi, li)) in temps.iter().enumerate() {
        for &(j, oj, lj) in &temps[..x] {
            let live_together = !(li.1 < lj.0 || lj.1 < li.0);
            let apart = oi + plan.bytes[i] <= oj || oj + plan.bytes[j] <= oi;
            if live_together && !apart && plan.bytes[i] > 0 && plan.bytes[j] > 0 {
                return Err(format!("b{i} and b{j} are live together and overlap"));
            }
        }
    }
    // Inputs after the temporaries, constants in their region, staging ranges: all disjoint.
    let disjoint = |v: &mut Vec<(usize, usize)>, end: usize, what: &str| {
        v.sort_unstable();
        for w in v.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("{what}: {:?} and {:?} overlap", w[0], w[1]));
            }
        }
        match v
            .iter()
            .find(|r| r.0 % DEVICE_ALIGN != 0 || r.0 + r.1 > end)
        {
            Some(r) => Err(format!("{what}: {r:?} misplaced (end {end})")),
            None => Ok(()),
        }
    };
    let mut ins: Vec<(usize, usize)> = plan
        .inputs
        .iter()
        .map(|s| (s.arena_offset, plan.bytes[s.buffer]))
        .collect();
    if ins.iter().any(|r| r.0 < plan.temp_bytes) {
        return Err("an input inside the temporaries".into());
    }
    disjoint(&mut ins, plan.arena_bytes, "inputs")?;
    let mut cs: Vec<(usize, usize)> = plan.consts.iter().map(|c| (c.offset, c.bytes)).collect();
    disjoint(&mut cs, plan.const_bytes, "constants")?;
    let mut st: Vec<(usize, usize)> = plan
        .inputs
        .iter()
        .map(|s| (s.staging_offset, plan.bytes[s.buffer]))
        .chain(
            plan.outputs
                .iter()
                .map(|o| (o.staging_offset, plan.bytes[o.buffer])),
        )
        .collect();
    disjoint(&mut st, plan.staging_bytes, "staging")?;
    for d in &program.buffers {
        let loc = plan.buffers[d.id.0 as usize];
        let ok = matches!(
            (&d.kind, loc),
            (BufferKind::Temp, BufferLoc::Arena { .. })
                | (BufferKind::Constant(_), BufferLoc::Const { .. })
                | (BufferKind::Input(_), BufferLoc::Input { .. })
                | (
                    BufferKind::Param(_),
                    BufferLoc::Input { .. } | BufferLoc::Const { .. }
                )
        );
        if !ok {
            return Err(format!("buffer {:?} at {loc:?}", d.kind));
        }
    }
    Ok(())
}

/// The pointers a run resolves: for every launch, the bytes each written buffer covers overlap
/// no other argument's bytes (reads and writes of one step are disjoint, as `__restrict__`
/// demands), for host-input runs and device-input runs alike.
fn check_pointers(program: &Program, plan: &LaunchPlan) -> Result<(), String> {
    let (arena, consts) = (0x7f00_0000_0000u64, 0x7e00_0000_0000u64);
    let device: Vec<u64> = (0..plan.inputs.len() as u64)
        .map(|i| 0x7d00_0000_0000 + (i << 32))
        .collect();
    for dev in [None, Some(device.as_slice())] {
        let mut ptrs = vec![0u64; plan.buffers.len()];
        plan.resolve_pointers(arena, consts, dev, &mut ptrs);
        let range = |b: usize| (ptrs[b], ptrs[b] + plan.bytes[b] as u64);
        for (i, &p) in ptrs.iter().enumerate() {
            if p % 16 != 0 {
                return Err(format!("b{i} at {p:#x} is not 16-byte aligned"));
            }
            let end = match plan.buffers[i] {
                BufferLoc::Arena { .. } => arena + plan.arena_bytes as u64,
                BufferLoc::Const { .. } => consts + plan.const_bytes as u64,
                BufferLoc::Input { .. } if dev.is_none() => arena + plan.arena_bytes as u64,
                BufferLoc::Input { .. } => u64::MAX,
            };
            if range(i).1 > end {
                return Err(format!("b{i} ends past its region"));
            }
        }
        for (s, step) in program.steps.iter().enumerate() {
            let (reads, writes): (Vec<usize>, Vec<usize>) = match step {
                Step::Kernel(k) => (
                    k.reads.iter().map(|b| b.0 as usize).collect(),
                    k.writes.iter().map(|b| b.0 as usize).collect(),
                ),
                Step::Gemm(g) => (
                    vec![g.a.buffer.0 as usize, g.b.buffer.0 as usize],
                    vec![g.out.0 as usize],
                ),
            };
            for &w in &writes {
                for &o in reads.iter().chain(&writes) {
                    if o == w || plan.bytes[o] == 0 || plan.bytes[w] == 0 {
                        continue;
                    }
                    let (a, b) = (range(w), range(o));
                    if a.0 < b.1 && b.0 < a.1 {
                        return Err(format!("step {s}: b{w} overlaps b{o}"));
                    }
                }
            }
        }
    }
    Ok(())
}

fn corpus_programs() -> Vec<(String, Graph, Program)> {
    let mut all = Vec::new();
    for (name, graph) in cuda_corpus_graphs::graphs() {
        for fuse in [true, false] {
            let program = cuda_corpus_graphs::lowered(name, &graph, fuse);
            let what = format!("{name}{}", if fuse { "" } else { "_unfused" });
            all.push((what, graph.clone(), program));
        }
    }
    all
}

#[test]
fn corpus_plans_keep_the_launch_contract() {
    let mut gemms = 0;
    for (name, _, program) in corpus_programs() {
        for backend in [GemmBackend::Cublas, GemmBackend::Fallback] {
            for bound in [false, true] {
                let plan = LaunchPlan::build(&program, &|_| bound, backend)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                check_plan(&program, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
                check_pointers(&program, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
                gemms += plan
                    .steps
                    .iter()
                    .filter(|s| matches!(s, LaunchStep::Cublas(_)))
                    .count();
            }
        }
    }
    assert!(gemms > 0, "the corpus has cuBLAS GEMMs");
}

#[test]
fn random_graph_plans_keep_the_launch_contract() {
    for (i, (_, _, program)) in random_programs(200).iter().enumerate() {
        for backend in [GemmBackend::Cublas, GemmBackend::Fallback] {
            let plan = LaunchPlan::build(program, &|n| n.len() % 2 == 0, backend)
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
            check_plan(program, &plan).unwrap_or_else(|e| panic!("case {i}: {e}"));
            check_pointers(program, &plan).unwrap_or_else(|e| panic!("case {i}: {e}"));
        }
    }
}

const GEMM_DTYPES: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
];

/// The plans' CUDA C (fallback GEMMs of every dtype included) compiles for sm_90.
#[test]
fn plan_sources_with_fallback_gemms_compile_for_sm90() {
    if !nvrtc_or_skip("plan_sources_with_fallback_gemms_compile_for_sm90") {
        return;
    }
    let sm90 = Arch::parse("sm_90").unwrap();
    let nv = nvrtc().unwrap();
    let mut sources = Vec::new();
    for d in GEMM_DTYPES {
        let plan = LaunchPlan::build(
            &gemm_program(d, 2, 3, 5, 4),
            &|_| false,
            GemmBackend::Fallback,
        )
        .unwrap();
        assert_eq!(plan.fallbacks.len(), 1);
        sources.push((format!("gemm_{d}"), plan.source));
    }
    for (name, _, program) in corpus_programs() {
        let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Fallback).unwrap();
        if !plan.fallbacks.is_empty() {
            sources.push((name, plan.source));
        }
    }
    std::thread::scope(|s| {
        let jobs: Vec<_> = sources
            .iter()
            .map(|(name, src)| {
                s.spawn(move || {
                    let r =
                        nv.compile(src, &format!("{name}.cu"), sm90, &CompileOptions::default());
                    (name, r)
                })
            })
            .collect();
        for j in jobs {
            let (name, r) = j.join().unwrap();
            let k = r.unwrap_or_else(|e| panic!("{name}:\n{e}"));
            assert!(!k.log.contains("warning"), "{name}: {}", k.log);
        }
    });
}

// ---------------------------------------------------------------- GPU tests

fn compile(
    program: &Program,
    graph: &Graph,
    params: &HashMap<String, HostTensor>,
    options: &CudaOptions,
) -> Result<CudaProgram, String> {
    let mut exe =
        CudaProgram::compile(program, params, options).map_err(|e| format!("compile: {e}"))?;
    for (name, id) in graph.outputs() {
        exe.set_output_shape(name, graph.ty(*id).shape.clone())
            .map_err(|e| format!("output shape: {e}"))?;
    }
    Ok(exe)
}

/// Runs `program` (lowered from `graph`) on the GPU and compares with the interpreter;
/// `Ok(false)` when the interpreter rejects the bindings.
fn check_on_gpu(
    what: &str,
    graph: &Graph,
    program: &Program,
    bindings: &HashMap<String, HostTensor>,
    bind_params: bool,
) -> Result<bool, String> {
    let Ok(want) = eval(graph, bindings) else {
        return Ok(false);
    };
    let params: HashMap<String, HostTensor> = if bind_params {
        graph
            .bindings()
            .filter(|b| b.3)
            .filter_map(|(n, ..)| bindings.get(n).map(|t| (n.to_string(), t.clone())))
            .collect()
    } else {
        HashMap::new()
    };
    let exe = compile(program, graph, &params, &CudaOptions::default())?;
    let got = exe.run(bindings).map_err(|e| format!("run: {e}"))?;
    check_outputs(what, graph, program, bindings, &want, &got)?;
    Ok(true)
}

/// Random bindings for `graph` (the LLVM PTX comparison's; only built with `llvm`).
#[cfg(feature = "llvm")]
fn draw_bindings(
    graph: &Graph,
    runner: &mut proptest::test_runner::TestRunner,
) -> HashMap<String, HostTensor> {
    use proptest::strategy::{Strategy, ValueTree};
    smelt_ir::arbitrary::arb_bindings(graph)
        .new_tree(runner)
        .expect("bindings")
        .current()
}

#[test]
fn corpus_programs_match_the_interpreter_on_the_gpu() {
    if !gpu_or_skip("corpus_programs_match_the_interpreter_on_the_gpu") {
        return;
    }
    let mut failures = Vec::new();
    for (i, (name, graph, program)) in corpus_programs().into_iter().enumerate() {
        // Model-like values: with arbitrary ones (specials, huge magnitudes) an f32 GEMM
        // whose partial sums overflow cannot be compared with the interpreter's f64 one.
        let bindings = model_bindings(&graph, 100 * i as u64);
        match check_on_gpu(&name, &graph, &program, &bindings, i % 2 == 0) {
            Ok(true) => {}
            Ok(false) => println!("{name}: the interpreter rejected the bindings"),
            Err(e) => failures.push(e),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn random_graphs_match_the_interpreter_on_the_gpu() {
    if !gpu_or_skip("random_graphs_match_the_interpreter_on_the_gpu") {
        return;
    }
    // Cases are spread over worker threads: NVRTC compiles dominate, and the programs then
    // run concurrently on their own streams.
    let all = random_programs(fuzz_cases(64));
    let results = on_workers(&all, |case, (graph, bindings, program)| {
        check_on_gpu(
            &format!("case {case}"),
            graph,
            program,
            bindings,
            case % 2 == 0,
        )
    });
    assert_fuzz_results("on the GPU", &all, results);
}

/// The mlp corpus graph (GEMMs + elementwise), its program and bindings.
fn mlp() -> (Graph, Program, HashMap<String, HostTensor>) {
    let (_, graph) = cuda_corpus_graphs::graphs()
        .into_iter()
        .find(|(n, _)| *n == "mlp")
        .expect("the mlp corpus graph");
    let program = cuda_corpus_graphs::lowered("mlp", &graph, true);
    let bindings = model_bindings(&graph, 7);
    (graph, program, bindings)
}

/// A dropped device tensor's block goes to the pool and the next tensor of its byte size gets
/// it back, zeroed when asked for zeros whatever was in it; another size gets another block;
/// `empty_device_cache` gives the blocks back to the driver. (An odd size, so that the other
/// tests of this binary, running at the same time, do not take the block in between.)
#[test]
fn device_tensors_reuse_freed_blocks_of_their_size() {
    use smelt_runtime::cuda::{cached_device_bytes, empty_device_cache};
    if !gpu_or_skip("device_tensors_reuse_freed_blocks_of_their_size") {
        return;
    }
    let ctx = cuda_context(0).unwrap();
    let n = 3_086_419;
    let a = DeviceTensor::zeros(&ctx, DType::F32, Shape::new(&[n])).unwrap();
    let block = a.device_ptr();
    drop(a);
    assert!(cached_device_bytes() >= 4 * n);
    let ones = HostTensor::from_f32([n], vec![1.0; n]).unwrap();
    let b = DeviceTensor::from_host(&ctx, &ones).unwrap();
    assert_eq!(b.device_ptr(), block, "same size: the pooled block");
    assert_eq!(b.to_host().unwrap().to_f32_vec(), ones.to_f32_vec());
    drop(b);
    let c = DeviceTensor::zeros(&ctx, DType::F32, Shape::new(&[n])).unwrap();
    assert_eq!(c.device_ptr(), block);
    assert!(c.to_host().unwrap().to_f32_vec().iter().all(|&v| v == 0.0));
    let other = DeviceTensor::zeros(&ctx, DType::F32, Shape::new(&[n + 1])).unwrap();
    assert_ne!(other.device_ptr(), block, "another size: another block");
    drop(c);
    drop(other);
    assert!(empty_device_cache() >= 8 * n);
}

#[test]
fn run_run_into_and_device_runs_agree() {
    if !gpu_or_skip("run_run_into_and_device_runs_agree") {
        return;
    }
    let (graph, program, bindings) = mlp();
    let exe = compile(&program, &graph, &HashMap::new(), &CudaOptions::default()).unwrap();
    let a = exe.run(&bindings).unwrap();
    let mut outs: Vec<HostTensor> = exe
        .outputs()
        .map(|(_, d, s)| HostTensor::zeros(d, s.clone()))
        .collect();
    exe.run_into(&bindings, &mut outs).unwrap();
    let dev_in: HashMap<String, DeviceTensor> = bindings
        .iter()
        .map(|(n, t)| (n.clone(), exe.upload(t).unwrap()))
        .collect();
    let dev_out = exe.run_device(&dev_in).unwrap();
    let stream = cuda_context(0).unwrap().new_stream().unwrap();
    let on_stream = exe.run_on_stream(&stream, &bindings).unwrap();
    for (i, (name, t)) in a.iter().enumerate() {
        check_bits(name, &outs[i], t).unwrap();
        check_bits(name, &dev_out[i].1.to_host().unwrap(), t).unwrap();
        check_bits(name, &on_stream[i].1, t).unwrap();
        assert_eq!(dev_out[i].0, *name);
    }
    // Chaining: the device outputs feed a second run without host copies.
    let mut again = exe.run_device(&dev_in).unwrap();
    let mut into: Vec<DeviceTensor> = again.drain(..).map(|(_, t)| t).collect();
    exe.run_device_into(&dev_in, &mut into).unwrap();
    for (i, (name, t)) in a.iter().enumerate() {
        check_bits(name, &into[i].to_host().unwrap(), t).unwrap();
    }
}

#[test]
fn two_programs_on_two_streams_concurrently_give_identical_results() {
    if !gpu_or_skip("two_programs_on_two_streams_concurrently_give_identical_results") {
        return;
    }
    let (graph, program, bindings) = mlp();
    let ctx = cuda_context(0).unwrap();
    let options = |s| CudaOptions {
        stream: Some(s),
        ..CudaOptions::default()
    };
    let p1 = compile(
        &program,
        &graph,
        &HashMap::new(),
        &options(ctx.new_stream().unwrap()),
    )
    .unwrap();
    let p2 = compile(
        &program,
        &graph,
        &HashMap::new(),
        &options(ctx.new_stream().unwrap()),
    )
    .unwrap();
    let want = p1.run(&bindings).unwrap();
    let shared = Arc::new(p1);
    std::thread::scope(|s| {
        let jobs: Vec<_> = [shared.as_ref(), &p2, shared.as_ref(), &p2]
            .into_iter()
            .map(|p| {
                let (bindings, want) = (&bindings, &want);
                s.spawn(move || {
                    for _ in 0..20 {
                        let got = p.run(bindings).unwrap();
                        for ((name, g), (_, w)) in got.iter().zip(want) {
                            check_bits(name, g, w).unwrap();
                        }
                    }
                })
            })
            .collect();
        for j in jobs {
            j.join().unwrap();
        }
    });
}

#[test]
fn cublas_and_the_fallback_gemm_agree() {
    if !gpu_or_skip("cublas_and_the_fallback_gemm_agree") {
        return;
    }
    for d in GEMM_DTYPES {
        let program = gemm_program(d, 3, 17, 33, 9);
        let bindings: HashMap<String, HostTensor> = [("a", vec![3, 17, 33]), ("w", vec![9, 33])]
            .into_iter()
            .enumerate()
            .map(|(seed, (n, dims))| {
                let v = floats(dims.iter().product(), seed as u64, 8.0, false);
                (n.to_string(), tensor(d, &dims, &v))
            })
            .collect();
        let cublas =
            CudaProgram::compile(&program, &HashMap::new(), &CudaOptions::default()).unwrap();
        let fallback = CudaProgram::compile(
            &program,
            &HashMap::new(),
            &CudaOptions {
                no_cublas: true,
                ..CudaOptions::default()
            },
        )
        .unwrap();
        assert!(fallback.gemm_note().is_some());
        let a = cublas.run(&bindings).unwrap();
        let b = fallback.run(&bindings).unwrap();
        let want = smelt_passes::kernel::eval_program(&program, &bindings).unwrap();
        let (rt, at) = fuzz_tolerance(d, true);
        check_close_with(&format!("{d} cuBLAS"), &a[0].1, &want[0].1, rt, at, true).unwrap();
        check_close_with(&format!("{d} fallback"), &b[0].1, &want[0].1, rt, at, true).unwrap();
    }
}

#[test]
fn bad_inputs_and_outputs_are_typed_errors() {
    if !gpu_or_skip("bad_inputs_and_outputs_are_typed_errors") {
        return;
    }
    let program = gemm_program(DType::F32, 2, 3, 4, 5);
    let exe = CudaProgram::compile(&program, &HashMap::new(), &CudaOptions::default()).unwrap();
    let a = HostTensor::zeros(DType::F32, Shape::new(&[2, 3, 4]));
    let w = HostTensor::zeros(DType::F32, Shape::new(&[5, 4]));
    let missing = HashMap::from([("a".to_string(), a.clone())]);
    assert!(matches!(
        exe.run(&missing),
        Err(CudaExecError::MissingBinding { name }) if name == "w"
    ));
    let wrong = HashMap::from([
        ("a".to_string(), a.clone()),
        (
            "w".to_string(),
            HostTensor::zeros(DType::F64, Shape::new(&[5, 4])),
        ),
    ]);
    assert!(matches!(
        exe.run(&wrong),
        Err(CudaExecError::Binding { .. })
    ));
    let ok = HashMap::from([("a".to_string(), a), ("w".to_string(), w)]);
    let mut none: Vec<HostTensor> = Vec::new();
    assert!(matches!(
        exe.run_into(&ok, &mut none),
        Err(CudaExecError::Output { .. })
    ));
    let mut bad = vec![HostTensor::zeros(DType::F32, Shape::new(&[7]))];
    assert!(matches!(
        exe.run_into(&ok, &mut bad),
        Err(CudaExecError::Output { .. })
    ));
    let dev: HashMap<String, DeviceTensor> = HashMap::from([
        (
            "a".to_string(),
            exe.upload(&HostTensor::zeros(DType::I32, Shape::new(&[2, 3, 4])))
                .unwrap(),
        ),
        ("w".to_string(), exe.upload(&ok["w"]).unwrap()),
    ]);
    assert!(matches!(
        exe.run_device(&dev),
        Err(CudaExecError::Binding { .. })
    ));
    // A bound parameter of the wrong shape is refused at compile time.
    let params = HashMap::from([(
        "w".to_string(),
        HostTensor::zeros(DType::F32, Shape::new(&[4, 4])),
    )]);
    assert!(matches!(
        CudaProgram::compile(&program, &params, &CudaOptions::default()),
        Err(CudaExecError::Binding { .. })
    ));
    // Still usable after the errors.
    assert_eq!(exe.run(&ok).unwrap()[0].1.numel(), 30);
}

/// A gather index outside its axis is a typed error on the GPU, as on the CPU (the kernels'
/// status word), with either code generator; the program stays usable and the word is
/// cleared, so the next in-range run succeeds with the interpreter's values.
#[test]
fn out_of_range_gathers_are_typed_errors_on_the_gpu() {
    if !gpu_or_skip("out_of_range_gathers_are_typed_errors_on_the_gpu") {
        return;
    }
    let (g, program, table) = gather_case();
    let params = HashMap::from([("table".to_string(), table.clone())]);
    let ids = gather_ids;
    let mut codegens = vec![CudaOptions::default()];
    if cfg!(feature = "llvm") {
        codegens.push(CudaOptions {
            codegen: smelt_runtime::cuda::CudaCodegen::Llvm,
            ..CudaOptions::default()
        });
    }
    for options in codegens {
        let exe = match compile(&program, &g, &params, &options) {
            Ok(e) => e,
            Err(e) if options.codegen != CudaOptions::default().codegen => {
                println!("LLVM path unavailable: {e}");
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        for bad in [10i64, -11, i64::MAX] {
            let e = exe.run(&ids(vec![3, bad, 9, 1])).unwrap_err();
            assert!(
                matches!(e, CudaExecError::IndexOutOfRange { .. }),
                "{:?}, id {bad}: {e}",
                options.codegen
            );
        }
        let good = ids(vec![3, 0, 9, 1]);
        let mut with = good.clone();
        with.insert("table".to_string(), table.clone());
        let want = eval(&g, &with).unwrap();
        let got = exe.run(&good).unwrap();
        check_bits("in-range gather after faults", &got[0].1, &want[0].1).unwrap();
    }
}

/// The LLVM NVPTX path names and orders its entries like the plan's generated kernels, so the
/// executor can swap its module in (no GPU needed).
#[cfg(feature = "llvm")]
#[test]
fn llvm_ptx_entries_match_the_plan() {
    use smelt_codegen::llvm::nvptx::{ptx_program, NvptxOptions};
    let libdevice = smelt_runtime::cuda::ptxas_path()
        .ok()
        .and_then(|p| smelt_codegen::llvm::nvptx::libdevice_beside_ptxas(&p))
        .and_then(|p| smelt_codegen::llvm::nvptx::Libdevice::read(&p).ok());
    let options = NvptxOptions {
        libdevice,
        ..NvptxOptions::default()
    };
    let mut checked = 0;
    for (name, _, program) in corpus_programs() {
        let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
        let ptx = match ptx_program(&program, "sm_90", &options) {
            Ok(p) => p,
            Err(e) => {
                println!("{name}: no PTX ({e})");
                continue;
            }
        };
        let want: Vec<&String> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                LaunchStep::Kernel(k) if !k.gemm_fallback => Some(&plan.entries[k.entry]),
                _ => None,
            })
            .collect();
        let got: Vec<&String> = ptx.entries.iter().map(|e| &e.name).collect();
        assert_eq!(got, want, "{name}");
        for (e, step) in ptx
            .entries
            .iter()
            .zip(plan.steps.iter().filter_map(|s| match s {
                LaunchStep::Kernel(k) if !k.gemm_fallback => Some(k),
                _ => None,
            }))
        {
            assert_eq!(
                KernelArg::Count(e.extent),
                *step.args.last().unwrap(),
                "{name}"
            );
            assert_eq!(e.buffers + 1, step.args.len(), "{name}");
        }
        checked += 1;
    }
    assert!(checked > 0, "no corpus program made PTX");
}

/// On the fake driver of `scripts/build-fake-cuda.sh` only: what it claims to catch, it
/// catches. A copy reaching past a device allocation, or from memory that is not one, is a
/// typed error naming the call and the allocation, and memory a copy has not written reads
/// as the fill pattern (NaN), not as zeros.
#[test]
fn the_fake_driver_checks_every_range() {
    if !gpu_or_skip("the_fake_driver_checks_every_range") {
        return;
    }
    let info = cuda_device(0).unwrap();
    if !info.is_fake() {
        // scripts/test.sh sets this where the device must be the fake one.
        assert!(
            std::env::var_os("SMELT_EXPECT_FAKE_CUDA").is_none_or(|v| v != "1"),
            "SMELT_EXPECT_FAKE_CUDA=1, but the device is {:?}, not {FAKE_DEVICE_NAME:?}",
            info.name
        );
        println!("the_fake_driver_checks_every_range: skipped, a real GPU");
        return;
    }
    let ctx = cuda_context(0).unwrap();
    let t = DeviceTensor::zeros(&ctx, DType::F32, Shape::new(&[64])).unwrap();
    let host = vec![0u8; 257];
    // SAFETY: the fake driver checks the range and writes nothing when it is bad.
    let past = unsafe { cudarc::driver::result::memcpy_htod_sync(t.device_ptr(), host.as_slice()) };
    let e = format!("{:?}", past.unwrap_err());
    assert!(
        e.contains("cuMemcpyHtoD")
            && e.contains("runs 1 bytes past the end of its device allocation of 256 bytes"),
        "{e}"
    );
    // SAFETY: as above.
    let nowhere = unsafe { cudarc::driver::result::memcpy_htod_sync(16, &host[..4]) };
    let e = format!("{:?}", nowhere.unwrap_err());
    assert!(e.contains("is not in any live device allocation"), "{e}");
    // A fresh allocation is not zeroed (DeviceTensor::zeros writes its zeros itself).
    // SAFETY: the context is current (cuda_context bound it); freed below.
    let ptr = unsafe { cudarc::driver::result::malloc_sync(16) }.unwrap();
    let mut back = [0f32; 4];
    // SAFETY: 16 bytes from a live 16-byte allocation into a 16-byte host array.
    unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut back, ptr) }.unwrap();
    assert!(back.iter().all(|v| v.is_nan()), "{back:?}");
    // SAFETY: allocated above, freed once.
    unsafe { cudarc::driver::result::free_sync(ptr) }.unwrap();
}

/// On a GPU with the `llvm` feature: the LLVM PTX path gives the NVRTC path's results (within
/// the fuzz tolerances: its reductions run in another order).
#[cfg(feature = "llvm")]
#[test]
fn llvm_ptx_programs_match_nvrtc_on_the_gpu() {
    if !gpu_or_skip("llvm_ptx_programs_match_nvrtc_on_the_gpu") {
        return;
    }
    if cuda_device(0).is_ok_and(|d| d.is_fake()) {
        // The fake driver runs the fake NVRTC's images only, never PTX.
        println!(
            "llvm_ptx_programs_match_nvrtc_on_the_gpu: skipped, the fake CUDA driver runs no PTX"
        );
        return;
    }
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let llvm = CudaOptions {
        codegen: smelt_runtime::cuda::CudaCodegen::Llvm,
        ..CudaOptions::default()
    };
    let mut ran = 0;
    for (name, graph, program) in corpus_programs() {
        let bindings = draw_bindings(&graph, &mut runner);
        let a = compile(&program, &graph, &HashMap::new(), &CudaOptions::default()).unwrap();
        let b = match compile(&program, &graph, &HashMap::new(), &llvm) {
            Ok(b) => b,
            // Without libdevice (beside ptxas) kernels with transcendental math cannot be
            // built; any other failure is one.
            Err(e) if e.to_string().contains("no libdevice was") => {
                println!("{name}: LLVM path unavailable: {e}");
                continue;
            }
            Err(e) => panic!("{name}: the LLVM PTX path failed: {e}"),
        };
        let (x, y) = (a.run(&bindings).unwrap(), b.run(&bindings).unwrap());
        for ((n, g), (_, w)) in y.iter().zip(&x) {
            let (rt, at) = fuzz_tolerance(w.dtype(), true);
            check_close_with(&format!("{name}: {n}"), g, w, rt, at, true).unwrap();
        }
        ran += 1;
    }
    println!("{ran} corpus programs ran through the LLVM PTX path");
    assert!(ran > 0, "no corpus program ran through the LLVM PTX path");
}
