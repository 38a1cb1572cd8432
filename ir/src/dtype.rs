//! Element types and PyTorch's type-promotion rules.

use std::fmt;

/// The element type of a tensor.
///
/// Ordering of the variants follows PyTorch's promotion lattice inside each category
/// (bool < integers < floating point).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

/// The promotion category of a dtype (PyTorch: bool < integral < floating).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Int,
    Float,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 7] = [
        DType::Bool,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// The name used by the `.smelt` text format and in error messages.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parses a name produced by [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::I32 | DType::I64 => Category::Int,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => Category::Float,
        }
    }

    pub fn is_float(self) -> bool {
        self.category() == Category::Float
    }

    pub fn is_int(self) -> bool {
        self.category() == Category::Int
    }

    pub fn is_bool(self) -> bool {
        self == DType::Bool
    }

    /// The result dtype of combining two tensors, as `torch.promote_types`.
    ///
    /// Higher category wins; inside a category the wider type wins; f16 with bf16 gives f32.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        match (self, other) {
            (a, b) if a == b => a,
            (F16, BF16) | (BF16, F16) => F32,
            (a, b) => {
                if (a.category(), a) >= (b.category(), b) {
                    a
                } else {
                    b
                }
            }
        }
    }

    /// The result dtype of combining a tensor of dtype `self` with a Python-style scalar of
    /// category `scalar` (PyTorch: a scalar only promotes across categories, and then to the
    /// default dtype of that category: i64 for integers, f32 for floats).
    pub fn promote_with_scalar(self, scalar: Category) -> DType {
        if scalar <= self.category() {
            self
        } else {
            match scalar {
                Category::Bool => DType::Bool,
                Category::Int => DType::I64,
                Category::Float => DType::F32,
            }
        }
    }

    /// The dtype PyTorch computes integer and bool inputs of float-only ops in (`exp`, true
    /// division, `mean` …): the default float dtype, f32. Float dtypes map to themselves.
    pub fn to_float(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scalar value of one of the three categories, used for pad values and scalar constants.
#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl Scalar {
    pub fn category(self) -> Category {
        match self {
            Scalar::Bool(_) => Category::Bool,
            Scalar::Int(_) => Category::Int,
            Scalar::Float(_) => Category::Float,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            // Rust's `as` truncates toward zero and saturates; NaN becomes 0.
            Scalar::Float(x) => x as i64,
        }
    }

    pub fn as_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::Float(x) => x != 0.0,
        }
    }
}

/// Bitwise equality, so that NaN constants compare equal to themselves (graphs must round-trip).
impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => fmt_f64(*x, f),
        }
    }
}

/// Writes a float so that it reads back bit-exactly and is recognisably a float
/// (`1.0`, not `1`; `nan`, `inf`, `-inf`).
pub fn fmt_f64(x: f64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if x.is_nan() {
        if x.is_sign_negative() {
            f.write_str("-nan")
        } else {
            f.write_str("nan")
        }
    } else if x.is_infinite() {
        f.write_str(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        // `{:?}` is the shortest representation that round-trips, and always has a `.` or `e`.
        write!(f, "{x:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promotion_matches_torch_promote_types() {
        // Cases from torch.promote_types.
        assert_eq!(Bool.promote(I32), I32);
        assert_eq!(I32.promote(I64), I64);
        assert_eq!(I64.promote(F16), F16);
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(BF16.promote(F32), F32);
        assert_eq!(F32.promote(F64), F64);
        assert_eq!(I64.promote(Bool), I64);
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(a.promote(b), b.promote(a), "{a} {b}");
            }
        }
    }

    #[test]
    fn scalar_promotion_stays_in_category() {
        assert_eq!(F16.promote_with_scalar(Category::Float), F16);
        assert_eq!(I32.promote_with_scalar(Category::Int), I32);
        assert_eq!(I32.promote_with_scalar(Category::Float), F32);
        assert_eq!(Bool.promote_with_scalar(Category::Int), I64);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("f8"), None);
    }
}
