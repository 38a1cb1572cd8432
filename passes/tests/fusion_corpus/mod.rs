//! Graphs the fusion tests plan, traced with the frontend.

#![allow(dead_code)]

use smelt_frontend::{nn, DType, FrontendError, GeluApproximation, Graph, Tensor, Tracer};

type R<T> = Result<T, FrontendError>;

/// Eight elementwise ops on one input: one kernel.
pub fn chain8() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [64, 256])?;
    let y = x
        .mul(2.0)?
        .add(1.0)?
        .exp()?
        .neg()?
        .abs()?
        .sqrt()?
        .sub(3.0)?
        .relu()?;
    t.output("y", &y)?;
    t.finish()
}

/// `gelu(x + bias) + residual`: one kernel.
pub fn bias_gelu_residual() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 768])?;
    let b = t.param("b", DType::F32, [768])?;
    let r = t.input("r", DType::F32, [128, 768])?;
    let y = x.add(&b)?.gelu(GeluApproximation::None)?.add(&r)?;
    t.output("y", &y)?;
    t.finish()
}

pub fn softmax() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 512])?;
    t.output("y", &x.softmax(-1)?)?;
    t.finish()
}

pub fn layer_norm() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 768])?;
    let w = t.param("w", DType::F32, [768])?;
    let b = t.param("b", DType::F32, [768])?;
    t.output("y", &nn::layer_norm(&x, &[768], Some(&w), Some(&b), 1e-5)?)?;
    t.finish()
}

pub fn rms_norm() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 768])?;
    let w = t.param("w", DType::F32, [768])?;
    t.output("y", &nn::rms_norm(&x, &[768], Some(&w), Some(1e-6))?)?;
    t.finish()
}

pub fn residual_layer_norm() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 768])?;
    let r = t.input("r", DType::F32, [128, 768])?;
    let w = t.param("w", DType::F32, [768])?;
    let b = t.param("b", DType::F32, [768])?;
    let y = nn::layer_norm(&x.add(&r)?, &[768], Some(&w), Some(&b), 1e-5)?;
    t.output("y", &y)?;
    t.finish()
}

/// `linear -> gelu -> linear`: two GEMMs and two epilogue kernels.
pub fn mlp() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [128, 768])?;
    let w1 = t.param("w1", DType::F32, [3072, 768])?;
    let b1 = t.param("b1", DType::F32, [3072])?;
    let w2 = t.param("w2", DType::F32, [768, 3072])?;
    let b2 = t.param("b2", DType::F32, [768])?;
    let h = nn::linear(&x, &w1, Some(&b1))?.gelu(GeluApproximation::None)?;
    t.output("y", &nn::linear(&h, &w2, Some(&b2))?)?;
    t.finish()
}

/// `softmax(q @ kᵀ * scale + mask) @ v` for 12 heads.
pub fn attention() -> R<Graph> {
    let t = Tracer::new();
    let q = t.input("q", DType::F32, [12, 128, 64])?;
    let k = t.input("k", DType::F32, [12, 128, 64])?;
    let v = t.input("v", DType::F32, [12, 128, 64])?;
    let mask = t.input("mask", DType::F32, [128, 128])?;
    let y = nn::scaled_dot_product_attention(&q, &k, &v, Some(&mask), false, None)?;
    t.output("y", &y)?;
    t.finish()
}

/// `a @ bᵀ`: the transpose becomes a GEMM flag.
pub fn transposed_matmul() -> R<Graph> {
    let t = Tracer::new();
    let a = t.input("a", DType::F32, [64, 32])?;
    let b = t.input("b", DType::F32, [48, 32])?;
    t.output("y", &a.matmul(&b.transpose(0, 1)?)?)?;
    t.finish()
}

/// `h = x + y + z` read by three consumers (two elementwise, one reduction).
pub fn three_consumers() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [256, 256])?;
    let y = t.input("y", DType::F32, [256, 256])?;
    let z = t.input("z", DType::F32, [256, 256])?;
    let h = x.add(&y)?.add(&z)?;
    t.output("a", &h.exp()?)?;
    t.output("b", &h.mul(2.0)?)?;
    t.output("c", &h.sum(&[-1], false)?)?;
    t.finish()
}

/// `h = exp(x)` read by three consumers: recomputing it is cheaper than materialising it.
pub fn three_consumers_cheap() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [256, 256])?;
    let h = x.exp()?;
    t.output("a", &h.add(1.0)?)?;
    t.output("b", &h.mul(2.0)?)?;
    t.output("c", &h.sum(&[-1], false)?)?;
    t.finish()
}

/// Row statistics of one tensor over its last axis: `torch.max(x, -1)` (values and indices),
/// `torch.aminmax` and `torch.var_mean` (the variance reads the mean, also an output).
pub fn row_stats() -> R<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [256, 384])?;
    let mean = x.mean(&[-1], true)?;
    let d = x.sub(&mean)?;
    t.output("max", &x.max(&[-1], false)?)?;
    t.output("argmax", &x.argmax(-1, false)?)?;
    t.output("min", &x.min(&[-1], false)?)?;
    t.output("argmin", &x.argmin(-1, false)?)?;
    t.output("mean", &mean)?;
    t.output("var", &d.mul(&d)?.mean(&[-1], true)?)?;
    t.finish()
}

/// BERT-base sizes.
pub const SEQ: usize = 128;
pub const HIDDEN: usize = 768;
pub const HEADS: usize = 12;
pub const FFN: usize = 3072;

/// One post-norm BERT encoder layer on `x: f32[seq, hidden]` with a bool key mask `[seq]`.
pub fn encoder_block(t: &Tracer, x: &Tensor, mask: &Tensor, prefix: &str) -> R<Tensor> {
    let (h, f) = (HIDDEN, FFN);
    let p = |name: &str, shape: &[usize]| t.param(format!("{prefix}{name}"), DType::F32, shape);
    let (wq, bq) = (p("wq", &[h, h])?, p("bq", &[h])?);
    let (wk, bk) = (p("wk", &[h, h])?, p("bk", &[h])?);
    let (wv, bv) = (p("wv", &[h, h])?, p("bv", &[h])?);
    let (wo, bo) = (p("wo", &[h, h])?, p("bo", &[h])?);
    let (l1w, l1b) = (p("ln1_w", &[h])?, p("ln1_b", &[h])?);
    let (w1, b1) = (p("w1", &[f, h])?, p("b1", &[f])?);
    let (w2, b2) = (p("w2", &[h, f])?, p("b2", &[h])?);
    let (l2w, l2b) = (p("ln2_w", &[h])?, p("ln2_b", &[h])?);
    let (s, nh, d) = (SEQ as i64, HEADS as i64, (HIDDEN / HEADS) as i64);
    let split = |y: Tensor| y.reshape(&[s, nh, d])?.permute(&[1, 0, 2]);
    let q = split(nn::linear(x, &wq, Some(&bq))?)?;
    let k = split(nn::linear(x, &wk, Some(&bk))?)?;
    let v = split(nn::linear(x, &wv, Some(&bv))?)?;
    let a = nn::scaled_dot_product_attention(&q, &k, &v, Some(mask), false, None)?;
    let a = a.permute(&[1, 0, 2])?.reshape(&[s, -1])?;
    let a = nn::linear(&a, &wo, Some(&bo))?;
    let hn = nn::layer_norm(&x.add(&a)?, &[h], Some(&l1w), Some(&l1b), 1e-12)?;
    let ff = nn::linear(&hn, &w1, Some(&b1))?.gelu(GeluApproximation::None)?;
    let ff = nn::linear(&ff, &w2, Some(&b2))?;
    nn::layer_norm(&hn.add(&ff)?, &[h], Some(&l2w), Some(&l2b), 1e-12)
}

/// `layers` BERT-base encoder layers.
pub fn bert(layers: usize) -> R<Graph> {
    let t = Tracer::new();
    let mut x = t.input("x", DType::F32, [SEQ, HIDDEN])?;
    let mask = t.input("mask", DType::Bool, [SEQ])?;
    for i in 0..layers {
        x = encoder_block(&t, &x, &mask, &format!("layer{i}."))?;
    }
    t.output("y", &x)?;
    t.finish()
}

/// A BERT-base forward pass (batch 1): embeddings (word, position, token type), layer_norm and
/// `layers` encoder layers.
pub fn bert_base(layers: usize) -> R<Graph> {
    let t = Tracer::new();
    let ids = t.input("input_ids", DType::I64, [SEQ])?;
    let types = t.input("token_type_ids", DType::I64, [SEQ])?;
    let mask = t.input("attention_mask", DType::Bool, [SEQ])?;
    let word = t.param("embeddings.word", DType::F32, [30522, HIDDEN])?;
    let pos = t.param("embeddings.position", DType::F32, [512, HIDDEN])?;
    let typ = t.param("embeddings.token_type", DType::F32, [2, HIDDEN])?;
    let ln_w = t.param("embeddings.ln_w", DType::F32, [HIDDEN])?;
    let ln_b = t.param("embeddings.ln_b", DType::F32, [HIDDEN])?;
    let e = nn::embedding(&ids, &word)?
        .add(&pos.slice(0, 0..SEQ as i64)?)?
        .add(&nn::embedding(&types, &typ)?)?;
    let mut x = nn::layer_norm(&e, &[HIDDEN], Some(&ln_w), Some(&ln_b), 1e-12)?;
    for i in 0..layers {
        x = encoder_block(&t, &x, &mask, &format!("layer{i}."))?;
    }
    t.output("hidden", &x)?;
    t.finish()
}
