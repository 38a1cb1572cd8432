//! Random left-hand sides for the rule property tests: a tiny deterministic generator and
//! graph-building helpers (random dtypes, broadcast-compatible shapes, constants mixing
//! special values).

use half::{bf16, f16};
use smelt_ir::arbitrary::rng::Rng;
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, NodeId, ReduceOp, TensorData, UnaryOp};

pub const NUMERIC: &[DType] = &[
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];
pub const FLOATS: &[DType] = &[DType::F16, DType::BF16, DType::F32, DType::F64];
pub const ALL: &[DType] = &DType::ALL;

/// Constants drawn for rule operands: identities, signed zeros, infinities, NaN, subnormals,
/// extremes.
pub const SPECIAL: &[f64] = &[
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
    6e-8,
    65504.0,
    1e30,
    2147483647.0,
    -9.223372036854776e18,
];

/// `smelt_ir`'s SplitMix64 plus graph helpers.
pub struct Gen {
    rng: Rng,
    names: usize,
    /// Finite operands only (fast-math rules): constants in `[-8, -1/8] ∪ [1/8, 8]`.
    pub finite: bool,
}

impl Gen {
    pub fn new(seed: u64, finite: bool) -> Gen {
        Gen {
            rng: Rng::new(seed),
            names: 0,
            finite,
        }
    }

    pub fn next(&mut self) -> u64 {
        self.rng.next_u64()
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

    /// Rank 0–3, dims mostly 1–3, rarely 0.
    pub fn shape(&mut self) -> Vec<usize> {
        let rank = self.below(4);
        (0..rank)
            .map(|_| if self.chance(3) { 0 } else { 1 + self.below(3) })
            .collect()
    }

    /// A shape of rank at least 1 and no zero dims.
    pub fn shape_nonempty(&mut self) -> Vec<usize> {
        let rank = 1 + self.below(3);
        (0..rank).map(|_| 1 + self.below(3)).collect()
    }

    /// A shape that broadcasts with `s`: `s`, a scalar, a suffix, `s` with some dims 1, or a
    /// larger one (so that the result is bigger than `s`).
    pub fn bshape(&mut self, s: &[usize]) -> Vec<usize> {
        match self.below(6) {
            0 | 1 => s.to_vec(),
            2 => vec![],
            3 => s[self.below(s.len() + 1)..].to_vec(),
            4 => s
                .iter()
                .map(|&d| if self.chance(50) { 1 } else { d })
                .collect(),
            _ => {
                let mut v = vec![2];
                v.extend_from_slice(s);
                v
            }
        }
    }

    /// A random permutation of `0..rank` (the identity a quarter of the time).
    pub fn perm(&mut self, rank: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..rank).collect();
        if self.chance(75) {
            for i in (1..rank).rev() {
                let j = self.below(i + 1);
                p.swap(i, j);
            }
        }
        p
    }

    pub fn input(&mut self, g: &mut Graph, dtype: DType, shape: &[usize]) -> NodeId {
        self.names += 1;
        g.input(format!("x{}", self.names), dtype, shape.to_vec())
            .expect("fresh input name")
    }

    /// A constant whose elements come from `vals` (all equal half of the time); in finite
    /// mode, from `[-8, -1/8] ∪ [1/8, 8]` instead unless `vals` is given explicitly.
    pub fn constant(
        &mut self,
        g: &mut Graph,
        dtype: DType,
        shape: &[usize],
        vals: &[f64],
    ) -> NodeId {
        let n: usize = shape.iter().product();
        let splat = self.chance(50);
        let first = self.value(vals);
        let vs: Vec<f64> = (0..n)
            .map(|_| if splat { first } else { self.value(vals) })
            .collect();
        g.constant(tensor(dtype, shape, &vs)).expect("constant")
    }

    fn value(&mut self, vals: &[f64]) -> f64 {
        if vals.is_empty() {
            let m = 0.125 + (self.next() % 1000) as f64 * 7.875 / 1000.0;
            if self.chance(50) {
                -m
            } else {
                m
            }
        } else {
            self.pick(vals)
        }
    }

    /// A constant from `vals`, or (a third of the time, in exact mode) from [`SPECIAL`].
    pub fn constant_or_special(
        &mut self,
        g: &mut Graph,
        dtype: DType,
        shape: &[usize],
        vals: &[f64],
    ) -> NodeId {
        if !self.finite && self.chance(33) {
            self.constant(g, dtype, shape, SPECIAL)
        } else {
            self.constant(g, dtype, shape, vals)
        }
    }

    /// `u(x)` for a random unary op valid on `x`.
    pub fn any_unary(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        for _ in 0..50 {
            let u = self.pick(UnaryOp::ALL);
            if self.finite && !matches!(u, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu) {
                continue;
            }
            if let Ok(id) = g.unary(u, x) {
                return id;
            }
        }
        g.cast(x, DType::F32).expect("cast")
    }

    /// `op(a, b)` for a random binary op valid on them.
    pub fn any_binary(&mut self, g: &mut Graph, a: NodeId, b: NodeId) -> NodeId {
        for _ in 0..50 {
            if let Ok(id) = g.binary(self.pick(BinaryOp::ALL), a, b) {
                return id;
            }
        }
        g.binary(BinaryOp::Eq, a, b).expect("eq")
    }

    /// A random reduction of `x` that type-checks.
    pub fn any_reduce(&mut self, g: &mut Graph, x: NodeId) -> NodeId {
        let rank = g.ty(x).shape.rank();
        for _ in 0..50 {
            let axes: Vec<usize> = (0..rank).filter(|_| self.chance(50)).collect();
            let op = self.pick(ReduceOp::ALL);
            if let Ok(id) = g.reduce(op, x, &axes, self.chance(50)) {
                return id;
            }
        }
        g.reduce(ReduceOp::Sum, x, &[], false)
            .expect("sum over no axes")
    }
}

/// A tensor of `dtype` holding `vs` converted like a cast (NaN → 0, saturating for integers).
pub fn tensor(dtype: DType, shape: &[usize], vs: &[f64]) -> HostTensor {
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

/// `g` with `root` as its only output, `"y"`.
pub fn finish(mut g: Graph, root: NodeId) -> Graph {
    g.set_output("y", root).expect("one output");
    g
}
