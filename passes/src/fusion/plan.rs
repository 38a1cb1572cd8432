//! The fusion plan: kernels in execution order, what each computes, reads and writes.

use super::extract::LAUNCH_COST_BYTES;
use super::kernel::{gemm_flags, rows_of, Cat, Ctx, KernelKind};
use super::rules::Rule;
use super::why::{self, Apart, Boundary};
use smelt_ir::{NodeId, Op, Shape, TensorType};
use std::fmt::{self, Write as _};

/// Strides (in elements) and offset through which a buffer is addressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strided {
    pub strides: Vec<usize>,
    pub offset: usize,
}

/// One way a kernel reads an input buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The views applied to the buffer as index arithmetic, innermost first (empty: the buffer
    /// is read as stored, broadcasting implicitly where an elementwise op does).
    pub views: Vec<(NodeId, &'static str)>,
    /// The shape the kernel sees.
    pub shape: Shape,
    /// The equivalent strided access, when the view chain has one (a reshape of a
    /// non-contiguous view has none: it is read through div/mod index arithmetic).
    pub strided: Option<Strided>,
}

/// Where a kernel input comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Input(String),
    Param(String),
    Constant,
    /// Materialised by the kernel with this id.
    Kernel(usize),
}

/// A buffer a kernel reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInput {
    pub value: NodeId,
    pub ty: TensorType,
    pub source: Source,
    pub reads: Vec<Access>,
}

/// A value a kernel materialises: contiguous (row-major) in its own shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelOutput {
    pub value: NodeId,
    pub ty: TensorType,
    pub strides: Vec<usize>,
    /// Names of the graph outputs this value is.
    pub graph_outputs: Vec<String>,
}

/// One kernel of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Position in execution order.
    pub id: usize,
    pub kind: KernelKind,
    /// For a GEMM: whether operand a / b is read transposed (a folded permute).
    pub transpose: [bool; 2],
    /// The iteration space: a row kernel's reduction input shape, else the output shape.
    pub index_space: Shape,
    /// A row kernel's reduced axes of `index_space` (sorted); empty for other kinds.
    pub reduce_axes: Vec<usize>,
    /// The graph ops this kernel computes (views included), in node order.
    pub ops: Vec<(NodeId, &'static str)>,
    pub inputs: Vec<KernelInput>,
    pub outputs: Vec<KernelOutput>,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

/// The fusion plan of a graph: see the [module docs](super).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FusionPlan {
    /// Kernels in execution order.
    pub kernels: Vec<Kernel>,
    /// Live ops of the graph (inputs, parameters, constants and dead ops excluded).
    pub op_count: usize,
    /// Ops computed by more than one kernel (recomputed rather than materialised).
    pub recomputed_ops: usize,
    /// Kernel count of the unfused plan of the same graph.
    pub unfused_kernels: usize,
    /// Modelled cost of the unfused plan of the same graph (bytes-equivalent).
    pub unfused_cost: u64,
    /// Every value one kernel writes and another reads, and why the reader does not compute
    /// it (in kernel order, then input order). See [`FusionPlan::explain_boundaries`].
    pub boundaries: Vec<Boundary>,
}

impl FusionPlan {
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    pub fn bytes_read(&self) -> u64 {
        self.kernels.iter().map(|k| k.bytes_read).sum()
    }

    pub fn bytes_written(&self) -> u64 {
        self.kernels.iter().map(|k| k.bytes_written).sum()
    }

    /// Modelled cost, bytes-equivalent: bytes read + bytes written + one
    /// [`LAUNCH_COST_BYTES`] per kernel.
    pub fn cost(&self) -> u64 {
        self.bytes_read() + self.bytes_written() + self.kernels.len() as u64 * LAUNCH_COST_BYTES
    }

    /// The [`FusionPlan::boundaries`] as text, one line per value kept in memory between two
    /// kernels (empty for a plan without any).
    pub fn explain_boundaries(&self) -> String {
        let mut s = String::new();
        if self.boundaries.is_empty() {
            return s;
        }
        let n = self.boundaries.len();
        let _ = writeln!(
            s,
            "kept apart: {n} value{} written by one kernel and read by another",
            if n == 1 { "" } else { "s" }
        );
        for b in &self.boundaries {
            let _ = writeln!(s, "  {b}");
        }
        s
    }

    /// The plan as a Graphviz digraph: kernels are boxes, buffers ellipses. The edge of a
    /// value kept in memory between two kernels (a [`FusionPlan::boundaries`] entry) is
    /// dashed and labelled with [`Apart::label`], its full reason as the tooltip.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph plan {\n  node [fontname=\"monospace\"];\n");
        let mut declared = std::collections::BTreeSet::new();
        for k in &self.kernels {
            let ops: Vec<String> = k.ops.iter().map(|(n, o)| format!("{n} {o}")).collect();
            let _ = writeln!(
                s,
                "  k{} [shape=box, label=\"k{} {}\\n{}\"];",
                k.id,
                k.id,
                k.kind.name(),
                ops.join("\\n")
            );
            for i in &k.inputs {
                if declared.insert(i.value) {
                    let _ = writeln!(
                        s,
                        "  v{} [shape=ellipse, label=\"{} {}\"];",
                        i.value.0, i.value, i.ty
                    );
                }
                let apart = self
                    .boundaries
                    .iter()
                    .find(|b| b.value == i.value && b.consumer == k.id);
                match apart {
                    Some(b) => {
                        let _ = writeln!(
                            s,
                            "  v{} -> k{} [style=dashed, color=\"{}\", label=\"{}\", \
                             tooltip=\"{}\"];",
                            i.value.0,
                            k.id,
                            if matches!(b.reason, Apart::Cost { .. }) {
                                "orange"
                            } else {
                                "red"
                            },
                            dot_escape(&b.reason.label()),
                            dot_escape(&b.message)
                        );
                    }
                    None => {
                        let _ = writeln!(s, "  v{} -> k{};", i.value.0, k.id);
                    }
                }
            }
            for o in &k.outputs {
                if declared.insert(o.value) {
                    let _ = writeln!(
                        s,
                        "  v{} [shape=ellipse, label=\"{} {}\"];",
                        o.value.0, o.value, o.ty
                    );
                }
                let _ = writeln!(s, "  k{} -> v{};", k.id, o.value.0);
            }
        }
        s.push_str("}\n");
        s
    }
}

/// Text as a Graphviz double-quoted string holds it.
fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

impl fmt::Display for FusionPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan: {} ops in {} kernels ({} recomputed ops); unfused: {} kernels",
            self.op_count,
            self.kernels.len(),
            self.recomputed_ops,
            self.unfused_kernels
        )?;
        writeln!(
            f,
            "modelled cost {} B = read {} + written {} + {} launches x {}; unfused {} B",
            self.cost(),
            self.bytes_read(),
            self.bytes_written(),
            self.kernels.len(),
            LAUNCH_COST_BYTES,
            self.unfused_cost
        )?;
        for k in &self.kernels {
            write!(f, "k{} {} over {}", k.id, k.kind.name(), k.index_space)?;
            if k.kind == KernelKind::Reduction {
                write!(f, " axes {:?}", k.reduce_axes)?;
            }
            if k.kind == KernelKind::MatMul {
                for (flag, name) in k.transpose.iter().zip(["transpose_a", "transpose_b"]) {
                    if *flag {
                        write!(f, " {name}")?;
                    }
                }
            }
            let ops: Vec<String> = k.ops.iter().map(|(n, o)| format!("{n} {o}")).collect();
            writeln!(f, ": {}", ops.join(", "))?;
            for i in &k.inputs {
                let src = match &i.source {
                    Source::Input(n) => format!("input {n:?}"),
                    Source::Param(n) => format!("param {n:?}"),
                    Source::Constant => "const".to_string(),
                    Source::Kernel(k) => format!("from k{k}"),
                };
                write!(f, "  in  {} {} ({src})", i.value, i.ty)?;
                for a in &i.reads {
                    if a.views.is_empty() {
                        if a.shape == i.ty.shape {
                            continue;
                        }
                        write!(f, "; broadcast -> {}", a.shape)?;
                    } else {
                        let chain: Vec<String> =
                            a.views.iter().map(|(n, o)| format!("{o} {n}")).collect();
                        write!(f, "; via {} -> {}", chain.join(" -> "), a.shape)?;
                    }
                    match &a.strided {
                        Some(st) => write!(f, " strides {:?} offset {}", st.strides, st.offset)?,
                        None => write!(f, " (index arithmetic)")?,
                    }
                }
                writeln!(f)?;
            }
            for o in &k.outputs {
                write!(f, "  out {} {} strides {:?}", o.value, o.ty, o.strides)?;
                if !o.graph_outputs.is_empty() {
                    write!(f, " (output {})", o.graph_outputs.join(", "))?;
                }
                writeln!(f)?;
            }
            writeln!(
                f,
                "  bytes read {}, written {}",
                k.bytes_read, k.bytes_written
            )?;
        }
        Ok(())
    }
}

/// A kernel before ids are assigned: its ops, kind and materialised values.
#[derive(Clone, Debug)]
pub(crate) struct Proto {
    pub nodes: Vec<NodeId>,
    pub kind: KernelKind,
    pub outputs: Vec<NodeId>,
    pub inputs: Vec<NodeId>,
}

impl Proto {
    pub fn new(ctx: &Ctx, nodes: Vec<NodeId>, kind: KernelKind, outputs: Vec<NodeId>) -> Proto {
        let mut inputs = Vec::new();
        for &n in &nodes {
            for o in ctx.operands(n) {
                if nodes.binary_search(&o).is_err() {
                    inputs.push(o);
                }
            }
        }
        inputs.sort_unstable();
        inputs.dedup();
        Proto {
            nodes,
            kind,
            outputs,
            inputs,
        }
    }

    pub fn cost(&self, ctx: &Ctx) -> u64 {
        let r: u64 = self
            .inputs
            .iter()
            .map(|&i| ctx.input_read_bytes(&self.nodes, i))
            .sum();
        let w: u64 = self.outputs.iter().map(|&o| ctx.write_bytes(o)).sum();
        r + w + LAUNCH_COST_BYTES
    }
}

/// Builds the plan from protos in execution order.
/// Builds the plan from protos in execution order; `rules` are the merge rules the plan was
/// made with (what its [`FusionPlan::boundaries`] may say a merge is missing).
pub(crate) fn build(
    ctx: &Ctx,
    protos: &[Proto],
    rules: &[Rule],
    unfused_kernels: usize,
    unfused_cost: u64,
) -> FusionPlan {
    let g = &ctx.graph;
    let mut producer: Vec<Option<usize>> = vec![None; g.len()];
    let mut computed = vec![0usize; g.len()];
    let mut kernels = Vec::with_capacity(protos.len());
    let mut boundaries = Vec::new();
    for (id, p) in protos.iter().enumerate() {
        for &i in &p.inputs {
            if let Some(from) = producer[i.index()] {
                boundaries.push(why::boundary(ctx, protos, rules, i, from, id));
            }
        }
        for &n in &p.nodes {
            computed[n.index()] += 1;
        }
        let inputs = p
            .inputs
            .iter()
            .map(|&i| KernelInput {
                value: i,
                ty: g.ty(i).clone(),
                source: match &g.node(i).op {
                    Op::Input { name, .. } => Source::Input(name.clone()),
                    Op::Param { name, .. } => Source::Param(name.clone()),
                    Op::Constant(_) => Source::Constant,
                    _ => Source::Kernel(producer[i.index()].unwrap_or(usize::MAX)),
                },
                reads: accesses(ctx, &p.nodes, i),
            })
            .collect();
        let outputs = p
            .outputs
            .iter()
            .map(|&o| KernelOutput {
                value: o,
                ty: g.ty(o).clone(),
                strides: g.ty(o).shape.contiguous_strides().to_vec(),
                graph_outputs: g
                    .outputs()
                    .iter()
                    .filter(|(_, n)| *n == o)
                    .map(|(name, _)| name.clone())
                    .collect(),
            })
            .collect();
        let transpose = if p.kind == KernelKind::MatMul {
            gemm_flags(ctx, &p.nodes).unwrap_or_default()
        } else {
            [false; 2]
        };
        let (index_space, reduce_axes) = rows_of(ctx, &p.nodes)
            .unwrap_or_else(|| (g.ty(p.outputs[0]).shape.clone(), Vec::new()));
        kernels.push(Kernel {
            id,
            kind: p.kind,
            transpose,
            index_space,
            reduce_axes,
            ops: p.nodes.iter().map(|&n| (n, g.node(n).op.name())).collect(),
            inputs,
            outputs,
            bytes_read: p
                .inputs
                .iter()
                .map(|&i| ctx.input_read_bytes(&p.nodes, i))
                .sum(),
            bytes_written: p.outputs.iter().map(|&o| ctx.write_bytes(o)).sum(),
        });
        for &o in &p.outputs {
            producer[o.index()] = Some(id);
        }
    }
    let live_ops = g
        .ids()
        .filter(|&n| ctx.live[n.index()] && !ctx.is_leaf(n))
        .count();
    FusionPlan {
        kernels,
        op_count: live_ops,
        recomputed_ops: computed.iter().filter(|&&c| c > 1).count(),
        unfused_kernels,
        unfused_cost,
        boundaries,
    }
}

/// The distinct ways the body `nodes` reads buffer `input`.
fn accesses(ctx: &Ctx, nodes: &[NodeId], input: NodeId) -> Vec<Access> {
    let in_body = |n: NodeId| nodes.binary_search(&n).is_ok();
    let body_users = |n: NodeId| -> Vec<NodeId> {
        nodes
            .iter()
            .copied()
            .filter(|&u| ctx.operands(u).contains(&n))
            .collect()
    };
    let mut out: Vec<Access> = Vec::new();
    for r in body_users(input) {
        let mut chain = Vec::new();
        if ctx.cat(r) == Cat::View {
            chain.push(r);
            loop {
                let last = *chain.last().expect("non-empty");
                let users = body_users(last);
                match users.as_slice() {
                    [u] if ctx.cat(*u) == Cat::View && in_body(*u) => chain.push(*u),
                    _ => break,
                }
            }
        }
        let access = match chain.last() {
            Some(&last) => Access {
                views: chain
                    .iter()
                    .map(|&v| (v, ctx.graph.node(v).op.name()))
                    .collect(),
                shape: ctx.shape(last).clone(),
                strided: strided(ctx, input, &chain),
            },
            // An elementwise reader broadcasts its operand implicitly: stride 0 on those axes.
            None if ctx.cat(r) == Cat::Elementwise
                && ctx.shape(r) != ctx.shape(input)
                && ctx.read_bytes(input) > 0 =>
            {
                let dims = ctx.shape(input).dims();
                let strides = ctx.shape(input).contiguous_strides();
                Access {
                    views: Vec::new(),
                    shape: ctx.shape(r).clone(),
                    strided: broadcast(dims, &strides, ctx.shape(r).dims())
                        .map(|strides| Strided { strides, offset: 0 }),
                }
            }
            None => Access {
                views: Vec::new(),
                shape: ctx.shape(input).clone(),
                strided: Some(Strided {
                    strides: ctx.shape(input).contiguous_strides().to_vec(),
                    offset: 0,
                }),
            },
        };
        if !out.contains(&access) {
            out.push(access);
        }
    }
    out
}

/// The strided form of reading `input` through the view `chain`, if it has one.
fn strided(ctx: &Ctx, input: NodeId, chain: &[NodeId]) -> Option<Strided> {
    let mut dims: Vec<usize> = ctx.shape(input).dims().to_vec();
    let mut strides: Vec<usize> = ctx.shape(input).contiguous_strides().to_vec();
    let mut offset = 0usize;
    for &v in chain {
        match &ctx.graph.node(v).op {
            Op::Permute { perm, .. } => {
                dims = perm.iter().map(|&p| dims[p]).collect();
                strides = perm.iter().map(|&p| strides[p]).collect();
            }
            Op::Expand { shape, .. } => {
                strides = broadcast(&dims, &strides, shape.dims())?;
                dims = shape.dims().to_vec();
            }
            Op::Slice { ranges, .. } => {
                for (k, rg) in ranges.iter().enumerate() {
                    offset += rg.start * strides[k];
                    strides[k] *= rg.step;
                    dims[k] = rg.len();
                }
            }
            Op::Reshape { shape, .. } => {
                let contiguous = Shape::new(&dims).contiguous_strides();
                let ok = dims
                    .iter()
                    .zip(strides.iter().zip(contiguous.iter()))
                    .all(|(&d, (s, c))| d <= 1 || s == c);
                if !ok {
                    return None;
                }
                dims = shape.dims().to_vec();
                strides = shape.contiguous_strides().to_vec();
            }
            _ => return None,
        }
    }
    Some(Strided { strides, offset })
}

/// Strides of `dims` (with `strides`) broadcast to `to`: stride 0 on new and stretched axes.
fn broadcast(dims: &[usize], strides: &[usize], to: &[usize]) -> Option<Vec<usize>> {
    let lead = to.len().checked_sub(dims.len())?;
    Some(
        (0..to.len())
            .map(|k| {
                if k < lead || (dims[k - lead] == 1 && to[k] != 1) {
                    0
                } else {
                    strides[k - lead]
                }
            })
            .collect(),
    )
}
