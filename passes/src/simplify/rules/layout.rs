//! Layout rewrites: collapse view chains and sink permutes towards the leaves.
//!
//! All rules are exact: they only change which element is read where, never arithmetic.
//! Sinking a permute below an op gives cancellation a chance (`permute ∘ permute`
//! composes and, at the identity, disappears) and moves it onto the smaller value of a
//! reduction.
//!
//! Handled: identity permute, permute∘permute (composed, or gone at the identity), a permute
//! that only moves size-1 axes becomes a reshape (then reshape∘reshape collapses it),
//! reshape∘reshape, reshape/expand to the operand's own shape, expand∘expand, full slices,
//! zero padding amounts, one-operand concat; `unary(permute x) → permute(unary x)`,
//! `cast(permute x) → permute(cast x)`, `binary(permute a p, permute b p) → permute(binary a b)
//! p` when `a` and `b` have one shape, `binary(permute a p, s)` (either side) when `s` has one
//! element and no more dimensions than `a`; `reduce(permute(x, p), axes)` → reduce over the
//! mapped axes, then the remaining permute (if any), when the mapped reduced axes keep their
//! relative order (the reference accumulates in that order, so float sums stay bitwise equal).
//!
//! Not handled: a reshape that inserts/removes size-1 axes *between* two permutes (only the
//! permute-only-moves-unit-axes case above), permutes through
//! `where`, slices, pads, concats, gathers or matmuls, and folding transposes into matmul or
//! choosing materialisation layouts (stage 2's job).

use super::{nodes, same_ty, ty, Rule, Term};
use crate::simplify::analysis::SGraph;
use crate::simplify::lang::{ENode, Perm};
use egg::Id;

/// The layout rule set.
/// The layout rule set as egg rewrites.
pub fn rewrites() -> Vec<egg::Rewrite<ENode, crate::simplify::analysis::TypeAnalysis>> {
    RULES.iter().map(Rule::rewrite).collect()
}

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule { name: "permute-identity", matcher: permute_identity },
    Rule { name: "permute-permute",  matcher: permute_permute },
    Rule { name: "permute-unit-axes", matcher: permute_unit_axes },
    Rule { name: "reshape-same",     matcher: reshape_same },
    Rule { name: "reshape-reshape",  matcher: reshape_reshape },
    Rule { name: "expand-same",      matcher: expand_same },
    Rule { name: "expand-expand",    matcher: expand_expand },
    Rule { name: "slice-full",       matcher: slice_full },
    Rule { name: "pad-none",         matcher: pad_none },
    Rule { name: "concat-single",    matcher: concat_single },
    Rule { name: "unary-permute",    matcher: unary_permute },
    Rule { name: "cast-permute",     matcher: cast_permute },
    Rule { name: "binary-permute",   matcher: binary_permute },
    Rule { name: "reduce-permute",   matcher: reduce_permute },
];

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &q)| i == q)
}

/// The permutes of class `id`: `(x, p)` for each `permute(x, p)`.
fn permutes(eg: &SGraph, id: Id) -> impl Iterator<Item = (Id, &Perm)> {
    nodes(eg, id).iter().filter_map(|m| match m {
        ENode::Permute(p, [x]) => Some((*x, p)),
        _ => None,
    })
}

fn permute_identity(_eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Permute(p, [x]) = n else {
        return None;
    };
    is_identity(p).then_some(Term::Class(*x))
}

/// `permute(permute(x, p1), p2) → permute(x, q)` with `q[j] = p1[p2[j]]`; `x` when `q` is the
/// identity.
fn permute_permute(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Permute(p2, [y]) = n else {
        return None;
    };
    let (x, p1) = permutes(eg, *y).next()?;
    let q: Perm = p2.iter().map(|&j| p1[j]).collect();
    Some(if is_identity(&q) {
        Term::Class(x)
    } else {
        Term::node(ENode::Permute(q, [x]))
    })
}

/// A permute that only moves size-1 axes (the other axes keep their relative order) does not
/// move any data: `permute(x, p) → reshape(x, permuted shape)`, which then collapses with
/// neighbouring reshapes.
fn permute_unit_axes(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Permute(p, [x]) = n else {
        return None;
    };
    let dims = ty(eg, *x).shape.dims();
    let moved: Vec<usize> = p.iter().copied().filter(|&a| dims[a] != 1).collect();
    let in_order = moved.windows(2).all(|w| w[0] < w[1]);
    (in_order && !is_identity(p))
        .then(|| Term::node(ENode::Reshape(ty(eg, class).shape.0.clone(), [*x])))
}

fn reshape_same(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Reshape(_, [x]) = n else {
        return None;
    };
    same_ty(eg, *x, class).then_some(Term::Class(*x))
}

/// `reshape(reshape(x, s1), s2) → reshape(x, s2)`: row-major data is unchanged by both.
fn reshape_reshape(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Reshape(s2, [y]) = n else {
        return None;
    };
    nodes(eg, *y).iter().find_map(|m| match m {
        ENode::Reshape(_, [x]) => Some(Term::node(ENode::Reshape(s2.clone(), [*x]))),
        _ => None,
    })
}

fn expand_same(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Expand(_, [x]) = n else {
        return None;
    };
    same_ty(eg, *x, class).then_some(Term::Class(*x))
}

/// `expand(expand(x, s1), s2) → expand(x, s2)` (broadcasting is transitive).
fn expand_expand(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Expand(s2, [y]) = n else {
        return None;
    };
    nodes(eg, *y).iter().find_map(|m| match m {
        ENode::Expand(_, [x]) => Some(Term::node(ENode::Expand(s2.clone(), [*x]))),
        _ => None,
    })
}

fn slice_full(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Slice(ranges, [x]) = n else {
        return None;
    };
    let full = ranges
        .iter()
        .zip(ty(eg, *x).shape.dims())
        .all(|(&(start, stop, step), &d)| start == 0 && stop == d && step == 1);
    (full && same_ty(eg, *x, class)).then_some(Term::Class(*x))
}

fn pad_none(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Pad {
        pads, input: [x], ..
    } = n
    else {
        return None;
    };
    let none = pads.iter().all(|&(lo, hi)| lo == 0 && hi == 0);
    (none && same_ty(eg, *x, class)).then_some(Term::Class(*x))
}

fn concat_single(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Concat(_, xs) = n else { return None };
    match xs.as_slice() {
        [x] if same_ty(eg, *x, class) => Some(Term::Class(*x)),
        _ => None,
    }
}

/// `unary(permute(x, p)) → permute(unary(x), p)`.
fn unary_permute(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(u, [y]) = n else { return None };
    let (x, p) = permutes(eg, *y).next()?;
    Some(Term::over(
        ENode::Permute(p.clone(), [x]),
        vec![Term::node(ENode::Unary(*u, [x]))],
    ))
}

/// `cast(permute(x, p), t) → permute(cast(x, t), p)`.
fn cast_permute(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Cast(t, [y]) = n else { return None };
    let (x, p) = permutes(eg, *y).next()?;
    Some(Term::over(
        ENode::Permute(p.clone(), [x]),
        vec![Term::node(ENode::Cast(*t, [x]))],
    ))
}

/// Whether class `s` is a one-element value that broadcasts against any value of rank
/// `rank` without changing its shape.
fn is_broadcast_scalar(eg: &SGraph, s: Id, rank: usize) -> bool {
    let t = ty(eg, s);
    t.shape.numel() == 1 && t.shape.rank() <= rank
}

/// `binary(permute(a, p), permute(b, p)) → permute(binary(a, b), p)` when `a` and `b` have one
/// shape; `binary(permute(a, p), s) → permute(binary(a, s), p)` (either side) for a
/// one-element `s` of rank at most `a`'s.
fn binary_permute(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(op, [l, r]) = n else {
        return None;
    };
    let sink = |a: Id, b: Id, p: &Perm| {
        Some(Term::over(
            ENode::Permute(p.clone(), [a]),
            vec![Term::node(ENode::Binary(*op, [a, b]))],
        ))
    };
    for (a, p) in permutes(eg, *l) {
        if let Some((b, _)) =
            permutes(eg, *r).find(|(b, q)| *q == p && ty(eg, *b).shape == ty(eg, a).shape)
        {
            return sink(a, b, p);
        }
        if is_broadcast_scalar(eg, *r, p.len()) {
            return sink(a, *r, p);
        }
    }
    let (b, p) = permutes(eg, *r).next()?;
    if is_broadcast_scalar(eg, *l, p.len()) {
        return Some(Term::over(
            ENode::Permute(p.clone(), [b]),
            vec![Term::node(ENode::Binary(*op, [*l, b]))],
        ));
    }
    None
}

/// `reduce(permute(x, p), axes, keepdim)` → `permute(reduce(x, axes', keepdim), q)` with
/// `axes' = p[axes]`, when `p` keeps the reduced axes in order (so every reduction visits
/// its elements in the same order); `q` is the identity (and omitted) when the kept axes
/// keep their order too.
fn reduce_permute(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Reduce {
        op,
        axes,
        keepdim,
        input: [y],
    } = n
    else {
        return None;
    };
    let (x, p) = permutes(eg, *y).next()?;
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    let mapped: Vec<usize> = sorted.iter().map(|&a| p[a]).collect();
    if mapped.windows(2).any(|w| w[0] > w[1]) {
        return None;
    }
    let inner = ENode::Reduce {
        op: *op,
        axes: mapped.iter().copied().collect(),
        keepdim: *keepdim,
        input: [x],
    };
    let q: Perm = if *keepdim {
        p.clone()
    } else {
        // Positions of the permuted tensor that survive, and their axes in x.
        let kept: Vec<usize> = (0..p.len())
            .filter(|i| !axes.contains(i))
            .map(|i| p[i])
            .collect();
        let mut order = kept.clone();
        order.sort_unstable();
        kept.iter()
            .map(|k| order.iter().position(|o| o == k).unwrap_or(0))
            .collect()
    };
    Some(if is_identity(&q) {
        Term::node(inner)
    } else {
        Term::over(ENode::Permute(q, [x]), vec![Term::node(inner)])
    })
}
