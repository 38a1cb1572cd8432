#!/usr/bin/env bash
# smelt's whole test suite: every crate, every test target, every feature.
# Works on a fresh machine with a Rust toolchain; needs no GPU and no Python.
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTA_UPDATE="${INSTA_UPDATE:-no}"
cargo test --workspace --all-features --all-targets "$@"
cargo test --workspace --all-features --doc
