//! The in-process cache of JIT-compiled kernel modules.
//!
//! Key: SHA-256 of (the kernels' IR, the dtype and size of every buffer — the code generator
//! proves bounds against them —, the JIT options, the host target's LLVM version, CPU and
//! features). Compiling the same graph twice in one process therefore compiles no kernel twice:
//! the second compile takes the machine code of the first (entry points share one module).

use super::error::Result;
use super::kernel::CpuKernel;
use sha2::{Digest, Sha256};
use smelt_codegen::llvm::JitOptions;
use smelt_passes::kernel::{Kernel, Program};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

type Key = [u8; 32];

static CACHE: OnceLock<Mutex<HashMap<Key, Vec<CpuKernel>>>> = OnceLock::new();
static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);

/// How many JIT module compilations this process has run (cache misses).
pub fn jit_compilations() -> usize {
    COMPILATIONS.load(Ordering::Relaxed)
}

fn key(program: &Program, kernels: &[&Kernel], options: &JitOptions, target: &str) -> Key {
    let mut h = Sha256::new();
    h.update(target.as_bytes());
    h.update(format!("{options:?}").as_bytes());
    for b in &program.buffers {
        h.update(format!("{:?} {} {}\n", b.id, b.dtype, b.numel).as_bytes());
    }
    for k in kernels {
        // The derived Debug form is complete and deterministic.
        h.update(format!("{k:?}\n").as_bytes());
    }
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
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    // Compile outside the lock: two threads may compile the same program at once; both results
    // are correct and the first stored wins.
    let compiled = compile()?;
    COMPILATIONS.fetch_add(1, Ordering::Relaxed);
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    Ok(map.entry(key).or_insert(compiled).clone())
}

/// Empties the in-process cache, so that the next compile of any program JIT-compiles it again
/// (what `smelt bench` uses to time a cold compile). Programs already compiled keep their
/// machine code; returns how many cache entries were dropped.
pub fn clear_jit_cache() -> usize {
    let Some(cache) = CACHE.get() else {
        return 0;
    };
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    let n = map.len();
    map.clear();
    n
}
