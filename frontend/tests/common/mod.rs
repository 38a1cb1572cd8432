//! Helpers shared by the frontend's integration tests.
#![allow(dead_code)]

use smelt_frontend::{DType, Graph, HostTensor, Tensor};
use smelt_ir::{interp, Op, TensorData};
use std::collections::HashMap;

/// Evaluates `graph` with the reference interpreter; outputs by name.
pub fn run(graph: &Graph, bindings: &[(&str, HostTensor)]) -> HashMap<String, HostTensor> {
    let b: HashMap<String, HostTensor> = bindings
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect();
    interp::eval(graph, &b)
        .unwrap_or_else(|e| panic!("eval failed: {e}"))
        .into_iter()
        .collect()
}

/// A tensor of `dtype` holding `values` (rounded like a cast).
pub fn tensor(dtype: DType, shape: &[usize], values: &[f64]) -> HostTensor {
    use half::{bf16, f16};
    let data = match dtype {
        DType::Bool => TensorData::Bool(values.iter().map(|&v| v != 0.0).collect()),
        DType::I32 => TensorData::I32(values.iter().map(|&v| v as i32).collect()),
        DType::I64 => TensorData::I64(values.iter().map(|&v| v as i64).collect()),
        DType::F16 => TensorData::F16(values.iter().map(|&v| f16::from_f32(v as f32)).collect()),
        DType::BF16 => TensorData::BF16(values.iter().map(|&v| bf16::from_f32(v as f32)).collect()),
        DType::F32 => TensorData::F32(values.iter().map(|&v| v as f32).collect()),
        DType::F64 => TensorData::F64(values.to_vec()),
    };
    HostTensor::new(shape, data).expect("data length matches shape")
}

pub fn f32s(shape: &[usize], values: &[f64]) -> HostTensor {
    tensor(DType::F32, shape, values)
}

/// The elements widened to f64.
pub fn values(t: &HostTensor) -> Vec<f64> {
    (0..t.numel()).map(|i| t.data().get_f64(i)).collect()
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise (NaN matches NaN, infinities
/// must be equal).
pub fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w} (rtol {rtol}, atol {atol})\n got  {got:?}\n want {want:?}");
    }
}

/// Ops of the graph's nodes, by name.
pub fn op_names(graph: &Graph) -> Vec<&'static str> {
    graph.nodes().iter().map(|n| n.op.name()).collect()
}

/// Number of cast nodes to `dtype`.
pub fn casts_to(graph: &Graph, dtype: DType) -> usize {
    graph
        .nodes()
        .iter()
        .filter(|n| matches!(n.op, Op::Cast { to, .. } if to == dtype))
        .count()
}

/// The 0-d constants of the graph, as `(dtype, value)`.
pub fn scalar_consts(graph: &Graph) -> Vec<(DType, f64)> {
    graph
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Constant(t) if t.shape().rank() == 0 => Some((t.dtype(), t.data().get_f64(0))),
            _ => None,
        })
        .collect()
}

/// Traces `f` on one input `x`, outputs its result as `y`, and evaluates it on `x`.
pub fn eval1(
    x: &HostTensor,
    f: impl FnOnce(&Tensor) -> smelt_frontend::Result<Tensor>,
) -> HostTensor {
    let tr = smelt_frontend::Tracer::new();
    let xi = tr.input("x", x.dtype(), x.shape().clone()).unwrap();
    let y = f(&xi).unwrap();
    tr.output("y", &y).unwrap();
    let g = tr.finish().unwrap();
    run(&g, &[("x", x.clone())]).remove("y").unwrap()
}
