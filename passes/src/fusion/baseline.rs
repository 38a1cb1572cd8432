//! The greedy producer–consumer baseline: walk ops in order; an op joins the kernels of those
//! of its producers that have no other user (and are not outputs) when the union is still a
//! legal kernel; otherwise it starts a kernel of its own. No recomputation, no multi-output
//! kernels. Costed by the same model as the extracted plan.

use super::extract::Selection;
use super::kernel::Ctx;
use super::lang::{BodyId, BodyTable};

/// The baseline selection: materialised value → the body computing it.
pub(crate) fn greedy_selection(ctx: &Ctx, table: &mut BodyTable) -> Selection {
    let g = &ctx.graph;
    let mut kernel_of: Vec<Option<BodyId>> = vec![None; g.len()];
    for id in g.ids() {
        if !ctx.live[id.index()] || ctx.is_leaf(id) {
            continue;
        }
        let Some(mut body) = table.intern(ctx, vec![id]) else {
            continue;
        };
        let mut operands = ctx.operands(id);
        operands.sort_unstable();
        operands.dedup();
        for o in operands {
            if ctx.uses[o.index()] != 1 {
                continue;
            }
            let Some(p) = kernel_of[o.index()] else {
                continue;
            };
            if let Some(m) = table.merge(ctx, body, p) {
                body = m;
                kernel_of[o.index()] = None;
            }
        }
        kernel_of[id.index()] = Some(body);
    }
    g.ids()
        .filter_map(|id| kernel_of[id.index()].map(|b| (id, b)))
        .collect()
}
