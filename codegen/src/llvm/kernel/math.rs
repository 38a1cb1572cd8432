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
