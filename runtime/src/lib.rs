//! smelt's runtime: devices, argument binding, and (in later issues) kernel caches, memory
//! planning and launches.
//!
//! Today only the reference device exists: it runs graphs through the reference interpreter
//! (`smelt_ir::interp`). `Device::Cpu` and `Device::Cuda(n)` are named so that callers can ask
//! for them; they answer [`RuntimeError::DeviceNotAvailable`] until their backends land.

mod bindings;
mod device;
mod error;

pub use bindings::check_bindings;
pub use device::Device;
pub use error::{Result, RuntimeError};
