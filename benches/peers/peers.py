#!/usr/bin/env python3
"""PyTorch eager and torch.compile on smelt's benchmark cases, side by side with smelt.

The cases mirror `src/bench/cases.rs` (same names, dims, graphs and parameter scales; each
case's `graph` string there is the expression built here). PyTorch is not a test dependency
of smelt: this script is run by hand.

    python3 benches/peers/peers.py [--device cpu|cuda] [--case NAME]... [--quick]
                                   [--json OUT.json] [--smelt SMELT.json] [--no-compile]
                                   [--threads N] [--mode MODE] [--min-time-ms MS]
                                   [--smelt-bin PATH --rounds N [--smelt-min-time-ms MS]]

`--smelt` takes the JSON written by `smelt bench --json` (same device, same machine) and
prints smelt's ratios next to PyTorch's: eager / smelt and torch.compile / smelt (> 1 means
smelt is faster), for smelt's preallocated (`run_into`) and fresh (`run`) outputs. PyTorch
always returns fresh outputs. smelt's figures are its fused plan called back to back
(`fused_alone` in the JSON, as PyTorch is timed here), or, in JSON from before that series
existed, the fused calls that alternated with the unfused plan's.

`--smelt-bin PATH --rounds N` measures both sides in turns instead, for ratios that a noisy
machine moves less: after PyTorch's warm-up (and torch.compile's compile), each of N rounds
runs `PATH bench --no-stream --json …` for the selected cases in a child process, then times
PyTorch eager and torch.compile on the same cases in this one; each round gives one ratio per
case (PyTorch's time over smelt's fused `run_into` called back to back, `fused_alone`; and
torch.compile's over smelt's `run`, fresh outputs like PyTorch's), and the table shows their
median with the lowest and highest. `--smelt-min-time-ms` sets smelt's
series length (default: this script's).

Timing: median wall time of repeated calls after warm-up (torch.compile's first call, which
compiles, is timed separately as its compile time); on CUDA the device is synchronised before
the clock is read. Threads: PyTorch's default intra-op thread count (printed), which is the
core count, as smelt's pool; `--threads` overrides it. On a machine with other jobs running,
PyTorch's OpenMP regions wait for descheduled threads, so small eager ops can read
milliseconds: compare only figures taken on a quiet machine.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit(
        "peers.py: PyTorch is not installed (pip install torch, or put an install on "
        "PYTHONPATH, e.g. PYTHONPATH=.venv-torch); smelt itself does not need it"
    )

# name -> (full dims, quick dims, builder). Keep in sync with src/bench/cases.rs.
CASES = {}


def case(name, full, quick):
    def register(build):
        CASES[name] = (full, quick, build)
        return build

    return register


def uniform(shape, scale, gen, device):
    return ((torch.rand(shape, generator=gen) * 2 - 1) * scale).to(device)


def make(spec, gen, device):
    """spec: list of (name, shape, is_param). Scales as in cases::data."""
    out = {}
    for name, shape, is_param in spec:
        if not is_param:
            scale = 1.0
        elif len(shape) >= 2:
            scale = 1.0 / math.sqrt(max(shape[-1], 1))
        else:
            scale = 0.1
        out[name] = uniform(shape, scale, gen, device)
    return out


@case("elementwise-chain", [1 << 24], [4096])
def elementwise_chain(d):
    def f(x):
        t = torch.tanh(x * 1.5 + 0.5)
        return torch.relu(t * 2.0 - 0.25) * x + x

    return f, [("x", [d[0]], False)]


def _bias_gelu_residual(d):
    def f(x, r, b):
        return F.gelu(x + b) + r

    return f, [("x", d, False), ("r", d, False), ("b", [d[1]], True)]


case("bias-gelu-residual-128x3072", [128, 3072], [8, 96])(_bias_gelu_residual)
case("bias-gelu-residual-65536x768", [65536, 768], [64, 24])(_bias_gelu_residual)


def _add_layer_norm(d):
    def f(x, r, w, b):
        return F.layer_norm(x + r, (d[1],), w, b, eps=1e-5)

    return f, [("x", d, False), ("r", d, False), ("w", [d[1]], True), ("b", [d[1]], True)]


case("add-layernorm-128x768", [128, 768], [8, 48])(_add_layer_norm)
case("add-layernorm-65536x768", [65536, 768], [64, 24])(_add_layer_norm)


def _softmax(d):
    def f(x):
        return torch.softmax(x, -1)

    return f, [("x", d, False)]


case("softmax-1536x128", [1536, 128], [12, 16])(_softmax)
case("softmax-65536x768", [65536, 768], [64, 24])(_softmax)


@case("attention", [12, 128, 64], [2, 8, 16])
def attention(d):
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    return f, [("q", d, False), ("k", d, False), ("v", d, False)]


@case("mlp", [128, 768, 3072], [4, 32, 64])
def mlp(d):
    tokens, hidden, ffn = d

    def f(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    return f, [
        ("x", [tokens, hidden], False),
        ("w1", [ffn, hidden], True),
        ("b1", [ffn], True),
        ("w2", [hidden, ffn], True),
        ("b2", [hidden], True),
    ]


@case("bert-encoder-layer", [128, 768, 12, 3072], [8, 64, 4, 128])
def bert_encoder_layer(d):
    # smelt::models::encoder_layer: post-norm BERT layer, eps 1e-12, GELU (erf).
    seq, hidden, heads, ffn = d
    hd = hidden // heads

    def f(x, wq, bq, wk, bk, wv, bv, wo, bo, ln1_w, ln1_b, w1, b1, w2, b2, ln2_w, ln2_b):
        def split(y):
            return y.reshape(seq, heads, hd).permute(1, 0, 2)

        q, k, v = split(F.linear(x, wq, bq)), split(F.linear(x, wk, bk)), split(F.linear(x, wv, bv))
        a = F.scaled_dot_product_attention(q, k, v).permute(1, 0, 2).reshape(seq, -1)
        hn = F.layer_norm(x + F.linear(a, wo, bo), (hidden,), ln1_w, ln1_b, eps=1e-12)
        h = F.linear(F.gelu(F.linear(hn, w1, b1)), w2, b2)
        return F.layer_norm(hn + h, (hidden,), ln2_w, ln2_b, eps=1e-12)

    h, fd = hidden, ffn
    spec = [("x", [seq, h], False)]
    for name, shape in [
        ("wq", [h, h]), ("bq", [h]), ("wk", [h, h]), ("bk", [h]), ("wv", [h, h]), ("bv", [h]),
        ("wo", [h, h]), ("bo", [h]), ("ln1_w", [h]), ("ln1_b", [h]), ("w1", [fd, h]),
        ("b1", [fd]), ("w2", [h, fd]), ("b2", [h]), ("ln2_w", [h]), ("ln2_b", [h]),
    ]:
        spec.append((name, shape, True))
    return f, spec


@case("permute-add", [64, 128, 12, 64], [2, 4, 3, 8])
def permute_add(d):
    b, s, h, hd = d

    def f(x, z):
        return (x.permute(0, 2, 1, 3) + z).permute(0, 2, 1, 3)

    return f, [("x", [b, s, h, hd], False), ("z", [b, h, s, hd], False)]


@case("max-min-65536x768", [65536, 768], [64, 24])
def max_min(d):
    def f(x):
        mx, imx = x.max(-1)
        mn, imn = x.min(-1)
        return mx, imx, mn, imn

    return f, [("x", d, False)]


def outputs(out):
    """A case's outputs as a tuple (one tensor, or several: max-min's values and indices)."""
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def max_abs_diff(got, want):
    return max(
        (g.double() - w.double()).abs().max().item()
        for g, w in zip(outputs(got), outputs(want))
    )


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, args, device, min_time, min_iters, max_iters=100_000):
    """Median and count of fn(*args) wall times, after one untimed call."""
    fn(*args)
    sync(device)
    times = []
    start = time.perf_counter()
    while len(times) < max_iters and (
        len(times) < min_iters or time.perf_counter() - start < min_time
    ):
        t = time.perf_counter()
        fn(*args)
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times), len(times)


def select(patterns):
    if not patterns:
        return list(CASES)
    chosen = []
    for p in patterns:
        hits = [p] if p in CASES else [n for n in CASES if p in n]
        if not hits:
            sys.exit(f"peers.py: unknown case {p!r}; the cases are: {', '.join(CASES)}")
        chosen += [h for h in hits if h not in chosen]
    return chosen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    ap.add_argument("--case", action="append", default=[], help="name or substring")
    ap.add_argument("--quick", action="store_true", help="smelt's --quick shapes")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--smelt", help="smelt bench --json output to compare with")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--mode", default=None, help="torch.compile mode (default: default)")
    ap.add_argument("--min-time-ms", type=float, default=None)
    ap.add_argument(
        "--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's)"
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop starting new measurements after this many seconds (what was measured is "
        "still printed and written)",
    )
    ap.add_argument("--smelt-bin", help="the smelt binary to run in turns with PyTorch")
    ap.add_argument("--rounds", type=int, default=0, help="rounds of smelt then PyTorch")
    ap.add_argument("--smelt-min-time-ms", type=float, default=None)
    a = ap.parse_args()
    started = time.perf_counter()
    if bool(a.smelt_bin) != (a.rounds > 0):
        sys.exit("peers.py: --smelt-bin and --rounds go together")
    if a.smelt_bin and a.smelt:
        sys.exit("peers.py: --smelt (a finished run) or --smelt-bin (runs in turns), not both")

    def over_budget():
        return a.budget_s is not None and time.perf_counter() - started > a.budget_s

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("peers.py: --device cuda but torch.cuda.is_available() is False")
    min_time = (a.min_time_ms if a.min_time_ms is not None else (20 if a.quick else 500)) / 1e3
    min_iters = 3 if a.quick else 5
    smelt = None
    if a.smelt:
        with open(a.smelt) as fh:
            report = json.load(fh)
        if report.get("comparison"):
            sys.exit(f"peers.py: {a.smelt} is a `smelt bench --compare` report (A against B, "
                     "no fused/unfused figures); give --smelt the JSON of a plain `smelt bench`")
        smelt = {c["name"]: c for c in report["cases"]}

    torch.set_grad_enabled(False)
    if a.threads:
        torch.set_num_threads(a.threads)
    print(
        f"torch {torch.__version__} on {device}, {torch.get_num_threads()} threads, "
        f"{'quick' if a.quick else 'full'} shapes, THP_MEM_ALLOC_ENABLE="
        f"{os.environ.get('THP_MEM_ALLOC_ENABLE', '(unset)')}",
        file=sys.stderr,
    )
    names = select(a.case)
    results = []

    def write_json():
        # Rewritten after every measurement, so a run cut short keeps what it measured.
        if not a.json:
            return
        with open(a.json + ".tmp", "w") as fh:
            json.dump(
                {
                    "torch": torch.__version__,
                    "device": str(device),
                    "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
                    "cuda": torch.version.cuda,
                    "threads": torch.get_num_threads(),
                    "cpu_count": os.cpu_count(),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": " ".join(sys.argv),
                    # PyTorch's CPU allocator asks for transparent huge pages only when this
                    # is "1" (smelt's `LargeAligned` always does, unless turned off).
                    "thp_mem_alloc_enable": os.environ.get("THP_MEM_ALLOC_ENABLE"),
                    "quick": a.quick,
                    "cases": results,
                },
                fh,
                indent=2,
            )
        os.replace(a.json + ".tmp", a.json)

    # Eager for every case first (quick and robust), then torch.compile (slow to warm up, and
    # the part that may fail: a missing C compiler for Triton, …), each case on its own.
    cases = {}
    for i, name in enumerate(names):
        if over_budget():
            print(f"[{i + 1}/{len(names)}] {name}: skipped, --budget-s spent", file=sys.stderr)
            continue
        full, quick, build = CASES[name]
        dims = quick if a.quick else full
        fn, spec = build(dims)
        gen = torch.Generator().manual_seed(1)
        data = make(spec, gen, device)
        args = [data[n] for n, _, _ in spec]
        out = fn(*args)
        min_bytes = sum(t.numel() * t.element_size() for t in (*args, *outputs(out)))
        print(f"[{i + 1}/{len(names)}] {name}: eager", file=sys.stderr, flush=True)
        eager, eager_n = timed(fn, args, device, min_time, min_iters)
        r = {
            "name": name,
            "shape": "x".join(map(str, dims)),
            "min_bytes": min_bytes,
            "eager_ms": eager * 1e3,
            "eager_iterations": eager_n,
            "eager_gbps": min_bytes / eager / 1e9,
        }
        results.append(r)
        cases[name] = (r, fn, args, out)
        write_json()
    if not a.no_compile:
        for i, name in enumerate(cases):
            r, fn, args, out = cases[name]
            if over_budget():
                print(f"[{i + 1}/{len(cases)}] {name}: torch.compile skipped, --budget-s spent",
                      file=sys.stderr)
                r["compile_error"] = "skipped: --budget-s spent"
                continue
            print(f"[{i + 1}/{len(cases)}] {name}: torch.compile", file=sys.stderr, flush=True)
            try:
                torch._dynamo.reset()
                compiled = torch.compile(fn, mode=a.mode)
                t = time.perf_counter()
                got = compiled(*args)
                sync(device)
                r["compile_ms"] = (time.perf_counter() - t) * 1e3
                r["compiled_max_abs_diff_vs_eager"] = max_abs_diff(got, out)
                c, c_n = timed(compiled, args, device, min_time, min_iters)
                r.update(
                    compiled_ms=c * 1e3, compiled_iterations=c_n, compiled_gbps=r["min_bytes"] / c / 1e9
                )
            except Exception as e:  # report it and go on with the other cases
                msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                print(f"[{i + 1}/{len(cases)}] {name}: torch.compile failed: {msg}", file=sys.stderr)
                r["compile_error"] = msg
            write_json()

    if a.rounds:
        rounds(a, device, cases, min_time, min_iters, write_json)
        return

    head = f"{'case':<30} {'shape':>16} {'eager':>10} {'compiled':>10} {'compile':>9}"
    if smelt:
        head += f" {'smelt into':>10} {'smelt run':>10} {'eager/sm':>9} {'comp/sm':>9} {'eager/run':>9} {'comp/run':>9}"
    print(head)
    for r in results:
        line = (
            f"{r['name']:<30} {r['shape']:>16} {r['eager_ms']:>8.3f}ms "
            f"{r.get('compiled_ms', float('nan')):>8.3f}ms {r.get('compile_ms', float('nan')):>7.0f}ms"
        )
        s = smelt.get(r["name"]) if smelt else None
        if s:
            fused = s.get("fused_alone", s["fused"])
            into = fused["run_into"]["median_ms"]
            run = fused["run"]["median_ms"]
            comp = r.get("compiled_ms", float("nan"))
            if s["min_bytes"] != r["min_bytes"]:
                line += f"  (shapes differ: smelt moved {s['min_bytes']} bytes)"
            else:
                line += (
                    f" {into:>8.3f}ms {run:>8.3f}ms {r['eager_ms'] / into:>8.2f}x {comp / into:>8.2f}x"
                    f" {r['eager_ms'] / run:>8.2f}x {comp / run:>8.2f}x"
                )
        print(line)
    if smelt:
        print("ratios > 1: smelt (fused) is faster; 'sm' = smelt run_into, 'run' = smelt run")
    if a.json:
        write_json()
        print(f"wrote {a.json}")


def smelt_round(a, names, quick):
    """One `smelt bench` run of `names`: {name: case} from its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "smelt.json")
        cmd = [a.smelt_bin, "bench", "--device", a.device.split(":")[0], "--no-stream",
               "--json", out]
        if quick:
            cmd.append("--quick")
        if a.smelt_min_time_ms is not None or a.min_time_ms is not None:
            ms = a.smelt_min_time_ms if a.smelt_min_time_ms is not None else a.min_time_ms
            cmd += ["--min-time-ms", str(ms)]
        for n in names:
            cmd += ["--case", n]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"peers.py: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
        with open(out) as fh:
            report = json.load(fh)
    return {c["name"]: c for c in report["cases"]}


def rounds(a, device, cases, min_time, min_iters, write_json):
    """`--rounds`: smelt and PyTorch in turns, one ratio per round and case."""
    compiled = {}
    for name, (r, fn, args, out) in cases.items():
        if "compiled_ms" in r:
            torch._dynamo.reset()
            c = torch.compile(fn, mode=a.mode)
            c(*args)  # compiled already above: this call only warms up
            compiled[name] = c
    names = list(cases)
    for rnd in range(a.rounds):
        print(f"round {rnd + 1}/{a.rounds}: smelt", file=sys.stderr, flush=True)
        sm = smelt_round(a, names, a.quick)
        print(f"round {rnd + 1}/{a.rounds}: PyTorch", file=sys.stderr, flush=True)
        for name, (r, fn, args, out) in cases.items():
            s = sm.get(name)
            if s is None or s["min_bytes"] != r["min_bytes"]:
                sys.exit(f"peers.py: smelt's {name} is missing or has other shapes")
            into = s["fused_alone"]["run_into"]["median_ms"]
            eager, _ = timed(fn, args, device, min_time, min_iters)
            row = {"smelt_ms": into, "eager_ms": eager * 1e3,
                   "smelt_run_ms": s["fused_alone"]["run"]["median_ms"]}
            if name in compiled:
                c, _ = timed(compiled[name], args, device, min_time, min_iters)
                row["compiled_ms"] = c * 1e3
            r.setdefault("rounds", []).append(row)
        write_json()

    def spread(xs):
        return f"{statistics.median(xs):>6.2f}x ({min(xs):.2f}-{max(xs):.2f})"

    print(f"{a.rounds} rounds, smelt then PyTorch; ratio = PyTorch time / smelt fused run_into "
          "(> 1: smelt is faster), median (lowest-highest); the last column against smelt's run "
          "(fresh outputs every call, as PyTorch returns)")
    print(f"{'case':<30} {'smelt':>10} {'smelt run':>10} {'eager':>10} {'compiled':>10} "
          f"{'eager/smelt':>22} {'compiled/smelt':>22} {'compiled/run':>22}")
    for name, (r, *_rest) in cases.items():
        rows = r["rounds"]
        sm = statistics.median(x["smelt_ms"] for x in rows)
        runs = [x["smelt_run_ms"] for x in rows if "smelt_run_ms" in x]
        sr = f"{statistics.median(runs):>8.3f}ms" if runs else f"{'-':>10}"
        eg = statistics.median(x["eager_ms"] for x in rows)
        line = f"{name:<30} {sm:>8.3f}ms {sr} {eg:>8.3f}ms "
        e_ratio = [x["eager_ms"] / x["smelt_ms"] for x in rows]
        r["eager_over_smelt_median"] = statistics.median(e_ratio)
        if all("compiled_ms" in x for x in rows):
            cm = statistics.median(x["compiled_ms"] for x in rows)
            c_ratio = [x["compiled_ms"] / x["smelt_ms"] for x in rows]
            r["compiled_over_smelt_median"] = statistics.median(c_ratio)
            line += f"{cm:>8.3f}ms {spread(e_ratio):>22} {spread(c_ratio):>22}"
            if len(runs) == len(rows):
                r_ratio = [x["compiled_ms"] / x["smelt_run_ms"] for x in rows]
                r["compiled_over_smelt_run_median"] = statistics.median(r_ratio)
                line += f" {spread(r_ratio):>22}"
            else:
                line += f" {'-':>22}"
        else:
            line += f"{'-':>10} {spread(e_ratio):>22} {'-':>22} {'-':>22}"
        print(line)
    if a.json:
        write_json()
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
