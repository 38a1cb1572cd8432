//! The fusion e-graph: its language, its analysis and the side table of kernel bodies.
//!
//! E-classes are the graph's values (one class per node; nothing else is ever unioned into
//! a class but kernels computing that value). An e-node is a graph leaf, a single primitive
//! op (a kernel of one op), a fused kernel: a [`BodyId`] into the side table held by the
//! analysis plus the e-classes of the kernel's inputs, or one output of a multi-output kernel:
//! a [`MultiId`] into the same table, the output's position, and the kernel's input classes.
//! A multi-output kernel has one such e-node in the class of each value it writes.

use super::kernel::{Body, Ctx};
use super::multi::Multi;
use egg::{Analysis, DidMerge, EGraph, Id, Language};
use smelt_ir::NodeId;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// Handle of an interned kernel body.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BodyId(pub u32);

/// The fusion language.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FuseLang {
    /// An input, parameter or constant: in memory before the plan runs.
    Leaf(NodeId),
    /// One primitive op as its own kernel; children are its operands' classes.
    Op(NodeId, Vec<Id>),
    /// A fused kernel; children are its input buffers' classes (sorted by node id).
    Kernel(BodyId, Vec<Id>),
    /// Output `.1` of a multi-output kernel; children are its input buffers' classes.
    Multi(MultiId, usize, Vec<Id>),
}

/// Handle of an interned multi-output kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct MultiId(pub u32);

impl Language for FuseLang {
    type Discriminant = std::mem::Discriminant<FuseLang>;

    fn discriminant(&self) -> Self::Discriminant {
        std::mem::discriminant(self)
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (FuseLang::Leaf(a), FuseLang::Leaf(b)) => a == b,
            (FuseLang::Op(a, x), FuseLang::Op(b, y)) => a == b && x.len() == y.len(),
            (FuseLang::Kernel(a, x), FuseLang::Kernel(b, y)) => a == b && x.len() == y.len(),
            (FuseLang::Multi(a, i, x), FuseLang::Multi(b, j, y)) => {
                a == b && i == j && x.len() == y.len()
            }
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            FuseLang::Leaf(_) => &[],
            FuseLang::Op(_, c) | FuseLang::Kernel(_, c) | FuseLang::Multi(_, _, c) => c,
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            FuseLang::Leaf(_) => &mut [],
            FuseLang::Op(_, c) | FuseLang::Kernel(_, c) | FuseLang::Multi(_, _, c) => c,
        }
    }
}

impl fmt::Display for FuseLang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FuseLang::Leaf(n) => write!(f, "leaf{n}"),
            FuseLang::Op(n, _) => write!(f, "op{n}"),
            FuseLang::Kernel(b, _) => write!(f, "kernel{}", b.0),
            FuseLang::Multi(m, i, _) => write!(f, "multi{}.{i}", m.0),
        }
    }
}

/// Interned kernel bodies, the memo of producer–consumer merges, and which bodies each class
/// holds (so that rules search only what changed).
#[derive(Debug, Default)]
pub(crate) struct BodyTable {
    bodies: Vec<Body>,
    index: HashMap<Vec<NodeId>, Option<BodyId>>,
    merges: HashMap<(BodyId, BodyId), Option<BodyId>>,
    /// Bodies already present as e-nodes.
    present: HashSet<BodyId>,
    /// Bodies present in the class of each node, largest first (ties: smaller handle first).
    class_bodies: Vec<Vec<BodyId>>,
    /// When each class last got a body, in `tick`s.
    changed_at: Vec<u64>,
    /// Counts bodies added to classes.
    tick: u64,
    /// The grown bodies of each class, as of the `changed_at` stamp they were computed at.
    frontiers: Vec<Option<(u64, Vec<BodyId>)>>,
    /// Interned multi-output kernels.
    multis: Vec<Multi>,
    multi_index: HashMap<Vec<BodyId>, Option<MultiId>>,
    /// Multi-output kernels present as e-nodes, in the order they were added.
    present_multis: Vec<MultiId>,
    multi_present: HashSet<MultiId>,
}

impl BodyTable {
    pub fn new(nodes: usize) -> BodyTable {
        BodyTable {
            class_bodies: vec![Vec::new(); nodes],
            changed_at: vec![0; nodes],
            frontiers: vec![None; nodes],
            ..BodyTable::default()
        }
    }

    /// Records that body `b` is an e-node of its root's class; `false` if it already was.
    pub fn add_to_class(&mut self, b: BodyId) -> bool {
        if !self.present.insert(b) {
            return false;
        }
        let body = &self.bodies[b.0 as usize];
        let (root, len) = (body.root().index(), body.nodes.len());
        let list = &self.class_bodies[root];
        let key = |x: &BodyId| (std::cmp::Reverse(self.bodies[x.0 as usize].nodes.len()), *x);
        let pos = list.partition_point(|x| key(x) < (std::cmp::Reverse(len), b));
        self.tick += 1;
        self.class_bodies[root].insert(pos, b);
        self.changed_at[root] = self.tick;
        true
    }

    pub fn is_present(&self, b: BodyId) -> bool {
        self.present.contains(&b)
    }

    /// The bodies of the class of `n`, largest first.
    pub fn class_bodies(&self, n: NodeId) -> &[BodyId] {
        &self.class_bodies[n.index()]
    }

    pub fn changed_at(&self, n: NodeId) -> u64 {
        self.changed_at[n.index()]
    }

    pub fn tick(&self) -> u64 {
        self.tick
    }

    /// The bodies of the class of `n` that rules grow: those no other body strictly contains,
    /// and the recompute-free ones no other recompute-free body strictly contains.
    pub fn frontier(&mut self, n: NodeId) -> Vec<BodyId> {
        let stamp = self.changed_at[n.index()];
        if let Some((s, f)) = &self.frontiers[n.index()] {
            if *s == stamp {
                return f.clone();
            }
        }
        let mine = &self.class_bodies[n.index()];
        let f: Vec<BodyId> = mine
            .iter()
            .copied()
            .filter(|&k| {
                let body = self.body(k);
                let covered = |free_only: bool| {
                    mine.iter().any(|&o| {
                        let other = self.body(o);
                        (!free_only || other.dup_free) && strict_subset(&body.nodes, &other.nodes)
                    })
                };
                !covered(false) || (body.dup_free && !covered(true))
            })
            .collect();
        self.frontiers[n.index()] = Some((stamp, f.clone()));
        f
    }

    pub fn body(&self, b: BodyId) -> &Body {
        &self.bodies[b.0 as usize]
    }

    /// Interns the multi-output kernel made of `parts` (see [`super::multi::build`]), or `None`
    /// if they do not make one.
    pub fn intern_multi(&mut self, ctx: &Ctx, mut parts: Vec<BodyId>) -> Option<MultiId> {
        parts.sort_unstable();
        parts.dedup();
        if let Some(&m) = self.multi_index.get(&parts) {
            return m;
        }
        let id = super::multi::build(ctx, self, &parts).map(|multi| {
            self.multis.push(multi);
            MultiId(self.multis.len() as u32 - 1)
        });
        self.multi_index.insert(parts, id);
        id
    }

    pub fn multi(&self, m: MultiId) -> &Multi {
        &self.multis[m.0 as usize]
    }

    /// Records that `m` has e-nodes in its outputs' classes; `false` if it already had.
    pub fn add_multi(&mut self, m: MultiId) -> bool {
        if !self.multi_present.insert(m) {
            return false;
        }
        self.present_multis.push(m);
        true
    }

    /// Multi-output kernels present as e-nodes, in the order they were added.
    pub fn present_multis(&self) -> &[MultiId] {
        &self.present_multis
    }

    /// Interns the body of `nodes` (sorted, unique), or `None` if it is not a legal kernel.
    pub fn intern(&mut self, ctx: &Ctx, nodes: Vec<NodeId>) -> Option<BodyId> {
        if let Some(&b) = self.index.get(&nodes) {
            return b;
        }
        let id = Body::new(ctx, nodes.clone()).map(|body| {
            self.bodies.push(body);
            BodyId(self.bodies.len() as u32 - 1)
        });
        self.index.insert(nodes, id);
        id
    }

    /// The body computing both `consumer` and `producer` (rooted at the consumer's root).
    pub fn merge(&mut self, ctx: &Ctx, consumer: BodyId, producer: BodyId) -> Option<BodyId> {
        if let Some(&m) = self.merges.get(&(consumer, producer)) {
            return m;
        }
        let (a, b) = (&self.body(consumer).nodes, &self.body(producer).nodes);
        let mut nodes = Vec::with_capacity(a.len() + b.len());
        nodes.extend_from_slice(a);
        nodes.extend_from_slice(b);
        nodes.sort_unstable();
        nodes.dedup();
        let m = self.intern(ctx, nodes);
        self.merges.insert((consumer, producer), m);
        m
    }
}

/// Whether sorted `a` is a strict subset of sorted `b`.
fn strict_subset<T: Ord>(a: &[T], b: &[T]) -> bool {
    a.len() < b.len() && a.iter().all(|x| b.binary_search(x).is_ok())
}

/// The analysis: each class's data is the graph value it stands for.
#[derive(Debug)]
pub(crate) struct FuseAnalysis {
    pub ctx: Arc<Ctx>,
    pub table: Mutex<BodyTable>,
    /// The class of each node (leaves included), indexed by `NodeId::index`.
    pub class_of: Vec<Option<Id>>,
    /// Live non-leaf nodes, in topological order.
    pub order: Vec<NodeId>,
}

impl FuseAnalysis {
    pub fn table(&self) -> MutexGuard<'_, BodyTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Analysis<FuseLang> for FuseAnalysis {
    type Data = NodeId;

    fn make(egraph: &mut EGraph<FuseLang, Self>, enode: &FuseLang, _id: Id) -> NodeId {
        match enode {
            FuseLang::Leaf(n) | FuseLang::Op(n, _) => *n,
            FuseLang::Kernel(b, _) => egraph.analysis.table().body(*b).root(),
            FuseLang::Multi(m, i, _) => egraph.analysis.table().multi(*m).proto.outputs[*i],
        }
    }

    fn merge(&mut self, a: &mut NodeId, b: NodeId) -> DidMerge {
        // Only kernels computing the same value are ever unioned.
        debug_assert_eq!(*a, b);
        DidMerge(false, false)
    }
}
