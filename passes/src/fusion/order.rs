//! Execution order of the extracted kernels.

use super::kernel::Ctx;
use super::plan::Proto;
use smelt_ir::NodeId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Topological order of kernels (producers first); ties by smallest output node.
pub(crate) fn order(ctx: &Ctx, protos: Vec<Proto>) -> Vec<Proto> {
    let mut producer: Vec<Option<usize>> = vec![None; ctx.graph.len()];
    for (k, p) in protos.iter().enumerate() {
        for &o in &p.outputs {
            producer[o.index()] = Some(k);
        }
    }
    let n = protos.len();
    let mut indegree = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (k, p) in protos.iter().enumerate() {
        let mut deps: Vec<usize> = p
            .inputs
            .iter()
            .filter_map(|i| producer[i.index()])
            .collect();
        deps.sort_unstable();
        deps.dedup();
        for d in deps {
            indegree[k] += 1;
            users[d].push(k);
        }
    }
    let key = |k: usize| -> NodeId { protos[k].outputs[0] };
    let mut ready: BinaryHeap<Reverse<(NodeId, usize)>> = (0..n)
        .filter(|&k| indegree[k] == 0)
        .map(|k| Reverse((key(k), k)))
        .collect();
    let mut out_order = Vec::with_capacity(n);
    while let Some(Reverse((_, k))) = ready.pop() {
        out_order.push(k);
        for &u in &users[k] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(Reverse((key(u), u)));
            }
        }
    }
    let mut slots: Vec<Option<Proto>> = protos.into_iter().map(Some).collect();
    out_order
        .into_iter()
        .filter_map(|k| slots[k].take())
        .collect()
}
