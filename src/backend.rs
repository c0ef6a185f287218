#![cfg_attr(feature = "ndarray", allow(deprecated))]
//! The backend extension: one primitive per forward pass and per gradient.
//!
//! Every primitive is rank-erased: tensors are rank 5 (`N, C, D, H, W`) and options rank 3, with
//! 1d and 2d lifted by leading unit axes in `functional`. That keeps the signatures
//! non-generic, as the macro's `Fusion` support requires, and gives each backend one
//! implementation per op instead of three. Shapes are validated before a primitive is called;
//! primitives trust them.

use burn::backend::{Backend, backend_extension, tensor::FloatTensor};
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

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
}
