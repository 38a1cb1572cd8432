//! Rewrites that are exact under IEEE-754 and integer wrapping, for every dtype they accept.
//!
//! "Exact" means: for every input value, ±0, ±inf, NaN and subnormals included, the right-hand
//! side computes bitwise the same result as the left-hand side under the reference
//! interpreter, except for which NaN (sign, payload) comes out where both give a NaN. Every
//! rule keeps the value's type: a rule whose left side broadcasts (e.g. `x * ones` with a
//! larger `ones`) only fires when the surviving operand already has the result's type.
//!
//! Handled: identities (`x*1`, `x/1`, `x+(-0.0)`, `x-(+0.0)`, integer `x+0`, `x-0`, `x*0`,
//! `x-x`, `x floor_div 1`, `pow(x, 1)`), `x*(-1) → -x`, `x+(-y) → x-y`, `x-(-y) → x+y`,
//! involutions and idempotent unary ops, lossless cast pairs and chains, `where` with a
//! constant condition or equal branches, `x/c → x*(1/c)` for powers of two whose reciprocal is
//! exact in the dtype, and constant folding (through the analysis, values of at most
//! [`crate::simplify::analysis::CONST_LIMIT`] elements).
//!
//! Not handled (not exact): `x+0.0 → x` (`-0.0 + 0.0 = +0.0`), `x*0 → 0` and `x-x → 0` for
//! floats (NaN, inf), reassociation, division by other constants: see [`super::fastmath`].
//! Not handled (not done yet): `max(x, x)`-style idempotence of binary ops other than
//! maximum/minimum, distributivity, comparisons of constants with non-constants.

use super::{all_elems, both_orders, is_bool, is_float, is_int, is_neg_zero, is_one, is_pos_zero};
use super::{nodes, same_ty, ty, value, zeros, Rule, Term};
use crate::simplify::analysis::SGraph;
use crate::simplify::lang::{ConstVal, ENode};
use egg::Id;
use smelt_ir::{BinaryOp, DType, UnaryOp};

use BinaryOp as B;
use UnaryOp as U;

/// The exact rule set.
/// The exact rule set as egg rewrites.
pub fn rewrites() -> Vec<egg::Rewrite<ENode, crate::simplify::analysis::TypeAnalysis>> {
    RULES.iter().map(Rule::rewrite).collect()
}

#[rustfmt::skip]
pub const RULES: &[Rule] = &[
    Rule { name: "const-fold",          matcher: const_fold },
    Rule { name: "mul-one",             matcher: mul_one },
    Rule { name: "div-one",             matcher: div_one },
    Rule { name: "add-neg-zero",        matcher: add_neg_zero },
    Rule { name: "sub-pos-zero",        matcher: sub_pos_zero },
    Rule { name: "int-add-zero",        matcher: int_add_zero },
    Rule { name: "int-sub-zero",        matcher: int_sub_zero },
    Rule { name: "int-mul-zero",        matcher: int_mul_zero },
    Rule { name: "int-sub-self",        matcher: int_sub_self },
    Rule { name: "int-floor-div-one",   matcher: int_floor_div_one },
    Rule { name: "pow-one",             matcher: pow_one },
    Rule { name: "mul-neg-one",         matcher: mul_neg_one },
    Rule { name: "add-neg",             matcher: add_neg },
    Rule { name: "sub-neg",             matcher: sub_neg },
    Rule { name: "max-min-self",        matcher: max_min_self },
    Rule { name: "div-pow2",            matcher: div_pow2 },
    Rule { name: "neg-neg",             matcher: neg_neg },
    Rule { name: "not-not",             matcher: not_not },
    Rule { name: "abs-abs",             matcher: abs_abs },
    Rule { name: "abs-neg",             matcher: abs_neg },
    Rule { name: "relu-relu",           matcher: relu_relu },
    Rule { name: "relu-abs",            matcher: relu_abs },
    Rule { name: "floor-ceil-integral", matcher: floor_ceil_integral },
    Rule { name: "int-floor-ceil",      matcher: int_floor_ceil },
    Rule { name: "cast-same",           matcher: cast_same },
    Rule { name: "cast-roundtrip",      matcher: cast_roundtrip },
    Rule { name: "cast-widen-chain",    matcher: cast_widen_chain },
    Rule { name: "where-const",         matcher: where_const },
    Rule { name: "where-same",          matcher: where_same },
];

/// Replaces a computed class whose value the analysis knows by the constant.
fn const_fold(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    if matches!(n, ENode::Const(_) | ENode::Leaf(..)) {
        return None;
    }
    if nodes(eg, class)
        .iter()
        .any(|m| matches!(m, ENode::Const(_)))
    {
        return None;
    }
    let v = value(eg, class)?;
    Some(Term::node(ENode::Const(ConstVal::new(v.clone()))))
}

/// `op(x, c)` (or `op(c, x)` when `commutes`) where constant `c` satisfies `pred` and `x`
/// already has the result's type: `x`.
fn identity(
    eg: &SGraph,
    class: Id,
    n: &ENode,
    op: BinaryOp,
    commutes: bool,
    pred: fn(f64) -> bool,
) -> Option<Id> {
    let ENode::Binary(b, [l, r]) = n else {
        return None;
    };
    if *b != op {
        return None;
    }
    let orders = both_orders(*l, *r);
    let orders = if commutes { &orders[..] } else { &orders[..1] };
    orders
        .iter()
        .find(|(x, c)| same_ty(eg, *x, class) && all_elems(eg, *c, pred))
        .map(|(x, _)| *x)
}

fn mul_one(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    identity(eg, class, n, B::Mul, true, is_one).map(Term::Class)
}

fn div_one(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    identity(eg, class, n, B::Div, false, is_one).map(Term::Class)
}

fn add_neg_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::Add, true, is_neg_zero)?;
    is_float(eg, x).then_some(Term::Class(x))
}

fn sub_pos_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::Sub, false, is_pos_zero)?;
    is_float(eg, x).then_some(Term::Class(x))
}

fn int_add_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::Add, true, is_pos_zero)?;
    is_int(eg, x).then_some(Term::Class(x))
}

fn int_sub_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::Sub, false, is_pos_zero)?;
    is_int(eg, x).then_some(Term::Class(x))
}

fn int_floor_div_one(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::FloorDiv, false, is_one)?;
    is_int(eg, x).then_some(Term::Class(x))
}

fn pow_one(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    identity(eg, class, n, B::Pow, false, is_one).map(Term::Class)
}

/// Integer `x * 0` (either side): zeros of the result's type (wrapping multiplication).
fn int_mul_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Mul, [l, r]) = n else {
        return None;
    };
    let hit =
        is_int(eg, class) && (all_elems(eg, *l, is_pos_zero) || all_elems(eg, *r, is_pos_zero));
    hit.then(|| zeros(ty(eg, class)))
}

/// Integer `x - x`: zeros.
fn int_sub_self(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Sub, [l, r]) = n else {
        return None;
    };
    (l == r && is_int(eg, class)).then(|| zeros(ty(eg, class)))
}

/// `x * (-1)` (either side): `-x` (floats: negation and multiplication by -1 round alike;
/// integers: both wrap).
fn mul_neg_one(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let x = identity(eg, class, n, B::Mul, true, |v| v == -1.0)?;
    Some(Term::node(ENode::Unary(U::Neg, [x])))
}

/// `x + (-y)` (either side) → `x - y`: IEEE subtraction is addition of the negation.
fn add_neg(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Add, [l, r]) = n else {
        return None;
    };
    both_orders(*l, *r).into_iter().find_map(|(x, ny)| {
        let y = neg_operand(eg, ny)?;
        Some(Term::node(ENode::Binary(B::Sub, [x, y])))
    })
}

/// `x - (-y)` → `x + y`.
fn sub_neg(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Sub, [x, ny]) = n else {
        return None;
    };
    let y = neg_operand(eg, *ny)?;
    Some(Term::node(ENode::Binary(B::Add, [*x, y])))
}

/// `y` if class `id` holds `neg(y)`.
fn neg_operand(eg: &SGraph, id: Id) -> Option<Id> {
    unary_operand(eg, id, U::Neg)
}

/// The operand of a `u` e-node in class `id`.
fn unary_operand(eg: &SGraph, id: Id, u: UnaryOp) -> Option<Id> {
    nodes(eg, id).iter().find_map(|m| match m {
        ENode::Unary(v, [y]) if *v == u => Some(*y),
        _ => None,
    })
}

/// `maximum(x, x)`, `minimum(x, x)`: `x`.
fn max_min_self(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Maximum | B::Minimum, [l, r]) = n else {
        return None;
    };
    (l == r && same_ty(eg, *l, class)).then_some(Term::Class(*l))
}

/// `x / c → x * reciprocal(c)` when every element of the constant `c` is ±2^k whose
/// reciprocal is exactly representable in the dtype (so both sides round the same real
/// number `x·2^-k` once; f16/bf16 compute in f32 and round once more, identically). The
/// reciprocal is folded by `const-fold`.
fn div_pow2(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(B::Div, [x, c]) = n else {
        return None;
    };
    let dtype = ty(eg, *c).dtype;
    if !dtype.is_float() || !all_elems(eg, *c, |v| exact_reciprocal(v, dtype)) {
        return None;
    }
    let recip = Term::node(ENode::Unary(U::Reciprocal, [*c]));
    Some(Term::over(
        ENode::Binary(B::Mul, [*x, *c]),
        vec![Term::Class(*x), recip],
    ))
}

/// Whether `v` is a finite nonzero power of two (either sign) whose reciprocal is a finite
/// value of `dtype`.
pub fn exact_reciprocal(v: f64, dtype: DType) -> bool {
    if !v.is_finite() || v == 0.0 {
        return false;
    }
    let (m, _) = frexp(v.abs());
    if m != 0.5 {
        return false;
    }
    let r = 1.0 / v;
    if !dtype.is_float() {
        return false;
    }
    let back = smelt_ir::graph::scalar_tensor(smelt_ir::Scalar::Float(r), dtype)
        .data()
        .get_f64(0);
    back == r && r.is_finite() && r * v == 1.0
}

/// Mantissa in `[0.5, 1)` and exponent of a positive finite `x`.
fn frexp(x: f64) -> (f64, i32) {
    let mut e = 0;
    let mut m = x;
    while m >= 1.0 {
        m /= 2.0;
        e += 1;
    }
    while m < 0.5 {
        m *= 2.0;
        e -= 1;
    }
    (m, e)
}

fn neg_neg(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::Neg, [a]) = n else {
        return None;
    };
    neg_operand(eg, *a).map(Term::Class)
}

fn not_not(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::LogicalNot, [a]) = n else {
        return None;
    };
    let b = unary_operand(eg, *a, U::LogicalNot)?;
    is_bool(eg, b).then_some(Term::Class(b))
}

/// `f(f(x)) → f(x)` for an idempotent `f`: the inner class.
fn idempotent(eg: &SGraph, n: &ENode, f: UnaryOp) -> Option<Term> {
    let ENode::Unary(u, [a]) = n else { return None };
    (*u == f && unary_operand(eg, *a, f).is_some()).then_some(Term::Class(*a))
}

fn abs_abs(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    idempotent(eg, n, U::Abs)
}

fn relu_relu(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    idempotent(eg, n, U::Relu)
}

/// `abs(-x) → abs(x)` (integers: `abs(-MIN) = abs(MIN) = MIN`, wrapping).
fn abs_neg(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::Abs, [a]) = n else {
        return None;
    };
    let x = neg_operand(eg, *a)?;
    Some(Term::node(ENode::Unary(U::Abs, [x])))
}

/// Float `relu(abs(x)) → abs(x)` (not for integers: `abs(MIN)` is negative).
fn relu_abs(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::Relu, [a]) = n else {
        return None;
    };
    (is_float(eg, *a) && unary_operand(eg, *a, U::Abs).is_some()).then_some(Term::Class(*a))
}

/// `floor`/`ceil` of a `floor`/`ceil`: the inner value is already integral (or ±inf, NaN).
fn floor_ceil_integral(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::Floor | U::Ceil, [a]) = n else {
        return None;
    };
    let integral =
        unary_operand(eg, *a, U::Floor).is_some() || unary_operand(eg, *a, U::Ceil).is_some();
    integral.then_some(Term::Class(*a))
}

/// `floor`/`ceil` of an integer: the identity.
fn int_floor_ceil(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Unary(U::Floor | U::Ceil, [a]) = n else {
        return None;
    };
    is_int(eg, *a).then_some(Term::Class(*a))
}

fn cast_same(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Cast(to, [a]) = n else { return None };
    (ty(eg, *a).dtype == *to).then_some(Term::Class(*a))
}

/// Whether every value of `from` survives a cast to `to` unchanged (and casting back gives
/// the same bits, NaN payloads aside).
pub fn lossless(from: DType, to: DType) -> bool {
    use DType::*;
    matches!(
        (from, to),
        (Bool, _) | (F16 | BF16, F32 | F64) | (F32, F64) | (I32, I64 | F64)
    )
}

/// The inner cast of class `id`: `(x, w)` for `cast(x, w)` with a lossless widening.
fn inner_lossless_cast(eg: &SGraph, id: Id) -> Option<(Id, DType)> {
    nodes(eg, id).iter().find_map(|m| match m {
        ENode::Cast(w, [x]) if lossless(ty(eg, *x).dtype, *w) => Some((*x, *w)),
        _ => None,
    })
}

/// `cast(cast(x, w), dtype(x)) → x` for a lossless widening to `w`.
fn cast_roundtrip(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Cast(to, [a]) = n else { return None };
    let (x, _) = inner_lossless_cast(eg, *a)?;
    (ty(eg, x).dtype == *to).then_some(Term::Class(x))
}

/// `cast(cast(x, w), t) → cast(x, t)` for a lossless widening to `w` (the value reaching the
/// outer cast is `x`'s exactly; every cast converts the exact value).
fn cast_widen_chain(eg: &SGraph, _class: Id, n: &ENode) -> Option<Term> {
    let ENode::Cast(to, [a]) = n else { return None };
    let (x, w) = inner_lossless_cast(eg, *a)?;
    (ty(eg, x).dtype != *to && w != *to).then(|| Term::node(ENode::Cast(*to, [x])))
}

/// `where(all-true, a, b) → a`, `where(all-false, a, b) → b` when the branch already has the
/// result's type.
fn where_const(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Where([c, a, b]) = n else {
        return None;
    };
    if all_elems(eg, *c, |v| v != 0.0) && same_ty(eg, *a, class) {
        return Some(Term::Class(*a));
    }
    (all_elems(eg, *c, |v| v == 0.0) && same_ty(eg, *b, class)).then_some(Term::Class(*b))
}

/// `where(c, a, a) → a` when `a` already has the result's type.
fn where_same(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Where([_, a, b]) = n else {
        return None;
    };
    (a == b && same_ty(eg, *a, class)).then_some(Term::Class(*a))
}
