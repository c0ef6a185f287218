//! Large outputs on transparent huge pages. A fresh allocation of tens of megabytes is mapped
//! by the kernel page by page as it is first written: a 25 MB output costs over 6000 page
//! faults, each zeroing 4 KiB, which took a third of the `conv_bn_act` stem row's training
//! step. Advised huge pages fault once per 2 MiB. Linux only, where the system leaves the
//! choice to the process (`transparent_hugepage/enabled` set to `madvise`); elsewhere the
//! advice is not given, or ignored.

/// Bytes of a huge page on x86-64 and aarch64 Linux.
const HUGE_PAGE: usize = 2 << 20;

/// `len` zeros of `T`, the huge pages inside them advised before any is touched (an
/// allocation this large is a fresh mapping, which `calloc` leaves untouched).
pub fn zeros<T: bytemuck::Zeroable + Clone>(len: usize) -> Vec<T> {
    let values = vec![T::zeroed(); len];
    advise(values.as_ptr().cast(), len * size_of::<T>());
    values
}

/// Room for `len` values of `T`, its huge pages advised before any is written.
pub fn with_capacity<T>(len: usize) -> Vec<T> {
    let values: Vec<T> = Vec::with_capacity(len);
    advise(values.as_ptr().cast(), len * size_of::<T>());
    values
}

/// Advises huge pages for the whole 2 MiB pages inside `bytes` from `start`, where there are
/// at least two.
fn advise(start: *const u8, bytes: usize) {
    if bytes < 2 * HUGE_PAGE {
        return;
    }
    let first = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end > first {
        advise_range(first, end - first);
    }
}

#[cfg(target_os = "linux")]
fn advise_range(first: usize, len: usize) {
    // SAFETY: `first..first + len` lies inside one live allocation of this process, and
    // `MADV_HUGEPAGE` only changes how its pages are backed, never their contents. Advice
    // that the kernel refuses leaves the pages as they were, so the result is not needed.
    unsafe {
        libc::madvise(first as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_: usize, _: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_outputs_are_zeros_of_their_length() {
        let values = zeros::<f32>(3 << 20);
        assert_eq!(values.len(), 3 << 20);
        assert!(values.iter().all(|&v| v == 0.0));
        let room = with_capacity::<f64>(1 << 20);
        assert!(room.is_empty() && room.capacity() >= 1 << 20);
    }
}
