//! [`eval_program`]: a plain-Rust evaluator of the kernel IR, the oracle of the backends.
//!
//! Each stage is evaluated over all its iterations at once: every SSA value is a column with
//! one entry per (outer index, inner index) pair, in row-major order of the outer dims then the
//! inner dims. Data ops (unary, binary, select, cast, constants) run through the reference
//! interpreter on one-op graphs, so their semantics (f16/bf16 rounding after every op,
//! wrapping integers, PyTorch's division and NaN rules) are exactly the interpreter's.
//! Reductions combine each outer index's inner iterations in order, in the declared
//! accumulator dtype (f32 sums round to f32 after every addition). GEMMs gather their strided
//! operands and run the interpreter's `matmul` (f64 accumulation, one rounding).
//!
//! Errors, never panics: loads and stores outside their buffer (a gather index out of range
//! poisons its address), index arithmetic that overflows the kernel's index width, missing or
//! mistyped bindings, integer division by zero. Outputs are returned **flat**: a 1-D tensor of
//! the output buffer's element count (the program does not record shapes).

use super::ir::*;
use crate::PassError;
use smelt_ir::{interp, Graph, HostTensor, Op, Shape, TensorData};
use std::collections::HashMap;

fn err(message: impl Into<String>) -> PassError {
    PassError::Internal {
        pass: "eval_program",
        message: message.into(),
    }
}

/// One value per iteration.
#[derive(Clone, Debug)]
enum Col {
    Index(Vec<i64>),
    Data(TensorData),
}

/// Runs `program` on `bindings` (inputs and parameters by name); outputs in program order.
pub fn eval_program(
    program: &Program,
    bindings: &HashMap<String, HostTensor>,
) -> Result<Vec<(String, HostTensor)>, PassError> {
    let mut bufs: Vec<TensorData> = Vec::with_capacity(program.buffers.len());
    for b in &program.buffers {
        let data = match &b.kind {
            BufferKind::Input(name) | BufferKind::Param(name) => {
                let t = bindings
                    .get(name)
                    .ok_or_else(|| err(format!("no binding for {name:?}")))?;
                if t.dtype() != b.dtype || t.numel() != b.numel {
                    return Err(err(format!(
                        "binding {name:?}: expected {}[{}], got {}{}",
                        b.dtype,
                        b.numel,
                        t.dtype(),
                        t.shape()
                    )));
                }
                t.data().clone()
            }
            BufferKind::Constant(t) => t.data().clone(),
            BufferKind::Temp => TensorData::zeros(b.dtype, b.numel),
        };
        bufs.push(data);
    }
    for step in &program.steps {
        match step {
            Step::Kernel(k) => {
                eval_kernel(k, &mut bufs).map_err(|e| err(format!("kernel {}: {e}", k.name)))?
            }
            Step::Gemm(g) => {
                eval_gemm(g, &mut bufs).map_err(|e| err(format!("gemm {}: {e}", g.name)))?
            }
        }
    }
    program
        .outputs
        .iter()
        .map(|(name, b)| {
            let data = bufs
                .get(b.0 as usize)
                .ok_or_else(|| err(format!("output {name:?}: no buffer {b}")))?
                .clone();
            let n = data.len();
            HostTensor::new(Shape::new(&[n]), data)
                .map(|t| (name.clone(), t))
                .map_err(|e| err(e.to_string()))
        })
        .collect()
}

fn numel(dims: &[usize]) -> Result<usize, String> {
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= 1 << 28)
        .ok_or_else(|| format!("loop nest {dims:?} is too large to evaluate"))
}

/// `(lane / stride) % dim` for the loop variable `d` of a stage.
fn loop_var(outer: &[usize], inner: &[usize], d: usize, lanes: usize) -> Vec<i64> {
    let inner_n: usize = inner.iter().product();
    let (dims, pos, div) = if d < outer.len() {
        (outer, d, inner_n)
    } else {
        (inner, d - outer.len(), 1)
    };
    let stride: usize = dims[pos + 1..].iter().product::<usize>() * div;
    let dim = dims[pos];
    (0..lanes).map(|l| ((l / stride) % dim) as i64).collect()
}

fn eval_kernel(k: &Kernel, bufs: &mut [TensorData]) -> Result<(), String> {
    let outer_n = numel(&k.outer)?;
    let wide = k.index_width == IndexWidth::I64;
    let fits = |x: i64| wide || i32::try_from(x).is_ok();
    let mut results: HashMap<ValueId, Col> = HashMap::new();
    for stage in &k.stages {
        let inner_n = numel(&stage.inner)?;
        let lanes = numel(&[outer_n, inner_n])?;
        let mut vals: HashMap<ValueId, Col> = HashMap::new();
        let get = |vals: &HashMap<ValueId, Col>, v: ValueId| -> Result<Col, String> {
            if let Some(c) = vals.get(&v) {
                return Ok(c.clone());
            }
            match results.get(&v) {
                Some(Col::Data(d)) => {
                    let map: Vec<usize> = (0..lanes).map(|l| l / inner_n.max(1)).collect();
                    Ok(Col::Data(take(d, &map)))
                }
                _ => Err(format!("{v} is used before it is defined")),
            }
        };
        let index = |vals: &HashMap<ValueId, Col>, v: ValueId| -> Result<Vec<i64>, String> {
            match get(vals, v)? {
                Col::Index(x) => Ok(x),
                Col::Data(_) => Err(format!("{v} is not an index")),
            }
        };
        let data = |vals: &HashMap<ValueId, Col>, v: ValueId| -> Result<TensorData, String> {
            match get(vals, v)? {
                Col::Data(x) => Ok(x),
                Col::Index(_) => Err(format!("{v} is not data")),
            }
        };
        let address = |vals: &HashMap<ValueId, Col>, a: &Access| -> Result<Vec<i64>, String> {
            match a {
                Access::Computed(v) => index(vals, *v),
                Access::Affine { offset, strides } => {
                    let mut addr = vec![*offset; lanes];
                    for (d, &s) in strides.iter().enumerate() {
                        if s != 0 {
                            let var = loop_var(&k.outer, &stage.inner, d, lanes);
                            addr.iter_mut().zip(var).for_each(|(a, x)| *a += s * x);
                        }
                    }
                    Ok(addr)
                }
            }
        };
        for inst in &stage.body {
            let int2 = |vals: &HashMap<ValueId, Col>, a, b, f: fn(i64, i64) -> Option<i64>| {
                let (x, y) = (index(vals, a)?, index(vals, b)?);
                x.iter()
                    .zip(&y)
                    .map(|(&p, &q)| f(p, q).filter(|&r| fits(r)))
                    .collect::<Option<Vec<i64>>>()
                    .map(Col::Index)
                    .ok_or_else(|| {
                        format!(
                            "{}: index arithmetic overflows or divides by zero",
                            inst.dst
                        )
                    })
            };
            let col = match &inst.op {
                InstOp::LoopVar(d) => {
                    if *d >= k.outer.len() + stage.inner.len() {
                        return Err(format!("loop variable d{d} does not exist"));
                    }
                    Col::Index(loop_var(&k.outer, &stage.inner, *d, lanes))
                }
                InstOp::IndexConst(c) => Col::Index(vec![*c; lanes]),
                InstOp::IndexAdd(a, b) => int2(&vals, *a, *b, i64::checked_add)?,
                InstOp::IndexMul(a, b) => int2(&vals, *a, *b, i64::checked_mul)?,
                InstOp::IndexDiv(a, b) => {
                    int2(&vals, *a, *b, |p, q| (p >= 0 && q > 0).then(|| p / q))?
                }
                InstOp::IndexRem(a, b) => {
                    int2(&vals, *a, *b, |p, q| (p >= 0 && q > 0).then(|| p % q))?
                }
                InstOp::IndexLt(a, b) => {
                    let (x, y) = (index(&vals, *a)?, index(&vals, *b)?);
                    Col::Data(TensorData::Bool(
                        x.iter().zip(&y).map(|(p, q)| p < q).collect(),
                    ))
                }
                InstOp::ToIndex(a) => {
                    // Converted to the index width as a backend does (wrapping); the lowering
                    // only uses indices it checked against the table size.
                    let x: Vec<i64> = match data(&vals, *a)? {
                        TensorData::I32(v) => v.iter().map(|&x| x as i64).collect(),
                        TensorData::I64(v) if wide => v,
                        TensorData::I64(v) => v.iter().map(|&x| x as i32 as i64).collect(),
                        d => return Err(format!("to_index of {}", d.dtype())),
                    };
                    Col::Index(x)
                }
                InstOp::Const(s) => {
                    let Ty::Data(dt) = inst.ty else {
                        return Err("a data constant of index type".into());
                    };
                    let t = smelt_ir::graph::scalar_tensor(*s, dt);
                    Col::Data(take(t.data(), &vec![0; lanes]))
                }
                InstOp::Load { buffer, access } => {
                    let addr = address(&vals, access)?;
                    let buf = bufs
                        .get(buffer.0 as usize)
                        .ok_or_else(|| format!("no buffer {buffer}"))?;
                    Col::Data(gather(buf, &addr).map_err(|a| {
                        format!(
                            "load {buffer}[{a}] is out of bounds ({} elements)",
                            buf.len()
                        )
                    })?)
                }
                InstOp::Select(c, a, b) => match (get(&vals, *a)?, get(&vals, *b)?) {
                    (Col::Index(x), Col::Index(y)) => {
                        let TensorData::Bool(c) = data(&vals, *c)? else {
                            return Err("select condition is not bool".into());
                        };
                        Col::Index((0..lanes).map(|l| if c[l] { x[l] } else { y[l] }).collect())
                    }
                    (Col::Data(x), Col::Data(y)) => {
                        let c = data(&vals, *c)?;
                        Col::Data(run_op(OneOp::Where, &[c, x, y], inst.ty)?)
                    }
                    _ => return Err("select between index and data".into()),
                },
                InstOp::Unary(u, a) => {
                    Col::Data(run_op(OneOp::Unary(*u), &[data(&vals, *a)?], inst.ty)?)
                }
                InstOp::Binary(b, x, y) => {
                    let args = [data(&vals, *x)?, data(&vals, *y)?];
                    Col::Data(run_op(OneOp::Binary(*b), &args, inst.ty)?)
                }
                InstOp::Cast(a) => Col::Data(run_op(OneOp::Cast, &[data(&vals, *a)?], inst.ty)?),
            };
            vals.insert(inst.dst, col);
        }
        match &stage.effect {
            StageEffect::Store(stores) => {
                for st in stores {
                    let addr = address(&vals, &st.access)?;
                    let v = data(&vals, st.value)?;
                    let buf = bufs
                        .get_mut(st.buffer.0 as usize)
                        .ok_or_else(|| format!("no buffer {}", st.buffer))?;
                    scatter(buf, &addr, &v).map_err(|e| format!("store {}: {e}", st.buffer))?;
                }
            }
            StageEffect::Reduce {
                value,
                combiner,
                acc,
                result,
            } => {
                let v = data(&vals, *value)?;
                let r = super::eval_reduce::reduce(&v, *combiner, *acc, outer_n, inner_n)?;
                results.insert(*result, Col::Data(r));
            }
        }
    }
    Ok(())
}

/// The elements of `d` at positions `idx`.
fn take(d: &TensorData, idx: &[usize]) -> TensorData {
    match d {
        TensorData::Bool(v) => TensorData::Bool(idx.iter().map(|&i| v[i]).collect()),
        TensorData::I32(v) => TensorData::I32(idx.iter().map(|&i| v[i]).collect()),
        TensorData::I64(v) => TensorData::I64(idx.iter().map(|&i| v[i]).collect()),
        TensorData::F16(v) => TensorData::F16(idx.iter().map(|&i| v[i]).collect()),
        TensorData::BF16(v) => TensorData::BF16(idx.iter().map(|&i| v[i]).collect()),
        TensorData::F32(v) => TensorData::F32(idx.iter().map(|&i| v[i]).collect()),
        TensorData::F64(v) => TensorData::F64(idx.iter().map(|&i| v[i]).collect()),
    }
}

/// The elements of `d` at addresses `addr`, or the first address out of bounds.
fn gather(d: &TensorData, addr: &[i64]) -> Result<TensorData, i64> {
    let n = d.len();
    let idx = addr
        .iter()
        .map(|&a| usize::try_from(a).ok().filter(|&i| i < n).ok_or(a))
        .collect::<Result<Vec<usize>, i64>>()?;
    Ok(take(d, &idx))
}

/// Writes `v[l]` to `d[addr[l]]`.
fn scatter(d: &mut TensorData, addr: &[i64], v: &TensorData) -> Result<(), String> {
    let n = d.len();
    let idx = addr
        .iter()
        .map(|&a| usize::try_from(a).ok().filter(|&i| i < n).ok_or(a))
        .collect::<Result<Vec<usize>, i64>>()
        .map_err(|a| format!("address {a} is out of bounds ({n} elements)"))?;
    macro_rules! put {
        ($($var:ident),*) => {
            match (d, v) {
                $((TensorData::$var(o), TensorData::$var(x)) => {
                    for (&i, &e) in idx.iter().zip(x) {
                        o[i] = e;
                    }
                })*
                (o, x) => return Err(format!("stores {} into a {} buffer", x.dtype(), o.dtype())),
            }
        };
    }
    put!(Bool, I32, I64, F16, BF16, F32, F64);
    Ok(())
}

/// A data op run through the interpreter.
#[derive(Clone, Copy)]
enum OneOp {
    Unary(smelt_ir::UnaryOp),
    Binary(smelt_ir::BinaryOp),
    Where,
    Cast,
}

/// Runs one op on columns of equal length through [`interp::eval`]; `ty` is the declared type
/// of the result, which must be what the IR's typing rule gives.
fn run_op(op: OneOp, args: &[TensorData], ty: Ty) -> Result<TensorData, String> {
    let Ty::Data(want) = ty else {
        return Err("a data op of index type".into());
    };
    let n = args.first().map_or(0, |a| a.len());
    let mut g = Graph::new();
    let mut bindings = HashMap::new();
    let mut ids = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let name = format!("a{i}");
        ids.push(
            g.input(name.clone(), a.dtype(), [n])
                .map_err(|e| e.to_string())?,
        );
        let t = HostTensor::new(Shape::new(&[a.len()]), a.clone()).map_err(|e| e.to_string())?;
        bindings.insert(name, t);
    }
    let node = match op {
        OneOp::Unary(u) => Op::Unary(u, ids[0]),
        OneOp::Binary(b) => Op::Binary(b, ids[0], ids[1]),
        OneOp::Where => Op::Where(ids[0], ids[1], ids[2]),
        OneOp::Cast => Op::Cast {
            input: ids[0],
            to: want,
        },
    };
    let y = g.push(node).map_err(|e| e.to_string())?;
    if g.ty(y).dtype != want {
        return Err(format!("declared {want}, the op gives {}", g.ty(y).dtype));
    }
    g.set_output("y", y).map_err(|e| e.to_string())?;
    let mut out = interp::eval(&g, &bindings).map_err(|e| e.to_string())?;
    Ok(out.remove(0).1.into_data())
}

fn eval_gemm(g: &Gemm, bufs: &mut [TensorData]) -> Result<(), String> {
    let operand = |o: &GemmOperand| -> Result<HostTensor, String> {
        let buf = bufs
            .get(o.buffer.0 as usize)
            .ok_or_else(|| format!("no buffer {}", o.buffer))?;
        if o.shape.len() != o.strides.len() {
            return Err("operand strides and shape differ in rank".into());
        }
        let n = numel(&o.shape)?;
        let mut addr = vec![o.offset as i64; n];
        let mut stride = 1usize;
        for d in (0..o.shape.len()).rev() {
            for (l, a) in addr.iter_mut().enumerate() {
                *a += (((l / stride) % o.shape[d]) * o.strides[d]) as i64;
            }
            stride *= o.shape[d];
        }
        let data = gather(buf, &addr).map_err(|a| format!("operand read {a} out of bounds"))?;
        HostTensor::new(Shape::new(&o.shape), data).map_err(|e| e.to_string())
    };
    let (a, b) = (operand(&g.a)?, operand(&g.b)?);
    if a.dtype() != g.dtype || b.dtype() != g.dtype {
        return Err(format!("operands are not {}", g.dtype));
    }
    let mut graph = Graph::new();
    let x = graph
        .input("a", a.dtype(), a.shape().clone())
        .map_err(|e| e.to_string())?;
    let y = graph
        .input("b", b.dtype(), b.shape().clone())
        .map_err(|e| e.to_string())?;
    let m = graph.matmul(x, y).map_err(|e| e.to_string())?;
    if graph.ty(m).shape.dims() != g.out_shape.as_slice() {
        return Err(format!(
            "out_shape {:?} is not {}",
            g.out_shape,
            graph.ty(m).shape
        ));
    }
    graph.set_output("y", m).map_err(|e| e.to_string())?;
    let bindings = HashMap::from([("a".to_string(), a), ("b".to_string(), b)]);
    let out = interp::eval(&graph, &bindings).map_err(|e| e.to_string())?;
    let data = out[0].1.data().clone();
    let dst = bufs
        .get_mut(g.out.0 as usize)
        .ok_or_else(|| format!("no buffer {}", g.out))?;
    let addr: Vec<i64> = (0..data.len() as i64).collect();
    if data.len() != dst.len() {
        return Err(format!(
            "out has {} elements, the product {}",
            dst.len(),
            data.len()
        ));
    }
    scatter(dst, &addr, &data)
}
