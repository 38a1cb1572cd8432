//! The launch plan of a CUDA program: everything the executor does, decided without a GPU.
//!
//! [`LaunchPlan::build`] turns a kernel-IR [`Program`] into plain data: where every buffer lives
//! ([`BufferLoc`]: the run arena, a run-time input slot, or the constant region uploaded once),
//! and for every step either a kernel launch (entry name, 1-D grid and block from the code
//! generator's [`LaunchConfig`], the argument list `reads…, writes…, n`), a list of cuBLAS
//! strided-batched GEMM calls with every cuBLAS parameter worked out, a memset, or nothing. The
//! executor (`super::exec`) only maps this onto driver and cuBLAS calls, so every decision
//! here is unit-tested on machines without a GPU (including the row-major → column-major GEMM
//! mapping, against a plain-Rust column-major GEMM that interprets the same parameters).
//!
//! # Memory
//!
//! Temporaries get the liveness of [`crate::cpu::plan_memory`] (device-independent) and are
//! placed again here with [`DEVICE_ALIGN`] (256-byte) alignment: largest first, each at the
//! lowest aligned offset that overlaps no placed buffer with an overlapping live range. The
//! run-time inputs follow the temporaries in the same device allocation (each 256-aligned);
//! parameters bound at compile time and constants live in a separate region uploaded once.
//!
//! # GEMM
//!
//! A [`Gemm`] step is `torch.matmul` on strided operands, written contiguous (row-major). cuBLAS
//! is column-major, so the plan computes `Cᵀ = Bᵀ·Aᵀ`: cuBLAS's `A` is our `B` and its `B` our
//! `A`, with `m = n_ours`, `n = m_ours`, `ldc = n_ours`. An operand whose matrix has a unit
//! column stride is read "as is" (`OP_N`, `ld` = its row stride); one with a unit row stride is
//! read transposed (`OP_T`, `ld` = its column stride). Batch dims collapse into one stride per
//! operand when they are uniformly strided (broadcast dims have stride 0); the outermost batch
//! dims that do not collapse become separate calls. Anything else (no unit stride, a leading
//! dimension smaller than the matrix, sizes beyond `i32`, integer dtypes, or no cuBLAS) uses a
//! generated CUDA C fallback kernel compiled into the same NVRTC translation unit.

use super::exec_error::{invalid, CudaExecError, ExecResult};
use smelt_codegen::cuda::LaunchConfig;
use smelt_ir::DType;
use smelt_passes::kernel::{BufferKind, Gemm, GemmOperand, Program, Step};
use std::fmt::Write;

/// Alignment of every device buffer the plan places, in bytes (what `cuMemAlloc` guarantees
/// for an allocation; the generated kernels need 16).
pub const DEVICE_ALIGN: usize = 256;

/// Threads per block of the fallback GEMM kernel.
pub const FALLBACK_BLOCK: u32 = 256;

/// At most this many cuBLAS calls for one GEMM step (batch dims that do not collapse); beyond,
/// the fallback kernel is used.
pub const MAX_CUBLAS_CALLS: usize = 1024;

/// Where a buffer's bytes are during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferLoc {
    /// A temporary at this byte offset of the run arena.
    Arena { offset: usize },
    /// A run-time input (or a parameter not bound at compile time): `LaunchPlan::inputs[slot]`.
    Input { slot: usize },
    /// A bound parameter or a constant at this byte offset of the constant region.
    Const { offset: usize },
}

/// A run-time input: bound by name at every run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSlot {
    pub name: String,
    pub buffer: usize,
    pub dtype: DType,
    pub numel: usize,
    /// Byte offset of its device copy in the run arena (host-tensor runs).
    pub arena_offset: usize,
    /// Byte offset in the pinned staging buffer.
    pub staging_offset: usize,
}

/// Data uploaded once, at compile time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstSlot {
    pub buffer: usize,
    /// `Some(name)` for a parameter bound at compile time, `None` for a constant.
    pub param: Option<String>,
    pub offset: usize,
    pub bytes: usize,
}

/// A program output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSlot {
    pub name: String,
    pub buffer: usize,
    pub loc: BufferLoc,
    pub dtype: DType,
    pub numel: usize,
    /// Byte offset in the pinned staging buffer.
    pub staging_offset: usize,
}

/// One kernel argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelArg {
    /// A device pointer to buffer `buffer` (element 0), found at `loc`.
    Buffer { buffer: usize, loc: BufferLoc },
    /// The `long long n` parameter.
    Count(i64),
}

/// A kernel launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    /// The program step it implements.
    pub step: usize,
    /// Index into [`LaunchPlan::entries`].
    pub entry: usize,
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: u32,
    /// `reads…, writes…, n`: the launch contract of `smelt_codegen::cuda`.
    pub args: Vec<KernelArg>,
    /// A fallback GEMM kernel (from [`LaunchPlan::gemm_source`]), not a generated one.
    pub gemm_fallback: bool,
}

/// `cublasOperation_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trans {
    /// `CUBLAS_OP_N` (0).
    N,
    /// `CUBLAS_OP_T` (1).
    T,
}

/// One `cublasGemmStridedBatchedEx` call, in cuBLAS's (column-major) terms:
/// `C[i + j·ldc] = Σ_p op(A)[i, p] · op(B)[p, j]` for `i < m, j < n, p < k`, per batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CublasCall {
    pub transa: Trans,
    pub transb: Trans,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub batch: i32,
    /// Element offsets of batch 0 in cuBLAS's A, B and C buffers.
    pub a_offset: usize,
    pub b_offset: usize,
    pub c_offset: usize,
}

/// A GEMM step through cuBLAS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CublasGemm {
    pub step: usize,
    pub name: String,
    pub dtype: DType,
    /// cuBLAS's A: the program's right operand `b`.
    pub a: KernelArg,
    /// cuBLAS's B: the program's left operand `a`.
    pub b: KernelArg,
    pub c: KernelArg,
    pub calls: Vec<CublasCall>,
}

/// What one program step becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchStep {
    Kernel(KernelLaunch),
    Cublas(CublasGemm),
    /// Zero `bytes` bytes of a buffer (a GEMM with `k = 0`).
    Zero {
        step: usize,
        arg: KernelArg,
        bytes: usize,
    },
    /// Nothing to do (a GEMM with an empty output).
    Skip {
        step: usize,
    },
}

/// How GEMM steps may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmBackend {
    /// cuBLAS where the operands allow, the fallback kernel elsewhere.
    Cublas,
    /// The fallback kernel everywhere (cuBLAS could not be loaded, or was turned off).
    Fallback,
}

/// Everything a run does, as data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchPlan {
    /// Where each buffer (indexed by `BufferId`) lives.
    pub buffers: Vec<BufferLoc>,
    pub steps: Vec<LaunchStep>,
    pub inputs: Vec<InputSlot>,
    pub consts: Vec<ConstSlot>,
    pub outputs: Vec<OutputSlot>,
    /// Entry points to look up in the module, indexed by [`KernelLaunch::entry`].
    pub entries: Vec<String>,
    /// The CUDA C translation unit (the code generator's kernels, then fallback GEMMs).
    pub source: String,
    /// Whether `source` defines the status word of range-checked accesses
    /// (`smelt_codegen::cuda::STATUS_WORD`; only when some kernel has a computed index).
    pub status_word: bool,
    /// The fallback GEMM kernels alone, as a translation unit (for the LLVM PTX path, whose
    /// kernels come from elsewhere); empty when there are none.
    pub gemm_source: String,
    /// Byte size of each buffer's data.
    pub bytes: Vec<usize>,
    /// Live range of each temporary (`(first step, last step)`, outputs to the end).
    pub live: Vec<Option<(usize, usize)>>,
    /// Bytes of temporaries in the arena (the inputs follow at `temp_bytes`).
    pub temp_bytes: usize,
    /// Bytes of the run arena: temporaries, then inputs.
    pub arena_bytes: usize,
    /// Bytes of the constant region.
    pub const_bytes: usize,
    /// Bytes of pinned staging: inputs first, then outputs.
    pub staging_bytes: usize,
    /// GEMM steps that use the fallback kernel, and why.
    pub fallbacks: Vec<(usize, String)>,
}

pub(crate) fn align_up(n: usize) -> Option<usize> {
    n.checked_add(DEVICE_ALIGN - 1)
        .map(|x| x / DEVICE_ALIGN * DEVICE_ALIGN)
}

fn overflow(what: impl Into<String>) -> CudaExecError {
    CudaExecError::Overflow { what: what.into() }
}

/// Places temporaries with `bytes` and live ranges `live` at [`DEVICE_ALIGN`]-aligned offsets
/// (largest first, ties by lower id; the lowest offset free over the buffer's live range).
/// Returns the offsets (`None` where `live` is `None`) and the arena size.
pub fn place(
    bytes: &[usize],
    live: &[Option<(usize, usize)>],
) -> ExecResult<(Vec<Option<usize>>, usize)> {
    let mut sizes = vec![0usize; bytes.len()];
    let mut order = Vec::new();
    for (i, l) in live.iter().enumerate() {
        if l.is_some() {
            sizes[i] = align_up(bytes[i]).ok_or_else(|| overflow(format!("buffer {i}")))?;
            order.push(i);
        }
    }
    crate::cpu::memory::first_fit(order, &sizes, live, true)
        .ok_or_else(|| overflow("the arena size"))
}

impl LaunchPlan {
    /// Plans `program`. `bound(name)` says whether parameter `name` is bound at compile time;
    /// `gemm` whether cuBLAS may be used.
    pub fn build(
        program: &Program,
        bound: &dyn Fn(&str) -> bool,
        gemm: GemmBackend,
    ) -> ExecResult<LaunchPlan> {
        smelt_passes::kernel::verify_program(program).map_err(|e| invalid(e.to_string()))?;
        let n = program.buffers.len();
        let mut bytes = Vec::with_capacity(n);
        for (i, d) in program.buffers.iter().enumerate() {
            if d.id.0 as usize != i {
                return Err(invalid(format!(
                    "buffer {i} is declared with id {}",
                    d.id.0
                )));
            }
            bytes.push(
                d.numel
                    .checked_mul(d.dtype.size_bytes())
                    .ok_or_else(|| overflow(format!("the size of buffer {i}")))?,
            );
        }
        // Liveness is device-independent: the CPU memory plan computes it (and rejects reads of
        // temporaries nothing wrote).
        let cpu_plan = crate::cpu::plan_memory(program, 0).map_err(|e| invalid(e.to_string()))?;
        let mut live: Vec<Option<(usize, usize)>> = vec![None; n];
        for (i, d) in program.buffers.iter().enumerate() {
            if d.kind == BufferKind::Temp {
                live[i] = Some(
                    cpu_plan
                        .live
                        .get(i)
                        .copied()
                        .flatten()
                        .unwrap_or((0, program.steps.len())),
                );
            }
        }
        let (offsets, temp_bytes) = place(&bytes, &live)?;
        let mut buffers = Vec::with_capacity(n);
        let (mut inputs, mut consts) = (Vec::new(), Vec::new());
        let (mut arena, mut const_bytes, mut staging) = (temp_bytes, 0usize, 0usize);
        let grow = |at: &mut usize, size: usize, what: &str| -> ExecResult<usize> {
            let here = *at;
            *at = align_up(size)
                .and_then(|s| here.checked_add(s))
                .ok_or_else(|| overflow(what.to_string()))?;
            Ok(here)
        };
        for (i, d) in program.buffers.iter().enumerate() {
            buffers.push(match &d.kind {
                BufferKind::Temp => BufferLoc::Arena {
                    offset: offsets[i].unwrap_or(0),
                },
                BufferKind::Constant(_) => {
                    let offset = grow(&mut const_bytes, bytes[i], "the constant region")?;
                    consts.push(ConstSlot {
                        buffer: i,
                        param: None,
                        offset,
                        bytes: bytes[i],
                    });
                    BufferLoc::Const { offset }
                }
                BufferKind::Param(name) if bound(name) => {
                    let offset = grow(&mut const_bytes, bytes[i], "the constant region")?;
                    consts.push(ConstSlot {
                        buffer: i,
                        param: Some(name.clone()),
                        offset,
                        bytes: bytes[i],
                    });
                    BufferLoc::Const { offset }
                }
                BufferKind::Param(name) | BufferKind::Input(name) => {
                    let arena_offset = grow(&mut arena, bytes[i], "the run arena")?;
                    let staging_offset = grow(&mut staging, bytes[i], "the staging buffer")?;
                    inputs.push(InputSlot {
                        name: name.clone(),
                        buffer: i,
                        dtype: d.dtype,
                        numel: d.numel,
                        arena_offset,
                        staging_offset,
                    });
                    BufferLoc::Input {
                        slot: inputs.len() - 1,
                    }
                }
            });
        }
        let mut outputs = Vec::new();
        for (name, b) in &program.outputs {
            let i = b.0 as usize;
            let d = program
                .buffers
                .get(i)
                .ok_or_else(|| invalid(format!("output {name:?} is unknown {b:?}")))?;
            let staging_offset = grow(&mut staging, bytes[i], "the staging buffer")?;
            outputs.push(OutputSlot {
                name: name.clone(),
                buffer: i,
                loc: buffers[i],
                dtype: d.dtype,
                numel: d.numel,
                staging_offset,
            });
        }
        let arg = |b: u32| -> ExecResult<KernelArg> {
            let buffer = b as usize;
            let loc = *buffers
                .get(buffer)
                .ok_or_else(|| invalid(format!("unknown buffer b{b}")))?;
            Ok(KernelArg::Buffer { buffer, loc })
        };
        let is_temp = |b: u32| matches!(buffers.get(b as usize), Some(BufferLoc::Arena { .. }));
        let cuda = smelt_codegen::cuda::cuda_program_source(program);
        let status_word = cuda.status_word;
        let mut source = cuda.source;
        let mut generated = cuda.kernels.into_iter();
        let mut entries = Vec::new();
        let mut steps = Vec::with_capacity(program.steps.len());
        let mut fallbacks = Vec::new();
        let mut fallback_text = String::new();
        let (mut need_f16, mut need_bf16) = (false, false);
        for (s, step) in program.steps.iter().enumerate() {
            match step {
                Step::Kernel(k) => {
                    let (entry, launch): (String, LaunchConfig) = generated
                        .next()
                        .ok_or_else(|| invalid("the code generator returned too few kernels"))?;
                    if let Some(b) = k.writes.iter().find(|b| !is_temp(b.0)) {
                        return Err(invalid(format!(
                            "kernel {} writes {b:?}, which is not a temporary",
                            k.name
                        )));
                    }
                    let extent = k
                        .outer
                        .iter()
                        .try_fold(1i64, |acc, &d| acc.checked_mul(i64::try_from(d).ok()?))
                        .ok_or_else(|| overflow(format!("the outer extent of {}", k.name)))?;
                    let mut args = Vec::with_capacity(k.reads.len() + k.writes.len() + 1);
                    for b in k.reads.iter().chain(&k.writes) {
                        args.push(arg(b.0)?);
                    }
                    args.push(KernelArg::Count(extent));
                    entries.push(entry);
                    steps.push(LaunchStep::Kernel(KernelLaunch {
                        step: s,
                        entry: entries.len() - 1,
                        grid: launch.grid.max(1),
                        block: launch.block,
                        shared_bytes: launch.shared_bytes,
                        args,
                        gemm_fallback: false,
                    }));
                }
                Step::Gemm(g) => {
                    if !is_temp(g.out.0) {
                        return Err(invalid(format!(
                            "gemm {}: the output b{} is not a temporary",
                            g.name, g.out.0
                        )));
                    }
                    let geom = GemmGeometry::of(program, g)?;
                    let (a, b, c) = (arg(g.a.buffer.0)?, arg(g.b.buffer.0)?, arg(g.out.0)?);
                    if geom.out_len == 0 {
                        steps.push(LaunchStep::Skip { step: s });
                        continue;
                    }
                    let why = match (gemm, g.dtype) {
                        (_, DType::I32 | DType::I64) => Some("integer GEMM".to_string()),
                        (GemmBackend::Fallback, _) => Some("cuBLAS is not used".to_string()),
                        _ if geom.k == 0 => {
                            steps.push(LaunchStep::Zero {
                                step: s,
                                arg: c,
                                bytes: geom.out_len * g.dtype.size_bytes(),
                            });
                            continue;
                        }
                        _ => match geom.cublas_calls() {
                            Ok(calls) => {
                                steps.push(LaunchStep::Cublas(CublasGemm {
                                    step: s,
                                    name: g.name.clone(),
                                    dtype: g.dtype,
                                    a: b,
                                    b: a,
                                    c,
                                    calls,
                                }));
                                None
                            }
                            Err(why) => Some(why),
                        },
                    };
                    let Some(why) = why else { continue };
                    let entry = format!("smelt_gemm_s{s}");
                    fallback_text.push_str(&fallback_gemm_source(&entry, g.dtype, &geom));
                    need_f16 |= g.dtype == DType::F16;
                    need_bf16 |= g.dtype == DType::BF16;
                    fallbacks.push((s, why));
                    entries.push(entry);
                    let total = i64::try_from(geom.out_len)
                        .map_err(|_| overflow(format!("the size of gemm {}", g.name)))?;
                    steps.push(LaunchStep::Kernel(KernelLaunch {
                        step: s,
                        entry: entries.len() - 1,
                        grid: (geom.out_len as u64)
                            .div_ceil(u64::from(FALLBACK_BLOCK))
                            .clamp(1, 65535) as u32,
                        block: FALLBACK_BLOCK,
                        shared_bytes: 0,
                        args: vec![a, b, c, KernelArg::Count(total)],
                        gemm_fallback: true,
                    }));
                }
            }
        }
        let mut gemm_source = String::new();
        if !fallback_text.is_empty() {
            gemm_source.push_str("// ---- smelt fallback GEMM kernels ----\n");
            if need_f16 {
                gemm_source.push_str("#include <cuda_fp16.h>\n");
            }
            if need_bf16 {
                gemm_source.push_str("#include <cuda_bf16.h>\n");
            }
            gemm_source.push_str(&fallback_text);
            source.push('\n');
            source.push_str(&gemm_source);
        }
        Ok(LaunchPlan {
            buffers,
            steps,
            inputs,
            consts,
            outputs,
            entries,
            source,
            status_word,
            gemm_source,
            bytes,
            live,
            temp_bytes,
            arena_bytes: arena,
            const_bytes,
            staging_bytes: staging,
            fallbacks,
        })
    }
}

impl LaunchPlan {
    /// The data of every constant slot, with its offset in the constant region: the program's
    /// constants and the parameters bound in `params`, each checked against its buffer's dtype
    /// and element count (before anything is uploaded).
    pub fn const_data<'a>(
        &self,
        program: &'a Program,
        params: &'a std::collections::HashMap<String, smelt_ir::HostTensor>,
    ) -> ExecResult<Vec<(&'a smelt_ir::HostTensor, usize)>> {
        let mut out = Vec::with_capacity(self.consts.len());
        for c in &self.consts {
            let d = &program.buffers[c.buffer];
            let t = match (&d.kind, &c.param) {
                (BufferKind::Constant(t), _) => t,
                (_, Some(name)) => params
                    .get(name)
                    .ok_or_else(|| CudaExecError::MissingBinding { name: name.clone() })?,
                _ => return Err(invalid(format!("constant slot for buffer {}", c.buffer))),
            };
            let name = c
                .param
                .clone()
                .unwrap_or_else(|| format!("constant buffer {}", c.buffer));
            super::exec::dtype_numel_check(&name, d.dtype, d.numel, (t.dtype(), t.shape()))?;
            out.push((t, c.offset));
        }
        Ok(out)
    }

    /// The index of output `name`, checking that `shape` has its element count (for
    /// `set_output_shape`: buffers are flat, outputs take the graph's shapes).
    pub fn output_with_shape(&self, name: &str, shape: &smelt_ir::Shape) -> ExecResult<usize> {
        let i = self
            .outputs
            .iter()
            .position(|o| o.name == name)
            .ok_or_else(|| CudaExecError::Output {
                name: name.to_string(),
                expected: "an output of the program".into(),
                got: "no such output".into(),
            })?;
        if shape.numel() != self.outputs[i].numel {
            return Err(CudaExecError::Output {
                name: name.to_string(),
                expected: format!("{} elements", self.outputs[i].numel),
                got: format!("shape {shape}"),
            });
        }
        Ok(i)
    }

    /// The device address of every buffer for one run: temporaries and host-copied inputs in the
    /// arena at `arena`, bound parameters and constants in the region at `consts`, inputs given
    /// as device tensors at `device[slot]` (`None`: the run copies host inputs into the arena).
    pub fn resolve_pointers(
        &self,
        arena: u64,
        consts: u64,
        device: Option<&[u64]>,
        out: &mut [u64],
    ) {
        for (i, loc) in self.buffers.iter().enumerate() {
            out[i] = match *loc {
                BufferLoc::Arena { offset } => arena + offset as u64,
                BufferLoc::Const { offset } => consts + offset as u64,
                BufferLoc::Input { slot } => match device {
                    None => arena + self.inputs[slot].arena_offset as u64,
                    Some(d) => d[slot],
                },
            };
        }
    }
}

/// An operand of a GEMM as the plan sees it: element offset, row and column strides of its
/// matrices, and strides along the output's batch dims (0 where it broadcasts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperandLayout {
    pub offset: usize,
    pub rs: i64,
    pub cs: i64,
    pub batch: Vec<i64>,
}

/// The shape of a GEMM step: `out[batch…, m, n] = Σ_k a[batch…, m, k] · b[batch…, k, n]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmGeometry {
    pub batch_dims: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub a: OperandLayout,
    pub b: OperandLayout,
    /// `batches · m · n`: elements written, contiguous.
    pub out_len: usize,
}

impl GemmGeometry {
    /// Checks `g` (dtypes, shapes, broadcasting, operand spans, output size) like the CPU
    /// backend and returns its geometry (`torch.matmul` semantics: a 1-D left operand is a row,
    /// a 1-D right operand a column).
    pub fn of(program: &Program, g: &Gemm) -> ExecResult<GemmGeometry> {
        let bad = |r: String| invalid(format!("gemm {}: {r}", g.name));
        if g.dtype == DType::Bool {
            return Err(bad("bool matmul is not supported".into()));
        }
        let decl = |o: &GemmOperand| {
            program
                .buffers
                .get(o.buffer.0 as usize)
                .ok_or_else(|| bad(format!("unknown operand b{}", o.buffer.0)))
        };
        for o in [&g.a, &g.b] {
            let d = decl(o)?;
            if d.dtype != g.dtype {
                return Err(bad(format!("operand b{} is {}", o.buffer.0, d.dtype)));
            }
            if o.shape.is_empty() || o.shape.len() != o.strides.len() {
                return Err(bad("operands need ≥ 1 dim and one stride per dim".into()));
            }
            if !o.shape.contains(&0) {
                let reach = o
                    .shape
                    .iter()
                    .zip(&o.strides)
                    .try_fold(o.offset, |acc, (&n, &s)| {
                        acc.checked_add((n - 1).checked_mul(s)?)
                    });
                if reach.is_none_or(|r| r >= d.numel) {
                    return Err(bad(format!(
                        "operand b{} reaches past its {} elements",
                        o.buffer.0, d.numel
                    )));
                }
            }
            for &s in &o.strides {
                i64::try_from(s).map_err(|_| bad("stride overflows i64".into()))?;
            }
        }
        let (ld, rd) = (&g.a.shape, &g.b.shape);
        let (lr, rr) = (ld.len(), rd.len());
        let (lb, rb, m, k, k2, n) = smelt_ir::infer::matmul_parts(ld, rd);
        if k != k2 {
            return Err(bad(format!("contraction dims differ ({k} vs {k2})")));
        }
        let batch_dims = lb
            .broadcast(&rb)
            .ok_or_else(|| bad(format!("batch dims {lb} and {rb} do not broadcast")))?
            .dims()
            .to_vec();
        let rank = batch_dims.len();
        let mut out_dims = batch_dims.clone();
        if lr > 1 {
            out_dims.push(m);
        }
        if rr > 1 {
            out_dims.push(n);
        }
        let out_len = batch_dims
            .iter()
            .chain([&m, &n])
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| overflow(format!("the output of gemm {}", g.name)))?;
        if out_dims != g.out_shape {
            return Err(bad(format!(
                "output shape {:?}, the product is {out_dims:?}",
                g.out_shape
            )));
        }
        let out = &program.buffers[g.out.0 as usize];
        if out.dtype != g.dtype || out.numel < out_len {
            return Err(bad(format!(
                "output buffer {} with {} elements, the product has {out_len}",
                out.dtype, out.numel
            )));
        }
        if g.out == g.a.buffer || g.out == g.b.buffer {
            return Err(bad("output overlaps an operand".into()));
        }
        let layout = |o: &GemmOperand, left: bool| {
            let s: Vec<i64> = o.strides.iter().map(|&s| s as i64).collect();
            let d = &o.shape;
            let r = d.len();
            let (rs, cs) = match (r, left) {
                (1, true) => (s[0].saturating_mul(d[0] as i64), s[0]),
                (1, false) => (s[0], s[0]),
                _ => (s[r - 2], s[r - 1]),
            };
            let own = &d[..r.saturating_sub(2)];
            let own_s = &s[..r.saturating_sub(2)];
            let skip = rank - own.len();
            let batch = (0..rank)
                .map(|j| match j.checked_sub(skip) {
                    Some(i) if own[i] != 1 => own_s[i],
                    _ => 0,
                })
                .collect();
            OperandLayout {
                offset: o.offset,
                rs,
                cs,
                batch,
            }
        };
        Ok(GemmGeometry {
            m,
            k,
            n,
            a: layout(&g.a, true),
            b: layout(&g.b, false),
            batch_dims,
            out_len,
        })
    }

    /// The cuBLAS calls computing this GEMM (`k > 0`, non-empty output), or why it cannot.
    pub fn cublas_calls(&self) -> Result<Vec<CublasCall>, String> {
        let (m, n, k) = (self.m, self.n, self.k);
        // cuBLAS's A = our B (k×n) read as Bᵀ (n×k); cuBLAS's B = our A (m×k) read as Aᵀ.
        let (transa, lda) = match matrix_form(k, n, self.b.rs, self.b.cs) {
            Some(Form::RowMajor(ld)) => (Trans::N, ld),
            Some(Form::ColMajor(ld)) => (Trans::T, ld),
            None => return Err("the right operand has no unit stride cuBLAS can use".into()),
        };
        let (transb, ldb) = match matrix_form(m, k, self.a.rs, self.a.cs) {
            Some(Form::RowMajor(ld)) => (Trans::N, ld),
            Some(Form::ColMajor(ld)) => (Trans::T, ld),
            None => return Err("the left operand has no unit stride cuBLAS can use".into()),
        };
        let dims = &self.batch_dims;
        // The smallest split q such that batch dims q.. collapse into one stride per operand.
        let (q, sa, sb) = (0..=dims.len())
            .find_map(|q| {
                let sa = collapse(&dims[q..], &self.b.batch[q..])?;
                let sb = collapse(&dims[q..], &self.a.batch[q..])?;
                Some((q, sa, sb))
            })
            .unwrap_or((dims.len(), 0, 0));
        let inner: usize = dims[q..].iter().product();
        let outer: usize = dims[..q].iter().product();
        if outer > MAX_CUBLAS_CALLS {
            return Err(format!(
                "{outer} separate batches (batch strides do not collapse)"
            ));
        }
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| format!("{what} = {v} does not fit cuBLAS's int"))
        };
        let int_ld = |v: i64, what: &str| {
            i32::try_from(v).map_err(|_| format!("{what} = {v} does not fit cuBLAS's int"))
        };
        let mn = m * n;
        let mut calls = Vec::with_capacity(outer);
        for o in 0..outer {
            // The outer multi-index, row-major over dims[..q].
            let (mut rest, mut off_a, mut off_b) = (o, self.b.offset as i64, self.a.offset as i64);
            for j in (0..q).rev() {
                let i = (rest % dims[j]) as i64;
                rest /= dims[j];
                off_a += i * self.b.batch[j];
                off_b += i * self.a.batch[j];
            }
            calls.push(CublasCall {
                transa,
                transb,
                m: int(n, "m")?,
                n: int(m, "n")?,
                k: int(k, "k")?,
                lda: int_ld(lda, "lda")?,
                ldb: int_ld(ldb, "ldb")?,
                ldc: int(n.max(1), "ldc")?,
                stride_a: sa,
                stride_b: sb,
                stride_c: mn as i64,
                batch: int(inner, "the batch count")?,
                a_offset: off_a as usize,
                b_offset: off_b as usize,
                c_offset: o * inner * mn,
            });
        }
        Ok(calls)
    }
}

/// How cuBLAS can read a logical `rows × cols` matrix with element strides `(rs, cs)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// Unit column stride: column-major with this `ld`, memory holds the `cols × rows`
    /// transpose.
    RowMajor(i64),
    /// Unit row stride: column-major with this `ld`, memory holds the matrix itself.
    ColMajor(i64),
}

fn matrix_form(rows: usize, cols: usize, rs: i64, cs: i64) -> Option<Form> {
    let (r, c) = (rows as i64, cols as i64);
    if cs == 1 || cols <= 1 {
        let ld = if rows <= 1 { c.max(1) } else { rs };
        if ld >= c.max(1) {
            return Some(Form::RowMajor(ld));
        }
    }
    if rs == 1 || rows <= 1 {
        let ld = if cols <= 1 { r.max(1) } else { cs };
        if ld >= r.max(1) {
            return Some(Form::ColMajor(ld));
        }
    }
    None
}

/// One stride `s` with `stride_j = s · Π dims[j+1..]` for every dim `j` of size > 1, if any.
fn collapse(dims: &[usize], strides: &[i64]) -> Option<i64> {
    let mut s: Option<i64> = None;
    let mut inner: i64 = 1;
    for j in (0..dims.len()).rev() {
        if dims[j] > 1 {
            match s {
                None => {
                    if strides[j] % inner != 0 {
                        return None;
                    }
                    s = Some(strides[j] / inner);
                }
                Some(s) => {
                    if s.checked_mul(inner)? != strides[j] {
                        return None;
                    }
                }
            }
        }
        inner = inner.checked_mul(dims[j] as i64)?;
    }
    Some(s.unwrap_or(0))
}

/// The CUDA C of the fallback GEMM kernel `entry`: one thread per output element (grid-stride),
/// the geometry baked in as constants, accumulation in f32 (f16/bf16/f32), f64, or wrapping
/// unsigned integers, in `k` order. Launch contract: `(const T* a, const T* b, T* out,
/// long long n)` with `n = out_len`.
pub fn fallback_gemm_source(entry: &str, dtype: DType, g: &GemmGeometry) -> String {
    let (t, acc, load, store) = match dtype {
        DType::F32 => ("float", "float", "", ""),
        DType::F64 => ("double", "double", "", ""),
        DType::F16 => ("__half", "float", "__half2float", "__float2half_rn"),
        DType::BF16 => (
            "__nv_bfloat16",
            "float",
            "__bfloat162float",
            "__float2bfloat16_rn",
        ),
        DType::I32 => ("int", "unsigned int", "(unsigned int)", "(int)"),
        DType::I64 => (
            "long long",
            "unsigned long long",
            "(unsigned long long)",
            "(long long)",
        ),
        DType::Bool => (
            "unsigned char",
            "unsigned int",
            "(unsigned int)",
            "(unsigned char)",
        ),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// fallback GEMM: batch {:?}, m {}, k {}, n {}",
        g.batch_dims, g.m, g.k, g.n
    );
    let _ = writeln!(
        s,
        "extern \"C\" __global__ void __launch_bounds__({FALLBACK_BLOCK}) {entry}(\n    \
         const {t}* __restrict__ a, const {t}* __restrict__ b, {t}* __restrict__ out, long long n) {{"
    );
    let _ = writeln!(
        s,
        "  for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < n;\n       \
         idx += (long long)gridDim.x * blockDim.x) {{"
    );
    let _ = writeln!(
        s,
        "    long long t = idx;\n    const long long j = t % {n}LL; t /= {n}LL;\n    \
         const long long i = t % {m}LL; t /= {m}LL;",
        n = g.n.max(1),
        m = g.m.max(1)
    );
    let _ = writeln!(
        s,
        "    long long ao = {}LL + i * {}LL, bo = {}LL + j * {}LL;",
        g.a.offset, g.a.rs, g.b.offset, g.b.cs
    );
    for (d, &size) in g.batch_dims.iter().enumerate().rev() {
        let _ = writeln!(
            s,
            "    {{ const long long x = t % {size}LL; t /= {size}LL; ao += x * {}LL; bo += x * {}LL; }}",
            g.a.batch[d], g.b.batch[d]
        );
    }
    let _ = writeln!(s, "    {acc} acc = 0;");
    let _ = writeln!(
        s,
        "    for (long long p = 0; p < {k}LL; ++p) {{\n      \
         acc += {load}(a[ao + p * {}LL]) * {load}(b[bo + p * {}LL]);\n    }}",
        g.a.cs,
        g.b.rs,
        k = g.k
    );
    let _ = writeln!(s, "    out[idx] = {store}(acc);\n  }}\n}}");
    s
}

#[cfg(test)]
mod tests;
