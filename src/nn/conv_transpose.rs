//! `ConvTranspose1d`, `ConvTranspose2d`, `ConvTranspose3d`: burn-nn's transposed convolutions,
//! plus PyTorch's `output_size` argument of `forward`.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Initializer;
use burn::tensor::{Device, Tensor};

use super::conv::{default_initializer, fan, init_params};
use super::dims::Dims;
use super::validate::{check_groups, check_sizes};
use crate::spec::{Activation, ConvTransposeNdOptions};

macro_rules! conv_transpose_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, w = $w:literal, dims = $dims:ty,
        ones = $ones:literal, zeros = $zeros:literal
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: burn-nn's fields and defaults.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// `[channels_in, channels_out]`.
            pub channels: [usize; 2],
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
            /// Zero padding removed from both sides of the output.
            #[config(default = $zeros)]
            pub padding: $dims,
            /// Extra size added to one side of the output (PyTorch's `output_padding`).
            #[config(default = $zeros)]
            pub padding_out: $dims,
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
            /// `(channels_in, channels_out / groups, *kernel_size)`.
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
            /// Zero padding removed from both sides of the output.
            pub padding: $dims,
            /// Extra size added to one side of the output.
            pub padding_out: $dims,
            /// `[channels_in, channels_out]`.
            pub channels: [usize; 2],
            /// The activation applied to the output in the convolution's own pass (not part
            /// of the record, as in the config).
            #[module(skip)]
            pub activation: Option<Activation>,
        }

        impl $config {
            #[doc = concat!("Initialize a [`", stringify!($module), "`] on `device`.")]
            ///
            /// # Panics
            /// If `groups` does not divide both channel counts, a kernel size, stride or
            /// dilation is zero, or `device` cannot allocate the weight or bias.
            pub fn init(&self, device: &Device) -> $module {
                let [channels_in, channels_out] = self.channels;
                check_groups(stringify!($module), self.channels, self.groups);
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.stride.dims()),
                    ("dilation", &self.dilation.dims()),
                ]);
                let kernel: [usize; $n] = self.kernel_size.dims();
                let (weight, bias) = init_params::<$n, $w>(
                    stringify!($module),
                    &self.initializer,
                    channels_in,
                    channels_out / self.groups,
                    kernel,
                    self.bias.then_some(channels_out),
                    fan(channels_out / self.groups, kernel),
                    None,
                    device,
                );
                $module {
                    weight,
                    bias,
                    stride: self.stride,
                    kernel_size: self.kernel_size,
                    dilation: self.dilation,
                    groups: self.groups,
                    padding: self.padding,
                    padding_out: self.padding_out,
                    channels: self.channels,
                    activation: self.activation,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with.
            pub fn options(&self) -> ConvTransposeNdOptions<$n> {
                ConvTransposeNdOptions {
                    activation: self.activation,
                    ..ConvTransposeNdOptions::default()
                        .with_stride(self.stride.dims())
                        .with_padding(self.padding.dims())
                        .with_padding_out(self.padding_out.dims())
                        .with_dilation(self.dilation.dims())
                        .with_groups(self.groups)
                }
            }

            /// Applies the transposed convolution to `(batch, channels_in, *spatial)` or
            /// unbatched `(channels_in, *spatial)`.
            ///
            /// # Panics
            /// When the input does not fit the module; the message names the op and values.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                self.run(x, self.options())
            }

            /// [`Self::forward`] with an exact spatial output size, which picks `padding_out`
            /// as PyTorch's `forward(input, output_size)` does.
            pub fn forward_with_output_size<const D: usize>(
                &self,
                x: Tensor<D>,
                output_size: [usize; $n],
            ) -> Tensor<D> {
                self.run(x, self.options().with_output_size(output_size))
            }

            fn run<const D: usize>(
                &self,
                x: Tensor<D>,
                options: ConvTransposeNdOptions<$n>,
            ) -> Tensor<D> {
                crate::functional::conv::try_conv_transpose::<$n, D, $w>(
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

conv_transpose_module!(
    /// A 1D transposed convolution, as PyTorch's `nn.ConvTranspose1d` and burn-nn's
    /// `ConvTranspose1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::ConvTranspose1dConfig;
    /// let up = ConvTranspose1dConfig::new([4, 2], 3).with_stride(2).init(&Device::flex());
    /// assert_eq!(up.forward(Tensor::<3>::ones([1, 4, 5], &Device::flex())).dims(), [1, 2, 11]);
    /// ```
    ConvTranspose1d, ConvTranspose1dConfig, n = 1, w = 3, dims = usize, ones = "1", zeros = "0"
);

conv_transpose_module!(
    /// A 2D transposed convolution, as PyTorch's `nn.ConvTranspose2d` and burn-nn's
    /// `ConvTranspose2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::ConvTranspose2dConfig;
    /// let up = ConvTranspose2dConfig::new([8, 4], [4, 4])
    ///     .with_stride([2, 2])
    ///     .with_padding([1, 1])
    ///     .init(&Device::flex());
    /// let x = Tensor::<4>::ones([1, 8, 7, 7], &Device::flex());
    /// assert_eq!(up.forward(x.clone()).dims(), [1, 4, 14, 14]);
    /// assert_eq!(up.forward_with_output_size(x, [15, 15]).dims(), [1, 4, 15, 15]);
    /// ```
    ConvTranspose2d, ConvTranspose2dConfig, n = 2, w = 4, dims = [usize; 2],
    ones = "[1, 1]", zeros = "[0, 0]"
);

conv_transpose_module!(
    /// A 3D transposed convolution, as PyTorch's `nn.ConvTranspose3d` and burn-nn's
    /// `ConvTranspose3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::ConvTranspose3dConfig;
    /// let up = ConvTranspose3dConfig::new([2, 2], [2, 2, 2]).with_stride([2, 2, 2]);
    /// let x = Tensor::<5>::ones([1, 2, 2, 3, 4], &Device::flex());
    /// assert_eq!(up.init(&Device::flex()).forward(x).dims(), [1, 2, 4, 6, 8]);
    /// ```
    ConvTranspose3d, ConvTranspose3dConfig, n = 3, w = 5, dims = [usize; 3],
    ones = "[1, 1, 1]", zeros = "[0, 0, 0]"
);
