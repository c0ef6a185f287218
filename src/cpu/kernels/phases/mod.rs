//! Strided convolutions whose kernel is a whole number of strides on every axis (DCGAN's 4x4
//! stride-2 up- and down-sampling, and so every pass of a `conv_transpose` with such a
//! kernel) as stride-1 convolutions over the input's stride phases, with no patch matrix.
//!
//! Split into its phases (see [`plan::Plan`]), the input of a stride-`s`, `s * t`-tap axis is
//! `s` grids on which the convolution has `t` taps of stride 1. Laid on rows as wide as the
//! grids, the output of one tap is a GEMM of that tap's weights with a shifted view of the
//! grids: `t^d` GEMMs over `channels x s^d` instead of one over an im2col matrix that is
//! written and read once more per output. The columns past the output's width are computed
//! and dropped (one in 17 for DCGAN). The input gradient is the same construction over the
//! output gradient, scattered back from the phases, and the weight gradient sums each tap's
//! product of output gradients and shifted grids.
//!
//! Each pass multiplies some values by zeros that the definition never pairs them with (a
//! dropped column's gradient, a padding row's weight): an infinite or NaN operand there
//! would turn a finite result into NaN, so such operands take the lowered path instead.

mod plan;

use crate::spec::ConvGeometry;

use super::element::{
    Element, Split, all_within, for_each_chunk, items_per_thread, sum_of_partials,
};
use super::finished::FinishedPlanes;
use super::gemm::{MatMut, MatRef, matmul};
use super::huge_pages;
use super::transpose::transpose;
use plan::Plan;

/// Input channels per group times phases (the depth of each tap's GEMM) from which the phase
/// grids pay; below it the lowered path's single deeper product wins.
const MIN_DEPTH: usize = 64;

/// Output channels per group from which they pay.
const MIN_OUT_CHANNELS: usize = 16;

/// Grid points per output point (the product over the axes of `(out + taps - 1) / out`:
/// what the input gradient computes, the other passes computing fewer) up to which the
/// grids pay: the extra rows and columns cost more than the patch matrix they save on small
/// outputs; decided by `dcgan_up_128x16x16` (16x16 outputs, 1.13 points per output).
const MAX_WASTE: f64 = 1.15;

/// Elements of one image's grids (input side and output side of a group) up to which the grids
/// are used: 64 MiB of f64 per thread. They hold a whole image, where the lowered path works
/// through cache-sized tiles, so a larger image (a big volume) takes that path instead.
const MAX_GRID_ELEMENTS: usize = 8 << 20;

/// Whether the phase grids compute `geometry`: a shape they serve whose grids stay within
/// [`MAX_GRID_ELEMENTS`], fast or not (what a pinned algorithm runs on).
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    serves_normalised(&g) && grid_elements(&g, plan::grid(&g)) <= MAX_GRID_ELEMENTS
}

/// Whether the phase grids compute `geometry` (normalised): dilation 1, every kernel axis a
/// whole number of strides, some stride above 1, and nothing empty.
fn serves_normalised(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    let axes_fit = (0..3).all(|a| g.dilation[a] == 1 && g.kernel[a].is_multiple_of(g.stride[a]));
    axes_fit
        && g.stride.iter().any(|&s| s > 1)
        && g.out_volume() > 0
        && g.in_volume() > 0
        && g.batch > 0
        && g.in_channels > 0
        && g.out_channels > 0
}

/// Whether they are faster there than the lowered path: deep enough GEMMs, more than one tap
/// to save the patch matrix of (a one-tap kernel's is a plain gather either way), and
/// outputs large enough for the grids' extra rows and columns not to cost more than that.
fn pays(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    let phases: usize = g.stride.iter().product();
    let (taps, grid) = (plan::taps(g), plan::grid(g));
    let waste: f64 = (0..3)
        .map(|a| grid[a] as f64 / g.out_size[a] as f64)
        .product();
    g.in_per_group() * phases >= MIN_DEPTH
        && g.out_per_group() >= MIN_OUT_CHANNELS
        && taps.iter().product::<usize>() > 1
        && waste <= MAX_WASTE
        && grid_elements(g, grid) <= MAX_GRID_ELEMENTS
}

/// Elements of one image's `grid`s (`plan::grid`), input side and output side of a group
/// (saturating).
fn grid_elements(g: &ConvGeometry, grid: [usize; 3]) -> usize {
    let phases: usize = g.stride.iter().product();
    (g.in_per_group() * phases + g.out_per_group()).saturating_mul(grid.iter().product())
}

/// Whether the phase grids compute `geometry`'s passes: a shape they serve and pay on (the
/// weight gradient still declines non-finite inputs, see [`weight_backward`]).
pub fn fits(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    serves_normalised(&g) && pays(&g)
}

/// `conv(x, weight) + bias` on the phase grids, for a shape they [`serves`], each task's
/// images handed to `finished` once stored.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    run_forward(&geometry.normalised(), x, weight, bias, finished)
}

/// The forward pass. Padding reaches the weights only as the lowered path's zeros do, and a
/// dropped column never reaches a kept one, so every value is admitted.
fn run_forward<T: Element>(
    g: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    let plan = Plan::new(g);
    let folded = plan.fold_weights(weight);
    let taps: Vec<[usize; 3]> = plan.taps().collect();
    let (cin_g, cout_g, depth) = (g.in_per_group(), g.out_per_group(), plan.depth());
    let (in_vol, out_vol, slice_len) = (g.in_volume(), g.out_volume(), plan.slice_len());
    let mut out = huge_pages::zeros(g.out_shape().iter().product());
    let per_chunk = items_per_thread(g.batch);
    let split = Split::for_items(g.batch.div_ceil(per_chunk), g.multiply_adds());
    let item_len = g.out_channels * out_vol;
    let scratch = plan.input_len() + cout_g * slice_len;
    for_each_chunk(
        &mut out,
        item_len,
        per_chunk,
        scratch,
        split,
        |images, out_chunk, scratch| {
            let (grids, wide) = scratch.split_at_mut(plan.input_len());
            let first = images.start * item_len;
            for (n, out_n) in images.zip(out_chunk.chunks_mut(item_len)) {
                for group in 0..g.groups {
                    let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..];
                    plan.gather_input(&x_group[..cin_g * in_vol], grids);
                    let out_group = &mut out_n[group * cout_g * out_vol..][..cout_g * out_vol];
                    let bias = bias.map(|bias| &bias[group * cout_g..][..cout_g]);
                    for slice in 0..plan.out_slices() {
                        for (index, &tap) in taps.iter().enumerate() {
                            matmul(
                                MatMut::rows(wide, cout_g, slice_len),
                                MatRef::rows(
                                    plan.tap_weights(&folded, group, index),
                                    cout_g,
                                    depth,
                                ),
                                plan.input_view(grids, slice, tap),
                                index > 0,
                                split.inner,
                            );
                        }
                        plan.store_slice(wide, slice, bias, out_group);
                    }
                }
            }
            finished.finished(first, out_chunk);
        },
    );
    out
}

/// The gradient of `conv` with respect to `x` on the phase grids, for a shape they [`serves`].
/// Padding rows multiply every weight, so a weight that is not finite leaves NaN there for
/// `conv::x_backward` to sum again by the definition.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    run_x_backward(&geometry.normalised(), weight, out_grad)
}

/// The input gradient: per phase grid row `r`, tap `a` reads the output gradient at `r - a`,
/// from grids holding it after `taps - 1` zeros on each axis (see [`Plan::grad_len`]).
fn run_x_backward<T: Element>(g: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    let plan = Plan::new(g);
    let taps: Vec<[usize; 3]> = plan.taps().collect();
    let (cin_g, cout_g, depth) = (g.in_per_group(), g.out_per_group(), plan.depth());
    // Each tap's weights transposed once (`depth x C_out/groups`, row-major): `gemm` runs
    // faster on a row-major left operand than on the transposed view (the
    // `dcgan_up_128x16x16` forward row).
    let folded = plan.fold_weights(weight);
    let mut folded_t = vec![T::ZERO; folded.len()];
    for (block, block_t) in folded
        .chunks_exact(cout_g * depth)
        .zip(folded_t.chunks_exact_mut(cout_g * depth))
    {
        transpose(block, cout_g, depth, block_t);
    }
    let (in_vol, out_vol) = (g.in_volume(), g.out_volume());
    let slice_len = plan.grad_slice_len();
    let phased_len = depth * plan.plane_len();
    let mut x_grad = huge_pages::zeros(g.in_shape().iter().product());
    let per_chunk = items_per_thread(g.batch);
    let split = Split::for_items(g.batch.div_ceil(per_chunk), g.multiply_adds());
    let item_len = g.in_channels * in_vol;
    for_each_chunk(
        &mut x_grad,
        item_len,
        per_chunk,
        plan.grad_len() + phased_len,
        split,
        |images, x_grad_chunk, scratch| {
            // The scratch starts zeroed, and `pad_out_grad` writes only the gradient's places,
            // so the padding around them stays zero from image to image.
            let (grads, phased) = scratch.split_at_mut(plan.grad_len());
            for (n, x_grad_n) in images.zip(x_grad_chunk.chunks_mut(item_len)) {
                for group in 0..g.groups {
                    let out_grad_group =
                        &out_grad[(n * g.out_channels + group * cout_g) * out_vol..];
                    plan.pad_out_grad(&out_grad_group[..cout_g * out_vol], grads);
                    for slice in 0..plan.grid_slices() {
                        for (index, &tap) in taps.iter().enumerate() {
                            let weights = plan.tap_weights(&folded_t, group, index);
                            matmul(
                                MatMut::columns(
                                    &mut phased[slice * slice_len..],
                                    depth,
                                    slice_len,
                                    plan.plane_len(),
                                ),
                                MatRef::rows(weights, depth, cout_g),
                                MatRef::columns(
                                    &grads[plan.grad_offset(slice, tap)..],
                                    cout_g,
                                    slice_len,
                                    plan.plane_len(),
                                ),
                                index > 0,
                                split.inner,
                            );
                        }
                    }
                    let x_grad_group = &mut x_grad_n[group * cin_g * in_vol..][..cin_g * in_vol];
                    plan.scatter_x_grad(phased, x_grad_group);
                }
            }
        },
    );
    x_grad
}

/// The gradient of `conv` with respect to `weight` on the phase grids, for a shape they
/// [`serves`] and a finite input (dropped columns multiply the inputs beside the output by
/// zero, see [`takes_weight_pass`]).
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    run_weight_backward(&geometry.normalised(), x, out_grad)
}

/// Whether the phase grids' weight gradient may read input `x`: every value finite, as the
/// dropped columns multiply the inputs beside the output by zero.
pub fn takes_weight_pass<T: Element>(x: &[T]) -> bool {
    all_within(x, f64::INFINITY)
}

/// The weight gradient: each tap's weights take the product of the output gradient (on the
/// grid's rows, zero in dropped columns) with that tap's shifted view of the grids, summed
/// over slices and images. The batch is cut into one run per thread, summed in order.
fn run_weight_backward<T: Element>(g: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let plan = Plan::new(g);
    let taps: Vec<[usize; 3]> = plan.taps().collect();
    let (cin_g, cout_g, depth) = (g.in_per_group(), g.out_per_group(), plan.depth());
    let (in_vol, out_vol, slice_len) = (g.in_volume(), g.out_volume(), plan.slice_len());
    let wide_len = cout_g * plan.out_slices() * slice_len;
    let per_chunk = items_per_thread(g.batch);
    let chunks = g.batch.div_ceil(per_chunk);
    let split = Split::for_items(chunks, g.multiply_adds());
    let weight_len = g.out_channels * g.patch_len();
    let partial = |chunk: usize| {
        let mut folded = vec![T::ZERO; weight_len];
        let mut grids = vec![T::ZERO; plan.input_len()];
        let mut wide = vec![T::ZERO; wide_len];
        let images = chunk * per_chunk..((chunk + 1) * per_chunk).min(g.batch);
        for (i, n) in images.enumerate() {
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..];
                plan.gather_input(&x_group[..cin_g * in_vol], &mut grids);
                let out_grad_group = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..];
                plan.widen_out_grad(&out_grad_group[..cout_g * out_vol], &mut wide);
                for slice in 0..plan.out_slices() {
                    for (index, &tap) in taps.iter().enumerate() {
                        matmul(
                            MatMut::rows(
                                plan.tap_weights_mut(&mut folded, group, index),
                                cout_g,
                                depth,
                            ),
                            MatRef::columns(
                                &wide[slice * slice_len..],
                                cout_g,
                                slice_len,
                                plan.out_slices() * slice_len,
                            ),
                            plan.input_view(&grids, slice, tap).transpose(),
                            i > 0 || slice > 0,
                            split.inner,
                        );
                    }
                }
            }
        }
        folded
    };
    let folded = sum_of_partials(chunks, weight_len, split, partial);
    plan.unfold_weights(&folded)
}

#[cfg(test)]
mod tests;
