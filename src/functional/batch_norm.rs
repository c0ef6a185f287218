//! `batch_norm_act_train`: a training-mode batch norm with an activation after it, in two
//! passes over the input each way (burn's `batch_norm_train` then an activation is a pass per
//! tensor operation in Burn's default composition, and another for the activation).

use burn::backend::Dispatch;
use burn::tensor::Tensor;

use crate::backend::ConvPoolBackend;
use crate::spec::{
    BatchNormActOptions, SpecResult, check_batch_norm_train, check_float_dtype, check_same_dtype,
};

use super::device::check_device_dtype;

/// What [`batch_norm_act_train`] returns.
#[derive(Debug, Clone)]
pub struct BatchNormActOutput<const D: usize> {
    /// `activation((x - mean) / sqrt(variance + epsilon) * gamma + beta)`, `x`'s shape.
    pub output: Tensor<D>,
    /// Each channel's mean over the batch and spatial axes, `(C)`; detached.
    pub mean: Tensor<1>,
    /// Each channel's biased variance (divided by the values per channel, `M`), `(C)`;
    /// detached. PyTorch's running variance takes the unbiased one, `variance * M / (M - 1)`.
    pub variance: Tensor<1>,
}

/// A batch norm over the batch's own statistics followed by `options.activation`: PyTorch's
/// `act(F.batch_norm(x, None, None, gamma, beta, training=True, eps=epsilon))`, which also
/// returns the statistics (a module updates its running ones from them). The statistics are
/// summed pairwise in two passes (mean, then squared deviations); the backward is one step for
/// `x`, `gamma` and `beta` that recomputes the activation's input from `x`.
///
/// # Shapes
/// - `x`: `(N, C, *spatial)` with 1 to 3 spatial axes; `gamma`, `beta`: `(C)`
/// - output: `x`'s shape
///
/// # Panics
/// On a rank other than 3 to 5, parameters of another length or dtype, an epsilon that is not
/// finite and positive, or one value per channel (PyTorch's "Expected more than 1 value per
/// channel when training"). [`try_batch_norm_act_train`] returns the error instead. An empty
/// batch gives an empty output and NaN statistics.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_convpool::{Activation, BatchNormActOptions, batch_norm_act_train};
/// let device = Device::flex();
/// let x = Tensor::<3>::from_floats([[[1.0, 3.0]], [[5.0, 7.0]]], &device);
/// let (gamma, beta) = (Tensor::ones([1], &device), Tensor::zeros([1], &device));
/// let options = BatchNormActOptions::default().with_activation(Activation::Relu);
/// let result = batch_norm_act_train(x, gamma, beta, options);
/// assert_eq!(result.mean.into_scalar::<f32>(), 4.0);
/// assert_eq!(result.variance.into_scalar::<f32>(), 5.0);
/// let out: Vec<f32> = result.output.into_data().to_vec().unwrap();
/// assert_eq!(out[0], 0.0);
/// assert!((out[3] - 3.0 / 5.0f32.sqrt()).abs() < 1e-5);
/// ```
pub fn batch_norm_act_train<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    options: BatchNormActOptions,
) -> BatchNormActOutput<D> {
    try_batch_norm_act_train(x, gamma, beta, options).unwrap_or_else(|error| panic!("{error}"))
}

/// [`batch_norm_act_train`], returning the validation error instead of panicking.
pub fn try_batch_norm_act_train<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    options: BatchNormActOptions,
) -> SpecResult<BatchNormActOutput<D>> {
    check_train("batch_norm_act_train", &x, &gamma, &beta, &options)?;
    let (output, mean, variance) = <Dispatch as ConvPoolBackend>::batch_norm_act(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        options.epsilon,
        options.activation,
    );
    Ok(BatchNormActOutput {
        output: Tensor::from_dispatch(output),
        mean: Tensor::from_dispatch(mean),
        variance: Tensor::from_dispatch(variance),
    })
}

/// `x` `(N, C, *spatial)`, `gamma` and `beta` `(C)` in one float dtype, and an epsilon a
/// training batch norm takes.
fn check_train<const D: usize>(
    op: &'static str,
    x: &Tensor<D>,
    gamma: &Tensor<1>,
    beta: &Tensor<1>,
    options: &BatchNormActOptions,
) -> SpecResult<()> {
    let dtype = x.dtype();
    check_float_dtype(op, dtype)?;
    check_device_dtype(op, &x.device(), dtype)?;
    check_same_dtype(op, "gamma", dtype, gamma.dtype())?;
    check_same_dtype(op, "beta", dtype, beta.dtype())?;
    check_batch_norm_train(
        op,
        &x.dims(),
        [
            ("gamma.shape[0] vs channels", gamma.dims()[0]),
            ("beta.shape[0] vs channels", beta.dims()[0]),
        ],
        options.epsilon,
    )?;
    Ok(())
}

/// [`batch_norm_act_train`]'s output over `x`'s own mean and biased variance, already summed
/// by the conv that wrote `x` (`conv::try_conv_moments`): one pass forward, the same backward.
pub(crate) fn try_batch_norm_act_given<const D: usize>(
    op: &'static str,
    x: Tensor<D>,
    [gamma, beta]: [Tensor<1>; 2],
    [mean, variance]: [Tensor<1>; 2],
    options: BatchNormActOptions,
) -> SpecResult<Tensor<D>> {
    check_train(op, &x, &gamma, &beta, &options)?;
    let out = <Dispatch as ConvPoolBackend>::batch_norm_act_given(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        mean.into_dispatch(),
        variance.into_dispatch(),
        options.epsilon,
        options.activation,
    );
    Ok(Tensor::from_dispatch(out))
}
