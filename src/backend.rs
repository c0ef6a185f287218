#![cfg_attr(feature = "ndarray", allow(deprecated))]
//! The backend extension: one primitive per forward pass and per gradient.
//!
//! Every primitive is rank-erased: tensors are rank 5 (`N, C, D, H, W`) and options rank 3, with
//! 1d and 2d lifted by leading unit axes in `functional`. That keeps the signatures
//! non-generic, as the macro's `Fusion` support requires, and gives each backend one
//! implementation per op instead of three. Shapes are validated before a primitive is called;
//! primitives trust them.

use burn::backend::{
    Backend, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::IntDType;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::spec::{AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions};

/// Convolution and pooling primitives, implemented for Flex, NdArray (feature `ndarray`) and
/// `Autodiff<B, C>`.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Autodiff: cfg(feature = "autodiff"),
)]
pub trait ConvPoolBackend: Backend {
    /// `conv(x, weight)`; `x = (N, C_in, D, H, W)`, `weight = (C_out, C_in / groups, kD, kH, kW)`.
    fn conv(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// `conv(x, weight) + bias`, `bias = (C_out)`.
    fn conv_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv` with respect to `x`, whose spatial size is `x_size`.
    fn conv_x_backward(
        weight: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv` with respect to `weight`, whose kernel size is `kernel_size`.
    fn conv_weight_backward(
        x: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        kernel_size: [usize; 3],
        options: ConvOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of a per-channel bias (of `conv` and `conv_transpose` alike): `out_grad`
    /// summed over every axis but the channel.
    fn conv_bias_backward(out_grad: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `conv_transpose(x, weight)`; `x = (N, C_in, D, H, W)`,
    /// `weight = (C_in, C_out / groups, kD, kH, kW)`.
    fn conv_transpose(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// `conv_transpose(x, weight) + bias`, `bias = (C_out)`.
    fn conv_transpose_with_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv_transpose` with respect to `x`, whose spatial size is `x_size`.
    fn conv_transpose_x_backward(
        weight: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// Gradient of `conv_transpose` with respect to `weight`, whose kernel size is
    /// `kernel_size`.
    fn conv_transpose_weight_backward(
        x: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        kernel_size: [usize; 3],
        options: ConvTransposeOptions<3>,
    ) -> FloatTensor<Self>;

    /// Max pooling with PyTorch's indices (flat per `(n, c)` plane of the unpadded input).
    fn max_pool_with_indices(
        x: FloatTensor<Self>,
        options: MaxPoolOptions<3>,
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// Gradient of every index-producing pool (max, adaptive max, fractional max): `out_grad`
    /// added into a zero input of spatial size `x_size` at `indices`.
    fn max_pool_backward(
        out_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
        x_size: [usize; 3],
    ) -> FloatTensor<Self>;

    /// Average pooling with `count_include_pad`, ceil mode and `divisor_override`.
    fn avg_pool(x: FloatTensor<Self>, options: AvgPoolNdOptions<3>) -> FloatTensor<Self>;

    /// Gradient of `avg_pool` for an input of spatial size `x_size`.
    fn avg_pool_backward(
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
        options: AvgPoolNdOptions<3>,
    ) -> FloatTensor<Self>;

    /// Adaptive average pooling to `output_size`.
    fn adaptive_avg_pool(x: FloatTensor<Self>, output_size: [usize; 3]) -> FloatTensor<Self>;

    /// Gradient of `adaptive_avg_pool` for an input of spatial size `x_size`.
    fn adaptive_avg_pool_backward(
        out_grad: FloatTensor<Self>,
        x_size: [usize; 3],
    ) -> FloatTensor<Self>;

    /// Adaptive max pooling to `output_size`, with indices.
    fn adaptive_max_pool(
        x: FloatTensor<Self>,
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// Fractional max pooling; `samples = (N, C, 3)` in `[0, 1)`, ordered (D, H, W).
    fn fractional_max_pool(
        x: FloatTensor<Self>,
        samples: FloatTensor<Self>,
        kernel_size: [usize; 3],
        output_size: [usize; 3],
        indices_dtype: IntDType,
    ) -> (FloatTensor<Self>, IntTensor<Self>);

    /// LP pooling, PyTorch's formula (`p = inf` is the max of `|x|`).
    fn lp_pool(x: FloatTensor<Self>, options: LpPoolOptions<3>) -> FloatTensor<Self>;

    /// Gradient of `lp_pool` (recomputes the window sums from `x`).
    fn lp_pool_backward(
        x: FloatTensor<Self>,
        out_grad: FloatTensor<Self>,
        options: LpPoolOptions<3>,
    ) -> FloatTensor<Self>;

    /// Max-unpool: `x` written at `indices` into a zero output of spatial size `output_size`.
    fn max_unpool(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        output_size: [usize; 3],
    ) -> FloatTensor<Self>;

    /// Gradient of `max_unpool`: `out_grad` gathered at `indices`.
    fn max_unpool_backward(
        out_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self>;
}
