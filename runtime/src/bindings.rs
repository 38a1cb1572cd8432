//! Matching caller tensors to a graph's inputs and parameters by name.

use crate::error::{Result, RuntimeError};
use smelt_ir::{Graph, HostTensor, Signature};
use std::collections::HashMap;

/// Checks that `given` (plus the already bound `params`) supplies exactly the graph's inputs
/// and parameters with the right dtypes and shapes. Every problem is reported at once: missing,
/// extra, wrongly typed and wrongly shaped tensors.
pub fn check_bindings(
    graph: &Graph,
    given: &HashMap<String, HostTensor>,
    params: &HashMap<String, HostTensor>,
) -> Result<()> {
    let sig = Signature::of(graph);
    let mut problems = Vec::new();
    for b in &sig.0 {
        let t = given.get(&b.name).or_else(|| params.get(&b.name));
        match t {
            None => {
                let kind = if b.is_param { "param" } else { "input" };
                problems.push(format!("missing {kind} {:?} ({})", b.name, b.ty));
            }
            Some(t) if t.dtype() != b.ty.dtype || *t.shape() != b.ty.shape => {
                problems.push(format!(
                    "{:?} is {}{} but the graph expects {}",
                    b.name,
                    t.dtype(),
                    t.shape(),
                    b.ty
                ));
            }
            Some(_) => {}
        }
    }
    let mut extra: Vec<&String> = given
        .keys()
        .filter(|k| !sig.0.iter().any(|b| &b.name == *k))
        .collect();
    extra.sort();
    for k in extra {
        problems.push(format!("{k:?} is not an input or parameter of the graph"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(RuntimeError::Bindings {
            problems,
            expected: sig,
        })
    }
}
