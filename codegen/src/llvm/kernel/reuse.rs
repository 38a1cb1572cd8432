//! Reuse across stages: a value a store stage recomputes from an earlier reduction stage of
//! the same kernel (softmax's `exp(x - max)`: summed by one stage, divided and stored by the
//! last) is kept per element in a small stack buffer by the reduction stage and loaded back by
//! the store stage, instead of being computed twice.
//!
//! Only values whose expression holds a transcendental op are kept (recomputing a load and a
//! subtraction is cheaper than a round trip through memory), only between stages over the same
//! single inner dim of at most [`MAX_BYTES`] of scratch, and never through a load of a buffer
//! the kernel writes. The stored value is the one the store stage would compute (same
//! instructions on the same inputs), so results do not change, bit for bit.

use smelt_ir::{BinaryOp, UnaryOp};
use smelt_passes::kernel::{Access, Combiner, Inst, InstOp, Kernel, StageEffect, Ty, ValueId};
use std::collections::{HashMap, HashSet};

/// The largest per-element scratch buffer (bytes), on the kernel's stack.
pub(crate) const MAX_BYTES: usize = 32 << 10;

/// One kept value: computed by `from` in reduction stage `stage` (over `n` elements), read back
/// as `to` by a later store stage.
pub(crate) struct Kept {
    pub from: ValueId,
    pub to: ValueId,
    pub n: usize,
    pub ty: Ty,
}

pub(crate) fn transcendental(op: &InstOp) -> bool {
    matches!(
        op,
        InstOp::Unary(
            UnaryOp::Exp
                | UnaryOp::Log
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Sin
                | UnaryOp::Cos
                | UnaryOp::Sigmoid,
            _
        )
    )
}

pub(crate) fn operands(op: &InstOp) -> Vec<ValueId> {
    match op {
        InstOp::LoopVar(_) | InstOp::IndexConst(_) | InstOp::Const(_) => vec![],
        InstOp::Load { access, .. } => match access {
            Access::Affine { .. } => vec![],
            Access::Computed(v) => vec![*v],
        },
        InstOp::IndexAdd(a, b)
        | InstOp::IndexMul(a, b)
        | InstOp::IndexDiv(a, b)
        | InstOp::IndexRem(a, b)
        | InstOp::IndexLt(a, b)
        | InstOp::Binary(_, a, b) => vec![*a, *b],
        InstOp::ToIndex(a) | InstOp::Unary(_, a) | InstOp::Cast(a) => vec![*a],
        InstOp::Select(c, a, b) => vec![*c, *a, *b],
    }
}

/// Structural keys of a stage body's values, interned in `ids`: equal keys, equal values.
fn keys(
    kernel: &Kernel,
    stage: usize,
    body: &[Inst],
    ids: &mut HashMap<String, usize>,
) -> HashMap<ValueId, usize> {
    let mut out: HashMap<ValueId, usize> = HashMap::new();
    for inst in body {
        let k = |v: &ValueId| match out.get(v) {
            Some(id) => format!("#{id}"),
            // Defined outside this body: an earlier stage's result, the same everywhere.
            None => format!("v{}", v.0),
        };
        let ops: Vec<String> = operands(&inst.op).iter().map(k).collect();
        let head = match &inst.op {
            // A buffer this kernel writes may change between stages: never shared.
            InstOp::Load { buffer, .. } if kernel.writes.contains(buffer) => {
                format!("written{stage}:{}", inst.dst.0)
            }
            InstOp::Load {
                buffer,
                access: Access::Affine { offset, strides },
            } => format!("ld{}@{offset}{strides:?}", buffer.0),
            InstOp::Load { buffer, .. } => format!("ldc{}", buffer.0),
            InstOp::LoopVar(d) => format!("lv{d}"),
            InstOp::IndexConst(c) => format!("ic{c}"),
            InstOp::Const(s) => format!("c{s:?}"),
            InstOp::IndexAdd(..) => "ia".into(),
            InstOp::IndexMul(..) => "im".into(),
            InstOp::IndexDiv(..) => "id".into(),
            InstOp::IndexRem(..) => "ir".into(),
            InstOp::IndexLt(..) => "il".into(),
            InstOp::ToIndex(..) => "ti".into(),
            InstOp::Unary(op, _) => format!("u{op:?}"),
            InstOp::Binary(op, ..) => format!("b{op:?}"),
            InstOp::Select(..) => "sel".into(),
            InstOp::Cast(..) => "cast".into(),
        };
        let key = format!("{head}:{:?}({})", inst.ty, ops.join(","));
        let n = ids.len();
        let id = *ids.entry(key).or_insert(n);
        out.insert(inst.dst, id);
    }
    out
}

/// Every stage's structural keys ([`keys`]), interned together: equal keys in two stages,
/// equal values.
fn all_keys(kernel: &Kernel) -> Vec<HashMap<ValueId, usize>> {
    let mut ids = HashMap::new();
    kernel
        .stages
        .iter()
        .enumerate()
        .map(|(s, st)| keys(kernel, s, &st.body, &mut ids))
        .collect()
}

/// The values `kernel`'s store stages can read back from its reduction stages.
pub(crate) fn plan(kernel: &Kernel) -> Vec<Kept> {
    let stage_keys = all_keys(kernel);
    let mut kept = Vec::new();
    for (s, st) in kernel.stages.iter().enumerate() {
        let StageEffect::Store(stores) = &st.effect else {
            continue;
        };
        let [n] = st.inner[..] else { continue };
        // Values of this stage computed, identically, by an earlier reduction stage over the
        // same dim (the latest such stage).
        let mut found: HashMap<ValueId, ValueId> = HashMap::new();
        for (r, rst) in kernel.stages[..s].iter().enumerate() {
            if !matches!(rst.effect, StageEffect::Reduce { .. }) || rst.inner != st.inner {
                continue;
            }
            let by_key: HashMap<usize, ValueId> =
                stage_keys[r].iter().map(|(&v, &k)| (k, v)).collect();
            for (v, k) in &stage_keys[s] {
                if let Some(&from) = by_key.get(k) {
                    found.insert(*v, from);
                }
            }
        }
        // Costly: the value's expression (within the stage) holds a transcendental op.
        let mut costly: HashMap<ValueId, bool> = HashMap::new();
        for inst in &st.body {
            let c = transcendental(&inst.op)
                || operands(&inst.op)
                    .iter()
                    .any(|o| costly.get(o).copied().unwrap_or(false));
            costly.insert(inst.dst, c);
        }
        // Keep the shared, costly values that something unshared (an instruction or a store)
        // uses: the frontier of the shared part.
        let mut frontier: Vec<ValueId> = Vec::new();
        for inst in &st.body {
            if found.contains_key(&inst.dst) {
                continue;
            }
            frontier.extend(operands(&inst.op));
        }
        frontier.extend(stores.iter().map(|s| s.value));
        let mut bytes = 0usize;
        for inst in &st.body {
            let v = inst.dst;
            let Some(&from) = found.get(&v) else { continue };
            let Ty::Data(d) = inst.ty else { continue };
            if !d.is_float() || !costly[&v] || !frontier.contains(&v) {
                continue;
            }
            if kept.iter().any(|k: &Kept| k.to == v) {
                continue;
            }
            let size = n.saturating_mul(if d == smelt_ir::DType::F64 { 8 } else { 4 });
            if bytes.saturating_add(size) > MAX_BYTES {
                continue;
            }
            bytes += size;
            kept.push(Kept {
                from,
                to: v,
                n,
                ty: inst.ty,
            });
        }
    }
    kept
}

/// The values of `kernel` known to be `≤ 0` or NaN: `x - max(x)`, a subtraction whose right
/// operand is the result of an earlier `Max` reduction stage over the same inner dims and whose
/// left operand is, structurally ([`keys`]), the very value that stage reduced. Every element
/// `x` of the row is at most the row's maximum (or the maximum is NaN), so the difference is
/// `≤ 0` (IEEE subtraction of `a ≤ b` never rounds above zero), `-inf` or NaN. `exp` of such a
/// value needs no upper limit (`Emitter::exp_poly_nonpositive`): softmax's `exp(x - max(x))`
/// saves one vector `min` per 16 elements, with the same bits.
pub(crate) fn nonpositive(kernel: &Kernel) -> HashSet<ValueId> {
    let stage_keys = all_keys(kernel);
    let mut out = HashSet::new();
    for (s, st) in kernel.stages.iter().enumerate() {
        for inst in &st.body {
            let (Ty::Data(d), InstOp::Binary(BinaryOp::Sub, a, m)) = (inst.ty, &inst.op) else {
                continue;
            };
            if !d.is_float() {
                continue;
            }
            let reduced = kernel.stages[..s].iter().enumerate().any(|(r, rst)| {
                let StageEffect::Reduce {
                    value,
                    combiner: Combiner::Max,
                    result,
                    ..
                } = rst.effect
                else {
                    return false;
                };
                result == *m
                    && rst.inner == st.inner
                    && matches!(
                        (stage_keys[r].get(&value), stage_keys[s].get(a)),
                        (Some(x), Some(y)) if x == y
                    )
            });
            if reduced {
                out.insert(inst.dst);
            }
        }
    }
    out
}
