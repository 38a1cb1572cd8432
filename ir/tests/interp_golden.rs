//! The reference interpreter against golden values from an independent oracle (numpy and
//! ml_dtypes), generated once by `scripts/golden/gen_interp.py` and committed under
//! `tests/data/interp/`. Each case is one op on fixed inputs; see `interp_support` for the
//! format and the tolerances (torch.testing's defaults per dtype; integers and bools exact).

mod interp_support;

use interp_support::{check_cases, load, Case};
use smelt_ir::{BinaryOp, DType, ReduceOp, UnaryOp};
use std::sync::OnceLock;

const FILES: [(&str, &str); 7] = [
    ("unary", include_str!("data/interp/unary.json")),
    ("binary", include_str!("data/interp/binary.json")),
    ("cast", include_str!("data/interp/cast.json")),
    ("reduce", include_str!("data/interp/reduce.json")),
    ("matmul", include_str!("data/interp/matmul.json")),
    ("view", include_str!("data/interp/view.json")),
    ("index", include_str!("data/interp/index.json")),
];

/// Every golden case of every file, parsed once.
fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| FILES.iter().flat_map(|(_, json)| load(json)).collect())
}

/// The name's `/`-separated parts.
fn parts(name: &str) -> Vec<&str> {
    name.split('/').collect()
}

fn is(family: &'static str, dtype: &'static str) -> impl Fn(&str) -> bool {
    move |name| {
        let p = parts(name);
        p[0] == family && p.last() == Some(&dtype)
    }
}

#[test]
fn unary_f32() {
    check_cases(cases(), is("unary", "f32"));
}

#[test]
fn unary_f16() {
    check_cases(cases(), is("unary", "f16"));
}

#[test]
fn unary_bf16() {
    check_cases(cases(), is("unary", "bf16"));
}

#[test]
fn unary_f64() {
    check_cases(cases(), is("unary", "f64"));
}

#[test]
fn unary_integer_and_bool() {
    check_cases(cases(), |n| {
        n.starts_with("unary/") && ["i32", "i64", "bool"].iter().any(|d| n.ends_with(d))
    });
}

#[test]
fn unary_0d_empty_and_constant_operands() {
    check_cases(cases(), |n| {
        n.starts_with("unary/") && ["_0d", "_empty", "_const"].iter().any(|s| n.contains(s))
    });
}

#[test]
fn binary_f32() {
    check_cases(cases(), is("binary", "f32"));
}

#[test]
fn binary_f16_bf16_f64() {
    check_cases(cases(), |n| {
        n.starts_with("binary/") && ["/f16", "/bf16", "/f64"].iter().any(|d| n.ends_with(d))
    });
}

#[test]
fn binary_i32() {
    check_cases(cases(), is("binary", "i32"));
}

#[test]
fn binary_i64() {
    check_cases(cases(), is("binary", "i64"));
}

#[test]
fn binary_bool() {
    check_cases(cases(), is("binary", "bool"));
}

#[test]
fn binary_broadcasting_0d_and_empty() {
    check_cases(cases(), |n| {
        n.starts_with("binary/")
            && ["_broadcast", "_0d", "_empty", "_const"]
                .iter()
                .any(|s| n.contains(s))
    });
}

#[test]
fn where_all_dtypes() {
    check_cases(cases(), |n| n.starts_with("where/"));
}

#[test]
fn cast_every_dtype_pair() {
    check_cases(cases(), |n| n.starts_with("cast/"));
}

#[test]
fn reduce_floats() {
    check_cases(cases(), |n| {
        let p = parts(n);
        p[0] == "reduce" && p.len() > 2 && DType::from_name(p[2]).is_some_and(DType::is_float)
    });
}

#[test]
fn reduce_nan_inputs() {
    check_cases(cases(), |n| n.starts_with("reduce/") && n.contains("/nan_"));
}

#[test]
fn reduce_zero_size_axes() {
    check_cases(cases(), |n| {
        n.starts_with("reduce/") && n.contains("/empty_")
    });
}

#[test]
fn reduce_integers_and_bool() {
    check_cases(cases(), |n| {
        let p = parts(n);
        p[0] == "reduce" && p.len() > 2 && ["i32", "i64", "bool"].contains(&p[2])
    });
}

#[test]
fn reduce_0d_and_f64_accumulation() {
    check_cases(cases(), |n| {
        n.starts_with("reduce/") && (n.ends_with("_0d") || n.ends_with("_cancellation"))
    });
}

#[test]
fn matmul_all_shapes_and_dtypes() {
    check_cases(cases(), |n| n.starts_with("matmul/"));
}

#[test]
fn views_reshape_permute_expand_slice_concat() {
    check_cases(cases(), |n| n.starts_with("view/"));
}

#[test]
fn pad_with_cast_value() {
    check_cases(cases(), |n| n.starts_with("pad/"));
}

#[test]
fn gather_and_index_select() {
    check_cases(cases(), |n| {
        n.starts_with("gather/") || n.starts_with("index_select/")
    });
}

#[test]
fn composite_softmax_chain() {
    check_cases(cases(), |n| n.starts_with("composite/"));
}

/// Every case belongs to one of the families the tests above select.
#[test]
fn every_golden_case_is_run() {
    let families = [
        "unary",
        "binary",
        "where",
        "cast",
        "reduce",
        "matmul",
        "view",
        "pad",
        "gather",
        "index_select",
        "composite",
    ];
    for c in cases() {
        assert!(
            families.contains(&parts(&c.name)[0]),
            "{} is never run",
            c.name
        );
    }
    let mut names: Vec<&str> = cases().iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases().len(), "case names are unique");
}

/// The golden files cover what the issue asks for: every unary op in every float dtype, every
/// binary op on f32/i32/i64, every reduction, every cast pair.
#[test]
fn golden_files_cover_every_op_and_dtype() {
    let has = |name: String| cases().iter().any(|c| c.name == name);
    for u in UnaryOp::ALL {
        for d in ["f16", "bf16", "f32", "f64"] {
            assert!(has(format!("unary/{u}/{d}")), "unary/{u}/{d}");
        }
    }
    for b in BinaryOp::ALL {
        for d in ["f32", "f16", "bf16", "f64"] {
            assert!(has(format!("binary/{b}/{d}")), "binary/{b}/{d}");
        }
        if *b != BinaryOp::Div {
            for d in ["i32", "i64"] {
                assert!(has(format!("binary/{b}/{d}")), "binary/{b}/{d}");
            }
        }
    }
    for r in ReduceOp::ALL {
        assert!(
            cases()
                .iter()
                .any(|c| c.name.starts_with(&format!("reduce/{r}/f32/"))),
            "reduce/{r}"
        );
    }
    for a in DType::ALL {
        for b in DType::ALL {
            assert!(has(format!("cast/{a}_to_{b}")), "cast {a} -> {b}");
        }
    }
}
