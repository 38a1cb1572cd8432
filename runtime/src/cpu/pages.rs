//! Fresh output tensors backed by transparent huge pages where the OS offers them.
//!
//! A large zeroed allocation is fresh memory from the OS (glibc `calloc` maps it and does not
//! touch it), so the kernels writing an output into it take one page fault per 4 KiB page:
//! for a 64 MiB output that costs more than the kernel itself. On Linux, [`fresh_output`]
//! asks for huge pages (`madvise(MADV_HUGEPAGE)`) over the 2 MiB-aligned interior of any
//! output of at least [`HUGE_MIN`] bytes before anything touches it, so the kernels take one
//! fault per 2 MiB instead (when the system's THP mode is `always` or `madvise`; with
//! `never`, or elsewhere, the advice is a no-op). The advice changes neither the contents
//! nor the validity of the memory.

use smelt_ir::{DType, HostTensor, Shape};

/// Outputs smaller than this are left alone (at least one whole huge page inside).
pub const HUGE_MIN: usize = 4 << 20;

/// The size of a transparent huge page on x86-64 and aarch64 Linux.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// A zeroed tensor for a run to write an output into (see the module docs): the CPU
/// executor's and the CUDA executor's fresh host outputs.
pub fn fresh_output(dtype: DType, shape: Shape) -> HostTensor {
    let mut t = HostTensor::zeros(dtype, shape);
    let bytes = t.numel() * dtype.size_bytes();
    if bytes >= HUGE_MIN {
        advise_huge_pages(t.data_mut_ptr(), bytes);
    }
    t
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: `start..end` lies inside the `bytes`-long allocation at `ptr`, page-aligned;
        // MADV_HUGEPAGE is advice about how to back the range, it neither unmaps nor changes
        // its contents. A failure (THP not compiled in) leaves the memory as it was.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

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
