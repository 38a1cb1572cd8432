//! LLVM's diagnostics (remarks, warnings, errors) caught instead of printed.
//!
//! Without a handler, an `LLVMContext` prints every diagnostic to the process's stderr and
//! exits the process on an error. Kernels carry loop hints that ask the vectoriser for
//! something (`llvm.loop.vectorize.enable`, a masked tail); where it cannot comply (a loop
//! whose body branches, e.g. a gather's range check) LLVM reports `remark: loop not
//! vectorized` and `warning: ... unable to perform the requested transformation`, which a
//! user compiling an embedding lookup with a large output saw on their terminal. The code is
//! correct either way: a hint not taken leaves the loop as it was.
//!
//! [`Diagnostics::install`] gives a context a handler that drops remarks, warnings and notes,
//! and keeps errors, which the compile then reports as a typed error
//! ([`Diagnostics::check`]) instead of ending the process.

use super::error::{LlvmError, Result};
use inkwell::context::{AsContextRef, Context};
use inkwell::llvm_sys::core::{
    LLVMContextSetDiagnosticHandler, LLVMDisposeMessage, LLVMGetDiagInfoDescription,
    LLVMGetDiagInfoSeverity,
};
use inkwell::llvm_sys::prelude::LLVMDiagnosticInfoRef;
use inkwell::llvm_sys::LLVMDiagnosticSeverity;
use std::cell::RefCell;
use std::ffi::{c_void, CStr};

/// The error diagnostics one context reported. Must stay in place (not moved) and outlive the
/// context it is installed in: declare it as a local before the context, so that it is dropped
/// after.
#[derive(Default)]
pub(crate) struct Diagnostics {
    errors: RefCell<Vec<String>>,
}

impl Diagnostics {
    /// A handler for `context` that records its errors here and drops everything else.
    pub(crate) fn install(&self, context: &Context) {
        let data: *const Diagnostics = self;
        // SAFETY: `handle` matches `LLVMDiagnosticHandler`; `data` points to a `Diagnostics`
        // that stays in place and outlives the context (see the type's docs), and LLVM passes
        // it back only to `handle`, on the thread using the context.
        unsafe {
            LLVMContextSetDiagnosticHandler(
                context.as_ctx_ref(),
                Some(handle),
                data.cast_mut().cast::<c_void>(),
            )
        };
    }

    /// `Err` naming module `module` and LLVM's messages when the context reported an error.
    pub(crate) fn check(&self, module: &str) -> Result<()> {
        let errors = self.errors.borrow();
        if errors.is_empty() {
            return Ok(());
        }
        Err(LlvmError::Jit {
            module: module.to_string(),
            message: format!("LLVM reported: {}", errors.join("; ")),
        })
    }
}

extern "C" fn handle(info: LLVMDiagnosticInfoRef, data: *mut c_void) {
    // SAFETY: `info` is the diagnostic LLVM is reporting, valid during this call.
    let severity = unsafe { LLVMGetDiagInfoSeverity(info) };
    if severity != LLVMDiagnosticSeverity::LLVMDSError || data.is_null() {
        return;
    }
    // SAFETY: as above; the description is a C string LLVM allocated for the caller, freed
    // once copied. `data` is the `Diagnostics` of `install`, alive and used by this thread
    // only (the context's), and no borrow of it is held while LLVM compiles.
    unsafe {
        let text = LLVMGetDiagInfoDescription(info);
        let message = if text.is_null() {
            "an error without a description".to_string()
        } else {
            let s = CStr::from_ptr(text).to_string_lossy().into_owned();
            LLVMDisposeMessage(text);
            s
        };
        let diagnostics = &*data.cast::<Diagnostics>();
        diagnostics.errors.borrow_mut().push(message);
    }
}
