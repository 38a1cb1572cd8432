//! The `.smelt` text format: a [`Graph`] as one statement per line.
//!
//! ```text
//! # comment to end of line
//! %x = input "x" : f32[2, 3]
//! %w = param "w" : f32[3, 4]
//! %s = const f32[] 1.5
//! %0 = matmul %x, %w : f32[2, 4]
//! %1 = add %0, %s : f32[2, 4]
//! %2 = sum %1 axes=[1] keepdim=true : f32[2, 1]
//! output "y" = %2
//! ```
//!
//! [`print()`] writes a graph, [`parse`] reads one back; for every graph built through
//! [`Graph::push`], `parse(&print(&g)) == Ok(g)` (constants compare bitwise, NaN payloads
//! included). The parser builds through [`Graph::push`], so every typing rule of
//! [`crate::infer`] is checked, and every error carries a line and a column. The full
//! grammar, each op's attributes and typing rule, and example errors are in
//! `docs/text-format.md`.
//!
//! Not handled: statements spanning several lines, nested constant lists (constants are
//! flat, row-major), named attributes on `input`/`param`/`const`.

mod cursor;
mod error;
mod lexer;
mod literal;
mod ops;
mod parser;
mod printer;

pub use error::{ParseError, ParseErrorKind};
pub use parser::parse;
pub use printer::print;

use crate::graph::Graph;
use std::fmt;

/// Prints the graph in the `.smelt` text format (see [`print()`]).
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print(self))
    }
}

impl std::str::FromStr for Graph {
    type Err = ParseError;

    /// Parses the `.smelt` text format (see [`parse`]).
    fn from_str(s: &str) -> Result<Graph, ParseError> {
        parse(s)
    }
}
