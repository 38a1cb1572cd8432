//! The parser never panics: random strings, random token soup and random mutations of valid
//! programs either parse into a graph that verifies and round-trips, or give a positioned
//! error.

use proptest::prelude::*;
use smelt_ir::arbitrary::arb_graph;
use smelt_ir::text::{parse, print};
use smelt_ir::verify;

/// Checks the contract on any input: no panic; on success a valid graph that round-trips;
/// on failure a position inside the source.
fn check(src: &str) -> Result<(), TestCaseError> {
    match parse(src) {
        Ok(g) => {
            prop_assert!(verify(&g).is_ok(), "{:?}", verify(&g));
            prop_assert_eq!(parse(&print(&g)), Ok(g));
        }
        Err(e) => {
            let lines = src.split('\n').count();
            prop_assert!(e.line >= 1 && e.line <= lines, "{} ({} lines)", e, lines);
            let len = src
                .split('\n')
                .nth(e.line - 1)
                .map_or(0, |l| l.chars().count());
            prop_assert!(
                e.col >= 1 && e.col <= len + 1,
                "{} (line has {} chars)",
                e,
                len
            );
            prop_assert!(!e.to_string().is_empty());
        }
    }
    Ok(())
}

const TOKENS: &[&str] = &[
    "%0",
    "%1",
    "%x",
    "%a.b",
    "%",
    "=",
    ",",
    ":",
    "[",
    "]",
    "(",
    ")",
    "\n",
    " ",
    "#",
    "\"",
    "\"x\"",
    "\\",
    "input",
    "param",
    "const",
    "output",
    "add",
    "neg",
    "sum",
    "matmul",
    "concat",
    "pad",
    "slice",
    "gather",
    "where",
    "cast",
    "reshape",
    "expand",
    "permute",
    "index_select",
    "argmax",
    "axes=",
    "axis=",
    "keepdim=",
    "shape=",
    "perm=",
    "ranges=",
    "pads=",
    "value=",
    "to=",
    "true",
    "false",
    "f32",
    "i64",
    "bool",
    "f16",
    "bf16",
    "f32[2]",
    "f32[]",
    "0",
    "1",
    "-1",
    "2",
    "1.5",
    "-0.0",
    "1e400",
    "inf",
    "-inf",
    "nan",
    "-nan",
    "nan(0x1)",
    "nan(0xffffffffffffffffff)",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "0:1:0",
    "1:0",
    "(1, 1)",
    "é",
    "\u{0}",
    "\r",
];

fn token_soup() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..60).prop_map(|t| t.join(" "))
}

/// One edit of a program: delete a span, insert a token, duplicate or swap lines.
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, &'static str),
    DupLine(usize),
    SwapLines(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..8).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), prop::sample::select(TOKENS)).prop_map(|(a, t)| Edit::Insert(a, t)),
        any::<usize>().prop_map(Edit::DupLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
    ]
}

fn apply(src: &str, e: &Edit) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut lines: Vec<&str> = src.split('\n').collect();
    match *e {
        Edit::Delete(at, n) => {
            let at = at % (chars.len() + 1);
            let end = (at + n).min(chars.len());
            chars[..at].iter().chain(&chars[end..]).collect()
        }
        Edit::Insert(at, t) => {
            let at = at % (chars.len() + 1);
            let mut s: String = chars[..at].iter().collect();
            s.push_str(t);
            s.extend(&chars[at..]);
            s
        }
        Edit::DupLine(i) => {
            let i = i % lines.len();
            lines.insert(i, lines[i]);
            lines.join("\n")
        }
        Edit::SwapLines(a, b) => {
            let n = lines.len();
            lines.swap(a % n, b % n);
            lines.join("\n")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: smelt_ir::arbitrary::proptest_cases(2048), ..ProptestConfig::default() })]

    #[test]
    fn random_strings_never_panic(s in "\\PC{0,200}") {
        check(&s)?;
    }

    #[test]
    fn arbitrary_unicode_never_panics(s in any::<String>()) {
        check(&s)?;
    }

    #[test]
    fn token_soup_never_panics(s in token_soup()) {
        check(&s)?;
    }

    #[test]
    fn mutated_programs_never_panic(g in arb_graph(12), edits in prop::collection::vec(edit(), 1..4)) {
        let mut src = print(&g);
        for e in &edits {
            src = apply(&src, e);
        }
        check(&src)?;
    }
}
