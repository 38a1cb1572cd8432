//! The host target: LLVM's native target, initialised once, and target machines for it.

use super::error::{LlvmError, Result};
use super::options::{CpuTarget, HostTarget, OptLevel};
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;
use std::sync::OnceLock;

/// The full LLVM version this crate was built against (see `build.rs`).
pub const LLVM_VERSION: &str = env!("SMELT_LLVM_VERSION");

/// Initialises LLVM's native target, asm parser and printer, once per process.
pub(crate) fn init_native() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    INIT.get_or_init(|| {
        Target::initialize_native(&InitializationConfig::default())
            .map_err(|message| LlvmError::TargetInit { message })
    })
    .clone()
}

/// The LLVM version, host triple, host CPU name and host feature string (computed once).
/// This is what a kernel cache key records about the compiler and the machine.
pub fn host_target() -> Result<&'static HostTarget> {
    static HOST: OnceLock<Result<HostTarget>> = OnceLock::new();
    HOST.get_or_init(|| {
        init_native()?;
        Ok(HostTarget {
            llvm_version: LLVM_VERSION.to_string(),
            triple: TargetMachine::get_default_triple()
                .as_str()
                .to_string_lossy()
                .into_owned(),
            cpu: TargetMachine::get_host_cpu_name().to_string(),
            features: TargetMachine::get_host_cpu_features().to_string(),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The CPU name and feature string that `target` stands for.
pub(crate) fn cpu_and_features(target: &CpuTarget) -> Result<(String, String)> {
    Ok(match target {
        CpuTarget::Host => {
            let host = host_target()?;
            (host.cpu.clone(), host.features.clone())
        }
        CpuTarget::Named { cpu, features } => (cpu.clone(), features.clone()),
    })
}

/// A target machine for the host triple with `cpu` and `features`, used for the data layout and
/// for the optimiser's cost model (vector widths).
pub(crate) fn target_machine(cpu: &str, features: &str, opt: OptLevel) -> Result<TargetMachine> {
    init_native()?;
    let triple = TargetMachine::get_default_triple();
    let fail = |triple: &TargetTriple, message: String| LlvmError::TargetMachine {
        triple: triple.as_str().to_string_lossy().into_owned(),
        cpu: cpu.to_string(),
        features: features.to_string(),
        message,
    };
    let target = Target::from_triple(&triple).map_err(|e| fail(&triple, e.to_string()))?;
    target
        .create_target_machine(
            &triple,
            cpu,
            features,
            llvm_opt_level(opt),
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| fail(&triple, "LLVMCreateTargetMachine returned null".into()))
}

pub(crate) fn llvm_opt_level(opt: OptLevel) -> OptimizationLevel {
    match opt {
        OptLevel::O0 => OptimizationLevel::None,
        OptLevel::O1 => OptimizationLevel::Less,
        OptLevel::O2 => OptimizationLevel::Default,
        OptLevel::O3 => OptimizationLevel::Aggressive,
    }
}
