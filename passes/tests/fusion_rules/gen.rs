//! Targeted random graphs for the per-rule fusion property tests: each generator builds
//! graphs in which one fusion rule has something to merge (and, now and then, something it
//! must refuse), from a small deterministic generator seeded by proptest.

use half::{bf16, f16};
use smelt_ir::arbitrary::rng::Rng;
use smelt_ir::{
    BinaryOp, DType, Graph, HostTensor, NodeId, ReduceOp, SliceRange, TensorData, UnaryOp,
};

/// Constant elements: signed zeros, infinities, NaN, subnormals, extremes, ordinary values.
const SPECIAL: &[f64] = &[
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    0.5,
    -3.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1e-40,
    5e-324,
    6e-8,
    65504.0,
    1e30,
];

const FLOATS: &[DType] = &[DType::F32, DType::F32, DType::F16, DType::BF16, DType::F64];

/// `smelt_ir`'s SplitMix64 plus graph-building helpers. Every helper returns a node that type-checks.
pub struct Gen {
    rng: Rng,
    names: usize,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            names: 0,
        }
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.rng.below(n)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.rng.chance(percent)
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        self.rng.pick(xs)
    }

    pub fn float(&mut self) -> DType {
        self.pick(FLOATS)
    }

    /// A float dtype most of the time, an integer one otherwise.
    pub fn numeric(&mut self) -> DType {
        if self.chance(15) {
            self.pick(&[DType::I32, DType::I64])
        } else {
            self.float()
        }
    }

    /// Rank in `lo..=hi`, dims 1–4 (rarely 0 when `zero` is allowed).
    pub fn shape(&mut self, lo: usize, hi: usize, zero: bool) -> Vec<usize> {
        let rank = lo + self.below(hi - lo + 1);
        (0..rank)
            .map(|_| {
                if zero && self.chance(3) {
                    0
                } else {
                    1 + self.below(4)
                }
            })
            .collect()
    }

    /// A shape that broadcasts to `s` without growing it: `s`, a suffix, `s` with unit dims,
    /// or a scalar.
    pub fn sub_shape(&mut self, s: &[usize]) -> Vec<usize> {
        match self.below(4) {
            0 => s.to_vec(),
            1 => s[self.below(s.len() + 1)..].to_vec(),
            2 => s
                .iter()
                .map(|&d| if self.chance(50) { 1 } else { d })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A non-empty random subset of `0..rank` (sorted).
    pub fn axes(&mut self, rank: usize) -> Vec<usize> {
        let mut a: Vec<usize> = (0..rank).filter(|_| self.chance(50)).collect();
        if a.is_empty() && rank > 0 {
            a.push(self.below(rank));
        }
        a
    }

    /// A random permutation of `0..rank`.
    pub fn perm(&mut self, rank: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..rank).collect();
        for i in (1..rank).rev() {
            let j = self.below(i + 1);
            p.swap(i, j);
        }
        p
    }

    pub fn input(&mut self, g: &mut Graph, dtype: DType, shape: &[usize]) -> NodeId {
        self.names += 1;
        g.input(format!("x{}", self.names), dtype, shape.to_vec())
            .expect("fresh input name")
    }

    /// A constant of special and ordinary elements (all equal half of the time).
    pub fn constant(&mut self, g: &mut Graph, dtype: DType, shape: &[usize]) -> NodeId {
        let n: usize = shape.iter().product();
        let splat = self.chance(50);
        let first = self.value();
        let vs: Vec<f64> = (0..n)
            .map(|_| if splat { first } else { self.value() })
            .collect();
        g.constant(tensor(dtype, shape, &vs)).expect("constant")
    }

    fn value(&mut self) -> f64 {
        if self.chance(40) {
            self.pick(SPECIAL)
        } else {
            (self.below(2001) as f64 - 1000.0) / 125.0
        }
    }

    /// A second operand for an elementwise op on `x` that does not grow its shape: an input
    /// or a constant (0-d or shaped), of `x`'s dtype.
    pub fn operand(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        let ty = g.ty(x).clone();
        let s = self.sub_shape(ty.shape.dims());
        if self.chance(50) {
            self.input(g, ty.dtype, &s)
        } else {
            self.constant(g, ty.dtype, &s)
        }
    }

    /// `u(x)` for a random unary op valid on `x` (a cast when none is).
    pub fn unary(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        let dtype = g.ty(x).dtype;
        for _ in 0..20 {
            let u = self.pick(UnaryOp::ALL);
            if u == UnaryOp::LogicalNot {
                continue;
            }
            if let Ok(id) = g.unary(u, x) {
                return id;
            }
        }
        let to = if dtype == DType::F64 {
            DType::F32
        } else {
            DType::F64
        };
        g.cast(x, to).expect("cast")
    }

    /// `op(a, b)` for a random arithmetic op keeping the dtype.
    pub fn binary(&mut self, g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
        use BinaryOp::*;
        let float = g.ty(a).dtype.is_float();
        let ops: &[BinaryOp] = if float {
            &[Add, Sub, Mul, Div, Maximum, Minimum, Pow]
        } else {
            &[Add, Sub, Mul, Maximum, Minimum]
        };
        let op = self.pick(ops);
        g.binary(op, a, b)
            .or_else(|_| g.binary(Add, a, b))
            .expect("operands of one dtype that broadcast")
    }

    /// A random elementwise op on `x` keeping its dtype and shape: unary, binary with a new
    /// operand, or a `where` between `x` and a new operand.
    pub fn elementwise(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        let dtype = g.ty(x).dtype;
        match self.below(5) {
            0 | 1 if dtype.is_float() => self.unary(g, x),
            0 => g.unary(UnaryOp::Neg, x).expect("neg"),
            2 | 3 => {
                let o = self.operand(g, x);
                if self.chance(50) {
                    self.binary(g, x, o)
                } else {
                    self.binary(g, o, x)
                }
            }
            _ => {
                let o = self.operand(g, x);
                let c = g.binary(BinaryOp::Lt, x, o).expect("compare");
                g.where_(c, x, o).expect("where")
            }
        }
    }

    /// A view of `x`: permute, reshape, expand or slice.
    pub fn view(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        let s = g.ty(x).shape.dims().to_vec();
        let rank = s.len();
        match self.below(4) {
            0 if rank >= 2 => g.permute(x, &self.perm(rank)).expect("permute"),
            1 => {
                let n: usize = s.iter().product();
                let to = match self.below(3) {
                    0 => vec![n],
                    1 => {
                        let mut v = vec![1];
                        v.extend_from_slice(&s);
                        v
                    }
                    _ if rank >= 2 => {
                        let mut v = vec![s[0] * s[1]];
                        v.extend_from_slice(&s[2..]);
                        v
                    }
                    _ => vec![1, n],
                };
                g.reshape(x, to).expect("reshape")
            }
            2 => {
                let mut to: Vec<usize> = s.iter().map(|&d| if d == 1 { 3 } else { d }).collect();
                if self.chance(50) || to == s {
                    to.insert(0, 2);
                }
                g.expand(x, to).expect("expand")
            }
            _ => {
                let ranges: Vec<SliceRange> = s
                    .iter()
                    .map(|&d| {
                        if d == 0 {
                            return SliceRange::full(0);
                        }
                        let start = self.below(d);
                        let stop = start + 1 + self.below(d - start);
                        SliceRange {
                            start,
                            stop,
                            step: 1 + self.below(2),
                        }
                    })
                    .collect();
                g.slice(x, &ranges).expect("slice")
            }
        }
    }

    /// A reduction of `x` over `axes` (a random op that type-checks; `sum` otherwise).
    pub fn reduce(&mut self, g: &mut Graph, x: NodeId, axes: &[usize], keepdim: bool) -> NodeId {
        use ReduceOp::*;
        let op = self.pick(&[Sum, Mean, Max, Min, Prod, Sum, Mean]);
        g.reduce(op, x, axes, keepdim)
            .or_else(|_| g.reduce(Sum, x, axes, keepdim))
            .expect("sum")
    }
}

/// A tensor of `dtype` holding `vs` converted like a cast.
fn tensor(dtype: DType, shape: &[usize], vs: &[f64]) -> HostTensor {
    let data = match dtype {
        DType::Bool => TensorData::Bool(vs.iter().map(|&v| v != 0.0).collect()),
        DType::I32 => TensorData::I32(vs.iter().map(|&v| v as i32).collect()),
        DType::I64 => TensorData::I64(vs.iter().map(|&v| v as i64).collect()),
        DType::F16 => TensorData::F16(vs.iter().map(|&v| f16::from_f64(v)).collect()),
        DType::BF16 => TensorData::BF16(vs.iter().map(|&v| bf16::from_f64(v)).collect()),
        DType::F32 => TensorData::F32(vs.iter().map(|&v| v as f32).collect()),
        DType::F64 => TensorData::F64(vs.to_vec()),
    };
    HostTensor::new(shape.to_vec(), data).expect("element count matches")
}
