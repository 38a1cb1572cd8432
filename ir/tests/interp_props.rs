//! Properties of the reference interpreter over many values: f16/bf16 ops are exactly the f32
//! op rounded (exhaustively over every 16-bit pattern for unary ops), integer floor division
//! and remainder satisfy Python's identities, and no op panics on any value.

use half::{bf16, f16};
use proptest::prelude::*;
use smelt_ir::interp::{eval, EvalError};
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, TensorData, UnaryOp};
use std::collections::HashMap;

fn run(g: &Graph, inputs: &[(&str, TensorData)]) -> Result<TensorData, EvalError> {
    let b: HashMap<String, HostTensor> = inputs
        .iter()
        .map(|(n, d)| {
            (
                n.to_string(),
                HostTensor::new([d.len()], d.clone()).unwrap(),
            )
        })
        .collect();
    Ok(eval(g, &b)?.remove(0).1.into_data())
}

fn unary_graph(op: UnaryOp, dtype: DType, n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", dtype, [n]).unwrap();
    let y = g.unary(op, x).unwrap();
    g.set_output("y", y).unwrap();
    g
}

fn binary_graph(op: BinaryOp, dtype: DType, n: usize) -> Graph {
    let mut g = Graph::new();
    let a = g.input("a", dtype, [n]).unwrap();
    let b = g.input("b", dtype, [n]).unwrap();
    let y = g.binary(op, a, b).unwrap();
    g.set_output("y", y).unwrap();
    g
}

/// Bit patterns, with every NaN collapsed to one (payloads are not part of the semantics).
fn canon(d: &TensorData) -> Vec<u64> {
    (0..d.len())
        .map(|i| {
            let x = d.get_f64(i);
            if x.is_nan() {
                u64::MAX
            } else {
                x.to_bits()
            }
        })
        .collect()
}

/// Rounds f32 data to f16 or bf16.
fn round(d: &TensorData, to: DType) -> TensorData {
    let TensorData::F32(v) = d else {
        panic!("f32 data")
    };
    match to {
        DType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        _ => TensorData::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
    }
}

#[test]
fn f16_and_bf16_unary_ops_are_the_f32_op_rounded_for_every_value() {
    let n = 1 << 16;
    let halves = TensorData::F16((0..=u16::MAX).map(f16::from_bits).collect());
    let brains = TensorData::BF16((0..=u16::MAX).map(bf16::from_bits).collect());
    for op in UnaryOp::ALL.iter().filter(|u| **u != UnaryOp::LogicalNot) {
        for (dtype, x) in [(DType::F16, &halves), (DType::BF16, &brains)] {
            let wide = TensorData::F32((0..n).map(|i| x.get_f64(i) as f32).collect());
            let want = round(
                &run(&unary_graph(*op, DType::F32, n), &[("x", wide)]).unwrap(),
                dtype,
            );
            let got = run(&unary_graph(*op, dtype, n), &[("x", x.clone())]).unwrap();
            assert!(canon(&got) == canon(&want), "{op} {dtype}");
        }
    }
}

fn special_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        Just(0.0f32),
        Just(-0.0),
        Just(f32::INFINITY),
        Just(f32::NEG_INFINITY),
        Just(f32::NAN),
        Just(f32::MIN_POSITIVE / 4.0),
        -70000.0f32..70000.0,
        any::<f32>(),
    ]
}

proptest! {
    #[test]
    fn f16_and_bf16_binary_ops_are_the_f32_op_rounded(
        pairs in prop::collection::vec((special_f32(), special_f32()), 1..40)
    ) {
        let n = pairs.len();
        for dtype in [DType::F16, DType::BF16] {
            // The operands as 16-bit values, and the same values widened to f32.
            let narrow = |v: Vec<f32>| round(&TensorData::F32(v), dtype);
            let a = narrow(pairs.iter().map(|p| p.0).collect());
            let b = narrow(pairs.iter().map(|p| p.1).collect());
            let wide = |d: &TensorData| TensorData::F32((0..n).map(|i| d.get_f64(i) as f32).collect());
            for op in BinaryOp::ALL.iter().filter(|b| !b.returns_bool()) {
                let want = run(&binary_graph(*op, DType::F32, n), &[("a", wide(&a)), ("b", wide(&b))]).unwrap();
                let got = run(&binary_graph(*op, dtype, n), &[("a", a.clone()), ("b", b.clone())]).unwrap();
                prop_assert!(canon(&got) == canon(&round(&want, dtype)), "{} {}", op, dtype);
            }
        }
    }

    #[test]
    fn integer_ops_never_panic_and_division_follows_python(
        pairs in prop::collection::vec(
            (prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), Just(-1), -9i64..10, any::<i64>()],
             prop_oneof![Just(i64::MIN), Just(-1i64), Just(0), Just(1), -9i64..10, any::<i64>()]),
            1..30),
    ) {
        let n = pairs.len();
        let a: Vec<i64> = pairs.iter().map(|p| p.0).collect();
        let b: Vec<i64> = pairs.iter().map(|p| p.1).collect();
        for op in BinaryOp::ALL.iter().filter(|o| **o != BinaryOp::Div) {
            for dtype in [DType::I32, DType::I64] {
                let data = |v: &[i64]| match dtype {
                    DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
                    _ => TensorData::I64(v.to_vec()),
                };
                let r = run(&binary_graph(*op, dtype, n), &[("a", data(&a)), ("b", data(&b))]);
                let divides = matches!(op, BinaryOp::FloorDiv | BinaryOp::Remainder);
                let has_zero = (0..n).any(|i| data(&b).get_f64(i) == 0.0);
                prop_assert_eq!(r.is_err(), divides && has_zero, "{} {}", op, dtype);
                let by_zero = matches!(r, Err(EvalError::DivisionByZero { .. }));
                prop_assert_eq!(by_zero, r.is_err());
            }
        }
        // a == b * floor_div(a, b) + remainder(a, b) (wrapping), with the remainder
        // smaller than |b| and of b's sign.
        let keep: Vec<usize> = (0..n).filter(|&i| b[i] != 0).collect();
        let (a, b): (Vec<i64>, Vec<i64>) = keep.iter().map(|&i| (a[i], b[i])).unzip();
        if !a.is_empty() {
            let m = a.len();
            let ins = [("a", TensorData::I64(a.clone())), ("b", TensorData::I64(b.clone()))];
            let TensorData::I64(q) = run(&binary_graph(BinaryOp::FloorDiv, DType::I64, m), &ins).unwrap() else { unreachable!() };
            let TensorData::I64(r) = run(&binary_graph(BinaryOp::Remainder, DType::I64, m), &ins).unwrap() else { unreachable!() };
            for i in 0..m {
                prop_assert_eq!(b[i].wrapping_mul(q[i]).wrapping_add(r[i]), a[i]);
                prop_assert!(r[i] == 0 || (r[i] < 0) == (b[i] < 0));
                prop_assert!(r[i].unsigned_abs() < b[i].unsigned_abs());
            }
        }
    }
}
