//! Per-lane table lookups for piecewise polynomials: `pick4(k, [c0, c1, c2, c3])` is `c_k`
//! for an integer `0 ≤ k ≤ 3` computed per element (which interval of the argument an
//! element falls in), so that one polynomial evaluation serves every interval, each lane
//! with its own coefficients.
//!
//! The kernel body is scalar IR that LLVM's loop vectoriser widens (see `scalef`, whose
//! mechanism this shares). Where the target has AVX, the body calls `smelt.pick4.f32(k, c0,
//! c1, c2, c3)`, a scalar function holding a chain of three selects, whose call sites name
//! vector variants of 4, 8 and (with AVX-512F) 16 lanes: each one `vpermilps` with the table
//! `[c0, c1, c2, c3]` in every 128-bit lane and `k` as the control (the instruction reads a
//! lane's low two bits). On AMD Zen 3 `vpermilps` runs on a shuffle pipe, not on the two
//! pipes that run every multiply and multiply-add. Other targets get the select chain
//! inline. Both give `c_k` exactly, so the result is the same bits either way.
//!
//! The vector variants take the table from lane 0 of their four float arguments: the
//! vectoriser passes them as splats of the loop-invariant constants the body calls with
//! (`Emitter::pick4` takes `f32` constants only), and after inlining the table is one
//! constant vector.

use super::scalef::{param, return_value, scalar_function, variant_function};
use super::{declare, Emitter};
use crate::llvm::error::Result;
use crate::llvm::options::{avx, avx512f};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::values::{FloatValue, FunctionValue, IntValue};
use inkwell::IntPredicate;

/// The scalar function the kernel body calls.
const SCALAR: &str = "smelt.pick4.f32";

/// Which `vpermilps` forms a target has, from its LLVM feature string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// None: the select chain inline (CPUs without AVX, NVPTX).
    #[default]
    Generic,
    /// AVX: 4 and 8 lanes.
    Avx,
    /// AVX-512F: 4, 8 and 16 lanes.
    Avx512,
}

impl Pick {
    /// The forms a target with LLVM feature string `features` has (read as
    /// `scalef::Scalef::for_features` reads it).
    pub fn for_features(features: &str) -> Pick {
        if !cfg!(target_arch = "x86_64") {
            Pick::Generic
        } else if avx512f(features) {
            Pick::Avx512
        } else if avx(features) {
            Pick::Avx
        } else {
            Pick::Generic
        }
    }

    /// The vector widths with a variant.
    fn widths(self) -> &'static [u32] {
        match self {
            Pick::Generic => &[],
            Pick::Avx => &[4, 8],
            Pick::Avx512 => &[4, 8, 16],
        }
    }
}

/// `c[k]` for `0 ≤ k ≤ 3` by three selects (`k` outside gives `c[0]`).
fn select_chain<'ctx>(
    b: &Builder<'ctx>,
    k: IntValue<'ctx>,
    c: [FloatValue<'ctx>; 4],
) -> Result<FloatValue<'ctx>> {
    let ty = k.get_type();
    let mut r = c[0];
    for (i, ci) in c.iter().enumerate().skip(1) {
        let is =
            b.build_int_compare(IntPredicate::EQ, k, ty.const_int(i as u64, false), "pk.is")?;
        r = b.build_select(is, *ci, r, "pk")?.into_float_value();
    }
    Ok(r)
}

/// The vector variant of `lanes` lanes, defined in `module` if it is not there yet.
fn define_variant<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    lanes: u32,
) -> Result<FunctionValue<'ctx>> {
    let name = format!("smelt.pick4.v{lanes}f32");
    if let Some(f) = module.get_function(&name) {
        return Ok(f);
    }
    let vt = ctx.f32_type().vec_type(lanes);
    let it = ctx.i32_type().vec_type(lanes);
    let ty = vt.fn_type(
        &[it.into(), vt.into(), vt.into(), vt.into(), vt.into()],
        false,
    );
    let (f, b) = variant_function(ctx, module, &name, ty);
    let k = param(f, 0)?.into_vector_value();
    let i32t = ctx.i32_type();
    let mut table = vt.get_undef();
    for lane in 0..lanes {
        let c = param(f, 1 + lane % 4)?.into_vector_value();
        let v = b.build_extract_element(c, i32t.const_zero(), "pk.c")?;
        table = b.build_insert_element(table, v, i32t.const_int(lane as u64, false), "pk.t")?;
    }
    let intrinsic = match lanes {
        4 => "llvm.x86.avx.vpermilvar.ps",
        8 => "llvm.x86.avx.vpermilvar.ps.256",
        _ => "llvm.x86.avx512.vpermilvar.ps.512",
    };
    let intr = declare(
        module,
        intrinsic,
        vt.fn_type(&[vt.into(), it.into()], false),
    );
    let r = b.build_call(intr, &[table.into(), k.into()], "r")?;
    return_value(&b, r, &format!("{name}: vpermilps"))?;
    Ok(f)
}

/// The scalar function, defined in `module` with its variants if it is not there yet.
fn define_scalar<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    widths: &[u32],
) -> Result<FunctionValue<'ctx>> {
    if let Some(f) = module.get_function(SCALAR) {
        return Ok(f);
    }
    let (int, float) = (ctx.i32_type().into(), ctx.f32_type().into());
    let ty = ctx
        .f32_type()
        .fn_type(&[int, float, float, float, float], false);
    let (f, b) = scalar_function(ctx, module, SCALAR, ty);
    let c = [
        param(f, 1)?.into_float_value(),
        param(f, 2)?.into_float_value(),
        param(f, 3)?.into_float_value(),
        param(f, 4)?.into_float_value(),
    ];
    let r = select_chain(&b, param(f, 0)?.into_int_value(), c)?;
    b.build_return(Some(&r))?;
    for &lanes in widths {
        define_variant(ctx, module, lanes)?;
    }
    Ok(f)
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `c[k]` for an i32 `0 ≤ k ≤ 3` (see the module docs).
    pub(crate) fn pick4(&self, k: IntValue<'ctx>, c: [f32; 4]) -> Result<FloatValue<'ctx>> {
        let f32t = self.f32t();
        let cv = c.map(|v| f32t.const_float(v as f64));
        let widths = self.pick.widths();
        if widths.is_empty() {
            return select_chain(&self.b, k, cv);
        }
        let f = define_scalar(self.ctx, self.module, widths)?;
        let args = [
            k.into(),
            cv[0].into(),
            cv[1].into(),
            cv[2].into(),
            cv[3].into(),
        ];
        self.call_with_variants(f, &args, "smelt.pick4", widths)
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::super::scalef::variant_caller;
    use super::*;
    use crate::llvm::{compile, JitOptions};

    /// Feature strings as LLVM reads them: AVX needs every SSE level, AVX-512F its own list.
    #[test]
    fn features_are_read_as_llvm_reads_them() {
        let cases = [
            ("", Pick::Generic),
            ("+sse4.2", Pick::Generic),
            ("+avx", Pick::Avx),
            ("+avx2,+fma,+avx", Pick::Avx),
            ("+avx,-avx", Pick::Generic),
            ("+avx,-sse4.1", Pick::Generic),
            ("+avx512f", Pick::Avx512),
            ("+avx512f,-avx2", Pick::Generic),
            ("+avx512f,-avx2,+avx", Pick::Avx),
        ];
        for (features, want) in cases {
            assert_eq!(Pick::for_features(features), want, "{features:?}");
        }
    }

    /// The scalar function and each vector variant the host can run (4 and 8 lanes with AVX,
    /// 16 with AVX-512F), called directly, give `c[k]` for every `k` in every lane.
    #[test]
    fn every_variant_picks_the_entry_of_k() {
        let mut widths = vec![1u32];
        if is_x86_feature_detected!("avx") {
            widths.extend([4, 8]);
        }
        if is_x86_feature_detected!("avx512f") {
            widths.push(16);
        }
        if widths.len() == 1 {
            eprintln!("skipped: the host has no AVX");
        }
        let c = [0.25f32, -1.5, f32::MIN_POSITIVE, 3.0e38];
        let module = compile("pick_variants", &JitOptions::default(), |ctx, module| {
            let scalar = define_scalar(ctx, module, &[])?;
            for &lanes in &widths {
                // `void pick<lanes>(i32* k, float* out)`: one call with the table `c`.
                let callee = if lanes == 1 {
                    scalar
                } else {
                    define_variant(ctx, module, lanes)?
                };
                let name = format!("pick{lanes}");
                let i32t = ctx.i32_type().into();
                variant_caller(ctx, module, &name, callee, lanes, &[i32t], &c)?;
            }
            Ok(())
        })
        .expect("compiles");
        type F = unsafe extern "C" fn(*const i32, *mut f32);
        let ks: Vec<i32> = (0..64).map(|i| (i * 7 + i / 5) % 4).collect();
        for &lanes in &widths {
            // SAFETY: `pick<lanes>` has this signature (built above).
            let f: F = unsafe { module.function(&format!("pick{lanes}")) }.expect("entry");
            let mut out = vec![0f32; ks.len()];
            for (k, o) in ks
                .chunks(lanes as usize)
                .zip(out.chunks_mut(lanes as usize))
            {
                // SAFETY: each chunk holds `lanes` elements, as the function reads and writes.
                unsafe { f(k.as_ptr(), o.as_mut_ptr()) };
            }
            for (k, o) in ks.iter().zip(&out) {
                assert_eq!(
                    o.to_bits(),
                    c[*k as usize].to_bits(),
                    "{lanes} lanes, k {k}"
                );
            }
        }
    }
}
