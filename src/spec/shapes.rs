//! Output dims of every primitive of the extension, from its input dims. One home shared by
//! the CPU code, the kernel launchers and the Fusion metadata, which must agree with what the
//! backends return.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::geometry::ConvGeometry;
use super::pool::{AvgPoolNdOptions, LpPoolOptions, MaxPoolOptions, avg_window};
use super::spans::window_out_size;
use super::window::spatial;

/// `(N, C)` of `dims` with the spatial size `size`.
pub fn with_spatial(dims: &[usize], size: [usize; 3]) -> [usize; 5] {
    [dims[0], dims[1], size[0], size[1], size[2]]
}

/// Output of `conv(x, weight)`.
pub fn conv(x: &[usize], weight: &[usize], options: &ConvOptions<3>) -> [usize; 5] {
    ConvGeometry::conv(x, weight, options).out_shape()
}

/// `x` of a conv, from its weight, output gradient and spatial size.
pub fn conv_x(
    weight: &[usize],
    out_grad: &[usize],
    x_size: [usize; 3],
    groups: usize,
) -> [usize; 5] {
    with_spatial(&[out_grad[0], weight[1] * groups], x_size)
}

/// `weight` of a conv, from its input, output gradient and kernel size.
pub fn conv_weight(
    x: &[usize],
    out_grad: &[usize],
    kernel_size: [usize; 3],
    groups: usize,
) -> [usize; 5] {
    with_spatial(&[out_grad[1], x[1] / groups], kernel_size)
}

/// Output of `conv_transpose(x, weight)`.
pub fn conv_transpose(
    x: &[usize],
    weight: &[usize],
    options: &ConvTransposeOptions<3>,
) -> [usize; 5] {
    ConvGeometry::transpose(x, weight, options).in_shape()
}

/// `x` of a conv_transpose, from its weight, output gradient and spatial size.
pub fn conv_transpose_x(weight: &[usize], out_grad: &[usize], x_size: [usize; 3]) -> [usize; 5] {
    with_spatial(&[out_grad[0], weight[0]], x_size)
}

/// `weight` of a conv_transpose, from its input, output gradient and kernel size.
pub fn conv_transpose_weight(
    x: &[usize],
    out_grad: &[usize],
    kernel_size: [usize; 3],
    groups: usize,
) -> [usize; 5] {
    with_spatial(&[x[1], out_grad[1] / groups], kernel_size)
}

/// Output of a sliding-window pool.
pub fn window_pool(x: &[usize], options: &MaxPoolOptions<3>) -> [usize; 5] {
    with_spatial(x, window_out_size(spatial(x), options))
}

/// Output of `avg_pool`.
pub fn avg_pool(x: &[usize], options: &AvgPoolNdOptions<3>) -> [usize; 5] {
    window_pool(x, &avg_window(options))
}

/// Output of `lp_pool`.
pub fn lp_pool(x: &[usize], options: &LpPoolOptions<3>) -> [usize; 5] {
    window_pool(x, &options.window())
}
