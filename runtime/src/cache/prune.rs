//! A size limit for the cache folder: least recently used entries go first.
//!
//! An entry's modification time is the time of its last use: [`KernelCache::lookup`] sets it
//! to now on every disk hit (a read-only folder keeps the time of writing). [`KernelCache::prune`]
//! removes entries oldest first until the folder holds at most the limit, and temporary files
//! older than an hour (left by killed writers; a younger one may be a live writer's).
//!
//! The limit is [`KernelCache::max_bytes`]: `$SMELT_CACHE_MAX_SIZE` (`2G`, `500MiB`, `100k`, a
//! number of bytes, or `unlimited`), else [`DEFAULT_MAX_BYTES`]. A cache with a limit prunes
//! itself after a write to disk when the folder was last pruned more than an hour ago (the
//! time of a stamp file, `.last-prune`, in the folder, which every process sees) or when this
//! process has written a tenth of the limit to the folder since it last pruned it. So a
//! folder stays near its limit without a walk over it on every write. That prune runs on a
//! thread of its own ([`KernelCache::wait_for_prune`] waits for it): a walk costs about 12 µs
//! per file on the development VM, so seconds for a folder of a few hundred thousand small
//! entries, which no compile should wait for. A process that exits first leaves it half
//! done, which is harmless (each removal is one `unlink`); the next one finishes it.
//!
//! Removing an entry another process is about to read is harmless: a reader that opened it
//! reads it whole (POSIX), one that had not gets a miss and compiles.

use super::maintenance::walk;
use super::store::KernelCache;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// The folder's size limit when `$SMELT_CACHE_MAX_SIZE` is not set: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// How old a temporary file must be for `prune` to remove it, and how long after a prune the
/// next automatic one is due.
const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// The stamp file whose modification time is when the folder was last pruned.
pub(crate) const STAMP: &str = ".last-prune";

/// What [`KernelCache::prune`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Entries removed, least recently used first, and their bytes.
    pub entries_removed: usize,
    pub bytes_removed: u64,
    /// Temporary files older than an hour that were removed.
    pub temp_files_removed: usize,
    /// What is left.
    pub entries_kept: usize,
    pub bytes_kept: u64,
}

/// A size as `$SMELT_CACHE_MAX_SIZE` and `smelt cache prune --max-size` take it: a number of
/// bytes with an optional unit (`k`, `M`, `G`, `T`, with or without `B` or `iB`, any case;
/// all powers of 1024), or `unlimited`. `Ok(None)` is no limit.
pub fn parse_size(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let scale: u64 = match unit {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => {
            return Err(format!(
                "unknown size unit in {text:?} (expected k, M, G or T)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 1G, 500MiB, 4096, unlimited)"))?;
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!("size {text:?} is too large"));
    }
    Ok(Some(bytes as u64))
}

/// The limit the environment asks for: `$SMELT_CACHE_MAX_SIZE`, else [`DEFAULT_MAX_BYTES`]. An
/// unreadable value is warned about once and the default used.
pub fn max_bytes_from_env() -> Option<u64> {
    static FROM_ENV: OnceLock<Option<u64>> = OnceLock::new();
    *FROM_ENV.get_or_init(|| match std::env::var("SMELT_CACHE_MAX_SIZE") {
        Err(_) => Some(DEFAULT_MAX_BYTES),
        Ok(v) if v.trim().is_empty() => Some(DEFAULT_MAX_BYTES),
        Ok(v) => parse_size(&v).unwrap_or_else(|e| {
            log::warn!("kernel cache: SMELT_CACHE_MAX_SIZE: {e}; using the default of 1 GiB");
            Some(DEFAULT_MAX_BYTES)
        }),
    })
}

/// Bytes this process has written to each folder since it last pruned it.
fn written() -> &'static Mutex<HashMap<PathBuf, u64>> {
    static WRITTEN: OnceLock<Mutex<HashMap<PathBuf, u64>>> = OnceLock::new();
    WRITTEN.get_or_init(Default::default)
}

impl KernelCache {
    /// Removes the least recently used entries until the folder holds at most `max_bytes` of
    /// entries, and temporary files older than an hour. Files outside the cache layout are
    /// left alone; the in-memory level is not touched. Without a folder, does nothing.
    pub fn prune(&self, max_bytes: u64) -> PruneReport {
        match self.dir() {
            Some(root) => prune_folder(root, max_bytes),
            None => PruneReport::default(),
        }
    }

    /// Waits for the automatic prune this cache started in the background, if one is running
    /// or finished unwaited, and returns what it did.
    pub fn wait_for_prune(&self) -> Option<PruneReport> {
        let handle = self.pruning.lock().ok()?.take()?;
        handle.join().ok()
    }

    /// After `bytes` were written to the folder: prune it if it is due (see the module docs),
    /// on a thread of its own, so that a compile never waits for a walk over the folder.
    pub(crate) fn after_write(&self, bytes: u64) {
        let (Some(root), Some(max)) = (self.dir(), self.max_bytes()) else {
            return;
        };
        let by_volume = match written().lock() {
            Ok(mut w) => {
                let n = w.entry(root.to_path_buf()).or_default();
                *n += bytes;
                let due = *n >= max / 10;
                if due {
                    *n = 0;
                }
                due
            }
            Err(_) => false,
        };
        if !(by_volume || stamp_is_old(root)) {
            return;
        }
        let Ok(mut slot) = self.pruning.lock() else {
            return;
        };
        if slot.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        // Stamped now, not when the thread runs: the next writes do not start another.
        stamp(root);
        let root = root.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("smelt-cache-prune".into())
            .spawn(move || prune_folder(&root, max));
        match spawned {
            Ok(handle) => *slot = Some(handle),
            Err(e) => log::debug!("kernel cache: cannot start the prune thread: {e}"),
        }
    }
}

/// [`KernelCache::prune`] of the folder `root`.
fn prune_folder(root: &Path, max_bytes: u64) -> PruneReport {
    let mut report = PruneReport::default();
    stamp(root);
    if let Ok(mut w) = written().lock() {
        w.remove(root);
    }
    let now = SystemTime::now();
    let (files, dirs) = walk(root);
    let mut entries = Vec::new();
    for f in files {
        let age = now.duration_since(f.modified).unwrap_or_default();
        if f.temp {
            if age > PRUNE_INTERVAL && std::fs::remove_file(&f.path).is_ok() {
                report.temp_files_removed += 1;
            }
        } else {
            entries.push(f);
        }
    }
    // Oldest use first; the path breaks ties, so that the order is the same every time.
    entries.sort_by(|a, b| (a.modified, &a.path).cmp(&(b.modified, &b.path)));
    let mut total: u64 = entries.iter().map(|f| f.bytes).sum();
    for f in &entries {
        if total <= max_bytes {
            report.entries_kept += 1;
            report.bytes_kept += f.bytes;
            continue;
        }
        match std::fs::remove_file(&f.path) {
            Ok(()) => {
                report.entries_removed += 1;
                report.bytes_removed += f.bytes;
                total -= f.bytes;
            }
            // Gone already (another process pruned it): it counts as removed, not by us.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= f.bytes,
            Err(e) => {
                log::warn!("kernel cache: cannot remove {}: {e}", f.path.display());
                report.entries_kept += 1;
                report.bytes_kept += f.bytes;
            }
        }
    }
    // The folders this prune emptied go (a writer that creates a file in one meanwhile
    // starts its write again: `write_atomic`).
    if report.entries_removed > 0 {
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
    if report.entries_removed > 0 {
        log::debug!(
            "kernel cache: pruned {} entries ({} bytes) from {} to keep it under {max_bytes} bytes",
            report.entries_removed,
            report.bytes_removed,
            root.display()
        );
    }
    report
}

/// Whether the folder's stamp is missing or older than [`PRUNE_INTERVAL`].
fn stamp_is_old(root: &Path) -> bool {
    let modified = std::fs::metadata(root.join(STAMP)).and_then(|m| m.modified());
    match modified {
        Ok(t) => SystemTime::now()
            .duration_since(t)
            .is_ok_and(|age| age > PRUNE_INTERVAL),
        Err(_) => true,
    }
}

/// Sets the stamp's time to now (creating it), so that other processes do not prune too.
fn stamp(root: &Path) {
    let path = root.join(STAMP);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path);
    if let Ok(f) = file {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Sets `path`'s modification time to now: the entry was just used. Errors (a read-only
/// folder, an entry removed meanwhile) are ignored.
pub(crate) fn touch(path: &Path) {
    if let Ok(f) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}
