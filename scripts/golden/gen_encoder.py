#!/usr/bin/env python3
"""Golden values for the built-in BERT-style encoder layer (src/models.rs), from numpy in f64.

Rerun (only needed when the model or its test changes):
    pip install --target .venv-golden numpy
    PYTHONPATH=.venv-golden python3 scripts/golden/gen_encoder.py
Writes tests/data/encoder_small.json: config, input, weights (f32 values) and the expected output.
The Rust test (tests/end_to_end.rs) needs no Python.
"""
import json
import math
import os

import numpy as np

SEQ, HIDDEN, HEADS, FFN, EPS = 5, 8, 2, 16, 1e-12
rng = np.random.default_rng(20261129)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def param(*shape, scale=0.5):
    return f32(rng.standard_normal(shape) * scale)


x = param(SEQ, HIDDEN, scale=1.0)
weights = {}
for name in ["q", "k", "v", "o"]:
    weights[f"w{name}"] = param(HIDDEN, HIDDEN)
    weights[f"b{name}"] = param(HIDDEN, scale=0.1)
weights["ln1_w"] = f32(1.0 + param(HIDDEN, scale=0.1))
weights["ln1_b"] = param(HIDDEN, scale=0.1)
weights["w1"] = param(FFN, HIDDEN)
weights["b1"] = param(FFN, scale=0.1)
weights["w2"] = param(HIDDEN, FFN)
weights["b2"] = param(HIDDEN, scale=0.1)
weights["ln2_w"] = f32(1.0 + param(HIDDEN, scale=0.1))
weights["ln2_b"] = param(HIDDEN, scale=0.1)

W = {k: v.astype(np.float64) for k, v in weights.items()}
X = x.astype(np.float64)


def linear(a, w, b):
    return a @ w.T + b


def layer_norm(a, w, b):
    mu = a.mean(-1, keepdims=True)
    var = ((a - mu) ** 2).mean(-1, keepdims=True)
    return (a - mu) / np.sqrt(var + EPS) * w + b


def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


erf = np.vectorize(math.erf)
D = HIDDEN // HEADS


def heads(a):  # [S, H*D] -> [H, S, D]
    return a.reshape(SEQ, HEADS, D).transpose(1, 0, 2)


q, k, v = (heads(linear(X, W[f"w{n}"], W[f"b{n}"])) for n in "qkv")
p = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(D))
a = (p @ v).transpose(1, 0, 2).reshape(SEQ, HIDDEN)
h = layer_norm(X + linear(a, W["wo"], W["bo"]), W["ln1_w"], W["ln1_b"])
f = linear(h, W["w1"], W["b1"])
f = 0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))
y = layer_norm(h + linear(f, W["w2"], W["b2"]), W["ln2_w"], W["ln2_b"])

out = {
    "config": {"seq": SEQ, "hidden": HIDDEN, "heads": HEADS, "ffn": FFN, "eps": EPS},
    "x": x.ravel().tolist(),
    "weights": {k: {"shape": list(v.shape), "data": v.ravel().tolist()} for k, v in weights.items()},
    "y": y.ravel().tolist(),
}
path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "encoder_small.json")
with open(path, "w") as fh:
    json.dump(out, fh)
print("wrote", os.path.normpath(path))
