#!/usr/bin/env python3
"""Fits the coefficients of a polynomial in codegen/src/llvm/kernel/poly.rs.

    python3 scripts/fit-poly.py expm1      # EXPM1_P: e^s - 1 = s + s^2 P(s), |s| <= ln2/2
    python3 scripts/fit-poly.py exp        # EXP_P: e^s = 1 + s + s^2 P(s), |s| <= ln2/2
    python3 scripts/fit-poly.py erf        # ERF_M, ERF_C, ERF_PIECES: erf by four pieces

Needs mpmath (`pip install mpmath`; it is not a dependency of the project). The fit is
weighted least squares on 1500 Chebyshev nodes (erf's pieces: 500, 40 rounds), reweighted
by Lawson's rule towards the minimax of the relative error, in 40-digit arithmetic; the coefficients printed are rounded
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


ERF_BOUNDS = [0.75, 1.65, 2.7, 3.9375]
ERF_DEGREE = 7


def erf_centre(c):
    """The f32 m nearest `c` (stepping out ulp by ulp) whose erf(m) is within 0.002 ulp of an
    f32, with that f32: the constant term of its piece is then nearly exact."""
    bits = struct.unpack("I", struct.pack("f", c))[0]
    for d in range(200000):
        for sign in (1, -1):
            m = struct.unpack("f", struct.pack("I", bits + sign * d))[0]
            e = mp.erf(mp.mpf(m))
            ef = f32(e)
            ulp = mp.mpf(2) ** (mp.floor(mp.log(ef, 2)) - 23)
            if abs(e - ef) / ulp < 0.002:
                return m, ef
    raise ValueError(f"no centre near {c}")


def erf():
    """erf by pieces: on [0, 0.75) erf(a) = a + a P(a), the error relative to erf; on each
    further interval erf(a) = erf(m) + t P(t), t = a - m, the error relative to erf. Prints
    the tables poly.rs holds and each piece's error."""
    lo = 0.0
    pieces = []
    for hi in ERF_BOUNDS:
        if lo == 0.0:
            m, c = 0.0, 0.0

            def f(a):
                return mp.erf(a) / a - 1 if a else 2 / mp.sqrt(mp.pi) - 1

            def w(a):
                return a / mp.erf(a) if a else mp.sqrt(mp.pi) / 2

            coeffs, err = lawson(f, w, mp.mpf(lo), mp.mpf(hi), ERF_DEGREE, 40, 500)
        else:
            m, c = erf_centre((lo + hi) / 2)

            def f(t, m=m, c=c):
                return (mp.erf(m + t) - c) / t if t else 2 / mp.sqrt(mp.pi) * mp.exp(-mp.mpf(m) ** 2)

            def w(t, m=m):
                return abs(t) / mp.erf(m + t)

            coeffs, err = lawson(f, w, mp.mpf(lo) - m, mp.mpf(hi) - m, ERF_DEGREE, 40, 500)
        print(f"[{lo}, {hi}): m = {m!r}, erf(m) = {c!r}, max relative error before rounding: {mp.nstr(err, 3)}")
        pieces.append((m, c, [f32(v) for v in reversed(coeffs)]))
        lo = hi
    print("ERF_M:", ", ".join(shortest(p[0]) for p in pieces))
    print("ERF_C:", ", ".join(shortest(p[1]) for p in pieces))
    print("ERF_PIECES (highest degree first, one row per degree, one column per piece):")
    for j in range(ERF_DEGREE + 1):
        print("    [" + ", ".join(shortest(p[2][j]) for p in pieces) + "],")


FITS = {"expm1": expm1, "exp": exp, "erf": erf}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in FITS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(FITS)}")
    if sys.argv[1] == "erf":
        erf()
        sys.exit()
    coeffs, err = FITS[sys.argv[1]]()
    print(f"max relative error before rounding: {mp.nstr(err, 3)}")
    print("highest degree first (f32):")
    for c in reversed(coeffs):
        print(f"    {shortest(f32(c))},")
