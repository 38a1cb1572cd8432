#!/usr/bin/env python3
"""GPU probe for issue 6's two H200 misses (elementwise-chain at 81% and permute-add at 75% of
copy on GPU time, BENCHMARKS.md): times variants of the CUDA C smelt generates for them with
CUDA events, beside a device-to-device copy of the same bytes, to tell arithmetic (tanhf),
occupancy (registers, packs per thread, looping grids, launch bounds) and the permuted read
apart. Then `x + y.T` over 4096 x 4096 floats: smelt's 32 x 32 shared-memory tiles against
the plain grid-stride kernel that reads `y` down its columns. Prints each variant's registers per thread and resident blocks per multiprocessor where
the driver reports them.

Needs only Python 3, the CUDA driver (libcuda.so.1) and NVRTC (libnvrtc.so.13 or .12), through
ctypes: no CuPy, no PyTorch. Run from the repo root with the GPU bundle's CLI
(scripts/build-gpu-bundle.sh):

    python3 scripts/probes/kernel-variants.py [--smelt gpu-bundle/bin/smelt] [--scale 1]

SMELT_CUDA_DRIVER_LIB, SMELT_NVRTC_LIB and SMELT_CUDA_INCLUDE name the libraries and headers
(as for smelt). `--scale 64` divides every size by 64: with the fake driver of
scripts/build-fake-cuda.sh (kernels run on the CPU, NOT a GPU) that checks the probe itself,
never a figure.

The variants are text edits of the generated source; an edit that no longer matches stops the
probe naming it (regenerate the edits after a codegen change). Variants that keep the
kernel's meaning have their first 1024-4096 outputs checked against Python's math; a wrong one
is flagged and makes the exit status 1. scripts/test.sh runs the probe on the fake driver at
`--scale 64`, so the edits and checks stay in step with the code generator.
"""
import argparse
import array
import ctypes as C
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

CHAIN = """%x = input "x" : f32[{n}]
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
PERM = """%x = input "x" : f32[{b}, 128, 12, 64]
%z = input "z" : f32[{b}, 12, 128, 64]
%p = permute %x perm=[0, 2, 1, 3]
%a = add %p, %z
%y = permute %a perm=[0, 2, 1, 3]
output "y" = %y
"""

TRANSPOSE = """%x = input "x" : f32[{n}, {n}]
%y = input "y" : f32[{n}, {n}]
%t = permute %y perm=[1, 0]
%a = add %x, %t
output "a" = %a
"""
# The plain grid-stride form of the transposed add, for comparison with smelt's tiles: each
# thread one element, `y` read down its columns (what smelt generated before the tiles).
NAIVE_TRANSPOSE = """extern "C" __global__ void __launch_bounds__(256) naive_transpose_add(
    const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ a,
    long long n) {{
    for (long long f = blockIdx.x * (long long)blockDim.x + threadIdx.x; f < n;
         f += (long long)gridDim.x * blockDim.x) {{
        const int i = (int)(f / {n}), j = (int)(f % {n});
        a[f] = __fadd_rn(x[f], y[j * {n} + i]);
    }}
}}
"""


def load_lib(env, names):
    paths = [os.environ[env]] if os.environ.get(env) else names
    for p in paths:
        try:
            return C.CDLL(p)
        except OSError:
            pass
    sys.exit(f"kernel-variants: cannot load any of {paths} (set {env})")


cu = load_lib("SMELT_CUDA_DRIVER_LIB", ["libcuda.so.1", "libcuda.so"])
nvrtc = load_lib("SMELT_NVRTC_LIB", ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"])
P = C.c_void_p


def ck(rc, what):
    if rc != 0:
        msg = C.c_char_p()
        cu.cuGetErrorString(rc, C.byref(msg))
        raise RuntimeError(f"{what}: CUDA error {rc} ({msg.value})")


def optional(name, *args):
    """A driver call the fake driver may lack: its int result, or None."""
    try:
        f = getattr(cu, name)
    except AttributeError:
        return None
    out = C.c_int()
    return out.value if f(C.byref(out), *args) == 0 else None


ck(cu.cuInit(0), "cuInit")
dev = C.c_int()
ck(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
ctx = P()
ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
name = C.create_string_buffer(256)
ck(cu.cuDeviceGetName(name, 256, dev), "cuDeviceGetName")
cc = (optional("cuDeviceGetAttribute", 75, dev), optional("cuDeviceGetAttribute", 76, dev))
sms = optional("cuDeviceGetAttribute", 16, dev)
print(f"device: {name.value.decode()}, sm_{cc[0]}{cc[1]}, {sms} multiprocessors", flush=True)


def compile_kernel(src, kernel):
    prog = P()
    ck(nvrtc.nvrtcCreateProgram(C.byref(prog), src.encode(), b"probe.cu", 0, None, None),
       "nvrtcCreateProgram")
    opts = [b"--std=c++17", f"--gpu-architecture=compute_{cc[0]}{cc[1]}".encode()]
    if os.environ.get("SMELT_CUDA_INCLUDE"):
        opts.append(b"-I" + os.environ["SMELT_CUDA_INCLUDE"].encode())
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), (C.c_char_p * len(opts))(*opts))
    if rc != 0:
        n = C.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, C.byref(n))
        log = C.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC error {rc}:\n{log.value.decode()}")
    n = C.c_size_t()
    ck(nvrtc.nvrtcGetPTXSize(prog, C.byref(n)), "nvrtcGetPTXSize")
    ptx = C.create_string_buffer(n.value)
    ck(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    mod, fn = P(), P()
    ck(cu.cuModuleLoadData(C.byref(mod), ptx), "cuModuleLoadData")
    ck(cu.cuModuleGetFunction(C.byref(fn), mod, kernel.encode()), "cuModuleGetFunction")
    return fn


def alloc(nbytes, fill=None):
    d = C.c_uint64()
    ck(cu.cuMemAlloc_v2(C.byref(d), C.c_size_t(nbytes)), "cuMemAlloc")
    if fill is not None:
        ck(cu.cuMemcpyHtoD_v2(d, fill, C.c_size_t(nbytes)), "cuMemcpyHtoD")
    return d


def floats(n):
    """n floats in [0, 1): a random 2^16-element pattern repeated (fast to build)."""
    k = min(n, 1 << 16)
    pat = array.array("f", (random.random() for _ in range(k))).tobytes()
    return (pat * (n // k + 1))[: 4 * n]


def event_time(launch, iters, warm=20):
    """Median µs of `launch` between two events, each call synchronised."""
    for _ in range(warm):
        launch()
    ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    s, e = P(), P()
    ck(cu.cuEventCreate(C.byref(s), 0), "cuEventCreate")
    ck(cu.cuEventCreate(C.byref(e), 0), "cuEventCreate")
    ts = []
    for _ in range(iters):
        ck(cu.cuEventRecord(s, None), "cuEventRecord")
        launch()
        ck(cu.cuEventRecord(e, None), "cuEventRecord")
        ck(cu.cuEventSynchronize(e), "cuEventSynchronize")
        ms = C.c_float()
        ck(cu.cuEventElapsedTime(C.byref(ms), s, e), "cuEventElapsedTime")
        ts.append(ms.value * 1e3)
    return statistics.median(ts)


def report(label, us, nbytes, copy_us, extra=""):
    print(f"{label:58s} {us:9.1f} us {nbytes / us / 1e3:8.1f} GB/s {100 * copy_us / us:5.1f}% "
          f"of copy {extra}", flush=True)


def copy_reference(nbytes, iters):
    """A device-to-device copy moving `nbytes` (half read, half written)."""
    a, b = alloc(nbytes // 2), alloc(nbytes // 2)
    us = event_time(lambda: ck(cu.cuMemcpyDtoD_v2(b, a, C.c_size_t(nbytes // 2)), "copy"), iters)
    report("cuMemcpyDtoD, same bytes", us, nbytes, us)
    cu.cuMemFree_v2(a)
    cu.cuMemFree_v2(b)
    return us


def generate(smelt, text):
    """The CUDA C smelt emits for `text`, with its kernel's name and grid."""
    d = tempfile.mkdtemp(prefix="smelt-probe-")
    src = os.path.join(d, "case.smelt")
    with open(src, "w") as f:
        f.write(text)
    subprocess.run([smelt, "explain", src, "--emit", "cuda", "--emit-dir", d], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(d, "kernels.cu")) as f:
        cu_src = f.read()
    m = re.search(r"// kernel (\w+): elementwise.*?(?:\((\d+) packs of 4\))?, grid (\d+) x block 256",
                  cu_src)
    assert m, "no elementwise kernel with block 256 in the generated source"
    return cu_src, m.group(1), int(m.group(2) or 1), int(m.group(3))


def edit(src, edits):
    for a, b in edits:
        assert a in src, f"edit no longer matches the generated source: {a!r}"
        src = src.replace(a, b)
    return src


# Labels of variants whose checked outputs were wrong.
WRONG = []


def readback(d, n):
    """The first `n` floats at device address `d`."""
    buf = (C.c_float * n)()
    ck(cu.cuMemcpyDtoH_v2(buf, d, C.c_size_t(4 * n)), "cuMemcpyDtoH")
    return list(buf)


def variant(label, src, kernel, grid, args, nbytes, copy_us, iters, want=None):
    """Times `src`'s `kernel`; `want`: the first outputs it must give (same-semantics edits)."""
    fn = compile_kernel(src, kernel)
    regs = optional("cuFuncGetAttribute", 4, fn)
    blocks = optional("cuOccupancyMaxActiveBlocksPerMultiprocessor", fn, 256, C.c_size_t(0))
    vals = [C.c_uint64(a.value) if isinstance(a, C.c_uint64) else C.c_longlong(a) for a in args]
    params = (P * len(vals))(*[C.cast(C.pointer(v), P) for v in vals])

    def launch():
        assert vals  # `params` points into them
        ck(cu.cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, None, params, None), "launch")

    us = event_time(launch, iters)
    ok = ""
    if want is not None:
        got = readback(args[-2], len(want))
        bad = sum(abs(g - w) > 1e-6 * (1 + abs(w)) for g, w in zip(got, want))
        ok = ", output ok"
        if bad:
            ok = f", OUTPUT WRONG in {bad} of {len(want)}"
            WRONG.append(label)
    report(label, us, nbytes, copy_us, f"(grid {grid}, {regs} regs, {blocks} blocks/SM{ok})")


def packs(u, k):
    """Edits from `u` packs per thread to `k` (none when they are equal)."""
    if u == k:
        return []
    return [(f"u < {u}", f"u < {k}"),
            (f"blockDim.x * {u} + threadIdx.x", f"blockDim.x * {k} + threadIdx.x"),
            (f"gridDim.x * blockDim.x * {u})", f"gridDim.x * blockDim.x * {k})")]


def bounds(blocks):
    return [("__launch_bounds__(256)", f"__launch_bounds__(256, {blocks})")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smelt", default="gpu-bundle/bin/smelt")
    ap.add_argument("--scale", type=int, default=1, help="divide every size by this")
    ap.add_argument("--iters", type=int, default=200)
    o = ap.parse_args()
    it = o.iters
    resident = (sms or 132) * 8

    n = (1 << 24) // o.scale
    src, kernel, u, grid = generate(o.smelt, CHAIN.format(n=n))
    xs = floats(n)
    x, y = alloc(4 * n, xs), alloc(4 * n)
    args, nb = (x, y, n), 8 * n
    copy_us = copy_reference(nb, it)
    head = array.array("f", xs[: 4 * 1024])
    want = [max(2 * math.tanh(1.5 * a + 0.5) - 0.25, 0) * a + a for a in head]
    v = lambda label, s, g=grid, w=want: variant(label, s, kernel, g, args, nb, copy_us, it, w)
    v(f"chain as generated ({u} packs/thread)", src)
    v("chain, tanhf replaced by its argument", edit(src, [("tanhf(v4)", "(v4)")]), w=None)
    v("chain, body = load, store (a copy)", edit(src, [("q0.v[e] = v12;", "q0.v[e] = v0;")]),
      w=None)
    v("chain, 1 pack/thread", edit(src, packs(u, 1)), grid * u)
    if u > 2:
        v("chain, 2 packs/thread", edit(src, packs(u, 2)), grid * u // 2)
    v("chain, __launch_bounds__(256, 8)", edit(src, bounds(8)))
    v("chain, __launch_bounds__(256, 6)", edit(src, bounds(6)))
    v("chain, 1 pack/thread, __launch_bounds__(256, 8)", edit(src, packs(u, 1) + bounds(8)), grid * u)
    v(f"chain, looping grid {resident}, __launch_bounds__(256, 8)", edit(src, bounds(8)),
      min(grid, resident))
    for d in (x, y):
        cu.cuMemFree_v2(d)

    b = 64 // min(o.scale, 64)
    m = b * 128 * 12 * 64
    src, kernel, u, grid = generate(o.smelt, PERM.format(b=b))
    xs, zs = floats(m), floats(m)[::-1]
    x, z, y = alloc(4 * m, xs), alloc(4 * m, zs), alloc(4 * m)
    args, nb = (x, z, y, m), 12 * m
    copy_us = copy_reference(nb, it)
    xh, zh = array.array("f", xs), array.array("f", zs)
    # y[b, s, h, d] = x[b, s, h, d] + z[b, h, s, d]
    want = [xh[f] + zh[f // 98304 * 98304 + f // 768 % 128 * 64 + f // 64 % 12 * 8192 + f % 64]
            for f in range(4096)]
    v = lambda label, s, g=grid, w=want: variant(label, s, kernel, g, args, nb, copy_us, it, w)
    contiguous = [("x1 * 64 + x2 * 8192 + x3_0", "x1 * 768 + x2 * 64 + x3_0")]
    v(f"permute-add as generated ({u} packs/thread)", src)
    v("permute-add, z read contiguously", edit(src, contiguous), w=None)
    v("permute-add, 1 pack/thread", edit(src, packs(u, 1)), grid * u)
    if u > 2:
        v("permute-add, 2 packs/thread", edit(src, packs(u, 2)), grid * u // 2)
    v("permute-add, __launch_bounds__(256, 8)", edit(src, bounds(8)))
    v("permute-add, __launch_bounds__(256, 6)", edit(src, bounds(6)))
    v("permute-add, 1 pack/thread, __launch_bounds__(256, 8)", edit(src, packs(u, 1) + bounds(8)),
      grid * u)
    v(f"permute-add, looping grid {resident}, __launch_bounds__(256, 8)", edit(src, bounds(8)),
      min(grid, resident))
    v("permute-add, looping grid 528", src, min(grid, 528))
    for d in (x, z, y):
        cu.cuMemFree_v2(d)

    # x + y.T: smelt's 32 x 32 shared-memory tiles against the plain grid-stride kernel.
    side = 4096 // min(o.scale, 32)
    m = side * side
    src, kernel, u, grid = generate(o.smelt, TRANSPOSE.format(n=side))
    xs, ys = floats(m), floats(m)[::-1]
    x, y, a = alloc(4 * m, xs), alloc(4 * m, ys), alloc(4 * m)
    args, nb = (x, y, a, m), 12 * m
    copy_us = copy_reference(nb, it)
    xh, yh = array.array("f", xs), array.array("f", ys)
    want = [xh[f] + yh[f % side * side + f // side] for f in range(4096)]
    v = lambda label, s, k, g, w=want: variant(label, s, k, g, args, nb, copy_us, it, w)
    v(f"transpose-add {side}x{side} as generated (tiles)", src, kernel, grid)
    naive = NAIVE_TRANSPOSE.format(n=side)
    v(f"transpose-add {side}x{side}, plain kernel (y down its columns)", naive,
      "naive_transpose_add", min(m // 256, 65535))


if __name__ == "__main__":
    main()
    if WRONG:
        sys.exit(f"kernel-variants: wrong outputs from {WRONG}")
