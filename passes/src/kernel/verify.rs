//! [`verify_program`]: the invariants of a [`Program`] that backends rely on.
//!
//! - buffers are numbered by position, constant data matches its declaration, outputs exist;
//! - every kernel loads only from its `reads` and stores only to its `writes` (temps only);
//!   a temp is written by an earlier step before any step reads it;
//! - SSA: each value defined once, used only after its definition in the same stage (or, for
//!   a reduction result, in a later stage); loop variables exist;
//! - types: index ops on [`Ty::Index`], `IndexLt` gives bool, `ToIndex` of i32/i64, `Select`
//!   on a bool with equal branch types, data ops typed as the IR's typing rule says
//!   ([`smelt_ir::infer::infer`]), loads and stores of the buffer's dtype, a reduction value of
//!   its accumulator dtype;
//! - affine accesses have one stride per loop variable and stay inside their buffer over the
//!   whole loop nest; GEMM operands stay inside theirs and their shapes multiply;
//! - a kernel touching a buffer of more than `2^31 - 1` bytes uses 64-bit indices.

use super::ir::*;
use crate::PassError;
use smelt_ir::{DType, NodeId, Op, TensorType};
use std::collections::HashMap;

fn fail(step: &str, message: impl std::fmt::Display) -> PassError {
    PassError::Internal {
        pass: "verify_program",
        message: format!("{step}: {message}"),
    }
}

/// Checks `program`; the first problem found is the error.
pub fn verify_program(program: &Program) -> Result<(), PassError> {
    for (i, b) in program.buffers.iter().enumerate() {
        if b.id.0 as usize != i {
            return Err(fail(
                "buffers",
                format!("{} declared at position {i}", b.id),
            ));
        }
        if let BufferKind::Constant(t) = &b.kind {
            if t.dtype() != b.dtype || t.numel() != b.numel {
                return Err(fail("buffers", format!("{}: constant data differs", b.id)));
            }
        }
    }
    let mut written = vec![false; program.buffers.len()];
    for (i, b) in program.buffers.iter().enumerate() {
        written[i] = b.kind != BufferKind::Temp;
    }
    let decl = |id: BufferId, step: &str| {
        program
            .buffers
            .get(id.0 as usize)
            .ok_or_else(|| fail(step, format!("no buffer {id}")))
    };
    for s in &program.steps {
        match s {
            Step::Kernel(k) => {
                for &r in &k.reads {
                    decl(r, &k.name)?;
                    if !written[r.0 as usize] {
                        return Err(fail(&k.name, format!("reads {r} before it is written")));
                    }
                }
                for &w in &k.writes {
                    if decl(w, &k.name)?.kind != BufferKind::Temp {
                        return Err(fail(&k.name, format!("writes {w}, which is not a temp")));
                    }
                }
                let limit = i32::MAX as usize;
                let big = k.reads.iter().chain(&k.writes).any(|&b| {
                    let d = &program.buffers[b.0 as usize];
                    d.numel.saturating_mul(d.dtype.size_bytes()) > limit
                });
                if big && k.index_width != IndexWidth::I64 {
                    return Err(fail(
                        &k.name,
                        "a buffer over 2^31 - 1 bytes needs i64 indices",
                    ));
                }
                verify_kernel(program, k).map_err(|m| fail(&k.name, m))?;
                for &w in &k.writes {
                    written[w.0 as usize] = true;
                }
            }
            Step::Gemm(g) => {
                for o in [&g.a, &g.b] {
                    let d = decl(o.buffer, &g.name)?;
                    if !written[o.buffer.0 as usize] {
                        return Err(fail(
                            &g.name,
                            format!("reads {} before it is written", o.buffer),
                        ));
                    }
                    if d.dtype != g.dtype || o.shape.len() != o.strides.len() || o.shape.is_empty()
                    {
                        return Err(fail(&g.name, format!("bad operand {}", o.buffer)));
                    }
                    if !o.shape.contains(&0) {
                        let last = o.offset
                            + o.shape
                                .iter()
                                .zip(&o.strides)
                                .map(|(&n, &s)| (n - 1) * s)
                                .sum::<usize>();
                        if last >= d.numel {
                            return Err(fail(
                                &g.name,
                                format!("operand {} read out of bounds", o.buffer),
                            ));
                        }
                    }
                }
                let out = decl(g.out, &g.name)?;
                let ta = TensorType::new(g.dtype, g.a.shape.as_slice());
                let tb = TensorType::new(g.dtype, g.b.shape.as_slice());
                let want = smelt_ir::infer::infer(&Op::MatMul(NodeId(0), NodeId(1)), |n| {
                    if n.0 == 0 {
                        &ta
                    } else {
                        &tb
                    }
                })
                .map_err(|e| fail(&g.name, e))?;
                if want.shape.dims() != g.out_shape.as_slice()
                    || out.numel != want.shape.numel()
                    || out.dtype != g.dtype
                    || out.kind != BufferKind::Temp
                {
                    return Err(fail(
                        &g.name,
                        format!("output {} does not hold {want}", g.out),
                    ));
                }
                written[g.out.0 as usize] = true;
            }
        }
    }
    for (name, b) in &program.outputs {
        decl(*b, "outputs")?;
        if !written[b.0 as usize] {
            return Err(fail("outputs", format!("{name:?} = {b} is never written")));
        }
    }
    Ok(())
}

/// The type of an op on data operands, by the IR's typing rule.
fn data_type(op: &Op, args: &[DType]) -> Result<DType, String> {
    let tys: Vec<TensorType> = args.iter().map(|&d| TensorType::new(d, [])).collect();
    smelt_ir::infer::infer(op, |n| &tys[n.index()])
        .map(|t| t.dtype)
        .map_err(|e| e.to_string())
}

fn verify_kernel(program: &Program, k: &Kernel) -> Result<(), String> {
    // Types of reduction results of earlier stages.
    let mut results: HashMap<ValueId, Ty> = HashMap::new();
    let mut defined_anywhere: HashMap<ValueId, ()> = HashMap::new();
    for (si, stage) in k.stages.iter().enumerate() {
        let vars = k.outer.len() + stage.inner.len();
        let ext: Vec<usize> = k.outer.iter().chain(&stage.inner).copied().collect();
        let mut types: HashMap<ValueId, Ty> = results.clone();
        let check_access = |buffer: BufferId, a: &Access, types: &HashMap<ValueId, Ty>| {
            let d = program
                .buffers
                .get(buffer.0 as usize)
                .ok_or_else(|| format!("no buffer {buffer}"))?;
            match a {
                Access::Computed(v) => match types.get(v) {
                    Some(Ty::Index) => Ok(d.dtype),
                    _ => Err(format!("address {v} is not a defined index value")),
                },
                Access::Affine { offset, strides } => {
                    if strides.len() != vars {
                        return Err(format!(
                            "{buffer}: {} strides for {vars} loop variables",
                            strides.len()
                        ));
                    }
                    if ext.contains(&0) {
                        return Ok(d.dtype);
                    }
                    let (mut lo, mut hi) = (*offset as i128, *offset as i128);
                    for (&s, &e) in strides.iter().zip(&ext) {
                        let span = s as i128 * (e as i128 - 1);
                        if span < 0 {
                            lo += span
                        } else {
                            hi += span
                        }
                    }
                    if lo < 0 || hi >= d.numel as i128 {
                        return Err(format!(
                            "{buffer}: affine access [{lo}, {hi}] outside {} elements",
                            d.numel
                        ));
                    }
                    Ok(d.dtype)
                }
            }
        };
        for inst in &stage.body {
            if types.contains_key(&inst.dst) || defined_anywhere.contains_key(&inst.dst) {
                return Err(format!("stage {si}: {} defined twice", inst.dst));
            }
            let ty = |v: &ValueId| {
                types
                    .get(v)
                    .copied()
                    .ok_or_else(|| format!("stage {si}: {v} used before its definition"))
            };
            let index = |v: &ValueId| match ty(v)? {
                Ty::Index => Ok(()),
                t => Err(format!("{v} is {t}, not an index")),
            };
            let data = |v: &ValueId| match ty(v)? {
                Ty::Data(d) => Ok(d),
                Ty::Index => Err(format!("{v} is an index, not data")),
            };
            let want: Ty = match &inst.op {
                InstOp::LoopVar(d) if *d < vars => Ty::Index,
                InstOp::LoopVar(d) => return Err(format!("loop variable d{d} of {vars}")),
                InstOp::IndexConst(_) => Ty::Index,
                InstOp::IndexAdd(a, b)
                | InstOp::IndexMul(a, b)
                | InstOp::IndexDiv(a, b)
                | InstOp::IndexRem(a, b) => {
                    index(a)?;
                    index(b)?;
                    Ty::Index
                }
                InstOp::IndexLt(a, b) => {
                    index(a)?;
                    index(b)?;
                    Ty::Data(DType::Bool)
                }
                InstOp::ToIndex(a) => match data(a)? {
                    DType::I32 | DType::I64 => Ty::Index,
                    d => return Err(format!("to_index of {d}")),
                },
                InstOp::Const(_) => match inst.ty {
                    Ty::Data(_) => inst.ty,
                    Ty::Index => return Err("a data constant typed index".into()),
                },
                InstOp::Load { buffer, access } => {
                    if !k.reads.contains(buffer) {
                        return Err(format!("loads {buffer}, which is not in reads"));
                    }
                    Ty::Data(check_access(*buffer, access, &types)?)
                }
                InstOp::Unary(u, a) => Ty::Data(data_type(&Op::Unary(*u, NodeId(0)), &[data(a)?])?),
                InstOp::Binary(b, x, y) => Ty::Data(data_type(
                    &Op::Binary(*b, NodeId(0), NodeId(1)),
                    &[data(x)?, data(y)?],
                )?),
                InstOp::Select(c, a, b) => {
                    if data(c)? != DType::Bool {
                        return Err(format!("select condition {c} is not bool"));
                    }
                    let (ta, tb) = (ty(a)?, ty(b)?);
                    if ta != tb {
                        return Err(format!("select between {ta} and {tb}"));
                    }
                    ta
                }
                InstOp::Cast(a) => {
                    data(a)?;
                    match inst.ty {
                        Ty::Data(_) => inst.ty,
                        Ty::Index => return Err("a cast to index (use to_index)".into()),
                    }
                }
            };
            if want != inst.ty {
                return Err(format!(
                    "{} is declared {} but computes {want}",
                    inst.dst, inst.ty
                ));
            }
            types.insert(inst.dst, want);
        }
        match &stage.effect {
            StageEffect::Store(stores) => {
                for st in stores {
                    if !k.writes.contains(&st.buffer) {
                        return Err(format!("stores {}, which is not in writes", st.buffer));
                    }
                    let dt = check_access(st.buffer, &st.access, &types)?;
                    if types.get(&st.value) != Some(&Ty::Data(dt)) {
                        return Err(format!("stores {} into a {dt} buffer", st.value));
                    }
                }
            }
            StageEffect::Reduce {
                value,
                combiner,
                acc,
                result,
            } => {
                if types.get(value) != Some(&Ty::Data(*acc)) {
                    return Err(format!("reduces {value}, which is not a {acc} value"));
                }
                if types.contains_key(result) {
                    return Err(format!("reduction result {result} defined twice"));
                }
                let rt = match combiner {
                    Combiner::ArgMax | Combiner::ArgMin => DType::I64,
                    _ => *acc,
                };
                results.insert(*result, Ty::Data(rt));
            }
        }
        for v in types.keys() {
            defined_anywhere.insert(*v, ());
        }
    }
    Ok(())
}
