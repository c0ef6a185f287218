//! Tensor plumbing of the kernel launchers: contiguous inputs, contiguous outputs, host
//! tables, launch sizes, and the typed error a launcher returns.

use burn::backend::cubecl::dtype_to_storage_type;
use burn::tensor::{DType, Shape};
use burn_convpool_kernels::axes::AxesLaunch;
use burn_cubecl::{
    CubeDevice,
    kernel::{into_contiguous, untile},
    ops::numeric::{empty_device_contiguous_dtype, zeros_client},
    ops::permute,
    tensor::CubeTensor,
};
use cubecl::ir::{AddressType, ElemType, FloatKind};
use cubecl::prelude::{CubeType, LaunchArg};
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};
use std::collections::HashMap;
use std::sync::Mutex;

use crate::spec::MAX_KERNEL_VALUE;

use super::launches::{Launch, note};

/// Why a kernel could not be launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// A tensor has the wrong kind of dtype.
    Dtype {
        /// What the kernel needs.
        expected: &'static str,
        /// What it got.
        got: DType,
    },
    /// The launch grid needs more cubes along one dimension than a runtime allows.
    Grid {
        /// Which operand sets the size.
        axis: &'static str,
        /// Cubes needed.
        cubes: usize,
    },
    /// The device does not report the type (WGSL adapters without f64, lavapipe's f16).
    Unsupported {
        /// The dtype.
        got: DType,
    },
    /// A size, window position or parameter does not fit the kernels' 32-bit arithmetic.
    Table {
        /// The value.
        value: usize,
    },
    /// A pinned kernel needs an atomic operation the device does not report.
    Atomic {
        /// The operation.
        operation: &'static str,
        /// What needs it.
        needed_by: &'static str,
    },
    /// cubek's GEMM routine declined the problem on this device.
    Routine {
        /// cubek's reason.
        reason: String,
    },
}

/// Cubes per grid dimension that every runtime accepts (WebGPU's minimum limit).
pub const MAX_CUBES_PER_DIM: usize = 65_535;

impl core::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Dtype { expected, got } => write!(f, "expected {expected}, got dtype {got:?}"),
            Self::Grid { axis, cubes } => write!(
                f,
                "the launch needs {cubes} cubes along {axis}, above the limit of \
                 {MAX_CUBES_PER_DIM}; split the batch"
            ),
            Self::Unsupported { got } => write!(
                f,
                "dtype {got:?} is not supported on this device (the device does not report it)"
            ),
            Self::Table { value } => {
                write!(
                    f,
                    "{value} does not fit the kernels' 32-bit sizes and tables"
                )
            }
            Self::Atomic {
                operation,
                needed_by,
            } => write!(
                f,
                "{needed_by} needs {operation}, which this device does not report"
            ),
            Self::Routine { reason } => write!(f, "cubek's GEMM routine declined: {reason}"),
        }
    }
}

impl std::error::Error for LaunchError {}

/// Unwrap a launcher's result, or panic naming the op and the device.
pub fn expect<T>(op: &str, device: &CubeDevice, result: Result<T, LaunchError>) -> T {
    result.unwrap_or_else(|err| panic!("{op} on {device:?}: {err}"))
}

/// Dims of a rank-5 tensor.
pub fn dims5(tensor: &CubeTensor) -> [usize; 5] {
    let shape = tensor.meta.shape();
    core::array::from_fn(|i| shape[i])
}

/// Strides of a rank-5 tensor.
pub fn strides5(tensor: &CubeTensor) -> [usize; 5] {
    let strides = tensor.meta.strides();
    core::array::from_fn(|i| strides[i])
}

/// The tensor with contiguous row-major strides (copied only when needed).
pub fn contiguous(tensor: CubeTensor) -> CubeTensor {
    if !tensor.is_contiguous() {
        note(Launch::LayoutCopy);
    }
    into_contiguous(tensor)
}

/// The tensor in a layout the kernels can index through strides (no copy unless tiled).
pub fn strided(tensor: CubeTensor) -> CubeTensor {
    untile(tensor)
}

/// A new contiguous tensor on `like`'s device.
pub fn empty(like: &CubeTensor, dims: &[usize], dtype: DType) -> CubeTensor {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(dims.to_vec()),
        dtype,
    )
}

/// Whether a rank-5 `(N, C, D, H, W)` tensor with more than one channel is channels-last: NDHWC
/// in memory, as Burn's convolutions leave their outputs (a permuted view, no copy). Axes of
/// one element may have any stride.
pub fn channels_last(tensor: &CubeTensor) -> bool {
    let dims = tensor.meta.shape();
    let strides = tensor.meta.strides();
    if dims.len() != 5 || dims[1] < 2 {
        return false;
    }
    // Memory order C, W, H, D, N: each axis's stride is the product of those before it.
    let mut run = 1;
    [1, 4, 3, 2, 0].into_iter().all(|axis| {
        let fits = dims[axis] == 1 || strides[axis] == run;
        run *= dims[axis];
        fits
    })
}

/// Most lanes of the vectors a pool reads a channels-last tensor's channels in: a unit's
/// window state is one value (and index) per lane.
const MAX_CHANNEL_LANES: usize = 4;

/// Lanes of the vectors a channels-last tensor's channels can be read in: the widest the device
/// sizes its reads to, up to [`MAX_CHANNEL_LANES`], that divides the channel count and the
/// buffer's offset (every other stride is a multiple of the channel count); 1 if none does.
pub fn vector_lanes(tensor: &CubeTensor) -> usize {
    let channels = tensor.meta.shape()[1];
    let elem_size = tensor.dtype.size();
    let offset = tensor.handle.offset_start.unwrap_or(0) as usize;
    tensor
        .client
        .properties()
        .io_optimized_vector_sizes(elem_size)
        .find(|&lanes| {
            lanes <= MAX_CHANNEL_LANES
                && channels.is_multiple_of(lanes)
                && offset.is_multiple_of(lanes * elem_size)
        })
        .unwrap_or(1)
}

/// `(N, C, *spatial)` with unit axes inserted before the spatial ones up to rank 5: a view of
/// the same memory (each new axis strided as if it were one more level of the next one).
pub fn with_unit_axes(tensor: CubeTensor) -> CubeTensor {
    let mut tensor = strided(tensor);
    while tensor.meta.num_dims() < 5 {
        let (size, stride) = (tensor.meta.shape()[2], tensor.meta.strides()[2]);
        tensor.meta.insert(2, 1, size * stride);
    }
    tensor
}

/// A rank-5 `(N, C, D, H, W)` tensor with its leading spatial axes dropped down to `spatial`
/// of them, all of which must be unit axes: a view of the same memory, where Burn's reshape
/// copies any tensor that is not contiguous.
pub fn without_unit_axes(tensor: CubeTensor, spatial: usize) -> CubeTensor {
    let mut tensor = strided(tensor);
    while tensor.meta.num_dims() > 2 + spatial {
        let (size, _) = tensor.meta.remove(2);
        debug_assert_eq!(size, 1, "only unit axes are dropped");
    }
    tensor
}

/// A new rank-5 `(N, C, D, H, W)` tensor on `like`'s device, channels-last in memory.
pub fn empty_channels_last(like: &CubeTensor, dims: [usize; 5], dtype: DType) -> CubeTensor {
    let [n, c, d, h, w] = dims;
    permute(empty(like, &[n, d, h, w, c], dtype), &[0, 4, 1, 2, 3])
}

/// A new tensor of zeros on `like`'s device: a reduction over nothing (a weight or bias
/// gradient of an empty batch), which no kernel unit writes.
pub fn zeros(like: &CubeTensor, dims: &[usize], dtype: DType) -> CubeTensor {
    zeros_client(
        like.client.clone(),
        like.device.clone(),
        Shape::from(dims.to_vec()),
        dtype,
    )
}

/// A u32 table on `like`'s device (never empty: kernels bind it even when unused).
///
/// Tables depend on shapes alone, so each is uploaded once per device and contents and then
/// shared: a training loop's calls reuse it instead of copying it from the host every time.
/// The cache holds at most [`TABLE_CACHE_ENTRIES`] tables per device and is emptied when full.
pub fn table(like: &CubeTensor, values: &[u32]) -> CubeTensor {
    cached_table(like, Recipe::Values, values, || Ok(values.to_vec()))
        .unwrap_or_else(|_| unreachable!("a table of given values builds"))
}

/// The table `build` makes from `recipe` (a few values that determine it, such as a conv's
/// channels and taps), cached as [`table`] caches, under the recipe: a call that finds it
/// neither rebuilds nor hashes the whole table.
pub fn table_from_recipe(
    like: &CubeTensor,
    recipe: &[u32],
    build: impl FnOnce() -> Result<Vec<u32>, LaunchError>,
) -> Result<CubeTensor, LaunchError> {
    cached_table(like, Recipe::Built, recipe, build)
}

/// `len` zeroed u32 counters on `like`'s device, cached as [`table`] caches: the split-k
/// handoff's arrivals, which every launch leaves at zero for the next.
pub fn arrivals(like: &CubeTensor, len: usize) -> Result<CubeTensor, LaunchError> {
    cached_table(like, Recipe::Zeros, &[entry(len)?], || Ok(vec![0; len]))
}

/// What a cached table's key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Recipe {
    /// The table's values.
    Values,
    /// What its builder made it from.
    Built,
    /// Its length: counters that start at zero.
    Zeros,
}

fn cached_table(
    like: &CubeTensor,
    recipe: Recipe,
    key: &[u32],
    build: impl FnOnce() -> Result<Vec<u32>, LaunchError>,
) -> Result<CubeTensor, LaunchError> {
    type Tables = HashMap<CubeDevice, HashMap<(Recipe, Vec<u32>), CubeTensor>>;
    static TABLES: Mutex<Option<Tables>> = Mutex::new(None);
    let mut tables = TABLES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tables = tables
        .get_or_insert_with(HashMap::new)
        .entry(like.device.clone())
        .or_default();
    let key = (recipe, key.to_vec());
    if let Some(table) = tables.get(&key) {
        return Ok(table.clone());
    }
    let mut values = build()?;
    if values.is_empty() {
        values.push(0);
    }
    if tables.len() >= TABLE_CACHE_ENTRIES {
        tables.clear();
    }
    let handle = like.client.create_from_slice(bytemuck::cast_slice(&values));
    let table = CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::from(vec![values.len()]),
        handle,
        DType::U32,
    );
    tables.insert(key, table.clone());
    Ok(table)
}

/// Tables per device the cache of [`table`] holds (a network has a few per layer).
pub const TABLE_CACHE_ENTRIES: usize = 1024;

/// `value` as a table entry.
pub fn entry(value: usize) -> Result<u32, LaunchError> {
    match value {
        0..=MAX_KERNEL_VALUE => Ok(value as u32),
        _ => Err(LaunchError::Table { value }),
    }
}

/// Address width that indexes every tensor of a launch.
pub fn address_type(tensors: &[&CubeTensor]) -> AddressType {
    tensors
        .iter()
        .map(|tensor| tensor.required_address_type())
        .max()
        .unwrap_or_default()
}

/// The kernel element type of a float tensor, if the device can compile it.
pub fn float_type(tensor: &CubeTensor) -> Result<ElemType, LaunchError> {
    match tensor.dtype {
        DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => supported(tensor),
        got => Err(LaunchError::Dtype {
            expected: "a float tensor",
            got,
        }),
    }
}

/// The type sums of `float` values accumulate in: f64 for f64, else f32 (half types sum in
/// f32, as PyTorch's kernels do).
pub fn accumulator_type(float: ElemType) -> ElemType {
    match float {
        ElemType::Float(FloatKind::F64) => float,
        _ => ElemType::Float(FloatKind::F32),
    }
}

/// The kernel element type of an index tensor, if the device can compile it.
pub fn int_type(tensor: &CubeTensor) -> Result<ElemType, LaunchError> {
    match tensor.dtype {
        DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U64 | DType::U32 => {
            supported(tensor)
        }
        got => Err(LaunchError::Dtype {
            expected: "an integer index tensor",
            got,
        }),
    }
}

/// The tensor's element type, checked against the types the device reports, so an unsupported
/// one is a typed error rather than a shader-compile failure.
fn supported(tensor: &CubeTensor) -> Result<ElemType, LaunchError> {
    let elem = dtype_to_storage_type(tensor.dtype);
    if tensor.client.properties().supports_type(elem) {
        Ok(elem)
    } else {
        Err(LaunchError::Unsupported { got: tensor.dtype })
    }
}

/// One unit per element of `units`.
pub fn elementwise(like: &CubeTensor, units: usize) -> (CubeCount, CubeDim) {
    let cube_dim = CubeDim::new(&like.client, units.max(1));
    let cube_count = calculate_cube_count_elemwise(&like.client, units.max(1), cube_dim);
    (cube_count, cube_dim)
}

/// Cubes along one grid dimension, checked against the limit.
pub fn grid(axis: &'static str, cubes: usize) -> Result<u32, LaunchError> {
    if cubes > MAX_CUBES_PER_DIM {
        return Err(LaunchError::Grid { axis, cubes });
    }
    Ok(cubes.max(1) as u32)
}

/// Per-axis launch values (D, H then W) of a kernel's
/// [`Axes`](burn_convpool_kernels::axes::Axes) argument.
pub fn axes<T>(values: [T; 3]) -> AxesLaunch<T>
where
    T: LaunchArg<RuntimeArg = T> + CubeType<ExpandType: Clone>,
{
    let [d, h, w] = values;
    AxesLaunch::new(d, h, w)
}
