//! Launchers of the window kernel and its gather backward: build the span and cover tables on
//! the host from `spec::pool`, the same spans the CPU walks, so both backends place every
//! window identically.

use burn::tensor::DType;
use burn_convpool_kernels::axes::AxesLaunch;
use burn_convpool_kernels::pool::{self as kernels, PoolArgsLaunch};
use burn_convpool_kernels::sliding_max as sliding;
use burn_convpool_kernels::unpool;
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim};

use crate::spec::{MaxPoolOptions, Spans, shapes, spatial, used_step};

use super::tensor::{
    LaunchError, accumulator_type, address_type, axes, contiguous, dims5, elementwise, empty,
    entry, float_type, int_type, strided, table,
};

pub use kernels::Reduction;

/// Where the windows come from.
pub enum Windows {
    /// Spans per axis (sliding and adaptive windows).
    Table(Spans),
    /// Fractional windows of `kernel` over the samples `(N, C, 3)`.
    Fractional {
        /// Per-plane samples.
        samples: Box<CubeTensor>,
        /// Window size.
        kernel: [usize; 3],
    },
}

/// The scalars of a pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct Params {
    /// The reduction.
    pub reduction: Reduction,
    /// Max over `|x|` (LP pooling with `p = inf`).
    pub abs: bool,
    /// Average divisor counts the padding.
    pub count_include_pad: bool,
    /// Average divisor override (0 for none).
    pub divisor_override: usize,
    /// LP norm `p`.
    pub norm: f64,
    /// LP kernel size (`K` is its volume).
    pub kernel: [usize; 3],
}

fn flat_spans(spans: &Spans) -> Result<Vec<u32>, LaunchError> {
    let mut values = Vec::new();
    for span in spans.iter().flatten() {
        for value in [span.start, span.count, span.step, span.padded] {
            values.push(entry(value)?);
        }
    }
    Ok(values)
}

fn flat_cover(cover: &[Vec<(usize, usize)>; 3]) -> Result<Vec<u32>, LaunchError> {
    let mut values = Vec::new();
    for &(lo, hi) in cover.iter().flatten() {
        values.push(entry(lo)?);
        values.push(entry(hi)?);
    }
    Ok(values)
}

fn pool_args(
    channels: usize,
    in_size: [usize; 3],
    out_size: [usize; 3],
    kernel: [usize; 3],
    params: &Params,
) -> PoolArgsLaunch {
    // As the CPU (and PyTorch) compute it: in f32, from the integer sizes.
    let alpha = |i: usize| {
        if out_size[i] > 1 {
            (in_size[i] - kernel[i]) as f32 / (out_size[i] - 1) as f32
        } else {
            0.0
        }
    };
    let p = params.norm;
    PoolArgsLaunch::new(
        channels,
        axes(in_size),
        axes(out_size),
        axes(kernel),
        axes([alpha(0), alpha(1), alpha(2)]),
        params.divisor_override,
        p as f32,
        (1.0 / p) as f32,
        (p - 1.0) as f32,
        (1.0 / p - 1.0) as f32,
    )
}

/// Outputs (forward) or inputs (backward) along the last axis one unit computes.
const BLOCK_W: usize = 8;

/// The launch of a kernel whose unit takes up to [`BLOCK_W`] consecutive elements of a row of
/// `tensor` (rows of `width`): the block width and the grid.
fn row_blocks(tensor: &CubeTensor, width: usize) -> (usize, CubeCount, CubeDim) {
    let block_w = width.min(BLOCK_W);
    let units = tensor.meta.num_elements() / width * width.div_ceil(block_w);
    let (cube_count, cube_dim) = elementwise(tensor, units);
    (block_w, cube_count, cube_dim)
}

/// Run the window kernel: values, and indices of `indices_dtype` for `Max` (else a dummy).
/// `out_grad` is read by `LpShare` only.
pub fn forward(
    x: CubeTensor,
    windows: Windows,
    out_size: [usize; 3],
    params: Params,
    out_grad: Option<CubeTensor>,
    indices_dtype: DType,
) -> Result<(CubeTensor, CubeTensor), LaunchError> {
    let dtype = float_type(&x)?;
    let x = strided(x);
    let dims = dims5(&x);
    let out_dims = shapes::with_spatial(&dims, out_size);
    let out = empty(&x, &out_dims, x.dtype);
    let index_dims: &[usize] = if params.reduction == Reduction::Max {
        &out_dims
    } else {
        &[1]
    };
    let indices = empty(&x, index_dims, indices_dtype);
    let index_type = int_type(&indices)?;
    let (spans, samples, kernel, fractional) = match windows {
        Windows::Table(spans) => (
            table(&x, &flat_spans(&spans)?),
            x.clone(),
            params.kernel,
            false,
        ),
        Windows::Fractional { samples, kernel } => {
            (table(&x, &[]), contiguous(*samples), kernel, true)
        }
    };
    let out_grad = out_grad.map(contiguous).unwrap_or_else(|| x.clone());
    if out.meta.num_elements() == 0 {
        return Ok((out, indices));
    }
    let (block_w, cube_count, cube_dim) = row_blocks(&out, out_size[2]);
    let address = address_type(&[&x, &out, &out_grad]);
    let args = pool_args(dims[1], spatial(&dims), out_size, kernel, &params);
    kernels::pool_forward::launch(
        &out.client.clone(),
        cube_count,
        cube_dim,
        address,
        x.into_tensor_arg(),
        spans.into_tensor_arg(),
        samples.into_tensor_arg(),
        out_grad.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        indices.clone().into_tensor_arg(),
        args,
        params.reduction,
        fractional,
        params.abs,
        params.count_include_pad,
        block_w,
        [dtype, index_type, accumulator_type(dtype)],
    );
    Ok((out, indices))
}

/// Largest kernel side the sliding max kernel unrolls.
const SLIDING_MAX_KERNEL: usize = 7;

/// Max pool with indices over a sliding window of up to 7 taps per axis, window positions
/// computed in the kernel; `None` for a larger window, which the table-driven kernel runs.
pub fn sliding_max(
    x: &CubeTensor,
    options: &MaxPoolOptions<3>,
    out_size: [usize; 3],
    indices_dtype: DType,
) -> Option<Result<(CubeTensor, CubeTensor), LaunchError>> {
    let small = options.kernel_size.iter().all(|&k| k <= SLIDING_MAX_KERNEL);
    small.then(|| sliding_max_launch(x.clone(), options, out_size, indices_dtype))
}

fn sliding_max_launch(
    x: CubeTensor,
    options: &MaxPoolOptions<3>,
    out_size: [usize; 3],
    indices_dtype: DType,
) -> Result<(CubeTensor, CubeTensor), LaunchError> {
    let dtype = float_type(&x)?;
    let x = strided(x);
    let dims = dims5(&x);
    let out_dims = shapes::with_spatial(&dims, out_size);
    let out = empty(&x, &out_dims, x.dtype);
    let indices = empty(&x, &out_dims, indices_dtype);
    let index_type = int_type(&indices)?;
    if out.meta.num_elements() == 0 {
        return Ok((out, indices));
    }
    let (block_w, cube_count, cube_dim) = row_blocks(&out, out_size[2]);
    let address = address_type(&[&x, &out]);
    let checked = |values: [usize; 3]| -> Result<AxesLaunch<usize>, LaunchError> {
        for value in values {
            entry(value)?;
        }
        Ok(axes(values))
    };
    let args = sliding::SlidingArgsLaunch::new(
        dims[1],
        checked(spatial(&dims))?,
        checked(out_size)?,
        checked(core::array::from_fn(|a| {
            used_step(options.stride[a], out_size[a])
        }))?,
        checked(options.padding.map(|(begin, _)| begin))?,
        checked(core::array::from_fn(|a| {
            used_step(options.dilation[a], options.kernel_size[a])
        }))?,
    );
    sliding::max_pool_sliding::launch(
        &out.client.clone(),
        cube_count,
        cube_dim,
        address,
        x.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        indices.clone().into_tensor_arg(),
        args,
        options.kernel_size,
        block_w,
        [dtype, index_type],
    );
    Ok((out, indices))
}

/// Inputs of the gather backward.
pub struct BackwardInputs {
    /// Output gradient (`Max`, `Avg`) or the shares of `LpShare` (`Lp`).
    pub grad: CubeTensor,
    /// Indices of `Max`.
    pub indices: Option<CubeTensor>,
    /// Input, for `Lp` and `sign`.
    pub x: Option<CubeTensor>,
    /// Spans of `Avg` and `Lp`.
    pub spans: Option<Spans>,
    /// Outputs that may cover each input position.
    pub cover: [Vec<(usize, usize)>; 3],
}

/// Whether there is one output per plane and its window holds every input position (global
/// pooling), so each input's gradient is that output's share alone.
fn one_window_holds_all(x_size: [usize; 3], spans: &Spans) -> bool {
    spans
        .iter()
        .zip(x_size)
        .all(|(axis, len)| match axis.as_slice() {
            [span] => span.start == 0 && span.count == len && (span.step == 1 || len == 1),
            _ => false,
        })
}

/// Run the gather backward for an input of spatial size `x_size`.
pub fn backward(
    inputs: BackwardInputs,
    x_size: [usize; 3],
    params: Params,
    sign: bool,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&inputs.grad)?;
    let grad = contiguous(inputs.grad);
    let grad_dims = dims5(&grad);
    let out_size = spatial(&grad_dims);
    let x_grad = empty(&grad, &shapes::with_spatial(&grad_dims, x_size), grad.dtype);
    let indices = match inputs.indices {
        Some(indices) => contiguous(indices),
        None => empty(&grad, &[1], DType::I32),
    };
    let index_type = int_type(&indices)?;
    let x = inputs.x.map(strided).unwrap_or_else(|| grad.clone());
    let spans = table(
        &grad,
        &inputs
            .spans
            .as_ref()
            .map(flat_spans)
            .transpose()?
            .unwrap_or_default(),
    );
    let cover = table(&grad, &flat_cover(&inputs.cover)?);
    if x_grad.meta.num_elements() == 0 {
        return Ok(x_grad);
    }
    let whole_plane = params.reduction == Reduction::Avg
        && !sign
        && inputs
            .spans
            .as_ref()
            .is_some_and(|spans| one_window_holds_all(x_size, spans));
    // A whole-plane window walks each plane as one flat row.
    let row = if whole_plane {
        x_size.iter().product()
    } else {
        x_size[2]
    };
    let (block_w, cube_count, cube_dim) = row_blocks(&x_grad, row);
    let address = address_type(&[&grad, &indices, &x, &x_grad]);
    let args = pool_args(grad_dims[1], x_size, out_size, params.kernel, &params);
    kernels::pool_backward::launch(
        &x_grad.client.clone(),
        cube_count,
        cube_dim,
        address,
        grad.into_tensor_arg(),
        indices.into_tensor_arg(),
        x.into_tensor_arg(),
        spans.into_tensor_arg(),
        cover.into_tensor_arg(),
        x_grad.clone().into_tensor_arg(),
        args,
        params.reduction,
        sign,
        params.count_include_pad,
        block_w,
        whole_plane,
        [dtype, index_type, accumulator_type(dtype)],
    );
    Ok(x_grad)
}

/// Max-unpool: `x` scattered at `indices` into zeros of spatial size `output_size`.
pub fn max_unpool(
    x: CubeTensor,
    indices: CubeTensor,
    output_size: [usize; 3],
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&x)?;
    let index_type = int_type(&indices)?;
    let (x, indices) = (contiguous(x), contiguous(indices));
    let dims = dims5(&x);
    let out = empty(&x, &shapes::with_spatial(&dims, output_size), x.dtype);
    let client = out.client.clone();
    let (cube_count, cube_dim) = elementwise(&out, out.meta.num_elements());
    unpool::fill_zero::launch(
        &client,
        cube_count,
        cube_dim,
        address_type(&[&out]),
        out.clone().into_tensor_arg(),
        dtype,
    );
    let units = x.meta.num_elements();
    if units > 0 {
        let (cube_count, cube_dim) = elementwise(&x, units);
        unpool::max_unpool_scatter::launch(
            &client,
            cube_count,
            cube_dim,
            address_type(&[&x, &indices, &out]),
            x.into_tensor_arg(),
            indices.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            spatial(&dims).iter().product(),
            output_size.iter().product(),
            [dtype, index_type],
        );
    }
    Ok(out)
}

/// Gradient of max-unpool: `out_grad` gathered at `indices`.
pub fn max_unpool_backward(
    out_grad: CubeTensor,
    indices: CubeTensor,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&out_grad)?;
    let index_type = int_type(&indices)?;
    let (out_grad, indices) = (contiguous(out_grad), contiguous(indices));
    let index_dims = dims5(&indices);
    let x_grad = empty(&out_grad, &index_dims, out_grad.dtype);
    let units = x_grad.meta.num_elements();
    if units > 0 {
        let (cube_count, cube_dim) = elementwise(&x_grad, units);
        unpool::max_unpool_gather::launch(
            &x_grad.client.clone(),
            cube_count,
            cube_dim,
            address_type(&[&out_grad, &indices, &x_grad]),
            out_grad.clone().into_tensor_arg(),
            indices.into_tensor_arg(),
            x_grad.clone().into_tensor_arg(),
            spatial(&index_dims).iter().product(),
            spatial(&dims5(&out_grad)).iter().product(),
            [dtype, index_type],
        );
    }
    Ok(x_grad)
}
