//! The `smelt` command-line tool.

use clap::{Parser, Subcommand};
use smelt::{compile_with, io, ir, models, Device, Options};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

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
        /// reference, cpu, cuda, cuda:N or auto.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Run one kernel per op (the unfused baseline).
        #[arg(long)]
        no_fuse: bool,
    },
    /// Inspect or empty the compiled-kernel cache ($SMELT_CACHE_DIR, default ~/.cache/smelt).
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
    /// Compile a built-in model (a BERT-style encoder layer) and run it on the best device.
    Demo {
        /// reference, cpu, cuda, cuda:N or auto.
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { file } => check(&file),
        Command::Run {
            file,
            inputs,
            out,
            device,
            no_fuse,
        } => run(&file, inputs.as_deref(), &out, &device, no_fuse),
        Command::Demo { device, seq } => demo(&device, seq),
        Command::Model { name, seq, layers } => model(&name, seq, layers),
        Command::Cache { action } => {
            cache(action);
            Ok(())
        }
    };
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

fn check(file: &Path) -> smelt::Result<()> {
    let graph = load_graph(file)?;
    ir::verify(&graph)?;
    print!("{}", ir::text::print(&graph));
    let sig = smelt::Signature::of(&graph);
    println!(
        "# ok: {} values, {} inputs/params, {} outputs",
        graph.len(),
        sig.0.len(),
        graph.outputs().len()
    );
    Ok(())
}

fn run(
    file: &Path,
    inputs: Option<&Path>,
    out: &Path,
    device: &str,
    no_fuse: bool,
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
            no_fuse,
            ..Options::default()
        },
    )?;
    let start = Instant::now();
    let outputs = compiled.run(&tensors)?;
    let elapsed = start.elapsed();
    io::save_safetensors(out, outputs.iter())?;
    println!(
        "ran {} on {} in {:.3} ms",
        file.display(),
        compiled.device(),
        elapsed.as_secs_f64() * 1e3
    );
    for (name, t) in outputs.iter() {
        println!("  {name}: {}{}", t.dtype(), t.shape());
    }
    println!("wrote {}", out.display());
    Ok(())
}

fn demo(device: &str, seq: usize) -> smelt::Result<()> {
    let device: Device = device.parse().map_err(smelt::Error::Runtime)?;
    let report = models::run_demo(device, seq)?;
    print!("{report}");
    Ok(())
}

fn model(name: &str, seq: usize, layers: usize) -> smelt::Result<()> {
    let graph = match name {
        "bert-base" => models::bert_base(seq, layers)?,
        "encoder-layer" => models::encoder_layer(&models::EncoderConfig::bert_base(seq))?,
        _ => {
            return Err(smelt::Error::Usage(format!(
                "unknown model {name:?} (expected bert-base or encoder-layer)"
            )))
        }
    };
    print!("{}", ir::text::print(&graph));
    Ok(())
}

fn cache(action: CacheAction) {
    let cache = smelt_runtime::cache::KernelCache::from_env();
    match action {
        CacheAction::Stats => print!("{}", cache.stats()),
        CacheAction::Clear => {
            let r = cache.clear();
            println!(
                "removed {} files ({} bytes) from disk and {} entries from memory",
                r.files_removed, r.bytes_removed, r.memory_entries_removed
            );
        }
    }
}
