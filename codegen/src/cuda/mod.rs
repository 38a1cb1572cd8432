//! Kernel IR → CUDA C for NVRTC.
//!
//! [`cuda_source`] prints one [`Kernel`] as a self-contained translation unit;
//! [`cuda_program_source`] prints every kernel of a [`Program`] into one translation unit (the
//! helper prelude once), which is what the runtime compiles and caches. The output is a pure
//! function of the kernel IR (no hash-map order, no addresses), so the source is a cache key.
//!
//! # The generated kernel
//!
//! ```c
//! // kernel k1_softmax: block per row … / from: %1 max, %2 sub, …
//! extern "C" __global__ void __launch_bounds__(128) k1_softmax(
//!     const float* __restrict__ in0, // b0        the kernel's reads, in order
//!     float* __restrict__ out0, // b1            then its writes, in order
//!     long long n)                               the number of outer indices
//! ```
//!
//! - Parameters: one pointer per entry of `reads` (`const T*`), then one per entry of `writes`,
//!   then `n`, which must equal the product of `kernel.outer` (the launch domain; dims are
//!   static, so `n` only bounds the grid-stride loops). A buffer both read and written loses
//!   `__restrict__`. Pointer types are storage types: `float`, `double`, `int`, `long long`,
//!   `__half`, `__nv_bfloat16`, and `unsigned char` for bool (0 or 1; read as `!= 0`).
//! - Index arithmetic is `int` or `long long` as `kernel.index_width` says; grid-stride
//!   counters are always `long long`.
//! - Launch with [`LaunchConfig`]: 1-D grid and block. The block size is part of the code
//!   (`__launch_bounds__`, reduction trees); the grid may be anything ≥ 1.
//!
//! # Strategies
//!
//! - Elementwise kernels (one store stage, no inner dims): [`elementwise`] — grid-stride
//!   loop, 16-byte vector accesses when aligned and contiguous (see its doc for the alignment
//!   assumption: buffers 16-byte aligned); with an operand read transposed, [`tiles`] — 32 x 32
//!   tiles through shared memory.
//! - Everything else: [`rows`] — one thread per outer index for short rows, one block per outer
//!   index with a deterministic shuffle + shared-memory tree otherwise, rows cached in registers
//!   up to 4096 elements.
//!
//! # Value semantics (the interpreter's, `smelt_ir::interp`)
//!
//! f16/bf16 values are held in `float` and rounded to nearest-even (`__float2half_rn`,
//! `__float2bfloat16_rn`) after every op; accumulators have the IR's `acc` dtype (f32 for
//! f16/bf16 sums). Integer arithmetic wraps (computed on unsigned types). `floor_div` and
//! `remainder` follow Python; **integer division by zero gives 0** (the interpreter reports an
//! error; a kernel has no error channel), `MIN floor_div -1` is `MIN`. float → int casts
//! truncate, saturate, and send NaN to 0. `maximum`/`minimum` and max/min reductions propagate
//! NaN; argmax/argmin return the first extreme index, NaN counting as extreme. f32/f64
//! arithmetic uses `__fadd_rn`-style intrinsics so no FMA contraction changes results; math
//! functions are CUDA's accurate ones (`expf`, `erff`, `tanhf`, never `__expf`). An access
//! through a computed index (a gather, a div/mod view) is range-checked: outside its buffer
//! (the lowering marks an out-of-range gather with index -1) a load reads 0 and a store is
//! skipped, and bit 0 of the program's status word [`STATUS_WORD`] is set for the runtime to
//! report, as the CPU backend's status word does.
//!
//! A malformed kernel (a value used before definition, a buffer that is not a parameter)
//! prints `#error` lines, so NVRTC rejects it with a message instead of smelt panicking.

mod body;
mod ctx;
pub mod elementwise;
mod prelude;
pub mod rows;
pub mod tiles;

use ctx::Ctx;
use smelt_ir::DType;
use smelt_passes::kernel::{BufferId, Kernel, Program, StageEffect, Step};
use std::fmt::Write;

/// Which code generator produces a program's CUDA kernels. Both give the same entry names,
/// parameters (`reads`, `writes`, `i64 n`) and 1-D launches, so one runtime launches either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CudaCodegen {
    /// CUDA C ([`cuda_program_source`]) compiled at run time by NVRTC: the kernels tuned for the
    /// GPU (16-byte vector accesses, block reductions with shuffle trees).
    #[default]
    Nvrtc,
    /// PTX from LLVM's NVPTX back end ([`crate::llvm::nvptx::ptx_program`]): the CPU backend's
    /// kernel bodies, one GPU thread per outer index; needs the `llvm` feature (and libdevice
    /// for transcendental math), no NVRTC. Simpler code, slower reductions.
    Llvm,
}

/// How to launch a generated kernel: a 1-D grid of `grid` blocks of `block` threads, with
/// `shared_bytes` of dynamic shared memory (0 today: reductions use static shared memory,
/// 32 partials per reduction stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: u32,
}

impl LaunchConfig {
    /// `items` elements, `per_thread` per thread, over blocks of `block` threads,
    /// capped at [`elementwise::GRID_CAP`] blocks (threads grid-stride beyond).
    fn threads(items: u64, block: u32, per_thread: u64) -> LaunchConfig {
        let threads = items.div_ceil(per_thread.max(1));
        LaunchConfig {
            grid: threads
                .div_ceil(u64::from(block))
                .clamp(1, elementwise::GRID_CAP) as u32,
            block,
            shared_bytes: 0,
        }
    }
}

/// One kernel as CUDA C.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaKernel {
    /// A complete translation unit (prelude + kernel).
    pub source: String,
    /// The `extern "C"` entry point (the kernel's name).
    pub entry: String,
    pub launch: LaunchConfig,
}

/// Every kernel of a program in one translation unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaProgram {
    pub source: String,
    /// Entry point and launch of each kernel step, in step order (GEMM steps have none).
    pub kernels: Vec<(String, LaunchConfig)>,
    /// Whether the source defines the status word [`STATUS_WORD`] (some kernel reads or
    /// writes through a computed index), which the runtime reads and clears after each run.
    pub status_word: bool,
}

/// The name of the `extern "C" __device__ unsigned int` a program's kernels set (bit 0) when a
/// computed (gathered) index falls outside its buffer; such a load reads 0 and such a store is
/// skipped, as on the CPU. Find it with `cuModuleGetGlobal`.
pub const STATUS_WORD: &str = "smelt_status";

/// Prints `kernel` as a self-contained translation unit. Buffer dtypes come from the kernel's
/// loads and stores.
pub fn cuda_source(kernel: &Kernel) -> CudaKernel {
    let (text, launch, f16, bf16, checked) = print_kernel(kernel, &kernel.name, &|_| None);
    let mut source = prelude::prelude(f16, bf16, checked);
    source.push('\n');
    source.push_str(&text);
    CudaKernel {
        source,
        entry: kernel.name.clone(),
        launch,
    }
}

/// Prints every kernel of `program` into one translation unit. Entry names are the kernels'
/// names; a name used twice gets `_s<step>` appended.
pub fn cuda_program_source(program: &Program) -> CudaProgram {
    let declared = |b: BufferId| {
        program
            .buffers
            .iter()
            .find(|d| d.id == b)
            .map(|d| (d.dtype, d.numel))
    };
    let (mut f16, mut bf16, mut checked) = (false, false, false);
    let mut texts = String::new();
    let mut kernels: Vec<(String, LaunchConfig)> = Vec::new();
    for (i, step) in program.steps.iter().enumerate() {
        let Step::Kernel(k) = step else { continue };
        let mut entry = k.name.clone();
        if kernels.iter().any(|(e, _)| *e == entry) {
            entry = format!("{}_s{i}", k.name);
        }
        let (text, launch, h, b, c) = print_kernel(k, &entry, &declared);
        f16 |= h;
        bf16 |= b;
        checked |= c;
        texts.push('\n');
        texts.push_str(&text);
        kernels.push((entry, launch));
    }
    let mut source = prelude::prelude(f16, bf16, checked);
    source.push_str(&texts);
    CudaProgram {
        source,
        kernels,
        status_word: checked,
    }
}

/// The kernel's text, launch, whether it needs the f16 / bf16 headers, and whether it checks
/// computed indices (and so needs the status word).
fn print_kernel(
    k: &Kernel,
    entry: &str,
    declared: &dyn Fn(BufferId) -> Option<(DType, usize)>,
) -> (String, LaunchConfig, bool, bool, bool) {
    let mut cx = Ctx::new(k, declared);
    let mut body = String::new();
    let elementwise = k.stages.len() == 1
        && k.stages[0].inner.is_empty()
        && matches!(k.stages[0].effect, StageEffect::Store(_));
    let (launch, strategy) = if elementwise {
        elementwise::emit(&mut cx, &k.stages[0], &mut body)
    } else {
        rows::emit(&mut cx, &mut body)
    };
    let mut out = header(k, entry, &strategy, &launch);
    out.push_str(&cx.error_lines());
    let _ = writeln!(
        out,
        "extern \"C\" __global__ void __launch_bounds__({}) {entry}(",
        launch.block
    );
    out.push_str(&cx.params());
    out.push_str(" {\n");
    out.push_str(&body);
    out.push_str("}\n");
    (
        out,
        launch,
        cx.uses(DType::F16),
        cx.uses(DType::BF16),
        cx.checked,
    )
}

/// The comment header: name, strategy, origin ops, loop structure.
fn header(k: &Kernel, entry: &str, strategy: &str, launch: &LaunchConfig) -> String {
    let mut h = format!("// kernel {entry}");
    if entry != k.name {
        let _ = write!(h, " (IR name {})", k.name);
    }
    let _ = writeln!(
        h,
        ": {strategy}, grid {} x block {}",
        launch.grid, launch.block
    );
    let ops: Vec<String> = k
        .origin
        .iter()
        .map(|(id, op)| format!("{id} {op}"))
        .collect();
    let mut line = String::from("// from:");
    for op in ops {
        if line.len() + op.len() > 96 {
            h.push_str(&line);
            h.push('\n');
            line = String::from("//      ");
        }
        line.push(' ');
        line.push_str(&op);
    }
    h.push_str(&line);
    h.push('\n');
    let _ = writeln!(
        h,
        "// outer {:?}, index {}",
        k.outer,
        if k.index_width == smelt_passes::kernel::IndexWidth::I64 {
            "i64"
        } else {
            "i32"
        }
    );
    h
}
