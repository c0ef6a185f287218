//! The shared slice kernels: contiguous NCDHW slices in, slices out, no backend types.

pub(super) mod activation;
mod adjoint;
pub(super) mod batch_norm;
mod bordered;
pub(super) mod conv;
mod depthwise;
mod direct;
pub(super) mod element;
mod finished;
mod gemm;
mod huge_pages;
mod lowered;
mod phases;
mod plane_moments;
mod pointwise;
pub(super) mod pool;
mod sum;
mod transpose;
mod winograd;

use crate::spec::points;

/// Position `at` of a box of size `size`, flattened (the last axis fastest).
fn flat(at: [usize; 3], size: [usize; 3]) -> usize {
    (at[0] * size[1] + at[1]) * size[2] + at[2]
}
