//! [`ConvGeometry`]: what a convolution kernel reads, worked out once from validated shapes and
//! options. The CPU kernels, the CubeCL kernels and the conv routing all compute from it.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::window::{out_len, transpose_out_len, used_step};

/// Everything a convolution kernel reads, in rank 3.
///
/// For a transposed convolution this is the geometry of its adjoint convolution: `in_*` is the
/// transposed conv's *output* side and `out_*` its *input* side. Sizes are explicit on both
/// sides because `output_padding` makes the big side ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch size.
    pub batch: usize,
    /// Groups.
    pub groups: usize,
    /// Channels on the input (big) side.
    pub in_channels: usize,
    /// Channels on the output (small) side.
    pub out_channels: usize,
    /// Spatial size of the input side.
    pub in_size: [usize; 3],
    /// Spatial size of the output side.
    pub out_size: [usize; 3],
    /// Kernel size.
    pub kernel: [usize; 3],
    /// Stride.
    pub stride: [usize; 3],
    /// Dilation.
    pub dilation: [usize; 3],
    /// Zeros before the input on each dim (the end padding is implied by the sizes).
    pub pad_begin: [usize; 3],
}

impl ConvGeometry {
    /// Geometry of `conv(x, weight)` for rank-5 shapes `x = (N, C_in, D, H, W)`,
    /// `weight = (C_out, C_in / groups, kD, kH, kW)`.
    pub fn conv(x: &[usize], weight: &[usize], options: &ConvOptions<3>) -> Self {
        let in_size = [x[2], x[3], x[4]];
        let kernel = [weight[2], weight[3], weight[4]];
        let out_size = core::array::from_fn(|i| {
            out_len(
                in_size[i],
                options.padding[i],
                kernel[i],
                options.stride[i],
                options.dilation[i],
                false,
            )
            .unwrap_or(0)
        });
        Self {
            batch: x[0],
            groups: options.groups,
            in_channels: x[1],
            out_channels: weight[0],
            in_size,
            out_size,
            kernel,
            stride: options.stride,
            dilation: options.dilation,
            pad_begin: options.padding.map(|(begin, _)| begin),
        }
    }

    /// Geometry of the convolution whose adjoint is `conv_transpose(x, weight)`, for rank-5
    /// `x = (N, C_in, D, H, W)` and `weight = (C_in, C_out / groups, kD, kH, kW)`.
    pub fn transpose(x: &[usize], weight: &[usize], options: &ConvTransposeOptions<3>) -> Self {
        let kernel = [weight[2], weight[3], weight[4]];
        let small = [x[2], x[3], x[4]];
        let big = core::array::from_fn(|i| {
            transpose_out_len(
                small[i],
                kernel[i],
                options.stride[i],
                options.padding[i],
                options.padding_out[i],
                options.dilation[i],
            )
            .unwrap_or(0)
        });
        Self {
            batch: x[0],
            groups: options.groups,
            in_channels: weight[1] * options.groups,
            out_channels: x[1],
            in_size: big,
            out_size: small,
            kernel,
            stride: options.stride,
            dilation: options.dilation,
            pad_begin: options.padding,
        }
    }

    /// Shape `(N, C_in, D, H, W)` of the input side.
    pub fn in_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.in_size;
        [self.batch, self.in_channels, d, h, w]
    }

    /// Shape `(N, C_out, D, H, W)` of the output side.
    pub fn out_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.out_size;
        [self.batch, self.out_channels, d, h, w]
    }

    /// Shape of the convolution weight `(C_out, C_in / groups, kD, kH, kW)`.
    pub fn weight_shape(&self) -> [usize; 5] {
        let [d, h, w] = self.kernel;
        [self.out_channels, self.in_channels / self.groups, d, h, w]
    }

    /// Input-side channels per group.
    pub fn in_per_group(&self) -> usize {
        self.in_channels / self.groups
    }

    /// Output-side channels per group.
    pub fn out_per_group(&self) -> usize {
        self.out_channels / self.groups
    }

    /// Elements of one im2col column: `C_in / groups * kD * kH * kW`.
    pub fn patch_len(&self) -> usize {
        self.in_per_group() * self.kernel.iter().product::<usize>()
    }

    /// Spatial elements of the input side.
    pub fn in_volume(&self) -> usize {
        self.in_size.iter().product()
    }

    /// Spatial elements of the output side.
    pub fn out_volume(&self) -> usize {
        self.out_size.iter().product()
    }

    /// The geometry as a computation reads it: strides and dilations through [`used_step`].
    pub fn normalised(&self) -> Self {
        Self {
            stride: core::array::from_fn(|i| used_step(self.stride[i], self.out_size[i])),
            dilation: core::array::from_fn(|i| used_step(self.dilation[i], self.kernel[i])),
            ..*self
        }
    }

    /// Every size and parameter, named: what a kernel with narrow integer arithmetic must be
    /// able to hold.
    pub fn named_values(&self) -> impl Iterator<Item = (&'static str, usize)> {
        let scalars = [
            ("batch", self.batch),
            ("groups", self.groups),
            ("input-side channels", self.in_channels),
            ("output-side channels", self.out_channels),
        ];
        let axes = [
            ("input-side size", self.in_size),
            ("output-side size", self.out_size),
            ("kernel size", self.kernel),
            ("stride", self.stride),
            ("dilation", self.dilation),
            ("padding", self.pad_begin),
        ];
        let per_axis = axes
            .into_iter()
            .flat_map(|(name, values)| values.into_iter().map(move |value| (name, value)));
        scalars.into_iter().chain(per_axis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_geometry_is_the_adjoint_conv() {
        let options = ConvTransposeOptions::new([1, 1, 2], [0, 0, 1], [0, 0, 1], [1, 1, 1], 1);
        let geometry = ConvGeometry::transpose(&[2, 3, 1, 1, 4], &[3, 5, 1, 1, 3], &options);
        assert_eq!(geometry.in_shape(), [2, 5, 1, 1, 8]);
        assert_eq!(geometry.out_shape(), [2, 3, 1, 1, 4]);
        assert_eq!(geometry.weight_shape(), [3, 5, 1, 1, 3]);
    }
}
