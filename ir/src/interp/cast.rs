//! Conversions between dtypes: `cast`, the pad value, and correctly rounded f64 → f16/bf16 for
//! accumulators.
//!
//! Every element is first viewed as an [`Elem`] (bool, i64 or f64, all exact), then converted
//! to the target dtype following PyTorch's `static_cast` chain:
//! - to bool: `x != 0` (NaN is true);
//! - float to integer: truncation toward zero, saturating, NaN → 0 (Rust `as`; PyTorch leaves
//!   out-of-range values undefined);
//! - integer to narrower integer: wrapping;
//! - to f16/bf16: through f32 (`c10::Half` and `c10::BFloat16` are built from a float), each
//!   step rounding to nearest-even; f16/bf16/f32 sources reach f32 exactly, so only f64 and
//!   i64 sources (and i32 beyond 2^24) round twice.

use crate::dtype::{DType, Scalar};
use crate::tensor::TensorData;
use half::{bf16, f16};

/// One element, widened without loss.
#[derive(Clone, Copy, Debug)]
pub(super) enum Elem {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl From<Scalar> for Elem {
    fn from(s: Scalar) -> Elem {
        match s {
            Scalar::Bool(b) => Elem::Bool(b),
            Scalar::Int(i) => Elem::Int(i),
            Scalar::Float(x) => Elem::Float(x),
        }
    }
}

impl Elem {
    fn to_bool(self) -> bool {
        match self {
            Elem::Bool(b) => b,
            Elem::Int(i) => i != 0,
            Elem::Float(x) => x != 0.0,
        }
    }

    fn to_i32(self) -> i32 {
        match self {
            Elem::Bool(b) => b as i32,
            Elem::Int(i) => i as i32,
            Elem::Float(x) => x as i32,
        }
    }

    fn to_i64(self) -> i64 {
        match self {
            Elem::Bool(b) => b as i64,
            Elem::Int(i) => i,
            Elem::Float(x) => x as i64,
        }
    }

    fn to_f32(self) -> f32 {
        match self {
            Elem::Bool(b) => b as u8 as f32,
            Elem::Int(i) => i as f32,
            Elem::Float(x) => x as f32,
        }
    }

    fn to_f64(self) -> f64 {
        match self {
            Elem::Bool(b) => b as u8 as f64,
            Elem::Int(i) => i as f64,
            Elem::Float(x) => x,
        }
    }
}

/// Element `i` of `data` as an [`Elem`].
fn elem(data: &TensorData, i: usize) -> Elem {
    match data {
        TensorData::Bool(v) => Elem::Bool(v[i]),
        TensorData::I32(v) => Elem::Int(v[i] as i64),
        TensorData::I64(v) => Elem::Int(v[i]),
        TensorData::F16(v) => Elem::Float(v[i].to_f64()),
        TensorData::BF16(v) => Elem::Float(v[i].to_f64()),
        TensorData::F32(v) => Elem::Float(v[i] as f64),
        TensorData::F64(v) => Elem::Float(v[i]),
    }
}

/// `n` copies of `e` converted to `to`.
fn convert(to: DType, n: usize, e: impl Fn(usize) -> Elem) -> TensorData {
    match to {
        DType::Bool => TensorData::Bool((0..n).map(|i| e(i).to_bool()).collect()),
        DType::I32 => TensorData::I32((0..n).map(|i| e(i).to_i32()).collect()),
        DType::I64 => TensorData::I64((0..n).map(|i| e(i).to_i64()).collect()),
        DType::F16 => TensorData::F16((0..n).map(|i| f16::from_f32(e(i).to_f32())).collect()),
        DType::BF16 => TensorData::BF16((0..n).map(|i| bf16::from_f32(e(i).to_f32())).collect()),
        DType::F32 => TensorData::F32((0..n).map(|i| e(i).to_f32()).collect()),
        DType::F64 => TensorData::F64((0..n).map(|i| e(i).to_f64()).collect()),
    }
}

/// `data` converted elementwise to `to`.
pub(super) fn cast(data: &TensorData, to: DType) -> TensorData {
    convert(to, data.len(), |i| elem(data, i))
}

/// A one-element tensor of `to` holding `value`, converted like a cast from its natural dtype
/// (bool, i64 or f64).
pub(super) fn scalar(value: Scalar, to: DType) -> TensorData {
    convert(to, 1, |_| Elem::from(value))
}

/// `x` rounded to f32 *to odd*: exact results stay, inexact ones take the neighbour whose last
/// significand bit is 1. Rounding that to a format with at least two fewer significand bits
/// (f16: 11, bf16: 8, f32 has 24) to nearest-even gives the correctly rounded result of `x`,
/// which a plain double rounding through f32 does not.
fn f64_to_f32_odd(x: f64) -> f32 {
    let y = x as f32;
    if x.is_nan() || y as f64 == x || y.to_bits() & 1 == 1 {
        return y;
    }
    // `y` is even and inexact: step one ulp toward `x` (away from zero if |x| > |y|).
    let bits = if x.abs() > (y as f64).abs() {
        y.to_bits() + 1
    } else {
        y.to_bits() - 1
    };
    f32::from_bits(bits)
}

/// `x` correctly rounded (to nearest-even) to f16, for accumulators that round once.
pub(super) fn f64_to_f16(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(x))
}

/// `x` correctly rounded (to nearest-even) to bf16, for accumulators that round once.
pub(super) fn f64_to_bf16(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_once_from_f64() {
        // Just above a bf16 tie between 1 and 1 + 2^-7: rounds up (via f32 it would tie to 1).
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-40);
        assert_eq!(f64_to_bf16(x).to_f64(), 1.0 + 2f64.powi(-7));
        assert_eq!(bf16::from_f32(x as f32).to_f64(), 1.0);
        // The same for f16 (ulp 2^-10 at 1).
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(f64_to_f16(x).to_f64(), 1.0 + 2f64.powi(-10));
        // Exact ties still go to even; specials and overflow survive.
        assert_eq!(f64_to_f16(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        assert!(f64_to_f16(f64::NAN).is_nan());
        assert_eq!(f64_to_bf16(-1e300).to_f64(), f64::NEG_INFINITY);
        assert_eq!(f64_to_f16(1e-300).to_f64(), 0.0);
        assert_eq!(f64_to_bf16(-1e-300).to_bits(), 0x8000);
    }

    #[test]
    fn casts_saturate_wrap_and_round_through_f32() {
        let f = TensorData::F64(vec![f64::NAN, 1e300, -1e300, -2.9, 2.9]);
        assert_eq!(
            cast(&f, DType::I32),
            TensorData::I32(vec![0, i32::MAX, i32::MIN, -2, 2])
        );
        assert_eq!(
            cast(&TensorData::I64(vec![1 << 32 | 5, -1]), DType::I32),
            TensorData::I32(vec![5, -1])
        );
        assert_eq!(
            cast(&TensorData::F32(vec![f32::NAN, -0.0, 0.5]), DType::Bool),
            TensorData::Bool(vec![true, false, true])
        );
        assert_eq!(
            scalar(Scalar::Float(-1.5), DType::I64),
            TensorData::I64(vec![-1])
        );
    }
}
