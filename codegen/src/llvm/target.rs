//! The host target: LLVM's native target, initialised once, and target machines for it.

use super::error::{LlvmError, Result};
use super::options::{CpuTarget, HostTarget, MachineSchedule, OptLevel, MACHINE_SCHEDULE_VAR};
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;
use std::ffi::{c_char, CString};
use std::sync::OnceLock;

/// The full LLVM version this crate was built against (see `build.rs`).
pub const LLVM_VERSION: &str = env!("SMELT_LLVM_VERSION");

/// Initialises LLVM's native target, asm parser and printer, and sets the machine scheduler's
/// direction ([`machine_schedule`]), once per process, before anything compiles.
pub(crate) fn init_native() -> Result<()> {
    static INIT: OnceLock<Result<()>> = OnceLock::new();
    INIT.get_or_init(|| {
        Target::initialize_native(&InitializationConfig::default())
            .map_err(|message| LlvmError::TargetInit { message })?;
        if machine_schedule()? == MachineSchedule::TopDown {
            set_llvm_options(&["-misched-topdown"]);
        }
        Ok(())
    })
    .clone()
}

/// This process's [`MachineSchedule`]: [`MACHINE_SCHEDULE_VAR`] when set to other than
/// `auto`, else the default (computed once). A value it does not take, or one that is not
/// UTF-8, is an error naming the variable.
fn machine_schedule() -> Result<MachineSchedule> {
    static SCHEDULE: OnceLock<Result<MachineSchedule>> = OnceLock::new();
    SCHEDULE
        .get_or_init(|| match std::env::var(MACHINE_SCHEDULE_VAR) {
            Ok(value) => match MachineSchedule::from_var(&value) {
                Ok(chosen) => Ok(chosen.unwrap_or_default()),
                Err(message) => Err(LlvmError::Environment {
                    variable: MACHINE_SCHEDULE_VAR,
                    value,
                    message,
                }),
            },
            Err(std::env::VarError::NotPresent) => Ok(MachineSchedule::default()),
            Err(std::env::VarError::NotUnicode(raw)) => Err(LlvmError::Environment {
                variable: MACHINE_SCHEDULE_VAR,
                value: raw.to_string_lossy().into_owned(),
                message: format!(
                    "not valid UTF-8; expected one of {}, auto",
                    MachineSchedule::NAMES.join(", ")
                ),
            }),
        })
        .clone()
}

/// LLVM's name of the host CPU and its host feature string (computed once), for
/// [`host_target`].
fn host_cpu() -> &'static (String, String) {
    static CPU: OnceLock<(String, String)> = OnceLock::new();
    CPU.get_or_init(|| {
        (
            TargetMachine::get_host_cpu_name().to_string(),
            TargetMachine::get_host_cpu_features().to_string(),
        )
    })
}

/// Sets LLVM's process-wide command-line options `args` (`-name` or `-name=value`). Called
/// once, from [`init_native`]: LLVM refuses an option given a second time.
fn set_llvm_options(args: &[&str]) {
    let owned: Vec<CString> = ["smelt"]
        .iter()
        .chain(args)
        .map(|a| CString::new(*a).expect("LLVM option without NUL"))
        .collect();
    let argv: Vec<*const c_char> = owned.iter().map(|a| a.as_ptr()).collect();
    let overview = CString::default();
    // SAFETY: `argv` holds `argv.len()` pointers to NUL-terminated strings (`owned`) and
    // `overview` is one too, all alive for the call; LLVM copies what it keeps. Nothing else
    // reads LLVM's options meanwhile: this runs inside `init_native`'s `OnceLock`, before any
    // module is compiled. A malformed option would be reported to a null stream and ignored
    // (these are fixed and valid).
    unsafe {
        llvm_sys::support::LLVMParseCommandLineOptions(
            argv.len() as i32,
            argv.as_ptr(),
            overview.as_ptr(),
        )
    };
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
            cpu: host_cpu().0.clone(),
            features: host_cpu().1.clone(),
            schedule: machine_schedule()?,
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
