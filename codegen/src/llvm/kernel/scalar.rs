//! Scalar semantics of kernel bodies: instructions, unary and binary ops. Each formula mirrors
//! `smelt_ir::interp` (`elementwise.rs`) so results match it bit for bit, except f32 `exp`,
//! `tanh` and `erf` (and `sigmoid` through `exp`), integer `floor_div`/`remainder` by zero
//! (0 here) and, with the `libm` crate's `erf` in the interpreter, f64 `erf`. Transcendental
//! functions are LLVM intrinsics (`llvm.exp`, `llvm.log`, `llvm.sin` … lowered to the C
//! library, as Rust's `f32::exp` is) or C library calls (f64 `tanh`, `erf`) that the JIT
//! (`orc.rs`) resolves in the process, except f32 `exp`, `tanh` and `erf`, which are emitted inline so
//! that they vectorise: by default as f32 polynomials within an ulp or two ([`super::poly`]),
//! with [`MathMode::Libm`] as the C library computes them (`exp` and `tanh` bit for bit
//! glibc's, `erf` within an ulp of the `libm` crate's; see [`super::math`]).

use super::{declare, Emitter, Val};
use crate::llvm::error::Result;
use crate::llvm::options::MathMode;
use inkwell::types::{BasicType, BasicTypeEnum, FloatType, IntType};
use inkwell::values::{BasicValueEnum, FloatValue, InstructionOpcode, IntValue, Operand};
use inkwell::{FloatPredicate, IntPredicate};
use smelt_ir::{BinaryOp, DType, UnaryOp};
use smelt_passes::kernel::{Inst, InstOp, Ty, ValueId};

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The LLVM type values of `ty` are computed in (f16/bf16: f32; bool: i1).
    pub(crate) fn compute_type(&self, ty: Ty) -> BasicTypeEnum<'ctx> {
        match ty {
            Ty::Index => self.index_t.into(),
            Ty::Data(d) => match d {
                DType::Bool => self.ctx.bool_type().into(),
                DType::I32 => self.ctx.i32_type().into(),
                DType::I64 => self.ctx.i64_type().into(),
                DType::F16 | DType::BF16 | DType::F32 => self.ctx.f32_type().into(),
                DType::F64 => self.ctx.f64_type().into(),
            },
        }
    }

    pub(crate) fn f32t(&self) -> FloatType<'ctx> {
        self.ctx.f32_type()
    }

    pub(crate) fn i32c(&self, v: u32) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(v as u64, false)
    }

    /// Declares (once) and calls `name` of signature `ret(args..)`.
    pub(crate) fn call(
        &self,
        name: &str,
        ret: BasicTypeEnum<'ctx>,
        args: &[BasicValueEnum<'ctx>],
    ) -> Result<BasicValueEnum<'ctx>> {
        let params: Vec<_> = args.iter().map(|a| a.get_type().into()).collect();
        let f = declare(self.module, name, ret.fn_type(&params, false));
        let args: Vec<_> = args.iter().map(|&a| a.into()).collect();
        self.b
            .build_call(f, &args, "c")?
            .try_as_basic_value()
            .basic()
            .ok_or_else(|| self.err(format!("{name} returns nothing")))
    }

    /// A one-operand float intrinsic (`llvm.fabs` → `llvm.fabs.f32`/`.f64`) or C library
    /// function (`tanh` → `tanhf`/`tanh`) of `x`'s type.
    pub(crate) fn fcall(&self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let t = x.get_type();
        let full = if let Some(base) = name.strip_prefix("llvm.") {
            format!(
                "llvm.{base}.{}",
                if t == self.f32t() { "f32" } else { "f64" }
            )
        } else if t == self.f32t() {
            format!("{name}f")
        } else {
            name.to_string()
        };
        Ok(self.call(&full, t.into(), &[x.into()])?.into_float_value())
    }

    /// `exp(x)`: inline and vectorisable for f32 ([`Emitter::exp_poly`], or
    /// [`Emitter::exp_poly_nonpositive`] for an `x` known to be `≤ 0` or NaN, or
    /// [`Emitter::expf`] with [`MathMode::Libm`]), `llvm.exp` for f64.
    fn exp(&self, x: FloatValue<'ctx>, nonpositive: bool) -> Result<FloatValue<'ctx>> {
        if x.get_type() != self.f32t() {
            return self.fcall("llvm.exp", x);
        }
        match self.math {
            MathMode::Polynomial if nonpositive => self.exp_poly_nonpositive(x),
            MathMode::Polynomial => self.exp_poly(x),
            MathMode::Libm => self.expf(x),
        }
    }

    /// Emits one instruction and returns its value.
    pub(crate) fn inst(&mut self, inst: &Inst) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.b;
        let ity = self.index_t;
        let iv = |e: &Self, id: ValueId| -> Result<IntValue<'ctx>> {
            let v = e.value(id)?;
            if v.ty != Ty::Index {
                return Err(e.err(format!("{id:?} is not an index value")));
            }
            Ok(v.v.into_int_value())
        };
        Ok(match &inst.op {
            InstOp::LoopVar(d) => {
                let v = *self
                    .vars
                    .get(*d)
                    .ok_or_else(|| self.err(format!("no loop variable {d}")))?;
                b.build_int_truncate_or_bit_cast(v, ity, "lv")?.into()
            }
            InstOp::IndexConst(c) => ity.const_int(*c as u64, true).into(),
            InstOp::IndexAdd(x, y) => b.build_int_add(iv(self, *x)?, iv(self, *y)?, "ia")?.into(),
            InstOp::IndexMul(x, y) => b.build_int_mul(iv(self, *x)?, iv(self, *y)?, "im")?.into(),
            InstOp::IndexDiv(x, y) | InstOp::IndexRem(x, y) => {
                let (x, y) = (iv(self, *x)?, iv(self, *y)?);
                let zero = b.build_int_compare(IntPredicate::EQ, y, ity.const_zero(), "z")?;
                let y = b
                    .build_select(zero, ity.const_int(1, false), y, "d")?
                    .into_int_value();
                if matches!(inst.op, InstOp::IndexDiv(..)) {
                    b.build_int_unsigned_div(x, y, "idiv")?.into()
                } else {
                    b.build_int_unsigned_rem(x, y, "irem")?.into()
                }
            }
            InstOp::IndexLt(x, y) => b
                .build_int_compare(IntPredicate::SLT, iv(self, *x)?, iv(self, *y)?, "ilt")?
                .into(),
            InstOp::ToIndex(x) => {
                // A value that does not fit the index width flags the status word (then wraps;
                // the address check keeps the access in bounds).
                let v = self.value(*x)?.v.into_int_value();
                let narrow = v.get_type().get_bit_width() > ity.get_bit_width();
                let r = b.build_int_cast_sign_flag(v, ity, true, "ti")?;
                if narrow {
                    let back = b.build_int_s_extend(r, v.get_type(), "tb")?;
                    let fits = b.build_int_compare(IntPredicate::EQ, back, v, "fits")?;
                    self.flag_unless(fits)?;
                }
                r.into()
            }
            InstOp::Const(s) => self.constant(inst.ty, *s)?,
            InstOp::Load { buffer, access } => self.load(*buffer, access, inst.ty)?.v,
            InstOp::Unary(op, xid) => {
                let x = self.value(*xid)?;
                self.unary(*op, x, inst.ty, self.nonpositive.contains(xid))?
            }
            InstOp::Binary(op, x, y) => {
                let (x, y) = (self.value(*x)?, self.value(*y)?);
                self.binary(*op, x, y, inst.ty)?
            }
            InstOp::Select(c, x, y) => {
                let c = self.value(*c)?.v.into_int_value();
                let (x, y) = (self.value(*x)?, self.value(*y)?);
                b.build_select(c, x.v, y.v, "sel")?
            }
            InstOp::Cast(x) => {
                let x = self.value(*x)?;
                self.cast(x, inst.ty)?
            }
        })
    }

    pub(crate) fn data(&self, v: Val<'ctx>) -> Result<DType> {
        match v.ty {
            Ty::Data(d) => Ok(d),
            Ty::Index => Err(self.err("an index value used as data")),
        }
    }

    /// `op` of `x`; `nonpositive`: `x` is known to be `≤ 0` or NaN (`reuse::nonpositive`).
    fn unary(
        &self,
        op: UnaryOp,
        x: Val<'ctx>,
        ty: Ty,
        nonpositive: bool,
    ) -> Result<BasicValueEnum<'ctx>> {
        let d = self.data(x)?;
        let b = &self.b;
        if op == UnaryOp::LogicalNot {
            return Ok(self.truthy(x, true)?.into());
        }
        if d == DType::Bool {
            return match op {
                UnaryOp::Abs | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Relu => Ok(x.v),
                _ => Err(self.err(format!("{op} of bool"))),
            };
        }
        if d.is_int() {
            let v = x.v.into_int_value();
            let zero = v.get_type().const_zero();
            return Ok(match op {
                UnaryOp::Neg => b.build_int_sub(zero, v, "neg")?.into(),
                UnaryOp::Abs => {
                    let n = b.build_int_sub(zero, v, "neg")?;
                    let lt = b.build_int_compare(IntPredicate::SLT, v, zero, "lt")?;
                    b.build_select(lt, n, v, "abs")?
                }
                UnaryOp::Relu => {
                    let lt = b.build_int_compare(IntPredicate::SLT, v, zero, "lt")?;
                    b.build_select(lt, zero, v, "relu")?
                }
                UnaryOp::Floor | UnaryOp::Ceil => x.v,
                _ => return Err(self.err(format!("{op} of {d}"))),
            });
        }
        let v = x.v.into_float_value();
        let one = v.get_type().const_float(1.0);
        let r = match op {
            UnaryOp::Neg => b.build_float_neg(v, "neg")?,
            UnaryOp::Abs => self.fcall("llvm.fabs", v)?,
            UnaryOp::Exp => self.exp(v, nonpositive)?,
            UnaryOp::Log => self.fcall("llvm.log", v)?,
            UnaryOp::Sqrt => self.fcall("llvm.sqrt", v)?,
            UnaryOp::Rsqrt => b.build_float_div(one, self.fcall("llvm.sqrt", v)?, "rsqrt")?,
            UnaryOp::Reciprocal => b.build_float_div(one, v, "rcp")?,
            UnaryOp::Sin => self.fcall("llvm.sin", v)?,
            UnaryOp::Cos => self.fcall("llvm.cos", v)?,
            UnaryOp::Tanh if v.get_type() == self.f32t() => match self.math {
                MathMode::Polynomial => self.tanh_poly(v)?,
                MathMode::Libm => self.tanhf(v)?,
            },
            UnaryOp::Tanh => self.fcall("tanh", v)?,
            UnaryOp::Erf if v.get_type() == self.f32t() => match self.math {
                MathMode::Polynomial => self.erf_poly(v)?,
                MathMode::Libm => self.erff(v)?,
            },
            UnaryOp::Erf => self.fcall("erf", v)?,
            UnaryOp::Sigmoid => {
                let n = b.build_float_neg(v, "n")?;
                let e = self.exp(n, false)?;
                let s = b.build_float_add(one, e, "s")?;
                b.build_float_div(one, s, "sig")?
            }
            UnaryOp::Relu => {
                let zero = v.get_type().const_zero();
                let lt = b.build_float_compare(FloatPredicate::OLT, v, zero, "lt")?;
                b.build_select(lt, zero, v, "relu")?.into_float_value()
            }
            UnaryOp::Floor => self.fcall("llvm.floor", v)?,
            UnaryOp::Ceil => self.fcall("llvm.ceil", v)?,
            UnaryOp::LogicalNot => unreachable_op(self, op)?,
        };
        let _ = ty;
        Ok(self.round(d, r)?.into())
    }

    /// `x != 0` (NaN is true), or its negation.
    pub(crate) fn truthy(&self, x: Val<'ctx>, negate: bool) -> Result<IntValue<'ctx>> {
        let d = self.data(x)?;
        let b = &self.b;
        Ok(if d.is_float() {
            let v = x.v.into_float_value();
            let p = if negate {
                FloatPredicate::OEQ
            } else {
                FloatPredicate::UNE
            };
            b.build_float_compare(p, v, v.get_type().const_zero(), "t")?
        } else {
            let v = x.v.into_int_value();
            let p = if negate {
                IntPredicate::EQ
            } else {
                IntPredicate::NE
            };
            b.build_int_compare(p, v, v.get_type().const_zero(), "t")?
        })
    }

    pub(crate) fn binary(
        &self,
        op: BinaryOp,
        x: Val<'ctx>,
        y: Val<'ctx>,
        _ty: Ty,
    ) -> Result<BasicValueEnum<'ctx>> {
        let d = self.data(x)?;
        let b = &self.b;
        if matches!(op, BinaryOp::LogicalAnd | BinaryOp::LogicalOr) {
            let (p, q) = (self.truthy(x, false)?, self.truthy(y, false)?);
            return Ok(if op == BinaryOp::LogicalAnd {
                b.build_and(p, q, "and")?
            } else {
                b.build_or(p, q, "or")?
            }
            .into());
        }
        if d.is_float() {
            let (p, q) = (x.v.into_float_value(), y.v.into_float_value());
            if op.returns_bool() {
                use FloatPredicate as F;
                let pred = match op {
                    BinaryOp::Eq => F::OEQ,
                    BinaryOp::Ne => F::UNE,
                    BinaryOp::Lt => F::OLT,
                    BinaryOp::Le => F::OLE,
                    BinaryOp::Gt => F::OGT,
                    _ => F::OGE,
                };
                return Ok(b.build_float_compare(pred, p, q, "cmp")?.into());
            }
            // f16/bf16 round every result (`round`): only f32/f64 sums meet a bare product.
            if matches!(d, DType::F32 | DType::F64) {
                if let Some(r) = self.scaled_plus_constant(op, p, q)? {
                    return Ok(r.into());
                }
            }
            let r = self.float_binary(op, p, q)?;
            return Ok(self.round(d, r)?.into());
        }
        let (p, q) = (x.v.into_int_value(), y.v.into_int_value());
        if op.returns_bool() {
            use IntPredicate as I;
            let bool_ = d == DType::Bool;
            let pred = match op {
                BinaryOp::Eq => I::EQ,
                BinaryOp::Ne => I::NE,
                BinaryOp::Lt if bool_ => I::ULT,
                BinaryOp::Le if bool_ => I::ULE,
                BinaryOp::Gt if bool_ => I::UGT,
                BinaryOp::Ge if bool_ => I::UGE,
                BinaryOp::Lt => I::SLT,
                BinaryOp::Le => I::SLE,
                BinaryOp::Gt => I::SGT,
                _ => I::SGE,
            };
            return Ok(b.build_int_compare(pred, p, q, "cmp")?.into());
        }
        if d == DType::Bool {
            return Ok(match op {
                BinaryOp::Maximum => b.build_or(p, q, "max")?,
                BinaryOp::Minimum => b.build_and(p, q, "min")?,
                _ => return Err(self.err(format!("{op} of bool"))),
            }
            .into());
        }
        Ok(self.int_binary(op, p, q)?.into())
    }

    /// `x·2^k + c`, `x·2^k - c` or `c - x·2^k` (`a`, `c` as `op` gets them) as one
    /// `llvm.fmuladd` when that gives the bits of the two roundings the op asks for, whether or
    /// not the CPU fuses it: `2^k` (`k ≥ 0`, either sign) and `c` are constants, `x·2^k` is exact
    /// unless it overflows, and `|c|` is at most [`sum_keeps_overflow`]'s limit, so a product
    /// that overflows gives the same infinity either way. `None`: another form, emitted as is.
    /// Chains such as `2·tanh(x) - 0.25` save an instruction per element.
    fn scaled_plus_constant(
        &self,
        op: BinaryOp,
        a: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> Result<Option<FloatValue<'ctx>>> {
        let t = a.get_type();
        let (name, limit) = if t == self.f32t() {
            (
                "llvm.fmuladd.f32",
                sum_keeps_overflow(f32::MANTISSA_DIGITS, f32::MAX_EXP),
            )
        } else if t == self.ctx.f64_type() {
            (
                "llvm.fmuladd.f64",
                sum_keeps_overflow(f64::MANTISSA_DIGITS, f64::MAX_EXP),
            )
        } else {
            return Ok(None);
        };
        let finite_const = |v: FloatValue<'ctx>| match v.get_constant() {
            Some((k, false)) if k.abs() <= limit => Some(k),
            _ => None,
        };
        // (the product, whether it is subtracted, the constant added).
        let (product_first, const_second) = (exact_scaling(a), finite_const(c));
        let (const_first, product_second) = (finite_const(a), exact_scaling(c));
        let (x, k, negate, add) = match (op, product_first, const_second) {
            (BinaryOp::Add, Some((x, k)), Some(add)) => (x, k, false, add),
            (BinaryOp::Sub, Some((x, k)), Some(sub)) => (x, k, false, -sub),
            (BinaryOp::Add | BinaryOp::Sub, ..) => match (const_first, product_second) {
                (Some(add), Some((x, k))) => (x, k, op == BinaryOp::Sub, add),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let k = t.const_float(if negate { -k } else { k });
        let r = self.call(
            name,
            t.into(),
            &[x.into(), k.into(), t.const_float(add).into()],
        )?;
        Ok(Some(r.into_float_value()))
    }

    fn float_binary(
        &self,
        op: BinaryOp,
        a: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>> {
        use FloatPredicate as F;
        let b = &self.b;
        let t = a.get_type();
        let zero = t.const_zero();
        let sel = |cond: IntValue<'ctx>, x: FloatValue<'ctx>, y: FloatValue<'ctx>| {
            b.build_select(cond, x, y, "s")
                .map(|v| v.into_float_value())
        };
        // `rem != 0 && (c < 0) != (rem < 0)`, the sign correction of floor_div and remainder.
        let fix = |rem: FloatValue<'ctx>| -> Result<IntValue<'ctx>> {
            let nz = b.build_float_compare(F::UNE, rem, zero, "nz")?;
            let cn = b.build_float_compare(F::OLT, c, zero, "cn")?;
            let rn = b.build_float_compare(F::OLT, rem, zero, "rn")?;
            let differ = b.build_xor(cn, rn, "dif")?;
            Ok(b.build_and(nz, differ, "fix")?)
        };
        Ok(match op {
            BinaryOp::Add => b.build_float_add(a, c, "add")?,
            BinaryOp::Sub => b.build_float_sub(a, c, "sub")?,
            BinaryOp::Mul => b.build_float_mul(a, c, "mul")?,
            BinaryOp::Div => b.build_float_div(a, c, "div")?,
            BinaryOp::FloorDiv => {
                let q = b.build_float_div(a, c, "q")?;
                let rem = b.build_float_rem(a, c, "rem")?;
                let div = b.build_float_div(b.build_float_sub(a, rem, "am")?, c, "d")?;
                let dm1 = b.build_float_sub(div, t.const_float(1.0), "d1")?;
                let div = sel(fix(rem)?, dm1, div)?;
                let fl = self.fcall("llvm.floor", div)?;
                let frac = b.build_float_sub(div, fl, "fr")?;
                let up = b.build_float_compare(F::OGT, frac, t.const_float(0.5), "up")?;
                let fl1 = b.build_float_add(fl, t.const_float(1.0), "f1")?;
                let rounded = sel(up, fl1, fl)?;
                let name = if t == self.f32t() {
                    "llvm.copysign.f32"
                } else {
                    "llvm.copysign.f64"
                };
                let signed_zero = self
                    .call(name, t.into(), &[zero.into(), q.into()])?
                    .into_float_value();
                let dnz = b.build_float_compare(F::UNE, div, zero, "dnz")?;
                let r = sel(dnz, rounded, signed_zero)?;
                let cz = b.build_float_compare(F::OEQ, c, zero, "cz")?;
                sel(cz, q, r)?
            }
            BinaryOp::Remainder => {
                let rem = b.build_float_rem(a, c, "rem")?;
                let plus = b.build_float_add(rem, c, "rp")?;
                sel(fix(rem)?, plus, rem)?
            }
            BinaryOp::Pow => {
                let name = if t == self.f32t() {
                    "llvm.pow.f32"
                } else {
                    "llvm.pow.f64"
                };
                self.call(name, t.into(), &[a.into(), c.into()])?
                    .into_float_value()
            }
            BinaryOp::Maximum | BinaryOp::Minimum => {
                let pred = if op == BinaryOp::Maximum {
                    F::OGT
                } else {
                    F::OLT
                };
                let better = b.build_float_compare(pred, a, c, "bt")?;
                let m = sel(better, a, c)?;
                let uno = b.build_float_compare(F::UNO, a, c, "uno")?;
                let nan = b.build_float_add(a, c, "nan")?;
                sel(uno, nan, m)?
            }
            _ => return Err(self.err(format!("{op} of floats"))),
        })
    }

    fn int_binary(
        &self,
        op: BinaryOp,
        a: IntValue<'ctx>,
        c: IntValue<'ctx>,
    ) -> Result<IntValue<'ctx>> {
        use IntPredicate as I;
        let b = &self.b;
        let t = a.get_type();
        let (zero, one) = (t.const_zero(), t.const_int(1, false));
        let minus1 = t.const_all_ones();
        let sel = |cond: IntValue<'ctx>, x: IntValue<'ctx>, y: IntValue<'ctx>| {
            b.build_select(cond, x, y, "s").map(|v| v.into_int_value())
        };
        Ok(match op {
            BinaryOp::Add => b.build_int_add(a, c, "add")?,
            BinaryOp::Sub => b.build_int_sub(a, c, "sub")?,
            BinaryOp::Mul => b.build_int_mul(a, c, "mul")?,
            BinaryOp::Maximum => sel(b.build_int_compare(I::SGT, a, c, "gt")?, a, c)?,
            BinaryOp::Minimum => sel(b.build_int_compare(I::SLT, a, c, "lt")?, a, c)?,
            BinaryOp::FloorDiv | BinaryOp::Remainder => {
                // Divisors 0 and -1 never reach `sdiv` (division by zero and MIN / -1 are UB):
                // x / -1 = -x (wrapping) with remainder 0; x / 0 gives 0 and 0.
                let cz = b.build_int_compare(I::EQ, c, zero, "cz")?;
                let cm = b.build_int_compare(I::EQ, c, minus1, "cm")?;
                let special = b.build_or(cz, cm, "sp")?;
                let safe = sel(special, one, c)?;
                let q = b.build_int_signed_div(a, safe, "q")?;
                let r = b.build_int_signed_rem(a, safe, "r")?;
                let neg_a = b.build_int_sub(zero, a, "na")?;
                let q = sel(cm, neg_a, q)?;
                let q = sel(cz, zero, q)?;
                let r = sel(special, zero, r)?;
                let rnz = b.build_int_compare(I::NE, r, zero, "rnz")?;
                let cneg = b.build_int_compare(I::SLT, c, zero, "cn")?;
                if op == BinaryOp::FloorDiv {
                    let aneg = b.build_int_compare(I::SLT, a, zero, "an")?;
                    let differ = b.build_xor(aneg, cneg, "dif")?;
                    let fix = b.build_and(rnz, differ, "fix")?;
                    sel(fix, b.build_int_sub(q, one, "q1")?, q)?
                } else {
                    let rneg = b.build_int_compare(I::SLT, r, zero, "rn")?;
                    let differ = b.build_xor(rneg, cneg, "dif")?;
                    let fix = b.build_and(rnz, differ, "fix")?;
                    sel(fix, b.build_int_add(r, c, "rc")?, r)?
                }
            }
            BinaryOp::Pow => self.int_pow(a, c, t)?,
            _ => return Err(self.err(format!("{op} of integers"))),
        })
    }

    /// Square and multiply, wrapping, unrolled over every exponent bit; negative exponents as
    /// the interpreter (1 for base 1, ±1 for base -1, else 0).
    fn int_pow(
        &self,
        a: IntValue<'ctx>,
        e: IntValue<'ctx>,
        t: IntType<'ctx>,
    ) -> Result<IntValue<'ctx>> {
        use IntPredicate as I;
        let b = &self.b;
        let (zero, one) = (t.const_zero(), t.const_int(1, false));
        let sel = |cond: IntValue<'ctx>, x: IntValue<'ctx>, y: IntValue<'ctx>| {
            b.build_select(cond, x, y, "s").map(|v| v.into_int_value())
        };
        let (mut base, mut exp, mut acc) = (a, e, one);
        for _ in 0..t.get_bit_width() - 1 {
            let bit = b.build_and(exp, one, "bit")?;
            let odd = b.build_int_compare(I::NE, bit, zero, "odd")?;
            let m = b.build_int_mul(acc, base, "m")?;
            acc = sel(odd, m, acc)?;
            exp = b.build_right_shift(exp, one, false, "e")?;
            base = b.build_int_mul(base, base, "b2")?;
        }
        let is1 = b.build_int_compare(I::EQ, a, one, "is1")?;
        let ism1 = b.build_int_compare(I::EQ, a, t.const_all_ones(), "ism1")?;
        let odd_e = b.build_int_compare(I::NE, b.build_and(e, one, "eo")?, zero, "oe")?;
        let m1 = sel(odd_e, t.const_all_ones(), one)?;
        let neg = sel(ism1, m1, zero)?;
        let neg = sel(is1, one, neg)?;
        let eneg = b.build_int_compare(I::SLT, e, zero, "en")?;
        Ok(sel(eneg, neg, acc)?)
    }
}

fn unreachable_op<T>(e: &Emitter<'_, '_>, op: UnaryOp) -> Result<T> {
    Err(e.err(format!("{op} is handled before dispatch")))
}

/// `(x, 2^k)` when `v` is `x · 2^k` or `2^k · x`, an `fmul` by a constant power of two with
/// `k ≥ 0` (either sign): a product that is exact unless it overflows (`x`'s significand is
/// kept, subnormal `x` included).
fn exact_scaling(v: FloatValue<'_>) -> Option<(FloatValue<'_>, f64)> {
    let inst = v.as_instruction()?;
    if inst.get_opcode() != InstructionOpcode::FMul {
        return None;
    }
    let operand = |i| match inst.get_operand(i) {
        Some(Operand::Value(BasicValueEnum::FloatValue(f))) => Some(f),
        _ => None,
    };
    let (x, y) = (operand(0)?, operand(1)?);
    let power = |f: FloatValue<'_>| match f.get_constant() {
        Some((k, false)) if k.is_finite() && k.abs() >= 1.0 => {
            (k.to_bits() & ((1u64 << 52) - 1) == 0).then_some(k)
        }
        _ => None,
    };
    match (power(y), power(x)) {
        (Some(k), _) if !x.is_const() => Some((x, k)),
        (_, Some(k)) if !y.is_const() => Some((y, k)),
        _ => None,
    }
}

/// The largest `|c|` for which `round(x·2^k + c)` overflows exactly when `round(x·2^k)` does,
/// for a format of `digits` significand bits and largest exponent `max_exp` (Rust's
/// `MANTISSA_DIGITS`, `MAX_EXP`): an exact product that overflows is at least `2^max_exp`,
/// whose distance to the rounding boundary (`MAX` plus half its ulp) is `2^(max_exp -
/// digits - 1)`. `2^103` for f32, `2^970` for f64.
fn sum_keeps_overflow(digits: u32, max_exp: i32) -> f64 {
    2f64.powi(max_exp - digits as i32 - 1)
}
