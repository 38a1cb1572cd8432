//! Stage 1: e-graph simplification and layout.
//!
//! [`simplify`] turns a [`Graph`] into an e-graph over the IR's primitive ops
//! ([`lang::ENode`]), whose analysis ([`analysis::TypeAnalysis`]) carries every class's dtype
//! and shape (from the IR's typing rule) and, for values of at most
//! [`analysis::CONST_LIMIT`] elements, the constant value (from the reference interpreter).
//! Hash-consing gives common-subexpression elimination, the rule sets of [`rules`] rewrite
//! (IEEE-exact identities and constant folding, layout collapse and permute sinking, and
//! fast-math only on request), and extraction from the outputs ([`convert::extract`]) gives
//! dead-code elimination and the cheapest equivalent graph.
//!
//! The run is bounded by [`PassOptions::node_limit`] and [`PassOptions::iter_limit`] only
//! (never by wall-clock time), uses egg's `BackoffScheduler`, and is deterministic: the same
//! graph and options give a byte-identical result. A run stopped by a limit still extracts a
//! correct graph (every union is sound, whatever was not explored is just not simplified).
//! The result has the original's inputs and parameters (names, order, types, used or not)
//! followed by the computed nodes, and its outputs (names and order).

pub mod analysis;
pub mod convert;
pub mod lang;
pub mod rules;

use crate::{PassError, PassOptions, SaturationReport};
use egg::{BackoffScheduler, Runner, StopReason};
use smelt_ir::Graph;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Simplifies `graph`: the cheapest graph equivalent to it under the enabled rule sets, and
/// what the run did.
pub fn simplify(graph: &Graph, opts: &PassOptions) -> Result<(Graph, SaturationReport), PassError> {
    smelt_ir::verify(graph)?;
    let (egraph, classes) = convert::to_egraph(graph);
    let rewrites = rules::rewrites(opts);
    let runner = Runner::default()
        .with_egraph(egraph)
        .with_node_limit(opts.node_limit)
        .with_iter_limit(opts.iter_limit)
        // Never wall-clock: results must not depend on the machine's speed.
        .with_time_limit(Duration::MAX)
        .with_scheduler(BackoffScheduler::default())
        .run(&rewrites);

    let mut rules_applied = BTreeMap::new();
    for it in &runner.iterations {
        for (name, &n) in &it.applied {
            if n > 0 {
                *rules_applied.entry(name.to_string()).or_insert(0) += n;
            }
        }
    }
    let report = SaturationReport {
        iterations: runner.iterations.len(),
        egraph_nodes: runner.egraph.total_number_of_nodes(),
        egraph_classes: runner.egraph.number_of_classes(),
        stop_reason: stop_reason(runner.stop_reason.as_ref()),
        rules_applied,
    };
    log::info!("simplify: {report}");

    let outputs: Vec<(String, egg::Id)> = graph
        .outputs()
        .iter()
        .map(|(name, id)| (name.clone(), classes[id.index()]))
        .collect();
    let out = convert::extract(&runner.egraph, &outputs)?;
    smelt_ir::verify(&out)?;
    Ok((out, report))
}

fn stop_reason(r: Option<&StopReason>) -> String {
    match r {
        Some(StopReason::Saturated) => "saturated".into(),
        Some(StopReason::IterationLimit(_)) => "iteration limit".into(),
        Some(StopReason::NodeLimit(_)) => "node limit".into(),
        Some(StopReason::TimeLimit(_)) => "time limit".into(),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".into(),
    }
}

/// Applies one rule at the first output of `graph`, for testing rules one by one: the graph
/// with that output replaced by the rule's right-hand side (the other nodes kept as they
/// are), or `None` if the rule does not match there.
///
/// The e-graph is built from `graph` without running any rule, so the right-hand side is
/// exactly what the rule's matcher produces (constant values of the analysis included).
pub fn rewrite_first_output(graph: &Graph, rule: &rules::Rule) -> Result<Option<Graph>, PassError> {
    smelt_ir::verify(graph)?;
    let Some((_, out)) = graph.outputs().first() else {
        return Ok(None);
    };
    let (mut eg, classes) = convert::to_egraph(graph);
    let root = classes[out.index()];
    let Some(term) = rule.matches(&eg, root).into_iter().next() else {
        return Ok(None);
    };
    rules::add_term(&mut eg, &term).map_err(|message| PassError::Internal {
        pass: "simplify",
        message,
    })?;
    eg.rebuild();
    // Rebuild the right-hand side on top of the original nodes: existing classes map to the
    // first node that built them, new classes become new nodes.
    let mut g = graph.clone();
    let mut node_of: HashMap<egg::Id, smelt_ir::NodeId> = HashMap::new();
    for (i, c) in classes.iter().enumerate() {
        node_of
            .entry(eg.find(*c))
            .or_insert(smelt_ir::NodeId(i as u32));
    }
    let id = push_term(&mut g, &eg, &term, &node_of)?;
    let mut outputs = graph.outputs().to_vec();
    outputs[0].1 = id;
    let g = Graph::from_parts(g.nodes().to_vec(), outputs);
    smelt_ir::verify(&g)?;
    Ok(Some(g))
}

fn push_term(
    g: &mut Graph,
    eg: &analysis::SGraph,
    term: &rules::Term,
    node_of: &HashMap<egg::Id, smelt_ir::NodeId>,
) -> Result<smelt_ir::NodeId, PassError> {
    use egg::Language;
    let missing = |c: egg::Id| PassError::Internal {
        pass: "simplify",
        message: format!("e-class {c} has no node"),
    };
    match term {
        rules::Term::Class(c) => node_of
            .get(&eg.find(*c))
            .copied()
            .ok_or_else(|| missing(*c)),
        rules::Term::Node(n, children) => {
            let ids: Vec<smelt_ir::NodeId> = if children.is_empty() {
                n.children()
                    .iter()
                    .map(|c| {
                        node_of
                            .get(&eg.find(*c))
                            .copied()
                            .ok_or_else(|| missing(*c))
                    })
                    .collect::<Result<_, _>>()?
            } else {
                children
                    .iter()
                    .map(|t| push_term(g, eg, t, node_of))
                    .collect::<Result<_, _>>()?
            };
            let mut k = 0;
            let op = n
                .clone()
                .map_children(|_| {
                    k += 1;
                    egg::Id::from(k - 1)
                })
                .to_op(|c| ids[usize::from(c)])
                .ok_or_else(|| missing(egg::Id::from(0)))?;
            Ok(g.push(op)?)
        }
    }
}
