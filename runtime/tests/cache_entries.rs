//! The kernel cache's disk entries: round trips, damaged files, other targets and versions,
//! unusable folders, stats and clear.

use smelt_runtime::cache::{
    CacheKey, CacheTarget, Corruption, HitSource, KernelCache, Lookup, MissReason,
};
use smelt_runtime::cuda::Arch;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

fn sm(arch: &str) -> CacheTarget {
    CacheTarget::cuda(Arch::parse(arch).unwrap())
}

fn key(arch: &str, source: &str) -> CacheKey {
    CacheKey::new(
        sm(arch),
        source.as_bytes(),
        &["--gpu-architecture=x".to_string()],
        "nvrtc-12.9",
    )
}

fn miss(cache: &KernelCache, key: &CacheKey) -> MissReason {
    match cache.lookup(key) {
        Lookup::Miss(reason) => reason,
        Lookup::Hit(bytes, from) => {
            panic!("expected a miss, got {} bytes from {from:?}", bytes.len())
        }
    }
}

fn hit(cache: &KernelCache, key: &CacheKey) -> (Vec<u8>, HitSource) {
    match cache.lookup(key) {
        Lookup::Hit(bytes, from) => (bytes.to_vec(), from),
        Lookup::Miss(reason) => panic!("expected a hit, got a miss: {reason}"),
    }
}

/// A cache on `dir` with one entry for `k`, and that entry's path.
fn with_entry(dir: &Path, k: &CacheKey, payload: &[u8]) -> std::path::PathBuf {
    let cache = KernelCache::open(dir);
    assert!(
        cache.degraded_reason().is_none(),
        "{:?}",
        cache.degraded_reason()
    );
    cache.insert(k, payload);
    cache.entry_path(k).unwrap()
}

#[test]
fn round_trip_through_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("sm_90", "kernel A");
    let cache = KernelCache::open(dir.path());
    assert_eq!(miss(&cache, &k), MissReason::NoEntry);
    cache.insert(&k, b"cubin bytes");
    assert_eq!(
        hit(&cache, &k),
        (b"cubin bytes".to_vec(), HitSource::Memory)
    );
    let fresh = KernelCache::open(dir.path());
    assert_eq!(hit(&fresh, &k), (b"cubin bytes".to_vec(), HitSource::Disk));
    assert_eq!(
        hit(&fresh, &k).1,
        HitSource::Memory,
        "a disk hit is kept in memory"
    );
    let path = cache.entry_path(&k).unwrap();
    assert!(
        path.starts_with(dir.path().join("sm_90")),
        "{}",
        path.display()
    );
    assert!(path
        .to_string_lossy()
        .ends_with(&format!("{}.entry", k.hex())));
}

#[test]
fn keys_are_stable_across_runs_and_machines() {
    // If this digest changes, every user's cache is invalidated: do it on purpose only.
    let k = CacheKey::with_smelt_version(
        sm("sm_90"),
        b"extern \"C\" __global__ void k() {}",
        &["--gpu-architecture=sm_90".to_string()],
        "nvrtc-12.9",
        "0.1.0",
    );
    assert_eq!(k.hex(), STABLE_DIGEST);
    assert_eq!(
        CacheTarget::host("+avx2,+fma").as_str().len(),
        "host-".len() + 16
    );
    assert_eq!(
        CacheTarget::host("+avx2,+fma"),
        CacheTarget::host("+avx2,+fma")
    );
    assert_ne!(CacheTarget::host("+avx2,+fma"), CacheTarget::host("+avx2"));
    assert!(CacheTarget::new("../etc").is_none());
    assert!(CacheTarget::new("Sm_90").is_none());
    assert!(CacheTarget::new("sm_90").is_some());
}

// Recomputed by hand: sha256("smelt-kernel-cache-key-v1\n" + the fields text; see key.rs).
const STABLE_DIGEST: &str = "37df72d0999ee542b8f27af8e29ffcb00932cd0655426aaecf3b591220f69604";

#[test]
fn zero_byte_entry_is_a_miss_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("sm_80", "kernel Z");
    let path = with_entry(dir.path(), &k, b"payload");
    std::fs::write(&path, b"").unwrap();
    let cache = KernelCache::open(dir.path());
    assert_eq!(miss(&cache, &k), MissReason::Corrupt(Corruption::Empty));
    assert_eq!(cache.get(&k), None);
    cache.insert(&k, b"payload");
    assert_eq!(hit(&KernelCache::open(dir.path()), &k).0, b"payload");
}

#[test]
fn truncated_entries_are_misses() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("sm_80", "kernel T");
    let path = with_entry(dir.path(), &k, &[7u8; 1000]);
    let full = std::fs::read(&path).unwrap();
    for cut in [1, 8, 30, 56, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let reason = miss(&KernelCache::open(dir.path()), &k);
        assert!(
            matches!(reason, MissReason::Corrupt(Corruption::Truncated { .. })),
            "cut at {cut}: {reason}"
        );
    }
    // Extra bytes after a valid entry are corruption too.
    let mut longer = full.clone();
    longer.push(0);
    std::fs::write(&path, &longer).unwrap();
    let reason = miss(&KernelCache::open(dir.path()), &k);
    assert!(
        matches!(
            reason,
            MissReason::Corrupt(Corruption::TrailingBytes { .. })
        ),
        "{reason}"
    );
    // The next insert replaces the damaged file.
    KernelCache::open(dir.path()).insert(&k, &[7u8; 1000]);
    assert_eq!(std::fs::read(&path).unwrap(), full);
}

#[test]
fn corrupted_payload_magic_and_version_are_misses() {
    let dir = tempfile::tempdir().unwrap();
    let k = key("sm_90", "kernel C");
    let path = with_entry(dir.path(), &k, b"0123456789abcdef");
    let good = std::fs::read(&path).unwrap();
    let cases: [(usize, Corruption); 4] = [
        (good.len() - 3, Corruption::Checksum), // a payload byte
        (60, Corruption::Checksum),             // a key-fields byte
        (0, Corruption::BadMagic),
        (8, Corruption::FormatVersion(1 ^ 0x40)),
    ];
    for (at, expected) in cases {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        assert_eq!(
            miss(&KernelCache::open(dir.path()), &k),
            MissReason::Corrupt(expected),
            "byte {at}"
        );
    }
}

#[test]
fn an_entry_for_sm80_is_not_used_for_sm90() {
    let dir = tempfile::tempdir().unwrap();
    let src = "same source";
    with_entry(dir.path(), &key("sm_80", src), b"sm_80 cubin");
    let cache = KernelCache::open(dir.path());
    assert_eq!(
        miss(&cache, &key("sm_90", src)),
        MissReason::Differs {
            field: "target",
            cached: "sm_80".into(),
            wanted: "sm_90".into(),
        }
    );
    assert_eq!(cache.get(&key("sm_90", src)), None);
    assert_eq!(hit(&cache, &key("sm_80", src)).0, b"sm_80 cubin");
}

#[test]
fn a_miss_names_the_field_that_changed() {
    let dir = tempfile::tempdir().unwrap();
    let opts = vec!["-O3".to_string()];
    let base = CacheKey::with_smelt_version(sm("sm_90"), b"src", &opts, "nvrtc-12.8", "0.1.0");
    with_entry(dir.path(), &base, b"x");
    let cache = KernelCache::open(dir.path());
    let newer_nvrtc =
        CacheKey::with_smelt_version(sm("sm_90"), b"src", &opts, "nvrtc-12.9", "0.1.0");
    assert_eq!(
        miss(&cache, &newer_nvrtc),
        MissReason::Differs {
            field: "compiler",
            cached: "nvrtc-12.8".into(),
            wanted: "nvrtc-12.9".into(),
        }
    );
    let newer_smelt =
        CacheKey::with_smelt_version(sm("sm_90"), b"src", &opts, "nvrtc-12.8", "0.2.0");
    assert!(matches!(
        miss(&cache, &newer_smelt),
        MissReason::Differs { field: "smelt", .. }
    ));
    let other_opts = CacheKey::with_smelt_version(sm("sm_90"), b"src", &[], "nvrtc-12.8", "0.1.0");
    assert!(matches!(
        miss(&cache, &other_opts),
        MissReason::Differs {
            field: "options",
            ..
        }
    ));
    let other_src =
        CacheKey::with_smelt_version(sm("sm_90"), b"other", &opts, "nvrtc-12.8", "0.1.0");
    assert_eq!(miss(&cache, &other_src), MissReason::NoEntry);
}

#[test]
fn an_entry_moved_to_another_key_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let a = key("sm_90", "source");
    let b = CacheKey::new(sm("sm_90"), b"source", &[], "nvrtc-12.9");
    let path_a = with_entry(dir.path(), &a, b"for a");
    let path_b = KernelCache::open(dir.path()).entry_path(&b).unwrap();
    std::fs::rename(&path_a, &path_b).unwrap();
    assert_eq!(
        miss(&KernelCache::open(dir.path()), &b),
        MissReason::KeyMismatch { field: "options" }
    );
}

/// Captures log records, to check that a miss is explained in the debug log.
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}", record.level(), record.args()));
    }
    fn flush(&self) {}
}

fn captured() -> &'static Capture {
    static LOGGER: OnceLock<&'static Capture> = OnceLock::new();
    LOGGER.get_or_init(|| {
        let logger: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        let _ = log::set_logger(logger);
        log::set_max_level(log::LevelFilter::Debug);
        logger
    })
}

#[test]
fn misses_are_logged_with_their_reason() {
    let logs = captured();
    let dir = tempfile::tempdir().unwrap();
    with_entry(dir.path(), &key("sm_80", "logged source"), b"x");
    let cache = KernelCache::open(dir.path());
    assert_eq!(cache.get(&key("sm_90", "logged source")), None);
    let lines = logs.0.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("DEBUG kernel cache miss sm_90/") && l.contains("target=sm_80")),
        "{lines:#?}"
    );
}

#[test]
fn an_unusable_folder_degrades_to_memory_only() {
    let logs = captured();
    let dir = tempfile::tempdir().unwrap();
    // A path below a regular file can never be created, even by root.
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let cache = KernelCache::open(file.join("cache"));
    assert!(cache.dir().is_none());
    assert!(
        cache.degraded_reason().unwrap().contains("cannot create"),
        "{:?}",
        cache.degraded_reason()
    );
    let k = key("sm_90", "memory only");
    assert_eq!(miss(&cache, &k), MissReason::NotInMemory);
    cache.insert(&k, b"still cached");
    assert_eq!(
        hit(&cache, &k),
        (b"still cached".to_vec(), HitSource::Memory)
    );
    assert_eq!(cache.stats().memory_entries, 1);
    let lines = logs.0.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.starts_with("WARN kernel cache:")),
        "{lines:#?}"
    );
}

#[test]
fn a_read_only_folder_degrades_to_memory_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // Root (as in CI) ignores permission bits: then this case cannot be made, and the test
    // above (a folder below a file) covers the same code path.
    if std::fs::write(ro.join("probe"), b"").is_ok() {
        println!("a_read_only_folder_degrades_to_memory_only: skipped, running as root");
        return;
    }
    let cache = KernelCache::open(&ro);
    assert!(cache.dir().is_none());
    assert!(cache.degraded_reason().unwrap().contains("cannot write"));
    let k = key("sm_90", "ro");
    cache.insert(&k, b"x");
    assert_eq!(hit(&cache, &k).1, HitSource::Memory);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_folder_that_turns_unwritable_later_is_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path());
    let k = key("sm_90", "later");
    // Block the target folder with a file: the entry cannot be written, the insert goes on.
    std::fs::write(dir.path().join("sm_90"), b"in the way").unwrap();
    cache.insert(&k, b"kept in memory");
    assert_eq!(
        hit(&cache, &k),
        (b"kept in memory".to_vec(), HitSource::Memory)
    );
}

#[test]
fn stats_count_per_target_and_clear_removes_only_cache_files() {
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path());
    cache.insert(&key("sm_80", "a"), &[1; 10]);
    cache.insert(&key("sm_90", "a"), &[1; 20]);
    cache.insert(&key("sm_90", "b"), &[1; 30]);
    let host = CacheKey::new(CacheTarget::host("+avx2"), b"a", &[], "llvm-18");
    cache.insert(&host, &[1; 40]);
    // A leftover temporary file from a killed writer, and a file that is not ours.
    let group = cache.entry_path(&key("sm_90", "a")).unwrap();
    let group = group.parent().unwrap();
    std::fs::write(group.join(".tmp-999-0-x.entry"), b"half").unwrap();
    std::fs::write(dir.path().join("README"), b"not a cache file").unwrap();

    let stats = cache.stats();
    assert_eq!(stats.entries, 4);
    assert_eq!(stats.per_target["sm_80"].entries, 1);
    assert_eq!(stats.per_target["sm_90"].entries, 2);
    assert_eq!(stats.per_target[host.target().as_str()].entries, 1);
    assert_eq!(stats.temp_files, 1);
    assert_eq!(stats.memory_entries, 4);
    assert!(
        stats.bytes > 100,
        "entries include their headers: {stats:?}"
    );
    assert!(stats.to_string().contains("sm_90: 2 entries"), "{stats}");
    assert_eq!(cache.memory_per_target()["sm_90"], 2);

    let report = cache.clear();
    assert_eq!(report.files_removed, 5);
    assert_eq!(report.memory_entries_removed, 4);
    let after = cache.stats();
    assert_eq!(
        (after.entries, after.temp_files, after.memory_entries),
        (0, 0, 0)
    );
    assert!(dir.path().join("README").exists());
    assert!(
        !dir.path().join("sm_90").exists(),
        "empty folders are removed"
    );
    assert_eq!(miss(&cache, &key("sm_90", "a")), MissReason::NoEntry);
}

const CHILD_ENV: &str = "SMELT_CACHE_DIR_TEST_CHILD";

/// Child mode of `cache_folder_comes_from_the_environment` (environment variables are
/// process-wide, so they are set only in a child process).
#[test]
fn child_default_dir() {
    let Some(expected) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    assert_eq!(KernelCache::default_dir(), Some(expected.into()));
    let cache = KernelCache::from_env();
    assert!(
        cache.degraded_reason().is_none(),
        "{:?}",
        cache.degraded_reason()
    );
}

#[test]
fn cache_folder_comes_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let run = |vars: &[(&str, std::path::PathBuf)], expected: std::path::PathBuf| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_default_dir", "--test-threads=1"])
            .env_remove("SMELT_CACHE_DIR")
            .env_remove("XDG_CACHE_HOME")
            .env(CHILD_ENV, &expected);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{vars:?}:\n{stdout}"
        );
    };
    let explicit = dir.path().join("explicit");
    let xdg = dir.path().join("xdg");
    let home = dir.path().join("home");
    run(
        &[
            ("SMELT_CACHE_DIR", explicit.clone()),
            ("XDG_CACHE_HOME", xdg.clone()),
        ],
        explicit,
    );
    run(
        &[("XDG_CACHE_HOME", xdg.clone()), ("HOME", home.clone())],
        xdg.join("smelt"),
    );
    run(&[("HOME", home.clone())], home.join(".cache").join("smelt"));
}
