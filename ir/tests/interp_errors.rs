//! Every `EvalError` variant, triggered once, with a message that names the culprit.

use smelt_ir::interp::{eval, eval_nodes, EvalError};
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, Node, Op, TensorData, TensorType, UnaryOp};
use std::collections::HashMap;

fn bind(pairs: &[(&str, HostTensor)]) -> HashMap<String, HostTensor> {
    pairs
        .iter()
        .map(|(n, t)| (n.to_string(), t.clone()))
        .collect()
}

fn f32s(shape: &[usize], v: Vec<f32>) -> HostTensor {
    HostTensor::from_f32(shape, v).unwrap()
}

fn tensor(shape: &[usize], data: TensorData) -> HostTensor {
    HostTensor::new(shape, data).unwrap()
}

/// Input `x: f32[2, 3]`, param `w: i64[3]`, output `x + 1`.
fn two_bindings() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]).unwrap();
    let w = g.param("w", DType::I64, [3]).unwrap();
    let n = g.unary(UnaryOp::Neg, x).unwrap();
    g.set_output("y", n).unwrap();
    g.set_output("w", w).unwrap();
    g
}

#[test]
fn missing_binding_lists_what_the_graph_expects() {
    let g = two_bindings();
    let err = eval(&g, &bind(&[("x", f32s(&[2, 3], vec![0.0; 6]))])).unwrap_err();
    assert!(matches!(&err, EvalError::MissingBinding { name, kind: "param", .. } if name == "w"));
    let msg = err.to_string();
    for part in ["\"w\"", "input \"x\": f32[2, 3]", "param \"w\": i64[3]"] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
    // A missing input is reported as an input; eval_nodes reports the same.
    let w = HostTensor::from_i64([3], vec![1, 2, 3]).unwrap();
    let err = eval_nodes(&g, &bind(&[("w", w)])).unwrap_err();
    assert!(
        err.to_string().starts_with("no binding for input \"x\""),
        "{err}"
    );
}

#[test]
fn binding_of_the_wrong_dtype_or_shape() {
    let g = two_bindings();
    let w = HostTensor::from_i64([3], vec![1, 2, 3]).unwrap();
    let x64 = tensor(&[2, 3], TensorData::F64(vec![0.0; 6]));
    let err = eval(&g, &bind(&[("x", x64), ("w", w.clone())])).unwrap_err();
    assert!(matches!(&err, EvalError::BindingType { name, .. } if name == "x"));
    assert_eq!(
        err.to_string(),
        "binding \"x\": expected f32[2, 3], got f64[2, 3]"
    );
    let err = eval(&g, &bind(&[("x", f32s(&[3, 2], vec![0.0; 6])), ("w", w)])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "binding \"x\": expected f32[2, 3], got f32[3, 2]"
    );
}

#[test]
fn gather_index_out_of_range_names_node_value_and_axis() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 2]).unwrap();
    let i = g.input("i", DType::I64, [1, 2]).unwrap();
    let y = g.gather(x, i, 0).unwrap();
    g.set_output("y", y).unwrap();
    let b = bind(&[
        ("x", f32s(&[3, 2], vec![0.0; 6])),
        ("i", HostTensor::from_i64([1, 2], vec![0, -1]).unwrap()),
    ]);
    let err = eval(&g, &b).unwrap_err();
    assert_eq!(
        err,
        EvalError::IndexOutOfRange {
            node: y,
            op: "gather",
            index: -1,
            axis: 0,
            size: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "gather at node %2: index -1 is out of range for axis 0 of size 3"
    );
}

#[test]
fn index_select_index_out_of_range() {
    let mut g = Graph::new();
    let x = g.input("x", DType::I32, [2, 4]).unwrap();
    let i = g.input("i", DType::I32, [2]).unwrap();
    let y = g.index_select(x, i, 1).unwrap();
    g.set_output("y", y).unwrap();
    let b = bind(&[
        ("x", tensor(&[2, 4], TensorData::I32(vec![0; 8]))),
        ("i", tensor(&[2], TensorData::I32(vec![3, 4]))),
    ]);
    let msg = eval(&g, &b).unwrap_err().to_string();
    assert_eq!(
        msg,
        "index_select at node %2: index 4 is out of range for axis 1 of size 4"
    );
}

#[test]
fn integer_division_by_zero_names_node_and_op() {
    for (op, dtype) in [
        (BinaryOp::FloorDiv, DType::I32),
        (BinaryOp::Remainder, DType::I64),
    ] {
        let mut g = Graph::new();
        let a = g.input("a", dtype, [3]).unwrap();
        let b = g.input("b", dtype, [3]).unwrap();
        let y = g.binary(op, a, b).unwrap();
        g.set_output("y", y).unwrap();
        let vals = |v: Vec<i64>| match dtype {
            DType::I32 => tensor(&[3], TensorData::I32(v.iter().map(|&x| x as i32).collect())),
            _ => tensor(&[3], TensorData::I64(v)),
        };
        let b = bind(&[("a", vals(vec![1, 2, 3])), ("b", vals(vec![1, 0, 2]))]);
        let err = eval(&g, &b).unwrap_err();
        assert_eq!(
            err,
            EvalError::DivisionByZero {
                node: y,
                op: op.name()
            }
        );
        assert_eq!(
            err.to_string(),
            format!("{} at node %2: integer division by zero", op.name())
        );
    }
}

#[test]
fn invalid_graph_is_reported_by_the_verifier() {
    // An f32 input whose stored type claims i64.
    let nodes = vec![Node {
        op: Op::Input {
            name: "x".into(),
            dtype: DType::F32,
            shape: [2].into(),
        },
        ty: TensorType::new(DType::I64, [2]),
    }];
    let g = Graph::from_parts(nodes, vec![("y".into(), smelt_ir::NodeId(0))]);
    let err = eval(&g, &bind(&[("x", f32s(&[2], vec![1.0, 2.0]))])).unwrap_err();
    assert!(matches!(err, EvalError::Graph(_)));
    let msg = err.to_string();
    assert!(
        msg.starts_with("invalid graph: node %0:") && msg.contains("i64[2]"),
        "{msg}"
    );
}

#[test]
fn value_too_large_to_materialise() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1]).unwrap();
    let y = g.expand(x, [1 << 62, 4]).unwrap();
    g.set_output("y", y).unwrap();
    let err = eval(&g, &bind(&[("x", f32s(&[1], vec![1.0]))])).unwrap_err();
    assert!(matches!(err, EvalError::TooLarge { node, op: "expand", .. } if node == y));
    assert!(
        err.to_string()
            .starts_with("expand at node %1: a value of type f32["),
        "{err}"
    );
}
