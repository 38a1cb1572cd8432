//! Transcendental functions emitted inline, as straight-line code the loop vectoriser can widen
//! (a call to the C library's scalar `expf` cannot be vectorised: LLVM would scalarise it).
//!
//! `expf` is the algorithm of glibc's `expf` (≥ 2.28, from ARM's optimized-routines): the
//! argument is split as `x·32/ln2 = k + r` (`|r| ≤ 1/2`), `2^(k/32)` comes from a 32-entry table
//! and the exponent bits, `2^(r/32)` from a degree-3 polynomial, all in f64, rounded once to
//! f32. Its f64 error is far below half an f32 ulp, so the result is the same as glibc's for
//! every f32 input (checked exhaustively against glibc 2.36's `expf` on x86-64, whose compiled
//! code contracts `r = z - k` into an FMA, as here: `llvm.fma`, exact on every target), so
//! kernels agree bit for bit with Rust's `f32::exp`, which the reference interpreter calls.
//!
//! `tanhf` is glibc's (2.36, Sun's `s_tanhf.c` over Sun's five-coefficient `s_expm1f.c`), not
//! musl's or the `libm` crate's (other thresholds, a two-term `expm1f`; they differ on about
//! 17 million inputs): Rust's `f32::tanh`, which the interpreter calls, is the C library's
//! `tanhf`. Every branch is computed and selected, with one `expm1f` whose argument is chosen
//! per lane; the result is glibc's bit for bit on all 2^32 inputs (the ignored test
//! `inline_tanh_is_tanhf_for_every_f32` in `codegen/tests/llvm_kernel.rs`). A C library with
//! another `tanhf` (musl, a newer glibc) makes the interpreter differ in the last bits.

use super::Emitter;
use crate::llvm::error::Result;
use inkwell::module::Linkage;
use inkwell::values::{FloatValue, PointerValue};
use inkwell::{AddressSpace, FloatPredicate, IntPredicate};

/// `T[i] = bits(2^(i/32)) - (i << 47)` (glibc's `__exp2f_data.tab`): adding `k << 47` to
/// `T[k % 32]` gives the bits of `2^(k/32)`.
const EXP2F_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];

/// `32 / ln 2`.
const INV_LN2_N: f64 = 46.16624130844683; // 0x1.71547652b82fep0 * 32
/// `1.5 · 2^52`: adding it rounds to an integer held in the low mantissa bits.
const SHIFT: f64 = 6755399441055744.0; // 0x1.8p52
/// The polynomial `2^(r/32) ≈ 1 + P2·r + P1·r² + P0·r³`.
const P0: u64 = 0x3fac6af84b912394; // 0x1.c6af84b912394p-5, divided by 32³ at use
const P1: u64 = 0x3fcebfce50fac4f3; // 0x1.ebfce50fac4f3p-3, divided by 32²
const P2: u64 = 0x3fe62e42ff0c52d6; // 0x1.62e42ff0c52d6p-1, divided by 32
/// Above this, `expf` overflows to +inf.
const OVERFLOW: u32 = 0x42b17217; // 0x1.62e42ep6
/// Below this, `expf` underflows to +0.
const UNDERFLOW: u32 = 0xc2cff1b4; // -0x1.9fe368p6

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    fn exp2f_table(&self) -> PointerValue<'ctx> {
        let name = "smelt.exp2f.tab";
        let i64t = self.ctx.i64_type();
        let g = self.module.get_global(name).unwrap_or_else(|| {
            let arr = i64t.array_type(EXP2F_TAB.len() as u32);
            let g = self
                .module
                .add_global(arr, Some(AddressSpace::default()), name);
            let vals: Vec<_> = EXP2F_TAB
                .iter()
                .map(|&v| i64t.const_int(v, false))
                .collect();
            g.set_initializer(&i64t.const_array(&vals));
            g.set_constant(true);
            g.set_linkage(Linkage::Internal);
            g
        });
        g.as_pointer_value()
    }

    /// `expf(x)` for an f32 `x`, bit for bit glibc's (see the module docs).
    pub(crate) fn expf(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let f64t = self.ctx.f64_type();
        let i64t = self.ctx.i64_type();
        let f32t = self.ctx.f32_type();
        let c = |v: f64| f64t.const_float(v);
        // NaN, infinite and out-of-range inputs compute garbage below (the table index is
        // masked, so never out of bounds) that the selects at the end replace.
        let xd = b.build_float_ext(x, f64t, "e.xd")?;
        let z = b.build_float_mul(c(INV_LN2_N), xd, "e.z")?;
        let kd = b.build_float_add(z, c(SHIFT), "e.kd")?;
        let ki = b.build_bit_cast(kd, i64t, "e.ki")?.into_int_value();
        let kd = b.build_float_sub(kd, c(SHIFT), "e.k")?;
        // r = z - k with one rounding (glibc's compiled `expf` contracts this into an FMA; with
        // a rounded `z` two inputs in 2^32 round differently).
        let neg_k = b.build_float_neg(kd, "e.nk")?;
        let r = self
            .call(
                "llvm.fma.f64",
                f64t.into(),
                &[c(INV_LN2_N).into(), xd.into(), neg_k.into()],
            )?
            .into_float_value();
        let idx = b.build_and(ki, i64t.const_int(31, false), "e.i")?;
        // SAFETY (of the generated code): `idx` is in 0..32, the table's length.
        let slot = unsafe {
            b.build_in_bounds_gep(self.exp2f_table(), &[i64t.const_zero(), idx], "e.slot")?
        };
        let t = b.build_load(slot, "e.t")?.into_int_value();
        let sh = b.build_left_shift(ki, i64t.const_int(47, false), "e.sh")?;
        let t = b.build_int_add(t, sh, "e.tk")?;
        let s = b.build_bit_cast(t, f64t, "e.s")?.into_float_value();
        let r2 = b.build_float_mul(r, r, "e.r2")?;
        let p = b.build_float_mul(c(f64::from_bits(P0) / 32.0 / 32.0 / 32.0), r, "e.p0")?;
        let p = b.build_float_add(p, c(f64::from_bits(P1) / 32.0 / 32.0), "e.p1")?;
        let q = b.build_float_mul(c(f64::from_bits(P2) / 32.0), r, "e.q0")?;
        let q = b.build_float_add(q, c(1.0), "e.q1")?;
        let y = b.build_float_mul(p, r2, "e.y0")?;
        let y = b.build_float_add(y, q, "e.y1")?;
        let y = b.build_float_mul(y, s, "e.y")?;
        let y = b.build_float_trunc(y, f32t, "e.f")?;
        let over = b.build_float_compare(
            FloatPredicate::OGT,
            x,
            f32t.const_float(f32::from_bits(OVERFLOW) as f64),
            "e.over",
        )?;
        let y = b
            .build_select(over, f32t.const_float(f64::INFINITY), y, "e.inf")?
            .into_float_value();
        let under = b.build_float_compare(
            FloatPredicate::OLT,
            x,
            f32t.const_float(f32::from_bits(UNDERFLOW) as f64),
            "e.under",
        )?;
        let y = b
            .build_select(under, f32t.const_zero(), y, "e.zero")?
            .into_float_value();
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "e.nan")?;
        let quiet = b.build_float_add(x, x, "e.q")?;
        Ok(b.build_select(nan, quiet, y, "e.res")?.into_float_value())
    }
}

/// `erff`'s coefficients (FreeBSD/musl `s_erff.c`, as the `libm` crate the reference
/// interpreter calls has them), as f32 bits.
mod erf_c {
    pub const ERX: u32 = 0x3f58560b;
    pub const EFX8: u32 = 0x3f8375d4;
    pub const PP: [u32; 5] = [0x3e0375d4, 0xbea66beb, 0xbce9528f, 0xbbbd1489, 0xb7c756b1];
    pub const QQ: [u32; 5] = [0x3ecbbbce, 0x3d852a63, 0x3ba68116, 0x390aee49, 0xb684e21a];
    pub const PA: [u32; 7] = [
        0xbb1acdc6, 0x3ed46805, 0xbebe9208, 0x3ea2fe54, 0xbde31cc2, 0x3d1151b3, 0xbb0df9c0,
    ];
    pub const QA: [u32; 6] = [
        0x3dd9f331, 0x3f0a5785, 0x3d931ae7, 0x3e013307, 0x3c5f6e13, 0x3c445aa3,
    ];
    pub const RA: [u32; 8] = [
        0xbc21a093, 0xbf31a0b7, 0xc128f022, 0xc2798057, 0xc322658c, 0xc3389ae7, 0xc2a2932b,
        0xc11d077e,
    ];
    pub const SA: [u32; 8] = [
        0x419d35ce, 0x4309a863, 0x43d9486f, 0x442158c9, 0x43d6810b, 0x42d9451f, 0x40d23f7c,
        0xbd777f97,
    ];
    pub const RB: [u32; 7] = [
        0xbc21a092, 0xbf4c9dd4, 0xc18e104b, 0xc320a2ea, 0xc41f6441, 0xc480230b, 0xc3f1c275,
    ];
    pub const SB: [u32; 7] = [
        0x41f2b459, 0x43a2e571, 0x44c01759, 0x4547fdbb, 0x451f90ce, 0x43ed43a7, 0xc1b38712,
    ];
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `c[0] + s*(c[1] + s*(… + s*c[n-1]))` in f32, as `s_erff.c` writes it.
    fn horner(&self, s: FloatValue<'ctx>, c: &[u32], lead_one: bool) -> Result<FloatValue<'ctx>> {
        let f32t = self.ctx.f32_type();
        let k = |bits: u32| f32t.const_float(f32::from_bits(bits) as f64);
        let b = &self.b;
        let mut acc = k(c[c.len() - 1]);
        for &ci in c[..c.len() - 1].iter().rev() {
            let m = b.build_float_mul(s, acc, "h.m")?;
            acc = b.build_float_add(k(ci), m, "h.a")?;
        }
        if lead_one {
            let m = b.build_float_mul(s, acc, "h.m")?;
            acc = b.build_float_add(f32t.const_float(1.0), m, "h.1")?;
        }
        Ok(acc)
    }

    /// `erff(x)` for an f32 `x`: the algorithm of `s_erff.c` (the `libm` crate's, which the
    /// reference interpreter calls), every branch computed and the right one selected so that
    /// it vectorises; its two `expf` calls are [`Emitter::expf`] (correctly rounded where
    /// `libm`'s own older `expf` is not), so it stays within an ulp or two of `libm::erff`.
    pub(crate) fn erff(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        use erf_c::*;
        let b = &self.b;
        let f32t = self.ctx.f32_type();
        let i32t = self.ctx.i32_type();
        let k = |v: f32| f32t.const_float(v as f64);
        let kb = |bits: u32| f32t.const_float(f32::from_bits(bits) as f64);
        let ic = |v: u32| i32t.const_int(v as u64, false);
        let bits = b.build_bit_cast(x, i32t, "erf.bits")?.into_int_value();
        let ix = b.build_and(bits, ic(0x7fff_ffff), "erf.ix")?;
        let neg = b.build_int_compare(IntPredicate::SLT, bits, ic(0), "erf.neg")?;
        let ax = b.build_bit_cast(ix, f32t, "erf.ax")?.into_float_value();
        let below = |t: u32, n: &str| b.build_int_compare(IntPredicate::ULT, ix, ic(t), n);
        // |x| < 2^-28: 0.125 * (8x + EFX8 x).
        let tiny = {
            let a = b.build_float_mul(k(8.0), x, "erf.8x")?;
            let c = b.build_float_mul(kb(EFX8), x, "erf.ex")?;
            let s = b.build_float_add(a, c, "erf.ts")?;
            b.build_float_mul(k(0.125), s, "erf.tiny")?
        };
        // |x| < 0.84375: x + x * r/s over z = x².
        let small = {
            let z = b.build_float_mul(x, x, "erf.z")?;
            let r = self.horner(z, &PP, false)?;
            let s = self.horner(z, &QQ, true)?;
            let y = b.build_float_div(r, s, "erf.y")?;
            let xy = b.build_float_mul(x, y, "erf.xy")?;
            b.build_float_add(x, xy, "erf.small")?
        };
        // |x| < 1.25: erfc = 1 - ERX - p/q over s = |x| - 1.
        let erfc1 = {
            let s = b.build_float_sub(ax, k(1.0), "erf.s1")?;
            let p = self.horner(s, &PA, false)?;
            let q = self.horner(s, &QA, true)?;
            let pq = b.build_float_div(p, q, "erf.pq")?;
            b.build_float_sub(k(1.0 - f32::from_bits(ERX)), pq, "erf.c1")?
        };
        // |x| < 6: erfc = expf(-z² - 0.5625) * expf((z - |x|)(z + |x|) + R/S) / |x|.
        let erfc2 = {
            let xx = b.build_float_mul(ax, ax, "erf.xx")?;
            let s = b.build_float_div(k(1.0), xx, "erf.s2")?;
            let near = below(0x4036_db6d, "erf.near")?;
            let ra = self.horner(s, &RA, false)?;
            let sa = self.horner(s, &SA, true)?;
            let rb = self.horner(s, &RB, false)?;
            let sb = self.horner(s, &SB, true)?;
            let r = b.build_select(near, ra, rb, "erf.r")?.into_float_value();
            let big_s = b.build_select(near, sa, sb, "erf.bs")?.into_float_value();
            let zi = b.build_and(ix, ic(0xffff_e000), "erf.zi")?;
            let z = b.build_bit_cast(zi, f32t, "erf.zf")?.into_float_value();
            let nz = b.build_float_neg(z, "erf.nz")?;
            let a = b.build_float_mul(nz, z, "erf.a")?;
            let a = b.build_float_sub(a, k(0.5625), "erf.a1")?;
            let e1 = self.expf(a)?;
            let d = b.build_float_sub(z, ax, "erf.d")?;
            let e = b.build_float_add(z, ax, "erf.e")?;
            let de = b.build_float_mul(d, e, "erf.de")?;
            let rs = b.build_float_div(r, big_s, "erf.rs")?;
            let a2 = b.build_float_add(de, rs, "erf.a2")?;
            let e2 = self.expf(a2)?;
            let p = b.build_float_mul(e1, e2, "erf.p")?;
            b.build_float_div(p, ax, "erf.c2")?
        };
        let mid = below(0x3fa0_0000, "erf.mid")?;
        let erfc = b
            .build_select(mid, erfc1, erfc2, "erf.c")?
            .into_float_value();
        let y = b.build_float_sub(k(1.0), erfc, "erf.y1")?;
        let in_range = below(0x40c0_0000, "erf.six")?;
        let big = k(1.0 - f32::from_bits(0x0380_0000));
        let y = b
            .build_select(in_range, y, big, "erf.yb")?
            .into_float_value();
        let ny = b.build_float_neg(y, "erf.ny")?;
        let y = b.build_select(neg, ny, y, "erf.ys")?.into_float_value();
        let is_tiny = below(0x3180_0000, "erf.istiny")?;
        let lo = b
            .build_select(is_tiny, tiny, small, "erf.lo")?
            .into_float_value();
        let is_small = below(0x3f58_0000, "erf.issmall")?;
        let y = b.build_select(is_small, lo, y, "erf.v")?.into_float_value();
        // NaN → NaN, ±inf → ±1: 1 - 2·sign + 1/x.
        let special = {
            let one_minus = b
                .build_select(neg, k(-1.0), k(1.0), "erf.sg")?
                .into_float_value();
            let inv = b.build_float_div(k(1.0), x, "erf.inv")?;
            b.build_float_add(one_minus, inv, "erf.sp")?
        };
        let finite = below(0x7f80_0000, "erf.fin")?;
        Ok(b.build_select(finite, y, special, "erf")?
            .into_float_value())
    }
}

/// `expm1f`'s constants (Sun's `s_expm1f.c`, as glibc ≤ 2.40 has it: five `Q` coefficients,
/// where FreeBSD/musl/the `libm` crate use a two-term fit), as f32 bits.
mod expm1_c {
    pub const LN2_HI: u32 = 0x3f317180;
    pub const LN2_LO: u32 = 0x3717f7d1;
    pub const INVLN2: u32 = 0x3fb8aa3b;
    pub const Q: [u32; 5] = [0xbd088889, 0x3ad00d01, 0xb8a670cd, 0x36867e54, 0xb457edbb];
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `expm1f(a)` for the arguments [`Emitter::tanhf`] passes (`a` in `[2, 44)` or in
    /// `(-2, 0]`; any finite `|a| < 27·ln 2` too): glibc's `s_expm1f.c`, its argument reduction
    /// written once for every `k` (`k = 0` and `k = ±1` are the general formula with that `k`,
    /// exactly) and each way of undoing it computed and selected. Out of that range (huge, NaN)
    /// it returns garbage, never poison: callers clamp the argument first.
    fn expm1f_reduced(&self, a: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        use expm1_c::*;
        let b = &self.b;
        let f32t = self.ctx.f32_type();
        let i32t = self.ctx.i32_type();
        let k = |v: f32| f32t.const_float(v as f64);
        let kb = |bits: u32| f32t.const_float(f32::from_bits(bits) as f64);
        let ic = |v: i32| i32t.const_int(v as i64 as u64, true);
        let sel =
            |c, x: FloatValue<'ctx>, y: FloatValue<'ctx>, n: &str| -> Result<FloatValue<'ctx>> {
                Ok(b.build_select(c, x, y, n)?.into_float_value())
            };
        let ai = b.build_bit_cast(a, i32t, "m1.bits")?.into_int_value();
        let ha = b.build_and(ai, ic(0x7fff_ffff), "m1.ha")?;
        let neg = b.build_int_compare(IntPredicate::SLT, ai, ic(0), "m1.neg")?;
        // k = (int)(a/ln2 ± 0.5), truncated; ±1 for 0.5·ln2 < |a| < 1.5·ln2; 0 below.
        let half = sel(neg, k(-0.5), k(0.5), "m1.h")?;
        let kf = b.build_float_mul(kb(INVLN2), a, "m1.kf")?;
        let kf = b.build_float_add(kf, half, "m1.kh")?;
        let kg = b.build_float_to_signed_int(kf, i32t, "m1.kg")?;
        let k1 = b
            .build_select(neg, ic(-1), ic(1), "m1.k1")?
            .into_int_value();
        let near = b.build_int_compare(IntPredicate::ULT, ha, ic(0x3f85_1592), "m1.near")?;
        let kk = b.build_select(near, k1, kg, "m1.kn")?.into_int_value();
        let reduce = b.build_int_compare(IntPredicate::UGT, ha, ic(0x3eb1_7218), "m1.red")?;
        let kk = b.build_select(reduce, kk, ic(0), "m1.k")?.into_int_value();
        let t = b.build_signed_int_to_float(kk, f32t, "m1.t")?;
        let th = b.build_float_mul(t, kb(LN2_HI), "m1.th")?;
        let hi = b.build_float_sub(a, th, "m1.hi")?;
        let lo = b.build_float_mul(t, kb(LN2_LO), "m1.lo")?;
        let x = b.build_float_sub(hi, lo, "m1.x")?;
        let c = b.build_float_sub(hi, x, "m1.c0")?;
        let c = b.build_float_sub(c, lo, "m1.c")?;
        // The primary range.
        let hfx = b.build_float_mul(k(0.5), x, "m1.hfx")?;
        let hxs = b.build_float_mul(x, hfx, "m1.hxs")?;
        let r1 = self.horner(hxs, &Q, true)?;
        let tt = b.build_float_mul(r1, hfx, "m1.rh")?;
        let tt = b.build_float_sub(k(3.0), tt, "m1.tt")?;
        let num = b.build_float_sub(r1, tt, "m1.num")?;
        let den = b.build_float_mul(x, tt, "m1.xt")?;
        let den = b.build_float_sub(k(6.0), den, "m1.den")?;
        let e = b.build_float_div(num, den, "m1.q")?;
        let e = b.build_float_mul(hxs, e, "m1.e")?;
        // k = 0: x - (x·e - hxs); |a| < 2^-25: a itself.
        let r0 = b.build_float_mul(x, e, "m1.xe")?;
        let r0 = b.build_float_sub(r0, hxs, "m1.r00")?;
        let r0 = b.build_float_sub(x, r0, "m1.r0")?;
        let tiny = b.build_int_compare(IntPredicate::ULT, ha, ic(0x3300_0000), "m1.tiny")?;
        let r0 = sel(tiny, a, r0, "m1.r0t")?;
        // e = x·(e - c) - c - hxs for k ≠ 0.
        let e2 = b.build_float_sub(e, c, "m1.ec")?;
        let e2 = b.build_float_mul(x, e2, "m1.xec")?;
        let e2 = b.build_float_sub(e2, c, "m1.e2c")?;
        let e2 = b.build_float_sub(e2, hxs, "m1.e2")?;
        let ex = b.build_float_sub(e2, x, "m1.ex")?;
        // k = -1: 0.5·(x - e) - 0.5.
        let xe2 = b.build_float_sub(x, e2, "m1.xe2")?;
        let rm1 = b.build_float_mul(k(0.5), xe2, "m1.hm")?;
        let rm1 = b.build_float_sub(rm1, k(0.5), "m1.rm1")?;
        // k = 1: x < -0.25 ? -2·(e - (x + 0.5)) : 1 + 2·(x - e).
        let rp1 = {
            let lt = b.build_float_compare(FloatPredicate::OLT, x, k(-0.25), "m1.q4")?;
            let xh = b.build_float_add(x, k(0.5), "m1.xh")?;
            let u = b.build_float_sub(e2, xh, "m1.u")?;
            let u = b.build_float_mul(k(-2.0), u, "m1.u2")?;
            let v = b.build_float_mul(k(2.0), xe2, "m1.v2")?;
            let v = b.build_float_add(k(1.0), v, "m1.v")?;
            sel(lt, u, v, "m1.rp1")?
        };
        // Otherwise y·2^k with y = 1 - (e - x) (k ≤ -2 or k > 56, then minus 1),
        // (1 - 2^-k) - (e - x) (k < 23) or (x - (e + 2^-k)) + 1.
        let ksh = b.build_left_shift(kk, ic(23), "m1.ksh")?;
        let scale = |y: FloatValue<'ctx>, n: &str| -> Result<FloatValue<'ctx>> {
            let yi = b.build_bit_cast(y, i32t, n)?.into_int_value();
            let yi = b.build_int_add(yi, ksh, n)?;
            Ok(b.build_bit_cast(yi, f32t, n)?.into_float_value())
        };
        let p2 = b.build_int_sub(ic(127), kk, "m1.p2e")?;
        let p2 = b.build_left_shift(p2, ic(23), "m1.p2s")?;
        let p2 = b.build_bit_cast(p2, f32t, "m1.p2")?.into_float_value();
        let far = b.build_float_sub(k(1.0), ex, "m1.far0")?;
        let far = scale(far, "m1.fars")?;
        let far = b.build_float_sub(far, k(1.0), "m1.far")?;
        let mid = b.build_float_sub(k(1.0), p2, "m1.omp")?;
        let mid = b.build_float_sub(mid, ex, "m1.mid0")?;
        let mid = scale(mid, "m1.mid")?;
        let high = b.build_float_add(e2, p2, "m1.ep")?;
        let high = b.build_float_sub(x, high, "m1.hi0")?;
        let high = b.build_float_add(high, k(1.0), "m1.hi1")?;
        let high = scale(high, "m1.high")?;
        let kis = |v: i32, p: IntPredicate, n: &str| b.build_int_compare(p, kk, ic(v), n);
        let r = sel(kis(23, IntPredicate::SLT, "m1.lt23")?, mid, high, "m1.r23")?;
        let out = b.build_or(
            kis(-2, IntPredicate::SLE, "m1.le2")?,
            kis(56, IntPredicate::SGT, "m1.gt56")?,
            "m1.out",
        )?;
        let r = sel(out, far, r, "m1.rf")?;
        let r = sel(kis(1, IntPredicate::EQ, "m1.is1")?, rp1, r, "m1.r1")?;
        let r = sel(kis(-1, IntPredicate::EQ, "m1.ism1")?, rm1, r, "m1.rm")?;
        sel(kis(0, IntPredicate::EQ, "m1.is0")?, r0, r, "m1")
    }
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `tanhf(x)` for an f32 `x`: glibc's `s_tanhf.c` (Sun's; Rust's `f32::tanh`, which the
    /// reference interpreter calls, is the C library's `tanhf`), every branch computed and the
    /// right one selected so that it vectorises. Its one `expm1f` ([`Emitter::expm1f_reduced`],
    /// glibc's algorithm) takes `2|x|` for `|x| ≥ 1` and `-2|x|` below, so the result is glibc
    /// 2.36's bit for bit on every f32 input (checked exhaustively on x86-64).
    pub(crate) fn tanhf(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        let f32t = self.ctx.f32_type();
        let i32t = self.ctx.i32_type();
        let k = |v: f32| f32t.const_float(v as f64);
        let ic = |v: u32| i32t.const_int(v as u64, false);
        let sel =
            |c, x: FloatValue<'ctx>, y: FloatValue<'ctx>, n: &str| -> Result<FloatValue<'ctx>> {
                Ok(b.build_select(c, x, y, n)?.into_float_value())
            };
        let bits = b.build_bit_cast(x, i32t, "th.bits")?.into_int_value();
        let ix = b.build_and(bits, ic(0x7fff_ffff), "th.ix")?;
        let below = |t: u32, n: &str| b.build_int_compare(IntPredicate::ULT, ix, ic(t), n);
        // |x| ≥ 22, inf and NaN compute with |x| = 1 (no poison from the float → int
        // conversion) and are replaced at the end.
        let in_range = below(0x41b0_0000, "th.rng")?;
        let ax = b.build_bit_cast(ix, f32t, "th.ax")?.into_float_value();
        let ax = sel(in_range, ax, k(1.0), "th.axc")?;
        let small = below(0x3f80_0000, "th.lt1")?;
        let two = sel(small, k(-2.0), k(2.0), "th.two")?;
        let a = b.build_float_mul(two, ax, "th.a")?;
        let t = self.expm1f_reduced(a)?;
        let t2 = b.build_float_add(t, k(2.0), "th.t2")?;
        // |x| ≥ 1: 1 - 2/(t + 2); below: -t/(t + 2) (one division, its numerator selected).
        let nt = b.build_float_neg(t, "th.nt")?;
        let num = sel(small, nt, k(2.0), "th.num")?;
        let q = b.build_float_div(num, t2, "th.q")?;
        let zb = b.build_float_sub(k(1.0), q, "th.zb")?;
        let z = sel(small, q, zb, "th.z")?;
        let z = sel(in_range, z, k(1.0), "th.z1")?;
        let neg = b.build_int_compare(IntPredicate::SLT, bits, ic(0), "th.neg")?;
        let nz = b.build_float_neg(z, "th.nz")?;
        let y = sel(neg, nz, z, "th.y")?;
        // |x| < 2^-55 (±0 and subnormals included): x·(1 + x), which is x.
        let y = sel(below(0x2400_0000, "th.tiny")?, x, y, "th.yt")?;
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "th.nan")?;
        let quiet = b.build_float_add(x, x, "th.quiet")?;
        sel(nan, quiet, y, "tanh")
    }
}
