//! Every kernel smelt-codegen prints as CUDA C compiles with NVRTC for sm_80 and sm_90.
//!
//! Without NVRTC (run `scripts/install-cuda-tools.sh`) each test prints that it was skipped and
//! passes, unless `SMELT_REQUIRE_NVRTC=1` is set.

mod cpu_exec_support;
#[path = "../../codegen/tests/cuda_corpus_graphs/mod.rs"]
mod cuda_corpus_graphs;
#[path = "../../codegen/tests/cuda_kernels/mod.rs"]
mod cuda_kernels;

use smelt_codegen::cuda::{cuda_program_source, cuda_source};
use smelt_runtime::cuda::{compile_cuda, nvrtc, CompileOptions, Nvrtc};

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

fn nvrtc_or_skip(test: &str) -> Option<&'static Nvrtc> {
    match nvrtc() {
        Ok(n) => Some(n),
        Err(e) if std::env::var_os("SMELT_REQUIRE_NVRTC").is_some() => {
            panic!("{test}: SMELT_REQUIRE_NVRTC is set but NVRTC is not available: {e}")
        }
        Err(e) => {
            println!("{test}: skipped, NVRTC not available: {e}");
            None
        }
    }
}

/// Compiles `source` for both architectures (in parallel: NVRTC programs are independent); a
/// failure shows NVRTC's log and the numbered source (the error's `Display`).
fn compile_all(what: &str, source: &str) {
    std::thread::scope(|scope| {
        let jobs: Vec<_> = ARCHS
            .iter()
            .map(|&arch| {
                scope.spawn(move || {
                    let name = format!("{what}.cu");
                    (
                        arch,
                        compile_cuda(source, &name, arch, &CompileOptions::default()),
                    )
                })
            })
            .collect();
        for job in jobs {
            let (arch, result) = job.join().expect("the compile thread does not panic");
            let k = result.unwrap_or_else(|e| panic!("{what} for {arch}:\n{e}"));
            assert!(!k.image.is_empty(), "{what} {arch}");
            assert!(
                !k.log.contains("warning"),
                "{what} for {arch}: NVRTC warnings:\n{}",
                k.log
            );
        }
    });
}

#[test]
fn hand_built_kernels_compile_for_sm80_and_sm90() {
    if nvrtc_or_skip("hand_built_kernels_compile_for_sm80_and_sm90").is_none() {
        return;
    }
    for (name, kernel) in cuda_kernels::all() {
        compile_all(name, &cuda_source(&kernel).source);
    }
}

#[test]
fn whole_program_compiles_as_one_translation_unit() {
    if nvrtc_or_skip("whole_program_compiles_as_one_translation_unit").is_none() {
        return;
    }
    compile_all(
        "program",
        &cuda_program_source(&cuda_kernels::program()).source,
    );
}

#[test]
fn plan_corpus_compiles_fused_and_unfused() {
    if nvrtc_or_skip("plan_corpus_compiles_fused_and_unfused").is_none() {
        return;
    }
    for (name, graph) in cuda_corpus_graphs::graphs() {
        for fuse in [true, false] {
            let program = cuda_corpus_graphs::lowered(name, &graph, fuse);
            let what = format!("{name}{}", if fuse { "" } else { "_unfused" });
            compile_all(&what, &cuda_program_source(&program).source);
        }
    }
}

/// Issue 5: every kernel of at least 200 random graphs (optimised, fused, lowered) compiles
/// for sm_80 and sm_90. One translation unit per graph and arch; the graphs come from a fixed
/// seed, so the set is the same on every run.
#[test]
fn random_graphs_compile_for_sm80_and_sm90() {
    use smelt_passes::kernel::Step;

    if nvrtc_or_skip("random_graphs_compile_for_sm80_and_sm90").is_none() {
        return;
    }
    const GRAPHS: usize = 200;
    let programs = cpu_exec_support::random_kernel_programs(GRAPHS);
    let (graphs, mut kernels) = (programs.len(), 0);
    for (i, program) in &programs {
        kernels += program
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Kernel(_)))
            .count();
        let cuda = cuda_program_source(program);
        compile_all(&format!("random_graph_{i}"), &cuda.source);
    }
    println!("{graphs} random graphs, {kernels} kernels: all compile for sm_80 and sm_90");
}

/// The 16-byte packs of vectorised elementwise kernels really become vector loads and stores
/// (`ld.global*.v4` / `st.global.v4`), for f32 (float4) and f16 (8 halves as 4 × 32 bits).
#[test]
fn vectorised_kernels_use_16_byte_accesses_in_ptx() {
    use smelt_runtime::cuda::{KernelImage, OutputKind};
    if nvrtc_or_skip("vectorised_kernels_use_16_byte_accesses_in_ptx").is_none() {
        return;
    }
    let options = CompileOptions {
        output: OutputKind::Ptx,
        ..CompileOptions::default()
    };
    for kernel in [
        cuda_kernels::elementwise_f32_broadcast(),
        cuda_kernels::elementwise_f16_chain(),
    ] {
        let src = cuda_source(&kernel).source;
        let k = compile_cuda(&src, "vec.cu", "sm_90", &options).unwrap_or_else(|e| panic!("{e}"));
        let KernelImage::Ptx(ptx) = k.image else {
            panic!("asked for PTX")
        };
        let loads = ptx
            .lines()
            .filter(|l| l.contains("ld.global") && l.contains(".v4"))
            .count();
        let stores = ptx
            .lines()
            .filter(|l| l.contains("st.global") && l.contains(".v4"))
            .count();
        assert!(
            loads >= 1 && stores >= 1,
            "{}: no 16-byte accesses in\n{ptx}",
            kernel.name
        );
    }
}

/// Elementwise kernels reading an operand transposed (`smelt_codegen::cuda::tiles`: 32 x 32
/// tiles through shared memory) compile for both architectures in every dtype, and their PTX
/// stages the operand in shared memory between barriers.
#[test]
fn transposed_reads_compile_to_shared_memory_tiles() {
    use smelt_ir::DType;
    use smelt_runtime::cuda::{KernelImage, OutputKind};
    if nvrtc_or_skip("transposed_reads_compile_to_shared_memory_tiles").is_none() {
        return;
    }
    for d in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::Bool,
    ] {
        let t = smelt_frontend::Tracer::new();
        let y = t.input("y", d, [2, 70, 45]).unwrap();
        let yt = y.permute(&[0, 2, 1]).unwrap();
        let out = if d == DType::Bool {
            yt
        } else {
            let x = t.input("x", d, [2, 45, 70]).unwrap();
            x.add(&yt).unwrap()
        };
        t.output("y", &out).unwrap();
        let graph = t.finish().unwrap();
        let opt = smelt_passes::optimize(&graph, &Default::default()).unwrap();
        let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan).unwrap();
        let src = cuda_program_source(&program).source;
        assert!(src.contains("tiles through shared memory"), "{d}:\n{src}");
        compile_all(&format!("tiles_{d}"), &src);
        let options = CompileOptions {
            output: OutputKind::Ptx,
            ..CompileOptions::default()
        };
        let k = compile_cuda(&src, "tiles.cu", "sm_90", &options).unwrap_or_else(|e| panic!("{e}"));
        let KernelImage::Ptx(ptx) = k.image else {
            panic!("asked for PTX")
        };
        assert!(ptx.contains(".shared"), "{d}: no shared memory in\n{ptx}");
        assert!(ptx.contains("bar.sync"), "{d}: no barrier in\n{ptx}");
    }
}
