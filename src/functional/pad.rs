//! PyTorch's `padding_mode` as a tensor op: the border is built from slices of the input and
//! concatenated, so every backend runs it and autodiff routes the border's gradient back to
//! the values it copied.

use burn::tensor::Tensor;

use crate::spec::PaddingMode;

use super::reshape::reshape_exact;

/// Pad the spatial axes of `(N, C, *spatial)` (rank 3 to 5) with `(begin, end)` per axis, as
/// lifted to rank 5 (the lift's unit axes take no padding). The sizes were validated for
/// `mode` (see `spec::check_conv`). The conv ops never call it with `Zeros` (their kernels
/// pad with zeros for free), but it pads with zeros too.
///
/// An empty input pads to an empty tensor of the padded shape at once: building its borders
/// costs time in the padding, not in the (zero) elements, and a backend's `repeat_dim` loops
/// over the count (NdArray's hung on a replicate padding of 2^40 around an empty batch).
pub fn pad_spatial<const R: usize>(
    x: Tensor<R>,
    padding: [(usize, usize); 3],
    mode: PaddingMode,
) -> Tensor<R> {
    let padding = &padding[5 - R..];
    if x.shape().num_elements() == 0 {
        let mut dims = x.dims();
        for (len, &(begin, end)) in dims[2..].iter_mut().zip(padding) {
            *len = len.saturating_add(begin).saturating_add(end);
        }
        return reshape_exact(x, dims);
    }
    padding
        .iter()
        .enumerate()
        .fold(x, |x, (axis, &(begin, end))| {
            pad_axis(x, 2 + axis, begin, end, mode)
        })
}

/// `dims` of `(N, C, D, H, W)` with `(begin, end)` added to each spatial axis. Validation
/// bounds each padded length by `isize::MAX`; past it (never), the length saturates.
pub fn padded_dims(mut dims: [usize; 5], padding: [(usize, usize); 3]) -> [usize; 5] {
    for (len, (begin, end)) in dims[2..].iter_mut().zip(padding) {
        *len = len.saturating_add(begin).saturating_add(end);
    }
    dims
}

fn pad_axis<const R: usize>(
    x: Tensor<R>,
    axis: usize,
    begin: usize,
    end: usize,
    mode: PaddingMode,
) -> Tensor<R> {
    let len = x.dims()[axis];
    let part = |start: usize, count: usize| x.clone().narrow(axis, start, count);
    // The `count` values that go before (`front`) or after the input.
    let border = |front: bool, count: usize| match mode {
        PaddingMode::Zeros => {
            let mut dims = x.dims();
            dims[axis] = count;
            Tensor::zeros(dims, &x.device())
        }
        PaddingMode::Reflect if front => part(1, count).flip([axis]),
        PaddingMode::Reflect => part(len - 1 - count, count).flip([axis]),
        PaddingMode::Replicate if front => part(0, 1).repeat_dim(axis, count),
        PaddingMode::Replicate => part(len - 1, 1).repeat_dim(axis, count),
        PaddingMode::Circular if front => part(len - count, count),
        PaddingMode::Circular => part(0, count),
    };
    let before = (begin > 0).then(|| border(true, begin));
    let after = (end > 0).then(|| border(false, end));
    if before.is_none() && after.is_none() {
        return x;
    }
    let pieces: Vec<Tensor<R>> = before.into_iter().chain([x.clone()]).chain(after).collect();
    Tensor::cat(pieces, axis)
}
