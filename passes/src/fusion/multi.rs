//! Multi-output kernels as e-nodes: the `multi-output-siblings` rule and their extraction.
//!
//! An e-class is one value, so a kernel writing several values is represented by one e-node
//! per value: `Multi(m, i, inputs)` in the class of the `i`-th value kernel `m` writes. The
//! rule ([`SiblingRule`]) finds *sibling* kernel bodies of different classes that read a
//! common buffer, of one family:
//! - elementwise or copy bodies over the same index space. Their union is a multi-output
//!   kernel ([`build`]) when no part (transitively, in the graph) reads what another writes
//!   and the union costs less than the parts: the shared buffer is read once and one launch
//!   is saved. A part may compute another part's value inside (`exp(x)` written as an output
//!   and also used by `exp(x) * 2`): the merged kernel computes it once and writes it.
//! - row kernels over the same rows (reduction input shape and axes) whose roots are all row
//!   values needed outside the union: `max` and `argmax` of one tensor, its `min` and `max`,
//!   a `mean` and the variance computed from it. The union is one row kernel, one stage per
//!   reduction, storing every row value once per row (kernel IR lowering's row-level store);
//!   a part may read another's root, which the union computes instead. A row value next to
//!   element-level outputs (softmax's maximum as an output too) is not merged: the kernel
//!   IR's row kernels store at one level.
//!
//! Groups grow one sibling at a time, up to [`MAX_PARTS`].
//!
//! **Extraction.** Greedy bottom-up extraction (`extract.rs`) costs each class on its own, so
//! it never sees what a multi-output kernel saves: the saving is shared between classes. It
//! runs first and gives a complete selection of single-output kernels; then [`improve`]
//! tries each multi-output e-node against that selection by exact cost: it chooses the multi
//! kernel for all its values, re-derives the rest of the selection top-down (a value the
//! multi kernel's parts read that the selection recomputed is now materialised by its best
//! body), drops any chosen multi kernel writing one of the same values, and keeps the result
//! if the whole plan costs less. So a value may be materialised *because of a sibling*
//! (to share a launch and a read), which a merge of already extracted kernels cannot do.
//! Every accepted step strictly lowers the exact cost, so the bounds of extraction (no worse
//! than the greedy baseline, nor than the unfused plan) still hold.

use super::extract::{kernel_cost, Selection};
use super::kernel::{classify, row_shapes, rows_of, Body, Ctx, KernelKind};
use super::lang::{BodyId, BodyTable, FuseAnalysis, FuseLang, MultiId};
use super::plan::Proto;
use egg::{Applier, EGraph, Id, PatternAst, SearchMatches, Searcher, Subst, Symbol, Var};
use smelt_ir::NodeId;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// The most kernels merged into one multi-output kernel.
pub(crate) const MAX_PARTS: usize = 8;
/// The most sibling bodies considered per shared buffer.
const MAX_SIBLINGS: usize = 8;

/// A multi-output kernel: the union of its parts' bodies, writing each part's root.
#[derive(Clone, Debug)]
pub(crate) struct Multi {
    /// The single-output bodies merged, sorted.
    pub parts: Vec<BodyId>,
    /// The merged kernel; `proto.outputs` are the parts' roots, sorted.
    pub proto: Proto,
}

/// Which bodies can be siblings of each other: elementwise and copy bodies, or row kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    Loop,
    Rows,
}

fn family(k: KernelKind) -> Option<Family> {
    match k {
        KernelKind::Elementwise | KernelKind::Copy => Some(Family::Loop),
        KernelKind::Reduction => Some(Family::Rows),
        _ => None,
    }
}

/// Whether `x` transitively reads `y` in the graph (`x == y` counts).
fn depends(ctx: &Ctx, x: NodeId, y: NodeId) -> bool {
    if x < y {
        return false;
    }
    let mut seen = HashSet::new();
    let mut stack = vec![x];
    while let Some(n) = stack.pop() {
        if n == y {
            return true;
        }
        for o in ctx.operands(n) {
            if o >= y && seen.insert(o) {
                stack.push(o);
            }
        }
    }
    false
}

/// The multi-output kernel of `parts` (sorted, unique), if they make one: at least two bodies
/// with distinct roots, each sharing a buffer it reads (one that costs bytes) with another
/// part, the union cheaper than the parts, and either
/// - elementwise or copy bodies whose roots have one shape, none transitively reading
///   another's root (computing it inside is fine: the kernel writes it once); or
/// - row kernels over the same rows (input shape and reduced axes) whose roots are all row
///   values, so that the kernel stores them all once per row: `max` and `argmax` of one
///   tensor, its `min` and `max`, or a `mean` and the variance computed from it. A part may
///   read another's root: inside the union it is computed, not read. Each root must be
///   needed outside the union, the union must be a legal row kernel, and no buffer it reads
///   may depend on one of its roots.
pub(crate) fn build(ctx: &Ctx, table: &BodyTable, parts: &[BodyId]) -> Option<Multi> {
    if parts.len() < 2 || parts.len() > MAX_PARTS {
        return None;
    }
    let bodies: Vec<_> = parts.iter().map(|&b| table.body(b)).collect();
    let mut roots: Vec<NodeId> = bodies.iter().map(|b| b.root()).collect();
    roots.sort_unstable();
    roots.dedup();
    if roots.len() != parts.len() {
        return None;
    }
    let fam = family(bodies[0].kind)?;
    if bodies.iter().any(|b| family(b.kind) != Some(fam)) {
        return None;
    }
    if fam == Family::Rows {
        return build_rows(ctx, table, parts, &bodies, roots);
    }
    let space = ctx.shape(roots[0]);
    if roots.iter().any(|&r| ctx.shape(r) != space) {
        return None;
    }
    if !each_shares(ctx, &bodies) {
        return None;
    }
    for (i, p) in bodies.iter().enumerate() {
        for (j, q) in bodies.iter().enumerate() {
            if i == j {
                continue;
            }
            // A part may compute another's root inside (the kernel then writes that value
            // too) when the value has readers outside the part (else writing it is waste),
            // but must not read it, even transitively: it would be its own producer.
            let r = q.root();
            if p.nodes.binary_search(&r).is_ok() {
                let outside = ctx.is_output[r.index()]
                    || ctx.users[r.index()]
                        .iter()
                        .any(|u| p.nodes.binary_search(u).is_err());
                if !outside {
                    return None;
                }
            }
            if p.inputs.iter().any(|&x| depends(ctx, x, r)) {
                return None;
            }
        }
    }
    let nodes = union_nodes(&bodies);
    let kind = if bodies.iter().all(|b| b.kind == KernelKind::Copy) {
        KernelKind::Copy
    } else {
        KernelKind::Elementwise
    };
    let proto = Proto::new(ctx, nodes, kind, roots);
    let cost = proto.cost(ctx);
    let separate: u64 = parts.iter().map(|&b| kernel_cost(ctx, table, b)).sum();
    (cost < separate).then(|| Multi {
        parts: parts.to_vec(),
        proto,
    })
}

/// The ops of all of `bodies`, sorted, unique.
fn union_nodes(bodies: &[&Body]) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = bodies
        .iter()
        .flat_map(|b| b.nodes.iter().copied())
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// Whether every part reads a buffer (one that costs bytes) that another part reads too.
fn each_shares(ctx: &Ctx, bodies: &[&Body]) -> bool {
    bodies.iter().enumerate().all(|(i, p)| {
        p.inputs.iter().any(|x| {
            ctx.read_bytes(*x) > 0
                && bodies
                    .iter()
                    .enumerate()
                    .any(|(j, q)| i != j && q.inputs.binary_search(x).is_ok())
        })
    })
}

/// [`build`] for row kernels.
fn build_rows(
    ctx: &Ctx,
    table: &BodyTable,
    parts: &[BodyId],
    bodies: &[&Body],
    roots: Vec<NodeId>,
) -> Option<Multi> {
    let rows = rows_of(ctx, &bodies[0].nodes)?;
    for b in &bodies[1..] {
        if rows_of(ctx, &b.nodes)? != rows {
            return None;
        }
    }
    let (keep, drop) = row_shapes(&rows.0, &rows.1);
    let row_level = |r: &NodeId| *ctx.shape(*r) == keep || *ctx.shape(*r) == drop;
    if !roots.iter().all(row_level) || !each_shares(ctx, bodies) {
        return None;
    }
    let nodes = union_nodes(bodies);
    // Each root is needed outside the union (else writing it is waste: softmax's row maxima,
    // read only by its sum's body), and the union is one row kernel.
    if roots.iter().any(|&r| !ctx.needed_outside(&nodes, r))
        || classify(ctx, &nodes) != Some(KernelKind::Reduction)
    {
        return None;
    }
    let proto = Proto::new(ctx, nodes, KernelKind::Reduction, roots);
    // A buffer the union reads that is computed from one of its roots would make the kernel
    // its own producer.
    if proto
        .inputs
        .iter()
        .any(|&x| proto.outputs.iter().any(|&r| depends(ctx, x, r)))
    {
        return None;
    }
    let cost = proto.cost(ctx);
    let separate: u64 = parts.iter().map(|&b| kernel_cost(ctx, table, b)).sum();
    (cost < separate).then(|| Multi {
        parts: parts.to_vec(),
        proto,
    })
}

/// The `multi-output-siblings` rewrite (named [`super::SIBLINGS_RULE`]).
pub(crate) fn rewrite() -> egg::Rewrite<FuseLang, FuseAnalysis> {
    let var: Var = "?multi".parse().expect("a valid variable name");
    egg::Rewrite::new(
        super::SIBLINGS_RULE,
        SiblingRule {
            var,
            searched_at: (AtomicU64::new(0), AtomicU64::new(0)),
        },
        AddMulti { var },
    )
    .expect("the applier binds only the searcher's variable")
}

/// Searches sibling groups for the `multi-output-siblings` rewrite.
pub(crate) struct SiblingRule {
    var: Var,
    /// (body tick, multi count) when this rule last searched to completion.
    searched_at: (AtomicU64, AtomicU64),
}

impl SiblingRule {
    /// New multi-output kernels from the current frontiers: pairs of siblings sharing a
    /// buffer, and present groups grown by one sibling.
    fn find(&self, ctx: &Ctx, table: &mut BodyTable, order: &[NodeId]) -> Vec<MultiId> {
        // (Buffer, family) → (class, body) of the frontier bodies of that family reading it.
        let mut readers: BTreeMap<(NodeId, Family), Vec<(NodeId, BodyId)>> = BTreeMap::new();
        for &v in order {
            for b in table.frontier(v) {
                let body = table.body(b);
                let Some(fam) = family(body.kind) else {
                    continue;
                };
                for &x in &body.inputs {
                    if ctx.read_bytes(x) == 0 {
                        continue;
                    }
                    let list = readers.entry((x, fam)).or_default();
                    if list.len() < MAX_SIBLINGS {
                        list.push((v, b));
                    }
                }
            }
        }
        let mut found = Vec::new();
        let mut seen = HashSet::new();
        let mut offer = |table: &mut BodyTable, parts: Vec<BodyId>, found: &mut Vec<MultiId>| {
            if let Some(m) = table.intern_multi(ctx, parts) {
                if !table.present_multis().contains(&m) && seen.insert(m) {
                    found.push(m);
                }
            }
        };
        for list in readers.values() {
            for (i, &(v, a)) in list.iter().enumerate() {
                for &(w, b) in &list[i + 1..] {
                    if v != w {
                        offer(table, vec![a, b], &mut found);
                    }
                }
            }
        }
        let present: Vec<MultiId> = table.present_multis().to_vec();
        for m in present {
            let parts = table.multi(m).parts.clone();
            let roots = table.multi(m).proto.outputs.clone();
            let inputs = table.multi(m).proto.inputs.clone();
            let Some(fam) = family(table.multi(m).proto.kind) else {
                continue;
            };
            if parts.len() >= MAX_PARTS {
                continue;
            }
            for x in inputs {
                let Some(list) = readers.get(&(x, fam)) else {
                    continue;
                };
                for &(v, b) in list {
                    if roots.binary_search(&v).is_err() {
                        let mut grown = parts.clone();
                        grown.push(b);
                        offer(table, grown, &mut found);
                    }
                }
            }
        }
        found
    }
}

impl Searcher<FuseLang, FuseAnalysis> for SiblingRule {
    fn search_eclass_with_limit(
        &self,
        _egraph: &EGraph<FuseLang, FuseAnalysis>,
        _eclass: Id,
        _limit: usize,
    ) -> Option<SearchMatches<'_, FuseLang>> {
        // Groups span several classes: only the whole-graph search finds them.
        None
    }

    fn search_with_limit(
        &self,
        egraph: &EGraph<FuseLang, FuseAnalysis>,
        limit: usize,
    ) -> Vec<SearchMatches<'_, FuseLang>> {
        let analysis = &egraph.analysis;
        let mut table = analysis.table();
        let stamp = (table.tick(), table.present_multis().len() as u64);
        let last = (
            self.searched_at.0.load(Ordering::Relaxed),
            self.searched_at.1.load(Ordering::Relaxed),
        );
        if stamp == last {
            return Vec::new();
        }
        let mut found = self.find(&analysis.ctx, &mut table, &analysis.order);
        if found.len() <= limit {
            self.searched_at.0.store(stamp.0, Ordering::Relaxed);
            self.searched_at.1.store(stamp.1, Ordering::Relaxed);
        }
        found.truncate(limit);
        found
            .into_iter()
            .filter_map(|m| {
                let root = table.multi(m).proto.outputs[0];
                let class = analysis.class_of[root.index()]?;
                let mut s = Subst::with_capacity(1);
                s.insert(self.var, Id::from(m.0 as usize));
                Some(SearchMatches {
                    eclass: egraph.find(class),
                    substs: vec![s],
                    ast: None,
                })
            })
            .collect()
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.var]
    }
}

/// Adds the multi-output kernel the searcher bound: one e-node in each of its values' classes.
pub(crate) struct AddMulti {
    var: Var,
}

impl Applier<FuseLang, FuseAnalysis> for AddMulti {
    fn apply_one(
        &self,
        egraph: &mut EGraph<FuseLang, FuseAnalysis>,
        _eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<FuseLang>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let m = MultiId(usize::from(subst[self.var]) as u32);
        let (inputs, roots) = {
            let mut table = egraph.analysis.table();
            if !table.add_multi(m) {
                return Vec::new();
            }
            let multi = table.multi(m);
            (multi.proto.inputs.clone(), multi.proto.outputs.clone())
        };
        let class = |egraph: &EGraph<FuseLang, FuseAnalysis>, n: NodeId| {
            egraph.analysis.class_of[n.index()].map(|c| egraph.find(c))
        };
        let Some(children) = inputs
            .iter()
            .map(|&n| class(egraph, n))
            .collect::<Option<Vec<Id>>>()
        else {
            return Vec::new();
        };
        let mut changed = Vec::new();
        for (i, &r) in roots.iter().enumerate() {
            let Some(target) = class(egraph, r) else {
                continue;
            };
            let id = egraph.add(FuseLang::Multi(m, i, children.clone()));
            if egraph.union(target, id) {
                changed.push(target);
            }
        }
        changed
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.var]
    }
}

/// How a materialised value is computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Body(BodyId),
    Multi(MultiId),
}

type Choices = BTreeMap<NodeId, Choice>;

fn choice_inputs(table: &BodyTable, c: Choice) -> &[NodeId] {
    match c {
        Choice::Body(b) => &table.body(b).inputs,
        Choice::Multi(m) => &table.multi(m).proto.inputs,
    }
}

/// The choices reached from the graph's outputs when value `n` is computed by `choice(n)`
/// (a multi-output kernel chosen for one value computes all of its values), or `None` if a
/// needed value has no choice.
fn top_down(
    ctx: &Ctx,
    table: &BodyTable,
    choice: impl Fn(NodeId) -> Option<Choice>,
) -> Option<Choices> {
    let mut needed: std::collections::BinaryHeap<NodeId> =
        ctx.graph.outputs().iter().map(|(_, o)| *o).collect();
    let mut done = vec![false; ctx.graph.len()];
    let mut sel = Choices::new();
    while let Some(id) = needed.pop() {
        if std::mem::replace(&mut done[id.index()], true) || ctx.is_leaf(id) {
            continue;
        }
        if sel.contains_key(&id) {
            continue;
        }
        let c = choice(id)?;
        if let Choice::Multi(m) = c {
            for &r in &table.multi(m).proto.outputs {
                sel.insert(r, c);
            }
        } else {
            sel.insert(id, c);
        }
        needed.extend(choice_inputs(table, c).iter().copied());
    }
    Some(sel)
}

/// Exact cost of `sel` (each multi-output kernel once), or `None` when its kernels cannot be
/// ordered (a cycle: never expected, checked anyway).
fn cost(ctx: &Ctx, table: &BodyTable, sel: &Choices) -> Option<u64> {
    let protos = protos(ctx, table, sel);
    let n = protos.len();
    (super::order::order(ctx, protos.clone()).len() == n)
        .then(|| protos.iter().map(|p| p.cost(ctx)).sum())
}

/// The kernels of `sel`, in value order (not execution order).
fn protos(ctx: &Ctx, table: &BodyTable, sel: &Choices) -> Vec<Proto> {
    let mut out = Vec::new();
    let mut multis = HashSet::new();
    for (&root, &c) in sel {
        match c {
            Choice::Body(b) => {
                let body = table.body(b);
                out.push(Proto::new(ctx, body.nodes.clone(), body.kind, vec![root]));
            }
            Choice::Multi(m) => {
                if multis.insert(m) {
                    out.push(table.multi(m).proto.clone());
                }
            }
        }
    }
    out
}

/// Improves the extracted selection `sel` with the multi-output kernels present in the
/// e-graph (see the module docs); `best[n]` is the bottom-up choice for value `n`. Returns the
/// kernels (in value order).
pub(crate) fn improve(
    ctx: &Ctx,
    table: &BodyTable,
    sel: &Selection,
    best: &[Option<BodyId>],
) -> Vec<Proto> {
    let mut cur: Choices = sel.iter().map(|(&n, &b)| (n, Choice::Body(b))).collect();
    let Some(mut cur_cost) = cost(ctx, table, &cur) else {
        return protos(ctx, table, &cur);
    };
    loop {
        let mut improved = false;
        for &m in table.present_multis() {
            let roots = &table.multi(m).proto.outputs;
            // Only values the plan materialises already: a multi-output kernel writing a
            // value the plan recomputes inside its readers adds a write (rarely pays, and
            // trying every such kernel would cost the optimiser more than it finds).
            if roots.iter().any(|r| !cur.contains_key(r))
                || roots.iter().all(|r| cur.get(r) == Some(&Choice::Multi(m)))
            {
                continue;
            }
            // Chosen multi kernels writing one of the same values give way.
            let conflicts: HashSet<MultiId> = roots
                .iter()
                .filter_map(|r| match cur.get(r) {
                    Some(Choice::Multi(x)) => Some(*x),
                    _ => None,
                })
                .collect();
            let choice = |n: NodeId| {
                if roots.binary_search(&n).is_ok() {
                    return Some(Choice::Multi(m));
                }
                match cur.get(&n) {
                    Some(Choice::Multi(x)) if conflicts.contains(x) => {}
                    Some(&c) => return Some(c),
                    None => {}
                }
                best[n.index()].map(Choice::Body)
            };
            let Some(cand) = top_down(ctx, table, choice) else {
                continue;
            };
            if let Some(c) = cost(ctx, table, &cand) {
                if c < cur_cost {
                    cur = cand;
                    cur_cost = c;
                    improved = true;
                }
            }
        }
        if !improved {
            break;
        }
    }
    protos(ctx, table, &cur)
}
