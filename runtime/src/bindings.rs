//! Matching caller tensors to a graph's inputs and parameters by name.

use crate::error::{Result, RuntimeError};
use smelt_ir::{Graph, HostTensor, TensorType};
use std::collections::HashMap;
use std::fmt;

/// One tensor a graph needs at run time.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    pub name: String,
    pub ty: TensorType,
    pub is_param: bool,
}

/// Everything a graph needs at run time, in graph order; printed one binding per line.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature(pub Vec<Binding>);

impl Signature {
    pub fn of(graph: &Graph) -> Signature {
        Signature(
            graph
                .bindings()
                .map(|(name, _, ty, is_param)| Binding {
                    name: name.to_string(),
                    ty: ty.clone(),
                    is_param,
                })
                .collect(),
        )
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("  (nothing)");
        }
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            let kind = if b.is_param { "param" } else { "input" };
            write!(f, "  {kind} {:?}: {}", b.name, b.ty)?;
        }
        Ok(())
    }
}

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
