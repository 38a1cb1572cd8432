//! Many threads and many processes writing the same kernel cache entries at once: no reader
//! ever sees a half-written entry (a torn file would show up as a `Corrupt` miss).

use smelt_runtime::cache::{CacheKey, CacheTarget, KernelCache, Lookup, MissReason};
use smelt_runtime::cuda::Arch;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

const CHILD_DIR: &str = "SMELT_CACHE_TEST_CHILD_DIR";
const KEYS: usize = 12;
const ROUNDS: usize = 20;

fn key(i: usize) -> CacheKey {
    let target = CacheTarget::cuda(Arch::parse(["sm_80", "sm_90"][i % 2]).unwrap());
    CacheKey::new(target, format!("kernel {i}").as_bytes(), &[], "nvrtc-12.9")
}

/// The payload every writer stores for key `i`: large enough that writes take a while.
fn payload(i: usize) -> &'static [u8] {
    static PAYLOADS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    &PAYLOADS.get_or_init(|| {
        (0..KEYS)
            .map(|i| {
                (0..256 * 1024)
                    .map(|j| ((i * 31 + j * 7) % 251) as u8)
                    .collect()
            })
            .collect()
    })[i]
}

/// Writes every key `ROUNDS` times and, between writes, reads the keys the other writers are
/// writing at that moment (writer `seed` is on key `n + seed`), through fresh caches so that
/// reads go to disk. Each read must be a miss with no entry or exactly the right payload.
fn hammer(dir: &Path, seed: usize) {
    for round in 0..ROUNDS {
        for n in 0..KEYS {
            let i = (n + seed + round) % KEYS;
            KernelCache::open(dir).insert(&key(i), payload(i));
            for j in [(i + 1) % KEYS, (i + KEYS - 1) % KEYS] {
                match KernelCache::open(dir).lookup(&key(j)) {
                    Lookup::Hit(bytes, _) => {
                        assert!(*bytes == *payload(j), "wrong payload for key {j}")
                    }
                    Lookup::Miss(MissReason::NoEntry) => {}
                    Lookup::Miss(other) => panic!("key {j}: reader saw {other}"),
                }
            }
        }
    }
}

fn check_all_present(dir: &Path) {
    let cache = KernelCache::open(dir);
    for i in 0..KEYS {
        match cache.lookup(&key(i)) {
            Lookup::Hit(bytes, _) => assert!(*bytes == *payload(i)),
            Lookup::Miss(reason) => panic!("key {i} missing at the end: {reason}"),
        }
    }
    let stats = cache.stats();
    assert_eq!(stats.entries, KEYS);
    assert_eq!(
        stats.temp_files, 0,
        "every temporary file was renamed or removed"
    );
    assert_eq!(stats.per_target["sm_80"].entries, KEYS / 2);
}

#[test]
fn concurrent_threads_never_see_partial_entries() {
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for t in 0..6 {
            let dir = dir.path();
            s.spawn(move || hammer(dir, t));
        }
    });
    check_all_present(dir.path());
}

#[test]
fn shared_cache_across_threads_in_memory_and_disk() {
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path());
    std::thread::scope(|s| {
        for t in 0..4 {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..KEYS {
                    let i = (i + t) % KEYS;
                    let got = cache
                        .get_or_insert_with(&key(i), || Ok::<_, ()>(payload(i).to_vec()))
                        .unwrap();
                    assert!(*got == *payload(i));
                }
            });
        }
    });
    assert_eq!(cache.stats().memory_entries, KEYS);
    check_all_present(dir.path());
}

/// Child mode: run by `concurrent_processes_never_see_partial_entries` with the cache folder
/// in an environment variable; does nothing in a normal test run.
#[test]
fn child_cache_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let seed: usize = std::env::var("SMELT_CACHE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    hammer(Path::new(&dir), seed);
}

#[test]
fn concurrent_processes_never_see_partial_entries() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|seed| {
            Command::new(&exe)
                .args(["--exact", "child_cache_writer", "--test-threads=1"])
                .env(CHILD_DIR, dir.path())
                .env("SMELT_CACHE_TEST_SEED", seed.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // The parent reads while the children write.
    hammer(dir.path(), 7);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    check_all_present(dir.path());
}
