//! Snapshots of the CUDA C of the plan corpus (`passes/tests/fusion_corpus`), optimised and
//! lowered: one translation unit per graph, the prelude left out. NVRTC compiles the same
//! programs in `runtime/tests/cuda_codegen.rs`.

mod cuda_corpus_graphs;

use smelt_codegen::cuda::cuda_program_source;

#[test]
fn corpus_snapshots() {
    for (name, graph) in cuda_corpus_graphs::graphs() {
        let program = cuda_corpus_graphs::lowered(name, &graph, true);
        let cuda = cuda_program_source(&program);
        let start = cuda.source.find("// kernel ").unwrap_or(cuda.source.len());
        let launches: Vec<String> = cuda
            .kernels
            .iter()
            .map(|(e, l)| format!("{e}: grid {} block {}", l.grid, l.block))
            .collect();
        insta::assert_snapshot!(
            format!("cuda_corpus_{name}"),
            format!("{}\n\n{}", launches.join("\n"), &cuda.source[start..])
        );
    }
}
