//! Finding the CUDA pieces on this machine: NVRTC, the driver, cuBLAS, the headers, ptxas.
//!
//! Probing only looks and `dlopen`s; it never calls into CUDA and never panics. The search order
//! for each component (first hit wins) is:
//!
//! 1. its environment variable (`SMELT_NVRTC_LIB`, `SMELT_CUDA_DRIVER_LIB`, `SMELT_CUBLAS_LIB`,
//!    `SMELT_CUDA_INCLUDE`, `SMELT_PTXAS`). When set, it is the only place looked at: a wrong
//!    override is an error, not a silent fall-back.
//! 2. the tool folders: `$SMELT_CUDA_HOME`, then a `.cuda/` folder (made by
//!    `scripts/install-cuda-tools.sh`) in the source checkout smelt was built from, or next to
//!    an ancestor of the running executable or of the current directory. Inside one the PyPI
//!    wheels' layouts are used: CUDA 12's one folder per wheel (`nvidia/cuda_nvrtc/lib`,
//!    `nvidia/cuda_runtime/include`, `nvidia/cuda_nvcc/bin`, `nvidia/cublas/lib`), then CUDA
//!    13's shared tree (`nvidia/cu13/lib`, `nvidia/cu13/include`, `nvidia/cu13/bin`), so a
//!    tool folder may hold either release (see [`WHEEL_LAYOUTS`]).
//! 3. the system: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`, then the dynamic loader's own
//!    search (`LD_LIBRARY_PATH`, `ld.so.cache`) by library name, then `$PATH` for ptxas.

use super::error::{Attempt, CudaComponent, CudaError, CudaResult};
use std::path::{Path, PathBuf};

/// Where a probe looks. [`ProbeConfig::from_env`] is what smelt uses; tests build their own.
#[derive(Debug, Clone, Default)]
pub struct ProbeConfig {
    /// Exact NVRTC library (`SMELT_NVRTC_LIB`).
    pub nvrtc_lib: Option<PathBuf>,
    /// Exact driver library (`SMELT_CUDA_DRIVER_LIB`).
    pub driver_lib: Option<PathBuf>,
    /// Exact cuBLAS library (`SMELT_CUBLAS_LIB`).
    pub cublas_lib: Option<PathBuf>,
    /// Folder holding `cuda_fp16.h` (`SMELT_CUDA_INCLUDE`).
    pub include_dir: Option<PathBuf>,
    /// The ptxas executable (`SMELT_PTXAS`).
    pub ptxas: Option<PathBuf>,
    /// Folders laid out like `.cuda/` (the PyPI wheels' `nvidia/...` tree), in order.
    pub tool_dirs: Vec<PathBuf>,
    /// Also search the system (CUDA_HOME, /usr/local/cuda, the loader path, PATH).
    pub system: bool,
}

/// How a component was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundVia {
    EnvVar(&'static str),
    ToolDir(PathBuf),
    System,
}

/// A library that opened with `dlopen` and exports the symbol its probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryLocation {
    pub component: CudaComponent,
    /// A full path, or a bare name (`libcuda.so.1`) resolved by the system loader.
    pub path: PathBuf,
    pub via: FoundVia,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl ProbeConfig {
    /// The configuration smelt uses: environment variables, the `.cuda/` folders, the system.
    pub fn from_env() -> Self {
        let mut tool_dirs = Vec::new();
        let mut push = |p: PathBuf| {
            if p.is_dir() && !tool_dirs.contains(&p) {
                tool_dirs.push(p);
            }
        };
        if let Some(home) = env_path("SMELT_CUDA_HOME") {
            push(home);
        }
        // The checkout this crate was built from (runtime/../.cuda): tests and dev builds.
        if let Some(root) = Path::new(env!("CARGO_MANIFEST_DIR")).parent() {
            push(root.join(".cuda"));
        }
        let exe = std::env::current_exe().ok();
        let cwd = std::env::current_dir().ok();
        for start in exe.iter().chain(cwd.iter()) {
            for dir in start.ancestors() {
                push(dir.join(".cuda"));
            }
        }
        ProbeConfig {
            nvrtc_lib: env_path("SMELT_NVRTC_LIB"),
            driver_lib: env_path("SMELT_CUDA_DRIVER_LIB"),
            cublas_lib: env_path("SMELT_CUBLAS_LIB"),
            include_dir: env_path("SMELT_CUDA_INCLUDE"),
            ptxas: env_path("SMELT_PTXAS"),
            tool_dirs,
            system: true,
        }
    }

    fn system_roots(&self) -> Vec<PathBuf> {
        if !self.system {
            return Vec::new();
        }
        let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
            .iter()
            .filter_map(|v| env_path(v))
            .collect();
        roots.push(PathBuf::from("/usr/local/cuda"));
        roots
    }
}

/// Where the PyPI wheels put each piece inside a tool folder, in the order searched: CUDA 12's
/// wheels (`nvidia-cuda-nvrtc-cu12`, …) each have a folder of their own, CUDA 13's
/// (`nvidia-cuda-nvrtc` 13.x, `nvidia-cuda-runtime`, `nvidia-cuda-nvcc`, `nvidia-nvvm`,
/// `nvidia-cublas`) share `nvidia/cu13`. The `nvvm/libdevice` folder the LLVM path reads sits
/// beside `bin/` in both (`../nvvm` from ptxas).
pub struct WheelLayout {
    pub nvrtc_lib: &'static str,
    pub cublas_lib: &'static str,
    pub include: &'static str,
    pub ptxas: &'static str,
}

/// The layouts a tool folder is searched in, CUDA 12's first (what
/// `scripts/install-cuda-tools.sh` installs into `.cuda/`).
pub const WHEEL_LAYOUTS: [WheelLayout; 2] = [
    WheelLayout {
        nvrtc_lib: "nvidia/cuda_nvrtc/lib",
        cublas_lib: "nvidia/cublas/lib",
        include: "nvidia/cuda_runtime/include",
        ptxas: "nvidia/cuda_nvcc/bin/ptxas",
    },
    WheelLayout {
        nvrtc_lib: "nvidia/cu13/lib",
        cublas_lib: "nvidia/cu13/lib",
        include: "nvidia/cu13/include",
        ptxas: "nvidia/cu13/bin/ptxas",
    },
];

/// What each library probe looks for.
struct LibSpec {
    component: CudaComponent,
    env_var: &'static str,
    /// The sub-folder of a tool dir holding the library in a wheel layout (`None`: no PyPI
    /// wheel ships it).
    wheel_dir: Option<fn(&WheelLayout) -> &'static str>,
    /// Extra system folders, beyond the CUDA roots.
    system_dirs: &'static [&'static str],
    /// File names, most preferred first; also the bare names given to the loader.
    names: &'static [&'static str],
    /// A symbol the library must export.
    symbol: &'static str,
}

const NVRTC: LibSpec = LibSpec {
    component: CudaComponent::Nvrtc,
    env_var: "SMELT_NVRTC_LIB",
    wheel_dir: Some(|l| l.nvrtc_lib),
    system_dirs: &[],
    names: &["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"],
    symbol: "nvrtcVersion",
};

const DRIVER: LibSpec = LibSpec {
    component: CudaComponent::Driver,
    env_var: "SMELT_CUDA_DRIVER_LIB",
    wheel_dir: None,
    // The driver is installed with the kernel module, not the toolkit (WSL keeps it apart).
    system_dirs: &[
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib/wsl/lib",
    ],
    names: &["libcuda.so.1", "libcuda.so"],
    symbol: "cuDriverGetVersion",
};

const CUBLAS: LibSpec = LibSpec {
    component: CudaComponent::Cublas,
    env_var: "SMELT_CUBLAS_LIB",
    wheel_dir: Some(|l| l.cublas_lib),
    system_dirs: &[],
    names: &["libcublas.so.12", "libcublas.so.13", "libcublas.so"],
    symbol: "cublasCreate_v2",
};

/// An error and its sources on one line (libloading keeps dlerror's text in the source).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Tries to open `target` (a path or a bare name) and find `spec.symbol` in it.
fn try_open(spec: &LibSpec, target: &Path) -> Result<(), String> {
    if target.components().count() > 1 && !target.exists() {
        return Err("no such file".into());
    }
    // SAFETY: opening a CUDA library runs its initialisers; the NVIDIA libraries probed here
    // have no initialisers with preconditions. The handle is dropped (dlclose) at the end of
    // this function and no symbol obtained from it outlives it.
    let lib = unsafe { libloading::Library::new(target) }.map_err(|e| error_chain(&e))?;
    // SAFETY: the symbol is only looked up, never called, so its type does not matter.
    let sym = unsafe { lib.get::<unsafe extern "C" fn()>(spec.symbol.as_bytes()) };
    match sym {
        Ok(_) => Ok(()),
        Err(_) => Err(format!("opens, but has no symbol {}", spec.symbol)),
    }
}

fn probe_library(
    spec: &LibSpec,
    explicit: Option<&Path>,
    cfg: &ProbeConfig,
) -> CudaResult<LibraryLocation> {
    let mut attempts = Vec::new();
    let found = |path: PathBuf, via: FoundVia| LibraryLocation {
        component: spec.component,
        path,
        via,
    };
    if let Some(path) = explicit {
        return match try_open(spec, path) {
            Ok(()) => Ok(found(path.to_path_buf(), FoundVia::EnvVar(spec.env_var))),
            Err(reason) => Err(CudaError::NotFound {
                component: spec.component,
                env_var: spec.env_var,
                attempts: vec![Attempt {
                    tried: format!("{} (from {})", path.display(), spec.env_var),
                    reason,
                }],
            }),
        };
    }
    // Folders first (tool dirs, then CUDA roots), then bare names for the system loader.
    let mut dirs: Vec<(PathBuf, FoundVia)> = Vec::new();
    if let Some(wheel_dir) = spec.wheel_dir {
        for dir in &cfg.tool_dirs {
            for layout in &WHEEL_LAYOUTS {
                dirs.push((dir.join(wheel_dir(layout)), FoundVia::ToolDir(dir.clone())));
            }
        }
    }
    for root in cfg.system_roots() {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            dirs.push((root.join(sub), FoundVia::System));
        }
    }
    if cfg.system {
        for dir in spec.system_dirs {
            dirs.push((PathBuf::from(dir), FoundVia::System));
        }
    }
    for (dir, via) in dirs {
        let present: Vec<PathBuf> = spec
            .names
            .iter()
            .map(|n| dir.join(n))
            .filter(|p| p.exists())
            .collect();
        if present.is_empty() {
            attempts.push(Attempt {
                tried: dir.display().to_string(),
                reason: format!("none of {}", spec.names.join(", ")),
            });
        }
        for path in present {
            match try_open(spec, &path) {
                Ok(()) => return Ok(found(path, via)),
                Err(reason) => attempts.push(Attempt {
                    tried: path.display().to_string(),
                    reason,
                }),
            }
        }
    }
    if cfg.system {
        for name in spec.names {
            match try_open(spec, Path::new(name)) {
                Ok(()) => return Ok(found(PathBuf::from(name), FoundVia::System)),
                Err(reason) => attempts.push(Attempt {
                    tried: format!("{name} (system loader)"),
                    reason,
                }),
            }
        }
    }
    Err(CudaError::NotFound {
        component: spec.component,
        env_var: spec.env_var,
        attempts,
    })
}

/// Finds NVRTC (`libnvrtc.so.12`, `.so.13` or `.so`).
pub fn find_nvrtc(cfg: &ProbeConfig) -> CudaResult<LibraryLocation> {
    probe_library(&NVRTC, cfg.nvrtc_lib.as_deref(), cfg)
}

/// Finds the CUDA driver library (`libcuda.so.1`). It comes with the NVIDIA kernel driver, not
/// with the toolkit, so on a machine without a GPU this is normally an error.
pub fn find_driver(cfg: &ProbeConfig) -> CudaResult<LibraryLocation> {
    probe_library(&DRIVER, cfg.driver_lib.as_deref(), cfg)
}

/// Finds cuBLAS (`libcublas.so.12`, `.so.13` or `.so`).
pub fn find_cublas(cfg: &ProbeConfig) -> CudaResult<LibraryLocation> {
    probe_library(&CUBLAS, cfg.cublas_lib.as_deref(), cfg)
}

/// Finds the folder holding `cuda_fp16.h` and `cuda_bf16.h`.
pub fn find_include_dir(cfg: &ProbeConfig) -> CudaResult<PathBuf> {
    let check = |dir: &Path| -> Result<(), String> {
        for h in ["cuda_fp16.h", "cuda_bf16.h"] {
            if !dir.join(h).is_file() {
                return Err(format!("no {h}"));
            }
        }
        Ok(())
    };
    find_path(
        CudaComponent::Headers,
        "SMELT_CUDA_INCLUDE",
        cfg.include_dir.as_deref(),
        cfg.tool_dirs
            .iter()
            .flat_map(|d| WHEEL_LAYOUTS.iter().map(|l| d.join(l.include))),
        cfg.system_roots()
            .into_iter()
            .map(|r| r.join("include"))
            .chain(cfg.system.then(|| PathBuf::from("/usr/include"))),
        check,
    )
}

/// Finds the `ptxas` executable.
pub fn find_ptxas(cfg: &ProbeConfig) -> CudaResult<PathBuf> {
    let path_dirs: Vec<PathBuf> = match (cfg.system, std::env::var_os("PATH")) {
        (true, Some(p)) => std::env::split_paths(&p).map(|d| d.join("ptxas")).collect(),
        _ => Vec::new(),
    };
    find_path(
        CudaComponent::Ptxas,
        "SMELT_PTXAS",
        cfg.ptxas.as_deref(),
        cfg.tool_dirs
            .iter()
            .flat_map(|d| WHEEL_LAYOUTS.iter().map(|l| d.join(l.ptxas))),
        cfg.system_roots()
            .into_iter()
            .map(|r| r.join("bin/ptxas"))
            .chain(path_dirs),
        |p: &Path| {
            if p.is_file() {
                Ok(())
            } else {
                Err("no such file".into())
            }
        },
    )
}

fn find_path(
    component: CudaComponent,
    env_var: &'static str,
    explicit: Option<&Path>,
    tool: impl Iterator<Item = PathBuf>,
    system: impl Iterator<Item = PathBuf>,
    check: impl Fn(&Path) -> Result<(), String>,
) -> CudaResult<PathBuf> {
    let mut attempts = Vec::new();
    if let Some(p) = explicit {
        return check(p)
            .map(|()| p.to_path_buf())
            .map_err(|reason| CudaError::NotFound {
                component,
                env_var,
                attempts: vec![Attempt {
                    tried: format!("{} (from {env_var})", p.display()),
                    reason,
                }],
            });
    }
    for p in tool.chain(system) {
        match check(&p) {
            Ok(()) => return Ok(p),
            Err(reason) => attempts.push(Attempt {
                tried: p.display().to_string(),
                reason,
            }),
        }
    }
    Err(CudaError::NotFound {
        component,
        env_var,
        attempts,
    })
}
