//! Building one random graph from a list of steps: the builder's state and the helpers the
//! per-op methods (`ops.rs`) share.

use super::rng::Rng;
use super::{GenConfig, SPECIAL_F64};
use crate::dtype::DType;
use crate::graph::{Graph, NodeId, TensorType};
use crate::infer::infer;
use crate::op::Op;
use crate::shape::Shape;
use crate::tensor::{HostTensor, TensorData};
use half::{bf16, f16};
use std::collections::HashSet;

/// The highest rank a generated value has.
pub(super) const MAX_RANK: usize = 6;

/// Names that exercise the printer's quoting and naming rules.
const ODD_NAMES: [&str; 8] = ["in put", "0", "a\"b\\c", "é", "x.1", "", "tab\there", "%y"];

/// Builds a graph: one or two bindings, then one op per step (each step with its own seed),
/// then outputs. Never panics; always returns a graph that verifies and has an output.
pub fn build(cfg: &GenConfig, seed: u64, steps: &[(u8, u64)]) -> Graph {
    let max_nodes = cfg.max_nodes.max(1);
    let mut b = Builder {
        cfg,
        g: Graph::new(),
        rng: Rng::new(seed),
        bindings: HashSet::new(),
    };
    for _ in 0..1 + b.rng.below(2) {
        b.binding();
    }
    for &(kind, step_seed) in steps {
        if b.g.len() >= max_nodes {
            break;
        }
        b.rng = Rng::new(step_seed);
        b.step(kind);
    }
    b.rng = Rng::new(seed ^ 0x5eed);
    b.finish(max_nodes)
}

pub(super) struct Builder<'a> {
    pub(super) cfg: &'a GenConfig,
    pub(super) g: Graph,
    pub(super) rng: Rng,
    pub(super) bindings: HashSet<String>,
}

impl Builder<'_> {
    pub(super) fn step(&mut self, kind: u8) {
        let ok = match kind % 16 {
            0 => self.unary(),
            1 => self.binary(),
            2 => self.reduce(),
            3 => self.cast(),
            4 => self.reshape(),
            5 => self.permute(),
            6 => self.expand(),
            7 => self.slice(),
            8 => self.concat(),
            9 => self.pad(),
            10 => self.matmul(),
            11 => self.gather(),
            12 => self.index_select(),
            13 => self.where_(),
            14 => {
                let (dtype, shape) = (self.dtype(), self.shape());
                self.constant(dtype, shape).is_some()
            }
            _ => self.binding().is_some(),
        };
        if !ok {
            self.cast();
        }
    }

    /// Keeps at most `max_nodes` nodes (a prefix of a valid graph is valid) and names outputs:
    /// always the last node, sometimes a few more.
    pub(super) fn finish(mut self, max_nodes: usize) -> Graph {
        if self.g.len() > max_nodes {
            let nodes = self.g.nodes()[..max_nodes].to_vec();
            self.g = Graph::from_parts(nodes, Vec::new());
        }
        if self.g.is_empty() {
            let _ = self.g.input("x", DType::F32, [2]);
        }
        let last = NodeId(self.g.len() as u32 - 1);
        let mut outs = vec![last];
        for id in self.g.ids() {
            if outs.len() < 4 && self.rng.chance(10) {
                outs.push(id);
            }
        }
        let mut used = HashSet::new();
        for (i, id) in outs.into_iter().enumerate() {
            let name = self.name("y", i, &used);
            used.insert(name.clone());
            // Cannot fail: `id` is a node and the name is fresh.
            let _ = self.g.set_output(name, id);
        }
        self.g
    }

    pub(super) fn name(&mut self, prefix: &str, i: usize, used: &HashSet<String>) -> String {
        let odd = self.rng.pick(&ODD_NAMES).to_string();
        if self.rng.chance(8) && self.cfg.odd_names && !used.contains(&odd) {
            return odd;
        }
        let mut n = i;
        loop {
            let name = format!("{prefix}{n}");
            if !used.contains(&name) {
                return name;
            }
            n += 1;
        }
    }

    // ---- typed helpers -------------------------------------------------------------------

    pub(super) fn ty(&self, id: NodeId) -> TensorType {
        self.g.ty(id).clone()
    }

    /// Infers first, so an ill-typed op or one over the element budget leaves no trace.
    pub(super) fn try_push(&mut self, op: Op) -> Option<NodeId> {
        let ty = infer(&op, |o| self.g.ty(o)).ok()?;
        if ty.shape.numel() > self.cfg.max_numel || ty.shape.rank() > MAX_RANK {
            return None;
        }
        self.g.push(op).ok()
    }

    /// A node whose type satisfies `pred`, biased towards recent nodes.
    pub(super) fn pick(&mut self, pred: impl Fn(&TensorType) -> bool) -> Option<NodeId> {
        let ids: Vec<NodeId> = self.g.ids().filter(|&i| pred(self.g.ty(i))).collect();
        if ids.is_empty() {
            return None;
        }
        let i = if self.rng.chance(50) {
            ids.len() - 1 - self.rng.below(ids.len().min(3))
        } else {
            self.rng.below(ids.len())
        };
        Some(ids[i])
    }

    pub(super) fn dtype(&mut self) -> DType {
        self.rng.pick(&DType::ALL)
    }

    pub(super) fn dim(&mut self) -> usize {
        self.rng.pick(&[0, 1, 1, 1, 2, 2, 3, 3, 4, 5, 7, 2, 3, 1])
    }

    /// A random shape of rank 0–6 within the element budget.
    pub(super) fn shape(&mut self) -> Vec<usize> {
        let rank = self.rng.pick(&[0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6]);
        let dims = (0..rank).map(|_| self.dim()).collect();
        self.capped(dims)
    }

    pub(super) fn capped(&self, mut dims: Vec<usize>) -> Vec<usize> {
        while Shape::from(dims.clone()).numel() > self.cfg.max_numel {
            if let Some(d) = dims.iter_mut().max() {
                *d = 1;
            }
        }
        dims
    }

    /// A shape that broadcasts with `dims`: some dims become 1, leading dims dropped and,
    /// if `grow`, 1-dims widened and new leading dims added.
    pub(super) fn partner(&mut self, dims: &[usize], grow: bool) -> Vec<usize> {
        let mut out: Vec<usize> = dims
            .iter()
            .map(|&d| match self.rng.below(10) {
                0..=2 => 1,
                3 if grow && d == 1 => self.rng.pick(&[2, 3]),
                _ => d,
            })
            .collect();
        if self.rng.chance(25) {
            let drop = self.rng.below(out.len() + 1);
            out.drain(..drop);
        } else if grow && out.len() < 4 && self.rng.chance(25) {
            let lead = self.rng.pick(&[1, 2, 3]);
            out.insert(0, lead);
        }
        self.capped(out)
    }

    pub(super) fn float_value(&mut self) -> f64 {
        match self.rng.below(10) {
            0..=5 => (self.rng.below(33) as f64 - 16.0) / 4.0,
            6..=8 => self.rng.pick(&SPECIAL_F64),
            _ => (self.rng.below(2001) as f64 - 1000.0) / 7.0,
        }
    }

    pub(super) fn int_value(&mut self, min: i64, max: i64) -> i64 {
        match self.rng.below(10) {
            0..=6 => self.rng.below(21) as i64 - 10,
            7 => self.rng.pick(&[min, max, 0, -1, min + 1]),
            _ => (self.rng.next_u64() as i64).clamp(min, max),
        }
    }

    /// `n` random elements of `dtype`, special values included (and, one time in ten, raw bit
    /// patterns: NaN payloads, subnormals).
    pub(super) fn data(&mut self, dtype: DType, n: usize) -> TensorData {
        let raw = self.rng.chance(10);
        let floats = |b: &mut Builder, bits: u32| -> Vec<(f64, u64)> {
            (0..n)
                .map(|_| (b.float_value(), b.rng.next_u64() >> (64 - bits)))
                .collect()
        };
        match dtype {
            DType::Bool => TensorData::Bool((0..n).map(|_| self.rng.chance(50)).collect()),
            DType::I32 => TensorData::I32(
                (0..n)
                    .map(|_| self.int_value(i32::MIN as i64, i32::MAX as i64) as i32)
                    .collect(),
            ),
            DType::I64 => {
                TensorData::I64((0..n).map(|_| self.int_value(i64::MIN, i64::MAX)).collect())
            }
            DType::F16 => TensorData::F16(
                floats(self, 16)
                    .into_iter()
                    .map(|(x, r)| {
                        if raw {
                            f16::from_bits(r as u16)
                        } else {
                            f16::from_f64(x)
                        }
                    })
                    .collect(),
            ),
            DType::BF16 => TensorData::BF16(
                floats(self, 16)
                    .into_iter()
                    .map(|(x, r)| {
                        if raw {
                            bf16::from_bits(r as u16)
                        } else {
                            bf16::from_f64(x)
                        }
                    })
                    .collect(),
            ),
            DType::F32 => TensorData::F32(
                floats(self, 32)
                    .into_iter()
                    .map(|(x, r)| {
                        if raw {
                            f32::from_bits(r as u32)
                        } else {
                            x as f32
                        }
                    })
                    .collect(),
            ),
            DType::F64 => TensorData::F64(
                floats(self, 64)
                    .into_iter()
                    .map(|(x, r)| if raw { f64::from_bits(r) } else { x })
                    .collect(),
            ),
        }
    }

    pub(super) fn constant(&mut self, dtype: DType, dims: Vec<usize>) -> Option<NodeId> {
        let n = Shape::from(dims.clone()).numel();
        if n > self.cfg.max_numel {
            return None;
        }
        let data = self.data(dtype, n);
        self.try_push(Op::Constant(HostTensor::new(dims, data).ok()?))
    }

    /// A constant of `dtype` whose values are drawn from `values`.
    pub(super) fn constant_from(
        &mut self,
        dtype: DType,
        dims: Vec<usize>,
        values: &[i64],
    ) -> Option<NodeId> {
        let n = Shape::from(dims.clone()).numel();
        let v: Vec<i64> = (0..n).map(|_| self.rng.pick(values)).collect();
        let data = match dtype {
            DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
            DType::I64 => TensorData::I64(v),
            _ => return None,
        };
        self.try_push(Op::Constant(HostTensor::new(dims, data).ok()?))
    }

    /// A fresh input or param (random type unless given).
    pub(super) fn binding(&mut self) -> Option<NodeId> {
        let (dtype, dims) = (self.dtype(), self.shape());
        self.binding_of(dtype, dims)
    }

    pub(super) fn binding_of(&mut self, dtype: DType, dims: Vec<usize>) -> Option<NodeId> {
        let param = self.rng.chance(40);
        let used = self.bindings.clone();
        let name = self.name(if param { "w" } else { "x" }, used.len(), &used);
        self.bindings.insert(name.clone());
        let shape = Shape::from(dims);
        self.try_push(if param {
            Op::Param { name, dtype, shape }
        } else {
            Op::Input { name, dtype, shape }
        })
    }

    /// A new operand of the given type: a constant or a binding.
    pub(super) fn fresh(&mut self, dtype: DType, dims: Vec<usize>) -> Option<NodeId> {
        if self.rng.chance(60) {
            self.constant(dtype, dims)
        } else {
            self.binding_of(dtype, dims)
        }
    }
}
