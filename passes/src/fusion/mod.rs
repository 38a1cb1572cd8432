//! Stage 2: fusion planning by extraction.
//!
//! [`plan`] builds an e-graph ([`egg`]) whose e-classes are the values of the (verified) input
//! graph and whose e-nodes are single primitive ops or fused kernels. A kernel e-node is a
//! handle to an interned *body* (a set of graph ops, see `kernel.rs`) plus the e-classes of the
//! buffers it reads. Named rules (`rules.rs`) merge a producer kernel into a consumer kernel:
//!
//! | rule | merges |
//! |---|---|
//! | `fold-view` | reshape/permute/expand/slice into any reader but a GEMM, as index arithmetic |
//! | `fold-transpose-into-gemm` | a last-two-axes permute (on reshapes) of a GEMM operand, as a transpose flag |
//! | `elementwise-chain` | unary/binary/where/cast chains, broadcasting included |
//! | `reduction-prologue` | elementwise producers into a row kernel |
//! | `reduction-epilogue` | a row kernel into its elementwise consumer (reading the row again) |
//! | `row-reductions` | row kernels over the same shape and axes (layer_norm's mean and variance) |
//! | `store-in-consumer-layout` | a producer into the copy that stores its value permuted |
//! | `multi-output-siblings` | sibling kernels sharing an input into one multi-output kernel: elementwise ones, or row kernels over the same rows writing row values (`max` and `argmax`, `var_mean`; `multi.rs`) |
//!
//! Saturation is bounded by [`PassOptions::node_limit`] and [`PassOptions::iter_limit`] (egg's
//! time limit is set to [`Duration::MAX`], so the wall clock never decides), scheduled by egg's
//! `BackoffScheduler`, and deterministic: rules search classes in node order and bodies are
//! interned in discovery order. Its `StopReason` is logged and returned. Every class keeps its
//! single-op e-node, so a run stopped by a limit still has a complete, valid plan.
//!
//! **Cost model** (bytes-equivalent): per kernel, each distinct input buffer once in its stored
//! size (a broadcast input counts what is stored; a 0-d constant is an immediate and costs nothing;
//! an input read only through slices counts the elements the slices select; a table read only by
//! `gather` / `index_select` counts the elements gathered, one per element they output; each at
//! most the stored size: BERT's word embedding counts the 128 rows a sequence reads, not 94 MB),
//! plus the bytes of every value it materialises,
//! plus [`LAUNCH_COST_BYTES`] per launch. Inputs, parameters and constants are in memory already.
//! **Extraction** (`extract.rs`) is DAG-aware greedy over the acyclic e-graph: a value read by
//! several kernels is paid for once where it is materialised, so recompute-vs-materialise is a cost
//! decision (only ops not computed from a reduction are ever recomputed). The greedy
//! producer–consumer plan ([`greedy_baseline`]) and the unfused plan are added to the e-graph as
//! kernel e-nodes before saturation and offered to the extractor as whole selections, so a plan
//! never costs more than either.
//!
//! **Multi-output kernels** are e-nodes too: a kernel writing several values has one e-node
//! `Multi(m, i, inputs)` in the class of each value `i` it writes, added by the
//! `multi-output-siblings` rule ([`SIBLINGS_RULE`]) for sibling elementwise bodies over one
//! index space that share an input, and for sibling row kernels over the same rows whose
//! values are all row values (a reduction's value needed outside its kernel is otherwise
//! written by a kernel of its own: `torch.max(x, 1)` was two kernels reading `x` twice).
//! Greedy bottom-up extraction costs each class alone and so cannot see a saving shared
//! between classes; after it, an improvement pass tries every
//! multi-output e-node against the extracted selection by exact cost (the selection re-derived
//! top-down with that kernel chosen for all its values) and keeps each that lowers it. That
//! includes changing a materialisation decision because of a sibling: `corpus::three_consumers`
//! writes `h = x + y + z` from the kernel that also computes two of its readers. Every accepted
//! step strictly lowers the exact cost, so the bounds above still hold. See `multi.rs`.
//!
//! **Growth policy** (what keeps the e-graph small: about two e-nodes per value on BERT): a
//! rule grows only the bodies of a class that no other body contains (and the largest
//! recompute-free ones), and merges in, per producer class, its largest legal body, its
//! largest recompute-free body and (when the producer has readers outside the consumer) its
//! single op.
//!
//! **Why kernels stay apart.** Every plan carries [`FusionPlan::boundaries`]: for each value
//! one kernel writes and another reads, the reason ([`Apart`]) the reader does not compute it,
//! derived by `why.rs` from the same rules, kernel checks ([`Reject`]) and cost model.
//!
//! **Plan validity** is checked by [`check_plan`] and [`eval_plan`], which runs each kernel's
//! ops through the reference interpreter reading only buffers available at that point.
//! Every rule is property-tested alone through [`plan_with_rules`] (`tests/fusion_rules.rs`),
//! where an independent statement of the kernel rules also checks each kernel is legal.
//!
//! **Layouts.** Every materialised value is stored contiguous (row-major) in its own shape.
//! The layout decision is *which* value of a view chain is materialised: views are read
//! through index arithmetic wherever the reader allows it (strides when the chain has them);
//! when a permute sits between a producer and a reader that cannot take it (a GEMM operand
//! other than a last-two-axes transpose), the producer's kernel is rooted at the permute (or
//! its reshape) and writes the value contiguous in the consumer's iteration order.
//!
//! **Unfused mode** (`opts.fuse == false`) runs the same code with only the two view-folding
//! rules: one kernel per non-view op, views read through index arithmetic by their readers (as
//! PyTorch eager treats views as strided metadata); a view is materialised by a copy kernel
//! only when it is a graph output or a reader cannot fold it.
//!
//! **Not handled:** concat, pad, gather and index_select are kernels of their own (their operands'
//! views are folded; elementwise producers and consumers are not); a GEMM has no fused prologue or
//! epilogue (its epilogue is the next kernel) and reads an operand through at most a transpose over
//! reshapes of a contiguous buffer (a general strided batched GEMM operand is materialised
//! instead); sibling GEMMs reading one input (Q, K, V projections) are not batched; reductions over
//! different axes never share a kernel; multi-output kernels are elementwise only, and the
//! improvement pass tries only those writing values the selection already materialises; the cost
//! model ignores compute, cache reuse and the extra cost of strided (transposed) reads.

mod baseline;
mod eval;
mod extract;
mod kernel;
mod lang;
mod multi;
mod order;
mod plan;
mod rules;
mod why;

pub use eval::{check_plan, eval_plan, PlanError};
pub use extract::LAUNCH_COST_BYTES;
pub use kernel::{KernelKind, Reject};
pub use plan::{Access, FusionPlan, Kernel, KernelInput, KernelOutput, Source, Strided};
pub use why::{Apart, Boundary};

use crate::{PassError, PassOptions, SaturationReport};
use egg::{BackoffScheduler, Runner, StopReason};
use extract::Selection;
use kernel::Ctx;
use lang::{BodyTable, FuseAnalysis, FuseLang};
use plan::Proto;
use rules::Rule;
use smelt_ir::{Graph, NodeId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Matches a rule may find in one iteration before the backoff scheduler bans it for a while.
const MATCH_LIMIT: usize = 20_000;
/// Iterations a banned rule sits out (doubling on each further ban).
const BAN_LENGTH: usize = 2;

/// Plans fusion for `graph` (which must verify): the kernels, in execution order, and what
/// the saturation did.
pub fn plan(
    graph: &Graph,
    opts: &PassOptions,
) -> Result<(FusionPlan, SaturationReport), PassError> {
    smelt_ir::verify(graph)?;
    let ctx = Arc::new(Ctx::new(graph));
    let unfused = run(&ctx, opts, &Setup::UNFUSED);
    let (unfused_kernels, unfused_cost) = (unfused.protos.len(), cost_of(&ctx, &unfused.protos));
    let stage = if opts.fuse {
        // The unfused plan seeds the fused e-graph: a plan never costs more than it.
        let seed: Vec<Vec<NodeId>> = unfused.protos.iter().map(|p| p.nodes.clone()).collect();
        let setup = Setup {
            rules: &Rule::ALL,
            greedy: true,
            seed: &seed,
            siblings: true,
            label: "fused",
        };
        run(&ctx, opts, &setup)
    } else {
        unfused
    };
    let rules: &[Rule] = if opts.fuse { &Rule::ALL } else { &Rule::VIEWS };
    let plan = plan::build(&ctx, &stage.protos, rules, unfused_kernels, unfused_cost);
    Ok((plan, stage.report))
}

/// The name of the multi-output rule (`multi.rs`), which [`plan_with_rules`] accepts like the
/// others; it also enables the improvement pass that extracts multi-output e-nodes.
pub const SIBLINGS_RULE: &str = "multi-output-siblings";

/// The names of every fusion rule (`rules.rs`, in application order), then [`SIBLINGS_RULE`] (`multi.rs`).
pub fn rule_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Rule::ALL.iter().map(|r| r.name()).collect();
    names.push(SIBLINGS_RULE);
    names
}

/// Plans fusion with only the named rules (see [`rule_names`]): the hook of the per-rule
/// property tests. Unlike [`plan`], the e-graph is seeded with nothing but single-op kernels
/// (neither the greedy baseline nor the unfused plan), so every fused kernel of the result
/// was formed by a named rule, and multi-output kernels appear only if [`SIBLINGS_RULE`] is named.
/// `opts.fuse` is ignored; the node and iteration limits apply. The plan's `unfused_*`
/// fields are those of the unfused plan, as in [`plan`].
pub fn plan_with_rules(
    graph: &Graph,
    opts: &PassOptions,
    rules: &[&str],
) -> Result<(FusionPlan, SaturationReport), PassError> {
    smelt_ir::verify(graph)?;
    let mut chosen = Vec::new();
    let mut siblings = false;
    for &name in rules {
        match Rule::from_name(name) {
            Some(r) if !chosen.contains(&r) => chosen.push(r),
            Some(_) => {}
            None if name == SIBLINGS_RULE => siblings = true,
            None => {
                return Err(PassError::Internal {
                    pass: "fusion",
                    message: format!("no fusion rule named {name:?}"),
                })
            }
        }
    }
    let ctx = Arc::new(Ctx::new(graph));
    let unfused = run(&ctx, opts, &Setup::UNFUSED);
    let setup = Setup {
        rules: &chosen,
        greedy: false,
        seed: &[],
        siblings,
        label: "selected rules",
    };
    let stage = run(&ctx, opts, &setup);
    let plan = plan::build(
        &ctx,
        &stage.protos,
        &chosen,
        unfused.protos.len(),
        cost_of(&ctx, &unfused.protos),
    );
    Ok((plan, stage.report))
}

/// The greedy producer–consumer baseline plan of `graph` (see the module docs).
pub fn greedy_baseline(graph: &Graph) -> FusionPlan {
    let ctx = Ctx::new(graph);
    let mut table = BodyTable::new(graph.len());
    let sel = baseline::greedy_selection(&ctx, &mut table);
    let protos = order::order(&ctx, protos_of(&ctx, &table, &sel));
    let opts = PassOptions {
        fuse: false,
        ..PassOptions::default()
    };
    let ctx = Arc::new(ctx);
    let u = run(&ctx, &opts, &Setup::UNFUSED);
    plan::build(
        &ctx,
        &protos,
        &Rule::ALL,
        u.protos.len(),
        cost_of(&ctx, &u.protos),
    )
}

fn cost_of(ctx: &Ctx, protos: &[Proto]) -> u64 {
    protos.iter().map(|p| p.cost(ctx)).sum()
}

fn protos_of(ctx: &Ctx, table: &BodyTable, sel: &Selection) -> Vec<Proto> {
    sel.iter()
        .map(|(&root, &b)| {
            let body = table.body(b);
            Proto::new(ctx, body.nodes.clone(), body.kind, vec![root])
        })
        .collect()
}

struct Stage {
    protos: Vec<Proto>,
    report: SaturationReport,
}

/// What one saturation run starts from and applies.
struct Setup<'a> {
    rules: &'a [Rule],
    /// Offer the greedy baseline to the extractor.
    greedy: bool,
    /// Kernel bodies of a whole plan offered to the extractor (empty: none).
    seed: &'a [Vec<NodeId>],
    /// Apply the multi-output rule and extract multi-output e-nodes.
    siblings: bool,
    /// For the log.
    label: &'static str,
}

impl Setup<'static> {
    const UNFUSED: Setup<'static> = Setup {
        rules: &Rule::VIEWS,
        greedy: false,
        seed: &[],
        siblings: false,
        label: "unfused",
    };
}

/// Saturates the fusion e-graph of `ctx` with `setup.rules` and extracts kernels in
/// execution order. The greedy baseline and the plan whose kernel bodies are `setup.seed`
/// are added as kernel e-nodes and offered to the extractor as whole selections when asked.
fn run(ctx: &Arc<Ctx>, opts: &PassOptions, setup: &Setup<'_>) -> Stage {
    let g = &ctx.graph;
    let analysis = FuseAnalysis {
        ctx: ctx.clone(),
        table: Mutex::new(BodyTable::new(g.len())),
        class_of: vec![None; g.len()],
        order: Vec::new(),
    };
    let mut runner: Runner<FuseLang, FuseAnalysis> = Runner::new(analysis)
        .with_node_limit(opts.node_limit)
        .with_iter_limit(opts.iter_limit)
        .with_time_limit(Duration::MAX)
        .with_scheduler(
            BackoffScheduler::default()
                .with_initial_match_limit(MATCH_LIMIT)
                .with_ban_length(BAN_LENGTH),
        );
    let mut class_of = vec![None; g.len()];
    let mut order = Vec::new();
    for id in g.ids() {
        if !ctx.live[id.index()] {
            continue;
        }
        let enode = if ctx.is_leaf(id) {
            FuseLang::Leaf(id)
        } else {
            let children = ctx
                .operands(id)
                .iter()
                .map(|o| class_of[o.index()].expect("operands are live and earlier"))
                .collect();
            order.push(id);
            FuseLang::Op(id, children)
        };
        class_of[id.index()] = Some(runner.egraph.add(enode));
    }
    let seeds: Vec<Selection> = {
        let analysis = &mut runner.egraph.analysis;
        analysis.class_of = class_of;
        analysis.order = order;
        let mut table = analysis.table();
        for &id in &analysis.order {
            if let Some(b) = table.intern(ctx, vec![id]) {
                table.add_to_class(b);
            }
        }
        let mut seeds = Vec::new();
        if setup.greedy {
            seeds.push(baseline::greedy_selection(ctx, &mut table));
        }
        if !setup.seed.is_empty() {
            let given: Selection = setup
                .seed
                .iter()
                .filter_map(|nodes| Some((*nodes.last()?, table.intern(ctx, nodes.clone())?)))
                .collect();
            seeds.push(given);
        }
        seeds
    };
    for seed in &seeds {
        for (&root, &b) in seed {
            let inputs = {
                let mut table = runner.egraph.analysis.table();
                if !table.add_to_class(b) {
                    continue;
                }
                table.body(b).inputs.clone()
            };
            let cls = &runner.egraph.analysis.class_of;
            let children = inputs.iter().filter_map(|i| cls[i.index()]).collect();
            let root_class = cls[root.index()].expect("a live root");
            let k = runner.egraph.add(FuseLang::Kernel(b, children));
            runner.egraph.union(root_class, k);
        }
    }
    runner.egraph.rebuild();
    let mut rewrites = rules::rewrites(setup.rules);
    if setup.siblings {
        rewrites.push(multi::rewrite());
    }
    let runner = runner.run(&rewrites);
    let report = report(&runner);
    log::info!("fusion ({}): {report}", setup.label);

    let egraph = &runner.egraph;
    let analysis = &egraph.analysis;
    let table = analysis.table();
    let mut candidates = vec![Vec::new(); g.len()];
    for &id in &analysis.order {
        let mut bodies = table.class_bodies(id).to_vec();
        bodies.sort_unstable();
        candidates[id.index()] = bodies;
    }
    let (sel, best) = extract::extract(ctx, &table, &candidates, &seeds);
    let protos = if setup.siblings {
        order::order(ctx, multi::improve(ctx, &table, &sel, &best))
    } else {
        order::order(ctx, protos_of(ctx, &table, &sel))
    };
    Stage { protos, report }
}

fn report(runner: &Runner<FuseLang, FuseAnalysis>) -> SaturationReport {
    let stop_reason = match &runner.stop_reason {
        Some(StopReason::Saturated) => "saturated".to_string(),
        Some(StopReason::IterationLimit(_)) => "iteration limit".to_string(),
        Some(StopReason::NodeLimit(_)) => "node limit".to_string(),
        Some(StopReason::TimeLimit(_)) => "time limit".to_string(),
        Some(StopReason::Other(s)) => s.clone(),
        None => "not run".to_string(),
    };
    let mut rules_applied: BTreeMap<String, usize> = BTreeMap::new();
    for it in &runner.iterations {
        for (name, count) in &it.applied {
            *rules_applied.entry(name.to_string()).or_default() += count;
        }
    }
    SaturationReport {
        iterations: runner.iterations.len(),
        egraph_nodes: runner.egraph.total_number_of_nodes(),
        egraph_classes: runner.egraph.number_of_classes(),
        stop_reason,
        rules_applied,
    }
}
