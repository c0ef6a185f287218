//! `ConvPoolBackend` for `Autodiff<B, C>`: each forward op records a hand-written backward step
//! that calls the inner backend's gradient primitives, and only for the inputs that are tracked.
//! The gradient primitives themselves are not differentiable again (no double backward), as
//! with Burn's own conv and pool ops.

mod activation;
mod batch_norm;
mod conv;
mod pool;

use burn::backend::autodiff::{Autodiff, checkpoint::strategy::CheckpointStrategy};
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::tensor::IntDType;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::backend::ConvPoolBackend;
use crate::spec::{Activation, AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, WindowRule};
use conv::{ConvKind, record};
use pool::{AdaptiveAvgBackward, AvgBackward, IndexBackward, UnpoolBackward, record_lp};

fn no_double_backward(op: &str) -> ! {
    panic!("{op}: double backward (a gradient of a gradient) is not supported")
}

impl<B: ConvPoolBackend, C: CheckpointStrategy> ConvPoolBackend for Autodiff<B, C> {
    fn conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Conv(options), x, weight, None, activation)
    }

    fn conv_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Conv(options), x, weight, Some(bias), activation)
    }

    fn conv_x_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: [usize; 3],
        _: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("conv_x_backward")
    }

    fn conv_weight_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: [usize; 3],
        _: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("conv_weight_backward")
    }

    fn conv_bias_backward(_: FloatTensor<Self>) -> FloatTensor<Self> {
        no_double_backward("conv_bias_backward")
    }

    fn conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Transpose(options), x, weight, None, activation)
    }

    fn conv_transpose_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
        activation: Option<Activation>,
    ) -> FloatTensor<Self> {
        record::<B, C>(
            ConvKind::Transpose(options),
            x,
            weight,
            Some(bias),
            activation,
        )
    }

    fn activate(x: FloatTensor<Self>, activation: Activation) -> FloatTensor<Self> {
        activation::record::<B, C>(x, activation)
    }

    fn activation_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: Activation,
    ) -> FloatTensor<Self> {
        no_double_backward("activation_backward")
    }

    fn batch_norm_act(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
        activation: Option<Activation>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [out, mean, variance] = batch_norm::record::<B, C>(x, gamma, beta, epsilon, activation);
        (out, mean, variance)
    }

    fn batch_norm_act_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: f64,
        _: Option<Activation>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        no_double_backward("batch_norm_act_backward")
    }

    fn conv_moments(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [out, mean, variance] = conv::record_moments::<B, C>(x, weight, options);
        (out, mean, variance)
    }

    fn batch_norm_act_given(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        variance: FloatTensor<Self>,
        epsilon: f64,
        activation: Option<Activation>,
    ) -> FloatTensor<Self> {
        batch_norm::record_given::<B, C>(x, gamma, beta, mean, variance, epsilon, activation)
    }

    fn conv_transpose_x_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: [usize; 3],
        _: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("conv_transpose_x_backward")
    }

    fn conv_transpose_weight_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: [usize; 3],
        _: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("conv_transpose_weight_backward")
    }

    fn max_pool_with_indices(
        x: FloatTensor<Self>,
        options: MaxPoolOptions<3>,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        let windows = WindowRule::Sliding(options.clone());
        pool::record::<B, C, _, _>(
            IndexBackward,
            x,
            |x| B::max_pool_with_indices(x, options, indices_dtype),
            |indices, x_size| (indices.clone(), x_size, windows),
        )
    }

    fn max_pool_backward(
        _: FloatTensor<Self>,
        _: IntTensor<Self>,
        _: [usize; 3],
        _: WindowRule,
    ) -> FloatTensor<Self> {
        no_double_backward("max_pool_backward")
    }

    fn avg_pool(x: FloatTensor<Self>, options: AvgPoolNdOptions<3>) -> FloatTensor<Self> {
        let state_options = options.clone();
        pool::record::<B, C, _, _>(
            AvgBackward,
            x,
            |x| (B::avg_pool(x, options), ()),
            |_, x_size| (x_size, state_options),
        )
        .0
    }

    fn avg_pool_backward(
        _: FloatTensor<Self>,
        _: [usize; 3],
        _: AvgPoolNdOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("avg_pool_backward")
    }

    fn adaptive_avg_pool(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self> {
        pool::record::<B, C, _, _>(
            AdaptiveAvgBackward,
            x,
            |x| (B::adaptive_avg_pool(x, output_size), ()),
            |_, x_size| x_size,
        )
        .0
    }

    fn adaptive_avg_pool_backward(_: FloatTensor<Self>, _: [usize; 3]) -> FloatTensor<Self> {
        no_double_backward("adaptive_avg_pool_backward")
    }

    fn adaptive_max_pool(
        x: FloatTensor<Self>,
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        pool::record::<B, C, _, _>(
            IndexBackward,
            x,
            |x| B::adaptive_max_pool(x, output_size, indices_dtype),
            |indices, x_size| (indices.clone(), x_size, WindowRule::Adaptive),
        )
    }

    fn fractional_max_pool(
        x: FloatTensor<Self>,
        samples: FloatTensor<Self>,
        kernel_size: [usize; 3],
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>) {
        let samples = samples.into_primitive();
        pool::record::<B, C, _, _>(
            IndexBackward,
            x,
            |x| B::fractional_max_pool(x, samples, kernel_size, output_size, indices_dtype),
            |indices, x_size| {
                (
                    indices.clone(),
                    x_size,
                    WindowRule::Fractional { kernel_size },
                )
            },
        )
    }

    fn lp_pool(x: FloatTensor<Self>, options: LpPoolOptions<3>) -> FloatTensor<Self> {
        record_lp::<B, C>(x, options)
    }

    fn lp_pool_backward(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: LpPoolOptions<3>,
    ) -> FloatTensor<Self> {
        no_double_backward("lp_pool_backward")
    }

    fn max_unpool(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        output_size: [usize; 3],
    ) -> FloatTensor<Self> {
        let state_indices = indices.clone();
        pool::record::<B, C, _, _>(
            UnpoolBackward,
            x,
            |x| (B::max_unpool(x, indices, output_size), ()),
            |_, _| state_indices,
        )
        .0
    }

    fn max_unpool_backward(_: FloatTensor<Self>, _: IntTensor<Self>) -> FloatTensor<Self> {
        no_double_backward("max_unpool_backward")
    }
}
