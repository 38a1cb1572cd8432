//! Fast-math rewrites: only with [`crate::PassOptions::fast_math`].
//!
//! These change results: rounding (reassociation, multiplying by a rounded reciprocal), the
//! sign of zero (`x + 0.0 → x`) and NaN/inf behaviour (`x * 0 → 0` is NaN for `x = ±inf` or
//! NaN, `x - x → 0` likewise, `log(exp(x)) → x` where `exp` overflows). They are tested on
//! finite inputs within a relative tolerance, not bitwise. Float dtypes only (the integer
//! versions that are exact live in [`super::exact`]).
//!
//! Handled: `x ± 0 → x` (either zero), `x * 0 → 0`, `x - x → 0`, `x / c → x * (1/c)` for
//! any constant `c`, `(a + b) + c → a + (b + c)` and the same for `*` when `b` and `c` are
//! constants (with `const-fold` this gathers constants), a constant left operand of `+`/`*`
//! moved to the right, `log(exp(x)) → x`.
//! Not handled: general reassociation (it duplicates shared subterms), distributivity,
//! general commutativity, `x / x → 1`, `sqrt(x)² → x`.

use super::{all_elems, both_orders, is_float, is_zero, same_ty, ty, value, zeros, Rule, Term};
use crate::simplify::analysis::SGraph;
use crate::simplify::lang::ENode;
use egg::Id;
use smelt_ir::{BinaryOp, UnaryOp};

use BinaryOp as B;

/// The fast-math rule set.
/// The fast-math rule set as egg rewrites.
pub fn rewrites() -> Vec<egg::Rewrite<ENode, crate::simplify::analysis::TypeAnalysis>> {
    RULES.iter().map(Rule::rewrite).collect()
}

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule { name: "fm-add-zero",        matcher: add_zero },
    Rule { name: "fm-sub-zero",        matcher: sub_zero },
    Rule { name: "fm-mul-zero",        matcher: mul_zero },
    Rule { name: "fm-sub-self",        matcher: sub_self },
    Rule { name: "fm-div-const",       matcher: div_const },
    Rule { name: "fm-add-assoc",       matcher: add_assoc },
    Rule { name: "fm-mul-assoc",       matcher: mul_assoc },
    Rule { name: "fm-const-right",     matcher: const_right },
    Rule { name: "fm-log-exp",         matcher: log_exp },
];

fn add_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Add, [l, r]) = n else {
        return None;
    };
    both_orders(*l, *r)
        .into_iter()
        .find(|(x, c)| is_float(eg, *x) && same_ty(eg, *x, class) && all_elems(eg, *c, is_zero))
        .map(|(x, _)| Term::Class(x))
}

fn sub_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Sub, [x, c]) = n else {
        return None;
    };
    (is_float(eg, *x) && same_ty(eg, *x, class) && all_elems(eg, *c, is_zero))
        .then_some(Term::Class(*x))
}

fn mul_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Mul, [l, r]) = n else {
        return None;
    };
    let hit = is_float(eg, class) && (all_elems(eg, *l, is_zero) || all_elems(eg, *r, is_zero));
    hit.then(|| zeros(ty(eg, class)))
}

fn sub_self(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Sub, [l, r]) = n else {
        return None;
    };
    (l == r && is_float(eg, class)).then(|| zeros(ty(eg, class)))
}

/// `x / c → x * reciprocal(c)` for a constant `c` (the reciprocal is folded).
fn div_const(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Div, [x, c]) = n else {
        return None;
    };
    value(eg, *c)?;
    Some(Term::over(
        ENode::Binary(B::Mul, [*x, *c]),
        vec![
            Term::Class(*x),
            Term::node(ENode::Unary(UnaryOp::Reciprocal, [*c])),
        ],
    ))
}

/// `(a op b) op c → a op (b op c)` when `b` and `c` are constants (so `b op c` folds).
///
/// Only this constant-gathering form: general reassociation duplicates shared subterms
/// under the tree-cost extractor and grows graphs.
fn assoc(eg: &SGraph, n: &ENode, op: BinaryOp) -> Option<Term> {
    let ENode::Binary(o, [ab, c]) = n else {
        return None;
    };
    if *o != op || !is_float(eg, *c) || value(eg, *c).is_none() {
        return None;
    }
    let (a, b) = super::nodes(eg, *ab).iter().find_map(|m| match m {
        ENode::Binary(p, [a, b]) if *p == op && value(eg, *b).is_some() => Some((*a, *b)),
        _ => None,
    })?;
    Some(Term::over(
        ENode::Binary(op, [a, a]),
        vec![Term::Class(a), Term::node(ENode::Binary(op, [b, *c]))],
    ))
}

fn add_assoc(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    assoc(eg, n, B::Add)
}

fn mul_assoc(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    assoc(eg, n, B::Mul)
}

/// `c op x → x op c` for `+`/`*`, a constant `c` and a non-constant `x`.
fn const_right(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(op @ (B::Add | B::Mul), [c, x]) = n else {
        return None;
    };
    let hit = is_float(eg, *x) && value(eg, *c).is_some() && value(eg, *x).is_none();
    hit.then(|| Term::node(ENode::Binary(*op, [*x, *c])))
}

fn log_exp(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(UnaryOp::Log, [a]) = n else {
        return None;
    };
    let x = super::nodes(eg, *a).iter().find_map(|m| match m {
        ENode::Unary(UnaryOp::Exp, [x]) => Some(*x),
        _ => None,
    })?;
    same_ty(eg, x, class).then_some(Term::Class(x))
}
