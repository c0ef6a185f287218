//! `MaxPool1d/2d/3d` and `AvgPool1d/2d/3d`: burn-nn's pooling modules, in 3D too, with
//! `forward_with_indices` and `divisor_override`.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::{Int, Tensor};

use super::dims::{Dims, PaddingConfigNd, spatial_size};
use super::validate::check_sizes;
use crate::spec::{AvgPoolNdOptions, MaxPoolOptions};

macro_rules! max_pool_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, dims = $dims:ty, ones = $ones:literal,
        padding = $padding:ident = $valid:literal, stride = $stride:ident,
        ops = ($op:path, $op_with_indices:path)
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: burn-nn's fields and defaults.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The stride (defaults to the kernel size).
            #[config(default = "kernel_size")]
            pub $stride: $dims,
            /// The padding configuration; padding acts as -inf.
            #[config(default = $valid)]
            pub padding: $padding,
            /// Spacing between kernel elements.
            #[config(default = $ones)]
            pub dilation: $dims,
            /// Round the output size up instead of down (PyTorch's `ceil_mode`).
            #[config(default = "false")]
            pub ceil_mode: bool,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The stride.
            pub stride: $dims,
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The padding configuration.
            #[module(skip)]
            pub padding: $padding,
            /// Spacing between kernel elements.
            pub dilation: $dims,
            /// Round the output size up instead of down.
            pub ceil_mode: bool,
        }

        impl $config {
            #[doc = concat!("Initialize a [`", stringify!($module), "`].")]
            ///
            /// # Panics
            /// If a kernel size, stride or dilation is zero.
            pub fn init(&self) -> $module {
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.$stride.dims()),
                    ("dilation", &self.dilation.dims()),
                ]);
                $module {
                    stride: self.$stride,
                    kernel_size: self.kernel_size,
                    padding: self.padding.clone(),
                    dilation: self.dilation,
                    ceil_mode: self.ceil_mode,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with, for an input `x`.
            pub fn options<const D: usize>(&self, x: &Tensor<D>) -> MaxPoolOptions<$n> {
                let (kernel, stride, dilation) =
                    (self.kernel_size.dims(), self.stride.dims(), self.dilation.dims());
                let padding =
                    self.padding.pairs(spatial_size::<$n, D>(x), kernel, stride, dilation);
                // A literal, not Burn's builders: they assert, where the op's validation
                // names the op and the values.
                MaxPoolOptions {
                    kernel_size: kernel,
                    stride,
                    padding,
                    dilation,
                    ceil_mode: self.ceil_mode,
                }
            }

            /// Max over each window of `(batch, channels, *spatial)` or `(channels, *spatial)`.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                let options = self.options(&x);
                $op(x, options)
            }

            /// [`Self::forward`] and the flat index of each maximum in its `(n, c)` plane
            /// (PyTorch's `return_indices=True`), as the matching max-unpool module takes.
            pub fn forward_with_indices<const D: usize>(
                &self,
                x: Tensor<D>,
            ) -> (Tensor<D>, Tensor<D, Int>) {
                let options = self.options(&x);
                $op_with_indices(x, options)
            }
        }
    };
}

max_pool_module!(
    /// 1D max pooling, as PyTorch's `nn.MaxPool1d` and burn-nn's `MaxPool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::MaxPool1dConfig;
    /// let pool = MaxPool1dConfig::new(2).init();
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 5.0]]], &Device::flex());
    /// let (out, indices) = pool.forward_with_indices(x);
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [3.0, 5.0]);
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [1, 3]);
    /// ```
    MaxPool1d, MaxPool1dConfig, n = 1, dims = usize, ones = "1",
    padding = PaddingConfig1d = "PaddingConfig1d::Valid", stride = stride,
    ops = (crate::max_pool1d, crate::max_pool1d_with_indices)
);

max_pool_module!(
    /// 2D max pooling, as PyTorch's `nn.MaxPool2d` and burn-nn's `MaxPool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::nn::PaddingConfig2d;
    /// use burn_convpool::nn::MaxPool2dConfig;
    /// let stem = MaxPool2dConfig::new([3, 3])
    ///     .with_strides([2, 2])
    ///     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
    ///     .init();
    /// let x = Tensor::<4>::ones([1, 8, 32, 32], &Device::flex());
    /// assert_eq!(stem.forward(x).dims(), [1, 8, 16, 16]);
    /// ```
    MaxPool2d, MaxPool2dConfig, n = 2, dims = [usize; 2], ones = "[1, 1]",
    padding = PaddingConfig2d = "PaddingConfig2d::Valid", stride = strides,
    ops = (crate::max_pool2d, crate::max_pool2d_with_indices)
);

max_pool_module!(
    /// 3D max pooling, as PyTorch's `nn.MaxPool3d` (burn-nn has none).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::MaxPool3dConfig;
    /// let pool = MaxPool3dConfig::new([2, 2, 2]).with_ceil_mode(true).init();
    /// let x = Tensor::<5>::ones([1, 2, 5, 5, 5], &Device::flex());
    /// assert_eq!(pool.forward(x).dims(), [1, 2, 3, 3, 3]);
    /// ```
    MaxPool3d, MaxPool3dConfig, n = 3, dims = [usize; 3], ones = "[1, 1, 1]",
    padding = PaddingConfig3d = "PaddingConfig3d::Valid", stride = strides,
    ops = (crate::max_pool3d, crate::max_pool3d_with_indices)
);

macro_rules! avg_pool_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, dims = $dims:ty,
        padding = $padding:ident = $valid:literal, stride = $stride:ident, op = $op:path
    ) => {
        #[doc = concat!("Configuration of an [`", stringify!($module), "`]: burn-nn's fields and defaults, plus `divisor_override`.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The stride (defaults to the kernel size).
            #[config(default = "kernel_size")]
            pub $stride: $dims,
            /// The padding configuration; padding acts as zeros.
            #[config(default = $valid)]
            pub padding: $padding,
            /// Count the padding in the divisor.
            #[config(default = "true")]
            pub count_include_pad: bool,
            /// Round the output size up instead of down (PyTorch's `ceil_mode`).
            #[config(default = "false")]
            pub ceil_mode: bool,
            /// Divide every window's sum by this instead of its size.
            #[config(default = "None")]
            pub divisor_override: Option<i64>,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The stride.
            pub stride: $dims,
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The padding configuration.
            #[module(skip)]
            pub padding: $padding,
            /// Count the padding in the divisor.
            pub count_include_pad: bool,
            /// Round the output size up instead of down.
            pub ceil_mode: bool,
            /// Divide every window's sum by this instead of its size.
            #[module(skip)]
            pub divisor_override: Option<i64>,
        }

        impl $config {
            #[doc = concat!("Initialize an [`", stringify!($module), "`].")]
            ///
            /// # Panics
            /// If a kernel size or stride is zero.
            pub fn init(&self) -> $module {
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.$stride.dims()),
                ]);
                $module {
                    stride: self.$stride,
                    kernel_size: self.kernel_size,
                    padding: self.padding.clone(),
                    count_include_pad: self.count_include_pad,
                    ceil_mode: self.ceil_mode,
                    divisor_override: self.divisor_override,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with, for an input `x`.
            pub fn options<const D: usize>(&self, x: &Tensor<D>) -> AvgPoolNdOptions<$n> {
                let (kernel, stride) = (self.kernel_size.dims(), self.stride.dims());
                let padding =
                    self.padding.pairs(spatial_size::<$n, D>(x), kernel, stride, [1; $n]);
                let options = AvgPoolNdOptions::new(kernel)
                    .with_stride(stride)
                    .with_padding_pairs(padding)
                    .with_count_include_pad(self.count_include_pad)
                    .with_ceil_mode(self.ceil_mode);
                match self.divisor_override {
                    Some(divisor) => options.with_divisor_override(divisor),
                    None => options,
                }
            }

            /// Mean over each window of `(batch, channels, *spatial)` or `(channels, *spatial)`.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                let options = self.options(&x);
                $op(x, options)
            }
        }
    };
}

avg_pool_module!(
    /// 1D average pooling, as PyTorch's `nn.AvgPool1d` and burn-nn's `AvgPool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AvgPool1dConfig;
    /// let pool = AvgPool1dConfig::new(2).with_divisor_override(Some(1)).init();
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 5.0]]], &Device::flex());
    /// assert_eq!(pool.forward(x).into_data().iter::<f32>().collect::<Vec<_>>(), [4.0, 7.0]);
    /// ```
    AvgPool1d, AvgPool1dConfig, n = 1, dims = usize,
    padding = PaddingConfig1d = "PaddingConfig1d::Valid", stride = stride, op = crate::avg_pool1d
);

avg_pool_module!(
    /// 2D average pooling, as PyTorch's `nn.AvgPool2d` and burn-nn's `AvgPool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::nn::PaddingConfig2d;
    /// use burn_convpool::nn::AvgPool2dConfig;
    /// let pool = AvgPool2dConfig::new([3, 3])
    ///     .with_strides([2, 2])
    ///     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
    ///     .with_count_include_pad(false)
    ///     .init();
    /// assert_eq!(pool.forward(Tensor::<4>::ones([1, 1, 7, 7], &Device::flex())).dims(), [1, 1, 4, 4]);
    /// ```
    AvgPool2d, AvgPool2dConfig, n = 2, dims = [usize; 2],
    padding = PaddingConfig2d = "PaddingConfig2d::Valid", stride = strides, op = crate::avg_pool2d
);

avg_pool_module!(
    /// 3D average pooling, as PyTorch's `nn.AvgPool3d` (burn-nn has none).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AvgPool3dConfig;
    /// let pool = AvgPool3dConfig::new([1, 2, 2]).init();
    /// assert_eq!(pool.forward(Tensor::<5>::ones([1, 1, 4, 4, 4], &Device::flex())).dims(), [1, 1, 4, 2, 2]);
    /// ```
    AvgPool3d, AvgPool3dConfig, n = 3, dims = [usize; 3],
    padding = PaddingConfig3d = "PaddingConfig3d::Valid", stride = strides, op = crate::avg_pool3d
);
