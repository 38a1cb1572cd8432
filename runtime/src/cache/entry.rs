//! The on-disk entry format.
//!
//! ```text
//! offset  size  field
//!      0     8  magic            b"SMELTKC\0"
//!      8     4  format version   u32 LE (1)
//!     12     4  fields length F  u32 LE
//!     16     8  payload length P u64 LE
//!     24    32  checksum         SHA-256 of fields ‖ payload
//!     56     F  key fields       UTF-8 `name=value` lines (see `CacheKey::fields_text`)
//!   56+F     P  payload          the artefact bytes
//! ```
//!
//! A file is valid only if it is exactly `56 + F + P` bytes long and the checksum matches, so
//! a zero-byte, truncated, padded or bit-flipped file is reported as corrupt, never returned.

use sha2::{Digest, Sha256};
use std::fmt;

pub(crate) const MAGIC: [u8; 8] = *b"SMELTKC\0";
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const HEADER_LEN: usize = 56;

/// Why an entry file was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corruption {
    /// The file is empty (e.g. a crash between create and write, outside smelt's own writes).
    Empty,
    /// Shorter than its header says.
    Truncated { len: u64, expected: u64 },
    /// Longer than its header says.
    TrailingBytes { len: u64, expected: u64 },
    /// Does not start with smelt's magic bytes.
    BadMagic,
    /// Written by a different entry format version.
    FormatVersion(u32),
    /// The checksum over fields and payload does not match.
    Checksum,
    /// The key fields are not UTF-8.
    BadFields,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::Empty => write!(f, "zero-byte file"),
            Corruption::Truncated { len, expected } => {
                write!(f, "truncated: {len} bytes, header says {expected}")
            }
            Corruption::TrailingBytes { len, expected } => {
                write!(f, "{len} bytes, header says {expected}")
            }
            Corruption::BadMagic => write!(f, "bad magic bytes"),
            Corruption::FormatVersion(v) => {
                write!(
                    f,
                    "entry format version {v}, this smelt reads {FORMAT_VERSION}"
                )
            }
            Corruption::Checksum => write!(f, "checksum mismatch"),
            Corruption::BadFields => write!(f, "key fields are not UTF-8"),
        }
    }
}

fn checksum(fields: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(fields);
    h.update(payload);
    h.finalize().into()
}

/// Serialises one entry.
pub(crate) fn encode(fields: &str, payload: &[u8]) -> Vec<u8> {
    let fields = fields.as_bytes();
    let mut out = Vec::with_capacity(HEADER_LEN + fields.len() + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    // Key fields are a few hundred bytes; more than u32::MAX is impossible by construction.
    out.extend_from_slice(
        &u32::try_from(fields.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&checksum(fields, payload));
    out.extend_from_slice(fields);
    out.extend_from_slice(payload);
    out
}

/// The parsed fixed header: (fields length, payload length, checksum).
fn header(bytes: &[u8]) -> Result<(u64, u64, [u8; 32]), Corruption> {
    if bytes.is_empty() {
        return Err(Corruption::Empty);
    }
    if bytes.len() < HEADER_LEN {
        // Too short to say how long it should be; check what is there of the magic.
        let n = bytes.len().min(MAGIC.len());
        if bytes[..n] != MAGIC[..n] {
            return Err(Corruption::BadMagic);
        }
        return Err(Corruption::Truncated {
            len: bytes.len() as u64,
            expected: HEADER_LEN as u64,
        });
    }
    if bytes[..8] != MAGIC {
        return Err(Corruption::BadMagic);
    }
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let version = u32_at(8);
    if version != FORMAT_VERSION {
        return Err(Corruption::FormatVersion(version));
    }
    let fields_len = u64::from(u32_at(12));
    let mut p = [0u8; 8];
    p.copy_from_slice(&bytes[16..24]);
    let payload_len = u64::from_le_bytes(p);
    let mut sum = [0u8; 32];
    sum.copy_from_slice(&bytes[24..56]);
    Ok((fields_len, payload_len, sum))
}

/// Parses and verifies an entry; returns its key fields and payload.
pub(crate) fn decode(bytes: &[u8]) -> Result<(&str, &[u8]), Corruption> {
    let (fields_len, payload_len, sum) = header(bytes)?;
    let expected = (HEADER_LEN as u64)
        .saturating_add(fields_len)
        .saturating_add(payload_len);
    let len = bytes.len() as u64;
    if len < expected {
        return Err(Corruption::Truncated { len, expected });
    }
    if len > expected {
        return Err(Corruption::TrailingBytes { len, expected });
    }
    // `expected == len` fits in usize, so these casts are exact.
    let fields_end = HEADER_LEN + fields_len as usize;
    let (fields, payload) = (&bytes[HEADER_LEN..fields_end], &bytes[fields_end..]);
    if checksum(fields, payload) != sum {
        return Err(Corruption::Checksum);
    }
    let fields = std::str::from_utf8(fields).map_err(|_| Corruption::BadFields)?;
    Ok((fields, payload))
}

/// The key fields of an entry from its first bytes, without verifying the payload: enough to
/// explain a miss by a near match. `None` if the header is unreadable.
pub(crate) fn peek_fields(prefix: &[u8]) -> Option<String> {
    let (fields_len, _, _) = header(prefix).ok()?;
    let end = HEADER_LEN.checked_add(usize::try_from(fields_len).ok()?)?;
    let fields = prefix.get(HEADER_LEN..end)?;
    std::str::from_utf8(fields).ok().map(str::to_string)
}
