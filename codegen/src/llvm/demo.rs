//! Kernels built by hand with the inkwell builder: test fixtures for the JIT and the CPU
//! runtime, and the pattern the kernel IR code generator follows.
//!
//! - [`build_axpy`]: `void axpy(float* y, const float* x, float a, i64 n)`, `y[i] = a*x[i] + y[i]`
//!   for `i` in `0..n` (a plain C signature).
//! - [`build_axpy_chunk`] and [`build_row_sum_chunk`]: the same work in the chunked kernel
//!   calling convention of the CPU runtime (`smelt_runtime::cpu`):
//!   `void f(i8** args, i64 start, i64 end)`, computing the outer indices `start..end` only.
//!
//! `fmul` then `fadd` with no fast-math flags: each result rounds twice, exactly like the Rust
//! expression `a * x + y`, so tests can compare bit for bit.

use super::error::{LlvmError, Result};
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::types::BasicType;
use inkwell::values::{BasicValueEnum, FloatValue, FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

/// Name of the function [`build_axpy`] defines.
pub const AXPY: &str = "axpy";
/// Name of the function [`build_axpy_chunk`] defines.
pub const AXPY_CHUNK: &str = "axpy_chunk";
/// Name of the function [`build_row_sum_chunk`] defines.
pub const ROW_SUM_CHUNK: &str = "row_sum_chunk";

/// Adds `void axpy(float* noalias y, const float* noalias x, float a, i64 n)`.
pub fn build_axpy<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>) -> Result<()> {
    let f32t = ctx.f32_type();
    let i64t = ctx.i64_type();
    let ptr = f32t.ptr_type(AddressSpace::default());
    let fn_type = ctx
        .void_type()
        .fn_type(&[ptr.into(), ptr.into(), f32t.into(), i64t.into()], false);
    let function = module.add_function(AXPY, fn_type, None);
    no_alias(ctx, function, &[0, 1]);
    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(function, "entry"));
    let y = param(function, 0)?.into_pointer_value();
    let x = param(function, 1)?.into_pointer_value();
    let a = param(function, 2)?.into_float_value();
    let n = param(function, 3)?.into_int_value();
    let zero = i64t.const_zero();
    counted_loop(ctx, &builder, function, zero, n, |b, i| {
        axpy_body(b, y, x, a, i)
    })?;
    builder.build_return(None)?;
    Ok(())
}

/// Adds `void axpy_chunk(i8** args, i64 start, i64 end)` with `args = [y: float*, x: float*,
/// a: float*]`, computing `y[i] = a*x[i] + y[i]` for `i` in `start..end`.
pub fn build_axpy_chunk<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>) -> Result<()> {
    let f32t = ctx.f32_type();
    let (function, builder, [start, end]) = chunk_function(ctx, module, AXPY_CHUNK)?;
    let y = arg_ptr(ctx, &builder, function, 0, f32t)?;
    let x = arg_ptr(ctx, &builder, function, 1, f32t)?;
    let a_ptr = arg_ptr(ctx, &builder, function, 2, f32t)?;
    let a = builder.build_load(a_ptr, "a")?.into_float_value();
    counted_loop(ctx, &builder, function, start, end, |b, i| {
        axpy_body(b, y, x, a, i)
    })?;
    builder.build_return(None)?;
    Ok(())
}

/// Adds `void row_sum_chunk(i8** args, i64 start, i64 end)` with `args = [out: float*,
/// in: float* (row-major, rows x cols), cols: i64*]`: `out[r] = sum of in[r, 0..cols]` in
/// column order, for rows `r` in `start..end`. Each output is summed by one call in a fixed
/// order, so the result does not depend on how rows are split into chunks.
pub fn build_row_sum_chunk<'ctx>(ctx: &'ctx Context, module: &Module<'ctx>) -> Result<()> {
    let f32t = ctx.f32_type();
    let i64t = ctx.i64_type();
    let (function, builder, [start, end]) = chunk_function(ctx, module, ROW_SUM_CHUNK)?;
    let out = arg_ptr(ctx, &builder, function, 0, f32t)?;
    let input = arg_ptr(ctx, &builder, function, 1, f32t)?;
    let cols_ptr = arg_ptr(ctx, &builder, function, 2, i64t)?;
    let cols = builder.build_load(cols_ptr, "cols")?.into_int_value();
    let acc = builder.build_alloca(f32t, "acc")?;
    counted_loop(ctx, &builder, function, start, end, |b, r| {
        b.build_store(acc, f32t.const_zero())?;
        let row = b.build_int_nsw_mul(r, cols, "row")?;
        counted_loop(ctx, b, function, i64t.const_zero(), cols, |b, c| {
            let idx = b.build_int_nsw_add(row, c, "idx")?;
            // SAFETY: `idx < rows * cols`: the calling convention promises `in` holds the
            // whole matrix and `start..end` are valid rows.
            let p = unsafe { b.build_in_bounds_gep(input, &[idx], "pin")? };
            let v = b.build_load(p, "v")?.into_float_value();
            let s = b.build_load(acc, "s")?.into_float_value();
            b.build_store(acc, b.build_float_add(s, v, "s1")?)?;
            Ok(())
        })?;
        // SAFETY: `r` is a valid row, so `out + r` is inside `out`.
        let po = unsafe { b.build_in_bounds_gep(out, &[r], "pout")? };
        b.build_store(po, b.build_load(acc, "total")?)?;
        Ok(())
    })?;
    builder.build_return(None)?;
    Ok(())
}

fn axpy_body<'ctx>(
    b: &Builder<'ctx>,
    y: PointerValue<'ctx>,
    x: PointerValue<'ctx>,
    a: FloatValue<'ctx>,
    i: IntValue<'ctx>,
) -> Result<()> {
    // SAFETY: `i` is in the index range the caller promised `x` and `y` cover.
    let (py, px) = unsafe {
        (
            b.build_in_bounds_gep(y, &[i], "py")?,
            b.build_in_bounds_gep(x, &[i], "px")?,
        )
    };
    let vx = b.build_load(px, "x")?.into_float_value();
    let vy = b.build_load(py, "y")?.into_float_value();
    let ax = b.build_float_mul(a, vx, "ax")?;
    b.build_store(py, b.build_float_add(ax, vy, "axpy")?)?;
    Ok(())
}

/// Declares `void name(i8** noalias args, i64 start, i64 end)`, positions a builder in its entry
/// block and returns it with `start` and `end`.
fn chunk_function<'ctx>(
    ctx: &'ctx Context,
    module: &Module<'ctx>,
    name: &str,
) -> Result<(FunctionValue<'ctx>, Builder<'ctx>, [IntValue<'ctx>; 2])> {
    let i64t = ctx.i64_type();
    let args = ctx
        .i8_type()
        .ptr_type(AddressSpace::default())
        .ptr_type(AddressSpace::default());
    let fn_type = ctx
        .void_type()
        .fn_type(&[args.into(), i64t.into(), i64t.into()], false);
    let function = module.add_function(name, fn_type, None);
    let builder = ctx.create_builder();
    builder.position_at_end(ctx.append_basic_block(function, "entry"));
    let range = [
        param(function, 1)?.into_int_value(),
        param(function, 2)?.into_int_value(),
    ];
    Ok((function, builder, range))
}

/// Loads `args[index]` and casts it to a pointer to `elem`.
fn arg_ptr<'ctx>(
    ctx: &'ctx Context,
    builder: &Builder<'ctx>,
    function: FunctionValue<'ctx>,
    index: u64,
    elem: impl BasicType<'ctx>,
) -> Result<PointerValue<'ctx>> {
    let args = param(function, 0)?.into_pointer_value();
    let i = ctx.i64_type().const_int(index, false);
    // SAFETY: the calling convention promises `args` holds one pointer per kernel argument.
    let slot = unsafe { builder.build_in_bounds_gep(args, &[i], "slot")? };
    let raw = builder.build_load(slot, "arg")?.into_pointer_value();
    let typed = elem.ptr_type(AddressSpace::default());
    Ok(builder.build_pointer_cast(raw, typed, "argp")?)
}

/// Emits `for (i = start; i < end; i++) body(i)`; leaves the builder after the loop.
fn counted_loop<'ctx>(
    ctx: &'ctx Context,
    builder: &Builder<'ctx>,
    function: FunctionValue<'ctx>,
    start: IntValue<'ctx>,
    end: IntValue<'ctx>,
    body: impl FnOnce(&Builder<'ctx>, IntValue<'ctx>) -> Result<()>,
) -> Result<()> {
    let i64t = ctx.i64_type();
    let pre = builder
        .get_insert_block()
        .ok_or(inkwell::builder::BuilderError::UnsetPosition)?;
    let body_block = ctx.append_basic_block(function, "loop");
    let exit = ctx.append_basic_block(function, "loop.exit");
    let nonempty = builder.build_int_compare(IntPredicate::SLT, start, end, "nonempty")?;
    builder.build_conditional_branch(nonempty, body_block, exit)?;
    builder.position_at_end(body_block);
    let i = builder.build_phi(i64t, "i")?;
    i.add_incoming(&[(&start, pre)]);
    let iv = i.as_basic_value().into_int_value();
    body(builder, iv)?;
    let next = builder.build_int_nsw_add(iv, i64t.const_int(1, false), "i.next")?;
    let latch = builder
        .get_insert_block()
        .ok_or(inkwell::builder::BuilderError::UnsetPosition)?;
    i.add_incoming(&[(&next, latch)]);
    let more = builder.build_int_compare(IntPredicate::SLT, next, end, "more")?;
    builder.build_conditional_branch(more, body_block, exit)?;
    builder.position_at_end(exit);
    Ok(())
}

fn no_alias(ctx: &Context, function: FunctionValue<'_>, params: &[u32]) {
    let kind = Attribute::get_named_enum_kind_id("noalias");
    for &p in params {
        function.add_attribute(AttributeLoc::Param(p), ctx.create_enum_attribute(kind, 0));
    }
}

/// Parameter `n` of a function this file declared (so its type is known).
fn param<'ctx>(function: FunctionValue<'ctx>, n: u32) -> Result<BasicValueEnum<'ctx>> {
    function.get_nth_param(n).ok_or_else(|| LlvmError::Build {
        message: format!("function has no parameter {n}"),
    })
}
