#!/usr/bin/env python3
"""Golden values for smelt's reference interpreter (ir/tests/interp_golden.rs).

The oracle is numpy (and ml_dtypes for bf16), independent of the Rust code: every expected
value below is computed here, once, and committed as JSON under ir/tests/data/interp/. The
Rust tests read the JSON and need no Python.

Rerun (only to add or change cases; review the diff of the JSON like code):

    pip install --target .venv-golden numpy ml_dtypes      # from the repository root
    PYTHONPATH=.venv-golden python3 scripts/golden/gen_interp.py

Output is deterministic (fixed seeds, sorted keys).

Conventions the Rust side relies on (see ir/tests/interp_support/mod.rs):
- a case is {"name", "op", "attrs", "inputs": [tensor...], "expected": tensor}; a tensor is
  {"dtype", "shape", "data", "const"?}; floats are JSON numbers or "nan", "inf", "-inf";
- the graph is one node `op(inputs...)` with the attributes given (or a short chain for the
  "softmax" composite); inputs with "const": true become constants, the others inputs.

Semantics mirrored (PyTorch's; see ir/src/interp/mod.rs): f16/bf16 computed in f32 and rounded
after each op; reductions and matmul accumulate floats in f64 and round once; integers wrap;
floor_div/remainder with Python signs; float->int casts truncate and saturate, NaN -> 0.
"""

import json
import math
import os
import sys

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
NP = {
    "bool": np.bool_,
    "i32": np.int32,
    "i64": np.int64,
    "f16": np.float16,
    "bf16": BF16,
    "f32": np.float32,
    "f64": np.float64,
}
FLOATS = ["f16", "bf16", "f32", "f64"]
INTS = ["i32", "i64"]
BITS = {"i32": 32, "i64": 64}
INF, NAN = math.inf, math.nan
OUT_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "ir", "tests", "data", "interp")


def name_of(a):
    for k, t in NP.items():
        if a.dtype == np.dtype(t):
            return k
    raise ValueError(a.dtype)


def arr(values, dtype, shape=None):
    """An array of `dtype`; float values pass through f64 (then the dtype's own rounding)."""
    if dtype in FLOATS:
        a = np.array(values, dtype=np.float64)
        a = a.astype(np.float32).astype(NP[dtype]) if dtype in ("f16", "bf16") else a.astype(NP[dtype])
    elif dtype in INTS:
        a = np.array([wrap(int(v), dtype) for v in np.ravel(np.array(values, dtype=object))],
                     dtype=NP[dtype]).reshape(np.shape(values))
    else:
        a = np.array(values, dtype=np.bool_)
    return a.reshape(shape) if shape is not None else a


def enc_float(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def enc(a, const=False):
    a = np.asarray(a)
    d = name_of(a)
    flat = a.reshape(-1)
    if d in FLOATS:
        data = [enc_float(float(v)) for v in flat.astype(np.float64)]
    elif d == "bool":
        data = [bool(v) for v in flat]
    else:
        data = [int(v) for v in flat]
    t = {"dtype": d, "shape": list(a.shape), "data": data}
    if const:
        t["const"] = True
    return t


def case(name, op, inputs, expected, **attrs):
    ins = [enc(x[0], const=True) if isinstance(x, tuple) else enc(x) for x in inputs]
    return {"name": name, "op": op, "attrs": attrs, "inputs": ins, "expected": enc(expected)}


def wrap(v, dtype):
    bits = BITS[dtype]
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def round_f32(x64, dtype):
    """A value computed in f64 (standing for PyTorch's f32 result) rounded like PyTorch: to
    f32, then (f16/bf16) to the storage dtype."""
    x32 = np.asarray(x64, dtype=np.float64).astype(np.float32)
    return x32.astype(NP[dtype]) if dtype != "f32" else x32


def round_once(x64, dtype):
    """An f64 accumulator correctly rounded (nearest-even) to `dtype` in one step."""
    x64 = np.asarray(x64, dtype=np.float64)
    if dtype == "bf16":
        # ml_dtypes rounds f64 through f32 (twice); round the f64 bits at bf16's precision
        # directly (7 fraction bits of 52: drop 45), then overflow to inf past bf16's range.
        bits = x64.view(np.uint64).copy()
        finite = np.isfinite(x64)
        lsb = (bits >> np.uint64(45)) & np.uint64(1)
        rounded = (bits + np.uint64(0x1FFFFFFFFFFF) + lsb) & ~np.uint64(0x1FFFFFFFFFFF)
        bits = np.where(finite, rounded, bits)
        r = bits.view(np.float64)
        bf_max = float(ml_dtypes.finfo(BF16).max)
        r = np.where(np.abs(r) > bf_max, np.copysign(INF, r), r)
        return r.astype(np.float32).astype(BF16)
    return x64.astype(NP[dtype])


# ---- unary --------------------------------------------------------------------------------

def f64_erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x


UNARY_F64 = {
    "neg": lambda x: -x,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "erf": f64_erf,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "relu": lambda x: np.where(x < 0, 0.0, x),
    "floor": np.floor,
    "ceil": np.ceil,
}

UNARY_VALUES = {
    "f32": [0.0, -0.0, INF, -INF, NAN, 1e-45, -1e-45, 1e-40, -3e-39, 1.1754944e-38, 3.4e38,
            -3.4e38, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.7, -3.7, 10.0, -10.0, 88.0, 89.0, -87.0,
            -104.0, 100.0, 1e10, -1e10, 1e30, -1e30, 0.1, 1e-7, 3.14159265, 4.6, -0.3],
    "f16": [0.0, -0.0, INF, -INF, NAN, 6e-8, -6e-8, 3e-6, 6.104e-5, 65504.0, -65504.0, 1.0, -1.0,
            0.5, -0.5, 2.5, -2.5, 3.7, -3.7, 10.0, -10.0, 11.2, -17.5, 100.0, 0.1, 1e-3, 4.6, -0.3],
    "bf16": [0.0, -0.0, INF, -INF, NAN, 1e-40, -1e-40, 1e-38, 3e38, -3e38, 1.0, -1.0, 0.5, -0.5,
             2.5, -2.5, 3.7, -3.7, 10.0, -10.0, 88.0, 89.0, -104.0, 100.0, 1e10, 1e30, 0.1, 1e-7,
             4.6, -0.3],
    "f64": [0.0, -0.0, INF, -INF, NAN, 5e-324, -5e-324, 1e-310, 2.2250738585072014e-308, 1.7e308,
            -1.7e308, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.7, -3.7, 10.0, -10.0, 700.0, 710.0,
            -745.0, 100.0, 1e10, 1e30, 1e300, 0.1, 1e-7, 3.141592653589793, 4.6, -0.3],
}

INT_UNARY = {
    "neg": lambda v: -v,
    "abs": abs,
    "relu": lambda v: max(v, 0),
    "floor": lambda v: v,
    "ceil": lambda v: v,
}
INT_VALUES = {
    "i32": [0, 1, -1, 7, -7, 100, -100000, 2**31 - 1, -2**31, -2**31 + 1],
    "i64": [0, 1, -1, 7, -7, 100, -100000, 2**31, -2**31 - 1, 2**63 - 1, -2**63, -2**63 + 1],
}


def unary_cases():
    out = []
    for dt in FLOATS:
        x = arr(UNARY_VALUES[dt], dt)
        for op, f in UNARY_F64.items():
            y64 = f(x.astype(np.float64))
            y = y64.astype(np.float64) if dt == "f64" else round_f32(y64, dt)
            out.append(case(f"unary/{op}/{dt}", op, [x], y))
        out.append(case(f"unary/logical_not/{dt}", "logical_not", [x], x.astype(np.float64) == 0))
    for dt in INTS:
        x = arr(INT_VALUES[dt], dt)
        for op, f in INT_UNARY.items():
            y = arr([wrap(f(int(v)), dt) for v in x], dt)
            out.append(case(f"unary/{op}/{dt}", op, [x], y))
        out.append(case(f"unary/logical_not/{dt}", "logical_not", [x], x == 0))
    b = arr([True, False], "bool")
    out.append(case("unary/logical_not/bool", "logical_not", [b], ~b))
    # Shapes: 2-D, 0-d, zero-size, and a constant operand.
    x = arr([[0.25, -1.5, 3.0], [NAN, -0.0, 9.0]], "f32")
    out.append(case("unary/sqrt/f32_2d_const", "sqrt", [(x,)], np.sqrt(x)))
    x = arr(-2.5, "f32")
    out.append(case("unary/exp/f32_0d", "exp", [x], round_f32(np.exp(np.float64(x)), "f32")))
    x = arr(np.zeros((0, 3)), "f16")
    out.append(case("unary/tanh/f16_empty", "tanh", [x], x))
    return out


# ---- binary -------------------------------------------------------------------------------

A_F = [-7.5, -3.0, -2.0, -0.5, -0.0, 0.0, 0.5, 2.0, 3.0, 7.5, 1.25, INF, -INF, NAN, 1e-40, 3e38]
B_F = [-2.0, -0.5, -0.0, 0.0, 0.5, 1.5, 3.0, 0.3, INF, -INF, NAN, 1e-40]

FLOAT_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "floor_div": np.floor_divide,
    "remainder": np.remainder,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def py_pow(a, b):
    """PyTorch's integer pow, before wrapping."""
    if b < 0:
        if a == 1:
            return 1
        if a == -1:
            return -1 if b % 2 else 1
        return 0
    return pow(a, b, 1 << 64)


INT_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floor_div": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "pow": py_pow,
    "maximum": max,
    "minimum": min,
}
INT_A = {
    "i32": [-7, -3, -2, -1, 0, 1, 2, 3, 7, 46341, 2**31 - 1, -2**31],
    "i64": [-7, -3, -2, -1, 0, 1, 2, 3, 7, 3037000500, 2**63 - 1, -2**63],
}
INT_B = {
    "i32": [-7, -2, -1, 0, 1, 2, 3, 5, 2**31 - 1, -2**31],
    "i64": [-7, -2, -1, 0, 1, 2, 3, 5, 2**63 - 1, -2**63],
}
POW_B = {"i32": [-3, -2, -1, 0, 1, 2, 3, 5, 31, 2**31 - 1],
         "i64": [-3, -2, -1, 0, 1, 2, 3, 5, 63, 2**63 - 1]}


def binary_cases():
    out = []
    for dt in FLOATS:
        a = arr(A_F, dt, (len(A_F), 1))
        b = arr(B_F, dt, (1, len(B_F)))
        with np.errstate(all="ignore"):
            for op, f in FLOAT_BINARY.items():
                if dt == "f64":
                    y = f(a, b)
                else:
                    y = f(a.astype(np.float32), b.astype(np.float32)).astype(NP[dt])
                out.append(case(f"binary/{op}/{dt}", op, [a, b], y))
            for op, f in CMP.items():
                out.append(case(f"binary/{op}/{dt}", op, [a, b], f(a.astype(np.float64), b.astype(np.float64))))
    for dt in INTS:
        for op, f in INT_BINARY.items():
            bs = POW_B[dt] if op == "pow" else INT_B[dt]
            if op in ("floor_div", "remainder"):
                bs = [v for v in bs if v != 0]
            a = arr(INT_A[dt], dt, (len(INT_A[dt]), 1))
            b = arr(bs, dt, (1, len(bs)))
            y = [[wrap(f(int(p), int(q)), dt) for q in b[0]] for p in a[:, 0]]
            out.append(case(f"binary/{op}/{dt}", op, [a, b], arr(y, dt)))
        a = arr(INT_A[dt], dt, (len(INT_A[dt]), 1))
        b = arr(INT_B[dt], dt, (1, len(INT_B[dt])))
        for op, f in CMP.items():
            out.append(case(f"binary/{op}/{dt}", op, [a, b], f(a, b)))
    p = arr([True, False, True, False], "bool")
    q = arr([True, True, False, False], "bool")
    for op, f in CMP.items():
        out.append(case(f"binary/{op}/bool", op, [p, q], f(p, q)))
    # Broadcasting shapes: [2, 1, 3] with [4, 1]; 0-d with 0-d; 0-d with a vector; zero-size.
    rng = np.random.default_rng(7)
    a = arr(rng.standard_normal((2, 1, 3)), "f32")
    b = arr(rng.standard_normal((4, 1)), "f32")
    out.append(case("binary/mul/f32_broadcast_3d", "mul", [a, b], a * b))
    out.append(case("binary/sub/f32_broadcast_const", "sub", [a, (b,)], a - b))
    s, t = arr(2.5, "f64"), arr(-4.0, "f64")
    out.append(case("binary/pow/f64_0d", "pow", [s, t], np.power(s, t)))
    v = arr([1, 2, 3], "i64")
    out.append(case("binary/sub/i64_0d_vector", "sub", [arr(10, "i64"), v], 10 - v))
    e = arr(np.zeros((0, 1)), "f32")
    w = arr([[1.0, 2.0, 3.0]], "f32")
    out.append(case("binary/add/f32_empty", "add", [e, w], e + w))
    out.append(case("binary/lt/f32_empty", "lt", [e, w], e < w))
    return out


def where_cases():
    out = []
    c = arr([[True], [False], [True]], "bool")
    for dt in ["f32", "i64", "bool", "f16", "bf16", "i32", "f64"]:
        a = arr([[1, 0, 3, 4]], dt) if dt == "bool" else arr([[1.5, -2.0, NAN if dt in FLOATS else 3, 4]], dt)
        b = arr(0, dt)
        out.append(case(f"where/{dt}", "where", [c, a, b], np.where(c, a, b)))
    z = arr(True, "bool")
    out.append(case("where/f32_0d", "where", [z, arr(1.0, "f32"), arr(2.0, "f32")], arr(1.0, "f32")))
    e = arr(np.zeros((0,)), "bool")
    out.append(case("where/f32_empty", "where", [e, arr([1.0], "f32"), arr(2.0, "f32")],
                    arr(np.zeros((0,)), "f32")))
    return out


# ---- casts --------------------------------------------------------------------------------

CAST_VALUES = {
    "bool": [False, True],
    "i32": [0, 1, -1, 2, -7, 255, 65504, 65520, 70000, 16777217, -16777219, 2**31 - 1, -2**31],
    "i64": [0, 1, -1, 300, -7, 2**31, -2**31 - 1, 2**32 + 5, 2**53 + 1, 123456789012,
            2**63 - 1, -2**63],
    "f16": [0.0, -0.0, 0.5, -1.5, 2.5, -2.9, 1000.0, 65504.0, -65504.0, INF, -INF, NAN, 6e-8],
    "bf16": [0.0, -0.0, 0.5, -1.5, 2.5, -2.9, 1e10, -1e10, 3e38, INF, -INF, NAN, 1e-40, 258.0],
    "f32": [0.0, -0.0, 0.5, -1.5, 2.5, -2.9, 1e5, 65519.0, 65520.0, 3e9, -3e9, 1e20, -1e20,
            2147483520.0, INF, -INF, NAN, 1e-40, 3.4e38, 1.0009765625, 1.00146484375],
    "f64": [0.0, -0.0, 0.5, -1.5, 2.5, -2.9, 1e5, 3e9, -3e9, 1e20, -1e300, 1e300, 2.0**63,
            -2.0**63, 9.3e18, INF, -INF, NAN, 1e-300, 1.0004882812500002, 16777217.0,
            2147483647.9, -2147483648.9],
}


def cast_value(v, src, dst):
    """One element, by the interpreter's documented rules, computed by hand."""
    if dst == "bool":
        return bool(v != 0) if not (isinstance(v, float) and math.isnan(v)) else True
    if dst in INTS:
        if src == "bool":
            return int(v)
        if src in INTS:
            return wrap(int(v), dst)
        if math.isnan(v):
            return 0
        lo, hi = -(1 << (BITS[dst] - 1)), (1 << (BITS[dst] - 1)) - 1
        if math.isinf(v):
            return hi if v > 0 else lo
        return min(max(math.trunc(v), lo), hi)
    return None  # floats: computed with numpy below


def cast_cases():
    out = []
    for src, vals in CAST_VALUES.items():
        x = arr(vals, src)
        for dst in NP:
            if dst == "bool" or dst in INTS:
                py = [float(v) for v in x.astype(np.float64)] if src in FLOATS else [int(v) for v in x]
                y = arr([cast_value(v, src, dst) for v in py], dst)
            elif src in FLOATS or src == "bool":
                # bool/float -> float: through f32 for f16/bf16 (exact for every source but f64).
                y = x.astype(np.float64).astype(np.float32).astype(NP[dst]) if dst in ("f16", "bf16") \
                    else x.astype(np.float64).astype(NP[dst])
            else:
                # integer -> float: C casts (i64 -> f32 rounds once), f16/bf16 through f32.
                y = x.astype(np.float32).astype(NP[dst]) if dst in ("f16", "bf16", "f32") else x.astype(np.float64)
            out.append(case(f"cast/{src}_to_{dst}", "cast", [x], y, to=dst))
    out.append(case("cast/f32_to_i64_0d", "cast", [arr(-7.9, "f32")], arr(-7, "i64"), to="i64"))
    out.append(case("cast/f16_to_f32_empty", "cast", [arr(np.zeros((2, 0)), "f16")],
                    arr(np.zeros((2, 0)), "f32"), to="f32"))
    return out


# ---- reductions ---------------------------------------------------------------------------

AXES = [[], [0], [1], [2], [0, 2], [2, 0], [1, 2], [0, 1, 2]]
AXES_SHORT = [[], [1], [2, 0], [0, 1, 2]]  # for the dtypes other than f32


def reduce_ref(op, x, axes, keepdim):
    dt = name_of(x)
    ax = tuple(axes)
    with np.errstate(all="ignore"):
        if op in ("sum", "prod", "mean"):
            if dt in FLOATS:
                x64 = x.astype(np.float64)
                r = np.sum(x64, axis=ax, keepdims=keepdim) if op != "prod" else np.prod(x64, axis=ax, keepdims=keepdim)
                if op == "mean":
                    count = np.prod([x.shape[a] for a in axes]) if axes else 1
                    r = r / np.float64(count)
                return round_once(r, dt)
            xi = x.astype(np.int64)
            return (np.sum if op == "sum" else np.prod)(xi, axis=ax, keepdims=keepdim, dtype=np.int64)
        if op in ("max", "min"):
            f = np.max if op == "max" else np.min
            if dt in ("f16", "bf16"):
                return f(x.astype(np.float32), axis=ax, keepdims=keepdim).astype(NP[dt])
            return f(x, axis=ax, keepdims=keepdim)
        f = np.argmax if op == "argmax" else np.argmin
        src = x.astype(np.float64) if dt in FLOATS else x
        if not axes:
            return np.zeros(x.shape, dtype=np.int64)
        return f(src, axis=axes[0], keepdims=keepdim).astype(np.int64)


def reduce_cases():
    out = []
    rng = np.random.default_rng(1234)
    base = rng.standard_normal((2, 3, 4))
    for dt in FLOATS:
        x = arr(base * 3, dt)
        for op in ["sum", "mean", "prod", "max", "min"]:
            for axes in AXES if dt == "f32" else AXES_SHORT:
                for keep in (False, True):
                    name = f"reduce/{op}/{dt}/{''.join(map(str, axes)) or 'none'}/{'keep' if keep else 'drop'}"
                    out.append(case(name, op, [x], reduce_ref(op, x, axes, keep), axes=axes, keepdim=keep))
        ties = arr(rng.integers(-2, 3, (2, 3, 4)), dt)
        for op in ["argmax", "argmin"]:
            for axes in [[0], [1], [2]]:
                for keep in (False, True):
                    name = f"reduce/{op}/{dt}/{axes[0]}/{'keep' if keep else 'drop'}"
                    out.append(case(name, op, [ties], reduce_ref(op, ties, axes, keep), axes=axes, keepdim=keep))
        # NaN: propagated by max/min, the extreme (first NaN wins) for argmax/argmin.
        nan = arr([[1.0, NAN, 3.0, NAN], [2.0, -1.0, 5.0, 0.5], [NAN, 7.0, -INF, INF]], dt)
        for op in ["max", "min", "argmax", "argmin", "sum"]:
            for axes in [[0], [1]]:
                out.append(case(f"reduce/{op}/{dt}/nan_{axes[0]}", op, [nan], reduce_ref(op, nan, axes, False),
                                axes=axes, keepdim=False))
        # Zero-size reduced axis: sum 0, prod 1, mean NaN; a zero-size kept axis: empty.
        e = arr(np.zeros((2, 0, 3)), dt)
        for op in ["sum", "prod", "mean"]:
            for axes, keep in [([1], False), ([1], True), ([0, 1], False), ([0], False)]:
                name = f"reduce/{op}/{dt}/empty_{''.join(map(str, axes))}_{'keep' if keep else 'drop'}"
                out.append(case(name, op, [e], reduce_ref(op, e, axes, keep), axes=axes, keepdim=keep))
    # Integer and bool inputs: sum/prod in i64 (wrapping), max/min/argmax in their own dtype.
    for dt in INTS:
        big = 2**31 - 1 if dt == "i32" else 2**62
        x = arr([[big, big, 3], [-5, 2, -big - 1], [7, -7, 0]], dt)
        for op in ["sum", "prod", "max", "min", "argmax", "argmin"]:
            for axes in ([[0], [1]] if op.startswith("arg") else [[], [0], [1], [0, 1]]):
                for keep in (False, True):
                    name = f"reduce/{op}/{dt}/{''.join(map(str, axes)) or 'none'}/{'keep' if keep else 'drop'}"
                    out.append(case(name, op, [x], reduce_ref(op, x, axes, keep), axes=axes, keepdim=keep))
    b = arr([[True, False, True], [True, True, True]], "bool")
    for op in ["sum", "prod", "max", "min"]:
        for axes in [[], [0], [1], [0, 1]]:
            name = f"reduce/{op}/bool/{''.join(map(str, axes)) or 'none'}"
            out.append(case(name, op, [b], reduce_ref(op, b, axes, False), axes=axes, keepdim=False))
    # 0-d inputs reduce over no axes.
    s = arr(4.5, "f32")
    for op in ["sum", "mean", "prod", "max", "min", "argmax", "argmin"]:
        out.append(case(f"reduce/{op}/f32_0d", op, [s], reduce_ref(op, s, [], False), axes=[], keepdim=False))
    out.append(case("reduce/sum/i32_0d", "sum", [arr(-3, "i32")], arr(-3, "i64"), axes=[], keepdim=True))
    # Cancellation shows the f64 accumulator: 1e8 + 1 - 1e8 in f32 would be 0.
    c = arr([1e8, 1.0, -1e8, 1.0], "f32")
    out.append(case("reduce/sum/f32_cancellation", "sum", [c], arr(2.0, "f32"), axes=[0], keepdim=False))
    return out


# ---- matmul -------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ("vec_vec", (5,), (5,)),
    ("mat_vec", (2, 3), (3,)),
    ("vec_mat", (3,), (3, 4)),
    ("mat_mat", (2, 3), (3, 4)),
    ("batched", (2, 2, 3), (2, 3, 4)),
    ("broadcast_batch", (2, 1, 2, 3), (3, 3, 2)),
    ("vec_batched", (3,), (2, 3, 4)),
    ("batched_vec", (2, 2, 3), (3,)),
    ("k0", (2, 0), (0, 3)),
    ("k0_vec", (0,), (0,)),
    ("m0", (0, 3), (3, 2)),
    ("batch0", (0, 2, 3), (3, 1)),
]


def matmul_cases():
    out = []
    rng = np.random.default_rng(99)
    for dt in FLOATS + INTS:
        for name, xs, ys in MATMUL_SHAPES:
            if dt in FLOATS:
                x, y = arr(rng.standard_normal(xs), dt), arr(rng.standard_normal(ys), dt)
                ref = round_once(np.matmul(x.astype(np.float64), y.astype(np.float64)), dt)
            else:
                x, y = arr(rng.integers(-9, 10, xs), dt), arr(rng.integers(-9, 10, ys), dt)
                ref = np.matmul(x.astype(np.int64), y.astype(np.int64)).astype(NP[dt])
            out.append(case(f"matmul/{name}/{dt}", "matmul", [x, y], ref))
    # Wrapping: i32 accumulation of products past 2^31; i64 past 2^63.
    x = arr([[2**30, 2**30, 3]], "i32")
    y = arr([[2], [2], [1]], "i32")
    out.append(case("matmul/overflow/i32", "matmul", [x, y], arr([[wrap(2**32 + 3, "i32")]], "i32")))
    x = arr([2**62, 2**62], "i64")
    out.append(case("matmul/overflow/i64", "matmul", [x, arr([3, 1], "i64")], arr(wrap(2**64, "i64"), "i64")))
    # f16 products that overflow f16 one by one but accumulate fine in f64.
    x = arr([300.0, 300.0], "f16")
    y = arr([300.0, -300.0], "f16")
    out.append(case("matmul/cancel/f16", "matmul", [x, y], arr(0.0, "f16")))
    return out


# ---- views, concat, pad -------------------------------------------------------------------

def view_cases():
    out = []
    x = np.arange(24).reshape(2, 3, 4)
    for dt in ["f32", "i64", "bool", "f16", "bf16", "i32", "f64"]:
        a = arr(x % 2 if dt == "bool" else x - 7.5 if dt in FLOATS else x - 7, dt)
        out.append(case(f"view/reshape/{dt}", "reshape", [a], a.reshape(4, 6), shape=[4, 6]))
        out.append(case(f"view/permute/{dt}", "permute", [a], a.transpose(2, 0, 1), perm=[2, 0, 1]))
        out.append(case(f"view/slice/{dt}", "slice", [a], a[0:2:1, 1:3:1, 0:4:3],
                        ranges=[[0, 2, 1], [1, 3, 1], [0, 4, 3]]))
        b = a[:, 1:2, :]
        out.append(case(f"view/expand/{dt}", "expand", [b], np.broadcast_to(b, (3, 2, 3, 4)), shape=[3, 2, 3, 4]))
        parts = [a[:, :1], a[:, 1:1], a]
        out.append(case(f"view/concat/{dt}", "concat", parts, np.concatenate(parts, axis=1), axis=1))
    a = arr(np.arange(24).reshape(2, 3, 4) * 1.5, "f32")
    out.append(case("view/reshape/f32_flat", "reshape", [a], a.reshape(24), shape=[24]))
    out.append(case("view/permute/f32_210", "permute", [a], a.transpose(2, 1, 0), perm=[2, 1, 0]))
    out.append(case("view/slice/f32_steps", "slice", [a], a[1:2, 0:3:2, 1:4:2],
                    ranges=[[1, 2, 1], [0, 3, 2], [1, 4, 2]]))
    out.append(case("view/slice/f32_empty", "slice", [a], a[:, 2:2, :], ranges=[[0, 2, 1], [2, 2, 1], [0, 4, 1]]))
    out.append(case("view/concat/f32_axis0", "concat", [a, a[:1]], np.concatenate([a, a[:1]], axis=0), axis=0))
    out.append(case("view/concat/f32_one", "concat", [a], a, axis=2))
    out.append(case("view/concat/f32_const", "concat", [a, (a,)], np.concatenate([a, a], axis=2), axis=2))
    s = arr(3.25, "f32")
    out.append(case("view/reshape/f32_0d_to_11", "reshape", [s], s.reshape(1, 1), shape=[1, 1]))
    out.append(case("view/reshape/f32_1_to_0d", "reshape", [arr([3.0], "f32")], arr(3.0, "f32"), shape=[]))
    out.append(case("view/expand/f32_0d", "expand", [s], np.broadcast_to(s, (2, 3)), shape=[2, 3]))
    out.append(case("view/expand/f32_to_empty", "expand", [arr([[1.0]], "f32")], arr(np.zeros((0, 3)), "f32"),
                    shape=[0, 3]))
    out.append(case("view/permute/f32_0d", "permute", [s], s, perm=[]))
    out.append(case("view/slice/f32_0d", "slice", [s], s, ranges=[]))
    # pad: the scalar converts like a cast.
    p = arr([[1.0, 2.0], [3.0, 4.0]], "f32")
    pads = [[1, 0], [0, 2]]
    out.append(case("pad/f32", "pad", [p], np.pad(p, pads, constant_values=1.5), pads=pads, value={"float": 1.5}))
    pi = arr([[1, 2], [3, 4]], "i32")
    out.append(case("pad/i32_float_value", "pad", [pi], np.pad(pi, pads, constant_values=2), pads=pads,
                    value={"float": 2.7}))
    out.append(case("pad/i32_nan_value", "pad", [pi], np.pad(pi, [[0, 1], [0, 0]], constant_values=0),
                    pads=[[0, 1], [0, 0]], value={"float": "nan"}))
    pb = arr([[True], [False]], "bool")
    out.append(case("pad/bool_int_value", "pad", [pb], np.pad(pb, [[0, 0], [1, 1]], constant_values=True),
                    pads=[[0, 0], [1, 1]], value={"int": 3}))
    ph = arr([0.5, -0.5], "f16")
    out.append(case("pad/f16_overflow_value", "pad", [ph], arr([INF, 0.5, -0.5], "f16"), pads=[[1, 0]],
                    value={"float": 1e5}))
    pl = arr([1, 2], "i64")
    out.append(case("pad/i64_bool_value", "pad", [pl], arr([1, 2, 1, 1], "i64"), pads=[[0, 2]],
                    value={"bool": True}))
    pe = arr(np.zeros((0, 2)), "bf16")
    out.append(case("pad/bf16_empty", "pad", [pe], arr(np.full((2, 2), -3.0), "bf16"), pads=[[1, 1], [0, 0]],
                    value={"int": -3}))
    out.append(case("pad/f32_0d", "pad", [s], s, pads=[], value={"float": 0.0}))
    return out


# ---- gather, index_select -----------------------------------------------------------------

def index_cases():
    out = []
    x = arr(np.arange(12).reshape(3, 4) * 0.5 - 2, "f32")
    for it in INTS:
        i0 = arr([[2, 0, 1, 2], [0, 0, 0, 1]], it)
        out.append(case(f"gather/axis0/{it}", "gather", [x, i0], np.take_along_axis(x, i0.astype(np.int64), 0), axis=0))
        i1 = arr([[3, 0], [1, 1], [2, 3]], it)
        out.append(case(f"gather/axis1/{it}", "gather", [x, i1], np.take_along_axis(x, i1.astype(np.int64), 1),
                        axis=1))
        s = arr([[2], [0]], it)
        out.append(case(f"gather/smaller_index/{it}", "gather", [x, s],
                        np.take_along_axis(x[:, :1], s.astype(np.int64), 0), axis=0))
        sel = arr([3, 0, 3], it)
        out.append(case(f"index_select/axis1/{it}", "index_select", [x, sel], np.take(x, sel, axis=1), axis=1))
        sel0 = arr([1, 1, 2, 0, 2], it)
        out.append(case(f"index_select/axis0/{it}", "index_select", [x, sel0], np.take(x, sel0, axis=0), axis=0))
    b = arr([[True, False], [False, True]], "bool")
    out.append(case("gather/bool", "gather", [b, arr([[1, 1], [0, 0]], "i64")], arr([[False, True], [True, False]], "bool"),
                    axis=0))
    h = arr([1.5, -2.25, 3.0], "f16")
    out.append(case("index_select/f16", "index_select", [h, arr([2, 2, 0], "i32")], h[[2, 2, 0]], axis=0))
    e = arr(np.zeros((0, 4), dtype=np.int64), "i64")
    out.append(case("gather/empty_index", "gather", [x, e], arr(np.zeros((0, 4)), "f32"), axis=0))
    out.append(case("index_select/empty_index", "index_select", [x, arr(np.zeros(0, dtype=np.int64), "i64")],
                    arr(np.zeros((3, 0)), "f32"), axis=1))
    return out


# ---- composite: a softmax chain -----------------------------------------------------------

def composite_cases():
    rng = np.random.default_rng(5)
    x = arr(rng.standard_normal((3, 5)) * 4, "f32")
    # max, sub, exp, sum, div: each op rounds to f32 (sum accumulates in f64 then rounds).
    m = x.max(axis=1, keepdims=True)
    e = round_f32(np.exp((x - m).astype(np.float64)), "f32")
    s = e.astype(np.float64).sum(axis=1, keepdims=True).astype(np.float32)
    y = (e / s).astype(np.float32)
    return [case("composite/softmax/f32", "softmax", [x], y, axis=1)]


FAMILIES = {
    "unary": unary_cases,
    "binary": lambda: binary_cases() + where_cases(),
    "cast": cast_cases,
    "reduce": reduce_cases,
    "matmul": matmul_cases,
    "view": view_cases,
    "index": lambda: index_cases() + composite_cases(),
}


def main():
    np.seterr(all="ignore")  # overflow to inf, 0/0 and friends are the point of many cases
    os.makedirs(OUT_DIR, exist_ok=True)
    for family, gen in FAMILIES.items():
        cases = gen()
        names = [c["name"] for c in cases]
        assert len(names) == len(set(names)), f"duplicate case names in {family}"
        path = os.path.join(OUT_DIR, f"{family}.json")
        # One case per line, so that a regenerated file diffs case by case.
        lines = [json.dumps(c, sort_keys=True, separators=(",", ":"), allow_nan=False) for c in cases]
        with open(path, "w") as f:
            f.write('{"generator":"scripts/golden/gen_interp.py","cases":[\n')
            f.write(",\n".join(lines))
            f.write("\n]}\n")
        print(f"{path}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
