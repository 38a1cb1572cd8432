//! [`KernelCache`]: artefact bytes in memory and on disk.
//!
//! Disk layout: `<root>/<target>/<source group>/<digest>.entry`, where the source group is the
//! first 16 hex digits of the source's SHA-256 and the digest is [`CacheKey::hex`]. Writers
//! write a private temporary file (`.tmp-<pid>-<n>-<digest>`) in the entry's own folder and
//! `rename` it over the entry, which is atomic on POSIX: a reader sees the old entry, the new
//! one or none, never a mix, whatever number of threads and processes write the same key.

use super::entry::{decode, encode, peek_fields, Corruption};
use super::key::CacheKey;
use std::collections::HashMap;
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Why a lookup missed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MissReason {
    /// No entry, and none for the same source under any target.
    NoEntry,
    /// No entry for this key, but one for the same source whose `field` differs.
    Differs {
        field: &'static str,
        cached: String,
        wanted: String,
    },
    /// An entry file exists but is corrupt; it will be replaced by the next insert.
    Corrupt(Corruption),
    /// An entry file exists with a valid checksum but for other key fields (a moved file).
    KeyMismatch { field: &'static str },
    /// The entry could not be read.
    Io(String),
    /// The cache has no disk folder (memory-only) and the key is not in memory.
    NotInMemory,
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MissReason::NoEntry => write!(f, "no entry"),
            MissReason::Differs {
                field,
                cached,
                wanted,
            } => {
                write!(
                    f,
                    "no entry; one exists with {field}={cached} (wanted {wanted})"
                )
            }
            MissReason::Corrupt(c) => write!(f, "corrupt entry ({c})"),
            MissReason::KeyMismatch { field } => {
                write!(f, "entry belongs to another key ({field} differs)")
            }
            MissReason::Io(e) => write!(f, "unreadable entry: {e}"),
            MissReason::NotInMemory => write!(f, "not in the in-memory cache (no disk cache)"),
        }
    }
}

/// Where a hit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitSource {
    Memory,
    Disk,
}

/// The result of [`KernelCache::lookup`].
#[derive(Debug, Clone)]
pub enum Lookup {
    Hit(Arc<[u8]>, HitSource),
    Miss(MissReason),
}

/// A two-level kernel cache: a process-wide map in front of a folder shared by processes.
/// No method returns an error: a cache that cannot read or write degrades to a miss or to
/// memory-only, with a warning, and compilation goes on.
#[derive(Debug)]
pub struct KernelCache {
    memory: Mutex<MemoryMap>,
    root: Option<PathBuf>,
    /// The folder's size limit (`prune.rs`); `None`: unlimited.
    max_bytes: Option<u64>,
    /// The automatic prune this cache started, if any (`prune.rs`).
    pub(crate) pruning: Mutex<Option<std::thread::JoinHandle<super::PruneReport>>>,
    degraded: Option<String>,
    write_warned: AtomicBool,
}

/// The in-memory level: digest → (target, payload).
type MemoryMap = HashMap<[u8; 32], (String, Arc<[u8]>)>;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) const ENTRY_EXT: &str = "entry";
pub(crate) const TMP_PREFIX: &str = ".tmp-";

impl KernelCache {
    /// A cache that never touches the disk.
    pub fn memory_only() -> KernelCache {
        KernelCache {
            memory: Mutex::new(HashMap::new()),
            root: None,
            max_bytes: None,
            pruning: Mutex::new(None),
            degraded: None,
            write_warned: AtomicBool::new(false),
        }
    }

    /// A cache stored under `dir`, created if needed, with the size limit of
    /// [`max_bytes_from_env`](super::max_bytes_from_env). If `dir` cannot be created or
    /// written, the cache is memory-only and says why in [`KernelCache::degraded_reason`] and a
    /// warning.
    pub fn open(dir: impl Into<PathBuf>) -> KernelCache {
        let dir = dir.into();
        let mut cache = Self::memory_only();
        match check_writable(&dir) {
            Ok(()) => {
                cache.root = Some(dir);
                cache.max_bytes = super::max_bytes_from_env();
            }
            Err(reason) => {
                log::warn!(
                    "kernel cache: {} is not usable ({reason}); caching in memory only",
                    dir.display()
                );
                cache.degraded = Some(format!("{}: {reason}", dir.display()));
            }
        }
        cache
    }

    /// The cache folder smelt uses: `$SMELT_CACHE_DIR`, else `$XDG_CACHE_HOME/smelt`, else
    /// `$HOME/.cache/smelt`. `None` when none of those variables is set.
    pub fn default_dir() -> Option<PathBuf> {
        let var = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("SMELT_CACHE_DIR")
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("smelt")))
            .or_else(|| var("HOME").map(|d| d.join(".cache").join("smelt")))
    }

    /// [`KernelCache::open`] on [`KernelCache::default_dir`], or memory-only without one.
    pub fn from_env() -> KernelCache {
        match Self::default_dir() {
            Some(dir) => Self::open(dir),
            None => {
                log::warn!("kernel cache: no SMELT_CACHE_DIR, XDG_CACHE_HOME or HOME; caching in memory only");
                let mut cache = Self::memory_only();
                cache.degraded = Some("no cache folder configured".into());
                cache
            }
        }
    }

    /// The disk folder, if the cache has one.
    pub fn dir(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// This cache with the folder's size limit set to `max_bytes` (`None`: unlimited) instead
    /// of the environment's.
    pub fn with_max_bytes(mut self, max_bytes: Option<u64>) -> KernelCache {
        if self.root.is_some() {
            self.max_bytes = max_bytes;
        }
        self
    }

    /// The size limit the folder is pruned to after writes (see [`KernelCache::prune`]);
    /// `None` without a folder or without a limit.
    pub fn max_bytes(&self) -> Option<u64> {
        self.max_bytes
    }

    /// Why a disk cache asked for is memory-only; `None` when it works as asked.
    pub fn degraded_reason(&self) -> Option<&str> {
        self.degraded.as_deref()
    }

    /// Where the entry for `key` lives (or would live) on disk.
    pub fn entry_path(&self, key: &CacheKey) -> Option<PathBuf> {
        let root = self.root.as_ref()?;
        Some(
            root.join(key.target().as_str())
                .join(key.source_group())
                .join(format!("{}.{ENTRY_EXT}", key.hex())),
        )
    }

    fn memory(&self) -> MutexGuard<'_, MemoryMap> {
        // A panic while holding the lock cannot leave the map inconsistent (single inserts).
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The payload for `key`, or `None`; a miss is logged at debug level with its reason.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<[u8]>> {
        match self.lookup(key) {
            Lookup::Hit(bytes, _) => Some(bytes),
            Lookup::Miss(reason) => {
                log::debug!("kernel cache miss {}/{}: {reason}", key.target(), key.hex());
                None
            }
        }
    }

    /// Like [`KernelCache::get`], but says where a hit came from and why a miss missed.
    pub fn lookup(&self, key: &CacheKey) -> Lookup {
        if let Some((_, bytes)) = self.memory().get(key.digest()) {
            return Lookup::Hit(bytes.clone(), HitSource::Memory);
        }
        let Some(path) = self.entry_path(key) else {
            return Lookup::Miss(MissReason::NotInMemory);
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Lookup::Miss(self.explain_absent(key));
            }
            Err(e) => return Lookup::Miss(MissReason::Io(e.to_string())),
        };
        match decode(&bytes) {
            Err(c) => Lookup::Miss(MissReason::Corrupt(c)),
            Ok((fields, payload)) => {
                if let Some((field, _, _)) = key.first_difference(fields) {
                    return Lookup::Miss(MissReason::KeyMismatch { field });
                }
                let payload: Arc<[u8]> = payload.into();
                self.memory()
                    .insert(*key.digest(), (key.target().to_string(), payload.clone()));
                // Its time of last use, for pruning.
                super::prune::touch(&path);
                Lookup::Hit(payload, HitSource::Disk)
            }
        }
    }

    /// For a key with no entry file: is there a build of the same source with other fields?
    fn explain_absent(&self, key: &CacheKey) -> MissReason {
        let Some(root) = &self.root else {
            return MissReason::NotInMemory;
        };
        // Same target first (a compiler or option change), then other targets.
        let mut groups = vec![root.join(key.target().as_str()).join(key.source_group())];
        if let Ok(targets) = std::fs::read_dir(root) {
            for t in targets.flatten() {
                if t.file_name() != key.target().as_str() {
                    groups.push(t.path().join(key.source_group()));
                }
            }
        }
        for group in groups {
            let Ok(entries) = std::fs::read_dir(&group) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let is_tmp = e.file_name().to_string_lossy().starts_with(TMP_PREFIX);
                if is_tmp || path.extension().and_then(|x| x.to_str()) != Some(ENTRY_EXT) {
                    continue;
                }
                if let Some(fields) = read_prefix(&path).as_deref().and_then(peek_fields) {
                    if let Some((field, cached, wanted)) = key.first_difference(&fields) {
                        return MissReason::Differs {
                            field,
                            cached,
                            wanted,
                        };
                    }
                }
            }
        }
        MissReason::NoEntry
    }

    /// Stores `payload` for `key` in memory and, if the cache has a folder, on disk. A failed
    /// disk write is logged (a warning the first time) and otherwise ignored.
    pub fn insert(&self, key: &CacheKey, payload: &[u8]) {
        self.memory()
            .insert(*key.digest(), (key.target().to_string(), payload.into()));
        if let Some(path) = self.entry_path(key) {
            let entry = encode(&key.fields_text(), payload);
            match write_atomic(&path, &entry) {
                Ok(()) => self.after_write(entry.len() as u64),
                Err(e) if !self.write_warned.swap(true, Ordering::Relaxed) => log::warn!(
                    "kernel cache: cannot write {}: {e}; continuing without it",
                    path.display()
                ),
                Err(e) => log::debug!("kernel cache: cannot write {}: {e}", path.display()),
            }
        }
    }

    /// The payload for `key`, made by `make` on a miss and then inserted.
    pub fn get_or_insert_with<E>(
        &self,
        key: &CacheKey,
        make: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Arc<[u8]>, E> {
        if let Some(bytes) = self.get(key) {
            return Ok(bytes);
        }
        let bytes = make()?;
        self.insert(key, &bytes);
        Ok(bytes.into())
    }

    /// Entries and bytes in memory: `(entries, bytes, per-target entries)`.
    pub(crate) fn memory_stats(&self) -> (usize, u64, HashMap<String, usize>) {
        let memory = self.memory();
        let mut per_target: HashMap<String, usize> = HashMap::new();
        let mut bytes = 0u64;
        for (target, payload) in memory.values() {
            *per_target.entry(target.clone()).or_default() += 1;
            bytes += payload.len() as u64;
        }
        (memory.len(), bytes, per_target)
    }

    pub(crate) fn clear_memory(&self) -> usize {
        let mut memory = self.memory();
        let n = memory.len();
        memory.clear();
        n
    }
}

/// Reads at most the first 4 KiB of a file (enough for any entry header and key fields).
fn read_prefix(path: &Path) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(4096)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

/// Creates `dir` and checks that a file can be created in it.
fn check_writable(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let probe = dir.join(format!(
        "{TMP_PREFIX}probe-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::File::create(&probe)
        .and_then(|mut f| f.write_all(b"x"))
        .map_err(|e| format!("cannot write in it: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename. A
/// prune (`prune.rs`) or `clear` in another thread or process may remove the folder, once
/// empty, between its creation and the rename; the write then starts again, up to three times.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        tries += 1;
        match write_once(path, bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => continue,
            result => return result,
        }
    }
}

fn write_once(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("entry path has no parent folder"))?;
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "{TMP_PREFIX}{}-{}-{name}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.flush()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
