//! Multi-output kernels: sibling elementwise kernels that read a common buffer over the same
//! index space become one kernel that reads the buffer once and writes every output.
//!
//! This runs on the extracted selection (a kernel with several roots is not an e-node of one
//! class); it is costed by the same model and only applied when it lowers the cost, which it
//! always does (one launch less, the shared buffer read once). Two kernels merge only when
//! neither depends on the other, so the merged kernel has a place in execution order.

use super::kernel::{Ctx, KernelKind};
use super::plan::Proto;
use smelt_ir::NodeId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

fn elementwise_like(k: KernelKind) -> bool {
    matches!(k, KernelKind::Elementwise | KernelKind::Copy)
}

/// Merges sibling kernels of `protos` (any order), then returns them in execution order.
pub(crate) fn merge_siblings(ctx: &Ctx, mut protos: Vec<Proto>) -> Vec<Proto> {
    let mut i = 0;
    while i < protos.len() {
        let mut j = i + 1;
        while j < protos.len() {
            if mergeable(ctx, &protos, i, j) {
                let b = protos.remove(j);
                let a = &protos[i];
                let mut nodes = a.nodes.clone();
                nodes.extend_from_slice(&b.nodes);
                nodes.sort_unstable();
                nodes.dedup();
                let mut outputs = a.outputs.clone();
                outputs.extend_from_slice(&b.outputs);
                outputs.sort_unstable();
                let kind = if a.kind == KernelKind::Copy && b.kind == KernelKind::Copy {
                    KernelKind::Copy
                } else {
                    KernelKind::Elementwise
                };
                let merged = Proto::new(ctx, nodes, kind, outputs);
                if merged.cost(ctx) < a.cost(ctx) + b.cost(ctx) {
                    protos[i] = merged;
                    j = i + 1;
                } else {
                    protos.insert(j, b);
                    j += 1;
                }
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    order(ctx, protos)
}

fn mergeable(ctx: &Ctx, protos: &[Proto], i: usize, j: usize) -> bool {
    let (a, b) = (&protos[i], &protos[j]);
    if !elementwise_like(a.kind) || !elementwise_like(b.kind) {
        return false;
    }
    let space = ctx.shape(a.outputs[0]);
    if a.outputs
        .iter()
        .chain(&b.outputs)
        .any(|&o| ctx.shape(o) != space)
    {
        return false;
    }
    let shares = a
        .inputs
        .iter()
        .any(|x| ctx.read_bytes(*x) > 0 && b.inputs.binary_search(x).is_ok());
    shares && !depends(ctx, protos, i, j) && !depends(ctx, protos, j, i)
}

/// Whether kernel `a` (transitively) reads a value kernel `b` materialises.
fn depends(ctx: &Ctx, protos: &[Proto], a: usize, b: usize) -> bool {
    let mut producer: Vec<Option<usize>> = vec![None; ctx.graph.len()];
    for (k, p) in protos.iter().enumerate() {
        for &o in &p.outputs {
            producer[o.index()] = Some(k);
        }
    }
    let mut seen = vec![false; protos.len()];
    let mut stack = vec![a];
    while let Some(k) = stack.pop() {
        for &i in &protos[k].inputs {
            if let Some(p) = producer[i.index()] {
                if p == b {
                    return true;
                }
                if !std::mem::replace(&mut seen[p], true) {
                    stack.push(p);
                }
            }
        }
    }
    false
}

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
