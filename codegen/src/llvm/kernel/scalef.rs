//! `u·2^q` for the f32 polynomials (`exp`; `tanh` builds its `2^q` from the rounding's
//! exponent bits, exact for its `q ≤ 27`, and `erf` has none) on AVX-512: one
//! `vscalefps` per vector instead of the eight instructions of the generic form (`q` as an
//! integer from the rounding's bits, halve it, build two powers of two from exponent bits, two
//! multiplies), or the three of its form for `q ≤ 63` (`exp` of an argument `≤ 0`: `u`
//! computed scaled by `2^-64`, then one multiply by `2^(q + 64)`) ([`ScaleRange`]).
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
//! `codegen/tests/llvm_math.rs` checks the kernels against the generic build on every input
//! class, and this module's test each vector variant against the scalar function.

use super::{declare, Emitter};
use crate::llvm::error::{LlvmError, Result};
use crate::llvm::options::{avx512f, feature};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::TargetMachine;
use inkwell::types::FunctionType;
use inkwell::values::{
    BasicMetadataValueEnum, BasicValueEnum, CallSiteValue, FloatValue, FunctionValue, IntValue,
};
use inkwell::FloatPredicate;

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
    /// The forms a target with LLVM feature string `features` (`+avx512f,-avx512vl,…`) has,
    /// read as LLVM reads it: the last `+f`/`-f` of a feature wins, and turning off a feature
    /// AVX-512F builds on (`-avx2`, `-fma`, …) turns it off too. Anything else is `Generic`:
    /// emitting `vscalefps` for a target without it would abort LLVM's code generator.
    pub fn for_features(features: &str) -> Scalef {
        if !cfg!(target_arch = "x86_64") || !avx512f(features) {
            Scalef::Generic
        } else if feature(features, "avx512vl") == Some(true) {
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

/// `2^q` for `-126 ≤ q ≤ 127`, from exponent bits (also `tanh`'s `2^q`, kernel module `poly`).
pub(super) fn pow2i<'ctx>(
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

/// The generic form for a float `q` (the scalar function's): [`halves`] of `q` converted to
/// an integer; NaN for a NaN `u` and `q` (`exp` of NaN), as `vscalefps` gives: a NaN `q` is
/// taken as 0 (converting it to an integer would be poison).
fn generic<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    u: FloatValue<'ctx>,
    q: FloatValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let i32t = ctx.i32_type();
    let nan = b.build_float_compare(FloatPredicate::UNO, q, q, "sc.nan")?;
    let zero = ctx.f32_type().const_zero();
    let q = b.build_select(nan, zero, q, "sc.q")?.into_float_value();
    let qi = b.build_float_to_signed_int(q, i32t, "sc.qi")?;
    halves(ctx, b, u, qi)
}

/// `u·2^q` for an integer `|q| ≤ 150` as `u·2^(q>>1)·2^(q - q>>1)`: each factor a normal
/// number, the first product exact, so the second rounds once, as `vscalefps` does.
fn halves<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    u: FloatValue<'ctx>,
    qi: IntValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let i32t = ctx.i32_type();
    let q1 = b.build_right_shift(qi, i32t.const_int(1, false), true, "sc.q1")?;
    let q2 = b.build_int_sub(qi, q1, "sc.q2")?;
    let r = b.build_float_mul(u, pow2i(ctx, b, q1)?, "sc.r1")?;
    Ok(b.build_float_mul(r, pow2i(ctx, b, q2)?, "sc.r")?)
}

/// The offset of [`offset`]: `u` arrives scaled by `2^-OFFSET`, and is scaled by
/// `2^(q + OFFSET)`.
const OFFSET: i32 = 64;

/// `u·2^q` for an integer `-150 ≤ q ≤ 63` (`127 - OFFSET`: `2^(q + OFFSET)` must be a normal
/// f32) from `us = u·2^-64` (exact: the polynomial that computes `u` ran on coefficients
/// scaled by `2^-64`, [`Emitter::prescale`], and its multiply-adds round the same at any
/// power-of-two scale while their results stay normal, which at about `2^-64` they do): one
/// multiply by `2^(q + 64)`, a normal number, so `us·2^(q + 64)` rounds once, as `vscalefps`
/// does, subnormal results included. Two integer instructions and one multiply, where
/// [`halves`] takes five and two.
fn offset<'ctx>(
    ctx: &'ctx Context,
    b: &Builder<'ctx>,
    us: FloatValue<'ctx>,
    qi: IntValue<'ctx>,
) -> Result<FloatValue<'ctx>> {
    let i32t = ctx.i32_type();
    let up = b.build_int_add(qi, i32t.const_int(OFFSET as u64, false), "sc.qo")?;
    Ok(b.build_float_mul(us, pow2i(ctx, b, up)?, "sc.r")?)
}

/// What a `u·2^q` may assume of `q` besides `|q| ≤ 150` (`Emitter::scale_pow2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScaleRange {
    /// Nothing more (`exp` of any argument).
    Any,
    /// `q ≤ 63` (`exp` of an argument `≤ 0`, softmax's): the generic form takes `u`
    /// scaled by `2^-64` and scales it by `2^(q + 64)` ([`offset`]; [`Emitter::prescale`]).
    AtMost63,
}

fn enum_attr(ctx: &Context, name: &str) -> Attribute {
    ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(name), 0)
}

/// An empty function `name` of type `ty` in `module`, marked [`INLINE_LATER`] with the
/// attributes `attrs`, and a builder at its entry.
fn marked_function<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
    ty: FunctionType<'ctx>,
    linkage: Option<Linkage>,
    attrs: &[&str],
) -> (FunctionValue<'ctx>, Builder<'ctx>) {
    let f = module.add_function(name, ty, linkage);
    for a in attrs {
        f.add_attribute(AttributeLoc::Function, enum_attr(ctx, a));
    }
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute(INLINE_LATER, ""),
    );
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(f, "entry"));
    (f, b)
}

/// An empty scalar function `name` of type `ty` whose calls name vector variants, and a
/// builder at its entry: internal, `noinline` until the vectoriser has seen the calls, then
/// inlined by [`inline_after_vectorizing`].
pub(super) fn scalar_function<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
    ty: FunctionType<'ctx>,
) -> (FunctionValue<'ctx>, Builder<'ctx>) {
    let attrs = ["noinline", "nounwind", "readnone", "willreturn"];
    marked_function(ctx, module, name, ty, Some(Linkage::Internal), &attrs)
}

/// An empty vector variant `name` of type `ty`, and a builder at its entry: external until
/// inlined, so that no pass drops it while nothing calls it yet.
pub(super) fn variant_function<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
    ty: FunctionType<'ctx>,
) -> (FunctionValue<'ctx>, Builder<'ctx>) {
    let attrs = ["alwaysinline", "nounwind", "readnone", "willreturn"];
    marked_function(ctx, module, name, ty, None, &attrs)
}

/// For the variant tests here and in `pick`: `void name(T0* a0, …, R* out)`, which loads each
/// operand (element types `operands`, `lanes` of them, or one scalar for `lanes` 1) from its
/// pointer, calls `callee` with them and then `constants` (splat to `lanes`), and stores the
/// result through `out`. Loads and the store are 4-byte aligned: the pointers are chunks of a
/// `Vec<f32>` or `Vec<i32>`.
#[cfg(all(test, target_arch = "x86_64"))]
pub(super) fn variant_caller<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
    callee: FunctionValue<'ctx>,
    lanes: u32,
    operands: &[inkwell::types::BasicTypeEnum<'ctx>],
    constants: &[f32],
) -> Result<()> {
    use inkwell::types::{BasicType, BasicTypeEnum, VectorType};
    use inkwell::values::BasicValue;
    use inkwell::AddressSpace;
    let wide = |t: BasicTypeEnum<'ctx>| -> BasicTypeEnum<'ctx> {
        match (lanes, t) {
            (1, _) => t,
            (_, BasicTypeEnum::FloatType(t)) => t.vec_type(lanes).into(),
            (_, BasicTypeEnum::IntType(t)) => t.vec_type(lanes).into(),
            _ => t,
        }
    };
    let ret = callee
        .get_type()
        .get_return_type()
        .ok_or_else(|| LlvmError::Build {
            message: "a variant that returns nothing".into(),
        })?;
    let mut params: Vec<_> = operands
        .iter()
        .map(|t| t.ptr_type(AddressSpace::default()).into())
        .collect();
    params.push(ret.ptr_type(AddressSpace::default()).into());
    let f = module.add_function(name, ctx.void_type().fn_type(&params, false), None);
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(f, "entry"));
    let aligned4 = |v: inkwell::values::InstructionValue| {
        v.set_alignment(4).map_err(|e| LlvmError::Build {
            message: e.to_string(),
        })
    };
    let mut args = Vec::new();
    for (i, &t) in operands.iter().enumerate() {
        let to = wide(t).ptr_type(AddressSpace::default());
        let ptr = b.build_pointer_cast(param(f, i as u32)?.into_pointer_value(), to, "p")?;
        let v = b.build_load(ptr, "v")?;
        aligned4(v.as_instruction_value().expect("a load"))?;
        args.push(v.into());
    }
    for &c in constants {
        let s = ctx.f32_type().const_float(f64::from(c));
        args.push(match lanes {
            1 => s.into(),
            _ => VectorType::const_vector(&vec![s; lanes as usize]).into(),
        });
    }
    let r = b.build_call(callee, &args, "r")?;
    let r = r.try_as_basic_value().basic().expect("a value");
    let out = b.build_pointer_cast(
        param(f, operands.len() as u32)?.into_pointer_value(),
        ret.as_basic_type_enum().ptr_type(AddressSpace::default()),
        "out",
    )?;
    aligned4(b.build_store(out, r)?)?;
    b.build_return(None)?;
    Ok(())
}

/// Parameter `i` of `f`.
pub(super) fn param<'ctx>(f: FunctionValue<'ctx>, i: u32) -> Result<BasicValueEnum<'ctx>> {
    f.get_nth_param(i).ok_or_else(|| LlvmError::Build {
        message: format!("{} has no parameter {i}", f.get_name().to_string_lossy()),
    })
}

/// Returns the value of `call` from the function `b` is building (a variant returning its
/// intrinsic's result), or an error naming `what` if the call has none.
pub(super) fn return_value<'ctx>(
    b: &Builder<'ctx>,
    call: CallSiteValue<'ctx>,
    what: &str,
) -> Result<()> {
    let r = call
        .try_as_basic_value()
        .basic()
        .ok_or_else(|| LlvmError::Build {
            message: format!("{what} returned nothing"),
        })?;
    b.build_return(Some(&r))?;
    Ok(())
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// A call of the scalar function `scalar` on `args` that names its vector variants,
    /// `{stem}.v{lanes}f32` for each of `widths` (LLVM's vector-function ABI, every parameter
    /// a vector), for the loop vectoriser to substitute.
    pub(super) fn call_with_variants(
        &self,
        scalar: FunctionValue<'ctx>,
        args: &[BasicMetadataValueEnum<'ctx>],
        stem: &str,
        widths: &[u32],
    ) -> Result<FloatValue<'ctx>> {
        let name = scalar.get_name().to_string_lossy().into_owned();
        let call = self.b.build_call(scalar, args, "v")?;
        let kinds = "v".repeat(args.len());
        let variants: Vec<String> = widths
            .iter()
            .map(|l| format!("_ZGV_LLVM_N{l}{kinds}_{name}({stem}.v{l}f32)"))
            .collect();
        call.add_attribute(
            AttributeLoc::Function,
            self.ctx
                .create_string_attribute("vector-function-abi-variant", &variants.join(",")),
        );
        call.try_as_basic_value()
            .basic()
            .map(|v| v.into_float_value())
            .ok_or_else(|| self.err(format!("{name} returned nothing")))
    }
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
    let (f, b) = variant_function(
        ctx,
        module,
        &name,
        vt.fn_type(&[vt.into(), vt.into()], false),
    );
    let (u, q) = (param(f, 0)?.into(), param(f, 1)?.into());
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
    return_value(&b, r, &format!("{name}: vscalefps"))?;
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
    let (f, b) = scalar_function(
        ctx,
        module,
        SCALAR,
        f32t.fn_type(&[f32t.into(), f32t.into()], false),
    );
    let r = generic(
        ctx,
        &b,
        param(f, 0)?.into_float_value(),
        param(f, 1)?.into_float_value(),
    )?;
    b.build_return(Some(&r))?;
    for &lanes in widths {
        define_variant(ctx, module, lanes)?;
    }
    Ok(f)
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The power of two by which [`Emitter::scale_pow2`] under `range` expects its `u`
    /// scaled: `-64` for the generic form's [`ScaleRange::AtMost63`] ([`offset`]), else 0.
    /// The caller scales the coefficients of the polynomial that computes `u`.
    pub(crate) fn prescale(&self, range: ScaleRange) -> i32 {
        match (self.scalef.widths().is_empty(), range) {
            (true, ScaleRange::AtMost63) => -OFFSET,
            _ => 0,
        }
    }

    /// `u·2^q` for an f32 `u` in `[0.5, 2]` (times `2^prescale(range)`) and an integral f32
    /// `|q| ≤ 150` within `range`, `qi` being `q` as an i32 (any value where `q` is NaN), or
    /// NaN for a NaN `u` and `q` (see the module docs). The generic form uses `qi` (an integer
    /// from the rounding's bits is one instruction, converting `q` three with its NaN guard);
    /// `vscalefps` takes `q`.
    pub(crate) fn scale_pow2(
        &self,
        u: FloatValue<'ctx>,
        q: FloatValue<'ctx>,
        qi: IntValue<'ctx>,
        range: ScaleRange,
    ) -> Result<FloatValue<'ctx>> {
        let widths = self.scalef.widths();
        if widths.is_empty() {
            return match range {
                ScaleRange::Any => halves(self.ctx, &self.b, u, qi),
                ScaleRange::AtMost63 => offset(self.ctx, &self.b, u, qi),
            };
        }
        let f = define_scalar(self.ctx, self.module, widths)?;
        self.call_with_variants(f, &[u.into(), q.into()], "smelt.scalef", widths)
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Feature strings as LLVM reads them: the last entry of a feature wins, and turning off
    /// what AVX-512F builds on turns it off.
    #[test]
    fn features_are_read_as_llvm_reads_them() {
        let cases = [
            ("", Scalef::Generic),
            ("+avx2,+fma", Scalef::Generic),
            ("+avx512f", Scalef::Avx512),
            ("-avx512pf,+avx512f,-avx512er,+avx512vl", Scalef::Avx512Vl),
            ("+avx512f,+avx512vl,-avx512vl", Scalef::Avx512),
            ("+avx512f,+avx512vl,-avx512f", Scalef::Generic),
            ("-avx512f,+avx512f", Scalef::Avx512),
            ("+avx512f,-avx2", Scalef::Generic),
            ("+avx512f,+avx512vl,-fma", Scalef::Generic),
            ("+avx512f,-sse4.2", Scalef::Generic),
            ("avx512f", Scalef::Generic),
        ];
        for (features, want) in cases {
            assert_eq!(Scalef::for_features(features), want, "{features:?}");
        }
    }
    use crate::llvm::{compile, JitOptions};

    /// Each vector variant (4, 8 and 16 lanes, called directly, since which width the loop
    /// vectoriser picks is up to it) gives the generic scalar form's bits, over mantissas
    /// across `[0.5, 2)` and every exponent step from `2^-150` to `2^150`: normal, subnormal,
    /// zero and infinite results.
    #[test]
    fn every_variant_gives_the_generic_bits() {
        if !is_x86_feature_detected!("avx512f") || !is_x86_feature_detected!("avx512vl") {
            eprintln!("skipped: the host has no AVX-512F and VL");
            return;
        }
        let widths = [1u32, 4, 8, 16];
        let module = compile("scalef_variants", &JitOptions::default(), |ctx, module| {
            let scalar = define_scalar(ctx, module, &[4, 8, 16])?;
            let f32t = ctx.f32_type().into();
            for lanes in widths {
                // `void scale<lanes>(float* u, float* q, float* out)`: one call of the variant.
                let callee = if lanes == 1 {
                    scalar
                } else {
                    define_variant(ctx, module, lanes)?
                };
                let name = format!("scale{lanes}");
                variant_caller(ctx, module, &name, callee, lanes, &[f32t, f32t], &[])?;
            }
            Ok(())
        })
        .expect("compiles");
        type F = unsafe extern "C" fn(*const f32, *const f32, *mut f32);
        let run = |lanes: u32, u: &[f32], q: &[f32]| -> Vec<f32> {
            // SAFETY: `scale<lanes>` has this signature (built above).
            let f: F = unsafe { module.function(&format!("scale{lanes}")) }.expect("entry");
            let mut out = vec![0f32; u.len()];
            for ((u, q), o) in u
                .chunks(lanes as usize)
                .zip(q.chunks(lanes as usize))
                .zip(out.chunks_mut(lanes as usize))
            {
                // SAFETY: each chunk holds `lanes` elements, as the function reads and writes.
                unsafe { f(u.as_ptr(), q.as_ptr(), o.as_mut_ptr()) };
            }
            out
        };
        let mut u = Vec::new();
        let mut q = Vec::new();
        for e in -150i32..=150 {
            for m in 0..32u32 {
                // Mantissas spread over [0.5, 2) (`exp` passes about [0.7, 1.42]).
                u.push(0.5 + 1.5 * m as f32 / 31.0 - if m == 31 { f32::EPSILON } else { 0.0 });
                q.push(e as f32);
            }
        }
        // `exp` of NaN: a NaN `u` and `q`, NaN out.
        for _ in 0..17 {
            u.push(f32::NAN);
            q.push(f32::NAN);
        }
        while u.len() % 16 != 0 {
            u.push(1.0);
            q.push(0.0);
        }
        let want = run(1, &u, &q);
        assert!(want
            .iter()
            .any(|x| *x != 0.0 && !x.is_normal() && x.is_finite()));
        assert!(want.iter().any(|x| x.is_infinite()) && want.contains(&0.0));
        assert_eq!(want.iter().filter(|x| x.is_nan()).count(), 17);
        for lanes in [4, 8, 16] {
            let got = run(lanes, &u, &q);
            for i in 0..u.len() {
                assert_eq!(
                    got[i].to_bits(),
                    want[i].to_bits(),
                    "{lanes} lanes: {} * 2^{} = {:e}, generic {:e}",
                    u[i],
                    q[i],
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[cfg(test)]
mod offset_tests {
    use super::OFFSET;

    /// The largest `q` [`super::ScaleRange::AtMost63`] admits.
    const OFFSET_MAX_Q: i32 = 127 - OFFSET;

    /// `2^e` as an f32 for a normal exponent `e`.
    fn pow2(e: i32) -> f32 {
        f32::from_bits(((127 + e) as u32) << 23)
    }

    /// The arithmetic [`super::offset`] emits, in Rust: for every `q` it admits and `u` across
    /// `[0.5, 2)`, `(u·2^-64)·2^(q + 64)` is `u·2^q` rounded once (the product computed exactly
    /// in f64, then rounded to f32), subnormal results included; one step past
    /// [`OFFSET_MAX_Q`] the second factor is no longer a finite f32.
    #[test]
    fn offset_scaling_rounds_once() {
        let mut subnormal = 0;
        for q in -150..=OFFSET_MAX_Q {
            for k in 0..600u32 {
                let u = f32::from_bits(0x3f00_0000 + k * 0x6d3a); // 0.5 up to 2
                let got = (u * pow2(-OFFSET)) * pow2(q + OFFSET);
                let want = (f64::from(u) * 2f64.powi(q)) as f32;
                assert_eq!(got.to_bits(), want.to_bits(), "u {u:e}, q {q}");
                subnormal += usize::from(got != 0.0 && !got.is_normal());
            }
        }
        assert!(subnormal > 1000, "{subnormal} subnormal results");
        assert!(!f32::from_bits(((127 + OFFSET_MAX_Q + 1 + OFFSET) as u32) << 23).is_finite());
    }
}
