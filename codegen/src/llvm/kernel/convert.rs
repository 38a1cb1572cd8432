//! Conversions: memory (storage) form ↔ compute form, rounding to f16/bf16 after every op
//! (f16 through `half`, bf16 by integer arithmetic, both nearest-even with NaN kept quiet),
//! constants, and the interpreter's casts (float → int saturating with NaN → 0 through
//! `llvm.fptosi.sat`; to f16/bf16 through f32).

use super::{Emitter, Val};
use crate::llvm::error::Result;
use inkwell::values::{BasicValueEnum, FloatValue};
use inkwell::{AddressSpace, IntPredicate};
use smelt_ir::{DType, Scalar};
use smelt_passes::kernel::Ty;

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// A value loaded from memory, in its compute type.
    pub(crate) fn load_value(
        &self,
        d: DType,
        raw: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.b;
        Ok(match d {
            DType::Bool => {
                let zero = self.ctx.i8_type().const_zero();
                b.build_int_compare(IntPredicate::NE, raw.into_int_value(), zero, "b")?
                    .into()
            }
            DType::F16 => b
                .build_float_ext(raw.into_float_value(), self.f32t(), "h2f")?
                .into(),
            DType::BF16 => {
                let w = b.build_int_z_extend(raw.into_int_value(), self.ctx.i32_type(), "bw")?;
                let w = b.build_left_shift(w, self.i32c(16), "bs")?;
                b.build_bit_cast(w, self.f32t(), "bf2f")?
            }
            _ => raw,
        })
    }

    /// A compute value (already rounded to its dtype) in its storage form.
    pub(crate) fn to_storage(
        &self,
        d: DType,
        v: BasicValueEnum<'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.b;
        Ok(match d {
            DType::Bool => b
                .build_int_z_extend(v.into_int_value(), self.ctx.i8_type(), "bz")?
                .into(),
            DType::F16 => b
                .build_float_trunc(v.into_float_value(), self.ctx.f16_type(), "f2h")?
                .into(),
            DType::BF16 => {
                let w = b
                    .build_bit_cast(v, self.ctx.i32_type(), "fw")?
                    .into_int_value();
                let w = b.build_right_shift(w, self.i32c(16), false, "fs")?;
                b.build_int_truncate(w, self.ctx.i16_type(), "f2bf")?.into()
            }
            _ => v,
        })
    }

    /// An f32 value rounded to nearest-even to `d` (f16/bf16) and held as f32 again; other
    /// dtypes unchanged.
    pub(crate) fn round(&self, d: DType, v: FloatValue<'ctx>) -> Result<FloatValue<'ctx>> {
        let b = &self.b;
        match d {
            DType::F16 => {
                let h = b.build_float_trunc(v, self.ctx.f16_type(), "rh")?;
                Ok(b.build_float_ext(h, self.f32t(), "rf")?)
            }
            DType::BF16 => {
                // half's `bf16::from_f32`: NaN keeps its high bits with the quiet bit set;
                // otherwise add 0x7fff plus the lowest kept bit and truncate (nearest-even).
                let x = b
                    .build_bit_cast(v, self.ctx.i32_type(), "x")?
                    .into_int_value();
                let abs = b.build_and(x, self.i32c(0x7fff_ffff), "abs")?;
                let nan =
                    b.build_int_compare(IntPredicate::UGT, abs, self.i32c(0x7f80_0000), "nan")?;
                let lsb = b.build_right_shift(x, self.i32c(16), false, "l")?;
                let lsb = b.build_and(lsb, self.i32c(1), "lsb")?;
                let r = b.build_int_add(x, self.i32c(0x7fff), "r")?;
                let r = b.build_int_add(r, lsb, "r")?;
                let q = b.build_or(x, self.i32c(0x0040_0000), "q")?;
                let sel = b.build_select(nan, q, r, "s")?.into_int_value();
                let m = b.build_and(sel, self.i32c(0xffff_0000), "m")?;
                Ok(b.build_bit_cast(m, self.f32t(), "rb")?.into_float_value())
            }
            _ => Ok(v),
        }
    }

    /// A constant of `ty`, converted like a cast from its natural dtype.
    pub(crate) fn constant(&self, ty: Ty, s: Scalar) -> Result<BasicValueEnum<'ctx>> {
        let t = self.compute_type(ty);
        Ok(match ty {
            Ty::Index => t.into_int_type().const_int(s.as_i64() as u64, true).into(),
            Ty::Data(d) => match d {
                DType::Bool => t
                    .into_int_type()
                    .const_int(s.as_bool() as u64, false)
                    .into(),
                DType::I32 => t
                    .into_int_type()
                    .const_int(s.as_i64() as i32 as u64, true)
                    .into(),
                DType::I64 => t.into_int_type().const_int(s.as_i64() as u64, true).into(),
                DType::F16 => self
                    .f32_constant(half::f16::from_f32(s.as_f64() as f32).to_f32())
                    .into(),
                DType::BF16 => self
                    .f32_constant(half::bf16::from_f32(s.as_f64() as f32).to_f32())
                    .into(),
                DType::F32 => self.f32_constant(s.as_f64() as f32).into(),
                DType::F64 => self.ctx.f64_type().const_float(s.as_f64()).into(),
            },
        })
    }

    /// The f32 constant `v`: an LLVM constant, or, in a kernel with
    /// [`opaque_constants`](Emitter::opaque_constants), a load of a global holding it.
    pub(crate) fn f32_constant(&self, v: f32) -> FloatValue<'ctx> {
        if !self.opaque_constants {
            return self.f32t().const_float(f64::from(v));
        }
        let name = format!("smelt.f32.{:08x}", v.to_bits());
        let global = self.module.get_global(&name).unwrap_or_else(|| {
            let g = self
                .module
                .add_global(self.f32t(), Some(AddressSpace::default()), &name);
            g.set_initializer(&self.f32t().const_float(f64::from(v)));
            g
        });
        // A builder positioned in a block cannot fail to load; one that is not fails at the
        // next instruction, so the plain constant is only ever a stand-in.
        match self.b.build_load(global.as_pointer_value(), "k") {
            Ok(l) => l.into_float_value(),
            Err(_) => self.f32t().const_float(f64::from(v)),
        }
    }

    /// The interpreter's cast of `x` to `to`.
    pub(crate) fn cast(&self, x: Val<'ctx>, to: Ty) -> Result<BasicValueEnum<'ctx>> {
        let b = &self.b;
        let target = self.compute_type(to);
        let src_float = matches!(x.ty, Ty::Data(d) if d.is_float());
        let src_bool = x.ty == Ty::Data(DType::Bool);
        let to_d = match to {
            Ty::Index => DType::I64,
            Ty::Data(d) => d,
        };
        if to == Ty::Data(DType::Bool) {
            return Ok(self.truthy(x, false)?.into());
        }
        if !to_d.is_float() {
            let it = target.into_int_type();
            return Ok(if src_float {
                let v = x.v.into_float_value();
                let fname = if v.get_type() == self.f32t() {
                    "f32"
                } else {
                    "f64"
                };
                let name = format!("llvm.fptosi.sat.i{}.{fname}", it.get_bit_width());
                self.call(&name, it.into(), &[v.into()])?
            } else {
                let v = x.v.into_int_value();
                b.build_int_cast_sign_flag(v, it, !src_bool, "ic")?.into()
            });
        }
        // To a float: through f32 for f16/bf16 (round once more), directly for f32/f64.
        let wide = if to_d == DType::F64 {
            self.ctx.f64_type()
        } else {
            self.f32t()
        };
        let f = if src_float {
            let v = x.v.into_float_value();
            b.build_float_cast(v, wide, "fc")?
        } else if src_bool {
            b.build_unsigned_int_to_float(x.v.into_int_value(), wide, "uf")?
        } else {
            b.build_signed_int_to_float(x.v.into_int_value(), wide, "sf")?
        };
        Ok(self.round(to_d, f)?.into())
    }
}
