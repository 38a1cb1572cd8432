//! Differential fuzzing of the CPU backend: random well-formed graphs (with their bindings) →
//! `smelt_passes::optimize` (fused and unfused) → `lower` → `CpuProgram`, against the
//! reference interpreter and against `eval_program` (the kernel IR evaluator).
//!
//! Tolerances (see `tolerance`):
//! - against `eval_program`, which accumulates in the same dtype as the kernels: torch.testing's
//!   defaults per dtype for outputs whose graph cone has no reduction or matmul (the only
//!   expected differences are the kernels' `erf`, whose `expf` is exact where Rust `libm`'s is
//!   not, and NaN payloads); the loose tolerances below for the others, since `eval_program`
//!   sums in index order and GEMMs in f64, while kernels split long float reductions into 16
//!   lanes;
//! - against the interpreter: the defaults for outputs whose graph cone has no reduction or
//!   matmul; for the others, which the interpreter accumulates in f64 and the kernels in f32
//!   (or blocked GEMM order), `rtol = atol = 1e-3` for f32/f64 and `2e-2` (f16) / `8e-2` (bf16),
//!   since an f32 accumulation of n terms differs by up to ~n·2⁻²⁴ of the sum of magnitudes;
//!   those of the coarsest of the output's dtype and its cone's accumulation results (an f32
//!   cast of a bf16 matmul has bf16's: the f32 and f64 sums, each rounded to bf16, can be an
//!   ulp apart, found with `SMELT_FUZZ_SEED=20261205` in the emulator).
//!
//! Integers, bools, NaN positions and infinities are exact, except that in an output with an
//! accumulation (GEMMs and reductions, against either oracle) any two
//! non-finite values match: an accumulation that overflows gives ±inf or NaN depending on its
//! order. Where such an output still differs from the interpreter's, `eval_program`'s value
//! (accumulated in f32 like the kernels) is accepted instead, and downstream of a product a NaN
//! or ±inf where the interpreter gives ±0 (`check_outputs`, as in the CUDA tests): f32 partial
//! products can overflow and then meet a zero or an underflowed partial (NaN, where the
//! interpreter's f64 product gives 0), found with `SMELT_FUZZ_SEED=20261202`; and a non-finite
//! value downstream of an f32 matmul, sum or product whose finite terms' magnitudes leave the
//! f32 range in f64 (`SMELT_FUZZ_SEED=99`: `f32::MAX` in a GEMM). Last, an output
//! that is the interpreter's exact function (no accumulation in between) of the device's own
//! values of other outputs is accepted: a comparison after a GEMM whose f32 sum is NaN where
//! the f64 one is +inf (`SMELT_FUZZ_SEED=99 SMELT_FUZZ_MAX_NUMEL=4000` in the emulator).
//!
//! Every fused program is also compiled with streaming stores on every kernel
//! (`JitOptions::nontemporal_min_bytes = Some(0)`) and must give the same bits, through
//! `run_into` (the streaming kernels) and `run` (their plain-store twins, for the outputs).
//!
//! Graphs on which the interpreter reports an error (integer division by zero, a gather index
//! out of range) are skipped. `SMELT_FUZZ_CASES` sets the number of graphs (default 256);
//! cases come from a fixed seed, so a failure reproduces with its case number.

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::{assert_no_failures, check_bits, check_outputs, fuzz_cases, fuzz_graphs};
use smelt_ir::interp::eval;
use smelt_ir::{Graph, HostTensor};
use smelt_passes::kernel::{eval_program, lower, Step};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Kernels, GEMMs and programs `eval_program` evaluated, over all checked graphs.
static STATS: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];
use smelt_passes::{optimize, PassOptions};
use smelt_runtime::cpu::{CpuOptions, CpuProgram};
use std::collections::HashMap;

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
        if fuse {
            // Streaming stores (peeled loops, non-temporal vector stores) on every kernel give
            // the same bits as plain stores.
            // Through `run_into`: `run` calls the kernels' plain-store twins for the outputs
            // it allocates, so it is checked too, against the same bits.
            let mut streaming = CpuOptions::default();
            streaming.jit.nontemporal_min_bytes = Some(0);
            let mut exe = CpuProgram::compile_with(&program, &params, &streaming)
                .map_err(|e| format!("compile (streaming): {e}"))?;
            for (name, id) in graph.outputs() {
                exe.set_output_shape(name, graph.ty(*id).shape.clone())
                    .map_err(|e| format!("output shape (streaming): {e}"))?;
            }
            let mut into: Vec<HostTensor> = got
                .iter()
                .map(|(_, t)| HostTensor::zeros(t.dtype(), t.shape().clone()))
                .collect();
            exe.run_into(bindings, &mut into)
                .map_err(|e| format!("run_into (streaming): {e}"))?;
            let twins = exe
                .run(bindings)
                .map_err(|e| format!("run (streaming, plain-store twins): {e}"))?;
            for (((name, g), a), (_, t)) in got.iter().zip(&into).zip(&twins) {
                check_bits(&format!("{name} (streaming stores)"), a, g)?;
                check_bits(&format!("{name} (plain-store twins)"), t, g)?;
            }
        }
        let oracle = eval_program(&program, bindings).ok();
        for s in &program.steps {
            let i = usize::from(matches!(s, Step::Gemm(_)));
            STATS[i].fetch_add(1, Ordering::Relaxed);
        }
        STATS[2].fetch_add(usize::from(oracle.is_some()), Ordering::Relaxed);
        // Downstream of an accumulation the interpreter's f64 accumulator and the kernels' f32
        // one can differ beyond any tolerance: `check_outputs` says what it accepts there, as
        // in the CUDA tests.
        check_outputs(
            &format!("fuse={fuse} vs interpreter"),
            graph,
            &program,
            bindings,
            &want,
            &got,
        )?;
        if let Some(o) = &oracle {
            // eval_program accumulates GEMMs in f64 and reductions sequentially in the
            // kernels' dtype; the kernels split long float reductions into 16 lanes
            // (codegen/src/llvm/kernel/reduce.rs), another order: the same rules as against
            // the interpreter. Its buffers are flat: given the outputs' shapes first.
            let shaped = o
                .iter()
                .zip(&want)
                .map(|((n, t), (_, w))| {
                    let t = t.clone().reshaped(w.shape().clone());
                    Ok((n.clone(), t.map_err(|e| format!("eval_program {n}: {e}"))?))
                })
                .collect::<Result<Vec<_>, String>>()?;
            check_outputs(
                &format!("fuse={fuse} vs eval_program"),
                graph,
                &program,
                bindings,
                &shaped,
                &got,
            )?;
        }
    }
    Ok(true)
}

#[test]
fn random_graphs_match_the_interpreter_fused_and_unfused() {
    let (mut ran, mut skipped) = (0, 0);
    let mut failures = Vec::new();
    for (case, (graph, bindings)) in fuzz_graphs(fuzz_cases(256)).into_iter().enumerate() {
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
    assert_no_failures(ran, &failures);
}
