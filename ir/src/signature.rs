//! What a graph needs at run time: its inputs and parameters, by name.

use crate::graph::{Graph, TensorType};
use std::fmt;

/// One runtime-bound tensor a graph expects.
#[derive(Clone, Debug, PartialEq)]
pub struct BindingSpec {
    pub name: String,
    /// `true` for a parameter, `false` for an input.
    pub is_param: bool,
    /// The declared dtype and shape.
    pub ty: TensorType,
}

/// Every input and parameter of a graph, in node order; printed one per line,
/// `  input "x": f32[2, 3]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Signature(pub Vec<BindingSpec>);

impl Signature {
    /// The inputs and parameters of `graph`.
    pub fn of(graph: &Graph) -> Signature {
        Signature(
            graph
                .bindings()
                .map(|(name, _, ty, is_param)| BindingSpec {
                    name: name.to_string(),
                    is_param,
                    ty: ty.clone(),
                })
                .collect(),
        )
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("  (no inputs or parameters)");
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
