//! The memory plan of a CPU program: where each `Temp` buffer lives in one arena.
//!
//! Each `Temp` buffer is live from the first step that writes it to the last step that reads or
//! writes it (both inclusive); program outputs stay live to the end. Two buffers whose live
//! ranges overlap never share bytes, so the buffers one step reads and writes are disjoint
//! (what lets kernels mark their pointers `noalias`). Buffers are placed largest first (ties:
//! lower id first), each at the lowest 64-byte-aligned offset that overlaps no placed buffer
//! with an overlapping live range: a buffer whose last use has passed gives its bytes to later
//! ones. Deterministic: the same program gets the same plan.
//!
//! **Outputs are external.** Without red zones, a `Temp` buffer that is a program output gets no
//! arena bytes: like an input, it is memory bound per run (the caller's output tensor), so
//! kernels write results straight where the caller wants them and nothing is copied out
//! ([`MemoryPlan::external`]).
//!
//! With a red zone (tests), every buffer, outputs included, gets its own arena bytes plus
//! `red_zone` bytes after them (no reuse), so a write past a buffer lands in its red zone and is
//! detected; outputs are then copied out after the run.

use super::error::{CpuError, Result};
use smelt_passes::kernel::{BufferKind, Program, Step};
use std::sync::atomic::AtomicI32;

/// Alignment of every buffer in the arena, in bytes (a cache line; enough for any vector).
pub const ALIGN: usize = 64;

/// The byte red zones are filled with.
pub const POISON: u8 = 0xA5;

/// Where the `Temp` buffers of a program live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Byte offset of each buffer (indexed by `BufferId`); `None` for non-`Temp` buffers and
    /// external outputs.
    pub offsets: Vec<Option<usize>>,
    /// Whether each buffer is a `Temp` output bound to the caller's tensor at run time instead
    /// of living in the arena (never with red zones).
    pub external: Vec<bool>,
    /// Byte size of each buffer's slot, red zone and alignment padding included (0 for
    /// non-`Temp` buffers and external outputs).
    pub sizes: Vec<usize>,
    /// Byte size of each buffer's data (0 for non-`Temp` buffers and external outputs).
    pub bytes: Vec<usize>,
    /// Live range `(first step, last step)` of each `Temp` buffer.
    pub live: Vec<Option<(usize, usize)>>,
    /// The arena size: the highest end of any slot (red zones included).
    pub peak_bytes: usize,
    /// What the arena's buffers would take without reuse (aligned sizes summed).
    pub naive_bytes: usize,
    /// Bytes of red zone after each buffer (0: none).
    pub red_zone: usize,
}

fn align(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|x| x / ALIGN * ALIGN)
}

/// Plans the arena of `program`.
pub fn plan_memory(program: &Program, red_zone: usize) -> Result<MemoryPlan> {
    let n = program.buffers.len();
    let invalid = |reason: String| CpuError::InvalidProgram { reason };
    let mut live: Vec<Option<(usize, usize)>> = vec![None; n];
    let touch = |live: &mut Vec<Option<(usize, usize)>>, b: u32, step: usize, write: bool| {
        let Some(slot) = live.get_mut(b as usize) else {
            return Err(invalid(format!("step {step} uses unknown buffer {b}")));
        };
        match slot {
            Some((_, last)) => *last = step,
            None if write => *slot = Some((step, step)),
            None => {
                return Err(invalid(format!(
                    "step {step} reads buffer {b} before any step writes it"
                )))
            }
        }
        Ok(())
    };
    for (s, step) in program.steps.iter().enumerate() {
        let (reads, writes): (Vec<u32>, Vec<u32>) = match step {
            Step::Kernel(k) => (
                k.reads.iter().map(|b| b.0).collect(),
                k.writes.iter().map(|b| b.0).collect(),
            ),
            Step::Gemm(g) => (vec![g.a.buffer.0, g.b.buffer.0], vec![g.out.0]),
        };
        for b in writes {
            if is_temp(program, b) {
                touch(&mut live, b, s, true)?;
            }
        }
        for b in reads {
            if is_temp(program, b) {
                touch(&mut live, b, s, false)?;
            }
        }
    }
    let end = program.steps.len();
    for (_, b) in &program.outputs {
        if let Some(Some((_, last))) = live.get_mut(b.0 as usize) {
            *last = end;
        }
    }
    let mut external = vec![false; n];
    if red_zone == 0 {
        for (_, b) in &program.outputs {
            if is_temp(program, b.0) {
                external[b.0 as usize] = true;
            }
        }
    }
    let mut sizes = vec![0usize; n];
    let mut data_bytes = vec![0usize; n];
    let mut order = Vec::new();
    let mut naive = 0usize;
    for (i, d) in program.buffers.iter().enumerate() {
        if d.kind != BufferKind::Temp || external[i] {
            continue;
        }
        let exact = d.numel.checked_mul(d.dtype.size_bytes());
        data_bytes[i] = exact.unwrap_or(0);
        let bytes = exact
            .and_then(|b| b.checked_add(red_zone))
            .and_then(align)
            .ok_or_else(|| CpuError::Overflow {
                op: "memory plan",
                what: format!("the size of buffer {i}"),
            })?;
        sizes[i] = bytes;
        naive = naive.saturating_add(bytes);
        if live[i].is_none() {
            // Written by no step: still given memory (an output that is never computed reads
            // as zeros), live for the whole program.
            live[i] = Some((0, end));
        }
        order.push(i);
    }
    let (offsets, peak) =
        first_fit(order, &sizes, &live, red_zone == 0).ok_or_else(|| CpuError::Overflow {
            op: "memory plan",
            what: "the arena size".into(),
        })?;
    Ok(MemoryPlan {
        offsets,
        external,
        sizes,
        bytes: data_bytes,
        live,
        peak_bytes: peak,
        naive_bytes: naive,
        red_zone,
    })
}

/// First-fit placement, shared by the CPU arena and the CUDA launch plan: the buffers in `order`
/// are placed largest first (ties: lower index), each at the lowest offset that overlaps no
/// placed buffer whose live range overlaps its own (with `reuse` off: no placed buffer at all).
/// `sizes` are already aligned, so every offset is too; a buffer without a live range is live
/// throughout. Returns each buffer's offset (`None` for buffers not in `order`) and the highest
/// end, or `None` if that overflows.
pub(crate) fn first_fit(
    mut order: Vec<usize>,
    sizes: &[usize],
    live: &[Option<(usize, usize)>],
    reuse: bool,
) -> Option<(Vec<Option<usize>>, usize)> {
    let range = |i: usize| live[i].unwrap_or((0, usize::MAX));
    order.sort_by_key(|&i| (std::cmp::Reverse(sizes[i]), i));
    let mut offsets: Vec<Option<usize>> = vec![None; sizes.len()];
    let mut placed: Vec<(usize, usize, usize)> = Vec::new(); // (offset, size, buffer)
    let mut peak = 0usize;
    for i in order {
        let (s, e) = range(i);
        let mut clash: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&(_, _, j)| {
                let (s2, e2) = range(j);
                !reuse || !(e2 < s || e < s2)
            })
            .map(|&(o, sz, _)| (o, sz))
            .collect();
        clash.sort_unstable();
        let mut offset = 0usize;
        for (o, sz) in clash {
            if o >= offset.saturating_add(sizes[i]) {
                break;
            }
            offset = offset.max(o.saturating_add(sz));
        }
        peak = peak.max(offset.checked_add(sizes[i])?);
        offsets[i] = Some(offset);
        placed.push((offset, sizes[i], i));
    }
    Some((offsets, peak))
}

fn is_temp(program: &Program, b: u32) -> bool {
    program
        .buffers
        .get(b as usize)
        .is_some_and(|d| d.kind == BufferKind::Temp)
}

/// Per-run scratch: the arena and pointer tables, reused across runs.
pub(crate) struct Arena {
    pub(crate) mem: Vec<Line>,
    pub(crate) ptrs: Vec<*mut u8>,
    pub(crate) args: Vec<*mut u8>,
    pub(crate) status: AtomicI32,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; ALIGN]);

/// `n` zero lines from the allocator's zeroed allocation, without writing them: a large arena
/// is then mapped but not touched, and its pages are faulted in by the first run rather than
/// by the compile (`vec![line; n]` writes every line, as `Line` is not a type `vec!` knows to
/// be zero). On a VM whose memory the host backs lazily, faulting in a fresh 1–2 GB arena cost
/// the unfused bias-GELU 65536x768 plan 0.6–3.5 s of compile time.
fn zeroed_lines(n: usize) -> Vec<Line> {
    if n == 0 {
        return Vec::new();
    }
    let layout = match std::alloc::Layout::array::<Line>(n) {
        Ok(l) => l,
        Err(_) => panic!("an arena of {n} cache lines overflows the address space"),
    };
    // SAFETY: `layout` has a non-zero size. The memory is zeroed, and all-zero bytes are a
    // valid `Line` (plain bytes), so the `n` elements are initialised; it was allocated by
    // the global allocator with `Vec<Line>`'s layout for capacity `n`, as `from_raw_parts`
    // requires.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<Line>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(p, n, n)
    }
}

// SAFETY: the raw pointers in `ptrs`/`args` are scratch, rewritten at the start of every run
// and dereferenced only during a run by the thread holding the arena (and the pool threads it
// waits for); between runs they are never read.
unsafe impl Send for Arena {}

impl Arena {
    pub(crate) fn new(plan: &MemoryPlan, buffers: usize, max_args: usize) -> Arena {
        let lines = plan.peak_bytes.div_ceil(ALIGN);
        let mem = if plan.red_zone > 0 {
            vec![Line([POISON; ALIGN]); lines]
        } else {
            zeroed_lines(lines)
        };
        Arena {
            mem,
            ptrs: vec![std::ptr::null_mut(); buffers],
            args: Vec::with_capacity(max_args + 1),
            status: AtomicI32::new(0),
        }
    }

    pub(crate) fn base(&mut self) -> *mut u8 {
        self.mem.as_mut_ptr().cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An arena's lines come zeroed and cache-line aligned, from none to a mapped 64 MiB.
    #[test]
    fn zeroed_lines_are_zero_and_aligned() {
        for n in [0usize, 1, 3, 1 << 20] {
            let v = zeroed_lines(n);
            assert_eq!(v.len(), n);
            assert_eq!(v.as_ptr() as usize % ALIGN, 0);
            assert!(v.iter().step_by(4093).all(|l| l.0 == [0; ALIGN]));
            assert!(v.last().is_none_or(|l| l.0 == [0; ALIGN]));
        }
    }
}
