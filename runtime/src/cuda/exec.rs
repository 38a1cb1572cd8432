//! Running a lowered program ([`Program`]) on a CUDA GPU: the thin executor of a
//! [`LaunchPlan`].
//!
//! [`CudaProgram::compile`] resolves the device ([`cuda_device`]: the driver loads, `cuInit`
//! succeeds, device `n` exists, its compute capability gives the [`Arch`]), plans the program
//! ([`LaunchPlan::build`]), compiles the plan's CUDA C with NVRTC through the kernel cache for
//! that architecture, loads the module (cubin, or PTX the driver JIT-compiles), looks up every
//! entry point, uploads constants and the parameters given once, and allocates one device arena
//! (temporaries + inputs) and (when a GEMM step uses it) a cuBLAS handle.
//! [`CudaProgram::run`] / [`CudaProgram::run_into`] copy the inputs through a pinned staging
//! buffer (allocated by the first such run: pinning is slow, and device-only callers never need
//! it), enqueue every copy, launch and cuBLAS call asynchronously on the stream,
//! synchronise once and copy the outputs out. [`CudaProgram::run_device`] takes and returns
//! [`DeviceTensor`]s: inputs are read where they are, and outputs are written by the kernels
//! straight into the caller's tensors where the plan allows (`direct_outputs`), else copied
//! device to device, so graphs chain without host copies. Every run ends with one stream
//! synchronisation.
//!
//! Streams: the program owns a non-blocking stream unless [`CudaOptions::stream`] gives one;
//! the `*_on_stream` variants run on a caller's stream (of the same context, [`cuda_context`]).
//! Concurrency: a `CudaProgram` is `Send + Sync`; its arena, staging buffer and cuBLAS handle
//! sit behind a mutex, so a second run of the *same* program from another thread **waits** for
//! the first (different programs have their own arenas and run concurrently on their streams).

use super::cublas_lib::{self, compute_type, data_type, CublasLib, Handle};
use super::exec_error::{driver_err, invalid, CudaExecError, ExecResult};
use super::launch::{BufferLoc, GemmBackend, KernelArg, LaunchPlan, LaunchStep, Trans};
use super::{driver, nvrtc, Arch, CompileOptions, KernelImage};
use crate::cache::KernelCache;
use crate::cpu::pages::FreshOutput;
use cudarc::driver::{result, sys, CudaContext, CudaFunction, CudaModule, CudaStream, DevicePtr};
use smelt_codegen::cuda::STATUS_WORD;
use smelt_ir::{with_data, DType, HostTensor, Shape, TensorData};
use smelt_passes::kernel::{Access, InstOp, Program, StageEffect, Step};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// Which code generator produces the GPU kernels (NVRTC's CUDA C, or LLVM's NVPTX PTX; both
/// have the same entries and launch contract).
pub use smelt_codegen::cuda::CudaCodegen;

/// How a [`CudaProgram`] is compiled and run.
#[derive(Clone, Debug, Default)]
pub struct CudaOptions {
    pub codegen: CudaCodegen,
    /// The device ordinal.
    pub device: usize,
    /// The stream runs use by default; `None`: a new non-blocking stream owned by the program.
    pub stream: Option<Arc<CudaStream>>,
    /// NVRTC options (extra flags, include folders, cubin or PTX).
    pub compile: CompileOptions,
    /// Run every GEMM through the generated fallback kernel, never cuBLAS.
    pub no_cublas: bool,
}

/// A CUDA device as the driver describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// From the compute capability (`sm_90` for 9.0).
    pub arch: Arch,
    pub total_mem: usize,
    /// `cuDriverGetVersion` (13000 for CUDA 13.0).
    pub driver_version: i32,
    /// Devices the driver reports.
    pub count: usize,
}

/// The name the fake CUDA driver of `scripts/build-fake-cuda.sh` gives its one device (the
/// launch path on the CPU, for tests: see `docs/cuda.md`). Nothing it measures is a GPU's.
pub const FAKE_DEVICE_NAME: &str = "smelt fake CUDA device (CPU emulator, not a GPU)";

impl CudaDeviceInfo {
    /// Whether this is the fake driver's device ([`FAKE_DEVICE_NAME`]), not a GPU.
    pub fn is_fake(&self) -> bool {
        self.name == FAKE_DEVICE_NAME
    }
}

/// Checks that device `ordinal` is usable: the driver library loads, `cuInit` succeeds and the
/// device exists. Never panics: each missing piece is a typed error naming it.
pub fn cuda_device(ordinal: usize) -> ExecResult<CudaDeviceInfo> {
    let drv = driver()?;
    result::init().map_err(|e| CudaExecError::Init(format!("{e:?}")))?;
    let count = result::device::get_count().map_err(driver_err("cuDeviceGetCount"))?;
    let count = usize::try_from(count).unwrap_or(0);
    if ordinal >= count {
        return Err(CudaExecError::NoDevice { ordinal, count });
    }
    let dev = result::device::get(ordinal as i32).map_err(driver_err("cuDeviceGet"))?;
    let attr = |a| {
        // SAFETY: `dev` is a valid device handle from cuDeviceGet after a successful cuInit.
        unsafe { result::device::get_attribute(dev, a) }.map_err(driver_err("cuDeviceGetAttribute"))
    };
    use sys::CUdevice_attribute::*;
    let major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let name = result::device::get_name(dev).map_err(driver_err("cuDeviceGetName"))?;
    // SAFETY: as above.
    let total_mem =
        unsafe { result::device::total_mem(dev) }.map_err(driver_err("cuDeviceTotalMem"))?;
    Ok(CudaDeviceInfo {
        ordinal,
        name,
        arch: Arch::from_compute_capability(major.max(0) as u32, minor.max(0) as u32),
        total_mem,
        driver_version: drv.version,
        count,
    })
}

/// The process-wide context (the device's primary context) of device `ordinal`. Streams for
/// the `*_on_stream` runs come from it: `cuda_context(0)?.new_stream()`.
pub fn cuda_context(ordinal: usize) -> ExecResult<Arc<CudaContext>> {
    static CONTEXTS: Mutex<Vec<(usize, Arc<CudaContext>)>> = Mutex::new(Vec::new());
    cuda_device(ordinal)?;
    let mut all = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = all.iter().find(|(o, _)| *o == ordinal) {
        return Ok(c.clone());
    }
    let ctx = CudaContext::new(ordinal).map_err(driver_err("cuDevicePrimaryCtxRetain"))?;
    all.push((ordinal, ctx.clone()));
    Ok(ctx)
}

/// Device-to-device copy bandwidth of GPU `ordinal`, in GB/s (10^9 bytes read + written per
/// second): the best of `reps` timed `cuMemcpyDtoD`s of `bytes` between two device buffers,
/// each timed from launch to a context synchronisation, after one untimed copy. The reference
/// for "% of copy bandwidth" of device-resident runs (`smelt bench --device cuda`).
pub fn device_copy_bandwidth(ordinal: usize, bytes: usize, reps: usize) -> ExecResult<f64> {
    let ctx = cuda_context(ordinal)?;
    let src = DeviceAlloc::new(&ctx, bytes)?;
    let dst = DeviceAlloc::new(&ctx, bytes)?;
    // SAFETY: both allocations hold `bytes` bytes and the context is current (DeviceAlloc::new
    // bound it); the memset makes the source defined.
    unsafe { result::memset_d8_sync(src.ptr, 1, bytes) }.map_err(driver_err("cuMemsetD8"))?;
    settle(&ctx)?;
    let mut best = f64::INFINITY;
    for i in 0..=reps.max(1) {
        let start = std::time::Instant::now();
        // SAFETY: `dst` and `src` are distinct live allocations of `bytes` bytes each in the
        // current context; the copy completes before `settle` returns.
        unsafe { result::memcpy_dtod_sync(dst.ptr, src.ptr, bytes) }
            .map_err(driver_err("cuMemcpyDtoD"))?;
        settle(&ctx)?;
        if i > 0 {
            best = best.min(start.elapsed().as_secs_f64());
        }
    }
    Ok(2.0 * bytes as f64 / best.max(1e-12) / 1e9)
}

fn kernel_cache() -> &'static KernelCache {
    static CACHE: OnceLock<KernelCache> = OnceLock::new();
    CACHE.get_or_init(KernelCache::from_env)
}

/// Device memory from `cuMemAlloc`, freed on drop, or (for device tensors) taken from and
/// given back to the [`POOL`] of freed blocks.
struct DeviceAlloc {
    ptr: sys::CUdeviceptr,
    /// The bytes asked for.
    bytes: usize,
    /// Whether the block came from (and goes back to) the pool: device tensors' blocks.
    pooled: bool,
    ctx: Arc<CudaContext>,
}

/// Freed device-tensor blocks kept for reuse, per context and byte size, as a caching
/// allocator does: `cuMemAlloc` and `cuMemFree` cost tens of microseconds or more each, and
/// `cuMemFree` waits for the whole device, so a `run_device` that allocated its outputs afresh
/// every call paid more for them than for its kernels. Reuse is safe because every run
/// synchronises its stream before it returns: no work is pending on a tensor when it drops.
/// At most [`pool_limit`] bytes are kept; beyond it, blocks are freed.
static POOL: Mutex<Option<Pool>> = Mutex::new(None);

#[derive(Default)]
struct Pool {
    /// (context, block size) → free blocks.
    free: HashMap<(usize, usize), Vec<sys::CUdeviceptr>>,
    /// Keeps each context with blocks in the pool alive (its blocks belong to it).
    contexts: HashMap<usize, Arc<CudaContext>>,
    held: usize,
}

/// The size of the block for `bytes` (cuMemAlloc rejects 0). The pool matches exact sizes:
/// repeated runs of a program allocate outputs of the same sizes, which is the reuse it is
/// for; exact sizes waste nothing and keep every block's bounds the tensor's own (so the fake
/// driver's range checks stay exact).
fn block_bytes(bytes: usize) -> usize {
    bytes.max(1)
}

/// The most bytes the pool keeps: `SMELT_CUDA_POOL_BYTES` (bytes; 0 turns the pool off),
/// default 4 GiB.
fn pool_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var("SMELT_CUDA_POOL_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(4 << 30)
    })
}

fn pool() -> std::sync::MutexGuard<'static, Option<Pool>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frees every device block the pool keeps (as `torch.cuda.empty_cache()` does); returns the
/// bytes given back to the driver. Tensors in use are not affected.
pub fn empty_device_cache() -> usize {
    let Some(p) = pool().take() else {
        return 0;
    };
    for ((ctx, _), blocks) in p.free {
        let Some(c) = p.contexts.get(&ctx) else {
            continue;
        };
        if c.bind_to_thread().is_ok() {
            for b in blocks {
                // SAFETY: a block of this context from cuMemAlloc, in the pool, so owned by no
                // tensor; taken out of the pool above, so freed once.
                let _ = unsafe { result::free_sync(b) };
            }
        }
    }
    p.held
}

/// Bytes of device memory the pool keeps for reuse.
pub fn cached_device_bytes() -> usize {
    pool().as_ref().map_or(0, |p| p.held)
}

impl DeviceAlloc {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> ExecResult<DeviceAlloc> {
        ctx.bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        // SAFETY: the context is current; the memory is only used as raw bytes.
        let ptr =
            unsafe { result::malloc_sync(block_bytes(bytes)) }.map_err(driver_err("cuMemAlloc"))?;
        Ok(DeviceAlloc {
            ptr,
            bytes,
            pooled: false,
            ctx: ctx.clone(),
        })
    }

    /// A block for a device tensor: a freed one of the same size from the pool, else a
    /// new one (after emptying the pool, if the device is out of memory).
    fn pooled(ctx: &Arc<CudaContext>, bytes: usize) -> ExecResult<DeviceAlloc> {
        ctx.bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        let size = block_bytes(bytes);
        let key = (ctx.cu_ctx() as usize, size);
        let reused = pool().as_mut().and_then(|p| {
            let b = p.free.get_mut(&key)?.pop()?;
            p.held -= size;
            Some(b)
        });
        let ptr = match reused {
            Some(b) => b,
            // SAFETY: the context is current; the memory is only used as raw bytes.
            None => match unsafe { result::malloc_sync(size) } {
                Ok(b) => b,
                Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY => {
                    empty_device_cache();
                    ctx.bind_to_thread()
                        .map_err(driver_err("cuCtxSetCurrent"))?;
                    // SAFETY: as above.
                    unsafe { result::malloc_sync(size) }.map_err(driver_err("cuMemAlloc"))?
                }
                Err(e) => return Err(driver_err("cuMemAlloc")(e)),
            },
        };
        Ok(DeviceAlloc {
            ptr,
            bytes,
            pooled: true,
            ctx: ctx.clone(),
        })
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        if self.pooled {
            let size = block_bytes(self.bytes);
            let mut guard = pool();
            let p = guard.get_or_insert_with(Pool::default);
            if p.held + size <= pool_limit() {
                let c = self.ctx.cu_ctx() as usize;
                p.free.entry((c, size)).or_default().push(self.ptr);
                p.contexts.entry(c).or_insert_with(|| self.ctx.clone());
                p.held += size;
                return;
            }
        }
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc in this context and is freed only here (a
            // pooled block that the pool did not take is not in it); every run that used it
            // synchronised its stream before returning.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory from `cuMemHostAlloc`, freed on drop.
struct PinnedAlloc {
    ptr: *mut u8,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the pinned buffer is plain memory owned by this value; it is only touched by the
// thread holding the program's run mutex (and by copies that thread enqueues and waits for).
unsafe impl Send for PinnedAlloc {}

impl PinnedAlloc {
    fn new(ctx: &Arc<CudaContext>, bytes: usize) -> ExecResult<PinnedAlloc> {
        ctx.bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        // SAFETY: the context is current; the memory is used as raw bytes only.
        let ptr = unsafe { result::malloc_host(bytes.max(1), 0) }
            .map_err(driver_err("cuMemHostAlloc"))?;
        Ok(PinnedAlloc {
            ptr: ptr.cast(),
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// The bytes `offset..offset + len`.
    fn slice(&mut self, offset: usize, len: usize) -> &mut [u8] {
        assert!(offset + len <= self.bytes.max(1), "staging range");
        // SAFETY: in bounds (checked above) of an allocation of `bytes` bytes owned by `self`,
        // borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) }
    }
}

impl Drop for PinnedAlloc {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc and is freed only here, after every copy
            // using it completed (runs synchronise before returning).
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

/// The bytes `offset..offset + len` of the staging buffer (allocated before any run that
/// copies through it).
fn staged(staging: &mut Option<PinnedAlloc>, offset: usize, len: usize) -> ExecResult<&mut [u8]> {
    match staging {
        Some(s) => Ok(s.slice(offset, len)),
        None => Err(invalid("internal: a host copy without a staging buffer")),
    }
}

/// A cuBLAS handle, destroyed on drop.
struct CublasHandle {
    lib: &'static CublasLib,
    handle: Handle,
    ctx: Arc<CudaContext>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one at a time; it lives in the run
// state, behind the program's mutex.
unsafe impl Send for CublasHandle {}

impl CublasHandle {
    fn new(lib: &'static CublasLib, ctx: &Arc<CudaContext>) -> ExecResult<CublasHandle> {
        ctx.bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current (cuBLAS binds to it).
        let status = unsafe { (lib.create)(&mut handle) };
        cublas_check("cublasCreate", status)?;
        let h = CublasHandle {
            lib,
            handle,
            ctx: ctx.clone(),
        };
        // SAFETY: `handle` was just created.
        let status = unsafe { (lib.set_math_mode)(h.handle, cublas_lib::MATH_MODE) };
        cublas_check("cublasSetMathMode", status)?;
        Ok(h)
    }
}

impl Drop for CublasHandle {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: created by cublasCreate, destroyed only here.
            let _ = unsafe { (self.lib.destroy)(self.handle) };
        }
    }
}

fn cublas_check(call: &'static str, status: i32) -> ExecResult<()> {
    if status == 0 {
        Ok(())
    } else {
        Err(CudaExecError::Cublas {
            call,
            status: cublas_lib::status_name(status),
        })
    }
}

/// A dense tensor in device memory (of one context), owned: freed on drop.
pub struct DeviceTensor {
    alloc: DeviceAlloc,
    dtype: DType,
    shape: Shape,
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceTensor({}{} on cuda:{})",
            self.dtype,
            self.shape,
            self.alloc.ctx.ordinal()
        )
    }
}

pub(super) fn host_bytes(d: &TensorData) -> &[u8] {
    with_data!(d, v => {
        // SAFETY: every element type (bool, i32, i64, f16, bf16, f32, f64) is plain data
        // without padding; the slice covers exactly the vector's elements.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v.as_slice())) }
    })
}

/// Overwrites `t`'s elements with `bytes` (exactly its byte size).
fn fill_host(t: &mut HostTensor, bytes: &[u8]) -> ExecResult<()> {
    let n = t.numel() * t.dtype().size_bytes();
    // SAFETY: `t` holds exactly `n` bytes of its elements.
    unsafe { fill_bytes(t.data_mut_ptr(), n, bytes) };
    Ok(())
}

/// Writes `bytes` (exactly `n` of them) to the `n` bytes at `dst`.
///
/// # Safety
/// `dst` is valid for writes of `n` bytes, the elements of a host tensor (or of the room for
/// one), and does not overlap `bytes`.
unsafe fn fill_bytes(dst: *mut u8, n: usize, bytes: &[u8]) {
    assert_eq!(n, bytes.len(), "fill size");
    // SAFETY: the caller's contract, and `bytes` holds `n` bytes (checked above); the
    // elements are plain data, and a bool is written only from 0/1 bytes produced by the
    // kernels or copied from a host bool tensor.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, n) };
}

/// Waits for every operation of the context. The "synchronous" `cuMemcpyHtoD` from pageable
/// memory and `cuMemsetD8` may still be in flight on the legacy stream when they return, and
/// the runs' non-blocking streams do not wait for it.
fn settle(ctx: &CudaContext) -> ExecResult<()> {
    ctx.synchronize().map_err(driver_err("cuCtxSynchronize"))
}

impl DeviceTensor {
    /// Uninitialised device memory for `dtype` × `shape`.
    fn uninit(ctx: &Arc<CudaContext>, dtype: DType, shape: Shape) -> ExecResult<DeviceTensor> {
        let bytes = shape
            .numel()
            .checked_mul(dtype.size_bytes())
            .ok_or_else(|| CudaExecError::Overflow {
                what: format!("a {dtype}{shape} device tensor"),
            })?;
        Ok(DeviceTensor {
            alloc: DeviceAlloc::pooled(ctx, bytes)?,
            dtype,
            shape,
        })
    }

    /// Zeros on `ctx`'s device.
    pub fn zeros(ctx: &Arc<CudaContext>, dtype: DType, shape: Shape) -> ExecResult<DeviceTensor> {
        let t = DeviceTensor::uninit(ctx, dtype, shape)?;
        // SAFETY: the allocation holds `bytes` bytes; the context is current (uninit bound it).
        unsafe { result::memset_d8_sync(t.alloc.ptr, 0, t.alloc.bytes) }
            .map_err(driver_err("cuMemsetD8"))?;
        settle(ctx)?;
        Ok(t)
    }

    /// A device copy of `t` on `ctx`'s device (synchronous).
    pub fn from_host(ctx: &Arc<CudaContext>, t: &HostTensor) -> ExecResult<DeviceTensor> {
        let d = DeviceTensor::uninit(ctx, t.dtype(), t.shape().clone())?;
        let bytes = host_bytes(t.data());
        if !bytes.is_empty() {
            // SAFETY: the allocation holds exactly `bytes.len()` bytes; synchronous copy.
            unsafe { result::memcpy_htod_sync(d.alloc.ptr, bytes) }
                .map_err(driver_err("cuMemcpyHtoD"))?;
            settle(ctx)?;
        }
        Ok(d)
    }

    /// A host copy (synchronous; runs that wrote this tensor have already synchronised).
    pub fn to_host(&self) -> ExecResult<HostTensor> {
        let mut t = HostTensor::zeros(self.dtype, self.shape.clone());
        let mut bytes = vec![0u8; self.alloc.bytes];
        if !bytes.is_empty() {
            self.alloc
                .ctx
                .bind_to_thread()
                .map_err(driver_err("cuCtxSetCurrent"))?;
            // SAFETY: the allocation holds `bytes.len()` bytes; synchronous copy.
            unsafe { result::memcpy_dtoh_sync(&mut bytes, self.alloc.ptr) }
                .map_err(driver_err("cuMemcpyDtoH"))?;
        }
        fill_host(&mut t, &bytes)?;
        Ok(t)
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// The device address of element 0 (`CUdeviceptr`).
    pub fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }

    /// The device it lives on.
    pub fn ordinal(&self) -> usize {
        self.alloc.ctx.ordinal()
    }

    /// Gives the tensor another shape with the same element count.
    pub fn reshape(&mut self, shape: Shape) -> ExecResult<()> {
        if shape.numel() != self.shape.numel() {
            return Err(CudaExecError::Binding {
                name: "reshape".into(),
                expected: format!("{} elements", self.shape.numel()),
                got: format!("shape {shape}"),
            });
        }
        self.shape = shape;
        Ok(())
    }
}

/// Per-run state, reused across runs: behind the program's mutex.
struct RunState {
    arena: DeviceAlloc,
    /// The pinned buffer host inputs and outputs go through, allocated by the first run that
    /// copies to or from the host (pinning hundreds of megabytes takes a large part of a
    /// second, which programs run only on device tensors never pay).
    staging: Option<PinnedAlloc>,
    cublas: Option<CublasHandle>,
    ptrs: Vec<u64>,
    /// Where each status word is copied at the end of a run (4 bytes each); none when no
    /// module has one.
    status: Option<PinnedAlloc>,
}

/// The device address of each loaded module's status word (`STATUS_WORD`, set by kernels
/// when a computed index falls outside its buffer), for the modules that define one.
fn status_words(modules: &[Arc<CudaModule>], stream: &Arc<CudaStream>) -> ExecResult<Vec<u64>> {
    let mut words = Vec::new();
    for m in modules {
        match m.get_global(STATUS_WORD, stream) {
            Ok(view) if view.len() >= 4 => words.push(view.device_ptr(stream).0),
            Ok(view) => {
                return Err(invalid(format!(
                    "the status word {STATUS_WORD} holds {} bytes, not 4",
                    view.len()
                )))
            }
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_FOUND => {}
            Err(e) => return Err(driver_err("cuModuleGetGlobal")(e)),
        }
    }
    Ok(words)
}

/// Per output of `plan`: whether its buffer can be redirected to the caller's device tensor:
/// a temporary of exactly the output's size (not an input, a constant or a view of a larger
/// buffer), written by some step (an unwritten output reads as the zeroed arena's zeros), and
/// no other output's buffer. Every step then addresses the caller's memory for that buffer,
/// which saves a device-to-device copy of the output (as many bytes again as the kernel
/// wrote).
pub(super) fn direct_outputs(program: &Program, plan: &LaunchPlan) -> Vec<bool> {
    let written: std::collections::HashSet<usize> = program
        .steps
        .iter()
        .flat_map(|s| s.writes().iter().map(|b| b.0 as usize))
        .collect();
    plan.outputs
        .iter()
        .map(|o| {
            matches!(o.loc, BufferLoc::Arena { .. })
                && plan.bytes[o.buffer] == o.numel * o.dtype.size_bytes()
                && written.contains(&o.buffer)
                && plan.outputs.iter().filter(|p| p.buffer == o.buffer).count() == 1
        })
        .collect()
}

/// The kernel steps of `program` that read or write through a computed index (the ones whose
/// range checks can set a status word), for the error message.
pub(super) fn computed_access_kernels(program: &Program) -> String {
    let names: Vec<&str> = program
        .kernels()
        .filter(|k| {
            k.stages.iter().any(|st| {
                st.body.iter().any(|i| {
                    matches!(
                        i.op,
                        InstOp::Load {
                            access: Access::Computed(_),
                            ..
                        }
                    )
                }) || matches!(&st.effect, StageEffect::Store(stores)
                    if stores.iter().any(|s| matches!(s.access, Access::Computed(_))))
            })
        })
        .map(|k| k.name.as_str())
        .collect();
    if names.is_empty() {
        "(none found)".to_string()
    } else {
        names.join(", ")
    }
}

/// A program compiled for one GPU, ready to run many times.
pub struct CudaProgram {
    /// First, so that it is dropped first: its cuBLAS handle is destroyed while the stream it
    /// last ran on (the program's own, or none: see `run_impl`) still exists.
    state: Mutex<RunState>,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    plan: LaunchPlan,
    functions: Vec<CudaFunction>,
    _modules: Vec<Arc<CudaModule>>,
    consts: DeviceAlloc,
    /// The status words of the modules (see `status_words`), read and cleared by every run.
    status_words: Vec<u64>,
    /// The kernels that can set them, named by an `IndexOutOfRange` error.
    checked_kernels: String,
    /// Per output: whether a device-tensor run may let the kernels write it straight into the
    /// caller's tensor ([`direct_outputs`]) instead of the arena and a copy.
    direct_outputs: Vec<bool>,
    output_shapes: Vec<Shape>,
    info: CudaDeviceInfo,
    compile_log: String,
    gemm_note: Option<String>,
}

impl std::fmt::Debug for CudaProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaProgram")
            .field("device", &self.info.name)
            .field("arch", &self.info.arch.to_string())
            .field("steps", &self.plan.steps.len())
            .field("arena_bytes", &self.plan.arena_bytes)
            .finish_non_exhaustive()
    }
}

enum Inputs<'a> {
    Host(&'a HashMap<String, HostTensor>),
    Device(&'a HashMap<String, DeviceTensor>),
}

enum Outputs<'a> {
    Host(&'a mut [HostTensor]),
    /// `run`'s own host outputs, uninitialised until the copy back from the device fills them.
    Fresh(&'a mut [FreshOutput]),
    Device(&'a mut [DeviceTensor]),
}

pub(super) fn dtype_numel_check(
    name: &str,
    dtype: DType,
    numel: usize,
    got: (DType, &Shape),
) -> ExecResult<()> {
    if got.0 != dtype || got.1.numel() != numel {
        return Err(CudaExecError::Binding {
            name: name.to_string(),
            expected: format!("{dtype} with {numel} elements"),
            got: format!("{}{}", got.0, got.1),
        });
    }
    Ok(())
}

/// Compiles `source` with NVRTC (through the kernel cache) for `arch`, loads the module and
/// looks up `entries`, in order.
fn load_kernels(
    ctx: &Arc<CudaContext>,
    source: &str,
    entries: &[String],
    arch: Arch,
    compile: &CompileOptions,
) -> ExecResult<(Arc<CudaModule>, Vec<CudaFunction>, String)> {
    let kernel =
        nvrtc()?.compile_cached(kernel_cache(), source, "smelt_program.cu", arch, compile)?;
    let ptx = matches!(kernel.image, KernelImage::Ptx(_));
    let image = match kernel.image {
        KernelImage::Cubin(bytes) => cudarc::nvrtc::Ptx::from_binary(bytes),
        KernelImage::Ptx(text) => {
            if text.contains('\0') {
                return Err(invalid("the PTX holds a NUL byte"));
            }
            cudarc::nvrtc::Ptx::from_src(text)
        }
    };
    let module = ctx.load_module(image).map_err(|e| {
        let mut err = driver_err("cuModuleLoadData")(e);
        if ptx && e.0 == sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
            if let CudaExecError::Driver { message, .. } = &mut err {
                message.push_str(&format!(
                    " (NVRTC {} wrote PTX for {arch}, which it cannot compile to a cubin; \
                     this driver's PTX JIT is older than that NVRTC: use an NVRTC no newer \
                     than the driver)",
                    nvrtc().map_or("?".to_string(), |n| n.version_string()),
                ));
            }
        }
        err
    })?;
    let functions = load_functions(&module, entries)?;
    Ok((module, functions, kernel.log))
}

fn load_functions(module: &Arc<CudaModule>, entries: &[String]) -> ExecResult<Vec<CudaFunction>> {
    let mut functions = Vec::with_capacity(entries.len());
    for e in entries {
        if e.contains('\0') {
            return Err(invalid(format!("entry name {e:?}")));
        }
        functions.push(
            module
                .load_function(e)
                .map_err(driver_err("cuModuleGetFunction"))?,
        );
    }
    Ok(functions)
}

/// The options the LLVM NVPTX path ([`CudaCodegen::Llvm`]) generates PTX with: libdevice from
/// beside the ptxas smelt finds (none when there is none: kernels that need it then fail
/// with an error naming it), the rest the defaults.
pub fn nvptx_options() -> smelt_codegen::llvm::nvptx::NvptxOptions {
    use smelt_codegen::llvm::nvptx::{libdevice_beside_ptxas, Libdevice, NvptxOptions};
    let libdevice = super::ptxas_path()
        .ok()
        .and_then(|p| libdevice_beside_ptxas(&p))
        .and_then(|p| Libdevice::read(&p).ok());
    NvptxOptions {
        libdevice,
        ..NvptxOptions::default()
    }
}

/// The LLVM NVPTX path: the kernel steps from `smelt_codegen::llvm::nvptx::ptx_program` (PTX the
/// driver JIT-compiles; libdevice found beside ptxas when there is one), the fallback GEMMs from
/// NVRTC in a second module. The plan's kernel launches take the PTX entries' launches.
fn load_llvm_kernels(
    ctx: &Arc<CudaContext>,
    program: &Program,
    plan: &mut LaunchPlan,
    arch: Arch,
    compile: &CompileOptions,
) -> ExecResult<(Vec<Arc<CudaModule>>, Vec<CudaFunction>, String)> {
    let options = nvptx_options();
    let ptx = smelt_codegen::llvm::nvptx::ptx_program(program, &arch.to_string(), &options)
        .map_err(|e| CudaExecError::LlvmPtx(e.to_string()))?;
    let mut generated = ptx.entries.iter();
    for step in plan.steps.iter_mut() {
        let LaunchStep::Kernel(k) = step else {
            continue;
        };
        if k.gemm_fallback {
            continue;
        }
        let e = generated
            .next()
            .ok_or_else(|| invalid("the PTX module has too few entries"))?;
        if e.name != plan.entries[k.entry] {
            return Err(invalid(format!(
                "PTX entry {} where the plan expects {}",
                e.name, plan.entries[k.entry]
            )));
        }
        k.grid = e.launch.grid.max(1);
        k.block = e.launch.block;
        k.shared_bytes = e.launch.shared_bytes;
    }
    if generated.next().is_some() {
        return Err(invalid("the PTX module has more entries than kernel steps"));
    }
    if ptx.ptx.contains('\0') {
        return Err(invalid("the PTX holds a NUL byte"));
    }
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx.ptx))
        .map_err(driver_err("cuModuleLoadData"))?;
    // Which entries are fallback GEMMs (compiled by NVRTC into a second module).
    let mut fallback = vec![false; plan.entries.len()];
    for step in &plan.steps {
        if let LaunchStep::Kernel(k) = step {
            fallback[k.entry] = k.gemm_fallback;
        }
    }
    let mut modules = vec![module.clone()];
    let mut log = String::new();
    let mut gemm_module = None;
    if fallback.iter().any(|&f| f) {
        let (m, _, l) = load_kernels(ctx, &plan.gemm_source, &[], arch, compile)?;
        modules.push(m.clone());
        gemm_module = Some(m);
        log = l;
    }
    let mut functions = Vec::with_capacity(plan.entries.len());
    for (e, &is_gemm) in plan.entries.iter().zip(&fallback) {
        let m = match (&gemm_module, is_gemm) {
            (Some(g), true) => g,
            _ => &module,
        };
        functions.extend(load_functions(m, std::slice::from_ref(e))?);
    }
    Ok((modules, functions, log))
}

impl CudaProgram {
    /// Compiles `program` for the device of `options`, binding the parameters in `params` (by
    /// name; parameters missing here must come with every run's inputs).
    pub fn compile(
        program: &Program,
        params: &HashMap<String, HostTensor>,
        options: &CudaOptions,
    ) -> ExecResult<CudaProgram> {
        let info = cuda_device(options.device)?;
        let ctx = cuda_context(options.device)?;
        let has_gemm = program.steps.iter().any(|s| matches!(s, Step::Gemm(_)));
        let (backend, cublas, gemm_note) = if !has_gemm {
            (GemmBackend::Fallback, None, None)
        } else if options.no_cublas {
            let note = "cuBLAS turned off (CudaOptions::no_cublas)".to_string();
            (GemmBackend::Fallback, None, Some(note))
        } else {
            match cublas_lib::cublas_lib() {
                Ok(lib) => (GemmBackend::Cublas, Some(lib), None),
                Err(e) => {
                    let note = format!("cuBLAS unavailable, GEMMs use the fallback kernel: {e}");
                    log::warn!("{note}");
                    (GemmBackend::Fallback, None, Some(note))
                }
            }
        };
        let mut plan = LaunchPlan::build(program, &|n| params.contains_key(n), backend)?;
        for (step, why) in &plan.fallbacks {
            log::info!("cuda: GEMM step {step} uses the fallback kernel: {why}");
        }
        // Bound parameters and constants must match their buffers before anything is uploaded.
        let const_data = plan.const_data(program, params)?;
        // A program without kernels (only cuBLAS GEMMs, or outputs that are inputs) needs no
        // module.
        let (modules, functions, compile_log) = if plan.entries.is_empty() {
            (Vec::new(), Vec::new(), String::new())
        } else if options.codegen == CudaCodegen::Llvm {
            load_llvm_kernels(&ctx, program, &mut plan, info.arch, &options.compile)?
        } else {
            let (module, functions, log) = load_kernels(
                &ctx,
                &plan.source,
                &plan.entries,
                info.arch,
                &options.compile,
            )?;
            (vec![module], functions, log)
        };
        let stream = match &options.stream {
            Some(s) => {
                if **s.context() != *ctx {
                    return Err(invalid("the stream belongs to another CUDA context"));
                }
                s.clone()
            }
            None => ctx.new_stream().map_err(driver_err("cuStreamCreate"))?,
        };
        let consts = DeviceAlloc::new(&ctx, plan.const_bytes)?;
        for (t, offset) in const_data {
            let bytes = host_bytes(t.data());
            if !bytes.is_empty() {
                // SAFETY: the plan placed this buffer at `offset` with room for its bytes inside
                // the constant region of `const_bytes` bytes; synchronous copy.
                unsafe { result::memcpy_htod_sync(consts.ptr + offset as u64, bytes) }
                    .map_err(driver_err("cuMemcpyHtoD"))?;
            }
        }
        let arena = DeviceAlloc::new(&ctx, plan.arena_bytes)?;
        // Zeroed once: an output no step writes reads as zeros (as on the CPU).
        // SAFETY: the allocation holds at least `arena_bytes` bytes; the context is current.
        unsafe { result::memset_d8_sync(arena.ptr, 0, plan.arena_bytes.max(1)) }
            .map_err(driver_err("cuMemsetD8"))?;
        settle(&ctx)?;
        let status_words = status_words(&modules, &stream)?;
        let status = match status_words.len() {
            0 => None,
            n => Some(PinnedAlloc::new(&ctx, 4 * n)?),
        };
        let uses_cublas = plan
            .steps
            .iter()
            .any(|s| matches!(s, LaunchStep::Cublas(_)));
        let cublas = match (uses_cublas, cublas) {
            (true, Some(lib)) => Some(CublasHandle::new(lib, &ctx)?),
            _ => None,
        };
        let output_shapes = plan
            .outputs
            .iter()
            .map(|o| Shape::new(&[o.numel]))
            .collect();
        let ptrs = vec![0u64; plan.buffers.len()];
        Ok(CudaProgram {
            stream,
            functions,
            _modules: modules,
            consts,
            state: Mutex::new(RunState {
                arena,
                staging: None,
                cublas,
                ptrs,
                status,
            }),
            status_words,
            checked_kernels: computed_access_kernels(program),
            direct_outputs: direct_outputs(program, &plan),
            output_shapes,
            info,
            compile_log,
            gemm_note,
            plan,
            ctx,
        })
    }

    /// Gives output `name` the shape `shape` (its element count must match).
    pub fn set_output_shape(&mut self, name: &str, shape: Shape) -> ExecResult<()> {
        let i = self.plan.output_with_shape(name, &shape)?;
        self.output_shapes[i] = shape;
        Ok(())
    }

    /// The outputs' names, dtypes and shapes, in order.
    pub fn outputs(&self) -> impl Iterator<Item = (&str, DType, &Shape)> + '_ {
        self.plan
            .outputs
            .iter()
            .zip(&self.output_shapes)
            .map(|(o, s)| (o.name.as_str(), o.dtype, s))
    }

    /// The launch plan this program executes.
    pub fn plan(&self) -> &LaunchPlan {
        &self.plan
    }

    pub fn device_info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// The context the program lives in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The program's default stream.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// NVRTC's log (empty on a cache hit).
    pub fn compile_log(&self) -> &str {
        &self.compile_log
    }

    /// Why GEMMs do not use cuBLAS, when they do not.
    pub fn gemm_note(&self) -> Option<&str> {
        self.gemm_note.as_deref()
    }

    /// Copies `t` to this program's device.
    pub fn upload(&self, t: &HostTensor) -> ExecResult<DeviceTensor> {
        DeviceTensor::from_host(&self.ctx, t)
    }

    /// Runs on `inputs` (by name; also parameters not bound at compile time) and returns the
    /// outputs in program order.
    pub fn run(
        &self,
        inputs: &HashMap<String, HostTensor>,
    ) -> ExecResult<Vec<(String, HostTensor)>> {
        self.run_on_stream(&self.stream, inputs)
    }

    /// [`CudaProgram::run`] on `stream`.
    pub fn run_on_stream(
        &self,
        stream: &CudaStream,
        inputs: &HashMap<String, HostTensor>,
    ) -> ExecResult<Vec<(String, HostTensor)>> {
        // Every host output is copied back from the device whole: no zeros needed first.
        let mut outs: Vec<FreshOutput> = self
            .plan
            .outputs
            .iter()
            .zip(&self.output_shapes)
            .map(|(o, s)| FreshOutput::new(o.dtype, s.clone(), true))
            .collect();
        self.run_impl(stream, Inputs::Host(inputs), Outputs::Fresh(&mut outs))?;
        // SAFETY: the run succeeded, and its last step copied every byte of each host output
        // from the device (`fill_bytes`).
        let outs = outs.into_iter().map(|t| unsafe { t.finish() }).collect();
        Ok(self.named(outs))
    }

    /// `outs` (one per output, program order) paired with the outputs' names.
    fn named<T>(&self, outs: Vec<T>) -> Vec<(String, T)> {
        self.plan
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .zip(outs)
            .collect()
    }

    /// Runs, writing the outputs into `outputs` (program order; dtypes and shapes must match).
    pub fn run_into(
        &self,
        inputs: &HashMap<String, HostTensor>,
        outputs: &mut [HostTensor],
    ) -> ExecResult<()> {
        self.run_into_on_stream(&self.stream, inputs, outputs)
    }

    /// [`CudaProgram::run_into`] on `stream`.
    pub fn run_into_on_stream(
        &self,
        stream: &CudaStream,
        inputs: &HashMap<String, HostTensor>,
        outputs: &mut [HostTensor],
    ) -> ExecResult<()> {
        self.run_impl(stream, Inputs::Host(inputs), Outputs::Host(outputs))
    }

    /// Runs on device tensors (by name) and returns new device tensors: no host copies.
    pub fn run_device(
        &self,
        inputs: &HashMap<String, DeviceTensor>,
    ) -> ExecResult<Vec<(String, DeviceTensor)>> {
        self.run_device_on_stream(&self.stream, inputs)
    }

    /// [`CudaProgram::run_device`] on `stream`.
    pub fn run_device_on_stream(
        &self,
        stream: &CudaStream,
        inputs: &HashMap<String, DeviceTensor>,
    ) -> ExecResult<Vec<(String, DeviceTensor)>> {
        let mut outs = self
            .plan
            .outputs
            .iter()
            .zip(&self.output_shapes)
            .map(|(o, s)| DeviceTensor::uninit(&self.ctx, o.dtype, s.clone()))
            .collect::<ExecResult<Vec<_>>>()?;
        self.run_impl(stream, Inputs::Device(inputs), Outputs::Device(&mut outs))?;
        Ok(self.named(outs))
    }

    /// Runs on device tensors, writing into caller-owned device tensors.
    pub fn run_device_into(
        &self,
        inputs: &HashMap<String, DeviceTensor>,
        outputs: &mut [DeviceTensor],
    ) -> ExecResult<()> {
        self.run_impl(
            &self.stream,
            Inputs::Device(inputs),
            Outputs::Device(outputs),
        )
    }

    /// [`CudaProgram::run_device_into`], also returning the time the GPU spent on the run's
    /// work: CUDA events recorded on the stream before the first and after the last enqueued
    /// operation, so the host's launch and synchronisation latency is not in it (the wall time
    /// of a call is). For benchmarks; a plain run records no events.
    pub fn run_device_into_timed(
        &self,
        inputs: &HashMap<String, DeviceTensor>,
        outputs: &mut [DeviceTensor],
    ) -> ExecResult<std::time::Duration> {
        self.run_timed(
            &self.stream,
            Inputs::Device(inputs),
            Outputs::Device(outputs),
            true,
        )?
        .ok_or_else(|| invalid("internal: a timed run recorded no time"))
    }

    fn check_outputs(&self, outputs: &Outputs) -> ExecResult<()> {
        let n = match outputs {
            Outputs::Host(o) => o.len(),
            Outputs::Fresh(o) => o.len(),
            Outputs::Device(o) => o.len(),
        };
        if n != self.plan.outputs.len() {
            return Err(CudaExecError::Output {
                name: "*".into(),
                expected: format!("{} outputs", self.plan.outputs.len()),
                got: format!("{n} tensors"),
            });
        }
        for (i, (o, shape)) in self
            .plan
            .outputs
            .iter()
            .zip(&self.output_shapes)
            .enumerate()
        {
            let (dtype, got_shape, ordinal) = match outputs {
                Outputs::Host(t) => (t[i].dtype(), t[i].shape(), None),
                Outputs::Fresh(t) => (t[i].dtype(), t[i].shape(), None),
                Outputs::Device(t) => (t[i].dtype, &t[i].shape, Some(t[i].ordinal())),
            };
            let shape_ok = match outputs {
                Outputs::Host(_) | Outputs::Fresh(_) => got_shape == shape,
                Outputs::Device(_) => got_shape.numel() == o.numel,
            };
            if dtype != o.dtype || !shape_ok || ordinal.is_some_and(|d| d != self.ctx.ordinal()) {
                return Err(CudaExecError::Output {
                    name: o.name.clone(),
                    expected: format!("{}{} on cuda:{}", o.dtype, shape, self.ctx.ordinal()),
                    got: format!(
                        "{dtype}{got_shape}{}",
                        ordinal.map_or(String::new(), |d| format!(" on cuda:{d}"))
                    ),
                });
            }
        }
        Ok(())
    }

    fn run_impl(&self, stream: &CudaStream, inputs: Inputs, outputs: Outputs) -> ExecResult<()> {
        self.run_timed(stream, inputs, outputs, false).map(drop)
    }

    /// A run; with `timed`, also the GPU time of the run's work (CUDA events).
    fn run_timed(
        &self,
        stream: &CudaStream,
        inputs: Inputs,
        mut outputs: Outputs,
        timed: bool,
    ) -> ExecResult<Option<std::time::Duration>> {
        if **stream.context() != *self.ctx {
            return Err(invalid("the stream belongs to another CUDA context"));
        }
        self.check_outputs(&outputs)?;
        // Every input present and of the right dtype and size, before anything is enqueued.
        let mut device_ptrs: Vec<u64> = Vec::new();
        for s in &self.plan.inputs {
            match &inputs {
                Inputs::Host(m) => {
                    let t = m
                        .get(&s.name)
                        .ok_or_else(|| CudaExecError::MissingBinding {
                            name: s.name.clone(),
                        })?;
                    dtype_numel_check(&s.name, s.dtype, s.numel, (t.dtype(), t.shape()))?;
                }
                Inputs::Device(m) => {
                    let t = m
                        .get(&s.name)
                        .ok_or_else(|| CudaExecError::MissingBinding {
                            name: s.name.clone(),
                        })?;
                    dtype_numel_check(&s.name, s.dtype, s.numel, (t.dtype, &t.shape))?;
                    if t.ordinal() != self.ctx.ordinal() || t.alloc.ptr % 16 != 0 {
                        return Err(CudaExecError::Binding {
                            name: s.name.clone(),
                            expected: format!(
                                "a 16-byte aligned tensor on cuda:{}",
                                self.ctx.ordinal()
                            ),
                            got: format!("{t:?} at {:#x}", t.alloc.ptr),
                        });
                    }
                    device_ptrs.push(t.alloc.ptr);
                }
            }
        }
        self.ctx
            .bind_to_thread()
            .map_err(driver_err("cuCtxSetCurrent"))?;
        // A second run of this program waits here for the first to finish.
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = &mut *guard;
        let host = matches!(inputs, Inputs::Host(_))
            || matches!(outputs, Outputs::Host(_) | Outputs::Fresh(_));
        if host && state.staging.is_none() {
            state.staging = Some(PinnedAlloc::new(&self.ctx, self.plan.staging_bytes)?);
        }
        let events = if timed {
            let event = || {
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(driver_err("cuEventCreate"))
            };
            let (start, end) = (event()?, event()?);
            start.record(stream).map_err(driver_err("cuEventRecord"))?;
            Some((start, end))
        } else {
            None
        };
        let mut enqueued = self.enqueue(stream, state, &inputs, &device_ptrs, &mut outputs);
        if let (Some((_, end)), Ok(())) = (&events, &enqueued) {
            enqueued = end.record(stream).map_err(driver_err("cuEventRecord"));
        }
        // Whether or not everything was enqueued, nothing may still use the arena or the
        // staging buffer when the lock is released. Called directly rather than through
        // `CudaStream::synchronize`, which first returns any error an unrelated drop left
        // pending in cudarc, without synchronising.
        // SAFETY: a live stream (borrowed) of this program's context (checked above), which
        // is current on this thread (bound above).
        let synced = unsafe { result::stream::synchronize(stream.cu_stream()) }
            .map_err(driver_err("cuStreamSynchronize"));
        // The cuBLAS handle keeps no reference to the caller's stream between runs (the
        // caller may destroy it): back to the default stream, which outlives the handle.
        let unset = match &state.cublas {
            // SAFETY: a live handle; a null stream is the default stream.
            Some(h) => cublas_check("cublasSetStream", unsafe {
                (h.lib.set_stream)(h.handle, std::ptr::null_mut())
            }),
            None => Ok(()),
        };
        enqueued?;
        synced?;
        unset?;
        let elapsed = match &events {
            Some((start, end)) => {
                let ms = start
                    .elapsed_ms(end)
                    .map_err(driver_err("cuEventElapsedTime"))?;
                Some(std::time::Duration::from_secs_f64(
                    f64::from(ms.max(0.0)) / 1e3,
                ))
            }
            None => None,
        };
        let faults = match state.status.as_mut() {
            Some(st) => (0..self.status_words.len()).any(|i| st.slice(4 * i, 4) != [0; 4]),
            None => false,
        };
        if faults {
            return Err(CudaExecError::IndexOutOfRange {
                kernels: self.checked_kernels.clone(),
            });
        }
        for (i, o) in self.plan.outputs.iter().enumerate() {
            let bytes = o.numel * o.dtype.size_bytes();
            match &mut outputs {
                Outputs::Host(outs) => fill_host(
                    &mut outs[i],
                    staged(&mut state.staging, o.staging_offset, bytes)?,
                )?,
                // SAFETY: `run` made each fresh output with this output's dtype and shape
                // (`check_outputs` compared them), so it has room for exactly `bytes` bytes;
                // the staging buffer is distinct memory.
                Outputs::Fresh(outs) => unsafe {
                    fill_bytes(
                        outs[i].ptr(),
                        bytes,
                        staged(&mut state.staging, o.staging_offset, bytes)?,
                    )
                },
                Outputs::Device(_) => {}
            }
        }
        Ok(elapsed)
    }

    /// Points the buffers of the outputs that allow it ([`direct_outputs`]) at the caller's
    /// device tensors, except where a tensor overlaps an input or another output (then the run
    /// keeps the arena and copies, so aliasing stays harmless). Returns which were redirected.
    fn redirect_outputs(&self, outputs: &Outputs, inputs: &[u64], ptrs: &mut [u64]) -> Vec<bool> {
        let Outputs::Device(t) = outputs else {
            return vec![false; self.plan.outputs.len()];
        };
        let range = |p: u64, bytes: usize| (p, p + bytes as u64);
        let overlaps = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
        let outs: Vec<(u64, u64)> = self
            .plan
            .outputs
            .iter()
            .zip(t.iter())
            .map(|(o, t)| range(t.alloc.ptr, o.numel * o.dtype.size_bytes()))
            .collect();
        let ins: Vec<(u64, u64)> = self
            .plan
            .inputs
            .iter()
            .zip(inputs)
            .map(|(s, &p)| range(p, s.numel * s.dtype.size_bytes()))
            .collect();
        let mut direct = vec![false; outs.len()];
        for (i, o) in self.plan.outputs.iter().enumerate() {
            let mine = outs[i];
            let alias = ins.iter().any(|&r| overlaps(mine, r))
                || outs
                    .iter()
                    .enumerate()
                    .any(|(j, &r)| j != i && overlaps(mine, r));
            if self.direct_outputs[i] && mine.0 != mine.1 && !alias {
                ptrs[o.buffer] = mine.0;
                direct[i] = true;
            }
        }
        direct
    }

    fn enqueue(
        &self,
        stream: &CudaStream,
        state: &mut RunState,
        inputs: &Inputs,
        device_ptrs: &[u64],
        outputs: &mut Outputs,
    ) -> ExecResult<()> {
        let cu_stream = stream.cu_stream();
        let arena = state.arena.ptr;
        let device = match inputs {
            Inputs::Host(_) => None,
            Inputs::Device(_) => Some(device_ptrs),
        };
        self.plan
            .resolve_pointers(arena, self.consts.ptr, device, &mut state.ptrs);
        let direct = self.redirect_outputs(outputs, device_ptrs, &mut state.ptrs);
        if let Inputs::Host(m) = inputs {
            for s in &self.plan.inputs {
                let bytes = host_bytes(m[&s.name].data());
                if bytes.is_empty() {
                    continue;
                }
                let staged = staged(&mut state.staging, s.staging_offset, bytes.len())?;
                staged.copy_from_slice(bytes);
                // SAFETY: the destination is this input's slot in the arena (room for its
                // bytes by the plan); the source is pinned memory owned by the run state, not
                // touched again until the stream is synchronised at the end of the run.
                unsafe {
                    result::memcpy_htod_async(arena + s.arena_offset as u64, &*staged, cu_stream)
                }
                .map_err(driver_err("cuMemcpyHtoDAsync"))?;
            }
        }
        if let Some(h) = &state.cublas {
            // SAFETY: a live handle and a live stream of the handle's context.
            let status = unsafe { (h.lib.set_stream)(h.handle, cu_stream.cast()) };
            cublas_check("cublasSetStream", status)?;
        }
        // The status words start every run cleared, whatever an earlier, failed run left.
        for &word in &self.status_words {
            // SAFETY: a module global of 4 bytes (checked at load), in stream order before
            // every step of this run.
            unsafe { result::memset_d8_async(word, 0, 4, cu_stream) }
                .map_err(driver_err("cuMemsetD8Async"))?;
        }
        let ptr_of = |a: &KernelArg| match *a {
            KernelArg::Buffer { buffer, .. } => state.ptrs[buffer],
            KernelArg::Count(n) => n as u64,
        };
        let mut values: Vec<u64> = Vec::new();
        let mut params: Vec<*mut c_void> = Vec::new();
        for step in &self.plan.steps {
            match step {
                LaunchStep::Kernel(k) => {
                    values.clear();
                    values.extend(k.args.iter().map(ptr_of));
                    params.clear();
                    params.extend(values.iter_mut().map(|v| (v as *mut u64).cast::<c_void>()));
                    // SAFETY: the entry was generated with exactly these parameters (pointers
                    // then `long long n`, all 8 bytes, in this order: the launch contract of
                    // smelt_codegen::cuda and of the fallback GEMM); every pointer covers its
                    // buffer (arena slots by the plan, inputs and constants by their checks);
                    // written buffers are arena temporaries disjoint from every buffer live at
                    // this step; the driver copies the argument values at launch.
                    unsafe {
                        result::launch_kernel(
                            self.functions[k.entry].cu_function(),
                            (k.grid, 1, 1),
                            (k.block, 1, 1),
                            k.shared_bytes,
                            cu_stream,
                            &mut params,
                        )
                    }
                    .map_err(driver_err("cuLaunchKernel"))?;
                }
                LaunchStep::Cublas(g) => {
                    let h = state
                        .cublas
                        .as_ref()
                        .ok_or_else(|| invalid("a cuBLAS step without a cuBLAS handle"))?;
                    let size = g.dtype.size_bytes() as u64;
                    let (a, b, c) = (ptr_of(&g.a), ptr_of(&g.b), ptr_of(&g.c));
                    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
                    let (dt, ct, alpha, beta): (i32, i32, *const c_void, *const c_void) =
                        match g.dtype {
                            DType::F32 => (
                                data_type::R_32F,
                                compute_type::COMPUTE_32F,
                                (&one32 as *const f32).cast(),
                                (&zero32 as *const f32).cast(),
                            ),
                            DType::F16 | DType::BF16 => (
                                if g.dtype == DType::F16 {
                                    data_type::R_16F
                                } else {
                                    data_type::R_16BF
                                },
                                compute_type::COMPUTE_32F,
                                (&one32 as *const f32).cast(),
                                (&zero32 as *const f32).cast(),
                            ),
                            DType::F64 => (
                                data_type::R_64F,
                                compute_type::COMPUTE_64F,
                                (&one64 as *const f64).cast(),
                                (&zero64 as *const f64).cast(),
                            ),
                            d => return Err(invalid(format!("cuBLAS step of dtype {d}"))),
                        };
                    let op = |t: Trans| if t == Trans::N { 0 } else { 1 };
                    for call in &g.calls {
                        // SAFETY: the plan checked every operand span against its buffer and
                        // that the output holds `batches·m·n` elements; leading dimensions and
                        // strides satisfy cuBLAS's constraints (unit-tested against a
                        // column-major oracle); alpha/beta are host scalars of the compute
                        // type (host pointer mode, read during the call); the handle's stream
                        // is `stream`.
                        let status = unsafe {
                            (h.lib.gemm_strided_batched_ex)(
                                h.handle,
                                op(call.transa),
                                op(call.transb),
                                call.m,
                                call.n,
                                call.k,
                                alpha,
                                (a + call.a_offset as u64 * size) as *const c_void,
                                dt,
                                call.lda,
                                call.stride_a,
                                (b + call.b_offset as u64 * size) as *const c_void,
                                dt,
                                call.ldb,
                                call.stride_b,
                                beta,
                                (c + call.c_offset as u64 * size) as *mut c_void,
                                dt,
                                call.ldc,
                                call.stride_c,
                                call.batch,
                                ct,
                                cublas_lib::GEMM_DEFAULT,
                            )
                        };
                        cublas_check("cublasGemmStridedBatchedEx", status)?;
                    }
                }
                LaunchStep::Zero { arg, bytes, .. } => {
                    // SAFETY: an arena temporary with room for `bytes` bytes.
                    unsafe { result::memset_d8_async(ptr_of(arg), 0, *bytes, cu_stream) }
                        .map_err(driver_err("cuMemsetD8Async"))?;
                }
                LaunchStep::Skip { .. } => {}
            }
        }
        for (i, o) in self.plan.outputs.iter().enumerate() {
            let bytes = o.numel * o.dtype.size_bytes();
            if bytes == 0 {
                continue;
            }
            let src = state.ptrs[o.buffer];
            match outputs {
                Outputs::Host(_) | Outputs::Fresh(_) => {
                    let staged = staged(&mut state.staging, o.staging_offset, bytes)?;
                    // SAFETY: `src` holds the output buffer's bytes; the destination is pinned
                    // memory read only after the stream is synchronised.
                    unsafe { result::memcpy_dtoh_async(staged, src, cu_stream) }
                        .map_err(driver_err("cuMemcpyDtoHAsync"))?;
                }
                Outputs::Device(_) if direct[i] => {}
                Outputs::Device(t) => {
                    // SAFETY: both hold `bytes` bytes (dtype and element count checked); the
                    // destination is the caller's tensor, distinct from the arena.
                    unsafe { result::memcpy_dtod_async(t[i].alloc.ptr, src, bytes, cu_stream) }
                        .map_err(driver_err("cuMemcpyDtoDAsync"))?;
                }
            }
        }
        // Each status word into the pinned buffer, read after the stream is synchronised
        // (the words were cleared before this run's first step).
        if let Some(st) = state.status.as_mut() {
            for (i, &word) in self.status_words.iter().enumerate() {
                // SAFETY: `word` is a module global of 4 bytes (checked at load); the
                // destination is pinned memory read only after the stream is synchronised.
                unsafe { result::memcpy_dtoh_async(st.slice(4 * i, 4), word, cu_stream) }
                    .map_err(driver_err("cuMemcpyDtoHAsync"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn programs_and_device_tensors_are_send_and_sync() {
        assert_send_sync::<CudaProgram>();
        assert_send_sync::<DeviceTensor>();
    }

    /// Which outputs a device run writes straight into the caller's tensors: a computed one,
    /// not an input passed through, and not one whose buffer another output shares.
    #[test]
    fn only_whole_written_unshared_temporaries_are_direct_outputs() {
        use smelt_frontend::Tracer;
        let t = Tracer::new();
        let x = t.input("x", DType::F32, [4, 8]).unwrap();
        let y = x.add(1.0).unwrap().exp().unwrap();
        t.output("y", &y).unwrap();
        t.output("x_again", &x).unwrap();
        t.output("y_again", &y).unwrap();
        t.output("z", &y.mul(2.0).unwrap()).unwrap();
        let graph = t.finish().unwrap();
        let opt = smelt_passes::optimize(&graph, &smelt_passes::PassOptions::default()).unwrap();
        let program = smelt_passes::kernel::lower(&opt.graph, &opt.plan).unwrap();
        let plan = LaunchPlan::build(&program, &|_| false, GemmBackend::Cublas).unwrap();
        let direct: HashMap<&str, bool> = plan
            .outputs
            .iter()
            .map(|o| o.name.as_str())
            .zip(direct_outputs(&program, &plan))
            .collect();
        assert!(!direct["x_again"], "{direct:?}");
        assert!(direct["z"], "{direct:?}");
        // One buffer for two outputs: both copied.
        assert!(!direct["y"] && !direct["y_again"], "{direct:?}");
    }

    #[test]
    fn no_gpu_is_a_typed_error_not_a_panic() {
        if cuda_device(0).is_ok() {
            return;
        }
        let e = cuda_device(0).unwrap_err().to_string();
        assert!(
            e.contains("libcuda") || e.contains("cuInit") || e.contains("no CUDA device"),
            "{e}"
        );
        assert!(cuda_context(0).is_err());
        let program = Program {
            buffers: vec![],
            steps: vec![],
            outputs: vec![],
        };
        let e = CudaProgram::compile(&program, &HashMap::new(), &CudaOptions::default());
        assert!(e.is_err());
        let llvm = CudaOptions {
            codegen: CudaCodegen::Llvm,
            ..CudaOptions::default()
        };
        assert!(CudaProgram::compile(&program, &HashMap::new(), &llvm).is_err());
    }
}
