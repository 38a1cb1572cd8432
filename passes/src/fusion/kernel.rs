//! Kernel bodies: which sets of ops one kernel can compute, and of what kind.
//!
//! A body is a sorted set of [`NodeId`]s of the graph; its *root* is its largest id (every
//! other op of the body feeds the root through ops of the body), and the root's value is what
//! the kernel materialises. Operands of body ops that are not in the body are the kernel's
//! *inputs*: buffers it reads (graph inputs, parameters, constants, or values materialised by
//! earlier kernels). [`classify`] decides whether one kernel can compute a body:
//!
//! - **elementwise**: unary/binary/where/cast ops and views, over the root's index space. Views
//!   are index arithmetic (a view of an input is a strided or broadcast load; a view between two
//!   ops of the body remaps the index at which the producer is recomputed); never copies.
//! - **copy**: views only; the root is stored contiguous in its own shape, which is how a
//!   value is materialised "in its consumer's layout".
//! - **reduction** (row kernel): one or more reductions that all reduce the same input shape
//!   `S` over the same axes `A`, an elementwise prologue at shape `S`, row-level ops at the
//!   reduced shape, and an epilogue at shape `S` that reads row-level values with `keepdim`
//!   broadcasting (softmax, layer_norm, rms_norm). Views between ops of the body are only
//!   allowed between the two reduced shapes (`keepdim` or not), and only when they leave every
//!   row's value at its own row (a reshape, a permute of size-1 axes): a permute that reorders
//!   rows would make a row read another row's reduction. The one view from a row to `S` is an
//!   `expand` of a `keepdim` row value to `S` (the implicit broadcast written out: each
//!   element reads its own row's value). Views of inputs are loads.
//! - **matmul**: a library GEMM whose operands may be read through one permute that swaps the
//!   last two axes (a transpose flag) on top of reshapes of the stored buffer (metadata only).
//! - **concat / pad / gather**: one such op, its operands read through views.
//!
//! An op of a body whose value is also used outside the body is *recomputed* by the kernel.
//! Only ops that are not computed from a reduction (through elementwise ops and views) may be
//! recomputed: a kernel never recomputes a reduction.

use smallvec::SmallVec;
use smelt_ir::{Graph, NodeId, Op, Shape};

/// What a kernel does, as the backends will lower it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelKind {
    /// Views only: a strided copy.
    Copy,
    /// Elementwise ops over the root's index space.
    Elementwise,
    /// A row kernel: reductions over one set of axes with prologue and epilogue.
    Reduction,
    /// A library GEMM, operand transposes folded into flags.
    MatMul,
    /// `concat`.
    Concat,
    /// `pad`.
    Pad,
    /// `gather` / `index_select`.
    Gather,
}

impl KernelKind {
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Copy => "copy",
            KernelKind::Elementwise => "elementwise",
            KernelKind::Reduction => "reduction",
            KernelKind::MatMul => "matmul",
            KernelKind::Concat => "concat",
            KernelKind::Pad => "pad",
            KernelKind::Gather => "gather",
        }
    }
}

/// The category of one graph node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cat {
    /// Input, parameter or constant: already in memory, never computed by a kernel.
    Leaf,
    Elementwise,
    View,
    Reduce,
    MatMul,
    Concat,
    Pad,
    Gather,
}

/// What the planner knows about the graph, shared by rules, extraction and plan building.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub graph: Graph,
    pub cat: Vec<Cat>,
    /// Whether the node contributes to an output.
    pub live: Vec<bool>,
    /// Live users of each node (graph outputs count as one user each).
    pub uses: Vec<usize>,
    /// Live ops using each node (graph outputs not included).
    pub users: Vec<Vec<NodeId>>,
    /// Whether the node is a graph output.
    pub is_output: Vec<bool>,
    /// Whether the node is a reduction or an elementwise op or view computed from one.
    pub after_reduce: Vec<bool>,
}

impl Ctx {
    pub fn new(graph: &Graph) -> Ctx {
        let n = graph.len();
        let cat: Vec<Cat> = graph
            .nodes()
            .iter()
            .map(|node| match &node.op {
                Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => Cat::Leaf,
                Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast { .. } => {
                    Cat::Elementwise
                }
                Op::Reshape { .. } | Op::Permute { .. } | Op::Expand { .. } | Op::Slice { .. } => {
                    Cat::View
                }
                Op::Reduce { .. } => Cat::Reduce,
                Op::MatMul(..) => Cat::MatMul,
                Op::Concat { .. } => Cat::Concat,
                Op::Pad { .. } => Cat::Pad,
                Op::Gather { .. } | Op::IndexSelect { .. } => Cat::Gather,
            })
            .collect();
        let mut live = vec![false; n];
        for (_, o) in graph.outputs() {
            live[o.index()] = true;
        }
        let mut uses = vec![0usize; n];
        let mut is_output = vec![false; n];
        for (_, o) in graph.outputs() {
            uses[o.index()] += 1;
            is_output[o.index()] = true;
        }
        let mut users = vec![Vec::new(); n];
        for id in (0..graph.len() as u32).rev().map(NodeId) {
            if live[id.index()] {
                for o in graph.node(id).op.operands() {
                    live[o.index()] = true;
                    uses[o.index()] += 1;
                    users[o.index()].push(id);
                }
            }
        }
        for u in &mut users {
            u.sort_unstable();
            u.dedup();
        }
        let mut after_reduce = vec![false; n];
        for id in graph.ids() {
            after_reduce[id.index()] = match cat[id.index()] {
                Cat::Reduce => true,
                Cat::Elementwise | Cat::View => graph
                    .node(id)
                    .op
                    .operands()
                    .iter()
                    .any(|o| after_reduce[o.index()]),
                _ => false,
            };
        }
        Ctx {
            after_reduce,
            graph: graph.clone(),
            cat,
            live,
            uses,
            users,
            is_output,
        }
    }

    pub fn cat(&self, n: NodeId) -> Cat {
        self.cat[n.index()]
    }

    pub fn is_leaf(&self, n: NodeId) -> bool {
        self.cat(n) == Cat::Leaf
    }

    pub fn shape(&self, n: NodeId) -> &Shape {
        &self.graph.ty(n).shape
    }

    pub fn operands(&self, n: NodeId) -> SmallVec<[NodeId; 4]> {
        self.graph.node(n).op.operands()
    }

    /// Bytes a kernel reads from buffer `n`: its stored size; 0-d constants are immediates.
    pub fn read_bytes(&self, n: NodeId) -> u64 {
        let node = self.graph.node(n);
        if matches!(node.op, Op::Constant(_)) && node.ty.shape.numel() <= 1 {
            return 0;
        }
        node.ty.size_bytes() as u64
    }

    /// Bytes the kernel computing `nodes` (sorted) reads from its input buffer `input`: its
    /// stored size ([`Ctx::read_bytes`]), except where every read of it in the body goes through
    /// views to a slice, a gather or the root: a slice reads only the elements it selects, a
    /// table read by `gather` / `index_select` one element per element they output, and a view
    /// that is the root (a copy) one element per element it writes. Those parts are summed,
    /// at most the stored size.
    pub fn input_read_bytes(&self, nodes: &[NodeId], input: NodeId) -> u64 {
        let full = self.read_bytes(input);
        let partial = |n: &NodeId| {
            self.cat(*n) == Cat::Gather || matches!(self.graph.node(*n).op, Op::Slice { .. })
        };
        if !nodes.iter().any(partial) {
            return full;
        }
        let in_body = |n: NodeId| nodes.binary_search(&n).is_ok();
        // The buffer and the views of it computed in the body.
        let mut reached = vec![input];
        let mut part = 0u64;
        let mut i = 0;
        while i < reached.len() {
            let v = reached[i];
            i += 1;
            let users: Vec<NodeId> = self.users[v.index()]
                .iter()
                .copied()
                .filter(|&u| in_body(u))
                .collect();
            if users.is_empty() {
                if v == input {
                    return full;
                }
                // The root, a view of the input: a copy reading one element per element.
                part += self.write_bytes(v);
                continue;
            }
            for u in users {
                match &self.graph.node(u).op {
                    Op::Slice { .. } => part += self.write_bytes(u),
                    _ if self.cat(u) == Cat::View => {
                        if !reached.contains(&u) {
                            reached.push(u);
                        }
                    }
                    Op::Gather {
                        input: t, index, ..
                    }
                    | Op::IndexSelect {
                        input: t, index, ..
                    } if *t == v && *index != v => {
                        part += self.write_bytes(u);
                    }
                    _ => return full,
                }
            }
        }
        part.min(full)
    }

    /// Whether the value of `n` is needed outside the body `nodes` (sorted): a graph output,
    /// or read by an op not in the body.
    pub fn needed_outside(&self, nodes: &[NodeId], n: NodeId) -> bool {
        self.is_output[n.index()]
            || self.users[n.index()]
                .iter()
                .any(|u| nodes.binary_search(u).is_err())
    }

    /// Bytes a kernel writes to materialise `n` (contiguous, in its own shape).
    pub fn write_bytes(&self, n: NodeId) -> u64 {
        self.graph.ty(n).size_bytes() as u64
    }
}

/// A legal kernel body with its kind and its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Body {
    /// Sorted, unique; the last one is the root.
    pub nodes: Vec<NodeId>,
    pub kind: KernelKind,
    /// Operands of body ops outside the body, sorted, unique.
    pub inputs: Vec<NodeId>,
    /// Whether no op of the body but the root is used outside it (nothing is recomputed).
    pub dup_free: bool,
    /// Modelled bytes read (see [`Body::bytes_read`]).
    read: u64,
}

impl Body {
    pub fn root(&self) -> NodeId {
        *self.nodes.last().expect("a body is never empty")
    }

    /// Builds the body of `nodes` (sorted, unique, non-empty) if one kernel can compute it.
    pub fn new(ctx: &Ctx, nodes: Vec<NodeId>) -> Option<Body> {
        let kind = classify(ctx, &nodes)?;
        let mut inputs: Vec<NodeId> = Vec::new();
        for &n in &nodes {
            for o in ctx.operands(n) {
                if nodes.binary_search(&o).is_err() {
                    inputs.push(o);
                }
            }
        }
        inputs.sort_unstable();
        inputs.dedup();
        let root = *nodes.last()?;
        // Ops of the body whose value is also needed outside it are recomputed here; a kernel
        // never recomputes a reduction or an op computed from one (that would read its rows
        // again, or multiply the variants the rules explore).
        let mut dup_free = true;
        for &n in &nodes {
            let shared = n != root && ctx.needed_outside(&nodes, n);
            if shared && ctx.after_reduce[n.index()] {
                return None;
            }
            dup_free &= !shared;
        }
        let read = inputs
            .iter()
            .map(|&i| ctx.input_read_bytes(&nodes, i))
            .sum();
        Some(Body {
            nodes,
            kind,
            inputs,
            dup_free,
            read,
        })
    }

    /// Modelled bytes read: each distinct input buffer once, in its stored size, but a sliced
    /// or gathered buffer only in the elements read ([`Ctx::input_read_bytes`]).
    pub fn bytes_read(&self) -> u64 {
        self.read
    }
}

/// Whether `n` is a view whose chain of view operands inside the body reaches an input: a
/// load through index arithmetic rather than a remap of a value computed in the body.
fn view_of_input(ctx: &Ctx, nodes: &[NodeId], n: NodeId) -> bool {
    let mut cur = n;
    loop {
        if ctx.cat(cur) != Cat::View {
            return false;
        }
        let o = ctx.operands(cur)[0];
        if nodes.binary_search(&o).is_err() {
            return true;
        }
        cur = o;
    }
}

/// The kind of kernel that computes `nodes` (sorted, unique), or `None` if no single kernel
/// can. See the module docs for the rules.
pub(crate) fn classify(ctx: &Ctx, nodes: &[NodeId]) -> Option<KernelKind> {
    classify_why(ctx, nodes).ok()
}

/// Why no single kernel computes a set of ops: the first rule of the module docs it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// An input, parameter or constant: never computed by a kernel.
    Leaf(NodeId),
    /// A matmul, concat, pad or gather with another op that is not a view of its operands:
    /// such a kernel computes that one op alone.
    NotAlone { heavy: NodeId, other: NodeId },
    /// A matmul operand reached through an op other than one transpose and reshapes.
    GemmOperand(NodeId),
    /// Two reductions over different input shapes or axes.
    Rows { first: NodeId, second: NodeId },
    /// An op of a row kernel at a shape that is neither the reduced input's nor a row's.
    Shape(NodeId),
    /// A view inside a row kernel that is not a load and moves rows (or leaves the row level).
    View(NodeId),
    /// An elementwise op of a row kernel reading an operand computed at another level (a
    /// row-level op reading element-level values, or an operand of a third shape).
    Level { op: NodeId, operand: NodeId },
    /// The empty set.
    Empty,
}

/// [`classify`], saying which rule a set of ops breaks when no kernel computes it.
pub(crate) fn classify_why(ctx: &Ctx, nodes: &[NodeId]) -> Result<KernelKind, Reject> {
    let root = *nodes.last().ok_or(Reject::Empty)?;
    let (mut heavy, mut other) = (None::<NodeId>, None::<NodeId>);
    let mut heavies = 0usize;
    let mut reduces = 0usize;
    let mut elementwise = 0usize;
    for &n in nodes {
        match ctx.cat(n) {
            Cat::Leaf => return Err(Reject::Leaf(n)),
            Cat::Elementwise => {
                elementwise += 1;
                other.get_or_insert(n);
            }
            Cat::View => {}
            Cat::Reduce => {
                reduces += 1;
                other.get_or_insert(n);
            }
            Cat::MatMul | Cat::Concat | Cat::Pad | Cat::Gather => {
                heavies += 1;
                match heavy {
                    None => heavy = Some(n),
                    Some(_) => {
                        other.get_or_insert(n);
                    }
                }
            }
        }
    }
    if let Some(h) = heavy {
        if heavies > 1 || elementwise > 0 || reduces > 0 {
            let other = other.unwrap_or(h);
            return Err(Reject::NotAlone { heavy: h, other });
        }
        return match ctx.cat(root) {
            Cat::MatMul => gemm_operands_why(ctx, nodes).map(|_| KernelKind::MatMul),
            // Every other op is a view; views of the operands are loads.
            Cat::Concat => Ok(KernelKind::Concat),
            Cat::Pad => Ok(KernelKind::Pad),
            Cat::Gather => Ok(KernelKind::Gather),
            // A view of the heavy op's value: a kernel computes the heavy op alone.
            _ => Err(Reject::NotAlone {
                heavy: h,
                other: root,
            }),
        };
    }
    if reduces > 0 {
        return row_kernel_why(ctx, nodes).map(|_| KernelKind::Reduction);
    }
    Ok(if elementwise == 0 {
        KernelKind::Copy
    } else {
        KernelKind::Elementwise
    })
}

/// Whether a permute swaps the last two axes (and keeps the others).
pub(crate) fn is_transpose(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
        && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p)
}

/// The operand chains of a GEMM root: `[transpose]? reshape*` down to the stored buffer, and
/// every other op of the body on such a chain. Returns the transpose flags, or `None`.
pub(crate) fn gemm_flags(ctx: &Ctx, nodes: &[NodeId]) -> Option<[bool; 2]> {
    gemm_operands_why(ctx, nodes).ok()
}

/// [`gemm_flags`], saying which op of the body is off the operand chains when there are none.
fn gemm_operands_why(ctx: &Ctx, nodes: &[NodeId]) -> Result<[bool; 2], Reject> {
    let root = *nodes.last().ok_or(Reject::Empty)?;
    let mut on_chain: Vec<NodeId> = vec![root];
    let mut flags = [false; 2];
    for (i, o) in ctx.operands(root).into_iter().enumerate().take(2) {
        let mut cur = o;
        let mut first = true;
        while nodes.binary_search(&cur).is_ok() {
            match &ctx.graph.node(cur).op {
                Op::Permute { input, perm } if first && is_transpose(perm) => {
                    flags[i] = true;
                    on_chain.push(cur);
                    cur = *input;
                }
                Op::Reshape { input, .. } => {
                    on_chain.push(cur);
                    cur = *input;
                }
                _ => return Err(Reject::GemmOperand(cur)),
            }
            first = false;
        }
    }
    on_chain.sort_unstable();
    on_chain.dedup();
    match nodes.iter().find(|n| on_chain.binary_search(n).is_err()) {
        Some(&off) => Err(Reject::GemmOperand(off)),
        None => Ok(flags),
    }
}

/// Whether view `n`, between two row-level values, leaves every row's value at its own row:
/// a reshape (between row shapes it only inserts or drops size-1 axes), a permute that keeps the
/// order of the axes longer than 1, or an expand or slice that changes nothing. A permute that
/// reorders rows would make a row of the kernel read another row's reduction.
fn keeps_rows(ctx: &Ctx, n: NodeId) -> bool {
    let node = ctx.graph.node(n);
    match &node.op {
        Op::Reshape { .. } => true,
        Op::Permute { input, perm } => {
            let dims = ctx.shape(*input).dims();
            let moved: Vec<usize> = perm.iter().copied().filter(|&a| dims[a] > 1).collect();
            moved.windows(2).all(|w| w[0] < w[1])
        }
        _ => ctx.shape(n) == ctx.shape(ctx.operands(n)[0]),
    }
}

/// The rows a row kernel's body `nodes` reduces: its first reduction's input shape and
/// sorted axes (in a legal row body, every reduction's); `None` without a reduction.
pub(crate) fn rows_of(ctx: &Ctx, nodes: &[NodeId]) -> Option<(Shape, Vec<usize>)> {
    nodes.iter().find_map(|&n| match &ctx.graph.node(n).op {
        Op::Reduce { input, axes, .. } => {
            let mut axes = axes.to_vec();
            axes.sort_unstable();
            Some((ctx.shape(*input).clone(), axes))
        }
        _ => None,
    })
}

/// The two shapes of a row value of rows `(s, axes)`: the reduced shape with the reduced axes
/// kept as 1 (`keepdim`), and without them.
pub(crate) fn row_shapes(s: &Shape, axes: &[usize]) -> (Shape, Shape) {
    let dims = s.dims().iter().enumerate();
    let keep = dims
        .clone()
        .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
        .collect();
    let drop = dims
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .collect();
    (Shape(keep), Shape(drop))
}

/// The row-kernel rules of the module docs.
fn row_kernel_why(ctx: &Ctx, nodes: &[NodeId]) -> Result<(), Reject> {
    let mut row: Option<(NodeId, Shape, Vec<usize>)> = None;
    for &n in nodes {
        if let Op::Reduce { input, axes, .. } = &ctx.graph.node(n).op {
            let mut a: Vec<usize> = axes.to_vec();
            a.sort_unstable();
            let s = ctx.shape(*input);
            match &row {
                None => row = Some((n, s.clone(), a)),
                Some((_, s0, a0)) if s0 == s && *a0 == a => {}
                Some((first, ..)) => {
                    return Err(Reject::Rows {
                        first: *first,
                        second: n,
                    })
                }
            }
        }
    }
    let Some((_, s, axes)) = row else {
        return Err(Reject::Empty);
    };
    let (keep, drop) = row_shapes(&s, &axes);
    let is_row = |sh: &Shape| *sh == keep || *sh == drop;
    let in_body = |o: NodeId| nodes.binary_search(&o).is_ok();
    for &n in nodes {
        let sh = ctx.shape(n);
        match ctx.cat(n) {
            Cat::Reduce => {}
            Cat::View => {
                if !view_of_input(ctx, nodes, n) {
                    let o = ctx.operands(n)[0];
                    let between_rows = is_row(sh) && is_row(ctx.shape(o)) && keeps_rows(ctx, n);
                    // A row's value expanded over the reduced axes (a `keepdim` value to the
                    // reduced input's shape): each element reads its own row's value, as with
                    // an elementwise op's implicit broadcasting.
                    let broadcast = matches!(ctx.graph.node(n).op, Op::Expand { .. })
                        && *ctx.shape(o) == keep
                        && *sh == s;
                    if !(between_rows || broadcast) {
                        return Err(Reject::View(n));
                    }
                }
            }
            Cat::Elementwise => {
                let element_level = *sh == s;
                if !element_level && !is_row(sh) {
                    return Err(Reject::Shape(n));
                }
                for o in ctx.operands(n) {
                    if !in_body(o) || view_of_input(ctx, nodes, o) {
                        continue;
                    }
                    let so = ctx.shape(o);
                    let ok = if element_level {
                        *so == s || *so == keep
                    } else {
                        is_row(so)
                    };
                    if !ok {
                        return Err(Reject::Level { op: n, operand: o });
                    }
                }
            }
            // Not reached: `classify_why` sends bodies with a heavy op elsewhere.
            _ => return Err(Reject::Shape(n)),
        }
    }
    Ok(())
}
