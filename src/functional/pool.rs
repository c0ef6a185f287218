//! Pooling over `burn::Tensor`: validate with `spec` at rank 3 (options and sizes lifted), call
//! the backend at the caller's rank (`lift.rs`). One rank-generic function per op;
//! `pool_fns.rs` wraps each per rank.

use burn::backend::Dispatch;
use burn::tensor::{Distribution, Int, IntDType, Tensor};

use crate::backend::ConvPoolBackend;
use crate::spec::{
    AvgPoolNdOptions, FractionalMaxPoolOptions, LpPoolOptions, MaxPoolOptions, MaxUnpoolOptions,
    SpecError, SpecErrorKind, SpecResult, avg_window, check_adaptive, check_avg_pool,
    check_float_dtype, check_fractional, check_index_dtype, check_input_rank, check_lp_pool,
    check_max_unpool, check_nonempty, check_same_dtype, check_window, shapes, spatial, used_step,
};

use super::device::{check_device_dtype, check_kernel_values, check_output_memory};
use super::lift::{Input, InputShape, lift_input, with_batch};

/// An adaptive pool's output size; `None` keeps that input dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AdaptiveSize<const N: usize>(pub [Option<usize>; N]);

impl<const N: usize> From<[usize; N]> for AdaptiveSize<N> {
    fn from(size: [usize; N]) -> Self {
        Self(size.map(Some))
    }
}

impl From<usize> for AdaptiveSize<1> {
    fn from(size: usize) -> Self {
        Self([Some(size)])
    }
}

impl<const N: usize> From<[Option<usize>; N]> for AdaptiveSize<N> {
    fn from(size: [Option<usize>; N]) -> Self {
        Self(size)
    }
}

/// Check that the device of `x` can hold the pool's output (and its indices, when
/// `index_dtype` is given) and every value its kernels read: the input and output spatial
/// sizes, which bound every window table entry, and `params`.
fn check_pool_device<const D: usize>(
    op: &'static str,
    x: &Input<D>,
    shape: &InputShape<D>,
    out_dims: [usize; 5],
    index_dtype: Option<IntDType>,
    params: Vec<(&'static str, usize)>,
) -> SpecResult<()> {
    check_output_memory(op, x, shape, out_dims, index_dtype)?;
    let sizes = spatial(&x.dims()).map(|size| ("input size", size));
    let out_sizes = spatial(&out_dims).map(|size| ("output size", size));
    check_kernel_values(
        op,
        &x.device(),
        sizes.into_iter().chain(out_sizes).chain(params),
    )
}

/// A sliding window's parameters (as the backends build it: `avg_window`, `LpPoolOptions::window`),
/// strides and dilations as computations read them.
fn window_params(out_dims: &[usize], window: &MaxPoolOptions<3>) -> Vec<(&'static str, usize)> {
    let out = spatial(out_dims);
    (0..3)
        .flat_map(|i| {
            [
                ("kernel size", window.kernel_size[i]),
                ("stride", used_step(window.stride[i], out[i])),
                (
                    "dilation",
                    used_step(window.dilation[i], window.kernel_size[i]),
                ),
                ("padding", window.padding[i].0),
                ("padding", window.padding[i].1),
            ]
        })
        .collect()
}

/// Check the rank and emptiness of a pooling input, then lift it to rank 5.
fn lift_pool_input<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
) -> SpecResult<(Input<D>, InputShape<D>)> {
    let batched = check_input_rank(op, N, D)?;
    check_float_dtype(op, x.dtype())?;
    // Before any of Burn's kernels run in this dtype (fractional samples, their range check).
    check_device_dtype(op, &x.device(), x.dtype())?;
    check_nonempty(op, &with_batch(x.dims().to_vec(), batched))?;
    Ok(lift_input::<N, D>(x, batched))
}

/// [`lift_pool_input`] for a pool with indices, and the index dtype (the device's int dtype),
/// checked to hold every flat index into an input plane.
fn lift_indexed_pool_input<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
) -> SpecResult<(Input<D>, InputShape<D>, IntDType)> {
    let dtype = x.device().settings().int_dtype;
    let (x, shape) = lift_pool_input::<N, D>(op, x)?;
    check_index_dtype(op, shape.dims[2..].iter().product(), dtype.into())?;
    Ok((x, shape, dtype))
}

pub(super) fn try_max_pool_with_indices<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: MaxPoolOptions<N>,
) -> SpecResult<(Tensor<D>, Tensor<D, Int>)> {
    let (x, shape, dtype) = lift_indexed_pool_input::<N, D>(op, x)?;
    let options = check_window(op, &shape.dims, &options)?;
    let out_dims = shapes::window_pool(&x.dims(), &options);
    let params = window_params(&out_dims, &options);
    check_pool_device(op, &x, &shape, out_dims, Some(dtype), params)?;
    let (out, indices) =
        <Dispatch as ConvPoolBackend>::max_pool_with_indices(x.into_dispatch(), options, dtype);
    Ok((shape.restore(out), shape.restore_int(indices)))
}

pub(super) fn try_max_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: MaxPoolOptions<N>,
) -> SpecResult<Tensor<D>> {
    try_max_pool_with_indices::<N, D>(op, x, options).map(|(out, _)| out)
}

pub(super) fn try_avg_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: AvgPoolNdOptions<N>,
) -> SpecResult<Tensor<D>> {
    let (x, shape) = lift_pool_input::<N, D>(op, x)?;
    let options = check_avg_pool(op, &shape.dims, &options)?;
    let out_dims = shapes::avg_pool(&x.dims(), &options);
    let params = window_params(&out_dims, &avg_window(&options));
    check_pool_device(op, &x, &shape, out_dims, None, params)?;
    let out = <Dispatch as ConvPoolBackend>::avg_pool(x.into_dispatch(), options);
    Ok(shape.restore(out))
}

pub(super) fn try_lp_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: LpPoolOptions<N>,
) -> SpecResult<Tensor<D>> {
    let (x, shape) = lift_pool_input::<N, D>(op, x)?;
    let options = check_lp_pool(op, &shape.dims, &options)?;
    let out_dims = shapes::lp_pool(&x.dims(), &options);
    let mut params = window_params(&out_dims, &options.window());
    params.push(("kernel volume", options.kernel_size.iter().product()));
    check_pool_device(op, &x, &shape, out_dims, None, params)?;
    let out = <Dispatch as ConvPoolBackend>::lp_pool(x.into_dispatch(), options);
    Ok(shape.restore(out))
}

/// An empty batch's adaptive pool: no element to compute, and no window table to build (an
/// adaptive output may be any size, so its table may not fit in memory), but still the input
/// reshaped, so autodiff gives the input its (empty) gradient as PyTorch does.
fn empty_batch<const D: usize>(
    x: Input<D>,
    shape: &InputShape<D>,
    out_dims: [usize; 5],
) -> Tensor<D> {
    x.reshaped(shape.restored_dims(out_dims))
}

pub(super) fn try_adaptive_avg_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    output_size: AdaptiveSize<N>,
) -> SpecResult<Tensor<D>> {
    let (x, shape) = lift_pool_input::<N, D>(op, x)?;
    let output_size = check_adaptive(op, &shape.dims, output_size.0)?;
    let out_dims = shapes::with_spatial(&x.dims(), output_size);
    check_pool_device(op, &x, &shape, out_dims, None, Vec::new())?;
    if out_dims[0] == 0 {
        return Ok(empty_batch(x, &shape, out_dims));
    }
    let out = <Dispatch as ConvPoolBackend>::adaptive_avg_pool(x.into_dispatch(), output_size);
    Ok(shape.restore(out))
}

pub(super) fn try_adaptive_max_pool_with_indices<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    output_size: AdaptiveSize<N>,
) -> SpecResult<(Tensor<D>, Tensor<D, Int>)> {
    let (x, shape, dtype) = lift_indexed_pool_input::<N, D>(op, x)?;
    let output_size = check_adaptive(op, &shape.dims, output_size.0)?;
    let out_dims = shapes::with_spatial(&x.dims(), output_size);
    check_pool_device(op, &x, &shape, out_dims, Some(dtype), Vec::new())?;
    if out_dims[0] == 0 {
        let indices = Tensor::<D, Int>::zeros(shape.restored_dims(out_dims), &x.device());
        return Ok((empty_batch(x, &shape, out_dims), indices));
    }
    let (out, indices) =
        <Dispatch as ConvPoolBackend>::adaptive_max_pool(x.into_dispatch(), output_size, dtype);
    Ok((shape.restore(out), shape.restore_int(indices)))
}

pub(super) fn try_adaptive_max_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    output_size: AdaptiveSize<N>,
) -> SpecResult<Tensor<D>> {
    try_adaptive_max_pool_with_indices::<N, D>(op, x, output_size).map(|(out, _)| out)
}

/// Samples as the backend wants them: `(N, C, 3)` ordered (D, H, W). PyTorch's 2d order is
/// (W, H); its 3d order is already (T, H, W).
fn lift_samples<const N: usize>(samples: Tensor<3>) -> Tensor<3> {
    let [n, c, _] = samples.dims();
    match N {
        2 => {
            let w = samples.clone().narrow(2, 0, 1);
            let h = samples.narrow(2, 1, 1);
            let unused = Tensor::<3>::zeros([n, c, 1], &w.device()).cast(w.dtype());
            Tensor::cat(vec![unused, h, w], 2)
        }
        _ => samples,
    }
}

/// Given samples must lie in `[0, 1]`: there every window starts within one position of
/// `i * alpha`, which the backward kernels rely on (and PyTorch's windows stay in the input).
/// One blocking device-to-host read of one bool; the values are read only to name a bad one.
fn check_samples(op: &'static str, samples: &Tensor<3>) -> SpecResult<()> {
    if samples.shape().num_elements() == 0 {
        return Ok(());
    }
    // A NaN fails both comparisons.
    let inside = samples
        .clone()
        .greater_equal_elem(0.0)
        .bool_and(samples.clone().lower_equal_elem(1.0))
        .all();
    if inside.into_scalar::<bool>() {
        return Ok(());
    }
    let [_, c, axes] = samples.dims();
    let values = samples.clone().into_data().convert::<f64>();
    let bad = values
        .iter::<f64>()
        .enumerate()
        .find(|(_, value)| !(0.0..=1.0).contains(value));
    let (flat, value) = bad.unwrap_or((0, f64::NAN));
    let at = [flat / (c * axes), flat / axes % c, flat % axes];
    Err(SpecError::new(
        op,
        SpecErrorKind::FractionalSample { value, at },
    ))
}

pub(super) fn try_fractional_max_pool_with_indices<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: FractionalMaxPoolOptions<N>,
    samples: Option<Tensor<3>>,
) -> SpecResult<(Tensor<D>, Tensor<D, Int>)> {
    let (x, shape, dtype) = lift_indexed_pool_input::<N, D>(op, x)?;
    let (kernel, output_size) = check_fractional(op, &shape.dims, &options)?;
    let out_dims = shapes::with_spatial(&x.dims(), output_size);
    let params = kernel.map(|size| ("kernel size", size)).to_vec();
    check_pool_device(op, &x, &shape, out_dims, Some(dtype), params)?;
    let (n, c) = (shape.dims[0], shape.dims[1]);
    let samples = samples
        .map(|samples| check_given_samples(op, samples, x.dtype(), [n, c, N]))
        .transpose()?;
    if n == 0 {
        // Nothing to pool and no samples to draw or reorder (Burn's `cat` of empty CubeCL
        // tensors overflows in its overlap check).
        let indices = Tensor::<D, Int>::zeros(shape.restored_dims(out_dims), &x.device());
        return Ok((empty_batch(x, &shape, out_dims), indices));
    }
    let samples = match samples {
        Some(samples) => samples,
        None => Tensor::<3>::random([n, c, N], Distribution::Uniform(0.0, 1.0), &x.device()),
    };
    let samples = lift_samples::<N>(samples.cast(x.dtype()));
    let (out, indices) = <Dispatch as ConvPoolBackend>::fractional_max_pool(
        x.into_dispatch(),
        samples.into_dispatch(),
        kernel,
        output_size,
        dtype,
    );
    Ok((shape.restore(out), shape.restore_int(indices)))
}

/// Given samples checked: the input's dtype (PyTorch: "Expect _random_samples to have the same
/// dtype as input"), shape `(N, C, spatial dims)`, values in the unit interval.
fn check_given_samples(
    op: &'static str,
    samples: Tensor<3>,
    dtype: burn::tensor::DType,
    expected: [usize; 3],
) -> SpecResult<Tensor<3>> {
    check_same_dtype(op, "samples", dtype, samples.dtype())?;
    if samples.dims() != expected {
        return Err(SpecError::new(
            op,
            SpecErrorKind::ShapeMismatch {
                what: "samples shape vs (N, C, spatial dims)",
                expected: expected.to_vec(),
                actual: samples.dims().to_vec(),
            },
        ));
    }
    check_samples(op, &samples)?;
    Ok(samples)
}

pub(super) fn try_fractional_max_pool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    options: FractionalMaxPoolOptions<N>,
    samples: Option<Tensor<3>>,
) -> SpecResult<Tensor<D>> {
    try_fractional_max_pool_with_indices::<N, D>(op, x, options, samples).map(|(out, _)| out)
}

pub(super) fn try_max_unpool<const N: usize, const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    indices: Tensor<D, Int>,
    options: MaxUnpoolOptions<N>,
) -> SpecResult<Tensor<D>> {
    let batched = check_input_rank(op, N, D)?;
    check_float_dtype(op, x.dtype())?;
    check_device_dtype(op, &x.device(), x.dtype())?;
    check_device_dtype(op, &indices.device(), indices.dtype())?;
    let x_dims = with_batch(x.dims().to_vec(), batched);
    let index_dims = with_batch(indices.dims().to_vec(), batched);
    let output_size = check_max_unpool(op, &x_dims, &index_dims, &options)?;
    let (x, shape) = lift_input::<N, D>(x, batched);
    let out_dims = shapes::with_spatial(&x.dims(), output_size);
    check_pool_device(op, &x, &shape, out_dims, None, Vec::new())?;
    let plane: usize = output_size.iter().product();
    // Data-dependent check: the min and max reductions read back together (one blocking
    // device-to-host read), so a bad index is an error, not a write out of bounds (the
    // backend checks again and panics).
    if indices.shape().num_elements() > 0 {
        let bounds = Tensor::cat(vec![indices.clone().min(), indices.clone().max()], 0);
        for index in bounds.into_data().convert::<i64>().iter::<i64>() {
            if index < 0 || index as usize >= plane {
                return Err(SpecError::new(
                    op,
                    SpecErrorKind::IndexOutOfRange { index, plane },
                ));
            }
        }
    }
    let indices = shape.operand_int(indices);
    let out = <Dispatch as ConvPoolBackend>::max_unpool(x.into_dispatch(), indices, output_size);
    Ok(shape.restore(out))
}
