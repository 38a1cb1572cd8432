//! Emitting one stage's SSA body: the value of a graph node at a symbolic index.
//!
//! [`BodyBuilder::value`] walks the kernel's ops from a node down to the buffers it reads:
//! elementwise ops evaluate their operands at the broadcast index, views map the index back to
//! their operand's (permute reorders, expand and broadcast give 0, slice is `start + step*i`,
//! reshape re-reads the same linear index over the operand's dims), a kernel input becomes a
//! load at the row-major address of the index (affine when the index is), a reduction reads the
//! result of its earlier stage, and concat / pad / gather select between clamped loads
//! (`select.rs`). Values are memoised per stage by (node, index), index forms by their affine
//! key, constants by value.

use super::index::{strides, Aff, Idx, Ix};
use super::ir::{Access, BufferId, Inst, InstOp, Ty, ValueId};
use crate::PassError;
use smelt_ir::{BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Scalar};
use std::collections::{BTreeSet, HashMap};

pub(super) fn err(message: impl Into<String>) -> PassError {
    PassError::Internal {
        pass: "kernel lowering",
        message: message.into(),
    }
}

/// A reduction computed by an earlier stage of the kernel.
pub(super) struct Reduced {
    pub result: ValueId,
    pub acc: DType,
    /// The index at which the reduction's value is this outer index's result: per dim of its
    /// value, the outer loop variable it equals, or `None` for 0 (a `keepdim` axis).
    pub canon: Vec<Option<usize>>,
    /// Elements per result (for `mean`).
    pub count: usize,
}

/// Builds the bodies of one kernel's stages.
pub(super) struct BodyBuilder<'a> {
    pub graph: &'a Graph,
    /// The kernel's ops, sorted.
    pub ops: &'a [NodeId],
    /// Buffer of each value the kernel may read.
    pub buffers: &'a HashMap<NodeId, BufferId>,
    /// 1-element constants read as immediates.
    pub immediates: &'a HashMap<NodeId, Scalar>,
    pub next: u32,
    pub insts: Vec<Inst>,
    /// Extents of the current stage's loop variables (outer, then inner).
    pub ext: Vec<usize>,
    memo: HashMap<(NodeId, Idx), ValueId>,
    aff_memo: HashMap<Aff, ValueId>,
    /// Data constants by (dtype, kind, bits).
    const_memo: HashMap<(DType, u8, u64), ValueId>,
    pub reduced: HashMap<NodeId, Reduced>,
    pub loads: BTreeSet<BufferId>,
    /// While set, loads of a gather's table poison their address with -1 unless it holds.
    pub(super) guard: Option<ValueId>,
    /// Set when a reduction was read at another row than the current outer index.
    pub other_row: bool,
}

impl<'a> BodyBuilder<'a> {
    pub fn new(
        graph: &'a Graph,
        ops: &'a [NodeId],
        buffers: &'a HashMap<NodeId, BufferId>,
        immediates: &'a HashMap<NodeId, Scalar>,
    ) -> BodyBuilder<'a> {
        BodyBuilder {
            graph,
            ops,
            buffers,
            immediates,
            next: 0,
            insts: Vec::new(),
            ext: Vec::new(),
            memo: HashMap::new(),
            aff_memo: HashMap::new(),
            const_memo: HashMap::new(),
            reduced: HashMap::new(),
            loads: BTreeSet::new(),
            guard: None,
            other_row: false,
        }
    }

    /// Starts a stage whose loop variables have extents `ext`.
    pub fn begin_stage(&mut self, ext: Vec<usize>) {
        self.ext = ext;
        self.insts.clear();
        self.memo.clear();
        self.aff_memo.clear();
        self.const_memo.clear();
    }

    pub fn fresh(&mut self) -> ValueId {
        let v = ValueId(self.next);
        self.next += 1;
        v
    }

    pub fn emit(&mut self, ty: Ty, op: InstOp) -> ValueId {
        let dst = self.fresh();
        self.insts.push(Inst { dst, ty, op });
        dst
    }

    fn vars(&self) -> usize {
        self.ext.len()
    }

    pub fn var(&self, j: usize) -> Ix {
        Ix::Aff(Aff::var(j, self.vars()))
    }

    pub fn konst(&self, c: i64) -> Ix {
        Ix::Aff(Aff::constant(c, self.vars()))
    }

    fn iconst(&mut self, c: i64) -> ValueId {
        self.aff_val(&Aff::constant(c, self.vars()))
    }

    fn aff_val(&mut self, a: &Aff) -> ValueId {
        if let Some(&v) = self.aff_memo.get(a) {
            return v;
        }
        let mut acc: Option<ValueId> = None;
        for (j, &k) in a.coef.clone().iter().enumerate() {
            if k == 0 {
                continue;
            }
            let lone_var = a.c == 0 && k == 1 && a.coef.iter().filter(|&&x| x != 0).count() == 1;
            let mut t = if lone_var {
                self.emit(Ty::Index, InstOp::LoopVar(j))
            } else {
                self.aff_val(&Aff::var(j, a.coef.len()))
            };
            if k != 1 {
                let kv = self.iconst(k);
                t = self.emit(Ty::Index, InstOp::IndexMul(t, kv));
            }
            acc = Some(match acc {
                None => t,
                Some(s) => self.emit(Ty::Index, InstOp::IndexAdd(s, t)),
            });
        }
        let v = match acc {
            None => self.emit(Ty::Index, InstOp::IndexConst(a.c)),
            Some(s) if a.c == 0 => s,
            Some(s) => {
                let c = self.iconst(a.c);
                self.emit(Ty::Index, InstOp::IndexAdd(s, c))
            }
        };
        self.aff_memo.insert(a.clone(), v);
        v
    }

    pub fn ix_val(&mut self, i: &Ix) -> ValueId {
        match i {
            Ix::Aff(a) => self.aff_val(a),
            Ix::Val(v) => *v,
        }
    }

    pub fn add(&mut self, a: &Ix, b: &Ix) -> Ix {
        let zero = |i: &Ix| matches!(i, Ix::Aff(x) if x.c == 0 && x.coef.iter().all(|&k| k == 0));
        if zero(a) {
            return b.clone();
        }
        if zero(b) {
            return a.clone();
        }
        match (a, b) {
            (Ix::Aff(x), Ix::Aff(y)) => Ix::Aff(x.add(y)),
            _ => {
                let (x, y) = (self.ix_val(a), self.ix_val(b));
                Ix::Val(self.emit(Ty::Index, InstOp::IndexAdd(x, y)))
            }
        }
    }

    fn scale(&mut self, a: &Ix, k: i64) -> Ix {
        match a {
            Ix::Aff(x) => Ix::Aff(x.scale(k)),
            _ if k == 1 => a.clone(),
            Ix::Val(v) => {
                let kv = self.iconst(k);
                Ix::Val(self.emit(Ty::Index, InstOp::IndexMul(*v, kv)))
            }
        }
    }

    fn div(&mut self, a: &Ix, s: i64) -> Ix {
        if let Ix::Aff(x) = a {
            if let Some(q) = x.div(s, &self.ext) {
                return Ix::Aff(q);
            }
        }
        let (x, sv) = (self.ix_val(a), self.iconst(s));
        Ix::Val(self.emit(Ty::Index, InstOp::IndexDiv(x, sv)))
    }

    fn rem(&mut self, a: &Ix, d: i64) -> Ix {
        if let Ix::Aff(x) = a {
            if let Some(r) = x.rem(d, &self.ext) {
                return Ix::Aff(r);
            }
        }
        let (x, dv) = (self.ix_val(a), self.iconst(d));
        Ix::Val(self.emit(Ty::Index, InstOp::IndexRem(x, dv)))
    }

    /// `i < c` as a bool value.
    pub(super) fn lt(&mut self, i: &Ix, c: i64) -> ValueId {
        let (x, cv) = (self.ix_val(i), self.iconst(c));
        self.emit(Ty::Data(DType::Bool), InstOp::IndexLt(x, cv))
    }

    /// `c < i` as a bool value.
    pub(super) fn gt(&mut self, i: &Ix, c: i64) -> ValueId {
        let (x, cv) = (self.ix_val(i), self.iconst(c));
        self.emit(Ty::Data(DType::Bool), InstOp::IndexLt(cv, x))
    }

    pub(super) fn select_ix(&mut self, cond: ValueId, a: &Ix, b: &Ix) -> Ix {
        let (x, y) = (self.ix_val(a), self.ix_val(b));
        Ix::Val(self.emit(Ty::Index, InstOp::Select(cond, x, y)))
    }

    pub(super) fn and(&mut self, a: Option<ValueId>, b: ValueId) -> ValueId {
        match a {
            None => b,
            Some(a) => self.emit(
                Ty::Data(DType::Bool),
                InstOp::Binary(BinaryOp::LogicalAnd, a, b),
            ),
        }
    }

    /// The row-major linear index of `idx` over `dims`.
    pub fn lin(&mut self, idx: &Idx, dims: &[usize]) -> Ix {
        match idx {
            Idx::Lin(l, _) => l.clone(),
            Idx::Dims(ix) => {
                let st = strides(dims);
                let mut acc = self.konst(0);
                for (k, i) in ix.iter().enumerate() {
                    if dims[k] == 1 {
                        continue;
                    }
                    let t = self.scale(i, st[k]);
                    acc = self.add(&acc, &t);
                }
                acc
            }
        }
    }

    /// One component per dim of `idx` over `dims`.
    pub fn dims_of(&mut self, idx: &Idx, dims: &[usize]) -> Vec<Ix> {
        match idx {
            Idx::Dims(ix) => ix.clone(),
            Idx::Lin(l, _) => {
                let st = strides(dims);
                (0..dims.len())
                    .map(|k| {
                        if dims[k] == 1 {
                            return self.konst(0);
                        }
                        let q = self.div(l, st[k]);
                        if k == 0 {
                            q
                        } else {
                            self.rem(&q, dims[k] as i64)
                        }
                    })
                    .collect()
            }
        }
    }

    pub(super) fn dims(&self, n: NodeId) -> Vec<usize> {
        self.graph.ty(n).shape.dims().to_vec()
    }

    fn in_body(&self, n: NodeId) -> bool {
        self.ops.binary_search(&n).is_ok()
    }

    /// `idx` over `from` broadcast to an operand of dims `to` (numpy rules).
    fn broadcast(&mut self, idx: &Idx, from: &[usize], to: &[usize]) -> Idx {
        if from == to {
            return idx.clone();
        }
        let ix = self.dims_of(idx, from);
        let lead = from.len() - to.len();
        Idx::Dims(
            (0..to.len())
                .map(|k| {
                    if to[k] == 1 {
                        self.konst(0)
                    } else {
                        ix[k + lead].clone()
                    }
                })
                .collect(),
        )
    }

    fn operand(&mut self, o: NodeId, idx: &Idx, out: &[usize]) -> Result<ValueId, PassError> {
        let to = self.dims(o);
        let i = self.broadcast(idx, out, &to);
        self.value(o, &i)
    }

    /// A data constant of `dtype` holding `s` converted like a cast (exactly representable).
    pub fn constant(&mut self, s: Scalar, dtype: DType) -> ValueId {
        let t = smelt_ir::graph::scalar_tensor(s, dtype);
        let d = t.data();
        let exact = match dtype {
            DType::Bool => Scalar::Bool(d.get_f64(0) != 0.0),
            DType::I32 | DType::I64 => Scalar::Int(match d {
                smelt_ir::TensorData::I64(v) => v[0],
                _ => d.get_f64(0) as i64,
            }),
            _ => Scalar::Float(d.get_f64(0)),
        };
        let key = match exact {
            Scalar::Bool(b) => (dtype, 0, b as u64),
            Scalar::Int(i) => (dtype, 1, i as u64),
            Scalar::Float(x) => (dtype, 2, x.to_bits()),
        };
        if let Some(&v) = self.const_memo.get(&key) {
            return v;
        }
        let v = self.emit(Ty::Data(dtype), InstOp::Const(exact));
        self.const_memo.insert(key, v);
        v
    }

    /// The value of node `n` at `idx` (an index over `n`'s shape).
    pub fn value(&mut self, n: NodeId, idx: &Idx) -> Result<ValueId, PassError> {
        let key = (n, idx.clone());
        if let Some(&v) = self.memo.get(&key) {
            return Ok(v);
        }
        let v = self.compute(n, idx)?;
        self.memo.insert(key, v);
        Ok(v)
    }

    fn compute(&mut self, n: NodeId, idx: &Idx) -> Result<ValueId, PassError> {
        if !self.in_body(n) {
            return self.load(n, idx);
        }
        let node = self.graph.node(n);
        let out = node.ty.shape.dims().to_vec();
        let dt = node.ty.dtype;
        Ok(match &node.op {
            Op::Unary(u, a) => {
                let a = self.operand(*a, idx, &out)?;
                self.emit(Ty::Data(dt), InstOp::Unary(*u, a))
            }
            Op::Binary(b, x, y) => {
                let x = self.operand(*x, idx, &out)?;
                let y = self.operand(*y, idx, &out)?;
                self.emit(Ty::Data(dt), InstOp::Binary(*b, x, y))
            }
            Op::Where(c, a, b) => {
                let c = self.operand(*c, idx, &out)?;
                let a = self.operand(*a, idx, &out)?;
                let b = self.operand(*b, idx, &out)?;
                self.emit(Ty::Data(dt), InstOp::Select(c, a, b))
            }
            Op::Cast { input, to } => {
                let a = self.operand(*input, idx, &out)?;
                if self.graph.ty(*input).dtype == *to {
                    a
                } else {
                    self.emit(Ty::Data(*to), InstOp::Cast(a))
                }
            }
            Op::Reduce { op, .. } => self.reduced_value(n, *op, dt, idx, &out)?,
            Op::Reshape { input, .. } => {
                let l = self.lin(idx, &out);
                let i = Idx::Lin(l, self.dims(*input));
                self.value(*input, &i)?
            }
            Op::Permute { input, perm } => {
                let ix = self.dims_of(idx, &out);
                let mut inv = vec![self.konst(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = ix[i].clone();
                }
                self.value(*input, &Idx::Dims(inv))?
            }
            Op::Expand { input, .. } => self.operand(*input, idx, &out)?,
            Op::Slice { input, ranges } => {
                let ix = self.dims_of(idx, &out);
                let mut mapped = Vec::with_capacity(ix.len());
                for (i, r) in ix.iter().zip(ranges) {
                    let s = self.scale(i, r.step as i64);
                    let start = self.konst(r.start as i64);
                    mapped.push(self.add(&s, &start));
                }
                self.value(*input, &Idx::Dims(mapped))?
            }
            Op::Concat { inputs, axis } => self.concat(inputs, *axis, idx, &out, dt)?,
            Op::Pad { input, pads, value } => self.pad(*input, pads, *value, idx, &out, dt)?,
            Op::Gather { input, index, axis } => {
                let ix = self.dims_of(idx, &out);
                let iv = self.value(*index, &Idx::Dims(ix.clone()))?;
                self.gathered(*input, ix, *axis, iv)?
            }
            Op::IndexSelect { input, index, axis } => {
                let ix = self.dims_of(idx, &out);
                let iv = self.value(*index, &Idx::Dims(vec![ix[*axis].clone()]))?;
                self.gathered(*input, ix, *axis, iv)?
            }
            Op::MatMul(..) | Op::Input { .. } | Op::Param { .. } | Op::Constant(_) => {
                return Err(err(format!(
                    "{n} {} cannot be part of a loop kernel",
                    node.op.name()
                )))
            }
        })
    }

    /// A kernel input read at `idx`: an immediate or a load at its row-major address.
    fn load(&mut self, n: NodeId, idx: &Idx) -> Result<ValueId, PassError> {
        let dt = self.graph.ty(n).dtype;
        if let Some(&s) = self.immediates.get(&n) {
            return Ok(self.constant(s, dt));
        }
        let buffer = *self
            .buffers
            .get(&n)
            .ok_or_else(|| err(format!("{n} is read but has no buffer")))?;
        let dims = self.dims(n);
        let addr = self.lin(idx, &dims);
        let access = match (addr, self.guard) {
            (Ix::Aff(a), None) => Access::Affine {
                offset: a.c,
                strides: a.coef,
            },
            (addr, None) => Access::Computed(self.ix_val(&addr)),
            (addr, Some(g)) => {
                let poison = self.konst(-1);
                let v = self.select_ix(g, &addr, &poison);
                Access::Computed(self.ix_val(&v))
            }
        };
        self.loads.insert(buffer);
        Ok(self.emit(Ty::Data(dt), InstOp::Load { buffer, access }))
    }

    fn reduced_value(
        &mut self,
        n: NodeId,
        op: ReduceOp,
        dt: DType,
        idx: &Idx,
        out: &[usize],
    ) -> Result<ValueId, PassError> {
        // Loop variables of extent 0 or 1 are always 0: drop them before comparing.
        let ext = self.ext.clone();
        let norm = |i: Ix| match i {
            Ix::Aff(mut a) => {
                for (c, &e) in a.coef.iter_mut().zip(&ext) {
                    if e <= 1 {
                        *c = 0;
                    }
                }
                Ix::Aff(a)
            }
            v => v,
        };
        let got: Vec<Ix> = self.dims_of(idx, out).into_iter().map(norm).collect();
        let r = self
            .reduced
            .get(&n)
            .ok_or_else(|| err(format!("reduction {n} is read before its stage")))?;
        let vars = self.vars();
        let want: Vec<Ix> = r
            .canon
            .iter()
            .map(|c| match c {
                Some(j) => Ix::Aff(Aff::var(*j, vars)),
                None => Ix::Aff(Aff::constant(0, vars)),
            })
            .map(norm)
            .collect();
        if got != want && !ext.contains(&0) {
            self.other_row = true;
            return Err(err(format!("reduction {n} is read at another row")));
        }
        let (result, acc, count) = (r.result, r.acc, r.count);
        let mut v = result;
        if op == ReduceOp::Mean {
            let c = self.constant(Scalar::Float(count as f64), acc);
            v = self.emit(Ty::Data(acc), InstOp::Binary(BinaryOp::Div, v, c));
        }
        let from = if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) {
            DType::I64
        } else {
            acc
        };
        if from != dt {
            v = self.emit(Ty::Data(dt), InstOp::Cast(v));
        }
        Ok(v)
    }
}
