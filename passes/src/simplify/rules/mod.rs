//! Rewrite rules as data: named [`Rule`]s in one table per rule set.
//!
//! - [`exact`]: rewrites that are exact under IEEE-754 and integer wrapping for every input,
//!   ±0, ±inf, NaN (up to which NaN comes out) and subnormals included;
//! - [`fastmath`]: rewrites that change rounding, the sign of zero or NaN/inf results; only
//!   with [`crate::PassOptions::fast_math`];
//! - [`layout`]: permute/reshape/expand collapse and permute sinking (exact: they only move
//!   data).
//!
//! A rule is a matcher: given an e-class and one of its e-nodes, it returns the right-hand
//! side as a [`Term`] (or `None`), reading dtypes, shapes and constant values from the
//! analysis. [`Rule::rewrite`] wraps it in an egg [`Rewrite`] (a searcher that runs the
//! matcher on every e-node, an applier that builds the term and unions it). The applier
//! type-checks every new e-node with the IR's typing rule and refuses a right-hand side whose
//! type differs from the matched class, so a matcher bug cannot make an ill-typed graph.

pub mod exact;
pub mod fastmath;
pub mod layout;

use super::analysis::{type_of, SGraph, TypeAnalysis};
use super::lang::ENode;
use egg::{
    Applier, Id, Language, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var,
};
use smelt_ir::{DType, HostTensor, TensorType};

/// A matcher: the right-hand side for e-node `node` of e-class `class`, if the rule applies.
pub type Matcher = fn(&SGraph, Id, &ENode) -> Option<Term>;

/// A named rewrite rule.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub name: &'static str,
    pub matcher: Matcher,
}

/// The right-hand side of a rule: an existing e-class, or a new e-node over terms.
#[derive(Clone, Debug)]
pub enum Term {
    Class(Id),
    /// An e-node; its children are replaced, in order, by the terms given (when the list is
    /// empty the e-node's own children are kept).
    Node(ENode, Vec<Term>),
}

impl Term {
    /// An e-node whose children are existing e-classes.
    pub fn node(n: ENode) -> Term {
        Term::Node(n, Vec::new())
    }

    /// An e-node over the given terms (its own children are placeholders).
    pub fn over(n: ENode, children: Vec<Term>) -> Term {
        Term::Node(n, children)
    }
}

impl Rule {
    /// The egg rewrite of this rule.
    pub fn rewrite(&self) -> Rewrite<ENode, TypeAnalysis> {
        Rewrite::new(self.name, RuleSearcher(*self), RuleApplier(*self))
            .unwrap_or_else(|e| unreachable!("a rule without pattern variables: {e}"))
    }

    /// The right-hand sides of this rule at e-class `class`.
    pub fn matches(&self, egraph: &SGraph, class: Id) -> Vec<Term> {
        egraph[class]
            .nodes
            .iter()
            .filter_map(|n| (self.matcher)(egraph, class, n))
            .collect()
    }
}

/// The egg rewrites of every set `opts` enables, in a fixed order.
pub fn rewrites(opts: &crate::PassOptions) -> Vec<Rewrite<ENode, TypeAnalysis>> {
    let mut rws = exact::rewrites();
    rws.extend(layout::rewrites());
    if opts.fast_math {
        rws.extend(fastmath::rewrites());
    }
    rws
}

/// Every rule of every set, for tests and documentation.
pub fn all() -> Vec<(&'static str, Rule)> {
    let sets: [(&str, &[Rule]); 3] = [
        ("exact", exact::RULES),
        ("layout", layout::RULES),
        ("fastmath", fastmath::RULES),
    ];
    sets.iter()
        .flat_map(|(set, rules)| rules.iter().map(move |r| (*set, *r)))
        .collect()
}

struct RuleSearcher(Rule);
struct RuleApplier(Rule);

impl Searcher<ENode, TypeAnalysis> for RuleSearcher {
    fn search_eclass_with_limit(
        &self,
        egraph: &SGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, ENode>> {
        let hit = limit > 0
            && egraph[eclass]
                .nodes
                .iter()
                .any(|n| (self.0.matcher)(egraph, eclass, n).is_some());
        hit.then(|| SearchMatches {
            eclass,
            substs: vec![Subst::with_capacity(0)],
            ast: None,
        })
    }

    /// Classes in increasing id order, so that the run is deterministic.
    fn search_with_limit(&self, egraph: &SGraph, limit: usize) -> Vec<SearchMatches<'_, ENode>> {
        let mut ids: Vec<Id> = egraph.classes().map(|c| c.id).collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        let mut left = limit;
        for id in ids {
            if left == 0 {
                break;
            }
            if let Some(m) = self.search_eclass_with_limit(egraph, id, left) {
                left -= m.substs.len();
                out.push(m);
            }
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

impl Applier<ENode, TypeAnalysis> for RuleApplier {
    fn apply_one(
        &self,
        egraph: &mut SGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<ENode>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        let terms = self.0.matches(egraph, eclass);
        let mut changed = Vec::new();
        for t in terms {
            match add_term(egraph, &t) {
                Ok(id) if egraph[id].data.ty == egraph[eclass].data.ty => {
                    if egraph.union(eclass, id) {
                        changed.push(eclass);
                    }
                }
                Ok(id) => log::error!(
                    "simplify: rule {} gives {} for a {} value; not applied",
                    self.0.name,
                    egraph[id].data.ty,
                    egraph[eclass].data.ty
                ),
                Err(e) => log::error!("simplify: rule {}: {e}; not applied", self.0.name),
            }
        }
        changed
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

/// Adds `term` to the e-graph after type-checking every new e-node.
pub fn add_term(egraph: &mut SGraph, term: &Term) -> Result<Id, String> {
    match term {
        Term::Class(id) => Ok(egraph.find(*id)),
        Term::Node(n, children) => {
            let mut n = n.clone();
            if !children.is_empty() {
                if children.len() != n.children().len() {
                    return Err(format!("{} children given for {n:?}", children.len()));
                }
                let ids = children
                    .iter()
                    .map(|c| add_term(egraph, c))
                    .collect::<Result<Vec<Id>, String>>()?;
                n.children_mut().copy_from_slice(&ids);
            }
            type_of(egraph, &n)?;
            Ok(egraph.add(n))
        }
    }
}

// ---- helpers for matchers -----------------------------------------------------------------

/// The type of e-class `id`.
pub fn ty(eg: &SGraph, id: Id) -> &TensorType {
    &eg[id].data.ty
}

/// The constant value of e-class `id`, if known.
pub fn value(eg: &SGraph, id: Id) -> Option<&HostTensor> {
    eg[id].data.value.as_deref()
}

/// Whether e-class `id` is a known constant all of whose elements satisfy `pred` (elements
/// widened to f64; exact for the small integers the rules test for).
pub fn all_elems(eg: &SGraph, id: Id, pred: impl Fn(f64) -> bool) -> bool {
    value(eg, id).is_some_and(|t| (0..t.numel()).all(|i| pred(t.data().get_f64(i))))
}

pub fn is_one(x: f64) -> bool {
    x == 1.0
}

pub fn is_zero(x: f64) -> bool {
    x == 0.0
}

/// `+0.0` (and integer 0).
pub fn is_pos_zero(x: f64) -> bool {
    x.to_bits() == 0
}

/// `-0.0`.
pub fn is_neg_zero(x: f64) -> bool {
    x.to_bits() == (-0.0f64).to_bits()
}

/// Whether e-class `a` has the same type as e-class `b` (a rewrite to `a` keeps the type).
pub fn same_ty(eg: &SGraph, a: Id, b: Id) -> bool {
    ty(eg, a) == ty(eg, b)
}

/// The operands of a binary e-node in both orders: `(x, y)` and `(y, x)`.
pub fn both_orders(a: Id, b: Id) -> [(Id, Id); 2] {
    [(a, b), (b, a)]
}

/// Zeros of type `t`: a 0-d constant, expanded when `t` has dimensions.
pub fn zeros(t: &TensorType) -> Term {
    let z = ENode::scalar(0.0, t.dtype);
    if t.shape.rank() == 0 {
        Term::node(z)
    } else {
        Term::over(
            ENode::Expand(t.shape.0.clone(), [Id::from(0)]),
            vec![Term::node(z)],
        )
    }
}

/// Whether the class holds a float dtype.
pub fn is_float(eg: &SGraph, id: Id) -> bool {
    ty(eg, id).dtype.is_float()
}

/// Whether the class holds an integer dtype.
pub fn is_int(eg: &SGraph, id: Id) -> bool {
    ty(eg, id).dtype.is_int()
}

/// Whether the class holds bools.
pub fn is_bool(eg: &SGraph, id: Id) -> bool {
    ty(eg, id).dtype == DType::Bool
}

/// The e-nodes of class `id`.
pub fn nodes(eg: &SGraph, id: Id) -> &[ENode] {
    &eg[id].nodes
}
