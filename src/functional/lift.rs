//! Lifting rank-N tensors to the rank-5 form of the backend primitives, and back.

use burn::backend::Dispatch;
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::tensor::{Int, Shape, Tensor};

use crate::spec::lift;

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

/// How an input was lifted to `(N, C, D, H, W)`, to undo it on the output.
pub struct InputShape<const D: usize> {
    /// The input's dims with the batch axis made explicit: `(N, C, *spatial)`.
    pub dims: Vec<usize>,
    batched: bool,
}

impl<const D: usize> InputShape<D> {
    /// Reshape a rank-5 output back to the caller's rank: keep the last `spatial` axes, and
    /// drop the batch axis if the input had none.
    pub fn restore(&self, out: Tensor<5>) -> Tensor<D> {
        let dims = self.restored_dims(out.dims());
        reshape_exact(out, dims)
    }

    /// [`Self::restore`] for an int tensor (pooling indices).
    pub fn restore_int(&self, out: Tensor<5, Int>) -> Tensor<D, Int> {
        let dims = self.restored_dims(out.dims());
        reshape_exact_int(out, dims)
    }

    /// The caller's-rank dims of a rank-5 output.
    pub fn restored_dims(&self, [n, c, od, oh, ow]: [usize; 5]) -> [usize; D] {
        let spatial = self.dims.len() - 2;
        let all = [n, c, od, oh, ow];
        let mut dims = Vec::with_capacity(D);
        if self.batched {
            dims.push(n);
        }
        dims.push(c);
        dims.extend_from_slice(&all[5 - spatial..]);
        dims.try_into().expect("output rank matches input rank")
    }
}

/// Dims with the batch axis made explicit: an unbatched `(C, *spatial)` becomes
/// `(1, C, *spatial)`.
pub fn with_batch(mut dims: Vec<usize>, batched: bool) -> Vec<usize> {
    if !batched {
        dims.insert(0, 1);
    }
    dims
}

/// `(N, C, *spatial)` or unbatched `(C, *spatial)` to `(N, C, D, H, W)`.
pub fn lift_input<const N: usize, const D: usize>(
    x: Tensor<D>,
    batched: bool,
) -> (Tensor<5>, InputShape<D>) {
    let dims = with_batch(x.dims().to_vec(), batched);
    let spatial: [usize; N] = core::array::from_fn(|i| dims[2 + i]);
    let [d, h, w] = lift(spatial, 1);
    let tensor = reshape_exact(x, [dims[0], dims[1], d, h, w]);
    (tensor, InputShape { dims, batched })
}

/// `(C_out, C_in / groups, *kernel)` to rank 5.
pub fn lift_weight<const N: usize, const W: usize>(weight: Tensor<W>) -> Tensor<5> {
    let dims = weight.dims();
    let kernel: [usize; N] = core::array::from_fn(|i| dims[2 + i]);
    let [d, h, w] = lift(kernel, 1);
    reshape_exact(weight, [dims[0], dims[1], d, h, w])
}
