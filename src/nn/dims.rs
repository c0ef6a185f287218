//! The shapes burn-nn gives its configs (a scalar in 1d, an array in 2d and 3d; three padding
//! enums) turned into the rank-N arrays the functional ops take, so each module family is
//! written once for every rank.

use burn::nn::{PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::Tensor;

use crate::spec::{kernel_extent, same_padding};

/// A per-axis size as burn-nn spells it: `usize` for 1d, `[usize; N]` otherwise.
pub trait Dims<const N: usize>: Copy {
    /// The size of each spatial axis.
    fn dims(self) -> [usize; N];
}

impl Dims<1> for usize {
    fn dims(self) -> [usize; 1] {
        [self]
    }
}

impl<const N: usize> Dims<N> for [usize; N] {
    fn dims(self) -> [usize; N] {
        self
    }
}

/// burn-nn's padding configs, resolved for an input into `(begin, end)` per axis.
pub trait PaddingConfigNd<const N: usize> {
    /// The padding before and after each axis of an input of spatial `size`, for a window of
    /// `kernel` taps spread by `dilation` and moved by `stride`.
    ///
    /// `Same` keeps `ceil(size / stride)` outputs with the odd element last, as burn-nn does,
    /// but counts the dilated extent of the kernel (burn-nn ignores dilation there, so with
    /// dilation its `Same` does not keep the size; PyTorch's `padding="same"` does).
    fn pairs(
        &self,
        size: [usize; N],
        kernel: [usize; N],
        stride: [usize; N],
        dilation: [usize; N],
    ) -> [(usize, usize); N];
}

fn same<const N: usize>(
    size: [usize; N],
    kernel: [usize; N],
    stride: [usize; N],
    dilation: [usize; N],
) -> [(usize, usize); N] {
    core::array::from_fn(|i| {
        same_padding(size[i], kernel_extent(kernel[i], dilation[i]), stride[i])
    })
}

impl PaddingConfigNd<1> for PaddingConfig1d {
    fn pairs(
        &self,
        size: [usize; 1],
        kernel: [usize; 1],
        stride: [usize; 1],
        dilation: [usize; 1],
    ) -> [(usize, usize); 1] {
        match *self {
            Self::Same => same(size, kernel, stride, dilation),
            Self::Valid => [(0, 0)],
            Self::Explicit(left, right) => [(left, right)],
        }
    }
}

impl PaddingConfigNd<2> for PaddingConfig2d {
    fn pairs(
        &self,
        size: [usize; 2],
        kernel: [usize; 2],
        stride: [usize; 2],
        dilation: [usize; 2],
    ) -> [(usize, usize); 2] {
        match *self {
            Self::Same => same(size, kernel, stride, dilation),
            Self::Valid => [(0, 0); 2],
            Self::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
        }
    }
}

impl PaddingConfigNd<3> for PaddingConfig3d {
    fn pairs(
        &self,
        size: [usize; 3],
        kernel: [usize; 3],
        stride: [usize; 3],
        dilation: [usize; 3],
    ) -> [(usize, usize); 3] {
        match *self {
            Self::Same => same(size, kernel, stride, dilation),
            Self::Valid => [(0, 0); 3],
            Self::Explicit(depth, height, width) => {
                [(depth, depth), (height, height), (width, width)]
            }
        }
    }
}

/// The last `N` dims of `x` (its spatial size). A tensor of too low a rank gets ones here and
/// its rank error from the op it is passed to.
pub(crate) fn spatial_size<const N: usize, const D: usize>(x: &Tensor<D>) -> [usize; N] {
    let dims = x.dims();
    core::array::from_fn(|i| (D + i).checked_sub(N).map_or(1, |axis| dims[axis]))
}

/// A weight shape `(first, second, *kernel)` of rank `W = N + 2`.
pub(crate) fn weight_shape<const N: usize, const W: usize>(
    first: usize,
    second: usize,
    kernel: [usize; N],
) -> [usize; W] {
    core::array::from_fn(|i| match i {
        0 => first,
        1 => second,
        _ => kernel[i - 2],
    })
}
