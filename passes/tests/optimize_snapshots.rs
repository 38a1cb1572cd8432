//! The whole pipeline (`optimize`: simplification, then fusion planning) on the plan corpus,
//! including the cases only stage 1 can resolve (a permute chain that cancels to nothing).
//! Snapshots hold the simplified op count and the plan text; they are reviewed by hand.

mod fusion_corpus;

use fusion_corpus as corpus;
use smelt_frontend::{DType, Tracer};
use smelt_ir::{Graph, HostTensor};
use smelt_passes::{fusion, optimize, PassOptions};
use std::collections::HashMap;

/// Deterministic, non-trivial values for every input and parameter (a float ramp).
fn bindings(graph: &Graph) -> HashMap<String, HostTensor> {
    graph
        .bindings()
        .map(|(name, _, ty, _)| {
            let n = ty.shape.numel();
            let data: Vec<f32> = (0..n).map(|i| ((i * 7 % 23) as f32 - 11.0) / 8.0).collect();
            let t = HostTensor::from_f32(ty.shape.clone(), data).expect("numel");
            assert_eq!(ty.dtype, DType::F32, "the corpus is f32");
            (name.to_string(), t)
        })
        .collect()
}

/// Optimises `graph`, checks the plan is valid, that it computes what the original graph does
/// (when `run`), the kernel count, and snapshots the result.
fn check(name: &str, graph: Graph, kernels: usize, run: bool) {
    let opt = optimize(&graph, &PassOptions::default()).expect("optimises");
    fusion::check_plan(&opt.graph, &opt.plan).expect("a valid plan");
    if run {
        let b = bindings(&graph);
        let want = smelt_ir::interp::eval(&graph, &b).expect("interp");
        let got = fusion::eval_plan(&opt.graph, &opt.plan, &b).expect("eval_plan");
        assert_eq!(want, got, "{name}");
    }
    assert_eq!(opt.plan.kernel_count(), kernels, "{name}\n{}", opt.plan);
    let text = format!(
        "ops: {} -> {} after simplification\nsimplify: {}\nfusion: {}\n{}",
        graph.len(),
        opt.graph.len(),
        opt.simplify,
        opt.fusion,
        opt.plan
    );
    insta::assert_snapshot!(name, text);
}

#[test]
fn permute_chain_cancels_to_nothing() {
    // Three permutes composing to the identity, then an add: stage 1 removes the permutes,
    // stage 2 is left with one elementwise kernel reading x directly.
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [4, 6, 8]).unwrap();
    let p = x
        .permute(&[1, 0, 2])
        .unwrap()
        .permute(&[2, 0, 1])
        .unwrap()
        .permute(&[2, 1, 0])
        .unwrap();
    let y = p.add(1.0f32).unwrap();
    t.output("y", &y).unwrap();
    check("permute_chain", t.finish().unwrap(), 1, true);
}

#[test]
fn permute_chain_alone_needs_no_kernel() {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [4, 6]).unwrap();
    let y = x.permute(&[1, 0]).unwrap().permute(&[1, 0]).unwrap();
    let z = x.exp().unwrap();
    t.output("y", &y).unwrap();
    t.output("z", &z).unwrap();
    let opt = optimize(&t.finish().unwrap(), &PassOptions::default()).unwrap();
    // y is x itself: only z's exp needs a kernel.
    assert_eq!(opt.plan.kernel_count(), 1, "{}", opt.plan);
}

#[test]
fn corpus_through_the_whole_pipeline() {
    check("opt_chain8", corpus::chain8().unwrap(), 1, true);
    check(
        "opt_bias_gelu_residual",
        corpus::bias_gelu_residual().unwrap(),
        1,
        true,
    );
    check("opt_softmax", corpus::softmax().unwrap(), 1, true);
    check("opt_layer_norm", corpus::layer_norm().unwrap(), 1, true);
    check(
        "opt_residual_layer_norm",
        corpus::residual_layer_norm().unwrap(),
        1,
        true,
    );
    check("opt_mlp", corpus::mlp().unwrap(), 4, false);
}
