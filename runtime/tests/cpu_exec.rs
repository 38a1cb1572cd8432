//! The CPU executor on hand-built kernel IR programs, against the reference interpreter:
//! elementwise chains with broadcasts (f32, f16, bf16), a softmax row kernel, argmax with NaN,
//! integer floor_div/remainder, a computed-access transpose, a gather, a GEMM with an
//! epilogue, 64-bit indexing; red zones after every arena buffer, bitwise determinism across
//! thread counts, memory reuse, typed errors.

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::*;
use smelt_codegen::llvm::MathMode;
use smelt_ir::interp::eval;
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, ReduceOp, Scalar, Shape, TensorData, UnaryOp};
use smelt_passes::kernel::*;
use smelt_runtime::cpu::{CpuError, CpuOptions, CpuProgram};
use std::collections::HashMap;

const RED_ZONE: usize = 4096;

fn opts(threads: usize) -> CpuOptions {
    CpuOptions {
        threads,
        red_zone: RED_ZONE,
        ..CpuOptions::default()
    }
}

/// Compiles and runs `program` (red zones on), checks the red zones, returns the outputs.
fn run(program: &Program, inputs: &HashMap<String, HostTensor>, threads: usize) -> Vec<HostTensor> {
    run_math(program, inputs, threads, MathMode::default())
}

/// [`run`] with f32 `exp`/`tanh`/`erf` computed as `math` says.
fn run_math(
    program: &Program,
    inputs: &HashMap<String, HostTensor>,
    threads: usize,
    math: MathMode,
) -> Vec<HostTensor> {
    let mut options = opts(threads);
    options.jit.math = math;
    let exe = CpuProgram::compile_with(program, &HashMap::new(), &options).expect("compiles");
    let out = exe.run(inputs).expect("runs");
    assert!(exe.red_zones_intact(), "a kernel wrote past a buffer");
    out.into_iter().map(|(_, t)| t).collect()
}

fn bind(pairs: &[(&str, &HostTensor)]) -> HashMap<String, HostTensor> {
    pairs
        .iter()
        .map(|(n, t)| (n.to_string(), (*t).clone()))
        .collect()
}

/// `out = exp(a * b + a)` (or without exp for half types) over `[r, c]`, `b: [c]` broadcast.
fn chain_program(d: DType, r: usize, c: usize, with_exp: bool) -> Program {
    let mut p = P::default();
    let a = p.input("a", d, r * c);
    let b = p.input("b", d, c);
    let o = p.temp(d, r * c);
    let mut body = Body::default();
    let x = body.load(d, a, 0, &[c as i64, 1]);
    let y = body.load(d, b, 0, &[0, 1]);
    let m = body.bin(d, BinaryOp::Mul, x, y);
    let s = body.bin(d, BinaryOp::Add, m, x);
    let e = if with_exp {
        body.un(d, UnaryOp::Exp, s)
    } else {
        body.bin(d, BinaryOp::Maximum, s, y)
    };
    let st = body.store_stage(&[], vec![(o, affine(0, &[c as i64, 1]), e)]);
    p.kernel(kernel("k_chain", &[a, b], &[o], &[r, c], vec![st]));
    p.output("out", o);
    p.build()
}

fn chain_graph(d: DType, r: usize, c: usize, with_exp: bool) -> Graph {
    let mut g = Graph::new();
    let a = g.input("a", d, [r, c].as_slice()).unwrap();
    let b = g.input("b", d, [c].as_slice()).unwrap();
    let m = g.binary(BinaryOp::Mul, a, b).unwrap();
    let s = g.binary(BinaryOp::Add, m, a).unwrap();
    let e = if with_exp {
        g.unary(UnaryOp::Exp, s).unwrap()
    } else {
        let bb = g.expand(b, [r, c].as_slice()).unwrap();
        g.binary(BinaryOp::Maximum, s, bb).unwrap()
    };
    g.set_output("out", e).unwrap();
    g
}

#[test]
fn elementwise_chains_match_the_interpreter() {
    for (d, with_exp) in [
        (DType::F32, true),
        (DType::F64, true),
        (DType::F16, false),
        (DType::BF16, false),
        (DType::F16, true),
        (DType::BF16, true),
    ] {
        let (r, c) = (13, 67);
        let a = tensor(d, &[r, c], &floats(r * c, 1, 3.0, true));
        let b = tensor(d, &[c], &floats(c, 2, 2.0, true));
        let inputs = bind(&[("a", &a), ("b", &b)]);
        let want = eval(&chain_graph(d, r, c, with_exp), &inputs).unwrap();
        let got = run(&chain_program(d, r, c, with_exp), &inputs, 2);
        let what = format!("{d} exp={with_exp}");
        if with_exp {
            let (rt, at) = default_tol(d);
            check_close(&what, &got[0], &want[0].1, rt, at).unwrap();
        } else {
            // Both round after every op: bit for bit.
            check_bits(&what, &got[0], &want[0].1).unwrap();
        }
    }
}

/// softmax over the last axis of `[rows, n]`: max, sum of exp, store.
fn softmax_program(d: DType, rows: usize, n: usize) -> Program {
    softmax_program_with(d, rows, n, false)
}

/// [`softmax_program`]; with `max_of_y`, the row maximum is taken of a second input `y` (of
/// the same shape) instead of `x`.
fn softmax_program_with(d: DType, rows: usize, n: usize, max_of_y: bool) -> Program {
    let mut p = P::default();
    let x = p.input("x", d, rows * n);
    let m_src = if max_of_y {
        p.input("y", d, rows * n)
    } else {
        x
    };
    let o = p.temp(d, rows * n);
    let f = DType::F32;
    let mut b1 = Body::default();
    let v = b1.load(d, m_src, 0, &[n as i64, 1]);
    let vf = b1.push(Ty::Data(f), InstOp::Cast(v));
    let mx = b1.fresh();
    let mut b2 = Body::after(&b1);
    let s1 = b1.reduce_stage(&[n], vf, Combiner::Max, f, mx);
    let v2 = b2.load(d, x, 0, &[n as i64, 1]);
    let v2f = b2.push(Ty::Data(f), InstOp::Cast(v2));
    let t = b2.bin(f, BinaryOp::Sub, v2f, mx);
    let e = b2.un(f, UnaryOp::Exp, t);
    let sum = b2.fresh();
    let mut b3 = Body::after(&b2);
    let s2 = b2.reduce_stage(&[n], e, Combiner::Sum, f, sum);
    let v3 = b3.load(d, x, 0, &[n as i64, 1]);
    let v3f = b3.push(Ty::Data(f), InstOp::Cast(v3));
    let t3 = b3.bin(f, BinaryOp::Sub, v3f, mx);
    let e3 = b3.un(f, UnaryOp::Exp, t3);
    let q = b3.bin(f, BinaryOp::Div, e3, sum);
    let qd = b3.push(Ty::Data(d), InstOp::Cast(q));
    let s3 = b3.store_stage(&[n], vec![(o, affine(0, &[n as i64, 1]), qd)]);
    let reads = if max_of_y { vec![x, m_src] } else { vec![x] };
    p.kernel(kernel("k_softmax", &reads, &[o], &[rows], vec![s1, s2, s3]));
    p.output("y", o);
    p.build()
}

fn softmax_graph(d: DType, rows: usize, n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", d, [rows, n].as_slice()).unwrap();
    let xf = g.cast(x, DType::F32).unwrap();
    let m = g.reduce(ReduceOp::Max, xf, &[1], true).unwrap();
    let t = g.binary(BinaryOp::Sub, xf, m).unwrap();
    let e = g.unary(UnaryOp::Exp, t).unwrap();
    let s = g.reduce(ReduceOp::Sum, e, &[1], true).unwrap();
    let q = g.binary(BinaryOp::Div, e, s).unwrap();
    let y = g.cast(q, d).unwrap();
    g.set_output("y", y).unwrap();
    g
}

#[test]
fn softmax_rows_match_the_interpreter() {
    for d in [DType::F32, DType::F16, DType::BF16] {
        let (rows, n) = (9, 301);
        let mut v = floats(rows * n, 3, 8.0, false);
        v[n + 7] = f64::NAN; // row 1 becomes all NaN
        v[2 * n + 3] = f64::INFINITY;
        let x = tensor(d, &[rows, n], &v);
        let inputs = bind(&[("x", &x)]);
        let want = eval(&softmax_graph(d, rows, n), &inputs).unwrap();
        let got = run(&softmax_program(d, rows, n), &inputs, 3);
        // The sum accumulates in f32 here and in f64 in the interpreter: a looser tolerance
        // for f32 (a few ulps per element of the row); half types round the result anyway.
        let (rt, at) = if d == DType::F32 {
            (1e-5, 1e-6)
        } else {
            default_tol(d)
        };
        check_close(&format!("softmax {d}"), &got[0], &want[0].1, rt, at).unwrap();
    }
}

/// Softmax's `exp(x - max(x))` skips `exp`'s upper limit (`reuse::nonpositive` in the
/// codegen: the argument is `≤ 0` or NaN), and gives the same bits as `exp(x - max(y))` with
/// `y` bound to the same data, where nothing is known about the argument and the limit stays:
/// rows of random values, of huge ones, with NaN, both infinities and signed zeros, short
/// rows (reduced in order) and long ones (split reductions), 1 and 3 threads. The optimised IR
/// shows which kernel has the upper limit (`fcmp ogt` against `104.0`, with the constants as
/// LLVM constants: on AMD Zen 3 they are loads by default, `JitOptions::constant_loads`).
#[test]
fn softmax_exp_without_its_upper_limit_gives_the_same_bits() {
    use smelt_codegen::llvm::kernel::optimized_kernel_ir;
    use smelt_codegen::llvm::{ByCpu, JitOptions};
    let upper = |program: &Program| -> bool {
        let k = program.kernels().next().unwrap();
        let options = JitOptions {
            constant_loads: ByCpu::Off,
            ..JitOptions::default()
        };
        let ir = optimized_kernel_ir(k, &program.buffers, &options).unwrap();
        ir.lines()
            .any(|l| l.contains("fcmp ogt") && l.contains("float 1.040000e+02"))
    };
    let bits = |t: &HostTensor| -> Vec<u32> {
        t.to_f32_vec()
            .iter()
            .map(|v| if v.is_nan() { u32::MAX } else { v.to_bits() })
            .collect()
    };
    for n in [10, 301] {
        let rows = 8;
        let mut v = floats(rows * n, 17, 30.0, true);
        for (j, x) in v[n..2 * n].iter_mut().enumerate() {
            *x = if j % 2 == 0 { 3.0e38 } else { -3.0e38 };
        }
        v[2 * n..3 * n].fill(-0.0);
        v[2 * n + 1] = 0.0;
        v[3 * n..4 * n].fill(f64::NEG_INFINITY);
        v[4 * n + 2] = f64::INFINITY;
        v[5 * n + 3] = f64::NAN;
        for x in &mut v[6 * n..7 * n] {
            *x *= 1e-40;
        }
        let x = tensor(DType::F32, &[rows, n], &v);
        let inputs = bind(&[("x", &x), ("y", &x)]);
        let known = softmax_program_with(DType::F32, rows, n, false);
        let unknown = softmax_program_with(DType::F32, rows, n, true);
        assert!(!upper(&known), "n {n}: x - max(x) kept exp's upper limit");
        assert!(upper(&unknown), "n {n}: x - max(y) lost exp's upper limit");
        for threads in [1, 3] {
            let a = run(&known, &inputs, threads);
            let b = run(&unknown, &inputs, threads);
            assert!(
                bits(&a[0]) == bits(&b[0]),
                "n {n}, {threads} threads: the bits differ"
            );
        }
    }
}

/// A kernel writing at least 16 MiB streams its stores (the default
/// `JitOptions::nontemporal_min_bytes`) and, when it writes an output, has a plain-store twin,
/// which runs when the output's pages are untouched (`run`'s fresh output, a new mapping
/// under this binary's system allocator; a zeroed tensor given to `run_into`) and not when
/// they are written already: all give the same bits, and match the interpreter. Smaller
/// kernels, kernels writing only temporaries, and every kernel with streaming off have no
/// twin.
#[test]
fn streaming_kernels_have_a_plain_store_twin_with_the_same_bits() {
    let n = 768;
    let rows = (16 << 20) / (4 * n) + 1;
    let x = tensor(DType::F32, &[rows, n], &floats(rows * n, 11, 8.0, false));
    let inputs = bind(&[("x", &x)]);
    let program = softmax_program(DType::F32, rows, n);
    let exe = CpuProgram::compile_with(&program, &HashMap::new(), &opts(2)).unwrap();
    assert!(exe.kernels().all(|k| k.has_plain_twin()));
    let fresh = exe.run(&inputs).unwrap().remove(0).1;
    let mut into = vec![HostTensor::zeros(DType::F32, [rows * n].as_slice())];
    exe.run_into(&inputs, &mut into).unwrap();
    let mut touched = vec![HostTensor::from_f32([rows * n], vec![-1.0; rows * n]).unwrap()];
    exe.run_into(&inputs, &mut touched).unwrap();
    let bits =
        |t: &HostTensor| -> Vec<u32> { t.to_f32_vec().iter().map(|v| v.to_bits()).collect() };
    assert!(bits(&fresh) == bits(&into[0]), "run and run_into differ");
    assert!(
        bits(&touched[0]) == bits(&into[0]),
        "streamed and plain stores differ"
    );
    let want = eval(&softmax_graph(DType::F32, rows, n), &inputs).unwrap();
    let want = HostTensor::new([rows * n].as_slice(), want[0].1.data().clone()).unwrap();
    check_close("streamed softmax", &into[0], &want, 1e-5, 1e-6).unwrap();
    let mut plain = opts(2);
    plain.jit.nontemporal_min_bytes = None;
    let exe = CpuProgram::compile_with(&program, &HashMap::new(), &plain).unwrap();
    assert!(exe.kernels().all(|k| !k.has_plain_twin()));
    let small = softmax_program(DType::F32, 9, n);
    let exe = CpuProgram::compile_with(&small, &HashMap::new(), &opts(2)).unwrap();
    assert!(exe.kernels().all(|k| !k.has_plain_twin()));
    // Two streaming kernels, `t = a * a` into a temporary and `out = t + a`: only the one
    // writing the output has a twin.
    let numel = rows * n;
    let mut p = P::default();
    let a = p.input("a", DType::F32, numel);
    let t = p.temp(DType::F32, numel);
    let o = p.temp(DType::F32, numel);
    let mut body = Body::default();
    let x = body.load(DType::F32, a, 0, &[1]);
    let sq = body.bin(DType::F32, BinaryOp::Mul, x, x);
    let st = body.store_stage(&[], vec![(t, affine(0, &[1]), sq)]);
    p.kernel(kernel("k_square", &[a], &[t], &[numel], vec![st]));
    let mut body = Body::default();
    let y = body.load(DType::F32, t, 0, &[1]);
    let x = body.load(DType::F32, a, 0, &[1]);
    let sum = body.bin(DType::F32, BinaryOp::Add, y, x);
    let st = body.store_stage(&[], vec![(o, affine(0, &[1]), sum)]);
    p.kernel(kernel("k_add", &[t, a], &[o], &[numel], vec![st]));
    p.output("out", o);
    let exe = CpuProgram::compile_with(&p.build(), &HashMap::new(), &opts(2)).unwrap();
    let twins: Vec<bool> = exe.kernels().map(|k| k.has_plain_twin()).collect();
    assert_eq!(twins, [false, true]);
}

/// Rows shorter than two 16-lane blocks reduce in index order, as `eval_program` does; their
/// body (here softmax's `exp`) is computed in a vectorised loop of its own first. With the C
/// library's `exp` the kernel is `eval_program` bit for bit, at every short length, with NaN
/// and infinity in some rows, on 1 and 3 threads.
#[test]
fn short_softmax_rows_are_eval_program_bit_for_bit() {
    for n in [2, 5, 10, 15, 16, 17, 24, 31] {
        let rows = 7;
        let mut v = floats(rows * n, 5, 6.0, false);
        v[n + 1] = f64::NAN;
        v[2 * n] = f64::INFINITY;
        v[3 * n + n - 1] = f64::NEG_INFINITY;
        let x = tensor(DType::F32, &[rows, n], &v);
        let inputs = bind(&[("x", &x)]);
        let program = softmax_program(DType::F32, rows, n);
        let want = eval_program(&program, &inputs).unwrap();
        for threads in [1, 3] {
            let got = run_math(&program, &inputs, threads, MathMode::Libm);
            check_bits(&format!("n {n}, {threads} threads"), &got[0], &want[0].1).unwrap();
        }
    }
}

#[test]
fn argmax_and_argmin_with_nan_match_the_interpreter() {
    let (rows, n) = (6, 40);
    let mut v = floats(rows * n, 4, 5.0, false);
    v[n + 10] = f64::NAN;
    v[n + 20] = f64::NAN;
    for j in 0..n {
        v[2 * n + j] = 1.0; // ties: the first wins
    }
    v[3 * n + 39] = f64::INFINITY;
    v[4 * n] = f64::NEG_INFINITY;
    for (op, comb) in [
        (ReduceOp::ArgMax, Combiner::ArgMax),
        (ReduceOp::ArgMin, Combiner::ArgMin),
    ] {
        for d in [DType::F32, DType::BF16, DType::I32] {
            let x = tensor(d, &[rows, n], &v);
            let mut p = P::default();
            let xb = p.input("x", d, rows * n);
            let o = p.temp(DType::I64, rows);
            let mut b1 = Body::default();
            // Arg reductions compare in the accumulator dtype (exact widening), as lowered.
            let acc = acc_dtype(d);
            let val = b1.load(d, xb, 0, &[n as i64, 1]);
            let val = b1.push(Ty::Data(acc), InstOp::Cast(val));
            let res = b1.fresh();
            let b2 = Body::after(&b1);
            let s1 = b1.reduce_stage(&[n], val, comb, acc, res);
            let s2 = b2.store_stage(&[], vec![(o, affine(0, &[1]), res)]);
            p.kernel(kernel("k_arg", &[xb], &[o], &[rows], vec![s1, s2]));
            p.output("i", o);
            let mut g = Graph::new();
            let xi = g.input("x", d, [rows, n].as_slice()).unwrap();
            let r = g.reduce(op, xi, &[1], false).unwrap();
            g.set_output("i", r).unwrap();
            let inputs = bind(&[("x", &x)]);
            let want = eval(&g, &inputs).unwrap();
            let got = run(&p.build(), &inputs, 2);
            check_bits(&format!("{op} {d}"), &got[0], &want[0].1).unwrap();
        }
    }
}

fn int_program(d: DType, n: usize) -> Program {
    let mut p = P::default();
    let a = p.input("a", d, n);
    let b = p.input("b", d, n);
    let q = p.temp(d, n);
    let r = p.temp(d, n);
    let mut body = Body::default();
    let x = body.load(d, a, 0, &[1]);
    let y = body.load(d, b, 0, &[1]);
    let fq = body.bin(d, BinaryOp::FloorDiv, x, y);
    let fr = body.bin(d, BinaryOp::Remainder, x, y);
    let st = body.store_stage(
        &[],
        vec![(q, affine(0, &[1]), fq), (r, affine(0, &[1]), fr)],
    );
    p.kernel(kernel("k_divmod", &[a, b], &[q, r], &[n], vec![st]));
    p.output("q", q);
    p.output("r", r);
    p.build()
}

#[test]
fn integer_floor_div_and_remainder_are_pythons() {
    for d in [DType::I32, DType::I64] {
        let min = if d == DType::I32 {
            i32::MIN as f64
        } else {
            i64::MIN as f64
        };
        let mut av = vec![
            7.0, -7.0, 7.0, -7.0, 0.0, 1.0, -1.0, min, min, 13.0, -13.0, 6.0,
        ];
        let mut bv = vec![
            2.0, 2.0, -2.0, -2.0, 3.0, -5.0, 5.0, -1.0, 3.0, 4.0, 4.0, -3.0,
        ];
        for i in 0..100 {
            av.push((i * 37 % 201) as f64 - 100.0);
            bv.push(if i % 2 == 0 {
                (i % 9 + 1) as f64
            } else {
                -((i % 7 + 1) as f64)
            });
        }
        let n = av.len();
        let (a, b) = (tensor(d, &[n], &av), tensor(d, &[n], &bv));
        let mut g = Graph::new();
        let ga = g.input("a", d, [n].as_slice()).unwrap();
        let gb = g.input("b", d, [n].as_slice()).unwrap();
        let q = g.binary(BinaryOp::FloorDiv, ga, gb).unwrap();
        let r = g.binary(BinaryOp::Remainder, ga, gb).unwrap();
        g.set_output("q", q).unwrap();
        g.set_output("r", r).unwrap();
        let inputs = bind(&[("a", &a), ("b", &b)]);
        let want = eval(&g, &inputs).unwrap();
        let got = run(&int_program(d, n), &inputs, 1);
        check_bits("floor_div", &got[0], &want[0].1).unwrap();
        check_bits("remainder", &got[1], &want[1].1).unwrap();
        // Division by zero: 0 and 0 (the interpreter reports an error instead).
        let z = tensor(d, &[n], &vec![0.0; n]);
        let got = run(&int_program(d, n), &bind(&[("a", &a), ("b", &z)]), 1);
        assert!(got
            .iter()
            .all(|t| (0..n).all(|i| t.data().get_f64(i) == 0.0)));
    }
}

/// `out[i, j] = x[j, i]` for `x: [r, c]`, addressed by div/mod of the flat output index.
#[test]
fn a_computed_access_transpose_matches_permute() {
    for width in [IndexWidth::I32, IndexWidth::I64] {
        let (r, c) = (5, 7);
        let mut p = P::default();
        let x = p.input("x", DType::F32, r * c);
        let o = p.temp(DType::F32, r * c);
        let mut b = Body::default();
        let ix = Ty::Index;
        let i = b.push(ix, InstOp::LoopVar(0));
        let j = b.push(ix, InstOp::LoopVar(1));
        let rr = b.push(ix, InstOp::IndexConst(r as i64));
        let cc = b.push(ix, InstOp::IndexConst(c as i64));
        let f0 = b.push(ix, InstOp::IndexMul(i, rr));
        let f = b.push(ix, InstOp::IndexAdd(f0, j)); // flat output index
        let row = b.push(ix, InstOp::IndexRem(f, rr));
        let col = b.push(ix, InstOp::IndexDiv(f, rr));
        let s0 = b.push(ix, InstOp::IndexMul(row, cc));
        let src = b.push(ix, InstOp::IndexAdd(s0, col));
        let v = b.push(
            Ty::Data(DType::F32),
            InstOp::Load {
                buffer: BufferId(x),
                access: Access::Computed(src),
            },
        );
        let st = b.store_stage(&[], vec![(o, affine(0, &[r as i64, 1]), v)]);
        let mut k = kernel("k_transpose", &[x], &[o], &[c, r], vec![st]);
        k.index_width = width;
        p.kernel(k);
        p.output("t", o);
        let xt = tensor(DType::F32, &[r, c], &floats(r * c, 5, 1.0, false));
        let mut g = Graph::new();
        let gx = g.input("x", DType::F32, [r, c].as_slice()).unwrap();
        let t = g.permute(gx, &[1, 0]).unwrap();
        g.set_output("t", t).unwrap();
        let inputs = bind(&[("x", &xt)]);
        let want = eval(&g, &inputs).unwrap();
        let got = run(&p.build(), &inputs, 2);
        check_bits("transpose", &got[0], &want[0].1).unwrap();
    }
}

fn gather_program(rows: usize, dim: usize, n: usize) -> Program {
    let mut p = P::default();
    let table = p.param("table", DType::F32, rows * dim);
    let idx = p.input("idx", DType::I64, n);
    let o = p.temp(DType::F32, n * dim);
    let mut b = Body::default();
    let ix = b.load(DType::I64, idx, 0, &[1, 0]);
    let row = b.push(Ty::Index, InstOp::ToIndex(ix));
    let j = b.push(Ty::Index, InstOp::LoopVar(1));
    let dd = b.push(Ty::Index, InstOp::IndexConst(dim as i64));
    let base = b.push(Ty::Index, InstOp::IndexMul(row, dd));
    let at = b.push(Ty::Index, InstOp::IndexAdd(base, j));
    let v = b.push(
        Ty::Data(DType::F32),
        InstOp::Load {
            buffer: BufferId(table),
            access: Access::Computed(at),
        },
    );
    let st = b.store_stage(&[], vec![(o, affine(0, &[dim as i64, 1]), v)]);
    p.kernel(kernel("k_gather", &[table, idx], &[o], &[n, dim], vec![st]));
    p.output("rows", o);
    p.build()
}

#[test]
fn a_gather_through_to_index_matches_index_select_and_checks_bounds() {
    let (rows, dim, n) = (10, 6, 8);
    let table = tensor(DType::F32, &[rows, dim], &floats(rows * dim, 6, 1.0, false));
    let idx = HostTensor::from_i64([n].as_slice(), vec![3, 0, 9, 9, 1, 5, 2, 3]).unwrap();
    let mut g = Graph::new();
    let gt = g
        .param("table", DType::F32, [rows, dim].as_slice())
        .unwrap();
    let gi = g.input("idx", DType::I64, [n].as_slice()).unwrap();
    let s = g.index_select(gt, gi, 0).unwrap();
    g.set_output("rows", s).unwrap();
    let want = eval(&g, &bind(&[("table", &table), ("idx", &idx)])).unwrap();
    let params = bind(&[("table", &table)]);
    let exe = CpuProgram::compile_with(&gather_program(rows, dim, n), &params, &opts(2)).unwrap();
    let got = exe.run(&bind(&[("idx", &idx)])).unwrap();
    check_bits("gather", &got[0].1, &want[0].1).unwrap();
    for bad in [-1i64, rows as i64, i64::MAX] {
        let idx = HostTensor::from_i64([n].as_slice(), vec![0, 1, bad, 2, 0, 0, 0, 0]).unwrap();
        let e = exe.run(&bind(&[("idx", &idx)])).unwrap_err();
        assert!(matches!(e, CpuError::IndexOutOfRange { .. }), "{e}");
    }
    assert!(exe.red_zones_intact());
}

/// An f32 GEMM step `out = a @ w.T`, as a linear layer runs: `a` contiguous `[lead.., k]`,
/// `w` stored `[n, k]` and read transposed, `out` contiguous `[lead.., n]`.
fn linear_gemm(
    name: &str,
    (a, lead, k): (u32, &[usize], usize),
    (w, n): (u32, usize),
    out: u32,
) -> Step {
    let a_shape: Vec<usize> = lead.iter().copied().chain([k]).collect();
    Step::Gemm(Gemm {
        name: name.into(),
        origin: vec![],
        dtype: DType::F32,
        a: GemmOperand {
            buffer: BufferId(a),
            strides: strides(&a_shape).iter().map(|&s| s as usize).collect(),
            shape: a_shape,
            offset: 0,
        },
        b: GemmOperand {
            buffer: BufferId(w),
            shape: vec![k, n],
            strides: vec![1, k],
            offset: 0,
        },
        out: BufferId(out),
        out_shape: lead.iter().copied().chain([n]).collect(),
    })
}

#[test]
fn a_gemm_step_with_a_fused_epilogue_matches_the_interpreter() {
    let (bsz, m, k, n) = (2, 5, 7, 3);
    let mut p = P::default();
    let a = p.input("a", DType::F32, bsz * m * k);
    let w = p.param("w", DType::F32, n * k); // stored [n, k], used transposed
    let bias = p.param("bias", DType::F32, n);
    let mm = p.temp(DType::F32, bsz * m * n);
    let o = p.temp(DType::F32, bsz * m * n);
    p.steps
        .push(linear_gemm("mm", (a, &[bsz, m], k), (w, n), mm));
    let mut body = Body::default();
    let x = body.load(DType::F32, mm, 0, &strides(&[bsz, m, n]));
    let bb = body.load(DType::F32, bias, 0, &[0, 0, 1]);
    let s = body.bin(DType::F32, BinaryOp::Add, x, bb);
    let r = body.un(DType::F32, UnaryOp::Relu, s);
    let st = body.store_stage(&[], vec![(o, affine(0, &strides(&[bsz, m, n])), r)]);
    p.kernel(kernel(
        "k_bias_relu",
        &[mm, bias],
        &[o],
        &[bsz, m, n],
        vec![st],
    ));
    p.output("y", o);
    let at = tensor(
        DType::F32,
        &[bsz, m, k],
        &floats(bsz * m * k, 7, 1.0, false),
    );
    let wt = tensor(DType::F32, &[n, k], &floats(n * k, 8, 1.0, false));
    let bt = tensor(DType::F32, &[n], &floats(n, 9, 1.0, false));
    let mut g = Graph::new();
    let ga = g.input("a", DType::F32, [bsz, m, k].as_slice()).unwrap();
    let gw = g.param("w", DType::F32, [n, k].as_slice()).unwrap();
    let gb = g.param("bias", DType::F32, [n].as_slice()).unwrap();
    let wt_ = g.permute(gw, &[1, 0]).unwrap();
    let y = g.matmul(ga, wt_).unwrap();
    let y = g.binary(BinaryOp::Add, y, gb).unwrap();
    let y = g.unary(UnaryOp::Relu, y).unwrap();
    g.set_output("y", y).unwrap();
    let all = bind(&[("a", &at), ("w", &wt), ("bias", &bt)]);
    let want = eval(&g, &all).unwrap();
    let params = bind(&[("w", &wt), ("bias", &bt)]);
    let mut exe = CpuProgram::compile_with(&p.build(), &params, &opts(2)).unwrap();
    exe.set_output_shape("y", Shape::new(&[bsz, m, n])).unwrap();
    let got = exe.run(&bind(&[("a", &at)])).unwrap();
    assert_eq!(got[0].1.shape(), &Shape::new(&[bsz, m, n]));
    check_close("gemm", &got[0].1, &want[0].1, 1e-5, 1e-5).unwrap();
    assert!(exe.red_zones_intact());
}

/// A linear layer with few rows: bound weights are copied into one column block per thread
/// (`MatmulPlan::block_rhs`); the product is bitwise the same as with the weight supplied at
/// run time (read in place) for every pool size, and matches the interpreter.
#[test]
fn column_blocked_weights_give_the_same_bits_for_every_pool_size() {
    use smelt_runtime::cpu::{MatmulOperand, MatmulPlan};
    let (m, k, n) = (20, 96, 150);
    let program = |w_is_param: bool| {
        let mut p = P::default();
        let a = p.input("a", DType::F32, m * k);
        let w = if w_is_param {
            p.param("w", DType::F32, n * k)
        } else {
            p.input("w", DType::F32, n * k)
        };
        let y = p.temp(DType::F32, m * n);
        p.steps.push(linear_gemm("linear", (a, &[m], k), (w, n), y));
        p.output("y", y);
        p.build()
    };
    let at = tensor(DType::F32, &[m, k], &floats(m * k, 21, 1.0, false));
    let wt = tensor(DType::F32, &[n, k], &floats(n * k, 22, 1.0, false));
    let mut g = Graph::new();
    let ga = g.input("a", DType::F32, [m, k].as_slice()).unwrap();
    let gw = g.input("w", DType::F32, [n, k].as_slice()).unwrap();
    let wt_ = g.permute(gw, &[1, 0]).unwrap();
    let gy = g.matmul(ga, wt_).unwrap();
    g.set_output("y", gy).unwrap();
    let want = eval(&g, &bind(&[("a", &at), ("w", &wt)])).unwrap();
    let plan = MatmulPlan::new(
        DType::F32,
        &MatmulOperand::contiguous(&[m, k]),
        &MatmulOperand::contiguous(&[k, n]),
    )
    .unwrap();
    let mut first: Option<HostTensor> = None;
    for threads in [1, 2, 3, 4] {
        assert_eq!(plan.rhs_column_blocks(threads).is_some(), threads > 1);
        let bound = CpuProgram::compile_with(&program(true), &bind(&[("w", &wt)]), &opts(threads))
            .unwrap()
            .run(&bind(&[("a", &at)]))
            .unwrap();
        let fed = CpuProgram::compile_with(&program(false), &HashMap::new(), &opts(threads))
            .unwrap()
            .run(&bind(&[("a", &at), ("w", &wt)]))
            .unwrap();
        check_bits(
            &format!("{threads} threads, bound vs fed"),
            &bound[0].1,
            &fed[0].1,
        )
        .unwrap();
        let first = first.get_or_insert_with(|| bound[0].1.clone());
        check_bits(&format!("{threads} threads vs 1"), &bound[0].1, first).unwrap();
        check_close("linear", &bound[0].1, &want[0].1, 1e-5, 1e-5).unwrap();
    }
    // A plan whose right operand is stored for 2 threads refuses a pool of another size.
    let mut blocked = plan.clone();
    blocked.block_rhs(2).unwrap();
    let pool = smelt_runtime::cpu::CpuPool::new(3).unwrap();
    let (a, b, mut c) = (vec![0f32; m * k], vec![0f32; k * n], vec![0f32; m * n]);
    let e = blocked.run(&pool, &a, &b, &mut c).unwrap_err();
    assert!(matches!(e, CpuError::Pool { threads: 3, .. }), "{e}");
    assert!(
        plan.clone().block_rhs(1).is_err(),
        "one thread: no column blocks"
    );
}

#[test]
fn results_are_bitwise_identical_across_thread_counts() {
    let (rows, n) = (67, 1031);
    let x = tensor(DType::F32, &[rows, n], &floats(rows * n, 10, 6.0, true));
    let sm = softmax_program(DType::F32, rows, n);
    let ch = chain_program(DType::F32, rows, n, true);
    let b = tensor(DType::F32, &[n], &floats(n, 11, 1.0, false));
    let base_sm = run(&sm, &bind(&[("x", &x)]), 1);
    let base_ch = run(&ch, &bind(&[("a", &x), ("b", &b)]), 1);
    for threads in [2, 4] {
        let sm_t = run(&sm, &bind(&[("x", &x)]), threads);
        let ch_t = run(&ch, &bind(&[("a", &x), ("b", &b)]), threads);
        assert_eq!(
            sm_t[0].data().to_le_bytes(),
            base_sm[0].data().to_le_bytes()
        );
        assert_eq!(
            ch_t[0].data().to_le_bytes(),
            base_ch[0].data().to_le_bytes()
        );
    }
}

/// `t1 = x + 1; t2 = t1 * 2; … t6`: at most three temporaries are live at once.
#[test]
fn the_memory_plan_reuses_dead_buffers() {
    let n = 1000;
    let mut p = P::default();
    let x = p.input("x", DType::F32, n);
    let mut prev = x;
    let mut want: Vec<f32> = floats(n, 12, 1.0, false)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let xt = tensor(
        DType::F32,
        &[n],
        &want.iter().map(|&v| v as f64).collect::<Vec<_>>(),
    );
    for i in 0..6 {
        let t = p.temp(DType::F32, n);
        let mut b = Body::default();
        let v = b.load(DType::F32, prev, 0, &[1]);
        let c = b.push(
            Ty::Data(DType::F32),
            InstOp::Const(Scalar::Float(i as f64 + 0.5)),
        );
        let r = b.bin(
            DType::F32,
            if i % 2 == 0 {
                BinaryOp::Add
            } else {
                BinaryOp::Mul
            },
            v,
            c,
        );
        let st = b.store_stage(&[], vec![(t, affine(0, &[1]), r)]);
        p.kernel(kernel(&format!("k{i}"), &[prev], &[t], &[n], vec![st]));
        for w in want.iter_mut() {
            *w = if i % 2 == 0 {
                *w + (i as f32 + 0.5)
            } else {
                *w * (i as f32 + 0.5)
            };
        }
        prev = t;
    }
    p.output("y", prev);
    let exe = CpuProgram::compile(&p.build(), &HashMap::new()).unwrap();
    assert!(
        exe.peak_bytes() < exe.naive_bytes(),
        "{} vs {}",
        exe.peak_bytes(),
        exe.naive_bytes()
    );
    assert_eq!(exe.peak_bytes(), 2 * 4032); // two 4000-byte slots, 64-byte aligned
    for _ in 0..3 {
        let got = exe.run(&bind(&[("x", &xt)])).unwrap();
        let want_t = HostTensor::from_f32([n].as_slice(), want.clone()).unwrap();
        check_bits("chain", &got[0].1, &want_t).unwrap();
    }
}

#[test]
fn bad_bindings_and_outputs_are_typed_errors() {
    let prog = chain_program(DType::F32, 2, 3, false);
    let exe = CpuProgram::compile(&prog, &HashMap::new()).unwrap();
    let a = tensor(DType::F32, &[2, 3], &[1.0; 6]);
    let b = tensor(DType::F32, &[3], &[1.0; 3]);
    let e = exe.run(&bind(&[("a", &a)])).unwrap_err();
    assert!(matches!(e, CpuError::MissingBinding { .. }), "{e}");
    let b64 = tensor(DType::F64, &[3], &[1.0; 3]);
    let e = exe.run(&bind(&[("a", &a), ("b", &b64)])).unwrap_err();
    assert!(matches!(e, CpuError::Binding { .. }), "{e}");
    let mut wrong = vec![HostTensor::zeros(DType::F32, [5].as_slice())];
    let e = exe
        .run_into(&bind(&[("a", &a), ("b", &b)]), &mut wrong)
        .unwrap_err();
    assert!(matches!(e, CpuError::Output { .. }), "{e}");
    let mut right = vec![HostTensor::zeros(DType::F32, [6].as_slice())];
    exe.run_into(&bind(&[("a", &a), ("b", &b)]), &mut right)
        .unwrap();
    assert_eq!(right[0].to_f32_vec(), vec![2.0; 6]);
}

#[test]
fn an_output_that_is_an_input_is_copied_out() {
    let mut p = P::default();
    let x = p.input("x", DType::I32, 4);
    p.output("same", x);
    let exe = CpuProgram::compile(&p.build(), &HashMap::new()).unwrap();
    let t = tensor(DType::I32, &[4], &[1.0, -2.0, 3.0, 4.0]);
    let got = exe.run(&bind(&[("x", &t)])).unwrap();
    assert_eq!(got[0].1.data(), t.data());
}

/// Available memory in bytes, from /proc/meminfo (None where it cannot be read).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Issue 4: an elementwise kernel over more than 2^31 elements (64-bit index arithmetic),
/// checked on both sides of the boundary. Needs about 6 GiB; skipped (and says so) on a
/// machine with less than 8 GiB available.
#[test]
fn an_elementwise_kernel_over_more_than_2_pow_31_elements() {
    if available_memory().is_some_and(|b| b < 8 << 30) {
        eprintln!("skipped: less than 8 GiB of memory available");
        return;
    }
    let n = (1usize << 31) + 100;
    let mut p = P::default();
    let x = p.input("x", DType::Bool, n);
    let o = p.temp(DType::Bool, n);
    let mut b = Body::default();
    let v = b.load(DType::Bool, x, 0, &[1]);
    let r = b.un(DType::Bool, UnaryOp::LogicalNot, v);
    let st = b.store_stage(&[], vec![(o, affine(0, &[1]), r)]);
    let mut k = kernel("k_not", &[x], &[o], &[n], vec![st]);
    k.index_width = IndexWidth::I64;
    p.kernel(k);
    p.output("y", o);
    let exe = CpuProgram::compile(&p.build(), &HashMap::new()).unwrap();
    let boundary = 1usize << 31;
    let set = [
        0,
        1,
        boundary - 2,
        boundary - 1,
        boundary,
        boundary + 1,
        n - 1,
    ];
    let mut v = vec![false; n];
    for &i in &set {
        v[i] = i % 2 == 0;
    }
    let xt = HostTensor::new([n].as_slice(), smelt_ir::TensorData::Bool(v)).unwrap();
    let mut out = vec![HostTensor::zeros(DType::Bool, [n].as_slice())];
    exe.run_into(&bind(&[("x", &xt)]), &mut out).unwrap();
    let smelt_ir::TensorData::Bool(y) = out[0].data() else {
        panic!("bool output")
    };
    for i in set.into_iter().chain([2, boundary + 2, n - 2]) {
        let want = !(set.contains(&i) && i % 2 == 0);
        assert_eq!(y[i], want, "element {i}");
    }
}

/// Without red zones, computed outputs are written straight into the caller's tensors: an
/// output that a later kernel reads, one buffer under two output names and an output that is
/// an input all come out right, whatever the tensors held before, run after run and from
/// several threads at once.
#[test]
fn outputs_written_in_place_come_out_right() {
    let n = 3000;
    let d = DType::F32;
    let mut p = P::default();
    let x = p.input("x", d, n);
    let t = p.temp(d, n);
    let y = p.temp(d, n);
    let mut b = Body::default();
    let v = b.load(d, x, 0, &[1]);
    let two = b.push(Ty::Data(d), InstOp::Const(Scalar::Float(2.0)));
    let m = b.bin(d, BinaryOp::Mul, v, two);
    let st = b.store_stage(&[], vec![(t, affine(0, &[1]), m)]);
    p.kernel(kernel("k_double", &[x], &[t], &[n], vec![st]));
    let mut b = Body::default();
    let v = b.load(d, t, 0, &[1]);
    let one = b.push(Ty::Data(d), InstOp::Const(Scalar::Float(1.0)));
    let a = b.bin(d, BinaryOp::Add, v, one);
    let st = b.store_stage(&[], vec![(y, affine(0, &[1]), a)]);
    p.kernel(kernel("k_inc", &[t], &[y], &[n], vec![st]));
    p.output("t", t);
    p.output("y", y);
    p.output("t_again", t);
    p.output("x_out", x);
    let exe = CpuProgram::compile_with(&p.build(), &HashMap::new(), &CpuOptions::default())
        .expect("compiles");
    assert_eq!(exe.peak_bytes(), 0, "every temporary is an output");
    let xs = floats(n, 21, 4.0, false);
    let xt = tensor(d, &[n], &xs);
    let inputs = bind(&[("x", &xt)]);
    let want_t: Vec<f32> = xs.iter().map(|&v| v as f32 * 2.0).collect();
    let want_y: Vec<f32> = want_t.iter().map(|&v| v + 1.0).collect();
    let check = |outs: &[HostTensor]| {
        assert_eq!(outs[0].to_f32_vec(), want_t);
        assert_eq!(outs[1].to_f32_vec(), want_y);
        assert_eq!(outs[2].to_f32_vec(), want_t);
        assert_eq!(outs[3].data(), xt.data());
    };
    let mut outs: Vec<HostTensor> = (0..4).map(|_| tensor(d, &[n], &vec![7.0; n])).collect();
    for _ in 0..3 {
        exe.run_into(&inputs, &mut outs).unwrap();
        check(&outs);
        for o in outs.iter_mut() {
            *o = tensor(d, &[n], &vec![-3.0; n]);
        }
    }
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..20 {
                    let got: Vec<HostTensor> = exe
                        .run(&inputs)
                        .unwrap()
                        .into_iter()
                        .map(|(_, t)| t)
                        .collect();
                    check(&got);
                }
            });
        }
    });
}

/// f32 `exp` and `erf` are emitted inline (vectorised). With [`MathMode::Libm`], `exp` is
/// glibc's `expf` bit for bit, including the overflow and underflow edges, subnormal results,
/// NaN and infinities, and `erf` (`libm::erff`'s algorithm over that `expf`) stays within an
/// ulp or two of the interpreter's `libm::erff`, whose own `expf` is a less exact one. The
/// default polynomials are within 1 ulp (`exp`) and 2 ulp (`erf`) of the exact value (tested
/// against f64 math in `codegen/tests/llvm_math.rs`), so within 1.5 and 3 ulp of the
/// interpreter's.
#[test]
fn inline_exp_and_erf_match_the_interpreter() {
    let mut v: Vec<f64> = vec![
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        1e-10,
        0.5,
        0.84375,
        0.875,
        1.0,
        1.25,
        2.857,
        2.86,
        3.9,
        3.9375,
        5.99,
        6.0,
        9.5,
        32.564632,
        -63.09946,
        88.72283,
        88.72284,
        89.0,
        -87.0,
        -95.5,
        -103.97,
        -103.98,
        -200.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    v.extend(floats(4000, 33, 110.0, false));
    v.extend(floats(4000, 34, 7.0, false));
    let n = v.len();
    let d = DType::F32;
    for op in [UnaryOp::Exp, UnaryOp::Erf] {
        let mut p = P::default();
        let x = p.input("x", d, n);
        let o = p.temp(d, n);
        let mut b = Body::default();
        let xv = b.load(d, x, 0, &[1]);
        let e = b.un(d, op, xv);
        let st = b.store_stage(&[], vec![(o, affine(0, &[1]), e)]);
        p.kernel(kernel("k_un", &[x], &[o], &[n], vec![st]));
        p.output("y", o);
        let mut g = Graph::new();
        let gx = g.input("x", d, [n].as_slice()).unwrap();
        let ge = g.unary(op, gx).unwrap();
        g.set_output("y", ge).unwrap();
        let xt = tensor(d, &[n], &v);
        let inputs = bind(&[("x", &xt)]);
        let want = eval(&g, &inputs).unwrap();
        let prog = p.build();
        for math in [MathMode::Libm, MathMode::Polynomial] {
            let got = run_math(&prog, &inputs, 2, math);
            let what = format!("{op} {math}");
            match (op, math) {
                (UnaryOp::Exp, MathMode::Libm) => check_bits(&what, &got[0], &want[0].1),
                // Subnormal results: a few steps of 2^-149 absolute.
                (UnaryOp::Exp, _) => check_close(&what, &got[0], &want[0].1, 1.8e-7, 1e-44),
                (_, MathMode::Libm) => check_close(&what, &got[0], &want[0].1, 2.5e-7, 1e-30),
                _ => check_close(&what, &got[0], &want[0].1, 3.6e-7, 1e-30),
            }
            .unwrap();
        }
    }
}

/// `combiner` over each row of a `rows x n` input: a one-kernel program, and the graph the
/// interpreter evaluates (`rop`).
fn row_reduction(
    d: DType,
    rows: usize,
    n: usize,
    combiner: Combiner,
    rop: ReduceOp,
) -> (Program, Graph) {
    let mut p = P::default();
    let x = p.input("x", d, rows * n);
    let o = p.temp(d, rows);
    let mut b1 = Body::default();
    let v = b1.load(d, x, 0, &[n as i64, 1]);
    let res = b1.fresh();
    let b2 = Body::after(&b1);
    let st1 = b1.reduce_stage(&[n], v, combiner, d, res);
    let st2 = b2.store_stage(&[], vec![(o, affine(0, &[1]), res)]);
    p.kernel(kernel("k_red", &[x], &[o], &[rows], vec![st1, st2]));
    p.output("y", o);
    let mut g = Graph::new();
    let gx = g.input("x", d, [rows, n].as_slice()).unwrap();
    let gr = g.reduce(rop, gx, &[1], false).unwrap();
    g.set_output("y", gr).unwrap();
    (p.build(), g)
}

/// Float reductions over long rows are split into 16 lanes (a fixed order): close to the
/// interpreter's f64 sums, and bitwise identical across thread counts and runs.
#[test]
fn split_reductions_are_close_and_deterministic() {
    let (rows, n) = (37, 1000 + 7);
    let d = DType::F32;
    for (combiner, rop) in [
        (Combiner::Sum, ReduceOp::Sum),
        (Combiner::Max, ReduceOp::Max),
        (Combiner::Min, ReduceOp::Min),
        (Combiner::Prod, ReduceOp::Prod),
    ] {
        let (prog, g) = row_reduction(d, rows, n, combiner, rop);
        let scale = if combiner == Combiner::Prod { 1.0 } else { 5.0 };
        let mut xs = floats(rows * n, 40, scale, false);
        if combiner == Combiner::Prod {
            for v in xs.iter_mut() {
                *v = 1.0 + *v / 512.0;
            }
        }
        xs[3 * n + 100] = f64::NAN; // row 3 is NaN for every combiner
        let xt = tensor(d, &[rows, n], &xs);
        let inputs = bind(&[("x", &xt)]);
        let want = eval(&g, &inputs).unwrap();
        let base = run(&prog, &inputs, 1);
        check_close(&format!("{rop:?}"), &base[0], &want[0].1, 1e-5, 1e-5).unwrap();
        for threads in [2, 3] {
            let got = run(&prog, &inputs, threads);
            assert_eq!(got[0].data().to_le_bytes(), base[0].data().to_le_bytes());
        }
    }
}

/// A split max or min first combines its 16 lanes without the NaN rule and runs again with
/// it only where a NaN was seen (`reduce_split`). A NaN of either sign anywhere (the first
/// element, inside a block with larger values after it in its lane, the last element of the
/// last whole block, the tail) must still give NaN, next to rows without NaN and with
/// infinities and signed zeros, at lengths with and without a tail, in f32 and f64, on 1 to 3
/// threads.
#[test]
fn split_max_and_min_give_nan_wherever_the_nan_is() {
    for d in [DType::F32, DType::F64] {
        for n in [32usize, 33, 128, 301] {
            let blocks_end = n / 16 * 16;
            let mut spots = vec![0, 5, 17, blocks_end - 1, n / 2];
            if blocks_end < n {
                spots.extend([blocks_end, n - 1]);
            }
            // One NaN row per spot, then rows without NaN: plain, with ±inf, with ±0 only.
            let rows = spots.len() + 3;
            let mut v = floats(rows * n, 17, 4.0, false);
            for (r, &at) in spots.iter().enumerate() {
                // Values after the NaN in its lane (9 above everything else, -9 below), which
                // would replace it without the NaN rule.
                for j in (at + 16..n).step_by(16) {
                    v[r * n + j] = if j % 32 == 0 { 9.0 } else { -9.0 };
                }
                // Both signs: x86's default NaN (from `inf - inf`, say) is negative.
                v[r * n + at] = if r % 2 == 0 { f64::NAN } else { -f64::NAN };
            }
            let inf_row = spots.len() + 1;
            v[inf_row * n + 3] = f64::INFINITY;
            v[inf_row * n + n - 2] = f64::NEG_INFINITY;
            let zero_row = spots.len() + 2;
            for j in 0..n {
                v[zero_row * n + j] = if j % 3 == 0 { -0.0 } else { 0.0 };
            }
            for (combiner, rop) in [
                (Combiner::Max, ReduceOp::Max),
                (Combiner::Min, ReduceOp::Min),
            ] {
                let (prog, g) = row_reduction(d, rows, n, combiner, rop);
                let inputs = bind(&[("x", &tensor(d, &[rows, n], &v))]);
                let want = eval(&g, &inputs).unwrap();
                let base = run(&prog, &inputs, 1);
                let what = format!("{rop:?} {d} n {n}");
                check_bits(&what, &base[0], &want[0].1).unwrap();
                for r in 0..rows {
                    let nan = base[0].data().get_f64(r).is_nan();
                    assert_eq!(nan, r < spots.len(), "{what}: row {r}");
                }
                for threads in [2, 3] {
                    let got = run(&prog, &inputs, threads);
                    assert_eq!(got[0].data().to_le_bytes(), base[0].data().to_le_bytes());
                }
            }
        }
    }
}

/// The kernels' in-order max/min, element by element: `acc > x ? acc : x` (`<` for min), and
/// `acc + x` (a NaN) when either is NaN. Which NaN payload an addition of two NaNs keeps is
/// LLVM's choice (it may swap the operands), so callers compare NaN as NaN.
fn in_order_extreme<T>(xs: &[T], identity: T, max: bool) -> T
where
    T: Copy + PartialOrd + std::ops::Add<Output = T>,
{
    #[allow(clippy::eq_op)] // NaN test
    let nan = |v: T| v != v;
    xs.iter().fold(identity, |acc, &x| {
        if nan(acc) || nan(x) {
            acc + x
        } else if (max && acc > x) || (!max && acc < x) {
            acc
        } else {
            x
        }
    })
}

/// `v`'s bits, every NaN as one (f32 values widened exactly, so ±0 keep their sign).
fn canonical_nan(v: f64) -> u64 {
    if v.is_nan() {
        f64::NAN.to_bits()
    } else {
        v.to_bits()
    }
}

/// A max or min over rows shorter than 32 runs a vector tree first and keeps its result only
/// where no value is NaN and the result is not zero (`staged_extreme`); elsewhere the
/// in-order fold decides. Every row must have the in-order fold's bits (any NaN matching any
/// NaN): NaN (also two of them), ±0 ties, infinities, at every length from 2 to 31, in f32
/// and f64, on 1 and 3 threads.
#[test]
fn short_max_and_min_rows_are_the_in_order_fold_bit_for_bit() {
    let specials = |n: usize, r: usize, v: &mut [f64]| {
        let row = &mut v[r * n..(r + 1) * n];
        match r {
            1 => row[0] = f64::NAN,
            2 => row[n / 2] = f64::NAN,
            3 => row[n - 1] = f64::NAN,
            4 => row.iter_mut().enumerate().for_each(|(j, x)| {
                *x = if j % 3 == 1 { 0.0 } else { -0.0 };
            }),
            5 => row.iter_mut().enumerate().for_each(|(j, x)| {
                *x = if j % 2 == 0 { -1.0 - j as f64 } else { 0.0 };
            }),
            6 => row.iter_mut().for_each(|x| *x = f64::NEG_INFINITY),
            7 => row[n / 3] = f64::INFINITY,
            8 => row.iter_mut().enumerate().for_each(|(j, x)| {
                *x = if j % 2 == 0 { 1.0 + j as f64 } else { -0.0 };
            }),
            _ => {}
        }
    };
    let rows = 10;
    for n in 2..32 {
        let mut v = floats(rows * n, n as u64, 3.0, false);
        for r in 0..rows {
            specials(n, r, &mut v);
        }
        // Row 9: two NaNs with different payloads.
        let mut f32s: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        f32s[9 * n] = f32::from_bits(0x7fc0_0001);
        f32s[9 * n + n - 1] = f32::from_bits(0xffc0_0002);
        let mut f64s = v.clone();
        f64s[9 * n] = f64::from_bits(0x7ff8_0000_0000_0001);
        f64s[9 * n + n - 1] = f64::from_bits(0xfff8_0000_0000_0002);
        for (combiner, rop) in [
            (Combiner::Max, ReduceOp::Max),
            (Combiner::Min, ReduceOp::Min),
        ] {
            let max = combiner == Combiner::Max;
            for d in [DType::F32, DType::F64] {
                let (x, want): (HostTensor, Vec<u64>) = if d == DType::F32 {
                    let id = if max {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    };
                    let want = f32s
                        .chunks(n)
                        .map(|row| canonical_nan(in_order_extreme(row, id, max) as f64))
                        .collect();
                    (
                        HostTensor::from_f32([rows, n].as_slice(), f32s.clone()).unwrap(),
                        want,
                    )
                } else {
                    let id = if max {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    };
                    let want = f64s
                        .chunks(n)
                        .map(|row| canonical_nan(in_order_extreme(row, id, max)))
                        .collect();
                    let t = HostTensor::new([rows, n].as_slice(), TensorData::F64(f64s.clone()));
                    (t.unwrap(), want)
                };
                let (prog, _) = row_reduction(d, rows, n, combiner, rop);
                let inputs = bind(&[("x", &x)]);
                for threads in [1, 3] {
                    let got = run(&prog, &inputs, threads);
                    let got: Vec<u64> = match got[0].data() {
                        TensorData::F32(g) => g.iter().map(|&v| canonical_nan(v as f64)).collect(),
                        TensorData::F64(g) => g.iter().map(|&v| canonical_nan(v)).collect(),
                        other => panic!("{other:?}"),
                    };
                    assert_eq!(got, want, "{rop:?} {d} n {n} {threads} threads");
                }
            }
        }
    }
}

/// Every f32 input (2^32 of them, in batches): with [`MathMode::Libm`] the inline `exp` is the
/// C library's `expf` bit for bit (any NaN matches any NaN). Slow: `cargo test --release --
/// --ignored`.
#[test]
#[ignore]
fn inline_exp_is_expf_for_every_f32() {
    let n = 1usize << 24;
    let d = DType::F32;
    let mut p = P::default();
    let x = p.input("x", d, n);
    let o = p.temp(d, n);
    let mut b = Body::default();
    let xv = b.load(d, x, 0, &[1]);
    let e = b.un(d, UnaryOp::Exp, xv);
    let st = b.store_stage(&[], vec![(o, affine(0, &[1]), e)]);
    p.kernel(kernel("k_exp", &[x], &[o], &[n], vec![st]));
    p.output("y", o);
    let mut options = CpuOptions::default();
    options.jit.math = MathMode::Libm;
    let exe = CpuProgram::compile_with(&p.build(), &HashMap::new(), &options).unwrap();
    let mut out = vec![HostTensor::zeros(d, [n].as_slice())];
    for batch in 0..(1u64 << 32) / n as u64 {
        let base = batch * n as u64;
        let xs: Vec<f32> = (0..n as u64)
            .map(|i| f32::from_bits((base + i) as u32))
            .collect();
        let inputs: HashMap<String, HostTensor> = [(
            "x".to_string(),
            HostTensor::from_f32([n].as_slice(), xs.clone()).unwrap(),
        )]
        .into_iter()
        .collect();
        exe.run_into(&inputs, &mut out).unwrap();
        let got = out[0].to_f32_vec();
        for (x, g) in xs.iter().zip(&got) {
            let w = x.exp();
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "exp({x:e}) = {g:e}, expf gives {w:e}"
            );
        }
    }
}

/// `g` through the default pipeline, lowered, and run fused on the CPU with its outputs in
/// the graph's shapes: the program and the outputs.
fn fused_run(
    g: &Graph,
    inputs: &HashMap<String, HostTensor>,
) -> (Program, Vec<(String, HostTensor)>) {
    let opt = smelt_passes::optimize(g, &Default::default()).unwrap();
    let program = lower(&opt.graph, &opt.plan).unwrap();
    let mut exe = CpuProgram::compile(&program, &HashMap::new()).unwrap();
    for (name, id) in g.outputs() {
        exe.set_output_shape(name, g.ty(*id).shape.clone()).unwrap();
    }
    let got = exe.run(inputs).unwrap();
    (program, got)
}

/// A float product whose f32 partials overflow before they meet a zero is NaN in the kernels,
/// which accumulate in f32 as PyTorch's CPU `prod` does (`inf * 0`), and 0 in the interpreter,
/// which accumulates in f64. The differential tests accept `eval_program`'s f32-accumulated
/// value there (`check_outputs`), and a value that neither accumulator gives still fails.
/// (Found by the fuzz with `SMELT_FUZZ_SEED=20261202`: a bf16 `prod` of 6.3e25, 1.8e26 and
/// -0.0 among others.)
#[test]
fn products_whose_f32_partials_overflow_before_a_zero() {
    for d in [DType::F32, DType::BF16] {
        let mut g = Graph::new();
        let x = g.input("x", d, [2, 4].as_slice()).unwrap();
        let y = g.reduce(ReduceOp::Prod, x, &[1], false).unwrap();
        g.set_output("y", y).unwrap();
        // Row 0 overflows f32 (1e52) before its zero; row 1 stays in range.
        let x = tensor(
            d,
            &[2, 4],
            &[6.0e25, 1.5e26, -0.0, 2.0, 3.0, -0.5, 2.0, 0.25],
        );
        let inputs = bind(&[("x", &x)]);
        let want = eval(&g, &inputs).unwrap();
        assert_eq!(want[0].1.data().get_f64(0), 0.0, "{d}");
        let (program, got) = fused_run(&g, &inputs);
        let y = got[0].1.data();
        assert!(y.get_f64(0).is_nan(), "{d}: {}", y.get_f64(0));
        assert_eq!(y.get_f64(1), -0.75, "{d}");
        check_outputs("prod", &g, &program, &inputs, &want, &got).unwrap();
        let wrong = vec![("y".to_string(), tensor(d, &[2], &[1.0, -0.75]))];
        let e = check_outputs("prod", &g, &program, &inputs, &want, &wrong).unwrap_err();
        assert!(e.contains("element 0"), "{e}");
    }
}

/// A product of 32 elements runs in 16 lanes (docs/semantics.md): with 1e30 twice in lane 0
/// and 1e-30 twice in lane 1, lane 0 overflows and lane 1 underflows, so the kernel gives
/// `inf * 0` = NaN where the f64 product (1e-84) and `eval_program`'s index order give 0. The
/// differential tests accept a NaN or ±inf for a wanted ±0 downstream of a product, and still
/// reject a wrong finite value. (Found by the emulator fuzz with `SMELT_FUZZ_SEED=20261202`: a
/// bf16 product of 126 factors from 1e-31 to 8e21 and no zero.)
#[test]
fn products_whose_lanes_overflow_and_underflow() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1, 32].as_slice()).unwrap();
    let y = g.reduce(ReduceOp::Prod, x, &[1], false).unwrap();
    g.set_output("y", y).unwrap();
    let mut v = vec![1e-3; 32];
    (v[0], v[16], v[1], v[17]) = (1e30, 1e30, 1e-30, 1e-30);
    let inputs = bind(&[("x", &tensor(DType::F32, &[1, 32], &v))]);
    let want = eval(&g, &inputs).unwrap();
    assert_eq!(want[0].1.data().get_f64(0), 0.0);
    let (program, got) = fused_run(&g, &inputs);
    assert_eq!(
        eval_program(&program, &inputs).unwrap()[0]
            .1
            .data()
            .get_f64(0),
        0.0
    );
    assert!(got[0].1.data().get_f64(0).is_nan(), "{:?}", got[0].1);
    check_outputs("prod", &g, &program, &inputs, &want, &got).unwrap();
    let wrong = vec![("y".to_string(), tensor(DType::F32, &[1], &[1e-3]))];
    assert!(check_outputs("prod", &g, &program, &inputs, &want, &wrong).is_err());
}

/// A comparison after a GEMM whose f32 accumulation overflows both ways (`-1e40` rounds to
/// -inf, then `+ inf` is NaN) where the interpreter's f64 sum is +inf: the GEMM's outputs
/// match as two non-finite values, and `where(m > 0, 1, -1)`, -1 on the device and 1 in the
/// interpreter, is checked as the function of the device's GEMM output it is. A value that
/// does not follow from the device's own GEMM output still fails. (Found by the emulator
/// fuzz with `SMELT_FUZZ_SEED=99 SMELT_FUZZ_MAX_NUMEL=4000`, case 149: a `gt` after a bf16
/// GEMM.)
#[test]
fn comparisons_after_gemms_that_overflow_in_f32() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [1, 2].as_slice()).unwrap();
    let w = g.input("w", DType::F32, [2, 1].as_slice()).unwrap();
    let m = g.matmul(x, w).unwrap();
    let k = |g: &mut Graph, v: f32| {
        g.constant(HostTensor::from_f32([1, 1], vec![v]).unwrap())
            .unwrap()
    };
    let (zero, one, minus) = (k(&mut g, 0.0), k(&mut g, 1.0), k(&mut g, -1.0));
    let c = g.binary(BinaryOp::Gt, m, zero).unwrap();
    let y = g.where_(c, one, minus).unwrap();
    g.set_output("m", m).unwrap();
    g.set_output("y", y).unwrap();
    let x = tensor(DType::F32, &[1, 2], &[1e20, f64::INFINITY]);
    let w = tensor(DType::F32, &[2, 1], &[-1e20, 1.0]);
    let inputs = bind(&[("x", &x), ("w", &w)]);
    let want = eval(&g, &inputs).unwrap();
    assert_eq!(want[0].1.data().get_f64(0), f64::INFINITY);
    assert_eq!(want[1].1.data().get_f64(0), 1.0);
    let (program, got) = fused_run(&g, &inputs);
    assert!(got[0].1.data().get_f64(0).is_nan(), "{:?}", got[0].1);
    assert_eq!(got[1].1.data().get_f64(0), -1.0);
    check_outputs("gemm, where", &g, &program, &inputs, &want, &got).unwrap();
    let mut wrong = got.clone();
    wrong[1].1 = HostTensor::from_f32([1, 1], vec![7.0]).unwrap();
    let e = check_outputs("gemm, where", &g, &program, &inputs, &want, &wrong).unwrap_err();
    assert!(e.contains("from the other outputs"), "{e}");
}

/// An f32 GEMM whose finite terms add up past the f32 range can overflow in f32 where the
/// interpreter's f64 sum does not: `2e38 - 3e38 + 2e38` is 1e38 in k order (the device's and
/// `eval_program`'s here), inf in an order that adds the two `2e38` first. Both are accepted
/// against the interpreter's 1e38, since the absolute terms sum to 7e38; an inf where they
/// cannot overflow is still rejected. (Found by the CPU fuzz with `SMELT_FUZZ_SEED=99`, case
/// 1290: a GEMM with a constant holding `f32::MAX`, inf on the device.)
#[test]
fn gemms_whose_f32_partial_sums_overflow() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3].as_slice()).unwrap();
    let w = g.input("w", DType::F32, [3, 1].as_slice()).unwrap();
    let m = g.matmul(x, w).unwrap();
    g.set_output("m", m).unwrap();
    let w = tensor(DType::F32, &[3, 1], &[1.0, 1.0, 1.0]);
    let check = |big: f64, got: &[f64]| {
        let x = tensor(
            DType::F32,
            &[2, 3],
            &[2.0 * big, -3.0 * big, 2.0 * big, 1.0, 2.0, 3.0],
        );
        let inputs = bind(&[("x", &x), ("w", &w)]);
        let want = eval(&g, &inputs).unwrap();
        let (program, device) = fused_run(&g, &inputs);
        check_outputs("gemm", &g, &program, &inputs, &want, &device).unwrap();
        let other = vec![("m".to_string(), tensor(DType::F32, &[2, 1], got))];
        check_outputs("gemm", &g, &program, &inputs, &want, &other)
    };
    check(1e38, &[f64::INFINITY, 6.0]).unwrap();
    assert!(check(1e37, &[f64::INFINITY, 6.0]).is_err());
    assert!(
        check(1e38, &[f64::INFINITY, f64::INFINITY]).is_ok(),
        "one bound per cone"
    );
}

/// Outputs whose every element is an empty sum (a product over `k = 0`, on the GEMM step and
/// as a kernel, and a sum over an empty axis) come out of `run` as zeros even when the memory
/// they get held something else: `run` hands outputs the run writes whole over uninitialised
/// memory, so the steps must write those zeros themselves. The heap is primed with NaN blocks
/// of the outputs' sizes first, which glibc tends to hand back.
#[test]
fn empty_sums_are_zeros_in_fresh_outputs() {
    let mut g = Graph::new();
    let a = g.input("a", DType::F32, [64, 0]).unwrap();
    let b = g.input("b", DType::F32, [0, 96]).unwrap();
    let e = g.input("e", DType::F32, [0, 33]).unwrap();
    let mm = g.matmul(a, b).unwrap();
    let s = g.reduce(ReduceOp::Sum, e, &[0], false).unwrap();
    let one = g
        .constant(HostTensor::from_f32([1], vec![1.0]).unwrap())
        .unwrap();
    let s1 = g.binary(BinaryOp::Add, s, one).unwrap();
    g.set_output("mm", mm).unwrap();
    g.set_output("s1", s1).unwrap();
    let inputs = bind(&[
        ("a", &HostTensor::from_f32([64, 0], vec![]).unwrap()),
        ("b", &HostTensor::from_f32([0, 96], vec![]).unwrap()),
        ("e", &HostTensor::from_f32([0, 33], vec![]).unwrap()),
    ]);
    for _ in 0..3 {
        for n in [64 * 96, 33] {
            drop(std::hint::black_box(vec![f32::NAN; n]));
        }
        let (_, got) = fused_run(&g, &inputs);
        let mm = got.iter().find(|(n, _)| n == "mm").unwrap().1.to_f32_vec();
        let s1 = got.iter().find(|(n, _)| n == "s1").unwrap().1.to_f32_vec();
        assert!(
            mm.len() == 64 * 96 && mm.iter().all(|&x| x == 0.0),
            "{mm:?}"
        );
        assert!(s1.len() == 33 && s1.iter().all(|&x| x == 1.0), "{s1:?}");
    }
}
