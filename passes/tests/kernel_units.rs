//! Unit tests of the kernel IR lowering, verifier and evaluator on hand-built graphs.

mod kernel_common;

use kernel_common::{compare, elementwise_tol};
use smelt_ir::{
    BinaryOp, DType, Graph, HostTensor, ReduceOp, Scalar, SliceRange, TensorData, UnaryOp,
};
use smelt_passes::kernel::*;
use smelt_passes::{optimize, PassOptions};
use std::collections::HashMap;

fn program(graph: &Graph, fuse: bool) -> Program {
    let opts = PassOptions {
        fuse,
        ..PassOptions::default()
    };
    let o = optimize(graph, &opts).expect("optimize");
    let p = lower(&o.graph, &o.plan).expect("lower");
    verify_program(&p).unwrap_or_else(|e| panic!("{e}\n{p}"));
    p
}

fn f32s(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor::from_f32(shape, (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()).unwrap()
}

/// Lowers fused and unfused, evaluates and compares with the interpreter.
fn check_against_interp(graph: &Graph, bindings: &HashMap<String, HostTensor>) -> Program {
    let want = smelt_ir::interp::eval(graph, bindings).expect("interp");
    let mut last = None;
    for fuse in [true, false] {
        let p = program(graph, fuse);
        let got = eval_program(&p, bindings).unwrap_or_else(|e| panic!("{e}\n{p}"));
        compare(&want, &got, elementwise_tol).unwrap_or_else(|e| panic!("{e}\n{p}"));
        last = Some(p);
    }
    last.expect("two runs")
}

fn loads(p: &Program) -> Vec<Access> {
    p.kernels()
        .flat_map(|k| k.stages.iter().flat_map(|s| s.body.iter()))
        .filter_map(|i| match &i.op {
            InstOp::Load { access, .. } => Some(access.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn index_width_is_64_bit_only_for_buffers_over_2_gib() {
    for (n, want) in [(1usize << 31, IndexWidth::I64), (1 << 20, IndexWidth::I32)] {
        let mut g = Graph::new();
        let x = g.input("x", DType::Bool, [n]).unwrap();
        let y = g.unary(UnaryOp::LogicalNot, x).unwrap();
        g.set_output("y", y).unwrap();
        let p = program(&g, true);
        let k = p.kernels().next().expect("a kernel");
        assert_eq!(k.index_width, want, "{p}");
    }
    // The verifier rejects a 32-bit kernel over a big buffer.
    let mut g = Graph::new();
    let x = g.input("x", DType::Bool, [1usize << 31]).unwrap();
    let y = g.unary(UnaryOp::LogicalNot, x).unwrap();
    g.set_output("y", y).unwrap();
    let mut p = program(&g, true);
    let Step::Kernel(k) = &mut p.steps[0] else {
        panic!("{p}")
    };
    k.index_width = IndexWidth::I32;
    assert!(verify_program(&p).is_err());
}

#[test]
fn strided_views_are_affine_loads() {
    // x[4, 6] sliced [1:4:2, ::3] then transposed: strides [3, 6] * steps, offset 6.
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 6]).unwrap();
    let s = g
        .slice(
            x,
            &[
                SliceRange {
                    start: 1,
                    stop: 4,
                    step: 2,
                },
                SliceRange {
                    start: 0,
                    stop: 6,
                    step: 3,
                },
            ],
        )
        .unwrap();
    let t = g.permute(s, &[1, 0]).unwrap();
    let y = g.unary(UnaryOp::Exp, t).unwrap();
    g.set_output("y", y).unwrap();
    let b = HashMap::from([("x".to_string(), f32s(&[4, 6]))]);
    let p = check_against_interp(&g, &b);
    assert!(
        loads(&p).contains(&Access::Affine {
            offset: 6,
            strides: vec![3, 12]
        }),
        "{p}"
    );
}

#[test]
fn reshape_of_a_permute_reads_through_div_mod() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 6]).unwrap();
    let t = g.permute(x, &[1, 0]).unwrap();
    let r = g.reshape(t, [24]).unwrap();
    let y = g.unary(UnaryOp::Neg, r).unwrap();
    g.set_output("y", y).unwrap();
    let b = HashMap::from([("x".to_string(), f32s(&[4, 6]))]);
    let p = check_against_interp(&g, &b);
    assert!(
        loads(&p).iter().any(|a| matches!(a, Access::Computed(_))),
        "{p}"
    );
    let text = p.to_string();
    assert!(text.contains("idiv") && text.contains("irem"), "{text}");
}

#[test]
fn reductions_over_inner_and_outer_axes() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 4, 5]).unwrap();
    let m = g.reduce(ReduceOp::Mean, x, &[0, 2], true).unwrap();
    let s = g.binary(BinaryOp::Sub, x, m).unwrap();
    let a = g.reduce(ReduceOp::ArgMax, s, &[1], false).unwrap();
    let i = g.input("i", DType::I32, [3, 4]).unwrap();
    let si = g.reduce(ReduceOp::Sum, i, &[0], false).unwrap();
    let mx = g.reduce(ReduceOp::Min, i, &[1], true).unwrap();
    for (n, v) in [("m", m), ("s", s), ("a", a), ("si", si), ("mx", mx)] {
        g.set_output(n, v).unwrap();
    }
    let ints = HostTensor::new(
        [3, 4],
        TensorData::I32(vec![5, -2, 7, i32::MAX, 1, 1, 0, -9, 3, i32::MAX, 2, 2]),
    )
    .unwrap();
    let b = HashMap::from([("x".to_string(), f32s(&[3, 4, 5])), ("i".to_string(), ints)]);
    let want = smelt_ir::interp::eval(&g, &b).unwrap();
    for fuse in [true, false] {
        let p = program(&g, fuse);
        let got = eval_program(&p, &b).unwrap();
        // f32 accumulation of 15 values of at most 30 in magnitude (exact multiples of 0.5).
        compare(&want, &got, |_| (1e-6, 1e-6)).unwrap_or_else(|e| panic!("{e}\n{p}"));
    }
}

#[test]
fn concat_and_pad_select_between_clamped_loads() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [2, 3]).unwrap();
    let e = g.input("e", DType::F32, [2, 0]).unwrap();
    let c = g.input("c", DType::F32, [2, 2]).unwrap();
    let d = g.input("d", DType::F32, [2, 1]).unwrap();
    let cat = g.concat(&[a, e, c, d], 1).unwrap();
    let pad = g.pad(a, &[(1, 0), (2, 1)], Scalar::Float(-7.5)).unwrap();
    let empty = g.pad(e, &[(0, 1), (1, 1)], Scalar::Int(3)).unwrap();
    g.set_output("cat", cat).unwrap();
    g.set_output("pad", pad).unwrap();
    g.set_output("empty", empty).unwrap();
    let b: HashMap<String, HostTensor> = [
        ("a", &[2, 3][..]),
        ("e", &[2, 0]),
        ("c", &[2, 2]),
        ("d", &[2, 1]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), f32s(s)))
    .collect();
    let p = check_against_interp(&g, &b);
    let text = p.to_string();
    assert!(text.contains("select") && text.contains("ilt"), "{text}");
}

#[test]
fn gather_and_index_select_match_and_out_of_range_is_an_error() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 3]).unwrap();
    let idx = g.input("idx", DType::I64, [2, 3]).unwrap();
    let sel = g.input("sel", DType::I32, [5]).unwrap();
    let ga = g.gather(x, idx, 0).unwrap();
    let is = g.index_select(x, sel, 0).unwrap();
    g.set_output("ga", ga).unwrap();
    g.set_output("is", is).unwrap();
    let mut b = HashMap::from([
        ("x".to_string(), f32s(&[4, 3])),
        (
            "idx".to_string(),
            HostTensor::from_i64([2, 3], vec![3, 0, 1, 2, 2, 0]).unwrap(),
        ),
        (
            "sel".to_string(),
            HostTensor::new([5], TensorData::I32(vec![1, 3, 3, 0, 2])).unwrap(),
        ),
    ]);
    let p = check_against_interp(&g, &b);
    for bad in [4i64, -1, i64::MAX] {
        b.insert(
            "idx".to_string(),
            HostTensor::from_i64([2, 3], vec![3, 0, 1, 2, bad, 0]).unwrap(),
        );
        assert!(smelt_ir::interp::eval(&g, &b).is_err());
        let e = eval_program(&p, &b).expect_err("out of range");
        assert!(e.to_string().contains("out of bounds"), "{e}");
    }
}

#[test]
fn matmul_follows_torch_shapes_including_1d() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F64, [2, 3, 4]).unwrap();
    let v = g.input("v", DType::F64, [4]).unwrap();
    let w = g.input("w", DType::F64, [3]).unwrap();
    let av = g.matmul(a, v).unwrap();
    let wa = g.matmul(w, a).unwrap();
    let vv = g.matmul(v, v).unwrap();
    for (n, x) in [("av", av), ("wa", wa), ("vv", vv)] {
        g.set_output(n, x).unwrap();
    }
    let mk = |s: &[usize]| {
        let n: usize = s.iter().product();
        HostTensor::new(s, TensorData::F64((0..n).map(|i| i as f64 - 2.0).collect())).unwrap()
    };
    let b = HashMap::from([
        ("a".to_string(), mk(&[2, 3, 4])),
        ("v".to_string(), mk(&[4])),
        ("w".to_string(), mk(&[3])),
    ]);
    check_against_interp(&g, &b);
}

#[test]
fn verifier_rejects_broken_programs() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 4]).unwrap();
    let y = g.unary(UnaryOp::Exp, x).unwrap();
    g.set_output("y", y).unwrap();
    let good = program(&g, true);
    let edit = |f: &mut dyn FnMut(&mut Kernel)| {
        let mut p = good.clone();
        if let Step::Kernel(k) = &mut p.steps[0] {
            f(k);
        }
        verify_program(&p)
    };
    // Out of bounds affine load.
    assert!(edit(&mut |k| {
        for i in &mut k.stages[0].body {
            if let InstOp::Load {
                access: Access::Affine { offset, .. },
                ..
            } = &mut i.op
            {
                *offset = 1;
            }
        }
    })
    .is_err());
    // Use before definition.
    assert!(edit(&mut |k| {
        let body = &mut k.stages[0].body;
        let n = body.len();
        body.swap(0, n - 1);
    })
    .is_err());
    // Wrong declared type.
    assert!(edit(&mut |k| k.stages[0].body[0].ty = Ty::Data(DType::F64)).is_err());
    // Wrong stride count.
    assert!(edit(&mut |k| k.outer.push(1)).is_err());
    // A temp read before it is written.
    let mut p = good.clone();
    p.steps.clear();
    assert!(verify_program(&p).is_err());
}

/// Regression (proptest): a permute that reorders keepdim row values (so that an output row
/// would read another row's reduction) is not planned into the row kernel: the planner makes a
/// reduction kernel and a copy kernel, and lowering keeps the plan's kernels one to one.
#[test]
fn permuted_row_values_are_not_fused_into_the_row_kernel() {
    let mut g = Graph::new();
    let w = g.param("w0", DType::I32, [7, 7, 7, 1]).unwrap();
    let m = g.reduce(ReduceOp::Max, w, &[1, 3], true).unwrap();
    let p = g.permute(m, &[2, 1, 0, 3]).unwrap();
    g.set_output("y", p).unwrap();
    let n: i32 = 7 * 7 * 7;
    let data = (0..n).map(|i: i32| (i * 37) % 101 - 50).collect();
    let b = HashMap::from([(
        "w0".to_string(),
        HostTensor::new([7, 7, 7, 1], TensorData::I32(data)).unwrap(),
    )]);
    check_against_interp(&g, &b);
    let o = optimize(&g, &PassOptions::default()).expect("optimize");
    assert_eq!(o.plan.kernels.len(), 2, "{}", o.plan);
    let fused = program(&g, true);
    let names: Vec<&str> = fused.kernels().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["k0_reduction_max", "k1_copy_permute"], "{fused}");
}

/// A permute that only swaps size-1 axes of row values keeps every row in place, so the
/// planner (run without the simplifier, which would turn it into a reshape) keeps it in the row
/// kernel, and the kernel is right.
#[test]
fn permuting_unit_axes_of_row_values_stays_in_the_row_kernel() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 1, 4, 5]).unwrap();
    let m = g.reduce(ReduceOp::Sum, x, &[3], true).unwrap();
    let p = g.permute(m, &[0, 3, 2, 1]).unwrap();
    let e = g.unary(UnaryOp::Exp, p).unwrap();
    g.set_output("y", e).unwrap();
    let (plan, _) = smelt_passes::fusion::plan(&g, &PassOptions::default()).expect("plan");
    assert_eq!(plan.kernels.len(), 1, "{plan}");
    let p = lower(&g, &plan).expect("lower");
    let b = HashMap::from([("x".to_string(), f32s(&[3, 1, 4, 5]))]);
    let want = smelt_ir::interp::eval(&g, &b).expect("interp");
    let got = eval_program(&p, &b).unwrap_or_else(|e| panic!("{e}\n{p}"));
    compare(&want, &got, elementwise_tol).unwrap_or_else(|e| panic!("{e}\n{p}"));
}

/// Regression (proptest): a slice between row values over a zero-size dim is not a read of
/// another row (loop variables of extent 0 or 1 are always 0).
#[test]
fn slice_of_row_values_over_an_empty_dim_lowers() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F16, [2, 0, 4]).unwrap();
    let a = g.reduce(ReduceOp::ArgMin, x, &[0], false).unwrap();
    let s = g
        .slice(
            a,
            &[
                SliceRange {
                    start: 0,
                    stop: 0,
                    step: 3,
                },
                SliceRange {
                    start: 0,
                    stop: 4,
                    step: 1,
                },
            ],
        )
        .unwrap();
    g.set_output("y", s).unwrap();
    let b = HashMap::from([(
        "x".to_string(),
        HostTensor::new([2, 0, 4], TensorData::F16(Vec::new())).unwrap(),
    )]);
    check_against_interp(&g, &b);
}

/// The cost model counts a buffer read only through slices by the elements the slices select
/// (two column blocks of a fused QKV projection: the merged kernel reads two thirds of it),
/// and a buffer also read whole at its stored size.
#[test]
fn a_sliced_input_costs_the_elements_it_selects() {
    let range = |start, stop| SliceRange {
        start,
        stop,
        step: 1,
    };
    let mut g = Graph::new();
    let qkv = g.input("qkv", DType::F32, [64, 96]).unwrap();
    for (i, name) in ["q", "k"].into_iter().enumerate() {
        let s = g
            .slice(qkv, &[range(0, 64), range(32 * i, 32 * (i + 1))])
            .unwrap();
        let e = g.unary(UnaryOp::Exp, s).unwrap();
        g.set_output(name, e).unwrap();
    }
    let whole = g.unary(UnaryOp::Neg, qkv).unwrap();
    g.set_output("whole", whole).unwrap();
    let o = optimize(&g, &PassOptions::default()).expect("optimize");
    let third = 64 * 32 * 4;
    let reads: Vec<(usize, u64)> = o
        .plan
        .kernels
        .iter()
        .map(|k| (k.outputs.len(), k.bytes_read))
        .collect();
    assert_eq!(reads, [(2, 2 * third), (1, 3 * third)], "{}", o.plan);
}

/// Extraction chooses a multi-output kernel that writes a value and two values computed from
/// it (`a = exp(x)`, `a * 2`, `a + 1`, all outputs): one kernel reading `x` once, rather than
/// materialising `a` first and reading it back. Merging already extracted kernels cannot find
/// this (the readers of `a` depend on the kernel writing it); the multi-output e-nodes can.
#[test]
fn a_value_and_its_readers_become_one_multi_output_kernel() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [4, 8]).unwrap();
    let a = g.unary(UnaryOp::Exp, x).unwrap();
    let two = g.scalar(Scalar::Float(2.0), DType::F32).unwrap();
    let one = g.scalar(Scalar::Float(1.0), DType::F32).unwrap();
    let b = g.binary(BinaryOp::Mul, a, two).unwrap();
    let c = g.binary(BinaryOp::Add, a, one).unwrap();
    g.set_output("a", a).unwrap();
    g.set_output("b", b).unwrap();
    g.set_output("c", c).unwrap();
    let o = optimize(&g, &PassOptions::default()).expect("optimize");
    assert_eq!(o.plan.kernels.len(), 1, "{}", o.plan);
    assert_eq!(o.plan.kernels[0].outputs.len(), 3, "{}", o.plan);
    let bindings = HashMap::from([("x".to_string(), f32s(&[4, 8]))]);
    check_against_interp(&g, &bindings);
}

/// The element indices one store reaches, enumerated over its loop nest (the oracle for
/// `Program::writes_every_element`); `None` for a computed address.
fn stored_indices(k: &Kernel, stage: &Stage, st: &Store) -> Option<Vec<i64>> {
    let Access::Affine { offset, strides } = &st.access else {
        return None;
    };
    let extents: Vec<usize> = k.outer.iter().chain(&stage.inner).copied().collect();
    let mut out = vec![*offset];
    for (&s, &e) in strides.iter().zip(&extents) {
        out = out
            .iter()
            .flat_map(|&a| (0..e as i64).map(move |v| a + s * v))
            .collect();
    }
    Some(out)
}

/// Whether some single step writes each of `0..numel` of `b`, by enumeration.
fn enumerated_full_write(p: &Program, b: BufferId) -> bool {
    let numel = p.buffers[b.0 as usize].numel;
    let full = |mut ix: Vec<i64>| {
        ix.sort_unstable();
        ix.dedup();
        ix == (0..numel as i64).collect::<Vec<_>>()
    };
    p.steps.iter().any(|s| match s {
        Step::Gemm(g) => g.out == b && g.out_shape.iter().product::<usize>() == numel,
        Step::Kernel(k) => k.stages.iter().any(|stage| match &stage.effect {
            StageEffect::Store(stores) => stores
                .iter()
                .filter(|st| st.buffer == b)
                .any(|st| stored_indices(k, stage, st).is_some_and(full)),
            StageEffect::Reduce { .. } => false,
        }),
    })
}

/// Every buffer the lowering writes (elementwise, row and column reductions, permuted
/// outputs, concat, pad, gather, matmul; fused and unfused) is written whole by one step, and
/// `writes_every_element` agrees with enumerating the stores; a store moved by one element,
/// one with a doubled stride and one with a computed address prove nothing.
#[test]
fn written_buffers_are_proven_written_whole() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [3, 4, 5]).unwrap();
    let w = g.input("w", DType::F32, [5, 2]).unwrap();
    let idx = g.input("idx", DType::I64, [2, 4, 5]).unwrap();
    let e = g.unary(UnaryOp::Exp, x).unwrap();
    let m = g.reduce(ReduceOp::Max, x, &[2], true).unwrap();
    let s = g.binary(BinaryOp::Sub, x, m).unwrap();
    let col = g.reduce(ReduceOp::Sum, e, &[0], false).unwrap();
    let t = g.permute(s, &[2, 0, 1]).unwrap();
    let tn = g.unary(UnaryOp::Neg, t).unwrap();
    let cat = g.concat(&[x, e], 1).unwrap();
    let pad = g
        .pad(x, &[(1, 0), (0, 0), (2, 1)], Scalar::Float(0.5))
        .unwrap();
    let ga = g.gather(x, idx, 0).unwrap();
    let mm = g.matmul(e, w).unwrap();
    for (n, v) in [
        ("e", e),
        ("col", col),
        ("tn", tn),
        ("cat", cat),
        ("pad", pad),
        ("ga", ga),
        ("mm", mm),
        ("x", x),
    ] {
        g.set_output(n, v).unwrap();
    }
    for fuse in [true, false] {
        let mut p = program(&g, fuse);
        let written: Vec<BufferId> = p.steps.iter().flat_map(|s| s.writes().to_vec()).collect();
        for &b in &written {
            assert!(
                enumerated_full_write(&p, b),
                "{b} is not written whole\n{p}"
            );
            assert!(p.writes_every_element(b), "{b}\n{p}");
        }
        // An input is written by no step.
        let input = p.outputs.iter().find(|(n, _)| n == "x").unwrap().1;
        assert!(!p.writes_every_element(input));
        // Break the first store of the first kernel three ways.
        let ki = p
            .steps
            .iter()
            .position(|s| matches!(s, Step::Kernel(_)))
            .unwrap();
        let Step::Kernel(k) = &p.steps[ki] else {
            unreachable!()
        };
        let (si, b) = k
            .stages
            .iter()
            .enumerate()
            .find_map(|(i, st)| match &st.effect {
                StageEffect::Store(v) => Some((i, v[0].buffer)),
                _ => None,
            })
            .unwrap();
        let original = p.clone();
        for broken in 0..3 {
            p = original.clone();
            let Step::Kernel(k) = &mut p.steps[ki] else {
                unreachable!()
            };
            let StageEffect::Store(stores) = &mut k.stages[si].effect else {
                unreachable!()
            };
            let st = &mut stores[0];
            match (&mut st.access, broken) {
                (Access::Affine { offset, .. }, 0) => *offset += 1,
                (Access::Affine { strides, .. }, 1) => {
                    let s = strides.iter_mut().find(|s| **s != 0).unwrap();
                    *s *= 2;
                }
                (access, _) => *access = Access::Computed(st.value),
            }
            // Only this store wrote `b` in these programs.
            let others = p.steps.iter().filter(|s| s.writes().contains(&b)).count();
            assert_eq!(others, 1, "{p}");
            assert!(!enumerated_full_write(&p, b), "case {broken}\n{p}");
            assert!(!p.writes_every_element(b), "case {broken}\n{p}");
        }
    }
}
