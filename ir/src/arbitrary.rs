//! proptest strategies for random well-formed graphs and for values of their inputs.
//!
//! Compiled only with the crate feature `arbitrary`. Used by the text round-trip tests and,
//! later, for differential fuzzing of backends against the reference interpreter, so every
//! generated graph is safe to *run* as well as well-typed:
//!
//! - gather / index_select indices are constants, always in range;
//! - integer `floor_div` / `remainder` divide by nonzero constants other than -1 (no division
//!   by zero, no `MIN / -1` overflow), integer `pow` raises to constant exponents in `0..=3`;
//! - every value has at most [`GenConfig::max_numel`] elements, ranks are 0–6.
//!
//! What a graph may still contain (and a backend must match the interpreter on): integer
//! overflow (wrapping), NaN, ±inf, ±0 and subnormal constants including NaNs with payloads,
//! casts of any dtype to any dtype (float→integer casts of NaN/inf/out-of-range values can be
//! turned off with [`GenConfig::float_to_int_casts`]), zero-size dimensions, dead nodes.
//!
//! Graphs are built step by step through [`Graph::push`]: each step picks an op kind, builds
//! operands and attributes that fit the types at hand and, should the op still not type-check
//! (or exceed the element budget), falls back to a cast. Each step draws from its own seed,
//! so shrinking (dropping steps) keeps the other steps as they were.

mod build;
mod ops;
pub mod rng;

use crate::dtype::DType;
use crate::graph::{Graph, TensorType};
use crate::tensor::{HostTensor, TensorData};
use half::{bf16, f16};
use proptest::prelude::*;
use std::collections::HashMap;

/// Knobs of [`arb_graph_with`].
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Upper bound on the number of nodes (at least 1).
    pub max_nodes: usize,
    /// Upper bound on the element count of every value (the interpreter must stay fast).
    pub max_numel: usize,
    /// Whether float → integer casts are generated (their result on NaN, ±inf and
    /// out-of-range values is whatever the interpreter defines; backends must match it).
    pub float_to_int_casts: bool,
    /// Whether some input, param and output names are unusual (`""`, `"in put"`, `"0"`,
    /// quotes, backslashes, tabs, non-ASCII) rather than `x0`, `w1`, `y0`.
    pub odd_names: bool,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            max_nodes: 24,
            max_numel: 512,
            float_to_int_casts: true,
            odd_names: true,
        }
    }
}

/// Random well-formed graphs of at most `max_nodes` nodes, with at least one output, over
/// every op kind and dtype.
pub fn arb_graph(max_nodes: usize) -> impl Strategy<Value = Graph> {
    arb_graph_with(GenConfig {
        max_nodes,
        ..GenConfig::default()
    })
}

/// [`arb_graph`] with every knob.
pub fn arb_graph_with(cfg: GenConfig) -> impl Strategy<Value = Graph> {
    let steps = proptest::collection::vec((any::<u8>(), any::<u64>()), 0..=cfg.max_nodes.max(1));
    (any::<u64>(), steps).prop_map(move |(seed, steps)| build::build(&cfg, seed, &steps))
}

/// A graph of at most `max_nodes` nodes together with values for all its inputs and params.
pub fn arb_graph_with_bindings(
    max_nodes: usize,
) -> impl Strategy<Value = (Graph, HashMap<String, HostTensor>)> {
    arb_graph(max_nodes).prop_flat_map(|g| {
        let b = arb_bindings(&g);
        (Just(g), b)
    })
}

/// `graph` with every value nobody reads named as an output too (`sink<id>`), so that no op
/// of a random graph is dead code that a pass would drop before the code under test sees it.
/// When a name is taken already (the result would not verify), `graph` is returned unchanged.
pub fn with_sinks_as_outputs(graph: Graph) -> Graph {
    let uses = graph.use_counts();
    let mut outputs = graph.outputs().to_vec();
    for id in graph.ids() {
        if uses[id.index()] == 0 {
            outputs.push((format!("sink{}", id.0), id));
        }
    }
    let g = Graph::from_parts(graph.nodes().to_vec(), outputs);
    match crate::verify(&g) {
        Ok(()) => g,
        Err(_) => graph,
    }
}

/// Values for every input and param of `graph`, keyed by name, mixing ordinary values with
/// special ones (±0, ±inf, NaN, subnormals, the extremes of each integer type).
pub fn arb_bindings(graph: &Graph) -> impl Strategy<Value = HashMap<String, HostTensor>> {
    let parts: Vec<BoxedStrategy<(String, HostTensor)>> = graph
        .bindings()
        .map(|(name, _, ty, _)| {
            let name = name.to_string();
            arb_tensor(ty.clone())
                .prop_map(move |t| (name.clone(), t))
                .boxed()
        })
        .collect();
    parts.prop_map(|v| v.into_iter().collect())
}

/// A host tensor of type `ty` whose elements mix ordinary and special values.
pub fn arb_tensor(ty: TensorType) -> BoxedStrategy<HostTensor> {
    let n = ty.shape.numel();
    let shape = ty.shape.clone();
    let data: BoxedStrategy<TensorData> = match ty.dtype {
        DType::Bool => vec_of(any::<bool>(), n).prop_map(TensorData::Bool).boxed(),
        DType::I32 => vec_of(arb_i32(), n).prop_map(TensorData::I32).boxed(),
        DType::I64 => vec_of(arb_i64(), n).prop_map(TensorData::I64).boxed(),
        DType::F16 => vec_of(arb_f16(), n).prop_map(TensorData::F16).boxed(),
        DType::BF16 => vec_of(arb_bf16(), n).prop_map(TensorData::BF16).boxed(),
        DType::F32 => vec_of(arb_f32(), n).prop_map(TensorData::F32).boxed(),
        DType::F64 => vec_of(arb_f64(), n).prop_map(TensorData::F64).boxed(),
    };
    let dtype = ty.dtype;
    // `vec_of` yields exactly `n` elements, so `new` cannot fail; zeros keep this panic-free.
    data.prop_map(move |d| {
        HostTensor::new(shape.clone(), d)
            .unwrap_or_else(|_| HostTensor::zeros(dtype, shape.clone()))
    })
    .boxed()
}

fn vec_of<S: Strategy>(s: S, n: usize) -> impl Strategy<Value = Vec<S::Value>> {
    proptest::collection::vec(s, n)
}

/// f64: mostly small ordinary values, sometimes a special one or an arbitrary finite one.
pub fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        6 => -8.0f64..8.0,
        2 => prop::sample::select(SPECIAL_F64.to_vec()),
        1 => any::<f64>(),
        1 => any::<u64>().prop_map(f64::from_bits),
    ]
}

/// f32: as [`arb_f64`], at f32 width (with f32 subnormals).
pub fn arb_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -8.0f32..8.0,
        2 => prop::sample::select(SPECIAL_F64.to_vec()).prop_map(|x| x as f32),
        1 => prop::sample::select(vec![1e-45f32, -1e-45, 1e-40, f32::MIN_POSITIVE, f32::MAX, f32::MIN]),
        1 => any::<u32>().prop_map(f32::from_bits),
    ]
}

/// f16: ordinary values rounded to f16, specials, and arbitrary bit patterns (subnormals,
/// NaN payloads).
pub fn arb_f16() -> impl Strategy<Value = f16> {
    prop_oneof![
        6 => (-8.0f32..8.0).prop_map(f16::from_f32),
        2 => prop::sample::select(SPECIAL_F64.to_vec()).prop_map(f16::from_f64),
        2 => any::<u16>().prop_map(f16::from_bits),
    ]
}

/// bf16: as [`arb_f16`].
pub fn arb_bf16() -> impl Strategy<Value = bf16> {
    prop_oneof![
        6 => (-8.0f32..8.0).prop_map(bf16::from_f32),
        2 => prop::sample::select(SPECIAL_F64.to_vec()).prop_map(bf16::from_f64),
        2 => any::<u16>().prop_map(bf16::from_bits),
    ]
}

/// i32: mostly small, sometimes the extremes, sometimes anything.
pub fn arb_i32() -> impl Strategy<Value = i32> {
    prop_oneof![
        6 => -20i32..20,
        2 => prop::sample::select(vec![0, 1, -1, i32::MIN, i32::MAX, i32::MIN + 1]),
        2 => any::<i32>(),
    ]
}

/// i64: as [`arb_i32`].
pub fn arb_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => -20i64..20,
        2 => prop::sample::select(vec![0, 1, -1, i64::MIN, i64::MAX, i64::MIN + 1, i32::MAX as i64 + 1]),
        2 => any::<i64>(),
    ]
}

/// Special float values: signed zeros, infinities, NaNs, subnormals of every width, extremes.
pub const SPECIAL_F64: [f64; 16] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    -f64::NAN,
    5e-324,
    -2.2250738585072e-308,
    1e-40,
    6e-8,
    65504.0,
    3.4028234663852886e38,
    f64::MAX,
];

/// The number of cases a property test runs: `PROPTEST_CASES` when set (for a longer
/// campaign by hand), else `default`. A `ProptestConfig` that names its `cases` overrides the
/// variable, which `ProptestConfig::default()` alone would read; this keeps it working.
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
