//! Fresh output tensors backed by transparent huge pages where the OS offers them.
//!
//! A large zeroed allocation is fresh memory from the OS (glibc `calloc` maps it and does not
//! touch it), so the kernels writing an output into it take one page fault per 4 KiB page:
//! for a 64 MiB output that costs more than the kernel itself. On Linux, [`fresh_output`]
//! asks for huge pages (`madvise(MADV_HUGEPAGE)`) over the 2 MiB-aligned interior of any
//! output of at least [`HUGE_MIN`] bytes before anything touches it, so the kernels take one
//! fault per 2 MiB instead (when the system's THP mode is `always` or `madvise`; with
//! `never`, or elsewhere, the advice is a no-op). The advice changes neither the contents
//! nor the validity of the memory. `crate::alloc::set_huge_pages(false)` turns it off, as it
//! does for the mappings of [`crate::alloc::LargeAligned`] (which advises every block of
//! ≥ 32 MiB, inputs and arenas included, when it maps it).
//!
//! An output the run writes whole needs no zeros at all: `FreshOutput` hands the run the
//! allocator's memory as it comes (under `LargeAligned`, a block an earlier tensor of the
//! same size left, whose pages are already there) and makes it a tensor only after the run.
//! `untouched` tells the executor whether an output's pages are still to be faulted in, in
//! which case kernels write it with plain stores rather than streaming ones.

use smelt_ir::{with_data, DType, HostTensor, Shape, TensorData};

/// Outputs smaller than this are left alone (at least one whole huge page inside).
pub const HUGE_MIN: usize = 4 << 20;

/// The size of a transparent huge page on x86-64 and aarch64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// A zeroed tensor for a run to write an output into (see the module docs): the CPU
/// executor's and the CUDA executor's fresh host outputs.
pub fn fresh_output(dtype: DType, shape: Shape) -> HostTensor {
    let mut t = HostTensor::zeros(dtype, shape);
    let bytes = t.numel() * dtype.size_bytes();
    advise_interior(t.data_mut_ptr(), bytes);
    t
}

/// Advises huge pages over the whole huge pages inside the `bytes` at `ptr` (one allocation),
/// if it is at least [`HUGE_MIN`] bytes.
fn advise_interior(ptr: *mut u8, bytes: usize) {
    if bytes >= HUGE_MIN {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            crate::alloc::advise_huge_pages(ptr.wrapping_add(start - ptr as usize), end - start);
        }
    }
}

/// The memory of a fresh output of `run`: zeros, or (for an output the run writes whole)
/// the allocator's memory as it comes, to be written by the run before [`FreshOutput::finish`]
/// makes it a tensor.
pub(crate) struct FreshOutput {
    shape: Shape,
    /// Zeros (length `numel`), or an empty vector with capacity for `numel` elements.
    data: TensorData,
    uninit: bool,
}

impl FreshOutput {
    /// Memory for a `dtype` tensor of `shape`: uninitialised when `written_whole` (the run
    /// writes every element), else zeros ([`fresh_output`]). Large ones get the huge-page
    /// advice either way.
    pub(crate) fn new(dtype: DType, shape: Shape, written_whole: bool) -> FreshOutput {
        if !written_whole {
            let t = fresh_output(dtype, shape);
            let shape = t.shape().clone();
            return FreshOutput {
                shape,
                data: t.into_data(),
                uninit: false,
            };
        }
        let n = shape.numel();
        let mut data = TensorData::zeros(dtype, 0);
        with_data!(&mut data, v => v.reserve_exact(n));
        let mut out = FreshOutput {
            shape,
            data,
            uninit: true,
        };
        advise_interior(out.ptr(), n * dtype.size_bytes());
        out
    }

    pub(crate) fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }

    /// Where element 0 goes; valid for the tensor's `numel` elements of its dtype.
    pub(crate) fn ptr(&mut self) -> *mut u8 {
        with_data!(&mut self.data, v => v.as_mut_ptr().cast::<u8>())
    }

    /// The tensor.
    ///
    /// # Safety
    /// Every element of an output created uninitialised has been written with a valid value
    /// of its dtype (for bool, 0 or 1) through [`FreshOutput::ptr`].
    pub(crate) unsafe fn finish(mut self) -> HostTensor {
        if self.uninit {
            let n = self.shape.numel();
            // SAFETY: the capacity is `n` (`reserve_exact` on an empty vector) and the caller
            // has initialised all `n` elements.
            with_data!(&mut self.data, v => unsafe { v.set_len(n) });
        }
        HostTensor::new(self.shape, self.data).expect("numel elements of its shape")
    }
}

/// Whether the pages holding the middle of the `len` bytes at `p` (inside one allocation)
/// have never been touched: not resident (Linux `mincore`). A fresh mapping's pages are not
/// resident until first written, when the OS zeroes them; memory reused from an earlier
/// tensor is. `None` where the OS cannot say (not Linux, or the call failed).
pub(crate) fn untouched(p: *const u8, len: usize) -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        if len == 0 {
            return Some(false);
        }
        // SAFETY: `sysconf` reads a system constant.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            n if n > 0 && (n as usize).is_power_of_two() => n as usize,
            _ => return None,
        };
        let mid = (p as usize + len / 2) & !(page - 1);
        let mut resident = 0u8;
        // SAFETY: `mid` is page-aligned and its page holds a byte of the caller's allocation,
        // so the range is mapped; `mincore` only reads the page tables and writes one status
        // byte (one page) to `resident`.
        let r = unsafe { libc::mincore(mid as *mut libc::c_void, page, &mut resident) };
        (r == 0).then_some(resident & 1 == 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (p, len);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh output of 40 MiB asks for huge pages over its whole huge pages, unless
    /// `set_huge_pages(false)` (checked on the mapping holding its first whole huge page).
    /// Above glibc's largest mmap threshold (32 MiB), so that its memory is a fresh mapping
    /// each time, not heap memory an earlier test advised.
    #[cfg(target_os = "linux")]
    #[test]
    fn large_fresh_outputs_ask_for_huge_pages_unless_turned_off() {
        if crate::alloc::thp_mode().is_none() {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let _flag = crate::alloc::ALLOC_TEST_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for on in [false, true] {
            crate::alloc::set_huge_pages(on);
            let mut t = fresh_output(DType::F32, Shape::from([10usize << 20].as_slice()));
            let p = t.data_mut_ptr();
            let inside = p.wrapping_add((p as usize).next_multiple_of(HUGE_PAGE) - p as usize);
            let m = crate::alloc::mapping_of(inside).expect("its mapping is listed");
            assert_eq!(m.huge_page_advice, on, "{m:?}");
        }
        crate::alloc::set_huge_pages(true);
    }

    #[test]
    fn fresh_outputs_are_zeroed_of_any_size() {
        for (dtype, n) in [
            (DType::F32, 3usize),
            (DType::F32, (HUGE_MIN / 4) + 12345),
            (DType::F16, HUGE_MIN),
            (DType::I64, HUGE_MIN / 8 + 1),
        ] {
            let t = fresh_output(dtype, Shape::from([n].as_slice()));
            assert_eq!(t.numel(), n);
            assert_eq!(t.dtype(), dtype);
            assert!((0..n).step_by(4099).all(|i| t.data().get_f64(i) == 0.0));
        }
    }

    /// A fresh mapping's pages are untouched until written; a written tensor's are not.
    #[cfg(target_os = "linux")]
    #[test]
    fn pages_are_untouched_until_written() {
        let n = 10 << 20;
        let mut data: Vec<f32> = Vec::with_capacity(n);
        let p = data.as_mut_ptr().cast::<u8>();
        // Above glibc's largest mmap threshold (32 MiB): a fresh mapping.
        assert_eq!(untouched(p, n * 4), Some(true));
        data.resize(n, 1.0);
        assert_eq!(untouched(data.as_ptr().cast(), n * 4), Some(false));
        assert_eq!(untouched(p, 0), Some(false));
    }

    /// A fresh output the run writes whole is handed out as memory of its size, and becomes
    /// the tensor of what was written; one it does not is zeros.
    #[test]
    fn fresh_outputs_are_written_or_zeroed() {
        let shape = Shape::from([3usize, 5].as_slice());
        let mut o = FreshOutput::new(DType::F32, shape.clone(), true);
        let p = o.ptr().cast::<f32>();
        for i in 0..15 {
            // SAFETY: the output has room for its 15 elements.
            unsafe { p.add(i).write(i as f32) };
        }
        // SAFETY: all 15 elements were written above.
        let t = unsafe { o.finish() };
        assert_eq!(t.shape(), &shape);
        assert_eq!(
            t.to_f32_vec(),
            (0..15).map(|i| i as f32).collect::<Vec<_>>()
        );
        let o = FreshOutput::new(DType::I64, shape.clone(), false);
        // SAFETY: a zeroed output needs no writes.
        let t = unsafe { o.finish() };
        assert_eq!(t.dtype(), DType::I64);
        assert!((0..15).all(|i| t.data().get_f64(i) == 0.0));
    }
}
