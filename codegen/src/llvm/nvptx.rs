//! Kernel IR → PTX through LLVM's NVPTX back end: the alternative to CUDA C + NVRTC
//! ([`crate::cuda`]), selected with [`crate::cuda::CudaCodegen::Llvm`].
//!
//! # What it generates
//!
//! [`ptx_program`] turns every kernel step of a [`Program`] into one `.entry` of one PTX module,
//! with **the launch contract of the NVRTC kernels**, so one runtime launches either:
//!
//! - the same entry names as [`crate::cuda::cuda_program_source`] (the kernel's name; a name used
//!   twice gets `_s<step>` appended), in step order (GEMM steps have none);
//! - parameters: one pointer per entry of `Kernel::reads`, then one per entry of
//!   `Kernel::writes` (element 0 of the buffer, in storage form: `float`, `double`, `i32`,
//!   `i64`, f16 bits, bf16 bits, one byte per bool), then `i64 n`, the product of
//!   `kernel.outer` ([`PtxEntry::extent`]); in PTX every parameter is `.param .u64`;
//! - launched as a 1-D grid with [`PtxEntry::launch`] (blocks of [`BLOCK`] threads; the grid may
//!   be anything ≥ 1, threads grid-stride over `0..n`). `n` is clamped to the kernel's static
//!   extent, so a wrong `n` cannot make the kernel write past its buffers.
//!
//! # How
//!
//! The kernel body is **the CPU code generator's** ([`super::kernel::build_kernel`]): the same
//! internal LLVM function `<entry>.cpu.body(ptrs.., i32* status, i64 start, i64 end)` that the
//! host JIT inlines into its chunked entry point, built by the same code. The NVPTX module
//! drops the CPU wrapper (`void(i8** args, i64, i64)`) and instead wraps the body in a
//! `ptx_kernel` entry (marked by `!nvvm.annotations` `!{ptr @f, !"kernel", i32 1}`, plus
//! `maxntidx` = [`BLOCK`], printed as `.maxntid 256, 1, 1`) that computes the thread's global index
//! `ctaid.x * ntid.x + tid.x` and grid-strides over `0..min(n, extent)`, calling the body for
//! the one-index range `[i, i + 1)` (adjacent threads take adjacent outer indices, so
//! elementwise kernels coalesce; a reduction row runs sequentially in one thread).
//!
//! Then, before optimisation, two rewrites make the CPU body GPU code:
//! - **math functions**: f32 `exp`, `erf` and `tanh` are inline code in the CPU bodies
//!   (`super::kernel::math`, bitwise the host C library's) and stay so on the GPU; the calls the
//!   CPU path leaves to the C library or to LLVM intrinsics that NVPTX cannot select
//!   (`llvm.exp/log/sin/cos/pow/exp2/log2/log10/powi.*` for other dtypes, f64 `tanh`/`erf`,
//!   any other libm name) become calls to libdevice's `__nv_*` (`__nv_exp`, `__nv_logf`,
//!   `__nv_tanh`, …): CUDA's accurate math library, the one NVRTC's `expf` uses. libdevice
//!   (`libdevice.10.bc`, shipped with every CUDA toolkit, [`LIBDEVICE_RELATIVE`]) is given as
//!   bytes in [`NvptxOptions::libdevice`]; it is linked into the module, its functions made
//!   internal, and `__nvvm_reflect` is folded by LLVM's NVVMReflect pass (which the NVPTX
//!   target machine adds at the start of the pipeline; no flush-to-zero);
//! - **`frem`** (float `remainder` and `floor_div`): NVPTX lowers it as `x - trunc(x/y)*y`,
//!   which is not exact; it becomes `__nv_fmodf`/`__nv_fmod` (exact, like the C library's).
//!
//! Without libdevice, a kernel that needs one of these fails with
//! [`LlvmError::Unsupported`] naming the kernel and the function; kernels without
//! transcendental math compile without it. After optimisation any call left to a function
//! without a body (or to an intrinsic NVPTX cannot select) is the same typed error: the PTX
//! never holds an unresolved call.
//!
//! The module is optimised with the new pass manager's `default<O3>` against the NVPTX target
//! machine (no fast-math: `fmul` and `fadd` stay separate, like the CPU path and the NVRTC
//! path's `__fmul_rn`), then the target machine prints PTX.
//!
//! # Status word
//!
//! The CPU body reports a computed (gathered) index outside its buffer through a status word:
//! it reads 0, skips the write and ORs 1 into the word atomically. Here the word is the
//! module-scope `.visible .global .u32` [`STATUS_SYMBOL`] (`smelt_status`), initialised to 0
//! and shared by every entry of the module. A runtime may read it after a launch (and zero it
//! before the next) through `cuModuleGetGlobal(module, "smelt_status")`; a runtime that ignores
//! it still gets memory-safe gathers (the NVRTC path uses computed indices as given).
//!
//! # Architectures
//!
//! LLVM 14 knows GPUs up to `sm_86` and PTX ISA 7.5. For a requested `sm_XY` the module is
//! generated for the newest architecture LLVM knows that is not newer than `sm_XY`
//! ([`llvm_target_for`]: `sm_90` → `sm_86`) with PTX ISA 7.5 (`.version 7.5`, `.target sm_86`).
//! PTX is forward compatible: `ptxas -arch=sm_90` assembles it into a sm_90 cubin, and the
//! driver JIT-compiles it for any newer GPU when loaded as PTX (`cuModuleLoadData`); the text is
//! not rewritten. [`PtxModule::target`] says which `.target` the text has.
//!
//! # Values
//!
//! Exactly the CPU path's ([`super::kernel`]), hence the interpreter's, except that the math
//! functions not generated inline are libdevice's (CUDA's documented ULP bounds, e.g. `logf`
//! ≤ 1 ulp, `sinf` ≤ 2 ulp) rather than the host C library's, as for the NVRTC path.

use super::error::{LlvmError, Result};
use super::options::{MathMode, OptLevel};
use crate::cuda::LaunchConfig;
use smelt_passes::kernel::{Kernel, Program, Step};
use std::sync::Arc;

#[cfg(feature = "llvm")]
mod lower;

/// Threads per block of every entry (also its `.maxntid`).
pub const BLOCK: u32 = 256;

/// The most blocks a launch asks for (threads grid-stride beyond), as the NVRTC path.
pub const GRID_CAP: u64 = 65535;

/// The module-scope `u32` status word (see the module docs).
pub const STATUS_SYMBOL: &str = "smelt_status";

/// Where libdevice lies under a CUDA root (the folder whose `bin/` holds `ptxas`): the same in a
/// CUDA toolkit (`/usr/local/cuda`) and in the `nvidia-cuda-nvcc-cu12` wheel
/// (`.cuda/nvidia/cuda_nvcc/`).
pub const LIBDEVICE_RELATIVE: &str = "nvvm/libdevice/libdevice.10.bc";

/// The PTX ISA version of the generated text (the newest LLVM 14 writes).
pub const PTX_VERSION: &str = "7.5";

/// The GPU architectures LLVM 14's NVPTX back end knows, as `sm_XY` numbers.
pub const LLVM_SM_VERSIONS: [u32; 17] = [
    20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86,
];

/// The oldest architecture accepted: f16 conversions need sm_53, and ptxas 12 rejects
/// anything before sm_50.
pub const OLDEST_SM: u32 = 53;

/// libdevice's bitcode (`libdevice.10.bc`), shared cheaply between compilations.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Libdevice(Arc<[u8]>);

impl Libdevice {
    /// libdevice from bitcode bytes (checked when it is first parsed).
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Libdevice {
        Libdevice(bytes.into())
    }

    /// Reads libdevice from `path` (e.g. `<cuda root>/` [`LIBDEVICE_RELATIVE`]).
    pub fn read(path: &std::path::Path) -> Result<Libdevice> {
        std::fs::read(path)
            .map(Libdevice::from_bytes)
            .map_err(|e| LlvmError::Nvptx {
                message: format!("reading libdevice {}: {e}", path.display()),
            })
    }

    /// The bitcode.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Libdevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Libdevice({} bytes)", self.0.len())
    }
}

/// The libdevice file that belongs to the `ptxas` at `ptxas` (`<root>/bin/ptxas` →
/// `<root>/nvvm/libdevice/libdevice.10.bc`). A pure path computation: the file may not exist.
pub fn libdevice_beside_ptxas(ptxas: &std::path::Path) -> Option<std::path::PathBuf> {
    Some(ptxas.parent()?.parent()?.join(LIBDEVICE_RELATIVE))
}

/// Options of one PTX compilation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NvptxOptions {
    /// The `default<On>` pipeline and the back end's level (O3 by default).
    pub opt_level: OptLevel,
    /// libdevice, needed by kernels with transcendental math or float `remainder`/`floor_div`.
    pub libdevice: Option<Libdevice>,
    /// How f32 `exp`/`tanh`/`erf` are computed: the CPU generator's code, either way.
    pub math: MathMode,
}

/// One kernel entry of a [`PtxModule`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxEntry {
    /// The `.entry` name (the NVRTC path's entry name for the same step).
    pub name: String,
    pub launch: LaunchConfig,
    /// `n`, the last parameter: the product of the kernel's outer dims.
    pub extent: i64,
    /// Pointer parameters before `n`: `reads.len() + writes.len()`.
    pub buffers: usize,
}

/// A program's kernels as one PTX module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxModule {
    /// PTX text (`.version 7.5`, `.target` [`PtxModule::target`], 64-bit addresses).
    pub ptx: String,
    /// One per kernel step, in step order.
    pub entries: Vec<PtxEntry>,
    /// The architecture asked for, e.g. `sm_90`: what to pass to `ptxas -arch=`.
    pub arch: String,
    /// The `.target` of the text, e.g. `sm_86` (see [`llvm_target_for`]).
    pub target: String,
    /// The optimised LLVM IR the PTX was printed from (for debugging).
    pub ir: String,
}

/// The LLVM module before optimisation, for checks that the PTX path's kernel bodies are the
/// CPU path's ([`nvptx_ir`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvptxIr {
    /// The CPU generator's bodies and the PTX entries, as built.
    pub built: String,
    /// After the math and `frem` rewrites (before libdevice is linked).
    pub rewritten: String,
}

/// The entry names of `program`'s kernel steps, exactly as
/// [`crate::cuda::cuda_program_source`] names them.
pub fn entry_names(program: &Program) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Kernel(k) = step else { continue };
        let mut entry = k.name.clone();
        if names.contains(&entry) {
            entry = format!("{}_s{i}", k.name);
        }
        names.push(entry);
    }
    names
}

/// The `sm_XY` the PTX is generated for when `arch` is asked for: the newest architecture
/// LLVM 14 knows that is not newer than `arch` (`sm_90` → `sm_86`, `sm_80` → `sm_80`).
/// `arch` is `sm_XY` or `compute_XY`; older than [`OLDEST_SM`] is an error.
pub fn llvm_target_for(arch: &str) -> Result<String> {
    let fail = |message: &str| LlvmError::NvptxArch {
        arch: arch.to_string(),
        message: message.to_string(),
    };
    let digits = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))
        .ok_or_else(|| fail("expected sm_XY or compute_XY"))?;
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail("expected sm_XY or compute_XY (e.g. sm_90)"));
    }
    let sm: u32 = digits
        .parse()
        .map_err(|_| fail("expected sm_XY or compute_XY"))?;
    if sm < OLDEST_SM {
        return Err(fail(&format!(
            "the LLVM NVPTX path needs sm_{OLDEST_SM} or newer"
        )));
    }
    let best = LLVM_SM_VERSIONS
        .iter()
        .copied()
        .filter(|&v| v <= sm)
        .max()
        .ok_or_else(|| fail("no LLVM architecture fits"))?;
    Ok(format!("sm_{best}"))
}

/// The launch of a kernel with `extent` outer indices: blocks of [`BLOCK`] threads, one thread
/// per outer index, at most [`GRID_CAP`] blocks, at least one.
pub fn launch_for(extent: i64) -> LaunchConfig {
    let threads = u64::try_from(extent).unwrap_or(0);
    LaunchConfig {
        grid: threads.div_ceil(u64::from(BLOCK)).clamp(1, GRID_CAP) as u32,
        block: BLOCK,
        shared_bytes: 0,
    }
}

/// Every kernel step of `program` as one PTX module for `arch` (`"sm_90"`); see the module
/// docs. Without the `llvm` feature: [`LlvmError::NotCompiledIn`].
pub fn ptx_program(program: &Program, arch: &str, options: &NvptxOptions) -> Result<PtxModule> {
    let target = llvm_target_for(arch)?;
    let ks: Vec<&Kernel> = program.kernels().collect();
    let names = entry_names(program);
    #[cfg(feature = "llvm")]
    {
        lower::ptx(&ks, &names, &program.buffers, arch, &target, options)
    }
    #[cfg(not(feature = "llvm"))]
    {
        let _ = (ks, names, target, options);
        Err(LlvmError::NotCompiledIn)
    }
}

/// The LLVM IR of [`ptx_program`] before optimisation (see [`NvptxIr`]). Without the `llvm`
/// feature: [`LlvmError::NotCompiledIn`].
pub fn nvptx_ir(program: &Program, arch: &str, options: &NvptxOptions) -> Result<NvptxIr> {
    let target = llvm_target_for(arch)?;
    let ks: Vec<&Kernel> = program.kernels().collect();
    let names = entry_names(program);
    #[cfg(feature = "llvm")]
    {
        lower::ir(&ks, &names, &program.buffers, &target, options)
    }
    #[cfg(not(feature = "llvm"))]
    {
        let _ = (ks, names, target, options);
        Err(LlvmError::NotCompiledIn)
    }
}
