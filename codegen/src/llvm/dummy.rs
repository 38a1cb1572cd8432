//! The LLVM layer of a build without the `llvm` feature: the same names, every entry point
//! answering [`LlvmError::NotCompiledIn`] (candle's `dummy_cuda_backend` pattern).

use super::error::{LlvmError, Result};
use super::options::{HostTarget, JitOptions};
use std::convert::Infallible;

/// Without LLVM there is no full version to report.
pub const LLVM_VERSION: &str = "none";

/// Always [`LlvmError::NotCompiledIn`].
pub fn host_target() -> Result<&'static HostTarget> {
    Err(LlvmError::NotCompiledIn)
}

/// Always [`LlvmError::NotCompiledIn`].
pub fn compile_ir(_name: &str, _ir: &str, _options: &JitOptions) -> Result<JitModule> {
    Err(LlvmError::NotCompiledIn)
}

/// Always [`LlvmError::NotCompiledIn`].
pub fn program_listing(
    _program: &smelt_passes::kernel::Program,
    _options: &JitOptions,
) -> Result<(String, String)> {
    Err(LlvmError::NotCompiledIn)
}

/// JIT-compiled machine code; no value of it exists in a build without LLVM.
#[derive(Debug)]
pub struct JitModule {
    never: Infallible,
}

impl JitModule {
    pub fn name(&self) -> &str {
        match self.never {}
    }

    pub fn options(&self) -> &JitOptions {
        match self.never {}
    }

    pub fn cpu(&self) -> (&str, &str) {
        match self.never {}
    }

    pub fn optimized_ir(&self) -> &str {
        match self.never {}
    }

    pub fn functions(&self) -> impl Iterator<Item = &str> + '_ {
        match self.never {}
        #[allow(unreachable_code)]
        std::iter::empty()
    }

    pub fn address(&self, _name: &str) -> Result<usize> {
        match self.never {}
    }

    pub fn object(&self) -> &[u8] {
        match self.never {}
    }

    /// Answers [`LlvmError::NotCompiledIn`].
    pub fn load(
        _name: &str,
        _options: &JitOptions,
        _ir: String,
        _object: Vec<u8>,
        _functions: &[String],
    ) -> Result<JitModule> {
        Err(LlvmError::NotCompiledIn)
    }

    /// # Safety
    /// As in the LLVM build; never callable here (no `JitModule` exists).
    pub unsafe fn function<F: Copy>(&self, _name: &str) -> Result<F> {
        match self.never {}
    }
}
