//! Built-in models, traced with the frontend: what `smelt demo` compiles and runs.

use crate::{compile_with, Device, Options, Outputs, Result};
use smelt_frontend::{nn, GeluApproximation, Tensor, Tracer};
use smelt_ir::{DType, Graph, HostTensor};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

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

/// Compiles the BERT-base encoder layer for `device`, runs it once, and describes what
/// happened.
pub fn run_demo(device: Device, seq: usize) -> Result<String> {
    let cfg = EncoderConfig::bert_base(seq);
    let start = Instant::now();
    let graph = encoder_layer(&cfg)?;
    let traced = start.elapsed();
    let start = Instant::now();
    let compiled = compile_with(
        &graph,
        Options {
            device,
            params: encoder_weights(&cfg, 1),
            ..Options::default()
        },
    )?;
    let compile_time = start.elapsed();
    let x = uniform(&[cfg.seq, cfg.hidden], 1.0, 42);
    let start = Instant::now();
    let out: Outputs = compiled.run(&HashMap::from([("x".to_string(), x)]))?;
    let run_time = start.elapsed();
    let y = out.get("y").expect("the graph has output y");
    let values = y.to_f32_vec();
    let finite = values.iter().all(|v| v.is_finite());
    // Each output row is layer-normed with weight 1 and bias 0: mean 0, variance 1.
    let rows = values.chunks(cfg.hidden);
    let worst_mean = rows
        .clone()
        .map(|r| (r.iter().sum::<f32>() / r.len() as f32).abs())
        .fold(0.0f32, f32::max);

    let mut s = String::new();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let _ = writeln!(
        s,
        "model:   BERT-base encoder layer (seq {}, hidden {}, {} heads, ffn {})",
        cfg.seq, cfg.hidden, cfg.heads, cfg.ffn
    );
    let _ = writeln!(s, "graph:   {} primitive ops", graph.len());
    let _ = writeln!(
        s,
        "device:  {} (asked for {device}); fused backends are not built yet, so this runs \
         op by op on the reference interpreter",
        compiled.device()
    );
    let _ = writeln!(
        s,
        "time:    trace {:.1} ms, compile {:.1} ms, run {:.1} ms",
        ms(traced),
        ms(compile_time),
        ms(run_time)
    );
    let _ = writeln!(
        s,
        "output:  y {}{}, all finite: {finite}, largest |row mean| {worst_mean:.2e} (layer_norm: ~0)",
        y.dtype(),
        y.shape()
    );
    let _ = writeln!(
        s,
        "checked: outputs against the reference interpreter: not applicable (ran on it)"
    );
    Ok(s)
}
