#!/usr/bin/env python3
"""GPU probe for issue 6's two H200 misses (elementwise-chain at 81% and permute-add at 75% of
copy on GPU time, BENCHMARKS.md): times variants of the CUDA C smelt generates for them with
CUDA events through CuPy, to tell arithmetic (tanhf), occupancy (packs per thread, looping
grids) and the permuted read apart. Needs a GPU, CuPy and the GPU bundle's CLI
(scripts/build-gpu-bundle.sh); run from the repo root:

    python3 scripts/probes/kernel-variants.py [path/to/smelt]

The variants are text edits of the generated source; an edit that no longer matches stops the
probe with an AssertionError naming it (regenerate the edits after a codegen change).
"""
import os, subprocess, sys, tempfile

SMELT = sys.argv[1] if len(sys.argv) > 1 else "gpu-bundle/bin/smelt"
CHAIN = """%x = input "x" : f32[16777216]
%c1 = const f32[] 1.5
%c2 = const f32[] 0.5
%c3 = const f32[] 2.0
%c4 = const f32[] 0.25
%0 = mul %x, %c1
%1 = add %0, %c2
%2 = tanh %1
%3 = mul %2, %c3
%4 = sub %3, %c4
%5 = relu %4
%6 = mul %5, %x
%7 = add %6, %x
output "y" = %7
"""
PERM = """%x = input "x" : f32[64, 128, 12, 64]
%z = input "z" : f32[64, 12, 128, 64]
%p = permute %x perm=[0, 2, 1, 3]
%a = add %p, %z
%y = permute %a perm=[0, 2, 1, 3]
output "y" = %y
"""


def generate(name, text):
    """The CUDA C translation unit smelt emits for `text`, as a file path."""
    d = tempfile.mkdtemp(prefix="smelt-probe-")
    src = os.path.join(d, name + ".smelt")
    open(src, "w").write(text)
    subprocess.run([SMELT, "explain", src, "--emit", "cuda", "--emit-dir", d], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(d, "kernels.cu")


CHAIN_CU = generate("chain", CHAIN)
PERM_CU = generate("perm", PERM)
import statistics

import cupy as cp


def load(path, edits=()):
    src = open(path).read()
    for a, b in edits:
        assert a in src, (path, a)
        src = src.replace(a, b)
    return src
def time_kernel(src, name, grid, args, iters=200):
    k = cp.RawModule(code=src, options=("--std=c++17",)).get_function(name)
    for _ in range(20):
        k((grid,), (256,), args)
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(iters):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); k((grid,), (256,), args); e.record(); e.synchronize()
        ts.append(cp.cuda.get_elapsed_time(s, e) * 1e3)
    return statistics.median(ts)
def report(label, us, nbytes):
    print(f"{label:60s} {us:8.1f} us {nbytes / us / 1e3:8.1f} GB/s", flush=True)
one = [("u < 4", "u < 1"), ("blockDim.x * 4 + threadIdx.x", "blockDim.x * 1 + threadIdx.x"), ("gridDim.x * blockDim.x * 4)", "gridDim.x * blockDim.x * 1)")]
n = 1 << 24
x = cp.random.rand(n, dtype=cp.float32); y = cp.empty_like(x)
args = (x, y, cp.int64(n)); nb = 2 * 4 * n
name = "k0_elementwise_mul_add_tanh_mul"
report("chain as generated (4 packs/thread, grid 4096)", time_kernel(load(CHAIN_CU), name, 4096, args), nb)
report("chain, tanhf replaced by its argument", time_kernel(load(CHAIN_CU, [("tanhf(v4)", "(v4)")]), name, 4096, args), nb)
report("chain, tanhf replaced by __expf (fast intrinsic)", time_kernel(load(CHAIN_CU, [("tanhf(v4)", "__expf(v4)")]), name, 4096, args), nb)
report("chain, 1 pack/thread, grid 16384", time_kernel(load(CHAIN_CU, one), name, 16384, args), nb)
report("copy (chain kernel, body = load, store)", time_kernel(load(CHAIN_CU, [("q0.v[e] = v12;", "q0.v[e] = v0;")]), name, 4096, args), nb)
b, s, h, d = 64, 128, 12, 64
m = b * s * h * d
x = cp.random.rand(m, dtype=cp.float32); z = cp.random.rand(m, dtype=cp.float32); y = cp.empty_like(x)
args = (x, z, y, cp.int64(m)); nb = 3 * 4 * m
name = "k0_elementwise_add"
report("permute-add as generated (4 packs/thread, grid 1536)", time_kernel(load(PERM_CU), name, 1536, args), nb)
report("permute-add, z read contiguously", time_kernel(load(PERM_CU, [("x1 * 64 + x2 * 8192 + x3_0", "x1 * 768 + x2 * 64 + x3_0")]), name, 1536, args), nb)
report("permute-add, 1 pack/thread, grid 6144", time_kernel(load(PERM_CU, one), name, 6144, args), nb)
report("permute-add, 4 packs/thread, grid 1056 (looping)", time_kernel(load(PERM_CU), name, 1056, args), nb)
report("permute-add, 4 packs/thread, grid 528 (looping)", time_kernel(load(PERM_CU), name, 528, args), nb)
big = 4 * m
x = cp.random.rand(big, dtype=cp.float32); z = cp.random.rand(big, dtype=cp.float32); y = cp.empty_like(x)
report("permute-add at 4x the batch (256x128x12x64), grid 6144", time_kernel(load(PERM_CU, [("98304", "98304")]), name, 6144, (x, z, y, cp.int64(big))), 3 * 4 * big)
