//! What a saturation run did, and the errors of this crate.

use std::collections::BTreeMap;
use std::fmt;

/// A summary of one equality-saturation run, for `smelt explain` and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaturationReport {
    /// Iterations run.
    pub iterations: usize,
    /// E-nodes in the e-graph at the end.
    pub egraph_nodes: usize,
    /// E-classes in the e-graph at the end.
    pub egraph_classes: usize,
    /// Why saturation stopped: `saturated`, `node limit`, `iteration limit` (egg's
    /// `StopReason`, printed).
    pub stop_reason: String,
    /// How many times each named rule was applied (rules never applied are absent).
    pub rules_applied: BTreeMap<String, usize>,
}

impl fmt::Display for SaturationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} e-nodes, {} e-classes, {} iterations, stopped: {}",
            self.egraph_nodes, self.egraph_classes, self.iterations, self.stop_reason
        )
    }
}

/// Errors of the pass pipeline. A pass that produces an ill-formed graph is a bug in smelt;
/// it is reported (with the verifier's message) rather than panicking.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Ir(#[from] Box<smelt_ir::IrError>),
    #[error("{pass}: {message}")]
    Internal { pass: &'static str, message: String },
}

impl From<smelt_ir::IrError> for PassError {
    fn from(e: smelt_ir::IrError) -> PassError {
        PassError::Ir(Box::new(e))
    }
}
