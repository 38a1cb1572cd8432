//! Errors of the `.smelt` parser: each one carries the 1-based line and column of the
//! offending token.

use crate::error::IrError;
use crate::graph::TensorType;

/// A parse failure at `line`, `col` (both 1-based; columns count characters, not bytes).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("line {line}, column {col}: {kind}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub kind: ParseErrorKind,
}

impl ParseError {
    pub fn new(line: usize, col: usize, kind: ParseErrorKind) -> ParseError {
        ParseError { line, col, kind }
    }
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParseErrorKind {
    /// A token other than the grammar allows here (also unexpected characters and
    /// unterminated strings).
    #[error("expected {expected}, found {found}")]
    Syntax { expected: String, found: String },
    #[error("unknown op `{name}`{}", did_you_mean(suggestions))]
    UnknownOp {
        name: String,
        /// Known op names close to `name` (edit distance), best first; possibly empty.
        suggestions: Vec<&'static str>,
    },
    #[error("{op}: expected {expected} operand(s), found {found}")]
    Arity {
        op: &'static str,
        /// `"2"`, or `"at least 1"` for concat.
        expected: String,
        found: usize,
    },
    #[error("{op}: unknown attribute `{key}` (allowed: {allowed})")]
    UnknownAttribute {
        op: &'static str,
        key: String,
        /// The attributes the op takes, comma-separated (`none` if it takes none).
        allowed: String,
    },
    #[error("{op}: missing attribute `{key}`")]
    MissingAttribute { op: &'static str, key: &'static str },
    #[error("{op}: attribute `{key}` given twice")]
    DuplicateAttribute { op: &'static str, key: &'static str },
    #[error("undefined value %{name} (values must be defined before they are used)")]
    UndefinedValue { name: String },
    #[error("duplicate value name %{name} (it is already defined)")]
    DuplicateValue { name: String },
    #[error("duplicate input/param name {name:?}")]
    DuplicateInput { name: String },
    #[error("duplicate output name {name:?}")]
    DuplicateOutput { name: String },
    #[error("{op}: type annotation does not match: expected {expected} (inferred), found {found}")]
    TypeMismatch {
        op: &'static str,
        expected: Box<TensorType>,
        found: Box<TensorType>,
    },
    #[error("bad literal: {0}")]
    BadLiteral(String),
    /// A typing error reported by the graph builder ([`crate::infer`]).
    #[error("{0}")]
    Ir(Box<IrError>),
}

impl From<IrError> for ParseErrorKind {
    fn from(e: IrError) -> ParseErrorKind {
        ParseErrorKind::Ir(Box::new(e))
    }
}

fn did_you_mean(suggestions: &[&'static str]) -> String {
    if suggestions.is_empty() {
        return String::new();
    }
    let list: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    format!(" (did you mean {}?)", list.join(", "))
}
