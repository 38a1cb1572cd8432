//! Composite ops against golden values from an independent numpy oracle
//! (`scripts/golden/gen_frontend.py` → `tests/data/composites.json`), evaluated through the
//! reference interpreter.

mod common;

use common::{assert_close, run, tensor, values};
use serde_json::Value;
use smelt_frontend::{nn, DType, GeluApproximation, HostTensor, Result, Tensor, Tracer};
use std::collections::HashMap;

const DATA: &str = include_str!("data/composites.json");

struct Case {
    name: String,
    inputs: Vec<(String, HostTensor)>,
    params: Value,
    expected: HostTensor,
    rtol: f64,
    atol: f64,
}

fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("finite number"),
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad number {other:?}"),
        },
        other => panic!("bad number {other}"),
    }
}

fn host(v: &Value) -> HostTensor {
    let dtype = DType::from_name(v["dtype"].as_str().expect("dtype")).expect("known dtype");
    let shape: Vec<usize> = v["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let data: Vec<f64> = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(num)
        .collect();
    tensor(dtype, &shape, &data)
}

fn cases(op: &str) -> Vec<Case> {
    let doc: Value = serde_json::from_str(DATA).expect("valid json");
    let cases: Vec<Case> = doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter(|c| c["op"] == op)
        .map(|c| Case {
            name: c["name"].as_str().expect("name").to_string(),
            inputs: c["inputs"]
                .as_object()
                .expect("inputs")
                .iter()
                .map(|(k, v)| (k.clone(), host(v)))
                .collect(),
            params: c["params"].clone(),
            expected: host(&c["expected"]),
            rtol: num(&c["rtol"]),
            atol: num(&c["atol"]),
        })
        .collect();
    assert!(!cases.is_empty(), "no golden cases for {op}");
    cases
}

/// Traces `build` on the case's inputs, checks the result type, evaluates and compares.
fn check(op: &str, build: impl Fn(&HashMap<String, Tensor>, &Value) -> Result<Tensor>) {
    for case in cases(op) {
        let tr = Tracer::new();
        let inputs: HashMap<String, Tensor> = case
            .inputs
            .iter()
            .map(|(n, t)| {
                (
                    n.clone(),
                    tr.input(n.as_str(), t.dtype(), t.shape().clone()).unwrap(),
                )
            })
            .collect();
        let y = build(&inputs, &case.params).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let want = &case.expected;
        assert_eq!(y.dtype().unwrap(), want.dtype(), "{}: dtype", case.name);
        assert_eq!(y.shape().unwrap(), want.shape(), "{}: shape", case.name);
        tr.output("y", &y).unwrap();
        let graph = tr.finish().unwrap();
        let bindings: Vec<(&str, HostTensor)> = case
            .inputs
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect();
        let got = run(&graph, &bindings).remove("y").unwrap();
        assert_eq!(got.dtype(), want.dtype(), "{}: evaluated dtype", case.name);
        assert_close(
            &case.name,
            &values(&got),
            &values(want),
            case.rtol,
            case.atol,
        );
    }
}

fn axis(p: &Value) -> i64 {
    p["axis"].as_i64().expect("axis")
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|d| d.as_u64().expect("usize") as usize)
        .collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|d| d.as_i64().expect("i64"))
        .collect()
}

#[test]
fn golden_softmax() {
    check("softmax", |x, p| x["x"].softmax(axis(p)));
}

#[test]
fn golden_log_softmax() {
    check("log_softmax", |x, p| x["x"].log_softmax(axis(p)));
}

#[test]
fn golden_layer_norm() {
    check("layer_norm", |x, p| {
        let shape = usizes(&p["normalized_shape"]);
        nn::layer_norm(
            &x["x"],
            &shape,
            x.get("weight"),
            x.get("bias"),
            p["eps"].as_f64().expect("eps"),
        )
    });
}

#[test]
fn golden_rms_norm() {
    check("rms_norm", |x, p| {
        let shape = usizes(&p["normalized_shape"]);
        nn::rms_norm(&x["x"], &shape, x.get("weight"), p["eps"].as_f64())
    });
}

#[test]
fn golden_gelu() {
    check("gelu", |x, p| {
        let approx = match p["approximate"].as_str() {
            Some("none") => GeluApproximation::None,
            Some("tanh") => GeluApproximation::Tanh,
            other => panic!("bad approximate {other:?}"),
        };
        x["x"].gelu(approx)
    });
}

#[test]
fn golden_silu() {
    check("silu", |x, _| x["x"].silu());
}

#[test]
fn golden_var_and_std() {
    let args = |p: &Value| {
        (
            i64s(&p["axes"]),
            p["correction"].as_f64(),
            p["keepdim"].as_bool().expect("keepdim"),
        )
    };
    check("var", |x, p| {
        let (axes, correction, keepdim) = args(p);
        x["x"].var(&axes, correction, keepdim)
    });
    check("std", |x, p| {
        let (axes, correction, keepdim) = args(p);
        x["x"].std(&axes, correction, keepdim)
    });
}

#[test]
fn golden_linear() {
    check("linear", |x, _| {
        nn::linear(&x["x"], &x["weight"], x.get("bias"))
    });
}

#[test]
fn golden_embedding() {
    check("embedding", |x, _| nn::embedding(&x["ids"], &x["weight"]));
}

#[test]
fn golden_scaled_dot_product_attention() {
    check("sdpa", |x, p| {
        nn::scaled_dot_product_attention(
            &x["q"],
            &x["k"],
            &x["v"],
            x.get("mask"),
            p["is_causal"].as_bool().expect("is_causal"),
            p["scale"].as_f64(),
        )
    });
}
