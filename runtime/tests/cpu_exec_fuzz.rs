//! Differential fuzzing of the CPU backend: random well-formed graphs (with their bindings) →
//! `smelt_passes::optimize` (fused and unfused) → `lower` → `CpuProgram`, against the
//! reference interpreter and against `eval_program` (the kernel IR evaluator).
//!
//! Tolerances (see `tolerance`):
//! - against `eval_program`, which accumulates in the same dtype and order as the kernels:
//!   torch.testing's defaults per dtype everywhere (the only expected differences are C libm
//!   vs Rust `libm` in `erf` and NaN payloads);
//! - against the interpreter: the defaults for outputs whose graph cone has no reduction or
//!   matmul; for the others, which the interpreter accumulates in f64 and the kernels in f32
//!   (or blocked GEMM order), `rtol = atol = 1e-3` for f32/f64 and `2e-2` (f16) / `8e-2` (bf16),
//!   since an f32 accumulation of n terms differs by up to ~n·2⁻²⁴ of the sum of magnitudes.
//!
//! Integers, bools, NaN positions and infinities are exact, except that in an output with an
//! accumulation (GEMMs against either oracle, reductions against the interpreter) any two
//! non-finite values match: an accumulation that overflows gives ±inf or NaN depending on its
//! order.
//!
//! Graphs on which the interpreter reports an error (integer division by zero, a gather index
//! out of range) are skipped. `SMELT_FUZZ_CASES` sets the number of graphs (default 256);
//! cases come from a fixed seed, so a failure reproduces with its case number.

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::check_close_with;
use proptest::strategy::Just;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use smelt_ir::arbitrary::{arb_bindings, arb_graph_with, GenConfig};
use smelt_ir::interp::eval;
use smelt_ir::{DType, Graph, HostTensor, NodeId, Op};
use smelt_passes::kernel::{eval_program, lower, Step};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Kernels, GEMMs and programs `eval_program` evaluated, over all checked graphs.
static STATS: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];
use smelt_passes::{optimize, PassOptions};
use smelt_runtime::cpu::CpuProgram;
use std::collections::HashMap;

fn cases() -> usize {
    std::env::var("SMELT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// `graph` with every value nobody reads named as an output too, so that no op is dead.
fn with_sinks_as_outputs(graph: Graph) -> Graph {
    let uses = graph.use_counts();
    let mut outputs = graph.outputs().to_vec();
    for id in graph.ids() {
        if uses[id.index()] == 0 {
            outputs.push((format!("sink{}", id.0), id));
        }
    }
    let g = Graph::from_parts(graph.nodes().to_vec(), outputs);
    match smelt_ir::verify(&g) {
        Ok(()) => g,
        Err(_) => graph,
    }
}

/// Whether the value of `out` depends on a reduction or a matmul (`gemm_only`: a matmul).
fn has_accumulation(g: &Graph, out: NodeId, gemm_only: bool) -> bool {
    let mut seen = vec![false; g.len()];
    let mut stack = vec![out];
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut seen[n.index()], true) {
            continue;
        }
        let op = &g.node(n).op;
        if matches!(op, Op::MatMul(..)) || (!gemm_only && matches!(op, Op::Reduce { .. })) {
            return true;
        }
        stack.extend(operands(op));
    }
    false
}

fn operands(op: &Op) -> Vec<NodeId> {
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => vec![],
        Op::Unary(_, a) | Op::Cast { input: a, .. } | Op::Reduce { input: a, .. } => vec![*a],
        Op::Reshape { input, .. }
        | Op::Permute { input, .. }
        | Op::Expand { input, .. }
        | Op::Slice { input, .. }
        | Op::Pad { input, .. } => vec![*input],
        Op::Binary(_, a, b) | Op::MatMul(a, b) => vec![*a, *b],
        Op::Where(c, a, b) => vec![*c, *a, *b],
        Op::Concat { inputs, .. } => inputs.to_vec(),
        Op::Gather { input, index, .. } | Op::IndexSelect { input, index, .. } => {
            vec![*input, *index]
        }
    }
}

fn tolerance(d: DType, loose: bool) -> (f64, f64) {
    match (d, loose) {
        (DType::F16, false) => (1e-3, 1e-5),
        (DType::BF16, false) => (1.6e-2, 1e-5),
        (DType::F32, false) => (1.3e-6, 1e-5),
        (DType::F64, false) => (1e-7, 1e-7),
        (DType::F16, true) => (2e-2, 2e-2),
        (DType::BF16, true) => (8e-2, 8e-2),
        (DType::F32 | DType::F64, true) => (1e-3, 1e-3),
        _ => (0.0, 0.0),
    }
}

/// Runs one graph fused and unfused; `Ok(false)` when the interpreter rejects it.
fn check_graph(graph: &Graph, bindings: &HashMap<String, HostTensor>) -> Result<bool, String> {
    let Ok(want) = eval(graph, bindings) else {
        return Ok(false);
    };
    for fuse in [true, false] {
        let opts = PassOptions {
            fuse,
            ..PassOptions::default()
        };
        let opt = optimize(graph, &opts).map_err(|e| format!("optimize: {e}"))?;
        let program = lower(&opt.graph, &opt.plan).map_err(|e| format!("lower: {e}"))?;
        let params: HashMap<String, HostTensor> = graph
            .bindings()
            .filter(|b| b.3)
            .filter_map(|(n, ..)| bindings.get(n).map(|t| (n.to_string(), t.clone())))
            .collect();
        let mut exe =
            CpuProgram::compile(&program, &params).map_err(|e| format!("compile: {e}"))?;
        for (name, id) in graph.outputs() {
            exe.set_output_shape(name, graph.ty(*id).shape.clone())
                .map_err(|e| format!("output shape: {e}"))?;
        }
        let got = exe.run(bindings).map_err(|e| format!("run: {e}"))?;
        let oracle = eval_program(&program, bindings).ok();
        for s in &program.steps {
            let i = usize::from(matches!(s, Step::Gemm(_)));
            STATS[i].fetch_add(1, Ordering::Relaxed);
        }
        STATS[2].fetch_add(usize::from(oracle.is_some()), Ordering::Relaxed);
        for (i, ((name, id), (_, w))) in graph.outputs().iter().zip(&want).enumerate() {
            let g = &got[i].1;
            let loose = has_accumulation(graph, *id, false);
            let (rt, at) = tolerance(w.dtype(), loose);
            let what = format!("output {name:?} (fuse={fuse}) vs interpreter");
            check_close_with(&what, g, w, rt, at, loose)?;
            if let Some(o) = &oracle {
                // eval_program accumulates reductions like the kernels, GEMMs in f64.
                let loose = has_accumulation(graph, *id, true);
                let (rt, at) = tolerance(w.dtype(), loose);
                let what = format!("output {name:?} (fuse={fuse}) vs eval_program");
                check_close_with(&what, g, &o[i].1, rt, at, loose)?;
            }
        }
    }
    Ok(true)
}

#[test]
fn random_graphs_match_the_interpreter_fused_and_unfused() {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    // No float→int casts: a one-ulp accumulation difference before one (inevitable between
    // f32 kernels and the f64 interpreter) becomes a different integer, which no tolerance
    // can absorb. Casts of exactly computed values are covered by the exact tests.
    let cfg = GenConfig {
        max_nodes: 20,
        float_to_int_casts: false,
        ..GenConfig::default()
    };
    let strategy = arb_graph_with(cfg).prop_flat_map(|g| {
        let bindings = arb_bindings(&g);
        (Just(g), bindings)
    });
    let (mut ran, mut skipped) = (0, 0);
    let mut failures = Vec::new();
    for case in 0..cases() {
        let (graph, bindings) = strategy
            .new_tree(&mut runner)
            .expect("a random graph")
            .current();
        let graph = with_sinks_as_outputs(graph);
        match check_graph(&graph, &bindings) {
            Ok(true) => ran += 1,
            Ok(false) => skipped += 1,
            Err(e) => failures.push(format!(
                "case {case}: {e}\n{}",
                smelt_ir::text::print(&graph)
            )),
        }
    }
    let [k, g, o] = STATS.each_ref().map(|a| a.load(Ordering::Relaxed));
    println!(
        "{ran} graphs checked ({k} kernels, {g} GEMMs; eval_program ran {o} of {} programs), \
         {skipped} skipped (the interpreter rejected them)",
        2 * ran
    );
    assert!(
        failures.is_empty(),
        "{} of {} graphs failed:\n{}",
        failures.len(),
        ran + failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
