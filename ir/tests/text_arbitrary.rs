//! The random-graph generator covers every op kind and dtype, respects its budgets, and
//! produces runnable graphs (indices in range, no integer division by zero).

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use smelt_ir::arbitrary::{
    arb_bindings, arb_graph, arb_graph_with, arb_graph_with_bindings, GenConfig,
};
use smelt_ir::{BinaryOp, DType, Graph, Op, TensorData};
use std::collections::HashSet;

fn sample_graphs(n: usize, strategy: impl Strategy<Value = Graph>) -> Vec<Graph> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| strategy.new_tree(&mut runner).unwrap().current())
        .collect()
}

#[test]
fn every_op_kind_and_dtype_appears() {
    let graphs = sample_graphs(300, arb_graph(24));
    let mut ops = HashSet::new();
    let mut dtypes = HashSet::new();
    for g in &graphs {
        for n in g.nodes() {
            ops.insert(n.op.name());
            dtypes.insert(n.ty.dtype);
        }
    }
    let kinds = [
        "input",
        "param",
        "const",
        "where",
        "cast",
        "reshape",
        "permute",
        "expand",
        "slice",
        "concat",
        "pad",
        "matmul",
        "gather",
        "index_select",
        "add",
        "floor_div",
        "remainder",
        "pow",
        "neg",
        "logical_not",
        "exp",
        "sum",
        "mean",
        "max",
        "argmax",
        "eq",
        "logical_and",
    ];
    for k in kinds {
        assert!(ops.contains(k), "op {k} never generated; got {ops:?}");
    }
    for d in DType::ALL {
        assert!(dtypes.contains(&d), "dtype {d} never generated");
    }
}

#[test]
fn budgets_hold_and_ranks_stay_small() {
    let cfg = GenConfig {
        max_nodes: 10,
        max_numel: 64,
        float_to_int_casts: false,
        odd_names: false,
    };
    for g in sample_graphs(200, arb_graph_with(cfg)) {
        assert!(g.len() <= 10);
        let names = g
            .bindings()
            .map(|(n, ..)| n)
            .chain(g.outputs().iter().map(|(n, _)| n.as_str()));
        for n in names {
            assert!(
                n.len() >= 2 && n.chars().all(|c| c.is_ascii_alphanumeric()),
                "{n:?}"
            );
        }
        for n in g.nodes() {
            assert!(n.ty.shape.rank() <= 6, "{}", n.ty);
            assert!(n.ty.shape.numel() <= 64, "{}", n.ty);
            if let Op::Cast { input, to } = &n.op {
                assert!(
                    !(g.ty(*input).dtype.is_float() && to.is_int()),
                    "float->int cast generated"
                );
            }
        }
    }
}

fn int_values(g: &Graph, id: smelt_ir::NodeId) -> Option<Vec<i64>> {
    match &g.node(id).op {
        Op::Constant(t) => match t.data() {
            TensorData::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::I64(v) => Some(v.clone()),
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn indices_are_in_range_and_integer_divisors_nonzero() {
    for g in sample_graphs(300, arb_graph(24)) {
        for n in g.nodes() {
            match &n.op {
                Op::Gather { input, index, axis } | Op::IndexSelect { input, index, axis } => {
                    let bound = g.ty(*input).shape.dims()[*axis] as i64;
                    let v = int_values(&g, *index).expect("indices are constants");
                    assert!(
                        v.iter().all(|&i| (0..bound).contains(&i)),
                        "{v:?} vs {bound}"
                    );
                }
                Op::Binary(BinaryOp::FloorDiv | BinaryOp::Remainder, _, d)
                    if g.ty(*d).dtype.is_int() =>
                {
                    let v = int_values(&g, *d).expect("integer divisors are constants");
                    assert!(v.iter().all(|&x| x != 0 && x != -1), "{v:?}");
                }
                Op::Binary(BinaryOp::Pow, _, e) if g.ty(*e).dtype.is_int() => {
                    let v = int_values(&g, *e).expect("integer exponents are constants");
                    assert!(v.iter().all(|&x| (0..=3).contains(&x)), "{v:?}");
                }
                _ => {}
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(128), ..ProptestConfig::default() })]

    #[test]
    fn bindings_cover_every_input_with_its_type(
        (g, values) in arb_graph(16).prop_flat_map(|g| { let b = arb_bindings(&g); (Just(g), b) })
    ) {
        let expected: HashSet<&str> = g.bindings().map(|(n, ..)| n).collect();
        let got: HashSet<&str> = values.keys().map(|k| k.as_str()).collect();
        prop_assert_eq!(expected, got);
        for (name, _, ty, _) in g.bindings() {
            let t = &values[name];
            prop_assert_eq!(t.dtype(), ty.dtype);
            prop_assert_eq!(t.shape(), &ty.shape);
        }
    }
}

#[test]
fn bindings_include_special_values() {
    let mut g = Graph::new();
    g.input("a", DType::F32, [64]).unwrap();
    g.input("b", DType::I64, [64]).unwrap();
    let strategy = arb_bindings(&g);
    let mut runner = TestRunner::deterministic();
    let (mut nan, mut inf, mut neg_zero, mut sub, mut ext) = (false, false, false, false, false);
    for _ in 0..50 {
        let v = strategy.new_tree(&mut runner).unwrap().current();
        if let TensorData::F32(xs) = v["a"].data() {
            nan |= xs.iter().any(|x| x.is_nan());
            inf |= xs.iter().any(|x| x.is_infinite());
            neg_zero |= xs.iter().any(|x| x.to_bits() == (-0.0f32).to_bits());
            sub |= xs.iter().any(|x| x.is_subnormal());
        }
        if let TensorData::I64(xs) = v["b"].data() {
            ext |= xs.iter().any(|&x| x == i64::MIN || x == i64::MAX);
        }
    }
    assert!(nan && inf && neg_zero && sub && ext);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(512), ..ProptestConfig::default() })]

    /// The generator's graphs are runnable: the reference interpreter evaluates every one of
    /// them on arbitrary bindings without a data-dependent error (index out of range,
    /// integer division by zero).
    #[test]
    fn generated_graphs_run_on_the_interpreter((g, values) in arb_graph_with_bindings(24)) {
        let out = smelt_ir::interp::eval(&g, &values);
        prop_assert!(out.is_ok(), "{:?}\n{}", out.err(), g);
        prop_assert_eq!(out.unwrap().len(), g.outputs().len());
    }
}
