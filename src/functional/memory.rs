//! A typed error, not a process abort, for an output the host cannot allocate.
//!
//! Validation bounds every output by what memory can address (`spec::check_elements`), but an
//! output below that can still exceed the machine: Rust's global allocator then aborts the
//! process ("memory allocation of N bytes failed"), where PyTorch raises a catchable error.
//! On a CPU device a large output is first reserved without being touched (the operating
//! system refuses a reservation it cannot back) and released again, so such a call returns
//! [`SpecErrorKind::OutOfMemory`]. GPU devices allocate from their own memory, which the host
//! cannot probe; the runtime reports what does not fit there.

use burn::tensor::{DType, Device};

use crate::spec::{SpecError, SpecErrorKind, SpecResult};

/// Outputs below this many bytes are not probed: they cost more to probe than to allocate,
/// and an allocation that small failing is a machine out of memory already.
const PROBE_BYTES: usize = 1 << 30;

/// Check that the host can allocate an output of `dims` in `dtype` (plus an index tensor of
/// `index_dtype` when the op returns one) on a CPU `device`.
pub fn check_host_memory(
    op: &'static str,
    device: &Device,
    dims: &[usize],
    dtype: DType,
    index_dtype: Option<DType>,
) -> SpecResult<()> {
    if !on_host(device) {
        return Ok(());
    }
    let elements: usize = dims.iter().product();
    let element_bytes = dtype.size() + index_dtype.map_or(0, |dtype| dtype.size());
    // Validation bounds `elements` by `isize::MAX / 8`, so this cannot overflow.
    let bytes = elements.saturating_mul(element_bytes);
    if bytes < PROBE_BYTES || Vec::<u8>::new().try_reserve_exact(bytes).is_ok() {
        return Ok(());
    }
    Err(SpecError::new(
        op,
        SpecErrorKind::OutOfMemory {
            dims: dims.to_vec(),
            bytes,
        },
    ))
}

/// Whether the device computes in host memory (Flex or NdArray, under autodiff or not).
fn on_host(device: &Device) -> bool {
    use burn::backend::DispatchDevice;
    match device.clone().without_autodiff().as_dispatch() {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        _ => false,
    }
}
