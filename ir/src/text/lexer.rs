//! The lexer: one line of `.smelt` source into tokens.
//!
//! Statements never span lines, so the parser lexes a line at a time; a lexing error on a
//! later line therefore never hides an error on an earlier one.

use super::error::{ParseError, ParseErrorKind};
use std::fmt;

/// A token; numbers keep their text so the parser can read them at the width they need.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// `%name`, without the `%`.
    Value(String),
    /// `[A-Za-z_][A-Za-z0-9_]*`, except `nan` and `inf`, which are floats.
    Ident(String),
    /// A string literal, escapes resolved.
    Str(String),
    /// `-?[0-9]+`
    Int(String),
    /// `-?[0-9]+(.[0-9]*)?([eE][+-]?[0-9]+)?` with a `.` or an exponent, or `-?inf`,
    /// `-?nan`, `-?nan(0x<hex>)`.
    Float(String),
    /// One of `= , : [ ] ( )`.
    Punct(char),
    /// The end of the line (or of a comment).
    Eol,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Value(v) => write!(f, "value `%{v}`"),
            Tok::Ident(s) => write!(f, "`{s}`"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            Tok::Int(s) => write!(f, "integer `{s}`"),
            Tok::Float(s) => write!(f, "float `{s}`"),
            Tok::Punct(c) => write!(f, "`{c}`"),
            Tok::Eol => f.write_str("end of line"),
        }
    }
}

/// A token and its 1-based column.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub col: usize,
}

/// Whether `c` may appear in a value name after `%`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// Lexes one line (without its newline); the result always ends with [`Tok::Eol`].
pub fn lex_line(line: &str, line_no: usize) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut last_end = 0;
    let err = |col: usize, expected: &str, found: String| {
        ParseError::new(
            line_no,
            col,
            ParseErrorKind::Syntax {
                expected: expected.to_string(),
                found,
            },
        )
    };
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        if c == '#' {
            break;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let tok = match c {
            '=' | ',' | ':' | '[' | ']' | '(' | ')' => {
                i += 1;
                Tok::Punct(c)
            }
            '%' => {
                let start = i + 1;
                i = start;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
                if i == start {
                    let found = chars
                        .get(i)
                        .map_or("end of line".to_string(), |c| format!("`{c}`"));
                    return Err(err(i + 1, "a value name after `%` ([A-Za-z0-9_.]+)", found));
                }
                Tok::Value(chars[start..i].iter().collect())
            }
            '"' => {
                let (s, next) = lex_string(&chars, i).map_err(|(col, msg)| {
                    ParseError::new(line_no, col, ParseErrorKind::BadLiteral(msg))
                })?;
                i = next;
                Tok::Str(s)
            }
            c if c.is_ascii_digit() || c == '-' => {
                let (tok, next) = lex_number(&chars, i)
                    .ok_or_else(|| err(col, "a number", format!("`{}`", word_at(&chars, i))))?;
                i = next;
                tok
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                match word.as_str() {
                    "inf" => Tok::Float(word),
                    "nan" => {
                        i = nan_payload(&chars, i);
                        Tok::Float(chars[start..i].iter().collect())
                    }
                    _ => Tok::Ident(word),
                }
            }
            c => {
                let expected =
                    "a token (`%name`, a name, a number, a string or one of `= , : [ ] ( )`)";
                return Err(err(
                    col,
                    expected,
                    format!("character `{}`", c.escape_debug()),
                ));
            }
        };
        toks.push(Token { tok, col });
        last_end = i;
    }
    // End of line: just past the last token.
    let end = last_end + 1;
    toks.push(Token {
        tok: Tok::Eol,
        col: end,
    });
    Ok(toks)
}

/// The run of non-blank, non-punctuation characters at `i` (for error messages).
fn word_at(chars: &[char], i: usize) -> String {
    chars[i..]
        .iter()
        .take_while(|c| !c.is_whitespace() && !"=,:[]()#".contains(**c))
        .take(32)
        .collect()
}

/// Lexes a number at `i` (`-` or a digit); `None` if it is malformed.
fn lex_number(chars: &[char], mut i: usize) -> Option<(Tok, usize)> {
    let start = i;
    if chars[i] == '-' {
        i += 1;
        let word: String = chars[i..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
            .collect();
        match word.as_str() {
            "inf" => return Some((Tok::Float("-inf".into()), i + 3)),
            "nan" => {
                let end = nan_payload(chars, i + 3);
                return Some((Tok::Float(chars[start..end].iter().collect()), end));
            }
            _ => {}
        }
    }
    let digits = |i: &mut usize| {
        let s = *i;
        while *i < chars.len() && chars[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > s
    };
    if !digits(&mut i) {
        return None;
    }
    let mut float = false;
    if chars.get(i) == Some(&'.') {
        float = true;
        i += 1;
        digits(&mut i);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        float = true;
        i += 1;
        if matches!(chars.get(i), Some('+' | '-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return None;
        }
    }
    // A number runs into no letter, digit or `.`: `12ab` or `1.2.3` is one bad token.
    if chars
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
    {
        return None;
    }
    let text: String = chars[start..i].iter().collect();
    Some((
        if float {
            Tok::Float(text)
        } else {
            Tok::Int(text)
        },
        i,
    ))
}

/// After `nan` at `i`: consumes an immediately following `(0x<hex>)` payload, if any.
fn nan_payload(chars: &[char], i: usize) -> usize {
    if chars.get(i) == Some(&'(')
        && chars.get(i + 1) == Some(&'0')
        && chars.get(i + 2) == Some(&'x')
    {
        let mut j = i + 3;
        while j < chars.len() && chars[j].is_ascii_hexdigit() {
            j += 1;
        }
        if j > i + 3 && chars.get(j) == Some(&')') {
            return j + 1;
        }
    }
    i
}

/// Lexes a string literal starting at the `"` at `i`; returns the text and the index after
/// the closing quote, or `(column, message)`.
fn lex_string(chars: &[char], i: usize) -> Result<(String, usize), (usize, String)> {
    let mut s = String::new();
    let mut j = i + 1;
    loop {
        let Some(&c) = chars.get(j) else {
            return Err((i + 1, "unterminated string".into()));
        };
        match c {
            '"' => return Ok((s, j + 1)),
            '\\' => {
                let esc = chars.get(j + 1).copied();
                let simple = match esc {
                    Some('"') => Some('"'),
                    Some('\\') => Some('\\'),
                    Some('n') => Some('\n'),
                    Some('t') => Some('\t'),
                    Some('r') => Some('\r'),
                    Some('0') => Some('\0'),
                    _ => None,
                };
                if let Some(c) = simple {
                    s.push(c);
                    j += 2;
                } else if esc == Some('u') && chars.get(j + 2) == Some(&'{') {
                    let start = j + 3;
                    let end = chars[start..]
                        .iter()
                        .position(|&c| c == '}')
                        .map(|p| start + p)
                        .ok_or((j + 1, "unterminated `\\u{...}` escape".to_string()))?;
                    let hex: String = chars[start..end].iter().collect();
                    let c = (hex.len() <= 6)
                        .then(|| u32::from_str_radix(&hex, 16).ok())
                        .flatten()
                        .and_then(char::from_u32)
                        .ok_or((j + 1, format!("invalid unicode escape `\\u{{{hex}}}`")))?;
                    s.push(c);
                    j = end + 1;
                } else {
                    let shown = esc.map_or(String::new(), |c| c.escape_debug().to_string());
                    return Err((j + 1, format!("unknown escape `\\{shown}`")));
                }
            }
            c => {
                s.push(c);
                j += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(line: &str) -> Vec<Tok> {
        lex_line(line, 1)
            .unwrap()
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn lexes_numbers_and_specials() {
        assert_eq!(
            kinds("1 -2 1.5 -0.0 1e-7 2E+3 inf -inf nan -nan nan(0x1f)"),
            vec![
                Tok::Int("1".into()),
                Tok::Int("-2".into()),
                Tok::Float("1.5".into()),
                Tok::Float("-0.0".into()),
                Tok::Float("1e-7".into()),
                Tok::Float("2E+3".into()),
                Tok::Float("inf".into()),
                Tok::Float("-inf".into()),
                Tok::Float("nan".into()),
                Tok::Float("-nan".into()),
                Tok::Float("nan(0x1f)".into()),
                Tok::Eol,
            ]
        );
        assert!(lex_line("1.2.3", 1).is_err());
        assert!(lex_line("12ab", 1).is_err());
        assert!(lex_line("- 1", 1).is_err());
    }

    #[test]
    fn lexes_strings_values_and_comments() {
        assert_eq!(
            kinds(r#"%x.1 = input "a\"b\u{e9}" # trailing"#),
            vec![
                Tok::Value("x.1".into()),
                Tok::Punct('='),
                Tok::Ident("input".into()),
                Tok::Str("a\"b\u{e9}".into()),
                Tok::Eol,
            ]
        );
        let e = lex_line(r#"%x = input "abc"#, 3).unwrap_err();
        assert_eq!((e.line, e.col), (3, 12));
        let e = lex_line("%x = $", 1).unwrap_err();
        assert_eq!(e.col, 6);
    }

    #[test]
    fn eol_points_past_the_code() {
        let t = lex_line("%a = neg %b   # c", 1).unwrap();
        assert_eq!(t.last().unwrap().col, 12);
        assert_eq!(lex_line("", 1).unwrap()[0].col, 1);
    }
}
