//! Errors of the LLVM layer.

/// `Result` with [`LlvmError`].
pub type Result<T, E = LlvmError> = std::result::Result<T, E>;

/// An error of the LLVM layer, carrying LLVM's own message where LLVM gave one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlvmError {
    /// This build has no LLVM (the `llvm` cargo feature is off).
    #[error(
        "the CPU backend (LLVM JIT) is not compiled in: rebuild with the `llvm` cargo feature \
         (on by default), or use another device"
    )]
    NotCompiledIn,
    /// LLVM could not initialise the native target (no LLVM backend for this host).
    #[error("LLVM could not initialise the native target: {message}")]
    TargetInit { message: String },
    /// An environment variable smelt reads holds a value it does not accept.
    #[error("environment variable {variable}={value:?}: {message}")]
    Environment {
        variable: &'static str,
        value: String,
        message: String,
    },
    /// LLVM has no target machine for this triple, CPU and feature string.
    #[error("LLVM has no target machine for triple {triple:?}, cpu {cpu:?}, features {features:?}: {message}")]
    TargetMachine {
        triple: String,
        cpu: String,
        features: String,
        message: String,
    },
    /// Building IR with the inkwell builder failed (a bug in the code generator).
    #[error("building LLVM IR failed: {message}")]
    Build { message: String },
    /// LLVM IR text did not parse.
    #[error("LLVM IR of module {module:?} does not parse: {message}")]
    ParseIr { module: String, message: String },
    /// The module failed LLVM's verifier (a bug in the code generator).
    #[error("LLVM module {module:?} fails verification: {message}")]
    Verify { module: String, message: String },
    /// The optimisation pipeline failed.
    #[error("LLVM pipeline {pipeline:?} failed on module {module:?}: {message}")]
    Optimize {
        module: String,
        pipeline: String,
        message: String,
    },
    /// The JIT could not write the module as an object file, load it or resolve a function.
    #[error("LLVM JIT failed on module {module:?}: {message}")]
    Jit { module: String, message: String },
    /// The back end could not write the module as assembly text.
    #[error("LLVM could not write module {module:?} as assembly: {message}")]
    Assembly { module: String, message: String },
    /// A function the caller asked for is not defined by the JIT-compiled module.
    #[error("module {module:?} defines no function {name:?} (it defines: {defined:?})")]
    MissingSymbol {
        module: String,
        name: String,
        defined: Vec<String>,
    },
    /// The LLVM NVPTX path cannot generate code for this GPU architecture (not `sm_XY`, or
    /// older than the oldest it supports).
    #[error("LLVM NVPTX cannot compile for architecture {arch:?}: {message}")]
    NvptxArch { arch: String, message: String },
    /// A kernel uses something the LLVM NVPTX path cannot lower (e.g. a math function without
    /// libdevice); no PTX with an unresolved call is ever produced.
    #[error("LLVM NVPTX: kernel {kernel:?} uses {op}, which is not supported: {reason}")]
    Unsupported {
        kernel: String,
        op: String,
        reason: String,
    },
    /// libdevice could not be parsed or linked, or LLVM could not emit PTX.
    #[error("LLVM NVPTX: {message}")]
    Nvptx { message: String },
    /// `JitModule::function` was asked for a type that is not pointer-sized.
    #[error("function {name:?}: the requested type is {size} bytes, not a function pointer")]
    NotAFunctionPointer { name: String, size: usize },
}

#[cfg(feature = "llvm")]
impl From<inkwell::builder::BuilderError> for LlvmError {
    fn from(e: inkwell::builder::BuilderError) -> LlvmError {
        LlvmError::Build {
            message: e.to_string(),
        }
    }
}
