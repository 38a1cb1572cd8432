//! smelt: torch.compile for Rust.
//!
//! Describe a tensor program with the tracing API ([`frontend`]) or in a `.smelt` text file
//! ([`ir::text`]), then [`compile`] it and run it with host tensors bound by name:
//!
//! ```
//! use smelt::{compile, ir::{DType, HostTensor}, frontend::Tracer};
//! use std::collections::HashMap;
//!
//! let t = Tracer::new();
//! let x = t.input("x", DType::F32, [2, 3]).unwrap();
//! let y = x.exp().unwrap().sum(&[1], false).unwrap();
//! t.output("y", &y).unwrap();
//! let graph = t.finish().unwrap();
//!
//! let compiled = compile(&graph).unwrap();
//! let x = HostTensor::from_f32([2, 3], vec![0.0; 6]).unwrap();
//! let out = compiled.run(&HashMap::from([("x".to_string(), x)])).unwrap();
//! assert_eq!(out.get("y").unwrap().to_f32_vec(), vec![3.0, 3.0]);
//! ```
//!
//! `Device::Auto` (the default) runs on CUDA GPU 0 when one is usable and NVRTC loads (fused
//! kernels compiled with NVRTC, GEMMs through cuBLAS; see `docs/cuda.md`), else the fused kernels
//! JIT-compiled for the host CPU when the `llvm` feature is on, else the reference interpreter.
//! `Device::CudaEmulated` runs the CUDA backend's kernels on the CPU under an emulation of
//! CUDA's thread model, to test them without a GPU.

/// The README's examples run as doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod bench;
pub mod emit;
pub mod io;
pub mod models;

pub use smelt_codegen::llvm::{ByCpu, MachineSchedule, MathMode, RowPrefetch};
pub use smelt_frontend as frontend;
pub use smelt_ir as ir;
pub use smelt_ir::Signature;
pub use smelt_runtime::alloc::{set_block_cache_limit, set_huge_pages, LargeAligned};
/// The GPU launch path: device tensors (runs without host copies), options, streams.
pub use smelt_runtime::cuda::{
    cuda_context, CudaCodegen, CudaContext, CudaOptions, CudaProgram, CudaStream, DeviceTensor,
};
pub use smelt_runtime::Device;

use smelt_ir::{Graph, HostTensor};
pub use smelt_passes::{FusionPlan, Optimized, PassOptions};
use std::collections::HashMap;
use std::path::PathBuf;

/// Everything that can go wrong between a graph and its outputs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Ir(#[from] smelt_ir::IrError),
    #[error(transparent)]
    Parse(#[from] smelt_ir::text::ParseError),
    #[error(transparent)]
    Frontend(#[from] smelt_frontend::FrontendError),
    #[error(transparent)]
    Runtime(#[from] smelt_runtime::RuntimeError),
    #[error(transparent)]
    Pass(#[from] smelt_passes::PassError),
    #[error("{0}")]
    Usage(String),
    /// Generating code at one `--emit` level failed (see [`emit`]).
    #[error("--emit {level}: {error}")]
    Emit {
        level: emit::Emit,
        error: smelt_codegen::llvm::LlvmError,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to compile a graph.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Where to run; `Auto` picks the best available device.
    pub device: Device,
    /// Turn fusion off: one kernel per op (the baseline of the benchmarks). The reference
    /// device is always unfused.
    pub no_fuse: bool,
    /// Allow rewrites that change rounding or NaN behaviour (reassociation, `x * 0 → 0`, …).
    pub fast_math: bool,
    /// Parameters bound at compile time, by name; the rest are supplied at run time.
    pub params: HashMap<String, HostTensor>,
    /// On a CUDA device: which code generator makes the kernels (CUDA C through NVRTC, the
    /// default, or PTX through LLVM's NVPTX back end).
    pub cuda_codegen: CudaCodegen,
    /// On the CPU: how kernels compute f32 `exp`, `tanh`, `erf` (and `sigmoid`). The default,
    /// [`MathMode::Polynomial`], is vectorised f32 polynomials within 1–2 ulp;
    /// [`MathMode::Libm`] matches the C library (and the reference interpreter) bit for bit,
    /// several times slower. (CUDA C kernels use CUDA's math library.)
    pub math: MathMode,
    /// On the CPU: no software prefetch in kernels' vector loops. By default each loop
    /// prefetches the memory it loads and stores 2 KiB ahead
    /// ([`smelt_codegen::llvm::JitOptions::prefetch_bytes`]), which lets kernels that compute
    /// much per element overlap their memory traffic with their arithmetic.
    pub no_prefetch: bool,
    /// On the CPU: how row kernels (softmax, layer_norm, …) over data out of cache prefetch:
    /// two rows ahead, which keeps memory busy while a row in cache is computed
    /// ([`RowPrefetch::Rows`]), at the module's distance like other kernels
    /// ([`RowPrefetch::Module`]), or not at all ([`RowPrefetch::Off`]). The default,
    /// [`RowPrefetch::Auto`], picks by CPU, as measured: `Off` on AMD Zen 4 (Zen with
    /// AVX-512), `Rows` elsewhere ([`smelt_codegen::llvm::JitOptions::row_prefetch`]). Values
    /// are the same either way.
    pub row_prefetch: RowPrefetch,
    /// On the CPU: row kernels whose later pass computes a transcendental op (softmax's `exp`)
    /// also prefetch in their first pass, as before the thirtieth session
    /// ([`smelt_codegen::llvm::JitOptions::first_pass_prefetch`]; by default the later pass
    /// alone requests the rows ahead, spread over its arithmetic). Values are the same either
    /// way. `smelt bench --compare first-pass-prefetch` measures it.
    pub first_pass_prefetch: bool,
    /// On the CPU: plain stores everywhere. By default kernels whose outputs are all at least
    /// 16 MiB write whole cache lines with streaming (non-temporal) stores, which skip the
    /// read of each line a plain store does first
    /// ([`smelt_codegen::llvm::JitOptions::nontemporal_min_bytes`]), except into the fresh
    /// outputs of `run`, whose pages the OS has just zeroed through the cache. Values are the
    /// same either way.
    pub no_streaming_stores: bool,
    /// On the CPU: row kernels (softmax, layer_norm, …) compute one row at a time instead of
    /// two interleaved ([`smelt_codegen::llvm::JitOptions::interleave_rows`], on by default,
    /// which overlaps the dependent passes of short rows). Values are the same either way.
    pub no_interleave_rows: bool,
    /// On the CPU: store loops as the loop vectoriser would make them, and split reductions
    /// one block at a time, instead of four vectors computed side by side per iteration
    /// ([`smelt_codegen::llvm::JitOptions::interleave_vectors`], which keeps the vector
    /// units busy through long bodies such as `tanh`'s or softmax's `exp`). Values are the
    /// same either way.
    pub no_interleave_vectors: bool,
    /// On the CPU: elementwise kernels that read an operand transposed (across its rows)
    /// walk their output row by row, one cache line of that operand per element, instead of
    /// in square tiles whose part of the operand is transposed in registers
    /// ([`smelt_codegen::llvm::JitOptions::tile_transposes`], on by default). Values are the
    /// same either way.
    pub no_tiled_transposes: bool,
    /// On the CPU: whether elementwise kernels with an f32 `tanh` or `erf` run in two loops
    /// per block of 256 elements, cut in the middle of that op, instead of one
    /// ([`smelt_codegen::llvm::JitOptions::loop_fission`]; by default where it was
    /// measured, AMD Zen 3). Values are the same either way.
    pub loop_fission: ByCpu,
    /// On the CPU: whether kernels' f32 constants are loaded once from memory instead of
    /// being LLVM constants, which on AVX2 it broadcasts again inside long loops
    /// ([`smelt_codegen::llvm::JitOptions::constant_loads`]; by default where it was
    /// measured, AMD Zen 3). Values are the same either way.
    pub constant_loads: ByCpu,
    /// On the CPU: f32 matrix products (linear layers) of at most this many rows run on
    /// smelt's panel kernel (with AVX-512F, or AVX2 and FMA), with bound weights packed for it
    /// once at compile time, and larger ones on the `gemm` crate. `None`:
    /// [`PANEL_MAX_ROWS`](smelt_runtime::cpu::PANEL_MAX_ROWS) (128). For measuring one
    /// against the other; results differ in rounding only (the two sum in different orders).
    pub gemm_panel_max_rows: Option<usize>,
    /// On the CPU: where compiled kernel modules are kept between processes. By default
    /// ([`CpuDiskCache::FromEnv`](smelt_runtime::cpu::CpuDiskCache)) in the kernel cache
    /// folder (`$SMELT_CACHE_DIR`, else `~/.cache/smelt`), so that a process compiling a graph
    /// an earlier one compiled loads its machine code instead of running LLVM.
    pub cpu_disk_cache: smelt_runtime::cpu::CpuDiskCache,
}

impl Options {
    /// The options of the pass pipeline these options imply.
    pub fn pass_options(&self) -> PassOptions {
        PassOptions {
            fuse: !self.no_fuse,
            fast_math: self.fast_math,
            ..PassOptions::default()
        }
    }

    /// The options CPU programs are compiled with under these options.
    pub fn cpu_options(&self) -> smelt_runtime::cpu::CpuOptions {
        smelt_runtime::cpu::CpuOptions {
            jit: self.jit_options(),
            panel_max_rows: self.gemm_panel_max_rows,
            disk_cache: self.cpu_disk_cache.clone(),
            ..Default::default()
        }
    }

    /// The JIT options CPU kernels are compiled with under these options.
    pub fn jit_options(&self) -> smelt_codegen::llvm::JitOptions {
        let defaults = smelt_codegen::llvm::JitOptions::default();
        smelt_codegen::llvm::JitOptions {
            math: self.math,
            prefetch_bytes: if self.no_prefetch {
                None
            } else {
                defaults.prefetch_bytes
            },
            row_prefetch: self.row_prefetch,
            first_pass_prefetch: self.first_pass_prefetch,
            nontemporal_min_bytes: if self.no_streaming_stores {
                None
            } else {
                defaults.nontemporal_min_bytes
            },
            interleave_rows: !self.no_interleave_rows,
            interleave_vectors: if self.no_interleave_vectors {
                None
            } else {
                defaults.interleave_vectors
            },
            tile_transposes: !self.no_tiled_transposes,
            loop_fission: self.loop_fission,
            constant_loads: self.constant_loads,
            ..defaults
        }
    }

    /// What [`Options::row_prefetch`] stands for on this machine's CPU (`Auto` resolved by
    /// [`RowPrefetch::for_cpu`]; `Auto` itself where the host CPU is unknown, as in a build
    /// without LLVM).
    pub fn host_row_prefetch(&self) -> RowPrefetch {
        smelt_codegen::llvm::host_target().map_or(self.row_prefetch, |h| {
            self.row_prefetch.for_cpu(&h.cpu, &h.features)
        })
    }

    /// Whether `choice` ([`Options::loop_fission`], [`Options::constant_loads`]) is on for
    /// this machine's CPU (`Auto` on AMD Zen 3, [`smelt_codegen::llvm::zen3`]); `false` where
    /// the host CPU is unknown, as in a build without LLVM.
    pub fn host_choice(choice: ByCpu) -> bool {
        smelt_codegen::llvm::host_target()
            .is_ok_and(|h| choice.on(smelt_codegen::llvm::zen3(&h.cpu, &h.features)))
    }
}

/// A compiled graph, ready to run.
#[derive(Debug)]
pub struct Compiled {
    /// The graph as given.
    graph: Graph,
    /// What the optimiser made of it: the simplified graph and its fusion plan.
    optimized: Optimized,
    device: Device,
    params: HashMap<String, HostTensor>,
    backend: Backend,
}

/// What runs a compiled graph.
#[derive(Debug)]
enum Backend {
    /// The reference interpreter on the simplified graph, op by op.
    Reference,
    /// The lowered kernel program, JIT-compiled for the host CPU.
    Cpu {
        program: Box<smelt_passes::kernel::Program>,
        cpu: Box<smelt_runtime::cpu::CpuProgram>,
        options: smelt_runtime::cpu::CpuOptions,
    },
    /// The lowered kernel program on a CUDA GPU.
    Cuda {
        program: Box<smelt_passes::kernel::Program>,
        cuda: Box<smelt_runtime::cuda::CudaProgram>,
        codegen: CudaCodegen,
    },
    /// The lowered kernel program's CUDA C on the CPU emulator of CUDA's thread model.
    CudaEmulated {
        program: Box<smelt_passes::kernel::Program>,
        emulated: Box<smelt_runtime::cuda::emulate::EmulatedProgram>,
    },
}

/// Outputs of a run, in the graph's output order, looked up by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Outputs(pub Vec<(String, HostTensor)>);

impl Outputs {
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &HostTensor)> {
        self.0.iter().map(|(n, t)| (n.as_str(), t))
    }
}

/// Compiles `graph` for the best available device with default options.
pub fn compile(graph: &Graph) -> Result<Compiled> {
    compile_with(graph, Options::default())
}

/// Compiles `graph` with `options`: verifies it, resolves the device, runs the optimiser
/// (simplification and fusion planning), and binds the given parameters (checking their
/// names, dtypes and shapes).
pub fn compile_with(graph: &Graph, options: Options) -> Result<Compiled> {
    smelt_ir::verify(graph)?;
    let device = options.device.resolve()?;
    let optimized = smelt_passes::optimize(graph, &options.pass_options())?;
    let backend = match device {
        Device::Cpu => {
            let program = smelt_passes::kernel::lower(&optimized.graph, &optimized.plan)?;
            let cpu_options = options.cpu_options();
            let cpu = cpu_program(&program, &optimized.graph, &HashMap::new(), &cpu_options)?;
            Backend::Cpu {
                program: Box::new(program),
                cpu: Box::new(cpu),
                options: cpu_options,
            }
        }
        Device::Cuda(n) => {
            let program = smelt_passes::kernel::lower(&optimized.graph, &optimized.plan)?;
            let codegen = options.cuda_codegen;
            let cuda = cuda_program(&program, &optimized.graph, &HashMap::new(), n, codegen)?;
            Backend::Cuda {
                program: Box::new(program),
                cuda: Box::new(cuda),
                codegen,
            }
        }
        Device::CudaEmulated => {
            let program = smelt_passes::kernel::lower(&optimized.graph, &optimized.plan)?;
            let emulated = emulated_program(&program, &optimized.graph, &HashMap::new())?;
            Backend::CudaEmulated {
                program: Box::new(program),
                emulated: Box::new(emulated),
            }
        }
        _ => Backend::Reference,
    };
    let mut compiled = Compiled {
        graph: graph.clone(),
        optimized,
        device,
        params: HashMap::new(),
        backend,
    };
    compiled.bind_params(options.params)?;
    Ok(compiled)
}

/// JIT-compiles `program` for the host with `params` bound under `options`, and gives its
/// outputs the shapes of `graph`'s outputs (buffers are flat).
fn cpu_program(
    program: &smelt_passes::kernel::Program,
    graph: &Graph,
    params: &HashMap<String, HostTensor>,
    options: &smelt_runtime::cpu::CpuOptions,
) -> Result<smelt_runtime::cpu::CpuProgram> {
    let cpu_err = |e: smelt_runtime::cpu::CpuError| Error::Runtime(e.into());
    let mut cpu =
        smelt_runtime::cpu::CpuProgram::compile_with(program, params, options).map_err(cpu_err)?;
    for (name, id) in graph.outputs() {
        cpu.set_output_shape(name, graph.ty(*id).shape.clone())
            .map_err(cpu_err)?;
    }
    Ok(cpu)
}

fn cuda_err(e: smelt_runtime::cuda::CudaExecError) -> Error {
    Error::Runtime(e.into())
}

/// Compiles `program` for CUDA device `device` with `params` bound, and gives its outputs the
/// shapes of `graph`'s outputs (buffers are flat).
fn cuda_program(
    program: &smelt_passes::kernel::Program,
    graph: &Graph,
    params: &HashMap<String, HostTensor>,
    device: usize,
    codegen: CudaCodegen,
) -> Result<smelt_runtime::cuda::CudaProgram> {
    let options = smelt_runtime::cuda::CudaOptions {
        device,
        codegen,
        ..Default::default()
    };
    let mut cuda =
        smelt_runtime::cuda::CudaProgram::compile(program, params, &options).map_err(cuda_err)?;
    for (name, id) in graph.outputs() {
        cuda.set_output_shape(name, graph.ty(*id).shape.clone())
            .map_err(cuda_err)?;
    }
    Ok(cuda)
}

/// Builds `program`'s CUDA C for the CPU emulator with `params` bound, and gives its outputs
/// the shapes of `graph`'s outputs.
fn emulated_program(
    program: &smelt_passes::kernel::Program,
    graph: &Graph,
    params: &HashMap<String, HostTensor>,
) -> Result<smelt_runtime::cuda::emulate::EmulatedProgram> {
    use smelt_runtime::cuda::emulate::{EmulatedProgram, EmulatorOptions};
    let mut emulated =
        EmulatedProgram::compile(program, params, &EmulatorOptions::default()).map_err(cuda_err)?;
    for (name, id) in graph.outputs() {
        emulated
            .set_output_shape(name, graph.ty(*id).shape.clone())
            .map_err(cuda_err)?;
    }
    Ok(emulated)
}

impl Compiled {
    /// The compiled CUDA program when the graph runs on a GPU: its device-tensor runs
    /// ([`CudaProgram::run_device`]) chain graphs without host copies.
    pub fn cuda_program(&self) -> Option<&CudaProgram> {
        match &self.backend {
            Backend::Cuda { cuda, .. } => Some(cuda),
            _ => None,
        }
    }

    /// The device this graph runs on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The graph as given to [`compile_with`].
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The optimiser's result: simplified graph, fusion plan and saturation reports.
    pub fn optimized(&self) -> &Optimized {
        &self.optimized
    }

    /// What `run` expects: every input, and every parameter not bound yet.
    pub fn signature(&self) -> Signature {
        let mut sig = Signature::of(&self.graph);
        sig.0.retain(|b| !self.params.contains_key(&b.name));
        sig
    }

    /// Binds parameters once; later runs need not supply them. Each must be a parameter of the
    /// graph with the declared dtype and shape.
    pub fn bind_params(&mut self, params: HashMap<String, HostTensor>) -> Result<()> {
        let sig = Signature::of(&self.graph);
        let mut problems = Vec::new();
        let mut names: Vec<&String> = params.keys().collect();
        names.sort();
        for name in names {
            let t = &params[name];
            match sig.0.iter().find(|b| &b.name == name) {
                Some(b) if !b.is_param => problems.push(format!(
                    "{name:?} is an input, not a parameter: supply it to run()"
                )),
                Some(b) if b.ty.dtype != t.dtype() || b.ty.shape != *t.shape() => {
                    problems.push(format!(
                        "parameter {name:?} is {}{} but the graph expects {}",
                        t.dtype(),
                        t.shape(),
                        b.ty
                    ))
                }
                Some(_) => {}
                None => problems.push(format!("{name:?} is not a parameter of the graph")),
            }
        }
        if !problems.is_empty() {
            return Err(smelt_runtime::RuntimeError::Bindings {
                problems,
                expected: sig,
            }
            .into());
        }
        if params.is_empty() {
            return Ok(());
        }
        self.params.extend(params);
        // The CPU program holds bound parameters; rebuild it with the new set.
        match &mut self.backend {
            Backend::Cpu {
                program,
                cpu,
                options,
            } => {
                **cpu = cpu_program(program, &self.optimized.graph, &self.params, options)?;
            }
            Backend::Cuda {
                program,
                cuda,
                codegen,
            } => {
                let n = cuda.device_info().ordinal;
                **cuda = cuda_program(program, &self.optimized.graph, &self.params, n, *codegen)?;
            }
            Backend::CudaEmulated { program, emulated } => {
                **emulated = emulated_program(program, &self.optimized.graph, &self.params)?;
            }
            Backend::Reference => {}
        }
        Ok(())
    }

    /// Runs the graph on host tensors given by input name; returns outputs by name.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Outputs> {
        smelt_runtime::check_bindings(&self.graph, inputs, &self.params)?;
        match &self.backend {
            Backend::Reference => {
                let mut all = self.params.clone();
                all.extend(inputs.iter().map(|(k, v)| (k.clone(), v.clone())));
                // The reference device runs the simplified graph op by op, unfused.
                let out = smelt_ir::interp::eval(&self.optimized.graph, &all)
                    .map_err(smelt_runtime::RuntimeError::from)?;
                Ok(Outputs(out))
            }
            Backend::Cpu { cpu, .. } => {
                Ok(Outputs(cpu.run(inputs).map_err(|e| {
                    Error::Runtime(smelt_runtime::RuntimeError::from(e))
                })?))
            }
            Backend::Cuda { cuda, .. } => Ok(Outputs(cuda.run(inputs).map_err(cuda_err)?)),
            Backend::CudaEmulated { emulated, .. } => {
                Ok(Outputs(emulated.run(inputs).map_err(cuda_err)?))
            }
        }
    }

    /// Runs the graph writing into preallocated `outputs` (graph output order, each of the
    /// output's dtype and shape). On the CPU device this allocates nothing in steady state.
    pub fn run_into(
        &self,
        inputs: &HashMap<String, HostTensor>,
        outputs: &mut [HostTensor],
    ) -> Result<()> {
        smelt_runtime::check_bindings(&self.graph, inputs, &self.params)?;
        match &self.backend {
            Backend::Cpu { cpu, .. } => cpu
                .run_into(inputs, outputs)
                .map_err(|e| Error::Runtime(smelt_runtime::RuntimeError::from(e))),
            Backend::Cuda { cuda, .. } => cuda.run_into(inputs, outputs).map_err(cuda_err),
            Backend::Reference | Backend::CudaEmulated { .. } => {
                let out = self.run(inputs)?;
                if out.0.len() != outputs.len() {
                    return Err(Error::Usage(format!(
                        "run_into: the graph has {} outputs, {} tensors were given",
                        out.0.len(),
                        outputs.len()
                    )));
                }
                for ((name, t), slot) in out.0.into_iter().zip(outputs.iter_mut()) {
                    if t.dtype() != slot.dtype() || t.shape() != slot.shape() {
                        return Err(Error::Usage(format!(
                            "run_into: output {name:?} is {}{} but the tensor given is {}{}",
                            t.dtype(),
                            t.shape(),
                            slot.dtype(),
                            slot.shape()
                        )));
                    }
                    *slot = t;
                }
                Ok(())
            }
        }
    }
}
