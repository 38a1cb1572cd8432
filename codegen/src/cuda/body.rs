//! One SSA instruction → one C statement, with the interpreter's value semantics.
//!
//! f32/f64 `+ - * /` go through `__fadd_rn`/`__fmul_rn`/… (`__dadd_rn` …): they are never
//! contracted into FMAs, so basic arithmetic is bit-identical to the interpreter whatever
//! `--fmad` says. Transcendentals use CUDA's accurate math functions (`expf`, `erff`, `tanhf`;
//! no `__expf`-style intrinsics), whose results may differ from the host's libm by an ulp or
//! two.

use super::ctx::{compute_type, const_lit, load_conv, round, store_conv, Ctx};
use smelt_ir::{BinaryOp, DType, UnaryOp};
use smelt_passes::kernel::{Access, BufferId, Inst, InstOp, Store, Ty, ValueId};
use std::fmt::Write;

/// How a printer wants one load read.
pub(super) enum LoadHow {
    /// From the buffer's parameter.
    Global,
    /// From a storage-typed element expression (a vector pack lane).
    Raw(String),
    /// From a compute-typed register (a cached row element).
    Cached(String),
    /// From global memory, also saved into this compute-typed register.
    GlobalAndCache(String),
}

fn v(id: ValueId) -> String {
    format!("v{}", id.0)
}

/// Prints `insts` at indentation `ind`; `how` chooses where each load reads from.
pub(super) fn emit_body(
    cx: &mut Ctx,
    out: &mut String,
    ind: &str,
    insts: &[Inst],
    how: &dyn Fn(BufferId, &Access) -> LoadHow,
) {
    for inst in insts {
        let ty = cx.ctype(inst.ty);
        let expr = match &inst.op {
            InstOp::Load { buffer, access } => {
                let d = cx.dtype(*buffer);
                match how(*buffer, access) {
                    LoadHow::Raw(e) => load_conv(d, &e),
                    LoadHow::Cached(r) => r,
                    h => {
                        let e = global_load(cx, *buffer, access, d);
                        if let LoadHow::GlobalAndCache(r) = h {
                            let _ = writeln!(out, "{ind}const {ty} {} = {e};", v(inst.dst));
                            let _ = writeln!(out, "{ind}{r} = {};", v(inst.dst));
                            continue;
                        }
                        e
                    }
                }
            }
            op => expr(cx, inst.ty, op),
        };
        let _ = writeln!(out, "{ind}const {ty} {} = {expr};", v(inst.dst));
    }
}

/// `param[address]` converted to the compute type (range-checked when the index is computed,
/// see [`Ctx::checked_load`]).
pub(super) fn global_load(cx: &mut Ctx, b: BufferId, a: &Access, d: DType) -> String {
    let param = load_param(cx, b);
    let e = cx.checked_load(&param, b, a);
    load_conv(d, &e)
}

/// The parameter buffer `b` is read through.
pub(super) fn load_param(cx: &mut Ctx, b: BufferId) -> String {
    match cx.read_param.get(&b).or_else(|| cx.write_param.get(&b)) {
        Some(p) => p.clone(),
        None => {
            cx.errors
                .push(format!("reads buffer b{}, which is not a parameter", b.0));
            "in0".to_string()
        }
    }
}

/// The statement of a store: `out0[addr] = conv(v);`.
pub(super) fn store_stmt(cx: &mut Ctx, s: &Store) -> String {
    let param = store_param(cx, s.buffer);
    let value = store_value(cx, s);
    cx.checked_store(&param, s.buffer, &s.access, &value)
}

pub(super) fn store_param(cx: &mut Ctx, b: BufferId) -> String {
    match cx.write_param.get(&b) {
        Some(p) => p.clone(),
        None => {
            cx.errors
                .push(format!("writes buffer b{}, which is not an output", b.0));
            "out0".to_string()
        }
    }
}

/// The storage-typed value a store writes.
pub(super) fn store_value(cx: &mut Ctx, s: &Store) -> String {
    let d = cx.dtype(s.buffer);
    let value = match cx.ty(s.value) {
        Ty::Data(vd) if vd != d => cast(vd, d, &v(s.value)),
        Ty::Index => format!("({}){}", compute_type(d), v(s.value)),
        _ => v(s.value),
    };
    store_conv(d, &value)
}

fn expr(cx: &mut Ctx, ty: Ty, op: &InstOp) -> String {
    let idx = cx.idx;
    match op {
        InstOp::LoopVar(d) => cx.var(*d),
        InstOp::IndexConst(c) => cx.index_lit(*c),
        InstOp::IndexAdd(a, b) => format!("{} + {}", v(*a), v(*b)),
        InstOp::IndexMul(a, b) => format!("{} * {}", v(*a), v(*b)),
        InstOp::IndexDiv(a, b) => format!("{} / {}", v(*a), v(*b)),
        InstOp::IndexRem(a, b) => format!("{} % {}", v(*a), v(*b)),
        InstOp::IndexLt(a, b) => format!("{} < {}", v(*a), v(*b)),
        InstOp::ToIndex(a) => format!("({idx}){}", v(*a)),
        InstOp::Const(s) => match ty {
            Ty::Data(d) => const_lit(d, *s),
            Ty::Index => cx.index_lit(s.as_i64()),
        },
        InstOp::Load { .. } => unreachable_load(),
        InstOp::Select(c, a, b) => format!("{} ? {} : {}", v(*c), v(*a), v(*b)),
        InstOp::Cast(a) => match (cx.ty(*a), ty) {
            (Ty::Data(from), Ty::Data(to)) => cast(from, to, &v(*a)),
            (_, Ty::Index) => format!("({idx}){}", v(*a)),
            (Ty::Index, Ty::Data(to)) => {
                let from = if cx.wide { DType::I64 } else { DType::I32 };
                cast(from, to, &v(*a))
            }
        },
        InstOp::Unary(u, a) => {
            let d = match cx.ty(*a) {
                Ty::Data(d) => d,
                Ty::Index => DType::I64,
            };
            unary(*u, d, &v(*a))
        }
        InstOp::Binary(b, x, y) => {
            let d = match cx.ty(*x) {
                Ty::Data(d) => d,
                Ty::Index => DType::I64,
            };
            binary(*b, d, &v(*x), &v(*y))
        }
    }
}

fn unreachable_load() -> String {
    // Loads are printed by `emit_body` itself.
    "0".into()
}

fn int_suffix(d: DType) -> &'static str {
    if d == DType::I64 {
        "i64"
    } else {
        "i32"
    }
}

/// A unary op on a compute value of dtype `d`.
pub(super) fn unary(u: UnaryOp, d: DType, x: &str) -> String {
    use UnaryOp::*;
    if u == LogicalNot {
        return if d == DType::Bool {
            format!("!{x}")
        } else {
            format!("{x} == 0")
        };
    }
    if d == DType::Bool {
        // Only logical_not is typed for bool; anything else is the identity.
        return x.to_string();
    }
    if !d.is_float() {
        let s = int_suffix(d);
        return match u {
            Neg => format!("sm_sub_{s}(0, {x})"),
            Abs => format!("{x} < 0 ? sm_sub_{s}(0, {x}) : {x}"),
            Relu => format!("{x} < 0 ? 0 : {x}"),
            _ => x.to_string(),
        };
    }
    let f = if d == DType::F64 { "" } else { "f" };
    let one = if d == DType::F64 { "1.0" } else { "1.0f" };
    let zero = if d == DType::F64 { "0.0" } else { "0.0f" };
    let (div, add) = if d == DType::F64 {
        ("__ddiv_rn", "__dadd_rn")
    } else {
        ("__fdiv_rn", "__fadd_rn")
    };
    let e = match u {
        Neg => format!("-{x}"),
        Abs => format!("fabs{f}({x})"),
        Exp => format!("exp{f}({x})"),
        Log => format!("log{f}({x})"),
        Sqrt => format!("sqrt{f}({x})"),
        Rsqrt => format!("{div}({one}, sqrt{f}({x}))"),
        Reciprocal => format!("{div}({one}, {x})"),
        Sin => format!("sin{f}({x})"),
        Cos => format!("cos{f}({x})"),
        Tanh => format!("tanh{f}({x})"),
        Erf => format!("erf{f}({x})"),
        Sigmoid => format!("{div}({one}, {add}({one}, exp{f}(-{x})))"),
        Relu => format!("{x} < {zero} ? {zero} : {x}"),
        Floor => format!("floor{f}({x})"),
        Ceil => format!("ceil{f}({x})"),
        LogicalNot => unreachable_load(),
    };
    round(d, e)
}

/// A binary op on compute values of dtype `d` (both operands share it).
pub(super) fn binary(b: BinaryOp, d: DType, x: &str, y: &str) -> String {
    use BinaryOp::*;
    let cmp = |op: &str| format!("{x} {op} {y}");
    match b {
        Eq => return cmp("=="),
        Ne => return cmp("!="),
        Lt => return cmp("<"),
        Le => return cmp("<="),
        Gt => return cmp(">"),
        Ge => return cmp(">="),
        LogicalAnd => return format!("({x} != 0) && ({y} != 0)"),
        LogicalOr => return format!("({x} != 0) || ({y} != 0)"),
        _ => {}
    }
    if d == DType::Bool {
        // Arithmetic is not typed for bool; max/min/mul/add as logic for reductions.
        return match b {
            Maximum | Add => format!("{x} || {y}"),
            Minimum | Mul => format!("{x} && {y}"),
            _ => x.to_string(),
        };
    }
    if !d.is_float() {
        let s = int_suffix(d);
        return match b {
            Add => format!("sm_add_{s}({x}, {y})"),
            Sub => format!("sm_sub_{s}({x}, {y})"),
            Mul => format!("sm_mul_{s}({x}, {y})"),
            FloorDiv => format!("sm_floordiv_{s}({x}, {y})"),
            Remainder => format!("sm_rem_{s}({x}, {y})"),
            Pow => format!("sm_pow_{s}({x}, {y})"),
            Maximum => format!("{x} > {y} ? {x} : {y}"),
            Minimum => format!("{x} < {y} ? {x} : {y}"),
            // True division of integers is not typed; the interpreter gives 0.
            _ => "0".into(),
        };
    }
    let (p, s) = if d == DType::F64 {
        ("__d", "f64")
    } else {
        ("__f", "f32")
    };
    let pw = if d == DType::F64 { "pow" } else { "powf" };
    let e = match b {
        Add => format!("{p}add_rn({x}, {y})"),
        Sub => format!("{p}sub_rn({x}, {y})"),
        Mul => format!("{p}mul_rn({x}, {y})"),
        Div => format!("{p}div_rn({x}, {y})"),
        FloorDiv => format!("sm_floordiv_{s}({x}, {y})"),
        Remainder => format!("sm_rem_{s}({x}, {y})"),
        Pow => format!("{pw}({x}, {y})"),
        Maximum => format!("sm_max_{s}({x}, {y})"),
        Minimum => format!("sm_min_{s}({x}, {y})"),
        _ => unreachable_load(),
    };
    round(d, e)
}

/// A cast of compute value `x` from `from` to `to` (the interpreter's rules: float → int
/// truncates and saturates with NaN → 0, ints narrow by wrapping, f64/i64 → f16/bf16 go
/// through f32).
pub(super) fn cast(from: DType, to: DType, x: &str) -> String {
    use DType::*;
    if from == to {
        return x.to_string();
    }
    match (from, to) {
        (_, Bool) => format!("({x} != 0)"),
        (Bool, I32) => format!("(int){x}"),
        (Bool, I64) => format!("(long long){x}"),
        (Bool, F64) => format!("({x} ? 1.0 : 0.0)"),
        (Bool, _) => format!("({x} ? 1.0f : 0.0f)"),
        (I64, I32) => format!("(int)(unsigned)(unsigned long long){x}"),
        (I32, I64) => format!("(long long){x}"),
        (f, I32) if f.is_float() => format!("sm_f2i32((double){x})"),
        (f, I64) if f.is_float() => format!("sm_f2i64((double){x})"),
        (_, F64) => format!("(double){x}"),
        (_, F32) => format!("(float){x}"),
        (F16 | BF16 | F32, t) => round(t, x.to_string()),
        (_, t) => round(t, format!("(float){x}")),
    }
}
