//! Running a plan kernel by kernel through the reference interpreter: the oracle of plan
//! validity.
//!
//! Each kernel becomes a small graph whose inputs are the buffers it reads and whose nodes
//! are copies of its ops; it may read only graph inputs, parameters, constants and values
//! materialised by earlier kernels. The result must equal [`smelt_ir::interp::eval`] exactly.

use super::plan::FusionPlan;
use smelt_ir::interp::{eval_nodes, EvalError};
use smelt_ir::{Graph, HostTensor, Node, NodeId, Op};
use std::collections::HashMap;

/// Why a plan could not be run, or is not a valid plan of its graph.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("kernel k{kernel} reads {value}, which no earlier kernel materialised")]
    Unavailable { kernel: usize, value: NodeId },
    #[error("kernel k{kernel} computes {value}, which is not a computed op of the graph")]
    NotAnOp { kernel: usize, value: NodeId },
    #[error("op {value} is needed but no kernel computes it")]
    NotComputed { value: NodeId },
    #[error("graph output {name:?} ({value}) is never materialised")]
    OutputMissing { name: String, value: NodeId },
    #[error("kernel k{kernel}: {source}")]
    Eval {
        kernel: usize,
        #[source]
        source: EvalError,
    },
    #[error(transparent)]
    Graph(#[from] EvalError),
}

/// Checks that `plan` is a valid plan of `graph`: kernel ops are computed ops of the graph,
/// every kernel input is a leaf or materialised earlier, every op an output needs is computed
/// by some kernel, every graph output is materialised.
pub fn check_plan(graph: &Graph, plan: &FusionPlan) -> Result<(), PlanError> {
    let mut available: Vec<bool> = graph
        .nodes()
        .iter()
        .map(|n| matches!(n.op, Op::Input { .. } | Op::Param { .. } | Op::Constant(_)))
        .collect();
    let mut computed = available.clone();
    for k in &plan.kernels {
        for &(n, _) in &k.ops {
            if graph.get(n).is_none() || is_leaf(graph, n) {
                return Err(PlanError::NotAnOp {
                    kernel: k.id,
                    value: n,
                });
            }
            computed[n.index()] = true;
            for o in graph.node(n).op.operands() {
                let inside = k.ops.iter().any(|&(m, _)| m == o && m < n);
                if !inside && !k.inputs.iter().any(|i| i.value == o) {
                    return Err(PlanError::Unavailable {
                        kernel: k.id,
                        value: o,
                    });
                }
            }
        }
        for i in &k.inputs {
            if !available.get(i.value.index()).copied().unwrap_or(false) {
                return Err(PlanError::Unavailable {
                    kernel: k.id,
                    value: i.value,
                });
            }
        }
        for o in &k.outputs {
            available[o.value.index()] = true;
        }
    }
    for (name, o) in graph.outputs() {
        if !available[o.index()] {
            return Err(PlanError::OutputMissing {
                name: name.clone(),
                value: *o,
            });
        }
    }
    // Every op some output depends on is computed (by the kernel that needs it, or earlier).
    let mut needed = vec![false; graph.len()];
    for (_, o) in graph.outputs() {
        needed[o.index()] = true;
    }
    for id in (0..graph.len() as u32).rev().map(NodeId) {
        if needed[id.index()] {
            if !computed[id.index()] {
                return Err(PlanError::NotComputed { value: id });
            }
            for o in graph.node(id).op.operands() {
                needed[o.index()] = true;
            }
        }
    }
    Ok(())
}

fn is_leaf(graph: &Graph, n: NodeId) -> bool {
    matches!(
        graph.node(n).op,
        Op::Input { .. } | Op::Param { .. } | Op::Constant(_)
    )
}

/// Runs `plan` kernel by kernel on `bindings` and returns the graph's outputs in order.
pub fn eval_plan(
    graph: &Graph,
    plan: &FusionPlan,
    bindings: &HashMap<String, HostTensor>,
) -> Result<Vec<(String, HostTensor)>, PlanError> {
    smelt_ir::verify(graph).map_err(EvalError::from)?;
    check_plan(graph, plan)?;
    let mut values: HashMap<NodeId, HostTensor> = HashMap::new();
    for id in graph.ids() {
        match &graph.node(id).op {
            Op::Input { name, .. } | Op::Param { name, .. } => {
                if let Some(t) = bindings.get(name) {
                    values.insert(id, t.clone());
                }
            }
            Op::Constant(t) => {
                values.insert(id, t.clone());
            }
            _ => {}
        }
    }
    // Binding errors are reported as the interpreter would (missing names, wrong types).
    let leaves: Graph = Graph::from_parts(
        graph
            .nodes()
            .iter()
            .filter(|n| matches!(n.op, Op::Input { .. } | Op::Param { .. }))
            .cloned()
            .collect(),
        Vec::new(),
    );
    eval_nodes(&leaves, bindings)?;
    for k in &plan.kernels {
        let mut remap: HashMap<NodeId, NodeId> = HashMap::new();
        let mut nodes: Vec<Node> = Vec::new();
        let mut sub_bindings = HashMap::new();
        for i in &k.inputs {
            let name = format!("{}", i.value);
            remap.insert(i.value, NodeId(nodes.len() as u32));
            nodes.push(Node {
                op: Op::Input {
                    name: name.clone(),
                    dtype: i.ty.dtype,
                    shape: i.ty.shape.clone(),
                },
                ty: i.ty.clone(),
            });
            let v = values.get(&i.value).ok_or(PlanError::Unavailable {
                kernel: k.id,
                value: i.value,
            })?;
            sub_bindings.insert(name, v.clone());
        }
        for &(n, _) in &k.ops {
            let node = graph.node(n);
            let mut op = node.op.clone();
            remap_operands(&mut op, &remap);
            remap.insert(n, NodeId(nodes.len() as u32));
            nodes.push(Node {
                op,
                ty: node.ty.clone(),
            });
        }
        let sub = Graph::from_parts(nodes, Vec::new());
        let out = eval_nodes(&sub, &sub_bindings).map_err(|source| PlanError::Eval {
            kernel: k.id,
            source,
        })?;
        for o in &k.outputs {
            let local = remap[&o.value];
            values.insert(o.value, out[local.index()].clone());
        }
    }
    graph
        .outputs()
        .iter()
        .map(|(name, id)| {
            values
                .get(id)
                .map(|t| (name.clone(), t.clone()))
                .ok_or(PlanError::OutputMissing {
                    name: name.clone(),
                    value: *id,
                })
        })
        .collect()
}

fn remap_operands(op: &mut Op, map: &HashMap<NodeId, NodeId>) {
    op.operands_mut(|n| {
        if let Some(m) = map.get(n) {
            *n = *m;
        }
    });
}
