//! Hand-built kernel-IR kernels for the CUDA printer's tests: snapshots here, NVRTC compile
//! checks in `runtime/tests/cuda_codegen.rs` (which includes this file by path).

#![allow(dead_code)]

use smelt_ir::{BinaryOp, DType, NodeId, Scalar, UnaryOp};
use smelt_passes::kernel::{
    Access, BufferDecl, BufferId, BufferKind, Combiner, IndexWidth, Inst, InstOp, Kernel, Program,
    Stage, StageEffect, Step, Store, Ty, ValueId,
};

/// Builds one stage body; value ids continue across stages of a kernel.
pub struct Body<'a> {
    next: &'a mut u32,
    pub insts: Vec<Inst>,
}

impl Body<'_> {
    pub fn push(&mut self, ty: Ty, op: InstOp) -> ValueId {
        let dst = ValueId(*self.next);
        *self.next += 1;
        self.insts.push(Inst { dst, ty, op });
        dst
    }
    pub fn load(&mut self, d: DType, b: u32, offset: i64, strides: &[i64]) -> ValueId {
        let access = Access::Affine {
            offset,
            strides: strides.to_vec(),
        };
        self.push(
            Ty::Data(d),
            InstOp::Load {
                buffer: BufferId(b),
                access,
            },
        )
    }
    pub fn load_at(&mut self, d: DType, b: u32, at: ValueId) -> ValueId {
        self.push(
            Ty::Data(d),
            InstOp::Load {
                buffer: BufferId(b),
                access: Access::Computed(at),
            },
        )
    }
    pub fn c(&mut self, d: DType, s: Scalar) -> ValueId {
        self.push(Ty::Data(d), InstOp::Const(s))
    }
    pub fn un(&mut self, d: DType, u: UnaryOp, a: ValueId) -> ValueId {
        self.push(Ty::Data(d), InstOp::Unary(u, a))
    }
    pub fn bin(&mut self, d: DType, b: BinaryOp, x: ValueId, y: ValueId) -> ValueId {
        self.push(Ty::Data(d), InstOp::Binary(b, x, y))
    }
    pub fn cast(&mut self, d: DType, a: ValueId) -> ValueId {
        self.push(Ty::Data(d), InstOp::Cast(a))
    }
    pub fn var(&mut self, d: usize) -> ValueId {
        self.push(Ty::Index, InstOp::LoopVar(d))
    }
    pub fn ic(&mut self, c: i64) -> ValueId {
        self.push(Ty::Index, InstOp::IndexConst(c))
    }
}

/// A kernel under construction.
pub struct Kb {
    next: u32,
    pub k: Kernel,
}

impl Kb {
    pub fn new(name: &str, reads: &[u32], writes: &[u32], outer: &[usize]) -> Kb {
        Kb {
            next: 0,
            k: Kernel {
                name: name.into(),
                origin: vec![(NodeId(1), "placeholder")],
                reads: reads.iter().map(|&b| BufferId(b)).collect(),
                writes: writes.iter().map(|&b| BufferId(b)).collect(),
                index_width: IndexWidth::I32,
                outer: outer.to_vec(),
                stages: Vec::new(),
            },
        }
    }
    pub fn origin(mut self, ops: &[(u32, &'static str)]) -> Kb {
        self.k.origin = ops.iter().map(|&(n, o)| (NodeId(n), o)).collect();
        self
    }
    pub fn wide(mut self) -> Kb {
        self.k.index_width = IndexWidth::I64;
        self
    }
    /// A reduction stage over `inner`; returns its result.
    pub fn reduce(
        &mut self,
        inner: &[usize],
        combiner: Combiner,
        acc: DType,
        f: impl FnOnce(&mut Body) -> ValueId,
    ) -> ValueId {
        let mut b = Body {
            next: &mut self.next,
            insts: Vec::new(),
        };
        let value = f(&mut b);
        let body = b.insts;
        let result = ValueId(self.next);
        self.next += 1;
        self.k.stages.push(Stage {
            inner: inner.to_vec(),
            body,
            effect: StageEffect::Reduce {
                value,
                combiner,
                acc,
                result,
            },
        });
        result
    }
    /// A store stage over `inner`: `f` returns (buffer, offset, strides, value) per store.
    pub fn store(
        &mut self,
        inner: &[usize],
        f: impl FnOnce(&mut Body) -> Vec<(u32, Access, ValueId)>,
    ) {
        let mut b = Body {
            next: &mut self.next,
            insts: Vec::new(),
        };
        let stores = f(&mut b)
            .into_iter()
            .map(|(buffer, access, value)| Store {
                buffer: BufferId(buffer),
                access,
                value,
            })
            .collect();
        let body = b.insts;
        self.k.stages.push(Stage {
            inner: inner.to_vec(),
            body,
            effect: StageEffect::Store(stores),
        });
    }
}

pub fn affine(offset: i64, strides: &[i64]) -> Access {
    Access::Affine {
        offset,
        strides: strides.to_vec(),
    }
}

const F32: DType = DType::F32;

/// `tanh(x * 2 + bias) ` with `bias` broadcast along rows, plus `x > 0` as a bool output.
pub fn elementwise_f32_broadcast() -> Kernel {
    let mut kb = Kb::new("k0_mul_add_tanh_gt", &[0, 1], &[2, 3], &[64, 256]).origin(&[
        (2, "mul"),
        (3, "add"),
        (4, "tanh"),
        (5, "gt"),
    ]);
    kb.store(&[], |b| {
        let x = b.load(F32, 0, 0, &[256, 1]);
        let bias = b.load(F32, 1, 0, &[0, 1]);
        let two = b.c(F32, Scalar::Float(2.0));
        let m = b.bin(F32, BinaryOp::Mul, x, two);
        let a = b.bin(F32, BinaryOp::Add, m, bias);
        let t = b.un(F32, UnaryOp::Tanh, a);
        let zero = b.c(F32, Scalar::Float(0.0));
        let g = b.push(Ty::Data(DType::Bool), InstOp::Binary(BinaryOp::Gt, x, zero));
        vec![(2, affine(0, &[256, 1]), t), (3, affine(0, &[256, 1]), g)]
    });
    kb.k
}

/// f16 chain: `sigmoid(x * y) + erf(x) - relu(y)`, with a per-row scalar broadcast.
pub fn elementwise_f16_chain() -> Kernel {
    let h = DType::F16;
    let mut kb = Kb::new("k1_f16_chain", &[0, 1, 2], &[3], &[32, 128]).origin(&[
        (3, "mul"),
        (4, "sigmoid"),
        (5, "erf"),
        (6, "add"),
        (7, "relu"),
        (8, "sub"),
        (9, "maximum"),
    ]);
    kb.store(&[], |b| {
        let x = b.load(h, 0, 0, &[128, 1]);
        let y = b.load(h, 1, 0, &[128, 1]);
        let s = b.load(h, 2, 0, &[1, 0]);
        let m = b.bin(h, BinaryOp::Mul, x, y);
        let sg = b.un(h, UnaryOp::Sigmoid, m);
        let e = b.un(h, UnaryOp::Erf, x);
        let a = b.bin(h, BinaryOp::Add, sg, e);
        let r = b.un(h, UnaryOp::Relu, y);
        let d = b.bin(h, BinaryOp::Sub, a, r);
        let third = b.c(h, Scalar::Float(1.0 / 3.0));
        let d = b.bin(h, BinaryOp::Mul, d, third);
        let mx = b.bin(h, BinaryOp::Maximum, d, s);
        vec![(3, affine(0, &[128, 1]), mx)]
    });
    kb.k
}

/// bf16 in, f32 and bf16 out: casts and a constant that rounds.
pub fn elementwise_bf16_mixed() -> Kernel {
    let bf = DType::BF16;
    let mut kb = Kb::new("k2_bf16_cast", &[0], &[1, 2], &[1024]).origin(&[(1, "cast"), (2, "exp")]);
    kb.store(&[], |b| {
        let x = b.load(bf, 0, 0, &[1]);
        let c = b.c(bf, Scalar::Float(0.1));
        let a = b.bin(bf, BinaryOp::Add, x, c);
        let e = b.un(bf, UnaryOp::Exp, a);
        let f = b.cast(F32, e);
        vec![(1, affine(0, &[1]), f), (2, affine(0, &[1]), e)]
    });
    kb.k
}

/// Softmax over rows of `n` (`x` is `[rows, n]`), in `d`, f32 accumulation.
pub fn softmax(name: &str, d: DType, rows: usize, n: usize) -> Kernel {
    let ni = n as i64;
    let mut kb = Kb::new(name, &[0], &[1], &[rows]).origin(&[
        (1, "max"),
        (2, "sub"),
        (3, "exp"),
        (4, "sum"),
        (5, "div"),
    ]);
    let m = kb.reduce(&[n], Combiner::Max, F32, |b| {
        let x = b.load(d, 0, 0, &[ni, 1]);
        b.cast(F32, x)
    });
    let s = kb.reduce(&[n], Combiner::Sum, F32, |b| {
        let x = b.load(d, 0, 0, &[ni, 1]);
        let x = b.cast(F32, x);
        let t = b.bin(F32, BinaryOp::Sub, x, m);
        b.un(F32, UnaryOp::Exp, t)
    });
    kb.store(&[n], |b| {
        let x = b.load(d, 0, 0, &[ni, 1]);
        let x = b.cast(F32, x);
        let t = b.bin(F32, BinaryOp::Sub, x, m);
        let e = b.un(F32, UnaryOp::Exp, t);
        let q = b.bin(F32, BinaryOp::Div, e, s);
        let q = b.cast(d, q);
        vec![(1, affine(0, &[ni, 1]), q)]
    });
    kb.k
}

/// argmax (or argmin) over the last dim of `[rows, n]` f32, written as i64.
pub fn arg_reduce(name: &str, c: Combiner, rows: usize, n: usize) -> Kernel {
    let ni = n as i64;
    let mut kb = Kb::new(name, &[0], &[1], &[rows]).origin(&[(1, "argmax")]);
    let r = kb.reduce(&[n], c, F32, |b| b.load(F32, 0, 0, &[ni, 1]));
    kb.store(&[], |b| {
        let _ = b;
        vec![(1, affine(0, &[1]), r)]
    });
    kb.k
}

/// Integer ops: floor_div, remainder, pow, maximum, casts to i64 and from f32 (saturating).
pub fn int_floor_div() -> Kernel {
    let i = DType::I32;
    let mut kb = Kb::new("k5_int_ops", &[0, 1, 2], &[3, 4], &[1000]).origin(&[
        (3, "floor_div"),
        (4, "remainder"),
        (5, "pow"),
        (6, "cast"),
    ]);
    kb.store(&[], |b| {
        let x = b.load(i, 0, 0, &[1]);
        let y = b.load(i, 1, 0, &[1]);
        let f = b.load(F32, 2, 0, &[1]);
        let q = b.bin(i, BinaryOp::FloorDiv, x, y);
        let r = b.bin(i, BinaryOp::Remainder, x, y);
        let three = b.c(i, Scalar::Int(3));
        let p = b.bin(i, BinaryOp::Pow, r, three);
        let s = b.bin(i, BinaryOp::Add, q, p);
        let fi = b.cast(i, f);
        let s = b.bin(i, BinaryOp::Maximum, s, fi);
        let n = b.un(i, UnaryOp::Neg, s);
        let wide = b.cast(DType::I64, n);
        let big = b.c(DType::I64, Scalar::Int(i64::MIN));
        let w = b.bin(DType::I64, BinaryOp::Mul, wide, big);
        vec![(3, affine(0, &[1]), n), (4, affine(0, &[1]), w)]
    });
    kb.k
}

/// A transpose through computed indices: `out[i, j] = x[j, i]` with `x: [32, 64]`, the source
/// index computed from the flat output index by div/mod.
pub fn computed_transpose() -> Kernel {
    let mut kb = Kb::new("k6_permute", &[0], &[1], &[64, 32]).origin(&[(1, "permute")]);
    kb.store(&[], |b| {
        let i = b.var(0);
        let j = b.var(1);
        let c32 = b.ic(32);
        let c64 = b.ic(64);
        let flat = b.push(Ty::Index, InstOp::IndexMul(i, c32));
        let flat = b.push(Ty::Index, InstOp::IndexAdd(flat, j));
        let row = b.push(Ty::Index, InstOp::IndexRem(flat, c32));
        let col = b.push(Ty::Index, InstOp::IndexDiv(flat, c32));
        let src = b.push(Ty::Index, InstOp::IndexMul(row, c64));
        let src = b.push(Ty::Index, InstOp::IndexAdd(src, col));
        let x = b.load_at(F32, 0, src);
        vec![(1, affine(0, &[32, 1]), x)]
    });
    kb.k
}

/// `out[i, j] = table[idx[i], j]` (an embedding lookup), 64-bit indexing, with a pad-like
/// select on `j < 48`.
pub fn gather() -> Kernel {
    let mut kb = Kb::new("k7_index_select", &[0, 1], &[2], &[16, 64])
        .origin(&[(2, "index_select"), (3, "where")])
        .wide();
    kb.store(&[], |b| {
        let id = b.load(DType::I64, 0, 0, &[1, 0]);
        let id = b.push(Ty::Index, InstOp::ToIndex(id));
        let c64 = b.ic(64);
        let j = b.var(1);
        let at = b.push(Ty::Index, InstOp::IndexMul(id, c64));
        let at = b.push(Ty::Index, InstOp::IndexAdd(at, j));
        let v = b.load_at(F32, 1, at);
        let c48 = b.ic(48);
        let lt = b.push(Ty::Data(DType::Bool), InstOp::IndexLt(j, c48));
        let z = b.c(F32, Scalar::Float(f64::NEG_INFINITY));
        let s = b.push(Ty::Data(F32), InstOp::Select(lt, v, z));
        vec![(2, affine(0, &[64, 1]), s)]
    });
    kb.k
}

/// layer_norm over `[rows, n]` in bf16 with weight and bias, three stages.
pub fn layer_norm_bf16(rows: usize, n: usize) -> Kernel {
    let bf = DType::BF16;
    let ni = n as i64;
    let mut kb = Kb::new("k8_layer_norm", &[0, 1, 2], &[3], &[rows]).origin(&[
        (4, "mean"),
        (5, "sub"),
        (6, "mul"),
        (7, "mean"),
        (8, "add"),
        (9, "rsqrt"),
        (10, "mul"),
        (11, "add"),
    ]);
    let inv_n = Scalar::Float(1.0 / n as f64);
    let sum = kb.reduce(&[n], Combiner::Sum, F32, |b| {
        let x = b.load(bf, 0, 0, &[ni, 1]);
        b.cast(F32, x)
    });
    let sq = kb.reduce(&[n], Combiner::Sum, F32, |b| {
        let x = b.load(bf, 0, 0, &[ni, 1]);
        let x = b.cast(F32, x);
        let k = b.c(F32, inv_n);
        let mean = b.bin(F32, BinaryOp::Mul, sum, k);
        let d = b.bin(F32, BinaryOp::Sub, x, mean);
        b.bin(F32, BinaryOp::Mul, d, d)
    });
    kb.store(&[n], |b| {
        let x = b.load(bf, 0, 0, &[ni, 1]);
        let w = b.load(bf, 1, 0, &[0, 1]);
        let bias = b.load(bf, 2, 0, &[0, 1]);
        let k = b.c(F32, inv_n);
        let mean = b.bin(F32, BinaryOp::Mul, sum, k);
        let var = b.bin(F32, BinaryOp::Mul, sq, k);
        let eps = b.c(F32, Scalar::Float(1e-5));
        let ve = b.bin(F32, BinaryOp::Add, var, eps);
        let rs = b.un(F32, UnaryOp::Rsqrt, ve);
        let x = b.cast(F32, x);
        let d = b.bin(F32, BinaryOp::Sub, x, mean);
        let y = b.bin(F32, BinaryOp::Mul, d, rs);
        let y = b.cast(bf, y);
        let y = b.bin(bf, BinaryOp::Mul, y, w);
        let y = b.bin(bf, BinaryOp::Add, y, bias);
        vec![(3, affine(0, &[ni, 1]), y)]
    });
    kb.k
}

/// Column sums of a `[rows, cols]` f64 matrix, and the count of true values per column of a
/// bool matrix (i64 accumulator), max of an i32 matrix; two outputs.
pub fn column_reductions(rows: usize, cols: usize) -> Kernel {
    let c = cols as i64;
    let mut kb = Kb::new("k9_column_sums", &[0, 1, 2], &[3, 4, 5], &[cols]).origin(&[
        (3, "sum"),
        (4, "sum"),
        (5, "max"),
    ]);
    let s = kb.reduce(&[rows], Combiner::Sum, DType::F64, |b| {
        b.load(DType::F64, 0, 0, &[1, c])
    });
    let t = kb.reduce(&[rows], Combiner::Sum, DType::I64, |b| {
        let x = b.load(DType::Bool, 1, 0, &[1, c]);
        b.cast(DType::I64, x)
    });
    let m = kb.reduce(&[rows], Combiner::Max, DType::I32, |b| {
        b.load(DType::I32, 2, 0, &[1, c])
    });
    kb.store(&[], |_| {
        vec![
            (3, affine(0, &[1]), s),
            (4, affine(0, &[1]), t),
            (5, affine(0, &[1]), m),
        ]
    });
    kb.k
}

/// Every hand-built kernel, with a test name.
pub fn all() -> Vec<(&'static str, Kernel)> {
    vec![
        ("elementwise_f32_broadcast", elementwise_f32_broadcast()),
        ("elementwise_f16_chain", elementwise_f16_chain()),
        ("elementwise_bf16_mixed", elementwise_bf16_mixed()),
        ("softmax_f32", softmax("k3_softmax", F32, 128, 512)),
        (
            "softmax_f16_long_rows",
            softmax("k3_softmax_long", DType::F16, 4, 8192),
        ),
        (
            "softmax_short_rows",
            softmax("k3_softmax_short", F32, 1000, 10),
        ),
        (
            "argmax",
            arg_reduce("k4_argmax", Combiner::ArgMax, 16, 1000),
        ),
        (
            "argmin_short_rows",
            arg_reduce("k4_argmin", Combiner::ArgMin, 1024, 8),
        ),
        ("int_floor_div", int_floor_div()),
        ("computed_transpose", computed_transpose()),
        ("gather", gather()),
        ("layer_norm_bf16", layer_norm_bf16(8, 768)),
        ("column_reductions", column_reductions(4096, 64)),
        ("column_reductions_short", column_reductions(3, 100)),
        (
            "column_reductions_many_columns",
            column_reductions(256, 4096),
        ),
    ]
}

/// The hand-built kernels as one program (buffer declarations are placeholders: the printer
/// takes dtypes from loads and stores; use it for printing and compiling, not evaluating).
pub fn program() -> Program {
    let mut steps = Vec::new();
    let mut buffers: Vec<BufferDecl> = Vec::new();
    let mut next = 0u32;
    for (_, mut k) in all() {
        // Renumber each kernel's buffers so that the program's buffers are distinct.
        let map = |b: BufferId| BufferId(b.0 + next);
        k.reads = k.reads.iter().map(|&b| map(b)).collect();
        k.writes = k.writes.iter().map(|&b| map(b)).collect();
        for st in &mut k.stages {
            for inst in &mut st.body {
                if let InstOp::Load { buffer, .. } = &mut inst.op {
                    *buffer = map(*buffer);
                }
            }
            if let StageEffect::Store(stores) = &mut st.effect {
                for s in stores {
                    s.buffer = map(s.buffer);
                }
            }
        }
        let count = k
            .reads
            .iter()
            .chain(&k.writes)
            .map(|b| b.0 + 1)
            .max()
            .unwrap_or(next);
        for id in next..count {
            buffers.push(BufferDecl {
                id: BufferId(id),
                dtype: F32,
                numel: 1,
                kind: BufferKind::Temp,
                value: NodeId(id),
            });
        }
        next = count;
        steps.push(Step::Kernel(k));
    }
    Program {
        buffers,
        steps,
        outputs: Vec::new(),
    }
}
