//! Helpers shared by the kernel IR tests: comparing program outputs with the interpreter's.

#![allow(dead_code)]

use smelt_ir::{DType, Graph, HostTensor, TensorData};
use std::collections::HashMap;

/// Relative and absolute tolerance of one dtype (torch.testing's defaults for elementwise).
pub fn elementwise_tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        _ => (1e-7, 1e-7),
    }
}

/// Compares `got` (flat, from `eval_program`) with `want` (the interpreter's): names, dtypes
/// and element counts equal; integers and bools exact; floats: NaN positions and infinities
/// exact, finite values within `tol(dtype)`.
pub fn compare(
    want: &[(String, HostTensor)],
    got: &[(String, HostTensor)],
    tol: impl Fn(DType) -> (f64, f64),
) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("{} outputs, want {}", got.len(), want.len()));
    }
    for ((wn, w), (gn, g)) in want.iter().zip(got) {
        if wn != gn || w.dtype() != g.dtype() || w.numel() != g.numel() {
            return Err(format!(
                "output {gn:?} {}[{}], want {wn:?} {}",
                g.dtype(),
                g.numel(),
                w.dtype()
            ));
        }
        let (rtol, atol) = tol(w.dtype());
        for i in 0..w.numel() {
            let ok = match (w.data(), g.data()) {
                (TensorData::Bool(a), TensorData::Bool(b)) => a[i] == b[i],
                (TensorData::I32(a), TensorData::I32(b)) => a[i] == b[i],
                (TensorData::I64(a), TensorData::I64(b)) => a[i] == b[i],
                (a, b) => {
                    let (x, y) = (a.get_f64(i), b.get_f64(i));
                    if x.is_nan() || y.is_nan() {
                        x.is_nan() && y.is_nan()
                    } else if x.is_infinite() || y.is_infinite() {
                        x == y
                    } else {
                        (x - y).abs() <= atol + rtol * x.abs()
                    }
                }
            };
            if !ok {
                return Err(format!(
                    "output {wn:?} element {i}: got {}, want {}",
                    g.data().get_f64(i),
                    w.data().get_f64(i)
                ));
            }
        }
    }
    Ok(())
}

/// Inputs with varied, deterministic values (`sin` of the index; bools alternate; integers
/// small).
pub fn ramp_bindings(graph: &Graph) -> HashMap<String, HostTensor> {
    graph
        .bindings()
        .map(|(name, _, ty, _)| {
            let n = ty.shape.numel();
            let f = |i: usize| ((i as f64) * 0.37).sin() * 2.0;
            let data = match ty.dtype {
                DType::Bool => TensorData::Bool((0..n).map(|i| i % 7 != 3).collect()),
                DType::I32 => TensorData::I32((0..n).map(|i| (i % 5) as i32).collect()),
                DType::I64 => TensorData::I64((0..n).map(|i| (i % 5) as i64).collect()),
                DType::F64 => TensorData::F64((0..n).map(f).collect()),
                DType::F32 => TensorData::F32((0..n).map(|i| f(i) as f32).collect()),
                DType::F16 => TensorData::F16((0..n).map(|i| half::f16::from_f64(f(i))).collect()),
                DType::BF16 => {
                    TensorData::BF16((0..n).map(|i| half::bf16::from_f64(f(i))).collect())
                }
            };
            (
                name.to_string(),
                HostTensor::new(ty.shape.clone(), data).expect("sizes"),
            )
        })
        .collect()
}
