//! The `smelt` command-line tool.

use clap::{Parser, Subcommand};
use smelt::{compile_with, io, ir, models, Device, Options};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Large tensors (inputs read from files, outputs, the benchmark's data) start on a 64-byte
/// boundary, so that memory-bound kernels stream whole cache lines (see
/// `smelt_runtime::alloc`).
#[global_allocator]
static ALLOC: smelt::LargeAligned = smelt::LargeAligned;

#[derive(Parser)]
#[command(
    name = "smelt",
    version,
    about = "torch.compile for Rust: compile and run tensor programs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse and verify a .smelt file; print every value with its dtype and shape.
    Check {
        /// The .smelt program.
        file: PathBuf,
    },
    /// Show what the optimiser does with a .smelt program: simplification, the fusion plan
    /// (each kernel's ops, inputs and outputs), bytes moved fused vs unfused, e-graph sizes and
    /// stop reasons; with --emit, the code generated for every kernel.
    Explain {
        /// The .smelt program (`smelt model NAME > FILE` writes a built-in model).
        file: PathBuf,
        /// Plan without fusion (one kernel per op).
        #[arg(long)]
        no_fuse: bool,
        /// Allow rewrites that change rounding or NaN behaviour.
        #[arg(long)]
        fast_math: bool,
        /// Also write the plan as a Graphviz DOT file (the edge of each value kept in memory
        /// between two kernels is dashed and labelled with why).
        #[arg(long)]
        dot: Option<PathBuf>,
        /// Also print the generated code (repeatable): kernels (smelt's kernel IR), llvm-ir or
        /// asm (the CPU kernels, optimised for this CPU), cuda (the CUDA C for NVRTC) or ptx
        /// (LLVM's NVPTX path, for --arch).
        #[arg(long, value_name = "LEVEL", value_parser = |s: &str| s.parse::<smelt::emit::Emit>())]
        emit: Vec<smelt::emit::Emit>,
        /// Write each --emit level to a file in this directory (kernels.txt, kernels.ll,
        /// kernels.s, kernels.cu, kernels.ptx) instead of stdout.
        #[arg(long, value_name = "DIR", requires = "emit")]
        emit_dir: Option<PathBuf>,
        /// The GPU architecture of --emit ptx.
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// The CPU kernels of --emit llvm-ir/asm with f32 exp/tanh/erf as the C library does.
        #[arg(long)]
        libm_math: bool,
    },
    /// Run a .smelt program on tensors from a safetensors file.
    Run {
        /// The .smelt program.
        file: PathBuf,
        /// Inputs (and parameters) matched to the graph by name.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Where to write the outputs (safetensors, by output name).
        #[arg(long)]
        out: PathBuf,
        /// reference, cpu, cuda, cuda:N, cuda-emulated (the CUDA kernels on a CPU emulator) or
        /// auto.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Run one kernel per op (the unfused baseline).
        #[arg(long)]
        no_fuse: bool,
        /// On a GPU, generate the kernels with LLVM's NVPTX back end instead of NVRTC.
        #[arg(long)]
        ptx_llvm: bool,
        /// On the CPU, compute f32 exp/tanh/erf as the C library does (bit for bit what the
        /// reference interpreter gives) instead of the faster polynomials (within 1.25 ulp).
        #[arg(long)]
        libm_math: bool,
    },
    /// Inspect, prune or empty the compiled-kernel cache ($SMELT_CACHE_DIR, default
    /// ~/.cache/smelt; size limit $SMELT_CACHE_MAX_SIZE, default 1 GiB).
    Cache {
        #[command(subcommand)]
        action: CacheAction,
    },
    /// Print a built-in model as .smelt text (bert-base, encoder-layer).
    Model {
        /// bert-base (a BERT-base forward pass) or encoder-layer (one BERT-base layer).
        name: String,
        /// Sequence length.
        #[arg(long, default_value_t = 128)]
        seq: usize,
        /// Number of encoder layers (bert-base only).
        #[arg(long, default_value_t = 12)]
        layers: usize,
    },
    /// Benchmark fused vs unfused on issue 6's cases, next to a copy-bandwidth reference.
    /// Progress goes to stderr, the tables to stdout.
    Bench {
        /// cpu, cuda, cuda:N, reference or auto.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Only the cases with this name, or whose names contain it (repeatable).
        #[arg(long = "case", value_name = "NAME")]
        cases: Vec<String>,
        /// Also write every figure as JSON.
        #[arg(long, value_name = "OUT.json")]
        json: Option<PathBuf>,
        /// Also write an SVG bar chart, fused vs unfused per case.
        #[arg(long, value_name = "OUT.svg")]
        chart: Option<PathBuf>,
        /// Small shapes and short series (a smoke test, not a measurement).
        #[arg(long)]
        quick: bool,
        /// Bytes per array of the copy-bandwidth reference, at least 1048576 (default: 8x the
        /// last-level cache, capped by the memory available).
        #[arg(
            long,
            value_name = "BYTES",
            conflicts_with = "no_stream",
            value_parser = clap::value_parser!(u64).range(smelt::bench::stream::MIN_STREAM_BYTES..)
        )]
        stream_bytes: Option<u64>,
        /// Skip the copy-bandwidth reference.
        #[arg(long)]
        no_stream: bool,
        /// Minimum time per timed series, in milliseconds (default 500, 20 with --quick).
        #[arg(long, value_name = "MS")]
        min_time_ms: Option<u64>,
        /// CPU kernels compute f32 exp/tanh/erf as the C library does (slower; bit for bit
        /// the reference interpreter) instead of the default polynomials.
        #[arg(long)]
        libm_math: bool,
        /// CPU kernels without software prefetch (by default their vector loops prefetch
        /// 2 KiB ahead), to measure what prefetching buys.
        #[arg(long)]
        no_prefetch: bool,
        /// How CPU row kernels (softmax, layer_norm, …) over data out of cache prefetch:
        /// auto (by CPU: off on AMD Zen 4, rows elsewhere), rows (two rows ahead), module
        /// (2 KiB ahead like the other kernels) or off.
        #[arg(long, value_name = "MODE", default_value = "auto")]
        row_prefetch: smelt::RowPrefetch,
        /// Short for --row-prefetch module.
        #[arg(long, conflicts_with = "row_prefetch")]
        no_row_prefetch: bool,
        /// CPU kernels with plain stores only (by default those whose outputs are all at least
        /// 16 MiB write them with streaming stores, which skip reading each line first), to
        /// measure what streaming buys.
        #[arg(long)]
        no_streaming_stores: bool,
        /// CPU row kernels (softmax, layer_norm, …) one row at a time instead of two rows
        /// interleaved, to measure what interleaving buys.
        #[arg(long)]
        no_interleave_rows: bool,
        /// CPU store loops as LLVM's loop vectoriser makes them, and split reductions (row
        /// sums and maxima) one 16-lane block at a time, instead of four vectors computed side
        /// by side per iteration, to measure what interleaving them buys.
        #[arg(long)]
        no_interleave_vectors: bool,
        /// Tensors of at least 32 MiB without transparent huge pages (by default smelt asks
        /// the kernel for them), to measure what huge pages buy.
        #[arg(long)]
        no_huge_pages: bool,
        /// Freed tensors of at least 32 MiB go back to the OS at once, instead of being kept
        /// (up to 512 MiB) for the next allocation of their size, as the fresh outputs of
        /// `run` are: to measure what keeping them buys.
        #[arg(long)]
        no_block_cache: bool,
        /// Instead of fused vs unfused: each case's fused plan as the other flags say (A)
        /// against the same with KNOB flipped (B), called alternately in one process, with
        /// A/B and whether their outputs have the same bits. KNOB: streaming-stores,
        /// prefetch, row-prefetch, first-pass-prefetch, libm-math, fast-math,
        /// interleave-rows, interleave-vectors, gemm-panel-rows, tiled-transposes,
        /// loop-fission or constant-loads.
        #[arg(long, value_name = "KNOB", value_parser = |s: &str| s.parse::<smelt::bench::compare::Knob>())]
        compare: Option<smelt::bench::compare::Knob>,
    },
    /// Compile a built-in model (a BERT-style encoder layer) and run it on the best device.
    Demo {
        /// reference, cpu, cuda, cuda:N, cuda-emulated (the CUDA kernels on a CPU emulator) or
        /// auto.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Sequence length of the demo input.
        #[arg(long, default_value_t = 32)]
        seq: usize,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// Entries and bytes on disk and in memory, per target.
    Stats,
    /// Remove every entry.
    Clear,
    /// Remove the least recently used entries until the folder holds at most the size limit
    /// (done automatically after writes, at most hourly or after a tenth of the limit).
    Prune {
        /// The size to prune to: bytes, or with a unit (500M, 2G, 1.5GiB). Default: the limit
        /// in force ($SMELT_CACHE_MAX_SIZE, else 1 GiB).
        #[arg(long)]
        max_size: Option<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = String::new();
    let result = match cli.command {
        Command::Check { file } => check(&mut out, &file),
        Command::Explain {
            file,
            no_fuse,
            fast_math,
            dot,
            emit,
            emit_dir,
            arch,
            libm_math,
        } => explain(
            &mut out,
            &file,
            &Options {
                no_fuse,
                fast_math,
                math: math_mode(libm_math),
                ..Options::default()
            },
            dot.as_deref(),
            &EmitFlags {
                levels: emit,
                dir: emit_dir,
                arch,
            },
        ),
        Command::Run {
            file,
            inputs,
            out: out_path,
            device,
            no_fuse,
            ptx_llvm,
            libm_math,
        } => run(
            &mut out,
            &file,
            inputs.as_deref(),
            &out_path,
            &device,
            RunFlags {
                no_fuse,
                ptx_llvm,
                libm_math,
            },
        ),
        Command::Demo { device, seq } => demo(&mut out, &device, seq),
        Command::Bench {
            device,
            cases,
            json,
            chart,
            quick,
            stream_bytes,
            no_stream,
            min_time_ms,
            libm_math,
            no_prefetch,
            row_prefetch,
            no_row_prefetch,
            no_streaming_stores,
            no_interleave_rows,
            no_interleave_vectors,
            no_huge_pages,
            no_block_cache,
            compare,
        } => {
            smelt::set_huge_pages(!no_huge_pages);
            if no_block_cache {
                smelt::set_block_cache_limit(0);
            }
            let stream = match (no_stream, stream_bytes) {
                (true, _) => None,
                (false, Some(b)) => Some(smelt::bench::stream::StreamSize::Bytes(b)),
                (false, None) if quick => Some(smelt::bench::stream::StreamSize::Bytes(16 << 20)),
                (false, None) => Some(smelt::bench::stream::StreamSize::Auto),
            };
            bench(
                &mut out,
                &device,
                smelt::bench::BenchOptions {
                    device: Device::Auto,
                    cases,
                    quick,
                    min_time: min_time_ms.map(std::time::Duration::from_millis),
                    stream,
                    command: std::env::args().collect::<Vec<_>>().join(" "),
                    math: math_mode(libm_math),
                    no_prefetch,
                    row_prefetch: if no_row_prefetch {
                        smelt::RowPrefetch::Module
                    } else {
                        row_prefetch
                    },
                    no_streaming_stores,
                    no_interleave_rows,
                    no_interleave_vectors,
                    compare,
                },
                json.as_deref(),
                chart.as_deref(),
            )
        }
        Command::Model { name, seq, layers } => model(&mut out, &name, seq, layers),
        Command::Cache { action } => cache(&mut out, action),
    };
    // Output is written at the end, in one piece; a closed pipe (`smelt explain f | head`) is
    // not an error.
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to stdout: {e}");
            return ExitCode::FAILURE;
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

fn load_graph(file: &Path) -> smelt::Result<ir::Graph> {
    let src = std::fs::read_to_string(file).map_err(|e| smelt::Error::File {
        path: file.to_path_buf(),
        message: format!("cannot read: {e}"),
    })?;
    ir::text::parse(&src).map_err(|e| smelt::Error::File {
        path: file.to_path_buf(),
        message: e.to_string(),
    })
}

fn check(out: &mut String, file: &Path) -> smelt::Result<()> {
    let graph = load_graph(file)?;
    ir::verify(&graph)?;
    let _ = write!(out, "{}", ir::text::print(&graph));
    let sig = smelt::Signature::of(&graph);
    let _ = writeln!(
        out,
        "# ok: {} values, {} inputs/params, {} outputs",
        graph.len(),
        sig.0.len(),
        graph.outputs().len()
    );
    Ok(())
}

/// `smelt explain`'s `--emit`, `--emit-dir` and `--arch`.
struct EmitFlags {
    levels: Vec<smelt::emit::Emit>,
    dir: Option<PathBuf>,
    arch: String,
}

/// What the CPU code generator does with each kernel of `program` under `options` beyond
/// plain loops (transposed reads in tiles, streaming stores, interleaved rows, row prefetch),
/// one line per kernel that has any; nothing without the LLVM backend.
fn cpu_notes(out: &mut String, program: &smelt_passes::kernel::Program, options: &Options) {
    #[cfg(feature = "llvm")]
    {
        use smelt_codegen::llvm::kernel::{describe, output_ids};
        let jit = options.jit_options();
        let outputs = output_ids(program);
        let lines: Vec<String> = program
            .kernels()
            .filter_map(|k| {
                let notes = describe(k, &program.buffers, &outputs, &jit);
                (!notes.is_empty()).then(|| format!("  {}: {}", k.name, notes.join("; ")))
            })
            .collect();
        if !lines.is_empty() {
            let _ = writeln!(out, "cpu code generation:");
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
    }
    #[cfg(not(feature = "llvm"))]
    let _ = (out, program, options);
}

fn explain(
    out: &mut String,
    file: &Path,
    options: &Options,
    dot: Option<&Path>,
    emit: &EmitFlags,
) -> smelt::Result<()> {
    let graph = load_graph(file)?;
    let no_fuse = options.no_fuse;
    let opts = options.pass_options();
    let start = Instant::now();
    let opt = smelt_passes::optimize(&graph, &opts)?;
    let elapsed = start.elapsed();
    // The unfused plan of the same simplified graph, for the bytes-moved comparison.
    let unfused = if no_fuse {
        opt.plan.clone()
    } else {
        let opts = smelt::PassOptions {
            fuse: false,
            ..opts.clone()
        };
        smelt_passes::fusion::plan(&opt.graph, &opts)?.0
    };
    let bytes = |p: &smelt::FusionPlan| p.bytes_read() + p.bytes_written();
    let mb = |b: u64| b as f64 / 1e6;
    let _ = writeln!(out, "{}:", file.display());
    let _ = writeln!(
        out,
        "  ops: {} -> {} after simplification -> {} kernels ({} unfused)",
        graph.len(),
        opt.graph.len(),
        opt.plan.kernel_count(),
        unfused.kernel_count()
    );
    let _ = writeln!(
        out,
        "  bytes moved (modelled): {:.3} MB fused vs {:.3} MB unfused ({:.2}x less)",
        mb(bytes(&opt.plan)),
        mb(bytes(&unfused)),
        bytes(&unfused) as f64 / bytes(&opt.plan).max(1) as f64
    );
    let _ = writeln!(out, "  simplify e-graph: {}", opt.simplify);
    if !opt.simplify.rules_applied.is_empty() {
        let rules: Vec<String> = opt
            .simplify
            .rules_applied
            .iter()
            .map(|(r, n)| format!("{r} x{n}"))
            .collect();
        let _ = writeln!(out, "    rules applied: {}", rules.join(", "));
    }
    let _ = writeln!(out, "  fusion e-graph:   {}", opt.fusion);
    let _ = writeln!(
        out,
        "  optimised in {:.1} ms\n",
        elapsed.as_secs_f64() * 1e3
    );
    let _ = write!(out, "{}", opt.plan);
    let _ = write!(out, "{}", opt.plan.explain_boundaries());
    // The plan printed above, lowered (what `smelt::emit::lower` would optimise again).
    let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan);
    if let Ok(program) = &program {
        cpu_notes(out, program, options);
    }
    if let Some(path) = dot {
        std::fs::write(path, opt.plan.to_dot()).map_err(|e| smelt::Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write: {e}"),
        })?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    if emit.levels.is_empty() {
        return Ok(());
    }
    let program = program?;
    if let Some(dir) = &emit.dir {
        std::fs::create_dir_all(dir).map_err(|e| smelt::Error::File {
            path: dir.clone(),
            message: format!("cannot create: {e}"),
        })?;
    }
    for &level in &emit.levels {
        let text = smelt::emit::emit(&program, options, level, &emit.arch)?;
        match &emit.dir {
            Some(dir) => {
                let path = dir.join(level.file_name());
                std::fs::write(&path, &text).map_err(|e| smelt::Error::File {
                    path: path.clone(),
                    message: format!("cannot write: {e}"),
                })?;
                let _ = writeln!(out, "wrote {} ({level})", path.display());
            }
            None => {
                let _ = writeln!(out, "\n=== --emit {level} ===\n{text}");
            }
        }
    }
    Ok(())
}

/// The CPU kernels' f32 math for a `--libm-math` flag.
fn math_mode(libm_math: bool) -> smelt::MathMode {
    if libm_math {
        smelt::MathMode::Libm
    } else {
        smelt::MathMode::Polynomial
    }
}

/// How `smelt run` compiles.
struct RunFlags {
    no_fuse: bool,
    ptx_llvm: bool,
    libm_math: bool,
}

fn run(
    out: &mut String,
    file: &Path,
    inputs: Option<&Path>,
    out_path: &Path,
    device: &str,
    flags: RunFlags,
) -> smelt::Result<()> {
    let graph = load_graph(file)?;
    let device: Device = device.parse().map_err(smelt::Error::Runtime)?;
    let tensors = match inputs {
        Some(p) => io::load_safetensors(p)?,
        None => Default::default(),
    };
    let compiled = compile_with(
        &graph,
        Options {
            device,
            no_fuse: flags.no_fuse,
            cuda_codegen: if flags.ptx_llvm {
                smelt::CudaCodegen::Llvm
            } else {
                smelt::CudaCodegen::Nvrtc
            },
            math: math_mode(flags.libm_math),
            ..Options::default()
        },
    )?;
    let start = Instant::now();
    let outputs = compiled.run(&tensors)?;
    let elapsed = start.elapsed();
    io::save_safetensors(out_path, outputs.iter())?;
    let _ = writeln!(
        out,
        "ran {} on {} in {:.3} ms",
        file.display(),
        compiled.device(),
        elapsed.as_secs_f64() * 1e3
    );
    for (name, t) in outputs.iter() {
        let _ = writeln!(out, "  {name}: {}{}", t.dtype(), t.shape());
    }
    let _ = writeln!(out, "wrote {}", out_path.display());
    Ok(())
}

fn demo(out: &mut String, device: &str, seq: usize) -> smelt::Result<()> {
    let device: Device = device.parse().map_err(smelt::Error::Runtime)?;
    let report = models::run_demo(device, seq)?;
    out.push_str(&report);
    Ok(())
}

fn bench(
    out: &mut String,
    device: &str,
    mut opts: smelt::bench::BenchOptions,
    json: Option<&Path>,
    chart: Option<&Path>,
) -> smelt::Result<()> {
    opts.device = device.parse().map_err(smelt::Error::Runtime)?;
    let report = smelt::bench::run_suite(&opts, &mut |line| eprintln!("{line}"))?;
    out.push_str(&smelt::bench::report::tables(&report));
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| smelt::Error::File {
            path: path.to_path_buf(),
            message: format!("cannot write: {e}"),
        })
    };
    if let Some(path) = json {
        write(path, &smelt::bench::report::to_json(&report)?)?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    if let Some(path) = chart {
        write(path, &smelt::bench::chart::svg(&report))?;
        let _ = writeln!(out, "wrote {}", path.display());
    }
    Ok(())
}

fn model(out: &mut String, name: &str, seq: usize, layers: usize) -> smelt::Result<()> {
    let graph = match name {
        "bert-base" => models::bert_base(seq, layers)?,
        "encoder-layer" => models::encoder_layer(&models::EncoderConfig::bert_base(seq))?,
        _ => {
            return Err(smelt::Error::Usage(format!(
                "unknown model {name:?} (expected bert-base or encoder-layer)"
            )))
        }
    };
    let _ = write!(out, "{}", ir::text::print(&graph));
    Ok(())
}

fn cache(out: &mut String, action: CacheAction) -> Result<(), smelt::Error> {
    use smelt_runtime::cache::parse_size;
    let cache = smelt_runtime::cache::KernelCache::from_env();
    match action {
        CacheAction::Stats => {
            let _ = write!(out, "{}", cache.stats());
        }
        CacheAction::Clear => {
            let r = cache.clear();
            let _ = writeln!(
                out,
                "removed {} files ({} bytes) from disk and {} entries from memory",
                r.files_removed, r.bytes_removed, r.memory_entries_removed
            );
        }
        CacheAction::Prune { max_size } => {
            let max = match max_size {
                Some(text) => parse_size(&text)
                    .map_err(|e| smelt::Error::Usage(format!("--max-size: {e}")))?,
                None => cache.max_bytes(),
            };
            let Some(dir) = cache.dir() else {
                let _ = writeln!(out, "no cache folder (memory only): nothing to prune");
                return Ok(());
            };
            let max = max.unwrap_or(u64::MAX);
            let r = cache.prune(max);
            let limit = if max == u64::MAX {
                "no limit".to_string()
            } else {
                format!("{max} bytes")
            };
            let _ = writeln!(
                out,
                "{}: removed {} entries ({} bytes) and {} stale temporary files; kept {} entries ({} bytes, limit {limit})",
                dir.display(),
                r.entries_removed,
                r.bytes_removed,
                r.temp_files_removed,
                r.entries_kept,
                r.bytes_kept,
            );
        }
    }
    Ok(())
}
