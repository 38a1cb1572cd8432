//! The device-independent half of the CUDA backend: finding the toolchain, compiling CUDA C
//! with NVRTC, assembling PTX with ptxas, and binding the driver and cuBLAS for cudarc.
//!
//! Nothing here needs a GPU. NVRTC is a plain shared library; on a machine without CUDA,
//! `scripts/install-cuda-tools.sh` installs it (and the headers and ptxas) from PyPI into
//! `.cuda/`, where [`ProbeConfig::from_env`] finds it. Every missing piece is a
//! [`CudaError::NotFound`] listing where smelt looked; nothing here panics. See `docs/cuda.md`.
//!
//! - [`probe`]: where each library, the headers and ptxas are looked for.
//! - [`nvrtc()`] / [`Nvrtc`]: the loaded NVRTC, its version and supported architectures.
//! - [`compile_cuda`]: source → [`CompiledKernel`] (a cubin, or PTX when the GPU is newer than
//!   NVRTC: see [`OutputKind`]); [`compile_cuda_cached`] goes through a [`KernelCache`].
//! - [`driver()`] / [`cublas()`]: call before any `cudarc::driver` / `cudarc::cublas` use.
//! - [`launch`]: the launch plan of a program (pure data, tested without a GPU);
//!   [`CudaProgram`] (`exec`): runs it on a GPU ([`cuda_device`] resolves one).
//! - [`emulate`]: runs the same plan and CUDA C on the CPU under CUDA's thread model (a test
//!   and debugging tool for machines without a GPU).

mod compile;
pub mod cublas_lib;
mod driver;
pub mod emulate;
mod error;
mod exec;
mod exec_error;
pub mod launch;
mod nvrtc_lib;
pub mod probe;
mod ptxas;

pub use compile::{compile_cuda, Arch, CompileOptions, CompiledKernel, KernelImage, OutputKind};
pub use cudarc::driver::{CudaContext, CudaStream};
pub use driver::{cublas, driver, BoundLibrary, Driver};
pub use error::{numbered_source, Attempt, CompileFailure, CudaComponent, CudaError, CudaResult};
pub use exec::{
    cached_device_bytes, cuda_context, cuda_device, device_copy_bandwidth, empty_device_cache,
    nvptx_options, CudaCodegen, CudaDeviceInfo, CudaOptions, CudaProgram, DeviceTensor,
    FAKE_DEVICE_NAME,
};
pub use exec_error::{CudaExecError, ExecResult};
pub use nvrtc_lib::{nvrtc, Nvrtc};
pub use probe::{FoundVia, LibraryLocation, ProbeConfig};
pub use ptxas::{assemble_ptx, assemble_ptx_with, ptxas_path};

use crate::cache::{CacheKey, CacheTarget, KernelCache};

impl Nvrtc {
    /// The cache key of compiling `source` for `arch` with `options` on this NVRTC.
    pub fn cache_key(
        &self,
        source: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> CudaResult<CacheKey> {
        Ok(CacheKey::new(
            CacheTarget::cuda(arch),
            source.as_bytes(),
            &self.options_for(arch, options)?,
            &self.version_string(),
        ))
    }

    /// [`Nvrtc::compile`] through `cache`: a hit skips NVRTC (its `log` is then empty).
    pub fn compile_cached(
        &self,
        cache: &KernelCache,
        source: &str,
        name: &str,
        arch: Arch,
        options: &CompileOptions,
    ) -> CudaResult<CompiledKernel> {
        let key = self.cache_key(source, arch, options)?;
        if let Some(bytes) = cache.get(&key) {
            if let Some(image) = KernelImage::from_bytes(&bytes) {
                return Ok(CompiledKernel {
                    name: name.to_string(),
                    arch,
                    image,
                    log: String::new(),
                    options: key.options().to_vec(),
                    compiler_version: self.version_string(),
                });
            }
            log::debug!(
                "kernel cache: entry {} is not a kernel image; recompiling",
                key.hex()
            );
        }
        let kernel = self.compile(source, name, arch, options)?;
        cache.insert(&key, &kernel.image.to_bytes());
        Ok(kernel)
    }
}

/// [`compile_cuda`] through `cache`, with the process-wide NVRTC.
pub fn compile_cuda_cached(
    cache: &KernelCache,
    source: &str,
    name: &str,
    arch: &str,
    options: &CompileOptions,
) -> CudaResult<CompiledKernel> {
    nvrtc()?.compile_cached(cache, source, name, Arch::parse(arch)?, options)
}
