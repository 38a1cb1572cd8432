//! DAG-aware extraction: which values are materialised, and by which kernel.
//!
//! A *selection* maps every materialised value to the kernel body that computes it. Its cost
//! is the sum over those kernels of [`kernel_cost`]: each kernel's inputs are buffers that
//! are counted where they are materialised, once, however many kernels read them. Because
//! e-classes are graph values and a kernel's inputs are earlier values, the e-graph is acyclic
//! in node order, so extraction is one bottom-up pass (greedy-DAG, as in extraction-gym: the
//! cost of a choice is the sum over the *set* of kernels its sub-selection needs, so shared
//! values count once) followed by one top-down pass from the outputs, which always yields a
//! complete, acyclic selection. Any seed selections (the greedy baseline) are compared by exact
//! cost and the cheapest wins, so extraction never does worse than its seeds.

use super::kernel::Ctx;
use super::lang::{BodyId, BodyTable};
use smelt_ir::NodeId;
use std::collections::BTreeMap;

/// The modelled cost of one kernel launch, in bytes-equivalent: what a launch's fixed
/// overhead is charged as, so that merging two kernels that move little data pays.
pub const LAUNCH_COST_BYTES: u64 = 64 * 1024;

/// Materialised value → the body computing it.
pub(crate) type Selection = BTreeMap<NodeId, BodyId>;

/// Bytes read + bytes written + the launch cost of one single-output kernel.
pub(crate) fn kernel_cost(ctx: &Ctx, table: &BodyTable, b: BodyId) -> u64 {
    let body = table.body(b);
    body.bytes_read() + ctx.write_bytes(body.root()) + LAUNCH_COST_BYTES
}

/// Exact cost of a selection.
pub(crate) fn selection_cost(ctx: &Ctx, table: &BodyTable, sel: &Selection) -> u64 {
    sel.values().map(|&b| kernel_cost(ctx, table, b)).sum()
}

/// Above this many ops, cost sets (bitsets over ops) would take too much memory and the
/// bottom-up pass falls back to tree costs (a shared value counted once per reader).
const MAX_DAG_OPS: usize = 16_384;

/// Extracts a selection from per-value candidate bodies (`candidates[n]`, for live non-leaf
/// values; every live non-leaf value has at least its single-op body), keeping the cheapest
/// of the greedy-DAG result and `seeds`. Also returns the bottom-up choice of every value.
pub(crate) fn extract(
    ctx: &Ctx,
    table: &BodyTable,
    candidates: &[Vec<BodyId>],
    seeds: &[Selection],
) -> (Selection, Vec<Option<BodyId>>) {
    let n = ctx.graph.len();
    // Dense index of every live op; its cost set is a bitset over those indices.
    let mut dense = vec![usize::MAX; n];
    let mut ops = Vec::new();
    for id in ctx.graph.ids() {
        if ctx.live[id.index()] && !ctx.is_leaf(id) {
            dense[id.index()] = ops.len();
            ops.push(id);
        }
    }
    let dag = ops.len() <= MAX_DAG_OPS;
    let words = if dag { ops.len().div_ceil(64) } else { 0 };
    let mut best: Vec<Option<BodyId>> = vec![None; n];
    let mut own: Vec<u64> = vec![0; ops.len()];
    let mut total: Vec<u64> = vec![0; ops.len()];
    let mut sets: Vec<u64> = vec![0; words * ops.len()];
    let mut scratch: Vec<u64> = vec![0; words];
    for (j, &id) in ops.iter().enumerate() {
        let mut chosen: Option<(u64, BodyId)> = None;
        for &b in &candidates[id.index()] {
            let body = table.body(b);
            let inputs = body.inputs.iter().filter(|i| !ctx.is_leaf(**i));
            if inputs.clone().any(|i| best[i.index()].is_none()) {
                continue;
            }
            let cost = kernel_cost(ctx, table, b);
            let sum = if dag {
                scratch.iter_mut().for_each(|w| *w = 0);
                for i in inputs {
                    let k = dense[i.index()];
                    for (w, s) in scratch.iter_mut().zip(&sets[k * words..(k + 1) * words]) {
                        *w |= s;
                    }
                }
                cost + bits(&scratch).map(|k| own[k]).sum::<u64>()
            } else {
                cost + inputs.map(|i| total[dense[i.index()]]).sum::<u64>()
            };
            if !matches!(chosen, Some((t, _)) if t <= sum) {
                chosen = Some((sum, b));
            }
        }
        let Some((sum, b)) = chosen else { continue };
        best[id.index()] = Some(b);
        own[j] = kernel_cost(ctx, table, b);
        total[j] = sum;
        if dag {
            let (before, rest) = sets.split_at_mut(j * words);
            let mine = &mut rest[..words];
            for i in table.body(b).inputs.iter().filter(|i| !ctx.is_leaf(**i)) {
                let k = dense[i.index()];
                for (w, s) in mine.iter_mut().zip(&before[k * words..(k + 1) * words]) {
                    *w |= s;
                }
            }
            mine[j / 64] |= 1 << (j % 64);
        }
    }
    let mut result = top_down(ctx, table, |id| best[id.index()]);
    let mut cost = result
        .as_ref()
        .map_or(u64::MAX, |s| selection_cost(ctx, table, s));
    for seed in seeds {
        if let Some(s) = top_down(ctx, table, |id| seed.get(&id).copied()) {
            let c = selection_cost(ctx, table, &s);
            if result.is_none() || c < cost {
                result = Some(s);
                cost = c;
            }
        }
    }
    (result.unwrap_or_default(), best)
}

/// Indices of the set bits.
fn bits(set: &[u64]) -> impl Iterator<Item = usize> + '_ {
    set.iter().enumerate().flat_map(|(w, &word)| {
        let mut word = word;
        std::iter::from_fn(move || {
            if word == 0 {
                return None;
            }
            let b = word.trailing_zeros() as usize;
            word &= word - 1;
            Some(w * 64 + b)
        })
    })
}

/// The selection reached from the outputs when value `n` is computed by `choice(n)`, or
/// `None` if some needed value has no choice.
fn top_down(
    ctx: &Ctx,
    table: &BodyTable,
    choice: impl Fn(NodeId) -> Option<BodyId>,
) -> Option<Selection> {
    let mut needed = vec![false; ctx.graph.len()];
    for (_, o) in ctx.graph.outputs() {
        needed[o.index()] = true;
    }
    let mut sel = Selection::new();
    for id in (0..ctx.graph.len() as u32).rev().map(NodeId) {
        if !needed[id.index()] || ctx.is_leaf(id) {
            continue;
        }
        let b = choice(id)?;
        for &i in &table.body(b).inputs {
            needed[i.index()] = true;
        }
        sel.insert(id, b);
    }
    Some(sel)
}
