//! f32 `exp`, `tanh` and `erf` as straight-line f32 polynomials ([`MathMode::Polynomial`], the
//! default): no tables, no f64, no divisions but `tanh`'s one, every branch computed and the
//! right one selected, so the loop vectoriser widens them to the full SIMD width.
//!
//! - `exp(x)`: `x = q·ln2 + s` (`q = rint(x/ln2)`, rounded by adding and subtracting
//!   `1.5·2^23`; Cody–Waite with a two-part `ln2`, `|s| ≤ ln2/2`), `e^s` by a degree-7
//!   polynomial (SLEEF's `expf` coefficients) in one Horner chain, times `2^q` built from
//!   exponent bits in two halves (so that `q = 128` and subnormal results are right), or by one
//!   `vscalefps` on AVX-512, with the same bits (see `scalef`).
//! - `tanh(x)`: `|x| < 0.75`: `x + x³·P(x²)` (P of degree 5, fitted for relative error);
//!   above: `1 - 2/(e^(2|x|) + 1)` with `|x|` clamped to 9.1 (where `tanh` rounds to 1),
//!   `e^(2|x|)` with `2|x|` folded into the constants, `ln2` in one part (`q ≤ 27`) and the
//!   polynomial as `s + s²·P(s)`;
//!   sign restored with `copysign`.
//! - `erf(x)`: `|x| < 0.875`: `x + x·P(x²)` (P of degree 6); above: `1 - e^Q(|x|)` where `Q`
//!   (degree 8) fits `ln erfc` on `[0.875, 3.9375]`, `|x|` clamped to 3.9375 (where `erf`
//!   rounds to 1); sign restored with `copysign`.
//!
//! Coefficients were fitted in f64 (weighted least squares iterated towards minimax) and
//! rounded to f32. Multiply-adds are `llvm.fmuladd` (one FMA where the CPU has it). NaN
//! propagates (the comparisons choosing a branch send NaN down the polynomial that keeps it;
//! `exp` limits its argument with `maxps`/`minps` in the order that keeps NaN, and every later
//! step, `vscalefps` or the generic `2^q`, keeps it too), ±inf give `exp` +inf/0 and
//! `tanh`/`erf` ±1, ±0 keeps its sign.
//! The errors in [`MathMode::Polynomial`]'s docs are measured by `codegen/tests/llvm_math.rs`
//! against f64 math (a sampled sweep in CI, every f32 input in ignored tests).

use super::Emitter;
use crate::llvm::error::Result;
#[allow(unused_imports)] // named by the module docs
use crate::llvm::options::MathMode;
use inkwell::values::FloatValue;
use inkwell::FloatPredicate;

/// `1/ln 2`.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2 = L2U + L2L`; `L2U` has few enough bits that `q·L2U` is exact for `|q| ≤ 150`.
const L2U: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
const L2L: f32 = f32::from_bits(0x35bf_be8e); // 1.4286068e-6
/// `ln 2` rounded to f32 (0.6931472), for reductions with a small `q` (`exp_reduce`).
const LN2: f32 = std::f32::consts::LN_2;
/// `e^s ≈ 1 + s + s²·P(s)` on `|s| ≤ ln2/2`, highest degree first (SLEEF `xexpf`).
const EXP_P: [f32; 6] = [
    0.000_198_527_62,
    0.001_393_043_6,
    0.008_333_361,
    0.041_666_485,
    0.166_666_67,
    0.5,
];
/// `EXP_P` with the two terms of degree 1 and 0: `e^s ≈ 1 + s·(1 + s·P(s))` by Horner.
const EXP_FULL: [f32; 8] = [
    EXP_P[0], EXP_P[1], EXP_P[2], EXP_P[3], EXP_P[4], EXP_P[5], 1.0, 1.0,
];
/// `1.5·2^23`: adding it to an `|z| < 2^22` rounds `z` to an integer (the sum's ulp is 1).
const ROUNDER: f32 = 12_582_912.0;
/// `v·2^e`, exactly (for the constants here, far from overflow and underflow).
const fn pow2(v: f32, e: i32) -> f32 {
    v * f32::from_bits(((127 + e) as u32) << 23)
}
/// `exp` is evaluated on arguments clamped to `±EXP_CLAMP`: beyond, the result is 0 or +inf
/// either way (`e^-104` rounds to 0, `e^89` overflows).
const EXP_CLAMP: f32 = 104.0;

/// `tanh(x) ≈ x + x³·P(x²)` on `|x| < TANH_SMALL`.
const TANH_SMALL: f32 = 0.75;
const TANH_P: [f32; 6] = [
    0.001_736_935_7,
    -0.007_657_255,
    0.021_452_034,
    -0.053_892_724,
    0.133_326_95,
    -0.333_333_16,
];
/// `tanh(x)` rounds to ±1 in f32 beyond this.
const TANH_ONE: f32 = 9.1;

/// `erf(x) ≈ x + x·P(x²)` on `|x| < ERF_SMALL`.
const ERF_SMALL: f32 = 0.875;
const ERF_P: [f32; 7] = [
    8.675_43e-5,
    -0.000_821_111_4,
    0.005_206_748_4,
    -0.026_861_586,
    0.112_837_33,
    -0.376_126_35,
    0.128_379_17,
];
/// `ln erfc(x) ≈ Q(x)` on `[ERF_SMALL, ERF_ONE]`.
const ERF_Q: [f32; 9] = [
    1.614_647_2e-6,
    -4.558_773_4e-5,
    0.000_592_619_7,
    -0.004_738_918,
    0.026_359_266,
    -0.109_965_54,
    -0.631_953_9,
    -1.130_155,
    0.000_299_851_35,
];
/// `erf(x)` rounds to ±1 in f32 beyond this.
const ERF_ONE: f32 = 3.9375;

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    fn k32(&self, v: f32) -> FloatValue<'ctx> {
        self.f32t().const_float(v as f64)
    }

    /// `a·b + c`, fused where the CPU has an FMA.
    fn fmuladd(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        Ok(self
            .call(
                "llvm.fmuladd.f32",
                self.f32t().into(),
                &[a.into(), b.into(), c.into()],
            )?
            .into_float_value())
    }

    /// `x > c ? x : c` (`above`) or `x < c ? x : c`, NaN giving `c`: what `maxnum`/`minnum`
    /// give against a constant, in the compare-and-select form x86 lowers to one `maxps`/`minps`
    /// (the intrinsics add NaN fix-ups there).
    fn clamp_to(&self, x: FloatValue<'ctx>, c: f32, above: bool) -> Result<FloatValue<'ctx>> {
        let pred = if above {
            FloatPredicate::OGT
        } else {
            FloatPredicate::OLT
        };
        let k = self.k32(c);
        let keep = self.b.build_float_compare(pred, x, k, "cl.c")?;
        Ok(self.b.build_select(keep, x, k, "cl")?.into_float_value())
    }

    /// A two-operand f32 intrinsic (`llvm.copysign.f32`).
    fn f32_intrinsic2(
        &self,
        name: &str,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        Ok(self
            .call(name, self.f32t().into(), &[a.into(), b.into()])?
            .into_float_value())
    }

    /// `c[0]·s^(n-1) + … + c[n-1]` by Horner's rule with multiply-adds.
    fn poly_eval(&self, s: FloatValue<'ctx>, c: &[f32]) -> Result<FloatValue<'ctx>> {
        let mut acc = self.k32(c[0]);
        for &ci in &c[1..] {
            acc = self.fmuladd(acc, s, self.k32(ci))?;
        }
        Ok(acc)
    }

    /// `x` limited to `[lo, hi]`, NaN kept: `x < lo ? lo : x`, then `> hi ? hi : …`, which
    /// x86 lowers to one `maxps` and one `minps` with the operand order that returns NaN.
    fn limit_keeping_nan(&self, x: FloatValue<'ctx>, lo: f32, hi: f32) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let (lo, hi) = (self.k32(lo), self.k32(hi));
        let below = b.build_float_compare(FloatPredicate::OLT, x, lo, "lk.lt")?;
        let x = b.build_select(below, lo, x, "lk.lo")?.into_float_value();
        let above = b.build_float_compare(FloatPredicate::OGT, x, hi, "lk.gt")?;
        Ok(b.build_select(above, hi, x, "lk")?.into_float_value())
    }

    /// `q = rint(x·2^k/ln2)` (by adding and subtracting [`ROUNDER`]: one FMA and one
    /// subtraction, where `vrndscaleps` is two micro-ops after a multiply) and `s/2^k`, where
    /// `s = x·2^k - q·ln2` (Cody–Waite, two-part `ln2`): the reduced argument of
    /// `e^(x·2^k)`, scaled by `2^-k` so that `x·2^k` is never computed. Each step is the
    /// `k = 0` one on `x·2^k` times a power of two, exact or rounded alike.
    ///
    /// With `small_q` (the caller's `|q| ≤ 27`) `ln2` is one f32 ([`LN2`]) and the reduction
    /// one FMA: the constant's error, `|ln2 - LN2| < 2e-9`, times `q` moves `e^s` by at most
    /// `6e-8` relative, which `tanh` (its one caller, `|2x| ≤ 18.2`) turns into no more than
    /// its worst error with two parts (1.057 ulp over every f32, `codegen/tests/llvm_math.rs`).
    fn exp_reduce(
        &self,
        x: FloatValue<'ctx>,
        k: i32,
        small_q: bool,
    ) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        let z = self.fmuladd(x, self.k32(pow2(LOG2E, k)), self.k32(ROUNDER))?;
        let q = self.b.build_float_sub(z, self.k32(ROUNDER), "pe.q")?;
        if small_q {
            let s = self.fmuladd(q, self.k32(pow2(-LN2, -k)), x)?;
            return Ok((q, s));
        }
        let s = self.fmuladd(q, self.k32(pow2(-L2U, -k)), x)?;
        let s = self.fmuladd(q, self.k32(pow2(-L2L, -k)), s)?;
        Ok((q, s))
    }

    /// `e^x` for `|x| ≤ EXP_CLAMP`, or NaN for NaN (every step keeps it, `scale_pow2`
    /// included): `2^q·(1 + s·(1 + s·P(s)))`, the polynomial by Horner's rule.
    fn exp_in_range(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let (q, s) = self.exp_reduce(x, 0, false)?;
        let u = self.poly_eval(s, &EXP_FULL)?;
        self.scale_pow2(u, q)
    }

    /// `e^(2x)` for `0 ≤ x ≤ TANH_ONE` (`tanh`'s: `q ≤ 27`, so one FMA reduces), without
    /// computing `2x`: from `h = s/2` ([`Emitter::exp_reduce`]),
    /// `2^q·(1 + 2·(h + h²·2P(2h)))` with `P`'s coefficients
    /// scaled to match, every step the unscaled one's value times a power of two. This
    /// keeps `s + s²·P(s)` as a separate polynomial and product where [`Emitter::exp_in_range`]
    /// runs one Horner chain: in the `tanh` chain of `smelt bench`, whose loop has more
    /// live constants, that form measured 4% faster, and the single chain 3–10% faster in
    /// `exp` and `erf` (softmax, GELU; BENCHMARKS.md).
    fn exp_twice_in_range(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let (q, h) = self.exp_reduce(x, 1, true)?;
        let n = EXP_P.len() as i32;
        let c: Vec<f32> = (0..n).map(|i| pow2(EXP_P[i as usize], n - i)).collect();
        let p = self.poly_eval(h, &c)?;
        let hh = b.build_float_mul(h, h, "pe.hh")?;
        let u = self.fmuladd(hh, p, h)?;
        let u = self.fmuladd(u, self.k32(2.0), self.k32(1.0))?;
        self.scale_pow2(u, q)
    }

    /// `exp(x)` for an f32 `x` (see the module docs). NaN passes through the limits and every
    /// step after them as NaN (quieted, its payload kept).
    pub(crate) fn exp_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let xc = self.limit_keeping_nan(x, -EXP_CLAMP, EXP_CLAMP)?;
        self.exp_in_range(xc)
    }

    /// `tanh(x)` for an f32 `x` (see the module docs).
    pub(crate) fn tanh_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let a = self.fcall("llvm.fabs", x)?;
        let s = b.build_float_mul(a, a, "pt.s")?;
        let p = self.poly_eval(s, &TANH_P)?;
        let a3 = b.build_float_mul(a, s, "pt.a3")?;
        let small = self.fmuladd(a3, p, a)?;
        // NaN takes the small branch (`ULT` is true when unordered), which keeps it.
        let ac = self.clamp_to(a, TANH_ONE, false)?;
        let e = self.exp_twice_in_range(ac)?;
        let e1 = b.build_float_add(e, self.k32(1.0), "pt.e1")?;
        let q = b.build_float_div(self.k32(2.0), e1, "pt.q")?;
        let large = b.build_float_sub(self.k32(1.0), q, "pt.large")?;
        self.odd_by_magnitude(x, a, TANH_SMALL, small, large)
    }

    /// `erf(x)` for an f32 `x` (see the module docs).
    pub(crate) fn erf_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let a = self.fcall("llvm.fabs", x)?;
        let s = b.build_float_mul(a, a, "pf.s")?;
        let p = self.poly_eval(s, &ERF_P)?;
        let small = self.fmuladd(a, p, a)?;
        // NaN takes the small branch (`ULT` is true when unordered), which keeps it.
        let ac = self.clamp_to(a, ERF_ONE, false)?;
        let q = self.poly_eval(ac, &ERF_Q)?;
        let erfc = self.exp_in_range(q)?;
        let large = b.build_float_sub(self.k32(1.0), erfc, "pf.large")?;
        self.odd_by_magnitude(x, a, ERF_SMALL, small, large)
    }

    /// An odd function's value at `x` from its values at `a = |x|`: `small` below `limit`
    /// (and for NaN, which `ULT` sends there and the small polynomial keeps), `large` from
    /// `limit` up, with `x`'s sign.
    fn odd_by_magnitude(
        &self,
        x: FloatValue<'ctx>,
        a: FloatValue<'ctx>,
        limit: f32,
        small: FloatValue<'ctx>,
        large: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let is_small = b.build_float_compare(FloatPredicate::ULT, a, self.k32(limit), "om.lt")?;
        let r = b
            .build_select(is_small, small, large, "om.r")?
            .into_float_value();
        self.f32_intrinsic2("llvm.copysign.f32", r, x)
    }
}
