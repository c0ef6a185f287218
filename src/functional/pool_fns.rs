//! The public per-rank pooling functions and their `try_` twins, each a thin wrapper over one
//! rank-generic function of `pool.rs`.

use burn::tensor::{Int, Tensor};

use crate::spec::{
    AvgPoolNdOptions, FractionalMaxPoolOptions, LpPoolOptions, MaxPoolOptions, MaxUnpoolOptions,
    SpecResult,
};

use super::pool::{
    AdaptiveSize, try_adaptive_avg_pool, try_adaptive_max_pool, try_adaptive_max_pool_with_indices,
    try_avg_pool, try_fractional_max_pool, try_fractional_max_pool_with_indices, try_lp_pool,
    try_max_pool, try_max_pool_with_indices, try_max_unpool,
};

macro_rules! pool_fn {
    (
        $(#[$doc:meta])*
        $name:ident, $try_name:ident = $generic:ident::<$n:literal>($($arg:ident: $ty:ty),*) -> $ret:ty
    ) => {
        $(#[$doc])*
        ///
        /// # Panics
        /// When the shapes or options are invalid; the message names the op and the values.
        #[doc = concat!("[`", stringify!($try_name), "`] returns the error instead.")]
        pub fn $name<const D: usize>(x: Tensor<D>, $($arg: $ty),*) -> $ret {
            $try_name(x, $($arg),*).unwrap_or_else(|error| panic!("{error}"))
        }

        #[doc = concat!("[`", stringify!($name), "`], returning the validation error instead of panicking.")]
        pub fn $try_name<const D: usize>(x: Tensor<D>, $($arg: $ty),*) -> SpecResult<$ret> {
            #[allow(clippy::useless_conversion)]
            $generic::<$n, D>(stringify!($name), x, $($arg.into()),*)
        }
    };
}

pool_fn!(
    /// 1D max pooling, as PyTorch's `F.max_pool1d`: padding acts as -inf, NaN propagates, ties
    /// keep the first maximum. `x` is `(N, C, L)` or `(C, L)`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 5.0]]], &Device::flex());
    /// let out = burn_convpool::max_pool1d(x, MaxPoolOptions::new([2]));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [3.0, 5.0]);
    /// ```
    max_pool1d, try_max_pool1d = try_max_pool::<1>(options: MaxPoolOptions<1>) -> Tensor<D>
);
pool_fn!(
    /// 2D max pooling, as PyTorch's `F.max_pool2d` (kernel, stride, padding, dilation,
    /// `ceil_mode`). `x` is `(N, C, H, W)` or `(C, H, W)`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<4>::ones([8, 64, 112, 112], &Device::flex());
    /// let options = MaxPoolOptions::new([3, 3]).with_stride([2, 2]).with_padding([1, 1]);
    /// assert_eq!(burn_convpool::max_pool2d(x, options).dims(), [8, 64, 56, 56]);
    /// ```
    max_pool2d, try_max_pool2d = try_max_pool::<2>(options: MaxPoolOptions<2>) -> Tensor<D>
);
pool_fn!(
    /// 3D max pooling, as PyTorch's `F.max_pool3d`. `x` is `(N, C, D, H, W)` or `(C, D, H, W)`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<5>::ones([1, 2, 4, 4, 4], &Device::flex());
    /// let out = burn_convpool::max_pool3d(x, MaxPoolOptions::new([2, 2, 2]).with_ceil_mode(true));
    /// assert_eq!(out.dims(), [1, 2, 2, 2, 2]);
    /// ```
    max_pool3d, try_max_pool3d = try_max_pool::<3>(options: MaxPoolOptions<3>) -> Tensor<D>
);
pool_fn!(
    /// [`max_pool1d`] with the indices of the maxima (flat per `(n, c)` plane, as PyTorch's
    /// `return_indices=True`), ready for [`max_unpool1d`].
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 5.0]]], &Device::flex());
    /// let (_, indices) = burn_convpool::max_pool1d_with_indices(x, MaxPoolOptions::new([2]));
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [1, 3]);
    /// ```
    max_pool1d_with_indices, try_max_pool1d_with_indices =
        try_max_pool_with_indices::<1>(options: MaxPoolOptions<1>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// [`max_pool2d`] with the indices of the maxima (`h * W + w` per plane).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<4>::from_floats([[[[1.0, 2.0], [4.0, 3.0]]]], &Device::flex());
    /// let (out, indices) = burn_convpool::max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2]));
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [2]);
    /// ```
    max_pool2d_with_indices, try_max_pool2d_with_indices =
        try_max_pool_with_indices::<2>(options: MaxPoolOptions<2>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// [`max_pool3d`] with the indices of the maxima (`(t * H + h) * W + w` per plane).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// let x = Tensor::<5>::ones([1, 1, 2, 2, 2], &Device::flex());
    /// let (_, indices) = burn_convpool::max_pool3d_with_indices(x, MaxPoolOptions::new([2, 2, 2]));
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [0]);
    /// ```
    max_pool3d_with_indices, try_max_pool3d_with_indices =
        try_max_pool_with_indices::<3>(options: MaxPoolOptions<3>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// 1D average pooling, as PyTorch's `F.avg_pool1d` (`count_include_pad`, `ceil_mode`).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::AvgPoolNdOptions;
    /// let x = Tensor::<3>::from_floats([[[1.0, 3.0, 2.0, 6.0]]], &Device::flex());
    /// let out = burn_convpool::avg_pool1d(x, AvgPoolNdOptions::new([2]));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [2.0, 4.0]);
    /// ```
    avg_pool1d, try_avg_pool1d = try_avg_pool::<1>(options: impl Into<AvgPoolNdOptions<1>>) -> Tensor<D>
);
pool_fn!(
    /// 2D average pooling, as PyTorch's `F.avg_pool2d`, with `divisor_override`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::AvgPoolNdOptions;
    /// let x = Tensor::<4>::ones([1, 1, 4, 4], &Device::flex());
    /// let out = burn_convpool::avg_pool2d(x, AvgPoolNdOptions::new([2, 2]).with_divisor_override(2));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [2.0; 4]);
    /// ```
    avg_pool2d, try_avg_pool2d = try_avg_pool::<2>(options: impl Into<AvgPoolNdOptions<2>>) -> Tensor<D>
);
pool_fn!(
    /// 3D average pooling, as PyTorch's `F.avg_pool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::AvgPoolNdOptions;
    /// let x = Tensor::<5>::ones([1, 1, 3, 3, 3], &Device::flex());
    /// let options = AvgPoolNdOptions::new([2, 2, 2]).with_padding([1, 1, 1]).with_count_include_pad(false);
    /// assert_eq!(burn_convpool::avg_pool3d(x, options).dims(), [1, 1, 2, 2, 2]);
    /// ```
    avg_pool3d, try_avg_pool3d = try_avg_pool::<3>(options: impl Into<AvgPoolNdOptions<3>>) -> Tensor<D>
);
pool_fn!(
    /// 1D adaptive average pooling, as PyTorch's `F.adaptive_avg_pool1d`: cell `i` covers
    /// `[floor(i * L / O), ceil((i + 1) * L / O))`; `O > L` is allowed.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<3>::from_floats([[[1.0, 2.0, 3.0]]], &Device::flex());
    /// let out = burn_convpool::adaptive_avg_pool1d(x, [2]);
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [1.5, 2.5]);
    /// ```
    adaptive_avg_pool1d, try_adaptive_avg_pool1d =
        try_adaptive_avg_pool::<1>(output_size: impl Into<AdaptiveSize<1>>) -> Tensor<D>
);
pool_fn!(
    /// 2D adaptive average pooling; a `None` entry keeps that input size.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<4>::ones([8, 512, 7, 7], &Device::flex());
    /// assert_eq!(burn_convpool::adaptive_avg_pool2d(x.clone(), [1, 1]).dims(), [8, 512, 1, 1]);
    /// assert_eq!(burn_convpool::adaptive_avg_pool2d(x, [None, Some(3)]).dims(), [8, 512, 7, 3]);
    /// ```
    adaptive_avg_pool2d, try_adaptive_avg_pool2d =
        try_adaptive_avg_pool::<2>(output_size: impl Into<AdaptiveSize<2>>) -> Tensor<D>
);
pool_fn!(
    /// 3D adaptive average pooling.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<5>::ones([1, 2, 5, 6, 7], &Device::flex());
    /// assert_eq!(burn_convpool::adaptive_avg_pool3d(x, [2, 3, 4]).dims(), [1, 2, 2, 3, 4]);
    /// ```
    adaptive_avg_pool3d, try_adaptive_avg_pool3d =
        try_adaptive_avg_pool::<3>(output_size: impl Into<AdaptiveSize<3>>) -> Tensor<D>
);
pool_fn!(
    /// 1D adaptive max pooling, as PyTorch's `F.adaptive_max_pool1d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<3>::from_floats([[[1.0, 4.0, 3.0]]], &Device::flex());
    /// let out = burn_convpool::adaptive_max_pool1d(x, [2]);
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [4.0, 4.0]);
    /// ```
    adaptive_max_pool1d, try_adaptive_max_pool1d =
        try_adaptive_max_pool::<1>(output_size: impl Into<AdaptiveSize<1>>) -> Tensor<D>
);
pool_fn!(
    /// 2D adaptive max pooling.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<4>::ones([1, 3, 7, 5], &Device::flex());
    /// assert_eq!(burn_convpool::adaptive_max_pool2d(x, [3, 2]).dims(), [1, 3, 3, 2]);
    /// ```
    adaptive_max_pool2d, try_adaptive_max_pool2d =
        try_adaptive_max_pool::<2>(output_size: impl Into<AdaptiveSize<2>>) -> Tensor<D>
);
pool_fn!(
    /// 3D adaptive max pooling.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<5>::ones([1, 1, 4, 4, 4], &Device::flex());
    /// assert_eq!(burn_convpool::adaptive_max_pool3d(x, [2, 2, 2]).dims(), [1, 1, 2, 2, 2]);
    /// ```
    adaptive_max_pool3d, try_adaptive_max_pool3d =
        try_adaptive_max_pool::<3>(output_size: impl Into<AdaptiveSize<3>>) -> Tensor<D>
);
pool_fn!(
    /// [`adaptive_max_pool1d`] with indices.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<3>::from_floats([[[1.0, 4.0, 3.0]]], &Device::flex());
    /// let (_, indices) = burn_convpool::adaptive_max_pool1d_with_indices(x, [2]);
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [1, 1]);
    /// ```
    adaptive_max_pool1d_with_indices, try_adaptive_max_pool1d_with_indices =
        try_adaptive_max_pool_with_indices::<1>(output_size: impl Into<AdaptiveSize<1>>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// [`adaptive_max_pool2d`] with indices.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<4>::ones([1, 1, 4, 4], &Device::flex());
    /// let (_, indices) = burn_convpool::adaptive_max_pool2d_with_indices(x, [1, 1]);
    /// assert_eq!(indices.into_data().iter::<i64>().collect::<Vec<_>>(), [0]);
    /// ```
    adaptive_max_pool2d_with_indices, try_adaptive_max_pool2d_with_indices =
        try_adaptive_max_pool_with_indices::<2>(output_size: impl Into<AdaptiveSize<2>>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// [`adaptive_max_pool3d`] with indices.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// let x = Tensor::<5>::ones([1, 1, 2, 2, 2], &Device::flex());
    /// let (out, _) = burn_convpool::adaptive_max_pool3d_with_indices(x, [1, 1, 1]);
    /// assert_eq!(out.dims(), [1, 1, 1, 1, 1]);
    /// ```
    adaptive_max_pool3d_with_indices, try_adaptive_max_pool3d_with_indices =
        try_adaptive_max_pool_with_indices::<3>(output_size: impl Into<AdaptiveSize<3>>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// 2D fractional max pooling, as PyTorch's `F.fractional_max_pool2d`. `samples` is
    /// `(N, C, 2)` in `[0, 1)` with PyTorch's order (`[.., 0]` drives W, `[.., 1]` drives H); when
    /// `None` they are drawn from Burn's RNG on the input's device. A given sample outside
    /// `[0, 1]`, or NaN, is an error (`FractionalSample`).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{FractionalMaxPoolOptions, FractionalOutput};
    /// let x = Tensor::<4>::ones([1, 2, 9, 9], &Device::flex());
    /// let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Ratio([0.5, 0.5]));
    /// assert_eq!(burn_convpool::fractional_max_pool2d(x, options, None).dims(), [1, 2, 4, 4]);
    /// ```
    fractional_max_pool2d, try_fractional_max_pool2d =
        try_fractional_max_pool::<2>(options: FractionalMaxPoolOptions<2>, samples: Option<Tensor<3>>) -> Tensor<D>
);
pool_fn!(
    /// 3D fractional max pooling; `samples` is `(N, C, 3)` ordered (T, H, W), in `[0, 1]` as in
    /// [`fractional_max_pool2d`].
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{FractionalMaxPoolOptions, FractionalOutput};
    /// let x = Tensor::<5>::ones([1, 1, 6, 6, 6], &Device::flex());
    /// let options = FractionalMaxPoolOptions::new([2, 2, 2], FractionalOutput::Size([3, 3, 3]));
    /// assert_eq!(burn_convpool::fractional_max_pool3d(x, options, None).dims(), [1, 1, 3, 3, 3]);
    /// ```
    fractional_max_pool3d, try_fractional_max_pool3d =
        try_fractional_max_pool::<3>(options: FractionalMaxPoolOptions<3>, samples: Option<Tensor<3>>) -> Tensor<D>
);
pool_fn!(
    /// [`fractional_max_pool2d`] with indices.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{FractionalMaxPoolOptions, FractionalOutput};
    /// let x = Tensor::<4>::ones([1, 1, 5, 5], &Device::flex());
    /// let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([2, 2]));
    /// let (_, indices) = burn_convpool::fractional_max_pool2d_with_indices(x, options, None);
    /// assert_eq!(indices.dims(), [1, 1, 2, 2]);
    /// ```
    fractional_max_pool2d_with_indices, try_fractional_max_pool2d_with_indices =
        try_fractional_max_pool_with_indices::<2>(options: FractionalMaxPoolOptions<2>, samples: Option<Tensor<3>>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// [`fractional_max_pool3d`] with indices.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{FractionalMaxPoolOptions, FractionalOutput};
    /// let x = Tensor::<5>::ones([1, 1, 5, 5, 5], &Device::flex());
    /// let options = FractionalMaxPoolOptions::new([2, 2, 2], FractionalOutput::Size([2, 2, 2]));
    /// let (_, indices) = burn_convpool::fractional_max_pool3d_with_indices(x, options, None);
    /// assert_eq!(indices.dims(), [1, 1, 2, 2, 2]);
    /// ```
    fractional_max_pool3d_with_indices, try_fractional_max_pool3d_with_indices =
        try_fractional_max_pool_with_indices::<3>(options: FractionalMaxPoolOptions<3>, samples: Option<Tensor<3>>) -> (Tensor<D>, Tensor<D, Int>)
);
pool_fn!(
    /// 1D power-average pooling, as PyTorch's `F.lp_pool1d`: `(sum x^p)^(1/p)` per window (p = 1
    /// is the signed sum; `p = inf` the max of `|x|`).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::LpPoolOptions;
    /// let x = Tensor::<3>::from_floats([[[3.0, 4.0]]], &Device::flex());
    /// let out = burn_convpool::lp_pool1d(x, LpPoolOptions::new(2.0, [2]));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [5.0]);
    /// ```
    lp_pool1d, try_lp_pool1d = try_lp_pool::<1>(options: LpPoolOptions<1>) -> Tensor<D>
);
pool_fn!(
    /// 2D power-average pooling, as PyTorch's `F.lp_pool2d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::LpPoolOptions;
    /// let x = Tensor::<4>::ones([1, 1, 4, 4], &Device::flex());
    /// let out = burn_convpool::lp_pool2d(x, LpPoolOptions::new(1.0, [2, 2]));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [4.0; 4]);
    /// ```
    lp_pool2d, try_lp_pool2d = try_lp_pool::<2>(options: LpPoolOptions<2>) -> Tensor<D>
);
pool_fn!(
    /// 3D power-average pooling, as PyTorch's `F.lp_pool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::LpPoolOptions;
    /// let x = Tensor::<5>::ones([1, 1, 2, 2, 2], &Device::flex());
    /// let out = burn_convpool::lp_pool3d(x, LpPoolOptions::new(2.0, [2, 2, 2]));
    /// assert!((out.into_scalar::<f32>() - 8f32.sqrt()).abs() < 1e-6);
    /// ```
    lp_pool3d, try_lp_pool3d = try_lp_pool::<3>(options: LpPoolOptions<3>) -> Tensor<D>
);
pool_fn!(
    /// 1D max-unpool, as PyTorch's `F.max_unpool1d`: each value written at its index in a zero
    /// output. Indices outside the output plane are an error, never a write out of bounds.
    ///
    /// ```
    /// use burn::tensor::{Device, Int, Tensor};
    /// use burn_convpool::MaxUnpoolOptions;
    /// let device = Device::flex();
    /// let x = Tensor::<3>::from_floats([[[3.0, 5.0]]], &device);
    /// let indices = Tensor::<3, Int>::from_ints([[[1, 3]]], &device);
    /// let out = burn_convpool::max_unpool1d(x, indices, MaxUnpoolOptions::new([2]));
    /// assert_eq!(out.into_data().iter::<f32>().collect::<Vec<_>>(), [0.0, 3.0, 0.0, 5.0]);
    /// ```
    max_unpool1d, try_max_unpool1d =
        try_max_unpool::<1>(indices: Tensor<D, Int>, options: MaxUnpoolOptions<1>) -> Tensor<D>
);
pool_fn!(
    /// 2D max-unpool, as PyTorch's `F.max_unpool2d`, with an optional exact `output_size`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn::tensor::ops::MaxPoolOptions;
    /// use burn_convpool::{MaxUnpoolOptions, max_pool2d_with_indices, max_unpool2d};
    /// let x = Tensor::<4>::ones([1, 1, 5, 5], &Device::flex());
    /// let (pooled, indices) = max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2]));
    /// let out = max_unpool2d(pooled, indices, MaxUnpoolOptions::new([2, 2]).with_output_size([5, 5]));
    /// assert_eq!(out.dims(), [1, 1, 5, 5]);
    /// ```
    max_unpool2d, try_max_unpool2d =
        try_max_unpool::<2>(indices: Tensor<D, Int>, options: MaxUnpoolOptions<2>) -> Tensor<D>
);
pool_fn!(
    /// 3D max-unpool, as PyTorch's `F.max_unpool3d`.
    ///
    /// ```
    /// use burn::tensor::{Device, Int, Tensor};
    /// use burn_convpool::MaxUnpoolOptions;
    /// let device = Device::flex();
    /// let x = Tensor::<5>::ones([1, 1, 1, 1, 1], &device);
    /// let indices = Tensor::<5, Int>::zeros([1, 1, 1, 1, 1], &device);
    /// let out = burn_convpool::max_unpool3d(x, indices, MaxUnpoolOptions::new([2, 2, 2]));
    /// assert_eq!(out.dims(), [1, 1, 2, 2, 2]);
    /// ```
    max_unpool3d, try_max_unpool3d =
        try_max_unpool::<3>(indices: Tensor<D, Int>, options: MaxUnpoolOptions<3>) -> Tensor<D>
);
