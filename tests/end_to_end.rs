//! Whole-stack tests: trace → compile → run, checked against numpy golden values.

use serde_json::Value;
use smelt::ir::{text, HostTensor};
use smelt::models::{encoder_layer, EncoderConfig};
use std::collections::HashMap;

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("a list")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

/// The encoder layer of `smelt demo`, at a small size, against numpy in f64
/// (tests/data/encoder_small.json, from scripts/golden/gen_encoder.py).
#[test]
fn encoder_layer_matches_numpy() {
    let golden: Value =
        serde_json::from_str(include_str!("data/encoder_small.json")).expect("valid json");
    let c = &golden["config"];
    let get = |k: &str| c[k].as_u64().expect("int") as usize;
    let cfg = EncoderConfig {
        seq: get("seq"),
        hidden: get("hidden"),
        heads: get("heads"),
        ffn: get("ffn"),
        eps: c["eps"].as_f64().expect("float"),
    };
    let graph = encoder_layer(&cfg).expect("traces");
    let mut params = HashMap::new();
    for (name, w) in golden["weights"].as_object().expect("map") {
        let shape: Vec<usize> = w["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim") as usize)
            .collect();
        params.insert(
            name.clone(),
            HostTensor::from_f32(shape, floats(&w["data"])).expect("sizes match"),
        );
    }
    let mut compiled = smelt::compile(&graph).expect("compiles");
    compiled.bind_params(params).expect("weights fit");
    let x = HostTensor::from_f32([cfg.seq, cfg.hidden], floats(&golden["x"])).unwrap();
    let out = compiled
        .run(&HashMap::from([("x".to_string(), x)]))
        .expect("runs");
    let got = out.get("y").expect("output y").to_f32_vec();
    let want = floats(&golden["y"]);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        // f32 computation vs f64 numpy through ~10 dependent ops: torch.testing's f32
        // tolerance scaled by 10.
        assert!(
            (g - w).abs() <= 1e-4 + 1.3e-5 * w.abs(),
            "y[{i}] = {g}, numpy says {w}"
        );
    }
}

/// A traced model prints to `.smelt` text and parses back to the same graph.
#[test]
fn traced_model_round_trips_through_text() {
    let cfg = EncoderConfig {
        seq: 3,
        hidden: 4,
        heads: 2,
        ffn: 8,
        eps: 1e-5,
    };
    let graph = encoder_layer(&cfg).unwrap();
    let printed = text::print(&graph);
    assert_eq!(text::parse(&printed).unwrap(), graph);
}

/// The BERT-base forward pass used for the optimiser's compile-time budget traces and
/// verifies, and has the size the budget is stated for.
#[test]
fn bert_base_forward_traces() {
    let g = smelt::models::bert_base(128, 12).unwrap();
    smelt::ir::verify(&g).unwrap();
    assert!(g.len() > 1_000, "{} nodes", g.len());
    assert_eq!(g.outputs()[0].0, "hidden");
    assert_eq!(g.ty(g.outputs()[0].1).to_string(), "f32[128, 768]");
}

/// Bound linear weights are packed for the GEMM at compile time (the CPU runtime's
/// `pack_rhs`): one weight read by two GEMMs and by an elementwise kernel, another read only
/// by a GEMM (its unpacked copy is dropped). Bound and run-time-supplied weights (never packed)
/// both match the reference interpreter.
#[test]
fn packed_linear_weights_match_the_reference() {
    use smelt::frontend::{nn, Tracer};
    use smelt::ir::DType;
    use smelt::{compile_with, Device, Options};
    let (rows, k, n) = (37, 96, 80);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [rows, k]).unwrap();
    let x2 = t.input("x2", DType::F32, [rows, k]).unwrap();
    let w = t.param("w", DType::F32, [n, k]).unwrap();
    let w2 = t.param("w2", DType::F32, [n, n]).unwrap();
    let h = nn::linear(&x, &w, None).unwrap();
    let h2 = nn::linear(&x2, &w, None).unwrap();
    let y = nn::linear(&h.add(&h2).unwrap(), &w2, None).unwrap();
    t.output("y", &y).unwrap();
    t.output("w_sum", &w.mul(2.0).unwrap().sum(&[1], false).unwrap())
        .unwrap();
    let graph = t.finish().unwrap();
    let data = |r: usize, c: usize, seed: usize| {
        let v = (0..r * c)
            .map(|i| (((i * 7919 + seed * 104729) % 2003) as f32 / 1001.0 - 1.0) * 0.5)
            .collect();
        HostTensor::from_f32([r, c], v).unwrap()
    };
    let params = HashMap::from([
        ("w".to_string(), data(n, k, 1)),
        ("w2".to_string(), data(n, n, 2)),
    ]);
    let inputs = HashMap::from([
        ("x".to_string(), data(rows, k, 3)),
        ("x2".to_string(), data(rows, k, 4)),
    ]);
    let compile = |device, bound: bool| {
        compile_with(
            &graph,
            Options {
                device,
                params: if bound {
                    params.clone()
                } else {
                    HashMap::new()
                },
                ..Options::default()
            },
        )
        .unwrap()
    };
    let mut all = inputs.clone();
    all.extend(params.clone());
    let want = compile(Device::Reference, false).run(&all).unwrap();
    // The CUDA kernels on the CPU emulator too (C++ compiler required under scripts/test.sh).
    let mut devices = vec![Device::Cpu];
    match Device::CudaEmulated.resolve() {
        Ok(_) => devices.push(Device::CudaEmulated),
        Err(e) if std::env::var("SMELT_REQUIRE_CXX").as_deref() == Ok("1") => panic!("{e}"),
        Err(e) => println!("cuda-emulated skipped: {e}"),
    }
    let runs = devices
        .iter()
        .flat_map(|&d| [(d, true, &inputs), (d, false, &all)]);
    for (device, bound, feed) in runs {
        let mut compiled = compile(device, bound);
        let mut got = compiled.run(feed).unwrap();
        if !bound {
            // Bound later, then run into preallocated outputs.
            compiled.bind_params(params.clone()).unwrap();
            let mut outs: Vec<HostTensor> = got.iter().map(|(_, t)| t.clone()).collect();
            compiled.run_into(&inputs, &mut outs).unwrap();
            for ((_, g), o) in got.0.iter_mut().zip(outs) {
                assert_eq!(*g, o, "{device}: run_into after bind_params");
            }
        }
        for name in ["y", "w_sum"] {
            let (g, w) = (
                got.get(name).unwrap().to_f32_vec(),
                want.get(name).unwrap().to_f32_vec(),
            );
            assert_eq!(g.len(), w.len());
            for (i, (g, w)) in g.iter().zip(&w).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
                    "{device}: {name}[{i}] = {g}, the reference says {w} (bound: {bound})"
                );
            }
        }
    }
}

/// Softmax's `exp(x - max)` (whose argument is known to be `≤ 0`, so that on CPUs without
/// AVX-512 its `2^q` scales by a fixed offset, kernel module `scalef`) gives the bits of `exp`
/// of the same argument (which scales in two halves), subnormal results and the underflow to
/// 0 included: in rows whose maximum is 0 and whose other elements are at most -25, the sum is
/// 1.0 in f32, so each output is its `exp` unscaled. Rows of 259 run the vector loop and its
/// masked remainder.
#[test]
fn softmax_exp_scales_as_exp_does() {
    use smelt::frontend::Tracer;
    use smelt::ir::DType;
    let (rows, cols) = (40, 259);
    let build = |softmax: bool| {
        let t = Tracer::new();
        let x = t.input("x", DType::F32, [rows, cols]).unwrap();
        let y = if softmax {
            x.softmax(-1).unwrap()
        } else {
            x.exp().unwrap()
        };
        t.output("y", &y).unwrap();
        smelt::compile(&t.finish().unwrap()).unwrap()
    };
    // Row r, column c > 0: from -25 down to -104.5 (below exp's limit of -104), through the
    // subnormal results (arguments below about -87.3), in steps that differ per row.
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            if c == 0 {
                0.0
            } else {
                -25.0 - 79.5 * ((c * 37 + r * 11) % cols) as f32 / (cols - 1) as f32
            }
        })
        .collect();
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([rows, cols], x.clone()).unwrap(),
    )]);
    let soft = build(true).run(&inputs).unwrap();
    let exp = build(false).run(&inputs).unwrap();
    let (soft, exp) = (soft.get("y").unwrap(), exp.get("y").unwrap());
    let (soft, exp) = (soft.to_f32_vec(), exp.to_f32_vec());
    let mut subnormal = 0;
    for (i, ((&s, &e), &xi)) in soft.iter().zip(&exp).zip(&x).enumerate() {
        assert_eq!(
            s.to_bits(),
            e.to_bits(),
            "element {i}: exp({xi:e}) = {e:e}, softmax {s:e}"
        );
        subnormal += usize::from(e != 0.0 && !e.is_normal());
    }
    assert!(subnormal > 100, "only {subnormal} subnormal results");
}

/// The CPU code-generation options (`no_prefetch`, `row_prefetch`, `first_pass_prefetch`,
/// `no_streaming_stores`, `no_interleave_vectors`) reach the JIT and
/// change no value: the same graph (a bias, a GELU and a softmax over a 16 MiB tensor, the
/// only output, so that streaming applies; the bias bound after compilation, which
/// recompiles) gives the same bits under every combination, through `run` and through
/// `run_into` (whose outputs, on pages touched or not, run a streaming kernel's two
/// entries).
#[test]
fn cpu_codegen_options_change_no_value() {
    use smelt::frontend::Tracer;
    use smelt::ir::DType;
    use smelt::{compile_with, Device, Options, RowPrefetch};
    let (rows, cols) = (4096, 1024);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [rows, cols]).unwrap();
    let b = t.param("b", DType::F32, [cols]).unwrap();
    let h = x
        .add(&b)
        .unwrap()
        .gelu(smelt::frontend::GeluApproximation::None)
        .unwrap();
    t.output("p", &h.softmax(-1).unwrap()).unwrap();
    let graph = t.finish().unwrap();
    let x = (0..rows * cols)
        .map(|i| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 3.0)
        .collect();
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([rows, cols], x).unwrap(),
    )]);
    let b = (0..cols).map(|i| i as f32 / cols as f32 - 0.5).collect();
    let params = HashMap::from([("b".to_string(), HostTensor::from_f32([cols], b).unwrap())]);
    let run = |no_prefetch: bool, row: RowPrefetch, first: bool, plain: bool, own: bool| {
        let options = Options {
            device: Device::Cpu,
            no_prefetch,
            row_prefetch: row,
            first_pass_prefetch: first,
            no_streaming_stores: plain,
            no_interleave_vectors: own,
            ..Options::default()
        };
        let jit = options.jit_options();
        assert_eq!(jit.prefetch_bytes.is_none(), no_prefetch);
        assert_eq!(jit.row_prefetch, row);
        assert_eq!(jit.first_pass_prefetch, first);
        assert_eq!(jit.nontemporal_min_bytes.is_none(), plain);
        assert_eq!(jit.interleave_vectors.is_none(), own);
        let mut compiled = compile_with(&graph, options).unwrap();
        compiled.bind_params(params.clone()).unwrap();
        let fresh = compiled.run(&inputs).unwrap();
        let mut into = vec![HostTensor::zeros(DType::F32, [rows, cols])];
        compiled.run_into(&inputs, &mut into).unwrap();
        (fresh, into.remove(0))
    };
    use RowPrefetch::{Auto, Module, Off, Rows};
    let (want, _) = run(false, Auto, false, true, false);
    let want = want.get("p").unwrap().clone();
    for (no_prefetch, row, first, plain, own) in [
        (false, Auto, false, false, false),
        (true, Auto, false, false, false),
        (false, Rows, false, false, false),
        (false, Module, false, false, false),
        (false, Off, false, false, false),
        (false, Rows, true, false, false),
        (true, Auto, false, true, false),
        (false, Auto, false, false, true),
        (true, Module, true, true, true),
    ] {
        let (fresh, into) = run(no_prefetch, row, first, plain, own);
        assert_eq!(fresh.iter().count(), 1);
        for (how, g) in [("run", fresh.get("p").unwrap()), ("run_into", &into)] {
            let same = (0..want.numel())
                .all(|i| g.data().get_f64(i).to_bits() == want.data().get_f64(i).to_bits());
            assert!(
                same,
                "{how}: no_prefetch {no_prefetch}, row_prefetch {row}, \
                 first_pass_prefetch {first}, plain stores {plain}, vectoriser's interleaving {own}"
            );
        }
    }
}

/// `Options::gemm_panel_max_rows` reaches the CPU runtime: a 128-token linear layer (its
/// weight a bound parameter read transposed, as `F.linear` does) runs on the panel kernel by
/// default, whose every output is, bit for bit, one `f32::mul_add` chain over `k` from +0
/// (checked where the CPU has AVX-512F, or AVX2 and FMA, which that kernel needs), and with
/// the limit at 64 on the `gemm` crate, whose blocked sums over `k = 768` round some elements
/// differently; both stay within f32 rounding of an f64 oracle.
#[test]
fn gemm_panel_rows_choose_the_kernel_of_a_linear_layer() {
    use smelt::frontend::Tracer;
    use smelt::ir::DType;
    use smelt::{compile_with, Device, Options};
    let (m, k, n) = (128, 768, 80);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [m, k]).unwrap();
    let w = t.param("w", DType::F32, [n, k]).unwrap();
    t.output("y", &x.matmul(&w.transpose(0, 1).unwrap()).unwrap())
        .unwrap();
    let graph = t.finish().unwrap();
    let xv: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 3.0)
        .collect();
    let wv: Vec<f32> = (0..n * k)
        .map(|i| ((i * 104729 % 1009) as f32 / 504.0 - 1.0) * 0.5)
        .collect();
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([m, k], xv.clone()).unwrap(),
    )]);
    let params = HashMap::from([(
        "w".to_string(),
        HostTensor::from_f32([n, k], wv.clone()).unwrap(),
    )]);
    let run = |rows: Option<usize>| {
        let options = Options {
            device: Device::Cpu,
            gemm_panel_max_rows: rows,
            ..Options::default()
        };
        assert_eq!(options.cpu_options().panel_max_rows, rows);
        let mut compiled = compile_with(&graph, options).unwrap();
        compiled.bind_params(params.clone()).unwrap();
        let out = compiled.run(&inputs).unwrap();
        let y = out.get("y").unwrap();
        (0..m * n)
            .map(|i| y.data().get_f64(i) as f32)
            .collect::<Vec<f32>>()
    };
    let (panel, gemm) = (run(None), run(Some(64)));
    #[cfg(target_arch = "x86_64")]
    let panel_kernel = std::arch::is_x86_feature_detected!("avx512f")
        || (std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"));
    #[cfg(target_arch = "x86_64")]
    if panel_kernel {
        // `gemm` sums a contraction this long in blocks: some element rounds differently.
        assert!(
            panel != gemm,
            "the limit of 64 rows did not reach the runtime"
        );
    }
    for (i, j) in (0..m).flat_map(|i| (0..n).map(move |j| (i, j))) {
        let (a, b) = (&xv[i * k..(i + 1) * k], &wv[j * k..(j + 1) * k]);
        let exact: f64 = a.iter().zip(b).map(|(&p, &q)| p as f64 * q as f64).sum();
        let scale: f64 = a
            .iter()
            .zip(b)
            .map(|(&p, &q)| (p as f64 * q as f64).abs())
            .sum();
        for (name, got) in [("panel", panel[i * n + j]), ("gemm", gemm[i * n + j])] {
            let err = (got as f64 - exact).abs();
            assert!(
                err <= k as f64 * f32::EPSILON as f64 * scale,
                "{name} ({i}, {j}): {got} against {exact}"
            );
        }
        #[cfg(target_arch = "x86_64")]
        if panel_kernel {
            let chain = a
                .iter()
                .zip(b)
                .fold(0f32, |acc, (&p, &q)| p.mul_add(q, acc));
            assert_eq!(
                panel[i * n + j].to_bits(),
                chain.to_bits(),
                "panel ({i}, {j}): not the fused multiply-add chain"
            );
        }
    }
}

/// Transposed reads computed in tiles (on by default; `Options::no_tiled_transposes` turns
/// them off): `x + y.T` in f32, a batched `x + y.transpose(1, 2)` in f16 and bf16, and a bare
/// transposed copy, traced, compiled for the CPU and run with fresh and preallocated outputs,
/// give the reference interpreter's values bit for bit, with tiles and without, at sizes that
/// are not whole tiles and large enough to be cut into chunks for several threads, one of
/// them out of cache (above 4 MiB).
#[test]
fn transposed_reads_match_the_interpreter() {
    use smelt::frontend::Tracer;
    use smelt::ir::interp::eval;
    use smelt::ir::tensor::TensorData;
    use smelt::ir::DType;
    use smelt::{compile_with, Device, Options};
    let value = |i: usize| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 3.0;
    let data = |d: DType, n: usize, seed: usize| match d {
        DType::F32 => TensorData::F32((0..n).map(|i| value(i + seed)).collect()),
        DType::F16 => TensorData::F16(
            (0..n)
                .map(|i| half::f16::from_f32(value(i + seed)))
                .collect(),
        ),
        _ => TensorData::BF16(
            (0..n)
                .map(|i| half::bf16::from_f32(value(i + seed)))
                .collect(),
        ),
    };
    for (d, b, m, n) in [
        (DType::F32, 1, 301, 203),
        (DType::F16, 3, 70, 130),
        (DType::BF16, 2, 48, 100),
        (DType::F32, 1, 1030, 1100),
    ] {
        let t = Tracer::new();
        let x = t.input("x", d, [b, m, n]).unwrap();
        let y = t.input("y", d, [b, n, m]).unwrap();
        let yt = y.permute(&[0, 2, 1]).unwrap();
        t.output("sum", &x.add(&yt).unwrap()).unwrap();
        t.output("copy", &yt).unwrap();
        let graph = t.finish().unwrap();
        let inputs = HashMap::from([
            (
                "x".to_string(),
                HostTensor::new([b, m, n], data(d, b * m * n, 0)).unwrap(),
            ),
            (
                "y".to_string(),
                HostTensor::new([b, n, m], data(d, b * m * n, 11)).unwrap(),
            ),
        ]);
        let want = eval(&graph, &inputs).unwrap();
        for no_tiled_transposes in [false, true] {
            let options = Options {
                device: Device::Cpu,
                no_tiled_transposes,
                ..Options::default()
            };
            assert_eq!(options.jit_options().tile_transposes, !no_tiled_transposes);
            let compiled = compile_with(&graph, options).unwrap();
            let fresh = compiled.run(&inputs).unwrap();
            let mut into: Vec<HostTensor> = want
                .iter()
                .map(|(_, w)| HostTensor::zeros(d, w.shape().clone()))
                .collect();
            compiled.run_into(&inputs, &mut into).unwrap();
            for ((name, w), into) in want.iter().zip(&into) {
                for (how, got) in [("run", fresh.get(name).unwrap()), ("run_into", into)] {
                    let same = (0..w.numel())
                        .all(|i| got.data().get_f64(i).to_bits() == w.data().get_f64(i).to_bits());
                    assert!(
                        same,
                        "{d} {name} via {how}, tiles off: {no_tiled_transposes}"
                    );
                }
            }
        }
    }
}

/// Long elementwise bodies split into two loops per block of 256 elements
/// (`Options::loop_fission`; `Auto` splits them on AMD Zen 3 only) and f32 constants loaded
/// from memory (`Options::constant_loads`, likewise) give the same bits as one loop and LLVM
/// constants, in every combination of the two: a `tanh` whose operand is also used after it
/// (the bench's chain), bias + GELU + residual (`erf`), a `tanh` of a value holding an `exp`
/// that the second loop uses too (kept in scratch rather than computed again), GELU's `tanh`
/// form, `erf` in f16 and bf16, a `tanh` and an `erf` in one body (cut at the first, the
/// second whole in the second loop), and an add + softmax (a row kernel, never split). Inputs
/// hold NaN, infinities, signed zeros, subnormals and values past where `tanh` and `erf`
/// round to ±1; sizes have blocks and a rest, rows cut mid-block, and one case is 16 MiB
/// (its stores stream: the peeled loop's main part is split). Through `run` and `run_into`, all agree
/// with each other bit for bit and with the reference interpreter within the polynomials'
/// error. The generated IR has the scratch arrays when split (per kernel function: the cut
/// op's two parts, and one kept value) and none otherwise, and the constants' globals only
/// when they are loaded.
#[test]
fn long_body_options_change_no_value() {
    use smelt::frontend::{GeluApproximation, Tracer};
    use smelt::ir::interp::eval;
    use smelt::ir::tensor::TensorData;
    use smelt::ir::DType;
    use smelt::{compile_with, ByCpu, Device, Options};
    let special = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -3e-39,
        9.5,
        -12.0,
        4.0,
        -3.95,
        0.875,
        -0.87,
        1e-4,
    ];
    let value = |i: usize| match i % 97 {
        k if k < special.len() => special[k],
        _ => ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 5.0,
    };
    let data = |d: DType, n: usize, seed: usize| match d {
        DType::F16 => TensorData::F16(
            (0..n)
                .map(|i| half::f16::from_f32(value(i + seed)))
                .collect(),
        ),
        DType::BF16 => TensorData::BF16(
            (0..n)
                .map(|i| half::bf16::from_f32(value(i + seed)))
                .collect(),
        ),
        _ => TensorData::F32((0..n).map(|i| value(i + seed)).collect()),
    };
    type Build = fn(&smelt::frontend::Tensor, &smelt::frontend::Tensor) -> smelt::frontend::Tensor;
    let chain: Build = |x, _| {
        let h = x.mul(1.5).unwrap().add(0.5).unwrap().tanh().unwrap();
        let h = h.mul(2.0).unwrap().sub(0.25).unwrap().relu().unwrap();
        h.mul(x).unwrap().add(x).unwrap()
    };
    let gelu: Build = |x, r| {
        let g = x.add(0.25).unwrap().gelu(GeluApproximation::None).unwrap();
        g.add(r).unwrap()
    };
    let kept: Build = |x, _| {
        let e = x.mul(0.25).unwrap().exp().unwrap();
        e.sub(1.0).unwrap().tanh().unwrap().mul(&e).unwrap()
    };
    let gelu_tanh: Build = |x, r| x.gelu(GeluApproximation::Tanh).unwrap().mul(r).unwrap();
    let erf: Build = |x, _| x.erf().unwrap().add(x).unwrap();
    let softmax: Build = |x, r| x.add(r).unwrap().softmax(-1).unwrap();
    let two: Build = |x, r| x.tanh().unwrap().add(r.erf().unwrap()).unwrap();
    // (what, dtype, shape, graph, scratch arrays when split)
    let cases: [(&str, DType, Vec<usize>, Build, usize); 10] = [
        ("chain", DType::F32, vec![1000], chain, 2),
        ("chain", DType::F32, vec![4, 1 << 20], chain, 2),
        ("gelu", DType::F32, vec![3, 700], gelu, 2),
        ("gelu", DType::F32, vec![65, 768], gelu, 2),
        ("kept exp", DType::F32, vec![7, 300], kept, 3),
        ("gelu tanh", DType::F32, vec![2, 1300], gelu_tanh, 2),
        ("erf", DType::F16, vec![5, 333], erf, 2),
        ("erf", DType::BF16, vec![2, 600], erf, 2),
        ("softmax", DType::F32, vec![9, 700], softmax, 0),
        ("tanh and erf", DType::F32, vec![3, 531], two, 2),
    ];
    for (what, d, shape, build, arrays) in cases {
        let numel: usize = shape.iter().product();
        let t = Tracer::new();
        let x = t.input("x", d, shape.clone()).unwrap();
        let r = t.input("r", d, shape.clone()).unwrap();
        t.output("y", &build(&x, &r)).unwrap();
        let graph = t.finish().unwrap();
        let inputs = HashMap::from([
            (
                "x".to_string(),
                HostTensor::new(shape.clone(), data(d, numel, 0)).unwrap(),
            ),
            (
                "r".to_string(),
                HostTensor::new(shape.clone(), data(d, numel, 40)).unwrap(),
            ),
        ]);
        let oracle = eval(&graph, &inputs).unwrap().remove(0).1;
        let mut outputs = Vec::new();
        use ByCpu::{Off, On};
        for (fission, loads) in [(Off, Off), (On, Off), (Off, On), (On, On)] {
            let options = Options {
                device: Device::Cpu,
                loop_fission: fission,
                constant_loads: loads,
                ..Options::default()
            };
            let jit = options.jit_options();
            assert_eq!((jit.loop_fission, jit.constant_loads), (fission, loads));
            let program = smelt::emit::lower(&graph, &options).unwrap();
            let (ir, _) = smelt_codegen::llvm::program_listing(&program, &jit).unwrap();
            let how = format!("{what} {d} {shape:?} fission {fission}, constant loads {loads}");
            // Per kernel function: a streaming kernel has a plain-store twin.
            let scratch = ir.matches("alloca [256 x float]").count();
            assert!(
                if fission == On && arrays > 0 {
                    scratch > 0 && scratch % arrays == 0
                } else {
                    scratch == 0
                },
                "{how}: {scratch} scratch arrays"
            );
            let globals = ir.matches(" global float ").count();
            assert_eq!(
                globals > 0,
                loads == On,
                "{how}: {globals} constant globals"
            );
            let compiled = compile_with(&graph, options).unwrap();
            let fresh = compiled.run(&inputs).unwrap().get("y").unwrap().clone();
            let mut into = vec![HostTensor::zeros(d, shape.clone())];
            compiled.run_into(&inputs, &mut into).unwrap();
            outputs.push((how.clone(), fresh));
            outputs.push((how, into.remove(0)));
        }
        let (_, first) = &outputs[0];
        for (what, got) in &outputs {
            for i in 0..numel {
                let (g, b) = (got.data().get_f64(i), first.data().get_f64(i));
                assert_eq!(g.to_bits(), b.to_bits(), "{what}: element {i}");
                let w = oracle.data().get_f64(i);
                let close = (g.is_nan() && w.is_nan())
                    || g == w
                    || (g - w).abs() <= 2e-6 * w.abs().max(1.0) + f64::from(f32::EPSILON);
                let close = close || (d != DType::F32 && (g - w).abs() <= 1e-2 * w.abs().max(1.0));
                assert!(close, "{what}: element {i} is {g}, the interpreter's {w}");
            }
        }
    }
}

/// Row values expanded explicitly over the reduced axes (softmax over the last axis and a
/// layer_norm over a middle one, each `keepdim` reduction expanded to the input's shape
/// before it is used) fuse into one row kernel, as the same graphs with implicit
/// broadcasting do, and give the same bits as those; both agree with the reference
/// interpreter.
#[test]
fn row_values_expanded_explicitly_fuse_as_broadcasts() {
    use smelt::frontend::{Tensor, Tracer};
    use smelt::ir::interp::eval;
    use smelt::ir::DType;
    let softmax = |x: &Tensor, expand: bool| {
        let shape: Vec<i64> = vec![6, 19, 45];
        let widen = |v: Tensor| if expand { v.expand(&shape).unwrap() } else { v };
        let m = widen(x.max(&[-1], true).unwrap());
        let e = x.sub(&m).unwrap().exp().unwrap();
        let s = widen(e.sum(&[-1], true).unwrap());
        e.div(&s).unwrap()
    };
    let layer_norm = |x: &Tensor, expand: bool| {
        let shape: Vec<i64> = vec![6, 19, 45];
        let widen = |v: Tensor| if expand { v.expand(&shape).unwrap() } else { v };
        let d = x.sub(widen(x.mean(&[1], true).unwrap())).unwrap();
        let var = d.mul(&d).unwrap().mean(&[1], true).unwrap();
        let r = var.add(1e-5).unwrap().rsqrt().unwrap();
        d.mul(widen(r)).unwrap()
    };
    let value = |i: usize| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 4.0;
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([6, 19, 45], (0..6 * 19 * 45).map(value).collect()).unwrap(),
    )]);
    type Build = fn(&Tensor, bool) -> Tensor;
    for (what, build) in [("softmax", softmax as Build), ("layer_norm", layer_norm)] {
        let mut got = Vec::new();
        for expand in [true, false] {
            let t = Tracer::new();
            let x = t.input("x", DType::F32, [6, 19, 45]).unwrap();
            t.output("y", &build(&x, expand)).unwrap();
            let graph = t.finish().unwrap();
            let compiled = smelt::compile(&graph).unwrap();
            let plan = &compiled.optimized().plan;
            assert_eq!(plan.kernels.len(), 1, "{what}, expand {expand}: {plan}");
            let y = compiled
                .run(&inputs)
                .unwrap()
                .get("y")
                .unwrap()
                .to_f32_vec();
            let want = eval(&graph, &inputs).unwrap().remove(0).1.to_f32_vec();
            for (i, (&g, &w)) in y.iter().zip(&want).enumerate() {
                let ok = (g - w).abs() <= 1e-5 * w.abs().max(1.0);
                assert!(
                    ok,
                    "{what}, expand {expand}: element {i} is {g}, the interpreter's {w}"
                );
            }
            got.push(y);
        }
        let same = got[0]
            .iter()
            .zip(&got[1])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what}: explicit expands changed a value");
    }
}

/// The expanded row value may itself be a kernel output: each element of the output stores its
/// own row's value (the plan found by `fusion_props` that the kernel oracle first rejected).
#[test]
fn an_expanded_row_value_stored_as_an_output_is_its_rows_value_everywhere() {
    use smelt::frontend::Tracer;
    use smelt::ir::interp::eval;
    use smelt::ir::DType;
    let shape: Vec<i64> = vec![3, 4, 5];
    let value = |i: usize| ((i * 7919 % 61) as f32 - 30.0) / 8.0;
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([3, 4, 5], (0..60).map(value).collect()).unwrap(),
    )]);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [3, 4, 5]).unwrap();
    let at = x.argmax(0, true).unwrap().expand(&shape).unwrap();
    let top = x.max(&[0], true).unwrap().expand(&shape).unwrap();
    t.output("at", &at).unwrap();
    t.output("gap", &x.sub(&top).unwrap()).unwrap();
    t.output("top", &top).unwrap();
    let graph = t.finish().unwrap();
    let compiled = smelt::compile(&graph).unwrap();
    let plan = &compiled.optimized().plan;
    // Each expand is stored by its reduction's row kernel, not copied out by a kernel of its own.
    for k in &plan.kernels {
        let expands = k.ops.iter().any(|&(_, name)| name == "expand");
        assert!(!expands || !k.reduce_axes.is_empty(), "{plan}");
    }
    let stored = plan
        .kernels
        .iter()
        .filter(|k| k.ops.iter().any(|&(_, name)| name == "expand"));
    assert_eq!(stored.count(), 2, "{plan}");
    let got = compiled.run(&inputs).unwrap();
    for (name, want) in eval(&graph, &inputs).unwrap() {
        assert_eq!(got.get(&name).unwrap(), &want, "output {name}");
    }
}

/// Reductions of one tensor over the same rows are one kernel writing every row value:
/// `torch.max(x, 1)` (values and indices), `torch.aminmax` and `torch.var_mean` (the variance
/// reads the mean, which is also an output), all over `x`'s last axis, reading `x` once.
/// Values have ties (13 levels), so `argmax`/`argmin` must return the first index, as the
/// interpreter and PyTorch do.
#[test]
fn sibling_reductions_over_the_same_rows_are_one_kernel() {
    use smelt::frontend::Tracer;
    use smelt::ir::interp::eval;
    use smelt::ir::DType;
    let (rows, cols) = (37, 301);
    let value = |i: usize| (i * 7919 % 13) as f32 * 0.75 - 4.0;
    let inputs = HashMap::from([(
        "x".to_string(),
        HostTensor::from_f32([rows, cols], (0..rows * cols).map(value).collect()).unwrap(),
    )]);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [rows, cols]).unwrap();
    let mean = x.mean(&[1], true).unwrap();
    let d = x.sub(&mean).unwrap();
    let var = d.mul(&d).unwrap().mean(&[1], true).unwrap();
    t.output("max", &x.max(&[1], false).unwrap()).unwrap();
    t.output("argmax", &x.argmax(1, false).unwrap()).unwrap();
    t.output("min", &x.min(&[1], false).unwrap()).unwrap();
    t.output("argmin", &x.argmin(1, false).unwrap()).unwrap();
    t.output("mean", &mean).unwrap();
    t.output("var", &var).unwrap();
    let graph = t.finish().unwrap();
    let compiled = smelt::compile(&graph).unwrap();
    let plan = &compiled.optimized().plan;
    assert_eq!(plan.kernels.len(), 1, "{plan}");
    assert_eq!(plan.kernels[0].outputs.len(), 6, "{plan}");
    assert_eq!(plan.bytes_read(), (rows * cols * 4) as u64, "{plan}");
    let got = compiled.run(&inputs).unwrap();
    for (name, want) in eval(&graph, &inputs).unwrap() {
        let g = got.get(&name).unwrap();
        if name == "mean" || name == "var" {
            // f32 accumulators here, f64 in the interpreter.
            for (a, b) in g.to_f32_vec().iter().zip(want.to_f32_vec()) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{name}: {a} vs {b}"
                );
            }
        } else {
            assert_eq!(g, &want, "output {name}");
        }
    }
}

/// `argmax`/`argmin` over rows long enough for the CPU's two-pass form (the extreme, then the
/// first index holding it) give the interpreter's indices: ties (first index), `-0.0` next to
/// `+0.0` (equal), NaN (the first NaN), infinities, in f32 and f64, over rows whose length is
/// and is not a multiple of the vector width, along the last axis and along the first.
#[test]
fn long_arg_reductions_find_the_first_extreme_and_the_first_nan() {
    use smelt::frontend::Tracer;
    use smelt::ir::interp::eval;
    use smelt::ir::{DType, TensorData};
    for (rows, cols) in [(9, 32), (7, 301), (5, 1000)] {
        // Row r: small integers (ties), signed zeros, and by row: a NaN or two, an infinity.
        let mut v: Vec<f64> = (0..rows * cols)
            .map(|i| ((i * 7919 % 11) as f64) - 5.0)
            .collect();
        for r in 0..rows {
            let row = &mut v[r * cols..(r + 1) * cols];
            match r % 5 {
                0 => row
                    .iter_mut()
                    .for_each(|x| *x = if *x > 0.0 { 0.0 } else { -0.0 }),
                1 => {
                    row[cols / 3] = f64::NAN;
                    row[cols - 1] = f64::NAN;
                }
                2 => row[cols - 2] = f64::INFINITY,
                3 => row[1] = f64::NEG_INFINITY,
                _ => {}
            }
        }
        for dtype in [DType::F32, DType::F64] {
            let data = match dtype {
                DType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
                _ => TensorData::F64(v.clone()),
            };
            let x_t = HostTensor::new(vec![rows, cols], data).unwrap();
            let inputs = HashMap::from([("x".to_string(), x_t)]);
            let t = Tracer::new();
            let x = t.input("x", dtype, [rows, cols]).unwrap();
            t.output("amax", &x.argmax(-1, false).unwrap()).unwrap();
            t.output("amin", &x.argmin(-1, true).unwrap()).unwrap();
            t.output("cmax", &x.argmax(0, false).unwrap()).unwrap();
            let graph = t.finish().unwrap();
            let got = smelt::compile(&graph).unwrap().run(&inputs).unwrap();
            for (name, want) in eval(&graph, &inputs).unwrap() {
                assert_eq!(
                    got.get(&name).unwrap(),
                    &want,
                    "{rows}x{cols} {dtype:?}: {name}"
                );
            }
        }
    }
}
