//! The e-class analysis: dtype, shape and (for small tensors) the constant value.
//!
//! Types come from the IR's own typing rule ([`smelt_ir::infer::infer`]) applied to the
//! e-node's IR op, so the e-graph never re-derives typing. Constant values come from the
//! reference interpreter ([`smelt_ir::interp`]) run on the op with constant operands; a value
//! is only kept when it has at most [`CONST_LIMIT`] elements (larger constants from the
//! original graph stay in their e-nodes, they are just not folded through).

use super::lang::{ENode, LeafKind};
use egg::{Analysis, DidMerge, EGraph, Id};
use smelt_ir::interp::eval;
use smelt_ir::{Graph, HostTensor, NodeId, TensorType};
use std::collections::HashMap;
use std::sync::Arc;

/// Largest number of elements of a value the analysis computes and folds.
pub const CONST_LIMIT: usize = 4096;

/// The e-graph type of stage 1.
pub type SGraph = EGraph<ENode, TypeAnalysis>;

/// What every e-class knows about its value.
#[derive(Clone, Debug)]
pub struct ClassData {
    /// The value's type (equal for every e-node of the class).
    pub ty: TensorType,
    /// The value, when every leaf below is a constant and it has at most [`CONST_LIMIT`]
    /// elements.
    pub value: Option<Arc<HostTensor>>,
}

/// The analysis: types of the graph's inputs and parameters (for [`ENode::Leaf`]).
#[derive(Clone, Debug, Default)]
pub struct TypeAnalysis {
    /// Declared types of the original graph's bindings, by binding position.
    pub leaves: Vec<(LeafKind, String, TensorType)>,
}

impl TypeAnalysis {
    pub fn leaf_ty(&self, index: u32) -> Option<&TensorType> {
        self.leaves.get(index as usize).map(|(_, _, t)| t)
    }
}

/// The type of `enode` given its children's classes, or the IR's typing error message.
pub fn type_of(egraph: &SGraph, enode: &ENode) -> Result<TensorType, String> {
    match enode {
        ENode::Leaf(_, i) => egraph
            .analysis
            .leaf_ty(*i)
            .cloned()
            .ok_or_else(|| format!("leaf {i} is not a binding of the graph")),
        ENode::Const(c) => Ok(TensorType::new(
            c.tensor().dtype(),
            c.tensor().shape().clone(),
        )),
        _ => {
            let children = enode.children_ids();
            let op = enode
                .to_op(|id| NodeId(position(&children, id)))
                .ok_or("leaf without a type")?;
            let tys: Vec<&TensorType> = children.iter().map(|&c| &egraph[c].data.ty).collect();
            smelt_ir::infer::infer(&op, |n| tys[n.index()]).map_err(|e| e.to_string())
        }
    }
}

fn position(children: &[Id], id: Id) -> u32 {
    children.iter().position(|&c| c == id).unwrap_or(0) as u32
}

impl ENode {
    fn children_ids(&self) -> Vec<Id> {
        egg::Language::children(self).to_vec()
    }
}

/// The value of `enode` when all its operands are known constants and the result is small:
/// the reference interpreter run on a graph of constants and the one op.
pub fn fold(egraph: &SGraph, enode: &ENode, ty: &TensorType) -> Option<Arc<HostTensor>> {
    if let ENode::Const(c) = enode {
        return (c.tensor().numel() <= CONST_LIMIT).then(|| c.shared());
    }
    if matches!(enode, ENode::Leaf(..)) || ty.shape.numel() > CONST_LIMIT {
        return None;
    }
    let children = enode.children_ids();
    let mut g = Graph::new();
    let mut ids = HashMap::new();
    for &c in &children {
        if ids.contains_key(&c) {
            continue;
        }
        let v = egraph[c].data.value.as_ref()?;
        ids.insert(c, g.constant(HostTensor::clone(v)).ok()?);
    }
    let op = enode.to_op(|c| ids.get(&c).copied().unwrap_or(NodeId(0)))?;
    let out = g.push(op).ok()?;
    g.set_output("v", out).ok()?;
    let (_, t) = eval(&g, &HashMap::new()).ok()?.pop()?;
    Some(Arc::new(t))
}

impl Analysis<ENode> for TypeAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut SGraph, enode: &ENode, _id: Id) -> ClassData {
        let ty = match type_of(egraph, enode) {
            Ok(ty) => ty,
            Err(e) => {
                // Appliers type-check before adding (see `rules::Term`), so this is a bug;
                // keep going with the first operand's type rather than panicking.
                log::error!("simplify: ill-typed e-node {enode:?}: {e}");
                enode
                    .children_ids()
                    .first()
                    .map(|&c| egraph[c].data.ty.clone())
                    .unwrap_or_else(|| TensorType::new(smelt_ir::DType::F32, [0]))
            }
        };
        let value = fold(egraph, enode, &ty);
        ClassData { ty, value }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        debug_assert_eq!(a.ty, b.ty, "merged e-classes of different types");
        match (&a.value, b.value) {
            (None, Some(v)) => {
                a.value = Some(v);
                DidMerge(true, false)
            }
            (Some(_), None) => DidMerge(false, true),
            _ => DidMerge(false, false),
        }
    }
}
