//! Whole-stack tests: trace → compile → run, checked against numpy golden values.

use serde_json::Value;
use smelt::ir::{text, HostTensor};
use smelt::models::{encoder_layer, EncoderConfig};
use std::collections::HashMap;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

/// The encoder layer of `smelt demo`, at a small size, against numpy in f64
/// (tests/data/encoder_small.json, from scripts/golden/gen_encoder.py).
#[test]
fn encoder_layer_matches_numpy() {
    let golden: Value =
        serde_json::from_str(include_str!("data/encoder_small.json")).expect("valid json");
    let c = &golden["config"];
    let get = |k: &str| c[k].as_u64().expect("int") as usize;
    let cfg = EncoderConfig {
        seq: get("seq"),
        hidden: get("hidden"),
        heads: get("heads"),
        ffn: get("ffn"),
        eps: c["eps"].as_f64().expect("float"),
    };
    let graph = encoder_layer(&cfg).expect("traces");
    let mut params = HashMap::new();
    for (name, w) in golden["weights"].as_object().expect("map") {
        let shape: Vec<usize> = w["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim") as usize)
            .collect();
        params.insert(
            name.clone(),
            HostTensor::from_f32(shape, floats(&w["data"])).expect("sizes match"),
        );
    }
    let mut compiled = smelt::compile(&graph).expect("compiles");
    compiled.bind_params(params).expect("weights fit");
    let x = HostTensor::from_f32([cfg.seq, cfg.hidden], floats(&golden["x"])).unwrap();
    let out = compiled
        .run(&HashMap::from([("x".to_string(), x)]))
        .expect("runs");
    let got = out.get("y").expect("output y").to_f32_vec();
    let want = floats(&golden["y"]);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // f32 computation vs f64 numpy through ~10 dependent ops: torch.testing's f32
        // tolerance scaled by 10.
        assert!(
            (g - w).abs() <= 1e-4 + 1.3e-5 * w.abs(),
            "y[{i}] = {g}, numpy says {w}"
        );
    }
}

/// A traced model prints to `.smelt` text and parses back to the same graph.
#[test]
fn traced_model_round_trips_through_text() {
    let cfg = EncoderConfig {
        seq: 3,
        hidden: 4,
        heads: 2,
        ffn: 8,
        eps: 1e-5,
    };
    let graph = encoder_layer(&cfg).unwrap();
    let printed = text::print(&graph);
    assert_eq!(text::parse(&printed).unwrap(), graph);
}

/// The BERT-base forward pass used for the optimiser's compile-time budget traces and
/// verifies, and has the size the budget is stated for.
#[test]
fn bert_base_forward_traces() {
    let g = smelt::models::bert_base(128, 12).unwrap();
    smelt::ir::verify(&g).unwrap();
    assert!(g.len() > 1_000, "{} nodes", g.len());
    assert_eq!(g.outputs()[0].0, "hidden");
    assert_eq!(g.ty(g.outputs()[0].1).to_string(), "f32[128, 768]");
}
