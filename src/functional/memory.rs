//! A typed error, not a process abort, for an output the host cannot allocate.
//!
//! Validation bounds every output by what memory can address (`spec::check_elements`), but an
//! output below that can still exceed the machine: Rust's global allocator then aborts the
//! process ("memory allocation of N bytes failed"), where PyTorch raises a catchable error.
//! On a CPU device a large output is first reserved without being touched (the operating
//! system refuses a reservation it cannot back) and released again, so such a call returns
//! [`SpecErrorKind::OutOfMemory`]. On a CubeCL device the output must fit the runtime's
//! largest single allocation (its `max_page_size`); what fits that but not the free memory
//! is the runtime's to report.

use burn::tensor::{DType, Device};

use crate::spec::{SpecError, SpecErrorKind, SpecResult};

/// Outputs up to this many bytes are not checked: every runtime allows a buffer that large
/// (WebGPU's smallest allowed `maxBufferSize` is 256 MiB), and checking costs more.
const ALWAYS_FITS: usize = 1 << 28;

/// Host allocations below this many bytes are not probed: they cost more to probe than to
/// allocate, and an allocation that small failing is a machine out of memory already.
#[cfg(any(feature = "flex", feature = "ndarray"))]
const PROBE_BYTES: usize = 1 << 30;

/// Check that `device` can allocate an output of `dims` in `dtype` (plus an index tensor of
/// `index_dtype` when the op returns one).
pub fn check_device_memory(
    op: &'static str,
    device: &Device,
    dims: &[usize],
    dtype: DType,
    index_dtype: Option<DType>,
) -> SpecResult<()> {
    let elements: usize = dims.iter().product();
    let element_bytes = dtype.size() + index_dtype.map_or(0, |dtype| dtype.size());
    // Validation bounds `elements` by `isize::MAX / 8`, so this cannot overflow.
    let bytes = elements.saturating_mul(element_bytes);
    if bytes <= ALWAYS_FITS || fits(device, bytes) {
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

/// Whether the device can allocate `bytes` in one piece: a host reservation on a CPU device,
/// the runtime's largest allocation on a CubeCL one.
fn fits(device: &Device, bytes: usize) -> bool {
    use burn::backend::DispatchDevice;
    match device.clone().without_autodiff().as_dispatch() {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => host_can_reserve(bytes),
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => host_can_reserve(bytes),
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(device) => {
            bytes as u64 <= device.client().properties().memory.max_page_size
        }
        _ => true,
    }
}

/// Reserve `bytes` of host memory untouched, and release it.
#[cfg(any(feature = "flex", feature = "ndarray"))]
fn host_can_reserve(bytes: usize) -> bool {
    bytes < PROBE_BYTES || Vec::<u8>::new().try_reserve_exact(bytes).is_ok()
}
