//! What a JIT compilation is asked for, and what it compiled for. Plain data, present with and
//! without the `llvm` feature.

use std::fmt;

/// How hard LLVM optimises (the `default<ON>` pipeline of the new pass manager, and the
/// back end's optimisation level).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OptLevel {
    O0,
    O1,
    O2,
    /// Loop and SLP vectorisation, unrolling and interleaving on: what kernels use.
    #[default]
    O3,
}

impl fmt::Display for OptLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptLevel::O0 => "O0",
            OptLevel::O1 => "O1",
            OptLevel::O2 => "O2",
            OptLevel::O3 => "O3",
        })
    }
}

/// The CPU that machine code is generated for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuTarget {
    /// This machine: LLVM's host CPU name and host feature string.
    #[default]
    Host,
    /// A named CPU and feature string (e.g. `x86-64-v3`, `""`), for output that does not depend
    /// on the build machine (snapshots). Code JIT-compiled for it must run on this host: the
    /// caller picks a CPU the host supports.
    Named { cpu: String, features: String },
}

/// Options of one JIT compilation. Part of a kernel cache key, with [`HostTarget`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct JitOptions {
    pub opt_level: OptLevel,
    pub target: CpuTarget,
}

impl fmt::Display for JitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            CpuTarget::Host => write!(f, "{} host", self.opt_level),
            CpuTarget::Named { cpu, features } => {
                write!(f, "{} cpu={cpu} features={features}", self.opt_level)
            }
        }
    }
}

/// The compiler and the machine, as a kernel cache key needs them: a kernel compiled under one
/// `HostTarget` may be reused only under an equal one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostTarget {
    /// The full LLVM version, e.g. `14.0.6`.
    pub llvm_version: String,
    /// The host target triple, e.g. `x86_64-pc-linux-gnu`.
    pub triple: String,
    /// LLVM's name of the host CPU, e.g. `skylake-avx512`.
    pub cpu: String,
    /// LLVM's host feature string: comma-separated `+feature` / `-feature` entries.
    pub features: String,
}

impl HostTarget {
    /// One line holding every field, for hashing into a cache key.
    pub fn cache_key(&self) -> String {
        format!(
            "llvm {} triple {} cpu {} features {}",
            self.llvm_version, self.triple, self.cpu, self.features
        )
    }
}

impl fmt::Display for HostTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LLVM {} for {} ({})",
            self.llvm_version, self.triple, self.cpu
        )
    }
}
