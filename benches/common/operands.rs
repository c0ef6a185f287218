//! Random primitives of any rank, and the rank-5 lift of a case's sizes that the primitives
//! take.

use burn::backend::Dispatch;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{Device, Distribution, Shape, Tensor};

/// A random `U(0, 1)` float primitive of shape `dims`, any rank.
pub fn random(dims: &[usize], device: &Device) -> FloatTensor<Dispatch> {
    let numel: usize = dims.iter().product();
    let flat = Tensor::<1>::random([numel], Distribution::Default, device).into_dispatch();
    Dispatch::float_reshape(flat, Shape::from(dims.to_vec()))
}

/// `(N, C, *spatial)` with unit axes in front of the spatial ones, to rank 5.
pub fn lifted(dims: &[usize]) -> [usize; 5] {
    let mut out = [1; 5];
    out[..2].copy_from_slice(&dims[..2]);
    let spatial = &dims[2..];
    out[5 - spatial.len()..].copy_from_slice(spatial);
    out
}

/// The last three of [`lifted`]: a rank-N size as the rank-3 size the primitives take.
pub fn lifted3(values: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - values.len()..].copy_from_slice(values);
    out
}

/// A rank-N array from a slice.
pub fn array<const N: usize>(values: &[usize]) -> [usize; N] {
    core::array::from_fn(|i| values[i])
}
