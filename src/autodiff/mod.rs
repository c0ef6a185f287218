//! `ConvPoolBackend` for `Autodiff<B, C>`: each forward op records a hand-written backward step
//! that calls the inner backend's gradient primitives, and only for the inputs that are tracked.
//! The gradient primitives themselves are not differentiable again (no double backward), as
//! with Burn's own conv and pool ops.

mod conv;

use burn::backend::autodiff::{Autodiff, checkpoint::strategy::CheckpointStrategy};
use burn::backend::tensor::FloatTensor;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::backend::ConvPoolBackend;
use conv::{ConvKind, record};

fn no_double_backward(op: &str) -> ! {
    panic!("{op}: double backward (a gradient of a gradient) is not supported")
}

impl<B: ConvPoolBackend, C: CheckpointStrategy> ConvPoolBackend for Autodiff<B, C> {
    fn conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Conv(options), x, weight, None)
    }

    fn conv_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Conv(options), x, weight, Some(bias))
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
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Transpose(options), x, weight, None)
    }

    fn conv_transpose_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self> {
        record::<B, C>(ConvKind::Transpose(options), x, weight, Some(bias))
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
}
