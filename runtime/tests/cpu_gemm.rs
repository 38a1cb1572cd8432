//! CPU matmul (`gemm` crate) against the reference interpreter: `torch.matmul` shapes (1-D,
//! batched, broadcast batch dims, k = 0, empty outputs), operands transposed through strides
//! (the reference graph spells the transpose as a `permute`), every dtype, typed errors.
//!
//! # Tolerances
//!
//! Floats pass when, element by element (NaN positions equal, like torch.testing's
//! `equal_nan`):
//!
//! `|got - want| <= atol + rtol * |want| + γ(k) * Σ_p |a_ip * b_pj|`
//!
//! with torch.testing's defaults for `rtol`/`atol` (f32 1.3e-6 / 1e-5, f64 1e-7 / 1e-7,
//! f16 1e-3 / 1e-5, bf16 1.6e-2 / 1e-5) and `γ(k) = k * u` the classic bound on the rounding
//! error of a k-term dot product accumulated in the unit roundoff `u` of the accumulator
//! (`2^-24` for f32, f16 and bf16, which `gemm` accumulates in f32; `2^-53` for f64). The
//! reference accumulates in f64, so the γ term is the whole expected difference before the
//! final rounding; it grows with `k` and with cancellation. Integers are exact.

use half::{bf16, f16};
use smelt_ir::interp::eval;
use smelt_ir::{DType, Graph, HostTensor, Shape, TensorData};
use smelt_runtime::cpu::{
    matmul_host, CpuError, CpuPool, MatmulOperand, MatmulPlan, PANEL_MAX_ROWS,
};
use std::collections::HashMap;

/// Deterministic values in [-1, 1) (floats) or [-range, range) (integers).
fn data(dtype: DType, n: usize, seed: u64) -> TensorData {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let unit = |x: u64| (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
    match dtype {
        DType::F32 => TensorData::F32((0..n).map(|_| unit(next()) as f32).collect()),
        DType::F64 => TensorData::F64((0..n).map(|_| unit(next())).collect()),
        DType::F16 => TensorData::F16((0..n).map(|_| f16::from_f64(unit(next()))).collect()),
        DType::BF16 => TensorData::BF16((0..n).map(|_| bf16::from_f64(unit(next()))).collect()),
        // Large enough that i32 products and sums wrap.
        DType::I32 => TensorData::I32((0..n).map(|_| (next() >> 33) as i32).collect()),
        DType::I64 => TensorData::I64((0..n).map(|_| next() as i64).collect()),
        DType::Bool => TensorData::Bool((0..n).map(|_| next() & 1 == 1).collect()),
    }
}

fn tensor(dtype: DType, dims: &[usize], seed: u64) -> HostTensor {
    let n = Shape::new(dims).numel();
    HostTensor::new(dims, data(dtype, n, seed)).unwrap()
}

/// `matmul(a', b')` by the reference interpreter, where `x'` is `permute(x, swap last two)`
/// when the flag is set.
fn reference(a: &HostTensor, ta: bool, b: &HostTensor, tb: bool) -> HostTensor {
    let mut g = Graph::new();
    let mut operand = |name: &str, t: &HostTensor, trans: bool| {
        let id = g.input(name, t.dtype(), t.shape().clone()).unwrap();
        let r = t.shape().rank();
        if trans && r >= 2 {
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 2, r - 1);
            g.permute(id, &perm).unwrap()
        } else {
            id
        }
    };
    let x = operand("a", a, ta);
    let y = operand("b", b, tb);
    let out = g.matmul(x, y).unwrap();
    g.set_output("out", out).unwrap();
    let bindings = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone())]);
    eval(&g, &bindings).unwrap().remove(0).1
}

/// The same values with every element replaced by its absolute value.
fn abs(t: &HostTensor) -> HostTensor {
    let v: Vec<f64> = (0..t.numel()).map(|i| t.data().get_f64(i).abs()).collect();
    HostTensor::new(t.shape().clone(), TensorData::F64(v)).unwrap()
}

fn tolerance(dtype: DType) -> (f64, f64, f64) {
    match dtype {
        DType::F32 => (1.3e-6, 1e-5, 2f64.powi(-24)),
        DType::F64 => (1e-7, 1e-7, 2f64.powi(-53)),
        DType::F16 => (1e-3, 1e-5, 2f64.powi(-24)),
        DType::BF16 => (1.6e-2, 1e-5, 2f64.powi(-24)),
        _ => (0.0, 0.0, 0.0),
    }
}

/// Checks `matmul_host` against the reference (see the tolerances in the module docs).
fn check(pool: &CpuPool, a: &HostTensor, ta: bool, b: &HostTensor, tb: bool) {
    let what = format!(
        "{} {}{} @ {}{}",
        a.dtype(),
        a.shape(),
        if ta { "ᵀ" } else { "" },
        b.shape(),
        if tb { "ᵀ" } else { "" }
    );
    let got = matmul_host(pool, a, ta, b, tb).unwrap_or_else(|e| panic!("{what}: {e}"));
    let want = reference(a, ta, b, tb);
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert_eq!(got.dtype(), want.dtype(), "{what}");
    if !a.dtype().is_float() {
        assert_eq!(
            got.data().to_le_bytes(),
            want.data().to_le_bytes(),
            "{what}"
        );
        return;
    }
    let k = match a.shape().dims() {
        [k] => *k,
        dims if ta => dims[dims.len() - 2],
        dims => dims[dims.len() - 1],
    };
    let bound = reference(&abs(a), ta, &abs(b), tb);
    let (rtol, atol, u) = tolerance(a.dtype());
    for i in 0..got.numel() {
        let (g, w) = (got.data().get_f64(i), want.data().get_f64(i));
        if w.is_nan() {
            assert!(g.is_nan(), "{what}: element {i}: got {g}, want NaN");
            continue;
        }
        let tol = atol + rtol * w.abs() + k as f64 * u * bound.data().get_f64(i);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w} (|diff| {} > tol {tol})",
            (g - w).abs()
        );
    }
}

/// Stored shapes of an operand whose logical shape is `dims`: as is, and transposed.
fn stored(dims: &[usize], trans: bool) -> Vec<usize> {
    let mut d = dims.to_vec();
    let r = d.len();
    if trans && r >= 2 {
        d.swap(r - 2, r - 1);
    }
    d
}

/// Logical `(lhs, rhs)` shapes covering torch.matmul's cases.
const SHAPES: &[(&[usize], &[usize])] = &[
    (&[5], &[5]),
    (&[4], &[4, 3]),
    (&[3, 4], &[4]),
    (&[7, 5], &[5, 9]),
    (&[1, 1], &[1, 1]),
    (&[2, 3, 4, 5], &[2, 3, 5, 6]),
    (&[2, 1, 4, 5], &[3, 5, 6]),
    (&[4, 5], &[3, 5, 6]),
    (&[3, 4, 5], &[5]),
    (&[5], &[3, 5, 6]),
    (&[3, 1, 2, 3], &[1, 4, 3, 2]),
    // k = 0: zeros.
    (&[3, 0], &[0, 4]),
    (&[2, 3, 0], &[0, 4]),
    (&[0], &[0]),
    // Empty outputs.
    (&[0, 3], &[3, 4]),
    (&[3, 4], &[4, 0]),
    (&[0, 2, 3], &[3, 4]),
];

fn check_all_shapes(pool: &CpuPool, dtype: DType) {
    for (i, &(l, r)) in SHAPES.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = tensor(dtype, &stored(l, ta), 2 * i as u64);
            let b = tensor(dtype, &stored(r, tb), 2 * i as u64 + 1);
            check(pool, &a, ta, &b, tb);
        }
    }
}

#[test]
fn f32_matches_the_reference_on_every_shape_and_transpose() {
    check_all_shapes(&CpuPool::new(2).unwrap(), DType::F32);
}

#[test]
fn f64_f16_bf16_match_the_reference_on_every_shape_and_transpose() {
    let pool = CpuPool::new(2).unwrap();
    for dtype in [DType::F64, DType::F16, DType::BF16] {
        check_all_shapes(&pool, dtype);
    }
}

#[test]
fn integers_are_exact_and_wrap_like_the_reference() {
    let pool = CpuPool::new(3).unwrap();
    for dtype in [DType::I32, DType::I64] {
        check_all_shapes(&pool, dtype);
    }
}

#[test]
fn larger_matrices_and_long_contractions_stay_within_the_k_scaled_tolerance() {
    let pool = CpuPool::new(0).unwrap();
    let cases: &[(DType, &[usize], &[usize])] = &[
        (DType::F32, &[65, 130], &[130, 33]),
        (DType::F32, &[8, 4096], &[4096, 8]),
        (DType::F32, &[3, 64, 96], &[96, 80]),
        (DType::F64, &[40, 1000], &[1000, 24]),
        (DType::F16, &[16, 2048], &[2048, 16]),
        (DType::BF16, &[16, 1024], &[1024, 16]),
        (DType::I64, &[9, 300], &[300, 11]),
    ];
    for (i, &(dtype, l, r)) in cases.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, true)] {
            let a = tensor(dtype, &stored(l, ta), 100 + i as u64);
            let b = tensor(dtype, &stored(r, tb), 200 + i as u64);
            check(&pool, &a, ta, &b, tb);
        }
    }
}

#[test]
fn nan_propagates_to_its_row_and_column() {
    let pool = CpuPool::new(2).unwrap();
    let mut a = vec![1.0f32; 4 * 3];
    a[3 + 1] = f32::NAN; // row 1
    let a = HostTensor::from_f32([4, 3], a).unwrap();
    let b = tensor(DType::F32, &[3, 5], 7);
    check(&pool, &a, false, &b, false);
    let out = matmul_host(&pool, &a, false, &b, false)
        .unwrap()
        .to_f32_vec();
    for (i, v) in out.iter().enumerate() {
        assert_eq!(v.is_nan(), i / 5 == 1, "element {i}: {v}");
    }
}

/// Batched (parallel over batches) and single large (per-thread tiles for f32, threads inside
/// `gemm` for bf16) products are bitwise identical for every pool size: each output element
/// is one `gemm` dot product whose `k` blocking, hence order of accumulation, depends on
/// neither.
#[test]
fn results_do_not_depend_on_the_thread_count() {
    let a = tensor(DType::F32, &[6, 200, 300], 11);
    let b = tensor(DType::F32, &[300, 150], 12);
    let big_a = tensor(DType::F32, &[256, 300], 13);
    let big_bt = tensor(DType::F32, &[280, 300], 14);
    let half_a = tensor(DType::BF16, &[3, 130, 500], 15);
    let run = |threads| {
        let pool = CpuPool::new(threads).unwrap();
        [
            matmul_host(&pool, &a, false, &b, false).unwrap(),
            matmul_host(&pool, &big_a, false, &big_bt, true).unwrap(),
            matmul_host(&pool, &half_a, true, &half_a, false).unwrap(),
        ]
        .map(|t| t.into_data().to_le_bytes())
    };
    let first = run(1);
    for threads in [1, 2, 3, 4] {
        assert!(run(threads) == first, "{threads} threads differ from 1");
    }
}

/// Products split into per-thread tiles (fewer batches than threads, each large): column
/// blocks with a ragged or empty last block, row blocks when there are few columns, two
/// batches split in two; all match the reference and are bitwise identical for every pool size.
#[test]
fn tiled_products_match_the_reference_for_every_pool_size() {
    let cases: &[(&[usize], bool, &[usize], bool)] = &[
        (&[100, 300], false, &[300, 1000], false),
        (&[100, 300], false, &[300, 100], true),
        (&[500, 300], true, &[300, 40], false),
        (&[20, 1000], false, &[1000, 40], false),
        (&[2, 90, 200], false, &[200, 230], true),
        // Contractions longer than `gemm`'s piece for small products (512), where row blocks
        // of at most 64 x 64 would be cut into other pieces than the whole: not split so
        // (before, two threads and more gave other bits than one here, on any CPU).
        (&[200, 600], false, &[600, 40], false),
        (&[40, 700], true, &[700, 130], false),
    ];
    let tensors: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, &(l, ta, r, tb))| {
            let a = tensor(DType::F32, &stored(l, ta), 300 + i as u64);
            let b = tensor(DType::F32, &stored(r, tb), 400 + i as u64);
            (a, ta, b, tb)
        })
        .collect();
    let mut first = None;
    for threads in [1, 2, 3, 4, 5] {
        let pool = CpuPool::new(threads).unwrap();
        let outs: Vec<_> = tensors
            .iter()
            .map(|(a, ta, b, tb)| {
                check(&pool, a, *ta, b, *tb);
                matmul_host(&pool, a, *ta, b, *tb)
                    .unwrap()
                    .into_data()
                    .to_le_bytes()
            })
            .collect();
        match &first {
            None => first = Some(outs),
            Some(f) => assert!(&outs == f, "{threads} threads differ from 1"),
        }
    }
}

/// Whether this CPU runs the panel kernel: AVX-512F, or AVX2 and FMA (x86-64).
fn panel_kernel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            || (std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// f32 products of at most `PANEL_MAX_ROWS` rows run on the panel kernel where the CPU has
/// AVX-512F, or AVX2 and FMA (ragged micro-tiles of rows and masked partial panels of
/// columns, operands transposed through strides, contractions longer than one pass over the
/// panels, 256), with the right operand as given (copied into panels per call) and packed in
/// panels beforehand (`MatmulPlan::panel_rhs`, what bound weights get). Either way they match
/// the reference and give the same bits on every pool size; a packed operand too short is
/// refused. On the panel kernel every element is, bit for bit, one `f32::mul_add` chain over
/// `k` in increasing order from +0 (its documented order), so AVX-512 and AVX2 CPUs give the
/// same bits.
#[test]
fn few_row_f32_products_run_on_the_panel_kernel() {
    let panels = panel_kernel();
    println!("few_row_f32_products_run_on_the_panel_kernel: panel kernel {panels}");
    let plan = |m: usize, k: usize, n: usize| {
        MatmulPlan::new(
            DType::F32,
            &MatmulOperand::contiguous(&[m, k]),
            &MatmulOperand::contiguous(&[k, n]),
        )
        .unwrap()
    };
    assert_eq!(PANEL_MAX_ROWS, 128);
    assert_eq!(plan(128, 8, 8).uses_panels(), panels);
    let mut packed_plan = plan(128, 8, 8);
    assert_eq!(packed_plan.panel_rhs(1).is_ok(), panels);
    assert_eq!(packed_plan.uses_panels(), panels);
    assert!(!plan(129, 8, 8).uses_panels());
    assert!(plan(129, 8, 8).panel_rhs(1).is_err());
    assert!(!MatmulPlan::new(
        DType::F64,
        &MatmulOperand::contiguous(&[4, 8]),
        &MatmulOperand::contiguous(&[8, 8])
    )
    .unwrap()
    .uses_panels());
    let pools: Vec<CpuPool> = (1..=3).map(|t| CpuPool::new(t).unwrap()).collect();
    let mut seed = 500;
    for m in [1, 11, 12, 13, 25, 64, 100, 128] {
        for (k, n) in [
            (1, 17),
            (3, 1),
            (3, 33),
            (130, 15),
            (130, 16),
            (64, 70),
            (40, 96),
            (256, 33),
            (600, 40),
        ] {
            if m > 64 && k < 64 {
                continue;
            }
            for (ta, tb) in [(false, false), (true, true)] {
                seed += 2;
                let a = tensor(DType::F32, &stored(&[m, k], ta), seed);
                let b = tensor(DType::F32, &stored(&[k, n], tb), seed + 1);
                let (TensorData::F32(av), TensorData::F32(bv)) = (a.data(), b.data()) else {
                    unreachable!()
                };
                // The documented order: one fused multiply-add chain per element.
                let at = |i: usize, p: usize| if ta { av[p * m + i] } else { av[i * k + p] };
                let bt = |p: usize, j: usize| if tb { bv[j * k + p] } else { bv[p * n + j] };
                let chain: Vec<u8> = (0..m * n)
                    .flat_map(|e| {
                        let (i, j) = (e / n, e % n);
                        (0..k)
                            .fold(0f32, |acc, p| at(i, p).mul_add(bt(p, j), acc))
                            .to_le_bytes()
                    })
                    .collect();
                if panels {
                    let got = matmul_host(&pools[1], &a, ta, &b, tb).unwrap();
                    assert!(
                        got.into_data().to_le_bytes() == chain,
                        "{m}x{k}x{n} (ta {ta}, tb {tb}): not the fused multiply-add chain"
                    );
                }
                let mut first = None;
                for pool in &pools {
                    check(pool, &a, ta, &b, tb);
                    let bits = matmul_host(pool, &a, ta, &b, tb)
                        .unwrap()
                        .into_data()
                        .to_le_bytes();
                    let first = first.get_or_insert_with(|| bits.clone());
                    assert!(
                        &bits == first,
                        "{m}x{k}x{n}: {} threads differ from 1",
                        pool.threads()
                    );
                }
                if ta || tb || !panels {
                    continue;
                }
                // The right operand packed in panels: the chain's bits, red zone untouched.
                for pool in &pools {
                    let mut packed_plan = plan(m, k, n);
                    packed_plan.panel_rhs(pool.threads()).unwrap();
                    let packed = packed_plan
                        .pack_panels(pool.threads(), bv, 0, [n, 1])
                        .unwrap();
                    let mut got = vec![f32::NAN; m * n + 40];
                    packed_plan.run(pool, av, &packed, &mut got).unwrap();
                    let bits: Vec<u8> = got[..m * n].iter().flat_map(|v| v.to_le_bytes()).collect();
                    assert!(
                        bits == chain,
                        "{m}x{k}x{n}, {} threads: packed, not the fused multiply-add chain",
                        pool.threads()
                    );
                    assert!(got[m * n..].iter().all(|v| v.is_nan()), "red zone");
                    if packed.len() > k * n {
                        let e = packed_plan
                            .run(pool, av, &packed[..k * n], &mut got)
                            .unwrap_err();
                        assert!(matches!(e, CpuError::BufferTooSmall { .. }), "{e}");
                    }
                }
            }
        }
    }
}

/// The packed right operand of the panel kernel against its documented layout, computed
/// here element by element: each column block (`rhs_column_blocks`) from element `k * c` of
/// its first column `c`, in whole pairs of 32 columns, panel `q` of a block holding element
/// `(i, j)` at `q * k * 16 + i * 16 + j % 16`, zeros past the block's last column. The
/// operand is read row-major (`[k, n]`: the path that copies a panel row per vector) and
/// transposed (`[n, k]` with padded rows, as a linear layer's weight is: the path that
/// transposes 16 x 16 tiles in registers), at an offset; the shapes are large enough that
/// packing is split among threads, with ragged row and column counts; the layout must not
/// depend on how many threads packed it. A buffer too short for the strides is a typed error.
#[test]
fn packed_panels_have_the_documented_layout() {
    let panels = panel_kernel();
    if !panels {
        println!("skipped: neither AVX-512F nor AVX2 and FMA, so no panel kernel");
        return;
    }
    for (m, k, n) in [
        (8, 700, 397),
        (100, 517, 771),
        (1, 3000, 130),
        (64, 1, 300),
        (3, 16, 16),
        (5, 15, 40),
    ] {
        // A value that names its position: row i, column j (exact in f32).
        let at = |i: usize, j: usize| (i * 4096 + j) as f32;
        let offset = 5;
        let row_major: Vec<f32> = (0..offset + k * n)
            .map(|e| {
                if e < offset {
                    f32::NAN
                } else {
                    at((e - offset) / n, (e - offset) % n)
                }
            })
            .collect();
        let ld = k + 3;
        let transposed: Vec<f32> = (0..offset + n * ld)
            .map(|e| {
                let (j, i) = (e.wrapping_sub(offset) / ld, e.wrapping_sub(offset) % ld);
                if e < offset || i >= k {
                    f32::NAN
                } else {
                    at(i, j)
                }
            })
            .collect();
        for threads in 1..=3 {
            let mut plan = MatmulPlan::new(
                DType::F32,
                &MatmulOperand::contiguous(&[m, k]),
                &MatmulOperand::contiguous(&[k, n]),
            )
            .unwrap();
            plan.panel_rhs(threads).unwrap();
            let blocks = plan
                .rhs_column_blocks(threads)
                .unwrap_or_else(|| std::iter::once(0..n).collect());
            let mut want = Vec::new();
            for b in &blocks {
                assert_eq!(want.len(), k * b.start, "{m}x{k}x{n}: block {b:?}");
                for q in 0..b.len().div_ceil(32) * 2 {
                    for i in 0..k {
                        for j in 0..16 {
                            let c = b.start + q * 16 + j;
                            want.push(if c < b.end { at(i, c) } else { 0.0 });
                        }
                    }
                }
            }
            let same = |got: &[f32]| {
                got.len() == want.len()
                    && got
                        .iter()
                        .zip(&want)
                        .all(|(g, w)| g.to_bits() == w.to_bits())
            };
            for (layout, data, strides) in [
                ("row-major", &row_major, [n, 1]),
                ("transposed", &transposed, [1, ld]),
            ] {
                let what = format!("{m}x{k}x{n}, {layout}, {threads} threads");
                let got = plan.pack_panels(threads, data, offset, strides).unwrap();
                assert!(same(&got), "{what}: packed operand differs from its layout");
                let (aligned, first) = plan
                    .pack_panels_aligned(threads, data, offset, strides)
                    .unwrap();
                assert_eq!(aligned.as_ptr().wrapping_add(first) as usize % 64, 0);
                assert!(aligned[..first].iter().all(|&v| v == 0.0));
                assert!(same(&aligned[first..]), "{what}: aligned copy differs");
                let short = &data[..data.len() - 1 - if layout == "transposed" { 3 } else { 0 }];
                let e = plan
                    .pack_panels(threads, short, offset, strides)
                    .unwrap_err();
                assert!(
                    matches!(e, CpuError::BufferTooSmall { needed, len, .. }
                        if needed == short.len() + 1 && len == short.len()),
                    "{what}: {e}"
                );
            }
        }
    }
}

#[test]
fn a_general_strided_operand_is_read_in_place() {
    // lhs: the [3, 4] block at column 2 of a row-major [3, 10] buffer; rhs: the transpose of a
    // [6, 4] buffer, read with strides (1, 4), broadcast over a batch of 2 with stride 0.
    let pool = CpuPool::new(2).unwrap();
    let buf: Vec<f64> = (0..30).map(|i| i as f64 * 0.25 - 3.0).collect();
    let rhs_buf: Vec<f64> = (0..24).map(|i| 1.0 / (i as f64 + 1.0)).collect();
    let lhs = MatmulOperand::new(&[3, 4], &[10, 1]);
    let rhs = MatmulOperand::new(&[2, 4, 6], &[0, 1, 4]);
    let plan = MatmulPlan::new(DType::F64, &lhs, &rhs).unwrap();
    assert_eq!(plan.out_dims(), &[2, 3, 6]);
    let mut out = vec![f64::NAN; plan.out_len() + 16];
    plan.run(&pool, &buf[2..], &rhs_buf, &mut out).unwrap();
    for b in 0..2 {
        for i in 0..3 {
            for j in 0..6 {
                let want: f64 = (0..4)
                    .map(|p| buf[2 + i * 10 + p] * rhs_buf[p + j * 4])
                    .sum();
                let got = out[b * 18 + i * 6 + j];
                assert!(
                    (got - want).abs() <= 1e-12,
                    "[{b},{i},{j}]: {got} vs {want}"
                );
            }
        }
    }
    // The red zone after the output is untouched.
    assert!(out[plan.out_len()..].iter().all(|v| v.is_nan()));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let pool = CpuPool::new(1).unwrap();
    let c = MatmulOperand::contiguous;
    let shape_err =
        |l: &[usize], r: &[usize]| MatmulPlan::new(DType::F32, &c(l), &c(r)).unwrap_err();
    assert!(matches!(
        shape_err(&[2, 3], &[4, 5]),
        CpuError::MatmulShape { .. }
    ));
    assert!(matches!(
        shape_err(&[2, 2, 3], &[3, 3, 5]),
        CpuError::MatmulShape { .. }
    ));
    assert!(matches!(shape_err(&[], &[3]), CpuError::MatmulShape { .. }));
    let e = MatmulPlan::new(DType::F32, &MatmulOperand::new(&[2, 3], &[3]), &c(&[3])).unwrap_err();
    assert!(e.to_string().contains("stride"), "{e}");
    let e = MatmulPlan::new(DType::Bool, &c(&[2, 3]), &c(&[3, 2])).unwrap_err();
    assert!(matches!(e, CpuError::UnsupportedDType { .. }), "{e}");

    let plan = MatmulPlan::new(DType::F32, &c(&[2, 3]), &c(&[3, 4])).unwrap();
    let (a, b) = (vec![1f32; 6], vec![1f32; 12]);
    let mut out = vec![0f32; 8];
    let e = plan.run(&pool, &a[..5], &b, &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            CpuError::BufferTooSmall {
                operand: "lhs",
                needed: 6,
                len: 5,
                ..
            }
        ),
        "{e}"
    );
    let e = plan.run(&pool, &a, &b, &mut out[..7]).unwrap_err();
    assert!(
        matches!(e, CpuError::BufferTooSmall { operand: "out", .. }),
        "{e}"
    );
    let e = plan
        .run(&pool, &[0f64; 6], &[0f64; 12], &mut [0f64; 8])
        .unwrap_err();
    assert!(matches!(e, CpuError::DTypeMismatch { .. }), "{e}");
    let e = matmul_host(
        &pool,
        &tensor(DType::F32, &[2, 3], 1),
        false,
        &tensor(DType::F64, &[3, 2], 2),
        false,
    )
    .unwrap_err();
    assert!(matches!(e, CpuError::DTypeMismatch { .. }), "{e}");
    // Strides that reach outside any buffer: negative offsets, overflowing reach.
    let neg = MatmulPlan::new(
        DType::F32,
        &MatmulOperand::new(&[2, 3], &[-3, 1]),
        &c(&[3, 4]),
    )
    .unwrap();
    assert!(matches!(
        neg.run(&pool, &a, &b, &mut out).unwrap_err(),
        CpuError::BufferTooSmall { .. }
    ));
    let huge = MatmulPlan::new(
        DType::F32,
        &MatmulOperand::new(&[3, 3], &[isize::MAX, 1]),
        &c(&[3, 4]),
    );
    assert!(matches!(huge.unwrap_err(), CpuError::Overflow { .. }));
}
