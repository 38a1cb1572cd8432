//! The text form of a [`Program`], for snapshots and debugging. Stable: it depends only on the
//! program. Loop variables print as `d0, d1, …` (outer dims first), values as `v3`.
//!
//! ```text
//! buffer b0 f32[4096] input "x" %0
//! buffer b1 f32[4096] temp %2
//! kernel k0_elementwise_exp_add (index i32) outer [64, 64] reads [b0] writes [b1]
//!   origin %1 exp, %2 add
//!   stage store
//!     v0 = load b0[64*d0 + d1] : f32
//!     v1 = exp v0 : f32
//!     v2 = const 1.0 : f32
//!     v3 = add v1, v2 : f32
//!     store b1[64*d0 + d1] = v3
//! gemm k1_matmul f32 a=b1 [64, 64] strides [1, 64] offset 0 b=… out=b2 [64, 64]
//!   origin %3 permute, %4 matmul
//! output "y" = b2
//! ```
//!
//! A row kernel's reduction stage prints its combiner and accumulator (`stage sum acc f32 over
//! [768]`) and ends with `v7 = reduce sum v6 : f32`; a computed address prints as `b0[v5]`.

use super::ir::*;
use std::fmt::{self, Write as _};

impl fmt::Display for BufferId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Data(d) => write!(f, "{d}"),
            Ty::Index => f.write_str("index"),
        }
    }
}

impl fmt::Display for Combiner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Combiner::Sum => "sum",
            Combiner::Prod => "prod",
            Combiner::Max => "max",
            Combiner::Min => "min",
            Combiner::ArgMax => "argmax",
            Combiner::ArgMin => "argmin",
        })
    }
}

/// `b0[64*d0 + d1 + 3]` or `b0[v7]`.
fn access(buffer: BufferId, a: &Access) -> String {
    match a {
        Access::Computed(v) => format!("{buffer}[{v}]"),
        Access::Affine { offset, strides } => {
            let mut terms: Vec<String> = strides
                .iter()
                .enumerate()
                .filter(|(_, &s)| s != 0)
                .map(|(d, &s)| {
                    if s == 1 {
                        format!("d{d}")
                    } else {
                        format!("{s}*d{d}")
                    }
                })
                .collect();
            if *offset != 0 || terms.is_empty() {
                terms.push(offset.to_string());
            }
            format!("{buffer}[{}]", terms.join(" + "))
        }
    }
}

fn op_text(op: &InstOp) -> String {
    match op {
        InstOp::LoopVar(d) => format!("loopvar d{d}"),
        InstOp::IndexConst(c) => format!("iconst {c}"),
        InstOp::IndexAdd(a, b) => format!("iadd {a}, {b}"),
        InstOp::IndexMul(a, b) => format!("imul {a}, {b}"),
        InstOp::IndexDiv(a, b) => format!("idiv {a}, {b}"),
        InstOp::IndexRem(a, b) => format!("irem {a}, {b}"),
        InstOp::IndexLt(a, b) => format!("ilt {a}, {b}"),
        InstOp::ToIndex(a) => format!("to_index {a}"),
        InstOp::Const(s) => format!("const {s}"),
        InstOp::Load { buffer, access: a } => format!("load {}", access(*buffer, a)),
        InstOp::Unary(u, a) => format!("{u} {a}"),
        InstOp::Binary(b, x, y) => format!("{b} {x}, {y}"),
        InstOp::Select(c, a, b) => format!("select {c}, {a}, {b}"),
        InstOp::Cast(a) => format!("cast {a}"),
    }
}

fn ids(v: &[BufferId]) -> String {
    v.iter()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn operand(o: &GemmOperand) -> String {
    format!(
        "{} {:?} strides {:?} offset {}",
        o.buffer, o.shape, o.strides, o.offset
    )
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = match self.index_width {
            IndexWidth::I32 => "i32",
            IndexWidth::I64 => "i64",
        };
        writeln!(
            f,
            "kernel {} (index {width}) outer {:?} reads [{}] writes [{}]",
            self.name,
            self.outer,
            ids(&self.reads),
            ids(&self.writes)
        )?;
        let origin: Vec<String> = self
            .origin
            .iter()
            .map(|(n, o)| format!("{n} {o}"))
            .collect();
        writeln!(f, "  origin {}", origin.join(", "))?;
        for s in &self.stages {
            let mut head = String::from("  stage");
            match &s.effect {
                StageEffect::Reduce { combiner, acc, .. } => {
                    let _ = write!(head, " {combiner} acc {acc}");
                }
                StageEffect::Store(_) => head.push_str(" store"),
            }
            if !s.inner.is_empty() {
                let _ = write!(head, " over {:?}", s.inner);
            }
            writeln!(f, "{head}")?;
            for i in &s.body {
                writeln!(f, "    {} = {} : {}", i.dst, op_text(&i.op), i.ty)?;
            }
            match &s.effect {
                StageEffect::Reduce {
                    value,
                    combiner,
                    result,
                    acc,
                } => {
                    let ty = match combiner {
                        Combiner::ArgMax | Combiner::ArgMin => smelt_ir::DType::I64,
                        _ => *acc,
                    };
                    writeln!(f, "    {result} = reduce {combiner} {value} : {ty}")?
                }
                StageEffect::Store(stores) => {
                    for st in stores {
                        writeln!(
                            f,
                            "    store {} = {}",
                            access(st.buffer, &st.access),
                            st.value
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for Gemm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "gemm {} {} a={} b={} out={} {:?}",
            self.name,
            self.dtype,
            operand(&self.a),
            operand(&self.b),
            self.out,
            self.out_shape
        )?;
        let origin: Vec<String> = self
            .origin
            .iter()
            .map(|(n, o)| format!("{n} {o}"))
            .collect();
        writeln!(f, "  origin {}", origin.join(", "))
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.buffers {
            let kind = match &b.kind {
                BufferKind::Input(n) => format!("input {n:?}"),
                BufferKind::Param(n) => format!("param {n:?}"),
                BufferKind::Constant(_) => "const".to_string(),
                BufferKind::Temp => "temp".to_string(),
            };
            writeln!(
                f,
                "buffer {} {}[{}] {kind} {}",
                b.id, b.dtype, b.numel, b.value
            )?;
        }
        for s in &self.steps {
            match s {
                Step::Kernel(k) => write!(f, "{k}")?,
                Step::Gemm(g) => write!(f, "{g}")?,
            }
        }
        for (name, b) in &self.outputs {
            writeln!(f, "output {name:?} = {b}")?;
        }
        Ok(())
    }
}
