//! The LLVM NVPTX path (`smelt_codegen::llvm::nvptx`): PTX for the plan corpus and the
//! hand-built kernels, with the NVRTC path's entry names and `.entry` signatures, and kernel
//! bodies that are the CPU code generator's. No GPU and no CUDA tool is needed; libdevice is
//! taken from `.cuda/` (scripts/install-cuda-tools.sh) or `$SMELT_LIBDEVICE` when present, and
//! without it only the kernels without transcendental math are compiled.
//! (`runtime/tests/cuda_ptx_llvm.rs` assembles the PTX with ptxas.)

#![cfg(feature = "llvm")]

#[path = "cuda_corpus_graphs/mod.rs"]
mod cuda_corpus_graphs;
#[path = "cuda_kernels/mod.rs"]
mod cuda_kernels;
mod nvptx_support;

use smelt_codegen::cuda::{cuda_program_source, CudaCodegen};
use smelt_codegen::llvm::nvptx::{
    self, entry_names, llvm_target_for, nvptx_ir, ptx_program, Libdevice, NvptxOptions, BLOCK,
};
use smelt_codegen::llvm::LlvmError;
use smelt_passes::kernel::Program;

fn libdevice() -> Option<Libdevice> {
    let path = match std::env::var_os("SMELT_LIBDEVICE") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../.cuda/nvidia/cuda_nvcc")
            .join(nvptx::LIBDEVICE_RELATIVE),
    };
    path.exists()
        .then(|| Libdevice::read(&path).expect("libdevice reads"))
}

fn options() -> NvptxOptions {
    NvptxOptions {
        libdevice: libdevice(),
        ..NvptxOptions::default()
    }
}

/// Every corpus program (fused and unfused) and the hand-built kernels' program.
fn programs() -> Vec<(String, Program)> {
    let mut out = vec![(
        "hand_built".to_string(),
        nvptx_support::typed(cuda_kernels::program()),
    )];
    for (name, graph) in cuda_corpus_graphs::graphs() {
        for fuse in [true, false] {
            let what = format!("{name}{}", if fuse { "" } else { "_unfused" });
            out.push((what, cuda_corpus_graphs::lowered(name, &graph, fuse)));
        }
    }
    out
}

/// The text of `.entry name( … )`: its parameter lines.
fn entry_params<'a>(ptx: &'a str, name: &str) -> Option<Vec<&'a str>> {
    let head = format!(".visible .entry {name}(");
    let start = ptx.find(&head)? + head.len();
    let end = start + ptx[start..].find(')')?;
    Some(
        ptx[start..end]
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect(),
    )
}

#[test]
fn corpus_gives_ptx_with_the_nvrtc_entry_names_and_signatures() {
    let opts = options();
    let have_libdevice = opts.libdevice.is_some();
    let (mut modules, mut entries, mut skipped) = (0, 0, 0);
    for (what, program) in programs() {
        let m = match ptx_program(&program, "sm_90", &opts) {
            Ok(m) => m,
            Err(LlvmError::Unsupported { .. }) if !have_libdevice => {
                skipped += 1;
                continue;
            }
            Err(e) => panic!("{what}: {e}"),
        };
        modules += 1;
        if let Some(dir) = std::env::var_os("SMELT_DUMP_PTX") {
            let _ = std::fs::write(
                std::path::Path::new(&dir).join(format!("{what}.ptx")),
                &m.ptx,
            );
        }
        let nvrtc: Vec<String> = cuda_program_source(&program)
            .kernels
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let names: Vec<String> = m.entries.iter().map(|e| e.name.clone()).collect();
        assert_eq!(
            names, nvrtc,
            "{what}: entry names differ from the NVRTC path's"
        );
        assert_eq!(names, entry_names(&program), "{what}");
        assert!(m.ptx.contains(".version 7.5"), "{what}:\n{}", m.ptx);
        assert!(m.ptx.contains(".target sm_86"), "{what}:\n{}", m.ptx);
        assert!(m.ptx.contains(".address_size 64"), "{what}");
        assert!(
            m.ptx
                .contains(".visible .global .align 4 .u32 smelt_status"),
            "{what}: no status word:\n{}",
            m.ptx
        );
        assert!(
            !m.ptx.contains(".extern"),
            "{what}: an unresolved symbol:\n{}",
            m.ptx
        );
        assert_eq!((m.arch.as_str(), m.target.as_str()), ("sm_90", "sm_86"));
        let kernels: Vec<_> = program.kernels().collect();
        assert_eq!(kernels.len(), m.entries.len(), "{what}");
        for (k, e) in kernels.iter().zip(&m.entries) {
            entries += 1;
            let params = entry_params(&m.ptx, &e.name)
                .unwrap_or_else(|| panic!("{what}: no .entry {}:\n{}", e.name, m.ptx));
            let n_buffers = k.reads.len() + k.writes.len();
            assert_eq!(e.buffers, n_buffers, "{what} {}", e.name);
            let expected: Vec<String> = (0..=n_buffers)
                .map(|i| {
                    let comma = if i < n_buffers { "," } else { "" };
                    format!(".param .u64 {}_param_{i}{comma}", e.name)
                })
                .collect();
            assert_eq!(params, expected, "{what}: .entry {} signature", e.name);
            let extent: i64 = k.outer.iter().map(|&d| d as i64).product();
            assert_eq!(e.extent, extent, "{what} {}", e.name);
            assert_eq!(e.launch.block, BLOCK);
            assert_eq!(e.launch.shared_bytes, 0);
            let threads = u64::from(e.launch.grid) * u64::from(BLOCK);
            assert!(
                e.launch.grid >= 1
                    && (threads >= extent as u64 || u64::from(e.launch.grid) == nvptx::GRID_CAP),
                "{what} {}: {:?} for {extent} outer indices",
                e.name,
                e.launch
            );
            assert!(
                m.ptx.contains(&format!(".maxntid {BLOCK}, 1, 1")),
                "{what}: no .maxntid"
            );
        }
    }
    println!(
        "{modules} programs, {entries} entries as PTX (libdevice: {have_libdevice}, \
         {skipped} programs skipped for want of it)"
    );
    assert!(modules >= 10, "too few programs compiled");
}

/// The body function `@"<entry>.cpu.body"` in LLVM's text of a module.
fn function_text<'a>(module: &'a str, name: &str) -> Option<&'a str> {
    // LLVM quotes names only when they need it (`.` does not).
    let at = module
        .find(&format!("@{name}("))
        .or_else(|| module.find(&format!("@\"{name}\"(")))?;
    let start = module[..at].rfind("\ndefine ")? + 1;
    let end = at + module[at..].find("\n}\n")? + 3;
    Some(&module[start..end])
}

/// A function's text without comment lines, attribute group numbers (`#0`) and loop hints
/// (`!llvm.loop !7`): the numbers depend on what else the module holds, and the hints on the
/// target (the NVPTX build leaves out vectorisation requests, which it never honours).
fn normalised(f: &str) -> String {
    f.lines()
        .filter(|l| !l.trim_start().starts_with(';'))
        .map(|l| match (l.starts_with("define "), l.rfind(" #")) {
            (true, Some(at)) => format!("{}{}", &l[..at], if l.ends_with('{') { " {" } else { "" }),
            _ => match l.find(", !llvm.loop !") {
                Some(at) => l[..at].to_string(),
                None => l.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The PTX path's kernel bodies are the CPU code generator's functions, instruction for
/// instruction, and the rewrites before optimisation change only calls (to libdevice), so the
/// CPU backend's differential tests (`runtime/tests/cpu_exec_fuzz.rs`) cover the semantics of
/// everything but the math library.
#[test]
fn kernel_bodies_are_the_cpu_generators() {
    use smelt_codegen::llvm::inkwell::context::Context;
    use smelt_codegen::llvm::inkwell::targets::TargetData;
    use smelt_codegen::llvm::inkwell::values::AnyValue;
    use smelt_codegen::llvm::kernel::{build_kernel, KernelOptions};
    let opts = options();
    let (mut bodies, mut rewritten_lines) = (0, 0);
    for (what, program) in programs() {
        let ir = match nvptx_ir(&program, "sm_90", &opts) {
            Ok(ir) => ir,
            Err(LlvmError::Unsupported { .. }) if opts.libdevice.is_none() => continue,
            Err(e) => panic!("{what}: {e}"),
        };
        let kernels = program.kernels();
        for (k, entry) in kernels.zip(entry_names(&program)) {
            let ctx = Context::create();
            let module = ctx.create_module("host");
            // The same data layout: it decides the alignment the builder gives loads and
            // stores (the NVPTX module has it while the bodies are built, so i64 accesses are
            // `align 8`; the host JIT sets its layout only after building).
            let layout = ir
                .built
                .lines()
                .find_map(|l| l.strip_prefix("target datalayout = \""))
                .and_then(|l| l.strip_suffix('"'))
                .expect("a data layout");
            let data = TargetData::create(layout);
            module.set_data_layout(&data.get_data_layout());
            let cpu = format!("{entry}.cpu");
            build_kernel(
                &ctx,
                &module,
                k,
                &program.buffers,
                &cpu,
                &KernelOptions {
                    math: options().math,
                    ..KernelOptions::default()
                },
            )
            .expect("CPU build");
            let body = format!("{cpu}.body");
            let host = module
                .get_function(&body)
                .expect("CPU body")
                .print_to_string()
                .to_string();
            let built = function_text(&ir.built, &body)
                .unwrap_or_else(|| panic!("{what}: no {body} in\n{}", ir.built));
            assert_eq!(
                normalised(built),
                normalised(&host),
                "{what}: the PTX path's {body} is not the CPU generator's"
            );
            let rewritten = function_text(&ir.rewritten, &body).expect("rewritten body");
            let (a, b): (Vec<_>, Vec<_>) = (built.lines().collect(), rewritten.lines().collect());
            assert_eq!(a.len(), b.len(), "{what} {body}: lines added or removed");
            for (x, y) in a.iter().zip(&b) {
                if x != y {
                    rewritten_lines += 1;
                    assert!(
                        y.contains("call") && y.contains("@__nv_"),
                        "{what} {body}: `{x}` became `{y}`, not a libdevice call"
                    );
                }
            }
            bodies += 1;
        }
    }
    println!("{bodies} bodies identical to the CPU path's; {rewritten_lines} lines → libdevice");
    assert!(bodies >= 20);
}

#[test]
fn math_without_libdevice_is_a_typed_error() {
    // f32 `exp` (and `erf`) are generated inline by the CPU code generator, so softmax needs
    // no libdevice; `log` is a library call, which only libdevice provides on the GPU.
    let corpus = |name: &str| {
        let graph = cuda_corpus_graphs::graphs()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("{name}"))
            .1;
        cuda_corpus_graphs::lowered(name, &graph, true)
    };
    ptx_program(&corpus("softmax"), "sm_90", &NvptxOptions::default())
        .expect("softmax: inline exp needs no libdevice");
    let mut g = smelt_ir::Graph::new();
    let x = g.input("x", smelt_ir::DType::F32, [4, 8]).unwrap();
    let y = g.unary(smelt_ir::UnaryOp::Log, x).unwrap();
    g.set_output("y", y).unwrap();
    let program = cuda_corpus_graphs::lowered("log", &g, true);
    let err = ptx_program(&program, "sm_90", &NvptxOptions::default()).unwrap_err();
    match &err {
        LlvmError::Unsupported { op, reason, .. } => {
            assert!(op.contains("log"), "{err}");
            assert!(reason.contains("libdevice"), "{err}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // A bad libdevice is an error too, not a crash.
    let bad = NvptxOptions {
        libdevice: Some(Libdevice::from_bytes(b"not bitcode".to_vec())),
        ..NvptxOptions::default()
    };
    assert!(matches!(
        ptx_program(&program, "sm_90", &bad),
        Err(LlvmError::Nvptx { .. })
    ));
}

#[test]
fn architectures_map_to_the_newest_llvm_14_knows() {
    for (arch, target) in [
        ("sm_90", "sm_86"),
        ("sm_89", "sm_86"),
        ("sm_86", "sm_86"),
        ("sm_80", "sm_80"),
        ("compute_75", "sm_75"),
        ("sm_100", "sm_86"),
    ] {
        assert_eq!(llvm_target_for(arch).unwrap(), target, "{arch}");
    }
    for bad in ["sm_50", "sm_", "sm_9x", "gfx90a", "", "sm_123456"] {
        assert!(
            matches!(llvm_target_for(bad), Err(LlvmError::NvptxArch { .. })),
            "{bad:?}"
        );
    }
    let program = nvptx_support::typed(cuda_kernels::program());
    assert!(matches!(
        ptx_program(&program, "sm_35", &options()),
        Err(LlvmError::NvptxArch { .. })
    ));
}

#[test]
fn the_entry_grid_strides_over_a_clamped_n() {
    // The optimised IR of one elementwise kernel: the global index from the special registers,
    // `n` clamped to the static extent, the body inlined (no call left), the status word global.
    let opts = options();
    if opts.libdevice.is_none() {
        println!("the_entry_grid_strides_over_a_clamped_n: skipped, no libdevice");
        return;
    }
    let program = nvptx_support::typed(cuda_kernels::program());
    let m = ptx_program(&program, "sm_80", &opts).expect("PTX");
    assert_eq!(m.target, "sm_80");
    assert!(m.ptx.contains(".target sm_80"));
    for sreg in ["%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"] {
        assert!(m.ptx.contains(sreg), "no {sreg}");
    }
    assert!(
        !m.ptx.contains("call."),
        "a call is left in the PTX:\n{}",
        m.ptx
    );
    assert!(m
        .ir
        .contains("@smelt_status = addrspace(1) global i32 0, align 4"));
    assert!(m.ir.contains("!\"kernel\", i32 1}"));
    assert_eq!(CudaCodegen::default(), CudaCodegen::Nvrtc);
}
