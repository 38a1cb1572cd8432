#!/usr/bin/env python3
"""Fits the coefficients of a polynomial in codegen/src/llvm/kernel/poly.rs.

    python3 scripts/fit-poly.py expm1      # EXPM1_P: e^s - 1 = s + s^2 P(s), |s| <= ln2/2
    python3 scripts/fit-poly.py exp        # EXP_P: e^s = 1 + s + s^2 P(s), |s| <= ln2/2

Needs mpmath (`pip install mpmath`; it is not a dependency of the project). The fit is
weighted least squares on 1500 Chebyshev nodes, reweighted by Lawson's rule towards the
minimax of the relative error, in 40-digit arithmetic; the coefficients printed are rounded
to f32, highest degree first, as poly.rs lists them. The error printed is the fit's, before
rounding: what the kernels reach with the rounded coefficients and f32 arithmetic is measured
by codegen/tests/llvm_math.rs over every f32.
"""

import struct
import sys

import mpmath as mp

mp.mp.dps = 40


def f32(v):
    return struct.unpack("f", struct.pack("f", float(v)))[0]


def shortest(v):
    """The shortest decimal that reads back as the f32 `v` (as poly.rs writes it)."""
    for digits in range(1, 10):
        text = f"{v:.{digits}g}"
        if f32(float(text)) == v:
            return text
    return repr(v)


def lawson(f, w, lo, hi, deg, iters=60, n=1500):
    """Coefficients (lowest degree first) of the degree-`deg` polynomial p minimising
    max |w(x)·(p(x) - f(x))| over [lo, hi], approximately, and that maximum."""
    xs = [lo + (hi - lo) * (1 - mp.cos(mp.pi * (i + 0.5) / n)) / 2 for i in range(n)]
    fx = [f(x) for x in xs]
    wx = [w(x) for x in xs]
    lw = [mp.mpf(1)] * n
    for _ in range(iters):
        a = mp.matrix(deg + 1, deg + 1)
        b = mp.matrix(deg + 1, 1)
        for x, y, ww, l in zip(xs, fx, wx, lw):
            k = l * ww * ww
            pw = [x**j for j in range(deg + 1)]
            for i in range(deg + 1):
                b[i] += k * pw[i] * y
                for j in range(deg + 1):
                    a[i, j] += k * pw[i] * pw[j]
        c = mp.lu_solve(a, b)
        errs = [
            abs(ww * (sum(c[j] * x**j for j in range(deg + 1)) - y))
            for x, y, ww in zip(xs, fx, wx)
        ]
        total = sum(l * e for l, e in zip(lw, errs))
        lw = [l * e / total for l, e in zip(lw, errs)]
    return [c[j] for j in range(deg + 1)], max(errs)


def exp_tail(relative_to):
    """P of degree 4 with e^s = 1 + s + s^2 P(s) on |s| <= ln2/2 (a little wider, for the
    rounding of q), minimising the error relative to `relative_to(s)`: P fits
    (e^s - 1 - s)/s^2 weighted by s^2/relative_to(s)."""
    half = mp.log(2) / 2 + mp.mpf("1e-4")

    def f(s):
        return (mp.expm1(s) - s) / s**2

    def w(s):
        return s**2 / relative_to(s)

    return lawson(f, w, -half, half, 4)


def expm1():
    """tanh's: the error relative to e^s - 1 (the result is s + s^2 P(s))."""
    return exp_tail(mp.expm1)


def exp():
    """exp's: the error relative to e^s (the result is 1 + s + s^2 P(s))."""
    return exp_tail(mp.exp)


FITS = {"expm1": expm1, "exp": exp}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in FITS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(FITS)}")
    coeffs, err = FITS[sys.argv[1]]()
    print(f"max relative error before rounding: {mp.nstr(err, 3)}")
    print("highest degree first (f32):")
    for c in reversed(coeffs):
        print(f"    {shortest(f32(c))},")
