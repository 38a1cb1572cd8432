//! Why a plan keeps two kernels apart: for every value one kernel writes and another reads,
//! the rule that stops the reader from computing it itself, or the costs that made the
//! extractor materialise it. `smelt explain` prints these after the plan.
//!
//! The reason is derived from the same code the planner runs: the merge rules' producer and
//! consumer kinds ([`Rule::admits`]), the kernel rules ([`classify_why`]), the rule that a
//! kernel never recomputes a reduction ([`Body::new`](super::kernel::Body::new)) and the cost
//! model ([`Proto::cost`]). The merge considered is the one a rule forms: the consumer's ops
//! with the producer's ops that the value depends on.

use super::kernel::{classify_why, Ctx, KernelKind, Reject};
use super::plan::Proto;
use super::rules::Rule;
use smelt_ir::NodeId;
use std::fmt;

/// One value kept in memory between two kernels of a plan, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The value the producer writes and the consumer reads.
    pub value: NodeId,
    /// Kernel ids (execution order).
    pub producer: usize,
    pub consumer: usize,
    pub reason: Apart,
    /// The reason in words, naming the ops, shapes and kernels involved.
    pub message: String,
}

/// Why a consumer does not compute a value it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Apart {
    /// The producer is a matmul: a GEMM step (`gemm` or smelt's panel kernel on the CPU,
    /// cuBLAS on CUDA) writes its product to memory, and no rule fuses the ops after it (an
    /// epilogue) into it.
    GemmOutput,
    /// The consumer is a matmul: a GEMM reads its operands from memory (only a transpose and
    /// reshapes of a stored buffer fold into it, as flags).
    GemmOperand,
    /// The producer or the consumer is a concat, pad or gather kernel (this kind), which
    /// computes that one op alone.
    Alone(KernelKind),
    /// No merge rule takes a producer of the first kind into a consumer of the second.
    NoRule {
        producer: KernelKind,
        consumer: KernelKind,
    },
    /// The consumer's ops with the producer's would not be one legal kernel.
    Illegal(Reject),
    /// The merge would recompute this op, computed from a reduction and also needed outside
    /// the consumer: a kernel never recomputes a reduction.
    RecomputesReduction(NodeId),
    /// The rule that merges a producer of this kind into a consumer of that kind is not one
    /// this plan was made with (an unfused plan, or `plan_with_rules` without it).
    RuleOff(&'static str),
    /// The merge is legal (formed by this rule); the extractor kept the value in memory.
    /// Modelled costs (bytes-equivalent) of the two kernels as planned and merged.
    Cost {
        rule: &'static str,
        apart: u64,
        merged: u64,
    },
}

impl Apart {
    /// A few words for the reason, as `smelt explain --dot` labels the edge of the value.
    pub fn label(&self) -> String {
        match self {
            Apart::GemmOutput => "GEMM output".into(),
            Apart::GemmOperand => "GEMM operand".into(),
            Apart::Alone(kind) => format!("{} alone", kind.name()),
            Apart::NoRule { .. } => "no rule".into(),
            Apart::Illegal(_) => "not one kernel".into(),
            Apart::RecomputesReduction(_) => "shared reduction".into(),
            Apart::RuleOff(rule) => format!("rule off: {rule}"),
            Apart::Cost { .. } => "cost".into(),
        }
    }
}

impl fmt::Display for Boundary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} k{} -> k{}: {}",
            self.value, self.producer, self.consumer, self.message
        )
    }
}

/// The boundary of value `v`, written by `protos[p]` and read by `protos[c]`.
pub(crate) fn boundary(
    ctx: &Ctx,
    protos: &[Proto],
    rules: &[Rule],
    v: NodeId,
    p: usize,
    c: usize,
) -> Boundary {
    let (pk, ck) = (&protos[p], &protos[c]);
    let op = |n: NodeId| format!("{n} {}", ctx.graph.node(n).op.name());
    let at = |n: NodeId| format!("{} {}", op(n), ctx.graph.ty(n));
    let (reason, message) = reason(ctx, protos, rules, v, p, c);
    let message = message.unwrap_or_else(|| match reason {
        Apart::GemmOutput => format!(
            "k{p} is a matmul, a GEMM step that writes its product to memory; GEMM epilogues \
             are not fused (no rule merges the ops after a GEMM into it), so k{c} reads {} \
             back",
            at(v)
        ),
        Apart::GemmOperand => format!(
            "k{c} is a matmul, a GEMM step that reads its operands from memory (only a \
             transpose and reshapes of a stored buffer fold into it), so k{p} writes {}",
            at(v)
        ),
        Apart::Alone(kind) => format!(
            "k{} is a {} kernel, which computes that one op alone (its operands' views fold \
             into it, nothing else does)",
            if pk.kind == kind { p } else { c },
            kind.name()
        ),
        Apart::NoRule { producer, consumer } => format!(
            "no fusion rule merges a {} kernel into a {} kernel",
            producer.name(),
            consumer.name()
        ),
        Apart::RuleOff(rule) => format!(
            "rule `{rule}` would merge k{p} into k{c}, but this plan was made without it \
             (an unfused plan folds views only; `plan_with_rules` runs the rules it names)"
        ),
        Apart::Illegal(r) => format!(
            "one kernel cannot compute k{c}'s ops with {}: {}",
            op(v),
            reject_text(ctx, r)
        ),
        Apart::RecomputesReduction(n) => {
            let elsewhere = elsewhere(ctx, protos, n, c);
            format!(
                "{} is computed from a reduction and also needed {elsewhere}; a kernel never \
                 recomputes a reduction, so k{p} writes it once",
                op(n)
            )
        }
        Apart::Cost {
            rule,
            apart,
            merged,
        } => {
            let still = if needed_beyond(ctx, pk, ck, v) {
                format!(" (k{p} would still write {} for its other readers)", op(v))
            } else {
                String::new()
            };
            let verdict = if merged >= apart {
                format!("{} B more", merged - apart)
            } else {
                format!(
                    "{} B less, a saving the extractor did not take (it chooses per value, \
                     greedily)",
                    apart - merged
                )
            };
            format!(
                "fusible by rule `{rule}`, kept apart by the plan's costs: merged, k{p} and \
                 k{c} would cost {merged} B against {apart} B apart, {verdict}{still}"
            )
        }
    });
    Boundary {
        value: v,
        producer: p,
        consumer: c,
        reason,
        message,
    }
}

/// The reason, and its text where the generic wording of [`boundary`] does not fit.
fn reason(
    ctx: &Ctx,
    protos: &[Proto],
    rules: &[Rule],
    v: NodeId,
    p: usize,
    c: usize,
) -> (Apart, Option<String>) {
    use KernelKind::*;
    let (pk, ck) = (&protos[p], &protos[c]);
    if pk.kind == MatMul {
        return (Apart::GemmOutput, None);
    }
    if ck.kind == MatMul && pk.kind != Copy {
        return (Apart::GemmOperand, None);
    }
    for kind in [pk.kind, ck.kind] {
        if matches!(kind, Concat | Pad | Gather) {
            return (Apart::Alone(kind), None);
        }
    }
    let Some(rule) = Rule::ALL.into_iter().find(|r| r.admits(ck.kind, pk.kind)) else {
        return (
            Apart::NoRule {
                producer: pk.kind,
                consumer: ck.kind,
            },
            None,
        );
    };
    if !rules.contains(&rule) {
        return (Apart::RuleOff(rule.name()), None);
    }
    let merged_nodes = union(ctx, &pk.nodes, &ck.nodes, v);
    let kind = match classify_why(ctx, &merged_nodes) {
        Ok(kind) => kind,
        Err(Reject::GemmOperand(n)) => {
            let text = format!(
                "k{c} is a matmul, which reads an operand through one transpose of the last two \
                 axes and reshapes only; {} {} is not that, so k{p} writes the operand in the \
                 layout the GEMM reads",
                n,
                ctx.graph.node(n).op.name()
            );
            return (Apart::Illegal(Reject::GemmOperand(n)), Some(text));
        }
        Err(r) => return (Apart::Illegal(r), None),
    };
    let root = *merged_nodes.last().expect("the consumer has ops");
    for &n in &merged_nodes {
        let shared = n != root && ctx.needed_outside(&merged_nodes, n);
        if shared && ctx.after_reduce[n.index()] {
            return (Apart::RecomputesReduction(n), None);
        }
    }
    let apart = pk.cost(ctx) + ck.cost(ctx);
    let merged_consumer = Proto::new(ctx, merged_nodes, kind, ck.outputs.clone());
    let mut merged = merged_consumer.cost(ctx);
    let outputs: Vec<NodeId> = pk
        .outputs
        .iter()
        .copied()
        .filter(|&o| o != v || needed_beyond(ctx, pk, ck, o))
        .collect();
    if !outputs.is_empty() {
        merged += Proto::new(ctx, pk.nodes.clone(), pk.kind, outputs).cost(ctx);
    }
    (
        Apart::Cost {
            rule: rule.name(),
            apart,
            merged,
        },
        None,
    )
}

/// The consumer's ops with the producer's ops that `v` depends on (sorted, unique).
fn union(ctx: &Ctx, producer: &[NodeId], consumer: &[NodeId], v: NodeId) -> Vec<NodeId> {
    let mut out: Vec<NodeId> = consumer.to_vec();
    let mut stack = vec![v];
    while let Some(n) = stack.pop() {
        if producer.binary_search(&n).is_err() || out.contains(&n) {
            continue;
        }
        out.push(n);
        stack.extend(ctx.operands(n));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `v` is a graph output or read by an op of neither kernel `a` nor kernel `b`: a
/// value the producer must write even when the consumer computes it.
fn needed_beyond(ctx: &Ctx, a: &Proto, b: &Proto, v: NodeId) -> bool {
    ctx.is_output[v.index()]
        || ctx.users[v.index()]
            .iter()
            .any(|u| a.nodes.binary_search(u).is_err() && b.nodes.binary_search(u).is_err())
}

/// Where `n` is needed besides kernel `c`: "as graph output" and/or "by k3, k5".
fn elsewhere(ctx: &Ctx, protos: &[Proto], n: NodeId, c: usize) -> String {
    let mut readers: Vec<usize> = protos
        .iter()
        .enumerate()
        .filter(|&(i, k)| {
            i != c
                && k.nodes.binary_search(&n).is_err()
                && k.nodes.iter().any(|m| ctx.operands(*m).contains(&n))
        })
        .map(|(i, _)| i)
        .collect();
    readers.dedup();
    let mut parts = Vec::new();
    if !readers.is_empty() {
        let ks: Vec<String> = readers.iter().map(|k| format!("k{k}")).collect();
        parts.push(format!("by {}", ks.join(", ")));
    }
    if ctx.is_output[n.index()] {
        parts.push("as a graph output".to_string());
    }
    if parts.is_empty() {
        parts.push("by other ops of the graph".to_string());
    }
    parts.join(" and ")
}

/// A kernel rule broken, in words.
fn reject_text(ctx: &Ctx, r: Reject) -> String {
    let op = |n: NodeId| format!("{n} {}", ctx.graph.node(n).op.name());
    let ty = |n: NodeId| ctx.graph.ty(n).to_string();
    let rows = |n: NodeId| match &ctx.graph.node(n).op {
        smelt_ir::Op::Reduce { input, axes, .. } => {
            format!("{} over axes {:?}", ctx.graph.ty(*input), axes)
        }
        _ => ty(n),
    };
    match r {
        Reject::Leaf(n) => format!("{} is not computed by a kernel", op(n)),
        Reject::NotAlone { heavy, other } => format!(
            "a kernel with {} computes that op alone, not {} with it",
            op(heavy),
            op(other)
        ),
        Reject::GemmOperand(n) => format!(
            "{} is not on a GEMM operand's chain of one transpose and reshapes",
            op(n)
        ),
        Reject::Rows { first, second } => format!(
            "{} reduces {} and {} reduces {}, and a row kernel has one row shape",
            op(first),
            rows(first),
            op(second),
            rows(second)
        ),
        Reject::Shape(n) => format!(
            "{} at {} is neither at the reduced input's shape nor at a row's",
            op(n),
            ty(n)
        ),
        Reject::View(n) => format!(
            "{} between row-level values moves values to other rows",
            op(n)
        ),
        Reject::Level { op: o, operand } => format!(
            "{} at {} reads {} at {}, a value of another level of the row kernel",
            op(o),
            ty(o),
            op(operand),
            ty(operand)
        ),
        Reject::Empty => "there are no ops".to_string(),
    }
}
