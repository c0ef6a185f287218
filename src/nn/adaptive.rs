//! `AdaptiveAvgPool1d/2d/3d` (as burn-nn's) and `AdaptiveMaxPool1d/2d/3d` (new, with indices).
//!
//! In 2D and 3D an output size may be `None`, which keeps that input size, as PyTorch's
//! `nn.AdaptiveAvgPool2d((None, 7))`; in 1D it is a plain size, as PyTorch's.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};

use crate::AdaptiveSize;

macro_rules! adaptive_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, size = $size:ty, op = $op:path
    ) => {
        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The spatial size of the output (in 2D and 3D, `None` keeps the input's size).
            pub output_size: $size,
        }

        impl $config {
            #[doc = concat!("Initialize an [`", stringify!($module), "`].")]
            pub fn init(&self) -> $module {
                $module {
                    output_size: self.output_size,
                }
            }
        }

        impl $module {
            /// Pools `(batch, channels, *spatial)` or `(channels, *spatial)` to `output_size`,
            /// window `i` covering `[floor(i * in / out), ceil((i + 1) * in / out))`.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                $op(x, self.output_size)
            }
        }
    };
}

/// The config of a 1D adaptive module: one output size, as burn-nn's and PyTorch's.
macro_rules! adaptive_config_1d {
    ($module:ident, $config:ident) => {
        #[doc = concat!("Configuration of an [`", stringify!($module), "`].")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The spatial size of the output.
            pub output_size: usize,
        }
    };
}

/// The config of a 2D or 3D adaptive module. Written out rather than derived, so `new` takes
/// sizes (`[7, 7]`, as burn-nn's) and optional sizes (`[None, Some(7)]`, as PyTorch's) alike;
/// it serializes as burn-nn's does, with `null` for a kept size.
macro_rules! adaptive_config_nd {
    ($module:ident, $config:ident, $rank:literal) => {
        #[doc = concat!("Configuration of an [`", stringify!($module), "`].")]
        #[derive(Debug, Clone, PartialEq, burn::serde::Serialize, burn::serde::Deserialize)]
        #[serde(crate = "burn::serde")]
        pub struct $config {
            /// The spatial size of the output; `None` keeps that input size.
            pub output_size: [Option<usize>; $rank],
        }

        impl Config for $config {}

        impl $config {
            #[doc = concat!("A new [`", stringify!($config), "`]: `output_size` is `[usize; ")]
            #[doc = concat!(stringify!($rank), "]` or `[Option<usize>; ", stringify!($rank), "]`.")]
            pub fn new(output_size: impl Into<AdaptiveSize<$rank>>) -> Self {
                Self {
                    output_size: output_size.into().0,
                }
            }
        }

        impl core::fmt::Display for $config {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(&burn::config::config_to_json(self))
            }
        }
    };
}

adaptive_config_1d!(AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig);
adaptive_config_nd!(AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, 2);
adaptive_config_nd!(AdaptiveAvgPool3d, AdaptiveAvgPool3dConfig, 3);
adaptive_config_1d!(AdaptiveMaxPool1d, AdaptiveMaxPool1dConfig);
adaptive_config_nd!(AdaptiveMaxPool2d, AdaptiveMaxPool2dConfig, 2);
adaptive_config_nd!(AdaptiveMaxPool3d, AdaptiveMaxPool3dConfig, 3);

macro_rules! adaptive_max_indices {
    ($module:ident, $op_with_indices:path) => {
        impl $module {
            /// [`Self::forward`] and the flat index of each maximum in its `(n, c)` plane.
            pub fn forward_with_indices<const D: usize>(
                &self,
                x: Tensor<D>,
            ) -> (Tensor<D>, Tensor<D, Int>) {
                $op_with_indices(x, self.output_size)
            }
        }
    };
}

adaptive_module!(
    /// 1D adaptive average pooling, as PyTorch's `nn.AdaptiveAvgPool1d` and burn-nn's.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveAvgPool1dConfig;
    /// let pool = AdaptiveAvgPool1dConfig::new(3).init();
    /// assert_eq!(pool.forward(Tensor::<3>::ones([2, 4, 10], &Device::flex())).dims(), [2, 4, 3]);
    /// ```
    AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig, size = usize, op = crate::adaptive_avg_pool1d
);
adaptive_module!(
    /// 2D adaptive average pooling, as PyTorch's `nn.AdaptiveAvgPool2d` and burn-nn's; with
    /// `[1, 1]` it is the global average pool of a classifier head, and a `None` size keeps
    /// that input size, as PyTorch's `nn.AdaptiveAvgPool2d((None, 7))`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveAvgPool2dConfig;
    /// let x = Tensor::<4>::ones([2, 512, 9, 9], &Device::flex());
    /// let head = AdaptiveAvgPool2dConfig::new([1, 1]).init();
    /// assert_eq!(head.forward(x.clone()).dims(), [2, 512, 1, 1]);
    /// let rows = AdaptiveAvgPool2dConfig::new([None, Some(7)]).init();
    /// assert_eq!(rows.forward(x).dims(), [2, 512, 9, 7]);
    /// ```
    AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, size = [Option<usize>; 2], op = crate::adaptive_avg_pool2d
);
adaptive_module!(
    /// 3D adaptive average pooling, as PyTorch's `nn.AdaptiveAvgPool3d` and burn-nn's.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveAvgPool3dConfig;
    /// let pool = AdaptiveAvgPool3dConfig::new([1, 2, 2]).init();
    /// assert_eq!(pool.forward(Tensor::<5>::ones([1, 3, 4, 5, 6], &Device::flex())).dims(), [1, 3, 1, 2, 2]);
    /// ```
    AdaptiveAvgPool3d, AdaptiveAvgPool3dConfig, size = [Option<usize>; 3], op = crate::adaptive_avg_pool3d
);
adaptive_module!(
    /// 1D adaptive max pooling, as PyTorch's `nn.AdaptiveMaxPool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveMaxPool1dConfig;
    /// let pool = AdaptiveMaxPool1dConfig::new(2).init();
    /// let x = Tensor::<3>::from_floats([[[1.0, 4.0, 2.0, 3.0, 0.0]]], &Device::flex());
    /// let (out, indices) = pool.forward_with_indices(x);
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [4.0, 3.0]);
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [1, 3]);
    /// ```
    AdaptiveMaxPool1d, AdaptiveMaxPool1dConfig, size = usize, op = crate::adaptive_max_pool1d
);
adaptive_module!(
    /// 2D adaptive max pooling, as PyTorch's `nn.AdaptiveMaxPool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveMaxPool2dConfig;
    /// let pool = AdaptiveMaxPool2dConfig::new([2, 3]).init();
    /// assert_eq!(pool.forward(Tensor::<4>::ones([1, 2, 7, 7], &Device::flex())).dims(), [1, 2, 2, 3]);
    /// ```
    AdaptiveMaxPool2d, AdaptiveMaxPool2dConfig, size = [Option<usize>; 2], op = crate::adaptive_max_pool2d
);
adaptive_module!(
    /// 3D adaptive max pooling, as PyTorch's `nn.AdaptiveMaxPool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveMaxPool3dConfig;
    /// let pool = AdaptiveMaxPool3dConfig::new([1, 1, 1]).init();
    /// assert_eq!(pool.forward(Tensor::<5>::ones([2, 3, 2, 2, 2], &Device::flex())).dims(), [2, 3, 1, 1, 1]);
    /// ```
    AdaptiveMaxPool3d, AdaptiveMaxPool3dConfig, size = [Option<usize>; 3], op = crate::adaptive_max_pool3d
);
adaptive_max_indices!(AdaptiveMaxPool1d, crate::adaptive_max_pool1d_with_indices);
adaptive_max_indices!(AdaptiveMaxPool2d, crate::adaptive_max_pool2d_with_indices);
adaptive_max_indices!(AdaptiveMaxPool3d, crate::adaptive_max_pool3d_with_indices);
