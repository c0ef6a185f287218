//! What the device can hold, checked before the call, so that `try_` returns a typed error
//! where the kernels would panic and the runtime would abort.
//!
//! **Memory.** Validation bounds every output by what memory can address
//! (`spec::check_elements`), but an output below that can still exceed the machine: Rust's
//! global allocator then aborts the process ("memory allocation of N bytes failed"), where
//! PyTorch raises a catchable error. On a CPU device a large output is first reserved without
//! being touched (the operating system refuses a reservation it cannot back) and released
//! again, so such a call returns [`SpecErrorKind::OutOfMemory`]. On a CubeCL device the output
//! must fit the runtime's largest single allocation (its `max_page_size`); what fits that but
//! not the free memory is the runtime's to report.
//!
//! **Kernel arithmetic.** The CubeCL kernels keep sizes, window tables and parameters in 32
//! bits. A value above that (a 2^33 padding, a 2^40 pool kernel) is
//! [`SpecErrorKind::DeviceLimit`] on a CubeCL device; the launch would otherwise panic inside
//! Fusion, where no `try_` can catch it.

use burn::tensor::{DType, Device, IntDType};

use super::lift::{Input, InputShape};
use super::pad::padded_dims;
use crate::spec::{MAX_KERNEL_VALUE, SpecError, SpecErrorKind, SpecResult, check_elements};

/// Outputs up to this many bytes are not checked: every runtime allows a buffer that large
/// (WebGPU's smallest allowed `maxBufferSize` is 256 MiB), and checking costs more.
const ALWAYS_FITS: usize = 1 << 28;

/// Host allocations below this many bytes are not probed: they cost more to probe than to
/// allocate, and an allocation that small failing is a machine out of memory already.
#[cfg(any(feature = "flex", feature = "ndarray"))]
const PROBE_BYTES: usize = 1 << 30;

/// Check that the device of `x` (an input lifted by `shape`) can allocate a rank-5 output of
/// `dims` in the input's dtype, plus an index tensor of `index_dtype` when the op returns one.
/// The error names the dims at the caller's rank.
pub fn check_output_memory<const D: usize>(
    op: &'static str,
    x: &Input<D>,
    shape: &InputShape<D>,
    dims: [usize; 5],
    index_dtype: Option<IntDType>,
) -> SpecResult<()> {
    let dims = shape.restored_dims(dims);
    let index_bytes = index_dtype.map_or(0, |dtype| DType::from(dtype).size());
    // Validation bounds the elements by `isize::MAX / 8`, so the count is exact.
    let bytes = bytes_of(&dims, x.dtype().size() + index_bytes).unwrap_or(usize::MAX);
    if allocatable(&x.device(), bytes) {
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

/// Check that `device` can hold a module's parameter `param` of `dims` in its default float
/// dtype, with strides memory can address (as an output's, `spec::check_elements`). Burn
/// draws parameters lazily: one past memory would abort the process at the first forward.
pub fn check_parameter_memory(
    module: &'static str,
    param: &'static str,
    dims: &[usize],
    device: &Device,
) -> SpecResult<()> {
    let element_bytes = DType::from(device.settings().float_dtype).size();
    let addressable = check_elements(module, dims).is_ok();
    let bytes = bytes_of(dims, element_bytes);
    if addressable && bytes.is_some_and(|bytes| allocatable(device, bytes)) {
        return Ok(());
    }
    Err(SpecError::new(
        module,
        SpecErrorKind::ParameterTooLarge {
            param,
            dims: dims.to_vec(),
        },
    ))
}

/// Check that the device of `x` (lifted by `shape`) can hold `x` padded by `padding`, which a
/// `padding_mode` other than zeros builds before convolving (PyTorch's `F.pad` does too): a
/// huge padding under a huge stride leaves a small output but a padded copy past memory.
pub fn check_padded_input_memory<const D: usize>(
    op: &'static str,
    x: &Input<D>,
    shape: &InputShape<D>,
    padding: [(usize, usize); 3],
    mode: &'static str,
) -> SpecResult<()> {
    let dims = padded_dims(x.dims(), padding);
    // Unlike an output, the padded copy's element count is not bounded by validation.
    if bytes_of(&dims, x.dtype().size()).is_some_and(|bytes| allocatable(&x.device(), bytes)) {
        return Ok(());
    }
    Err(SpecError::new(
        op,
        SpecErrorKind::PaddedInputTooLarge {
            mode,
            dims: shape.restored_dims(dims).to_vec(),
        },
    ))
}

/// `dims` elements of `element_bytes` each, in bytes; `None` past `isize::MAX` (what no
/// allocation can hold).
fn bytes_of(dims: &[usize], element_bytes: usize) -> Option<usize> {
    dims.iter()
        .try_fold(element_bytes, |bytes, &dim| bytes.checked_mul(dim))
        .filter(|&bytes| bytes <= isize::MAX as usize)
}

/// Whether the device can allocate `bytes` in one piece, small buffers unchecked.
fn allocatable(device: &Device, bytes: usize) -> bool {
    bytes <= ALWAYS_FITS || fits(device, bytes)
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

/// Check that `device` can hold every one of `values` (named sizes and parameters of the call)
/// in its kernels' arithmetic: on a CubeCL device, at most 32 bits.
pub fn check_kernel_values(
    op: &'static str,
    device: &Device,
    values: impl IntoIterator<Item = (&'static str, usize)>,
) -> SpecResult<()> {
    let Some((what, value)) = values.into_iter().max_by_key(|&(_, value)| value) else {
        return Ok(());
    };
    // Every device holds these; checked without looking up the device.
    if value <= MAX_KERNEL_VALUE {
        return Ok(());
    }
    match kernel_value_limit(device) {
        Some(limit) if value > limit => Err(SpecError::new(
            op,
            SpecErrorKind::DeviceLimit { what, value, limit },
        )),
        _ => Ok(()),
    }
}

/// Check that the device's kernels (ours and Burn's) compile for `dtype`, a tensor's of the
/// call: on a CubeCL device, a type its runtime reports (lavapipe has no BF16). Every op checks
/// its tensors' dtypes with it before any kernel runs.
pub fn check_device_dtype(op: &'static str, device: &Device, dtype: DType) -> SpecResult<()> {
    if computes_in(device, dtype) {
        return Ok(());
    }
    Err(SpecError::new(
        op,
        SpecErrorKind::DeviceDtype {
            dtype: format!("{dtype:?}"),
        },
    ))
}

/// Whether the device's kernels compile for `dtype`: a CubeCL device's for the types it
/// reports (its launch would otherwise panic inside Fusion); a CPU device's for every type.
/// Every op asks before it queues, so each thread keeps the answers it got: a device's types
/// do not change, and reading them takes the runtime's client registry.
#[cfg(feature = "cube")]
fn computes_in(device: &Device, dtype: DType) -> bool {
    use burn::backend::cubecl::dtype_to_storage_type;
    use burn_cubecl::CubeDevice;
    use std::cell::RefCell;
    thread_local! {
        static ANSWERS: RefCell<Vec<(CubeDevice, DType, bool)>> = const { RefCell::new(Vec::new()) };
    }
    let Some(device) = crate::cube::cube_device(device) else {
        return true;
    };
    ANSWERS.with(|answers| {
        let known = answers
            .borrow()
            .iter()
            .find(|(held, held_dtype, _)| *held == device && *held_dtype == dtype)
            .map(|&(_, _, supported)| supported);
        known.unwrap_or_else(|| {
            let supported = device
                .client()
                .properties()
                .supports_type(dtype_to_storage_type(dtype));
            answers.borrow_mut().push((device, dtype, supported));
            supported
        })
    })
}

/// Without CubeCL, every device computes in every float dtype the ops accept.
#[cfg(not(feature = "cube"))]
fn computes_in(_: &Device, _: DType) -> bool {
    true
}

/// The largest value the device's kernels hold, where there is one below `usize::MAX`.
#[cfg(feature = "cube")]
fn kernel_value_limit(device: &Device) -> Option<usize> {
    crate::cube::cube_device(device).map(|_| MAX_KERNEL_VALUE)
}

/// No device without CubeCL has a kernel limit below `usize::MAX`.
#[cfg(not(feature = "cube"))]
fn kernel_value_limit(_: &Device) -> Option<usize> {
    None
}
