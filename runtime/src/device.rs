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
}

impl Device {
    /// Resolves `Auto` to the best device built into this binary and usable on this machine,
    /// and checks that an explicitly requested device is available.
    pub fn resolve(self) -> Result<Device> {
        match self {
            Device::Auto | Device::Reference => Ok(Device::Reference),
            Device::Cpu => Err(RuntimeError::DeviceNotAvailable {
                device: self,
                reason: "the fused CPU backend (LLVM JIT) is not built yet; \
                         use --device reference"
                    .into(),
            }),
            Device::Cuda(_) => Err(RuntimeError::DeviceNotAvailable {
                device: self,
                reason: "the CUDA backend is not built yet; use --device reference".into(),
            }),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Reference => f.write_str("reference"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for Device {
    type Err = RuntimeError;

    /// Parses `auto`, `reference`, `cpu`, `cuda` (device 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Device> {
        match s {
            "auto" => Ok(Device::Auto),
            "reference" | "ref" => Ok(Device::Reference),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
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
    fn unbuilt_devices_say_not_available() {
        let e = Device::Cpu.resolve().unwrap_err().to_string();
        assert!(e.contains("not available") && e.contains("cpu"), "{e}");
        assert_eq!(Device::Auto.resolve().unwrap(), Device::Reference);
    }
}
