//! The launch plan without a GPU: the cuBLAS parameter mapping against an independent
//! column-major oracle, the fallback GEMM geometry, and the 256-byte placement.

use super::*;
use smelt_ir::NodeId;
use smelt_passes::kernel::{BufferDecl, BufferId};

/// A tiny deterministic generator (xorshift), so the cases need no extra dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// How one operand is stored.
#[derive(Clone, Debug)]
struct Storage {
    /// Logical shape (batch…, rows, cols), or `[k]` for a vector.
    shape: Vec<usize>,
    /// The last two dims stored swapped (a transposed view).
    transposed: bool,
    /// Extra elements at the end of each stored row (leading dimension > extent).
    pad: usize,
    /// Elements before element 0.
    offset: usize,
    /// Every dim's stride multiplied by this (a strided slice; 1 = dense).
    step: usize,
}

impl Storage {
    /// Strides of the logical dims and the buffer's element count.
    fn layout(&self) -> (Vec<usize>, usize) {
        let r = self.shape.len();
        let mut order: Vec<usize> = (0..r).collect();
        if self.transposed && r >= 2 {
            order.swap(r - 2, r - 1);
        }
        // Row-major strides over the stored dims (the last one padded).
        let stored: Vec<usize> = order.iter().map(|&d| self.shape[d]).collect();
        let mut strides = vec![0usize; r];
        let mut acc = self.step;
        for (i, &d) in order.iter().enumerate().rev() {
            strides[d] = acc;
            let extent = if i == r - 1 {
                stored[i] + self.pad
            } else {
                stored[i]
            };
            acc *= extent.max(1);
        }
        let reach: usize = self
            .shape
            .iter()
            .zip(&strides)
            .map(|(&n, &s)| n.saturating_sub(1) * s)
            .sum();
        (strides, self.offset + reach + 1)
    }
}

fn decl(id: u32, dtype: DType, numel: usize, kind: BufferKind) -> BufferDecl {
    BufferDecl {
        id: BufferId(id),
        dtype,
        numel,
        kind,
        value: NodeId(id),
    }
}

/// A program with one GEMM step `out = a @ b`.
fn gemm_program(dtype: DType, a: &Storage, b: &Storage) -> (Program, Vec<usize>) {
    let (sa, na) = a.layout();
    let (sb, nb) = b.layout();
    let ga = GemmOperand {
        buffer: BufferId(0),
        shape: a.shape.clone(),
        strides: sa,
        offset: a.offset,
    };
    let gb = GemmOperand {
        buffer: BufferId(1),
        shape: b.shape.clone(),
        strides: sb,
        offset: b.offset,
    };
    // torch.matmul's output shape.
    let (lr, rr) = (a.shape.len(), b.shape.len());
    let lb = &a.shape[..lr.saturating_sub(2)];
    let rb = &b.shape[..rr.saturating_sub(2)];
    let rank = lb.len().max(rb.len());
    let mut out: Vec<usize> = (0..rank)
        .map(|j| {
            let get = |v: &[usize]| (j + v.len()).checked_sub(rank).map_or(1, |i| v[i]);
            get(lb).max(get(rb))
        })
        .collect();
    if lr > 1 {
        out.push(a.shape[lr - 2]);
    }
    if rr > 1 {
        out.push(b.shape[rr - 1]);
    }
    let numel: usize = out.iter().product();
    let program = Program {
        buffers: vec![
            decl(0, dtype, na, BufferKind::Input("a".into())),
            decl(1, dtype, nb, BufferKind::Input("b".into())),
            decl(2, dtype, numel, BufferKind::Temp),
        ],
        steps: vec![Step::Gemm(Gemm {
            name: "mm".into(),
            origin: vec![],
            dtype,
            a: ga,
            b: gb,
            out: BufferId(2),
            out_shape: out.clone(),
        })],
        outputs: vec![("y".into(), BufferId(2))],
    };
    (program, out)
}

/// `torch.matmul` straight from the strided operands, row-major output, in f64.
fn reference(program: &Program, a: &[f64], b: &[f64]) -> Vec<f64> {
    let Step::Gemm(g) = &program.steps[0] else {
        unreachable!()
    };
    let (ga, gb) = (&g.a, &g.b);
    let out_shape = &g.out_shape;
    let numel: usize = out_shape.iter().product();
    let (lr, rr) = (ga.shape.len(), gb.shape.len());
    let k = ga.shape[lr - 1];
    let mut out = vec![0.0; numel];
    for (flat, o) in out.iter_mut().enumerate() {
        // Output multi-index.
        let mut idx = vec![0usize; out_shape.len()];
        let mut rest = flat;
        for d in (0..out_shape.len()).rev() {
            idx[d] = rest % out_shape[d];
            rest /= out_shape[d];
        }
        let nb = out_shape.len() - usize::from(lr > 1) - usize::from(rr > 1);
        let (batch, tail) = idx.split_at(nb);
        let i = if lr > 1 { tail[0] } else { 0 };
        let j = if rr > 1 { tail[tail.len() - 1] } else { 0 };
        let addr = |op: &GemmOperand, row: usize, col: usize, left: bool| {
            let r = op.shape.len();
            let mut at = op.offset;
            let own = r.saturating_sub(2);
            for d in 0..own {
                let bd = batch[nb - own + d];
                let x = if op.shape[d] == 1 { 0 } else { bd };
                at += x * op.strides[d];
            }
            if r == 1 {
                at += if left { col } else { row } * op.strides[0];
            } else {
                at += row * op.strides[r - 2] + col * op.strides[r - 1];
            }
            at
        };
        let mut acc = 0.0;
        for p in 0..k {
            acc += a[addr(ga, i, p, true)] * b[addr(gb, p, j, false)];
        }
        *o = acc;
    }
    out
}

/// The oracle: a plain column-major GEMM interpreting one cuBLAS call's parameters exactly as
/// `cublasGemmStridedBatchedEx` documents them (including its argument checks).
fn column_major(call: &CublasCall, a: &[f64], b: &[f64], c: &mut [f64]) {
    let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
    let rows_a = if call.transa == Trans::N { m } else { k };
    let rows_b = if call.transb == Trans::N { k } else { n };
    assert!(call.lda as usize >= rows_a.max(1), "lda {call:?}");
    assert!(call.ldb as usize >= rows_b.max(1), "ldb {call:?}");
    assert!(call.ldc as usize >= m.max(1), "ldc {call:?}");
    assert!(call.batch >= 0 && call.m >= 0 && call.n >= 0 && call.k >= 0);
    for bi in 0..call.batch as usize {
        let ao = call.a_offset as i64 + bi as i64 * call.stride_a;
        let bo = call.b_offset as i64 + bi as i64 * call.stride_b;
        let co = call.c_offset as i64 + bi as i64 * call.stride_c;
        for j in 0..n {
            for i in 0..m {
                let mut acc = 0.0;
                for p in 0..k {
                    let x = match call.transa {
                        Trans::N => a[(ao + (i + p * call.lda as usize) as i64) as usize],
                        Trans::T => a[(ao + (p + i * call.lda as usize) as i64) as usize],
                    };
                    let y = match call.transb {
                        Trans::N => b[(bo + (p + j * call.ldb as usize) as i64) as usize],
                        Trans::T => b[(bo + (j + p * call.ldb as usize) as i64) as usize],
                    };
                    acc += x * y;
                }
                c[(co + (i + j * call.ldc as usize) as i64) as usize] = acc;
            }
        }
    }
}

/// A Rust mirror of the fallback kernel's index arithmetic.
fn fallback(g: &GemmGeometry, a: &[f64], b: &[f64]) -> Vec<f64> {
    (0..g.out_len)
        .map(|idx| {
            let mut t = idx;
            let j = t % g.n;
            t /= g.n;
            let i = t % g.m;
            t /= g.m;
            let mut ao = g.a.offset as i64 + i as i64 * g.a.rs;
            let mut bo = g.b.offset as i64 + j as i64 * g.b.cs;
            for d in (0..g.batch_dims.len()).rev() {
                let x = (t % g.batch_dims[d]) as i64;
                t /= g.batch_dims[d];
                ao += x * g.a.batch[d];
                bo += x * g.b.batch[d];
            }
            (0..g.k as i64)
                .map(|p| a[(ao + p * g.a.cs) as usize] * b[(bo + p * g.b.rs) as usize])
                .sum()
        })
        .collect()
}

fn values(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.below(7) as f64 - 3.0).collect()
}

/// Runs one case: plan, then the cuBLAS calls through the oracle (when cuBLAS is used) and the
/// fallback mirror, both against the reference. Returns whether cuBLAS was used.
fn check(a: &Storage, b: &Storage, rng: &mut Rng) -> bool {
    let (program, _) = gemm_program(DType::F32, a, b);
    let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas)
        .unwrap_or_else(|e| panic!("{a:?} @ {b:?}: {e}"));
    let av = values(rng, program.buffers[0].numel);
    let bv = values(rng, program.buffers[1].numel);
    let want = reference(&program, &av, &bv);
    let Step::Gemm(g) = &program.steps[0] else {
        unreachable!()
    };
    let geom = GemmGeometry::of(&program, g).unwrap();
    assert_eq!(fallback(&geom, &av, &bv), want, "fallback {a:?} @ {b:?}");
    match &plan.steps[0] {
        LaunchStep::Cublas(c) => {
            // cuBLAS's A is the right operand, its B the left one.
            assert_eq!(
                c.a,
                KernelArg::Buffer {
                    buffer: 1,
                    loc: plan.buffers[1]
                }
            );
            assert_eq!(
                c.b,
                KernelArg::Buffer {
                    buffer: 0,
                    loc: plan.buffers[0]
                }
            );
            let mut got = vec![f64::NAN; program.buffers[2].numel];
            for call in &c.calls {
                column_major(call, &bv, &av, &mut got);
            }
            assert_eq!(got, want, "cuBLAS mapping {a:?} @ {b:?}: {:?}", c.calls);
            true
        }
        LaunchStep::Kernel(k) => {
            assert_eq!(plan.entries[k.entry], "smelt_gemm_s0");
            assert_eq!(k.args.len(), 4);
            assert_eq!(k.args[3], KernelArg::Count(want.len() as i64));
            assert!(plan.source.contains("smelt_gemm_s0("));
            false
        }
        LaunchStep::Zero { bytes, .. } => {
            assert_eq!(*bytes, want.len() * 4);
            assert!(want.iter().all(|&x| x == 0.0));
            false
        }
        LaunchStep::Skip { .. } => {
            assert!(want.is_empty());
            false
        }
    }
}

fn st(shape: &[usize], transposed: bool) -> Storage {
    Storage {
        shape: shape.to_vec(),
        transposed,
        pad: 0,
        offset: 0,
        step: 1,
    }
}

#[test]
fn plain_and_transposed_operands_map_to_cublas() {
    let mut rng = Rng(0x5eed);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        assert!(check(&st(&[3, 4], ta), &st(&[4, 5], tb), &mut rng));
        assert!(check(&st(&[1, 4], ta), &st(&[4, 1], tb), &mut rng));
        assert!(check(&st(&[3, 1], ta), &st(&[1, 5], tb), &mut rng));
    }
}

#[test]
fn vectors_padding_and_offsets_map_to_cublas() {
    let mut rng = Rng(7);
    assert!(check(&st(&[4], false), &st(&[4, 5], false), &mut rng));
    assert!(check(&st(&[3, 4], true), &st(&[4], false), &mut rng));
    assert!(check(&st(&[4], false), &st(&[4], false), &mut rng));
    let padded = Storage {
        pad: 3,
        offset: 5,
        ..st(&[3, 4], false)
    };
    let padded_t = Storage {
        pad: 2,
        offset: 1,
        ..st(&[4, 6], true)
    };
    assert!(check(&padded, &padded_t, &mut rng));
    check(&padded_t, &st(&[6, 2], false), &mut rng);
}

#[test]
fn batched_and_broadcast_batches_map_to_cublas() {
    let mut rng = Rng(99);
    // Same batch dims, both collapse into one strided-batched call.
    assert!(check(
        &st(&[2, 3, 3, 4], false),
        &st(&[2, 3, 4, 5], true),
        &mut rng
    ));
    // The right operand broadcast over the batch (stride 0) and missing batch dims.
    assert!(check(
        &st(&[2, 3, 3, 4], true),
        &st(&[4, 5], false),
        &mut rng
    ));
    assert!(check(&st(&[3, 4], false), &st(&[2, 4, 5], false), &mut rng));
    assert!(check(
        &st(&[2, 1, 3, 4], false),
        &st(&[1, 3, 4, 5], false),
        &mut rng
    ));
    let (program, _) = gemm_program(
        DType::F32,
        &st(&[2, 1, 3, 4], false),
        &st(&[1, 3, 4, 5], false),
    );
    let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
    let LaunchStep::Cublas(c) = &plan.steps[0] else {
        panic!("expected cuBLAS")
    };
    // [2,1] × [1,3] broadcast: the inner dim collapses (A-side stride 0), the outer one is
    // a separate call.
    assert_eq!(c.calls.len(), 2, "{:?}", c.calls);
    assert_eq!(c.calls[0].batch, 3);
}

#[test]
fn operands_without_a_unit_stride_use_the_fallback_kernel() {
    let mut rng = Rng(3);
    let strided = Storage {
        step: 2,
        ..st(&[3, 4], false)
    };
    assert!(!check(&strided, &st(&[4, 5], false), &mut rng));
    assert!(!check(
        &st(&[3, 4], false),
        &Storage {
            step: 3,
            ..st(&[4, 5], true)
        },
        &mut rng
    ));
    let (program, _) = gemm_program(DType::F32, &strided, &st(&[4, 5], false));
    let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
    assert_eq!(plan.fallbacks.len(), 1);
    assert!(
        plan.fallbacks[0].1.contains("left operand"),
        "{:?}",
        plan.fallbacks
    );
}

#[test]
fn integer_gemms_and_no_cublas_use_the_fallback_kernel() {
    for d in [DType::I32, DType::I64] {
        let (program, _) = gemm_program(d, &st(&[3, 4], false), &st(&[4, 5], false));
        let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
        assert!(matches!(plan.steps[0], LaunchStep::Kernel(_)));
        assert!(plan.source.contains("unsigned"), "{}", plan.source);
    }
    let (program, _) = gemm_program(DType::F16, &st(&[3, 4], false), &st(&[4, 5], false));
    let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Fallback).unwrap();
    assert!(matches!(plan.steps[0], LaunchStep::Kernel(_)));
    assert!(plan.source.contains("#include <cuda_fp16.h>"));
    assert!(plan.source.contains("__float2half_rn(acc)"));
    let (program, _) = gemm_program(DType::Bool, &st(&[3, 4], false), &st(&[4, 5], false));
    assert!(LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).is_err());
}

#[test]
fn empty_gemms_skip_or_zero() {
    let mut rng = Rng(5);
    assert!(!check(&st(&[0, 4], false), &st(&[4, 5], false), &mut rng));
    assert!(!check(&st(&[3, 0], false), &st(&[0, 5], false), &mut rng));
    let (program, _) = gemm_program(DType::F32, &st(&[3, 0], false), &st(&[0, 5], false));
    let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
    assert!(matches!(plan.steps[0], LaunchStep::Zero { bytes: 60, .. }));
}

/// Random shapes, transposes, paddings, offsets, slices and broadcast batches: the cuBLAS
/// mapping (through the column-major oracle) and the fallback geometry both equal the reference.
#[test]
fn random_gemms_match_the_reference() {
    let mut rng = Rng(0x1234_5678);
    let mut used = [0usize; 2];
    for _ in 0..600 {
        let rank = rng.below(3);
        let batch: Vec<usize> = (0..rank).map(|_| 1 + rng.below(3)).collect();
        let (m, k, n) = (rng.below(5), rng.below(5), rng.below(5));
        let mut operand = |rows: usize, cols: usize, left: bool| {
            let mut shape: Vec<usize> = batch
                .iter()
                .skip(rng.below(rank + 1))
                .map(|&d| if rng.below(4) == 0 { 1 } else { d })
                .collect();
            let vector = shape.is_empty() && rng.below(4) == 0;
            if vector {
                shape.push(if left { cols } else { rows });
            } else {
                shape.push(rows);
                shape.push(cols);
            }
            Storage {
                shape,
                transposed: !vector && rng.coin(),
                pad: if rng.below(3) == 0 { rng.below(3) } else { 0 },
                offset: rng.below(4),
                step: if rng.below(8) == 0 { 2 } else { 1 },
            }
        };
        let a = operand(m, k, true);
        let b = operand(k, n, false);
        let cublas = check(&a, &b, &mut rng);
        used[usize::from(cublas)] += 1;
    }
    // Both paths are exercised.
    assert!(used[0] > 30 && used[1] > 200, "{used:?}");
}

#[test]
fn placement_is_aligned_and_disjoint_for_live_overlaps() {
    let bytes = [100, 3, 256, 1000, 0, 64];
    let live = [
        Some((0, 2)),
        Some((1, 1)),
        Some((2, 4)),
        Some((3, 5)),
        Some((0, 5)),
        None,
    ];
    let (offsets, peak) = place(&bytes, &live).unwrap();
    assert_eq!(offsets[5], None);
    for i in 0..bytes.len() {
        let Some(oi) = offsets[i] else { continue };
        assert_eq!(oi % DEVICE_ALIGN, 0);
        assert!(oi + bytes[i] <= peak);
        for j in 0..i {
            let Some(oj) = offsets[j] else { continue };
            let (a, b) = (live[i].unwrap(), live[j].unwrap());
            if a.1 < b.0 || b.1 < a.0 {
                continue;
            }
            let (ei, ej) = (
                oi + align_up(bytes[i]).unwrap(),
                oj + align_up(bytes[j]).unwrap(),
            );
            assert!(ei <= oj || ej <= oi, "{i} and {j} overlap");
        }
    }
    // 0 and 1 are dead before 3 starts: 3 reuses their bytes.
    assert!(peak < bytes.iter().map(|&b| align_up(b).unwrap()).sum::<usize>());
}
