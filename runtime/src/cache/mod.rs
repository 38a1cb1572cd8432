//! The kernel cache: compiled artefacts (cubins, PTX, host object code — any bytes) in memory
//! and on disk, keyed by everything they were built from.
//!
//! - Key ([`CacheKey`]): SHA-256 of (source, compile options, target, compiler version, smelt
//!   version). The target ([`CacheTarget`]) is `sm_XY` or `host-<CPU features hash>` and is
//!   also the first folder level, so an `sm_80` entry is never found for `sm_90`.
//! - Folder: `$SMELT_CACHE_DIR`, else `$XDG_CACHE_HOME/smelt`, else `~/.cache/smelt`
//!   ([`KernelCache::from_env`]).
//! - Entries: a checked header and the payload (`entry.rs`), written to a temporary file and
//!   renamed into place. A zero-byte, truncated or corrupted entry is a miss and is replaced by
//!   the next insert; an unusable folder makes the cache memory-only, with a warning.
//! - A miss is logged at debug level with its [`MissReason`]: no entry, an entry for the same
//!   source differing in a named field (compiler version, options, target …), or a corrupt one.
//! - Size limit (`prune.rs`): a disk hit sets the entry's modification time, and the folder
//!   is pruned, least recently used entries first, to `$SMELT_CACHE_MAX_SIZE` (default 1 GiB)
//!   when it was last pruned an hour ago or this process has written a tenth of the limit.

mod entry;
mod key;
mod maintenance;
mod prune;
mod store;

pub use entry::Corruption;
pub use key::{CacheKey, CacheTarget};
pub use maintenance::{CacheStats, ClearReport, TargetStats};
pub use prune::{max_bytes_from_env, parse_size, PruneReport, DEFAULT_MAX_BYTES};
pub use store::{HitSource, KernelCache, Lookup, MissReason};
