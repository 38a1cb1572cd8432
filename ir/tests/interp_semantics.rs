//! Closed-form checks of the reference interpreter and of its API: values known exactly
//! (erf(0) = 0, sum of 0..n, PyTorch's integer rules), the documented rounding choices, output
//! order, `eval_nodes`, 0-d and zero-size tensors.

use half::f16;
use smelt_ir::interp::{eval, eval_nodes};
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, NodeId, ReduceOp, Scalar, TensorData};
use smelt_ir::{TensorType, UnaryOp};
use std::collections::HashMap;

fn bind(pairs: &[(&str, HostTensor)]) -> HashMap<String, HostTensor> {
    pairs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect()
}

fn t(shape: &[usize], data: TensorData) -> HostTensor {
    HostTensor::new(shape, data).unwrap()
}

/// Evaluates the single-output graph `f` builds on one input `x`.
fn run1(x: HostTensor, f: impl FnOnce(&mut Graph, NodeId) -> NodeId) -> HostTensor {
    let mut g = Graph::new();
    let xi = g.input("x", x.dtype(), x.shape().clone()).unwrap();
    let y = f(&mut g, xi);
    g.set_output("y", y).unwrap();
    eval(&g, &bind(&[("x", x)])).unwrap().remove(0).1
}

/// Elementwise binary op on two 1-D tensors of the same length.
fn bin(op: BinaryOp, a: TensorData, b: TensorData) -> TensorData {
    let n = a.len();
    let (a, b) = (t(&[n], a), t(&[n], b));
    let mut g = Graph::new();
    let (x, y) = (
        g.input("a", a.dtype(), [n]).unwrap(),
        g.input("b", b.dtype(), [n]).unwrap(),
    );
    let z = g.binary(op, x, y).unwrap();
    g.set_output("z", z).unwrap();
    eval(&g, &bind(&[("a", a), ("b", b)]))
        .unwrap()
        .remove(0)
        .1
        .into_data()
}

#[test]
fn transcendental_values_known_exactly() {
    for dtype in [DType::F16, DType::BF16, DType::F32, DType::F64] {
        let x = t(&[2], TensorData::F64(vec![0.0, -0.0]));
        let x = run1(x, |g, x| g.cast(x, dtype).unwrap());
        for (op, want) in [
            (UnaryOp::Erf, [0.0, -0.0]),
            (UnaryOp::Tanh, [0.0, -0.0]),
            (UnaryOp::Sin, [0.0, -0.0]),
            (UnaryOp::Exp, [1.0, 1.0]),
            (UnaryOp::Cos, [1.0, 1.0]),
            (UnaryOp::Sigmoid, [0.5, 0.5]),
            (UnaryOp::Sqrt, [0.0, -0.0]),
        ] {
            let y = run1(x.clone(), |g, x| g.unary(op, x).unwrap());
            let got: Vec<u64> = (0..2).map(|i| y.data().get_f64(i).to_bits()).collect();
            let want: Vec<u64> = want.iter().map(|w: &f64| w.to_bits()).collect();
            assert_eq!(got, want, "{op} {dtype}");
        }
    }
}

#[test]
fn sums_and_products_of_ranges() {
    let n = 1000i64;
    let x = HostTensor::from_i64([n as usize], (0..n).collect()).unwrap();
    let s = run1(x, |g, x| g.reduce(ReduceOp::Sum, x, &[0], false).unwrap());
    assert_eq!(s.data(), &TensorData::I64(vec![n * (n - 1) / 2]));
    // i32 sums accumulate in i64: no wrap at 2^31.
    let x = t(&[4], TensorData::I32(vec![i32::MAX; 4]));
    let s = run1(x, |g, x| g.reduce(ReduceOp::Sum, x, &[0], true).unwrap());
    assert_eq!(s.shape().dims(), &[1]);
    assert_eq!(s.data(), &TensorData::I64(vec![4 * i32::MAX as i64]));
    let x = HostTensor::from_i64([10], (1..=10).collect()).unwrap();
    let p = run1(x, |g, x| g.reduce(ReduceOp::Prod, x, &[0], false).unwrap());
    assert_eq!(p.data(), &TensorData::I64(vec![3_628_800]));
    let x = t(
        &[100],
        TensorData::F64((1..=100).map(|i| i as f64).collect()),
    );
    let m = run1(x, |g, x| g.reduce(ReduceOp::Mean, x, &[0], false).unwrap());
    assert_eq!(m.data(), &TensorData::F64(vec![50.5]));
}

#[test]
fn f16_sum_accumulates_wide_and_rounds_once() {
    // Step by step in f16, 2048 + 1 rounds back to 2048 twice; accumulated wide it is 2050.
    let v = [2048.0, 1.0, 1.0].map(f16::from_f32).to_vec();
    let s = run1(t(&[3], TensorData::F16(v)), |g, x| {
        g.reduce(ReduceOp::Sum, x, &[0], false).unwrap()
    });
    assert_eq!(s.data().get_f64(0), 2050.0);
}

#[test]
fn integer_division_follows_python_signs() {
    let a = TensorData::I32(vec![-7, 7, -7, 7, i32::MIN, i32::MIN]);
    let b = TensorData::I32(vec![2, -2, -2, 2, -1, 3]);
    assert_eq!(
        bin(BinaryOp::FloorDiv, a.clone(), b.clone()),
        TensorData::I32(vec![-4, -4, 3, 3, i32::MIN, -715_827_883])
    );
    assert_eq!(
        bin(BinaryOp::Remainder, a, b),
        TensorData::I32(vec![1, -1, -1, 1, 0, 1])
    );
    let a = TensorData::F32(vec![-7.0, 7.0, 5.5, -0.5]);
    let b = TensorData::F32(vec![2.0, -2.0, f32::INFINITY, f32::INFINITY]);
    assert_eq!(
        bin(BinaryOp::FloorDiv, a.clone(), b.clone()),
        TensorData::F32(vec![-4.0, -4.0, 0.0, -1.0])
    );
    assert_eq!(
        bin(BinaryOp::Remainder, a, b),
        TensorData::F32(vec![1.0, -1.0, 5.5, f32::INFINITY])
    );
}

#[test]
fn integer_pow_rules() {
    let a = TensorData::I64(vec![2, 1, -1, -1, 0, 3, 2, -2]);
    let b = TensorData::I64(vec![-1, -5, -3, -4, 0, 40, 63, 63]);
    assert_eq!(
        bin(BinaryOp::Pow, a, b),
        TensorData::I64(vec![
            0,
            1,
            -1,
            1,
            1,
            3i64.wrapping_pow(40),
            i64::MIN,
            i64::MIN
        ])
    );
    let a = TensorData::I32(vec![2, 3]);
    let b = TensorData::I32(vec![31, 21]);
    assert_eq!(
        bin(BinaryOp::Pow, a, b),
        TensorData::I32(vec![i32::MIN, 3i32.wrapping_pow(21)])
    );
}

#[test]
fn nan_propagation_and_truthiness() {
    let nan = f32::NAN;
    let a = TensorData::F32(vec![nan, 1.0, nan]);
    let b = TensorData::F32(vec![1.0, nan, 0.0]);
    for op in [BinaryOp::Maximum, BinaryOp::Minimum] {
        let TensorData::F32(v) = bin(op, a.clone(), b.clone()) else {
            panic!()
        };
        assert!(v.iter().all(|x| x.is_nan()), "{op}");
    }
    assert_eq!(
        bin(BinaryOp::LogicalAnd, a.clone(), b.clone()),
        TensorData::Bool(vec![true, true, false])
    );
    assert_eq!(
        bin(BinaryOp::Ne, a.clone(), a.clone()),
        TensorData::Bool(vec![true, false, true])
    );
    let x = t(&[3], TensorData::F32(vec![nan, 0.0, -0.0]));
    let not = run1(x.clone(), |g, x| g.unary(UnaryOp::LogicalNot, x).unwrap());
    assert_eq!(not.data(), &TensorData::Bool(vec![false, true, true]));
    let relu = run1(x, |g, x| g.unary(UnaryOp::Relu, x).unwrap());
    assert!(relu.data().get_f64(0).is_nan());
    let x = t(&[5], TensorData::F32(vec![3.0, nan, 7.0, nan, 7.0]));
    for op in [ReduceOp::ArgMax, ReduceOp::ArgMin] {
        let i = run1(x.clone(), |g, x| g.reduce(op, x, &[0], false).unwrap());
        assert_eq!(i.data(), &TensorData::I64(vec![1]), "{op}");
    }
    let x = t(&[3], TensorData::F32(vec![3.0, 7.0, 7.0]));
    let i = run1(x, |g, x| g.reduce(ReduceOp::ArgMax, x, &[0], true).unwrap());
    assert_eq!(
        (i.shape().dims(), i.data()),
        (&[1][..], &TensorData::I64(vec![1]))
    );
}

#[test]
fn casts_to_f16_go_through_f32() {
    // Just above the f16 tie between 1 and 1 + 2^-10: through f32 it becomes the tie itself,
    // which rounds to even (1.0), as PyTorch's double -> float -> half does.
    let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
    let y = run1(t(&[1], TensorData::F64(vec![x])), |g, x| {
        g.cast(x, DType::F16).unwrap()
    });
    assert_eq!(y.data(), &TensorData::F16(vec![f16::ONE]));
    let y = run1(t(&[2], TensorData::F32(vec![f32::NAN, -3e9])), |g, x| {
        g.cast(x, DType::I64).unwrap()
    });
    assert_eq!(y.data(), &TensorData::I64(vec![0, -3_000_000_000]));
}

#[test]
fn outputs_in_graph_order_and_every_node_value() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2]).unwrap();
    let w = g.param("w", DType::F32, [2]).unwrap();
    let c = g.scalar(Scalar::Float(10.0), DType::F32).unwrap();
    let s = g.binary(BinaryOp::Add, x, w).unwrap();
    let y = g.binary(BinaryOp::Mul, s, c).unwrap();
    g.set_output("last", y).unwrap();
    g.set_output("first", x).unwrap();
    g.set_output("again", y).unwrap();
    let b = bind(&[
        ("x", HostTensor::from_f32([2], vec![1.0, 2.0]).unwrap()),
        ("w", HostTensor::from_f32([2], vec![0.5, -4.0]).unwrap()),
        ("unused", HostTensor::from_f32([1], vec![0.0]).unwrap()),
    ]);
    let out = eval(&g, &b).unwrap();
    let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["last", "first", "again"]);
    assert_eq!(out[0].1.to_f32_vec(), [15.0, -20.0]);
    assert_eq!(out[1].1, b["x"]);
    assert_eq!(out[2].1, out[0].1);
    let all = eval_nodes(&g, &b).unwrap();
    assert_eq!(all.len(), g.len());
    assert_eq!(all[w.index()], b["w"]);
    assert_eq!(all[c.index()].to_f32_vec(), [10.0]);
    assert_eq!(all[s.index()].to_f32_vec(), [1.5, -2.0]);
    for (id, v) in g.ids().zip(&all) {
        assert_eq!(
            TensorType::new(v.dtype(), v.shape().clone()),
            *g.ty(id),
            "{id}"
        );
    }
}

#[test]
fn zero_d_chain() {
    let x = t(&[], TensorData::F32(vec![-2.0]));
    let y = run1(x, |g, x| {
        let a = g.unary(UnaryOp::Abs, x).unwrap();
        let e = g.expand(a, [2, 2]).unwrap();
        let s = g.reduce(ReduceOp::Sum, e, &[0, 1], false).unwrap();
        let r = g.reduce(ReduceOp::Max, s, &[], false).unwrap();
        g.reshape(r, [1, 1, 1]).unwrap()
    });
    assert_eq!(
        (y.shape().dims(), y.to_f32_vec()),
        (&[1, 1, 1][..], vec![8.0])
    );
}

#[test]
fn zero_size_tensors_never_fail() {
    // Integer division by zero is only an error for elements that exist.
    let z = bin(
        BinaryOp::FloorDiv,
        TensorData::I64(vec![]),
        TensorData::I64(vec![]),
    );
    assert_eq!(z, TensorData::I64(vec![]));
    let x = t(&[0, 3], TensorData::I32(vec![]));
    let y = run1(x, |g, x| {
        let s = g.reduce(ReduceOp::Sum, x, &[0], false).unwrap();
        let c = g.cast(s, DType::F64).unwrap();
        let m = g.reduce(ReduceOp::Mean, c, &[0], true).unwrap();
        let e = g.unary(UnaryOp::Exp, m).unwrap();
        g.matmul(e, e).unwrap()
    });
    // sum over the empty axis is [0, 0, 0]; mean of it 0; exp 1; [1]·[1] = 1.
    assert_eq!(y.data(), &TensorData::F64(vec![1.0]));
    let x = t(&[2, 0], TensorData::F32(vec![]));
    let y = run1(x, |g, x| {
        let p = g.pad(x, &[(0, 0), (1, 1)], Scalar::Int(7)).unwrap();
        g.reduce(ReduceOp::Prod, p, &[1], false).unwrap()
    });
    assert_eq!(y.to_f32_vec(), [49.0, 49.0]);
}
