#!/usr/bin/env bash
# smelt's whole test suite: every crate, every test target, every feature, and the doctests
# (the README's examples among them). Works on a fresh machine with a Rust toolchain; needs no
# GPU and no Python. Extra arguments go to both cargo test runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTA_UPDATE="${INSTA_UPDATE:-no}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-features --doc "$@" 2>&1 | tee -a "$log"
cargo test --workspace --all-features --all-targets "$@" 2>&1 | tee -a "$log"
# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
