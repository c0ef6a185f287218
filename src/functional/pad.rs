//! PyTorch's `padding_mode` as a tensor op: the border is built from slices of the input and
//! concatenated, so every backend runs it and autodiff routes the border's gradient back to
//! the values it copied.

use burn::tensor::Tensor;

use crate::spec::PaddingMode;

/// Pad the spatial axes of `(N, C, D, H, W)` with `(begin, end)` per axis. The sizes were
/// validated for `mode` (see `spec::check_conv`); `Zeros` is left to the convolution itself.
pub fn pad_spatial(x: Tensor<5>, padding: [(usize, usize); 3], mode: PaddingMode) -> Tensor<5> {
    padding
        .into_iter()
        .enumerate()
        .fold(x, |x, (axis, (begin, end))| pad_axis(x, 2 + axis, begin, end, mode))
}

fn pad_axis(x: Tensor<5>, axis: usize, begin: usize, end: usize, mode: PaddingMode) -> Tensor<5> {
    if begin == 0 && end == 0 {
        return x;
    }
    let len = x.dims()[axis];
    let part = |start: usize, stop: usize| x.clone().narrow(axis, start, stop - start);
    let (before, after) = match mode {
        PaddingMode::Zeros => {
            let zeros = |n: usize| {
                let mut dims = x.dims();
                dims[axis] = n;
                Tensor::zeros(dims, &x.device())
            };
            (zeros(begin), zeros(end))
        }
        PaddingMode::Reflect => (
            part(1, begin + 1).flip([axis]),
            part(len - 1 - end, len - 1).flip([axis]),
        ),
        PaddingMode::Replicate => (
            part(0, 1).repeat_dim(axis, begin),
            part(len - 1, len).repeat_dim(axis, end),
        ),
        PaddingMode::Circular => (part(len - begin, len), part(0, end)),
    };
    let pieces: Vec<Tensor<5>> = [before, x, after]
        .into_iter()
        .filter(|piece| piece.dims()[axis] > 0)
        .collect();
    Tensor::cat(pieces, axis)
}
