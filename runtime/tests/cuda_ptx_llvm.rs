//! Issue 5, the LLVM NVPTX path: every kernel of the plan corpus and of 200 random graphs,
//! turned into PTX by `smelt_codegen::llvm::nvptx` (LLVM 14, libdevice for math), assembles
//! with ptxas for sm_90.
//!
//! Without ptxas or libdevice (run `scripts/install-cuda-tools.sh`) each test prints that it was
//! skipped and passes, unless `SMELT_REQUIRE_NVRTC=1` is set (as in `cuda_codegen.rs`).
//! No GPU is needed; what the kernels compute is not checked here (see
//! `codegen/tests/llvm_nvptx.rs`: the bodies are the CPU backend's, instruction for
//! instruction).

#![cfg(feature = "llvm")]

mod cpu_exec_support;
#[path = "../../codegen/tests/cuda_corpus_graphs/mod.rs"]
mod cuda_corpus_graphs;
#[path = "../../codegen/tests/cuda_kernels/mod.rs"]
mod cuda_kernels;
#[path = "../../codegen/tests/nvptx_support/mod.rs"]
mod nvptx_support;

use smelt_codegen::llvm::nvptx::{
    libdevice_beside_ptxas, ptx_program, Libdevice, NvptxOptions, PtxModule,
};
use smelt_codegen::llvm::OptLevel;
use smelt_passes::kernel::Program;
use smelt_runtime::cuda::{assemble_ptx_with, ptxas_path, Arch};
use std::path::PathBuf;

const ARCH: &str = "sm_90";

/// ptxas and the libdevice beside it, or a skip (a failure under `SMELT_REQUIRE_NVRTC`).
fn tools_or_skip(test: &str) -> Option<(PathBuf, Libdevice)> {
    let found = ptxas_path().map_err(|e| e.to_string()).and_then(|ptxas| {
        let lib = libdevice_beside_ptxas(&ptxas)
            .filter(|p| p.exists())
            .ok_or_else(|| format!("no libdevice next to {}", ptxas.display()))?;
        let lib = Libdevice::read(&lib).map_err(|e| e.to_string())?;
        Ok((ptxas, lib))
    });
    match found {
        Ok(t) => Some(t),
        Err(e) if std::env::var_os("SMELT_REQUIRE_NVRTC").is_some() => {
            panic!("{test}: SMELT_REQUIRE_NVRTC is set but ptxas/libdevice are not available: {e}")
        }
        Err(e) => {
            println!("{test}: skipped, ptxas or libdevice not available: {e}");
            None
        }
    }
}

/// PTX for `program`, assembled for sm_90; returns the number of entries.
fn check(what: &str, program: &Program, ptxas: &std::path::Path, lib: &Libdevice) -> usize {
    check_at(what, program, ptxas, lib, OptLevel::O3)
}

fn check_at(
    what: &str,
    program: &Program,
    ptxas: &std::path::Path,
    lib: &Libdevice,
    opt_level: OptLevel,
) -> usize {
    let options = NvptxOptions {
        libdevice: Some(lib.clone()),
        opt_level,
        ..NvptxOptions::default()
    };
    let m: PtxModule =
        ptx_program(program, ARCH, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
    let arch = Arch::parse(ARCH).expect("sm_90 parses");
    let cubin = assemble_ptx_with(ptxas, &m.ptx, arch)
        .unwrap_or_else(|e| panic!("{what}: ptxas -arch={ARCH}:\n{e}\n{}", m.ptx));
    assert!(!cubin.is_empty(), "{what}");
    m.entries.len()
}

#[test]
fn corpus_and_hand_built_kernels_assemble_for_sm90() {
    let Some((ptxas, lib)) = tools_or_skip("corpus_and_hand_built_kernels_assemble_for_sm90")
    else {
        return;
    };
    let mut entries = check(
        "hand_built",
        &nvptx_support::typed(cuda_kernels::program()),
        &ptxas,
        &lib,
    );
    for opt in [OptLevel::O0, OptLevel::O1] {
        let what = format!("hand_built at {opt}");
        check_at(
            &what,
            &nvptx_support::typed(cuda_kernels::program()),
            &ptxas,
            &lib,
            opt,
        );
    }
    let mut programs = 1;
    for (name, graph) in cuda_corpus_graphs::graphs() {
        for fuse in [true, false] {
            let program = cuda_corpus_graphs::lowered(name, &graph, fuse);
            let what = format!("{name}{}", if fuse { "" } else { "_unfused" });
            entries += check(&what, &program, &ptxas, &lib);
            programs += 1;
        }
    }
    println!("{programs} programs, {entries} kernels: LLVM NVPTX PTX assembles for {ARCH}");
}

/// Every kernel of 200 random graphs (optimised, fused — every fourth unfused — and lowered),
/// one PTX module per graph; the same fixed-seed graphs as `cuda_codegen.rs`.
#[test]
fn random_graphs_assemble_for_sm90() {
    let Some((ptxas, lib)) = tools_or_skip("random_graphs_assemble_for_sm90") else {
        return;
    };
    const GRAPHS: usize = 200;
    let programs = cpu_exec_support::random_kernel_programs(GRAPHS);
    // Two workers: LLVM contexts are independent, ptxas is a process.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let kernels: usize = std::thread::scope(|scope| {
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let mut n = 0;
                    loop {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((i, program)) = programs.get(j) else {
                            return n;
                        };
                        n += check(&format!("random_graph_{i}"), program, &ptxas, &lib);
                    }
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("a worker does not panic"))
            .sum()
    });
    println!("{GRAPHS} random graphs, {kernels} kernels: LLVM NVPTX PTX assembles for {ARCH}");
}
