//! Stage 2: fusion planning by extraction (to be written).

use crate::{PassError, PassOptions, SaturationReport};
use smelt_ir::Graph;

/// The fusion plan of a graph (to be written).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionPlan {}

/// Plans fusion for `graph` (to be written).
pub fn plan(_graph: &Graph, _opts: &PassOptions) -> Result<(FusionPlan, SaturationReport), PassError> {
    Ok((FusionPlan::default(), SaturationReport::default()))
}
