//! The verifier: checks every invariant of a [`Graph`].
//!
//! - every operand is a node defined earlier (so the graph is acyclic and topologically ordered);
//! - every node's stored type equals the type inferred from its operands ([`crate::infer`]);
//! - input and parameter names are unique, output names are unique, outputs name real nodes.

use crate::error::{IrError, Result};
use crate::graph::{Graph, NodeId};
use crate::infer::infer;
use crate::op::Op;
use std::collections::HashSet;

/// Checks `graph`; the first violation found is returned, naming its node.
pub fn verify(graph: &Graph) -> Result<()> {
    let mut names = HashSet::new();
    for id in graph.ids() {
        let node = graph.node(id);
        for o in node.op.operands() {
            if o >= id {
                return Err(IrError::ForwardRef {
                    node: id,
                    op: node.op.name(),
                    operand: o,
                });
            }
        }
        if let Op::Input { name, .. } | Op::Param { name, .. } = &node.op {
            if !names.insert(name.as_str()) {
                return Err(IrError::DuplicateName {
                    kind: "input/param",
                    name: name.clone(),
                }
                .at(id));
            }
        }
        let expected = infer(&node.op, |o: NodeId| graph.ty(o)).map_err(|e| e.at(id))?;
        if expected != node.ty {
            return Err(IrError::TypeMismatch {
                op: node.op.name(),
                expected: Box::new(expected),
                found: Box::new(node.ty.clone()),
            }
            .at(id));
        }
    }
    let mut outs = HashSet::new();
    for (name, node) in graph.outputs() {
        if graph.get(*node).is_none() {
            return Err(IrError::BadOutput {
                name: name.clone(),
                node: *node,
            });
        }
        if !outs.insert(name.as_str()) {
            return Err(IrError::DuplicateName {
                kind: "output",
                name: name.clone(),
            });
        }
    }
    Ok(())
}
