//! The CUDA C of the launch path, run on the CPU by `smelt_runtime::cuda::emulate` (issue 5,
//! without a GPU): the plan corpus, random graphs, row kernels at every strategy threshold
//! and unaligned views against the reference interpreter, with the tolerances of
//! `cpu_exec_fuzz.rs` (downstream of an accumulation, `eval_program`'s f32-accumulated value
//! is accepted where it differs from the interpreter's f64 one); GEMMs through cuBLAS-planned
//! calls (computed on the host) and through the fallback GEMM kernels; range-checked gathers;
//! bad bindings.
//!
//! Needs a C++17 compiler (`c++`, `g++`, `clang++`, or `$SMELT_CXX`/`$CXX`); without one the
//! tests print why and return, unless `SMELT_REQUIRE_CXX=1` (set by `scripts/test.sh`).

mod cpu_exec_support;
#[path = "../../codegen/tests/cuda_corpus_graphs/mod.rs"]
mod cuda_corpus_graphs;

use cpu_exec_support::{
    assert_fuzz_results, assert_no_failures, check_bits, check_close_with, check_outputs, floats,
    fuzz_cases, fuzz_tolerance, gather_case, gather_ids, gemm_program, model_bindings, on_workers,
    random_programs, tensor,
};
use smelt_ir::interp::eval;
use smelt_ir::{DType, Graph, HostTensor};
use smelt_passes::kernel::Program;
use smelt_passes::{optimize, PassOptions};
use smelt_runtime::cuda::emulate::{host_compiler, EmulatedProgram, EmulatorOptions};
use smelt_runtime::cuda::launch::{GemmBackend, LaunchStep};
use smelt_runtime::cuda::CudaExecError;
use std::collections::HashMap;

fn compiler_or_skip(test: &str) -> bool {
    match host_compiler(None) {
        Ok(_) => true,
        Err(e) if std::env::var_os("SMELT_REQUIRE_CXX").is_some_and(|v| v == "1") => {
            panic!("{test}: SMELT_REQUIRE_CXX=1 but {e}")
        }
        Err(e) => {
            println!("{test}: skipped: {e}");
            false
        }
    }
}

/// Runs `program` (lowered from `graph`) in the emulator on `bindings` (parameters bound at
/// compile time with `bind_params`; at most `grid_limit` blocks per launch) and compares with
/// `want`, the interpreter's outputs.
#[allow(clippy::too_many_arguments)]
fn check_emulated(
    what: &str,
    graph: &Graph,
    program: &Program,
    bindings: &HashMap<String, HostTensor>,
    want: &[(String, HostTensor)],
    bind_params: bool,
    gemm: GemmBackend,
    grid_limit: Option<u32>,
) -> Result<(), String> {
    let params: HashMap<String, HostTensor> = if bind_params {
        graph
            .bindings()
            .filter(|b| b.3)
            .filter_map(|(n, ..)| bindings.get(n).map(|t| (n.to_string(), t.clone())))
            .collect()
    } else {
        HashMap::new()
    };
    let options = EmulatorOptions {
        gemm,
        grid_limit,
        ..EmulatorOptions::default()
    };
    let mut exe = EmulatedProgram::compile(program, &params, &options)
        .map_err(|e| format!("{what}: compile: {e}"))?;
    for (name, id) in graph.outputs() {
        exe.set_output_shape(name, graph.ty(*id).shape.clone())
            .map_err(|e| format!("{what}: output shape: {e}"))?;
    }
    let got = exe.run(bindings).map_err(|e| format!("{what}: run: {e}"))?;
    check_outputs(what, graph, program, bindings, want, &got)
}

/// Every corpus graph (with [`model_bindings`]), fused (cuBLAS-planned GEMMs, parameters
/// bound at compile time) and unfused (fallback GEMM kernels, parameters bound at run time),
/// on the same bindings.
#[test]
fn corpus_programs_match_the_interpreter_in_the_emulator() {
    if !compiler_or_skip("corpus_programs_match_the_interpreter_in_the_emulator") {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for (i, (name, graph)) in cuda_corpus_graphs::graphs().into_iter().enumerate() {
        let bindings = model_bindings(&graph, 100 * i as u64);
        let want = eval(&graph, &bindings).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (fuse, gemm) in [(true, GemmBackend::Cublas), (false, GemmBackend::Fallback)] {
            let program = cuda_corpus_graphs::lowered(name, &graph, fuse);
            let what = format!("{name}{}", if fuse { "" } else { "_unfused" });
            // Unfused, every kernel launches at most 3 blocks, which loop over the rest.
            let grid = if fuse { None } else { Some(3) };
            match check_emulated(&what, &graph, &program, &bindings, &want, fuse, gemm, grid) {
                Ok(()) => ran += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    assert_no_failures(ran, &failures);
}

/// The differential fuzz of `cuda_exec.rs`, in the emulator: random graphs (every dtype,
/// broadcasts, reductions, GEMMs, gathers; a quarter unfused) against the interpreter.
/// `SMELT_FUZZ_CASES` sets the count (default 200).
#[test]
fn random_graphs_match_the_interpreter_in_the_emulator() {
    if !compiler_or_skip("random_graphs_match_the_interpreter_in_the_emulator") {
        return;
    }
    let all = random_programs(fuzz_cases(200));
    let results = on_workers(&all, |case, (graph, bindings, program)| {
        let Ok(want) = eval(graph, bindings) else {
            return Ok(false);
        };
        let gemm = if case % 3 == 0 {
            GemmBackend::Fallback
        } else {
            GemmBackend::Cublas
        };
        let grid_limit = (case % 5 == 1).then_some(2);
        let what = format!("case {case}");
        let bind = case % 2 == 0;
        check_emulated(
            &what, graph, program, bindings, &want, bind, gemm, grid_limit,
        )
        .map(|()| true)
    });
    assert_fuzz_results("in the emulator", &all, results);
}

/// A gather index outside its axis is the typed error of the GPU path (the kernels' status
/// word); the word is cleared for the next run, which gives the interpreter's values.
#[test]
fn out_of_range_gathers_are_typed_errors_in_the_emulator() {
    if !compiler_or_skip("out_of_range_gathers_are_typed_errors_in_the_emulator") {
        return;
    }
    let (g, program, table) = gather_case();
    let params = HashMap::from([("table".to_string(), table.clone())]);
    let ids = gather_ids;
    let mut exe = EmulatedProgram::compile(&program, &params, &EmulatorOptions::default()).unwrap();
    exe.set_output_shape("rows", [4, 6].as_slice().into())
        .unwrap();
    for bad in [10i64, -11, i64::MAX] {
        let e = exe.run(&ids(vec![3, bad, 9, 1])).unwrap_err();
        assert!(
            matches!(e, CudaExecError::IndexOutOfRange { .. }),
            "id {bad}: {e}"
        );
    }
    let good = ids(vec![3, 0, 9, 1]);
    let mut with = good.clone();
    with.insert("table".to_string(), table);
    let want = eval(&g, &with).unwrap();
    let got = exe.run(&good).unwrap();
    check_bits("in-range gather after faults", &got[0].1, &want[0].1).unwrap();
}

/// Missing and mismatched inputs are the GPU path's typed errors, before anything runs.
#[test]
fn bad_inputs_are_typed_errors_in_the_emulator() {
    if !compiler_or_skip("bad_inputs_are_typed_errors_in_the_emulator") {
        return;
    }
    let (_, graph) = cuda_corpus_graphs::graphs()
        .into_iter()
        .find(|(n, _)| *n == "softmax")
        .unwrap();
    let program = cuda_corpus_graphs::lowered("softmax", &graph, true);
    let exe =
        EmulatedProgram::compile(&program, &HashMap::new(), &EmulatorOptions::default()).unwrap();
    let e = exe.run(&HashMap::new()).unwrap_err();
    assert!(matches!(e, CudaExecError::MissingBinding { .. }), "{e}");
    let (name, _, _, _) = graph.bindings().next().unwrap();
    let wrong = HashMap::from([(name.to_string(), tensor(DType::F64, &[3], &[1.0, 2.0, 3.0]))]);
    let e = exe.run(&wrong).unwrap_err();
    assert!(matches!(e, CudaExecError::Binding { .. }), "{e}");
    assert!(e.to_string().contains(name), "{e}");
}

/// A batched GEMM with a transposed, batch-broadcast right operand, for every dtype: through
/// the host stand-in for cuBLAS (float dtypes) and through the fallback GEMM kernel, against
/// `eval_program`.
#[test]
fn host_and_fallback_gemms_match_eval_program_for_every_dtype() {
    if !compiler_or_skip("host_and_fallback_gemms_match_eval_program_for_every_dtype") {
        return;
    }
    for d in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ] {
        let program = gemm_program(d, 3, 17, 33, 9);
        let bindings: HashMap<String, HostTensor> = [("a", vec![3, 17, 33]), ("w", vec![9, 33])]
            .into_iter()
            .enumerate()
            .map(|(seed, (n, dims))| {
                let v = floats(dims.iter().product(), seed as u64, 8.0, false);
                (n.to_string(), tensor(d, &dims, &v))
            })
            .collect();
        let want = smelt_passes::kernel::eval_program(&program, &bindings).unwrap();
        let (rt, at) = fuzz_tolerance(d, true);
        for gemm in [GemmBackend::Cublas, GemmBackend::Fallback] {
            let options = EmulatorOptions {
                gemm,
                ..EmulatorOptions::default()
            };
            let exe = EmulatedProgram::compile(&program, &HashMap::new(), &options).unwrap();
            let planned_cublas = exe
                .plan()
                .steps
                .iter()
                .any(|s| matches!(s, LaunchStep::Cublas(_)));
            assert_eq!(
                planned_cublas,
                gemm == GemmBackend::Cublas && d.is_float(),
                "{d} {gemm:?}"
            );
            let got = exe.run(&bindings).unwrap();
            check_close_with(
                &format!("{d} {gemm:?}"),
                &got[0].1,
                &want[0].1,
                rt,
                at,
                false,
            )
            .unwrap();
        }
    }
}

/// A traced `graph` through the default pipeline, lowered and checked in the emulator (at
/// most `grid_limit` blocks per launch) against the interpreter on [`model_bindings`] drawn
/// with `seed`.
fn check_traced(
    what: &str,
    graph: &Graph,
    seed: u64,
    grid_limit: Option<u32>,
) -> Result<(), String> {
    let bindings = model_bindings(graph, seed);
    let want = eval(graph, &bindings).map_err(|e| format!("{what}: interpreter: {e}"))?;
    let opt = optimize(graph, &PassOptions::default()).map_err(|e| format!("{what}: {e}"))?;
    let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan)
        .map_err(|e| format!("{what}: lower: {e}"))?;
    let gemm = GemmBackend::Cublas;
    check_emulated(
        what, graph, &program, &bindings, &want, false, gemm, grid_limit,
    )
}

/// Elementwise kernels large enough for several 16-byte packs per thread (`smelt_codegen::cuda`
/// gives 4 to kernels of up to 2 input packs and 2 to kernels of 3 or 4 once the grid keeps
/// 128 blocks), with a tail of packs that fills no whole block and a grid of 7 blocks that
/// loops, against the interpreter.
#[test]
fn elementwise_kernels_with_several_packs_per_thread_match_the_interpreter_in_the_emulator() {
    use smelt_frontend::Tracer;
    if !compiler_or_skip("elementwise_kernels_with_several_packs_per_thread") {
        return;
    }
    // 131072 + 1003 packs of 4 f32: 4 packs per thread with one input, 2 with three.
    let (rows, cols) = (1003 + 131072 / 256, 1024);
    let mut failures = Vec::new();
    let mut ran = 0;
    for inputs in [1, 3] {
        let t = Tracer::new();
        let x = t.input("x", DType::F32, [rows, cols]).unwrap();
        let y = x
            .mul(1.5)
            .unwrap()
            .add(0.5)
            .unwrap()
            .tanh()
            .unwrap()
            .mul(&x)
            .unwrap();
        let y = if inputs == 3 {
            let r = t.input("r", DType::F32, [rows, cols]).unwrap();
            let b = t.input("b", DType::F32, [cols]).unwrap();
            y.add(&b).unwrap().mul(&r).unwrap()
        } else {
            y
        };
        t.output("y", &y).unwrap();
        let graph = t.finish().unwrap();
        let what = format!("{inputs} input(s), [{rows}, {cols}]");
        match check_traced(&what, &graph, inputs, Some(7)) {
            Ok(()) => ran += 1,
            Err(e) => failures.push(e),
        }
    }
    assert_no_failures(ran, &failures);
}

/// Views at offsets that are not multiples of a 16-byte pack (slices, narrowed rows, f16 and
/// f64 as well as f32) run with the interpreter's values: the kernels use packs only where
/// every access is aligned, and the emulator reports a misaligned pack as an error.
#[test]
fn unaligned_views_match_the_interpreter_in_the_emulator() {
    use smelt_frontend::Tracer;
    if !compiler_or_skip("unaligned_views_match_the_interpreter_in_the_emulator") {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for d in [DType::F32, DType::F16, DType::F64] {
        for (start, len) in [(1, 8), (2, 8), (3, 12), (4, 8), (1, 16)] {
            let t = Tracer::new();
            let x = t.input("x", d, [6, 20]).unwrap();
            let y = t.input("y", d, [6, len]).unwrap();
            let v = x.narrow(1, start, len).unwrap();
            t.output("sum", &v.add(&y).unwrap()).unwrap();
            t.output("rows", &x.slice(0, 1..5).unwrap().mul(2.0).unwrap())
                .unwrap();
            let graph = t.finish().unwrap();
            let what = format!("{d} narrow({start}, {len})");
            match check_traced(&what, &graph, start as u64, None) {
                Ok(()) => ran += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    assert_no_failures(ran, &failures);
}

/// Elementwise kernels reading an operand transposed compute 32 x 32 tiles through shared
/// memory (`smelt_codegen::cuda::tiles`): an add of a transposed operand, a bare transposed
/// copy and a rank-4 permute that moves the last axis, in f32, f16, bf16, f64, i32 and bool
/// (copies only), at dims that are not multiples of 32 and on a grid of 3 blocks that loops
/// over the tiles, against the interpreter; each kernel's CUDA C must say it uses tiles, so
/// that a change of when tiles apply cannot leave this test idle.
#[test]
fn transposed_reads_in_shared_memory_tiles_match_the_interpreter_in_the_emulator() {
    use smelt_frontend::Tracer;
    if !compiler_or_skip("transposed_reads_in_shared_memory_tiles") {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for d in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::Bool,
    ] {
        for (b, m, n) in [(1, 45, 70), (2, 33, 40), (1, 64, 32)] {
            let t = Tracer::new();
            let y = t.input("y", d, [b, n, m]).unwrap();
            let yt = y.permute(&[0, 2, 1]).unwrap();
            t.output("copy", &yt).unwrap();
            if d != DType::Bool {
                let x = t.input("x", d, [b, m, n]).unwrap();
                t.output("sum", &x.add(&yt).unwrap()).unwrap();
            }
            let z = t.input("z", d, [b, n, 3, m]).unwrap();
            t.output("heads", &z.permute(&[0, 2, 3, 1]).unwrap())
                .unwrap();
            let graph = t.finish().unwrap();
            let what = format!("{d} [{b}, {m}, {n}]");
            let opt = optimize(&graph, &PassOptions::default()).unwrap();
            let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan).unwrap();
            let cuda = smelt_codegen::cuda::cuda_program_source(&program);
            let tiled = cuda
                .source
                .matches("x 32 tiles through shared memory")
                .count();
            if tiled != program.kernels().count() {
                failures.push(format!("{what}: {tiled} tiled kernels:\n{}", cuda.source));
                continue;
            }
            match check_traced(&what, &graph, m as u64, Some(3)) {
                Ok(()) => ran += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    assert_no_failures(ran, &failures);
}

/// Row kernels on both sides of every threshold of `smelt_codegen::cuda`'s row strategies
/// (thread per row up to 32, warp per row up to 1024 (one warp per block below 4096 rows, four
/// from 4096), block per row above; registers up to 8 per thread, i.e. 4096, re-reads beyond;
/// column reductions by thread from 2048 columns): softmax, layer_norm,
/// sums, max and argmax over rows and columns, in f32, f16 and bf16, against the interpreter.
#[test]
fn row_kernels_at_every_strategy_threshold_match_the_interpreter_in_the_emulator() {
    use smelt_frontend::{nn, Tracer};
    if !compiler_or_skip("row_kernels_at_every_strategy_threshold_match_the_interpreter") {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    let shapes = [
        (7, 1),
        (5, 31),
        (5, 32),
        (3, 33),
        (3, 128),
        (9, 1000),
        (3, 1024),
        (3, 1025),
        (4097, 40),
        (2, 4096),
        (2, 4097),
        (1, 9000),
    ];
    for d in [DType::F32, DType::F16, DType::BF16] {
        for (rows, n) in shapes {
            let t = Tracer::new();
            let x = t.input("x", d, [rows, n]).unwrap();
            t.output("softmax", &x.softmax(-1).unwrap()).unwrap();
            t.output(
                "layer_norm",
                &nn::layer_norm(&x, &[n], None, None, 1e-5).unwrap(),
            )
            .unwrap();
            t.output("sum", &x.sum(&[-1], false).unwrap()).unwrap();
            t.output("max", &x.max(&[-1], false).unwrap()).unwrap();
            t.output("argmax", &x.argmax(-1, false).unwrap()).unwrap();
            t.output("column_sum", &x.sum(&[0], true).unwrap()).unwrap();
            let graph = t.finish().unwrap();
            let what = format!("{d} [{rows}, {n}]");
            // Blocks looping over several rows (a shared scratch reused by the next row).
            let grid = (rows > 1).then_some(1);
            match check_traced(&what, &graph, n as u64, grid) {
                Ok(()) => ran += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    // Column reductions over many columns (the thread-per-column strategy).
    for n in [2047, 2048, 3000] {
        let t = Tracer::new();
        let x = t.input("x", DType::F32, [40, n]).unwrap();
        t.output("column_sum", &x.sum(&[0], false).unwrap())
            .unwrap();
        t.output("column_max", &x.max(&[0], false).unwrap())
            .unwrap();
        let graph = t.finish().unwrap();
        match check_traced(&format!("columns [40, {n}]"), &graph, n as u64, Some(2)) {
            Ok(()) => ran += 1,
            Err(e) => failures.push(e),
        }
    }
    assert_no_failures(ran, &failures);
}
