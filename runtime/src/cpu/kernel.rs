//! A JIT-compiled kernel entry point, kept together with the machine code it points into.

use super::error::Result;
use super::pool::CpuPool;
use super::KernelFn;
use smelt_codegen::llvm::JitModule;
use std::sync::Arc;

/// One kernel entry point of a JIT-compiled module, in the chunked calling convention of
/// [`super`]. Cloning shares the module; the machine code lives as long as any clone.
#[derive(Clone, Debug)]
pub struct CpuKernel {
    module: Arc<JitModule>,
    name: String,
    entry: KernelFn,
    /// The same kernel with plain stores where `entry` streams them (see
    /// `smelt_codegen::llvm::kernel::has_plain_twin`).
    plain: Option<KernelFn>,
}

impl CpuKernel {
    /// Looks up `name` in `module`.
    ///
    /// # Safety
    /// `name` must be defined with the LLVM signature `void (i8**, i64, i64)` and follow the
    /// calling convention of [`super`] (the kernel code generator's contract).
    pub unsafe fn new(module: Arc<JitModule>, name: &str) -> Result<CpuKernel> {
        // SAFETY: the caller guarantees the signature; `module` is kept alive in `self` for as
        // long as `entry` can be called through it.
        let entry: KernelFn = unsafe { module.function(name)? };
        Ok(CpuKernel {
            module,
            name: name.to_string(),
            entry,
            plain: None,
        })
    }

    /// This kernel with its plain-store twin, the function `twin` of the same module.
    ///
    /// # Safety
    /// As for [`CpuKernel::new`], for `twin`: the same kernel (same arguments, same results)
    /// in the same calling convention.
    pub unsafe fn with_plain_twin(mut self, twin: &str) -> Result<CpuKernel> {
        // SAFETY: forwarded contract; the twin lives in `self.module`, kept alive by `self`.
        self.plain = Some(unsafe { self.module.function(twin)? });
        Ok(self)
    }

    /// Whether the kernel has a plain-store twin.
    pub fn has_plain_twin(&self) -> bool {
        self.plain.is_some()
    }

    /// The kernel's function name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The module the kernel's code lives in.
    pub fn module(&self) -> &Arc<JitModule> {
        &self.module
    }

    /// Runs the kernel over outer indices `0..extent` on `pool` (see [`CpuPool::launch`]).
    ///
    /// # Safety
    /// As for [`CpuPool::launch`]: `args` must match what the kernel reads and writes for every
    /// outer index in `0..extent`.
    pub unsafe fn launch(
        &self,
        pool: &CpuPool,
        args: &[*mut u8],
        extent: i64,
        grain: i64,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_with(pool, args, extent, grain, false) }
    }

    /// [`CpuKernel::launch`], with the plain-store twin when `plain_stores` is set and the
    /// kernel has one (the results are the same bits either way).
    ///
    /// # Safety
    /// As for [`CpuKernel::launch`].
    pub unsafe fn launch_with(
        &self,
        pool: &CpuPool,
        args: &[*mut u8],
        extent: i64,
        grain: i64,
        plain_stores: bool,
    ) -> Result<()> {
        let entry = match self.plain {
            Some(plain) if plain_stores => plain,
            _ => self.entry,
        };
        // SAFETY: forwarded contract; `self.module` keeps both entries valid during the
        // launch.
        unsafe { pool.launch(entry, args, extent, grain) }
    }
}
