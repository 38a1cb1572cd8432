//! The rule property-test harness: random left-hand sides, the rule's right-hand side at the
//! root, both evaluated by the reference interpreter on inputs that include ±0, ±inf, NaN,
//! subnormals and integer extremes.

use super::gen::Gen;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use smelt_ir::arbitrary::arb_bindings;
use smelt_ir::interp::{eval, eval_nodes};
use smelt_ir::text::print;
use smelt_ir::{DType, Graph, HostTensor, TensorData, TensorType};
use smelt_passes::simplify::rewrite_first_output;
use smelt_passes::simplify::rules::Rule;
use std::cell::Cell;
use std::collections::HashMap;

/// Builds a random left-hand side (output `"y"` is the root the rule is tried at).
pub type Template = fn(&mut Gen) -> Graph;

/// How the two sides must agree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Bitwise, except that any NaN equals any NaN; inputs include every special value.
    Exact,
    /// Finite inputs in `[-8, 8]`; `|lhs - rhs| <= rtol(dtype) * max(1, largest |value| of any
    /// node of the left side)`, NaN positions equal.
    FastMath,
}

/// Relative tolerance of the fast-math set, per dtype (a few ulps of reassociation and
/// reciprocal rounding, scaled by the largest intermediate).
fn rtol(d: DType) -> f64 {
    match d {
        DType::F16 => 1e-2,
        DType::BF16 => 6e-2,
        DType::F32 => 1e-5,
        DType::F64 => 1e-13,
        _ => 0.0,
    }
}

/// Runs `cases` random cases of `rule` on `template`; the number of cases where it fired, or
/// the first counterexample.
pub fn check_rule(rule: &Rule, template: Template, mode: Mode, cases: u32) -> Result<u32, String> {
    let finite = mode == Mode::FastMath;
    let strategy = any::<u64>().prop_flat_map(move |seed| {
        let g = template(&mut Gen::new(seed, finite));
        let b = if finite {
            finite_bindings(&g)
        } else {
            arb_bindings(&g).boxed()
        };
        (Just(g), b)
    });
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let fired = Cell::new(0u32);
    runner
        .run(&strategy, |(g, b)| {
            let Some(rhs) = rewrite_first_output(&g, rule).map_err(fail)? else {
                return Ok(());
            };
            fired.set(fired.get() + 1);
            let Ok(want) = eval(&g, &b) else {
                // A left side that fails to evaluate (integer division by zero) is no evidence.
                return Ok(());
            };
            let got = eval(&rhs, &b).map_err(fail)?;
            let scale = match mode {
                Mode::Exact => 0.0,
                Mode::FastMath => magnitude(&g, &b),
            };
            let (w, v) = (&want[0].1, &got[0].1);
            if !agree(w, v, mode, scale) {
                return Err(TestCaseError::fail(format!(
                    "rule {} is unsound:\nleft side:\n{}right side:\n{}inputs: {:?}\nleft gives {:?}\nright gives {:?}",
                    rule.name,
                    print(&g),
                    print(&rhs),
                    b,
                    w,
                    v
                )));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(fired.get())
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

/// The largest finite |value| of any node of `g`.
fn magnitude(g: &Graph, b: &HashMap<String, HostTensor>) -> f64 {
    let Ok(values) = eval_nodes(g, b) else {
        return 0.0;
    };
    values
        .iter()
        .flat_map(|t| (0..t.numel()).map(move |i| t.data().get_f64(i).abs()))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

/// Whether `a` and `b` agree under `mode`.
pub fn agree(a: &HostTensor, b: &HostTensor, mode: Mode, scale: f64) -> bool {
    if a.dtype() != b.dtype() || a.shape() != b.shape() {
        return false;
    }
    if !a.dtype().is_float() {
        return a == b;
    }
    let tol = match mode {
        Mode::Exact => 0.0,
        Mode::FastMath => rtol(a.dtype()) * scale.max(1.0),
    };
    (0..a.numel()).all(|i| {
        let (x, y) = (a.data().get_f64(i), b.data().get_f64(i));
        if x.is_nan() || y.is_nan() {
            return x.is_nan() && y.is_nan();
        }
        match mode {
            Mode::Exact => x.to_bits() == y.to_bits(),
            Mode::FastMath => x == y || (x - y).abs() <= tol,
        }
    })
}

/// Finite bindings in `[-8, 8]` (integers in `-20..20`), for the fast-math set.
fn finite_bindings(g: &Graph) -> BoxedStrategy<HashMap<String, HostTensor>> {
    let parts: Vec<BoxedStrategy<(String, HostTensor)>> = g
        .bindings()
        .map(|(name, _, ty, _)| {
            let name = name.to_string();
            finite_tensor(ty.clone())
                .prop_map(move |t| (name.clone(), t))
                .boxed()
        })
        .collect();
    parts.prop_map(|v| v.into_iter().collect()).boxed()
}

fn finite_tensor(ty: TensorType) -> BoxedStrategy<HostTensor> {
    let n = ty.shape.numel();
    let shape = ty.shape.clone();
    proptest::collection::vec(-8.0f64..8.0, n)
        .prop_map(move |vs| {
            let data = match ty.dtype {
                DType::Bool => TensorData::Bool(vs.iter().map(|&v| v > 0.0).collect()),
                DType::I32 => TensorData::I32(vs.iter().map(|&v| (v * 2.5) as i32).collect()),
                DType::I64 => TensorData::I64(vs.iter().map(|&v| (v * 2.5) as i64).collect()),
                d => super::gen::tensor(d, shape.dims(), &vs).into_data(),
            };
            HostTensor::new(shape.clone(), data).expect("element count matches")
        })
        .boxed()
}
