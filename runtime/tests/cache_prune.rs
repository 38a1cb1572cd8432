//! The kernel cache folder's size limit: least recently used entries go first, a disk hit
//! counts as a use, stale temporary files go, other files stay, and a cache with a limit
//! prunes itself after writes, on a thread of its own (by volume written, or when the folder's
//! stamp is an hour old).

use smelt_runtime::cache::{parse_size, CacheKey, CacheTarget, KernelCache, Lookup, MissReason};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

fn key(source: &str) -> CacheKey {
    CacheKey::new(
        CacheTarget::new("sm_90").unwrap(),
        source.as_bytes(),
        &[],
        "nvrtc-test",
    )
}

/// A cache on `dir` that never prunes by itself, so that a test decides when it does.
fn unlimited(dir: &Path) -> KernelCache {
    let cache = KernelCache::open(dir).with_max_bytes(None);
    assert!(cache.degraded_reason().is_none());
    cache
}

fn set_age(path: &Path, age: Duration) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn on_disk(dir: &Path, k: &CacheKey) -> bool {
    matches!(unlimited(dir).lookup(k), Lookup::Hit(..))
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Entry bytes in the folder, counted independently of `stats`: every `*.entry` file.
fn entry_bytes(dir: &Path) -> u64 {
    fn walk(d: &Path, total: &mut u64) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, total);
            } else if p.extension().is_some_and(|x| x == "entry") {
                *total += size(&p);
            }
        }
    }
    let mut total = 0;
    walk(dir, &mut total);
    total
}

#[test]
fn prune_removes_the_least_recently_used_entries_first() {
    let dir = tempfile::tempdir().unwrap();
    let cache = unlimited(dir.path());
    let keys: Vec<CacheKey> = (0..4).map(|i| key(&format!("kernel {i}"))).collect();
    let mut paths: Vec<PathBuf> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        cache.insert(k, &vec![i as u8; 1000 + 100 * i]);
        paths.push(cache.entry_path(k).unwrap());
    }
    // Last used: kernel 2 longest ago, then 0, then 3, then 1.
    for (i, hours) in [(2, 4), (0, 3), (3, 2), (1, 1)] {
        set_age(&paths[i], Duration::from_secs(hours * 3600));
    }
    let total: u64 = paths.iter().map(|p| size(p)).sum();
    // Room for all but the two oldest, less one byte: kernels 2 and 0 must go, 3 and 1 stay.
    let keep = size(&paths[3]) + size(&paths[1]);
    let r = cache.prune(keep);
    assert_eq!(r.entries_removed, 2, "{r:?}");
    assert_eq!(r.bytes_removed, total - keep);
    assert_eq!((r.entries_kept, r.bytes_kept), (2, keep));
    let left: Vec<bool> = keys.iter().map(|k| on_disk(dir.path(), k)).collect();
    assert_eq!(left, [false, true, false, true]);
    assert_eq!(entry_bytes(dir.path()), keep);
    // Already under the limit: nothing more goes.
    assert_eq!(cache.prune(keep).entries_removed, 0);
    // A limit of zero empties the folder, and the emptied folders go with it.
    let r = cache.prune(0);
    assert_eq!((r.entries_removed, r.entries_kept), (2, 0));
    assert!(!dir.path().join("sm_90").exists());
}

#[test]
fn a_disk_hit_makes_an_entry_recent() {
    let dir = tempfile::tempdir().unwrap();
    let cache = unlimited(dir.path());
    let (old, newer) = (key("old kernel"), key("newer kernel"));
    cache.insert(&old, &[1; 2000]);
    cache.insert(&newer, &[2; 2000]);
    let (p_old, p_newer) = (
        cache.entry_path(&old).unwrap(),
        cache.entry_path(&newer).unwrap(),
    );
    set_age(&p_old, Duration::from_secs(7200));
    set_age(&p_newer, Duration::from_secs(3600));
    // Another process reads the old entry from disk: it becomes the most recently used.
    assert!(on_disk(dir.path(), &old));
    let r = cache.prune(size(&p_old));
    assert_eq!(r.entries_removed, 1, "{r:?}");
    assert!(p_old.exists() && !p_newer.exists());
}

#[test]
fn prune_removes_stale_temporary_files_and_nothing_outside_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let cache = unlimited(dir.path());
    let k = key("kernel");
    cache.insert(&k, b"payload");
    let group = cache
        .entry_path(&k)
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let stale = group.join(".tmp-1-0-stale");
    let live = group.join(".tmp-2-0-live");
    let foreign = [dir.path().join("notes.txt"), group.join("README")];
    for f in [&stale, &live].into_iter().chain(&foreign) {
        std::fs::write(f, b"x").unwrap();
    }
    set_age(&stale, Duration::from_secs(2 * 3600));
    set_age(&foreign[0], Duration::from_secs(100 * 3600));
    let r = cache.prune(0);
    assert_eq!((r.entries_removed, r.temp_files_removed), (1, 1), "{r:?}");
    assert!(
        !stale.exists(),
        "a temporary file two hours old is a killed writer's"
    );
    assert!(
        live.exists(),
        "a young temporary file may be a live writer's"
    );
    for f in &foreign {
        assert!(f.exists(), "{} is not the cache's", f.display());
    }
}

#[test]
fn a_cache_with_a_limit_prunes_itself_by_volume_written() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 20_000;
    let cache = KernelCache::open(dir.path()).with_max_bytes(Some(limit));
    assert_eq!(cache.max_bytes(), Some(limit));
    let mut largest = 0;
    for i in 0..100 {
        let k = key(&format!("kernel {i}"));
        cache.insert(&k, &[0; 500]);
        cache.wait_for_prune();
        largest = largest.max(size(&cache.entry_path(&k).unwrap()));
        // Pruned whenever a tenth of the limit has been written since the last prune.
        let held = entry_bytes(dir.path());
        assert!(
            held <= limit + limit / 10 + largest,
            "after {} inserts: {held} bytes",
            i + 1
        );
    }
    // 100 entries of over 500 bytes were written; at most about the limit is left, and the
    // newest entry is among what is left.
    assert!(entry_bytes(dir.path()) <= limit + limit / 10 + largest);
    assert!(on_disk(dir.path(), &key("kernel 99")));
    assert!(!on_disk(dir.path(), &key("kernel 0")));
    assert!(dir.path().join(".last-prune").exists());
}

#[test]
fn a_stale_stamp_prunes_on_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 10_000;
    let limited = KernelCache::open(dir.path()).with_max_bytes(Some(limit));
    // The first write finds no stamp, prunes (nothing to remove) and stamps the folder.
    limited.insert(&key("first"), &[0; 100]);
    let first = limited
        .wait_for_prune()
        .expect("a prune on the first write");
    assert_eq!((first.entries_removed, first.entries_kept), (0, 1));
    let stamp = dir.path().join(".last-prune");
    assert!(stamp.exists());
    // Another process without a limit fills the folder past it.
    let other = unlimited(dir.path());
    for i in 0..100 {
        other.insert(&key(&format!("other {i}")), &[1; 300]);
    }
    assert!(entry_bytes(dir.path()) > 3 * limit);
    // A small write with a fresh stamp does not walk the folder…
    limited.insert(&key("second"), &[0; 100]);
    assert_eq!(limited.wait_for_prune(), None);
    assert!(entry_bytes(dir.path()) > 3 * limit);
    // …one with a stamp an hour old does.
    set_age(&stamp, Duration::from_secs(3601));
    limited.insert(&key("third"), &[0; 100]);
    let third = limited
        .wait_for_prune()
        .expect("a prune after the stale stamp");
    assert!(third.entries_removed > 70, "{third:?}");
    assert!(entry_bytes(dir.path()) <= limit);
    assert!(on_disk(dir.path(), &key("third")));
}

#[test]
fn sizes_parse_with_units_and_bad_ones_are_errors() {
    assert_eq!(parse_size("4096"), Ok(Some(4096)));
    assert_eq!(parse_size("1G"), Ok(Some(1 << 30)));
    assert_eq!(parse_size("500MiB"), Ok(Some(500 << 20)));
    assert_eq!(parse_size("1.5k"), Ok(Some(1536)));
    assert_eq!(parse_size(" 2 gb "), Ok(Some(2 << 30)));
    assert_eq!(parse_size("1T"), Ok(Some(1 << 40)));
    assert_eq!(parse_size("unlimited"), Ok(None));
    for bad in ["", "G", "12X", "-1", "1.2.3M", "1e30T"] {
        let e = parse_size(bad).expect_err(bad);
        assert!(e.contains(bad.trim()) || e.contains("size"), "{bad}: {e}");
    }
}

#[test]
fn pruning_while_threads_write_and_read_never_tears_an_entry() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 8 * 1024;
    let payload = |t: usize, i: usize| vec![(t * 64 + i) as u8; 1000 + t];
    std::thread::scope(|s| {
        for t in 0..4 {
            let dir = dir.path();
            s.spawn(move || {
                let cache = KernelCache::open(dir).with_max_bytes(Some(limit));
                for i in 0..60 {
                    cache.insert(&key(&format!("thread {t} kernel {i}")), &payload(t, i));
                    // Read what the others wrote a moment ago, through a fresh cache (disk).
                    for other in 0..4 {
                        let k = key(&format!("thread {other} kernel {}", i.saturating_sub(1)));
                        match unlimited(dir).lookup(&k) {
                            Lookup::Hit(bytes, _) => {
                                assert_eq!(*bytes, *payload(other, i.saturating_sub(1)))
                            }
                            Lookup::Miss(MissReason::NoEntry) => {}
                            Lookup::Miss(other) => panic!("a reader saw {other}"),
                        }
                    }
                }
                cache.wait_for_prune();
            });
        }
    });
    // Every entry left is whole and the right one; one more prune leaves the folder within
    // the limit.
    let mut left = 0;
    for t in 0..4 {
        for i in 0..60 {
            match unlimited(dir.path()).lookup(&key(&format!("thread {t} kernel {i}"))) {
                Lookup::Hit(bytes, _) => {
                    assert_eq!(*bytes, *payload(t, i));
                    left += 1;
                }
                Lookup::Miss(MissReason::NoEntry) => {}
                Lookup::Miss(other) => panic!("thread {t} kernel {i}: {other}"),
            }
        }
    }
    assert!(left > 0 && left < 240, "{left} entries left");
    unlimited(dir.path()).prune(limit);
    assert!(entry_bytes(dir.path()) <= limit);
}
