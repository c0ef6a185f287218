//! `MaxUnpool1d/2d/3d`: PyTorch's `nn.MaxUnpool*d`, the partial inverse of a max pool with
//! indices (burn-nn has none).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};

use super::dims::Dims;
use super::validate::check_sizes;
use crate::spec::MaxUnpoolOptions;

macro_rules! max_unpool_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, dims = $dims:ty, zeros = $zeros:literal,
        op = $op:path
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: the max pool it inverts.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The kernel size of the max pool.
            pub kernel_size: $dims,
            /// Its stride (defaults to the kernel size).
            #[config(default = "kernel_size")]
            pub stride: $dims,
            /// Its padding.
            #[config(default = $zeros)]
            pub padding: $dims,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The kernel size of the max pool.
            pub kernel_size: $dims,
            /// Its stride.
            pub stride: $dims,
            /// Its padding.
            pub padding: $dims,
        }

        impl $config {
            #[doc = concat!("Initialize a [`", stringify!($module), "`].")]
            ///
            /// # Panics
            /// If a kernel size or stride is zero.
            pub fn init(&self) -> $module {
                check_sizes(stringify!($module), &[
                    ("kernel_size", &self.kernel_size.dims()),
                    ("stride", &self.stride.dims()),
                ]);
                $module {
                    kernel_size: self.kernel_size,
                    stride: self.stride,
                    padding: self.padding,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with.
            pub fn options(&self) -> MaxUnpoolOptions<$n> {
                MaxUnpoolOptions::new(self.kernel_size.dims())
                    .with_stride(self.stride.dims())
                    .with_padding(self.padding.dims())
            }

            /// Scatter `x` to the `indices` a max pool returned; everything else is zero.
            ///
            /// # Panics
            /// When an index lies outside its output plane, or the shapes disagree.
            pub fn forward<const D: usize>(&self, x: Tensor<D>, indices: Tensor<D, Int>) -> Tensor<D> {
                $op(x, indices, self.options())
            }

            /// [`Self::forward`] to an exact spatial size, as PyTorch's `output_size` argument
            /// (needed when the pooled input had a size the stride does not divide).
            pub fn forward_with_output_size<const D: usize>(
                &self,
                x: Tensor<D>,
                indices: Tensor<D, Int>,
                output_size: [usize; $n],
            ) -> Tensor<D> {
                $op(x, indices, self.options().with_output_size(output_size))
            }
        }
    };
}

max_unpool_module!(
    /// 1D max unpooling, as PyTorch's `nn.MaxUnpool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::{MaxPool1dConfig, MaxUnpool1dConfig};
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 5.0]]], &Device::flex());
    /// let (pooled, indices) = MaxPool1dConfig::new(2).init().forward_with_indices(x);
    /// let restored = MaxUnpool1dConfig::new(2).init().forward(pooled, indices);
    /// assert_eq!(restored.into_data().iter::<f32>().collect::<Vec<_>>(), [0.0, 3.0, 0.0, 5.0]);
    /// ```
    MaxUnpool1d, MaxUnpool1dConfig, n = 1, dims = usize, zeros = "0", op = crate::max_unpool1d
);
max_unpool_module!(
    /// 2D max unpooling, as PyTorch's `nn.MaxUnpool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::{MaxPool2dConfig, MaxUnpool2dConfig};
    /// let x = Tensor::<4>::ones([1, 1, 5, 5], &Device::flex());
    /// let (pooled, indices) = MaxPool2dConfig::new([2, 2]).init().forward_with_indices(x);
    /// let unpool = MaxUnpool2dConfig::new([2, 2]).init();
    /// assert_eq!(unpool.forward_with_output_size(pooled, indices, [5, 5]).dims(), [1, 1, 5, 5]);
    /// ```
    MaxUnpool2d, MaxUnpool2dConfig, n = 2, dims = [usize; 2], zeros = "[0, 0]",
    op = crate::max_unpool2d
);
max_unpool_module!(
    /// 3D max unpooling, as PyTorch's `nn.MaxUnpool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::{MaxPool3dConfig, MaxUnpool3dConfig};
    /// let x = Tensor::<5>::ones([1, 1, 4, 4, 4], &Device::flex());
    /// let (pooled, indices) = MaxPool3dConfig::new([2, 2, 2]).init().forward_with_indices(x);
    /// let restored = MaxUnpool3dConfig::new([2, 2, 2]).init().forward(pooled, indices);
    /// assert_eq!(restored.dims(), [1, 1, 4, 4, 4]);
    /// ```
    MaxUnpool3d, MaxUnpool3dConfig, n = 3, dims = [usize; 3], zeros = "[0, 0, 0]",
    op = crate::max_unpool3d
);
