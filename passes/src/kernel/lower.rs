//! Lowering a [`FusionPlan`] to a [`Program`].
//!
//! - **Buffers**: every graph input and parameter (node order), every constant a kernel reads
//!   through memory (1-element constants read by loop kernels are `Const` immediates instead),
//!   then one `Temp` per materialised value, in kernel order.
//! - **Elementwise, copy, concat, pad, gather kernels**: `outer` is the output shape, one store
//!   stage without inner dims. Multi-output (sibling) kernels store every output there.
//! - **Row kernels**: `outer` = the kept dims of the reduced shape, every reduction a stage over
//!   the reduced dims (in node order), then a store stage (over the reduced dims when the output
//!   is element-level, none when it is row-level). Accumulators: f32 for f16/bf16/f32, f64 for
//!   f64, i64 for bool and integers; `mean` is a `Sum` divided by the count in the accumulator
//!   dtype, then cast; `keepdim` only changes the index at which the row value is read.
//! - **Matmul kernels**: a [`Gemm`] on the stored buffers, a folded transpose as swapped strides.
//! - **Index width**: 64-bit when a buffer the kernel touches has more than `2^31 - 1` bytes or
//!   a shape it indexes has more than `2^31 - 1` elements.
//!
//! The result is deterministic: same graph and plan, same program.

use super::body::{err, BodyBuilder, Reduced};
use super::index::{Idx, Ix};
use super::ir::*;
use crate::fusion::{check_plan, FusionPlan, Kernel as PlanKernel, KernelKind, KernelOutput};
use crate::PassError;
use smelt_ir::{DType, Graph, HostTensor, NodeId, Op, ReduceOp, Scalar, TensorData};
use std::collections::HashMap;

/// Knobs of [`lower_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// Accumulate every float reduction in f64 (as the reference interpreter does) instead of
    /// f32 for f16/bf16/f32. Differential tests use it to compare with the interpreter
    /// exactly; compiled programs use the default (f32, PyTorch's choice).
    pub f64_accumulators: bool,
}

/// Lowers `plan` (a valid plan of `graph`) to the kernel IR with default options.
pub fn lower(graph: &Graph, plan: &FusionPlan) -> Result<Program, PassError> {
    lower_with(graph, plan, &LowerOptions::default())
}

/// Lowers `plan` (a valid plan of `graph`) to the kernel IR.
pub fn lower_with(
    graph: &Graph,
    plan: &FusionPlan,
    opts: &LowerOptions,
) -> Result<Program, PassError> {
    check_plan(graph, plan).map_err(|e| err(format!("invalid plan: {e}")))?;
    let mut buffers: Vec<BufferDecl> = Vec::new();
    let mut buf_of: HashMap<NodeId, BufferId> = HashMap::new();
    let mut immediates: HashMap<NodeId, Scalar> = HashMap::new();
    let mut needs = vec![false; graph.len()];
    for k in &plan.kernels {
        for i in &k.inputs {
            needs[i.value.index()] |= k.kind == KernelKind::MatMul || i.ty.shape.numel() != 1;
        }
    }
    for (_, o) in graph.outputs() {
        needs[o.index()] = true;
    }
    let push = |buffers: &mut Vec<BufferDecl>, n: NodeId, kind: BufferKind| {
        let id = BufferId(buffers.len() as u32);
        let ty = graph.ty(n);
        buffers.push(BufferDecl {
            id,
            dtype: ty.dtype,
            numel: ty.shape.numel(),
            kind,
            value: n,
        });
        id
    };
    for id in graph.ids() {
        let kind = match &graph.node(id).op {
            Op::Input { name, .. } => BufferKind::Input(name.clone()),
            Op::Param { name, .. } => BufferKind::Param(name.clone()),
            Op::Constant(t) => {
                if t.numel() == 1 {
                    immediates.insert(id, first_scalar(t));
                }
                if !needs[id.index()] {
                    continue;
                }
                BufferKind::Constant(t.clone())
            }
            _ => continue,
        };
        let b = push(&mut buffers, id, kind);
        buf_of.insert(id, b);
    }
    let mut steps = Vec::with_capacity(plan.kernels.len());
    for k in &plan.kernels {
        let outs: Vec<BufferId> = k
            .outputs
            .iter()
            .map(|o| push(&mut buffers, o.value, BufferKind::Temp))
            .collect();
        if k.kind == KernelKind::MatMul {
            steps.push(Step::Gemm(gemm(graph, k, &buf_of, &outs)?));
        } else {
            match loop_kernel(graph, k, &buf_of, &immediates, &outs, &buffers, opts) {
                Ok(kernel) => steps.push(Step::Kernel(kernel)),
                Err(Fail::Pass(e)) => return Err(e),
                Err(Fail::OtherRow) => {
                    // A view between row values reads another row: materialise the
                    // reductions in one kernel, the rest in a second one. The planner's
                    // row-kernel rule (`keeps_rows`) keeps such views out of row kernels, so
                    // this is a fallback for plans built otherwise; the kernel stays correct.
                    let (rows, rest) = split_row_kernel(graph, k);
                    let row_outs: Vec<BufferId> = rows
                        .outputs
                        .iter()
                        .map(|o| push(&mut buffers, o.value, BufferKind::Temp))
                        .collect();
                    let a = loop_kernel(
                        graph,
                        &rows,
                        &buf_of,
                        &immediates,
                        &row_outs,
                        &buffers,
                        opts,
                    )
                    .map_err(Fail::into_pass)?;
                    for (o, b) in rows.outputs.iter().zip(&row_outs) {
                        buf_of.insert(o.value, *b);
                    }
                    let b = loop_kernel(graph, &rest, &buf_of, &immediates, &outs, &buffers, opts)
                        .map_err(Fail::into_pass)?;
                    steps.push(Step::Kernel(a));
                    steps.push(Step::Kernel(b));
                }
            }
        }
        for (o, b) in k.outputs.iter().zip(outs) {
            buf_of.insert(o.value, b);
        }
    }
    let outputs = graph
        .outputs()
        .iter()
        .map(|(name, n)| {
            buf_of
                .get(n)
                .map(|&b| (name.clone(), b))
                .ok_or_else(|| err(format!("output {name:?} ({n}) has no buffer")))
        })
        .collect::<Result<_, _>>()?;
    Ok(Program {
        buffers,
        steps,
        outputs,
    })
}

/// The single element of a 1-element tensor.
fn first_scalar(t: &HostTensor) -> Scalar {
    match t.data() {
        TensorData::Bool(v) => Scalar::Bool(v[0]),
        TensorData::I32(v) => Scalar::Int(v[0] as i64),
        TensorData::I64(v) => Scalar::Int(v[0]),
        d => Scalar::Float(d.get_f64(0)),
    }
}

/// The accumulator dtype of a reduction over values of `dt`.
pub fn acc_dtype(dt: DType) -> DType {
    match dt {
        DType::F16 | DType::BF16 | DType::F32 => DType::F32,
        DType::F64 => DType::F64,
        DType::Bool | DType::I32 | DType::I64 => DType::I64,
    }
}

fn combiner(op: ReduceOp) -> Combiner {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => Combiner::Sum,
        ReduceOp::Prod => Combiner::Prod,
        ReduceOp::Max => Combiner::Max,
        ReduceOp::Min => Combiner::Min,
        ReduceOp::ArgMax => Combiner::ArgMax,
        ReduceOp::ArgMin => Combiner::ArgMin,
    }
}

/// `k{id}_{kind}_{first op names}`, a C identifier.
fn kernel_name(k: &PlanKernel) -> String {
    let views = ["reshape", "permute", "expand", "slice"];
    let mut names: Vec<&str> = k
        .ops
        .iter()
        .map(|(_, n)| *n)
        .filter(|n| !views.contains(n) && *n != k.kind.name())
        .collect();
    if names.is_empty() && k.kind == KernelKind::Copy {
        names = k.ops.iter().map(|(_, n)| *n).collect();
    }
    names.truncate(4);
    let raw = format!("k{}_{}_{}", k.id, k.kind.name(), names.join("_"));
    raw.trim_end_matches('_')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn index_width(graph: &Graph, k: &PlanKernel, touched: &[&BufferDecl]) -> IndexWidth {
    let limit = i32::MAX as usize;
    let big_buffer = touched
        .iter()
        .any(|b| b.numel.saturating_mul(b.dtype.size_bytes()) > limit);
    let big_shape = k
        .ops
        .iter()
        .map(|(n, _)| *n)
        .chain(k.inputs.iter().map(|i| i.value))
        .any(|n| graph.ty(n).shape.numel() > limit)
        || k.index_space.numel() > limit;
    if big_buffer || big_shape {
        IndexWidth::I64
    } else {
        IndexWidth::I32
    }
}

/// Why a loop kernel could not be lowered as planned.
enum Fail {
    /// A row-level view reads the reduction of another row (split the kernel).
    OtherRow,
    Pass(PassError),
}

impl From<PassError> for Fail {
    fn from(e: PassError) -> Fail {
        Fail::Pass(e)
    }
}

impl Fail {
    fn into_pass(self) -> PassError {
        match self {
            Fail::Pass(e) => e,
            Fail::OtherRow => err("a split row kernel still reads another row"),
        }
    }
}

fn fail(b: &BodyBuilder, e: PassError) -> Fail {
    if b.other_row {
        Fail::OtherRow
    } else {
        Fail::Pass(e)
    }
}

/// A row kernel split into its reductions (with what they depend on, each reduction an
/// output) and an elementwise kernel computing the rest from the materialised reductions.
fn split_row_kernel(graph: &Graph, k: &PlanKernel) -> (PlanKernel, PlanKernel) {
    let ops: Vec<NodeId> = k.ops.iter().map(|(n, _)| *n).collect();
    let mut needed = vec![false; ops.len()];
    for (i, &n) in ops.iter().enumerate().rev() {
        let is_reduce = matches!(graph.node(n).op, Op::Reduce { .. });
        let feeds = ops
            .iter()
            .enumerate()
            .any(|(j, &m)| needed[j] && graph.node(m).op.operands().contains(&n));
        needed[i] = is_reduce || feeds;
    }
    let mut rows = k.clone();
    rows.ops = k
        .ops
        .iter()
        .zip(&needed)
        .filter(|(_, &x)| x)
        .map(|(o, _)| *o)
        .collect();
    rows.outputs = rows
        .ops
        .iter()
        .filter(|(n, _)| matches!(graph.node(*n).op, Op::Reduce { .. }))
        .map(|&(n, _)| KernelOutput {
            value: n,
            ty: graph.ty(n).clone(),
            strides: graph.ty(n).shape.contiguous_strides().to_vec(),
            graph_outputs: Vec::new(),
        })
        .collect();
    let mut rest = k.clone();
    rest.ops = k
        .ops
        .iter()
        .zip(&needed)
        .filter(|(_, &x)| !x)
        .map(|(o, _)| *o)
        .collect();
    rest.kind = if rest.ops.iter().all(|(n, _)| graph.node(*n).op.is_view()) {
        KernelKind::Copy
    } else {
        KernelKind::Elementwise
    };
    rest.index_space = k.outputs[0].ty.shape.clone();
    rest.reduce_axes = Vec::new();
    rest.id = k.id;
    (rows, rest)
}

/// The index of an output of the given dims in the store stage.
type StoreIdx = dyn Fn(&BodyBuilder, &[usize]) -> Idx;

fn loop_kernel(
    graph: &Graph,
    k: &PlanKernel,
    buf_of: &HashMap<NodeId, BufferId>,
    immediates: &HashMap<NodeId, Scalar>,
    outs: &[BufferId],
    buffers: &[BufferDecl],
    opts: &LowerOptions,
) -> Result<Kernel, Fail> {
    let mut ops: Vec<NodeId> = k.ops.iter().map(|(n, _)| *n).collect();
    ops.sort_unstable();
    let mut b = BodyBuilder::new(graph, &ops, buf_of, immediates);
    let space = k.index_space.dims().to_vec();
    let mut stages = Vec::new();
    let outer: Vec<usize>;
    // The store stage: its inner dims and the index of each output, per output shape.
    let (store_inner, store_idx): (Vec<usize>, Box<StoreIdx>);
    if k.kind == KernelKind::Reduction {
        let axes = &k.reduce_axes;
        let kept: Vec<usize> = (0..space.len()).filter(|d| !axes.contains(d)).collect();
        outer = kept.iter().map(|&d| space[d]).collect();
        let inner: Vec<usize> = axes.iter().map(|&d| space[d]).collect();
        let n_outer = kept.len();
        // Loop variable of each dim of the reduced shape.
        let pos: Vec<usize> = (0..space.len())
            .map(|d| match kept.iter().position(|&x| x == d) {
                Some(j) => j,
                None => n_outer + axes.iter().position(|&x| x == d).unwrap_or(0),
            })
            .collect();
        let full: Vec<usize> = outer.iter().chain(&inner).copied().collect();
        for &r in &ops {
            let Op::Reduce {
                op,
                input,
                axes: raxes,
                keepdim,
            } = &graph.node(r).op
            else {
                continue;
            };
            b.begin_stage(full.clone());
            let elem = Idx::Dims(pos.iter().map(|&j| b.var(j)).collect());
            let v = b.value(*input, &elem).map_err(|e| fail(&b, e))?;
            let in_dt = graph.ty(*input).dtype;
            let acc = match acc_dtype(in_dt) {
                DType::F32 if opts.f64_accumulators => DType::F64,
                acc => acc,
            };
            let v = if acc == in_dt {
                v
            } else {
                b.emit(Ty::Data(acc), InstOp::Cast(v))
            };
            let result = b.fresh();
            let canon: Vec<Option<usize>> = (0..space.len())
                .filter(|d| *keepdim || !raxes.contains(d))
                .map(|d| kept.iter().position(|&x| x == d))
                .collect();
            stages.push(Stage {
                inner: inner.clone(),
                body: std::mem::take(&mut b.insts),
                effect: StageEffect::Reduce {
                    value: v,
                    combiner: combiner(*op),
                    acc,
                    result,
                },
            });
            b.reduced.insert(
                r,
                Reduced {
                    result,
                    acc,
                    canon,
                    count: inner.iter().product(),
                },
            );
        }
        let keep: Vec<usize> = (0..space.len())
            .map(|d| if axes.contains(&d) { 1 } else { space[d] })
            .collect();
        let drop = outer.clone();
        let row_level = k.outputs.iter().all(|o| {
            let s = o.ty.shape.dims();
            s == keep.as_slice() || s == drop.as_slice()
        });
        if row_level {
            store_inner = Vec::new();
            store_idx = Box::new(move |b, s| {
                if s == keep.as_slice() {
                    Idx::Dims(
                        (0..keep.len())
                            .map(|d| match kept.iter().position(|&x| x == d) {
                                Some(j) => b.var(j),
                                None => b.konst(0),
                            })
                            .collect(),
                    )
                } else {
                    Idx::Dims((0..s.len()).map(|j| b.var(j)).collect())
                }
            });
        } else {
            store_inner = inner;
            store_idx = Box::new(move |b, _| Idx::Dims(pos.iter().map(|&j| b.var(j)).collect()));
        }
    } else {
        outer = space.clone();
        store_inner = Vec::new();
        store_idx = Box::new(|b, s| Idx::Dims((0..s.len()).map(|j| b.var(j)).collect()));
    }
    b.begin_stage(outer.iter().chain(&store_inner).copied().collect());
    let mut stores = Vec::new();
    for (o, &buffer) in k.outputs.iter().zip(outs) {
        let dims = o.ty.shape.dims();
        if k.kind != KernelKind::Reduction && dims != space.as_slice() {
            return Err(Fail::Pass(err(format!(
                "kernel k{}: output {} is not over the index space {}",
                k.id, o.value, k.index_space
            ))));
        }
        let idx = store_idx(&b, dims);
        let value = b.value(o.value, &idx).map_err(|e| fail(&b, e))?;
        let access = match b.lin(&idx, dims) {
            Ix::Aff(a) => Access::Affine {
                offset: a.c,
                strides: a.coef,
            },
            addr => Access::Computed(b.ix_val(&addr)),
        };
        stores.push(Store {
            buffer,
            access,
            value,
        });
    }
    stages.push(Stage {
        inner: store_inner,
        body: std::mem::take(&mut b.insts),
        effect: StageEffect::Store(stores),
    });
    let reads: Vec<BufferId> = b.loads.iter().copied().collect();
    let touched: Vec<&BufferDecl> = reads
        .iter()
        .chain(outs)
        .filter_map(|id| buffers.get(id.0 as usize))
        .collect();
    Ok(Kernel {
        name: kernel_name(k),
        origin: k.ops.clone(),
        reads,
        writes: outs.to_vec(),
        index_width: index_width(graph, k, &touched),
        outer,
        stages,
    })
}

/// A matmul kernel as a library GEMM on its operands' stored buffers.
fn gemm(
    graph: &Graph,
    k: &PlanKernel,
    buf_of: &HashMap<NodeId, BufferId>,
    outs: &[BufferId],
) -> Result<Gemm, PassError> {
    let in_kernel = |n: NodeId| k.ops.iter().any(|(m, _)| *m == n);
    let root = k
        .ops
        .last()
        .map(|(n, _)| *n)
        .ok_or_else(|| err("empty kernel"))?;
    let Op::MatMul(x, y) = &graph.node(root).op else {
        return Err(err(format!("kernel k{} is not rooted at a matmul", k.id)));
    };
    let operand = |o: NodeId| -> Result<GemmOperand, PassError> {
        let shape: Vec<usize> = graph.ty(o).shape.dims().to_vec();
        let (mut cur, mut transposed, mut first) = (o, false, true);
        while in_kernel(cur) {
            cur = match &graph.node(cur).op {
                Op::Permute { input, .. } if first => {
                    transposed = true;
                    *input
                }
                Op::Reshape { input, .. } => *input,
                op => return Err(err(format!("gemm operand through {}", op.name()))),
            };
            first = false;
        }
        let buffer = *buf_of
            .get(&cur)
            .ok_or_else(|| err(format!("gemm operand {cur} has no buffer")))?;
        let r = shape.len();
        let strides = if transposed {
            let mut stored = shape.clone();
            stored.swap(r - 2, r - 1);
            let mut s = smelt_ir::Shape::new(&stored).contiguous_strides().to_vec();
            s.swap(r - 2, r - 1);
            s
        } else {
            smelt_ir::Shape::new(&shape).contiguous_strides().to_vec()
        };
        Ok(GemmOperand {
            buffer,
            shape,
            strides,
            offset: 0,
        })
    };
    let out = *outs.first().ok_or_else(|| err("gemm without output"))?;
    Ok(Gemm {
        name: kernel_name(k),
        origin: k.ops.clone(),
        dtype: graph.ty(root).dtype,
        a: operand(*x)?,
        b: operand(*y)?,
        out,
        out_shape: graph.ty(root).shape.dims().to_vec(),
    })
}
