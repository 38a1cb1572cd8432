//! Cache keys: what a cached artefact was made from, and its stable digest.
//!
//! The digest is SHA-256 over a versioned text of the key fields, so it is the same across
//! runs, machines and Rust versions (unlike `std`'s randomly keyed SipHash). The fields are kept
//! (hashed where long) so that a miss can say which one differed.

use sha2::{Digest, Sha256};
use std::fmt;

/// Bumped when the meaning of key fields changes; part of every digest.
const KEY_SCHEME: &str = "smelt-kernel-cache-key-v1";

/// The namespace an artefact belongs to: `sm_90`, or `host-<hash of CPU features>`. It is also
/// the first folder level on disk, so it is restricted to `[a-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheTarget(String);

impl CacheTarget {
    /// The target of a CUDA architecture: `sm_90`, `sm_90a`.
    pub fn cuda(arch: crate::cuda::Arch) -> CacheTarget {
        CacheTarget(arch.to_string())
    }

    /// The target of host code for a CPU with `cpu_features` (e.g. LLVM's feature string
    /// `+avx2,+fma,…` plus the CPU name): `host-` and 16 hex digits of its SHA-256.
    pub fn host(cpu_features: &str) -> CacheTarget {
        let digest = Sha256::digest(cpu_features.as_bytes());
        CacheTarget(format!("host-{}", &hex(&digest)[..16]))
    }

    /// Any other target name; `None` unless it is 1–64 characters of `[a-z0-9_-]` not
    /// starting with `-`.
    pub fn new(name: &str) -> Option<CacheTarget> {
        Self::is_valid(name).then(|| CacheTarget(name.to_string()))
    }

    pub(crate) fn is_valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('-')
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CacheTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything an artefact depends on: the source, the compile options, the target, the
/// compiler's version and smelt's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    target: CacheTarget,
    source_hash: String,
    options: Vec<String>,
    compiler_version: String,
    smelt_version: String,
    digest: [u8; 32],
}

/// The names of the key fields, in the order a miss explanation checks them.
pub(crate) const FIELDS: [&str; 5] = ["target", "compiler", "smelt", "options", "source"];

impl CacheKey {
    /// A key for `source` compiled with `options` for `target` by `compiler_version`
    /// (e.g. `nvrtc-12.9`), with this smelt's version.
    pub fn new(
        target: CacheTarget,
        source: &[u8],
        options: &[String],
        compiler_version: &str,
    ) -> CacheKey {
        Self::with_smelt_version(
            target,
            source,
            options,
            compiler_version,
            env!("CARGO_PKG_VERSION"),
        )
    }

    /// [`CacheKey::new`] with an explicit smelt version (for tests of version changes).
    pub fn with_smelt_version(
        target: CacheTarget,
        source: &[u8],
        options: &[String],
        compiler_version: &str,
        smelt_version: &str,
    ) -> CacheKey {
        let mut key = CacheKey {
            target,
            source_hash: hex(&Sha256::digest(source)),
            options: options.to_vec(),
            compiler_version: compiler_version.to_string(),
            smelt_version: smelt_version.to_string(),
            digest: [0; 32],
        };
        let mut h = Sha256::new();
        h.update(KEY_SCHEME.as_bytes());
        h.update(b"\n");
        h.update(key.fields_text().as_bytes());
        key.digest = h.finalize().into();
        key
    }

    pub fn target(&self) -> &CacheTarget {
        &self.target
    }

    pub fn options(&self) -> &[String] {
        &self.options
    }

    pub fn compiler_version(&self) -> &str {
        &self.compiler_version
    }

    pub fn smelt_version(&self) -> &str {
        &self.smelt_version
    }

    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The digest in hex: the entry's file name on disk.
    pub fn hex(&self) -> String {
        hex(&self.digest)
    }

    /// The first 16 hex digits of the source hash: the folder grouping every build of one
    /// source, which is where a miss looks for near matches.
    pub(crate) fn source_group(&self) -> &str {
        &self.source_hash[..16]
    }

    fn options_hash(&self) -> String {
        let mut h = Sha256::new();
        for o in &self.options {
            h.update((o.len() as u64).to_le_bytes());
            h.update(o.as_bytes());
        }
        hex(&h.finalize())
    }

    /// `name=value` lines, one per field in [`FIELDS`] order; stored in each entry's header.
    pub(crate) fn fields_text(&self) -> String {
        let values = self.field_values();
        FIELDS
            .iter()
            .zip(values.iter())
            .map(|(name, value)| format!("{name}={}\n", value.replace('\n', " ")))
            .collect()
    }

    fn field_values(&self) -> [String; 5] {
        [
            self.target.0.clone(),
            self.compiler_version.clone(),
            self.smelt_version.clone(),
            self.options_hash(),
            self.source_hash.clone(),
        ]
    }

    /// The first field whose value in `stored` (an entry's fields text) differs from this key:
    /// `(field, stored value, wanted value)`. `None` when every field matches.
    pub(crate) fn first_difference(&self, stored: &str) -> Option<(&'static str, String, String)> {
        let values = self.field_values();
        for (name, wanted) in FIELDS.iter().zip(values) {
            let found = stored
                .lines()
                .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
                .unwrap_or("<absent>");
            if found != wanted.replace('\n', " ") {
                return Some((name, found.to_string(), wanted));
            }
        }
        None
    }
}
