//! smelt: torch.compile for Rust.
pub use smelt_ir as ir;
