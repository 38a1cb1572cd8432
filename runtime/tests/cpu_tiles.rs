//! Transposed reads in tiles (`JitOptions::tile_transposes`, `codegen/src/llvm/kernel/tile.rs`)
//! against the reference interpreter, on random graphs made to reach them: the random-graph
//! fuzzers' shapes (dims of a few elements) never give a kernel a tile, which needs its last
//! two dims to hold 16 x 16 elements (8 x 8 for 8-byte ones) and an operand read across its
//! rows with a step of a cache line or more.
//!
//! Each case: one or two operands of shape `[.., n, m]` (or `[b, n, h, m]`) permuted so that
//! their last axis becomes the output's second-to-last, combined with a plain operand and a
//! broadcast row by random elementwise ops, in a random dtype, traced, optimised (one fused
//! kernel), compiled with tiles on and run on a pool of 1 to 3 threads, whose chunks cut tiles
//! anywhere, on inputs with NaN, ±inf and ±0 among them. Every output must equal the
//! interpreter's (elementwise ops round exactly as the interpreter does; only the sign of
//! `maximum(-0.0, 0.0)` and which NaN may differ, as docs/semantics.md allows; `check_close`
//! with no tolerance), and the kernel must compute tiles (checked with
//! `kernel::describe`), so that a change in when tiles apply cannot leave this test idle.

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::{check_close, floats, tensor};
use proptest::prelude::*;
use smelt_codegen::llvm::kernel::describe;
use smelt_ir::arbitrary::proptest_cases;
use smelt_ir::interp::eval;
use smelt_ir::{BinaryOp, DType, Graph, HostTensor, UnaryOp};
use smelt_passes::kernel::lower;
use smelt_passes::{optimize, PassOptions};
use smelt_runtime::cpu::{CpuOptions, CpuProgram};
use std::collections::HashMap;

/// One random case (see the module docs).
#[derive(Clone, Debug)]
struct Case {
    dtype: DType,
    /// `[b, n, m]` read as `[b, m, n]` (rank 3, `b` 0 for rank 2), or `[b, n, h, m]` read as
    /// `[b, h, m, n]` (rank 4).
    rank: usize,
    b: usize,
    h: usize,
    m: usize,
    n: usize,
    ops: Vec<(BinaryOp, usize)>,
    neg: bool,
    threads: usize,
    seed: u64,
}

fn arb_case() -> impl Strategy<Value = Case> {
    let dtype = prop_oneof![
        Just(DType::F32),
        Just(DType::F64),
        Just(DType::F16),
        Just(DType::BF16),
        Just(DType::I32),
        Just(DType::I64),
    ];
    let op = prop_oneof![
        Just(BinaryOp::Add),
        Just(BinaryOp::Sub),
        Just(BinaryOp::Mul),
        Just(BinaryOp::Maximum),
    ];
    (
        dtype,
        2usize..=4,
        (1usize..=3, 1usize..=3),
        (8usize..=70, 8usize..=70),
        proptest::collection::vec((op, 0usize..3), 1..4),
        any::<bool>(),
        1usize..=3,
        any::<u64>(),
    )
        .prop_map(
            |(dtype, rank, (b, h), (m, n), ops, neg, threads, seed)| Case {
                dtype,
                rank,
                b,
                h,
                m,
                n,
                ops,
                neg,
                threads,
                seed,
            },
        )
}

/// The case's graph and inputs: operands `t0` and `t1` read transposed, `x` plain, `r` a
/// broadcast row; starting from `t0` (negated or not), `ops` combine the running value with
/// operand `k % 3` of `t1`, `x`, `r` in turn.
fn build(c: &Case) -> (Graph, HashMap<String, HostTensor>) {
    let (stored, out, perm): (Vec<usize>, Vec<usize>, Vec<usize>) = match c.rank {
        2 => (vec![c.n, c.m], vec![c.m, c.n], vec![1, 0]),
        3 => (vec![c.b, c.n, c.m], vec![c.b, c.m, c.n], vec![0, 2, 1]),
        _ => (
            vec![c.b, c.n, c.h, c.m],
            vec![c.b, c.h, c.m, c.n],
            vec![0, 2, 3, 1],
        ),
    };
    let mut g = Graph::new();
    let mut inputs = HashMap::new();
    let numel: usize = out.iter().product();
    let mut input = |g: &mut Graph, name: &str, dims: &[usize], seed: u64| {
        let values = floats(dims.iter().product(), seed, 32.0, true);
        inputs.insert(name.to_string(), tensor(c.dtype, dims, &values));
        g.input(name, c.dtype, dims).unwrap()
    };
    let t0 = input(&mut g, "t0", &stored, c.seed);
    let t1 = input(&mut g, "t1", &stored, c.seed.wrapping_add(1));
    let x = input(&mut g, "x", &out, c.seed.wrapping_add(2));
    let r = input(&mut g, "r", &[c.n], c.seed.wrapping_add(3));
    let t0 = g.permute(t0, &perm).unwrap();
    let t1 = g.permute(t1, &perm).unwrap();
    // Never `t0` again: `t0 - t0` would simplify away the read this test is about.
    let operands = [t1, x, r];
    let mut v = if c.neg && !matches!(c.dtype, DType::I32 | DType::I64) {
        g.unary(UnaryOp::Neg, t0).unwrap()
    } else {
        t0
    };
    for &(op, k) in &c.ops {
        v = g.binary(op, v, operands[k % 3]).unwrap();
    }
    g.set_output("y", v).unwrap();
    assert_eq!(numel, g.ty(v).shape.numel());
    (g, inputs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(48)))]

    #[test]
    fn tiled_transposed_reads_match_the_interpreter(c in arb_case()) {
        let (graph, inputs) = build(&c);
        let want = eval(&graph, &inputs).unwrap();
        let opt = optimize(&graph, &PassOptions::default()).unwrap();
        let program = lower(&opt.graph, &opt.plan).unwrap();
        let options = CpuOptions {
            threads: c.threads,
            ..CpuOptions::default()
        };
        let side = if c.dtype.size_bytes() == 8 { 8 } else { 16 };
        // The transposed operands step `m` (`h * m` at rank 4) elements along the output's
        // rows, whose last two dims are `m x n`.
        let step = if c.rank == 4 { c.h * c.m } else { c.m };
        let tiles = c.m >= side && c.n >= side && step * c.dtype.size_bytes() >= 64;
        let tiled = program
            .kernels()
            .any(|k| describe(k, &program.buffers, &[], &options.jit).iter().any(|d| d.contains("tiles")));
        prop_assert_eq!(tiled, tiles, "which kernels tile");
        let exe = CpuProgram::compile_with(&program, &HashMap::new(), &options).unwrap();
        let got = exe.run(&inputs).unwrap();
        // Equal values, NaN for NaN: the sign of `maximum(-0.0, 0.0)` and which NaN an op
        // returns are unspecified (docs/semantics.md).
        let equal = check_close("y", &got[0].1, &want[0].1, 0.0, 0.0);
        prop_assert!(equal.is_ok(), "{}", equal.unwrap_err());
    }
}
