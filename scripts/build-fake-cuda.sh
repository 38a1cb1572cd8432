#!/usr/bin/env bash
# Builds the fake CUDA driver, NVRTC and cuBLAS (runtime/src/cuda/emulate/fake_cuda.cpp): CPU
# stand-ins that let smelt's GPU launch path (CudaProgram, through cudarc) run without a GPU,
# with kernels under the CPU emulator of CUDA's thread model. NOT A GPU: see docs/cuda.md.
#
# Usage: scripts/build-fake-cuda.sh OUT_DIR
# Writes OUT_DIR/libcuda.so.1, OUT_DIR/libnvrtc.so.12, OUT_DIR/libcublas.so.12, the emulator
# headers in OUT_DIR/include, and OUT_DIR/env.sh, which exports the variables that make smelt
# use them:
#   source OUT_DIR/env.sh && SMELT_REQUIRE_GPU=1 cargo test -p smelt-runtime --test cuda_exec
# The compiler is $SMELT_CXX, else $CXX, else c++ (the fake NVRTC uses the same at run time).
set -euo pipefail

out="${1:?usage: scripts/build-fake-cuda.sh OUT_DIR}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
src="$repo/runtime/src/cuda/emulate"
cxx="${SMELT_CXX:-${CXX:-c++}}"
mkdir -p "$out/include"
out="$(cd "$out" && pwd)"
cp "$src/smelt_cuda_emu.h" "$src/cuda_fp16.h" "$src/cuda_bf16.h" "$out/include/"

flags=(-std=c++17 -O2 -fPIC -shared -pthread -fvisibility=hidden -Wall -Wno-unused-result)
# Each library's SONAME is the name cudarc asks the loader for, so cudarc's bare-name dlopen
# returns the copy smelt loaded from the path below.
"$cxx" "${flags[@]}" -DSMELT_FAKE_DRIVER -Wl,-soname,libcuda.so.1 \
  -o "$out/libcuda.so.1" "$src/fake_cuda.cpp" -ldl
"$cxx" "${flags[@]}" -DSMELT_FAKE_NVRTC -Wl,-soname,libnvrtc.so.12 \
  -o "$out/libnvrtc.so.12" "$src/fake_cuda.cpp" -ldl
"$cxx" "${flags[@]}" -DSMELT_FAKE_CUBLAS -Wl,-soname,libcublas.so.12 \
  -o "$out/libcublas.so.12" "$src/fake_cuda.cpp" "$out/libcuda.so.1" -Wl,-rpath,'$ORIGIN'

cat >"$out/env.sh" <<EOF
# The fake CUDA libraries (scripts/build-fake-cuda.sh): smelt's --device cuda runs on the CPU.
export SMELT_CUDA_DRIVER_LIB="$out/libcuda.so.1"
export SMELT_NVRTC_LIB="$out/libnvrtc.so.12"
export SMELT_CUBLAS_LIB="$out/libcublas.so.12"
export SMELT_CUDA_INCLUDE="$out/include"
EOF
echo "built the fake CUDA libraries in $out (source $out/env.sh)"
