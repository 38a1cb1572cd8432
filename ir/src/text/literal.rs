//! Literals shared by the printer and the parser: floats that read back bit-exactly, and
//! quoted strings.
//!
//! Floats are written as `ir::dtype::fmt_f64` does (shortest round-trip decimal with a `.` or
//! an exponent, `inf`, `-inf`, `nan`, `-nan`), at the element's own width: f32 is written as
//! the shortest f32 decimal and read with `str::parse::<f32>`; f16 and bf16 are written as the
//! f32 value of the half (exact) and read through f32. A NaN whose mantissa is not the
//! canonical quiet one (only the top mantissa bit set) is written `nan(0x<mantissa hex>)`, so
//! NaN payloads round-trip too.

use half::{bf16, f16};
use std::fmt::Write;

/// The floating-point widths of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatKind {
    F16,
    BF16,
    F32,
    F64,
}

impl FloatKind {
    fn mantissa_bits(self) -> u32 {
        match self {
            FloatKind::F16 => 10,
            FloatKind::BF16 => 7,
            FloatKind::F32 => 23,
            FloatKind::F64 => 52,
        }
    }

    fn total_bits(self) -> u32 {
        match self {
            FloatKind::F16 | FloatKind::BF16 => 16,
            FloatKind::F32 => 32,
            FloatKind::F64 => 64,
        }
    }

    fn exp_mask(self) -> u64 {
        let sign = 1u64 << (self.total_bits() - 1);
        (sign - 1) & !self.mantissa_mask()
    }

    fn mantissa_mask(self) -> u64 {
        (1u64 << self.mantissa_bits()) - 1
    }

    fn sign_bit(self) -> u64 {
        1u64 << (self.total_bits() - 1)
    }
}

/// Appends the literal of the float with bit pattern `bits` (in the low bits) of width `kind`.
pub fn write_float(out: &mut String, bits: u64, kind: FloatKind) {
    let neg = bits & kind.sign_bit() != 0;
    let exp = bits & kind.exp_mask();
    let man = bits & kind.mantissa_mask();
    if exp == kind.exp_mask() && man != 0 {
        out.push_str(if neg { "-nan" } else { "nan" });
        if man != 1 << (kind.mantissa_bits() - 1) {
            let _ = write!(out, "(0x{man:x})");
        }
        return;
    }
    if exp == kind.exp_mask() {
        out.push_str(if neg { "-inf" } else { "inf" });
        return;
    }
    // `{:?}` is the shortest decimal that reads back to the same value, always with `.` or `e`.
    let _ = match kind {
        FloatKind::F64 => write!(out, "{:?}", f64::from_bits(bits)),
        FloatKind::F32 => write!(out, "{:?}", f32::from_bits(bits as u32)),
        FloatKind::F16 => write!(out, "{:?}", f16::from_bits(bits as u16).to_f32()),
        FloatKind::BF16 => write!(out, "{:?}", bf16::from_bits(bits as u16).to_f32()),
    };
}

/// Reads a float or integer literal's text (as lexed) at width `kind`; returns its bits.
pub fn parse_float(text: &str, kind: FloatKind) -> Result<u64, String> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let sign = if neg { kind.sign_bit() } else { 0 };
    if body == "inf" {
        return Ok(sign | kind.exp_mask());
    }
    if let Some(payload) = body.strip_prefix("nan") {
        let man = if payload.is_empty() {
            1u64 << (kind.mantissa_bits() - 1)
        } else {
            let hex = payload
                .strip_prefix("(0x")
                .and_then(|p| p.strip_suffix(')'))
                .ok_or_else(|| format!("malformed NaN literal `{text}`"))?;
            let man = u64::from_str_radix(hex, 16)
                .ok()
                .filter(|&m| m != 0 && m <= kind.mantissa_mask());
            man.ok_or_else(|| {
                format!(
                    "NaN payload {hex} must be nonzero and fit the {} mantissa bits of {kind:?}",
                    kind.mantissa_bits()
                )
            })?
        };
        return Ok(sign | kind.exp_mask() | man);
    }
    let bad = |_| format!("`{text}` is not a valid float");
    Ok(match kind {
        FloatKind::F64 => text.parse::<f64>().map_err(bad)?.to_bits(),
        FloatKind::F32 => text.parse::<f32>().map_err(bad)?.to_bits() as u64,
        FloatKind::F16 => f16::from_f32(text.parse::<f32>().map_err(bad)?).to_bits() as u64,
        FloatKind::BF16 => bf16::from_f32(text.parse::<f32>().map_err(bad)?).to_bits() as u64,
    })
}

/// Appends `s` as a string literal: `"` and `\` escaped, `\n \t \r \0` for those, `\u{..}`
/// for every other control character.
pub fn write_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(bits: u64, kind: FloatKind) -> u64 {
        let mut s = String::new();
        write_float(&mut s, bits, kind);
        parse_float(&s, kind).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn floats_round_trip_bit_exactly() {
        for x in [
            0.0,
            -0.0,
            1.5,
            0.1,
            1e-310,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            -f64::NAN,
        ] {
            assert_eq!(round_trip(x.to_bits(), FloatKind::F64), x.to_bits(), "{x}");
        }
        for bits in [0x7ff0_0000_0000_0001u64, 0xfff4_0000_0000_0000] {
            assert_eq!(round_trip(bits, FloatKind::F64), bits);
        }
        for bits in (0..=u16::MAX as u64).step_by(7) {
            assert_eq!(round_trip(bits, FloatKind::F16), bits);
            assert_eq!(round_trip(bits, FloatKind::BF16), bits);
        }
        for x in [0.1f32, -3.4e38, 1e-45, f32::NAN] {
            let b = x.to_bits() as u64;
            assert_eq!(round_trip(b, FloatKind::F32), b);
        }
    }

    #[test]
    fn canonical_forms() {
        let mut s = String::new();
        write_float(&mut s, f64::NAN.to_bits(), FloatKind::F64);
        write_float(&mut s, 1.0f32.to_bits() as u64, FloatKind::F32);
        write_float(&mut s, f16::from_f32(0.1).to_bits() as u64, FloatKind::F16);
        assert_eq!(s, "nan1.00.099975586");
        assert!(parse_float("nan(0x0)", FloatKind::F32).is_err());
        assert!(parse_float("nan(0x800000)", FloatKind::F32).is_err());
    }

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        write_quoted(&mut s, "a\"b\\c\n\u{1}é");
        assert_eq!(s, r#""a\"b\\c\n\u{1}é""#);
    }
}
