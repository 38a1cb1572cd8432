//! Property tests of fusion planning over random graphs: every plan is valid, is made of
//! kernels a backend can run as one loop nest (the independent kernel oracle of the per-rule
//! tests), runs to exactly the interpreter's outputs, and never costs more than the greedy
//! baseline.

mod fusion_corpus;
#[path = "fusion_rules/oracle.rs"]
mod oracle;

use proptest::prelude::*;
use smelt_ir::arbitrary::arb_graph_with_bindings;
use smelt_ir::arbitrary::with_sinks_as_outputs;
use smelt_ir::{interp, Graph};
use smelt_passes::fusion::{self, check_plan, eval_plan, greedy_baseline};
use smelt_passes::PassOptions;

fn opts(fuse: bool) -> PassOptions {
    PassOptions {
        fuse,
        ..PassOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(256), ..ProptestConfig::default() })]

    #[test]
    fn plans_are_valid_exact_and_no_worse_than_greedy(
        (graph, bindings) in arb_graph_with_bindings(32)
    ) {
        let graph = with_sinks_as_outputs(graph);
        let expected = interp::eval(&graph, &bindings);
        let base = greedy_baseline(&graph);
        check_plan(&graph, &base).map_err(|e| TestCaseError::fail(format!("baseline: {e}\n{base}")))?;
        oracle::check_kernels(&graph, &base)
            .map_err(|e| TestCaseError::fail(format!("baseline: {e}\n{base}")))?;
        for fuse in [true, false] {
            let (plan, report) = fusion::plan(&graph, &opts(fuse)).expect("plan");
            check_plan(&graph, &plan)
                .map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
            oracle::check_kernels(&graph, &plan)
                .map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
            if let Ok(want) = &expected {
                let got = eval_plan(&graph, &plan, &bindings)
                    .map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
                prop_assert_eq!(want, &got, "fuse {}: {}\n{}", fuse, report, plan);
            }
            if fuse {
                prop_assert!(
                    plan.cost() <= base.cost(),
                    "plan {} > baseline {}\n{}\n{}", plan.cost(), base.cost(), plan, base
                );
                prop_assert!(plan.cost() <= plan.unfused_cost);
            }
        }
        if let Ok(want) = &expected {
            let got = eval_plan(&graph, &base, &bindings)
                .map_err(|e| TestCaseError::fail(format!("{e}\n{base}")))?;
            prop_assert_eq!(want, &got);
        }
    }

    #[test]
    fn tiny_limits_still_give_valid_plans((graph, bindings) in arb_graph_with_bindings(16)) {
        let tiny = PassOptions { node_limit: 1, iter_limit: 1, ..PassOptions::default() };
        let (plan, _) = fusion::plan(&graph, &tiny).expect("plan");
        check_plan(&graph, &plan).map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
        oracle::check_kernels(&graph, &plan)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
        if let Ok(want) = interp::eval(&graph, &bindings) {
            let got = eval_plan(&graph, &plan, &bindings)
                .map_err(|e| TestCaseError::fail(format!("{e}\n{plan}")))?;
            prop_assert_eq!(want, got);
        }
    }
}

#[test]
fn planning_is_deterministic() {
    for graph in [
        fusion_corpus::bert(2).unwrap(),
        fusion_corpus::attention().unwrap(),
        fusion_corpus::three_consumers().unwrap(),
    ] {
        let (a, ra) = fusion::plan(&graph, &PassOptions::default()).unwrap();
        let (b, rb) = fusion::plan(&graph.clone(), &PassOptions::default()).unwrap();
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(a.to_dot(), b.to_dot());
        assert_eq!(ra, rb);
    }
}

#[test]
fn tiny_node_limit_on_bert_layer_is_valid_and_reported() {
    let graph = fusion_corpus::bert(1).unwrap();
    let tiny = PassOptions {
        node_limit: 10,
        ..PassOptions::default()
    };
    let (plan, report) = fusion::plan(&graph, &tiny).unwrap();
    assert_eq!(report.stop_reason, "node limit");
    check_plan(&graph, &plan).unwrap();
    assert!(plan.cost() <= greedy_baseline(&graph).cost());
}

#[test]
fn saturation_is_reported() {
    let graph = fusion_corpus::layer_norm().unwrap();
    let (_, report) = fusion::plan(&graph, &PassOptions::default()).unwrap();
    assert_eq!(report.stop_reason, "saturated", "{report}");
    assert!(
        report.rules_applied.contains_key("reduction-epilogue"),
        "{report:?}"
    );
}

#[test]
fn unfused_mode_is_one_kernel_per_op_with_views_folded() {
    let graph = fusion_corpus::bert(1).unwrap();
    let (plan, _) = fusion::plan(&graph, &opts(false)).unwrap();
    check_plan(&graph, &plan).unwrap();
    for k in &plan.kernels {
        let non_views = k
            .ops
            .iter()
            .filter(|(_, name)| !matches!(*name, "reshape" | "permute" | "expand" | "slice"))
            .count();
        assert!(non_views <= 1, "{plan}");
    }
    let (fused, _) = fusion::plan(&graph, &opts(true)).unwrap();
    assert_eq!(fused.unfused_cost, plan.cost());
    assert_eq!(fused.unfused_kernels, plan.kernel_count());
    assert!(fused.cost() < plan.cost());
}

#[test]
fn dot_names_every_kernel() {
    let graph = fusion_corpus::mlp().unwrap();
    let (plan, _) = fusion::plan(&graph, &PassOptions::default()).unwrap();
    let dot = plan.to_dot();
    assert!(dot.starts_with("digraph plan {"));
    for k in 0..plan.kernel_count() {
        assert!(dot.contains(&format!("  k{k} [shape=box")), "{dot}");
    }
}

/// Planning time of BERT-base (embeddings and 12 layers, and 17 layers for a ~1,500-node
/// graph); run with `cargo test --release -p smelt-passes -- --ignored`. Prints, never
/// asserts, the wall-clock time.
#[test]
#[ignore]
fn bert_base_planning_time() {
    for layers in [12, 17] {
        let graph = fusion_corpus::bert_base(layers).unwrap();
        let opts = PassOptions::default();
        let (plan, report) = fusion::plan(&graph, &opts).unwrap();
        let runs = 10;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            std::hint::black_box(fusion::plan(&graph, &opts).unwrap());
        }
        let per = start.elapsed() / runs;
        println!(
            "BERT-base, {layers} layers: {} nodes, {} kernels, {report}; fusion::plan {per:?} per run",
            graph.len(),
            plan.kernel_count()
        );
    }
}

#[test]
fn check_plan_rejects_reordered_and_incomplete_plans() {
    let graph = fusion_corpus::mlp().unwrap();
    let (plan, _) = fusion::plan(&graph, &PassOptions::default()).unwrap();
    let mut reordered = plan.clone();
    reordered.kernels.swap(0, 1);
    assert!(matches!(
        check_plan(&graph, &reordered),
        Err(fusion::PlanError::Unavailable { .. })
    ));
    let mut missing = plan.clone();
    missing.kernels.pop();
    assert!(matches!(
        check_plan(&graph, &missing),
        Err(fusion::PlanError::OutputMissing { .. })
    ));
}

#[test]
fn gathered_tables_count_the_rows_read() {
    use smelt_ir::{DType, HostTensor, TensorData};
    // index_select of 3 rows of a [1000, 16] f32 table: 3 * 16 * 4 bytes of it, plus the index.
    let mut g = Graph::new();
    let table = g.param("table", DType::F32, vec![1000, 16]).unwrap();
    let idx = g.input("idx", DType::I64, vec![3]).unwrap();
    let rows = g.index_select(table, idx, 0).unwrap();
    g.set_output("rows", rows).unwrap();
    // gather with more indices than the table has elements: capped at the table's size.
    let small = g.param("small", DType::F32, vec![2, 2]).unwrap();
    let many = g
        .constant(HostTensor::new(vec![64, 2], TensorData::I64(vec![1; 128])).unwrap())
        .unwrap();
    let gathered = g.gather(small, many, 0).unwrap();
    g.set_output("gathered", gathered).unwrap();
    // Through a folded view: 2 * 3 elements gathered, capped at the 4 the table has.
    let viewed = g.permute(small, &[1, 0]).unwrap();
    let both = g.index_select(viewed, idx, 1).unwrap();
    g.set_output("both", both).unwrap();
    let (plan, _) = fusion::plan(&g, &opts(true)).unwrap();
    check_plan(&g, &plan).unwrap();
    let read = |v| {
        let k = plan
            .kernels
            .iter()
            .find(|k| k.outputs.iter().any(|o| o.value == v))
            .unwrap();
        k.bytes_read
    };
    assert_eq!(read(rows), 3 * 16 * 4 + 3 * 8, "{plan}");
    assert_eq!(read(gathered), 2 * 2 * 4 + 128 * 8, "{plan}");
    assert_eq!(read(both), 2 * 2 * 4 + 3 * 8, "{plan}");
}
