//! Built-in models, traced with the frontend: what `smelt demo` compiles and runs.

use crate::{compile_with, Device, Options, Result};
use smelt_frontend::{nn, GeluApproximation, Tensor, Tracer};
use smelt_ir::{DType, Graph, HostTensor};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Sizes of a BERT-style encoder layer (post-norm, as in BERT).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EncoderConfig {
    pub seq: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub eps: f64,
}

impl EncoderConfig {
    /// BERT-base: hidden 768, 12 heads, feed-forward 3072, layer-norm eps 1e-12.
    pub fn bert_base(seq: usize) -> EncoderConfig {
        EncoderConfig {
            seq,
            hidden: 768,
            heads: 12,
            ffn: 3072,
            eps: 1e-12,
        }
    }

    /// Parameter names and shapes, in the order the graph declares them. Linear weights are
    /// `[out, in]` as in `torch.nn.Linear`.
    pub fn params(&self) -> Vec<(&'static str, Vec<usize>)> {
        let (h, f) = (self.hidden, self.ffn);
        vec![
            ("wq", vec![h, h]),
            ("bq", vec![h]),
            ("wk", vec![h, h]),
            ("bk", vec![h]),
            ("wv", vec![h, h]),
            ("bv", vec![h]),
            ("wo", vec![h, h]),
            ("bo", vec![h]),
            ("ln1_w", vec![h]),
            ("ln1_b", vec![h]),
            ("w1", vec![f, h]),
            ("b1", vec![f]),
            ("w2", vec![h, f]),
            ("b2", vec![h]),
            ("ln2_w", vec![h]),
            ("ln2_b", vec![h]),
        ]
    }
}

/// One encoder layer: multi-head self-attention, residual, layer_norm, GELU (erf) MLP,
/// residual, layer_norm. Input `x: f32[seq, hidden]`, output `y` of the same type.
pub fn encoder_layer(cfg: &EncoderConfig) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [cfg.seq, cfg.hidden])?;
    let y = encoder_block(&t, &x, "", cfg, None)?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}

/// Traces one encoder layer on `x: f32[seq, hidden]`, declaring its parameters as
/// `{prefix}{name}` for the names of [`EncoderConfig::params`]. `mask`, if given, is a bool
/// `[seq]` key mask (true = attend).
pub fn encoder_block(
    t: &Tracer,
    x: &Tensor,
    prefix: &str,
    cfg: &EncoderConfig,
    mask: Option<&Tensor>,
) -> Result<Tensor> {
    let mut p: HashMap<&str, Tensor> = HashMap::new();
    for (name, shape) in cfg.params() {
        p.insert(name, t.param(format!("{prefix}{name}"), DType::F32, shape)?);
    }
    let (s, h, d) = (
        cfg.seq as i64,
        cfg.heads as i64,
        (cfg.hidden / cfg.heads) as i64,
    );
    // [seq, hidden] -> [heads, seq, head_dim]
    let split = |y: Tensor| y.reshape(&[s, h, d])?.permute(&[1, 0, 2]);
    let q = split(nn::linear(x, &p["wq"], Some(&p["bq"]))?)?;
    let k = split(nn::linear(x, &p["wk"], Some(&p["bk"]))?)?;
    let v = split(nn::linear(x, &p["wv"], Some(&p["bv"]))?)?;
    let a = nn::scaled_dot_product_attention(&q, &k, &v, mask, false, None)?;
    let a = a.permute(&[1, 0, 2])?.reshape(&[s, -1])?;
    let a = nn::linear(&a, &p["wo"], Some(&p["bo"]))?;
    let hn = nn::layer_norm(
        &x.add(&a)?,
        &[cfg.hidden],
        Some(&p["ln1_w"]),
        Some(&p["ln1_b"]),
        cfg.eps,
    )?;
    let f = nn::linear(&hn, &p["w1"], Some(&p["b1"]))?.gelu(GeluApproximation::None)?;
    let f = nn::linear(&f, &p["w2"], Some(&p["b2"]))?;
    Ok(nn::layer_norm(
        &hn.add(&f)?,
        &[cfg.hidden],
        Some(&p["ln2_w"]),
        Some(&p["ln2_b"]),
        cfg.eps,
    )?)
}

/// A BERT-base forward pass (batch 1): word, position and token-type embeddings, layer_norm,
/// `layers` encoder layers with a key mask, and the last hidden state as output `hidden`.
/// Inputs: `input_ids: i64[seq]`, `token_type_ids: i64[seq]`, `attention_mask: bool[seq]`.
/// This is the 1,000+-node graph the optimiser's compile-time budget is measured on.
pub fn bert_base(seq: usize, layers: usize) -> Result<Graph> {
    const VOCAB: usize = 30522;
    const MAX_POS: usize = 512;
    let cfg = EncoderConfig::bert_base(seq);
    let t = Tracer::new();
    let ids = t.input("input_ids", DType::I64, [seq])?;
    let types = t.input("token_type_ids", DType::I64, [seq])?;
    let mask = t.input("attention_mask", DType::Bool, [seq])?;
    let word = t.param("embeddings.word", DType::F32, [VOCAB, cfg.hidden])?;
    let pos = t.param("embeddings.position", DType::F32, [MAX_POS, cfg.hidden])?;
    let typ = t.param("embeddings.token_type", DType::F32, [2, cfg.hidden])?;
    let ln_w = t.param("embeddings.ln_w", DType::F32, [cfg.hidden])?;
    let ln_b = t.param("embeddings.ln_b", DType::F32, [cfg.hidden])?;
    let e = nn::embedding(&ids, &word)?
        .add(&pos.slice(0, 0..seq as i64)?)?
        .add(&nn::embedding(&types, &typ)?)?;
    let mut x = nn::layer_norm(&e, &[cfg.hidden], Some(&ln_w), Some(&ln_b), cfg.eps)?;
    for i in 0..layers {
        x = encoder_block(&t, &x, &format!("layer{i}."), &cfg, Some(&mask))?;
    }
    t.output("hidden", &x)?;
    Ok(t.finish()?)
}

/// Deterministic pseudo-random f32 tensors (SplitMix64 → uniform in [-scale, scale)), so the demo
/// is reproducible without a random-number crate in the library.
pub fn uniform(shape: &[usize], scale: f32, seed: u64) -> HostTensor {
    let mut state = seed;
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let unit = (z >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            (unit * 2.0 - 1.0) * scale
        })
        .collect();
    HostTensor::from_f32(shape.to_vec(), data).expect("numel matches shape")
}

/// Random weights for `cfg` (layer-norm weights 1 and biases 0, other biases small).
pub fn encoder_weights(cfg: &EncoderConfig, seed: u64) -> HashMap<String, HostTensor> {
    cfg.params()
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let t = if name.starts_with("ln") {
                // Layer-norm weight 1 and bias 0, so the output rows have mean 0, variance 1.
                let value = if name.ends_with("_w") { 1.0 } else { 0.0 };
                HostTensor::from_f32(shape.clone(), vec![value; shape[0]]).expect("1-D")
            } else {
                let scale = if shape.len() == 2 { 0.05 } else { 0.02 };
                uniform(&shape, scale, seed.wrapping_add(i as u64))
            };
            (name.to_string(), t)
        })
        .collect()
}

/// Median wall times of `runs` calls each of `a` and `b` (after one warm-up call each), called
/// alternately (a, b, b, a, a, b, …: every other pair in reverse, as `smelt bench` does) so
/// that a change in the machine's load affects both alike.
fn median_times<E>(
    runs: usize,
    mut a: impl FnMut() -> Result<(), E>,
    mut b: impl FnMut() -> Result<(), E>,
) -> Result<(Duration, Duration), E> {
    a()?;
    b()?;
    let (mut ta, mut tb) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for run in 0..runs {
        for second in [false, true] {
            let start = Instant::now();
            if second == run.is_multiple_of(2) {
                b()?;
                tb.push(start.elapsed());
            } else {
                a()?;
                ta.push(start.elapsed());
            }
        }
    }
    ta.sort();
    tb.sort();
    Ok((ta[ta.len() / 2], tb[tb.len() / 2]))
}

/// The largest `|a - b| / (atol + rtol |b|)` over two outputs (≤ 1 means within tolerance).
fn worst_error(a: &HostTensor, b: &HostTensor, rtol: f64, atol: f64) -> f64 {
    (0..a.numel())
        .map(|i| {
            let (x, y) = (a.data().get_f64(i), b.data().get_f64(i));
            if x.is_nan() && y.is_nan() {
                0.0
            } else {
                (x - y).abs() / (atol + rtol * y.abs())
            }
        })
        .fold(0.0, f64::max)
}

/// Compiles the BERT-base encoder layer for `device` fused and unfused, runs both, checks the
/// fused output against the reference interpreter, and describes what happened.
pub fn run_demo(device: Device, seq: usize) -> Result<String> {
    let cfg = EncoderConfig::bert_base(seq);
    let graph = encoder_layer(&cfg)?;
    let weights = encoder_weights(&cfg, 1);
    let compile = |device: Device, no_fuse: bool| {
        let start = Instant::now();
        let c = compile_with(
            &graph,
            Options {
                device,
                no_fuse,
                params: weights.clone(),
                ..Options::default()
            },
        );
        c.map(|c| (c, start.elapsed()))
    };
    let (fused, fused_compile) = compile(device, false)?;
    let (unfused, unfused_compile) = compile(fused.device(), true)?;
    let inputs = HashMap::from([("x".to_string(), uniform(&[cfg.seq, cfg.hidden], 1.0, 42))]);
    let mut out = vec![HostTensor::zeros(DType::F32, [cfg.seq, cfg.hidden])];
    let mut out_unfused = vec![HostTensor::zeros(DType::F32, [cfg.seq, cfg.hidden])];
    let runs = 21;
    let (fused_time, unfused_time) = median_times(
        runs,
        || fused.run_into(&inputs, &mut out),
        || unfused.run_into(&inputs, &mut out_unfused),
    )?;
    let y = out[0].clone();
    let reference = compile(Device::Reference, true)?.0.run(&inputs)?;
    let want = reference.get("y").expect("the graph has output y");
    // f32 through two GEMM chains of length 768 and 3072 and two layer norms: a reduction
    // tolerance (docs/semantics.md), not torch.testing's elementwise one.
    let err = worst_error(&y, want, 1e-3, 1e-4);
    let plan = &fused.optimized().plan;

    let mut s = String::new();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let _ = writeln!(
        s,
        "model:   BERT-base encoder layer (seq {}, hidden {}, {} heads, ffn {}), {} primitive ops",
        cfg.seq,
        cfg.hidden,
        cfg.heads,
        cfg.ffn,
        graph.len()
    );
    // A CUDA device by name: the fake driver's (scripts/build-fake-cuda.sh) says it is none.
    let (shown, not_a_gpu) = match fused.device() {
        Device::Cuda(n) => match smelt_runtime::cuda::cuda_device(n) {
            Ok(info) => (
                format!("cuda:{n}, {} ({})", info.name, info.arch),
                info.is_fake(),
            ),
            Err(_) => (format!("cuda:{n}"), false),
        },
        d => (d.to_string(), d == Device::CudaEmulated),
    };
    let _ = writeln!(s, "device:  {shown} (asked for {device})");
    let _ = writeln!(
        s,
        "plan:    {} kernels fused, {} unfused",
        plan.kernel_count(),
        unfused.optimized().plan.kernel_count()
    );
    let _ = writeln!(
        s,
        "compile: fused {:.1} ms, unfused {:.1} ms",
        ms(fused_compile),
        ms(unfused_compile)
    );
    let _ = writeln!(
        s,
        "run:     fused {:.2} ms, unfused {:.2} ms (median of {runs} each, alternating, run_into): {:.2}x",
        ms(fused_time),
        ms(unfused_time),
        unfused_time.as_secs_f64() / fused_time.as_secs_f64().max(1e-12)
    );
    if not_a_gpu {
        let _ = writeln!(
            s,
            "         (the CUDA kernels on a CPU emulator: these times say nothing about a GPU)"
        );
    }
    let verdict = if err <= 1.0 {
        "matches"
    } else {
        "DOES NOT match"
    };
    let _ = writeln!(
        s,
        "checked: fused output {verdict} the reference interpreter \
         (worst error {err:.3} of tolerance rtol 1e-3, atol 1e-4)"
    );
    Ok(s)
}
