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

use smelt_ir::{DType, HostTensor, Shape};

/// Outputs smaller than this are left alone (at least one whole huge page inside).
pub const HUGE_MIN: usize = 4 << 20;

/// The size of a transparent huge page on x86-64 and aarch64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// A zeroed tensor for a run to write an output into (see the module docs): the CPU
/// executor's and the CUDA executor's fresh host outputs.
pub fn fresh_output(dtype: DType, shape: Shape) -> HostTensor {
    let mut t = HostTensor::zeros(dtype, shape);
    let bytes = t.numel() * dtype.size_bytes();
    if bytes >= HUGE_MIN {
        // The whole huge pages inside the tensor's memory, page-aligned.
        let ptr = t.data_mut_ptr();
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            crate::alloc::advise_huge_pages(ptr.wrapping_add(start - ptr as usize), end - start);
        }
    }
    t
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
        let _flag = crate::alloc::HUGE_PAGES_TEST_LOCK
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
}
