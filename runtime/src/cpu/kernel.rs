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
        })
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
        // SAFETY: forwarded contract; `self.module` keeps `entry` valid during the launch.
        unsafe { pool.launch(self.entry, args, extent, grain) }
    }
}
