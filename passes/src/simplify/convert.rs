//! Graph → e-graph, and extraction of the cheapest equivalent graph.
//!
//! Conversion adds every node in arena order (hash-consing merges duplicates: CSE), with
//! inputs and parameters as interned leaves. Extraction picks one e-node per reachable class
//! with the least tree cost (ties: the smaller e-node in `Ord`), then rebuilds a graph from
//! the outputs (unreachable classes vanish: DCE). The new graph starts with every input and
//! parameter of the original, in order, used or not; its nodes follow in depth-first
//! post-order from the outputs, so the result is a deterministic function of the e-graph.

use super::analysis::{SGraph, TypeAnalysis};
use super::lang::{ENode, LeafKind};
use crate::PassError;
use egg::{Id, Language};
use smelt_ir::{Graph, NodeId, Op};
use std::collections::{HashMap, HashSet};

/// The e-graph of `graph` and the e-class of every node.
pub fn to_egraph(graph: &Graph) -> (SGraph, Vec<Id>) {
    let mut analysis = TypeAnalysis::default();
    for (name, _, ty, is_param) in graph.bindings() {
        let kind = if is_param {
            LeafKind::Param
        } else {
            LeafKind::Input
        };
        analysis.leaves.push((kind, name.to_string(), ty.clone()));
    }
    let mut eg = SGraph::new(analysis);
    let mut classes: Vec<Id> = Vec::with_capacity(graph.len());
    let mut leaf = 0u32;
    for node in graph.nodes() {
        let enode = match &node.op {
            Op::Input { .. } => ENode::Leaf(LeafKind::Input, next(&mut leaf)),
            Op::Param { .. } => ENode::Leaf(LeafKind::Param, next(&mut leaf)),
            op => match ENode::from_op(op, |o| classes[o.index()]) {
                Some(n) => n,
                None => ENode::Leaf(LeafKind::Input, next(&mut leaf)),
            },
        };
        classes.push(eg.add(enode));
    }
    eg.rebuild();
    (eg, classes)
}

fn next(counter: &mut u32) -> u32 {
    let i = *counter;
    *counter += 1;
    i
}

/// Cost of one e-node of a class of type `ty`: inputs are free, a constant costs its bytes
/// (so that folding never materialises a large constant where a cheap op over a small one
/// would do), every other op a fixed amount plus the bytes it writes.
fn node_cost(n: &ENode, out_bytes: usize) -> u64 {
    match n {
        ENode::Leaf(..) => 0,
        ENode::Const(c) => {
            let bytes = c.tensor().numel() * c.tensor().dtype().size_bytes();
            1 + (bytes / 16) as u64
        }
        _ => 8 + (out_bytes / 256) as u64,
    }
}

/// The cost of `n` given the costs of the classes so far (`None` while a child has none).
fn cost_of(eg: &SGraph, n: &ENode, bytes: usize, best: &HashMap<Id, (u64, ENode)>) -> Option<u64> {
    let mut cost = node_cost(n, bytes);
    for c in n.children() {
        cost = cost.saturating_add(best.get(&eg.find(*c))?.0);
    }
    Some(cost)
}

/// The cheapest e-node of every class that has a finite cost, ties broken by the e-node's
/// `Ord` (independent of the order classes were visited in).
fn best_nodes(eg: &SGraph) -> HashMap<Id, (u64, ENode)> {
    let mut ids: Vec<Id> = eg.classes().map(|c| c.id).collect();
    ids.sort_unstable();
    let mut best: HashMap<Id, (u64, ENode)> = HashMap::with_capacity(ids.len());
    // Costs to a fixpoint (only strict decreases, so it terminates) ...
    loop {
        let mut changed = false;
        for &id in &ids {
            let class = &eg[id];
            let bytes = class.data.ty.size_bytes();
            let pick = class
                .nodes
                .iter()
                .filter_map(|n| Some((cost_of(eg, n, bytes, &best)?, n)))
                .min();
            if let Some((cost, n)) = pick {
                if best.get(&id).is_none_or(|(k, _)| cost < *k) {
                    best.insert(id, (cost, n.clone()));
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    // ... then, with the final costs, the smallest e-node among the cheapest of each class.
    // Every op costs more than nothing, so a chosen e-node's children are strictly cheaper
    // than its class and the choice is acyclic.
    let mut picks = HashMap::with_capacity(best.len());
    for &id in &ids {
        let class = &eg[id];
        let bytes = class.data.ty.size_bytes();
        if let Some(pick) = class
            .nodes
            .iter()
            .filter_map(|n| Some((cost_of(eg, n, bytes, &best)?, n)))
            .min()
        {
            picks.insert(id, (pick.0, pick.1.clone()));
        }
    }
    picks
}

/// Extracts the graph computing `outputs` (name, e-class) from the e-graph.
pub fn extract(eg: &SGraph, outputs: &[(String, Id)]) -> Result<Graph, PassError> {
    let best = best_nodes(eg);
    let mut g = Graph::new();
    let mut done: HashMap<Id, NodeId> = HashMap::new();
    for (i, (kind, name, ty)) in eg.analysis.leaves.iter().enumerate() {
        let (name, dtype, shape) = (name.clone(), ty.dtype, ty.shape.clone());
        let op = match kind {
            LeafKind::Input => Op::Input { name, dtype, shape },
            LeafKind::Param => Op::Param { name, dtype, shape },
        };
        let id = g.push(op)?;
        if let Some(c) = eg.lookup(ENode::Leaf(*kind, i as u32)) {
            done.insert(eg.find(c), id);
        }
    }
    for (name, out) in outputs {
        let root = eg.find(*out);
        // Iterative post-order: (class, children pushed?).
        let mut stack = vec![(root, false)];
        let mut on_path: HashSet<Id> = HashSet::new();
        while let Some((c, expanded)) = stack.pop() {
            if done.contains_key(&c) {
                continue;
            }
            let Some((_, n)) = best.get(&c) else {
                return Err(internal(format!("e-class {c} has no finite-cost e-node")));
            };
            if expanded {
                on_path.remove(&c);
                let op = n
                    .to_op(|k| done.get(&eg.find(k)).copied().unwrap_or(NodeId(u32::MAX)))
                    .ok_or_else(|| internal(format!("leaf e-class {c} not among the bindings")))?;
                done.insert(c, g.push(op)?);
                continue;
            }
            if !on_path.insert(c) {
                return Err(internal(format!("cycle through e-class {c} in extraction")));
            }
            stack.push((c, true));
            for k in n.children().iter().rev() {
                let k = eg.find(*k);
                if !done.contains_key(&k) {
                    stack.push((k, false));
                }
            }
        }
        g.set_output(name.clone(), done[&root])?;
    }
    Ok(g)
}

fn internal(message: String) -> PassError {
    PassError::Internal {
        pass: "simplify",
        message,
    }
}
