//! The printer: a [`Graph`] as `.smelt` text.
//!
//! One statement per line, nodes in arena order, then the outputs in order. Node `i` is named
//! `%i`, except an input or parameter whose name is a valid value name (`[A-Za-z0-9_.]+`),
//! is not all digits (so it cannot clash with `%i`) and is not shared with another input or
//! parameter: that one is named `%<its name>`. Every computed node carries its `: type`
//! annotation; `input`, `param` and `const` state their type in their own syntax. The
//! output is a pure function of the graph.

use super::lexer::is_name_char;
use super::literal::{write_float, write_quoted, FloatKind};
use crate::dtype::Scalar;
use crate::graph::{Graph, NodeId, TensorType};
use crate::op::Op;
use crate::tensor::{HostTensor, TensorData};
use std::collections::HashMap;
use std::fmt::Write;

/// Prints `graph` in the `.smelt` text format; [`super::parse`] reads it back to an equal graph.
pub fn print(graph: &Graph) -> String {
    let names = value_names(graph);
    let name = |id: NodeId| {
        names
            .get(id.index())
            .cloned()
            .unwrap_or_else(|| id.0.to_string())
    };
    let mut out = String::new();
    for (id, node) in graph.ids().zip(graph.nodes()) {
        let _ = write!(out, "%{} = {}", name(id), node.op.name());
        let operands = node.op.operands();
        for (i, o) in operands.iter().enumerate() {
            out.push_str(if i == 0 { " %" } else { ", %" });
            out.push_str(&name(*o));
        }
        match &node.op {
            Op::Input { name, dtype, shape } | Op::Param { name, dtype, shape } => {
                out.push(' ');
                write_quoted(&mut out, name);
                let _ = write!(out, " : {}", TensorType::new(*dtype, shape.clone()));
            }
            Op::Constant(t) => write_constant(&mut out, t),
            _ => {
                write_attrs(&mut out, &node.op);
                let _ = write!(out, " : {}", node.ty);
            }
        }
        out.push('\n');
    }
    for (out_name, id) in graph.outputs() {
        out.push_str("output ");
        write_quoted(&mut out, out_name);
        let _ = writeln!(out, " = %{}", name(*id));
    }
    out
}

/// The printed name (without `%`) of every node.
fn value_names(graph: &Graph) -> Vec<String> {
    let mut count: HashMap<&str, usize> = HashMap::new();
    for (name, ..) in graph.bindings() {
        *count.entry(name).or_default() += 1;
    }
    let usable = |name: &str| {
        !name.is_empty()
            && name.chars().all(is_name_char)
            && !name.chars().all(|c| c.is_ascii_digit())
            && count.get(name) == Some(&1)
    };
    graph
        .ids()
        .zip(graph.nodes())
        .map(|(id, node)| match &node.op {
            Op::Input { name, .. } | Op::Param { name, .. } if usable(name) => name.clone(),
            _ => id.0.to_string(),
        })
        .collect()
}

fn write_constant(out: &mut String, t: &HostTensor) {
    let _ = write!(out, " {}{}", t.dtype(), t.shape());
    let data = t.data();
    if t.shape().rank() == 0 && data.len() == 1 {
        out.push(' ');
        write_element(out, data, 0);
        return;
    }
    out.push_str(" [");
    for i in 0..data.len() {
        if i > 0 {
            out.push_str(", ");
        }
        write_element(out, data, i);
    }
    out.push(']');
}

fn write_element(out: &mut String, data: &TensorData, i: usize) {
    let _ = match data {
        TensorData::Bool(v) => write!(out, "{}", v[i]),
        TensorData::I32(v) => write!(out, "{}", v[i]),
        TensorData::I64(v) => write!(out, "{}", v[i]),
        TensorData::F16(v) => {
            write_float(out, v[i].to_bits() as u64, FloatKind::F16);
            Ok(())
        }
        TensorData::BF16(v) => {
            write_float(out, v[i].to_bits() as u64, FloatKind::BF16);
            Ok(())
        }
        TensorData::F32(v) => {
            write_float(out, v[i].to_bits() as u64, FloatKind::F32);
            Ok(())
        }
        TensorData::F64(v) => {
            write_float(out, v[i].to_bits(), FloatKind::F64);
            Ok(())
        }
    };
}

/// Writes a scalar literal (pad values): `true`, `-3`, `1.0`, `nan`.
pub(super) fn write_scalar(out: &mut String, s: Scalar) {
    match s {
        Scalar::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Scalar::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Scalar::Float(x) => write_float(out, x.to_bits(), FloatKind::F64),
    }
}

fn write_list<T>(out: &mut String, items: &[T], mut f: impl FnMut(&mut String, &T)) {
    out.push('[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        f(out, x);
    }
    out.push(']');
}

fn write_usizes(out: &mut String, key: &str, items: &[usize]) {
    let _ = write!(out, " {key}=");
    write_list(out, items, |o, x| {
        let _ = write!(o, "{x}");
    });
}

fn write_attrs(out: &mut String, op: &Op) {
    match op {
        Op::Cast { to, .. } => {
            let _ = write!(out, " to={to}");
        }
        Op::Reduce { axes, keepdim, .. } => {
            write_usizes(out, "axes", axes);
            let _ = write!(out, " keepdim={keepdim}");
        }
        Op::Reshape { shape, .. } | Op::Expand { shape, .. } => {
            write_usizes(out, "shape", shape.dims())
        }
        Op::Permute { perm, .. } => write_usizes(out, "perm", perm),
        Op::Slice { ranges, .. } => {
            out.push_str(" ranges=");
            write_list(out, ranges, |o, r| {
                let _ = write!(o, "{}:{}:{}", r.start, r.stop, r.step);
            });
        }
        Op::Concat { axis, .. } | Op::Gather { axis, .. } | Op::IndexSelect { axis, .. } => {
            let _ = write!(out, " axis={axis}");
        }
        Op::Pad { pads, value, .. } => {
            out.push_str(" pads=");
            write_list(out, pads, |o, (lo, hi)| {
                let _ = write!(o, "({lo}, {hi})");
            });
            out.push_str(" value=");
            write_scalar(out, *value);
        }
        Op::Input { .. }
        | Op::Param { .. }
        | Op::Constant(_)
        | Op::Unary(..)
        | Op::Binary(..)
        | Op::Where(..)
        | Op::MatMul(..) => {}
    }
}
