//! JIT-compiled kernel modules on disk, shared by processes: a program compiled once is loaded
//! by the next process that compiles it without running LLVM's optimiser or code generator
//! (`smelt_codegen::llvm::JitModule::load`).
//!
//! Entries live in the kernel cache ([`crate::cache::KernelCache`]: `$SMELT_CACHE_DIR`, else
//! the user cache folder), under the host target's folder (`host-<hash of LLVM version,
//! triple, CPU and features>`). One entry per JIT module (the runtime compiles a program's
//! kernels into one module per core): key = SHA-256 of the module's kernels (their full kernel
//! IR), the dtype and size of every buffer of the program (the code generator proves bounds
//! against them), the JIT options, the host target, the LLVM version, a hash of the code
//! generator's sources ([`smelt_codegen::llvm::CODEGEN_SOURCE_HASH`]) and smelt's version.
//! Payload: the names of the functions the module defines, then its object file. A corrupted
//! or unloadable entry is a miss (logged at debug level) and is replaced by the fresh compile.

// Without the `llvm` feature nothing is compiled, so nothing is cached: only the settings and
// the counter remain.
#![cfg_attr(not(feature = "llvm"), allow(dead_code))]

use crate::cache::{CacheKey, CacheTarget, KernelCache, Lookup};
use smelt_codegen::llvm::JitOptions;
use smelt_passes::kernel::{Kernel, Program};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Where compiled CPU kernel modules are kept between processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuDiskCache {
    /// The kernel cache folder: `$SMELT_CACHE_DIR`, else `$XDG_CACHE_HOME/smelt`, else
    /// `~/.cache/smelt` (memory only, with a warning, where none is usable).
    #[default]
    FromEnv,
    /// This folder.
    At(PathBuf),
    /// No disk cache: every module not in the in-process cache is compiled.
    Off,
}

static DISK_HITS: AtomicUsize = AtomicUsize::new(0);

/// How many JIT modules this process has loaded from the disk cache instead of compiling.
pub fn jit_disk_hits() -> usize {
    DISK_HITS.load(Ordering::Relaxed)
}

/// The cache of `setting` for one program's compile, or `None` when it is off or unusable.
/// A new instance per compile, so that its in-memory layer (which holds every payload it
/// reads or writes) lives only as long as the compile: the in-process JIT cache in front of
/// it already keeps the loaded modules, bounded.
pub(crate) fn open(setting: &CpuDiskCache) -> Option<KernelCache> {
    // The folder the environment names, decided once (with one warning if it is unusable).
    static FROM_ENV: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = match setting {
        CpuDiskCache::Off => return None,
        CpuDiskCache::FromEnv => FROM_ENV
            .get_or_init(|| KernelCache::from_env().dir().map(PathBuf::from))
            .clone()?,
        CpuDiskCache::At(dir) => dir.clone(),
    };
    let cache = KernelCache::open(dir);
    cache.dir().is_some().then_some(cache)
}

/// What the module compiling `kernels` of `program` is compiled from, besides the JIT options
/// and the host target, as text: the buffers' types, which of them are outputs (which kernels
/// have plain-store twins depends on it) and the kernels. Both the in-process cache's key
/// (`jit_cache`) and the disk cache's are made from it.
pub(crate) fn module_source(program: &Program, kernels: &[&Kernel]) -> String {
    let mut source = String::new();
    for b in &program.buffers {
        source.push_str(&format!("buffer {:?} {} {}\n", b.id, b.dtype, b.numel));
    }
    for (_, b) in &program.outputs {
        source.push_str(&format!("output {b:?}\n"));
    }
    for k in kernels {
        // The derived Debug form is complete and deterministic.
        source.push_str(&format!("{k:?}\n"));
    }
    source
}

/// The key of the module compiling `kernels` of `program` (see the module docs); `target` is
/// the host target's cache key text.
pub(crate) fn key(
    program: &Program,
    kernels: &[&Kernel],
    options: &JitOptions,
    target: &str,
) -> CacheKey {
    CacheKey::new(
        CacheTarget::host(target),
        module_source(program, kernels).as_bytes(),
        &[format!("{options:?}")],
        &format!(
            "llvm-{} codegen-{}",
            smelt_codegen::llvm::LLVM_VERSION,
            smelt_codegen::llvm::CODEGEN_SOURCE_HASH
        ),
    )
}

/// The payload of a module: its function names and its object file.
pub(crate) fn encode(functions: &[&str], object: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object.len() + 64 * functions.len() + 4);
    out.extend_from_slice(&(functions.len() as u32).to_le_bytes());
    for f in functions {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f.as_bytes());
    }
    out.extend_from_slice(object);
    out
}

/// [`encode`]'s input back, or `None` for bytes it did not write.
pub(crate) fn decode(payload: &[u8]) -> Option<(Vec<String>, &[u8])> {
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let s = payload.get(*at..at.checked_add(n)?)?;
        *at += n;
        Some(s)
    };
    let mut at = 0;
    let count = u32::from_le_bytes(take(&mut at, 4)?.try_into().ok()?) as usize;
    let mut functions = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let len = u32::from_le_bytes(take(&mut at, 4)?.try_into().ok()?) as usize;
        functions.push(String::from_utf8(take(&mut at, len)?.to_vec()).ok()?);
    }
    let object = &payload[at..];
    (!object.is_empty()).then_some((functions, object))
}

/// The stored payload of `key`, or `None` (a miss, logged with its reason).
pub(crate) fn lookup(cache: &KernelCache, key: &CacheKey) -> Option<Arc<[u8]>> {
    match cache.lookup(key) {
        Lookup::Hit(bytes, _) => Some(bytes),
        Lookup::Miss(reason) => {
            log::debug!("cpu kernel cache: {} missed: {reason}", key.hex());
            None
        }
    }
}

/// The module of `group` (kernels of `program`): loaded from `cache` when it holds one that
/// loads, else compiled (and then stored there). `target` is the host target's cache key.
#[cfg(feature = "llvm")]
pub(crate) fn compile_group(
    cache: Option<&KernelCache>,
    program: &Program,
    group: &[&Kernel],
    options: &JitOptions,
    target: &str,
) -> crate::cpu::Result<smelt_codegen::llvm::kernel::CompiledKernels> {
    use smelt_codegen::llvm::kernel::{
        compile_program_kernels_with_twins, entry_names, output_ids, CompiledKernels,
    };
    use smelt_codegen::llvm::JitModule;
    let outputs = output_ids(program);
    let compile = || compile_program_kernels_with_twins(group, &program.buffers, &outputs, options);
    let Some(cache) = cache else {
        return Ok(compile()?);
    };
    let key = key(program, group, options, target);
    if let Some(bytes) = lookup(cache, &key) {
        let loaded = decode(&bytes)
            .ok_or_else(|| "not a module entry".to_string())
            .and_then(|(functions, object)| {
                JitModule::load(
                    "smelt_kernels",
                    options,
                    String::new(),
                    object.to_vec(),
                    &functions,
                )
                .map_err(|e| e.to_string())
            });
        match loaded {
            Ok(module) => {
                DISK_HITS.fetch_add(1, Ordering::Relaxed);
                return Ok(CompiledKernels {
                    module,
                    entries: entry_names(group),
                });
            }
            Err(e) => log::debug!(
                "cpu kernel cache: {} does not load ({e}); compiling",
                key.hex()
            ),
        }
    }
    let compiled = compile()?;
    let functions: Vec<&str> = compiled.module.functions().collect();
    cache.insert(&key, &encode(&functions, compiled.module.object()));
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::{decode, encode};

    /// The payload round-trips, and bytes it did not write (cut anywhere in the names, or
    /// with no object) are `None`, never a panic.
    #[test]
    fn payloads_round_trip_and_reject_other_bytes() {
        let p = encode(&["k0_add", "k1_reduction_sum"], b"\x7fELF object");
        let (f, o) = decode(&p).unwrap();
        assert_eq!(f, ["k0_add", "k1_reduction_sum"]);
        assert_eq!(o, b"\x7fELF object");
        let names_end = p.len() - b"\x7fELF object".len();
        for cut in 0..=names_end {
            assert!(decode(&p[..cut]).is_none(), "cut at {cut}");
        }
        assert!(decode(&[0xff; 16]).is_none());
    }
}

#[cfg(all(test, feature = "llvm"))]
mod load_tests {
    use super::{compile_group, decode, encode, key, lookup};
    use crate::cache::KernelCache;
    use smelt_codegen::llvm::{host_target, JitModule, JitOptions};
    use smelt_passes::kernel::{lower, Kernel, Program};

    fn program() -> Program {
        let t = smelt_frontend::Tracer::new();
        let x = t.input("x", smelt_frontend::DType::F32, [4, 96]).unwrap();
        let y = x.softmax(-1).unwrap().tanh().unwrap();
        t.output("y", &y).unwrap();
        let g = t.finish().unwrap();
        let o = smelt_passes::optimize(&g, &Default::default()).unwrap();
        lower(&o.graph, &o.plan).unwrap()
    }

    /// An entry whose checksum holds but whose payload does not load (no object file behind
    /// its header, a function the object lacks, bytes `encode` did not write: a folder written
    /// by something else) is a miss: the module is compiled, and the entry replaced by one
    /// that loads.
    #[test]
    fn an_entry_that_decodes_but_does_not_load_is_compiled_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let open = || KernelCache::open(dir.path()).with_max_bytes(None);
        let program = program();
        let kernels: Vec<&Kernel> = program.kernels().collect();
        let options = JitOptions::default();
        let target = host_target().unwrap().cache_key();
        let k = key(&program, &kernels, &options, &target);
        let real = compile_group(None, &program, &kernels, &options, &target).unwrap();
        let names: Vec<&str> = real.module.functions().collect();
        let bad: [(&str, Vec<u8>); 3] = [
            (
                "no object behind the header",
                encode(&names, b"\x7fELF\x02\x01\x01 and no more"),
            ),
            (
                "a function the object lacks",
                encode(&["k_absent"], real.module.object()),
            ),
            ("bytes encode did not write", b"xy".to_vec()),
        ];
        for (what, payload) in bad {
            open().insert(&k, &payload);
            assert_eq!(&*lookup(&open(), &k).unwrap(), &payload[..], "{what}");
            let compiled = compile_group(Some(&open()), &program, &kernels, &options, &target);
            let compiled = compiled.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(compiled.entries, real.entries, "{what}");
            let stored = lookup(&open(), &k).unwrap();
            let (functions, object) = decode(&stored).expect("a module entry");
            assert_eq!(functions, names, "{what}: not replaced");
            let loaded = JitModule::load("t", &options, String::new(), object.to_vec(), &functions);
            assert!(loaded.is_ok(), "{what}: the replaced entry does not load");
        }
    }
}
