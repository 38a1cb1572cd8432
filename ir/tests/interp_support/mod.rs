//! Shared helpers of the interpreter tests: reading the golden cases written by
//! `scripts/golden/gen_interp.py`, building their one-op graphs, and comparing values with
//! torch.testing-style tolerances.

#![allow(dead_code)] // each test crate uses its own subset

use half::{bf16, f16};
use serde_json::Value;
use smelt_ir::interp::eval;
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, NodeId, ReduceOp, Scalar, SliceRange};
use smelt_ir::{TensorData, UnaryOp};
use std::collections::HashMap;

/// One golden case: a single op applied to its inputs, and the expected result.
pub struct Case {
    pub name: String,
    pub op: String,
    pub attrs: Value,
    /// Tensors with a flag: `true` if the tensor is a constant of the graph, not an input.
    pub inputs: Vec<(HostTensor, bool)>,
    pub expected: HostTensor,
}

/// Parses a golden file (`{"cases": [...]}`); panics on malformed data (a broken fixture).
pub fn load(json: &str) -> Vec<Case> {
    let root: Value = serde_json::from_str(json).expect("golden file is valid JSON");
    root["cases"]
        .as_array()
        .expect("a `cases` array")
        .iter()
        .map(|c| {
            let name = c["name"].as_str().expect("case name").to_string();
            let inputs = c["inputs"]
                .as_array()
                .expect("inputs")
                .iter()
                .map(|t| (tensor(t, &name), t["const"].as_bool().unwrap_or(false)))
                .collect();
            Case {
                op: c["op"].as_str().expect("op").to_string(),
                attrs: c["attrs"].clone(),
                inputs,
                expected: tensor(&c["expected"], &name),
                name,
            }
        })
        .collect()
}

fn float(v: &Value, case: &str) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        _ => v
            .as_f64()
            .unwrap_or_else(|| panic!("{case}: bad float {v}")),
    }
}

fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("an array of sizes")
        .iter()
        .map(|x| x.as_u64().expect("a size") as usize)
        .collect()
}

/// A tensor from `{"dtype", "shape", "data"}`.
pub fn tensor(t: &Value, case: &str) -> HostTensor {
    let dtype = DType::from_name(t["dtype"].as_str().expect("dtype")).expect("known dtype");
    let shape = usizes(&t["shape"]);
    let items = t["data"].as_array().expect("data");
    let ints = || items.iter().map(|v| v.as_i64().expect("an integer"));
    let floats = || items.iter().map(|v| float(v, case));
    let data = match dtype {
        DType::Bool => TensorData::Bool(items.iter().map(|v| v.as_bool().expect("bool")).collect()),
        DType::I32 => TensorData::I32(ints().map(|x| i32::try_from(x).expect("i32")).collect()),
        DType::I64 => TensorData::I64(ints().collect()),
        // The values are exactly representable: these conversions are exact.
        DType::F16 => TensorData::F16(floats().map(f16::from_f64).collect()),
        DType::BF16 => TensorData::BF16(floats().map(bf16::from_f64).collect()),
        DType::F32 => TensorData::F32(floats().map(|x| x as f32).collect()),
        DType::F64 => TensorData::F64(floats().collect()),
    };
    HostTensor::new(shape, data).unwrap_or_else(|e| panic!("{case}: {e}"))
}

fn scalar(v: &Value, case: &str) -> Scalar {
    if let Some(b) = v.get("bool") {
        Scalar::Bool(b.as_bool().expect("bool"))
    } else if let Some(i) = v.get("int") {
        Scalar::Int(i.as_i64().expect("int"))
    } else {
        Scalar::Float(float(&v["float"], case))
    }
}

/// The one-op graph of `case` (output `y`) and the bindings of its non-constant inputs.
pub fn build(case: &Case) -> Result<(Graph, HashMap<String, HostTensor>), smelt_ir::IrError> {
    let mut g = Graph::new();
    let mut bindings = HashMap::new();
    let mut ids: Vec<NodeId> = Vec::new();
    for (i, (t, is_const)) in case.inputs.iter().enumerate() {
        if *is_const {
            ids.push(g.constant(t.clone())?);
        } else {
            let name = format!("x{i}");
            ids.push(g.input(&name, t.dtype(), t.shape().clone())?);
            bindings.insert(name, t.clone());
        }
    }
    let a = &case.attrs;
    let axis = || a["axis"].as_u64().expect("axis") as usize;
    let y = match case.op.as_str() {
        "where" => g.where_(ids[0], ids[1], ids[2])?,
        "cast" => g.cast(
            ids[0],
            DType::from_name(a["to"].as_str().expect("to")).expect("dtype"),
        )?,
        "reshape" => g.reshape(ids[0], usizes(&a["shape"]))?,
        "permute" => g.permute(ids[0], &usizes(&a["perm"]))?,
        "expand" => g.expand(ids[0], usizes(&a["shape"]))?,
        "slice" => {
            let ranges: Vec<SliceRange> = a["ranges"]
                .as_array()
                .expect("ranges")
                .iter()
                .map(|r| {
                    let r = usizes(r);
                    SliceRange {
                        start: r[0],
                        stop: r[1],
                        step: r[2],
                    }
                })
                .collect();
            g.slice(ids[0], &ranges)?
        }
        "concat" => g.concat(&ids, axis())?,
        "pad" => {
            let pads: Vec<(usize, usize)> = a["pads"]
                .as_array()
                .expect("pads")
                .iter()
                .map(|p| (usizes(p)[0], usizes(p)[1]))
                .collect();
            g.pad(ids[0], &pads, scalar(&a["value"], &case.name))?
        }
        "matmul" => g.matmul(ids[0], ids[1])?,
        "gather" => g.gather(ids[0], ids[1], axis())?,
        "index_select" => g.index_select(ids[0], ids[1], axis())?,
        "softmax" => {
            let ax = [axis()];
            let m = g.reduce(ReduceOp::Max, ids[0], &ax, true)?;
            let d = g.binary(BinaryOp::Sub, ids[0], m)?;
            let e = g.unary(UnaryOp::Exp, d)?;
            let s = g.reduce(ReduceOp::Sum, e, &ax, true)?;
            g.binary(BinaryOp::Div, e, s)?
        }
        name => {
            if let Some(u) = UnaryOp::from_name(name) {
                g.unary(u, ids[0])?
            } else if let Some(b) = BinaryOp::from_name(name) {
                g.binary(b, ids[0], ids[1])?
            } else if let Some(r) = ReduceOp::from_name(name) {
                let axes = usizes(&a["axes"]);
                g.reduce(r, ids[0], &axes, a["keepdim"].as_bool().expect("keepdim"))?
            } else {
                panic!("{}: unknown op {name}", case.name)
            }
        }
    };
    g.set_output("y", y)?;
    Ok((g, bindings))
}

/// `(rtol, atol)` per dtype, as torch.testing (exact for integers and bools).
pub fn tolerance(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F64 => (1e-7, 1e-7),
        DType::Bool | DType::I32 | DType::I64 => (0.0, 0.0),
    }
}

/// Element `i` as an exact i64 (bool and integer data).
fn int_at(d: &TensorData, i: usize) -> Option<i64> {
    match d {
        TensorData::Bool(v) => Some(v[i] as i64),
        TensorData::I32(v) => Some(v[i] as i64),
        TensorData::I64(v) => Some(v[i]),
        _ => None,
    }
}

/// Compares `got` with `want`: same dtype and shape; integers and bools exact; floats within
/// the dtype's tolerance, NaN exactly where expected, infinities with the expected sign.
/// Returns a description of the first few mismatches.
pub fn compare(got: &HostTensor, want: &HostTensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "type {}{} instead of {}{}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let (rtol, atol) = tolerance(want.dtype());
    let (g, w) = (got.data(), want.data());
    let mut bad = Vec::new();
    for i in 0..want.numel() {
        let ok = match (int_at(g, i), int_at(w, i)) {
            (Some(a), Some(b)) => a == b,
            _ => {
                let (a, b) = (g.get_f64(i), w.get_f64(i));
                if b.is_nan() || b.is_infinite() {
                    a.is_nan() == b.is_nan() && (b.is_nan() || a == b)
                } else {
                    !a.is_nan() && (a - b).abs() <= atol + rtol * b.abs()
                }
            }
        };
        if !ok {
            bad.push(i);
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = bad
        .iter()
        .take(6)
        .map(|&i| match (int_at(g, i), int_at(w, i)) {
            (Some(a), Some(b)) => format!("[{i}] got {a}, want {b}"),
            _ => format!("[{i}] got {:e}, want {:e}", g.get_f64(i), w.get_f64(i)),
        })
        .collect();
    Err(format!(
        "{} of {} elements differ: {}",
        bad.len(),
        want.numel(),
        shown.join("; ")
    ))
}

/// Evaluates every case of `cases` whose name satisfies `select` and checks its result;
/// panics listing every failing case. Returns the number of cases run.
pub fn check_cases(cases: &[Case], select: impl Fn(&str) -> bool) -> usize {
    let mut failures = Vec::new();
    let mut run = 0;
    for case in cases.iter().filter(|c| select(&c.name)) {
        run += 1;
        let result = build(case)
            .map_err(|e| format!("building the graph failed: {e}"))
            .and_then(|(g, b)| eval(&g, &b).map_err(|e| format!("eval failed: {e}")))
            .and_then(|out| match out.as_slice() {
                [(name, y)] if name == "y" => compare(y, &case.expected),
                _ => Err(format!("{} outputs instead of one", out.len())),
            });
        if let Err(msg) = result {
            failures.push(format!("{}: {msg}", case.name));
        }
    }
    assert!(run > 0, "no golden case selected");
    assert!(
        failures.is_empty(),
        "{} of {run} golden cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    run
}
