//! One method per op kind: each picks operands, builds attributes that fit their types, and
//! reports whether the op was added (the caller falls back to a cast if not).

use super::build::{Builder, MAX_RANK};
use crate::dtype::{DType, Scalar};
use crate::graph::NodeId;
use crate::op::{BinaryOp, Op, ReduceOp, SliceRange, UnaryOp};
use crate::shape::Shape;
use smallvec::SmallVec;

impl Builder<'_> {
    pub(super) fn unary(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let dtype = self.ty(a).dtype;
        let ops: Vec<UnaryOp> = UnaryOp::ALL
            .iter()
            .copied()
            .filter(|u| match dtype {
                DType::Bool => *u == UnaryOp::LogicalNot,
                d if d.is_int() => !u.float_only(),
                _ => true,
            })
            .collect();
        let u = self.rng.pick(&ops);
        self.try_push(Op::Unary(u, a)).is_some()
    }

    pub(super) fn binary(&mut self) -> bool {
        use BinaryOp::*;
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let ta = self.ty(a);
        let ops: Vec<BinaryOp> = BinaryOp::ALL
            .iter()
            .copied()
            .filter(|b| match ta.dtype {
                DType::Bool => b.returns_bool(),
                d if d.is_int() => *b != Div,
                _ => true,
            })
            .collect();
        let op = self.rng.pick(&ops);
        let dims = ta.shape.dims().to_vec();
        let b = if ta.dtype.is_int() && matches!(op, FloorDiv | Remainder) {
            let shape = self.partner(&dims, false);
            self.constant_from(ta.dtype, shape, &[1, 2, 3, 7, -2, -3, -5])
        } else if ta.dtype.is_int() && op == Pow {
            let shape = self.partner(&dims, false);
            self.constant_from(ta.dtype, shape, &[0, 1, 2, 3])
        } else {
            let same = ta.dtype;
            let existing = if self.rng.chance(50) {
                self.pick(|t| t.dtype == same && t.shape.broadcast(&ta.shape).is_some())
            } else {
                None
            };
            match existing {
                Some(b) => Some(b),
                None => {
                    let shape = self.partner(&dims, true);
                    self.fresh(same, shape)
                }
            }
        };
        let Some(b) = b else { return false };
        let swap = !matches!(op, FloorDiv | Remainder | Pow) || ta.dtype.is_float();
        let (x, y) = if swap && self.rng.chance(40) {
            (b, a)
        } else {
            (a, b)
        };
        self.try_push(Op::Binary(op, x, y)).is_some()
    }

    pub(super) fn reduce(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let ta = self.ty(a);
        let dims = ta.shape.dims();
        let mut op = self.rng.pick(ReduceOp::ALL);
        if op == ReduceOp::Mean && !ta.dtype.is_float() {
            op = ReduceOp::Sum;
        }
        if matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin) && ta.dtype.is_bool() {
            op = ReduceOp::Max;
        }
        let nonzero: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] != 0).collect();
        let mut axes: Vec<usize> = match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin if dims.is_empty() => vec![],
            ReduceOp::ArgMax | ReduceOp::ArgMin => {
                if nonzero.is_empty() {
                    return false;
                }
                vec![self.rng.pick(&nonzero)]
            }
            ReduceOp::Max | ReduceOp::Min => nonzero
                .into_iter()
                .filter(|_| self.rng.chance(50))
                .collect(),
            _ => (0..dims.len()).filter(|_| self.rng.chance(50)).collect(),
        };
        self.rng.shuffle(&mut axes);
        let keepdim = self.rng.chance(40);
        let axes = SmallVec::from_vec(axes);
        self.try_push(Op::Reduce {
            op,
            input: a,
            axes,
            keepdim,
        })
        .is_some()
    }

    /// Always succeeds (casts type-check for every pair of dtypes).
    pub(super) fn cast(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let from = self.ty(a).dtype;
        let mut to = self.dtype();
        if from.is_float() && to.is_int() && !self.cfg.float_to_int_casts {
            to = DType::F32;
        }
        self.try_push(Op::Cast { input: a, to }).is_some()
    }

    pub(super) fn reshape(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let n = self.ty(a).shape.numel();
        let dims = if n == 0 {
            let rank = 1 + self.rng.below(MAX_RANK);
            let mut d: Vec<usize> = (0..rank).map(|_| self.dim()).collect();
            let zero = self.rng.below(rank);
            d[zero] = 0;
            d
        } else {
            let rank = if n == 1 {
                self.rng.below(MAX_RANK + 1)
            } else {
                1 + self.rng.below(MAX_RANK)
            };
            let mut d = vec![1; rank];
            let (mut m, mut p) = (n, 2);
            while m > 1 {
                while m % p > 0 {
                    p += 1;
                }
                m /= p;
                let slot = self.rng.below(rank);
                d[slot] *= p;
            }
            d
        };
        self.try_push(Op::Reshape {
            input: a,
            shape: Shape::from(dims),
        })
        .is_some()
    }

    pub(super) fn permute(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let mut perm: Vec<usize> = (0..self.ty(a).shape.rank()).collect();
        self.rng.shuffle(&mut perm);
        let perm = SmallVec::from_vec(perm);
        self.try_push(Op::Permute { input: a, perm }).is_some()
    }

    pub(super) fn expand(&mut self) -> bool {
        let Some(a) = self.pick(|t| t.shape.rank() < MAX_RANK) else {
            return false;
        };
        let mut dims: Vec<usize> = self
            .ty(a)
            .shape
            .dims()
            .iter()
            .map(|&d| {
                if d == 1 {
                    self.rng.pick(&[1, 2, 3, 4, 0])
                } else {
                    d
                }
            })
            .collect();
        for _ in 0..self.rng.below(3) {
            if dims.len() < 4 {
                let lead = self.rng.pick(&[1, 2, 3]);
                dims.insert(0, lead);
            }
        }
        self.try_push(Op::Expand {
            input: a,
            shape: Shape::from(dims),
        })
        .is_some()
    }

    pub(super) fn slice_ranges(&mut self, dims: &[usize]) -> SmallVec<[SliceRange; 6]> {
        dims.iter()
            .map(|&d| {
                if self.rng.chance(30) {
                    return SliceRange::full(d);
                }
                let start = self.rng.below(d + 1);
                let stop = start + self.rng.below(d - start + 1);
                let step = self.rng.pick(&[1, 1, 2, 3]);
                SliceRange { start, stop, step }
            })
            .collect()
    }

    pub(super) fn slice(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let dims = self.ty(a).shape.dims().to_vec();
        let ranges = self.slice_ranges(&dims);
        self.try_push(Op::Slice { input: a, ranges }).is_some()
    }

    pub(super) fn concat(&mut self) -> bool {
        let Some(a) = self.pick(|t| t.shape.rank() >= 1) else {
            return false;
        };
        let ta = self.ty(a);
        let dims = ta.shape.dims().to_vec();
        let axis = self.rng.below(dims.len());
        let mut inputs = vec![a];
        for _ in 0..self.rng.below(3) {
            let other = match self.rng.below(4) {
                0 => Some(a),
                1 => self.pick(|t| {
                    t.dtype == ta.dtype
                        && t.shape.rank() == dims.len()
                        && (0..dims.len()).all(|i| i == axis || t.shape.dims()[i] == dims[i])
                }),
                2 => {
                    let mut ranges: SmallVec<[SliceRange; 6]> =
                        dims.iter().map(|&d| SliceRange::full(d)).collect();
                    ranges[axis] = self.slice_ranges(&dims[axis..=axis])[0];
                    self.try_push(Op::Slice { input: a, ranges })
                }
                _ => {
                    let mut d = dims.clone();
                    d[axis] = self.dim();
                    self.constant(ta.dtype, d)
                }
            };
            inputs.extend(other);
        }
        self.rng.shuffle(&mut inputs);
        let inputs = SmallVec::from_vec(inputs);
        self.try_push(Op::Concat { inputs, axis }).is_some()
    }

    pub(super) fn pad(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let ta = self.ty(a);
        let pads = (0..ta.shape.rank())
            .map(|_| (self.rng.pick(&[0, 0, 1, 2]), self.rng.pick(&[0, 0, 1, 2])))
            .collect();
        let value = match (ta.dtype, self.rng.below(4)) {
            (d, 0) if d.is_float() => Scalar::Int(self.int_value(-100, 100)),
            (d, _) if d.is_float() => Scalar::Float(self.float_value()),
            (DType::Bool, 0) => Scalar::Int(self.rng.below(2) as i64),
            (DType::Bool, _) => Scalar::Bool(self.rng.chance(50)),
            (_, 0) => Scalar::Bool(self.rng.chance(50)),
            (DType::I32, _) => Scalar::Int(self.int_value(i32::MIN as i64, i32::MAX as i64)),
            _ => Scalar::Int(self.int_value(i64::MIN, i64::MAX)),
        };
        self.try_push(Op::Pad {
            input: a,
            pads,
            value,
        })
        .is_some()
    }

    pub(super) fn matmul(&mut self) -> bool {
        let Some(a) = self.pick(|t| !t.dtype.is_bool() && t.shape.rank() >= 1) else {
            return false;
        };
        let ta = self.ty(a);
        let dims = ta.shape.dims().to_vec();
        let r = dims.len();
        let batch = dims[..r.saturating_sub(2)].to_vec();
        match self.rng.below(3) {
            0 if r >= 2 => {
                let mut perm: SmallVec<[usize; 6]> = (0..r).collect();
                perm.swap(r - 1, r - 2);
                let Some(t) = self.try_push(Op::Permute { input: a, perm }) else {
                    return false;
                };
                self.try_push(Op::MatMul(a, t)).is_some()
            }
            1 => {
                let k = if r == 1 { dims[0] } else { dims[r - 2] };
                let mut left = if self.rng.chance(30) {
                    vec![]
                } else {
                    self.matmul_batch(&batch)
                };
                if !left.is_empty() || self.rng.chance(70) {
                    left.push(self.dim());
                }
                left.push(k);
                let Some(b) = self.fresh(ta.dtype, left) else {
                    return false;
                };
                self.try_push(Op::MatMul(b, a)).is_some()
            }
            _ => {
                let k = dims[r - 1];
                let mut right = self.matmul_batch(&batch);
                right.push(k);
                if right.len() > 1 || self.rng.chance(70) {
                    right.push(self.dim());
                }
                let Some(b) = self.fresh(ta.dtype, right) else {
                    return false;
                };
                self.try_push(Op::MatMul(a, b)).is_some()
            }
        }
    }

    /// Batch dims for the other operand of a matmul: broadcast-compatible, at most two.
    pub(super) fn matmul_batch(&mut self, batch: &[usize]) -> Vec<usize> {
        let mut b = self.partner(batch, true);
        let excess = b.len().saturating_sub(2);
        b.drain(..excess);
        b
    }

    pub(super) fn index_dtype(&mut self) -> DType {
        if self.rng.chance(50) {
            DType::I32
        } else {
            DType::I64
        }
    }

    /// An index constant with values in `0..bound` (`bound` 0 only with no elements).
    pub(super) fn index(&mut self, dims: Vec<usize>, bound: usize) -> Option<NodeId> {
        let values: Vec<i64> = (0..bound.max(1) as i64).collect();
        let dtype = self.index_dtype();
        self.constant_from(dtype, dims, &values)
    }

    pub(super) fn gather(&mut self) -> bool {
        let Some(a) = self.pick(|t| t.shape.rank() >= 1) else {
            return false;
        };
        let dims = self.ty(a).shape.dims().to_vec();
        let axis = self.rng.below(dims.len());
        let idx: Vec<usize> = (0..dims.len())
            .map(|i| match (i == axis, dims[i]) {
                (true, 0) => 0,
                (true, _) => self.dim(),
                (false, d) if self.rng.chance(60) => d,
                (false, d) => self.rng.below(d + 1),
            })
            .collect();
        let Some(index) = self.index(idx, dims[axis]) else {
            return false;
        };
        self.try_push(Op::Gather {
            input: a,
            index,
            axis,
        })
        .is_some()
    }

    pub(super) fn index_select(&mut self) -> bool {
        let Some(a) = self.pick(|t| t.shape.rank() >= 1) else {
            return false;
        };
        let dims = self.ty(a).shape.dims().to_vec();
        let axis = self.rng.below(dims.len());
        let len = if dims[axis] == 0 {
            0
        } else {
            self.rng.below(6)
        };
        let Some(index) = self.index(vec![len], dims[axis]) else {
            return false;
        };
        self.try_push(Op::IndexSelect {
            input: a,
            index,
            axis,
        })
        .is_some()
    }

    pub(super) fn where_(&mut self) -> bool {
        let Some(a) = self.pick(|_| true) else {
            return false;
        };
        let ta = self.ty(a);
        let dims = ta.shape.dims().to_vec();
        let b = match self.pick(|t| t.dtype == ta.dtype && t.shape.broadcast(&ta.shape).is_some()) {
            Some(b) if self.rng.chance(40) => b,
            _ => {
                let shape = self.partner(&dims, true);
                let Some(b) = self.fresh(ta.dtype, shape) else {
                    return false;
                };
                b
            }
        };
        let Some(out) = ta.shape.broadcast(&self.ty(b).shape) else {
            return false;
        };
        let cond = match self.rng.below(3) {
            0 => self.pick(|t| t.dtype == DType::Bool && t.shape.broadcasts_to(&out)),
            1 => {
                let cmp = self
                    .rng
                    .pick(&[BinaryOp::Eq, BinaryOp::Ne, BinaryOp::Lt, BinaryOp::Ge]);
                self.try_push(Op::Binary(cmp, a, b))
            }
            _ => None,
        };
        let cond = match cond {
            Some(c) => c,
            None => {
                let shape = self.partner(out.dims(), false);
                let Some(c) = self.constant(DType::Bool, shape) else {
                    return false;
                };
                c
            }
        };
        let (x, y) = if self.rng.chance(50) { (a, b) } else { (b, a) };
        self.try_push(Op::Where(cond, x, y)).is_some()
    }
}
