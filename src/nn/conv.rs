//! `Conv1d`, `Conv2d`, `Conv3d`: burn-nn's convolution modules plus PyTorch's `padding_mode`
//! and a fused activation.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Initializer, PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::{Device, Tensor};

use super::dims::{Dims, PaddingConfigNd, spatial_size, weight_shape};
use super::validate::{check_groups, check_parameter, check_sizes};
use crate::spec::{Activation, ConvNdOptions, PaddingMode};

/// burn-nn's default conv initializer, `KaimingUniform { gain: 1 / sqrt(3) }`, which gives
/// PyTorch's `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
pub(crate) fn default_initializer() -> Initializer {
    Initializer::KaimingUniform {
        gain: 1.0 / 3.0f64.sqrt(),
        fan_out_only: false,
    }
}

/// `channels` times the kernel's taps: a fan-in or fan-out, saturating where the weight is
/// empty but its kernel's product overflows (a weight that large is refused by
/// [`init_params`]).
pub(crate) fn fan<const N: usize>(channels: usize, kernel: [usize; N]) -> usize {
    kernel
        .iter()
        .fold(channels, |fan, &k| fan.saturating_mul(k))
}

/// Weight `(first, second, *kernel)` and optional bias `(bias_len)` drawn from `initializer`.
///
/// # Panics
/// If `device` cannot hold the weight or bias, naming `module` and the shape: Burn draws
/// parameters lazily, so the first forward would otherwise abort the process on the allocation.
#[allow(clippy::too_many_arguments)]
pub(crate) fn init_params<const N: usize, const W: usize>(
    module: &'static str,
    initializer: &Initializer,
    first: usize,
    second: usize,
    kernel: [usize; N],
    bias_len: Option<usize>,
    fan_in: usize,
    fan_out: Option<usize>,
    device: &Device,
) -> (Param<Tensor<W>>, Option<Param<Tensor<1>>>) {
    // PyTorch's rule for a layer without inputs (zero input channels): its weight is empty and
    // its bias zero (`bound = 0 if fan_in == 0`); Burn's fan-in initializers would divide by 0.
    let initializer = if fan_in == 0 {
        &Initializer::Zeros
    } else {
        initializer
    };
    let shape = weight_shape::<N, W>(first, second, kernel);
    check_parameter(module, "weight", &shape, device);
    // The bias too: an empty weight (no input channels) leaves it unbounded.
    if let Some(len) = bias_len {
        check_parameter(module, "bias", &[len], device);
    }
    let weight = initializer.init_with(shape, Some(fan_in), fan_out, device);
    let bias = bias_len.map(|len| initializer.init_with([len], Some(fan_in), fan_out, device));
    (weight, bias)
}

macro_rules! conv_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, w = $w:literal, dims = $dims:ty,
        ones = $ones:literal, padding = $padding:ident = $valid:literal,
        channels { $($(#[$ch_doc:meta])* $ch:ident: $ch_ty:ty),* } => |$cfg:ident| $channels:expr
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: burn-nn's fields and defaults, plus `padding_mode`.")]
        #[derive(Config, Debug)]
        pub struct $config {
            $($(#[$ch_doc])* pub $ch: $ch_ty,)*
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The stride of the convolution.
            #[config(default = $ones)]
            pub stride: $dims,
            /// Spacing between kernel elements.
            #[config(default = $ones)]
            pub dilation: $dims,
            /// Controls the connections between input and output channels.
            #[config(default = "1")]
            pub groups: usize,
            /// The padding configuration; `Same` may pad asymmetrically.
            #[config(default = $valid)]
            pub padding: $padding,
            /// What the padding holds (PyTorch's `padding_mode`).
            #[config(default = "PaddingMode::Zeros")]
            pub padding_mode: PaddingMode,
            /// If bias should be added to the output.
            #[config(default = true)]
            pub bias: bool,
            /// The initializer of the weight and bias.
            #[config(default = "default_initializer()")]
            pub initializer: Initializer,
            /// The activation applied to the output in the convolution's own pass.
            #[config(default = "None")]
            pub activation: Option<Activation>,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// `(channels_out, channels_in / groups, *kernel_size)`.
            pub weight: Param<Tensor<$w>>,
            /// `(channels_out)`.
            pub bias: Option<Param<Tensor<1>>>,
            /// Stride of the convolution.
            pub stride: $dims,
            /// Size of the kernel.
            pub kernel_size: $dims,
            /// Spacing between kernel elements.
            pub dilation: $dims,
            /// Controls the connections between input and output channels.
            pub groups: usize,
            /// The padding configuration.
            #[module(skip)]
            pub padding: $padding,
            /// What the padding holds.
            #[module(skip)]
            pub padding_mode: PaddingMode,
            /// The activation applied to the output in the convolution's own pass (not part
            /// of the record, as in the config).
            #[module(skip)]
            pub activation: Option<Activation>,
        }

        impl $config {
            /// `[channels_in, channels_out]`.
            fn channel_pair(&self) -> [usize; 2] {
                let $cfg = self;
                $channels
            }

            #[doc = concat!("Initialize a [`", stringify!($module), "`] on `device`.")]
            ///
            /// # Panics
            /// If `groups` does not divide both channel counts, a kernel size, stride or
            /// dilation is zero, or `device` cannot allocate the weight or bias.
            pub fn init(&self, device: &Device) -> $module {
                let [channels_in, channels_out] = self.channel_pair();
                check_groups(stringify!($module), [channels_in, channels_out], self.groups);
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.stride.dims()),
                    ("dilation", &self.dilation.dims()),
                ]);
                let kernel: [usize; $n] = self.kernel_size.dims();
                let fan_in = fan(channels_in / self.groups, kernel);
                let fan_out = fan(channels_out / self.groups, kernel);
                let (weight, bias) = init_params::<$n, $w>(
                    stringify!($module),
                    &self.initializer,
                    channels_out,
                    channels_in / self.groups,
                    kernel,
                    self.bias.then_some(channels_out),
                    fan_in,
                    Some(fan_out),
                    device,
                );
                $module {
                    weight,
                    bias,
                    stride: self.stride,
                    kernel_size: self.kernel_size,
                    dilation: self.dilation,
                    groups: self.groups,
                    padding: self.padding.clone(),
                    padding_mode: self.padding_mode,
                    activation: self.activation,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with, for an input `x`.
            pub fn options<const D: usize>(&self, x: &Tensor<D>) -> ConvNdOptions<$n> {
                let (stride, dilation) = (self.stride.dims(), self.dilation.dims());
                let padding = self.padding.pairs(
                    spatial_size::<$n, D>(x),
                    self.kernel_size.dims(),
                    stride,
                    dilation,
                );
                ConvNdOptions {
                    activation: self.activation,
                    ..ConvNdOptions::default()
                        .with_stride(stride)
                        .with_padding(padding)
                        .with_dilation(dilation)
                        .with_groups(self.groups)
                        .with_padding_mode(self.padding_mode)
                }
            }

            /// Applies the convolution to `(batch, channels_in, *spatial)` or unbatched
            /// `(channels_in, *spatial)`.
            ///
            /// # Panics
            /// When the input does not fit the module; the message names the op and values.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                let options = self.options(&x);
                crate::functional::conv::try_conv::<$n, D, $w>(
                    stringify!($module),
                    x,
                    self.weight.val(),
                    self.bias.as_ref().map(Param::val),
                    options,
                )
                .unwrap_or_else(|error| panic!("{error}"))
            }
        }
    };
}

conv_module!(
    /// A 1D convolution, as PyTorch's `nn.Conv1d` and burn-nn's `Conv1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::Conv1dConfig;
    /// let conv = Conv1dConfig::new(4, 8, 3).with_stride(2).init(&Device::flex());
    /// assert_eq!(conv.forward(Tensor::<3>::ones([2, 4, 11], &Device::flex())).dims(), [2, 8, 5]);
    /// ```
    Conv1d, Conv1dConfig, n = 1, w = 3, dims = usize, ones = "1", padding = PaddingConfig1d = "PaddingConfig1d::Valid",
    channels {
        /// The number of input channels.
        channels_in: usize,
        /// The number of output channels.
        channels_out: usize
    } => |config| [config.channels_in, config.channels_out]
);

conv_module!(
    /// A 2D convolution, as PyTorch's `nn.Conv2d` and burn-nn's `Conv2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::nn::PaddingConfig2d;
    /// use burn_convpool::{PaddingMode, nn::Conv2dConfig};
    /// let conv = Conv2dConfig::new([3, 16], [3, 3])
    ///     .with_padding(PaddingConfig2d::Same)
    ///     .with_padding_mode(PaddingMode::Circular)
    ///     .init(&Device::flex());
    /// let x = Tensor::<4>::ones([1, 3, 10, 10], &Device::flex());
    /// assert_eq!(conv.forward(x).dims(), [1, 16, 10, 10]);
    /// ```
    Conv2d, Conv2dConfig, n = 2, w = 4, dims = [usize; 2], ones = "[1, 1]",
    padding = PaddingConfig2d = "PaddingConfig2d::Valid",
    channels {
        /// `[channels_in, channels_out]`.
        channels: [usize; 2]
    } => |config| config.channels
);

conv_module!(
    /// A 3D convolution, as PyTorch's `nn.Conv3d` and burn-nn's `Conv3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::Conv3dConfig;
    /// let conv = Conv3dConfig::new([2, 4], [3, 3, 3]).with_groups(2).init(&Device::flex());
    /// let x = Tensor::<5>::ones([1, 2, 4, 5, 6], &Device::flex());
    /// assert_eq!(conv.forward(x).dims(), [1, 4, 2, 3, 4]);
    /// ```
    Conv3d, Conv3dConfig, n = 3, w = 5, dims = [usize; 3], ones = "[1, 1, 1]",
    padding = PaddingConfig3d = "PaddingConfig3d::Valid",
    channels {
        /// `[channels_in, channels_out]`.
        channels: [usize; 2]
    } => |config| config.channels
);
