//! The disk cache of JIT-compiled CPU kernel modules (`cpu/disk_cache.rs`): a program compiled
//! with the in-process cache emptied (as a new process would) loads its modules from disk,
//! runs to the same bits, and a truncated, corrupted or foreign entry is a miss that is
//! compiled and replaced. Its own test binary, so that no other test's compiles count.

#![cfg(feature = "llvm")]

use smelt_frontend::{DType, Tracer};
use smelt_ir::HostTensor;
use smelt_passes::{kernel::lower, optimize, PassOptions};
use smelt_runtime::cpu::{
    clear_jit_cache, jit_compilations, jit_disk_hits, CpuDiskCache, CpuOptions, CpuProgram,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The counters are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A few kernels (softmax rows, an elementwise tail, a reduction), enough for more than one
/// module on a machine with several cores.
fn program(width: usize) -> smelt_passes::kernel::Program {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [8, width]).unwrap();
    let s = x.exp().unwrap().softmax(-1).unwrap();
    let y = s.mul(&x).unwrap().tanh().unwrap();
    let z = y.sum(&[0], false).unwrap();
    t.output("y", &y).unwrap();
    t.output("z", &z).unwrap();
    let g = t.finish().unwrap();
    let opt = optimize(&g, &PassOptions::default()).unwrap();
    lower(&opt.graph, &opt.plan).unwrap()
}

fn options(cache: CpuDiskCache) -> CpuOptions {
    CpuOptions {
        disk_cache: cache,
        ..CpuOptions::default()
    }
}

fn run(p: &CpuProgram, width: usize) -> Vec<u8> {
    let x = HostTensor::from_f32(
        [8, width],
        (0..8 * width).map(|i| (i as f32 * 0.37).sin()).collect(),
    )
    .unwrap();
    let out = p.run(&HashMap::from([("x".to_string(), x)])).unwrap();
    out.iter()
        .flat_map(|(name, t)| {
            let mut b = name.as_bytes().to_vec();
            b.extend(t.data().to_le_bytes());
            b
        })
        .collect()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "entry") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Compiles `width`'s program as a new process would (in-process cache empty); returns the
/// program and how many modules it compiled and loaded from disk.
fn fresh(width: usize, cache: CpuDiskCache) -> (CpuProgram, usize, usize) {
    clear_jit_cache();
    let (c, h) = (jit_compilations(), jit_disk_hits());
    let p = CpuProgram::compile_with(&program(width), &HashMap::new(), &options(cache)).unwrap();
    (p, jit_compilations() - c, jit_disk_hits() - h)
}

#[test]
fn a_new_process_loads_the_kernels_from_disk() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let at = CpuDiskCache::At(dir.path().to_path_buf());
    let (first, compiled, hits) = fresh(40, at.clone());
    assert_eq!((compiled, hits), (1, 0));
    let written = entries(dir.path());
    assert!(!written.is_empty(), "no entry written");
    let want = run(&first, 40);

    // Again with the in-process cache empty: every module comes from disk.
    let (again, _, hits) = fresh(40, at.clone());
    assert_eq!(hits, written.len(), "one hit per module");
    assert_eq!(entries(dir.path()), written, "nothing rewritten");
    drop(first);
    assert_eq!(
        run(&again, 40),
        want,
        "same bits from the cached machine code"
    );

    // Off: nothing read (the modules are on disk) and nothing written (a new shape).
    let (p, compiled, hits) = fresh(40, CpuDiskCache::Off);
    assert_eq!((compiled, hits), (1, 0));
    assert_eq!(run(&p, 40), want);
    let (_, _, hits) = fresh(44, CpuDiskCache::Off);
    assert_eq!(hits, 0);
    assert_eq!(entries(dir.path()), written);

    // Another shape is other kernels: no hit, new entries.
    let (_, _, hits) = fresh(48, at.clone());
    assert_eq!(hits, 0);
    assert!(entries(dir.path()).len() > written.len());
}

#[test]
fn damaged_entries_are_misses_that_are_replaced() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let at = CpuDiskCache::At(dir.path().to_path_buf());
    let (first, _, _) = fresh(56, at.clone());
    let want = run(&first, 56);
    let written = entries(dir.path());
    let good: Vec<Vec<u8>> = written.iter().map(|p| std::fs::read(p).unwrap()).collect();

    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 4] = [
        ("zero bytes", |b| b.clear()),
        ("truncated", |b| b.truncate(b.len() / 2)),
        ("a flipped byte in the object", |b| {
            let i = b.len() - 100;
            b[i] ^= 0x40;
        }),
        ("trailing bytes", |b| b.extend_from_slice(b"junk")),
    ];
    for (what, damage) in damages {
        for (p, bytes) in written.iter().zip(&good) {
            let mut b = bytes.clone();
            damage(&mut b);
            std::fs::write(p, b).unwrap();
        }
        let (p, compiled, hits) = fresh(56, at.clone());
        assert_eq!((compiled, hits), (1, 0), "{what}: not a miss");
        assert_eq!(run(&p, 56), want, "{what}");
        // The fresh compile replaced every damaged entry with a good one.
        for (p, bytes) in written.iter().zip(&good) {
            assert_eq!(&std::fs::read(p).unwrap(), bytes, "{what}: not replaced");
        }
        let (_, _, hits) = fresh(56, at.clone());
        assert_eq!(hits, written.len(), "{what}: the replaced entries load");
    }
}

#[test]
fn an_unusable_folder_compiles_without_a_disk_cache() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // A file where the folder should be: the cache is memory-only, compiling still works.
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, b"x").unwrap();
    let (p, compiled, hits) = fresh(64, CpuDiskCache::At(file.clone()));
    assert_eq!((compiled, hits), (1, 0));
    let want = run(&p, 64);
    let (p, _, _) = fresh(64, CpuDiskCache::At(file));
    assert_eq!(run(&p, 64), want);
}
