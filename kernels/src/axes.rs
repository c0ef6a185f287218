//! Per-axis values of a rank-3 volume, the shape every kernel here works in.

use cubecl::prelude::*;

/// One value per spatial axis, D, H then W: a size, a stride, a padding, a position (1d and
/// 2d volumes have unit leading axes).
#[derive(CubeLaunch, CubeType, Clone)]
#[expand(derive(Clone))]
pub struct Axes<T: LaunchArg + CubeType<ExpandType: Clone>> {
    pub d: T,
    pub h: T,
    pub w: T,
}

/// [`Axes`] of indices: sizes, strides, paddings, dilations and positions. (Struct literals
/// in `#[cube]` code name this alias: the macro reads a turbofish as generic parameters.)
pub type Index3 = Axes<usize>;

/// Strides, in elements, of an activation tensor `(N, C, D, H, W)`. The convolution kernels
/// read and write every layout through them: contiguous NCDHW, channels-last NDHWC (the
/// memory behind the NCDHW views Burn's convolutions return), and other permuted or broadcast
/// views, with no copy.
#[derive(CubeLaunch, CubeType, Clone)]
#[expand(derive(Clone))]
pub struct Layout {
    pub batch: usize,
    pub channel: usize,
    pub at: Index3,
}

/// Where `(batch, channel, at)` lies in a tensor laid out as `layout`.
#[cube]
pub fn offset(layout: &Layout, batch: usize, channel: usize, at: &Index3) -> usize {
    batch * layout.batch
        + channel * layout.channel
        + at.d * layout.at.d
        + at.h * layout.at.h
        + at.w * layout.at.w
}

/// Elements of a volume of size `size`.
#[cube]
pub fn volume(size: &Index3) -> usize {
    size.d * size.h * size.w
}

/// Flat index of position `at` in plane `plane` of contiguous volumes of size `size`.
#[cube]
pub fn flat_index(plane: usize, size: &Index3, at: &Index3) -> usize {
    ((plane * size.d + at.d) * size.h + at.h) * size.w + at.w
}

/// The position of flat index `index` within a volume of size `size`.
#[cube]
pub fn unflatten(index: usize, size: &Index3) -> Index3 {
    let w = index % size.w;
    let rest = index / size.w;
    Index3 {
        d: rest / size.h,
        h: rest % size.h,
        w,
    }
}

/// The value on `axis` (0, 1, 2 = D, H, W) of `values`.
#[cube]
pub fn along<T: CubePrimitive + LaunchArg>(values: &Axes<T>, #[comptime] axis: usize) -> T {
    if comptime![axis == 0] {
        values.d
    } else if comptime![axis == 1] {
        values.h
    } else {
        values.w
    }
}

/// The tap rule of a sliding window (a forward convolution's, a pool's), along one axis: the
/// input index that output position `at` reads at `reach` (tap x dilation), `at * stride +
/// reach - pad`, and whether it lies inside an input of length `len`.
#[cube]
pub fn tap_source(at: usize, reach: usize, stride: usize, pad: usize, len: usize) -> (usize, bool) {
    let mut index = 0;
    let mut inside = false;
    let padded = at * stride + reach;
    if padded >= pad {
        index = padded - pad;
        inside = index < len;
    }
    (index, inside)
}

/// The same rule read backwards, as an input gradient needs: the output position whose tap at
/// `reach` reads input position `at`, `(at + pad - reach) / stride`, and whether there is one
/// (the division is exact and the position lies inside an output of length `len`;
/// `unit_stride` skips the division).
#[cube]
pub fn tap_reader(
    at: usize,
    reach: usize,
    stride: usize,
    pad: usize,
    len: usize,
    #[comptime] unit_stride: bool,
) -> (usize, bool) {
    let mut index = 0;
    let mut inside = false;
    let padded = at + pad;
    if padded >= reach {
        index = padded - reach;
        inside = true;
        if comptime![!unit_stride] {
            inside = index.is_multiple_of(stride);
            index /= stride;
        }
        inside = inside && index < len;
    }
    (index, inside)
}
