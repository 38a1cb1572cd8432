//! Device selection.

use crate::error::{Result, RuntimeError};
use std::fmt;
use std::str::FromStr;

/// Where a compiled graph runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The best device available: a CUDA GPU, else the CPU backend, else the reference
    /// interpreter.
    #[default]
    Auto,
    /// The reference interpreter: op by op, unfused, slow, the definition of smelt's semantics.
    Reference,
    /// Fused kernels JIT-compiled for the host CPU.
    Cpu,
    /// Fused kernels on CUDA device `n`.
    Cuda(usize),
    /// The CUDA backend's kernels and launch plan run on the CPU by an emulator of CUDA's
    /// thread model (`cuda::emulate`; needs a C++ compiler, no GPU): for testing and
    /// debugging the CUDA C on machines without a GPU. Slow; never chosen by `Auto`.
    CudaEmulated,
}

impl Device {
    /// Resolves `Auto` to the best device built into this binary and usable on this machine,
    /// and checks that an explicitly requested device is available.
    pub fn resolve(self) -> Result<Device> {
        let cpu = crate::cpu::jit_target();
        match self {
            Device::Reference => Ok(Device::Reference),
            // A GPU when device 0 is usable and NVRTC (needed to compile for it) loads; else the
            // CPU JIT when it is compiled in; else the interpreter.
            Device::Auto => Ok(if auto_gpu() {
                Device::Cuda(0)
            } else if cpu.is_ok() {
                Device::Cpu
            } else {
                Device::Reference
            }),
            Device::Cpu => match cpu {
                Ok(_) => Ok(Device::Cpu),
                Err(e) => Err(RuntimeError::DeviceNotAvailable {
                    device: self,
                    reason: format!("{e}; use --device reference"),
                }),
            },
            // The driver loads, cuInit succeeds and device n exists; the reason names what is
            // missing otherwise (libcuda not found, cuInit's error, no device n).
            Device::Cuda(n) => match crate::cuda::cuda_device(n) {
                Ok(_) => Ok(Device::Cuda(n)),
                Err(e) => Err(RuntimeError::DeviceNotAvailable {
                    device: self,
                    reason: format!("{e}\nuse --device cpu or reference"),
                }),
            },
            Device::CudaEmulated => match crate::cuda::emulate::host_compiler(None) {
                Ok(_) => Ok(Device::CudaEmulated),
                Err(e) => Err(RuntimeError::DeviceNotAvailable {
                    device: self,
                    reason: e.to_string(),
                }),
            },
        }
    }
}

fn auto_gpu() -> bool {
    crate::cuda::cuda_device(0).is_ok() && crate::cuda::nvrtc().is_ok()
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Reference => f.write_str("reference"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::CudaEmulated => f.write_str("cuda-emulated"),
        }
    }
}

impl FromStr for Device {
    type Err = RuntimeError;

    /// Parses `auto`, `reference`, `cpu`, `cuda` (device 0), `cuda:N` or `cuda-emulated`.
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::Auto),
            "reference" | "ref" => Ok(Device::Reference),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            "cuda-emulated" | "cuda-emu" => Ok(Device::CudaEmulated),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| RuntimeError::UnknownDevice(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for d in [
            Device::Auto,
            Device::Reference,
            Device::Cpu,
            Device::Cuda(3),
            Device::CudaEmulated,
        ] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert!(matches!(
            "tpu".parse::<Device>(),
            Err(RuntimeError::UnknownDevice(_))
        ));
    }

    #[test]
    fn auto_picks_the_gpu_else_the_cpu_jit_when_compiled_in() {
        let gpu = crate::cuda::cuda_device(0).is_ok();
        match Device::Cuda(0).resolve() {
            Ok(d) => assert!(gpu && d == Device::Cuda(0)),
            Err(e) => {
                let e = e.to_string();
                assert!(!gpu);
                assert!(e.contains("not available") && e.contains("cuda:0"), "{e}");
                // Without a driver the reason names libcuda; with one, cuInit or the device.
                assert!(
                    e.contains("libcuda") || e.contains("cuInit") || e.contains("no CUDA device"),
                    "{e}"
                );
            }
        }
        let want = if auto_gpu() {
            Device::Cuda(0)
        } else if cfg!(feature = "llvm") {
            Device::Cpu
        } else {
            Device::Reference
        };
        assert_eq!(Device::Auto.resolve().unwrap(), want);
        assert_eq!(Device::Cpu.resolve().is_ok(), cfg!(feature = "llvm"));
    }

    #[test]
    fn a_missing_device_number_is_named() {
        if let Err(e) = Device::Cuda(4096).resolve() {
            let e = e.to_string();
            assert!(e.contains("cuda:4096"), "{e}");
        } else {
            panic!("no machine has 4097 GPUs");
        }
    }
}
