//! Graph passes: the e-graph optimiser and fusion planner.
//!
//! The pipeline (see [`optimize`]) is two equality-saturation stages, each bounded by node and
//! iteration limits (never wall-clock) and deterministic:
//!
//! 1. [`simplify`]: an e-graph over the IR's primitive ops with an analysis carrying dtype,
//!    shape and constant values. Rule sets (IEEE-exact simplification, opt-in fast-math, and
//!    layout: permute/reshape collapse and sinking) rewrite it; extraction gives a smaller,
//!    equivalent [`Graph`].
//! 2. [`fusion`]: an e-graph whose e-nodes include fused kernels. Rules merge producers into
//!    consumers; DAG-aware extraction under a bytes-moved + per-launch cost model picks the
//!    [`FusionPlan`]: which ops run together, which values are materialised, in which layout.

pub mod fusion;
pub mod kernel;
pub mod simplify;

mod report;

pub use fusion::FusionPlan;
pub use report::{PassError, SaturationReport};

use smelt_ir::Graph;

/// Options of the whole pass pipeline.
#[derive(Clone, Debug)]
pub struct PassOptions {
    /// Fuse ops into kernels; `false` gives one kernel per op (the unfused baseline), through
    /// the same pipeline.
    pub fuse: bool,
    /// Also apply rewrites that change rounding or NaN behaviour (reassociation, `x * 0 → 0`,
    /// division by a constant → multiplication by its reciprocal).
    pub fast_math: bool,
    /// E-graph node limit of each stage.
    pub node_limit: usize,
    /// Iteration limit of each stage.
    pub iter_limit: usize,
}

impl Default for PassOptions {
    fn default() -> PassOptions {
        PassOptions {
            fuse: true,
            fast_math: false,
            node_limit: 20_000,
            iter_limit: 12,
        }
    }
}

/// The result of [`optimize`].
#[derive(Clone, Debug)]
pub struct Optimized {
    /// The simplified graph (same inputs, parameters and outputs as the original).
    pub graph: Graph,
    /// The fusion plan over `graph`.
    pub plan: FusionPlan,
    /// What the simplification stage did.
    pub simplify: SaturationReport,
    /// What the fusion stage did.
    pub fusion: SaturationReport,
}

/// Runs the whole pipeline: verify, simplify, verify, plan fusion.
pub fn optimize(graph: &Graph, opts: &PassOptions) -> Result<Optimized, PassError> {
    smelt_ir::verify(graph)?;
    let (simplified, simplify) = simplify::simplify(graph, opts)?;
    smelt_ir::verify(&simplified)?;
    let (plan, fusion) = fusion::plan(&simplified, opts)?;
    Ok(Optimized {
        graph: simplified,
        plan,
        simplify,
        fusion,
    })
}
