//! Assembling PTX with `ptxas`: a check that PTX (from NVRTC or from the LLVM NVPTX path) is
//! valid for a real architecture, without a GPU.

use super::compile::Arch;
use super::error::{CudaError, CudaResult};
use super::probe::{find_ptxas, ProbeConfig};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `ptxas` smelt would use (see [`find_ptxas`] for the search order).
pub fn ptxas_path() -> CudaResult<PathBuf> {
    find_ptxas(&ProbeConfig::from_env())
}

/// Assembles `ptx` for `arch` with the ptxas at `ptxas` and returns the cubin.
pub fn assemble_ptx_with(ptxas: &Path, ptx: &str, arch: Arch) -> CudaResult<Vec<u8>> {
    let dir = scratch_dir()?;
    let input = dir.path.join("kernel.ptx");
    let output = dir.path.join("kernel.cubin");
    std::fs::write(&input, ptx)
        .map_err(|e| CudaError::io(format!("writing {}", input.display()), &e))?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output()
        .map_err(|e| CudaError::io(format!("running {}", ptxas.display()), &e))?;
    if !out.status.success() {
        return Err(CudaError::Ptxas {
            arch: arch.to_string(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    std::fs::read(&output).map_err(|e| CudaError::io(format!("reading {}", output.display()), &e))
}

/// Assembles `ptx` for `arch` with the probed ptxas.
pub fn assemble_ptx(ptx: &str, arch: Arch) -> CudaResult<Vec<u8>> {
    assemble_ptx_with(&ptxas_path()?, ptx, arch)
}

/// A private temporary folder, removed on drop.
struct ScratchDir {
    path: PathBuf,
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn scratch_dir() -> CudaResult<ScratchDir> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("smelt-ptxas-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&path)
        .map_err(|e| CudaError::io(format!("creating {}", path.display()), &e))?;
    Ok(ScratchDir { path })
}
