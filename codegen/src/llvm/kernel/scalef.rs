//! `u·2^q` for the f32 polynomials (`exp`, and `tanh`/`erf` through it) on AVX-512: one
//! `vscalefps` per vector instead of the nine instructions of the generic form (convert `q` to
//! an integer, halve it, build two powers of two from exponent bits, two multiplies).
//!
//! The kernel body is scalar IR that LLVM's loop vectoriser widens, and an x86 intrinsic in
//! it would stop that. So the body calls `smelt.scalef.f32(u, q)`, a scalar function holding
//! the generic form, marked `noinline` and carrying, on every call site, a
//! `vector-function-abi-variant` attribute that names its vector variants
//! (`smelt.scalef.v16f32`, and with AVX-512VL `v8f32`/`v4f32`), each one `vscalefps`. The
//! vectoriser replaces the scalar call with the variant of its chosen width. After the
//! `default<On>` pipeline, [`inline_after_vectorizing`] inlines both (the scalar function
//! stays where a loop was not vectorised, e.g. a scalar remainder) and drops them.
//!
//! Results are the same bits as the generic form: `vscalefps` computes `u·2^q` for integral
//! `q` with one rounding, and so does the generic form, whose first factor `u·2^(q>>1)` is
//! exact (a normal number for `|q| ≤ 150`), leaving only the second multiply to round.
//! `codegen/tests/llvm_math.rs` checks it against the generic build on every input class.

use super::{declare, Emitter};
use crate::llvm::error::{LlvmError, Result};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::TargetMachine;
use inkwell::values::{FloatValue, FunctionValue, IntValue};

/// The function attribute marking the scalar function and its vector variants, which
/// [`inline_after_vectorizing`] inlines once the loop vectoriser has run.
const INLINE_LATER: &str = "smelt-inline-after-vectorize";

/// The scalar function the kernel body calls.
const SCALAR: &str = "smelt.scalef.f32";

/// Which AVX-512 `vscalefps` forms a target has, from its LLVM feature string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scalef {
    /// None: the generic form inline (other CPUs, NVPTX).
    #[default]
    Generic,
    /// AVX-512F: 16 lanes.
    Avx512,
    /// AVX-512F and VL: 4, 8 and 16 lanes.
    Avx512Vl,
}

impl Scalef {
    /// The forms a target with LLVM feature string `features` (`+avx512f,-avx512vl,…`) has.
    pub fn for_features(features: &str) -> Scalef {
        let has = |f: &str| features.split(',').any(|x| x == f);
        if !cfg!(target_arch = "x86_64") || !has("+avx512f") {
            Scalef::Generic
        } else if has("+avx512vl") {
            Scalef::Avx512Vl
        } else {
            Scalef::Avx512
        }
    }

    /// The vector widths with a variant.
    fn widths(self) -> &'static [u32] {
        match self {
            Scalef::Generic => &[],
            Scalef::Avx512 => &[16],
            Scalef::Avx512Vl => &[4, 8, 16],
        }
    }
}

/// `2^q` for `-126 ≤ q ≤ 127`, from exponent bits.
fn pow2i<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    q: IntValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let i32t = ctx.i32_type();
    let e = b.build_int_add(q, i32t.const_int(127, false), "p2.e")?;
    let e = b.build_left_shift(e, i32t.const_int(23, false), "p2.s")?;
    Ok(b.build_bit_cast(e, ctx.f32_type(), "p2")?
        .into_float_value())
}

/// The generic form: `u·2^q` for an integral f32 `|q| ≤ 150`, as `u·2^(q>>1)·2^(q - q>>1)`
/// (each factor a normal number).
fn generic<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    u: FloatValue<'ctx>,
    q: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let i32t = ctx.i32_type();
    let qi = b.build_float_to_signed_int(q, i32t, "sc.qi")?;
    let q1 = b.build_right_shift(qi, i32t.const_int(1, false), true, "sc.q1")?;
    let q2 = b.build_int_sub(qi, q1, "sc.q2")?;
    let r = b.build_float_mul(u, pow2i(ctx, b, q1)?, "sc.r1")?;
    Ok(b.build_float_mul(r, pow2i(ctx, b, q2)?, "sc.r")?)
}

fn enum_attr(ctx: &Context, name: &str) -> Attribute {
    ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
}

/// The vector variant of `lanes` lanes, defined in `module` if it is not there yet.
fn define_variant<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    lanes: u32,
) -> Result<FunctionValue<'ctx>> {
    let name = format!("smelt.scalef.v{lanes}f32");
    if let Some(f) = module.get_function(&name) {
        return Ok(f);
    }
    let vt = ctx.f32_type().vec_type(lanes);
    // External until inlined, so that no pass drops it while nothing calls it yet.
    let f = module.add_function(&name, vt.fn_type(&[vt.into(), vt.into()], false), None);
    for a in ["alwaysinline", "nounwind", "readnone", "willreturn"] {
        f.add_attribute(AttributeLoc::Function, enum_attr(ctx, a));
    }
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute(INLINE_LATER, ""),
    );
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(f, "entry"));
    let param = |i| {
        f.get_nth_param(i)
            .map(|p| p.into())
            .ok_or_else(|| LlvmError::Build {
                message: format!("{name} has no parameter {i}"),
            })
    };
    let (u, q) = (param(0)?, param(1)?);
    // `vscalefps` with all lanes on (`undef` pass-through); the 512-bit form also takes the
    // rounding control, 4 = the current mode (MXCSR).
    let r = if lanes == 16 {
        let i16t = ctx.i16_type();
        let i32t = ctx.i32_type();
        let intr = declare(
            module,
            "llvm.x86.avx512.mask.scalef.ps.512",
            vt.fn_type(
                &[vt.into(), vt.into(), vt.into(), i16t.into(), i32t.into()],
                false,
            ),
        );
        b.build_call(
            intr,
            &[
                u,
                q,
                vt.get_undef().into(),
                i16t.const_all_ones().into(),
                i32t.const_int(4, false).into(),
            ],
            "r",
        )?
    } else {
        let i8t = ctx.i8_type();
        let intr = declare(
            module,
            &format!("llvm.x86.avx512.mask.scalef.ps.{}", lanes * 32),
            vt.fn_type(&[vt.into(), vt.into(), vt.into(), i8t.into()], false),
        );
        b.build_call(
            intr,
            &[u, q, vt.get_undef().into(), i8t.const_all_ones().into()],
            "r",
        )?
    };
    let r = r
        .try_as_basic_value()
        .basic()
        .ok_or_else(|| LlvmError::Build {
            message: format!("{name}: vscalefps returned nothing"),
        })?;
    b.build_return(Some(&r))?;
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
    let f32t = ctx.f32_type();
    let f = module.add_function(
        SCALAR,
        f32t.fn_type(&[f32t.into(), f32t.into()], false),
        Some(Linkage::Internal),
    );
    // `noinline` until the vectoriser has seen the calls; then `inline_after_vectorizing`.
    for a in ["noinline", "nounwind", "readnone", "willreturn"] {
        f.add_attribute(AttributeLoc::Function, enum_attr(ctx, a));
    }
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute(INLINE_LATER, ""),
    );
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(f, "entry"));
    let param = |i| {
        f.get_nth_param(i)
            .map(|p| p.into_float_value())
            .ok_or_else(|| LlvmError::Build {
                message: format!("{SCALAR} has no parameter {i}"),
            })
    };
    let r = generic(ctx, &b, param(0)?, param(1)?)?;
    b.build_return(Some(&r))?;
    for &lanes in widths {
        define_variant(ctx, module, lanes)?;
    }
    Ok(f)
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// `u·2^q` for an f32 `u` in `[0.5, 2]` and an integral f32 `|q| ≤ 150` (see the module
    /// docs).
    pub(crate) fn scale_pow2(
        &self,
        u: FloatValue<'ctx>,
        q: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        let widths = self.scalef.widths();
        if widths.is_empty() {
            return generic(self.ctx, &self.b, u, q);
        }
        let f = define_scalar(self.ctx, self.module, widths)?;
        let call = self.b.build_call(f, &[u.into(), q.into()], "sc")?;
        let variants: Vec<String> = widths
            .iter()
            .map(|l| format!("_ZGV_LLVM_N{l}vv_{SCALAR}(smelt.scalef.v{l}f32)"))
            .collect();
        call.add_attribute(
            AttributeLoc::Function,
            self.ctx
                .create_string_attribute("vector-function-abi-variant", &variants.join(",")),
        );
        call.try_as_basic_value()
            .basic()
            .map(|v| v.into_float_value())
            .ok_or_else(|| self.err(format!("{SCALAR} returned nothing")))
    }
}

/// After the optimisation pipeline: inlines the scalar function and its vector variants where
/// they are called and deletes them (see the module docs). Does nothing to a module without
/// them.
pub(crate) fn inline_after_vectorizing(module: &Module<'_>, machine: &TargetMachine) -> Result<()> {
    let ctx = module.get_context();
    let marked: Vec<FunctionValue> = module
        .get_functions()
        .filter(|f| {
            f.get_string_attribute(AttributeLoc::Function, INLINE_LATER)
                .is_some()
        })
        .collect();
    if marked.is_empty() {
        return Ok(());
    }
    let noinline = Attribute::get_named_enum_kind_id("noinline");
    for f in &marked {
        f.remove_enum_attribute(AttributeLoc::Function, noinline);
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_enum_attribute(Attribute::get_named_enum_kind_id("alwaysinline"), 0),
        );
        f.set_linkage(Linkage::Internal);
    }
    let pipeline = "always-inline,globaldce";
    module
        .run_passes(pipeline, machine, PassBuilderOptions::create())
        .map_err(|e| LlvmError::Optimize {
            module: module.get_name().to_string_lossy().into_owned(),
            pipeline: pipeline.to_string(),
            message: e.to_string(),
        })
}
