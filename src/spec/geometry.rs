//! [`ConvGeometry`]: what a convolution kernel reads, worked out once from validated shapes and
//! options. The CPU kernels, the CubeCL kernels and the conv routing all compute from it.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::window::{out_len, transpose_out_len, used_step};

/// Everything a convolution kernel reads, in rank 3.
///
/// For a transposed convolution this is the geometry of its adjoint convolution: `in_*` is the
/// transposed conv's *output* side and `out_*` its *input* side. Sizes are explicit on both
/// sides because `output_padding` makes the big side ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

    /// Multiply-adds in one pass (each of the three passes has as many), saturating.
    pub fn multiply_adds(&self) -> usize {
        self.batch
            .saturating_mul(self.out_channels)
            .saturating_mul(self.out_volume())
            .saturating_mul(self.patch_len())
    }

    /// The geometry as a computation reads it: strides and dilations through [`used_step`].
    pub fn normalised(&self) -> Self {
        Self {
            stride: core::array::from_fn(|i| used_step(self.stride[i], self.out_size[i])),
            dilation: core::array::from_fn(|i| used_step(self.dilation[i], self.kernel[i])),
            ..*self
        }
    }

    /// Whether some window reaches past the input, into the padding before or after it, where
    /// an algorithm that pads multiplies a zero by a weight (the forward pass) or by an output
    /// gradient (the weight gradient); the definition has no such product.
    pub fn windows_meet_padding(&self) -> bool {
        let past_end = |a: usize| {
            let last_tap = self.out_size[a].saturating_sub(1) as u128 * self.stride[a] as u128
                + self.kernel[a].saturating_sub(1) as u128 * self.dilation[a] as u128;
            last_tap >= self.pad_begin[a] as u128 + self.in_size[a] as u128
        };
        self.out_volume() > 0 && (0..3).any(|a| self.pad_begin[a] > 0 || past_end(a))
    }

    /// Whether some tap of some input position meets no output (the padding, the stride's
    /// holes), where an input gradient that pads the output gradient multiplies a zero by a
    /// weight; the definition has no such product.
    pub fn inputs_meet_padding(&self) -> bool {
        self.windows_meet_padding() || self.stride.iter().any(|&s| s > 1) || self.kernel != [1; 3]
    }

    /// Input-gradient phase `phase` (below the stride) along `axis`: the input positions
    /// `phase + stride * j` and the taps whose outputs reach them, those with `phase + pad -
    /// tap * dilation` a multiple of the stride. At those positions every other tap meets no
    /// output, so its term is a structural zero.
    pub fn data_phase(&self, axis: usize, phase: usize) -> DataPhase {
        let (stride, pad, dilation) = (
            self.stride[axis] as i128,
            self.pad_begin[axis] as i128,
            self.dilation[axis] as i128,
        );
        let count = self.in_size[axis]
            .saturating_sub(phase)
            .div_ceil(self.stride[axis]);
        let taps = (0..self.kernel[axis])
            .filter_map(|tap| {
                let reach = phase as i128 + pad - tap as i128 * dilation;
                (reach.rem_euclid(stride) == 0).then_some((tap, reach / stride))
            })
            .collect();
        DataPhase { count, taps }
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

/// One stride phase of an input gradient along one axis ([`ConvGeometry::data_phase`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPhase {
    /// How many input positions `phase + stride * j` there are.
    pub count: usize,
    /// The taps that reach them, each with its shift: position `j` of the phase meets output
    /// `j + shift` (when that is an output).
    pub taps: Vec<(usize, i128)>,
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

    /// Against the definition: input `i` gets tap `t`'s term when `i + pad - t * dilation` is
    /// a multiple of the stride whose quotient is an output. Each phase must hold exactly its
    /// positions and every tap that reaches one of them; the taps it holds are those aligned
    /// with it (one may still miss every output at the edges).
    #[test]
    fn data_phases_hold_every_reaching_tap() {
        for (len, kernel, stride, dilation, pad) in [
            (9, 3, 2, 1, 1),
            (8, 4, 2, 1, 1),
            (7, 1, 2, 1, 0),
            (10, 7, 2, 1, 3),
            (11, 3, 3, 2, 2),
            (5, 2, 4, 3, 0),
            (3, 3, 5, 1, 2),
        ] {
            let out = (len + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
            let geometry = ConvGeometry {
                batch: 1,
                groups: 1,
                in_channels: 1,
                out_channels: 1,
                in_size: [1, 1, len],
                out_size: [1, 1, out],
                kernel: [1, 1, kernel],
                stride: [1, 1, stride],
                dilation: [1, 1, dilation],
                pad_begin: [0, 0, pad],
            };
            let mut covered = 0;
            for phase in 0..stride {
                let DataPhase { count, taps } = geometry.data_phase(2, phase);
                let positions: Vec<usize> = (phase..len).step_by(stride).collect();
                assert_eq!(
                    count,
                    positions.len(),
                    "{len} {kernel} {stride} phase {phase}"
                );
                covered += count;
                for tap in 0..kernel {
                    // The output that input `i`'s tap meets, if any.
                    let meets = |i: usize| {
                        let padded = (i + pad) as i64 - (tap * dilation) as i64;
                        (padded >= 0 && padded % stride as i64 == 0)
                            .then_some(padded / stride as i64)
                            .filter(|&o| (o as usize) < out)
                    };
                    let held = taps.iter().find(|(t, _)| *t == tap);
                    for (j, &i) in positions.iter().enumerate() {
                        if let Some(o) = meets(i) {
                            let (_, shift) = held.expect("a reaching tap is held");
                            assert_eq!(j as i128 + shift, o as i128, "phase {phase} tap {tap}");
                        }
                    }
                    let aligned = ((phase + pad) as i64 - (tap * dilation) as i64)
                        .rem_euclid(stride as i64)
                        == 0;
                    assert_eq!(held.is_some(), aligned, "phase {phase} tap {tap}");
                }
            }
            assert_eq!(covered, len);
        }
    }
}
