//! Property tests of every fusion rule, one at a time: for random graphs in which the rule
//! has something to merge (a targeted template per rule), the plan made with only that rule
//! enabled ([`fusion::plan_with_rules`]; the few rules a template also needs are named) must
//! be a valid plan ([`check_plan`]), made of kernels a backend can run as one loop nest
//! (`oracle::check_kernels`, an independent restatement of the kernel rules), and evaluate
//! bit-exactly to the interpreter ([`eval_plan`] vs [`interp::eval`]) on inputs with ±0, ±inf,
//! NaN and subnormals ([`arb_bindings`]), and be the same plan when planned again. Each test
//! also checks that its rule fired and that the plan shows what it merges, in enough cases to
//! mean something. A coverage test checks that every rule has such a test;
//! `oracle_rejects_illegal_kernels` shows the oracle catches a kernel that merges what no rule
//! may (and breaking a legality check in `fusion/kernel.rs` fails the rule tests: see
//! `row_reductions` for the axes check, `fold_transpose_into_gemm` for the transpose check).

#[path = "fusion_rules/gen.rs"]
mod gen;
#[path = "fusion_rules/oracle.rs"]
mod oracle;
#[path = "fusion_rules/templates.rs"]
mod templates;

use gen::Gen;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use smelt_ir::arbitrary::arb_bindings;
use smelt_ir::{interp, Graph, NodeId, Op};
use smelt_passes::fusion::{self, check_plan, eval_plan, FusionPlan, KernelKind, SIBLINGS_RULE};
use smelt_passes::PassOptions;
use std::cell::Cell;

const CASES: u32 = 256;

type Template = fn(&mut Gen) -> Graph;
/// Whether the plan shows the rule's merge.
type Witness = fn(&Graph, &FusionPlan) -> bool;

/// Runs the property test of rule `name` (with `also` enabled too) over `template`'s graphs;
/// returns in how many cases the rule fired and the plan shows it.
fn check_rule(
    name: &str,
    also: &[&str],
    template: Template,
    witness: Witness,
    cases: u32,
) -> Result<u32, String> {
    let mut rules = vec![name];
    rules.extend_from_slice(also);
    let fired = Cell::new(0u32);
    let strategy = any::<u64>().prop_flat_map(move |seed| {
        let g = template(&mut Gen::new(seed));
        let b = arb_bindings(&g);
        (Just(g), b)
    });
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(graph, bindings)| {
            smelt_ir::verify(&graph).map_err(|e| TestCaseError::fail(format!("template: {e}")))?;
            let (plan, report) = fusion::plan_with_rules(&graph, &PassOptions::default(), &rules)
                .map_err(|e| TestCaseError::fail(format!("plan: {e}")))?;
            let text = || format!("{}\n{plan}", smelt_ir::text::print(&graph));
            let (again, report_again) =
                fusion::plan_with_rules(&graph, &PassOptions::default(), &rules)
                    .map_err(|e| TestCaseError::fail(format!("plan: {e}")))?;
            prop_assert!(
                again == plan && report_again == report,
                "planning is not deterministic\n{}",
                text()
            );
            check_plan(&graph, &plan)
                .map_err(|e| TestCaseError::fail(format!("invalid plan: {e}\n{}", text())))?;
            oracle::check_kernels(&graph, &plan)
                .map_err(|e| TestCaseError::fail(format!("illegal kernel: {e}\n{}", text())))?;
            if let Ok(want) = interp::eval(&graph, &bindings) {
                let got = eval_plan(&graph, &plan, &bindings)
                    .map_err(|e| TestCaseError::fail(format!("eval_plan: {e}\n{}", text())))?;
                prop_assert!(want == got, "outputs differ\n{}", text());
            }
            let applied = name == SIBLINGS_RULE || report.rules_applied.contains_key(name);
            if applied && witness(&graph, &plan) {
                fired.set(fired.get() + 1);
            }
            Ok(())
        })
        .map_err(|e| format!("rule {name}: {e}"))?;
    Ok(fired.get())
}

/// Runs the property test of `name` and checks that it fired in enough cases.
fn run(name: &str, also: &[&str], template: Template, witness: Witness) {
    let fired = check_rule(name, also, template, witness, CASES).unwrap_or_else(|e| panic!("{e}"));
    println!("{name}: fired in {fired} of {CASES} cases");
    assert!(
        fired >= CASES / 10,
        "rule {name} fired in only {fired} of {CASES} cases: the template does not exercise it"
    );
}

fn is_view(g: &Graph, n: NodeId) -> bool {
    matches!(
        g.node(n).op,
        Op::Reshape { .. } | Op::Permute { .. } | Op::Expand { .. } | Op::Slice { .. }
    )
}

fn is_elementwise(g: &Graph, n: NodeId) -> bool {
    matches!(
        g.node(n).op,
        Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast { .. }
    )
}

fn is_reduce(g: &Graph, n: NodeId) -> bool {
    matches!(g.node(n).op, Op::Reduce { .. })
}

fn ops(k: &fusion::Kernel) -> impl Iterator<Item = NodeId> + '_ {
    k.ops.iter().map(|&(n, _)| n)
}

/// Whether, inside kernel `k`, `to` is computed from `from` (through ops of `k`).
fn reaches(g: &Graph, k: &fusion::Kernel, from: NodeId, to: NodeId) -> bool {
    let mut stack = vec![to];
    while let Some(n) = stack.pop() {
        if n == from {
            return true;
        }
        for o in g.node(n).op.operands() {
            if ops(k).any(|m| m == o) {
                stack.push(o);
            }
        }
    }
    false
}

/// A kernel other than a copy reads a view through index arithmetic.
fn folds_a_view(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| k.kind != KernelKind::Copy && ops(k).any(|n| is_view(g, n)))
}

/// A view between two ops computed by one kernel.
fn remaps_inside(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| ops(k).any(|n| is_view(g, n) && ops(k).any(|m| m == g.node(n).op.operands()[0])))
}

fn fuses_elementwise(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels.iter().any(|k| {
        k.kind == KernelKind::Elementwise && ops(k).filter(|&n| is_elementwise(g, n)).count() >= 2
    })
}

fn has_transpose_flag(_: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| k.kind == KernelKind::MatMul && k.transpose.contains(&true))
}

/// A row kernel computing an elementwise op that one of its reductions reads.
fn has_prologue(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels.iter().any(|k| {
        k.kind == KernelKind::Reduction
            && ops(k).any(|e| {
                is_elementwise(g, e) && ops(k).any(|r| is_reduce(g, r) && reaches(g, k, e, r))
            })
    })
}

/// A row kernel computing an elementwise op from one of its reductions.
fn has_epilogue(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels.iter().any(|k| {
        k.kind == KernelKind::Reduction
            && ops(k).any(|e| {
                is_elementwise(g, e) && ops(k).any(|r| is_reduce(g, r) && reaches(g, k, r, e))
            })
    })
}

fn two_reductions(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| ops(k).filter(|&n| is_reduce(g, n)).count() >= 2)
}

/// A computing kernel whose materialised value is a view (stored in its reader's layout).
fn stores_through_view(g: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| k.kind != KernelKind::Copy && k.outputs.iter().any(|o| is_view(g, o.value)))
}

fn multi_output(_: &Graph, p: &FusionPlan) -> bool {
    p.kernels.iter().any(|k| k.outputs.len() >= 2)
}

/// A row kernel writing several row values.
fn multi_output_rows(_: &Graph, p: &FusionPlan) -> bool {
    p.kernels
        .iter()
        .any(|k| k.kind == KernelKind::Reduction && k.outputs.len() >= 2)
}

macro_rules! rule_tests {
    ($($test:ident: $name:expr, [$($also:expr),*] => $template:path, $witness:path;)*) => {
        $(
            #[test]
            fn $test() {
                run($name, &[$($also),*], $template, $witness);
            }
        )*

        /// Every rule name with a property test above.
        const TESTED: &[&str] = &[$($name),*];
    };
}

rule_tests! {
    fold_view: "fold-view", [] => templates::views, folds_a_view;
    fold_view_inside_chains: "fold-view", ["elementwise-chain"]
        => templates::views, remaps_inside;
    fold_transpose_into_gemm: "fold-transpose-into-gemm", []
        => templates::transposed_gemm, has_transpose_flag;
    elementwise_chain: "elementwise-chain", []
        => templates::elementwise_chain, fuses_elementwise;
    reduction_prologue: "reduction-prologue", []
        => templates::reduction_prologue, has_prologue;
    reduction_epilogue: "reduction-epilogue", []
        => templates::reduction_epilogue, has_epilogue;
    // Two row kernels meet only once each has grown its prologue or epilogue.
    row_reductions: "row-reductions", ["reduction-prologue", "reduction-epilogue"]
        => templates::row_reductions, two_reductions;
    store_in_consumer_layout: "store-in-consumer-layout", []
        => templates::store_in_consumer_layout, stores_through_view;
    multi_output_siblings: SIBLINGS_RULE, [] => templates::siblings, multi_output;
    // Reductions of the input less a sibling's row value need their prologue first.
    multi_output_row_siblings: SIBLINGS_RULE, ["reduction-prologue"]
        => templates::row_siblings, multi_output_rows;
}

#[test]
fn every_rule_has_a_property_test() {
    let names = fusion::rule_names();
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !TESTED.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a property test: {missing:?}"
    );
    let unknown: Vec<&str> = TESTED
        .iter()
        .copied()
        .filter(|n| !names.contains(n))
        .collect();
    assert!(
        unknown.is_empty(),
        "tests of rules that do not exist: {unknown:?}"
    );
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "rule names must be unique");
}

#[test]
fn unknown_rule_names_are_errors() {
    let mut g = Graph::new();
    let x = g.input("x", smelt_ir::DType::F32, vec![2]).unwrap();
    g.set_output("y", x).unwrap();
    let err = fusion::plan_with_rules(&g, &PassOptions::default(), &["no-such-rule"]);
    assert!(err.is_err());
}

/// With no rule at all, every op is its own kernel; with all of them, every kernel is legal.
#[test]
fn no_rules_and_all_rules() {
    for seed in 0..64u64 {
        let g = templates::row_reductions(&mut Gen::new(seed));
        let (none, _) = fusion::plan_with_rules(&g, &PassOptions::default(), &[]).unwrap();
        let live_ops = none.op_count;
        assert_eq!(none.kernel_count(), live_ops, "{none}");
        let all = fusion::rule_names();
        let (with_all, _) = fusion::plan_with_rules(&g, &PassOptions::default(), &all).unwrap();
        check_plan(&g, &with_all).unwrap();
        oracle::check_kernels(&g, &with_all).unwrap();
    }
}

/// A row kernel over `x` computing `ops` and materialising `out`, built from `like`.
fn row_kernel(
    g: &Graph,
    like: &fusion::Kernel,
    x: NodeId,
    ops: &[NodeId],
    out: NodeId,
) -> fusion::Kernel {
    let mut k = like.clone();
    k.kind = KernelKind::Reduction;
    k.index_space = g.ty(x).shape.clone();
    k.reduce_axes = vec![1];
    k.ops = ops.iter().map(|&n| (n, g.node(n).op.name())).collect();
    k.inputs.retain(|i| i.value == x);
    k.outputs.truncate(1);
    k.outputs[0].value = out;
    k.outputs[0].ty = g.ty(out).clone();
    k.outputs[0].graph_outputs = g
        .outputs()
        .iter()
        .filter(|(_, n)| *n == out)
        .map(|(name, _)| name.clone())
        .collect();
    k
}

/// The oracle rejects kernels no rule may form, in plans whose dataflow is valid: two
/// reductions over different axes in one row kernel, and a reduction recomputed by two
/// kernels.
#[test]
fn oracle_rejects_illegal_kernels() {
    use smelt_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
    // a = sum(x, [1], keepdim); b = sum(x, [0], keepdim); y = a + b.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![3, 4]).unwrap();
    let a = g.reduce(ReduceOp::Sum, x, &[1], true).unwrap();
    let b = g.reduce(ReduceOp::Sum, x, &[0], true).unwrap();
    let y = g.binary(BinaryOp::Add, a, b).unwrap();
    g.set_output("y", y).unwrap();
    let (plan, _) = fusion::plan(&g, &PassOptions::default()).unwrap();
    oracle::check_kernels(&g, &plan).unwrap();
    let like = plan.kernels.last().unwrap();
    let merged = FusionPlan {
        kernels: vec![row_kernel(&g, like, x, &[a, b, y], y)],
        ..plan.clone()
    };
    check_plan(&g, &merged).unwrap();
    let err = oracle::check_kernels(&g, &merged).unwrap_err();
    assert!(err.contains("other axes"), "{err}");

    // e = exp(sum(x, [1], keepdim)); y1 = e + x; y2 = e * x: both kernels recompute e.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![3, 4]).unwrap();
    let a = g.reduce(ReduceOp::Sum, x, &[1], true).unwrap();
    let e = g.unary(UnaryOp::Exp, a).unwrap();
    let y1 = g.binary(BinaryOp::Add, e, x).unwrap();
    let y2 = g.binary(BinaryOp::Mul, e, x).unwrap();
    g.set_output("y1", y1).unwrap();
    g.set_output("y2", y2).unwrap();
    let (plan, _) = fusion::plan(&g, &PassOptions::default()).unwrap();
    oracle::check_kernels(&g, &plan).unwrap();
    let like = plan.kernels.last().unwrap();
    let mut k2 = row_kernel(&g, like, x, &[a, e, y2], y2);
    k2.id = 1;
    let twice = FusionPlan {
        kernels: vec![row_kernel(&g, like, x, &[a, e, y1], y1), k2],
        ..plan.clone()
    };
    check_plan(&g, &twice).unwrap();
    let err = oracle::check_kernels(&g, &twice).unwrap_err();
    assert!(err.contains("recomputed"), "{err}");
}
