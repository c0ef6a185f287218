//! Convolution on the CPU: im2col + GEMM for the forward pass, the input gradient (GEMM then
//! col2im) and the weight gradient (GEMM against the patch matrix, summed over the batch).
//! Groups are handled by offsetting into the same buffers: no per-group copies.
//!
//! Every routine takes a [`ConvGeometry`] and contiguous NCDHW slices; transposed convolutions
//! reuse them through the adjoint geometry (see `ConvGeometry::transpose`).

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::element::{Element, Split};
use super::gemm::{MatMut, MatRef, matmul};
use super::im2col::{col2im, im2col, is_pointwise};

/// Run `body(batch_index, chunk, scratch)` for every batch item, on rayon when `split.outer`,
/// with one scratch buffer per worker.
fn for_each_item<T: Element>(
    out: &mut [T],
    item_len: usize,
    scratch_len: usize,
    split: Split,
    body: impl Fn(usize, &mut [T], &mut Vec<T>) + Sync + Send,
) {
    if item_len == 0 {
        return;
    }
    let init = || vec![T::ZERO; scratch_len];
    if split.outer {
        out.par_chunks_mut(item_len)
            .enumerate()
            .for_each_init(init, |scratch, (n, chunk)| body(n, chunk, scratch));
    } else {
        let mut scratch = init();
        for (n, chunk) in out.chunks_mut(item_len).enumerate() {
            body(n, chunk, &mut scratch);
        }
    }
}

/// `out = conv(x, weight) + bias`, shape `geometry.out_shape()`.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let pointwise = is_pointwise(g);
    let mut out = vec![T::ZERO; g.out_shape().iter().product()];
    let split = Split::for_items(g.batch);
    let scratch_len = if pointwise { 0 } else { patch * out_vol };
    for_each_item(
        &mut out,
        g.out_channels * out_vol,
        scratch_len,
        split,
        |n, out_n, col| {
            if let Some(bias) = bias {
                for (row, value) in out_n.chunks_mut(out_vol).zip(bias) {
                    row.fill(*value);
                }
            }
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let col: &[T] = if pointwise {
                    x_group
                } else {
                    im2col(g, x_group, col);
                    col
                };
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let out_group = &mut out_n[group * cout_g * out_vol..][..cout_g * out_vol];
                matmul(
                    MatMut::rows(out_group, cout_g, out_vol),
                    MatRef::rows(weight_group, cout_g, patch),
                    MatRef::rows(col, patch, out_vol),
                    bias.is_some(),
                    split.inner,
                );
            }
        },
    );
    out
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let pointwise = is_pointwise(g);
    let mut x_grad = vec![T::ZERO; g.in_shape().iter().product()];
    let split = Split::for_items(g.batch);
    let scratch_len = if pointwise { 0 } else { patch * out_vol };
    for_each_item(
        &mut x_grad,
        g.in_channels * in_vol,
        scratch_len,
        split,
        |n, x_grad_n, col| {
            for group in 0..g.groups {
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let out_grad_group = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..]
                    [..cout_g * out_vol];
                let x_grad_group = &mut x_grad_n[group * cin_g * in_vol..][..cin_g * in_vol];
                let lhs = MatRef::transposed(weight_group, patch, cout_g);
                let rhs = MatRef::rows(out_grad_group, cout_g, out_vol);
                if pointwise {
                    matmul(
                        MatMut::rows(x_grad_group, patch, out_vol),
                        lhs,
                        rhs,
                        false,
                        split.inner,
                    );
                } else {
                    matmul(
                        MatMut::rows(col, patch, out_vol),
                        lhs,
                        rhs,
                        false,
                        split.inner,
                    );
                    col2im(g, col, x_grad_group);
                }
            }
        },
    );
    x_grad
}

/// Gradient of `conv` with respect to `weight`, shape `geometry.weight_shape()`.
///
/// The batch is cut into one contiguous chunk per thread; each chunk accumulates its own
/// partial gradient and the partials are summed in chunk order, so the result does not depend
/// on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let pointwise = is_pointwise(g);
    let weight_len = g.out_channels * patch;
    let chunks = g.batch.clamp(1, rayon::current_num_threads());
    let split = Split::for_items(chunks);
    let per_chunk = g.batch.div_ceil(chunks).max(1);
    let partial = |chunk: usize| {
        let mut weight_grad = vec![T::ZERO; weight_len];
        let mut col = vec![T::ZERO; if pointwise { 0 } else { patch * out_vol }];
        let items = (chunk * per_chunk)..((chunk + 1) * per_chunk).min(g.batch);
        for (step, n) in items.enumerate() {
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let patches: &[T] = if pointwise {
                    x_group
                } else {
                    im2col(g, x_group, &mut col);
                    &col
                };
                let out_grad_group = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..]
                    [..cout_g * out_vol];
                let weight_grad_group =
                    &mut weight_grad[group * cout_g * patch..][..cout_g * patch];
                matmul(
                    MatMut::rows(weight_grad_group, cout_g, patch),
                    MatRef::rows(out_grad_group, cout_g, out_vol),
                    MatRef::transposed(patches, out_vol, patch),
                    step > 0,
                    split.inner,
                );
            }
        }
        weight_grad
    };
    let partials: Vec<Vec<T>> = if split.outer {
        (0..chunks).into_par_iter().map(partial).collect()
    } else {
        (0..chunks).map(partial).collect()
    };
    let mut partials = partials.into_iter();
    let mut weight_grad = partials.next().unwrap_or_else(|| vec![T::ZERO; weight_len]);
    for other in partials {
        weight_grad
            .iter_mut()
            .zip(&other)
            .for_each(|(a, b)| *a += *b);
    }
    weight_grad
}

/// Gradient of a per-channel bias: `out_grad` summed over batch and space, for a contiguous
/// `(N, C, volume)` gradient.
pub fn bias_backward<T: Element>(out_grad: &[T], batch: usize, channels: usize) -> Vec<T> {
    let volume = out_grad.len().checked_div(batch * channels).unwrap_or(0);
    (0..channels)
        .into_par_iter()
        .map(|c| {
            let mut sum = T::ZERO;
            for n in 0..batch {
                for value in &out_grad[(n * channels + c) * volume..][..volume] {
                    sum += *value;
                }
            }
            sum
        })
        .collect()
}
