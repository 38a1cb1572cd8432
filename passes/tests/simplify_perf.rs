//! Compile-time check of `simplify` on a BERT-like encoder (12 layers of linear, attention
//! with softmax, gelu and layer_norm, built with the tracing frontend).
//!
//! `cargo test --release -p smelt-passes --test simplify_perf -- --ignored --nocapture`
//! prints the time; it asserts only correctness of the result, never wall-clock time.

use smelt_frontend::nn::{layer_norm, linear};
use smelt_frontend::{GeluApproximation, Tensor, Tracer};
use smelt_ir::{DType, Graph};
use smelt_passes::simplify::simplify;
use smelt_passes::PassOptions;
use std::time::Instant;

const HIDDEN: usize = 64;
const HEADS: usize = 4;
const SEQ: usize = 16;
const FFN: usize = 256;

fn param(t: &Tracer, name: String, shape: &[usize]) -> Tensor {
    t.param(name, DType::F32, shape.to_vec()).expect("param")
}

/// One encoder layer: self-attention, residual, layer_norm, gelu MLP, residual, layer_norm.
fn layer(t: &Tracer, x: &Tensor, i: usize) -> smelt_frontend::Result<Tensor> {
    let p = |n: &str, s: &[usize]| param(t, format!("l{i}.{n}"), s);
    let head = HIDDEN / HEADS;
    let split = |y: Tensor| -> smelt_frontend::Result<Tensor> {
        y.reshape(&[1, SEQ as i64, HEADS as i64, head as i64])?
            .permute(&[0, 2, 1, 3])
    };
    let q = split(linear(
        x,
        &p("wq", &[HIDDEN, HIDDEN]),
        Some(&p("bq", &[HIDDEN])),
    )?)?;
    let k = split(linear(
        x,
        &p("wk", &[HIDDEN, HIDDEN]),
        Some(&p("bk", &[HIDDEN])),
    )?)?;
    let v = split(linear(
        x,
        &p("wv", &[HIDDEN, HIDDEN]),
        Some(&p("bv", &[HIDDEN])),
    )?)?;
    let scores = q
        .matmul(&k.transpose(-1, -2)?)?
        .div((head as f64).sqrt())?
        .softmax(-1)?;
    let ctx =
        scores
            .matmul(&v)?
            .permute(&[0, 2, 1, 3])?
            .reshape(&[1, SEQ as i64, HIDDEN as i64])?;
    let attn = linear(&ctx, &p("wo", &[HIDDEN, HIDDEN]), Some(&p("bo", &[HIDDEN])))?;
    let x = layer_norm(
        &x.add(&attn)?,
        &[HIDDEN],
        Some(&p("ln1.w", &[HIDDEN])),
        Some(&p("ln1.b", &[HIDDEN])),
        1e-5,
    )?;
    let h = linear(&x, &p("w1", &[FFN, HIDDEN]), Some(&p("b1", &[FFN])))?
        .gelu(GeluApproximation::None)?;
    let h = linear(&h, &p("w2", &[HIDDEN, FFN]), Some(&p("b2", &[HIDDEN])))?;
    layer_norm(
        &x.add(&h)?,
        &[HIDDEN],
        Some(&p("ln2.w", &[HIDDEN])),
        Some(&p("ln2.b", &[HIDDEN])),
        1e-5,
    )
}

/// A 12-layer BERT-like encoder.
pub fn bert(layers: usize) -> Graph {
    let t = Tracer::new();
    let mut x = t
        .input("x", DType::F32, vec![1, SEQ, HIDDEN])
        .expect("input");
    for i in 0..layers {
        x = layer(&t, &x, i).expect("layer");
    }
    t.output("y", &x).expect("output");
    t.finish().expect("graph")
}

#[test]
#[ignore = "timing; run with --release -- --ignored --nocapture"]
fn simplify_time_on_bert() {
    // 12 layers (the model), and 19 layers (about 1,500 nodes).
    for layers in [12, 19] {
        let g = bert(layers);
        for fast_math in [false, true] {
            let opts = PassOptions {
                fast_math,
                ..PassOptions::default()
            };
            // Warm up once, then time a few runs.
            let (s, report) = simplify(&g, &opts).expect("simplify");
            smelt_ir::verify(&s).expect("verifies");
            let runs = 5;
            let start = Instant::now();
            for _ in 0..runs {
                let _ = simplify(&g, &opts).expect("simplify");
            }
            let per = start.elapsed() / runs;
            // A digest of the printed result, to compare across processes and machines.
            let digest = {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                smelt_ir::text::print(&s).hash(&mut h);
                h.finish()
            };
            println!(
                "simplify, {layers}-layer BERT-like graph, fast_math {fast_math}: {} -> {} nodes, \
                 {per:?} per run ({report}); digest {digest:016x}; rules: {:?}",
                g.len(),
                s.len(),
                report.rules_applied
            );
        }
    }
}

#[test]
fn bert_graph_simplifies_and_keeps_its_signature() {
    let g = bert(1);
    let (s, _) = simplify(&g, &PassOptions::default()).expect("simplify");
    smelt_ir::verify(&s).expect("verifies");
    assert!(s.len() <= g.len());
    let sig = |g: &Graph| -> Vec<String> { g.bindings().map(|(n, ..)| n.to_string()).collect() };
    assert_eq!(sig(&g), sig(&s));
}
