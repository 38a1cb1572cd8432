//! The plan corpus (`passes/tests/fusion_corpus`) optimised and lowered to kernel IR, for the
//! CUDA snapshots here and the NVRTC checks in `runtime/tests/cuda_codegen.rs`.

#![allow(dead_code)]

#[path = "../../../passes/tests/fusion_corpus/mod.rs"]
mod fusion_corpus;

use smelt_ir::Graph;
use smelt_passes::kernel::{lower, Program};
use smelt_passes::{optimize, PassOptions};

/// The corpus graphs, by name.
pub fn graphs() -> Vec<(&'static str, Graph)> {
    use fusion_corpus as c;
    let all = [
        ("chain8", c::chain8()),
        ("bias_gelu_residual", c::bias_gelu_residual()),
        ("softmax", c::softmax()),
        ("layer_norm", c::layer_norm()),
        ("rms_norm", c::rms_norm()),
        ("residual_layer_norm", c::residual_layer_norm()),
        ("mlp", c::mlp()),
        ("attention", c::attention()),
        ("transposed_matmul", c::transposed_matmul()),
        ("three_consumers", c::three_consumers()),
        ("three_consumers_cheap", c::three_consumers_cheap()),
        ("row_stats", c::row_stats()),
        ("bert_layer", c::bert(1)),
    ];
    all.into_iter()
        .map(|(n, g)| (n, g.unwrap_or_else(|e| panic!("{n}: {e}"))))
        .collect()
}

/// `graph` through the default pipeline and lowered.
pub fn lowered(name: &str, graph: &Graph, fuse: bool) -> Program {
    let opts = PassOptions {
        fuse,
        ..PassOptions::default()
    };
    let opt = optimize(graph, &opts).unwrap_or_else(|e| panic!("{name}: optimize: {e}"));
    lower(&opt.graph, &opt.plan).unwrap_or_else(|e| panic!("{name}: lower: {e}"))
}
