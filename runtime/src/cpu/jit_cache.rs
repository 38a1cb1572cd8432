//! The in-process cache of JIT-compiled kernel modules.
//!
//! Key: SHA-256 of (the kernels' IR, the dtype and size of every buffer — the code generator
//! proves bounds against them —, the JIT options, the host target's LLVM version, CPU and
//! features). Compiling the same graph twice in one process therefore compiles no kernel twice
//! while it is cached (see below): the second compile takes the machine code of the first
//! (entry points share the modules they were compiled in).
//!
//! The cache holds at most [`DEFAULT_JIT_CACHE_ENTRIES`] programs' modules (or what
//! [`set_jit_cache_capacity`] says) and forgets the least recently used one beyond that, so a
//! process that compiles many different graphs (new shapes, new models) does not keep every
//! module it ever built. A forgotten module lives on in the programs still using it.

use super::error::Result;
use super::kernel::CpuKernel;
use sha2::{Digest, Sha256};
use smelt_codegen::llvm::JitOptions;
use smelt_passes::kernel::{Kernel, Program};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

type Key = [u8; 32];

/// How many programs' modules the cache holds unless [`set_jit_cache_capacity`] says otherwise.
pub const DEFAULT_JIT_CACHE_ENTRIES: usize = 256;

/// The cached modules, each with the tick of its last use (for least-recently-used eviction).
#[derive(Default)]
struct Cache {
    map: HashMap<Key, (Vec<CpuKernel>, u64)>,
    tick: u64,
}

impl Cache {
    /// The next use's tick.
    fn touch(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Forgets least recently used entries until at most `cap` remain.
    fn shrink_to(&mut self, cap: usize) {
        while self.map.len() > cap {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.map.remove(&oldest);
        }
    }
}

static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
static CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_JIT_CACHE_ENTRIES);
static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

/// Sets how many programs' modules the in-process cache keeps (at least 1), forgetting the
/// least recently used ones beyond it now and later.
pub fn set_jit_cache_capacity(entries: usize) {
    let cap = entries.max(1);
    CAPACITY.store(cap, Ordering::Relaxed);
    if let Some(cache) = CACHE.get() {
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shrink_to(cap);
    }
}

/// How many JIT module compilations this process has run (cache misses).
pub fn jit_compilations() -> usize {
    COMPILATIONS.load(Ordering::Relaxed)
}

fn key(program: &Program, kernels: &[&Kernel], options: &JitOptions, target: &str) -> Key {
    let mut h = Sha256::new();
    h.update(target.as_bytes());
    h.update(format!("{options:?}").as_bytes());
    h.update(super::disk_cache::module_source(program, kernels).as_bytes());
    h.finalize().into()
}

/// The kernels of `kernels`, from the cache or compiled by `compile` (and then cached).
#[cfg_attr(not(feature = "llvm"), allow(dead_code))]
pub(crate) fn cached(
    program: &Program,
    kernels: &[&Kernel],
    options: &JitOptions,
    target: &str,
    compile: impl FnOnce() -> Result<Vec<CpuKernel>>,
) -> Result<Vec<CpuKernel>> {
    let key = key(program, kernels, options, target);
    let cache = CACHE.get_or_init(Default::default);
    {
        let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
        let tick = c.touch();
        if let Some((hit, used)) = c.map.get_mut(&key) {
            *used = tick;
            return Ok(hit.clone());
        }
    }
    // Compile outside the lock: two threads may compile the same program at once; both results
    // are correct and the first stored wins.
    let compiled = compile()?;
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    let tick = c.touch();
    let kernels = c.map.entry(key).or_insert((compiled, tick)).0.clone();
    c.shrink_to(CAPACITY.load(Ordering::Relaxed));
    Ok(kernels)
}

/// Empties the in-process cache, so that the next compile of any program JIT-compiles it again
/// (what `smelt bench` uses to time a cold compile). Programs already compiled keep their
/// machine code; returns how many cache entries were dropped.
pub fn clear_jit_cache() -> usize {
    let Some(cache) = CACHE.get() else {
        return 0;
    };
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    let n = c.map.len();
    c.map.clear();
    n
}
