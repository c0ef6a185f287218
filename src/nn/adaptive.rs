//! `AdaptiveAvgPool1d/2d/3d` (as burn-nn's) and `AdaptiveMaxPool1d/2d/3d` (new, with indices).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};

use super::dims::Dims;

macro_rules! adaptive_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, dims = $dims:ty, op = $op:path
    ) => {
        #[doc = concat!("Configuration of an [`", stringify!($module), "`].")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The spatial size of the output.
            pub output_size: $dims,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The spatial size of the output.
            pub output_size: $dims,
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
                $op(x, self.output_size.dims())
            }
        }
    };
}

macro_rules! adaptive_max_indices {
    ($module:ident, $op_with_indices:path) => {
        impl $module {
            /// [`Self::forward`] and the flat index of each maximum in its `(n, c)` plane.
            pub fn forward_with_indices<const D: usize>(
                &self,
                x: Tensor<D>,
            ) -> (Tensor<D>, Tensor<D, Int>) {
                $op_with_indices(x, self.output_size.dims())
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
    AdaptiveAvgPool1d, AdaptiveAvgPool1dConfig, dims = usize, op = crate::adaptive_avg_pool1d
);
adaptive_module!(
    /// 2D adaptive average pooling, as PyTorch's `nn.AdaptiveAvgPool2d` and burn-nn's; with
    /// `[1, 1]` it is the global average pool of a classifier head.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::AdaptiveAvgPool2dConfig;
    /// let head = AdaptiveAvgPool2dConfig::new([1, 1]).init();
    /// assert_eq!(head.forward(Tensor::<4>::ones([2, 512, 7, 7], &Device::flex())).dims(), [2, 512, 1, 1]);
    /// ```
    AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, dims = [usize; 2], op = crate::adaptive_avg_pool2d
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
    AdaptiveAvgPool3d, AdaptiveAvgPool3dConfig, dims = [usize; 3], op = crate::adaptive_avg_pool3d
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
    AdaptiveMaxPool1d, AdaptiveMaxPool1dConfig, dims = usize, op = crate::adaptive_max_pool1d
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
    AdaptiveMaxPool2d, AdaptiveMaxPool2dConfig, dims = [usize; 2], op = crate::adaptive_max_pool2d
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
    AdaptiveMaxPool3d, AdaptiveMaxPool3dConfig, dims = [usize; 3], op = crate::adaptive_max_pool3d
);
adaptive_max_indices!(AdaptiveMaxPool1d, crate::adaptive_max_pool1d_with_indices);
adaptive_max_indices!(AdaptiveMaxPool2d, crate::adaptive_max_pool2d_with_indices);
adaptive_max_indices!(AdaptiveMaxPool3d, crate::adaptive_max_pool3d_with_indices);
