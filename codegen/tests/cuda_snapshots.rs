//! Snapshots of the CUDA C printed for hand-built kernels (`cuda_kernels/`), and properties of
//! the printer: deterministic output, the launch shapes, vectorisation decisions. NVRTC
//! compiles these same kernels in `runtime/tests/cuda_codegen.rs`.

mod cuda_kernels;

use smelt_codegen::cuda::{cuda_program_source, cuda_source, CudaKernel, LaunchConfig};

/// The kernel text without the shared prelude (snapshotted once, in `prelude`).
fn kernel_text(k: &CudaKernel) -> String {
    let start = k
        .source
        .find("// kernel ")
        .expect("every kernel starts with its header");
    format!("{:?}\n{}", k.launch, &k.source[start..])
}

#[test]
fn snapshots_of_hand_built_kernels() {
    for (name, kernel) in cuda_kernels::all() {
        let k = cuda_source(&kernel);
        assert_eq!(k.entry, kernel.name);
        insta::assert_snapshot!(format!("cuda_{name}"), kernel_text(&k));
    }
}

#[test]
fn prelude_snapshot() {
    let k = cuda_source(&cuda_kernels::elementwise_f16_chain());
    let end = k.source.find("// kernel ").unwrap();
    insta::assert_snapshot!("cuda_prelude_with_f16", &k.source[..end]);
}

#[test]
fn output_is_deterministic() {
    for (_, kernel) in cuda_kernels::all() {
        assert_eq!(cuda_source(&kernel), cuda_source(&kernel.clone()));
    }
    assert_eq!(
        cuda_program_source(&cuda_kernels::program()),
        cuda_program_source(&cuda_kernels::program())
    );
}

#[test]
fn launch_shapes() {
    let ew = cuda_source(&cuda_kernels::elementwise_f32_broadcast());
    // 64 * 256 f32 elements, 4 per thread, blocks of 256.
    assert_eq!(
        ew.launch,
        LaunchConfig {
            grid: 16,
            block: 256,
            shared_bytes: 0
        }
    );
    assert!(ew.source.contains("sm_pack<float, 4>"), "{}", ew.source);
    let h = cuda_source(&cuda_kernels::elementwise_f16_chain());
    assert!(h.source.contains("sm_pack<__half, 8>"), "{}", h.source);
    // Rows of 33..=1024: a warp per row, one warp per block below 4096 rows, four from there.
    let sm = cuda_source(&cuda_kernels::softmax("s", smelt_ir::DType::F32, 128, 512));
    assert_eq!(
        sm.launch,
        LaunchConfig {
            grid: 128,
            block: 32,
            shared_bytes: 0
        }
    );
    assert!(
        sm.source.contains("c0[16]") && sm.source.contains("sm_warp_reduce(a"),
        "row cache and warp reductions expected:\n{}",
        sm.source
    );
    assert!(!sm.source.contains("sm_block_reduce(a"), "{}", sm.source);
    let many = cuda_source(&cuda_kernels::softmax("s", smelt_ir::DType::F32, 8192, 512));
    assert_eq!(
        many.launch,
        LaunchConfig {
            grid: 2048,
            block: 128,
            shared_bytes: 0
        }
    );
    // Longer rows: a block per row, cached up to 8 per thread.
    let wide = cuda_source(&cuda_kernels::softmax("s", smelt_ir::DType::F32, 64, 2048));
    assert_eq!(
        wide.launch,
        LaunchConfig {
            grid: 64,
            block: 512,
            shared_bytes: 0
        }
    );
    assert!(
        wide.source.contains("c0[4]") && wide.source.contains("sm_block_reduce(a"),
        "{}",
        wide.source
    );
    let long = cuda_source(&cuda_kernels::softmax("s", smelt_ir::DType::F16, 4, 8192));
    assert_eq!(long.launch.block, 512);
    assert!(!long.source.contains("row cache"), "{}", long.source);
    let short = cuda_source(&cuda_kernels::softmax("s", smelt_ir::DType::F32, 1000, 10));
    assert_eq!(
        short.launch,
        LaunchConfig {
            grid: 4,
            block: 256,
            shared_bytes: 0
        }
    );
    assert!(
        !short.source.contains("sm_block_reduce(a"),
        "{}",
        short.source
    );
    // Computed accesses are never vectorised.
    let g = cuda_source(&cuda_kernels::gather());
    assert!(!g.source.contains("sm_pack<float"), "{}", g.source);
    assert!(g.source.contains("long long x1"), "{}", g.source);
}

#[test]
fn program_is_one_translation_unit() {
    let p = cuda_program_source(&cuda_kernels::program());
    assert_eq!(p.kernels.len(), cuda_kernels::all().len());
    assert_eq!(p.source.matches("#include <cuda_fp16.h>").count(), 1);
    assert_eq!(p.source.matches("sm_block_reduce(T v").count(), 1);
    assert_eq!(
        p.source.matches("extern \"C\" __global__").count(),
        p.kernels.len()
    );
    for (entry, launch) in &p.kernels {
        let decl = format!("__launch_bounds__({}) {entry}(", launch.block);
        assert!(p.source.contains(&decl), "{decl}");
    }
}

#[test]
fn malformed_kernel_is_an_error_directive_not_a_panic() {
    let mut k = cuda_kernels::elementwise_f32_broadcast();
    k.reads.pop();
    let src = cuda_source(&k).source;
    assert!(
        src.contains("#error \"smelt: kernel k0_mul_add_tanh_gt: reads buffer b1"),
        "{src}"
    );
}
