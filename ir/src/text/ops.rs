//! The computed ops of the text format: names, arities, attributes, and how a parsed
//! statement becomes an [`Op`].

use super::cursor::{Cursor, PResult};
use super::error::ParseErrorKind;
use crate::dtype::{DType, Scalar};
use crate::graph::NodeId;
use crate::op::{Axes, BinaryOp, Op, ReduceOp, SliceRange, UnaryOp};
use crate::shape::Shape;
use smallvec::SmallVec;

/// A computed op as named in the text (everything but `input`, `param` and `const`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OpKind {
    Unary(UnaryOp),
    Binary(BinaryOp),
    Reduce(ReduceOp),
    Where,
    Cast,
    Reshape,
    Permute,
    Expand,
    Slice,
    Concat,
    Pad,
    MatMul,
    Gather,
    IndexSelect,
}

const FIXED: [(&str, OpKind); 11] = [
    ("where", OpKind::Where),
    ("cast", OpKind::Cast),
    ("reshape", OpKind::Reshape),
    ("permute", OpKind::Permute),
    ("expand", OpKind::Expand),
    ("slice", OpKind::Slice),
    ("concat", OpKind::Concat),
    ("pad", OpKind::Pad),
    ("matmul", OpKind::MatMul),
    ("gather", OpKind::Gather),
    ("index_select", OpKind::IndexSelect),
];

/// How an attribute's value is written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum AttrKind {
    /// `[1, 2]`
    UsizeList,
    /// `3`
    Usize,
    /// `true` / `false`
    Bool,
    /// `f16`
    DType,
    /// `[0:2:1, 1:5:2]` (the `:step` may be left out and means 1)
    Ranges,
    /// `[(1, 1), (0, 2)]`
    Pads,
    /// `0.0`, `-1`, `true`
    Scalar,
}

/// `(key, kind, required)`
type AttrSpec = (&'static str, AttrKind, bool);

#[derive(Clone, Debug)]
enum AttrVal {
    Usizes(Vec<usize>),
    Usize(usize),
    Bool(bool),
    DType(DType),
    Ranges(Vec<SliceRange>),
    Pads(Vec<(usize, usize)>),
    Scalar(Scalar),
}

impl OpKind {
    pub fn from_name(name: &str) -> Option<OpKind> {
        if let Some(u) = UnaryOp::from_name(name) {
            return Some(OpKind::Unary(u));
        }
        if let Some(b) = BinaryOp::from_name(name) {
            return Some(OpKind::Binary(b));
        }
        if let Some(r) = ReduceOp::from_name(name) {
            return Some(OpKind::Reduce(r));
        }
        FIXED.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Unary(u) => u.name(),
            OpKind::Binary(b) => b.name(),
            OpKind::Reduce(r) => r.name(),
            k => FIXED.iter().find(|(_, f)| *f == k).map_or("?", |(n, _)| n),
        }
    }

    /// Minimum and maximum operand count (`None`: unbounded).
    fn arity(self) -> (usize, Option<usize>) {
        match self {
            OpKind::Binary(_) | OpKind::MatMul | OpKind::Gather | OpKind::IndexSelect => {
                (2, Some(2))
            }
            OpKind::Where => (3, Some(3)),
            OpKind::Concat => (1, None),
            _ => (1, Some(1)),
        }
    }

    fn attrs(self) -> &'static [AttrSpec] {
        use AttrKind::*;
        match self {
            OpKind::Unary(_) | OpKind::Binary(_) | OpKind::Where | OpKind::MatMul => &[],
            OpKind::Reduce(_) => &[("axes", UsizeList, true), ("keepdim", Bool, false)],
            OpKind::Cast => &[("to", DType, true)],
            OpKind::Reshape | OpKind::Expand => &[("shape", UsizeList, true)],
            OpKind::Permute => &[("perm", UsizeList, true)],
            OpKind::Slice => &[("ranges", Ranges, true)],
            OpKind::Concat | OpKind::Gather | OpKind::IndexSelect => &[("axis", Usize, true)],
            OpKind::Pad => &[("pads", Pads, true), ("value", Scalar, true)],
        }
    }
}

/// Every op name of the format, for suggestions.
pub fn all_op_names() -> impl Iterator<Item = &'static str> {
    UnaryOp::ALL
        .iter()
        .map(|u| u.name())
        .chain(BinaryOp::ALL.iter().map(|b| b.name()))
        .chain(ReduceOp::ALL.iter().map(|r| r.name()))
        .chain(FIXED.iter().map(|(n, _)| *n))
        .chain(["input", "param", "const"])
}

/// Up to three known op names within a small edit distance of `name`, closest first.
pub fn suggest(name: &str) -> Vec<&'static str> {
    let limit = (name.chars().count() / 3).clamp(1, 3);
    let mut close: Vec<(usize, &'static str)> = all_op_names()
        .map(|n| (edit_distance(name, n), n))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort();
    close.into_iter().take(3).map(|(_, n)| n).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Parses the attributes of `kind` (the cursor is at the first `key=` or past them all)
/// and builds the op from them and its resolved `operands`.
///
/// `op_col` is the column of the op name, where arity and missing-attribute errors point.
pub fn parse_op(cur: &mut Cursor, kind: OpKind, op_col: usize, operands: &[NodeId]) -> PResult<Op> {
    let op = kind.name();
    let specs = kind.attrs();
    let mut vals: Vec<Option<AttrVal>> = vec![None; specs.len()];
    while let super::lexer::Tok::Ident(key) = cur.peek().clone() {
        let key_col = cur.col();
        let Some(i) = specs.iter().position(|(k, ..)| *k == key) else {
            let allowed: Vec<&str> = specs.iter().map(|(k, ..)| *k).collect();
            let allowed = if allowed.is_empty() {
                "none".into()
            } else {
                allowed.join(", ")
            };
            return Err(cur.error(
                key_col,
                ParseErrorKind::UnknownAttribute { op, key, allowed },
            ));
        };
        if vals[i].is_some() {
            let key = specs[i].0;
            return Err(cur.error(key_col, ParseErrorKind::DuplicateAttribute { op, key }));
        }
        cur.bump();
        cur.punct('=')?;
        vals[i] = Some(parse_attr(cur, specs[i].1)?);
    }
    let (min, max) = kind.arity();
    if operands.len() < min || max.is_some_and(|m| operands.len() > m) {
        let expected = match max {
            Some(m) => m.to_string(),
            None => format!("at least {min}"),
        };
        let found = operands.len();
        return Err(cur.error(
            op_col,
            ParseErrorKind::Arity {
                op,
                expected,
                found,
            },
        ));
    }
    for ((key, _, required), v) in specs.iter().zip(&vals) {
        if *required && v.is_none() {
            return Err(cur.error(op_col, ParseErrorKind::MissingAttribute { op, key }));
        }
    }
    let mut vals = vals.into_iter();
    let mut next = || vals.next().flatten();
    let a = operands.first().copied().unwrap_or(NodeId(0));
    let b = operands.get(1).copied().unwrap_or(NodeId(0));
    let missing = |key| cur.error(op_col, ParseErrorKind::MissingAttribute { op, key });
    Ok(match kind {
        OpKind::Unary(u) => Op::Unary(u, a),
        OpKind::Binary(bin) => Op::Binary(bin, a, b),
        OpKind::Where => Op::Where(a, b, operands.get(2).copied().unwrap_or(NodeId(0))),
        OpKind::MatMul => Op::MatMul(a, b),
        OpKind::Reduce(r) => {
            let Some(AttrVal::Usizes(axes)) = next() else {
                return Err(missing("axes"));
            };
            let keepdim = matches!(next(), Some(AttrVal::Bool(true)));
            Op::Reduce {
                op: r,
                input: a,
                axes: Axes::from_vec(axes),
                keepdim,
            }
        }
        OpKind::Cast => {
            let Some(AttrVal::DType(to)) = next() else {
                return Err(missing("to"));
            };
            Op::Cast { input: a, to }
        }
        OpKind::Reshape | OpKind::Expand => {
            let Some(AttrVal::Usizes(dims)) = next() else {
                return Err(missing("shape"));
            };
            let shape = Shape::from(dims);
            if kind == OpKind::Reshape {
                Op::Reshape { input: a, shape }
            } else {
                Op::Expand { input: a, shape }
            }
        }
        OpKind::Permute => {
            let Some(AttrVal::Usizes(perm)) = next() else {
                return Err(missing("perm"));
            };
            Op::Permute {
                input: a,
                perm: SmallVec::from_vec(perm),
            }
        }
        OpKind::Slice => {
            let Some(AttrVal::Ranges(r)) = next() else {
                return Err(missing("ranges"));
            };
            Op::Slice {
                input: a,
                ranges: SmallVec::from_vec(r),
            }
        }
        OpKind::Pad => {
            let Some(AttrVal::Pads(pads)) = next() else {
                return Err(missing("pads"));
            };
            let Some(AttrVal::Scalar(value)) = next() else {
                return Err(missing("value"));
            };
            Op::Pad {
                input: a,
                pads: SmallVec::from_vec(pads),
                value,
            }
        }
        OpKind::Concat | OpKind::Gather | OpKind::IndexSelect => {
            let Some(AttrVal::Usize(axis)) = next() else {
                return Err(missing("axis"));
            };
            match kind {
                OpKind::Concat => Op::Concat {
                    inputs: SmallVec::from_slice(operands),
                    axis,
                },
                OpKind::Gather => Op::Gather {
                    input: a,
                    index: b,
                    axis,
                },
                _ => Op::IndexSelect {
                    input: a,
                    index: b,
                    axis,
                },
            }
        }
    })
}

fn parse_attr(cur: &mut Cursor, kind: AttrKind) -> PResult<AttrVal> {
    Ok(match kind {
        AttrKind::UsizeList => AttrVal::Usizes(cur.usize_list()?),
        AttrKind::Usize => AttrVal::Usize(cur.usize()?),
        AttrKind::Bool => AttrVal::Bool(cur.bool()?),
        AttrKind::DType => AttrVal::DType(cur.dtype()?),
        AttrKind::Scalar => AttrVal::Scalar(cur.scalar()?),
        AttrKind::Ranges => AttrVal::Ranges(cur.list(|c| {
            let start = c.usize()?;
            c.punct(':')?;
            let stop = c.usize()?;
            let step = if c.eat(':') { c.usize()? } else { 1 };
            Ok(SliceRange { start, stop, step })
        })?),
        AttrKind::Pads => AttrVal::Pads(cur.list(|c| {
            c.punct('(')?;
            let lo = c.usize()?;
            c.punct(',')?;
            let hi = c.usize()?;
            c.punct(')')?;
            Ok((lo, hi))
        })?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_name_resolves() {
        for name in all_op_names().filter(|n| !["input", "param", "const"].contains(n)) {
            let k = OpKind::from_name(name).unwrap();
            assert_eq!(k.name(), name);
        }
        assert_eq!(OpKind::from_name("softmax"), None);
    }

    #[test]
    fn suggestions_are_close_names() {
        assert!(suggest("ad").contains(&"add"));
        assert_eq!(suggest("matmull"), vec!["matmul"]);
        assert!(suggest("xyzzyxyzzy").is_empty());
    }
}
