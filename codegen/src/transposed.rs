//! Which loads of an elementwise kernel read their operand transposed: the one test both code
//! generators tile by (the CPU's `llvm::kernel` tiles in registers, CUDA's `cuda::tiles` in
//! shared memory).
//!
//! An elementwise kernel walks its output with the last outer dim innermost (a CPU vector
//! loop, consecutive GPU threads). A load whose stride is 1 along the second-to-last outer dim
//! and `min_step_bytes` or more along the last reads its operand across its rows: each element
//! along an output row comes from another cache line (another memory sector on a GPU). Both
//! code generators then compute square tiles, reading the operand's part of a tile along its
//! own rows and transposing it, so that every access is contiguous.

use smelt_ir::DType;
use smelt_passes::kernel::{Access, BufferId, InstOp, Kernel, StageEffect};

/// Whether `kernel` is elementwise (every stage a store with no inner dims), so that its
/// stores walk its last outer dim: the loop the CPU's streaming stores peel, and the one both
/// code generators tile.
pub fn stores_walk_last_outer_dim(kernel: &Kernel) -> bool {
    kernel
        .stages
        .iter()
        .all(|s| s.inner.is_empty() && matches!(s.effect, StageEffect::Store(_)))
}

/// The transposed loads of `kernel`, each a distinct (buffer, access), if `kernel` is an
/// elementwise kernel ([`stores_walk_last_outer_dim`]) of at least two outer dims whose every
/// store walks the last one contiguously, and it has any: loads with stride 1 along the
/// second-to-last outer dim and at least `min_step_bytes` bytes along the last (`dtype` gives
/// a buffer's dtype). `None` otherwise.
pub fn transposed_reads(
    kernel: &Kernel,
    dtype: impl Fn(BufferId) -> Option<DType>,
    min_step_bytes: u64,
) -> Option<Vec<(BufferId, Access)>> {
    let n = kernel.outer.len();
    if n < 2 || !stores_walk_last_outer_dim(kernel) {
        return None;
    }
    let (last, rows) = (n - 1, n - 2);
    let contiguous = kernel
        .stages
        .iter()
        .filter_map(|stage| match &stage.effect {
            StageEffect::Store(stores) => Some(stores),
            StageEffect::Reduce { .. } => None,
        })
        .flatten()
        .all(|st| {
            matches!(&st.access, Access::Affine { strides, .. } if strides.get(last) == Some(&1))
        });
    if !contiguous {
        return None;
    }
    let mut reads: Vec<(BufferId, Access)> = Vec::new();
    for inst in kernel.stages.iter().flat_map(|stage| &stage.body) {
        let InstOp::Load { buffer, access } = &inst.op else {
            continue;
        };
        let Access::Affine { strides, .. } = access else {
            continue;
        };
        let bytes = dtype(*buffer)?.size_bytes() as u64;
        let step = strides[last];
        if strides[rows] == 1
            && step > 0
            && (step as u64).saturating_mul(bytes) >= min_step_bytes
            && !reads.iter().any(|(b, a)| b == buffer && a == access)
        {
            reads.push((*buffer, access.clone()));
        }
    }
    (!reads.is_empty()).then_some(reads)
}
