//! The benchmark cases of issue 6, then cases added since (`max-min-65536x768`: sibling
//! reductions in one kernel): one list shared by `smelt bench`, `cargo bench --bench cases`
//! and (mirrored by hand) `benches/peers/peers.py`.
//!
//! Every case's `graph` field is the PyTorch expression the graph is traced from; the Python
//! mirror builds the same expression with the same shapes. Inputs are read at run time,
//! parameters are bound at compile time (as model weights are); both are deterministic
//! pseudo-random f32 tensors ([`crate::models::uniform`]).

use crate::models::{encoder_layer, uniform, EncoderConfig};
use crate::{Compiled, Error, Result};
use smelt_frontend::{nn, GeluApproximation, Tracer};
use smelt_ir::{DType, Graph, HostTensor, Signature};
use std::collections::HashMap;

/// Full shapes (the issue's) or small ones (`--quick`, tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Full,
    Quick,
}

/// One benchmark case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The name `--case` selects (also the criterion group).
    pub name: &'static str,
    /// What it measures, in words.
    pub description: &'static str,
    /// The traced program as PyTorch code (what `peers.py` runs).
    pub graph: &'static str,
    /// What each entry of the dims means, e.g. `rows x cols`.
    pub dims_label: &'static str,
    /// Dims of the full case (the issue's shapes).
    pub full: &'static [usize],
    /// Dims of the quick case.
    pub quick: &'static [usize],
    build: fn(&[usize]) -> Result<Graph>,
}

impl Case {
    /// The dims at `size`.
    pub fn dims(&self, size: Size) -> &'static [usize] {
        match size {
            Size::Full => self.full,
            Size::Quick => self.quick,
        }
    }

    /// The shape as printed, e.g. `65536x768 (rows x cols)`.
    pub fn shape(&self, size: Size) -> String {
        let dims: Vec<String> = self.dims(size).iter().map(|d| d.to_string()).collect();
        format!("{} ({})", dims.join("x"), self.dims_label)
    }

    /// Traces the case's graph at `size`.
    pub fn build(&self, size: Size) -> Result<Graph> {
        (self.build)(self.dims(size))
    }
}

/// Every case (issue 6's, then those added since), in the order they are run.
pub fn all() -> &'static [Case] {
    CASES
}

/// The cases `patterns` select: a pattern equal to a case name selects that case, otherwise
/// every case whose name contains it. No pattern selects every case. A pattern that selects
/// nothing is an error listing the known names.
pub fn select(patterns: &[String]) -> Result<Vec<Case>> {
    if patterns.is_empty() {
        return Ok(CASES.to_vec());
    }
    let mut chosen: Vec<Case> = Vec::new();
    for p in patterns {
        let exact: Vec<&Case> = CASES.iter().filter(|c| c.name == p).collect();
        let hits = if exact.is_empty() {
            CASES
                .iter()
                .filter(|c| c.name.contains(p.as_str()))
                .collect()
        } else {
            exact
        };
        if hits.is_empty() {
            let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
            return Err(Error::Usage(format!(
                "unknown benchmark case {p:?}; the cases are: {}",
                names.join(", ")
            )));
        }
        for c in hits {
            if !chosen.iter().any(|k| k.name == c.name) {
                chosen.push(*c);
            }
        }
    }
    Ok(chosen)
}

/// Deterministic inputs (read at run time) and parameters (bound at compile time) for
/// `graph`: uniform in [-1, 1) for inputs, [-1/√fan_in, 1/√fan_in) for matrices, [-0.1, 0.1)
/// for vectors. Only f32 bindings are supported.
pub fn data(
    graph: &Graph,
    seed: u64,
) -> Result<(HashMap<String, HostTensor>, HashMap<String, HostTensor>)> {
    let (mut inputs, mut params) = (HashMap::new(), HashMap::new());
    for (i, b) in Signature::of(graph).0.into_iter().enumerate() {
        if b.ty.dtype != DType::F32 {
            return Err(Error::Usage(format!(
                "benchmark data: {:?} is {}, only f32 is generated",
                b.name, b.ty
            )));
        }
        let dims = b.ty.shape.dims().to_vec();
        let scale = match (b.is_param, dims.as_slice()) {
            (false, _) => 1.0,
            (true, [.., fan_in]) if dims.len() >= 2 => 1.0 / (*fan_in.max(&1) as f32).sqrt(),
            (true, _) => 0.1,
        };
        let t = uniform(&dims, scale, seed.wrapping_mul(1000).wrapping_add(i as u64));
        if b.is_param {
            params.insert(b.name, t);
        } else {
            inputs.insert(b.name, t);
        }
    }
    Ok((inputs, params))
}

/// The fewest bytes any implementation must move: every input and parameter read once and
/// every output written once (constants folded into the code are not counted).
pub fn min_bytes(graph: &Graph) -> u64 {
    let read: usize = Signature::of(graph)
        .0
        .iter()
        .map(|b| b.ty.shape.numel() * b.ty.dtype.size_bytes())
        .sum();
    let written: usize = graph
        .outputs()
        .iter()
        .map(|(_, id)| {
            let ty = graph.ty(*id);
            ty.shape.numel() * ty.dtype.size_bytes()
        })
        .sum();
    (read + written) as u64
}

/// Zeroed tensors of the shapes and dtypes of `compiled`'s outputs, for `run_into`.
pub fn zeroed_outputs(compiled: &Compiled) -> Vec<HostTensor> {
    let g = compiled.graph();
    g.outputs()
        .iter()
        .map(|(_, id)| {
            let ty = g.ty(*id);
            HostTensor::zeros(ty.dtype, ty.shape.clone())
        })
        .collect()
}

static CASES: &[Case] = &[
    Case {
        name: "elementwise-chain",
        description: "8-op elementwise chain over 16M floats",
        graph: "t = torch.tanh(x * 1.5 + 0.5); y = torch.relu(t * 2.0 - 0.25) * x + x",
        dims_label: "n",
        full: &[1 << 24],
        quick: &[4096],
        build: elementwise_chain,
    },
    Case {
        name: "bias-gelu-residual-128x3072",
        description: "bias add, GELU (erf), residual add",
        graph: "y = F.gelu(x + b) + r  # x, r: [rows, cols] inputs, b: [cols] param",
        dims_label: "rows x cols",
        full: &[128, 3072],
        quick: &[8, 96],
        build: bias_gelu_residual,
    },
    Case {
        name: "bias-gelu-residual-65536x768",
        description: "bias add, GELU (erf), residual add",
        graph: "y = F.gelu(x + b) + r  # x, r: [rows, cols] inputs, b: [cols] param",
        dims_label: "rows x cols",
        full: &[65536, 768],
        quick: &[64, 24],
        build: bias_gelu_residual,
    },
    Case {
        name: "add-layernorm-128x768",
        description: "residual add then layer_norm over the last axis",
        graph: "y = F.layer_norm(x + r, (cols,), w, b, eps=1e-5)  # w, b: [cols] params",
        dims_label: "rows x cols",
        full: &[128, 768],
        quick: &[8, 48],
        build: add_layer_norm,
    },
    Case {
        name: "add-layernorm-65536x768",
        description: "residual add then layer_norm over the last axis",
        graph: "y = F.layer_norm(x + r, (cols,), w, b, eps=1e-5)  # w, b: [cols] params",
        dims_label: "rows x cols",
        full: &[65536, 768],
        quick: &[64, 24],
        build: add_layer_norm,
    },
    Case {
        name: "softmax-1536x128",
        description: "softmax over the last axis",
        graph: "y = torch.softmax(x, -1)",
        dims_label: "rows x cols",
        full: &[1536, 128],
        quick: &[12, 16],
        build: softmax,
    },
    Case {
        name: "softmax-65536x768",
        description: "softmax over the last axis",
        graph: "y = torch.softmax(x, -1)",
        dims_label: "rows x cols",
        full: &[65536, 768],
        quick: &[64, 24],
        build: softmax,
    },
    Case {
        name: "attention",
        description: "scaled dot-product attention, batch 1, no mask",
        graph: "y = F.scaled_dot_product_attention(q, k, v)  # q, k, v: [heads, seq, head_dim]",
        dims_label: "heads x seq x head_dim",
        full: &[12, 128, 64],
        quick: &[2, 8, 16],
        build: attention,
    },
    Case {
        name: "mlp",
        description: "transformer MLP block: linear, GELU (erf), linear",
        graph: "y = F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)  \
                # x: [tokens, hidden], w1: [ffn, hidden], w2: [hidden, ffn]",
        dims_label: "tokens x hidden x ffn",
        full: &[128, 768, 3072],
        quick: &[4, 32, 64],
        build: mlp,
    },
    Case {
        name: "bert-encoder-layer",
        description: "BERT-base encoder layer (post-norm), batch 1",
        graph: "smelt::models::encoder_layer: attention (q/k/v/o linears, 12 heads), \
                residual, layer_norm, linear-GELU-linear, residual, layer_norm (eps 1e-12)",
        dims_label: "seq x hidden x heads x ffn",
        full: &[128, 768, 12, 3072],
        quick: &[8, 64, 4, 128],
        build: bert_encoder_layer,
    },
    Case {
        name: "permute-add",
        description: "permute, add, permute back (layout changes around an add)",
        graph: "y = (x.permute(0, 2, 1, 3) + z).permute(0, 2, 1, 3)  \
                # x: [b, s, h, d], z: [b, h, s, d]",
        dims_label: "batch x seq x heads x head_dim",
        full: &[64, 128, 12, 64],
        quick: &[2, 4, 3, 8],
        build: permute_add,
    },
    // Added after issue 6's cases: reductions over the same rows are one kernel.
    Case {
        name: "max-min-65536x768",
        description: "row maximum and minimum with their indices (four reductions of one input)",
        graph: "mx, imx = x.max(-1); mn, imn = x.min(-1)",
        dims_label: "rows x cols",
        full: &[65536, 768],
        quick: &[64, 24],
        build: max_min,
    },
];

fn elementwise_chain(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0]])?;
    let h = x.mul(1.5)?.add(0.5)?.tanh()?;
    let y = h.mul(2.0)?.sub(0.25)?.relu()?.mul(&x)?.add(&x)?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}

fn bias_gelu_residual(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0], d[1]])?;
    let r = t.input("r", DType::F32, [d[0], d[1]])?;
    let b = t.param("b", DType::F32, [d[1]])?;
    let y = x.add(&b)?.gelu(GeluApproximation::None)?.add(&r)?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}

fn add_layer_norm(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0], d[1]])?;
    let r = t.input("r", DType::F32, [d[0], d[1]])?;
    let w = t.param("w", DType::F32, [d[1]])?;
    let b = t.param("b", DType::F32, [d[1]])?;
    let y = nn::layer_norm(&x.add(&r)?, &[d[1]], Some(&w), Some(&b), 1e-5)?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}

fn softmax(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0], d[1]])?;
    t.output("y", &x.softmax(-1)?)?;
    Ok(t.finish()?)
}

fn max_min(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0], d[1]])?;
    t.output("max", &x.max(&[-1], false)?)?;
    t.output("argmax", &x.argmax(-1, false)?)?;
    t.output("min", &x.min(&[-1], false)?)?;
    t.output("argmin", &x.argmin(-1, false)?)?;
    Ok(t.finish()?)
}

fn attention(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let q = t.input("q", DType::F32, [d[0], d[1], d[2]])?;
    let k = t.input("k", DType::F32, [d[0], d[1], d[2]])?;
    let v = t.input("v", DType::F32, [d[0], d[1], d[2]])?;
    let y = nn::scaled_dot_product_attention(&q, &k, &v, None, false, None)?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}

fn mlp(d: &[usize]) -> Result<Graph> {
    let (tokens, hidden, ffn) = (d[0], d[1], d[2]);
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [tokens, hidden])?;
    let w1 = t.param("w1", DType::F32, [ffn, hidden])?;
    let b1 = t.param("b1", DType::F32, [ffn])?;
    let w2 = t.param("w2", DType::F32, [hidden, ffn])?;
    let b2 = t.param("b2", DType::F32, [hidden])?;
    let h = nn::linear(&x, &w1, Some(&b1))?.gelu(GeluApproximation::None)?;
    t.output("y", &nn::linear(&h, &w2, Some(&b2))?)?;
    Ok(t.finish()?)
}

fn bert_encoder_layer(d: &[usize]) -> Result<Graph> {
    encoder_layer(&EncoderConfig {
        seq: d[0],
        hidden: d[1],
        heads: d[2],
        ffn: d[3],
        eps: 1e-12,
    })
}

fn permute_add(d: &[usize]) -> Result<Graph> {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [d[0], d[1], d[2], d[3]])?;
    let z = t.input("z", DType::F32, [d[0], d[2], d[1], d[3]])?;
    let y = x.permute(&[0, 2, 1, 3])?.add(&z)?.permute(&[0, 2, 1, 3])?;
    t.output("y", &y)?;
    Ok(t.finish()?)
}
