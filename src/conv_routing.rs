//! How each convolution primitive maps onto the three passes of one [`ConvGeometry`]:
//! `conv_transpose` is the input gradient of its adjoint conv, and its own gradients are that
//! conv's forward pass and weight gradient with the roles of input and output gradient
//! swapped. One home for this mapping; every backend only provides [`ConvPasses`].

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::spec::{Activation, ConvGeometry, shapes};

/// The three passes of a convolution over a [`ConvGeometry`], on one backend's tensors.
pub trait ConvPasses {
    /// The backend's float tensor.
    type Tensor;

    /// Dims of a rank-5 tensor.
    fn dims(tensor: &Self::Tensor) -> [usize; 5];

    /// `activation(conv(x, weight) [+ bias])`: input side to output side.
    fn forward(
        geometry: &ConvGeometry,
        x: Self::Tensor,
        weight: Self::Tensor,
        bias: Option<Self::Tensor>,
        activation: Option<Activation>,
    ) -> Self::Tensor;

    /// `activation(`the input-side gradient `[+ bias])` (the bias and the activation serve
    /// `conv_transpose`).
    fn data(
        geometry: &ConvGeometry,
        weight: Self::Tensor,
        out_grad: Self::Tensor,
        bias: Option<Self::Tensor>,
        activation: Option<Activation>,
    ) -> Self::Tensor;

    /// The weight gradient.
    fn weight(geometry: &ConvGeometry, x: Self::Tensor, out_grad: Self::Tensor) -> Self::Tensor;
}

/// `activation(conv(x, weight) [+ bias])`.
pub fn conv<P: ConvPasses>(
    x: P::Tensor,
    weight: P::Tensor,
    bias: Option<P::Tensor>,
    options: &ConvOptions<3>,
    activation: Option<Activation>,
) -> P::Tensor {
    let geometry = ConvGeometry::conv(&P::dims(&x), &P::dims(&weight), options);
    P::forward(&geometry, x, weight, bias, activation)
}

/// Gradient of `conv` with respect to `x`.
pub fn conv_x_backward<P: ConvPasses>(
    weight: P::Tensor,
    out_grad: P::Tensor,
    x_size: [usize; 3],
    options: &ConvOptions<3>,
) -> P::Tensor {
    let weight_dims = P::dims(&weight);
    let x_dims = shapes::conv_x(&weight_dims, &P::dims(&out_grad), x_size, options.groups);
    let geometry = ConvGeometry::conv(&x_dims, &weight_dims, options);
    P::data(&geometry, weight, out_grad, None, None)
}

/// Gradient of `conv` with respect to `weight`.
pub fn conv_weight_backward<P: ConvPasses>(
    x: P::Tensor,
    out_grad: P::Tensor,
    kernel_size: [usize; 3],
    options: &ConvOptions<3>,
) -> P::Tensor {
    let x_dims = P::dims(&x);
    let weight_dims =
        shapes::conv_weight(&x_dims, &P::dims(&out_grad), kernel_size, options.groups);
    let geometry = ConvGeometry::conv(&x_dims, &weight_dims, options);
    P::weight(&geometry, x, out_grad)
}

/// `activation(conv_transpose(x, weight) [+ bias])`: the input gradient of the adjoint conv.
pub fn conv_transpose<P: ConvPasses>(
    x: P::Tensor,
    weight: P::Tensor,
    bias: Option<P::Tensor>,
    options: &ConvTransposeOptions<3>,
    activation: Option<Activation>,
) -> P::Tensor {
    let geometry = ConvGeometry::transpose(&P::dims(&x), &P::dims(&weight), options);
    P::data(&geometry, weight, x, bias, activation)
}

/// Gradient of `conv_transpose` with respect to `x`: the adjoint conv's forward pass.
pub fn conv_transpose_x_backward<P: ConvPasses>(
    weight: P::Tensor,
    out_grad: P::Tensor,
    x_size: [usize; 3],
    options: &ConvTransposeOptions<3>,
) -> P::Tensor {
    let weight_dims = P::dims(&weight);
    let x_dims = shapes::conv_transpose_x(&weight_dims, &P::dims(&out_grad), x_size);
    let geometry = ConvGeometry::transpose(&x_dims, &weight_dims, options);
    P::forward(&geometry, out_grad, weight, None, None)
}

/// Gradient of `conv_transpose` with respect to `weight`: the adjoint conv's weight gradient,
/// with the roles of input and output gradient swapped.
pub fn conv_transpose_weight_backward<P: ConvPasses>(
    x: P::Tensor,
    out_grad: P::Tensor,
    kernel_size: [usize; 3],
    options: &ConvTransposeOptions<3>,
) -> P::Tensor {
    let x_dims = P::dims(&x);
    let weight_dims =
        shapes::conv_transpose_weight(&x_dims, &P::dims(&out_grad), kernel_size, options.groups);
    let geometry = ConvGeometry::transpose(&x_dims, &weight_dims, options);
    P::weight(&geometry, out_grad, x)
}
