//! Reshapes that reach every shape, empty axes included, and stay on the autodiff graph.

use burn::backend::Dispatch;
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::tensor::{Int, Shape, Tensor};

/// `tensor` reshaped to exactly `dims`. Burn's `reshape` reads a 0 in its target as "keep this
/// dim" (and indexes the source's dims with it), so it cannot reach a shape with an empty
/// axis; the backend's reshape takes the shape as given, and stays on the autodiff graph.
pub fn reshape_exact<const D: usize, const D2: usize>(
    tensor: Tensor<D>,
    dims: [usize; D2],
) -> Tensor<D2> {
    let shape = Shape::from(dims.to_vec());
    Tensor::from_dispatch(Dispatch::float_reshape(tensor.into_dispatch(), shape))
}

/// [`reshape_exact`] for an int tensor.
pub fn reshape_exact_int<const D: usize, const D2: usize>(
    tensor: Tensor<D, Int>,
    dims: [usize; D2],
) -> Tensor<D2, Int> {
    let shape = Shape::from(dims.to_vec());
    Tensor::from_dispatch(Dispatch::int_reshape(tensor.into_dispatch(), shape))
}
