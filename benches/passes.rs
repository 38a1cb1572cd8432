//! Compile-time budget of the optimiser: e-graph saturation + extraction (both stages of
//! `smelt_passes::optimize`) on BERT-base forward passes. Issue 3's budget: under 100 ms for a
//! 1,500-node graph.
//!
//! `cargo bench --bench passes` (criterion prints the median per graph).

use criterion::{criterion_group, criterion_main, Criterion};
use smelt::models::bert_base;
use smelt_passes::{optimize, PassOptions};
use std::hint::black_box;

fn passes(c: &mut Criterion) {
    let mut group = c.benchmark_group("optimize");
    group.sample_size(20);
    // 12 layers is BERT-base (1,091 nodes at seq 128); 17 layers of the same width gives the
    // 1,500-node graph the budget is stated for.
    for layers in [12, 17] {
        let graph = bert_base(128, layers).expect("traces");
        let name = format!("bert-base-{layers}-layers-{}-nodes", graph.len());
        let opts = PassOptions::default();
        group.bench_function(&name, |b| {
            b.iter(|| optimize(black_box(&graph), &opts).expect("optimises"))
        });
    }
    group.finish();
}

criterion_group!(benches, passes);
criterion_main!(benches);
