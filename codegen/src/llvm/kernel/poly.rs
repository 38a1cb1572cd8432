//! f32 `exp`, `tanh` and `erf` as straight-line f32 polynomials ([`MathMode::Polynomial`], the
//! default): no memory tables, no f64, no divisions but `tanh`'s one, no branches (every
//! branch computed and the right one selected, or each lane's coefficients picked from
//! registers), so the loop vectoriser widens them to the full SIMD width.
//!
//! - `exp(x)`: `x = q·ln2 + s` (`q = rint(x/ln2)`, rounded by adding and subtracting
//!   `1.5·2^23`; Cody–Waite with a two-part `ln2`, `|s| ≤ ln2/2`), `e^s` by a degree-6
//!   polynomial (`EXP_P`; until the twenty-seventh session SLEEF's degree-7 `expf`
//!   coefficients, one multiply-add more for accuracy an f32 result does not keep) in one
//!   Horner chain, times `2^q` built from exponent bits in two halves (so that `q = 128` and
//!   subnormal results are right), or by one `vscalefps` on AVX-512, with the same bits (see
//!   `scalef`).
//! - `tanh(x)`: one formula for every `x`, no branches: `E/(E + 2)` with `E = e^(2|x|) - 1`,
//!   `|x|` clamped to 9.1 (where `tanh` rounds to 1), sign restored with `copysign`. `E` is
//!   `2^q·(1 + U(s)) - 1` (`q = rint(2|x|/ln2)`, `ln2` in one part since `q ≤ 27`), kept as
//!   an unevaluated sum `ehi + elo` so that no rounding of `1 + U` or `U` loses the low bits
//!   of a small `tanh`, with `U(s) = s + s²·P(s)` (P of degree 4, by Estrin's scheme); the
//!   quotient is `E·(1/d)` corrected once by its residual, computed exactly enough from `d =
//!   fl(E + 2)`, `d`'s rounding error and `elo`. This replaced a polynomial below 0.75 and
//!   `1 - 2/(e^(2|x|) + 1)` above, both computed for every lane: the same worst error
//!   (1.066 against 1.057 ulp), one polynomial fewer and a shorter dependency chain.
//! - `erf(x)`: a polynomial by pieces. `|x|`, clamped to 3.9375 (where `erf` rounds to 1),
//!   falls in one of four intervals (`k`, from three integer comparisons of its bits); each
//!   has its own degree-7 polynomial `P`, evaluated once for every lane with that lane's
//!   coefficients, looked up per lane by `k` (`pick`: one `vpermilps` per coefficient on
//!   x86 with AVX, a shuffle rather than a multiply-add) by Estrin's scheme. On the first
//!   interval, `[0, 0.75)`, `erf(a) ≈ a + a·P(a)`; on the others `erf(m) + t·P(t)` with
//!   `t = a - m`, `m` a centre whose `erf(m)` is an f32 to a thousandth of an ulp. Sign
//!   restored with `copysign`. This replaced (in the forty-first session) `x + x·P(x²)`
//!   below 0.875 and `1 - e^Q(|x|)` above, both computed for every lane: a degree-6 and a
//!   degree-8 polynomial and an `exp`, 27 operations per vector for the two multiply-add
//!   pipes of AMD Zen 3 where this has 12 (eight multiply-adds, two multiplies, a minimum
//!   and a blend; and ten shuffles), and a worst error of 1.22 ulp where this has 0.92 (both
//!   measured over every f32).
//!
//! Coefficients were fitted in f64 (weighted least squares iterated towards minimax) and
//! rounded to f32. Multiply-adds are `llvm.fmuladd` (one FMA where the CPU has it). NaN
//! propagates (the comparisons choosing a branch or an interval send NaN down a polynomial
//! that keeps it; `exp` limits its argument with `maxps`/`minps` in the order that keeps
//! NaN, and every later step, `vscalefps` or the generic `2^q`, keeps it too), ±inf give
//! `exp` +inf/0 and `tanh`/`erf` ±1, ±0 keeps its sign.
//! The errors in [`MathMode::Polynomial`]'s docs are measured by `codegen/tests/llvm_math.rs`
//! against f64 math (a sampled sweep in CI, every f32 input in ignored tests).

use super::scalef::{pow2i, ScaleRange};
use super::Emitter;
use crate::llvm::error::Result;
#[allow(unused_imports)] // named by the module docs
use crate::llvm::options::MathMode;
use inkwell::values::{FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

/// `1/ln 2`.
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2 = L2U + L2L`; `L2U` has few enough bits that `q·L2U` is exact for `|q| ≤ 150`.
const L2U: f32 = f32::from_bits(0x3f31_7200); // 0.693145751953125
const L2L: f32 = f32::from_bits(0x35bf_be8e); // 1.4286068e-6
/// `ln 2` rounded to f32 (0.6931472), for `tanh`'s reduction, whose `q ≤ 27`: the constant's
/// error, `|ln2 - LN2| < 2e-9`, times `q` moves `e^s` by at most `6e-8` relative where `tanh`
/// is within an ulp of 1, so one part suffices (the error is measured over every f32 by
/// `codegen/tests/llvm_math.rs`).
const LN2: f32 = std::f32::consts::LN_2;
/// `e^s ≈ 1 + s + s²·P(s)` on `|s| ≤ ln2/2` (relative error 3.1e-9 before rounding to f32),
/// highest degree first, fitted by `scripts/fit-poly.py exp`.
const EXP_P: [f32; 5] = [
    0.001_381_456_9,
    0.008_368_731,
    0.041_668_39,
    0.166_665_21,
    0.499_999_94,
];
/// `EXP_P` with the two terms of degree 1 and 0: `e^s ≈ 1 + s·(1 + s·P(s))` by Horner.
const EXP_FULL: [f32; 7] = [EXP_P[0], EXP_P[1], EXP_P[2], EXP_P[3], EXP_P[4], 1.0, 1.0];
/// `1.5·2^23`: adding it to an `|z| < 2^22` rounds `z` to an integer (the sum's ulp is 1).
const ROUNDER: f32 = 12_582_912.0;
/// `v·2^e`, exactly (for the constants here, far from overflow and underflow).
const fn pow2(v: f32, e: i32) -> f32 {
    v * f32::from_bits(((127 + e) as u32) << 23)
}
/// `exp` is evaluated on arguments clamped to `±EXP_CLAMP`: beyond, the result is 0 or +inf
/// either way (`e^-104` rounds to 0, `e^89` overflows).
const EXP_CLAMP: f32 = 104.0;

/// `e^s - 1 ≈ s + s²·P(s)` on `|s| ≤ ln2/2` (relative error 1.32e-8 before rounding to f32),
/// highest degree first: `tanh`'s `expm1`, fitted by `scripts/fit-poly.py expm1`.
const EXPM1_P: [f32; 5] = [
    0.001_388_251_7,
    0.008_366_534,
    0.041_667_2,
    0.166_665_43,
    0.499_999_97,
];
/// `tanh(x)` rounds to ±1 in f32 beyond this.
const TANH_ONE: f32 = 9.1;

/// `erf(x)` rounds to ±1 in f32 beyond this.
const ERF_ONE: f32 = 3.9375;

/// `erf` by pieces: the upper bounds of the first three intervals of `|x|` (the last ends at
/// [`ERF_ONE`]).
const ERF_BOUNDS: [f32; 3] = [0.75, 1.65, 2.7];
/// Each interval's centre `m` (the first's is 0), chosen near the middle so that `erf(m)`
/// is within a thousandth of an ulp of an f32, [`ERF_C`].
const ERF_M: [f32; 4] = [0.0, 1.2000071, 2.175026, 3.3189874];
/// `erf(m)` of each centre but the first (whose entry is unused).
const ERF_C: [f32; 4] = [0.0, 0.9103159, 0.9979017, 0.9999973];
/// Per interval (the columns), the coefficients of `P` of degree 7, highest degree first:
/// `erf(a) ≈ a + a·P(a)` on the first interval, `erf(m) + t·P(t)` with `t = a - m` on the
/// others; fitted by `scripts/fit-poly.py erf`.
const ERF_PIECES: [[f32; 4]; 8] = [
    [0.01025904, -0.005514184, 0.001180668, -6.928139e-05],
    [-0.036239423, 0.006127757, -0.0015304835, 0.0001486491],
    [0.0047936062, 0.019539535, -0.0023661647, -0.00019062714],
    [0.11142005, -0.053360533, 0.0118967835, 0.00021486157],
    [0.00023396243, 0.0064204964, -0.02331301, -0.00019544244],
    [-0.37614566, 0.167537, 0.028067565, 0.00013062221],
    [6.1094914e-07, -0.32080978, -0.021646367, -6.157179e-05],
    [0.12837917, 0.2673398, 0.009952313, 1.8537508e-05],
];

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    fn k32(&self, v: f32) -> FloatValue<'ctx> {
        self.f32_constant(v)
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
        let x = self.at_least_keeping_nan(x, lo)?;
        self.at_most_keeping_nan(x, hi)
    }

    /// `x < lo ? lo : x`: `x` limited to `lo`, NaN kept (`OLT` is false for it), one `maxps`.
    fn at_least_keeping_nan(&self, x: FloatValue<'ctx>, lo: f32) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let lo = self.k32(lo);
        let below = b.build_float_compare(FloatPredicate::OLT, x, lo, "lk.lt")?;
        Ok(b.build_select(below, lo, x, "lk.lo")?.into_float_value())
    }

    /// `x > hi ? hi : x`: `x` limited to `hi`, NaN kept (`OGT` is false for it), one `minps`.
    fn at_most_keeping_nan(&self, x: FloatValue<'ctx>, hi: f32) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let hi = self.k32(hi);
        let above = b.build_float_compare(FloatPredicate::OGT, x, hi, "lk.gt")?;
        Ok(b.build_select(above, hi, x, "lk")?.into_float_value())
    }

    /// `e^x` for `|x| ≤ EXP_CLAMP`, or NaN for NaN (every step keeps it, `scale_pow2`
    /// included): `q = rint(x/ln2)` (by adding and subtracting [`ROUNDER`]: one FMA and one
    /// subtraction, where `vrndscaleps` is two micro-ops after a multiply), `s = x - q·ln2`
    /// (Cody–Waite, two-part `ln2`), `2^q·(1 + s·(1 + s·P(s)))`, the polynomial by Horner's
    /// rule.
    /// `range` says what `q` may be beyond `|q| ≤ 150` (`scale_pow2`).
    fn exp_in_range(&self, x: FloatValue<'ctx>, range: ScaleRange) -> Result<FloatValue<'ctx>> {
        let z = self.fmuladd(x, self.k32(LOG2E), self.k32(ROUNDER))?;
        let q = self.b.build_float_sub(z, self.k32(ROUNDER), "pe.q")?;
        let s = self.fmuladd(q, self.k32(-L2U), x)?;
        let s = self.fmuladd(q, self.k32(-L2L), s)?;
        // `u = e^s`, scaled where the generic `2^q` wants it so (exactly: see `scalef`).
        let pre = self.prescale(range);
        let u = self.poly_eval(s, &EXP_FULL.map(|c| pow2(c, pre)))?;
        let qi = self.rounded_to_int(z)?;
        self.scale_pow2(u, q, qi, range)
    }

    /// The integer `q` of a rounding sum `z = ROUNDER + q` (`|q| < 2^22`), from `z`'s bits:
    /// `z` is `q` exactly, one integer step per unit. Some integer, no poison, for a NaN `z`.
    fn rounded_to_int(&self, z: FloatValue<'ctx>) -> Result<IntValue<'ctx>> {
        let i32t = self.ctx.i32_type();
        let zi = self.b.build_bit_cast(z, i32t, "rq.zi")?.into_int_value();
        let rounder = i32t.const_int(u64::from(ROUNDER.to_bits()), false);
        Ok(self.b.build_int_sub(zi, rounder, "rq.qi")?)
    }

    /// `exp(x)` for an f32 `x` (see the module docs). NaN passes through the limits and every
    /// step after them as NaN (quieted, its payload kept).
    pub(crate) fn exp_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let xc = self.limit_keeping_nan(x, -EXP_CLAMP, EXP_CLAMP)?;
        self.exp_in_range(xc, ScaleRange::Any)
    }

    /// `exp(x)` for an f32 `x` known to be `≤ 0` or NaN (`reuse::nonpositive`): as
    /// [`Self::exp_poly`] without the upper limit, which could not change such an `x`: the
    /// same bits, one `minps` fewer, and its `q ≤ 0` lets the generic `2^q` scale by a fixed
    /// offset ([`ScaleRange::AtMost63`]).
    pub(crate) fn exp_poly_nonpositive(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let xc = self.at_least_keeping_nan(x, -EXP_CLAMP)?;
        self.exp_in_range(xc, ScaleRange::AtMost63)
    }

    /// `tanh(x)` for an f32 `x` (see the module docs): `E/(E + 2)` with `E = e^(2|x|) - 1`,
    /// `x`'s sign.
    pub(crate) fn tanh_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let (ehi, elo) = self.tanh_first(x)?;
        self.tanh_second(x, ehi, elo)
    }

    /// The first half of [`Self::tanh_poly`]: `E = e^(2|x|) - 1` as `ehi + elo`.
    pub(crate) fn tanh_first(
        &self,
        x: FloatValue<'ctx>,
    ) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        let a = self.fcall("llvm.fabs", x)?;
        // NaN stays NaN through the limit and every step after.
        let ac = self.at_most_keeping_nan(a, TANH_ONE)?;
        self.expm1_twice_split(ac)
    }

    /// The second half of [`Self::tanh_poly`]: `E/(E + 2)` with `x`'s sign, from
    /// [`Self::tanh_first`]'s `ehi` and `elo`.
    pub(crate) fn tanh_second(
        &self,
        x: FloatValue<'ctx>,
        ehi: FloatValue<'ctx>,
        elo: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        let r = self.over_plus_two(ehi, elo)?;
        self.f32_intrinsic2("llvm.copysign.f32", r, x)
    }

    /// `e^(2a) - 1` for `0 ≤ a ≤ TANH_ONE` as an unevaluated sum `ehi + elo` (`|elo|` well
    /// below `ehi`): with `q = rint(2a/ln2)` and `h = (2a - q·ln2)/2` (one FMA: `q ≤ 27`, see
    /// [`LN2`]), `t = 2^q` and `P` of [`EXPM1_P`], `ehi = (t - 1) + 2t·h` and
    /// `elo = 2t·h²·2P(2h)`, `P` scaled so that `2a` is never computed. `ehi` is exact where
    /// `q = 0`, so the error of a small `tanh` is the polynomial's and the final roundings',
    /// not that of rounding `h + h²·P` first (which cost up to 1.7 ulp).
    fn expm1_twice_split(
        &self,
        a: FloatValue<'ctx>,
    ) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        let b = &self.b;
        let z = self.fmuladd(a, self.k32(pow2(LOG2E, 1)), self.k32(ROUNDER))?;
        let q = b.build_float_sub(z, self.k32(ROUNDER), "pt.q")?;
        let h = self.fmuladd(q, self.k32(pow2(-LN2, -1)), a)?;
        let t = pow2i(self.ctx, b, self.rounded_to_int(z)?)?;
        // `2P(2h)` by Estrin's scheme (its chain is three steps where Horner's is four).
        let n = EXPM1_P.len() as i32;
        let c: Vec<f32> = (0..n).map(|i| pow2(EXPM1_P[i as usize], n - i)).collect();
        let h2 = b.build_float_mul(h, h, "pt.h2")?;
        let low = self.fmuladd(self.k32(c[3]), h, self.k32(c[4]))?;
        let high = self.fmuladd(self.k32(c[1]), h, self.k32(c[2]))?;
        let high = self.fmuladd(self.k32(c[0]), h2, high)?;
        let p = self.fmuladd(h2, high, low)?;
        let t2 = b.build_float_add(t, t, "pt.t2")?;
        let ht = b.build_float_mul(h, t2, "pt.ht")?;
        let tm1 = b.build_float_sub(t, self.k32(1.0), "pt.tm1")?;
        let ehi = b.build_float_add(ht, tm1, "pt.ehi")?;
        let h2t = b.build_float_mul(h2, t2, "pt.h2t")?;
        let elo = b.build_float_mul(h2t, p, "pt.elo")?;
        Ok((ehi, elo))
    }

    /// `E/(E + 2)` for `E = ehi + elo ≥ 0` (`|elo|` well below `ehi`), to about half an ulp
    /// before the last rounding: `r0 = E·(1/d)` with `d = fl(E + 2)`, then one correction
    /// by the residual `E - r0·(E + 2)`, computed from `d`, `d`'s rounding error `k` (found
    /// through `d - 2`, which is exact for `d ≥ 1`) and `elo` as `(ehi - r0·d) + (elo -
    /// r0·k)`. Its first half is a true FMA (`llvm.fma`, a library call on CPUs without one):
    /// as a multiply and an add it would round away what it measures (1.72 ulp in an exact
    /// emulation of that arithmetic); every other multiply-add may round twice (on a target
    /// without FMA the worst error over every f32 is the same, 1.073 ulp). The two halves
    /// are computed side by side and then added, where adding `elo` and `-r0·k` to the first
    /// in turn (until the thirty-ninth session) made the chain one step longer: the
    /// elementwise chain ran up to 5% faster on AMD Zen 3, and the worst error went from
    /// 1.066 to 1.073 ulp.
    fn over_plus_two(
        &self,
        ehi: FloatValue<'ctx>,
        elo: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let e = b.build_float_add(ehi, elo, "pt.e")?;
        let d = b.build_float_add(e, self.k32(2.0), "pt.d")?;
        let dm2 = b.build_float_sub(d, self.k32(2.0), "pt.dm2")?;
        let k = b.build_float_sub(ehi, dm2, "pt.k0")?;
        let k = b.build_float_add(k, elo, "pt.k")?;
        let rc = b.build_float_div(self.k32(1.0), d, "pt.rc")?;
        let r0 = b.build_float_mul(e, rc, "pt.r0")?;
        let nr0 = b.build_float_neg(r0, "pt.nr0")?;
        let c1 = self
            .call(
                "llvm.fma.f32",
                self.f32t().into(),
                &[nr0.into(), d.into(), ehi.into()],
            )?
            .into_float_value();
        // The residual's two halves side by side, then summed: one step shorter a chain than
        // adding `elo` and `-r0·k` to the first in turn.
        let c2 = self.fmuladd(nr0, k, elo)?;
        let c = b.build_float_add(c1, c2, "pt.c")?;
        self.fmuladd(c, rc, r0)
    }

    /// `erf(x)` for an f32 `x` (see the module docs).
    pub(crate) fn erf_poly(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let (t, k) = self.erf_first(x)?;
        self.erf_second(x, t, k)
    }

    /// The first half of [`Self::erf_poly`]: which interval `|x|` falls in, `k` (as the bits
    /// of an f32, so that it can be kept in a float array), and `t`, `|x|` less the interval's
    /// centre.
    pub(crate) fn erf_first(
        &self,
        x: FloatValue<'ctx>,
    ) -> Result<(FloatValue<'ctx>, FloatValue<'ctx>)> {
        let b = &self.b;
        let i32t = self.ctx.i32_type();
        let a = self.fcall("llvm.fabs", x)?;
        // NaN stays NaN through the limit, and its bits, above every bound's, put it in the
        // last interval, where `t` is NaN.
        let ac = self.at_most_keeping_nan(a, ERF_ONE)?;
        // `ac ≥ 0`, so its bits order as it does.
        let ai = b.build_bit_cast(ac, i32t, "pe.ai")?.into_int_value();
        let mut k = i32t.const_zero();
        for bound in ERF_BOUNDS {
            let above = b.build_int_compare(
                IntPredicate::SGT,
                ai,
                i32t.const_int(bound.to_bits() as u64, false),
                "pe.above",
            )?;
            let one = b.build_int_z_extend(above, i32t, "pe.one")?;
            k = b.build_int_add(k, one, "pe.k")?;
        }
        let m = self.pick4(k, ERF_M)?;
        let t = b.build_float_sub(ac, m, "pe.t")?;
        let kf = b
            .build_bit_cast(k, self.f32t(), "pe.kf")?
            .into_float_value();
        Ok((t, kf))
    }

    /// The second half of [`Self::erf_poly`], from [`Self::erf_first`]'s `t` and `k`: `P(t)`
    /// by Estrin's scheme, `a + a·P` or `erf(m) + t·P`, and `x`'s sign.
    pub(crate) fn erf_second(
        &self,
        x: FloatValue<'ctx>,
        t: FloatValue<'ctx>,
        kf: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let i32t = self.ctx.i32_type();
        let k = b.build_bit_cast(kf, i32t, "pe.k")?.into_int_value();
        let c = ERF_PIECES
            .iter()
            .map(|c| self.pick4(k, *c))
            .collect::<Result<Vec<_>>>()?;
        let t2 = b.build_float_mul(t, t, "pe.t2")?;
        let t4 = b.build_float_mul(t2, t2, "pe.t4")?;
        let p01 = self.fmuladd(c[0], t, c[1])?;
        let p23 = self.fmuladd(c[2], t, c[3])?;
        let p45 = self.fmuladd(c[4], t, c[5])?;
        let p67 = self.fmuladd(c[6], t, c[7])?;
        let q0 = self.fmuladd(p01, t2, p23)?;
        let q1 = self.fmuladd(p45, t2, p67)?;
        let p = self.fmuladd(q0, t4, q1)?;
        // On the first interval `t` is `|x|` (its centre is 0) and the sum is `|x| + |x|·P`.
        let first = b.build_int_compare(IntPredicate::EQ, k, i32t.const_zero(), "pe.first")?;
        let base = self.pick4(k, ERF_C)?;
        let base = b.build_select(first, t, base, "pe.c")?.into_float_value();
        let r = self.fmuladd(t, p, base)?;
        self.f32_intrinsic2("llvm.copysign.f32", r, x)
    }
}
