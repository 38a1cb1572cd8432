//! `smelt bench --compare KNOB`: one option flipped, measured side by side.
//!
//! Each case's fused plan is compiled twice, once as the rest of the command line says (A) and
//! once with [`Knob`] flipped (B), and the two are called alternately in one process (`a, b,
//! b, a, a, b, …`, see [`super::run`]), so that their ratio is a side-by-side figure rather than
//! two runs of a noisy machine set against each other. The outputs of A and B are compared
//! bit for bit: a knob meant to change only speed must leave them identical.

use super::cases::{self, Case, Size};
use super::run::{self, Budget, PlanTimes};
use crate::{ByCpu, MathMode, Options, Result, RowPrefetch};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// An option of [`Options`] that `--compare` flips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Knob {
    /// Streaming stores ([`Options::no_streaming_stores`]).
    StreamingStores,
    /// Software prefetch ([`Options::no_prefetch`]).
    Prefetch,
    /// How row kernels prefetch ([`Options::row_prefetch`]): this CPU's default against two
    /// rows ahead, or, where the default is two rows ahead, against the module's distance.
    RowPrefetch,
    /// Row kernels prefetching in their first pass too ([`Options::first_pass_prefetch`]).
    FirstPassPrefetch,
    /// [`Options::math`]: the default polynomials against the C library's algorithms.
    LibmMath,
    /// [`Options::fast_math`]: rewrites that may change rounding.
    FastMath,
    /// Row kernels two rows at a time ([`Options::no_interleave_rows`]).
    InterleaveRows,
    /// Store loops four vectors at a time ([`Options::no_interleave_vectors`]).
    InterleaveVectors,
    /// Linear layers of up to 128 rows on smelt's panel kernel, against up to
    /// [`PANEL_ROWS_BEFORE`] (the `gemm` crate above): [`Options::gemm_panel_max_rows`].
    GemmPanelRows,
    /// Transposed reads in tiles ([`Options::no_tiled_transposes`]).
    TiledTransposes,
    /// Long elementwise bodies in two loops per block ([`Options::loop_fission`]): this CPU's
    /// default against the other choice.
    LoopFission,
    /// f32 constants loaded from memory ([`Options::constant_loads`]): this CPU's default
    /// against the other choice.
    ConstantLoads,
}

/// The other choice than `choice` on this machine's CPU: off where it is on, else on.
fn other(choice: ByCpu) -> ByCpu {
    if Options::host_choice(choice) {
        ByCpu::Off
    } else {
        ByCpu::On
    }
}

/// The panel kernel's row limit before the seventeenth session, what
/// [`Knob::GemmPanelRows`] sets when flipping the default.
pub const PANEL_ROWS_BEFORE: usize = 64;

impl Knob {
    /// Every knob, in the order the CLI lists them.
    pub const ALL: [Knob; 12] = [
        Knob::StreamingStores,
        Knob::Prefetch,
        Knob::RowPrefetch,
        Knob::FirstPassPrefetch,
        Knob::LibmMath,
        Knob::FastMath,
        Knob::InterleaveRows,
        Knob::InterleaveVectors,
        Knob::GemmPanelRows,
        Knob::TiledTransposes,
        Knob::LoopFission,
        Knob::ConstantLoads,
    ];

    /// Whether the knob changes only how CPU kernels are generated (no effect on a GPU).
    pub fn cpu_only(self) -> bool {
        self != Knob::FastMath
    }

    /// `options` with the knob flipped.
    pub fn flip(self, options: &Options) -> Options {
        let mut o = options.clone();
        match self {
            Knob::StreamingStores => o.no_streaming_stores = !o.no_streaming_stores,
            Knob::Prefetch => o.no_prefetch = !o.no_prefetch,
            Knob::RowPrefetch => {
                // This CPU's default against the alternative to it: two rows ahead against the
                // module's distance where rows are the default, else against rows.
                let default = Options::default().host_row_prefetch();
                o.row_prefetch = if options.host_row_prefetch() == default {
                    match default {
                        RowPrefetch::Rows => RowPrefetch::Module,
                        _ => RowPrefetch::Rows,
                    }
                } else {
                    RowPrefetch::Auto
                }
            }
            Knob::FirstPassPrefetch => o.first_pass_prefetch = !o.first_pass_prefetch,
            Knob::LibmMath => {
                o.math = match o.math {
                    MathMode::Polynomial => MathMode::Libm,
                    MathMode::Libm => MathMode::Polynomial,
                }
            }
            Knob::FastMath => o.fast_math = !o.fast_math,
            Knob::InterleaveRows => o.no_interleave_rows = !o.no_interleave_rows,
            Knob::InterleaveVectors => o.no_interleave_vectors = !o.no_interleave_vectors,
            Knob::GemmPanelRows => {
                o.gemm_panel_max_rows = match o.gemm_panel_max_rows {
                    None => Some(PANEL_ROWS_BEFORE),
                    Some(_) => None,
                }
            }
            Knob::TiledTransposes => o.no_tiled_transposes = !o.no_tiled_transposes,
            Knob::LoopFission => o.loop_fission = other(options.loop_fission),
            Knob::ConstantLoads => o.constant_loads = other(options.constant_loads),
        }
        o
    }

    /// What the knob's setting in `options` is, in a few words.
    pub fn describe(self, options: &Options) -> String {
        match self {
            Knob::StreamingStores if options.no_streaming_stores => "plain stores".into(),
            Knob::StreamingStores => "streaming stores".into(),
            Knob::Prefetch => match options.jit_options().prefetch_bytes {
                Some(n) => format!("prefetch {n} B"),
                None => "no prefetch".into(),
            },
            Knob::RowPrefetch => match options.host_row_prefetch() {
                _ if options.no_prefetch => "no prefetch".into(),
                RowPrefetch::Rows => "row kernels two rows ahead".into(),
                RowPrefetch::Off => "row kernels without prefetch".into(),
                _ => "row kernels 2 KiB ahead".into(),
            },
            Knob::FirstPassPrefetch => {
                let what = if options.first_pass_prefetch {
                    "every pass prefetches"
                } else {
                    "the exp pass prefetches"
                };
                if options.no_prefetch || options.host_row_prefetch() != RowPrefetch::Rows {
                    format!("{what} (but no row prefetch here)")
                } else {
                    what.into()
                }
            }
            Knob::LibmMath => format!("{} math", options.math),
            Knob::FastMath if options.fast_math => "fast-math".into(),
            Knob::FastMath => "strict math".into(),
            Knob::InterleaveRows if options.no_interleave_rows => "one row at a time".into(),
            Knob::InterleaveRows => "two rows interleaved".into(),
            Knob::InterleaveVectors => match options.jit_options().interleave_vectors {
                Some(n) => format!("{n} vectors per iteration"),
                None => "the vectoriser's interleaving".into(),
            },
            Knob::GemmPanelRows => format!(
                "panel GEMM up to {} rows",
                options
                    .gemm_panel_max_rows
                    .unwrap_or(smelt_runtime::cpu::PANEL_MAX_ROWS)
            ),
            Knob::TiledTransposes if options.no_tiled_transposes => {
                "transposed reads by rows".into()
            }
            Knob::TiledTransposes => "transposed reads in tiles".into(),
            Knob::LoopFission if Options::host_choice(options.loop_fission) => {
                "long bodies in two loops".into()
            }
            Knob::LoopFission => "long bodies in one loop".into(),
            Knob::ConstantLoads if Options::host_choice(options.constant_loads) => {
                "constants loaded once".into()
            }
            Knob::ConstantLoads => "constants as LLVM constants".into(),
        }
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Knob::StreamingStores => "streaming-stores",
            Knob::Prefetch => "prefetch",
            Knob::RowPrefetch => "row-prefetch",
            Knob::FirstPassPrefetch => "first-pass-prefetch",
            Knob::LibmMath => "libm-math",
            Knob::FastMath => "fast-math",
            Knob::InterleaveRows => "interleave-rows",
            Knob::InterleaveVectors => "interleave-vectors",
            Knob::GemmPanelRows => "gemm-panel-rows",
            Knob::TiledTransposes => "tiled-transposes",
            Knob::LoopFission => "loop-fission",
            Knob::ConstantLoads => "constant-loads",
        })
    }
}

impl FromStr for Knob {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Knob, String> {
        Knob::ALL
            .into_iter()
            .find(|k| k.to_string() == s)
            .ok_or_else(|| {
                let names: Vec<String> = Knob::ALL.iter().map(Knob::to_string).collect();
                format!("unknown knob {s:?}; the knobs are: {}", names.join(", "))
            })
    }
}

/// A `--compare` run: what was flipped, and every case's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The knob's name, as `--compare` takes it.
    pub knob: String,
    /// A: the options as the command line gives them, in a few words.
    pub a: String,
    /// B: A with the knob flipped.
    pub b: String,
    pub cases: Vec<AbResult>,
}

/// One case under A and B, both fused.
#[derive(Clone, Debug, Serialize)]
pub struct AbResult {
    pub name: String,
    pub shape: String,
    pub min_bytes: u64,
    pub kernels_a: usize,
    pub kernels_b: usize,
    /// Both plans' series, called alternately (`a` and `b` `run_into` in one series of
    /// rounds, then `a` and `b` `run`).
    pub a: PlanTimes,
    pub b: PlanTimes,
    /// A's median over B's, `run_into`: above 1 when B is faster.
    pub a_over_b_run_into: f64,
    /// The same, `run`.
    pub a_over_b_run: f64,
    /// Cold compile times (the in-process JIT cache emptied first), milliseconds.
    pub compile_a_ms: f64,
    pub compile_b_ms: f64,
    /// Whether every output of A has the same bits as B's.
    pub identical: bool,
    /// Largest |A − B| over all outputs.
    pub max_abs_diff: f64,
}

/// Measures `case` at `size` under `a` and under `b` (both fused; see the module docs).
pub fn measure(
    case: &Case,
    size: Size,
    a: &Options,
    b: &Options,
    budget: &Budget,
    copy_gbps: Option<f64>,
    progress: &mut dyn FnMut(&str),
) -> Result<AbResult> {
    progress("trace");
    let graph = case.build(size)?;
    let (inputs, params) = cases::data(&graph, 1)?;
    let min_bytes = cases::min_bytes(&graph);

    progress("compile A and B");
    smelt_runtime::cpu::clear_jit_cache();
    let (pa, compile_a) = run::compile(&graph, a, false, &params)?;
    smelt_runtime::cpu::clear_jit_cache();
    let (pb, compile_b) = run::compile(&graph, b, false, &params)?;

    let run::PairSeries {
        into: (ai, bi),
        fresh: (ar, br),
        ..
    } = run::time_plans(budget, (&pa, &pb), ("A", "B"), false, &inputs, progress)?;
    let (mut out_a, mut out_b) = (cases::zeroed_outputs(&pa), cases::zeroed_outputs(&pb));
    pa.run_into(&inputs, &mut out_a)?;
    pb.run_into(&inputs, &mut out_b)?;
    let identical = out_a.len() == out_b.len()
        && out_a.iter().zip(&out_b).all(|(x, y)| {
            x.dtype() == y.dtype() && x.data().to_le_bytes() == y.data().to_le_bytes()
        });

    let [ai, bi, ar, br] = [ai, bi, ar, br].map(|t| run::timing(t, min_bytes, copy_gbps));
    let ratio = |x: &run::Timing, y: &run::Timing| x.median_ms / y.median_ms.max(1e-12);
    Ok(AbResult {
        name: case.name.to_string(),
        shape: case.shape(size),
        min_bytes,
        kernels_a: pa.optimized().plan.kernel_count(),
        kernels_b: pb.optimized().plan.kernel_count(),
        a_over_b_run_into: ratio(&ai, &bi),
        a_over_b_run: ratio(&ar, &br),
        a: PlanTimes {
            run_into: ai,
            run: ar,
        },
        b: PlanTimes {
            run_into: bi,
            run: br,
        },
        compile_a_ms: compile_a.as_secs_f64() * 1e3,
        compile_b_ms: compile_b.as_secs_f64() * 1e3,
        identical,
        max_abs_diff: run::max_abs_diff(&out_a, &out_b),
    })
}

impl AbResult {
    /// Recomputes every `pct_of_copy` against `copy_gbps`.
    pub fn set_copy_reference(&mut self, copy_gbps: Option<f64>) {
        for p in [&mut self.a, &mut self.b] {
            p.run_into.set_copy_reference(copy_gbps);
            p.run.set_copy_reference(copy_gbps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_parse_print_and_flip_back() {
        let base = Options::default();
        for k in Knob::ALL {
            assert_eq!(k.to_string().parse::<Knob>(), Ok(k));
            let b = k.flip(&base);
            assert_ne!(k.describe(&base), k.describe(&b), "{k}");
            assert_eq!(k.describe(&k.flip(&b)), k.describe(&base), "{k}");
        }
        let e = "nope".parse::<Knob>().unwrap_err();
        assert!(e.contains("nope") && e.contains("streaming-stores"), "{e}");
    }
}
