//! The fusion rules: each merges a producer kernel into a consumer kernel.
//!
//! A rule matches a consumer e-node `K` in class `v` and an input class `c` of `K`. Only the
//! *frontier* of `v` grows: bodies no other body of `v` strictly contains, and recompute-free
//! bodies no other recompute-free body contains. From `c` the rule takes, among the bodies
//! whose kind it admits and whose union with `body(K)` is a legal kernel
//! ([`super::kernel::Body::new`]): the largest, the largest recompute-free one, and (when `c`
//! has readers outside `K`) its single op. Each union becomes a kernel e-node of `v`. The
//! producer's value stays available in `c`: whether it is recomputed inside `K` or materialised
//! once is the extractor's decision. Searches are incremental: a class is searched again only
//! when it or one of its frontier's input classes gained a body since the rule last ran.
//!
//! The searcher hands the interned body to the applier through the substitution (variable
//! `?body` bound to the body handle); the applier adds the e-node and unions it into `v`.

use super::kernel::{Ctx, KernelKind};
use super::lang::{BodyId, BodyTable, FuseAnalysis, FuseLang};
use egg::{Applier, EGraph, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use smelt_ir::NodeId;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

/// One named rule: which (consumer kind, producer kind) pairs it merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// A view (chain) read by any kernel but a GEMM becomes index arithmetic in the reader.
    FoldView,
    /// A transpose (and reshapes) of a GEMM operand become a transpose flag.
    FoldTransposeIntoGemm,
    /// Elementwise producer into elementwise consumer.
    ElementwiseChain,
    /// Elementwise producer into a row kernel (the reduction's prologue).
    ReductionPrologue,
    /// Row kernel into an elementwise consumer (its epilogue, reading the row again).
    ReductionEpilogue,
    /// A row kernel into another one over the same axes (layer_norm's mean and variance).
    RowReductions,
    /// A producer into the copy that stores its value in its consumer's layout.
    StoreInConsumerLayout,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::FoldView => "fold-view",
            Rule::FoldTransposeIntoGemm => "fold-transpose-into-gemm",
            Rule::ElementwiseChain => "elementwise-chain",
            Rule::ReductionPrologue => "reduction-prologue",
            Rule::ReductionEpilogue => "reduction-epilogue",
            Rule::RowReductions => "row-reductions",
            Rule::StoreInConsumerLayout => "store-in-consumer-layout",
        }
    }

    pub(crate) fn admits(self, consumer: KernelKind, producer: KernelKind) -> bool {
        use KernelKind::*;
        match self {
            Rule::FoldView => producer == Copy && consumer != MatMul,
            Rule::FoldTransposeIntoGemm => producer == Copy && consumer == MatMul,
            Rule::ElementwiseChain => consumer == Elementwise && producer == Elementwise,
            Rule::ReductionPrologue => consumer == Reduction && producer == Elementwise,
            Rule::ReductionEpilogue => consumer == Elementwise && producer == Reduction,
            Rule::RowReductions => consumer == Reduction && producer == Reduction,
            Rule::StoreInConsumerLayout => {
                consumer == Copy && matches!(producer, Elementwise | Reduction)
            }
        }
    }
}

impl Rule {
    /// Every fusion rule, in the order the runner applies them.
    pub const ALL: [Rule; 7] = [
        Rule::FoldView,
        Rule::FoldTransposeIntoGemm,
        Rule::ElementwiseChain,
        Rule::ReductionPrologue,
        Rule::ReductionEpilogue,
        Rule::RowReductions,
        Rule::StoreInConsumerLayout,
    ];

    /// The rules of unfused mode: views read through index arithmetic, nothing else merged.
    pub const VIEWS: [Rule; 2] = [Rule::FoldView, Rule::FoldTransposeIntoGemm];

    /// The rule named `name`.
    pub fn from_name(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// The rewrites of `rules` (one per rule, named as the rule), in the order given.
pub(crate) fn rewrites(rules: &[Rule]) -> Vec<Rewrite<FuseLang, FuseAnalysis>> {
    let var: Var = "?body".parse().expect("a valid variable name");
    rules
        .iter()
        .map(|&rule| {
            Rewrite::new(
                rule.name(),
                MergeSearcher {
                    rule,
                    var,
                    searched_at: AtomicU64::new(0),
                },
                AddKernel { var },
            )
            .expect("the applier binds only the searcher's variable")
        })
        .collect()
}

struct MergeSearcher {
    rule: Rule,
    var: Var,
    /// The table's tick when this rule last searched to completion: classes unchanged since,
    /// whose producers are unchanged too, have nothing new to match.
    searched_at: AtomicU64,
}

impl MergeSearcher {
    /// New merges for the class of `v`, appended to `out` (skipping those in `seen`).
    fn matches_in(
        &self,
        ctx: &Ctx,
        table: &mut BodyTable,
        v: NodeId,
        since: u64,
        seen: &mut HashSet<BodyId>,
        out: &mut Vec<BodyId>,
    ) {
        let grown = table.frontier(v);
        let stale = table.changed_at(v) <= since
            && grown.iter().all(|&k| {
                table
                    .body(k)
                    .inputs
                    .iter()
                    .all(|&c| table.changed_at(c) <= since)
            });
        if stale {
            return;
        }
        for k in grown {
            let consumer = table.body(k).kind;
            let inputs = table.body(k).inputs.clone();
            for c in inputs {
                if ctx.is_leaf(c) {
                    continue;
                }
                // The largest legal producer, the largest legal one that recomputes nothing,
                // and the producer's single op (recomputing one op at a time), which a
                // producer all of whose users are in `k` does not need.
                let inside = !ctx.is_output[c.index()]
                    && ctx.users[c.index()]
                        .iter()
                        .all(|u| table.body(k).nodes.binary_search(u).is_ok());
                let (mut largest, mut dup_free, mut single) = (false, false, inside);
                let theirs = table.class_bodies(c).to_vec();
                for p in theirs {
                    let body = table.body(p);
                    let is_single = body.nodes.len() == 1;
                    let wanted = !largest || (!dup_free && body.dup_free) || (!single && is_single);
                    if !wanted || !self.rule.admits(consumer, body.kind) {
                        continue;
                    }
                    let free = body.dup_free;
                    if let Some(m) = table.merge(ctx, k, p) {
                        largest = true;
                        dup_free |= free;
                        single |= is_single;
                        if !table.is_present(m) && seen.insert(m) {
                            out.push(m);
                        }
                    }
                }
            }
        }
    }

    fn to_matches(&self, v: Id, found: Vec<BodyId>) -> Option<SearchMatches<'static, FuseLang>> {
        if found.is_empty() {
            return None;
        }
        let substs = found
            .into_iter()
            .map(|b| {
                let mut s = Subst::with_capacity(1);
                s.insert(self.var, Id::from(b.0 as usize));
                s
            })
            .collect();
        Some(SearchMatches {
            eclass: v,
            substs,
            ast: None,
        })
    }
}

impl Searcher<FuseLang, FuseAnalysis> for MergeSearcher {
    fn search_eclass_with_limit(
        &self,
        egraph: &EGraph<FuseLang, FuseAnalysis>,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, FuseLang>> {
        let eclass = egraph.find(eclass);
        let v = egraph[eclass].data;
        let mut table = egraph.analysis.table();
        let (mut seen, mut found) = (HashSet::new(), Vec::new());
        self.matches_in(
            &egraph.analysis.ctx,
            &mut table,
            v,
            0,
            &mut seen,
            &mut found,
        );
        found.truncate(limit);
        self.to_matches(eclass, found)
    }

    fn search_with_limit(
        &self,
        egraph: &EGraph<FuseLang, FuseAnalysis>,
        limit: usize,
    ) -> Vec<SearchMatches<'_, FuseLang>> {
        let analysis = &egraph.analysis;
        let mut table = analysis.table();
        let since = self.searched_at.load(Ordering::Relaxed);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut total = 0;
        for &n in &analysis.order {
            let Some(id) = analysis.class_of[n.index()] else {
                continue;
            };
            let mut found = Vec::new();
            self.matches_in(&analysis.ctx, &mut table, n, since, &mut seen, &mut found);
            found.truncate(limit - total);
            total += found.len();
            out.extend(self.to_matches(egraph.find(id), found));
            if total >= limit {
                // The scheduler may drop these matches: search everything again next time.
                return out;
            }
        }
        self.searched_at.store(table.tick(), Ordering::Relaxed);
        out
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.var]
    }
}

/// Adds the kernel whose body handle the searcher bound, and unions it into the class.
struct AddKernel {
    var: Var,
}

impl Applier<FuseLang, FuseAnalysis> for AddKernel {
    fn apply_one(
        &self,
        egraph: &mut EGraph<FuseLang, FuseAnalysis>,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<FuseLang>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let b = BodyId(usize::from(subst[self.var]) as u32);
        let inputs = {
            let mut table = egraph.analysis.table();
            if !table.add_to_class(b) {
                return Vec::new();
            }
            table.body(b).inputs.clone()
        };
        let Some(children) = inputs
            .iter()
            .map(|n| egraph.analysis.class_of[n.index()].map(|c| egraph.find(c)))
            .collect::<Option<Vec<Id>>>()
        else {
            return Vec::new();
        };
        let id = egraph.add(FuseLang::Kernel(b, children));
        if egraph.union(eclass, id) {
            vec![eclass]
        } else {
            Vec::new()
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.var]
    }
}
