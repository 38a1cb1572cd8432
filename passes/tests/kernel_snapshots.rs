//! Snapshots of the kernel IR of the plan corpus (program text reviewed by hand), each program
//! verified, lowered twice to the same text, and (for the smaller ones) evaluated against the
//! interpreter on deterministic inputs with f32 accumulators: tolerance `rtol = atol = 4 ·
//! eps(f32) · K` for a reduction or inner product of length `K`.

mod fusion_corpus;
mod kernel_common;

use fusion_corpus as corpus;
use kernel_common::{compare, ramp_bindings};
use smelt_ir::Graph;
use smelt_passes::kernel::{eval_program, lower, verify_program, Program, Step};
use smelt_passes::{optimize, PassOptions};

fn check(name: &str, graph: Graph, run_k: Option<usize>) -> Program {
    let o = optimize(&graph, &PassOptions::default()).expect("optimize");
    let program = lower(&o.graph, &o.plan).expect("lower");
    verify_program(&program).unwrap_or_else(|e| panic!("{e}\n{program}"));
    let again = lower(&o.graph, &o.plan).expect("lower");
    assert_eq!(
        program.to_string(),
        again.to_string(),
        "lowering is deterministic"
    );
    if let Some(k) = run_k {
        let bindings = ramp_bindings(&graph);
        let want = smelt_ir::interp::eval(&graph, &bindings).expect("interp");
        let got = eval_program(&program, &bindings).expect("eval_program");
        let tol = 4.0 * 1.2e-7 * k as f64;
        compare(&want, &got, |_| (tol, tol)).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    insta::assert_snapshot!(name, program.to_string());
    program
}

fn kernels(p: &Program) -> usize {
    p.steps
        .iter()
        .filter(|s| matches!(s, Step::Kernel(_)))
        .count()
}

#[test]
fn chain8_is_one_elementwise_kernel() {
    let p = check("kernel_chain8", corpus::chain8().unwrap(), Some(1));
    assert_eq!(kernels(&p), 1);
}

#[test]
fn softmax_is_one_row_kernel_with_three_stages() {
    let p = check("kernel_softmax", corpus::softmax().unwrap(), Some(512));
    let Step::Kernel(k) = &p.steps[0] else {
        panic!("{p}")
    };
    assert_eq!(k.stages.len(), 3, "{p}");
    assert_eq!(k.outer, [128]);
}

#[test]
fn layer_norm_is_one_row_kernel() {
    check(
        "kernel_layer_norm",
        corpus::layer_norm().unwrap(),
        Some(768),
    );
}

#[test]
fn mlp_is_gemms_and_epilogues() {
    let p = check("kernel_mlp", corpus::mlp().unwrap(), Some(1024));
    assert_eq!(p.steps.len() - kernels(&p), 2);
}

#[test]
fn attention_is_gemm_row_kernel_gemm() {
    check("kernel_attention", corpus::attention().unwrap(), Some(1024));
}

#[test]
fn transposed_matmul_swaps_strides() {
    let p = check(
        "kernel_transposed_matmul",
        corpus::transposed_matmul().unwrap(),
        Some(32),
    );
    let Step::Gemm(g) = &p.steps[0] else {
        panic!("{p}")
    };
    assert_eq!(g.b.strides, [1, 32]);
}

#[test]
fn bert_encoder_layer() {
    check("kernel_bert_layer", corpus::bert(1).unwrap(), None);
}
