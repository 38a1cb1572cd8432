//! Graph passes: the e-graph optimizer, fusion planning and lowering to kernel IR.
//!
//! Not built yet (issue 3). The crate exists so the workspace has its final shape.
