//! A graph's generated code, level by level: what `smelt explain --emit` prints.
//!
//! [`lower`] runs the optimiser as [`crate::compile_with`] does and lowers the fusion plan to
//! the kernel IR; [`emit`] prints that program at one level:
//!
//! | [`Emit`] | what | needs |
//! |---|---|---|
//! | `kernels` | smelt's kernel IR: every step (loops, loads, stores, reductions; GEMMs) | nothing |
//! | `llvm-ir` | the CPU kernels as optimised LLVM IR for this machine's CPU | the `llvm` feature |
//! | `asm` | the same kernels as this CPU's assembly, the code the JIT loads | the `llvm` feature |
//! | `cuda` | the CUDA C translation unit the NVRTC path compiles | nothing (no GPU, no NVRTC) |
//! | `ptx` | PTX from LLVM's NVPTX back end (the `--ptx-llvm` path) for an `sm_XY` | the `llvm` feature; libdevice for transcendental math |
//!
//! The CPU listings go through the JIT's own pipeline (vectorisation, the `vscalefps`
//! variants, prefetch, streaming stores as [`crate::Options`] say), so they are the code that
//! runs, in one module instead of the runtime's one per core. Every kernel keeps its plan name
//! (`k0_reduction`, …) as its function or entry name, and the CUDA C has a comment header per
//! kernel naming the graph ops it came from.
//!
//! ```
//! use smelt::emit::{emit, lower, Emit};
//! use smelt::{frontend::Tracer, ir::DType, Options};
//!
//! let t = Tracer::new();
//! let x = t.input("x", DType::F32, [4, 8]).unwrap();
//! t.output("y", &x.softmax(-1).unwrap()).unwrap();
//! let options = Options::default();
//! let program = lower(&t.finish().unwrap(), &options).unwrap();
//! // One fused row kernel, as CUDA C (no GPU or NVRTC needed to print it).
//! let cuda = emit(&program, &options, Emit::Cuda, "sm_90").unwrap();
//! assert_eq!(cuda.matches("extern \"C\" __global__").count(), 1);
//! ```

use crate::{Error, Options, Result};
use smelt_ir::Graph;
use smelt_passes::kernel::Program;
use std::fmt;
use std::str::FromStr;

/// One level of generated code (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Emit {
    Kernels,
    LlvmIr,
    Asm,
    Cuda,
    Ptx,
}

impl Emit {
    pub const ALL: [Emit; 5] = [
        Emit::Kernels,
        Emit::LlvmIr,
        Emit::Asm,
        Emit::Cuda,
        Emit::Ptx,
    ];

    /// The name `--emit` takes.
    pub fn name(self) -> &'static str {
        match self {
            Emit::Kernels => "kernels",
            Emit::LlvmIr => "llvm-ir",
            Emit::Asm => "asm",
            Emit::Cuda => "cuda",
            Emit::Ptx => "ptx",
        }
    }

    /// The file `--emit-dir` writes it to.
    pub fn file_name(self) -> &'static str {
        match self {
            Emit::Kernels => "kernels.txt",
            Emit::LlvmIr => "kernels.ll",
            Emit::Asm => "kernels.s",
            Emit::Cuda => "kernels.cu",
            Emit::Ptx => "kernels.ptx",
        }
    }
}

impl fmt::Display for Emit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Emit {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Emit, String> {
        Emit::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Emit::ALL.iter().map(|e| e.name()).collect();
                format!("unknown --emit {s:?}: expected one of {}", names.join(", "))
            })
    }
}

/// The kernel IR program `graph` compiles to under `options` (its verifier, optimiser and
/// lowering, as [`crate::compile_with`] runs them; the device is not consulted).
pub fn lower(graph: &Graph, options: &Options) -> Result<Program> {
    smelt_ir::verify(graph)?;
    let optimized = smelt_passes::optimize(graph, &options.pass_options())?;
    Ok(smelt_passes::kernel::lower(
        &optimized.graph,
        &optimized.plan,
    )?)
}

/// `program` printed at level `what`; `arch` (`"sm_90"`) is the GPU architecture of
/// [`Emit::Ptx`] and unused otherwise. A level this build cannot produce (no `llvm` feature),
/// an architecture LLVM cannot target or a kernel the NVPTX path cannot lower is an error
/// saying so.
pub fn emit(program: &Program, options: &Options, what: Emit, arch: &str) -> Result<String> {
    let codegen = |level: Emit| move |error| Error::Emit { level, error };
    Ok(match what {
        Emit::Kernels => program.to_string(),
        Emit::LlvmIr | Emit::Asm => {
            let (ir, asm) = smelt_codegen::llvm::program_listing(program, &options.jit_options())
                .map_err(codegen(what))?;
            if what == Emit::LlvmIr {
                ir
            } else {
                asm
            }
        }
        Emit::Cuda => smelt_codegen::cuda::cuda_program_source(program).source,
        Emit::Ptx => {
            // The CUDA runtime's own options for the LLVM path (libdevice beside its ptxas).
            let nvptx = smelt_runtime::cuda::nvptx_options();
            smelt_codegen::llvm::nvptx::ptx_program(program, arch, &nvptx)
                .map_err(codegen(what))?
                .ptx
        }
    })
}
