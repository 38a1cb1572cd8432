//! Loading machine code: one ORC `LLJIT` instance per module, given the object file that the
//! target machine wrote for it (`jit.rs`). The same path loads a fresh compile and an object
//! read back from a cache, so a cached module is the very code a compile produces.
//!
//! LLJIT links the object with LLVM's RuntimeDyld, as MCJIT did, and resolves the symbols the
//! kernels call outside themselves (`memset`, `memcpy`) in the process. The object is written
//! with the JIT code model (large on x86-64: absolute 64-bit addresses), so it loads wherever
//! the memory manager puts it.

use super::error::{LlvmError, Result};
use llvm_sys::core::LLVMCreateMemoryBufferWithMemoryRangeCopy;
use llvm_sys::error::{LLVMDisposeErrorMessage, LLVMErrorRef, LLVMGetErrorMessage};
use llvm_sys::orc2::lljit::{
    LLVMOrcCreateLLJIT, LLVMOrcDisposeLLJIT, LLVMOrcLLJITAddObjectFile,
    LLVMOrcLLJITGetGlobalPrefix, LLVMOrcLLJITGetMainJITDylib, LLVMOrcLLJITLookup, LLVMOrcLLJITRef,
};
use llvm_sys::orc2::{
    LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess, LLVMOrcJITDylibAddGenerator,
};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};

/// Machine code loaded by one LLJIT instance; freed when dropped.
pub(crate) struct Loaded {
    jit: LLVMOrcLLJITRef,
}

impl Loaded {
    /// Links `object` (an ELF/Mach-O/COFF object for the host) into a new LLJIT instance and
    /// resolves the address of every function in `functions`.
    pub(crate) fn load(
        module: &str,
        object: &[u8],
        functions: &[String],
    ) -> Result<(Loaded, BTreeMap<String, usize>)> {
        super::target::init_native()?;
        let fail = |message: String| LlvmError::Jit {
            module: module.to_string(),
            message,
        };
        let mut jit: LLVMOrcLLJITRef = std::ptr::null_mut();
        // SAFETY: a null builder asks for the default one (host target); `jit` receives the
        // instance, owned by `Loaded` from here on (disposed by its `Drop`, also on the error
        // paths below).
        let err = unsafe { LLVMOrcCreateLLJIT(&mut jit, std::ptr::null_mut()) };
        consume(err).map_err(|m| fail(format!("cannot create an ORC LLJIT: {m}")))?;
        let loaded = Loaded { jit };
        // SAFETY: `jit` is a live instance; the main JITDylib belongs to it.
        let dylib = unsafe { LLVMOrcLLJITGetMainJITDylib(jit) };
        let mut generator = std::ptr::null_mut();
        // SAFETY: `generator` receives a new definition generator (no filter), whose
        // ownership `LLVMOrcJITDylibAddGenerator` then takes.
        let err = unsafe {
            LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(
                &mut generator,
                LLVMOrcLLJITGetGlobalPrefix(jit),
                None,
                std::ptr::null_mut(),
            )
        };
        consume(err).map_err(|m| fail(format!("cannot search the process for symbols: {m}")))?;
        // SAFETY: both are live; the dylib takes ownership of the generator.
        unsafe { LLVMOrcJITDylibAddGenerator(dylib, generator) };
        let name = CString::new(module).unwrap_or_default();
        // SAFETY: the range is `object`'s bytes, copied into a new buffer named `name`;
        // `LLVMOrcLLJITAddObjectFile` takes ownership of the buffer, on success and on error.
        let err = unsafe {
            let buffer = LLVMCreateMemoryBufferWithMemoryRangeCopy(
                object.as_ptr().cast(),
                object.len(),
                name.as_ptr(),
            );
            LLVMOrcLLJITAddObjectFile(jit, dylib, buffer)
        };
        consume(err).map_err(|m| fail(format!("cannot add the object file: {m}")))?;
        let mut symbols = BTreeMap::new();
        for f in functions {
            let cname = CString::new(f.as_str())
                .map_err(|_| fail(format!("function name {f:?} contains a NUL byte")))?;
            let mut address = 0;
            // SAFETY: `jit` is live and `cname` a NUL-terminated name; the lookup links the
            // object on first use and writes the address.
            let err = unsafe { LLVMOrcLLJITLookup(jit, &mut address, cname.as_ptr()) };
            consume(err).map_err(|m| fail(format!("function {f:?} has no address: {m}")))?;
            let address = usize::try_from(address)
                .map_err(|_| fail(format!("function {f:?} is at {address:#x}")))?;
            symbols.insert(f.clone(), address);
        }
        Ok((loaded, symbols))
    }
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: `jit` is live and disposed only here, once; its code is not called any more
        // (the `JitModule` contract).
        let err = unsafe { LLVMOrcDisposeLLJIT(self.jit) };
        // An error on teardown has nobody to go to; its message is freed.
        let _ = consume(err);
    }
}

/// `Ok` for a null error, else the error's message (the error and the message freed).
fn consume(err: LLVMErrorRef) -> std::result::Result<(), String> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: `err` is a live error; `LLVMGetErrorMessage` consumes it and returns a message
    // that is freed with `LLVMDisposeErrorMessage` after it is copied.
    unsafe {
        let raw = LLVMGetErrorMessage(err);
        let message = CStr::from_ptr(raw).to_string_lossy().into_owned();
        LLVMDisposeErrorMessage(raw);
        Err(message)
    }
}
