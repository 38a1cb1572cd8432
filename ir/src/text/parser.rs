//! The parser: `.smelt` text into a [`Graph`], built through [`Graph::push`] so that every
//! typing rule of [`crate::infer`] applies.

use super::cursor::{Cursor, PResult};
use super::error::{ParseError, ParseErrorKind};
use super::lexer::{lex_line, Tok};
use super::literal::FloatKind;
use super::ops::{parse_op, suggest, OpKind};
use crate::dtype::DType;
use crate::error::IrError;
use crate::graph::{Graph, NodeId, TensorType};
use crate::op::Op;
use crate::tensor::{HostTensor, TensorData};
use half::{bf16, f16};
use std::collections::HashMap;

/// Parses `.smelt` text into a graph; the first error found (in source order) is returned.
pub fn parse(src: &str) -> Result<Graph, ParseError> {
    let mut p = Parser::default();
    for (i, line) in src.split('\n').enumerate() {
        let line_no = i + 1;
        let mut cur = Cursor::new(lex_line(line, line_no)?, line_no);
        p.statement(&mut cur)?;
    }
    Ok(p.graph)
}

#[derive(Default)]
struct Parser {
    graph: Graph,
    values: HashMap<String, NodeId>,
}

impl Parser {
    fn statement(&mut self, cur: &mut Cursor) -> PResult<()> {
        match cur.peek() {
            Tok::Eol => Ok(()),
            Tok::Ident(s) if s == "output" => self.output(cur),
            Tok::Value(_) => self.definition(cur),
            _ => Err(cur.expected("a definition (`%name = ...`), `output` or end of line")),
        }
    }

    /// A use of a value: `%name`, which must be defined on an earlier line.
    fn use_value(&self, cur: &mut Cursor) -> PResult<NodeId> {
        let (name, col) = cur.value()?;
        match self.values.get(&name) {
            Some(&id) => Ok(id),
            None => Err(cur.error(col, ParseErrorKind::UndefinedValue { name })),
        }
    }

    /// `output "name" = %value`
    fn output(&mut self, cur: &mut Cursor) -> PResult<()> {
        cur.bump();
        let (name, name_col) = cur.string()?;
        if self.graph.outputs().iter().any(|(n, _)| *n == name) {
            return Err(cur.error(name_col, ParseErrorKind::DuplicateOutput { name }));
        }
        cur.punct('=')?;
        let id = self.use_value(cur)?;
        cur.eol("end of line")?;
        self.graph
            .set_output(name, id)
            .map_err(|e| cur.error(name_col, e.into()))
    }

    /// `%name = op ...`
    fn definition(&mut self, cur: &mut Cursor) -> PResult<()> {
        let (name, name_col) = cur.value()?;
        if self.values.contains_key(&name) {
            return Err(cur.error(name_col, ParseErrorKind::DuplicateValue { name }));
        }
        cur.punct('=')?;
        let (op_name, op_col) = cur.ident("an op name")?;
        let op = match op_name.as_str() {
            "input" | "param" => {
                let (binding, col) = cur.string()?;
                if self.graph.bindings().any(|(n, ..)| n == binding) {
                    let kind = ParseErrorKind::DuplicateInput { name: binding };
                    return Err(cur.error(col, kind));
                }
                cur.punct(':')?;
                let TensorType { dtype, shape } = cur.tensor_type()?;
                cur.eol("end of line")?;
                if op_name == "input" {
                    Op::Input {
                        name: binding,
                        dtype,
                        shape,
                    }
                } else {
                    Op::Param {
                        name: binding,
                        dtype,
                        shape,
                    }
                }
            }
            "const" => {
                let ty = cur.tensor_type()?;
                Op::Constant(const_body(cur, &ty)?)
            }
            _ => {
                let Some(kind) = OpKind::from_name(&op_name) else {
                    let suggestions = suggest(&op_name);
                    let kind = ParseErrorKind::UnknownOp {
                        name: op_name,
                        suggestions,
                    };
                    return Err(cur.error(op_col, kind));
                };
                let mut operands = Vec::new();
                if let Tok::Value(_) = cur.peek() {
                    operands.push(self.use_value(cur)?);
                    while cur.eat(',') {
                        operands.push(self.use_value(cur)?);
                    }
                    if let Tok::Value(_) = cur.peek() {
                        return Err(cur.expected("`,` between operands"));
                    }
                }
                parse_op(cur, kind, op_col, &operands)?
            }
        };
        let mut annotation = None;
        if cur.eat(':') {
            let col = cur.col();
            annotation = Some((col, cur.tensor_type()?));
        }
        cur.eol(if matches!(op, Op::Constant(_)) {
            "`:` or end of line"
        } else {
            "an attribute (`key=value`), `:` or end of line"
        })?;
        let ir = |e: IrError| cur.error(op_col, e.into());
        let op_static = op.name();
        let id = self.graph.push(op).map_err(ir)?;
        if let Some((col, found)) = annotation {
            let expected = self.graph.ty(id).clone();
            if found != expected {
                let (expected, found) = (Box::new(expected), Box::new(found));
                let kind = ParseErrorKind::TypeMismatch {
                    op: op_static,
                    expected,
                    found,
                };
                return Err(cur.error(col, kind));
            }
        }
        self.values.insert(name, id);
        Ok(())
    }
}

/// The literal(s) of a `const` of type `ty`: one bare literal for a 0-d tensor, else a flat
/// row-major `[...]` list of exactly `numel` literals.
fn const_body(cur: &mut Cursor, ty: &TensorType) -> PResult<HostTensor> {
    fn items<T>(
        cur: &mut Cursor,
        scalar: bool,
        f: impl FnMut(&mut Cursor) -> PResult<T>,
    ) -> PResult<Vec<T>> {
        let mut f = f;
        if scalar {
            Ok(vec![f(cur)?])
        } else {
            cur.list(f)
        }
    }
    let col = cur.col();
    let scalar = ty.shape.rank() == 0;
    let d = ty.dtype;
    let float = |kind: FloatKind| move |c: &mut Cursor| c.float_element(kind, d);
    let data = match d {
        DType::Bool => TensorData::Bool(items(cur, scalar, Cursor::bool)?),
        DType::I32 => TensorData::I32(items(cur, scalar, |c| c.int_element(d).map(|v| v as i32))?),
        DType::I64 => TensorData::I64(items(cur, scalar, |c| c.int_element(d))?),
        DType::F16 => {
            let bits = items(cur, scalar, float(FloatKind::F16))?;
            TensorData::F16(bits.into_iter().map(|b| f16::from_bits(b as u16)).collect())
        }
        DType::BF16 => {
            let bits = items(cur, scalar, float(FloatKind::BF16))?;
            TensorData::BF16(
                bits.into_iter()
                    .map(|b| bf16::from_bits(b as u16))
                    .collect(),
            )
        }
        DType::F32 => {
            let bits = items(cur, scalar, float(FloatKind::F32))?;
            TensorData::F32(bits.into_iter().map(|b| f32::from_bits(b as u32)).collect())
        }
        DType::F64 => {
            let bits = items(cur, scalar, float(FloatKind::F64))?;
            TensorData::F64(bits.into_iter().map(f64::from_bits).collect())
        }
    };
    if data.len() != ty.shape.numel() {
        let msg = format!(
            "{ty} holds {} element(s), found {}",
            ty.shape.numel(),
            data.len()
        );
        return Err(cur.error(col, ParseErrorKind::BadLiteral(msg)));
    }
    HostTensor::new(ty.shape.clone(), data).map_err(|e| cur.error(col, e.into()))
}
