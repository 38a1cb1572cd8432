//! A cursor over one line's tokens, with the small readers the grammar is made of.

use super::error::{ParseError, ParseErrorKind};
use super::lexer::{Tok, Token};
use super::literal::{parse_float, FloatKind};
use crate::dtype::{DType, Scalar};
use crate::graph::TensorType;
use crate::shape::Shape;

pub type PResult<T> = Result<T, ParseError>;

pub struct Cursor {
    toks: Vec<Token>,
    pos: usize,
    pub line: usize,
}

impl Cursor {
    /// `toks` must end with [`Tok::Eol`] (as [`super::lexer::lex_line`] guarantees).
    pub fn new(toks: Vec<Token>, line: usize) -> Cursor {
        Cursor { toks, pos: 0, line }
    }

    pub fn peek(&self) -> &Tok {
        self.toks.get(self.pos).map_or(&Tok::Eol, |t| &t.tok)
    }

    /// The column of the current token.
    pub fn col(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map_or(1, |t| t.col)
    }

    /// Returns the current token and its column and moves past it (never past the end).
    pub fn bump(&mut self) -> (Tok, usize) {
        let col = self.col();
        let tok = self.peek().clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        (tok, col)
    }

    pub fn error(&self, col: usize, kind: ParseErrorKind) -> ParseError {
        ParseError::new(self.line, col, kind)
    }

    /// A syntax error at the current token.
    pub fn expected(&self, expected: &str) -> ParseError {
        self.error(
            self.col(),
            ParseErrorKind::Syntax {
                expected: expected.to_string(),
                found: self.peek().to_string(),
            },
        )
    }

    pub fn at_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    /// Consumes `c` if it is next.
    pub fn eat(&mut self, c: char) -> bool {
        let yes = self.at_punct(c);
        if yes {
            self.bump();
        }
        yes
    }

    pub fn punct(&mut self, c: char) -> PResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{c}`")))
        }
    }

    pub fn eol(&mut self, expected: &str) -> PResult<()> {
        if *self.peek() == Tok::Eol {
            Ok(())
        } else {
            Err(self.expected(expected))
        }
    }

    /// A `%name`; returns the name and its column.
    pub fn value(&mut self) -> PResult<(String, usize)> {
        match self.peek() {
            Tok::Value(v) => {
                let v = v.clone();
                let (_, col) = self.bump();
                Ok((v, col))
            }
            _ => Err(self.expected("a value (`%name`)")),
        }
    }

    pub fn string(&mut self) -> PResult<(String, usize)> {
        match self.peek() {
            Tok::Str(s) => {
                let s = s.clone();
                let (_, col) = self.bump();
                Ok((s, col))
            }
            _ => Err(self.expected("a string literal")),
        }
    }

    pub fn ident(&mut self, expected: &str) -> PResult<(String, usize)> {
        match self.peek() {
            Tok::Ident(s) => {
                let s = s.clone();
                let (_, col) = self.bump();
                Ok((s, col))
            }
            _ => Err(self.expected(expected)),
        }
    }

    fn bad_literal(&self, col: usize, msg: String) -> ParseError {
        self.error(col, ParseErrorKind::BadLiteral(msg))
    }

    /// A non-negative integer.
    pub fn usize(&mut self) -> PResult<usize> {
        match self.peek() {
            Tok::Int(s) => {
                let s = s.clone();
                let (_, col) = self.bump();
                s.parse::<usize>().map_err(|_| {
                    self.bad_literal(
                        col,
                        format!("`{s}` is not a non-negative integer that fits usize"),
                    )
                })
            }
            _ => Err(self.expected("a non-negative integer")),
        }
    }

    pub fn bool(&mut self) -> PResult<bool> {
        match self.peek() {
            Tok::Ident(s) if s == "true" || s == "false" => {
                let b = s == "true";
                self.bump();
                Ok(b)
            }
            _ => Err(self.expected("`true` or `false`")),
        }
    }

    pub fn dtype(&mut self) -> PResult<DType> {
        match self.peek() {
            Tok::Ident(s) => match DType::from_name(s) {
                Some(d) => {
                    self.bump();
                    Ok(d)
                }
                None => Err(self.expected("a dtype (bool, i32, i64, f16, bf16, f32, f64)")),
            },
            _ => Err(self.expected("a dtype (bool, i32, i64, f16, bf16, f32, f64)")),
        }
    }

    /// `[item, item, ...]` (possibly empty).
    pub fn list<T>(&mut self, mut item: impl FnMut(&mut Cursor) -> PResult<T>) -> PResult<Vec<T>> {
        self.punct('[')?;
        let mut items = Vec::new();
        if self.eat(']') {
            return Ok(items);
        }
        loop {
            items.push(item(self)?);
            if self.eat(']') {
                return Ok(items);
            }
            if !self.at_punct(',') {
                return Err(self.expected("`,` or `]`"));
            }
            self.bump();
        }
    }

    pub fn usize_list(&mut self) -> PResult<Vec<usize>> {
        self.list(Cursor::usize)
    }

    /// `dtype[d0, d1, ...]`
    pub fn tensor_type(&mut self) -> PResult<TensorType> {
        let dtype = self.dtype()?;
        let dims = self.usize_list()?;
        Ok(TensorType::new(dtype, Shape::from(dims)))
    }

    /// A scalar literal: `true`, `false`, an integer (→ `Scalar::Int`) or a float
    /// (→ `Scalar::Float`).
    pub fn scalar(&mut self) -> PResult<Scalar> {
        match self.peek().clone() {
            Tok::Ident(s) if s == "true" || s == "false" => {
                self.bump();
                Ok(Scalar::Bool(s == "true"))
            }
            Tok::Int(s) => {
                let (_, col) = self.bump();
                s.parse::<i64>()
                    .map(Scalar::Int)
                    .map_err(|_| self.bad_literal(col, format!("integer `{s}` does not fit i64")))
            }
            Tok::Float(s) => {
                let (_, col) = self.bump();
                parse_float(&s, FloatKind::F64)
                    .map(|b| Scalar::Float(f64::from_bits(b)))
                    .map_err(|m| self.bad_literal(col, m))
            }
            _ => Err(self.expected("a scalar literal (`true`, `false`, an integer or a float)")),
        }
    }

    /// One integer literal of an integer dtype, widened to i64 (range-checked for i32).
    pub fn int_element(&mut self, dtype: DType) -> PResult<i64> {
        let Tok::Int(s) = self.peek().clone() else {
            return Err(self.expected(&format!("an integer literal ({dtype})")));
        };
        let (_, col) = self.bump();
        let v = s.parse::<i64>().ok();
        let v = if dtype == DType::I32 {
            v.filter(|v| i32::try_from(*v).is_ok())
        } else {
            v
        };
        v.ok_or_else(|| self.bad_literal(col, format!("integer `{s}` does not fit {dtype}")))
    }

    /// One float (or integer) literal of a float dtype; returns its bits at that width.
    pub fn float_element(&mut self, kind: FloatKind, dtype: DType) -> PResult<u64> {
        let (Tok::Int(s) | Tok::Float(s)) = self.peek().clone() else {
            return Err(self.expected(&format!("a float literal ({dtype})")));
        };
        let (_, col) = self.bump();
        parse_float(&s, kind).map_err(|m| self.bad_literal(col, m))
    }
}
