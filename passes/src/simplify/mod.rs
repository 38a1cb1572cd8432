//! Stage 1: e-graph simplification and layout (to be written).

use crate::{PassError, PassOptions, SaturationReport};
use smelt_ir::Graph;

/// Simplifies `graph`; placeholder returning it unchanged until the e-graph lands.
pub fn simplify(graph: &Graph, _opts: &PassOptions) -> Result<(Graph, SaturationReport), PassError> {
    Ok((graph.clone(), SaturationReport::default()))
}
