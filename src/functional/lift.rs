//! The inputs of the backend primitives. They take `(N, C, *spatial)` at the caller's rank and
//! lift it to rank 5 themselves, as views inside each backend: a reshape here would queue
//! an operation per operand under `Fusion`, and reshaping the rank-5 result back would copy
//! any output that is not contiguous (a channels-last one, as Burn's convolutions leave).
//! Only an unbatched input, which needs a batch axis the primitives cannot tell from a
//! spatial one, is lifted here.

use burn::backend::Dispatch;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{DType, Device, Int, Tensor};

use crate::spec::{PaddingMode, lift, lifted_dims};

use super::pad::pad_spatial;
use super::reshape::{reshape_exact, reshape_exact_int};

/// A tensor as the primitives take and return it (float and int alike), of any rank.
pub type DispatchTensor = FloatTensor<Dispatch>;

/// An input as the primitives take it: as given when it has a batch axis, else lifted to
/// rank 5 with one.
pub enum Input<const D: usize> {
    /// `(N, C, *spatial)` as the caller gave it.
    AsGiven(Tensor<D>),
    /// An unbatched `(C, *spatial)` lifted to `(1, C, D, H, W)`.
    Lifted(Tensor<5>),
}

impl<const D: usize> Input<D> {
    /// Its dims lifted to rank 5, `(N, C, D, H, W)`.
    pub fn dims(&self) -> [usize; 5] {
        match self {
            Self::AsGiven(x) => lifted_dims(&x.dims()),
            Self::Lifted(x) => x.dims(),
        }
    }

    pub fn device(&self) -> Device {
        match self {
            Self::AsGiven(x) => x.device(),
            Self::Lifted(x) => x.device(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Self::AsGiven(x) => x.dtype(),
            Self::Lifted(x) => x.dtype(),
        }
    }

    /// Padded by `padding` (per lifted axis) in `mode`.
    pub fn pad(self, padding: [(usize, usize); 3], mode: PaddingMode) -> Self {
        match self {
            Self::AsGiven(x) => Self::AsGiven(pad_spatial(x, padding, mode)),
            Self::Lifted(x) => Self::Lifted(pad_spatial(x, padding, mode)),
        }
    }

    /// Reshaped to the caller's-rank `dims`, on the autodiff graph (an empty batch's result).
    pub fn reshaped(self, dims: [usize; D]) -> Tensor<D> {
        match self {
            Self::AsGiven(x) => reshape_exact(x, dims),
            Self::Lifted(x) => reshape_exact(x, dims),
        }
    }

    pub fn into_dispatch(self) -> DispatchTensor {
        match self {
            Self::AsGiven(x) => x.into_dispatch(),
            Self::Lifted(x) => x.into_dispatch(),
        }
    }
}

/// How an input was given, to bring results back to the caller's rank and to lift the other
/// operands of a call to the input's.
pub struct InputShape<const D: usize> {
    /// The input's dims with the batch axis made explicit: `(N, C, *spatial)`.
    pub dims: Vec<usize>,
    batched: bool,
}

impl<const D: usize> InputShape<D> {
    /// A primitive's result (at the input's rank) at the caller's rank.
    pub fn restore(&self, out: DispatchTensor) -> Tensor<D> {
        if self.batched {
            return Tensor::from_dispatch(out);
        }
        let out = Tensor::<5>::from_dispatch(out);
        let dims = self.restored_dims(out.dims());
        reshape_exact(out, dims)
    }

    /// [`Self::restore`] for an int result (pooling indices).
    pub fn restore_int(&self, out: DispatchTensor) -> Tensor<D, Int> {
        if self.batched {
            return Tensor::from_dispatch(out);
        }
        let out = Tensor::<5, Int>::from_dispatch(out);
        let dims = self.restored_dims(out.dims());
        reshape_exact_int(out, dims)
    }

    /// Another operand of the call (`(N or C_out, C, *spatial)`, such as a conv's weight) at
    /// the rank the input went to the primitive at.
    pub fn operand<const W: usize>(&self, tensor: Tensor<W>) -> DispatchTensor {
        if self.batched {
            return tensor.into_dispatch();
        }
        let dims = lifted_dims(&tensor.dims());
        reshape_exact(tensor, dims).into_dispatch()
    }

    /// [`Self::operand`] for an int tensor the input's shape (max-unpool's indices).
    pub fn operand_int(&self, tensor: Tensor<D, Int>) -> DispatchTensor {
        if self.batched {
            return tensor.into_dispatch();
        }
        let dims = lifted_dims(&with_batch(tensor.dims().to_vec(), false));
        reshape_exact_int(tensor, dims).into_dispatch()
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

/// `(N, C, *spatial)` as given, or unbatched `(C, *spatial)` lifted to `(1, C, D, H, W)`.
pub fn lift_input<const N: usize, const D: usize>(
    x: Tensor<D>,
    batched: bool,
) -> (Input<D>, InputShape<D>) {
    let dims = with_batch(x.dims().to_vec(), batched);
    let input = if batched {
        Input::AsGiven(x)
    } else {
        let spatial: [usize; N] = core::array::from_fn(|i| dims[2 + i]);
        let [d, h, w] = lift(spatial, 1);
        Input::Lifted(reshape_exact(x, [dims[0], dims[1], d, h, w]))
    };
    (input, InputShape { dims, batched })
}
