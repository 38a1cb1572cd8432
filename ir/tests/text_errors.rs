//! Malformed `.smelt` inputs: each error has the right kind and points at the right line and
//! column.

use smelt_ir::text::{parse, ParseError, ParseErrorKind};
use smelt_ir::IrError;

const HEAD: &str = "%a = input \"a\" : f32[2, 3]\n%i = input \"i\" : i64[2, 3]\n";

/// Parses `HEAD` followed by `body` (so `body` starts on line 3).
fn err(body: &str) -> ParseError {
    let src = format!("{HEAD}{body}");
    match parse(&src) {
        Ok(g) => panic!("parsed:\n{src}\ninto\n{g}"),
        Err(e) => e,
    }
}

fn at(e: &ParseError, line: usize, col: usize) {
    assert_eq!((e.line, e.col), (line, col), "{e}");
}

#[test]
fn unknown_op_suggests_close_names() {
    let e = err("%b = ad %a, %a");
    at(&e, 3, 6);
    let ParseErrorKind::UnknownOp { name, suggestions } = &e.kind else {
        panic!("{e}")
    };
    assert_eq!(name, "ad");
    assert!(suggestions.contains(&"add"), "{suggestions:?}");
    assert!(
        e.to_string()
            .starts_with("line 3, column 6: unknown op `ad` (did you mean `add`"),
        "{e}"
    );
}

#[test]
fn use_before_definition_is_undefined() {
    let e = err("%b = add %a, %c\n%c = neg %a");
    at(&e, 3, 14);
    assert_eq!(e.kind, ParseErrorKind::UndefinedValue { name: "c".into() });
    // A cycle can only be written as a use before its definition.
    let e = err("%x = neg %y\n%y = neg %x");
    at(&e, 3, 10);
    assert!(matches!(e.kind, ParseErrorKind::UndefinedValue { .. }));
}

#[test]
fn redefinition_is_a_duplicate_value() {
    let e = err("%b = neg %a\n  %b = neg %a");
    at(&e, 4, 3);
    assert_eq!(e.kind, ParseErrorKind::DuplicateValue { name: "b".into() });
}

#[test]
fn duplicate_input_and_output_names() {
    let e = err("%b = param \"a\" : f32[1]");
    at(&e, 3, 12);
    assert_eq!(e.kind, ParseErrorKind::DuplicateInput { name: "a".into() });
    let e = err("output \"y\" = %a\noutput \"y\" = %i");
    at(&e, 4, 8);
    assert_eq!(e.kind, ParseErrorKind::DuplicateOutput { name: "y".into() });
}

#[test]
fn wrong_arity_names_the_op() {
    let e = err("%b = add %a");
    at(&e, 3, 6);
    assert_eq!(
        e.kind,
        ParseErrorKind::Arity {
            op: "add",
            expected: "2".into(),
            found: 1
        }
    );
    let e = err("%b = concat axis=0");
    assert_eq!(
        e.kind,
        ParseErrorKind::Arity {
            op: "concat",
            expected: "at least 1".into(),
            found: 0
        }
    );
    assert_eq!(
        e.to_string(),
        "line 3, column 6: concat: expected at least 1 operand(s), found 0"
    );
}

#[test]
fn unknown_missing_and_duplicate_attributes() {
    let e = err("%b = sum %a axes=[0] keep=true");
    at(&e, 3, 22);
    assert!(
        matches!(&e.kind, ParseErrorKind::UnknownAttribute { op: "sum", key, .. } if key == "keep")
    );
    let e = err("%b = neg %a axis=0");
    assert_eq!(
        e.to_string(),
        "line 3, column 13: neg: unknown attribute `axis` (allowed: none)"
    );
    let e = err("%b = sum %a keepdim=true");
    at(&e, 3, 6);
    assert_eq!(
        e.kind,
        ParseErrorKind::MissingAttribute {
            op: "sum",
            key: "axes"
        }
    );
    let e = err("%b = cast %a to=f16 to=f32");
    at(&e, 3, 21);
    assert_eq!(
        e.kind,
        ParseErrorKind::DuplicateAttribute {
            op: "cast",
            key: "to"
        }
    );
}

#[test]
fn annotation_must_match_the_inferred_type() {
    let e = err("%b = matmul %a, %a : f32[2, 2]");
    // f32[2, 3] @ f32[2, 3] does not type-check: that is an IR error at the op.
    at(&e, 3, 6);
    assert!(
        matches!(&e.kind, ParseErrorKind::Ir(ir) if matches!(**ir, IrError::Invalid { op: "matmul", .. }))
    );
    let e = err("%t = permute %a perm=[1, 0]\n%b = matmul %a, %t : f32[2, 3]");
    at(&e, 4, 22);
    assert_eq!(
        e.to_string(),
        "line 4, column 22: matmul: type annotation does not match: expected f32[2, 2] (inferred), found f32[2, 3]"
    );
}

#[test]
fn typing_errors_come_from_the_builder() {
    let e = err("%b = add %a, %i");
    at(&e, 3, 6);
    assert_eq!(
        e.to_string(),
        "line 3, column 6: add: operands must have the same dtype, got f32[2, 3], i64[2, 3] (insert a cast)"
    );
    let e = err("%b = exp %i");
    assert!(
        matches!(&e.kind, ParseErrorKind::Ir(ir) if matches!(**ir, IrError::UnsupportedDType { op: "exp", .. }))
    );
}

#[test]
fn bad_literals() {
    let e = err("%c = const i32[] 3000000000");
    at(&e, 3, 18);
    assert!(
        matches!(&e.kind, ParseErrorKind::BadLiteral(m) if m.contains("i32")),
        "{e}"
    );
    let e = err("%c = const f32[2] [1.0]");
    at(&e, 3, 19);
    assert_eq!(
        e.to_string(),
        "line 3, column 19: bad literal: f32[2] holds 2 element(s), found 1"
    );
    let e = err("%c = const f32[1] [nan(0x800000)]");
    at(&e, 3, 20);
    assert!(matches!(e.kind, ParseErrorKind::BadLiteral(_)));
    let e = err("%b = reshape %a shape=[-6]");
    at(&e, 3, 24);
    assert!(matches!(e.kind, ParseErrorKind::BadLiteral(_)));
    let e = err("output \"unterminated = %a");
    at(&e, 3, 8);
    assert_eq!(
        e.kind,
        ParseErrorKind::BadLiteral("unterminated string".into())
    );
}

#[test]
fn syntax_errors_say_what_was_expected() {
    let e = err("%b = add %a %a");
    at(&e, 3, 13);
    assert_eq!(
        e.to_string(),
        "line 3, column 13: expected `,` between operands, found value `%a`"
    );
    let e = err("%x = input \"x\" f32[2]");
    at(&e, 3, 16);
    assert_eq!(
        e.to_string(),
        "line 3, column 16: expected `:`, found `f32`"
    );
    let e = err("%c = const f8[] 1.0");
    at(&e, 3, 12);
    assert!(matches!(&e.kind, ParseErrorKind::Syntax { found, .. } if found == "`f8`"));
    let e = err("%b = sum %a axes=[0, 1 keepdim=true");
    at(&e, 3, 24);
    assert_eq!(
        e.kind,
        ParseErrorKind::Syntax {
            expected: "`,` or `]`".into(),
            found: "`keepdim`".into()
        }
    );
    let e = err("%b = neg %a $");
    at(&e, 3, 13);
    let e = err("%b = neg");
    assert_eq!(
        e.kind,
        ParseErrorKind::Arity {
            op: "neg",
            expected: "1".into(),
            found: 0
        }
    );
    let e = err("%b = neg %a : f32[2, 3] extra");
    at(&e, 3, 25);
    let e = err("%c = const f32[] 1.0 2.0");
    assert_eq!(
        e.to_string(),
        "line 3, column 22: expected `:` or end of line, found float `2.0`"
    );
    let e = err("neg %a");
    at(&e, 3, 1);
    let e = err("%b = pad %a pads=[(1, 1), (0 2)] value=0.0");
    at(&e, 3, 30);
}

#[test]
fn oversized_dimensions_are_errors_not_overflows() {
    let big = usize::MAX;
    let e = err(&format!(
        "%h = input \"h\" : f32[{big}]\n%p = pad %h pads=[(1, 1)] value=0.0"
    ));
    at(&e, 4, 6);
    assert!(matches!(e.kind, ParseErrorKind::Ir(_)));
    let e = err(&format!(
        "%h = input \"h\" : f32[{big}]\n%p = concat %h, %h axis=0"
    ));
    at(&e, 4, 6);
    let e = err("%h = input \"h\" : f32[18446744073709551616]");
    assert!(matches!(e.kind, ParseErrorKind::BadLiteral(_)));
}

/// Every row of the error table in `docs/text-format.md` produces exactly the documented kind
/// and message.
#[test]
fn documented_errors_are_accurate() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/text-format.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let section = doc.split("## Errors").nth(1).unwrap();
    let spans = |cell: &str| -> Vec<String> {
        cell.split("``")
            .skip(1)
            .step_by(2)
            .map(|s| s.trim().to_string())
            .collect()
    };
    let mut rows = 0;
    for line in section
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("``"))
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
        let kind = cells[0].trim().trim_matches('`');
        let body = spans(cells[1]).join("\n");
        let message = spans(cells[2]).join("");
        let src = format!("%x = input \"x\" : f32[2, 3]\n%i = input \"i\" : i64[3]\n{body}");
        let e = parse(&src).expect_err(&src);
        assert_eq!(e.to_string(), message, "{src}");
        assert!(
            format!("{:?}", e.kind).starts_with(kind),
            "{kind}: {:?}",
            e.kind
        );
        rows += 1;
    }
    assert!(rows >= 15, "only {rows} documented errors found");
}
