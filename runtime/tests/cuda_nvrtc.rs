//! NVRTC compilation without a GPU. When NVRTC is not installed (run
//! `scripts/install-cuda-tools.sh`), each test prints that it was skipped and passes.

use smelt_runtime::cache::KernelCache;
use smelt_runtime::cuda::{
    assemble_ptx, compile_cuda, compile_cuda_cached, nvrtc, ptxas_path, Arch, CompileOptions,
    CudaError, KernelImage, Nvrtc, OutputKind,
};

fn nvrtc_or_skip(test: &str) -> Option<&'static Nvrtc> {
    match nvrtc() {
        Ok(n) => Some(n),
        // CI installs NVRTC and sets SMELT_REQUIRE_NVRTC=1, so a broken install cannot pass
        // as a skip.
        Err(e) if std::env::var_os("SMELT_REQUIRE_NVRTC").is_some() => {
            panic!("{test}: SMELT_REQUIRE_NVRTC is set but NVRTC is not available: {e}")
        }
        Err(e) => {
            println!("{test}: skipped, NVRTC not available: {e}");
            None
        }
    }
}

/// A handwritten kernel using half and bf16 with f32 accumulation, like generated ones will.
const HALF_BF16_KERNEL: &str = r#"
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void axpy_mixed(
    const __half* __restrict__ x, const __nv_bfloat16* __restrict__ y,
    __half* __restrict__ out_h, __nv_bfloat16* __restrict__ out_b, float a, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float acc = a * __half2float(x[i]) + __bfloat162float(y[i]);
        out_h[i] = __float2half_rn(acc);
        out_b[i] = __float2bfloat16_rn(acc);
    }
}
"#;

#[test]
fn nvrtc_reports_version_and_archs() {
    let Some(n) = nvrtc_or_skip("nvrtc_reports_version_and_archs") else {
        return;
    };
    let (major, _) = n.version();
    assert!(major >= 11, "{n:?}");
    assert!(n.version_string().starts_with("nvrtc-"));
    assert!(
        n.supported_archs().contains(&80),
        "{:?}",
        n.supported_archs()
    );
    assert!(
        n.supported_archs().contains(&90),
        "{:?}",
        n.supported_archs()
    );
    println!("{n:?} at {:?}", n.location());
    // scripts/test.sh runs the NVRTC tests once per CUDA release it installs and names the
    // major version each run must have found, so a probe falling back to the other release
    // cannot pass unnoticed.
    if let Some(want) = std::env::var_os("SMELT_EXPECT_NVRTC_MAJOR") {
        let want = want.to_string_lossy();
        assert_eq!(
            major.to_string(),
            want,
            "SMELT_EXPECT_NVRTC_MAJOR={want} but NVRTC {} was found: {:?}",
            n.version_string(),
            n.location()
        );
    }
}

#[test]
fn compiles_half_and_bf16_kernel_to_cubin_for_sm80_and_sm90() {
    let Some(n) = nvrtc_or_skip("compiles_half_and_bf16_kernel_to_cubin_for_sm80_and_sm90") else {
        return;
    };
    assert!(n.include_dir().is_some(), "CUDA headers not found; {n:?}");
    for arch in ["sm_80", "sm_90"] {
        let k = compile_cuda(
            HALF_BF16_KERNEL,
            "axpy_mixed.cu",
            arch,
            &CompileOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(k.arch.to_string(), arch);
        assert!(
            k.options.contains(&format!("--gpu-architecture={arch}")),
            "{:?}",
            k.options
        );
        match &k.image {
            // A cubin is an ELF file.
            KernelImage::Cubin(bytes) => assert_eq!(&bytes[..4], b"\x7fELF", "{arch}"),
            other => panic!("{arch}: expected a cubin, got {other:?}"),
        }
    }
}

#[test]
fn ptx_output_names_the_kernel_and_target() {
    let Some(n) = nvrtc_or_skip("ptx_output_names_the_kernel_and_target") else {
        return;
    };
    let opts = CompileOptions {
        output: OutputKind::Ptx,
        ..CompileOptions::default()
    };
    let k = n
        .compile(
            HALF_BF16_KERNEL,
            "axpy_mixed.cu",
            Arch::parse("sm_90").unwrap(),
            &opts,
        )
        .unwrap();
    let KernelImage::Ptx(ptx) = &k.image else {
        panic!("expected PTX, got {:?}", k.image);
    };
    assert!(ptx.contains(".target sm_90"), "{ptx}");
    assert!(ptx.contains(".entry axpy_mixed"), "{ptx}");
    assert!(!ptx.ends_with('\0'));
}

#[test]
fn compile_error_carries_log_and_numbered_source() {
    let Some(_) = nvrtc_or_skip("compile_error_carries_log_and_numbered_source") else {
        return;
    };
    let src =
        "extern \"C\" __global__ void broken(float* out) {\n    out[0] = undefined_name;\n}\n";
    let err = compile_cuda(src, "broken.cu", "sm_80", &CompileOptions::default()).unwrap_err();
    let CudaError::Compile(ref failure) = err else {
        panic!("expected a compile error, got {err:?}");
    };
    let (log, numbered_source, name) = (&failure.log, &failure.numbered_source, &failure.name);
    assert_eq!(name, "broken.cu");
    assert!(log.contains("undefined_name"), "{log}");
    assert!(
        log.contains("broken.cu(2)"),
        "NVRTC's log points at line 2: {log}"
    );
    assert!(
        numbered_source.contains("2 |     out[0] = undefined_name;"),
        "{numbered_source}"
    );
    let shown = err.to_string();
    assert!(
        shown.contains("NVRTC log") && shown.contains("1 | extern"),
        "{shown}"
    );
}

#[test]
fn bad_arch_and_nul_bytes_are_typed_errors() {
    for bad in ["sm80", "sm_", "sm_8", "gfx90a", "sm_9x", ""] {
        assert!(
            matches!(Arch::parse(bad), Err(CudaError::InvalidArch(_))),
            "{bad}"
        );
    }
    assert_eq!(Arch::parse("sm_90a").unwrap().to_string(), "sm_90a");
    assert_eq!(Arch::from_compute_capability(8, 6).to_string(), "sm_86");
    let Some(_) = nvrtc_or_skip("bad_arch_and_nul_bytes_are_typed_errors") else {
        return;
    };
    let err = compile_cuda("int x;\0", "nul.cu", "sm_80", &CompileOptions::default()).unwrap_err();
    assert!(matches!(err, CudaError::InteriorNul { .. }), "{err:?}");
    let err = compile_cuda("int x;", "old.cu", "sm_20", &CompileOptions::default()).unwrap_err();
    assert!(matches!(err, CudaError::UnsupportedArch { .. }), "{err:?}");
}

#[test]
fn arch_newer_than_nvrtc_falls_back_to_ptx() {
    let Some(n) = nvrtc_or_skip("arch_newer_than_nvrtc_falls_back_to_ptx") else {
        return;
    };
    let max = *n.supported_archs().last().unwrap();
    let future = format!("sm_{}", max + 100);
    let k = compile_cuda(
        HALF_BF16_KERNEL,
        "future.cu",
        &future,
        &CompileOptions::default(),
    )
    .unwrap();
    let KernelImage::Ptx(ptx) = &k.image else {
        panic!("expected PTX, got {:?}", k.image);
    };
    assert!(ptx.contains(&format!(".target sm_{max}")), "{ptx}");
    assert!(k.log.contains("JIT"), "{}", k.log);
}

#[test]
fn cached_compile_hits_on_second_call() {
    let Some(_) = nvrtc_or_skip("cached_compile_hits_on_second_call") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = KernelCache::open(dir.path());
    let opts = CompileOptions::default();
    let first =
        compile_cuda_cached(&cache, HALF_BF16_KERNEL, "axpy_mixed.cu", "sm_90", &opts).unwrap();
    // A fresh cache on the same folder (another process, in effect) reads it from disk.
    let again = KernelCache::open(dir.path());
    let second =
        compile_cuda_cached(&again, HALF_BF16_KERNEL, "axpy_mixed.cu", "sm_90", &opts).unwrap();
    assert_eq!(first.image, second.image);
    assert_eq!(again.stats().entries, 1);
    assert_eq!(again.stats().per_target["sm_90"].entries, 1);
}

#[test]
fn ptxas_assembles_nvrtc_ptx_for_sm90() {
    let Some(n) = nvrtc_or_skip("ptxas_assembles_nvrtc_ptx_for_sm90") else {
        return;
    };
    if let Err(e) = ptxas_path() {
        assert!(
            std::env::var_os("SMELT_REQUIRE_NVRTC").is_none(),
            "ptxas missing: {e}"
        );
        println!("ptxas_assembles_nvrtc_ptx_for_sm90: skipped, ptxas not available: {e}");
        return;
    }
    let arch = Arch::parse("sm_90").unwrap();
    let opts = CompileOptions {
        output: OutputKind::Ptx,
        ..CompileOptions::default()
    };
    let k = n
        .compile(HALF_BF16_KERNEL, "axpy_mixed.cu", arch, &opts)
        .unwrap();
    let KernelImage::Ptx(ptx) = &k.image else {
        panic!("expected PTX");
    };
    let cubin = match assemble_ptx(ptx, arch) {
        // A ptxas from an older toolkit than NVRTC (two installs on one machine) cannot read
        // the newer PTX ISA: an environment mismatch, not a smelt error. CI's pair matches.
        Err(CudaError::Ptxas { stderr, .. }) if stderr.contains("Unsupported .version") => {
            println!(
                "ptxas_assembles_nvrtc_ptx_for_sm90: skipped, ptxas is older than NVRTC: {}",
                stderr.trim()
            );
            return;
        }
        r => r.unwrap(),
    };
    assert_eq!(&cubin[..4], b"\x7fELF");
    // And ptxas errors are typed, with its message.
    let err = assemble_ptx(".version 8.0\n.target sm_90\nthis is not ptx\n", arch).unwrap_err();
    assert!(matches!(err, CudaError::Ptxas { .. }), "{err:?}");
}

#[test]
fn threads_compile_concurrently() {
    let Some(n) = nvrtc_or_skip("threads_compile_concurrently") else {
        return;
    };
    let arch = Arch::parse("sm_80").unwrap();
    let images: Vec<KernelImage> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    n.compile(
                        HALF_BF16_KERNEL,
                        "axpy_mixed.cu",
                        arch,
                        &CompileOptions::default(),
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap().image)
            .collect()
    });
    assert!(
        images.windows(2).all(|w| w[0] == w[1]),
        "NVRTC output is deterministic"
    );
}
