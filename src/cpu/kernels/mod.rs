//! The shared slice kernels: contiguous NCDHW slices in, slices out, no backend types.

pub(super) mod conv;
mod depthwise;
pub(super) mod element;
mod gemm;
mod im2col;
mod phases;
pub(super) mod pool;
mod tap_masks;
mod tap_table;
mod winograd;

/// Every point of a `[d, h, w]` box in row-major order.
fn points([d, h, w]: [usize; 3]) -> impl Iterator<Item = [usize; 3]> {
    (0..d).flat_map(move |i| (0..h).flat_map(move |j| (0..w).map(move |k| [i, j, k])))
}
