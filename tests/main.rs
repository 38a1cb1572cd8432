//! Integration tests of the whole stack (one binary, so the crate graph links once).

mod bench;
mod catalogue;
mod cli;
mod end_to_end;
