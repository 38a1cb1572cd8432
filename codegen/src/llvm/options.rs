//! What a JIT compilation is asked for, and what it compiled for. Plain data, present with and
//! without the `llvm` feature.

use std::fmt;

/// Whether LLVM feature string `features` (`+avx512f,-avx512vl,…`) turns feature `name` on
/// (`Some(true)`) or off, read as LLVM reads it: the last `+name`/`-name` wins; `None` when it
/// does not name it.
pub(crate) fn feature(features: &str, name: &str) -> Option<bool> {
    features
        .rsplit(',')
        .filter_map(|t| Some((t.strip_prefix(['+', '-'])?, t.starts_with('+'))))
        .find(|(f, _)| *f == name)
        .map(|(_, plus)| plus)
}

/// What LLVM's `avx` implies: every SSE level (`X86.td`).
const AVX_NEEDS: [&str; 6] = ["sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2"];
/// What LLVM's `avx512f` implies besides [`AVX_NEEDS`].
const AVX512F_NEEDS: [&str; 4] = ["avx", "avx2", "fma", "f16c"];

/// Whether `features` turns none of `names` off.
fn none_off(features: &str, names: &[&str]) -> bool {
    names.iter().all(|f| feature(features, f) != Some(false))
}

/// Whether `features` has AVX as LLVM reads it: turned on, and no SSE level turned off
/// (turning one off turns AVX off too).
#[cfg(feature = "llvm")]
pub(crate) fn avx(features: &str) -> bool {
    feature(features, "avx") == Some(true) && none_off(features, &AVX_NEEDS)
}

/// Whether `features` has AVX-512F as LLVM reads it: turned on, and nothing it builds on
/// turned off (LLVM's `avx512f` implies AVX2, FMA, F16C, and through them AVX and every SSE
/// level, `X86.td`; turning one off turns AVX-512F off too).
pub(crate) fn avx512f(features: &str) -> bool {
    feature(features, "avx512f") == Some(true)
        && none_off(features, &AVX_NEEDS)
        && none_off(features, &AVX512F_NEEDS)
}

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

/// How kernels compute f32 `exp`, `tanh` and `erf` (and `sigmoid`, through `exp`). f64 math
/// and the other functions (`log`, `sin`, …) call the C library in either mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MathMode {
    /// Straight-line f32 polynomials (no memory tables, no f64, no branches) that vectorise
    /// to the full SIMD width. Worst errors against f64 math over all 2^32 f32 inputs on an
    /// FMA host (x86-64 with AVX-512; `erf` on AMD Zen 3 with AVX2): `exp` 0.89 ulp, `tanh`
    /// 1.07 ulp, `erf` 0.92 ulp; the tests hold them to 1, 1.5 and 1 ulp. That is within
    /// `torch.testing`'s f32 tolerances of PyTorch (whose vectorised functions do not match the C library bit for
    /// bit either).
    #[default]
    Polynomial,
    /// The C library's algorithms, bit for bit: `expf` and `tanhf` as glibc computes them,
    /// `erff` within an ulp of the `libm` crate's. The reference interpreter calls those
    /// functions, so kernels agree with it exactly; several times slower (f64 arithmetic,
    /// table lookups, divisions).
    Libm,
}

impl fmt::Display for MathMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MathMode::Polynomial => "polynomial",
            MathMode::Libm => "libm",
        })
    }
}

/// The default of [`JitOptions::nontemporal_min_bytes`] (16 MiB, past the per-core caches).
pub const NONTEMPORAL_MIN_BYTES: u64 = 16 << 20;

/// The default of [`JitOptions::prefetch_bytes`]: 2 KiB ahead (32 cache lines). On the
/// 2-core VM it was tuned on, 1, 2 and 4 KiB were equally good (within the noise) and all
/// far better than none.
pub const PREFETCH_BYTES: u32 = 2048;

/// How many rows ahead a row kernel prefetches ([`JitOptions::row_prefetch`]).
pub const ROW_PREFETCH_ROWS: u32 = 2;

/// The furthest a row kernel prefetches ([`JitOptions::row_prefetch`]): rows longer than
/// this are revisited from L2, not memory, by the passes after the first.
pub const ROW_PREFETCH_MAX_BYTES: u32 = 16 << 10;

/// How row kernels (a reduction stage, then passes that read the row again: softmax,
/// layer_norm) whose data does not fit in cache prefetch ([`JitOptions::row_prefetch`]). The
/// prefetches carry no data: values are the same bits under every choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RowPrefetch {
    /// By the target CPU ([`RowPrefetch::for_cpu`]): [`RowPrefetch::Off`] on AMD Zen 4 and
    /// later, [`RowPrefetch::Rows`] elsewhere.
    #[default]
    Auto,
    /// [`ROW_PREFETCH_ROWS`] rows ahead where that is further than
    /// [`JitOptions::prefetch_bytes`] (at most [`ROW_PREFETCH_MAX_BYTES`]): while a row is
    /// computed, its loads and stores request the next rows' lines, so memory stays busy
    /// during the passes over a row already in cache (`kernel/prefetch.rs`). Measured better
    /// on the Intel host: add + layer_norm over 65536 x 768 3–5% and softmax 11–12% faster
    /// than [`RowPrefetch::Module`] (BENCHMARKS.md).
    Rows,
    /// [`JitOptions::prefetch_bytes`] ahead, like every other kernel.
    Module,
    /// No software prefetch in row kernels: the hardware prefetchers alone fetch the rows.
    /// Measured better on the AMD EPYC (Zen 4) host, where add + layer_norm over 65536 x 768
    /// ran 1.17x–1.38x as fast as with rows ahead and softmax up to 12% faster, side by side
    /// (BENCHMARKS.md); not on the Zen 3 one, where rows ahead made softmax over 65536 x 768
    /// 1.25x–1.33x and add + layer_norm 4% as fast again.
    Off,
}

impl RowPrefetch {
    /// What [`RowPrefetch::Auto`] stands for on the CPU LLVM calls `cpu` with LLVM feature
    /// string `features` (the host's `TargetMachine::get_host_cpu_name` and
    /// `get_host_cpu_features`, e.g. `znver3` and `+avx2,…`): `Off` on AMD's Zen CPUs with
    /// AVX-512F (`znver*`, and AVX-512F as LLVM reads `features`, the reading `vscalefps`
    /// goes by: Zen 4 and later, which LLVM 14 names `znver3` like Zen 3), `Rows` elsewhere,
    /// Zen 3 included (measured on both, BENCHMARKS.md). Any other value stands for itself.
    pub fn for_cpu(self, cpu: &str, features: &str) -> RowPrefetch {
        match self {
            RowPrefetch::Auto if cpu.starts_with("znver") && avx512f(features) => RowPrefetch::Off,
            RowPrefetch::Auto => RowPrefetch::Rows,
            other => other,
        }
    }

    /// The names [`fmt::Display`] writes and [`std::str::FromStr`] reads.
    pub const NAMES: [&'static str; 4] = ["auto", "rows", "module", "off"];
}

impl fmt::Display for RowPrefetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowPrefetch::Auto => "auto",
            RowPrefetch::Rows => "rows",
            RowPrefetch::Module => "module",
            RowPrefetch::Off => "off",
        })
    }
}

impl std::str::FromStr for RowPrefetch {
    type Err = String;

    fn from_str(s: &str) -> Result<RowPrefetch, String> {
        Ok(match s {
            "auto" => RowPrefetch::Auto,
            "rows" => RowPrefetch::Rows,
            "module" => RowPrefetch::Module,
            "off" => RowPrefetch::Off,
            _ => {
                return Err(format!(
                    "unknown row prefetch {s:?}: expected one of {}",
                    RowPrefetch::NAMES.join(", ")
                ))
            }
        })
    }
}

/// The environment variable that sets [`MachineSchedule`]: `top-down`, `bottom-up` or `auto`
/// (the default, bottom up).
pub const MACHINE_SCHEDULE_VAR: &str = "SMELT_MACHINE_SCHEDULE";

/// In which direction LLVM's machine scheduler orders the instructions of each block. LLVM
/// reads this from a process-wide option, so it is one choice for every module a process
/// compiles, made when LLVM is first initialised: bottom up unless [`MACHINE_SCHEDULE_VAR`]
/// says otherwise. It is part of [`HostTarget`], and so of every kernel cache key. Values are
/// unchanged either way: only the order of independent instructions differs.
///
/// From the thirty-seventh to the thirty-ninth session it was top down on AMD Zen 3, which
/// keeps at most 64 floating-point operations waiting for their operands (llvm-mca's model of
/// it): a store loop with a long chain per vector (`tanh`, `erf`) filled that queue with
/// operations none of which could issue, and top down made the elementwise chain 1.26x and
/// bias-GELU 1.18x–1.21x as fast there. Since the fortieth session those bodies run in two
/// loops on Zen 3 ([`JitOptions::loop_fission`]), each carrying half the chain, and bottom up
/// suits them better: side by side in one process, the chain took 19.4 cycles per vector
/// against 20.2 top down in one loop (the thirty-ninth session's code), bias-GELU 23.2
/// against 24.6, `tanh` 15.8 against 17.4; top down with two loops took 20.5, 23.7 and 16.0.
/// The row kernels and the rest of `smelt bench` measured the same or faster bottom up
/// (BENCHMARKS.md, fortieth session).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MachineSchedule {
    /// LLVM's default on x86: bottom up, keeping register pressure low, which tends to finish
    /// one vector's chain of dependent operations before starting the next.
    #[default]
    BottomUp,
    /// Top down (LLVM's `-misched-topdown`): each instruction placed once its operands are on
    /// their way, which interleaves the chains of the vectors a store loop computes side by
    /// side, so more of the operations waiting in the CPU's scheduler are ready to issue.
    TopDown,
}

impl MachineSchedule {
    /// The schedule [`MACHINE_SCHEDULE_VAR`] holds (`value`), or `None` for `auto` (or an
    /// empty value); an error message naming the accepted values for anything else.
    pub fn from_var(value: &str) -> Result<Option<MachineSchedule>, String> {
        match value {
            "auto" | "" => Ok(None),
            other => other.parse().map(Some),
        }
    }

    /// The names [`fmt::Display`] writes and [`std::str::FromStr`] reads.
    pub const NAMES: [&'static str; 2] = ["bottom-up", "top-down"];
}

impl fmt::Display for MachineSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MachineSchedule::BottomUp => "bottom-up",
            MachineSchedule::TopDown => "top-down",
        })
    }
}

impl std::str::FromStr for MachineSchedule {
    type Err = String;

    fn from_str(s: &str) -> Result<MachineSchedule, String> {
        match s {
            "bottom-up" => Ok(MachineSchedule::BottomUp),
            "top-down" => Ok(MachineSchedule::TopDown),
            _ => Err(format!(
                "unknown machine schedule {s:?}: expected one of {}, auto",
                MachineSchedule::NAMES.join(", ")
            )),
        }
    }
}

/// The default [`JitOptions::interleave_vectors`].
pub const INTERLEAVE_VECTORS: u32 = 4;

/// Options of one JIT compilation. Part of a kernel cache key, with [`HostTarget`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JitOptions {
    pub opt_level: OptLevel,
    pub target: CpuTarget,
    pub math: MathMode,
    /// A kernel every buffer of which it writes is at least this many bytes, and one of whose
    /// store loops spans at least 256 bytes of its output (rows of 64 floats: shorter rows
    /// hold no whole group of four lines to stream), stores whole aligned 64-byte vectors (on
    /// AVX2, its contiguous main loops' aligned 32-byte pairs) with non-temporal (streaming)
    /// stores, which skip the read-for-ownership of each output cache line. Values are
    /// unchanged either way. Such a
    /// kernel writing a program output also gets a twin with plain stores
    /// (`kernel::has_plain_twin`), which the runtime calls to write outputs into memory it has
    /// just allocated. `None`: never.
    /// Default: `Some(`[`NONTEMPORAL_MIN_BYTES`]`)`; on the 2-core VM it was measured on,
    /// with row kernels prefetching rows ahead, streaming made the large row kernels and the
    /// elementwise chain 7–22% faster, and left bias-GELU and permute-add within ±4%
    /// (BENCHMARKS.md). `smelt::Options::no_streaming_stores` turns it off.
    pub nontemporal_min_bytes: Option<u64>,
    /// Kernels' vector loops prefetch each cache line they load or store this many bytes
    /// before they reach it (`kernel/prefetch.rs`), so that memory traffic overlaps the
    /// arithmetic of kernels that compute much per element. Values are unchanged either
    /// way. `None`: no software prefetch. Default: `Some(`[`PREFETCH_BYTES`]`)`.
    pub prefetch_bytes: Option<u32>,
    /// With software prefetch on, how a row kernel (a reduction stage and the passes that
    /// read its row again, e.g. softmax, layer_norm) whose data does not fit in cache
    /// prefetches: rows ahead, like other kernels, or not at all (see [`RowPrefetch`] and
    /// `kernel/prefetch.rs`). Values are unchanged either way. Default:
    /// [`RowPrefetch::Auto`], by the target CPU.
    pub row_prefetch: RowPrefetch,
    /// With row prefetch, a row kernel whose later stage computes a transcendental op
    /// (softmax's `exp`) still prefetches in its first pass (the max), as before the thirtieth
    /// session. By default it does not: the later, arithmetic-heavy pass alone requests the
    /// rows ahead, spread over its arithmetic (`kernel/prefetch.rs`). Values are unchanged
    /// either way. Default: off.
    pub first_pass_prefetch: bool,
    /// Row kernels over short rows in cache (which: `kernel::interleaves`) compute two
    /// points of their last outer dim at a time, stage by stage: the first row's max, the second's, the first row's sum,
    /// the second's, and so on, so that the two rows' chains of dependent passes overlap
    /// (`Emitter::interleaved_points` in `kernel.rs`). Each row is computed exactly as
    /// alone, so values are unchanged, bit for bit. Default: on.
    pub interleave_rows: bool,
    /// How many vectors the loop vectoriser computes side by side in each iteration of a
    /// kernel's store loops (elementwise bodies, and the last pass of row kernels), as
    /// `llvm.loop.interleave.count`, and how many 16-lane blocks a split reduction (the sums
    /// and maxima of softmax and layer_norm rows) computes per iteration of its block loop.
    /// `None`: the vectoriser's own choice for store loops, which is one for long bodies such
    /// as `tanh`'s, whose iterations are then a single chain of dependent instructions that
    /// the CPU's scheduler cannot hold enough of to keep its vector units busy; one block at a
    /// time for split reductions. A store loop whose body is long and has few constants gets
    /// twice the count where the target's registers hold them (AVX-512: the `tanh` chain
    /// computes eight vectors per iteration; `kernel/inflight.rs`). The blocks are combined in
    /// the same order either way, so values are unchanged, bit for bit. Default:
    /// `Some(`[`INTERLEAVE_VECTORS`]`)`.
    pub interleave_vectors: Option<u32>,
    /// Elementwise kernels that read an operand across its rows (a transpose: stride 1 along
    /// the second-to-last outer dim, a whole cache line or more along the last) compute
    /// square tiles of rows and columns, the operand's part of each tile read row by row and
    /// transposed in registers (`kernel/tile.rs`), instead of one element per cache line
    /// along each output row. Values are unchanged, bit for bit. Default: on.
    pub tile_transposes: bool,
    /// Whether elementwise kernels whose body holds an f32 `tanh` or `erf` run each block of
    /// 256 elements in two loops, cut in the middle of that op, with the values crossing the
    /// cut kept in L1 (`kernel/fission.rs`), so that each loop's iterations carry half as
    /// long a chain of dependent operations. Values are unchanged, bit for bit. Default:
    /// [`ByCpu::Auto`]: on AMD Zen 3 ([`zen3`]), where it was measured (BENCHMARKS.md,
    /// fortieth session), and nowhere else, where nothing was.
    pub loop_fission: ByCpu,
    /// Whether the f32 constants of kernels with a transcendental op (whose polynomials bring
    /// a dozen or two) are loads of globals holding them rather than LLVM constants
    /// (`Emitter::f32_constant`), which LLVM cannot rematerialise: on AVX2, with 16 vector
    /// registers and no instruction that takes a broadcast operand, LLVM otherwise broadcasts
    /// the constants of long bodies (`tanh`, `erf`, softmax's `exp`) again inside their
    /// loops, after an absolute address each (the JIT's large code model); as loads they are
    /// broadcast once before the loops and read back from the stack as memory operands where
    /// registers run out. On AMD Zen 3, side by side, bias-GELU ran 1.04x–1.12x and softmax
    /// 1.04x–1.09x as fast (add + layer_norm, which has no such op, 1.12x as slow when it
    /// was included). Values are unchanged, bit for bit. Default: [`ByCpu::Auto`]: on Zen 3
    /// ([`zen3`]), where it was measured, and nowhere else.
    pub constant_loads: ByCpu,
}

/// A code-generation choice made by the target CPU unless set ([`JitOptions::loop_fission`],
/// [`JitOptions::constant_loads`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ByCpu {
    /// On where the choice was measured better (each option says where), off elsewhere.
    #[default]
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl ByCpu {
    /// Whether the choice is on, `Auto` standing for `measured`: whether the target CPU is
    /// one where it was measured better.
    pub fn on(self, measured: bool) -> bool {
        match self {
            ByCpu::Auto => measured,
            ByCpu::On => true,
            ByCpu::Off => false,
        }
    }
}

impl fmt::Display for ByCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ByCpu::Auto => "auto",
            ByCpu::On => "on",
            ByCpu::Off => "off",
        })
    }
}

/// Whether the CPU LLVM calls `cpu` with LLVM feature string `features` is AMD Zen 3:
/// `znver3` without AVX-512F (read as LLVM reads `features`; LLVM 14 names Zen 4 `znver3`
/// too), where [`JitOptions::loop_fission`] and [`JitOptions::constant_loads`] were
/// measured.
pub fn zen3(cpu: &str, features: &str) -> bool {
    cpu == "znver3" && !avx512f(features)
}

impl Default for JitOptions {
    fn default() -> JitOptions {
        JitOptions {
            opt_level: OptLevel::default(),
            target: CpuTarget::default(),
            math: MathMode::default(),
            nontemporal_min_bytes: Some(NONTEMPORAL_MIN_BYTES),
            prefetch_bytes: Some(PREFETCH_BYTES),
            row_prefetch: RowPrefetch::Auto,
            first_pass_prefetch: false,
            interleave_rows: true,
            interleave_vectors: Some(INTERLEAVE_VECTORS),
            tile_transposes: true,
            loop_fission: ByCpu::Auto,
            constant_loads: ByCpu::Auto,
        }
    }
}

impl fmt::Display for JitOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            CpuTarget::Host => write!(f, "{} host math={}", self.opt_level, self.math)?,
            CpuTarget::Named { cpu, features } => write!(
                f,
                "{} cpu={cpu} features={features} math={}",
                self.opt_level, self.math
            )?,
        }
        match self.nontemporal_min_bytes {
            Some(n) => write!(f, " nontemporal>={n}")?,
            None => write!(f, " nontemporal=off")?,
        }
        match self.prefetch_bytes {
            Some(n) => write!(f, " prefetch={n}")?,
            None => write!(f, " prefetch=off")?,
        }
        if self.row_prefetch != RowPrefetch::Auto {
            write!(f, " row-prefetch={}", self.row_prefetch)?;
        }
        if self.first_pass_prefetch {
            write!(f, " first-pass-prefetch")?;
        }
        if !self.interleave_rows {
            write!(f, " interleave=off")?;
        }
        if let Some(n) = self.interleave_vectors {
            write!(f, " vectors={n}")?;
        }
        if !self.tile_transposes {
            write!(f, " tiles=off")?;
        }
        if self.loop_fission != ByCpu::Auto {
            write!(f, " fission={}", self.loop_fission)?;
        }
        if self.constant_loads != ByCpu::Auto {
            write!(f, " constant-loads={}", self.constant_loads)?;
        }
        Ok(())
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
    /// The machine scheduler's direction in this process.
    pub schedule: MachineSchedule,
}

impl HostTarget {
    /// One line holding every field, for hashing into a cache key.
    pub fn cache_key(&self) -> String {
        format!(
            "llvm {} triple {} cpu {} features {} schedule {}",
            self.llvm_version, self.triple, self.cpu, self.features, self.schedule
        )
    }
}

impl fmt::Display for HostTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LLVM {} for {} ({}, {} scheduling)",
            self.llvm_version, self.triple, self.cpu, self.schedule
        )
    }
}
