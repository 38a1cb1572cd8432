//! Lowering the fusion plan to the kernel IR ([`ir`]), which every backend prints from.

pub mod ir;

pub use ir::*;
