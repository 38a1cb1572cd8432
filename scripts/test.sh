#!/usr/bin/env bash
# smelt's whole test suite: every crate, every test target, every feature, and the doctests
# (the README's examples among them). Works on a fresh machine with a Rust toolchain and pip;
# needs no GPU. It installs NVRTC and ptxas from PyPI into .cuda/ (git-ignored) so every CUDA
# kernel is compile-checked; set SMELT_SKIP_CUDA_TOOLS=1 to skip that (the NVRTC tests then
# report themselves skipped). Extra arguments go to both cargo test runs.
set -euo pipefail
cd "$(dirname "$0")/.."
export INSTA_UPDATE="${INSTA_UPDATE:-no}"
# The kernel cache (compiled CPU modules, cubins) of the tests: under target/, so that test
# runs do not fill the user's cache folder and `cargo clean` empties it.
export SMELT_CACHE_DIR="${SMELT_CACHE_DIR:-$PWD/target/smelt-test-cache}"
# Random graphs run fused and unfused on the CPU, and their CUDA C in the CPU emulator of
# runtime/src/cuda/emulate.rs, against the reference interpreter. The emulator needs a C++17
# compiler (g++ from build-essential, or clang++); set SMELT_REQUIRE_CXX=0 to let its tests
# skip without one.
export SMELT_FUZZ_CASES="${SMELT_FUZZ_CASES:-1000}"
export SMELT_REQUIRE_CXX="${SMELT_REQUIRE_CXX:-1}"
if [ "${SMELT_SKIP_CUDA_TOOLS:-0}" != 1 ]; then
  ./scripts/install-cuda-tools.sh
  export SMELT_REQUIRE_NVRTC=1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --all-features --doc "$@" 2>&1 | tee -a "$log"
cargo test --workspace --all-features --all-targets "$@" 2>&1 | tee -a "$log"
# The NVRTC and ptxas tests once more with CUDA 13 (what the GPU machines have: NVRTC 13,
# its headers, ptxas and libdevice from .cuda13, found by the probe in CUDA 13's wheel layout):
# the corpus and the random graphs compile for sm_80 and sm_90 with it, both paths' PTX
# assembles with its ptxas. SMELT_EXPECT_NVRTC_MAJOR makes finding CUDA 12 instead a failure.
if [ "${SMELT_SKIP_CUDA_TOOLS:-0}" != 1 ] && [ "${SMELT_SKIP_CUDA13:-0}" != 1 ]; then
  (
    export SMELT_CUDA_HOME="$PWD/.cuda13" SMELT_EXPECT_NVRTC_MAJOR=13
    # --workspace, as above: the integration binary built there is reused. The runtime's test
    # binaries are rebuilt once (about 30 s in CI): without --all-targets, cargo resolves the
    # features of some shared dependencies differently.
    cargo test --workspace --all-features --test cuda_nvrtc --test cuda_codegen \
      --test cuda_ptx_llvm --test cuda_probe "$@"
    cargo test --workspace --all-features --test integration explain_emits_the_generated_code "$@"
  ) 2>&1 | tee -a "$log"
fi
# The GPU launch path (CudaProgram: driver calls, streams, events, cuBLAS, the kernel cache)
# and `smelt demo` / `smelt bench --quick` with `--device cuda`, once more, against the fake
# CUDA driver, NVRTC and cuBLAS of scripts/build-fake-cuda.sh: kernels run under the CPU
# emulator, so this checks the host side of the path, not a GPU.
# SMELT_REQUIRE_GPU=1 makes a skipped GPU test a failure. SMELT_SKIP_FAKE_CUDA=1 skips it.
if [ "${SMELT_SKIP_FAKE_CUDA:-0}" != 1 ] && [ "$SMELT_REQUIRE_CXX" = 1 ]; then
  fake=target/fake-cuda
  rm -rf "$fake/cache"
  ./scripts/build-fake-cuda.sh "$fake"
  (
    # shellcheck source=/dev/null
    . "$fake/env.sh"
    export SMELT_REQUIRE_GPU=1 SMELT_EXPECT_FAKE_CUDA=1 SMELT_CACHE_DIR="$PWD/$fake/cache"
    export SMELT_FUZZ_CASES="${SMELT_FAKE_CUDA_FUZZ_CASES:-48}"
    cargo test -p smelt-runtime --all-features --test cuda_exec "$@"
    cargo test --all-features --test integration demo_and_bench_run_on_a_cuda_device "$@"
    # The GPU probe of issue 6 (scripts/probes/kernel-variants.py) at 1/64 of its sizes: its
    # text edits still match the generated CUDA C and its variants give the right outputs.
    python3 scripts/probes/kernel-variants.py --smelt target/debug/smelt --scale 64 --iters 2
  ) 2>&1 | tee -a "$log"
fi
# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
