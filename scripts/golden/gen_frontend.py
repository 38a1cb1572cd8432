#!/usr/bin/env python3
"""Golden values for smelt-frontend's composite ops (frontend/tests/golden.rs).

The oracle is independent of smelt: plain numpy, computed in float64 from the exact inputs
(which are already rounded to their dtype), written as PyTorch documents each op, then rounded
once to the output dtype. Where PyTorch rounds in the middle of an op (rms_norm casts back to
the input dtype before multiplying by the weight) the oracle rounds there too.

Run from the repository root:

    pip install --target .venv-golden numpy ml_dtypes
    PYTHONPATH=.venv-golden python3 scripts/golden/gen_frontend.py

It rewrites frontend/tests/data/composites.json; review the diff before committing.
"""

import json
import math
import os

import ml_dtypes
import numpy as np

RNG = np.random.default_rng(20240601)
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
          "i64": np.int64, "bool": np.bool_}
# (rtol, atol) per output dtype: a few ulps, since smelt computes in f32 and the oracle in f64.
TOL = {"f32": (2e-5, 2e-6), "f64": (1e-12, 1e-14), "f16": (2e-3, 1e-4), "bf16": (1.6e-2, 1e-3)}

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "frontend", "tests", "data", "composites.json")


def rand(shape, dtype="f32", scale=1.0, offset=0.0):
    """Normal samples rounded to f32, then to `dtype`; returned as float64 holding exact values."""
    x = (RNG.standard_normal(shape) * scale + offset).astype(np.float32).astype(DTYPES[dtype])
    return x.astype(np.float64)


def rnd(x, dtype):
    """Round float64 values to `dtype` (returned as float64)."""
    return np.asarray(x, dtype=np.float64).astype(DTYPES[dtype]).astype(np.float64)


def num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def enc(x, dtype):
    x = np.asarray(x)
    return {"dtype": dtype, "shape": list(x.shape), "data": [num(v) for v in x.reshape(-1)]}


CASES = []


def case(name, op, inputs, params, expected, out_dtype):
    rtol, atol = TOL.get(out_dtype, (0.0, 0.0))
    CASES.append({
        "name": name,
        "op": op,
        "inputs": {k: enc(v, d) for k, (v, d) in inputs.items()},
        "params": params,
        "expected": enc(rnd(expected, out_dtype) if out_dtype in TOL else expected, out_dtype),
        "rtol": rtol,
        "atol": atol,
    })


# ---- oracles (float64) -------------------------------------------------------------------

def softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return (x - m) - np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def layer_norm(x, k, w, b, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def rms_norm_unweighted(x, k, eps):
    axes = tuple(range(x.ndim - k, x.ndim))
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)


ERF = np.vectorize(math.erf)


def gelu(x, approximate):
    if approximate == "none":
        return 0.5 * x * (1.0 + ERF(x / math.sqrt(2.0)))
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
    return 0.5 * x * (1.0 + np.tanh(inner))


def silu(x):
    return x / (1.0 + np.exp(-x))


def var(x, axes, correction):
    axes = tuple(axes) if axes else tuple(range(x.ndim))
    n = np.prod([x.shape[a] for a in axes])
    mu = x.mean(axis=axes, keepdims=True)
    return ((x - mu) ** 2).sum(axis=axes) / max(0.0, n - correction)


def sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:
        mask = np.tril(np.ones((L, S), dtype=bool))
    if mask is not None and mask.dtype == np.bool_:
        scores = np.where(mask, scores, -np.inf)
    elif mask is not None:
        scores = scores + mask
    m = scores.max(axis=-1, keepdims=True)
    safe_m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(scores - safe_m)
    s = e.sum(axis=-1, keepdims=True)
    probs = np.where(np.isneginf(m), 0.0, e / np.where(s == 0, 1.0, s))  # _safe_softmax
    return probs @ v


# ---- cases -------------------------------------------------------------------------------

def softmax_cases():
    for name, x, dt, axis in [
        ("f32_last", rand((3, 5)), "f32", -1),
        ("f32_axis0", rand((3, 5), scale=3.0), "f32", 0),
        ("f32_large_offset", rand((2, 4), scale=5.0, offset=1000.0), "f32", 1),
        ("f32_neg_inf", np.array([[-np.inf, 0.0, 1.0, 2.0], [3.0, -np.inf, -np.inf, 0.5]]), "f32", -1),
        ("f16", rand((2, 6), "f16", scale=4.0), "f16", -1),
        ("bf16", rand((2, 6), "bf16", scale=4.0), "bf16", -1),
    ]:
        case(f"softmax_{name}", "softmax", {"x": (x, dt)}, {"axis": axis}, softmax(x, axis), dt)
    for name, x, dt, axis in [
        ("f32_last", rand((3, 5)), "f32", -1),
        ("f32_large_offset", rand((2, 4), scale=5.0, offset=-1000.0), "f32", -1),
        ("f16", rand((2, 6), "f16", scale=4.0), "f16", 1),
    ]:
        case(f"log_softmax_{name}", "log_softmax", {"x": (x, dt)}, {"axis": axis}, log_softmax(x, axis), dt)


def norm_cases():
    x = rand((2, 3, 4), scale=2.0, offset=0.5)
    w, b = rand((4,)), rand((4,))
    case("layer_norm_last_affine", "layer_norm", {"x": (x, "f32"), "weight": (w, "f32"), "bias": (b, "f32")},
         {"normalized_shape": [4], "eps": 1e-5}, layer_norm(x, 1, w, b, 1e-5), "f32")
    case("layer_norm_two_axes", "layer_norm", {"x": (x, "f32")},
         {"normalized_shape": [3, 4], "eps": 1e-3}, layer_norm(x, 2, None, None, 1e-3), "f32")
    x16, w16, b16 = rand((2, 8), "f16", scale=3.0), rand((8,), "f16"), rand((8,), "f16")
    case("layer_norm_f16", "layer_norm", {"x": (x16, "f16"), "weight": (w16, "f16"), "bias": (b16, "f16")},
         {"normalized_shape": [8], "eps": 1e-5}, layer_norm(x16, 1, w16, b16, 1e-5), "f16")

    x = rand((2, 3, 8), scale=2.0)
    w = rand((8,))
    eps32 = float(np.finfo(np.float32).eps)
    case("rms_norm_weight_default_eps", "rms_norm", {"x": (x, "f32"), "weight": (w, "f32")},
         {"normalized_shape": [8], "eps": None}, rms_norm_unweighted(x, 1, eps32) * w, "f32")
    case("rms_norm_two_axes", "rms_norm", {"x": (x, "f32")},
         {"normalized_shape": [3, 8], "eps": 1e-6}, rms_norm_unweighted(x, 2, float(np.float32(1e-6))), "f32")
    x16, w16 = rand((2, 8), "f16", scale=3.0), rand((8,), "f16")
    y16 = rnd(rms_norm_unweighted(x16, 1, eps32), "f16")  # PyTorch casts back before the weight
    case("rms_norm_f16", "rms_norm", {"x": (x16, "f16"), "weight": (w16, "f16")},
         {"normalized_shape": [8], "eps": None}, y16 * w16, "f16")
    xb = rand((3, 4), "bf16")
    case("rms_norm_bf16", "rms_norm", {"x": (xb, "bf16")},
         {"normalized_shape": [4], "eps": None}, rms_norm_unweighted(xb, 1, eps32), "bf16")


def activation_cases():
    grid = np.concatenate([np.linspace(-6.0, 6.0, 25), [0.0, -0.5, 0.5, 10.0, -10.0]])
    x = rnd(grid, "f32")
    for approx in ["none", "tanh"]:
        case(f"gelu_{approx}_f32", "gelu", {"x": (x, "f32")}, {"approximate": approx}, gelu(x, approx), "f32")
    xh = rnd(grid, "f16")
    case("gelu_none_f16", "gelu", {"x": (xh, "f16")}, {"approximate": "none"}, gelu(xh, "none"), "f16")
    xb = rnd(grid, "bf16")
    case("gelu_tanh_bf16", "gelu", {"x": (xb, "bf16")}, {"approximate": "tanh"}, gelu(xb, "tanh"), "bf16")
    case("silu_f32", "silu", {"x": (x, "f32")}, {}, silu(x), "f32")
    case("silu_f16", "silu", {"x": (xh, "f16")}, {}, silu(xh), "f16")


def stats_cases():
    x = rand((3, 4, 5), scale=2.0, offset=1.0)
    for name, axes, corr, keep in [
        ("last_default", [-1], None, False),
        ("two_axes_biased_keepdim", [0, 2], 0.0, True),
        ("all_correction2", [], 2.0, False),
    ]:
        want = var(x, [a % 3 for a in axes], 1.0 if corr is None else corr)
        if keep:
            want = np.expand_dims(want, tuple(a % 3 for a in axes))
        case(f"var_{name}", "var", {"x": (x, "f32")}, {"axes": axes, "correction": corr, "keepdim": keep},
             want, "f32")
    case("std_axis1", "std", {"x": (x, "f32")}, {"axes": [1], "correction": None, "keepdim": False},
         np.sqrt(var(x, [1], 1.0)), "f32")
    xh = rand((4, 6), "f16", scale=2.0)
    case("var_f16", "var", {"x": (xh, "f16")}, {"axes": [-1], "correction": None, "keepdim": False},
         var(xh, [1], 1.0), "f16")


def linear_cases():
    x, w, b = rand((2, 3, 5)), rand((4, 5)), rand((4,))
    case("linear_bias", "linear", {"x": (x, "f32"), "weight": (w, "f32"), "bias": (b, "f32")}, {},
         x @ w.T + b, "f32")
    x1 = rand((5,))
    case("linear_vector_no_bias", "linear", {"x": (x1, "f32"), "weight": (w, "f32")}, {}, x1 @ w.T, "f32")
    ids = RNG.integers(0, 10, size=(2, 3))
    table = rand((10, 4))
    case("embedding", "embedding", {"ids": (ids, "i64"), "weight": (table, "f32")}, {}, table[ids], "f32")


def sdpa_cases():
    q, k, v = rand((2, 2, 4, 8)), rand((2, 2, 6, 8)), rand((2, 2, 6, 3))
    base = {"q": (q, "f32"), "k": (k, "f32"), "v": (v, "f32")}
    case("sdpa_plain", "sdpa", base, {"is_causal": False, "scale": None}, sdpa(q, k, v), "f32")
    case("sdpa_scale", "sdpa", base, {"is_causal": False, "scale": 0.3}, sdpa(q, k, v, scale=0.3), "f32")
    case("sdpa_causal", "sdpa", base, {"is_causal": True, "scale": None}, sdpa(q, k, v, is_causal=True), "f32")
    mask = RNG.random((4, 6)) < 0.6
    mask[0, 0] = True
    mask[2, :] = False  # a fully masked row gives 0
    case("sdpa_bool_mask", "sdpa", {**base, "mask": (mask, "bool")}, {"is_causal": False, "scale": None},
         sdpa(q, k, v, mask=mask), "f32")
    fmask = rand((2, 1, 4, 6))
    fmask[1, 0, 3, 2] = -np.inf
    case("sdpa_float_mask", "sdpa", {**base, "mask": (fmask, "f32")}, {"is_causal": False, "scale": None},
         sdpa(q, k, v, mask=fmask), "f32")
    qh, kh, vh = rnd(q, "f16"), rnd(k, "f16"), rnd(v, "f16")
    case("sdpa_f16_causal", "sdpa", {"q": (qh, "f16"), "k": (kh, "f16"), "v": (vh, "f16")},
         {"is_causal": True, "scale": None}, sdpa(qh, kh, vh, is_causal=True), "f16")


def main():
    softmax_cases()
    norm_cases()
    activation_cases()
    stats_cases()
    linear_cases()
    sdpa_cases()
    # One case per line keeps the file small and its diffs readable.
    lines = ",\n".join("  " + json.dumps(c, separators=(",", ":")) for c in CASES)
    with open(OUT, "w") as f:
        f.write('{"generator": "scripts/golden/gen_frontend.py", "cases": [\n' + lines + "\n]}\n")
    print(f"wrote {len(CASES)} cases to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
