//! Snapshot tests of fusion plans for a corpus of common blocks (plan text reviewed by hand).

mod fusion_corpus;
#[path = "fusion_rules/oracle.rs"]
mod oracle;

use fusion_corpus as corpus;
use smelt_ir::{DType, Graph, HostTensor, TensorData};
use smelt_passes::fusion::{self, FusionPlan, KernelKind};
use smelt_passes::PassOptions;
use std::collections::HashMap;

/// Plans `graph`, checks it against the baseline (and, when `run`, against the interpreter
/// on deterministic inputs), asserts the kernel count when given and snapshots the plan.
fn check(name: &str, graph: Graph, kernels: Option<usize>, run: bool) -> FusionPlan {
    let (plan, report) = fusion::plan(&graph, &PassOptions::default()).expect("plan");
    fusion::check_plan(&graph, &plan).expect("a valid plan");
    let base = fusion::greedy_baseline(&graph);
    fusion::check_plan(&graph, &base).expect("a valid baseline");
    oracle::check_kernels(&graph, &plan).unwrap_or_else(|e| panic!("{e}\n{plan}"));
    oracle::check_kernels(&graph, &base).unwrap_or_else(|e| panic!("baseline: {e}\n{base}"));
    assert!(
        plan.cost() <= base.cost(),
        "plan {} > baseline {}\n{plan}\n{base}",
        plan.cost(),
        base.cost()
    );
    if let Some(k) = kernels {
        assert_eq!(plan.kernel_count(), k, "{report}\n{plan}");
    }
    if run {
        let bindings = ramp_bindings(&graph);
        let want = smelt_ir::interp::eval(&graph, &bindings).expect("interp");
        let got = fusion::eval_plan(&graph, &plan, &bindings).expect("eval_plan");
        assert_eq!(want, got);
    }
    let text = format!(
        "{plan}{}greedy baseline: {} kernels, modelled cost {} B\n",
        plan.explain_boundaries(),
        base.kernel_count(),
        base.cost()
    );
    insta::assert_snapshot!(name, text);
    plan
}

/// Inputs with varied, deterministic values (`sin` of the index; bools alternate).
fn ramp_bindings(graph: &Graph) -> HashMap<String, HostTensor> {
    graph
        .bindings()
        .map(|(name, _, ty, _)| {
            let n = ty.shape.numel();
            let data = match ty.dtype {
                DType::Bool => TensorData::Bool((0..n).map(|i| i % 7 != 3).collect()),
                _ => TensorData::F32((0..n).map(|i| (i as f32 * 0.37).sin() * 2.0).collect()),
            };
            (
                name.to_string(),
                HostTensor::new(ty.shape.clone(), data).expect("sizes"),
            )
        })
        .collect()
}

fn kinds(plan: &FusionPlan) -> Vec<KernelKind> {
    plan.kernels.iter().map(|k| k.kind).collect()
}

#[test]
fn elementwise_chain_is_one_kernel() {
    check("chain8", corpus::chain8().unwrap(), Some(1), true);
}

#[test]
fn bias_gelu_residual_is_one_kernel() {
    check(
        "bias_gelu_residual",
        corpus::bias_gelu_residual().unwrap(),
        Some(1),
        true,
    );
}

#[test]
fn softmax_is_one_row_kernel() {
    let plan = check("softmax", corpus::softmax().unwrap(), Some(1), true);
    assert_eq!(kinds(&plan), [KernelKind::Reduction]);
}

#[test]
fn layer_norm_is_one_row_kernel() {
    let plan = check("layer_norm", corpus::layer_norm().unwrap(), Some(1), true);
    assert_eq!(kinds(&plan), [KernelKind::Reduction]);
}

#[test]
fn rms_norm_is_one_row_kernel() {
    let plan = check("rms_norm", corpus::rms_norm().unwrap(), Some(1), true);
    assert_eq!(kinds(&plan), [KernelKind::Reduction]);
}

#[test]
fn residual_layer_norm_is_one_row_kernel() {
    check(
        "residual_layer_norm",
        corpus::residual_layer_norm().unwrap(),
        Some(1),
        true,
    );
}

#[test]
fn mlp_is_two_gemms_and_two_epilogues() {
    let plan = check("mlp", corpus::mlp().unwrap(), Some(4), false);
    use KernelKind::*;
    assert_eq!(kinds(&plan), [MatMul, Elementwise, MatMul, Elementwise]);
    assert!(plan.kernels[0].transpose[1] && plan.kernels[2].transpose[1]);
}

#[test]
fn attention_is_gemm_row_kernel_gemm() {
    let plan = check("attention", corpus::attention().unwrap(), Some(3), false);
    use KernelKind::*;
    assert_eq!(kinds(&plan), [MatMul, Reduction, MatMul]);
    assert_eq!(plan.kernels[0].transpose, [false, true]);
}

#[test]
fn transpose_folds_into_matmul() {
    let plan = check(
        "transposed_matmul",
        corpus::transposed_matmul().unwrap(),
        Some(1),
        true,
    );
    assert_eq!(plan.kernels[0].transpose, [false, true]);
}

/// `h = x + y + z` has three readers: recomputing it would read three buffers per reader, so
/// it is materialised once, by a multi-output kernel that also computes its two elementwise
/// readers from `h` in registers (extraction chooses the multi-output e-node: writing `h`
/// *because of* its siblings); the reduction reads `h` back.
#[test]
fn value_with_three_consumers_is_materialised() {
    let plan = check(
        "three_consumers",
        corpus::three_consumers().unwrap(),
        Some(2),
        true,
    );
    assert_eq!(plan.kernels[0].outputs.len(), 3);
}

/// `h = exp(x)` has three readers: recomputing it reads `x` instead of `h` (same bytes) and
/// saves writing `h` and a launch, so every reader recomputes it.
#[test]
fn cheap_value_with_three_consumers_is_recomputed() {
    let plan = check(
        "three_consumers_cheap",
        corpus::three_consumers_cheap().unwrap(),
        Some(2),
        true,
    );
    assert!(plan.recomputed_ops >= 1);
}

/// Six row statistics of one tensor (max and argmax, min and argmin, mean and the variance
/// computed from it) are one row kernel writing all six, reading `x` once: sibling row
/// kernels over the same rows merged by `multi-output-siblings`.
#[test]
fn row_statistics_are_one_multi_output_row_kernel() {
    let plan = check("row_stats", corpus::row_stats().unwrap(), Some(1), true);
    assert_eq!(plan.kernels[0].kind, KernelKind::Reduction);
    assert_eq!(plan.kernels[0].outputs.len(), 6);
    assert_eq!(plan.bytes_read(), 256 * 384 * 4);
}

#[test]
fn bert_base_embeddings_and_two_layers() {
    check(
        "bert_base_2_layers",
        corpus::bert_base(2).unwrap(),
        None,
        false,
    );
}

#[test]
fn bert_encoder_layer() {
    check("bert_layer", corpus::bert(1).unwrap(), None, false);
}
