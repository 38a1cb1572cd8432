//! Helpers of the CPU and CUDA executor tests: hand-built kernel IR programs, comparison with
//! torch.testing-style tolerances, and the random graphs and programs the differential and
//! compile tests draw.

#![allow(dead_code)]

use smelt_ir::{DType, Graph, HostTensor, NodeId, Op, ReduceOp, TensorData};
use smelt_passes::kernel::*;

/// A program under construction.
#[derive(Default)]
pub struct P {
    pub buffers: Vec<BufferDecl>,
    pub steps: Vec<Step>,
    pub outputs: Vec<(String, BufferId)>,
}

impl P {
    fn add(&mut self, dtype: DType, numel: usize, kind: BufferKind) -> u32 {
        let id = self.buffers.len() as u32;
        self.buffers.push(BufferDecl {
            id: BufferId(id),
            dtype,
            numel,
            kind,
            value: NodeId(id),
        });
        id
    }
    pub fn input(&mut self, name: &str, dtype: DType, numel: usize) -> u32 {
        self.add(dtype, numel, BufferKind::Input(name.into()))
    }
    pub fn param(&mut self, name: &str, dtype: DType, numel: usize) -> u32 {
        self.add(dtype, numel, BufferKind::Param(name.into()))
    }
    pub fn temp(&mut self, dtype: DType, numel: usize) -> u32 {
        self.add(dtype, numel, BufferKind::Temp)
    }
    pub fn kernel(&mut self, k: Kernel) {
        self.steps.push(Step::Kernel(k));
    }
    pub fn output(&mut self, name: &str, b: u32) {
        self.outputs.push((name.into(), BufferId(b)));
    }
    pub fn build(self) -> Program {
        Program {
            buffers: self.buffers,
            steps: self.steps,
            outputs: self.outputs,
        }
    }
}

/// A stage body under construction; values are numbered per kernel, so a body of a later
/// stage starts where the previous one stopped (`Body::after`).
#[derive(Default)]
pub struct Body {
    pub insts: Vec<Inst>,
    pub next: u32,
}

impl Body {
    pub fn after(prev: &Body) -> Body {
        Body {
            insts: Vec::new(),
            next: prev.next,
        }
    }
    /// A fresh value id (for reduction results).
    pub fn fresh(&mut self) -> ValueId {
        let v = ValueId(self.next);
        self.next += 1;
        v
    }
    pub fn push(&mut self, ty: Ty, op: InstOp) -> ValueId {
        let dst = self.fresh();
        self.insts.push(Inst { dst, ty, op });
        dst
    }
    pub fn load(&mut self, d: DType, buffer: u32, offset: i64, strides: &[i64]) -> ValueId {
        self.push(
            Ty::Data(d),
            InstOp::Load {
                buffer: BufferId(buffer),
                access: affine(offset, strides),
            },
        )
    }
    pub fn un(&mut self, d: DType, op: smelt_ir::UnaryOp, a: ValueId) -> ValueId {
        self.push(Ty::Data(d), InstOp::Unary(op, a))
    }
    pub fn bin(&mut self, d: DType, op: smelt_ir::BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        self.push(Ty::Data(d), InstOp::Binary(op, a, b))
    }
    pub fn store_stage(self, inner: &[usize], stores: Vec<(u32, Access, ValueId)>) -> Stage {
        Stage {
            inner: inner.to_vec(),
            body: self.insts,
            effect: StageEffect::Store(
                stores
                    .into_iter()
                    .map(|(b, access, value)| Store {
                        buffer: BufferId(b),
                        access,
                        value,
                    })
                    .collect(),
            ),
        }
    }
    pub fn reduce_stage(
        self,
        inner: &[usize],
        value: ValueId,
        combiner: Combiner,
        acc: DType,
        result: ValueId,
    ) -> Stage {
        Stage {
            inner: inner.to_vec(),
            body: self.insts,
            effect: StageEffect::Reduce {
                value,
                combiner,
                acc,
                result,
            },
        }
    }
}

pub fn affine(offset: i64, strides: &[i64]) -> Access {
    Access::Affine {
        offset,
        strides: strides.to_vec(),
    }
}

pub fn kernel(
    name: &str,
    reads: &[u32],
    writes: &[u32],
    outer: &[usize],
    stages: Vec<Stage>,
) -> Kernel {
    Kernel {
        name: name.into(),
        origin: vec![],
        reads: reads.iter().map(|&b| BufferId(b)).collect(),
        writes: writes.iter().map(|&b| BufferId(b)).collect(),
        index_width: IndexWidth::I32,
        outer: outer.to_vec(),
        stages,
    }
}

/// Row-major contiguous strides of `dims`, as i64.
pub fn strides(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as i64;
    }
    s
}

/// torch.testing's default (rtol, atol) for a dtype.
pub fn default_tol(d: DType) -> (f64, f64) {
    match d {
        DType::F16 => (1e-3, 1e-5),
        DType::BF16 => (1.6e-2, 1e-5),
        DType::F32 => (1.3e-6, 1e-5),
        DType::F64 => (1e-7, 1e-7),
        _ => (0.0, 0.0),
    }
}

/// Checks `got` against `want`: same dtype and element count, integers and bools exact, NaN
/// positions and infinities exact, finite floats within `atol + rtol * |want|`.
pub fn check_close(
    what: &str,
    got: &HostTensor,
    want: &HostTensor,
    rtol: f64,
    atol: f64,
) -> Result<(), String> {
    check_close_with(what, got, want, rtol, atol, false)
}

/// [`check_close`]; with `overflow_ok`, any two non-finite values also match (an accumulation
/// that overflows gives inf or NaN depending on its order).
pub fn check_close_with(
    what: &str,
    got: &HostTensor,
    want: &HostTensor,
    rtol: f64,
    atol: f64,
    overflow_ok: bool,
) -> Result<(), String> {
    close(what, got, want, rtol, atol, overflow_ok, Excuse::None)
}

/// Which other non-finite values [`close`] accepts (see [`check_outputs`]).
#[derive(Clone, Copy, PartialEq)]
enum Excuse {
    None,
    /// A non-finite value for a wanted ±0.
    ZeroProduct,
    /// A non-finite value for any wanted value.
    Overflow,
}

/// [`check_close_with`], also accepting what `excuse` says.
fn close(
    what: &str,
    got: &HostTensor,
    want: &HostTensor,
    rtol: f64,
    atol: f64,
    overflow_ok: bool,
    excuse: Excuse,
) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.numel() != want.numel() {
        return Err(format!(
            "{what}: got {}{} want {}{}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let float = got.dtype().is_float();
    for i in 0..got.numel() {
        let (g, w) = (got.data().get_f64(i), want.data().get_f64(i));
        let ok = if !float {
            exact(got.data(), want.data(), i)
        } else if overflow_ok && !g.is_finite() && (!w.is_finite() || near_overflow(w, got)) {
            // An accumulation whose partial sums reach the dtype's range overflows in the
            // kernel's accumulator where the interpreter's f64 one may not (docs/semantics.md).
            true
        } else if !g.is_finite()
            && (excuse == Excuse::Overflow || (excuse == Excuse::ZeroProduct && w == 0.0))
        {
            true
        } else if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        if !ok {
            return Err(format!("{what}: element {i}: got {g}, want {w}"));
        }
    }
    Ok(())
}

/// Whether `w` lies within a factor 16 of the largest finite value of `t`'s dtype.
fn near_overflow(w: f64, t: &HostTensor) -> bool {
    let max = match t.dtype() {
        smelt_ir::DType::F16 => 65504.0,
        smelt_ir::DType::BF16 | smelt_ir::DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    };
    w.abs() >= max / 16.0
}

fn exact(a: &TensorData, b: &TensorData, i: usize) -> bool {
    match (a, b) {
        (TensorData::I64(x), TensorData::I64(y)) => x[i] == y[i],
        (TensorData::I32(x), TensorData::I32(y)) => x[i] == y[i],
        (TensorData::Bool(x), TensorData::Bool(y)) => x[i] == y[i],
        _ => false,
    }
}

/// Bit-exact float comparison (NaN matches any NaN).
pub fn check_bits(what: &str, got: &HostTensor, want: &HostTensor) -> Result<(), String> {
    check_close(what, got, want, 0.0, 0.0)
}

/// Deterministic pseudo-random floats in `[-scale, scale]` with some specials mixed in.
pub fn floats(n: usize, seed: u64, scale: f64, specials: bool) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            if specials && i % 17 == 5 {
                [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0][(s >> 3) as usize % 5]
            } else {
                (u * 2.0 - 1.0) * scale
            }
        })
        .collect()
}

pub fn tensor(d: DType, dims: &[usize], v: &[f64]) -> HostTensor {
    use half::{bf16, f16};
    let data = match d {
        DType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => TensorData::F64(v.to_vec()),
        DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
        DType::I64 => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
        DType::Bool => TensorData::Bool(v.iter().map(|&x| x != 0.0).collect()),
    };
    HostTensor::new(dims, data).unwrap()
}

/// A one-GEMM program of `dtype` (the right operand transposed and batch-broadcast).
pub fn gemm_program(dtype: DType, batch: usize, m: usize, k: usize, n: usize) -> Program {
    let decl = |id: u32, numel: usize, kind: BufferKind| BufferDecl {
        id: BufferId(id),
        dtype,
        numel,
        kind,
        value: NodeId(id),
    };
    Program {
        buffers: vec![
            decl(0, batch * m * k, BufferKind::Input("a".into())),
            decl(1, n * k, BufferKind::Param("w".into())),
            decl(2, batch * m * n, BufferKind::Temp),
        ],
        steps: vec![Step::Gemm(Gemm {
            name: "mm".into(),
            origin: vec![],
            dtype,
            a: GemmOperand {
                buffer: BufferId(0),
                shape: vec![batch, m, k],
                strides: vec![m * k, k, 1],
                offset: 0,
            },
            // w stored [n, k], read as [1, k, n] (transposed, broadcast over the batch).
            b: GemmOperand {
                buffer: BufferId(1),
                shape: vec![1, k, n],
                strides: vec![0, 1, k],
                offset: 0,
            },
            out: BufferId(2),
            out_shape: vec![batch, m, n],
        })],
        outputs: vec![("y".into(), BufferId(2))],
    }
}

/// `f(i, &items[i])` for every item, spread over up to 8 worker threads (item `i` on worker
/// `i % workers`), results by index.
pub fn on_workers<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<(usize, R)> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    let f = &f;
    std::thread::scope(|s| {
        let jobs: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn(move || {
                    (w..items.len())
                        .step_by(workers)
                        .map(|i| (i, f(i, &items[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        jobs.into_iter()
            .flat_map(|j| j.join().expect("a worker does not panic"))
            .collect()
    })
}

/// `index_select` of 4 rows from a bound `table: f32[10, 6]` by `idx: i64[4]`: the graph, its
/// program and the table; `gather_ids(v)` makes the run-time input.
pub fn gather_case() -> (Graph, Program, HostTensor) {
    let mut g = Graph::new();
    let t = g.param("table", DType::F32, [10, 6].as_slice()).unwrap();
    let i = g.input("idx", DType::I64, [4].as_slice()).unwrap();
    let s = g.index_select(t, i, 0).unwrap();
    g.set_output("rows", s).unwrap();
    let o = smelt_passes::optimize(&g, &smelt_passes::PassOptions::default()).unwrap();
    let program = lower(&o.graph, &o.plan).unwrap();
    let table = tensor(DType::F32, &[10, 6], &floats(60, 3, 1.0, false));
    (g, program, table)
}

/// The `idx` input of [`gather_case`].
pub fn gather_ids(v: Vec<i64>) -> std::collections::HashMap<String, HostTensor> {
    std::collections::HashMap::from([(
        "idx".to_string(),
        HostTensor::from_i64([4].as_slice(), v).unwrap(),
    )])
}

/// Sums up per-case fuzz results (`Ok(true)` checked, `Ok(false)` skipped because the
/// interpreter rejected the bindings, `Err` a failure, printed with its graph from `all`):
/// prints the counts with `label` and fails the test on any failure.
pub fn assert_fuzz_results(
    label: &str,
    all: &[RandomProgram],
    results: Vec<(usize, Result<bool, String>)>,
) {
    let (mut ran, mut skipped) = (0, 0);
    let mut failures = Vec::new();
    for (case, r) in results {
        match r {
            Ok(true) => ran += 1,
            Ok(false) => skipped += 1,
            Err(e) => failures.push(format!("{e}\n{}", smelt_ir::text::print(&all[case].0))),
        }
    }
    println!("{ran} random graphs checked {label}, {skipped} skipped (interpreter errors)");
    assert_no_failures(ran, &failures);
}

/// A random graph, its bindings and its lowered program.
pub type RandomProgram = (
    Graph,
    std::collections::HashMap<String, HostTensor>,
    Program,
);

/// The first `count` graphs of [`fuzz_graphs`] with their bindings, optimised (every fourth
/// unfused) and lowered.
pub fn random_programs(count: usize) -> Vec<RandomProgram> {
    fuzz_graphs(count)
        .into_iter()
        .enumerate()
        .map(|(case, (graph, bindings))| {
            let opts = smelt_passes::PassOptions {
                fuse: case % 4 != 3,
                ..smelt_passes::PassOptions::default()
            };
            let opt = smelt_passes::optimize(&graph, &opts)
                .unwrap_or_else(|e| panic!("case {case}: {e}"));
            let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan)
                .unwrap_or_else(|e| panic!("case {case}: lower: {e}"));
            (graph, bindings, program)
        })
        .collect()
}

/// Values a model's inputs and parameters take: floats uniform in [-1, 1], parameters of two
/// or more dims (weights) in ±1/√fan_in with fan_in the last dim (PyTorch's `nn.Linear`
/// initialisation), integers in 0..4, bools alternating. No specials: a special in a real
/// model's GEMM makes most of its outputs inf or NaN, and an f32 accumulation whose partial
/// sums overflow cannot be compared with the interpreter's f64 one (the random graphs of
/// [`fuzz_graphs`] cover specials). Deterministic in `seed`.
pub fn model_bindings(graph: &Graph, seed: u64) -> std::collections::HashMap<String, HostTensor> {
    graph
        .bindings()
        .enumerate()
        .map(|(i, (name, _, ty, is_param))| {
            let n = ty.shape.numel();
            let dims = ty.shape.dims();
            let scale = match dims.last() {
                Some(&fan_in) if is_param && dims.len() >= 2 => 1.0 / (fan_in.max(1) as f64).sqrt(),
                _ => 1.0,
            };
            let v: Vec<f64> = match ty.dtype {
                DType::Bool => (0..n).map(|j| ((j + i) % 2) as f64).collect(),
                d if d.is_float() => floats(n, seed + i as u64, scale, false),
                _ => floats(n, seed + i as u64, 2.0, false)
                    .iter()
                    .map(|x| (x + 2.0).floor().min(3.0))
                    .collect(),
            };
            (name.to_string(), tensor(ty.dtype, dims, &v))
        })
        .collect()
}

/// Checks a device's outputs `got` of `program` (lowered from `graph`) against `want`, the
/// interpreter's, with the differential fuzz tolerances. Downstream of an accumulation the
/// interpreter accumulates f32 in f64 and the kernels in f32, like `eval_program`: where that
/// changes a value beyond any tolerance (a product whose f32 partials overflow and then meet a
/// zero gives NaN, not 0, and a comparison after it a different bool), `eval_program`'s value
/// is accepted instead. `eval_program` multiplies in index order, the kernels in lanes or a
/// tree: downstream of a product, where the interpreter gives ±0 (a zero factor, or an f64
/// product below the f32 range), a kernel's order may overflow one partial product and zero
/// another (`inf * 0`), so a NaN or ±inf is accepted there too.
pub fn check_outputs(
    what: &str,
    graph: &Graph,
    program: &Program,
    bindings: &std::collections::HashMap<String, HostTensor>,
    want: &[(String, HostTensor)],
    got: &[(String, HostTensor)],
) -> Result<(), String> {
    let mut second: Option<Option<Vec<(String, HostTensor)>>> = None;
    for (i, ((name, id), (_, w))) in graph.outputs().iter().zip(want).enumerate() {
        let loose = has_accumulation(graph, *id, false);
        let (rt, at) = if loose {
            fuzz_tolerance(coarsest_accumulated(graph, *id, w.dtype()), true)
        } else {
            fuzz_tolerance(w.dtype(), false)
        };
        if got[i].1.shape() != w.shape() {
            return Err(format!(
                "{what}: output {name:?} shape {}",
                got[i].1.shape()
            ));
        }
        let what = format!("{what}: output {name:?}");
        let Err(e) = check_close_with(&what, &got[i].1, w, rt, at, loose) else {
            continue;
        };
        if !loose {
            return Err(e);
        }
        let oracle = second.get_or_insert_with(|| eval_program(program, bindings).ok());
        match oracle {
            Some(o) if check_close_with(&what, &got[i].1, &o[i].1, rt, at, loose).is_ok() => {}
            _ if cone_has(graph, *id, |op| {
                matches!(
                    op,
                    Op::Reduce {
                        op: ReduceOp::Prod,
                        ..
                    }
                )
            }) && close(&what, &got[i].1, w, rt, at, true, Excuse::ZeroProduct).is_ok() => {}
            _ if f32_accumulation_may_overflow(graph, *id, bindings)
                && close(&what, &got[i].1, w, rt, at, true, Excuse::Overflow).is_ok() => {}
            _ if within_summation_bound(graph, *id, bindings, &got[i].1, w, rt, at) => {}
            _ => match local_value(graph, i, bindings, got) {
                Some(v) => {
                    let (rt, at) = fuzz_tolerance(w.dtype(), false);
                    let what = format!("{what} (from the other outputs)");
                    check_close_with(&what, &got[i].1, &v, rt, at, false)?
                }
                None => return Err(e),
            },
        }
    }
    Ok(())
}

/// Whether the value of `out` depends on a reduction or a matmul (`gemm_only`: a matmul).
pub fn has_accumulation(g: &Graph, out: NodeId, gemm_only: bool) -> bool {
    cone_has(g, out, |op| {
        matches!(op, Op::MatMul(..)) || (!gemm_only && matches!(op, Op::Reduce { .. }))
    })
}

/// Of `d` (an output's dtype) and the float results of the accumulations in the output's cone,
/// the dtype with the loosest [`fuzz_tolerance`]: an accumulation rounded to bf16 carries
/// bf16's error into an f32 output cast from it (a bf16 matmul's f32 sum and the interpreter's
/// f64 one, each rounded to bf16, can be an ulp apart, 0.4%, beyond f32's 1e-3).
fn coarsest_accumulated(g: &Graph, out: NodeId, d: DType) -> DType {
    let loosest = |a: DType, b: DType| {
        if fuzz_tolerance(b, true) > fuzz_tolerance(a, true) {
            b
        } else {
            a
        }
    };
    cone(g, out)
        .iter()
        .enumerate()
        .filter(|(k, c)| {
            **c && matches!(
                g.node(NodeId(*k as u32)).op,
                Op::MatMul(..) | Op::Reduce { .. }
            )
        })
        .map(|(k, _)| g.ty(NodeId(k as u32)).dtype)
        .filter(|t| t.is_float())
        .fold(d, loosest)
}

/// Whether an accumulation in `out`'s cone sums (or multiplies) f32 terms whose magnitudes
/// leave the f32 range in some order: a matmul or sum whose absolute terms add up (in f64) to
/// more than `f32::MAX`, or a product of factors whose magnitudes above 1 multiply to more.
/// Its f32 partials can then be ±inf and cancel to NaN where the interpreter's f64 ones stay
/// finite, and any value after it may be non-finite on a device (f64 graphs accumulate in
/// f64 everywhere and are never excused).
fn f32_accumulation_may_overflow(
    graph: &Graph,
    out: NodeId,
    bindings: &std::collections::HashMap<String, HostTensor>,
) -> bool {
    let bound = || -> Option<bool> {
        // The graph, then one output per f32 accumulation of the cone: its bound, in f64.
        let mut g = nodes_of(graph)?;
        let scalar = |g: &mut Graph, v: f64| {
            g.constant(HostTensor::scalar(TensorData::F64(vec![v])).ok()?)
                .ok()
        };
        // |x| in f64, with infinities and NaN as 0: they propagate alike in f32 and f64
        // (inf + finite is inf in both), only finite terms overflow differently.
        let abs64 = |g: &mut Graph, x: NodeId| -> Option<NodeId> {
            let x = g.cast(x, DType::F64).ok()?;
            let a = g.unary(smelt_ir::UnaryOp::Abs, x).ok()?;
            let (inf, zero) = (scalar(g, f64::INFINITY)?, scalar(g, 0.0)?);
            let finite = g.binary(smelt_ir::BinaryOp::Lt, a, inf).ok()?;
            g.where_(finite, a, zero).ok()
        };
        let mut any = false;
        for (k, _) in cone(graph, out).iter().enumerate().filter(|(_, c)| **c) {
            let node = NodeId(k as u32);
            if !matches!(graph.ty(node).dtype, DType::F32 | DType::F16 | DType::BF16) {
                continue;
            }
            let b = match &graph.node(node).op {
                Op::MatMul(a, b) => {
                    let (a, b) = (abs64(&mut g, *a)?, abs64(&mut g, *b)?);
                    g.matmul(a, b).ok()?
                }
                Op::Reduce {
                    op: ReduceOp::Sum | ReduceOp::Mean,
                    input,
                    axes,
                    keepdim,
                } => {
                    let x = abs64(&mut g, *input)?;
                    g.reduce(ReduceOp::Sum, x, axes, *keepdim).ok()?
                }
                Op::Reduce {
                    op: ReduceOp::Prod,
                    input,
                    axes,
                    keepdim,
                } => {
                    let x = abs64(&mut g, *input)?;
                    let one = scalar(&mut g, 1.0)?;
                    let x = g.binary(smelt_ir::BinaryOp::Maximum, x, one).ok()?;
                    g.reduce(ReduceOp::Prod, x, axes, *keepdim).ok()?
                }
                _ => continue,
            };
            g.set_output(format!("bound.{k}"), b).ok()?;
            any = true;
        }
        if !any {
            return Some(false);
        }
        let values = smelt_ir::interp::eval(&g, bindings).ok()?;
        Some(
            values
                .iter()
                .any(|(_, t)| (0..t.numel()).any(|i| t.data().get_f64(i) > f32::MAX as f64)),
        )
    };
    bound() == Some(true)
}

/// A graph of `graph`'s nodes, with the same ids, and none of its outputs: to add outputs of
/// its own to and evaluate.
fn nodes_of(graph: &Graph) -> Option<Graph> {
    let mut g = Graph::new();
    for k in 0..graph.len() {
        g.push(graph.node(NodeId(k as u32)).op.clone()).ok()?;
    }
    Some(g)
}

/// Whether `got`, the device's value of output `out`, is `want` within `atol + rtol·|want|`
/// plus, element by element, the error bound of summing in any order, where `out` is itself a
/// float sum, mean or matmul: `2·n·u·Σ|terms|` (`Σ|terms|/n` for a mean), `n` terms each, `u`
/// the unit roundoff of the accumulator (f64's for f64, else f32's), doubled for the two
/// orders compared. A sum whose terms cancel (`1 + 3.4e38 − 3.4e38 − 0.67` is −0.67 in index
/// order and 0 summed in blocks, found with `SMELT_FUZZ_SEED=20261206
/// SMELT_FUZZ_MAX_NUMEL=20000`, case 1475, an f64 matmul) has no order-free value beyond that
/// bound. Non-finite values are left to the checks above.
fn within_summation_bound(
    graph: &Graph,
    out: NodeId,
    bindings: &std::collections::HashMap<String, HostTensor>,
    got: &HostTensor,
    want: &HostTensor,
    rtol: f64,
    atol: f64,
) -> bool {
    let bound = || -> Option<(HostTensor, f64)> {
        let dtype = graph.ty(out).dtype;
        if !dtype.is_float() {
            return None;
        }
        let mut g = nodes_of(graph)?;
        let abs64 = |g: &mut Graph, x: NodeId| -> Option<NodeId> {
            let x = g.cast(x, DType::F64).ok()?;
            g.unary(smelt_ir::UnaryOp::Abs, x).ok()
        };
        let (b, n) = match &graph.node(out).op {
            Op::MatMul(a, b) => {
                let k = *graph.ty(*a).shape.dims().last()?;
                let (a, b) = (abs64(&mut g, *a)?, abs64(&mut g, *b)?);
                (g.matmul(a, b).ok()?, k)
            }
            Op::Reduce {
                op: op @ (ReduceOp::Sum | ReduceOp::Mean),
                input,
                axes,
                keepdim,
            } => {
                let dims = graph.ty(*input).shape.dims().to_vec();
                let n: usize = axes.iter().map(|&a| dims[a]).product();
                let x = abs64(&mut g, *input)?;
                (g.reduce(*op, x, axes, *keepdim).ok()?, n)
            }
            _ => return None,
        };
        g.set_output("bound", b).ok()?;
        let u = if dtype == DType::F64 {
            f64::EPSILON / 2.0
        } else {
            f32::EPSILON as f64 / 2.0
        };
        let t = smelt_ir::interp::eval(&g, bindings).ok()?.pop()?.1;
        Some((t, 2.0 * n as f64 * u))
    };
    let Some((sums, scale)) = bound() else {
        return false;
    };
    got.numel() == want.numel()
        && (0..want.numel()).all(|i| {
            let (g, w) = (got.data().get_f64(i), want.data().get_f64(i));
            if w.is_nan() || g.is_nan() {
                w.is_nan() && g.is_nan()
            } else if w.is_infinite() || g.is_infinite() {
                g == w
            } else {
                (g - w).abs() <= atol + rtol * w.abs() + scale * sums.data().get_f64(i)
            }
        })
}

/// Output `pos` of `graph` as the interpreter computes it from the device's own values of the
/// other outputs it depends on (`got`, in output order): its cone, cut at every other output
/// node, each cut node an input bound to the device's tensor. `None` when the cut cone still
/// accumulates (a reduction or matmul between the cuts and the output) or is not evaluable:
/// then the value is not a plain function of values checked in their own right.
///
/// This is how a legitimate f32-accumulation difference upstream (an overflowing GEMM that
/// is NaN on the device and +inf in the interpreter, both accepted as non-finite) is told
/// apart from a wrong kernel downstream (the comparison after it): every output is checked on
/// its own, so an output that is the exact function of the device's other outputs is right.
fn local_value(
    graph: &Graph,
    pos: usize,
    bindings: &std::collections::HashMap<String, HostTensor>,
    got: &[(String, HostTensor)],
) -> Option<HostTensor> {
    let outputs = graph.outputs();
    let target = outputs.get(pos)?.1;
    // The first output position of every other output node.
    let mut cut = std::collections::HashMap::new();
    for (i, (_, id)) in outputs.iter().enumerate() {
        if *id != target {
            cut.entry(*id).or_insert(i);
        }
    }
    // The cone of `target`, stopping at the cuts; node ids are topologically ordered.
    let mut cone = vec![false; graph.len()];
    let mut stack = vec![target];
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut cone[n.index()], true) || cut.contains_key(&n) {
            continue;
        }
        stack.extend(graph.node(n).op.operands());
    }
    let mut g = Graph::new();
    let mut map = std::collections::HashMap::new();
    let mut inputs = std::collections::HashMap::new();
    for (k, _) in cone.iter().enumerate().filter(|(_, c)| **c) {
        let n = NodeId(k as u32);
        let new = if let Some(&i) = cut.get(&n) {
            let t = &got.get(i)?.1;
            let name = format!("cut.{i}");
            inputs.insert(name.clone(), t.clone());
            g.input(name, t.dtype(), t.shape().clone()).ok()?
        } else {
            let mut op = graph.node(n).op.clone();
            match &op {
                Op::Reduce { .. } | Op::MatMul(..) => return None,
                Op::Input { name, .. } | Op::Param { name, .. } => {
                    inputs.insert(name.clone(), bindings.get(name)?.clone());
                }
                _ => {}
            }
            op.operands_mut(|o| *o = map[o]);
            g.push(op).ok()?
        };
        map.insert(n, new);
    }
    g.set_output("y", map[&target]).ok()?;
    smelt_ir::interp::eval(&g, &inputs)
        .ok()?
        .pop()
        .map(|(_, t)| t)
}

/// Whether `out` or a node it depends on has an op for which `pred` holds.
fn cone_has(g: &Graph, out: NodeId, pred: impl Fn(&Op) -> bool) -> bool {
    cone(g, out)
        .iter()
        .enumerate()
        .any(|(k, c)| *c && pred(&g.node(NodeId(k as u32)).op))
}

/// The nodes `out` depends on, itself included, by node index.
fn cone(g: &Graph, out: NodeId) -> Vec<bool> {
    let mut seen = vec![false; g.len()];
    let mut stack = vec![out];
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut seen[n.index()], true) {
            stack.extend(g.node(n).op.operands());
        }
    }
    seen
}

/// The differential fuzz tolerances (rtol, atol) of an output of dtype `d`: torch.testing's
/// defaults, or (`loose`) those of outputs downstream of an accumulation (see
/// `cpu_exec_fuzz.rs`).
pub fn fuzz_tolerance(d: DType, loose: bool) -> (f64, f64) {
    match (d, loose) {
        (DType::F16, false) => (1e-3, 1e-5),
        (DType::BF16, false) => (1.6e-2, 1e-5),
        (DType::F32, false) => (1.3e-6, 1e-5),
        (DType::F64, false) => (1e-7, 1e-7),
        (DType::F16, true) => (2e-2, 2e-2),
        (DType::BF16, true) => (8e-2, 8e-2),
        (DType::F32 | DType::F64, true) => (1e-3, 1e-3),
        _ => (0.0, 0.0),
    }
}

/// The number of fuzz cases: `SMELT_FUZZ_CASES`, else `default`.
pub fn fuzz_cases(default: usize) -> usize {
    std::env::var("SMELT_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The first `count` random graphs of the differential fuzz, with bindings (up to 20 ops,
/// every value an output, no float→int casts: a one-ulp accumulation difference before one,
/// inevitable between f32 kernels and the f64 interpreter, becomes a different integer that no
/// tolerance can absorb; casts of exactly computed values are covered by the exact tests).
/// Deterministic: the same `count` gives the same graphs.
///
/// For longer campaigns by hand, `SMELT_FUZZ_SEED` (a `u64`) draws another deterministic
/// sequence of graphs, and `SMELT_FUZZ_MAX_NUMEL` raises the bound on every value's element
/// count (default 512; larger values split work across threads and reach the long-row
/// reduction paths more often). Unset, the graphs are the ones CI checks.
pub fn fuzz_graphs(count: usize) -> Vec<(Graph, std::collections::HashMap<String, HostTensor>)> {
    use proptest::strategy::{Just, Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use smelt_ir::arbitrary::{arb_bindings, arb_graph_with, with_sinks_as_outputs, GenConfig};
    let env = |name: &str| -> Option<u64> {
        let v = std::env::var(name).ok()?;
        Some(
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a non-negative integer")),
        )
    };
    let rng = match env("SMELT_FUZZ_SEED") {
        None => TestRng::deterministic_rng(RngAlgorithm::ChaCha),
        Some(seed) => {
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&seed.to_le_bytes());
            TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
        }
    };
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let defaults = GenConfig::default();
    let cfg = GenConfig {
        max_nodes: 20,
        float_to_int_casts: false,
        max_numel: env("SMELT_FUZZ_MAX_NUMEL").map_or(defaults.max_numel, |n| n as usize),
        ..defaults
    };
    let strategy = arb_graph_with(cfg).prop_flat_map(|g| {
        let bindings = arb_bindings(&g);
        (Just(g), bindings)
    });
    (0..count)
        .map(|_| {
            let (graph, bindings) = strategy
                .new_tree(&mut runner)
                .expect("a random graph")
                .current();
            (with_sinks_as_outputs(graph), bindings)
        })
        .collect()
}

/// The programs of the first `count` random graphs (up to 32 ops, every value an output) that
/// lower to at least one kernel, with the index of their draw; every fourth draw is planned
/// unfused (one kernel per op exercises every op on its own). Panics if fewer than `count` of
/// `5 * count` draws have kernels. Deterministic.
pub fn random_kernel_programs(count: usize) -> Vec<(usize, Program)> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use smelt_ir::arbitrary::{arb_graph_with_bindings, with_sinks_as_outputs};
    use smelt_passes::{optimize, PassOptions};
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let strategy = arb_graph_with_bindings(32);
    let mut programs = Vec::new();
    for i in 0..count * 5 {
        if programs.len() == count {
            break;
        }
        let (graph, _) = strategy
            .new_tree(&mut runner)
            .expect("a random graph")
            .current();
        let graph = with_sinks_as_outputs(graph);
        let opts = PassOptions {
            fuse: i % 4 != 3,
            ..PassOptions::default()
        };
        let opt = optimize(&graph, &opts).unwrap_or_else(|e| panic!("graph {i}: {e}"));
        let program = lower(&opt.graph, &opt.plan)
            .unwrap_or_else(|e| panic!("graph {i}: lower: {e}\n{}", opt.plan));
        if program.steps.iter().any(|s| matches!(s, Step::Kernel(_))) {
            programs.push((i, program));
        }
    }
    assert_eq!(programs.len(), count, "too few random graphs had kernels");
    programs
}

/// Fails with the first five of `failures` (one message per failed graph) and their count out
/// of `ran` passed plus failed graphs; passes when there are none.
pub fn assert_no_failures(ran: usize, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} of {} graphs failed:\n{}",
        failures.len(),
        ran + failures.len(),
        failures[..failures.len().min(5)].join("\n\n")
    );
}
