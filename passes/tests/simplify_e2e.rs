//! End-to-end tests of `simplify`: random graphs stay equivalent, unit cases simplify as
//! expected, the run is deterministic and reports why it stopped.

#[path = "simplify_rules/gen.rs"]
#[allow(dead_code)]
mod gen;

use proptest::prelude::*;
use smelt_ir::arbitrary::{arb_bindings, arb_graph_with, GenConfig};
use smelt_ir::interp::eval;
use smelt_ir::text::print;
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, Op, Scalar, TensorData, UnaryOp};
use smelt_passes::simplify::simplify;
use smelt_passes::PassOptions;
use std::collections::HashMap;

/// Bitwise equality of two tensors, except that any NaN equals any NaN.
fn same_values(a: &HostTensor, b: &HostTensor) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    if !a.dtype().is_float() {
        return a == b;
    }
    (0..a.numel()).all(|i| {
        let (x, y) = (a.data().get_f64(i), b.data().get_f64(i));
        (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
    })
}

/// Checks that `simplify(g)` verifies, keeps the signature and outputs, and evaluates to the
/// same values on `bindings`.
fn check_equivalent(
    g: &Graph,
    bindings: &HashMap<String, HostTensor>,
    opts: &PassOptions,
) -> Result<(), TestCaseError> {
    let (s, report) = simplify(g, opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
    smelt_ir::verify(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let sig = |g: &Graph| -> Vec<(String, String, bool)> {
        g.bindings()
            .map(|(n, _, t, p)| (n.to_string(), t.to_string(), p))
            .collect()
    };
    prop_assert_eq!(sig(g), sig(&s));
    let names = |g: &Graph| -> Vec<(String, String)> {
        g.outputs()
            .iter()
            .map(|(n, id)| (n.clone(), g.ty(*id).to_string()))
            .collect()
    };
    prop_assert_eq!(names(g), names(&s));
    let Ok(want) = eval(g, bindings) else {
        return Ok(());
    };
    let got = eval(&s, bindings)
        .map_err(|e| TestCaseError::fail(format!("{e}\n{}\n{}\n{report}", print(g), print(&s))))?;
    for ((n, w), (_, v)) in want.iter().zip(&got) {
        prop_assert!(
            same_values(w, v),
            "output {n} differs:\n{:?}\nvs\n{:?}\noriginal:\n{}\nsimplified:\n{}",
            w,
            v,
            print(g),
            print(&s)
        );
    }
    Ok(())
}

fn graphs() -> impl Strategy<Value = (Graph, HashMap<String, HostTensor>)> {
    graphs_of(24)
}

fn graphs_of(max_nodes: usize) -> impl Strategy<Value = (Graph, HashMap<String, HostTensor>)> {
    arb_graph_with(GenConfig {
        max_nodes,
        ..GenConfig::default()
    })
    .prop_flat_map(|g| {
        let b = arb_bindings(&g);
        (Just(g), b)
    })
}

/// Random chains of ops the rules target (permutes, negations, casts, identities with
/// special constants, reductions, reshapes …) from one or two inputs, with an intermediate
/// and the end as outputs: many rules fire and interact during saturation.
fn rule_rich_graph(seed: u64) -> Graph {
    use gen::{Gen, ALL, SPECIAL};
    use smelt_ir::ReduceOp;
    let r = &mut Gen::new(seed, false);
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let mut cur = r.input(&mut g, d, &s);
    let other = r.input(&mut g, d, &s);
    let mut mid = cur;
    let steps = 2 + r.below(10);
    for step in 0..steps {
        let ty = g.ty(cur).clone();
        let rank = ty.shape.rank();
        let next = match r.below(12) {
            0 | 1 => g.permute(cur, &r.perm(rank)).ok(),
            2 => g
                .unary(
                    r.pick(&[
                        UnaryOp::Neg,
                        UnaryOp::Abs,
                        UnaryOp::Relu,
                        UnaryOp::LogicalNot,
                    ]),
                    cur,
                )
                .ok(),
            3 => g.cast(cur, r.pick(ALL)).ok(),
            4 | 5 => {
                let cs = r.bshape(ty.shape.dims());
                let c = r.constant(&mut g, ty.dtype, &cs, &[1.0, -0.0, 0.0, -1.0, 2.0, 0.5]);
                let op = r.pick(&[BinaryOp::Mul, BinaryOp::Add, BinaryOp::Sub, BinaryOp::Div]);
                if r.chance(50) {
                    g.binary(op, cur, c).ok()
                } else {
                    g.binary(op, c, cur).ok()
                }
            }
            6 => {
                let n = ty.shape.numel();
                g.reshape(cur, vec![n]).ok()
            }
            7 => {
                let axes: Vec<usize> = (0..rank).filter(|_| r.chance(50)).collect();
                let op = r.pick(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean]);
                g.reduce(op, cur, &axes, r.chance(50)).ok()
            }
            8 => {
                let o = if g.ty(other).shape == ty.shape {
                    other
                } else {
                    cur
                };
                let p = r.perm(rank);
                let a = g.permute(cur, &p).ok();
                let b = g.permute(o, &p).ok();
                match (a, b) {
                    (Some(a), Some(b)) => g.binary(r.pick(BinaryOp::ALL), a, b).ok(),
                    _ => None,
                }
            }
            9 => {
                let cs = r.bshape(ty.shape.dims());
                let c = r.constant(&mut g, DType::Bool, &cs, &[1.0, 0.0]);
                g.where_(c, cur, mid).ok()
            }
            10 => g.binary(r.pick(BinaryOp::ALL), cur, cur).ok(),
            _ => {
                let c = r.constant(&mut g, ty.dtype, &[], SPECIAL);
                g.binary(r.pick(BinaryOp::ALL), cur, c).ok()
            }
        };
        if let Some(n) = next {
            cur = n;
        }
        if step == steps / 2 {
            mid = cur;
        }
    }
    g.set_output("mid", mid).unwrap();
    g.set_output("end", cur).unwrap();
    g
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn simplify_preserves_rule_rich_graphs(
        (g, b) in any::<u64>().prop_flat_map(|seed| {
            let g = rule_rich_graph(seed);
            let b = arb_bindings(&g);
            (Just(g), b)
        })
    ) {
        check_equivalent(&g, &b, &PassOptions::default())?;
        let tiny = PassOptions { node_limit: 8, ..PassOptions::default() };
        check_equivalent(&g, &b, &tiny)?;
        // Fast-math changes values (not checked here) but never the graph's validity or
        // signature.
        let fm = PassOptions { fast_math: true, ..PassOptions::default() };
        let (s, _) = simplify(&g, &fm).map_err(|e| TestCaseError::fail(e.to_string()))?;
        smelt_ir::verify(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let sig = |g: &Graph| -> Vec<String> {
            g.bindings()
                .map(|(n, _, t, _)| format!("{n}: {t}"))
                .chain(g.outputs().iter().map(|(n, id)| format!("{n} = {}", g.ty(*id))))
                .collect()
        };
        prop_assert_eq!(sig(&g), sig(&s));
    }

    #[test]
    fn simplify_preserves_random_graphs((g, b) in graphs()) {
        check_equivalent(&g, &b, &PassOptions::default())?;
    }

    #[test]
    fn simplify_preserves_larger_random_graphs((g, b) in graphs_of(80)) {
        check_equivalent(&g, &b, &PassOptions::default())?;
    }

    #[test]
    fn simplify_with_tiny_node_limit_is_still_correct((g, b) in graphs()) {
        let opts = PassOptions { node_limit: 3, iter_limit: 2, ..PassOptions::default() };
        check_equivalent(&g, &b, &opts)?;
    }

    #[test]
    fn simplify_is_deterministic_on_random_graphs((g, _b) in graphs()) {
        let opts = PassOptions::default();
        let a = simplify(&g, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let b = simplify(&g, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(print(&a.0), print(&b.0));
        prop_assert_eq!(a.1, b.1);
    }
}

fn opts() -> PassOptions {
    PassOptions::default()
}

/// The ops of `g` other than inputs and parameters, by name.
fn op_names(g: &Graph) -> Vec<&'static str> {
    g.nodes()
        .iter()
        .filter(|n| !matches!(n.op, Op::Input { .. } | Op::Param { .. }))
        .map(|n| n.op.name())
        .collect()
}

#[test]
fn permute_chain_cancels_to_nothing() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]).unwrap();
    let a = g.permute(x, &[1, 2, 0]).unwrap();
    let b = g.permute(a, &[2, 0, 1]).unwrap();
    let c = g.permute(b, &[0, 2, 1]).unwrap();
    let d = g.permute(c, &[0, 2, 1]).unwrap();
    g.set_output("y", d).unwrap();
    let (s, report) = simplify(&g, &opts()).unwrap();
    assert_eq!(op_names(&s), Vec::<&str>::new(), "{}", print(&s));
    assert_eq!(s.outputs()[0].1, smelt_ir::NodeId(0));
    assert!(
        report.rules_applied.contains_key("permute-permute"),
        "{report:?}"
    );
}

#[test]
fn permute_sinks_through_elementwise_and_cancels() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]).unwrap();
    let t = g.permute(x, &[1, 0]).unwrap();
    let e = g.unary(UnaryOp::Exp, t).unwrap();
    let two = g.scalar(Scalar::Float(2.0), DType::F32).unwrap();
    let m = g.binary(BinaryOp::Mul, e, two).unwrap();
    let back = g.permute(m, &[1, 0]).unwrap();
    g.set_output("y", back).unwrap();
    let (s, _) = simplify(&g, &opts()).unwrap();
    assert_eq!(op_names(&s), vec!["exp", "const", "mul"], "{}", print(&s));
}

#[test]
fn double_negation_is_removed() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F16, [4]).unwrap();
    let a = g.unary(UnaryOp::Neg, x).unwrap();
    let b = g.unary(UnaryOp::Neg, a).unwrap();
    g.set_output("y", b).unwrap();
    let (s, report) = simplify(&g, &opts()).unwrap();
    assert!(op_names(&s).is_empty(), "{}", print(&s));
    assert_eq!(report.rules_applied.get("neg-neg"), Some(&1));
}

#[test]
fn constants_are_folded() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3]).unwrap();
    let c = g
        .constant(HostTensor::from_f32([3], vec![1.0, 2.0, 3.0]).unwrap())
        .unwrap();
    let d = g.scalar(Scalar::Float(0.5), DType::F32).unwrap();
    let e = g.binary(BinaryOp::Mul, c, d).unwrap();
    let f = g.unary(UnaryOp::Exp, e).unwrap();
    let y = g.binary(BinaryOp::Add, x, f).unwrap();
    g.set_output("y", y).unwrap();
    let (s, _) = simplify(&g, &opts()).unwrap();
    assert_eq!(op_names(&s), vec!["const", "add"], "{}", print(&s));
    let Op::Constant(t) = &s.nodes()[1].op else {
        panic!("{}", print(&s))
    };
    let want: Vec<f32> = [0.5f32, 1.0, 1.5].iter().map(|v| v.exp()).collect();
    assert_eq!(t.data(), &TensorData::F32(want));
}

#[test]
fn lossless_cast_pair_is_removed_and_lossy_one_kept() {
    let mut g = Graph::new();
    let x = g.input("x", DType::BF16, [4]).unwrap();
    let a = g.cast(x, DType::F32).unwrap();
    let b = g.cast(a, DType::BF16).unwrap();
    g.set_output("lossless", b).unwrap();
    let i = g.input("i", DType::I64, [4]).unwrap();
    let c = g.cast(i, DType::F64).unwrap();
    let d = g.cast(c, DType::I64).unwrap();
    g.set_output("lossy", d).unwrap();
    let (s, _) = simplify(&g, &opts()).unwrap();
    assert_eq!(s.outputs()[0].1, smelt_ir::NodeId(0), "{}", print(&s));
    assert_eq!(op_names(&s), vec!["cast", "cast"], "{}", print(&s));
}

#[test]
fn x_plus_positive_zero_is_not_simplified() {
    for dtype in [DType::F16, DType::BF16, DType::F32, DType::F64] {
        let mut g = Graph::new();
        let x = g.input("x", dtype, [4]).unwrap();
        let z = g.scalar(Scalar::Float(0.0), dtype).unwrap();
        let y = g.binary(BinaryOp::Add, x, z).unwrap();
        g.set_output("y", y).unwrap();
        let (s, _) = simplify(&g, &opts()).unwrap();
        assert_eq!(op_names(&s), vec!["const", "add"], "{}", print(&s));
        // With fast-math it goes.
        let fm = PassOptions {
            fast_math: true,
            ..opts()
        };
        let (s, _) = simplify(&g, &fm).unwrap();
        assert!(op_names(&s).is_empty(), "{}", print(&s));
    }
}

#[test]
fn exactness_negatives_are_kept() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]).unwrap();
    let zero = g.scalar(Scalar::Float(0.0), DType::F32).unwrap();
    let three = g.scalar(Scalar::Float(3.0), DType::F32).unwrap();
    let m = g.binary(BinaryOp::Mul, x, zero).unwrap();
    g.set_output("mul_zero", m).unwrap();
    let d = g.binary(BinaryOp::Div, x, three).unwrap();
    g.set_output("div_three", d).unwrap();
    let s2 = g.binary(BinaryOp::Sub, x, x).unwrap();
    g.set_output("sub_self", s2).unwrap();
    let (s, _) = simplify(&g, &opts()).unwrap();
    assert_eq!(
        op_names(&s),
        vec!["const", "mul", "const", "div", "sub"],
        "{}",
        print(&s)
    );
}

#[test]
fn division_by_power_of_two_becomes_multiplication() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4]).unwrap();
    let four = g.scalar(Scalar::Float(4.0), DType::F32).unwrap();
    let d = g.binary(BinaryOp::Div, x, four).unwrap();
    g.set_output("y", d).unwrap();
    let (s, r) = simplify(&g, &opts()).unwrap();
    assert_eq!(op_names(&s), vec!["const", "mul"], "{}\n{r:?}", print(&s));
}

#[test]
fn simplify_twice_prints_identically() {
    let g = smelt_passes_test_graph();
    let a = simplify(&g, &opts()).unwrap();
    let b = simplify(&g, &opts()).unwrap();
    assert_eq!(print(&a.0), print(&b.0));
    assert_eq!(a.1, b.1);
}

#[test]
fn unused_inputs_and_params_are_kept_in_order() {
    let mut g = Graph::new();
    let w = g.param("w", DType::F32, [2]).unwrap();
    let x = g.input("x", DType::F32, [2]).unwrap();
    let _unused = g.input("unused", DType::I32, [7]).unwrap();
    let y = g.binary(BinaryOp::Add, x, w).unwrap();
    let y2 = g.binary(BinaryOp::Add, x, w).unwrap();
    let z = g.binary(BinaryOp::Mul, y, y2).unwrap();
    g.set_output("z", z).unwrap();
    g.set_output("x_again", x).unwrap();
    let (s, _) = simplify(&g, &opts()).unwrap();
    let names: Vec<&str> = s.bindings().map(|(n, ..)| n).collect();
    assert_eq!(names, ["w", "x", "unused"]);
    // CSE: one add.
    assert_eq!(op_names(&s), vec!["add", "mul"], "{}", print(&s));
    assert_eq!(s.outputs()[1], ("x_again".to_string(), smelt_ir::NodeId(1)));
}

#[test]
fn stop_reason_is_reported() {
    let g = smelt_passes_test_graph();
    let (_, r) = simplify(&g, &opts()).unwrap();
    assert_eq!(r.stop_reason, "saturated", "{r}");
    assert!(
        r.iterations >= 1 && r.egraph_nodes > 0 && r.egraph_classes > 0,
        "{r}"
    );
    let tiny = PassOptions {
        iter_limit: 1,
        ..opts()
    };
    let (_, r) = simplify(&g, &tiny).unwrap();
    assert_eq!(r.stop_reason, "iteration limit", "{r}");
    let tiny = PassOptions {
        node_limit: 1,
        ..opts()
    };
    let (_, r) = simplify(&g, &tiny).unwrap();
    assert_eq!(r.stop_reason, "node limit", "{r}");
}

/// A small graph with something for each rule set to do.
fn smelt_passes_test_graph() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3, 4]).unwrap();
    let p = g.permute(x, &[2, 0, 1]).unwrap();
    let n = g.unary(UnaryOp::Neg, p).unwrap();
    let nn = g.unary(UnaryOp::Neg, n).unwrap();
    let one = g.scalar(Scalar::Float(1.0), DType::F32).unwrap();
    let m = g.binary(BinaryOp::Mul, nn, one).unwrap();
    let r = g.reduce(smelt_ir::ReduceOp::Sum, m, &[0], false).unwrap();
    let back = g.permute(m, &[1, 2, 0]).unwrap();
    g.set_output("r", r).unwrap();
    g.set_output("back", back).unwrap();
    g
}

/// The rule-rich graphs above are not vacuous: many different rules fire on them.
#[test]
fn rule_rich_graphs_exercise_the_rules() {
    let mut fired: std::collections::BTreeMap<String, usize> = Default::default();
    for seed in 0..256 {
        let (_, r) = simplify(&rule_rich_graph(seed), &opts()).unwrap();
        for (name, n) in r.rules_applied {
            *fired.entry(name).or_default() += n;
        }
    }
    println!("{fired:?}");
    assert!(
        fired.len() >= 15,
        "only {} rules fired: {fired:?}",
        fired.len()
    );
}
