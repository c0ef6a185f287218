//! `LpPool1d/2d/3d`: PyTorch's `nn.LPPool*d` (burn-nn has none).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::Tensor;

use super::dims::Dims;
use super::validate::check_sizes;
use crate::spec::LpPoolOptions;

macro_rules! lp_pool_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, dims = $dims:ty, op = $op:path
    ) => {
        #[doc = concat!("Configuration of an [`", stringify!($module), "`].")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The power `p > 0`; `f64::INFINITY` is max pooling of `|x|`.
            pub norm_type: f64,
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The stride (defaults to the kernel size).
            #[config(default = "kernel_size")]
            pub stride: $dims,
            /// Round the output size up instead of down (PyTorch's `ceil_mode`).
            #[config(default = "false")]
            pub ceil_mode: bool,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The power `p`.
            #[module(skip)]
            pub norm_type: f64,
            /// The size of the kernel.
            pub kernel_size: $dims,
            /// The stride.
            pub stride: $dims,
            /// Round the output size up instead of down.
            pub ceil_mode: bool,
        }

        impl $config {
            #[doc = concat!("Initialize an [`", stringify!($module), "`].")]
            ///
            /// # Panics
            /// If a kernel size or stride is zero.
            pub fn init(&self) -> $module {
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.stride.dims()),
                ]);
                $module {
                    norm_type: self.norm_type,
                    kernel_size: self.kernel_size,
                    stride: self.stride,
                    ceil_mode: self.ceil_mode,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with.
            pub fn options(&self) -> LpPoolOptions<$n> {
                LpPoolOptions::new(self.norm_type, self.kernel_size.dims())
                    .with_stride(self.stride.dims())
                    .with_ceil_mode(self.ceil_mode)
            }

            /// `(sum over the window of x^p)^(1/p)` of `(batch, channels, *spatial)` or
            /// `(channels, *spatial)`, with PyTorch's signed sum.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                $op(x, self.options())
            }
        }
    };
}

lp_pool_module!(
    /// 1D power-average pooling, as PyTorch's `nn.LPPool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::LpPool1dConfig;
    /// let pool = LpPool1dConfig::new(2.0, 2).init();
    /// let x = Tensor::<3>::from_floats([[[3.0, 4.0]]], &Device::flex());
    /// assert_eq!(pool.forward(x).into_data().iter::<f32>().collect::<Vec<_>>(), [5.0]);
    /// ```
    LpPool1d, LpPool1dConfig, n = 1, dims = usize, op = crate::lp_pool1d
);
lp_pool_module!(
    /// 2D power-average pooling, as PyTorch's `nn.LPPool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::LpPool2dConfig;
    /// let pool = LpPool2dConfig::new(3.0, [2, 2]).with_stride([1, 1]).init();
    /// assert_eq!(pool.forward(Tensor::<4>::ones([1, 1, 4, 4], &Device::flex())).dims(), [1, 1, 3, 3]);
    /// ```
    LpPool2d, LpPool2dConfig, n = 2, dims = [usize; 2], op = crate::lp_pool2d
);
lp_pool_module!(
    /// 3D power-average pooling, as PyTorch's `nn.LPPool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::LpPool3dConfig;
    /// let pool = LpPool3dConfig::new(f64::INFINITY, [2, 2, 2]).init();
    /// assert_eq!(pool.forward(Tensor::<5>::ones([1, 1, 4, 4, 4], &Device::flex())).dims(), [1, 1, 2, 2, 2]);
    /// ```
    LpPool3d, LpPool3dConfig, n = 3, dims = [usize; 3], op = crate::lp_pool3d
);
