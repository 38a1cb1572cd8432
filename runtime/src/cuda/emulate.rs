//! Runs a program's CUDA C on the CPU: the launch path without a GPU.
//!
//! [`EmulatedProgram`] builds the same [`LaunchPlan`] as [`super::CudaProgram`] and compiles
//! the plan's CUDA C translation unit, unchanged, with the host C++ compiler against a small
//! header (`emulate/smelt_cuda_emu.h`) that gives it CUDA's thread model: every thread of a
//! block is a fiber, blocks run one after another, `__syncthreads()` and warp shuffles park a
//! thread until the whole block or warp has arrived, and `__shared__` arrays are shared by the
//! block's threads. A run then does what the GPU executor does, step by step, in host memory:
//! the run arena (zeroed once) with the temporaries at the plan's offsets, the inputs copied
//! to their arena slots, constants and bound parameters in their own region, each kernel
//! launched with the plan's grid, block and `reads…, writes…, n` arguments, cuBLAS calls
//! replaced by a column-major GEMM that reads the same parameters, and the status word of
//! range-checked gathers cleared before and read after the run.
//!
//! What it checks: the generated kernels' indexing, grid-stride loops, vector packs and their
//! alignment, row caches, block reductions, shuffles and the barriers between them (warps run
//! ahead of each other between barriers, so a missing `__syncthreads` shows; see
//! [`EmulatorOptions::grid_limit`] for blocks that loop over rows), f16/bf16 rounding, the
//! fallback GEMMs, and the plan's memory layout and arguments, on any Linux machine with a
//! C++17 compiler. What a GPU would hang on, fault on or corrupt silently is an error naming
//! the kernel, thread and source line: a barrier that can never complete, a misaligned vector
//! access, a write past the end of an output.
//!
//! What it does not: timing, concurrency between streams, the driver and cuBLAS calls, NVRTC
//! (see `super::compile`), or CUDA's own `expf`/`tanhf`/`erff`, which the host C library
//! replaces (they may differ by an ulp or two); reads out of bounds, shared memory read before
//! it is written, `__launch_bounds__`. It is a test and debugging tool: a compile takes about
//! 0.3 s and a thread switch tens of nanoseconds, so keep tensors test-sized. See
//! `docs/cuda.md`.
//!
//! The compiler is `$SMELT_CXX`, else `$CXX`, else the first of `c++`, `g++`, `clang++` on the
//! `PATH`; none is a [`CudaExecError::Emulator`] error.

use super::error::numbered_source;
use super::exec::{dtype_numel_check, host_bytes};
use super::exec_error::{invalid, CudaExecError, ExecResult};
use super::launch::{
    BufferLoc, CublasCall, CublasGemm, GemmBackend, KernelArg, LaunchPlan, LaunchStep, Trans,
    DEVICE_ALIGN,
};
use smelt_codegen::cuda::STATUS_WORD;
use smelt_ir::{DType, HostTensor, Shape, TensorData};
use smelt_passes::kernel::Program;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What the padding after a kernel's outputs holds during its launch.
const PAD_BYTE: u8 = 0xa5;

const HEADER: &str = include_str!("emulate/smelt_cuda_emu.h");
const FP16_HEADER: &str = include_str!("emulate/cuda_fp16.h");
const BF16_HEADER: &str = include_str!("emulate/cuda_bf16.h");

/// How to build an [`EmulatedProgram`].
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// How GEMM steps run: [`GemmBackend::Cublas`] (the default) plans them as cuBLAS calls,
    /// which the emulator computes on the host; [`GemmBackend::Fallback`] compiles the
    /// fallback GEMM kernels into the translation unit, as on a GPU without cuBLAS.
    pub gemm: GemmBackend,
    /// The C++ compiler; `None`: `$SMELT_CXX`, `$CXX`, then `c++`, `g++`, `clang++`.
    pub compiler: Option<PathBuf>,
    /// Launch at most this many blocks per kernel (`None`: the plan's grid). Every generated
    /// kernel is a grid-stride loop, correct for any grid, so a small limit makes each block
    /// loop over several rows or chunks, exercising what only large shapes reach on a GPU
    /// (shared scratch reused by the next row of the same block, among others).
    pub grid_limit: Option<u32>,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            gemm: GemmBackend::Cublas,
            compiler: None,
            grid_limit: None,
        }
    }
}

type Entry = unsafe extern "C" fn(u32, u32, *mut *mut c_void) -> i32;
type LastError = unsafe extern "C" fn() -> *const c_char;

/// Zeroed host memory aligned like a device allocation ([`DEVICE_ALIGN`]), addressed through
/// one raw pointer taken at allocation (kernels write through copies of it).
struct Region {
    _chunks: Vec<AlignedChunk>,
    ptr: *mut u8,
    bytes: usize,
}

#[derive(Clone, Copy)]
#[repr(C, align(256))]
struct AlignedChunk([u8; DEVICE_ALIGN]);

const _: () = assert!(std::mem::align_of::<AlignedChunk>() == DEVICE_ALIGN);

impl Region {
    fn new(bytes: usize) -> Region {
        let mut chunks = vec![AlignedChunk([0; DEVICE_ALIGN]); bytes.div_ceil(DEVICE_ALIGN).max(1)];
        let ptr = chunks.as_mut_ptr().cast::<u8>();
        Region {
            _chunks: chunks,
            ptr,
            bytes,
        }
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at the vector's chunks (never reallocated), plain bytes without
        // padding holding at least `bytes` bytes; `&mut self` excludes other uses through Rust
        // references, and kernels run only while no such slice is alive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.bytes) }
    }
}

struct RunState {
    arena: Region,
    ptrs: Vec<u64>,
}

/// A program whose CUDA C runs on the CPU under CUDA's thread model (see the module docs).
pub struct EmulatedProgram {
    plan: LaunchPlan,
    entries: Vec<Entry>,
    last_error: LastError,
    /// `smelt_status` of the translation unit, when a kernel has range-checked accesses.
    status: Option<*mut u32>,
    /// Constants and bound parameters (never written by a kernel: the plan checks that kernels
    /// write only temporaries).
    consts: Region,
    state: Mutex<RunState>,
    grid_limit: Option<u32>,
    /// Per plan step: the arena byte ranges `(buffer, end of its data, end of its 256-byte
    /// slot)` of the buffers it writes, whose padding is checked around each launch.
    pads: Vec<Vec<(usize, usize, usize)>>,
    output_shapes: Vec<Shape>,
    checked_kernels: String,
    translation_unit: String,
    _lib: libloading::Library,
}

// SAFETY: the raw pointers are the loaded library's entry points and its status word, valid
// while `_lib` lives; every run takes the `state` lock, so one run at a time touches the status
// word and the arena, and the emulator's own state is thread-local in the library.
unsafe impl Send for EmulatedProgram {}
// SAFETY: as above; shared access goes through the locks.
unsafe impl Sync for EmulatedProgram {}

impl std::fmt::Debug for EmulatedProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedProgram")
            .field("entries", &self.plan.entries)
            .field("arena_bytes", &self.plan.arena_bytes)
            .field("const_bytes", &self.plan.const_bytes)
            .finish_non_exhaustive()
    }
}

fn emu_err(message: impl Into<String>) -> CudaExecError {
    CudaExecError::Emulator(message.into())
}

/// The C++ compiler the emulator uses.
pub fn host_compiler(explicit: Option<&Path>) -> ExecResult<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    for var in ["SMELT_CXX", "CXX"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(v));
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["c++", "g++", "clang++"] {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(emu_err(
        "no C++ compiler: set SMELT_CXX or CXX, or put c++, g++ or clang++ on the PATH",
    ))
}

/// A fresh private folder under the temp dir (mode 0700 on Unix; an existing folder of the
/// same name is never reused, so nobody else can have put a library there).
fn scratch_dir() -> ExecResult<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut last = None;
    for _ in 0..16 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!(
            "smelt-emu-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) => last = Some((dir, e)),
        }
    }
    let (dir, e) = last.expect("at least one attempt");
    Err(emu_err(format!("cannot create {}: {e}", dir.display())))
}

/// The translation unit the host compiler builds: the emulator header, the plan's CUDA C, one
/// exported launcher per entry.
fn translation_unit(plan: &LaunchPlan) -> String {
    let mut s = String::from("#include \"smelt_cuda_emu.h\"\n");
    s.push_str(&plan.source);
    s.push_str("\n// ---- emulator entry points ----\n");
    for e in &plan.entries {
        s.push_str(&format!("SMELT_EMU_ENTRY({e})\n"));
    }
    if plan.status_word {
        s.push_str(&format!("SMELT_EMU_STATUS({STATUS_WORD})\n"));
    }
    s
}

/// Compiles `tu` (with `extra` compiler arguments) into a shared library in a scratch folder
/// and loads it (the folder is removed once the library is loaded).
fn build_library(tu: &str, compiler: &Path, extra: &[&str]) -> ExecResult<libloading::Library> {
    let dir = scratch_dir()?;
    let result = (|| {
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text)
                .map_err(|e| emu_err(format!("cannot write {}: {e}", dir.join(name).display())))
        };
        write("smelt_cuda_emu.h", HEADER)?;
        write("cuda_fp16.h", FP16_HEADER)?;
        write("cuda_bf16.h", BF16_HEADER)?;
        write("program.cpp", tu)?;
        let (obj, lib) = (dir.join("program.o"), dir.join("program.so"));
        // Compiled, then linked without -fsanitize, so no sanitizer runtime is needed: the
        // header defines the one handler the alignment checks call.
        let mut compile = Command::new(compiler);
        compile
            .args(["-std=c++17", "-O1", "-fPIC", "-c", "-w"])
            // The kernels' `__fadd_rn`-style arithmetic must not become FMAs; the vector packs
            // read through `reinterpret_cast`; misaligned typed accesses are reported.
            .args([
                "-ffp-contract=off",
                "-fno-fast-math",
                "-fno-strict-aliasing",
            ])
            .args(["-fsanitize=alignment", "-fvisibility=hidden"])
            // The fibers' stack switch returns onto another stack: no shadow stacks.
            .args(if cfg!(target_arch = "x86_64") {
                &["-fcf-protection=none"][..]
            } else {
                &[]
            })
            .args(extra)
            .arg("-I")
            .arg(&dir)
            .arg("-o")
            .arg(&obj)
            .arg(dir.join("program.cpp"));
        let mut link = Command::new(compiler);
        // Every symbol resolved at link time (not at a kernel's first call), bound inside the
        // library.
        link.args(["-shared", "-Wl,-Bsymbolic", "-Wl,-z,defs", "-o"])
            .arg(&lib)
            .arg(&obj);
        for (step, mut cmd) in [("compile", compile), ("link", link)] {
            let out = cmd
                .output()
                .map_err(|e| emu_err(format!("cannot run {}: {e}", compiler.display())))?;
            if !out.status.success() {
                return Err(emu_err(format!(
                    "{} failed to {step} the translation unit ({}):\n{}\nsource:\n{}",
                    compiler.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr),
                    numbered_source(tu)
                )));
            }
        }
        // SAFETY: a library just built from smelt's generated CUDA C and the emulator header;
        // its initialisers only set up thread-local state.
        unsafe { libloading::Library::new(&lib) }
            .map_err(|e| emu_err(format!("cannot load {}: {e}", lib.display())))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

impl EmulatedProgram {
    /// Plans `program` as [`super::CudaProgram::compile`] does, binding the parameters in
    /// `params`, and builds its CUDA C for the CPU.
    pub fn compile(
        program: &Program,
        params: &HashMap<String, HostTensor>,
        options: &EmulatorOptions,
    ) -> ExecResult<EmulatedProgram> {
        let plan = LaunchPlan::build(program, &|n| params.contains_key(n), options.gemm)?;
        for step in &plan.steps {
            if let LaunchStep::Kernel(k) = step {
                if k.shared_bytes != 0 {
                    return Err(emu_err(format!(
                        "kernel {}: {} bytes of dynamic shared memory (not emulated)",
                        plan.entries[k.entry], k.shared_bytes
                    )));
                }
            }
        }
        let mut consts = Region::new(plan.const_bytes);
        for (t, offset) in plan.const_data(program, params)? {
            let bytes = host_bytes(t.data());
            consts.bytes_mut()[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        let translation_unit = translation_unit(&plan);
        let compiler = host_compiler(options.compiler.as_deref())?;
        let lib = build_library(&translation_unit, &compiler, &[])?;
        let mut entries = Vec::with_capacity(plan.entries.len());
        for e in &plan.entries {
            let symbol = format!("smelt_emu_{e}\0");
            // SAFETY: SMELT_EMU_ENTRY defines each launcher with exactly this signature.
            let f: libloading::Symbol<Entry> = unsafe { lib.get(symbol.as_bytes()) }
                .map_err(|err| emu_err(format!("no launcher for entry {e}: {err}")))?;
            entries.push(*f);
        }
        // SAFETY: defined by the emulator header with this signature.
        let last_error: libloading::Symbol<LastError> =
            unsafe { lib.get(b"smelt_emu_last_error\0") }
                .map_err(|e| emu_err(format!("no smelt_emu_last_error: {e}")))?;
        let last_error = *last_error;
        let status = if plan.status_word {
            // SAFETY: SMELT_EMU_STATUS defines it with this signature.
            let f: libloading::Symbol<unsafe extern "C" fn() -> *mut u32> =
                unsafe { lib.get(b"smelt_emu_status\0") }
                    .map_err(|e| emu_err(format!("no smelt_emu_status: {e}")))?;
            // SAFETY: returns the address of the library's `unsigned int` status word.
            Some(unsafe { f() })
        } else {
            None
        };
        let mut pads = Vec::with_capacity(plan.steps.len());
        for step in &plan.steps {
            let written: Vec<usize> = match step {
                LaunchStep::Kernel(k) => program.steps[k.step]
                    .writes()
                    .iter()
                    .map(|b| b.0 as usize)
                    .collect(),
                _ => Vec::new(),
            };
            pads.push(
                written
                    .into_iter()
                    .filter_map(|b| match plan.buffers[b] {
                        BufferLoc::Arena { offset } => {
                            let end = offset + plan.bytes[b];
                            Some((b, end, end.next_multiple_of(DEVICE_ALIGN)))
                        }
                        _ => None,
                    })
                    .collect(),
            );
        }
        let ptrs = vec![0u64; plan.buffers.len()];
        Ok(EmulatedProgram {
            pads,
            entries,
            last_error,
            status,
            consts,
            state: Mutex::new(RunState {
                arena: Region::new(plan.arena_bytes),
                ptrs,
            }),
            grid_limit: options.grid_limit,
            output_shapes: plan
                .outputs
                .iter()
                .map(|o| Shape::new(&[o.numel]))
                .collect(),
            checked_kernels: super::exec::computed_access_kernels(program),
            translation_unit,
            plan,
            _lib: lib,
        })
    }

    /// Gives output `name` the shape `shape` (its element count must match).
    pub fn set_output_shape(&mut self, name: &str, shape: Shape) -> ExecResult<()> {
        let i = self.plan.output_with_shape(name, &shape)?;
        self.output_shapes[i] = shape;
        Ok(())
    }

    /// The launch plan (the same as a GPU's with this GEMM backend).
    pub fn plan(&self) -> &LaunchPlan {
        &self.plan
    }

    /// The C++ translation unit the host compiler built.
    pub fn translation_unit(&self) -> &str {
        &self.translation_unit
    }

    /// `":\n    N | text"` for a message ending in "line N of the translation unit", else "".
    fn quote_line(&self, msg: &str) -> String {
        msg.strip_suffix(" of the translation unit")
            .and_then(|m| m.rsplit_once("line "))
            .and_then(|(_, n)| n.parse::<usize>().ok())
            .and_then(|n| Some((n, self.translation_unit.lines().nth(n.checked_sub(1)?)?)))
            .map_or(String::new(), |(n, text)| {
                format!(":\n{n:>6} | {}", text.trim())
            })
    }

    /// Runs the program on `inputs` (by name) and returns its outputs; a set status word (an
    /// out-of-range gather) is [`CudaExecError::IndexOutOfRange`], as on a GPU.
    pub fn run(
        &self,
        inputs: &HashMap<String, HostTensor>,
    ) -> ExecResult<Vec<(String, HostTensor)>> {
        let (outputs, status) = self.run_with_status(inputs)?;
        if status != 0 {
            return Err(CudaExecError::IndexOutOfRange {
                kernels: self.checked_kernels.clone(),
            });
        }
        Ok(outputs)
    }

    /// [`Self::run`], returning the outputs together with the status word (0 when no kernel
    /// met an out-of-range index; out-of-range loads read 0 and stores were skipped), for
    /// looking at what the kernels did with a bad index.
    pub fn run_with_status(
        &self,
        inputs: &HashMap<String, HostTensor>,
    ) -> ExecResult<(Vec<(String, HostTensor)>, u32)> {
        for s in &self.plan.inputs {
            let t = inputs
                .get(&s.name)
                .ok_or_else(|| CudaExecError::MissingBinding {
                    name: s.name.clone(),
                })?;
            dtype_numel_check(&s.name, s.dtype, s.numel, (t.dtype(), t.shape()))?;
        }
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        let arena = state.arena.addr();
        self.plan
            .resolve_pointers(arena, self.consts.addr(), None, &mut state.ptrs);
        for s in &self.plan.inputs {
            let bytes = host_bytes(inputs[&s.name].data());
            state.arena.bytes_mut()[s.arena_offset..s.arena_offset + bytes.len()]
                .copy_from_slice(bytes);
        }
        if let Some(word) = self.status {
            // SAFETY: the library's 4-byte status word; runs are serialised by the lock.
            unsafe { word.write_volatile(0) };
        }
        let ptrs = &state.ptrs;
        let value = |a: &KernelArg| match *a {
            KernelArg::Buffer { buffer, .. } => ptrs[buffer],
            KernelArg::Count(n) => n as u64,
        };
        for (s, step) in self.plan.steps.iter().enumerate() {
            match step {
                LaunchStep::Kernel(k) => {
                    // The padding after each buffer it writes is reserved to that buffer while
                    // it is live (the plan places live buffers disjointly, sizes rounded up to
                    // 256 bytes): filled with a pattern here and checked after the launch, it
                    // catches a kernel writing past the end of its output.
                    for &(_, end, slot) in &self.pads[s] {
                        state.arena.bytes_mut()[end..slot].fill(PAD_BYTE);
                    }
                    let mut values: Vec<u64> = k.args.iter().map(value).collect();
                    let mut params: Vec<*mut c_void> = values
                        .iter_mut()
                        .map(|v| (v as *mut u64).cast::<c_void>())
                        .collect();
                    let grid = self.grid_limit.map_or(k.grid, |g| k.grid.min(g.max(1)));
                    // SAFETY: the launcher unpacks exactly the kernel's parameters (pointers,
                    // then `long long n`, 8 bytes each: the launch contract) from `params`;
                    // every pointer covers its buffer in the arena or the constant region
                    // (placed by the plan, sizes checked above), as on the GPU.
                    let rc = unsafe { (self.entries[k.entry])(grid, k.block, params.as_mut_ptr()) };
                    if rc != 0 {
                        // SAFETY: a NUL-terminated string owned by the library's thread-local
                        // state, read before anything else runs on this thread.
                        let msg = unsafe { CStr::from_ptr((self.last_error)()) };
                        let msg = msg.to_string_lossy();
                        return Err(emu_err(format!(
                            "kernel {} (step {}, grid {} x block {}): {msg}{}",
                            self.plan.entries[k.entry],
                            k.step,
                            grid,
                            k.block,
                            self.quote_line(&msg)
                        )));
                    }
                    for &(b, end, slot) in &self.pads[s] {
                        let pad = &state.arena.bytes_mut()[end..slot];
                        if let Some(i) = pad.iter().position(|&x| x != PAD_BYTE) {
                            return Err(emu_err(format!(
                                "kernel {} (step {}) wrote past the end of buffer b{b} ({} \
                                 bytes): byte {} after its end changed",
                                self.plan.entries[k.entry], k.step, self.plan.bytes[b], i
                            )));
                        }
                    }
                }
                LaunchStep::Cublas(g) => {
                    for call in &g.calls {
                        // SAFETY: the plan checked every operand span against its buffer (the
                        // cuBLAS contract); the buffers are live host regions of this run.
                        unsafe { host_gemm(g, call, value(&g.a), value(&g.b), value(&g.c))? };
                    }
                }
                LaunchStep::Zero { arg, bytes, .. } => {
                    // SAFETY: an arena temporary with room for `bytes` bytes.
                    unsafe { std::ptr::write_bytes(value(arg) as *mut u8, 0, *bytes) };
                }
                LaunchStep::Skip { .. } => {}
            }
        }
        // SAFETY: as above.
        let status = self
            .status
            .map_or(0, |word| unsafe { word.read_volatile() });
        let mut out = Vec::with_capacity(self.plan.outputs.len());
        for (o, shape) in self.plan.outputs.iter().zip(&self.output_shapes) {
            let bytes = o.numel * o.dtype.size_bytes();
            let src = ptrs[o.buffer];
            // SAFETY: `src` holds the output buffer's `bytes` bytes (arena or constants).
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
            let data = TensorData::from_le_bytes(o.dtype, data)
                .map_err(|e| invalid(format!("output {:?}: {e}", o.name)))?;
            let t = HostTensor::new(shape.clone(), data)
                .map_err(|e| invalid(format!("output {:?}: {e}", o.name)))?;
            out.push((o.name.clone(), t));
        }
        Ok((out, status))
    }
}

/// Element `i` of a buffer of `dtype` at `base`, as f64 (exact for every float dtype).
///
/// # Safety
/// `base` must hold at least `i + 1` elements of `dtype`.
unsafe fn load(dtype: DType, base: u64, i: usize) -> f64 {
    match dtype {
        DType::F32 => f64::from((base as *const f32).add(i).read_unaligned()),
        DType::F64 => (base as *const f64).add(i).read_unaligned(),
        DType::F16 => f64::from((base as *const half::f16).add(i).read_unaligned().to_f32()),
        _ => f64::from((base as *const half::bf16).add(i).read_unaligned().to_f32()),
    }
}

/// Stores `v` (an f32 accumulator for all but f64) as element `i` of `dtype` at `base`.
///
/// # Safety
/// `base` must hold at least `i + 1` elements of `dtype`.
unsafe fn store(dtype: DType, base: u64, i: usize, v: f64) {
    match dtype {
        DType::F32 => (base as *mut f32).add(i).write_unaligned(v as f32),
        DType::F64 => (base as *mut f64).add(i).write_unaligned(v),
        DType::F16 => (base as *mut half::f16)
            .add(i)
            .write_unaligned(half::f16::from_f32(v as f32)),
        _ => (base as *mut half::bf16)
            .add(i)
            .write_unaligned(half::bf16::from_f32(v as f32)),
    }
}

/// `cublasGemmStridedBatchedEx` with alpha 1 and beta 0 on host memory, column-major:
/// `C[i + j·ldc] = Σ_p op(A)[i, p] · op(B)[p, j]` per batch, accumulated in f32 (f64 for f64)
/// in `p` order.
///
/// # Safety
/// `a`, `b` and `c` must hold every element the call's offsets, strides and leading
/// dimensions reach (what the plan checks for cuBLAS).
unsafe fn host_gemm(g: &CublasGemm, call: &CublasCall, a: u64, b: u64, c: u64) -> ExecResult<()> {
    let d = g.dtype;
    if !matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(invalid(format!("cuBLAS step of dtype {d}")));
    }
    let (m, n, k) = (call.m as usize, call.n as usize, call.k as usize);
    let (lda, ldb, ldc) = (call.lda as usize, call.ldb as usize, call.ldc as usize);
    // op(A) by rows and op(B) by columns, contiguous along p.
    let (mut rows, mut cols) = (vec![0f64; m * k], vec![0f64; n * k]);
    for batch in 0..i64::from(call.batch.max(0)) {
        let ao = (call.a_offset as i64 + batch * call.stride_a) as usize;
        let bo = (call.b_offset as i64 + batch * call.stride_b) as usize;
        let co = (call.c_offset as i64 + batch * call.stride_c) as usize;
        for i in 0..m {
            for p in 0..k {
                let at = match call.transa {
                    Trans::N => i + p * lda,
                    Trans::T => p + i * lda,
                };
                rows[i * k + p] = load(d, a, ao + at);
            }
        }
        for j in 0..n {
            for p in 0..k {
                let at = match call.transb {
                    Trans::N => p + j * ldb,
                    Trans::T => j + p * ldb,
                };
                cols[j * k + p] = load(d, b, bo + at);
            }
        }
        for j in 0..n {
            let col = &cols[j * k..(j + 1) * k];
            for i in 0..m {
                let row = &rows[i * k..(i + 1) * k];
                let v = if d == DType::F64 {
                    row.iter().zip(col).fold(0f64, |acc, (x, y)| acc + x * y)
                } else {
                    f64::from(
                        row.iter()
                            .zip(col)
                            .fold(0f32, |acc, (x, y)| acc + (*x as f32) * (*y as f32)),
                    )
                };
                store(d, c, co + i + j * ldc, v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels written by hand against the emulator header: shuffles, shared memory and
    /// barriers, and the misuses a GPU would hang on.
    const KERNELS: &str = r#"
extern "C" __global__ void shuffle(float* out, long long n) {
    const int t = threadIdx.x;
    out[blockIdx.x * blockDim.x + t] = __shfl_xor_sync(0xffffffffu, (float)t * 10.0f, 5);
}
extern "C" __global__ void reverse(int* out, long long n) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    s[t] = t + 1000 * (int)blockIdx.x;
    __syncthreads();
    out[blockIdx.x * 64 + t] = s[63 - t];
}
extern "C" __global__ void exit_before_barrier(int* out, long long n) {
    if (threadIdx.x == 3) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
extern "C" __global__ void divergent_shuffle(int* out, long long n) {
    int v = threadIdx.x;
    if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
struct alignas(16) pack4 { float v[4]; };
extern "C" __global__ void misaligned(float* out, long long n) {
    const pack4 p = *reinterpret_cast<const pack4*>(out + 4 * threadIdx.x + 1);
    out[threadIdx.x] = p.v[0];
}
// sm_block_reduce's shape, called twice on one scratch array; without the first barrier a
// warp that runs ahead overwrites a partial another warp has not read yet.
template <bool BARRIER>
__device__ int block_sum(int v, int* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    if (BARRIER) __syncthreads();
    if (lane == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = scratch[lane & (warps - 1)];
    for (int o = warps >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <bool BARRIER>
__device__ void two_sums(int* out) {
    __shared__ int scratch[32];
    const int a = block_sum<BARRIER>(threadIdx.x, scratch);
    const int b = block_sum<BARRIER>(1000 * threadIdx.x, scratch);
    out[threadIdx.x] = a + b;
}
extern "C" __global__ void two_sums_with_barrier(int* out, long long n) { two_sums<true>(out); }
extern "C" __global__ void two_sums_without_barrier(int* out, long long n) { two_sums<false>(out); }
extern "C" __global__ void scale_tiny(float* out, long long n) {
    out[threadIdx.x] = __fmul_rn(out[threadIdx.x], 1e-10f);
}
SMELT_EMU_ENTRY(shuffle)
SMELT_EMU_ENTRY(reverse)
SMELT_EMU_ENTRY(scale_tiny)
SMELT_EMU_ENTRY(two_sums_with_barrier)
SMELT_EMU_ENTRY(two_sums_without_barrier)
SMELT_EMU_ENTRY(misaligned)
SMELT_EMU_ENTRY(exit_before_barrier)
SMELT_EMU_ENTRY(divergent_shuffle)
"#;

    /// Runs entry `name` of `lib` over `out` (`grid` x `block`); the error message on failure.
    fn launch<T>(
        lib: &libloading::Library,
        name: &str,
        grid: u32,
        block: u32,
        out: &mut [T],
    ) -> Result<(), String> {
        let symbol = format!("smelt_emu_{name}\0");
        // SAFETY: SMELT_EMU_ENTRY defines the launcher with this signature.
        let f: libloading::Symbol<Entry> = unsafe { lib.get(symbol.as_bytes()) }.unwrap();
        // SAFETY: as above.
        let last: libloading::Symbol<LastError> =
            unsafe { lib.get(b"smelt_emu_last_error\0") }.unwrap();
        let (mut ptr, mut n) = (out.as_mut_ptr() as u64, out.len() as u64);
        let mut args = [
            (&mut ptr as *mut u64).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: every kernel above takes (T*, long long) and writes below grid·block ≤ n.
        match unsafe { f(grid, block, args.as_mut_ptr()) } {
            0 => Ok(()),
            // SAFETY: the library's NUL-terminated message.
            _ => Err(unsafe { CStr::from_ptr(last()) }
                .to_string_lossy()
                .into_owned()),
        }
    }

    fn each_context_switch(check: impl Fn(&libloading::Library, &str)) {
        let Ok(compiler) = host_compiler(None) else {
            println!("skipped: no C++ compiler");
            return;
        };
        let tu = format!("#include \"smelt_cuda_emu.h\"\n{KERNELS}");
        for (what, extra) in [
            ("stack switch", &[][..]),
            ("ucontext", &["-DSMELT_EMU_UCONTEXT"][..]),
        ] {
            let lib = build_library(&tu, &compiler, extra).unwrap();
            check(&lib, what);
        }
    }

    #[test]
    fn shuffles_exchange_values_between_the_lanes_of_each_warp() {
        each_context_switch(|lib, what| {
            let mut out = vec![0f32; 128];
            launch(lib, "shuffle", 2, 64, &mut out).unwrap();
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, ((i % 64) ^ 5) as f32 * 10.0, "{what}: thread {i}");
            }
        });
    }

    #[test]
    fn shared_memory_is_per_block_and_barriers_order_it() {
        each_context_switch(|lib, what| {
            let mut out = vec![0i32; 3 * 64];
            launch(lib, "reverse", 3, 64, &mut out).unwrap();
            for (i, v) in out.iter().enumerate() {
                let (b, t) = (i / 64, i % 64);
                assert_eq!(*v, (63 - t) as i32 + 1000 * b as i32, "{what}: {i}");
            }
        });
    }

    #[test]
    fn barriers_a_gpu_would_hang_on_are_errors() {
        each_context_switch(|lib, what| {
            let mut out = vec![0i32; 64];
            let e = launch(lib, "exit_before_barrier", 1, 64, &mut out).unwrap_err();
            assert!(e.contains("cannot go on"), "{what}: {e}");
            assert!(
                e.contains("threads 0-2 at __syncthreads (line 16), 3-3 exited, 4-63 at"),
                "{what}: {e}"
            );
            let e = launch(lib, "divergent_shuffle", 1, 32, &mut out).unwrap_err();
            assert!(
                e.contains("threads 0-15 at a warp shuffle (line 21), 16-31 exited"),
                "{what}: {e}"
            );
            // The library is usable after a failed launch.
            let mut ok = vec![0f32; 32];
            launch(lib, "shuffle", 1, 32, &mut ok).unwrap();
            assert_eq!(ok[0], 50.0, "{what}");
        });
    }

    /// Warps run ahead of each other between barriers, so a missing `__syncthreads` gives
    /// wrong results rather than passing by luck.
    #[test]
    fn a_missing_barrier_between_warps_shows_in_the_results() {
        each_context_switch(|lib, what| {
            let (n, sum) = (128usize, 127 * 128 / 2);
            let mut out = vec![0i32; n];
            launch(lib, "two_sums_with_barrier", 1, n as u32, &mut out).unwrap();
            assert!(
                out.iter().all(|&v| v == sum + 1000 * sum),
                "{what}: {out:?}"
            );
            launch(lib, "two_sums_without_barrier", 1, n as u32, &mut out).unwrap();
            assert!(
                out.iter().any(|&v| v != sum + 1000 * sum),
                "{what}: {out:?}"
            );
        });
    }

    /// Kernels keep subnormals (CUDA's default) even when the calling thread flushes them.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(deprecated)] // _mm_getcsr/_mm_setcsr: the only way to set MXCSR from Rust
    fn kernels_keep_subnormals_whatever_the_caller_sets() {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        each_context_switch(|lib, what| {
            let mut out = vec![1e-30f32; 32];
            // SAFETY: reads, then sets flush-to-zero and denormals-are-zero on this thread only
            // (restored below); no Rust code relies on subnormals meanwhile.
            let saved = unsafe {
                let saved = _mm_getcsr();
                _mm_setcsr(saved | 0x8040);
                saved
            };
            let r = launch(lib, "scale_tiny", 1, 32, &mut out);
            // SAFETY: the saved value.
            unsafe { _mm_setcsr(saved) };
            r.unwrap();
            assert_eq!(out[0], 1e-30f32 * 1e-10f32, "{what}");
            assert!(out[0] != 0.0 && out[0].is_subnormal(), "{what}");
        });
    }

    #[test]
    fn misaligned_vector_accesses_are_errors() {
        each_context_switch(|lib, what| {
            let mut out = vec![0f32; 4 * 32 + 4];
            let e = launch(lib, "misaligned", 1, 32, &mut out).unwrap_err();
            assert!(
                e.starts_with("misaligned ")
                    && e.contains(" of a 16-byte-aligned type at address ")
                    && e.contains("(thread 0 of block 0), line 26 of the translation unit"),
                "{what}: {e}"
            );
        });
    }

    #[test]
    fn a_missing_compiler_is_a_typed_error() {
        let e = host_compiler(None)
            .and_then(|_| build_library("int x;", Path::new("/nonexistent/c++"), &[]).map(|_| ()));
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("CUDA emulator:"), "{e}");
    }
}
