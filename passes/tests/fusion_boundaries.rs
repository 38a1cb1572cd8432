//! `FusionPlan::boundaries`: for every value one kernel writes and another reads, the reason
//! the reader does not compute it. Each test builds a graph where the reason is known from the
//! kernel rules of `fusion/kernel.rs` (or, for the cost case, from the shapes in closed form)
//! and checks the plan says that one, for the right value and kernels.

mod fusion_corpus;

use fusion_corpus as corpus;
use smelt_ir::{BinaryOp, DType, Graph, NodeId, ReduceOp, UnaryOp};
use smelt_passes::fusion::{self, Apart, Boundary, FusionPlan, KernelKind, Reject};
use smelt_passes::PassOptions;

fn planned(g: &Graph) -> FusionPlan {
    let (plan, _) = fusion::plan(g, &PassOptions::default()).expect("plan");
    fusion::check_plan(g, &plan).expect("a valid plan");
    plan
}

/// Every kernel input materialised by another kernel has exactly one boundary, and nothing
/// else has one.
fn check_complete(plan: &FusionPlan) {
    let mut want: Vec<(NodeId, usize, usize)> = Vec::new();
    for k in &plan.kernels {
        for i in &k.inputs {
            if let fusion::Source::Kernel(p) = i.source {
                want.push((i.value, p, k.id));
            }
        }
    }
    let got: Vec<(NodeId, usize, usize)> = plan
        .boundaries
        .iter()
        .map(|b| (b.value, b.producer, b.consumer))
        .collect();
    assert_eq!(got, want, "{plan}");
}

fn only(plan: &FusionPlan) -> &Boundary {
    check_complete(plan);
    assert_eq!(
        plan.boundaries.len(),
        1,
        "{plan}{}",
        plan.explain_boundaries()
    );
    &plan.boundaries[0]
}

#[test]
fn gemm_epilogues_and_operands_are_kept_apart() {
    let g = corpus::mlp().unwrap();
    let plan = planned(&g);
    check_complete(&plan);
    let reasons: Vec<Apart> = plan.boundaries.iter().map(|b| b.reason).collect();
    // matmul -> bias+GELU -> matmul -> bias.
    assert_eq!(
        reasons,
        [Apart::GemmOutput, Apart::GemmOperand, Apart::GemmOutput],
        "{}",
        plan.explain_boundaries()
    );
    let text = plan.explain_boundaries();
    assert!(text.starts_with("kept apart: 3 values"), "{text}");
    assert!(text.contains("GEMM epilogues are not fused"), "{text}");
    assert!(text.contains("f32[128, 3072]"), "{text}");
}

#[test]
fn reductions_over_other_axes_are_kept_apart() {
    // y = sum(x, [1], keepdim) + sum(x, [0], keepdim): two row shapes.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![3, 4]).unwrap();
    let a = g.reduce(ReduceOp::Sum, x, &[1], true).unwrap();
    let b = g.reduce(ReduceOp::Sum, x, &[0], true).unwrap();
    let y = g.binary(BinaryOp::Add, a, b).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert!(bd.value == a || bd.value == b);
    // The reductions in node order.
    assert_eq!(
        bd.reason,
        Apart::Illegal(Reject::Rows {
            first: a,
            second: b
        })
    );
    assert!(bd.message.contains("over axes [1]"), "{}", bd.message);
    assert!(bd.message.contains("over axes [0]"), "{}", bd.message);
}

#[test]
fn a_row_value_expanded_over_the_reduced_axes_is_fused() {
    // softmax with its `keepdim` reductions expanded explicitly (as a graph built op by op or
    // an exporter may write it): each element reads its own row's value, as with implicit
    // broadcasting, so one row kernel computes it all.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![6, 10]).unwrap();
    let m = g.reduce(ReduceOp::Max, x, &[1], true).unwrap();
    let mx = g.expand(m, vec![6, 10]).unwrap();
    let d = g.binary(BinaryOp::Sub, x, mx).unwrap();
    let e = g.unary(UnaryOp::Exp, d).unwrap();
    let s = g.reduce(ReduceOp::Sum, e, &[1], true).unwrap();
    let sx = g.expand(s, vec![6, 10]).unwrap();
    let y = g.binary(BinaryOp::Div, e, sx).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    check_complete(&plan);
    assert_eq!(plan.kernels.len(), 1, "{plan}{}", plan.explain_boundaries());
    assert_eq!(plan.kernels[0].kind, KernelKind::Reduction, "{plan}");
    assert!(plan.boundaries.is_empty(), "{}", plan.explain_boundaries());
}

#[test]
fn a_row_value_expanded_over_the_kept_axes_is_kept_apart() {
    // s = sum(x, [1]) without `keepdim` is f32[4]; expanded to [4, 4] it lands along the
    // last axis, so element (i, j) reads row j's sum: another row's value.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![4, 4]).unwrap();
    let s = g.reduce(ReduceOp::Sum, x, &[1], false).unwrap();
    let sx = g.expand(s, vec![4, 4]).unwrap();
    let y = g.binary(BinaryOp::Sub, x, sx).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert_eq!(bd.value, s);
    assert_eq!(
        bd.reason,
        Apart::Illegal(Reject::View(sx)),
        "{}",
        bd.message
    );
    assert!(
        bd.message.contains("moves values to other rows"),
        "{}",
        bd.message
    );
}

#[test]
fn a_shared_reduction_is_written_once() {
    // s = sum(x, [1], keepdim) is a graph output and read by y = x - s: y's kernel would have
    // to recompute the sum, which no kernel does.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![3, 4]).unwrap();
    let s = g.reduce(ReduceOp::Sum, x, &[1], true).unwrap();
    let y = g.binary(BinaryOp::Sub, x, s).unwrap();
    g.set_output("s", s).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert_eq!(bd.value, s);
    assert_eq!(bd.reason, Apart::RecomputesReduction(s), "{}", bd.message);
    assert!(
        bd.message.contains("as a graph output") && bd.message.contains("never recomputes"),
        "{}",
        bd.message
    );
}

#[test]
fn the_cost_model_keeps_a_shared_sum_of_three_inputs_in_memory() {
    // h = x + y + z (256x256) is read by exp and a scaling in one kernel and by a row sum.
    // Fusing the sum's kernel with h's ops reads x, y and z (3 x 256 KiB) instead of h, and
    // saves writing h (256 KiB): 256 KiB more in all.
    let g = corpus::three_consumers().unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    let Apart::Cost {
        rule,
        apart,
        merged,
    } = bd.reason
    else {
        panic!("{}", bd.message)
    };
    assert_eq!(rule, "reduction-prologue");
    let array = 256 * 256 * 4;
    assert_eq!(merged - apart, 3 * array - array - array, "{}", bd.message);
    assert_eq!(apart, plan.cost(), "the plan is these two kernels");
}

#[test]
fn concat_and_gather_kernels_stand_alone() {
    // y = exp(concat(a, b)): the concat is its own kernel.
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, vec![2, 3]).unwrap();
    let b = g.input("b", DType::F32, vec![2, 5]).unwrap();
    let c = g.concat(&[a, b], 1).unwrap();
    let y = g.unary(UnaryOp::Exp, c).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert_eq!(bd.value, c);
    assert_eq!(bd.reason, Apart::Alone(KernelKind::Concat));

    // y = index_select(exp(t), i): the exp is not fused into the gather.
    let mut g = Graph::new();
    let t = g.input("t", DType::F32, vec![10, 4]).unwrap();
    let i = g.input("i", DType::I64, vec![3]).unwrap();
    let e = g.unary(UnaryOp::Exp, t).unwrap();
    let y = g.index_select(e, i, 0).unwrap();
    g.set_output("y", y).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert_eq!(bd.value, e);
    assert_eq!(bd.reason, Apart::Alone(KernelKind::Gather));
}

#[test]
fn a_gemm_operand_permuted_other_than_a_transpose_is_stored_for_it() {
    // o = permute(exp(x), [1, 0, 2]) @ w: the permute swaps batch and rows, which no transpose
    // flag expresses, so exp's kernel stores the operand in the layout the GEMM reads.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![2, 3, 4]).unwrap();
    let w = g.input("w", DType::F32, vec![3, 4, 5]).unwrap();
    let e = g.unary(UnaryOp::Exp, x).unwrap();
    let p = g.permute(e, &[1, 0, 2]).unwrap();
    let o = g.matmul(p, w).unwrap();
    g.set_output("o", o).unwrap();
    let plan = planned(&g);
    let bd = only(&plan);
    assert_eq!(bd.value, p, "{plan}");
    assert_eq!(bd.reason, Apart::GemmOperand, "{}", bd.message);
}

#[test]
fn every_corpus_plan_explains_every_boundary() {
    for (name, g) in [
        ("attention", corpus::attention().unwrap()),
        ("bert", corpus::bert(1).unwrap()),
        ("softmax", corpus::softmax().unwrap()),
        ("transposed_matmul", corpus::transposed_matmul().unwrap()),
    ] {
        let plan = planned(&g);
        check_complete(&plan);
        let text = plan.explain_boundaries();
        assert_eq!(
            text.lines().count(),
            if plan.boundaries.is_empty() {
                0
            } else {
                plan.boundaries.len() + 1
            },
            "{name}: {text}"
        );
    }
}

#[test]
fn an_unfused_plan_says_which_rule_is_off() {
    // exp(x) + 1 unfused: two kernels an enabled `elementwise-chain` would merge.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, vec![4]).unwrap();
    let e = g.unary(UnaryOp::Exp, x).unwrap();
    let y = g.binary(BinaryOp::Add, e, e).unwrap();
    g.set_output("y", y).unwrap();
    let opts = PassOptions {
        fuse: false,
        ..PassOptions::default()
    };
    let (plan, _) = fusion::plan(&g, &opts).unwrap();
    let bd = only(&plan);
    assert_eq!(bd.value, e);
    assert_eq!(
        bd.reason,
        Apart::RuleOff("elementwise-chain"),
        "{}",
        bd.message
    );
    // Fused, the same graph is one kernel: nothing kept apart.
    assert!(planned(&g).boundaries.is_empty());
}

/// `to_dot` draws the edge of every boundary dashed, labelled with its reason, its message as
/// the tooltip, and every other edge plain.
#[test]
fn dot_labels_the_edges_of_values_kept_apart() {
    let g = corpus::mlp().unwrap();
    let plan = planned(&g);
    let dot = plan.to_dot();
    for b in &plan.boundaries {
        let edge = format!("  {} -> k{} [style=dashed", dot_value(b.value), b.consumer);
        let line = dot
            .lines()
            .find(|l| l.starts_with(&edge))
            .unwrap_or_else(|| panic!("no edge `{edge}` in\n{dot}"));
        assert!(
            line.contains(&format!("label=\"{}\"", b.reason.label())),
            "{line}"
        );
        assert!(
            line.contains(&format!("tooltip=\"{}\"", b.message)),
            "{line}"
        );
    }
    let dashed = dot.lines().filter(|l| l.contains("style=dashed")).count();
    assert_eq!(dashed, plan.boundaries.len(), "{dot}");
    assert!(plan
        .boundaries
        .iter()
        .any(|b| b.reason.label() == "GEMM output"));
}

fn dot_value(v: NodeId) -> String {
    format!("v{}", v.0)
}
