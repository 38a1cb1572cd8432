//! `stats` and `clear`: what backs `smelt cache stats|clear`.

use super::key::CacheTarget;
use super::store::{KernelCache, ENTRY_EXT, TMP_PREFIX};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Counts for one target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetStats {
    pub entries: usize,
    pub bytes: u64,
}

/// What a cache holds. Disk numbers count entry files (valid or not) without reading them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// The disk folder, if any.
    pub dir: Option<PathBuf>,
    /// Entry files on disk.
    pub entries: usize,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Per target (`sm_90`, `host-…`), on disk.
    pub per_target: BTreeMap<String, TargetStats>,
    /// Leftover temporary files (from killed writers); `clear` removes them.
    pub temp_files: usize,
    /// Entries in this process's memory.
    pub memory_entries: usize,
    pub memory_bytes: u64,
    /// The folder's size limit ([`KernelCache::max_bytes`]); `None`: unlimited or no folder.
    pub max_bytes: Option<u64>,
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dir {
            Some(d) => writeln!(f, "cache folder: {}", d.display())?,
            None => writeln!(f, "cache folder: none (memory only)")?,
        }
        writeln!(f, "entries: {} ({} bytes)", self.entries, self.bytes)?;
        if self.dir.is_some() {
            match self.max_bytes {
                Some(max) => writeln!(
                    f,
                    "size limit: {max} bytes (SMELT_CACHE_MAX_SIZE; least recently used entries go first)"
                )?,
                None => writeln!(f, "size limit: none (SMELT_CACHE_MAX_SIZE=unlimited)")?,
            }
        }
        for (target, s) in &self.per_target {
            writeln!(f, "  {target}: {} entries, {} bytes", s.entries, s.bytes)?;
        }
        if self.temp_files > 0 {
            writeln!(f, "temporary files: {}", self.temp_files)?;
        }
        Ok(())
    }
}

/// What `clear` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClearReport {
    pub files_removed: usize,
    pub bytes_removed: u64,
    pub memory_entries_removed: usize,
}

/// A file in the cache layout: an entry or a temporary file, two folders below a target.
pub(crate) struct CacheFile {
    pub(crate) path: PathBuf,
    pub(crate) target: String,
    pub(crate) bytes: u64,
    pub(crate) temp: bool,
    /// For an entry, the time of its last use (see `prune.rs`); the Unix epoch if unknown.
    pub(crate) modified: SystemTime,
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Every file of smelt's layout under `root`: `<target>/<16 hex>/<64 hex>.entry` and
/// `.tmp-*` files beside them. Anything else in the folder is left alone.
pub(crate) fn walk(root: &Path) -> (Vec<CacheFile>, Vec<PathBuf>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let Ok(targets) = std::fs::read_dir(root) else {
        return (files, dirs);
    };
    for t in targets.flatten() {
        let target = t.file_name().to_string_lossy().into_owned();
        if !CacheTarget::is_valid(&target) || !t.path().is_dir() {
            continue;
        }
        let Ok(groups) = std::fs::read_dir(t.path()) else {
            continue;
        };
        for g in groups.flatten() {
            let group = g.file_name().to_string_lossy().into_owned();
            if group.len() != 16 || !is_hex(&group) || !g.path().is_dir() {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(g.path()) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let temp = name.starts_with(TMP_PREFIX);
                let entry = name
                    .strip_suffix(&format!(".{ENTRY_EXT}"))
                    .is_some_and(|stem| stem.len() == 64 && is_hex(stem));
                if !temp && !entry {
                    continue;
                }
                let meta = e.metadata().ok();
                files.push(CacheFile {
                    path: e.path(),
                    target: target.clone(),
                    bytes: meta.as_ref().map_or(0, |m| m.len()),
                    temp,
                    modified: meta
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
            dirs.push(g.path());
        }
        dirs.push(t.path());
    }
    (files, dirs)
}

impl KernelCache {
    /// Entries and bytes, on disk and in memory, per target.
    pub fn stats(&self) -> CacheStats {
        let (memory_entries, memory_bytes, _) = self.memory_stats();
        let mut stats = CacheStats {
            dir: self.dir().map(Path::to_path_buf),
            memory_entries,
            memory_bytes,
            max_bytes: self.max_bytes(),
            ..CacheStats::default()
        };
        if let Some(root) = self.dir() {
            for f in walk(root).0 {
                if f.temp {
                    stats.temp_files += 1;
                    continue;
                }
                stats.entries += 1;
                stats.bytes += f.bytes;
                let t = stats.per_target.entry(f.target).or_default();
                t.entries += 1;
                t.bytes += f.bytes;
            }
        }
        stats
    }

    /// In-memory entry counts per target (this process only).
    pub fn memory_per_target(&self) -> BTreeMap<String, usize> {
        self.memory_stats().2.into_iter().collect()
    }

    /// Removes every entry (and leftover temporary file) on disk and in memory. Files that are
    /// not part of the cache layout are kept, so a cache folder shared with other data is safe.
    /// A concurrent writer may add an entry right after; that is fine.
    pub fn clear(&self) -> ClearReport {
        let mut report = ClearReport {
            memory_entries_removed: self.clear_memory(),
            ..ClearReport::default()
        };
        if let Some(root) = self.dir() {
            let (files, dirs) = walk(root);
            for f in files {
                match std::fs::remove_file(&f.path) {
                    Ok(()) => {
                        report.files_removed += 1;
                        report.bytes_removed += f.bytes;
                    }
                    Err(e) => log::warn!("kernel cache: cannot remove {}: {e}", f.path.display()),
                }
            }
            // Groups come before their target in `dirs`; only empty folders go.
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
            let _ = std::fs::remove_file(root.join(super::prune::STAMP));
        }
        report
    }
}
