//! Property tests of every simplification rule: the rule's left side on random operands
//! (every dtype it applies to; inputs with ±0, ±inf, NaN, subnormals and integer extremes)
//! and its right side must evaluate bitwise equal under the reference interpreter (NaN
//! positions equal), or within the stated tolerance for the fast-math set. A coverage test
//! checks that every rule of every set has such a test, and a deliberately wrong rule shows
//! that the harness catches unsound rules.

#[path = "simplify_rules/gen.rs"]
mod gen;
#[path = "simplify_rules/harness.rs"]
mod harness;
#[path = "simplify_rules/templates.rs"]
mod templates;

use egg::Id;
use harness::{check_rule, Mode, Template};
use smelt_ir::BinaryOp;
use smelt_passes::simplify::analysis::SGraph;
use smelt_passes::simplify::lang::ENode;
use smelt_passes::simplify::rules::{self, all_elems, is_pos_zero, same_ty, Rule, Term};

const CASES: u32 = 256;

fn rule(name: &str) -> Rule {
    rules::all()
        .into_iter()
        .find(|(_, r)| r.name == name)
        .map(|(_, r)| r)
        .unwrap_or_else(|| panic!("no rule named {name}"))
}

/// Runs the property test of rule `name` and checks that it fired in some cases.
fn run(name: &str, template: Template, mode: Mode) {
    let fired = check_rule(&rule(name), template, mode, CASES).unwrap_or_else(|e| panic!("{e}"));
    println!("{name}: fired in {fired} of {CASES} cases");
    assert!(
        fired >= CASES / 50,
        "rule {name} fired in only {fired} of {CASES} cases: the template does not exercise it"
    );
}

macro_rules! rule_tests {
    ($($test:ident: $name:literal => $template:path, $mode:ident;)*) => {
        $(
            #[test]
            fn $test() {
                run($name, $template, Mode::$mode);
            }
        )*

        /// Every (rule name, template) pair with a property test above.
        const TESTED: &[(&str, Template, Mode)] = &[$(($name, $template, Mode::$mode)),*];
    };
}

rule_tests! {
    exact_const_fold: "const-fold" => templates::const_fold, Exact;
    exact_mul_one: "mul-one" => templates::mul_one, Exact;
    exact_div_one: "div-one" => templates::div_one, Exact;
    exact_add_neg_zero: "add-neg-zero" => templates::add_neg_zero, Exact;
    exact_sub_pos_zero: "sub-pos-zero" => templates::sub_pos_zero, Exact;
    exact_int_add_zero: "int-add-zero" => templates::int_add_zero, Exact;
    exact_int_sub_zero: "int-sub-zero" => templates::int_sub_zero, Exact;
    exact_int_mul_zero: "int-mul-zero" => templates::int_mul_zero, Exact;
    exact_int_sub_self: "int-sub-self" => templates::int_sub_self, Exact;
    exact_int_floor_div_one: "int-floor-div-one" => templates::int_floor_div_one, Exact;
    exact_pow_one: "pow-one" => templates::pow_one, Exact;
    exact_mul_neg_one: "mul-neg-one" => templates::mul_neg_one, Exact;
    exact_add_neg: "add-neg" => templates::add_neg, Exact;
    exact_sub_neg: "sub-neg" => templates::sub_neg, Exact;
    exact_max_min_self: "max-min-self" => templates::max_min_self, Exact;
    exact_div_pow2: "div-pow2" => templates::div_pow2, Exact;
    exact_neg_neg: "neg-neg" => templates::neg_neg, Exact;
    exact_not_not: "not-not" => templates::not_not, Exact;
    exact_abs_abs: "abs-abs" => templates::abs_abs, Exact;
    exact_abs_neg: "abs-neg" => templates::abs_neg, Exact;
    exact_relu_relu: "relu-relu" => templates::relu_relu, Exact;
    exact_relu_abs: "relu-abs" => templates::relu_abs, Exact;
    exact_floor_ceil_integral: "floor-ceil-integral" => templates::floor_ceil_integral, Exact;
    exact_int_floor_ceil: "int-floor-ceil" => templates::int_floor_ceil, Exact;
    exact_cast_same: "cast-same" => templates::cast_same, Exact;
    exact_cast_roundtrip: "cast-roundtrip" => templates::cast_roundtrip, Exact;
    exact_cast_widen_chain: "cast-widen-chain" => templates::cast_widen_chain, Exact;
    exact_where_const: "where-const" => templates::where_const, Exact;
    exact_where_same: "where-same" => templates::where_same, Exact;

    layout_permute_identity: "permute-identity" => templates::permute_identity, Exact;
    layout_permute_permute: "permute-permute" => templates::permute_permute, Exact;
    layout_permute_unit_axes: "permute-unit-axes" => templates::permute_unit_axes, Exact;
    layout_reshape_same: "reshape-same" => templates::reshape_same, Exact;
    layout_reshape_reshape: "reshape-reshape" => templates::reshape_reshape, Exact;
    layout_expand_same: "expand-same" => templates::expand_same, Exact;
    layout_expand_expand: "expand-expand" => templates::expand_expand, Exact;
    layout_slice_full: "slice-full" => templates::slice_full, Exact;
    layout_pad_none: "pad-none" => templates::pad_none, Exact;
    layout_concat_single: "concat-single" => templates::concat_single, Exact;
    layout_unary_permute: "unary-permute" => templates::unary_permute, Exact;
    layout_cast_permute: "cast-permute" => templates::cast_permute, Exact;
    layout_binary_permute: "binary-permute" => templates::binary_permute, Exact;
    layout_reduce_permute: "reduce-permute" => templates::reduce_permute, Exact;

    fastmath_add_zero: "fm-add-zero" => templates::fm_add_zero, FastMath;
    fastmath_sub_zero: "fm-sub-zero" => templates::fm_sub_zero, FastMath;
    fastmath_mul_zero: "fm-mul-zero" => templates::fm_mul_zero, FastMath;
    fastmath_sub_self: "fm-sub-self" => templates::fm_sub_self, FastMath;
    fastmath_div_const: "fm-div-const" => templates::fm_div_const, FastMath;
    fastmath_add_assoc: "fm-add-assoc" => templates::fm_add_assoc, FastMath;
    fastmath_mul_assoc: "fm-mul-assoc" => templates::fm_mul_assoc, FastMath;
    fastmath_const_right: "fm-const-right" => templates::fm_const_right, FastMath;
    fastmath_log_exp: "fm-log-exp" => templates::fm_log_exp, FastMath;
}

#[test]
fn every_rule_has_a_property_test() {
    let mut missing = Vec::new();
    for (set, r) in rules::all() {
        match TESTED.iter().find(|(n, ..)| *n == r.name) {
            None => missing.push(format!("{set}/{}", r.name)),
            Some((_, _, mode)) => {
                let want = if set == "fastmath" {
                    Mode::FastMath
                } else {
                    Mode::Exact
                };
                assert_eq!(
                    *mode, want,
                    "rule {set}/{} is tested in the wrong mode",
                    r.name
                );
            }
        }
    }
    assert!(
        missing.is_empty(),
        "rules without a property test: {missing:?}"
    );
    let mut names: Vec<&str> = rules::all().iter().map(|(_, r)| r.name).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n, "rule names must be unique");
}

/// `x + 0.0 → x`: wrong for `x = -0.0` (`-0.0 + 0.0 = +0.0`).
fn wrong_add_pos_zero(eg: &SGraph, class: Id, n: &ENode) -> Option<Term> {
    let ENode::Binary(BinaryOp::Add, [x, c]) = n else {
        return None;
    };
    (same_ty(eg, *x, class) && all_elems(eg, *c, is_pos_zero)).then_some(Term::Class(*x))
}

#[test]
fn harness_catches_an_unsound_rule() {
    let wrong = Rule {
        name: "wrong-add-pos-zero",
        matcher: wrong_add_pos_zero,
    };
    let err = check_rule(&wrong, templates::add_pos_zero, Mode::Exact, CASES)
        .expect_err("x + 0.0 → x must be caught");
    assert!(err.contains("unsound"), "{err}");
}
