//! [`LargeAligned`]: a global allocator that gives allocations of a page or more (tensors)
//! 64-byte alignment, which a binary opts into with one line:
//!
//! ```
//! #[global_allocator]
//! static ALLOC: smelt_runtime::alloc::LargeAligned = smelt_runtime::alloc::LargeAligned;
//!
//! fn main() {
//!     let v = vec![0.0f32; 1 << 20];
//!     assert_eq!(v.as_ptr() as usize % 64, 0);
//! }
//! ```
//!
//! (`smelt::LargeAligned` is the same type; the `smelt` command-line tool uses it.)
//!
//! Why: a `HostTensor` holds a `Vec`, whose memory comes from the global allocator with the
//! element type's alignment. glibc serves a large request from a chunk whose data starts 16
//! bytes past a page boundary, so every large tensor starts 16 bytes into a cache line. A
//! memory-bound kernel then pays on every row: its streaming stores start and end mid-line, so
//! the first and last lines of each row are written with plain stores (a read of the line
//! first), and its row loops peel and finish in scalar and half-width code. Measured on the
//! 2-core development VM (BENCHMARKS.md), fused `x * 1.5` over 65536 x 768 ran at 26.7 GB/s on
//! such tensors and 35.0 GB/s on 64-byte-aligned ones; softmax 24.1 and 26.2. Smaller tensors
//! in cache pay too, on every vector load and store that straddles two lines, and by how much
//! depended on where the heap happened to place them: with only blocks of ≥ 1 MiB aligned
//! (before the thirtieth session), fused softmax over 1536 x 128 (786 KB) took 24.3–29.1 µs
//! from run to run and add + layer_norm over 128 x 768 14.3–16.8 µs; with every block of a
//! page or more aligned, 25.2–27.3 and 13.4–14.2 µs (Intel host, BENCHMARKS.md). PyTorch's CPU
//! allocator aligns every tensor to 64 bytes for the same reason.
//!
//! What it does: a request of at least [`LARGE`] bytes whose alignment is at most a page gets
//! 64-byte-aligned memory; one of at least [`MAPPED`] bytes is mapped straight from the OS
//! (`mmap`, page-aligned and zero-filled on first touch, as glibc maps such requests itself), so
//! a zeroed large tensor (`vec![0.0; n]`, `HostTensor::zeros`) still costs no writes up
//! front; between the two, the system allocator's aligned allocation (reused across
//! allocations as glibc's heap reuses memory). Everything else goes to [`System`] unchanged.
//! Which way a block went is a function of its `Layout` alone, so `dealloc` and `realloc`
//! find it again. On targets without `mmap` (not Unix) the mapped range uses the system
//! allocator too, with the same alignment.
//!
//! A freed mapping is not always returned to the OS at once: up to [`BLOCK_CACHE_LIMIT`]
//! bytes of them (8 blocks at most; [`set_block_cache_limit`]) are kept for the next `alloc`
//! of exactly their size, for at most [`BLOCK_CACHE_KEEP`]. Every page of a fresh mapping
//! costs a page fault and the kernel's zeroing on first touch, which for a 64 MiB output
//! took longer than the fused kernel writing it: with the fresh outputs of `run` coming from
//! kept blocks (and not zeroed first, as the run writes them whole), `run` over 16M floats
//! went from 8.0 to 3.9 ms on the development VM, the time of `run_into` (BENCHMARKS.md).
//! `alloc_zeroed` never takes a kept block: it maps zero pages as before.
//!
//! On Linux each mapping also asks for transparent huge pages (`madvise(MADV_HUGEPAGE)`;
//! [`set_huge_pages`] turns that off): with 4 KiB pages a kernel streaming through a tensor
//! misses the TLB every 4 KiB. On the development VM (THP mode `madvise`, so nothing gets huge
//! pages unasked) the large fused cases ran 8–25% faster on them, the copy-bandwidth reference
//! 10% (BENCHMARKS.md). The kernel grants the advice where it finds free 2 MiB pages (with
//! the default `defrag` setting it compacts memory for them on a page fault); a mapping that
//! does not start on a 2 MiB boundary keeps its first and last partial 2 MiB on small pages.
//! [`mapping_of`] reads back what a mapping got.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests of at least this many bytes are aligned to [`ALIGN`] (4 KiB, a page: any tensor
/// a kernel spends measurable time on; below it, strings and small vectors keep the system
/// allocator's plain route, its in-place `realloc` included).
pub const LARGE: usize = 4 << 10;

/// Requests of at least this many bytes are mapped from the OS (32 MiB: glibc maps every
/// request this large itself, so this changes only where the data starts in the mapping).
pub const MAPPED: usize = 32 << 20;

/// The alignment of large blocks: a cache line (and an AVX-512 vector).
pub const ALIGN: usize = 64;

/// The largest alignment a request may ask for and still be treated here (larger ones go to
/// the system allocator as they are). A mapping is aligned to the page, at least this.
const PAGE: usize = 4096;

/// Whether new mappings ask for transparent huge pages ([`set_huge_pages`]).
static HUGE_PAGES: AtomicBool = AtomicBool::new(true);

/// Whether blocks mapped from now on (at least [`MAPPED`] bytes) ask the kernel for
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`, Linux; the default), and so do the
/// fresh outputs of `run` (`cpu::pages`, ≥ 4 MiB, with any global allocator). Blocks already
/// mapped keep what they were given. For measuring what huge pages buy (`smelt bench
/// --no-huge-pages`), or for a program that must never wait on the kernel compacting memory
/// to find a huge page.
pub fn set_huge_pages(on: bool) {
    HUGE_PAGES.store(on, Ordering::Relaxed);
    // Kept blocks have the old setting's advice; new ones are mapped with the new one.
    release_older(&mut lock_kept(), Duration::ZERO);
}

/// Whether blocks mapped from now on ask for transparent huge pages ([`set_huge_pages`]).
pub fn huge_pages() -> bool {
    HUGE_PAGES.load(Ordering::Relaxed)
}

/// Held by the unit tests that flip [`set_huge_pages`] or [`set_block_cache_limit`], which are
/// process-wide, or that allocate mapped blocks, so that they see neither each other's
/// settings nor each other's kept blocks.
#[cfg(test)]
pub(crate) static ALLOC_TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The default of [`set_block_cache_limit`]: 512 MiB of freed mapped blocks kept for reuse.
pub const BLOCK_CACHE_LIMIT: usize = 512 << 20;

/// How long a freed mapped block is kept when nothing asks for its size: it is unmapped by
/// the first mapped allocation or free after this.
pub const BLOCK_CACHE_KEEP: Duration = Duration::from_secs(2);

/// The most freed mapped blocks kept at once.
const KEPT_SLOTS: usize = 8;

static BLOCK_CACHE_BYTES: AtomicUsize = AtomicUsize::new(BLOCK_CACHE_LIMIT);

/// A freed mapped block kept for reuse: its address, size (the layout's) and when it was
/// freed.
#[derive(Clone, Copy)]
struct Kept {
    addr: usize,
    size: usize,
    freed: Instant,
}

/// The kept blocks' slots.
type Slots = [Option<Kept>; KEPT_SLOTS];

/// The kept blocks. Locked only for a scan of [`KEPT_SLOTS`] entries and the unmapping of the
/// blocks it releases; nothing inside the lock allocates.
static KEPT: Mutex<Slots> = Mutex::new([None; KEPT_SLOTS]);

/// Sets how many bytes of freed mapped blocks (of at least [`MAPPED`] bytes) [`LargeAligned`]
/// keeps to hand out again (default [`BLOCK_CACHE_LIMIT`]; 0 keeps none, and unmaps the kept
/// ones now). Why: a block of that size is a fresh mapping, and every page of a fresh
/// mapping costs a page fault and the kernel's zeroing on first touch, more than a
/// memory-bound kernel writing it takes. A program that allocates and frees tensors of the
/// same size call after call (the fresh outputs of `run`) gets the same pages back instead.
/// Only `alloc` takes kept blocks (their contents are what the last owner left);
/// `alloc_zeroed` still maps zero pages. A kept block not asked for within
/// [`BLOCK_CACHE_KEEP`] is unmapped at the next mapped allocation or free.
pub fn set_block_cache_limit(bytes: usize) {
    BLOCK_CACHE_BYTES.store(bytes, Ordering::Relaxed);
    // Over the new limit: drop the oldest until it fits.
    let mut kept = lock_kept();
    while total(&kept) > bytes && evict_oldest(&mut kept).is_some() {}
}

/// How many bytes of freed mapped blocks are kept for reuse ([`set_block_cache_limit`]).
pub fn block_cache_limit() -> usize {
    BLOCK_CACHE_BYTES.load(Ordering::Relaxed)
}

/// The bytes of freed mapped blocks kept now.
pub fn kept_block_bytes() -> usize {
    total(&lock_kept())
}

/// How many freed mapped blocks of exactly `size` bytes are kept now.
pub fn kept_blocks(size: usize) -> usize {
    lock_kept()
        .iter()
        .flatten()
        .filter(|k| k.size == size)
        .count()
}

fn lock_kept() -> std::sync::MutexGuard<'static, Slots> {
    // Nothing panics while holding it, but a poisoned lock still guards valid entries.
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes kept in `kept`.
fn total(kept: &Slots) -> usize {
    kept.iter().flatten().map(|k| k.size).sum()
}

/// Unmaps the kept blocks freed at least `age` ago (all of them for `Duration::ZERO`).
fn release_older(kept: &mut Slots, age: Duration) {
    let now = Instant::now();
    for slot in kept.iter_mut() {
        if let Some(k) = slot.take_if(|k| now.duration_since(k.freed) >= age) {
            unmap(k.addr as *mut u8, k.size);
        }
    }
}

/// Unmaps the block kept longest; its size, or `None` when none is kept.
fn evict_oldest(kept: &mut Slots) -> Option<usize> {
    let oldest = (0..KEPT_SLOTS)
        .filter(|&i| kept[i].is_some())
        .min_by_key(|&i| kept[i].map(|k| k.freed))?;
    let k = kept[oldest].take()?;
    unmap(k.addr as *mut u8, k.size);
    Some(k.size)
}

/// A kept block of exactly `size` bytes, taken out of the cache (the newest such).
fn take_kept(size: usize) -> Option<*mut u8> {
    if block_cache_limit() == 0 {
        return None;
    }
    let mut kept = lock_kept();
    release_older(&mut kept, BLOCK_CACHE_KEEP);
    let i = (0..KEPT_SLOTS)
        .filter(|&i| kept[i].is_some_and(|k| k.size == size))
        .max_by_key(|&i| kept[i].map(|k| k.freed))?;
    kept[i].take().map(|k| k.addr as *mut u8)
}

/// Keeps a freed mapped block of `size` bytes for reuse if the limit allows (evicting the
/// oldest blocks to make room); otherwise unmaps it.
fn keep_or_unmap(p: *mut u8, size: usize) {
    let limit = block_cache_limit();
    if size > limit {
        unmap(p, size);
        return;
    }
    let mut kept = lock_kept();
    release_older(&mut kept, BLOCK_CACHE_KEEP);
    let mut bytes = total(&kept);
    loop {
        if bytes + size <= limit {
            if let Some(slot) = kept.iter_mut().find(|s| s.is_none()) {
                *slot = Some(Kept {
                    addr: p as usize,
                    size,
                    freed: Instant::now(),
                });
                return;
            }
        }
        match evict_oldest(&mut kept) {
            Some(n) => bytes -= n,
            // Nothing kept and still no room: cannot happen (size <= limit), but unmap.
            None => return unmap(p, size),
        }
    }
}

/// A global allocator aligning large blocks to 64 bytes (see the module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct LargeAligned;

/// Where a block of layout `l` lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// [`System`], layout as given.
    Small,
    /// [`System`], aligned to [`ALIGN`].
    Aligned(Layout),
    /// Its own mapping (Unix).
    Mapped,
}

fn kind(l: Layout) -> Kind {
    if l.size() < LARGE || l.align() > PAGE {
        return Kind::Small;
    }
    if cfg!(unix) && l.size() >= MAPPED {
        return Kind::Mapped;
    }
    match Layout::from_size_align(l.size(), l.align().max(ALIGN)) {
        Ok(a) => Kind::Aligned(a),
        Err(_) => Kind::Small,
    }
}

#[cfg(unix)]
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping of `size` bytes at an address the kernel picks;
    // no existing memory is touched. `MAP_FAILED` is reported as null, as `alloc` must.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    advise_huge_pages(p.cast(), size);
    p.cast()
}

/// Asks the kernel to back the `len` bytes at `start` (page-aligned, inside one allocation)
/// with transparent huge pages, unless [`set_huge_pages`] turned that off: the advice of
/// every mapping here and of the fresh outputs of `run` (`cpu::pages`). Linux only; a no-op
/// elsewhere.
pub(crate) fn advise_huge_pages(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    if huge_pages() {
        // SAFETY: the caller's range lies inside one allocation; MADV_HUGEPAGE is advice about
        // how to back it, it neither unmaps nor changes its contents. A kernel without
        // transparent huge pages refuses it (EINVAL), which leaves the range as it was:
        // ignored.
        unsafe {
            libc::madvise(start.cast(), len, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

#[cfg(unix)]
fn unmap(p: *mut u8, size: usize) {
    // SAFETY: `p` came from `map(size)` (the caller's `dealloc` contract: same layout, so the
    // same size) and nothing uses it after this.
    unsafe {
        libc::munmap(p.cast(), size);
    }
}

// Without `mmap`, `Kind::Mapped` never occurs (`kind` checks `cfg!(unix)`).
#[cfg(not(unix))]
fn map(_size: usize) -> *mut u8 {
    std::ptr::null_mut()
}

#[cfg(not(unix))]
fn unmap(_p: *mut u8, _size: usize) {}

/// The kernel's transparent-huge-page mode: `always`, `madvise` or `never` (the word in
/// brackets in `/sys/kernel/mm/transparent_hugepage/enabled`); `None` where that file cannot
/// be read (not Linux, or a kernel without transparent huge pages).
pub fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let (_, rest) = s.split_once('[')?;
    Some(rest.split_once(']')?.0.to_string())
}

/// What the kernel says about the mapping holding an address (Linux, `/proc/self/smaps`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The mapping's bytes (the kernel may have merged neighbouring mappings into it).
    pub size: u64,
    /// Resident bytes on transparent huge pages (`AnonHugePages`).
    pub huge_page_bytes: u64,
    /// Whether it was advised to use huge pages (`hg` in `VmFlags`).
    pub huge_page_advice: bool,
}

/// The mapping holding `addr`, as `/proc/self/smaps` describes it; `None` where that file
/// cannot be read (not Linux) or lists no mapping holding it.
pub fn mapping_of(addr: *const u8) -> Option<Mapping> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let addr = addr as u64;
    let mut found: Option<Mapping> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        // A mapping's first line: `start-end perms offset dev inode [path]`, in hex.
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                if found.is_some() {
                    break;
                }
                if (a..b).contains(&addr) {
                    found = Some(Mapping {
                        size: b - a,
                        huge_page_bytes: 0,
                        huge_page_advice: false,
                    });
                }
                continue;
            }
        }
        let Some(m) = found.as_mut() else { continue };
        if let Some(kb) = line.strip_prefix("AnonHugePages:") {
            let kb = kb.trim().trim_end_matches("kB").trim();
            m.huge_page_bytes = kb.parse::<u64>().ok()? * 1024;
        } else if let Some(flags) = line.strip_prefix("VmFlags:") {
            m.huge_page_advice = flags.split_whitespace().any(|f| f == "hg");
        }
    }
    found
}

// SAFETY: every block is allocated and freed by the same route, chosen by `kind` from its
// layout alone (the `GlobalAlloc` contract passes `dealloc` and `realloc` the layout the block
// was allocated with); each route returns memory of at least the layout's size and alignment
// (System honours the aligned layout; a mapping is page-aligned, and `kind` sends only
// alignments up to a page there), or null on failure.
unsafe impl GlobalAlloc for LargeAligned {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        match kind(l) {
            // SAFETY: `l` has a non-zero size (the caller's contract), as does `a`.
            Kind::Small => unsafe { System.alloc(l) },
            Kind::Aligned(a) => unsafe { System.alloc(a) },
            Kind::Mapped => take_kept(l.size()).unwrap_or_else(|| map(l.size())),
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        match kind(l) {
            // SAFETY: as in `alloc`.
            Kind::Small => unsafe { System.alloc_zeroed(l) },
            Kind::Aligned(a) => unsafe { System.alloc_zeroed(a) },
            // A fresh anonymous mapping reads as zeros.
            Kind::Mapped => map(l.size()),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        match kind(l) {
            // SAFETY: `p` was allocated by the same route with the same layout (see above).
            Kind::Small => unsafe { System.dealloc(p, l) },
            Kind::Aligned(a) => unsafe { System.dealloc(p, a) },
            Kind::Mapped => keep_or_unmap(p, l.size()),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `new_size` is non-zero and, rounded up to `l.align()`,
        // does not overflow `isize`.
        let nl = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
        match (kind(l), kind(nl)) {
            // SAFETY: `p` is a System block of layout `l`.
            (Kind::Small, Kind::Small) => unsafe { System.realloc(p, l, new_size) },
            // SAFETY: `p` is a System block of layout `a`, and `b` has `a`'s alignment.
            (Kind::Aligned(a), Kind::Aligned(b)) if a.align() == b.align() => unsafe {
                System.realloc(p, a, new_size)
            },
            #[cfg(target_os = "linux")]
            (Kind::Mapped, Kind::Mapped) => {
                // SAFETY: `p` is a mapping of `l.size()` bytes; the kernel moves or grows it
                // and returns a page-aligned address, or `MAP_FAILED` leaving `p` as it was.
                let q = unsafe { libc::mremap(p.cast(), l.size(), new_size, libc::MREMAP_MAYMOVE) };
                if q == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    q.cast()
                }
            }
            _ => {
                // SAFETY: `nl` is a valid non-zero layout (above).
                let q = unsafe { self.alloc(nl) };
                if !q.is_null() {
                    // SAFETY: both blocks hold at least the smaller size and do not overlap
                    // (`q` is new); `p` is then freed with the layout it has.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                        self.dealloc(p, l);
                    }
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    /// A mapped block asks for huge pages while that is on (the default) and not after
    /// `set_huge_pages(false)`, when it then gets none (if the kernel gives them only where
    /// asked). Whether the kernel grants the advice depends on free memory: not checked.
    #[cfg(target_os = "linux")]
    #[test]
    fn mapped_blocks_ask_for_huge_pages_unless_turned_off() {
        let Some(mode) = thp_mode() else {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        };
        if mode == "never" {
            eprintln!("skipped: transparent huge pages are off");
            return;
        }
        let _flag = ALLOC_TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let a = LargeAligned;
        let l = layout(2 * MAPPED, 4);
        for on in [true, false] {
            set_huge_pages(on);
            // SAFETY: a non-zero layout; the block is written within its size, then freed once
            // with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                for i in (0..l.size()).step_by(4096) {
                    *p.add(i) = 1;
                }
                let m = mapping_of(p).expect("its mapping is listed");
                assert!(m.size >= l.size() as u64, "{m:?}");
                assert_eq!(m.huge_page_advice, on, "{m:?}");
                if !on && mode == "madvise" {
                    assert_eq!(m.huge_page_bytes, 0, "{m:?}");
                }
                a.dealloc(p, l);
            }
        }
        set_huge_pages(true);
    }

    #[test]
    fn routes_by_size_and_alignment() {
        assert_eq!(kind(layout(LARGE - 1, 4)), Kind::Small);
        assert_eq!(kind(layout(LARGE, 4)), Kind::Aligned(layout(LARGE, ALIGN)));
        assert_eq!(kind(layout(LARGE, 128)), Kind::Aligned(layout(LARGE, 128)));
        assert_eq!(kind(layout(MAPPED, 8192)), Kind::Small);
        let mapped = if cfg!(unix) {
            Kind::Mapped
        } else {
            Kind::Aligned(layout(MAPPED, ALIGN))
        };
        assert_eq!(kind(layout(MAPPED, 4)), mapped);
    }

    /// Blocks of every route are aligned, zeroed when asked, and keep their contents through
    /// `realloc` within a route and across routes, both ways.
    #[test]
    fn blocks_are_aligned_zeroed_and_survive_realloc() {
        let _lock = ALLOC_TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let a = LargeAligned;
        let sizes = [
            100,
            LARGE - 8,
            LARGE + 12,
            3 * LARGE,
            MAPPED + 4096 * 3 + 4,
            2 * MAPPED,
        ];
        let byte = |i: usize| (i % 251) as u8;
        for &size in &sizes {
            let l = layout(size, 4);
            // SAFETY: non-zero layouts; each block is accessed within its size and freed once,
            // with the layout it was last allocated or reallocated with.
            unsafe {
                let z = a.alloc_zeroed(l);
                assert!(!z.is_null());
                if size >= LARGE {
                    assert_eq!(z as usize % ALIGN, 0, "{size} bytes");
                }
                let zs = std::slice::from_raw_parts(z, size);
                assert!(zs.iter().step_by(4093).all(|&b| b == 0) && zs[size - 1] == 0);
                a.dealloc(z, l);
                for &to in &sizes {
                    let p = a.alloc(l);
                    assert!(!p.is_null());
                    for i in (0..size).step_by(997) {
                        *p.add(i) = byte(i);
                    }
                    let q = a.realloc(p, l, to);
                    assert!(!q.is_null());
                    if to >= LARGE {
                        assert_eq!(q as usize % ALIGN, 0, "{size} -> {to} bytes");
                    }
                    for i in (0..size.min(to)).step_by(997) {
                        assert_eq!(*q.add(i), byte(i), "{size} -> {to}, byte {i}");
                    }
                    a.dealloc(q, layout(to, 4));
                }
            }
        }
    }

    /// Through `Vec`, as tensors get their memory: a large `vec![0.0f32; n]` is aligned and zero.
    #[test]
    fn large_vectors_are_aligned() {
        let _lock = ALLOC_TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let a = LargeAligned;
        for n in [LARGE / 4, MAPPED / 4 + 3] {
            let l = Layout::array::<f32>(n).unwrap();
            // SAFETY: a zeroed block of `n` f32 (all-zero bits are 0.0), freed with its layout.
            unsafe {
                let p = a.alloc_zeroed(l).cast::<f32>();
                assert_eq!(p as usize % ALIGN, 0);
                let v = std::slice::from_raw_parts(p, n);
                assert!(v.iter().step_by(1021).all(|&x| x == 0.0));
                a.dealloc(p.cast(), l);
            }
        }
    }

    /// A freed mapped block is kept and handed back by the next `alloc` of its size, with
    /// what it held; `alloc_zeroed` maps zeros instead; a lower limit unmaps the oldest kept
    /// blocks, 0 all of them and keeps none; a block kept longer than [`BLOCK_CACHE_KEEP`] is
    /// unmapped by the next mapped allocation.
    #[cfg(unix)]
    #[test]
    fn freed_mapped_blocks_are_kept_for_the_next_alloc_of_their_size() {
        let _lock = ALLOC_TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        set_block_cache_limit(0);
        assert_eq!(kept_block_bytes(), 0);
        set_block_cache_limit(BLOCK_CACHE_LIMIT);
        let a = LargeAligned;
        let l = layout(MAPPED + 7 * 4096 + 8, 4);
        let other = layout(MAPPED + 4096, 4);
        // SAFETY: non-zero layouts; each block is accessed within its size while allocated
        // and freed once with its layout.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null());
            for i in (0..l.size()).step_by(4096) {
                *p.add(i) = 7;
            }
            a.dealloc(p, l);
            assert_eq!(kept_block_bytes(), l.size());
            let q = a.alloc(other);
            assert_ne!(q, p, "a block of another size");
            a.dealloc(q, other);
            assert_eq!(kept_block_bytes(), l.size() + other.size());
            let r = a.alloc(l);
            assert_eq!(r, p, "the kept block of this size");
            assert!((0..l.size()).step_by(4096).all(|i| *r.add(i) == 7));
            assert_eq!(kept_block_bytes(), other.size());
            let z = a.alloc_zeroed(l);
            assert_ne!(z, r);
            assert!((0..l.size()).step_by(4096).all(|i| *z.add(i) == 0));
            a.dealloc(r, l);
            a.dealloc(z, l);
            assert_eq!(kept_block_bytes(), 2 * l.size() + other.size());
            // Room for one: the newest stays.
            set_block_cache_limit(l.size());
            assert_eq!(kept_block_bytes(), l.size());
            assert_eq!(a.alloc(l), z);
            set_block_cache_limit(0);
            a.dealloc(z, l);
            assert_eq!(kept_block_bytes(), 0, "limit 0 keeps nothing");
            set_block_cache_limit(BLOCK_CACHE_LIMIT);
            let p = a.alloc(l);
            a.dealloc(p, l);
            assert_eq!(kept_block_bytes(), l.size());
            std::thread::sleep(BLOCK_CACHE_KEEP + Duration::from_millis(50));
            let q = a.alloc(other);
            assert_eq!(kept_block_bytes(), 0, "kept too long: unmapped");
            a.dealloc(q, other);
        }
        set_block_cache_limit(0);
        set_block_cache_limit(BLOCK_CACHE_LIMIT);
    }
}
