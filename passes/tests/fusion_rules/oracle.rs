//! An independent statement of what one kernel may compute (the kernel rules of
//! `fusion/kernel.rs`, written again from its module docs, not calling it): `eval_plan` runs a
//! plan op by op, so it catches dataflow errors (a value read before it is materialised) but
//! not a kernel no backend could run as one loop nest; this check does.

use smelt_ir::{Graph, NodeId, Op, Shape};
use smelt_passes::fusion::{FusionPlan, Kernel, KernelKind};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Cat {
    Leaf,
    Elementwise,
    View,
    Reduce,
    MatMul,
    Other,
}

fn cat(g: &Graph, n: NodeId) -> Cat {
    match &g.node(n).op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => Cat::Leaf,
        Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast { .. } => Cat::Elementwise,
        Op::Reshape { .. } | Op::Permute { .. } | Op::Expand { .. } | Op::Slice { .. } => Cat::View,
        Op::Reduce { .. } => Cat::Reduce,
        Op::MatMul(..) => Cat::MatMul,
        Op::Concat { .. } | Op::Pad { .. } | Op::Gather { .. } | Op::IndexSelect { .. } => {
            Cat::Other
        }
    }
}

/// Checks every kernel of `plan` (see the module docs); the error names the kernel.
pub fn check_kernels(g: &Graph, plan: &FusionPlan) -> Result<(), String> {
    // Values computed from a reduction through elementwise ops and views: never recomputed.
    let mut after_reduce = vec![false; g.len()];
    for id in g.ids() {
        after_reduce[id.index()] = match cat(g, id) {
            Cat::Reduce => true,
            Cat::Elementwise | Cat::View => g
                .node(id)
                .op
                .operands()
                .iter()
                .any(|o| after_reduce[o.index()]),
            _ => false,
        };
    }
    let mut computed = vec![0usize; g.len()];
    for k in &plan.kernels {
        for &(n, _) in &k.ops {
            computed[n.index()] += 1;
        }
    }
    for k in &plan.kernels {
        check_kernel(g, k).map_err(|e| format!("k{} ({}): {e}", k.id, k.kind.name()))?;
        for &(n, _) in &k.ops {
            if computed[n.index()] > 1 && after_reduce[n.index()] {
                return Err(format!(
                    "k{}: {n} is computed from a reduction and recomputed by several kernels",
                    k.id
                ));
            }
        }
    }
    Ok(())
}

fn check_kernel(g: &Graph, k: &Kernel) -> Result<(), String> {
    let ops: Vec<NodeId> = k.ops.iter().map(|&(n, _)| n).collect();
    if ops.is_empty() || ops.windows(2).any(|w| w[0] >= w[1]) {
        return Err("ops must be non-empty and in node order".into());
    }
    let inside = |n: NodeId| ops.binary_search(&n).is_ok();
    let outs: Vec<NodeId> = k.outputs.iter().map(|o| o.value).collect();
    if outs.is_empty() || outs.iter().any(|&o| !inside(o)) {
        return Err("outputs must be ops of the kernel".into());
    }
    // Every op feeds an output through ops of the kernel.
    let mut useful: Vec<NodeId> = outs.clone();
    for &n in ops.iter().rev() {
        if useful.contains(&n) {
            for o in g.node(n).op.operands() {
                if inside(o) && !useful.contains(&o) {
                    useful.push(o);
                }
            }
        }
    }
    if useful.len() != ops.len() {
        return Err("an op feeds no output of the kernel".into());
    }
    let count = |c: Cat| ops.iter().filter(|&&n| cat(g, n) == c).count();
    let (elementwise, views, reduces) = (
        count(Cat::Elementwise),
        count(Cat::View),
        count(Cat::Reduce),
    );
    let heavy = count(Cat::MatMul) + count(Cat::Other);
    // Several outputs: an elementwise or copy kernel writing them over one index space, or a
    // row kernel storing row values only (checked in `row_kernel`).
    let several = match k.kind {
        KernelKind::Elementwise | KernelKind::Copy => {
            outs.iter().all(|&o| g.ty(o).shape == g.ty(outs[0]).shape)
        }
        KernelKind::Reduction => true,
        _ => false,
    };
    if outs.len() > 1 && !several {
        return Err(
            "only elementwise kernels over one index space and row kernels have several outputs"
                .into(),
        );
    }
    if outs.len() == 1 && outs[0] != *ops.last().expect("non-empty") {
        return Err("a single-output kernel materialises its last op".into());
    }
    match k.kind {
        KernelKind::Copy => (views == ops.len())
            .then_some(())
            .ok_or_else(|| "a copy kernel has views only".to_string()),
        KernelKind::Elementwise => (elementwise > 0 && elementwise + views == ops.len())
            .then_some(())
            .ok_or_else(|| "an elementwise kernel has elementwise ops and views only".to_string()),
        KernelKind::Reduction if reduces > 0 && heavy == 0 => row_kernel(g, k, &ops),
        KernelKind::MatMul if heavy == 1 && count(Cat::MatMul) == 1 => gemm(g, k, &ops),
        KernelKind::Concat | KernelKind::Pad | KernelKind::Gather
            if heavy == 1 && count(Cat::Other) == 1 && views + 1 == ops.len() =>
        {
            Ok(())
        }
        _ => Err("its ops do not match its kind".into()),
    }
}

/// Whether `n` is a view whose view chain inside the kernel starts at a buffer it reads.
fn view_of_input(g: &Graph, ops: &[NodeId], n: NodeId) -> bool {
    let mut cur = n;
    while cat(g, cur) == Cat::View {
        let o = g.node(cur).op.operands()[0];
        if ops.binary_search(&o).is_err() {
            return true;
        }
        cur = o;
    }
    false
}

fn row_kernel(g: &Graph, k: &Kernel, ops: &[NodeId]) -> Result<(), String> {
    let mut row: Option<(Shape, Vec<usize>)> = None;
    for &n in ops {
        if let Op::Reduce { input, axes, .. } = &g.node(n).op {
            let mut a = axes.to_vec();
            a.sort_unstable();
            let s = g.ty(*input).shape.clone();
            match &row {
                None => row = Some((s, a)),
                Some((s0, a0)) if *s0 == s && *a0 == a => {}
                Some(_) => return Err(format!("{n} reduces another shape or other axes")),
            }
        }
    }
    let (s, axes) = row.ok_or("no reduction")?;
    if k.index_space != s || k.reduce_axes != axes {
        return Err("index space or reduced axes misreported".into());
    }
    let keep = Shape::new(
        &s.dims()
            .iter()
            .enumerate()
            .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
            .collect::<Vec<_>>(),
    );
    let drop = Shape::new(
        &s.dims()
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .collect::<Vec<_>>(),
    );
    let is_row = |sh: &Shape| *sh == keep || *sh == drop;
    if k.outputs.len() > 1 && k.outputs.iter().any(|o| !is_row(&g.ty(o.value).shape)) {
        return Err("a row kernel with several outputs stores row values only".into());
    }
    for &n in ops {
        let sh = &g.ty(n).shape;
        match cat(g, n) {
            Cat::Reduce => {}
            Cat::View if view_of_input(g, ops, n) => {}
            Cat::View => {
                let o = g.node(n).op.operands()[0];
                // A `keepdim` row value expanded to the reduced input's shape is the implicit
                // broadcast written out: each element reads its own row's value.
                let broadcast =
                    matches!(g.node(n).op, Op::Expand { .. }) && g.ty(o).shape == keep && *sh == s;
                if !broadcast && (!is_row(sh) || !is_row(&g.ty(o).shape)) {
                    return Err(format!(
                        "{n} is a view inside the kernel between non-row shapes"
                    ));
                }
            }
            Cat::Elementwise => {
                let element = *sh == s;
                if !element && !is_row(sh) {
                    return Err(format!("{n} is at neither element nor row level"));
                }
                for o in g.node(n).op.operands() {
                    if ops.binary_search(&o).is_err() || view_of_input(g, ops, o) {
                        continue;
                    }
                    let so = &g.ty(o).shape;
                    if !(if element {
                        *so == s || *so == keep
                    } else {
                        is_row(so)
                    }) {
                        return Err(format!("{n} reads {o} at a level it cannot"));
                    }
                }
            }
            _ => return Err(format!("{n} cannot be part of a row kernel")),
        }
    }
    Ok(())
}

fn gemm(g: &Graph, k: &Kernel, ops: &[NodeId]) -> Result<(), String> {
    let root = *ops.last().expect("non-empty");
    let Op::MatMul(a, b) = g.node(root).op else {
        return Err("the GEMM is not the kernel's last op".into());
    };
    let mut on_chain = vec![root];
    for (i, operand) in [a, b].into_iter().enumerate() {
        let mut cur = operand;
        let mut flag = false;
        let mut first = true;
        while ops.binary_search(&cur).is_ok() {
            if !on_chain.contains(&cur) {
                on_chain.push(cur);
            }
            cur = match &g.node(cur).op {
                Op::Permute { input, perm } if first => {
                    let r = perm.len();
                    let swap = r >= 2
                        && perm[r - 2] == r - 1
                        && perm[r - 1] == r - 2
                        && (0..r - 2).all(|j| perm[j] == j);
                    if !swap {
                        return Err(format!("operand {i} permuted other than by a transpose"));
                    }
                    flag = true;
                    *input
                }
                Op::Reshape { input, .. } => *input,
                _ => {
                    return Err(format!(
                        "operand {i} read through more than a transpose and reshapes"
                    ))
                }
            };
            first = false;
        }
        if k.transpose[i] != flag {
            return Err(format!("transpose flag of operand {i} misreported"));
        }
    }
    (on_chain.len() == ops.len())
        .then_some(())
        .ok_or_else(|| "an op is on no operand chain".to_string())
}
