//! `FractionalMaxPool2d/3d`: PyTorch's `nn.FractionalMaxPool*d` (burn-nn has none).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor};

use super::validate::check_sizes;
use crate::spec::{FractionalMaxPoolOptions, FractionalOutput};

macro_rules! fractional_module {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, n = $n:literal, ops = ($op:path, $op_with_indices:path)
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: set exactly one of `output_size` and `output_ratio`.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The size of the kernel.
            pub kernel_size: [usize; $n],
            /// The spatial size of the output.
            #[config(default = "None")]
            pub output_size: Option<[usize; $n]>,
            /// The output size as a fraction of the input's, each in `(0, 1)`.
            #[config(default = "None")]
            pub output_ratio: Option<[f64; $n]>,
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The size of the kernel.
            pub kernel_size: [usize; $n],
            /// The output size or ratio.
            #[module(skip)]
            pub output: FractionalOutput<$n>,
        }

        impl $config {
            #[doc = concat!("Initialize a [`", stringify!($module), "`].")]
            ///
            /// # Panics
            /// Unless exactly one of `output_size` and `output_ratio` is set (as PyTorch), or
            /// if a kernel size is zero.
            pub fn init(&self) -> $module {
                check_sizes(stringify!($module), &[("kernel_size", &self.kernel_size)]);
                let output = match (self.output_size, self.output_ratio) {
                    (Some(size), None) => FractionalOutput::Size(size),
                    (None, Some(ratio)) => FractionalOutput::Ratio(ratio),
                    (size, ratio) => panic!(
                        "{}: set exactly one of output_size and output_ratio, got \
                         output_size {size:?} and output_ratio {ratio:?}",
                        stringify!($module)
                    ),
                };
                $module {
                    kernel_size: self.kernel_size,
                    output,
                }
            }
        }

        impl $module {
            /// The options the module calls the functional op with.
            pub fn options(&self) -> FractionalMaxPoolOptions<$n> {
                FractionalMaxPoolOptions::new(self.kernel_size, self.output)
            }

            /// Max over pseudo-random windows of `(batch, channels, *spatial)` or
            /// `(channels, *spatial)`, with fresh samples from Burn's RNG on every call.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                $op(x, self.options(), None)
            }

            /// [`Self::forward`] and the flat index of each maximum in its `(n, c)` plane.
            pub fn forward_with_indices<const D: usize>(
                &self,
                x: Tensor<D>,
            ) -> (Tensor<D>, Tensor<D, Int>) {
                $op_with_indices(x, self.options(), None)
            }

            #[doc = concat!("[`Self::forward_with_indices`] with explicit samples `(batch, channels, ", stringify!($n), ")` in `[0, 1)`, in PyTorch's order (`_random_samples`).")]
            pub fn forward_with_samples<const D: usize>(
                &self,
                x: Tensor<D>,
                samples: Tensor<3>,
            ) -> (Tensor<D>, Tensor<D, Int>) {
                $op_with_indices(x, self.options(), Some(samples))
            }
        }
    };
}

fractional_module!(
    /// 2D fractional max pooling, as PyTorch's `nn.FractionalMaxPool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::FractionalMaxPool2dConfig;
    /// let pool = FractionalMaxPool2dConfig::new([2, 2]).with_output_ratio(Some([0.7, 0.7])).init();
    /// assert_eq!(pool.forward(Tensor::<4>::ones([1, 3, 10, 10], &Device::flex())).dims(), [1, 3, 7, 7]);
    /// ```
    FractionalMaxPool2d, FractionalMaxPool2dConfig, n = 2,
    ops = (crate::fractional_max_pool2d, crate::fractional_max_pool2d_with_indices)
);
fractional_module!(
    /// 3D fractional max pooling, as PyTorch's `nn.FractionalMaxPool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::FractionalMaxPool3dConfig;
    /// let pool = FractionalMaxPool3dConfig::new([2, 2, 2]).with_output_size(Some([3, 3, 3])).init();
    /// assert_eq!(pool.forward(Tensor::<5>::ones([1, 1, 6, 6, 6], &Device::flex())).dims(), [1, 1, 3, 3, 3]);
    /// ```
    FractionalMaxPool3d, FractionalMaxPool3dConfig, n = 3,
    ops = (crate::fractional_max_pool3d, crate::fractional_max_pool3d_with_indices)
);
