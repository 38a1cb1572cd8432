//! Running a lowered program ([`Program`]) on the CPU: JIT-compiled kernels, GEMM steps,
//! a planned arena, bound parameters.
//!
//! [`CpuProgram::compile`] validates the program (`verify_program`, then what the executor
//! relies on itself: buffer ids, what each step may write, GEMM operand spans), JIT-compiles
//! every kernel into one LLVM module, plans the arena ([`super::memory`]) and binds the
//! parameters it is given. [`CpuProgram::run`] binds inputs by name, runs the steps in order
//! and returns the outputs; [`CpuProgram::run_into`] writes them into caller tensors and
//! allocates nothing in steady state: the arena, the pointer table and the argument scratch are
//! owned by the program and reused (a second thread running the same program concurrently gets
//! a fresh arena for that run instead of waiting).
//!
//! A run's steps execute on the calling thread, which takes part in each step's parallel loop
//! (see `pool.rs`). Kernels run through [`CpuPool`] in chunks of their flattened outer
//! index space (see the calling convention in [`super`]); GEMM steps through [`MatmulPlan`]
//! (whose f16/bf16 path still allocates f32 scratch per call). A kernel that meets a computed
//! index outside its buffer (a bad gather index) fails the run with
//! [`CpuError::IndexOutOfRange`]. Only the final element index is checked: a gather index
//! outside its axis that still lands inside the buffer reads a neighbouring row (the kernel IR
//! carries no per-axis bound). Integer `floor_div`/`remainder` by zero give 0 (the interpreter
//! reports an error).
//!
//! Weights: a bound f32/f64 matrix that a GEMM reads with its `k` dim contiguous (a linear
//! layer's `x @ w.T`) is copied row-major `[k, n]` once at compile time, the layout `gemm`
//! packs fastest, or as one contiguous block of columns per thread when the product is split
//! into column tiles; a bound tensor nothing reads any more after that is released
//! (`pack_rhs`).
//!
//! Outputs: dtype and shape are checked (the shape given by [`CpuProgram::set_output_shape`],
//! else a 1-D `[numel]`, since the kernel IR records element counts only). A computed output
//! is written by its kernel (or GEMM) straight into the caller's tensor: the memory plan binds
//! it per run like an input ([`MemoryPlan::external`]), so there is no copy-out pass, which for
//! a memory-bound kernel would cost as much as the kernel. Only these are copied: an output that
//! is an input, parameter or constant buffer; a buffer named by several outputs (all but the
//! first); and every output when red zones are on (outputs then live in the arena, red zone
//! after them). A computed output that no step writes is zero-filled.
//!
//! Profiling: with `SMELT_CPU_PROFILE` set when a program is compiled, each of its runs prints
//! every step's wall time to stderr (this allocates; never set it in production).

use super::disk_cache::CpuDiskCache;
use super::error::{CpuError, Result};
use super::gemm::{MatmulOperand, MatmulPlan, PANEL_MAX_ROWS};
use super::kernel::CpuKernel;
use super::memory::{plan_memory, Arena, MemoryPlan, ALIGN, POISON};
use super::pages::FreshOutput;
use super::pool::CpuPool;
use smallvec::SmallVec;
use smelt_codegen::llvm::JitOptions;
use smelt_ir::{with_data, DType, HostTensor, Shape, TensorData};
use smelt_passes::kernel::{BufferKind, Gemm, Kernel, Program, Step};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// How a [`CpuProgram`] is compiled and run.
#[derive(Clone, Debug, Default)]
pub struct CpuOptions {
    pub jit: JitOptions,
    /// Worker threads: 0 uses the process-wide pool ([`CpuPool::global`]).
    pub threads: usize,
    /// Bytes of poisoned red zone after every arena buffer (tests; disables reuse).
    pub red_zone: usize,
    /// f32 matrix products of at most this many rows run on smelt's panel kernel (AVX-512F, or
    /// AVX2 and FMA; `MatmulPlan::with_panel_max_rows`), the rest on the `gemm` crate. `None`:
    /// [`PANEL_MAX_ROWS`]. For measuring one against the other;
    /// results differ by rounding only (the two sum in different orders).
    pub panel_max_rows: Option<usize>,
    /// Where JIT-compiled kernel modules are kept between processes (default: the kernel
    /// cache folder, see `disk_cache.rs`).
    pub disk_cache: CpuDiskCache,
}

/// Work below this many scalar iterations per chunk is not split further.
const GRAIN_WORK: i64 = 1 << 14;

/// A compiled program, ready to run many times.
pub struct CpuProgram {
    steps: Vec<ExecStep>,
    slots: Vec<Slot>,
    outputs: Vec<OutputSpec>,
    plan: MemoryPlan,
    pool: PoolRef,
    arena: Mutex<Arena>,
    max_args: usize,
    /// `SMELT_CPU_PROFILE` was set at compile time: every run prints each step's time to
    /// stderr (a diagnostic; it allocates).
    profile: bool,
}

impl std::fmt::Debug for CpuProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuProgram")
            .field("steps", &self.steps.len())
            .field("peak_bytes", &self.plan.peak_bytes)
            .finish_non_exhaustive()
    }
}

enum PoolRef {
    Global(&'static CpuPool),
    Own(Arc<CpuPool>),
}

impl PoolRef {
    fn get(&self) -> &CpuPool {
        match self {
            PoolRef::Global(p) => p,
            PoolRef::Own(p) => p,
        }
    }
}

/// Where a buffer's bytes come from at run time.
enum Slot {
    Arena {
        offset: usize,
    },
    /// A computed output written straight into the caller's output tensor `index` (the first
    /// output naming this buffer).
    Output {
        index: usize,
    },
    Bound(HostTensor),
    Input {
        name: String,
        dtype: DType,
        numel: usize,
    },
}

struct OutputSpec {
    name: String,
    buffer: usize,
    dtype: DType,
    shape: Shape,
    /// What fills the caller's tensor after the steps.
    fill: Fill,
    /// Whether the run writes every element (the steps provably do, or the run fills or
    /// copies it): `run` then gives it uninitialised memory rather than zeros.
    written_whole: bool,
    /// A kernel with a plain-store twin writes it: each run asks the OS whether its pages
    /// were touched yet (`pages::untouched`).
    by_twin: bool,
}

/// How an output's caller tensor gets its contents.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// The steps wrote it in place (a [`Slot::Output`]).
    InPlace,
    /// Nothing writes it: zeros.
    Zeros,
    /// Copied from the buffer's run-time pointer after the steps.
    Copy,
}

enum ExecStep {
    Kernel {
        kernel: CpuKernel,
        args: Vec<usize>,
        extent: i64,
        grain: i64,
        /// The outputs (indices into `CpuProgram::outputs`) whose tensors it writes; when one
        /// of them is on untouched pages, a kernel with a plain-store twin runs the twin.
        outputs: Vec<usize>,
    },
    Gemm {
        plan: MatmulPlan,
        a: (usize, usize),
        b: (usize, usize),
        out: usize,
    },
}

fn invalid(reason: impl Into<String>) -> CpuError {
    CpuError::InvalidProgram {
        reason: reason.into(),
    }
}

impl CpuProgram {
    /// Compiles `program` with default options, binding the parameters in `params` (by name;
    /// parameters missing here must come with every run's inputs).
    pub fn compile(program: &Program, params: &HashMap<String, HostTensor>) -> Result<CpuProgram> {
        CpuProgram::compile_with(program, params, &CpuOptions::default())
    }

    /// [`CpuProgram::compile`] with options.
    pub fn compile_with(
        program: &Program,
        params: &HashMap<String, HostTensor>,
        options: &CpuOptions,
    ) -> Result<CpuProgram> {
        // The kernel IR's invariants (SSA, types, bounds) first: the code generator and the
        // launches below rely on them.
        smelt_passes::kernel::verify_program(program).map_err(|e| invalid(e.to_string()))?;
        let slots_plan = plan_memory(program, options.red_zone)?;
        let mut slots = Vec::with_capacity(program.buffers.len());
        // The tensors bound to constant and parameter buffers. Their slots hold empty
        // placeholders until the steps are planned: a weight that a GEMM reads packed
        // (`pack_rhs`) is read from here, and only the tensors some step or output still
        // reads are copied into the program (`bind_used`), so a packed weight is not copied
        // twice.
        let mut sources: Vec<Option<&HostTensor>> = vec![None; program.buffers.len()];
        for (i, d) in program.buffers.iter().enumerate() {
            if d.id.0 as usize != i {
                return Err(invalid(format!(
                    "buffer {i} is declared with id {}",
                    d.id.0
                )));
            }
            let check = |t: &HostTensor, what: &str| {
                if t.dtype() != d.dtype || t.numel() != d.numel {
                    return Err(CpuError::Binding {
                        name: what.to_string(),
                        expected: format!("{} with {} elements", d.dtype, d.numel),
                        got: format!("{} {}", t.dtype(), t.shape()),
                    });
                }
                Ok(())
            };
            slots.push(match &d.kind {
                BufferKind::Temp if slots_plan.external[i] => Slot::Output {
                    index: program
                        .outputs
                        .iter()
                        .position(|(_, b)| b.0 as usize == i)
                        .ok_or_else(|| invalid(format!("external buffer {i} is no output")))?,
                },
                BufferKind::Temp => Slot::Arena {
                    offset: slots_plan.offsets[i].unwrap_or(0),
                },
                BufferKind::Constant(t) => {
                    check(t, &format!("constant buffer {i}"))?;
                    sources[i] = Some(t);
                    Slot::Bound(HostTensor::zeros(t.dtype(), Shape::new(&[0])))
                }
                BufferKind::Param(name) if params.contains_key(name) => {
                    let t = &params[name];
                    check(t, name)?;
                    sources[i] = Some(t);
                    Slot::Bound(HostTensor::zeros(t.dtype(), Shape::new(&[0])))
                }
                BufferKind::Param(name) | BufferKind::Input(name) => Slot::Input {
                    name: name.clone(),
                    dtype: d.dtype,
                    numel: d.numel,
                },
            });
        }
        let temp = |b: u32| {
            matches!(
                slots.get(b as usize),
                Some(Slot::Arena { .. } | Slot::Output { .. })
            )
        };
        let known = |b: u32| (b as usize) < slots.len();
        let mut kernels: Vec<&Kernel> = Vec::new();
        let mut max_args = 0;
        for step in &program.steps {
            match step {
                Step::Kernel(k) => {
                    for b in k.reads.iter().chain(&k.writes) {
                        if !known(b.0) {
                            return Err(invalid(format!("kernel {}: unknown {b:?}", k.name)));
                        }
                    }
                    if let Some(b) = k.writes.iter().find(|b| !temp(b.0)) {
                        return Err(invalid(format!(
                            "kernel {} writes {b:?}, which is not a temporary",
                            k.name
                        )));
                    }
                    max_args = max_args.max(k.reads.len() + k.writes.len());
                    kernels.push(k);
                }
                Step::Gemm(g) => {
                    if !known(g.a.buffer.0) || !known(g.b.buffer.0) || !temp(g.out.0) {
                        return Err(invalid(format!(
                            "gemm {}: unknown operand buffers or a non-temporary output",
                            g.name
                        )));
                    }
                }
            }
        }
        let pool = if options.threads == 0 {
            PoolRef::Global(CpuPool::global()?)
        } else {
            PoolRef::Own(Arc::new(CpuPool::new(options.threads)?))
        };
        let mut compiled = jit(program, &kernels, &options.jit, &options.disk_cache)?.into_iter();
        let mut steps = Vec::with_capacity(program.steps.len());
        let mut packed = HashMap::new();
        for step in &program.steps {
            steps.push(match step {
                Step::Kernel(k) => {
                    let kernel = compiled
                        .next()
                        .ok_or_else(|| invalid("the JIT returned too few kernels"))?;
                    let extent = smelt_codegen_extent(k)?;
                    let work: i64 = k
                        .stages
                        .iter()
                        .map(|s| s.inner.iter().map(|&d| d as i64).product::<i64>().max(1))
                        .sum::<i64>()
                        .max(1);
                    ExecStep::Kernel {
                        kernel,
                        outputs: k
                            .writes
                            .iter()
                            .filter_map(|b| match slots[b.0 as usize] {
                                Slot::Output { index } => Some(index),
                                _ => None,
                            })
                            .collect(),
                        args: k
                            .reads
                            .iter()
                            .chain(&k.writes)
                            .map(|b| b.0 as usize)
                            .collect(),
                        extent,
                        grain: (GRAIN_WORK / work).max(1),
                    }
                }
                Step::Gemm(g) => gemm_step(
                    program,
                    g,
                    &mut slots,
                    &sources,
                    &mut packed,
                    GemmSetup {
                        threads: pool.get().threads(),
                        panel_max_rows: options.panel_max_rows.unwrap_or(PANEL_MAX_ROWS),
                    },
                )?,
            });
        }
        bind_used(program, &steps, &mut slots, &sources);
        let written = |b: usize| {
            program
                .steps
                .iter()
                .any(|s| s.writes().iter().any(|w| w.0 as usize == b))
        };
        let outputs = program
            .outputs
            .iter()
            .enumerate()
            .map(|(i, (name, b))| {
                let d = program
                    .buffers
                    .get(b.0 as usize)
                    .ok_or_else(|| invalid(format!("output {name:?} is unknown {b:?}")))?;
                let fill = match slots[b.0 as usize] {
                    Slot::Output { index } if index == i && written(b.0 as usize) => Fill::InPlace,
                    Slot::Output { index } if index == i => Fill::Zeros,
                    _ => Fill::Copy,
                };
                Ok(OutputSpec {
                    name: name.clone(),
                    buffer: b.0 as usize,
                    dtype: d.dtype,
                    shape: Shape::new(&[d.numel]),
                    fill,
                    written_whole: fill != Fill::InPlace || program.writes_every_element(*b),
                    by_twin: steps.iter().any(|s| {
                        matches!(s, ExecStep::Kernel { kernel, outputs, .. }
                            if kernel.has_plain_twin() && outputs.contains(&i))
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let arena = Arena::new(&slots_plan, slots.len(), max_args);
        Ok(CpuProgram {
            steps,
            slots,
            outputs,
            plan: slots_plan,
            pool,
            arena: Mutex::new(arena),
            max_args,
            profile: std::env::var_os("SMELT_CPU_PROFILE").is_some(),
        })
    }

    /// Runs every step in order on the arena's pointers (bound by `run_into`). A kernel
    /// writing an output whose pages are untouched (`untouched[i]` for output `i`: a fresh
    /// mapping, whose pages the OS zeroes through the cache on first touch) runs its
    /// plain-store twin, if it has one.
    fn run_steps(&self, pool: &CpuPool, arena: &mut Arena, untouched: &[bool]) -> Result<()> {
        let twin = |kernel: &CpuKernel, outputs: &[usize]| {
            kernel.has_plain_twin() && outputs.iter().any(|&i| untouched[i])
        };
        for step in &self.steps {
            let started = self.profile.then(std::time::Instant::now);
            match step {
                ExecStep::Kernel {
                    kernel,
                    args,
                    extent,
                    grain,
                    outputs,
                } => {
                    arena.args.clear();
                    arena.args.extend(args.iter().map(|&b| arena.ptrs[b]));
                    arena.status.store(0, Ordering::Relaxed);
                    arena.args.push(arena.status.as_ptr().cast());
                    // SAFETY: every pointer covers its buffer's declared elements (arena slots
                    // by the plan, bound, input and output tensors by the dtype/numel checks);
                    // the code generator proved affine accesses in bounds and checks computed
                    // ones; the kernel writes only arena buffers, whose slots are disjoint from
                    // every buffer live at the same step, and output tensors, which are the
                    // caller's exclusively borrowed memory, one per buffer, disjoint from every
                    // input and bound tensor; nothing else touches them during the launch.
                    unsafe {
                        kernel.launch_with(
                            pool,
                            &arena.args,
                            *extent,
                            *grain,
                            twin(kernel, outputs),
                        )?
                    };
                    if arena.status.load(Ordering::Relaxed) != 0 {
                        return Err(CpuError::IndexOutOfRange {
                            kernel: kernel.name().to_string(),
                        });
                    }
                }
                ExecStep::Gemm {
                    plan, a, b, out, ..
                } => {
                    let size = plan.dtype().size_bytes();
                    // SAFETY: `gemm_step` checked that the operands' spans (from these element
                    // offsets) lie inside their buffers and that `out` holds `out_len`
                    // elements; `out` is an arena slot disjoint from the live operands, or a
                    // caller's output tensor (exclusively borrowed, disjoint from them).
                    unsafe {
                        let pa = arena.ptrs[a.0].add(a.1 * size);
                        let pb = arena.ptrs[b.0].add(b.1 * size);
                        plan.run_raw(pool, pa, pb, arena.ptrs[*out])?;
                    }
                }
            }
            if let Some(t) = started {
                let name = match step {
                    ExecStep::Kernel {
                        kernel,
                        extent,
                        outputs,
                        ..
                    } => {
                        let stores = if twin(kernel, outputs) {
                            ", plain-store twin"
                        } else {
                            ""
                        };
                        format!("{} (extent {extent}{stores})", kernel.name())
                    }
                    ExecStep::Gemm { plan, .. } => format!("gemm {:?}", plan.out_dims()),
                };
                eprintln!(
                    "smelt-cpu {:>9.3} ms  {name}",
                    t.elapsed().as_secs_f64() * 1e3
                );
            }
        }
        Ok(())
    }

    /// Gives output `name` the shape `shape` (its element count must match).
    pub fn set_output_shape(&mut self, name: &str, shape: Shape) -> Result<()> {
        let o = self
            .outputs
            .iter_mut()
            .find(|o| o.name == name)
            .ok_or_else(|| CpuError::Output {
                name: name.to_string(),
                expected: "an output of the program".into(),
                got: "no such output".into(),
            })?;
        if shape.numel() != o.shape.numel() {
            return Err(CpuError::Output {
                name: name.to_string(),
                expected: format!("{} elements", o.shape.numel()),
                got: format!("shape {shape}"),
            });
        }
        o.shape = shape;
        Ok(())
    }

    /// The JIT-compiled kernels of the program's kernel steps, in execution order.
    pub fn kernels(&self) -> impl Iterator<Item = &CpuKernel> + '_ {
        self.steps.iter().filter_map(|s| match s {
            ExecStep::Kernel { kernel, .. } => Some(kernel),
            ExecStep::Gemm { .. } => None,
        })
    }

    /// The memory plan of the arena.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// Bytes of the arena (temporaries after liveness-based reuse).
    pub fn peak_bytes(&self) -> usize {
        self.plan.peak_bytes
    }

    /// What the temporaries would take without reuse.
    pub fn naive_bytes(&self) -> usize {
        self.plan.naive_bytes
    }

    /// The outputs' names, dtypes and shapes, in order.
    pub fn outputs(&self) -> impl Iterator<Item = (&str, DType, &Shape)> + '_ {
        self.outputs
            .iter()
            .map(|o| (o.name.as_str(), o.dtype, &o.shape))
    }

    /// Whether every red zone of the program's own arena still holds its poison (always true
    /// without red zones).
    pub fn red_zones_intact(&self) -> bool {
        let Ok(arena) = self.arena.lock() else {
            return false;
        };
        if self.plan.red_zone == 0 {
            return true;
        }
        // SAFETY: `mem` holds `peak_bytes` initialised bytes (rounded up to whole lines).
        let bytes: &[u8] = unsafe {
            std::slice::from_raw_parts(arena.mem.as_ptr().cast(), arena.mem.len() * ALIGN)
        };
        self.plan.offsets.iter().enumerate().all(|(i, o)| {
            let Some(o) = *o else { return true };
            bytes[o + self.plan.bytes[i]..o + self.plan.sizes[i]]
                .iter()
                .all(|&b| b == POISON)
        })
    }

    /// Runs the program on `inputs` (by name; also any parameter not bound at compile time)
    /// and returns the outputs in program order.
    ///
    /// An output the run writes whole gets memory straight from the allocator, not zeroed
    /// first (under [`crate::alloc::LargeAligned`], a large one is a block an earlier output
    /// of its size left, when one was freed: no page faults); any other output starts as
    /// zeros.
    pub fn run(&self, inputs: &HashMap<String, HostTensor>) -> Result<Vec<(String, HostTensor)>> {
        let mut outs: Vec<FreshOutput> = self
            .outputs
            .iter()
            .map(|o| FreshOutput::new(o.dtype, o.shape.clone(), o.written_whole))
            .collect();
        let ptrs: SmallVec<[*mut u8; 8]> = outs.iter_mut().map(FreshOutput::ptr).collect();
        // SAFETY: each pointer holds its output's elements of its dtype (`FreshOutput::new`
        // from the spec's dtype and shape), the outputs are distinct allocations, and nothing
        // else uses them until the run returns.
        unsafe { self.run_on(inputs, &ptrs, true)? };
        Ok(self
            .outputs
            .iter()
            .zip(outs)
            // SAFETY: the run succeeded, so it wrote every element of each output created
            // uninitialised (`written_whole`: the steps store each index, or the run filled
            // or copied it).
            .map(|(o, t)| (o.name.clone(), unsafe { t.finish() }))
            .collect())
    }

    /// Runs the program, writing the outputs into `outputs` (program order; dtypes and shapes
    /// must match). Allocates nothing unless another thread is running this program (or it
    /// has more than 8 outputs).
    pub fn run_into(
        &self,
        inputs: &HashMap<String, HostTensor>,
        outputs: &mut [HostTensor],
    ) -> Result<()> {
        if outputs.len() != self.outputs.len() {
            return Err(CpuError::Output {
                name: "*".into(),
                expected: format!("{} outputs", self.outputs.len()),
                got: format!("{} tensors", outputs.len()),
            });
        }
        for (o, t) in self.outputs.iter().zip(outputs.iter()) {
            if t.dtype() != o.dtype || t.shape() != &o.shape {
                return Err(CpuError::Output {
                    name: o.name.clone(),
                    expected: format!("{}{}", o.dtype, o.shape),
                    got: format!("{}{}", t.dtype(), t.shape()),
                });
            }
        }
        let ptrs: SmallVec<[*mut u8; 8]> = outputs.iter_mut().map(|t| t.data_mut_ptr()).collect();
        // SAFETY: each tensor matches its output's dtype and shape (checked above), and they
        // are the caller's exclusively borrowed, distinct tensors.
        unsafe { self.run_on(inputs, &ptrs, false) }
    }

    /// Runs the program, writing output `i` to `outputs[i]`. `fresh`: `run` allocated them
    /// (used where the OS cannot say whether their pages were touched).
    ///
    /// # Safety
    /// `outputs[i]` is valid for writes of output `i`'s elements of its dtype (its numel
    /// times the dtype's size), and nothing else reads or writes that memory during the call;
    /// the outputs do not overlap each other, the inputs or bound tensors.
    unsafe fn run_on(
        &self,
        inputs: &HashMap<String, HostTensor>,
        outputs: &[*mut u8],
        fresh: bool,
    ) -> Result<()> {
        let mut fresh_arena;
        let mut guard;
        let arena: &mut Arena = match self.arena.try_lock() {
            Ok(g) => {
                guard = g;
                &mut guard
            }
            Err(_) => {
                fresh_arena = Arena::new(&self.plan, self.slots.len(), self.max_args);
                &mut fresh_arena
            }
        };
        let base = arena.base();
        let mut untouched: SmallVec<[bool; 8]> = SmallVec::from_elem(false, self.outputs.len());
        for (i, (o, &p)) in self.outputs.iter().zip(outputs).enumerate() {
            let bytes = o.shape.numel() * o.dtype.size_bytes();
            if o.fill != Fill::Copy {
                arena.ptrs[o.buffer] = p;
                if o.fill == Fill::Zeros {
                    // SAFETY: `p` holds the output's `numel` elements of its dtype, and
                    // nothing else uses it (the caller's contract).
                    unsafe { std::ptr::write_bytes(p, 0, bytes) };
                }
            }
            if o.by_twin {
                untouched[i] = super::pages::untouched(p, bytes).unwrap_or(fresh);
            }
        }
        for (i, slot) in self.slots.iter().enumerate() {
            arena.ptrs[i] = match slot {
                // SAFETY: the plan keeps `offset + size <= peak_bytes`, the arena's size.
                Slot::Arena { offset } => unsafe { base.add(*offset) },
                // Bound from the caller's tensors just above.
                Slot::Output { .. } => arena.ptrs[i],
                Slot::Bound(t) => data_ptr(t.data()),
                Slot::Input { name, dtype, numel } => {
                    let t = inputs
                        .get(name)
                        .ok_or_else(|| CpuError::MissingBinding { name: name.clone() })?;
                    if t.dtype() != *dtype || t.numel() != *numel {
                        return Err(CpuError::Binding {
                            name: name.clone(),
                            expected: format!("{dtype} with {numel} elements"),
                            got: format!("{}{}", t.dtype(), t.shape()),
                        });
                    }
                    data_ptr(t.data())
                }
            };
        }
        // The steps run on this thread, which takes part in each step's parallel loop (see
        // `pool`: idle workers spin between steps, so no step waits for a wake-up).
        self.run_steps(self.pool.get(), arena, &untouched)?;
        for (o, &dst) in self.outputs.iter().zip(outputs) {
            if o.fill != Fill::Copy {
                continue;
            }
            let src = arena.ptrs[o.buffer];
            // SAFETY: `src` holds the output buffer's `numel` elements of this dtype (checked
            // above: dtype and shape match), `dst` exactly as many; they do not overlap (`dst`
            // is a caller's tensor that no slot points into: a buffer named by several outputs
            // is bound to the first one's tensor only, and this one is a later one).
            unsafe {
                std::ptr::copy_nonoverlapping(src, dst, o.shape.numel() * o.dtype.size_bytes())
            };
        }
        Ok(())
    }
}

fn data_ptr(d: &TensorData) -> *mut u8 {
    with_data!(d, v => v.as_ptr().cast::<u8>().cast_mut())
}

fn smelt_codegen_extent(k: &Kernel) -> Result<i64> {
    k.outer
        .iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(i64::try_from(d).ok()?))
        .ok_or_else(|| CpuError::Overflow {
            op: "kernel launch",
            what: format!("the outer extent of {}", k.name),
        })
}

/// Packed copies of bound GEMM operands: (buffer, element offset, dims, strides, column
/// blocks, panels) → (slot, element offset of the copy in it).
type Packed = HashMap<
    (
        usize,
        usize,
        Vec<usize>,
        Vec<isize>,
        Option<Vec<Range<usize>>>,
        bool,
    ),
    (usize, usize),
>;

/// A GEMM's right operand that is a bound f32/f64 matrix (a parameter or constant) read with
/// its `k` dim contiguous, as `x @ w.T` reads a linear layer's weight, is copied once, at
/// compile time, into a new bound slot holding it row-major `[k, n]`: `gemm` packs that layout
/// faster (128 x 3072 x 768: about 2.0 ms instead of 3.0 ms on the 2-core development VM).
/// When the product with left operand `lhs` splits into per-thread column blocks
/// ([`MatmulPlan::rhs_column_blocks`]), the copy holds each block contiguously instead
/// ([`MatmulPlan::block_rhs`]); when the panel kernel can run it (f32, few rows, AVX-512F or
/// AVX2 and FMA: [`MatmulPlan::uses_panels`]), each block in that kernel's panels
/// ([`MatmulPlan::panel_rhs`]).
/// A copy in panels starts at a 64-byte boundary of its slot (whole-line vector loads: about
/// 10% faster than 16-byte aligned ones in the panel kernel on the development VM).
/// Returns the plan of `lhs @ copy`, the copy's slot and its element offset there, or `None`
/// to read the buffer as it is. The values are the same, so the product is too.
fn pack_rhs(
    slots: &mut Vec<Slot>,
    sources: &[Option<&HostTensor>],
    packed: &mut Packed,
    (buffer, offset, operand): (usize, usize, &MatmulOperand),
    lhs: &MatmulOperand,
    dtype: DType,
    GemmSetup {
        threads,
        panel_max_rows,
    }: GemmSetup,
) -> Option<(MatmulPlan, usize, usize)> {
    let (dims, strides) = (operand.dims(), operand.strides());
    let [k, n] = *dims else { return None };
    let [sk, sn] = *strides else { return None };
    let Some(Some(t)) = sources.get(buffer) else {
        return None;
    };
    if sk != 1 || sn <= 1 || k < 2 || n < 2 {
        return None;
    }
    let mut plan = MatmulPlan::new(dtype, lhs, &MatmulOperand::contiguous(dims))
        .ok()?
        .with_panel_max_rows(panel_max_rows);
    let blocks = plan.rhs_column_blocks(threads);
    let panels = plan.panel_rhs(threads).is_ok();
    if blocks.is_some() && !panels {
        plan.block_rhs(threads).ok()?;
    }
    let key = (
        buffer,
        offset,
        dims.to_vec(),
        strides.to_vec(),
        blocks.clone(),
        panels,
    );
    if let Some(&(slot, at)) = packed.get(&key) {
        return Some((plan, slot, at));
    }
    // Element `(i, j)` of the `[k, n]` operand is element `offset + i + j * sn` of the bound
    // buffer.
    let (tensor, first) = if panels {
        let TensorData::F32(v) = t.data() else {
            return None;
        };
        let (data, first) = plan
            .pack_panels_aligned(threads, v, offset, [1, sn as usize])
            .ok()?;
        let tensor = HostTensor::new(Shape::new(&[data.len()]), TensorData::F32(data)).ok()?;
        (tensor, first)
    } else {
        let blocks = blocks.unwrap_or_else(|| std::iter::once(0..n).collect());
        let data = match t.data() {
            TensorData::F32(v) => {
                TensorData::F32(copy_blocks(v, offset, sn as usize, k, &blocks, threads)?)
            }
            TensorData::F64(v) => {
                TensorData::F64(copy_blocks(v, offset, sn as usize, k, &blocks, threads)?)
            }
            _ => return None,
        };
        (HostTensor::new(Shape::new(&[k, n]), data).ok()?, 0)
    };
    slots.push(Slot::Bound(tensor));
    packed.insert(key, (slots.len() - 1, first));
    Some((plan, slots.len() - 1, first))
}

/// The `[k, n]` operand whose element `(i, j)` is `v[offset + i + j * sn]` (stored transposed,
/// as a linear layer's `[n, k]` weight is), copied row-major block after block: block
/// `[c, c + w)` of `blocks` is `k * w` elements holding row `i`'s columns `c..c + w` from its
/// `i * w` (blocks cover `0..n` in order, so block `[c, c + w)` starts at element `k * c`);
/// `None` when `v` is too short for those elements.
/// Copied in 16 x 16 tiles (transposed in registers for f32 on AVX-512F,
/// [`BlockElement::transpose_tile`]), so that both the strided reads and the strided writes
/// of a tile stay in the cache (element by element in output order, every read is a cache
/// miss: a BERT layer's weights took 120 ms to pack that way), each 32-row stripe of a block
/// written once, the stripes divided among `threads` threads when the copy is large
/// ([`append_pieces`](super::gemm::append_pieces)).
fn copy_blocks<T: BlockElement>(
    v: &[T],
    offset: usize,
    sn: usize,
    k: usize,
    blocks: &[Range<usize>],
    threads: usize,
) -> Option<Vec<T>> {
    const STRIPE: usize = 32;
    const TILE: usize = 16;
    let n = blocks.last().map_or(0, |b| b.end);
    let cs = isize::try_from(sn).ok()?;
    // The elements read: the `[k, n]` operand's, from `offset`.
    if let Some(needed) = MatmulOperand::new(&[k, n], &[1, cs])
        .needed_len(offset)
        .ok()?
    {
        if needed > v.len() {
            return None;
        }
    }
    // Every stripe, in storage order: its length, and its block's columns and its rows.
    let stripes: Vec<_> = blocks
        .iter()
        .flat_map(|b| {
            (0..k).step_by(STRIPE).map(move |i0| {
                let rows = i0..(i0 + STRIPE).min(k);
                (rows.len() * b.len(), (b.clone(), rows))
            })
        })
        .collect();
    let mut out = Vec::new();
    // SAFETY: the loops below write row `i`'s columns `c..c + w` of the stripe for every row
    // of it, all its `rows * w` elements: each 16 x 16 tile by `transpose_tile` or, where
    // that declines, element by element. Every element read, `v[offset + i + j * sn]` with
    // `i < k` and `j < n`, is inside `v` (checked above).
    unsafe {
        super::gemm::append_pieces(&mut out, &stripes, threads, |(b, rows), dst| {
            let (c, w) = (b.start, b.len());
            let base = dst.as_mut_ptr().cast::<T>();
            for j0 in b.clone().step_by(TILE) {
                let cols = (j0 + TILE).min(b.end) - j0;
                for i0 in rows.clone().step_by(TILE) {
                    let tile_rows = (i0 + TILE).min(rows.end) - i0;
                    let src = v.as_ptr().wrapping_add(offset + i0 + j0 * sn);
                    let to = base.wrapping_add((i0 - rows.start) * w + (j0 - c));
                    if !T::transpose_tile(src, cs, tile_rows, cols, to, w) {
                        for j in 0..cols {
                            for i in 0..tile_rows {
                                to.add(i * w + j).write(*src.add(i + j * sn));
                            }
                        }
                    }
                }
            }
        })
    };
    Some(out)
}

/// An element type [`copy_blocks`] copies.
trait BlockElement: Copy + Send + Sync {
    /// Copies the `rows x cols` block (each at most 16) whose element `(i, j)` is at
    /// `src + i + j * cs` to `dst + i * ds + j` in registers, or returns `false` having
    /// copied nothing (the default: no such copy for this type).
    ///
    /// # Safety
    /// Elements `i < rows` of each column `j < cols` are readable; for each `i < rows`,
    /// `cols` elements from `dst + i * ds` are writable.
    unsafe fn transpose_tile(
        src: *const Self,
        cs: isize,
        rows: usize,
        cols: usize,
        dst: *mut Self,
        ds: usize,
    ) -> bool {
        let _ = (src, cs, rows, cols, dst, ds);
        false
    }
}

impl BlockElement for f32 {
    unsafe fn transpose_tile(
        src: *const f32,
        cs: isize,
        rows: usize,
        cols: usize,
        dst: *mut f32,
        ds: usize,
    ) -> bool {
        // SAFETY: forwarded contract.
        unsafe { super::gemm::transpose_tile(src, cs, rows, cols, dst, ds) }
    }
}

impl BlockElement for f64 {}

/// Copies into their slots the bound tensors (`sources`, by buffer) that some step or output
/// reads; the others, weights every reader of which reads a packed copy (see [`pack_rhs`]),
/// keep their empty placeholders, so the program holds no copy of them.
fn bind_used(
    program: &Program,
    steps: &[ExecStep],
    slots: &mut [Slot],
    sources: &[Option<&HostTensor>],
) {
    let mut used = vec![false; slots.len()];
    for step in steps {
        match step {
            ExecStep::Kernel { args, .. } => args.iter().for_each(|&a| used[a] = true),
            ExecStep::Gemm { a, b, out, .. } => {
                used[a.0] = true;
                used[b.0] = true;
                used[*out] = true;
            }
        }
    }
    for (_, b) in &program.outputs {
        used[b.0 as usize] = true;
    }
    for ((slot, used), source) in slots.iter_mut().zip(used).zip(sources) {
        if let (Some(t), true) = (source, used) {
            *slot = Slot::Bound((*t).clone());
        }
    }
}

/// What a GEMM step's plan depends on besides the step: the pool's size and
/// [`CpuOptions::panel_max_rows`].
#[derive(Clone, Copy)]
struct GemmSetup {
    threads: usize,
    panel_max_rows: usize,
}

fn gemm_step(
    program: &Program,
    g: &Gemm,
    slots: &mut Vec<Slot>,
    sources: &[Option<&HostTensor>],
    packed: &mut Packed,
    setup: GemmSetup,
) -> Result<ExecStep> {
    let decl = |b: u32| &program.buffers[b as usize];
    let operand = |o: &smelt_passes::kernel::GemmOperand| -> Result<(MatmulOperand, usize)> {
        let strides = o
            .strides
            .iter()
            .map(|&s| isize::try_from(s).map_err(|_| invalid(format!("gemm {}: stride", g.name))))
            .collect::<Result<Vec<_>>>()?;
        let d = decl(o.buffer.0);
        if d.dtype != g.dtype {
            return Err(CpuError::DTypeMismatch {
                op: "gemm",
                operand: "operand",
                expected: g.dtype,
                got: d.dtype,
            });
        }
        // The highest element the operand reaches must lie inside its buffer.
        let reach = o
            .shape
            .iter()
            .zip(&o.strides)
            .try_fold(o.offset, |acc, (&n, &s)| {
                if n == 0 {
                    Some(acc)
                } else {
                    acc.checked_add((n - 1).checked_mul(s)?)
                }
            });
        let empty = o.shape.contains(&0);
        if !empty && reach.is_none_or(|r| r >= d.numel) {
            return Err(CpuError::BufferTooSmall {
                op: "gemm",
                operand: "operand",
                needed: reach.map_or(usize::MAX, |r| r.saturating_add(1)),
                len: d.numel,
            });
        }
        Ok((MatmulOperand::new(&o.shape, &strides), o.offset))
    };
    let (a, a_off) = operand(&g.a)?;
    let (b, b_off) = operand(&g.b)?;
    let b_buf = g.b.buffer.0 as usize;
    let packed_rhs = if g.dtype.is_float() {
        pack_rhs(
            slots,
            sources,
            packed,
            (b_buf, b_off, &b),
            &a,
            g.dtype,
            setup,
        )
    } else {
        None
    };
    let (plan, b_buf, b_off) = match packed_rhs {
        Some((plan, slot, at)) => (plan, slot, at),
        None => (
            MatmulPlan::new(g.dtype, &a, &b)?.with_panel_max_rows(setup.panel_max_rows),
            b_buf,
            b_off,
        ),
    };
    let out = decl(g.out.0);
    if out.dtype != g.dtype || plan.out_len() > out.numel || plan.out_dims() != g.out_shape {
        return Err(invalid(format!(
            "gemm {}: output buffer {} with {} elements, the product is {:?}",
            g.name,
            out.dtype,
            out.numel,
            plan.out_dims()
        )));
    }
    if g.out == g.a.buffer || g.out == g.b.buffer {
        return Err(invalid(format!(
            "gemm {}: output overlaps an operand",
            g.name
        )));
    }
    Ok(ExecStep::Gemm {
        plan,
        a: (g.a.buffer.0 as usize, a_off),
        b: (b_buf, b_off),
        out: g.out.0 as usize,
    })
}

/// The most threads one program's kernels are JIT-compiled on at once.
#[cfg(feature = "llvm")]
const MAX_COMPILE_THREADS: usize = 8;

#[cfg(feature = "llvm")]
fn jit(
    program: &Program,
    kernels: &[&Kernel],
    options: &JitOptions,
    disk: &CpuDiskCache,
) -> Result<Vec<CpuKernel>> {
    if kernels.is_empty() {
        return Ok(Vec::new());
    }
    use smelt_codegen::llvm::kernel as kernel_gen;
    let outputs = kernel_gen::output_ids(program);
    let target = smelt_codegen::llvm::host_target()?.cache_key();
    super::jit_cache::cached(program, kernels, options, &target, || {
        let disk = super::disk_cache::open(disk);
        // LLVM compiles one module on one thread: the kernels are dealt round-robin into one
        // module per available core, compiled side by side (each module has its own LLVM
        // context and JIT instance, so nothing is shared between the threads).
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_COMPILE_THREADS)
            .min(kernels.len());
        let groups: Vec<Vec<&Kernel>> = (0..threads)
            .map(|t| kernels.iter().skip(t).step_by(threads).copied().collect())
            .collect();
        let compile = |group: &[&Kernel]| {
            super::disk_cache::compile_group(disk.as_ref(), program, group, options, &target)
        };
        let compiled: Vec<_> = if threads == 1 {
            vec![compile(&groups[0])]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = groups.iter().map(|g| s.spawn(move || compile(g))).collect();
                handles
                    .into_iter()
                    .map(|h| match h.join() {
                        Ok(r) => r,
                        Err(panic) => std::panic::resume_unwind(panic),
                    })
                    .collect()
            })
        };
        let mut per_group = Vec::with_capacity(threads);
        for (c, kernels) in compiled.into_iter().zip(&groups) {
            let c = c?;
            let module = Arc::new(c.module);
            let group = c
                .entries
                .iter()
                .zip(kernels)
                .map(|(name, k)| {
                    // SAFETY: the kernel code generator defines every entry, and the plain
                    // twin of each that `has_plain_twin` names, as `void (i8**, i64, i64)`
                    // in the calling convention of `super`, the twin computing the same.
                    unsafe {
                        let kernel = CpuKernel::new(module.clone(), name)?;
                        if kernel_gen::has_plain_twin(k, &program.buffers, &outputs, options) {
                            kernel.with_plain_twin(&kernel_gen::plain_twin_name(name))
                        } else {
                            Ok(kernel)
                        }
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            per_group.push(group.into_iter());
        }
        // Kernel `i` went to group `i % threads`, in order.
        (0..kernels.len())
            .map(|i| {
                per_group[i % threads]
                    .next()
                    .ok_or_else(|| CpuError::InvalidProgram {
                        reason: format!("the JIT returned no entry point for kernel {i}"),
                    })
            })
            .collect()
    })
}

#[cfg(not(feature = "llvm"))]
fn jit(
    _program: &Program,
    _kernels: &[&Kernel],
    _options: &JitOptions,
    _disk: &CpuDiskCache,
) -> Result<Vec<CpuKernel>> {
    Err(CpuError::Jit(smelt_codegen::llvm::LlvmError::NotCompiledIn))
}

#[cfg(test)]
mod tests {
    use super::copy_blocks;

    /// The tiled copy puts every element where the element-by-element definition does: block
    /// after block, row-major within a block, for sizes that are and are not multiples of the
    /// tile, with an offset into the source.
    #[test]
    fn copy_blocks_is_the_blockwise_transpose() {
        for (k, blocks) in [
            (1, std::iter::once(0..1).collect::<Vec<_>>()),
            (33, std::iter::once(0..70).collect()),
            (64, vec![0..5, 5..37, 37..40]),
            (70, vec![0..32, 32..64, 64..100]),
            (17, vec![0..16, 16..17, 17..50]),
            // Large enough to be copied on several threads.
            (700, vec![0..200, 200..397, 397..420]),
        ] {
            let n = blocks.last().unwrap().end;
            let (offset, sn) = (3, k + 2);
            // Each value names its position (exact in f32 and f64).
            let v: Vec<f32> = (0..offset + n * sn).map(|x| x as f32).collect();
            let v64: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            let want: Vec<f32> = blocks
                .iter()
                .flat_map(|b| (0..k).flat_map(move |i| b.clone().map(move |j| (i, j))))
                .map(|(i, j)| v[offset + i + j * sn])
                .collect();
            let want64: Vec<f64> = want.iter().map(|&x| f64::from(x)).collect();
            for threads in 1..=3 {
                let what = format!("k {k}, {blocks:?}, {threads} threads");
                let got = copy_blocks(&v, offset, sn, k, &blocks, threads).unwrap();
                assert!(got == want, "f32, {what}");
                let got = copy_blocks(&v64, offset, sn, k, &blocks, threads).unwrap();
                assert!(got == want64, "f64, {what}");
                // One element short: refused, not read past the end.
                let short = &v[..v.len() - 3];
                assert!(copy_blocks(short, offset, sn, k, &blocks, threads).is_none());
            }
        }
    }
}
