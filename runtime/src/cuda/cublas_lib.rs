//! The few cuBLAS functions the launch path calls, through smelt's own table.
//!
//! cudarc 0.19 (built with `cuda-12090`) looks cuBLAS up by bare names that stop at
//! `libcublas.so.12`: a CUDA 13 installation (`libcublas.so.13` only) is invisible to it, and
//! glibc does not match an already-loaded `libcublas.so.13` against those names. So, as for
//! NVRTC, smelt opens the probed file itself (`find_cublas`: `SMELT_CUBLAS_LIB`, tool folders,
//! the system) and resolves the five functions it needs from that very file. The ABI of these
//! functions and the enum values used are the same in cuBLAS 11, 12 and 13.

use super::error::{CudaComponent, CudaError, CudaResult};
use super::probe::{find_cublas, LibraryLocation, ProbeConfig};
use std::ffi::{c_int, c_longlong, c_void};
use std::sync::OnceLock;

pub type Handle = *mut c_void;
type Status = c_int;

type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type DestroyFn = unsafe extern "C" fn(Handle) -> Status;
type SetStreamFn = unsafe extern "C" fn(Handle, *mut c_void) -> Status;
type SetMathModeFn = unsafe extern "C" fn(Handle, c_int) -> Status;
type GetVersionFn = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
#[allow(clippy::type_complexity)]
type GemmStridedBatchedExFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    c_int,
    c_int,
    c_longlong,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_longlong,
    c_int,
    c_int,
    c_int,
) -> Status;

/// `cudaDataType_t` values.
pub mod data_type {
    pub const R_32F: i32 = 0;
    pub const R_64F: i32 = 1;
    pub const R_16F: i32 = 2;
    pub const R_16BF: i32 = 14;
}

/// `cublasComputeType_t` values.
pub mod compute_type {
    pub const COMPUTE_32F: i32 = 68;
    pub const COMPUTE_64F: i32 = 70;
}

/// `CUBLAS_GEMM_DEFAULT`.
pub const GEMM_DEFAULT: i32 = -1;
/// `CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION`: no TF32, no
/// reduced-precision split-K reductions (f16/bf16 accumulate in f32 all the way).
pub const MATH_MODE: i32 = 16;

/// The loaded cuBLAS.
pub struct CublasLib {
    pub location: LibraryLocation,
    pub create: CreateFn,
    pub destroy: DestroyFn,
    pub set_stream: SetStreamFn,
    pub set_math_mode: SetMathModeFn,
    pub get_version: GetVersionFn,
    pub gemm_strided_batched_ex: GemmStridedBatchedExFn,
    // Keeps the function pointers above valid.
    _lib: libloading::Library,
}

impl std::fmt::Debug for CublasLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CublasLib")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl CublasLib {
    /// Opens the cuBLAS that `cfg` finds and resolves the functions.
    pub fn load(cfg: &ProbeConfig) -> CudaResult<CublasLib> {
        let location = find_cublas(cfg)?;
        // SAFETY: the probe already opened this file and found cublasCreate_v2 in it; loading
        // cuBLAS runs only its own initialisers.
        let lib = unsafe { libloading::Library::new(&location.path) }.map_err(|e| {
            CudaError::LoaderMismatch {
                component: CudaComponent::Cublas,
                path: location.path.clone(),
                env_var: "SMELT_CUBLAS_LIB",
                detail: format!("could not reopen it: {e}"),
            }
        })?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol has this C signature in every cuBLAS since 11 (cublas_api.h);
                // the pointer stays valid while `_lib` is held by the returned struct.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|_| {
                    CudaError::MissingSymbol {
                        component: CudaComponent::Cublas,
                        path: location.path.clone(),
                        symbol: $name,
                    }
                })?
            };
        }
        Ok(CublasLib {
            create: sym!("cublasCreate_v2"),
            destroy: sym!("cublasDestroy_v2"),
            set_stream: sym!("cublasSetStream_v2"),
            set_math_mode: sym!("cublasSetMathMode"),
            get_version: sym!("cublasGetVersion_v2"),
            gemm_strided_batched_ex: sym!("cublasGemmStridedBatchedEx"),
            location,
            _lib: lib,
        })
    }
}

/// The process-wide cuBLAS table, probed from the environment on first use (errors are kept).
pub fn cublas_lib() -> CudaResult<&'static CublasLib> {
    static LIB: OnceLock<CudaResult<CublasLib>> = OnceLock::new();
    LIB.get_or_init(|| CublasLib::load(&ProbeConfig::from_env()))
        .as_ref()
        .map_err(Clone::clone)
}

/// `cublasStatus_t` as text.
pub fn status_name(status: c_int) -> String {
    let name = match status {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "unknown cuBLAS status",
    };
    format!("{name} ({status})")
}
