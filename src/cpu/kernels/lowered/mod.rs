//! The lowered path: im2col + GEMM for the forward pass, the input gradient (GEMM then
//! col2im) and the weight gradient (GEMM against the patch matrix, summed over the batch).
//! Groups are handled by offsetting into the same buffers: no per-group copies. The patch
//! matrix is built one cache-sized tile at a time: a range of output rows of one image
//! (`Lowering::tiles`), so a large image (video, audio) never streams a patch matrix of tens of
//! megabytes through memory, or several small images side by side (`images_per_tile`), so a
//! late-stage layer of a few dozen positions still runs one wide GEMM instead of one per image
//! (lowered by `Lowering::im2col_images`: from the tile's channels staged side by side for a
//! "same" conv, by a table of tap sources for other small outputs). A pointwise (1x1)
//! convolution's input is its own patch matrix.

mod im2col;
mod tap_masks;
mod tap_table;
#[cfg(test)]
mod tests;

use core::ops::Range;

use crate::spec::ConvGeometry;

use super::adjoint;
use super::element::{Element, Split, for_each_chunk, items_per_thread, sum_of_partials};
use super::finished::FinishedPlanes;
use super::gemm::{MatMut, MatRef, matmul};
use super::huge_pages;
use im2col::{Lowering, gather_images, images_per_tile};

pub use im2col::is_pointwise;

/// Images per task and tile for a batch-parallel pass: several when they are small, but never
/// so many that a thread is left without a task.
pub(super) fn images_per_task<T>(geometry: &ConvGeometry) -> usize {
    let per_thread = items_per_thread(geometry.batch);
    images_per_tile(geometry, size_of::<T>(), per_thread)
}

/// Columns a GEMM over a tile of several images runs on when they are its output's columns:
/// their `columns`, rounded up to whole 16-float vectors. `gemm` reads a patch matrix (or a
/// gathered gradient) of such a width in place, where any other width has it repack the whole
/// operand first (a sixth of a 14x14 layer's time). The extra columns hold leftovers and are
/// never read back.
fn padded_width(columns: usize) -> usize {
    columns.next_multiple_of(16)
}

/// Elements of scratch one tile's patch matrix needs (none when the input is its own), plus,
/// for a tile of several images, the `cout_g` rows of output or gradient gathered beside it
/// and the lowering's staging.
fn scratch_len<T: Element>(lowering: &Lowering<'_, T>, images: usize) -> usize {
    let geometry = lowering.geometry();
    if images > 1 {
        let columns = padded_width(images * geometry.out_volume());
        let rows = geometry.patch_len() + geometry.out_per_group();
        return rows * columns + lowering.staging_len();
    }
    if is_pointwise(geometry) {
        return 0;
    }
    let largest = lowering.tiles().next().unwrap_or(0..0);
    geometry.patch_len() * largest.len()
}

/// A tile of several whole `images`: its scratch split into room for the patch matrix
/// (`patch_len x width`), group `group`'s output-gradient channels of those images, gathered
/// side by side (`cout_g x width`, columns past `images.len() * out_vol` untouched), and the
/// rest (the lowering's staging).
fn gathered_tile<'s, T: Copy>(
    geometry: &ConvGeometry,
    scratch: &'s mut [T],
    out_grad: &[T],
    images: Range<usize>,
    group: usize,
    width: usize,
) -> (&'s mut [T], &'s [T], &'s mut [T]) {
    let (cout_g, out_vol) = (geometry.out_per_group(), geometry.out_volume());
    let (col, rest) = scratch.split_at_mut(geometry.patch_len() * width);
    let (gathered, staging) = rest.split_at_mut(cout_g * width);
    let channels = group * cout_g..(group + 1) * cout_g;
    gather_images(
        out_grad,
        images,
        geometry.out_channels,
        channels,
        out_vol,
        width,
        gathered,
    );
    (col, gathered, staging)
}

/// Call `body(columns, patches)` for each tile of output positions, with the tile's patch
/// matrix (`patch_len x columns.len()`) lowered from one group's input into `col`, or the input
/// itself, whole, for a pointwise convolution.
fn for_each_patch_tile<T: Element>(
    lowering: &Lowering<'_, T>,
    x_group: &[T],
    col: &mut [T],
    mut body: impl FnMut(Range<usize>, MatRef<'_, T>),
) {
    let geometry = lowering.geometry();
    let patch = geometry.patch_len();
    if is_pointwise(geometry) {
        let out_vol = geometry.out_volume();
        body(0..out_vol, MatRef::rows(x_group, patch, out_vol));
        return;
    }
    for columns in lowering.tiles() {
        let len = columns.len();
        let col = &mut col[..patch * len];
        lowering.im2col(x_group, columns.clone(), col, len);
        body(columns, MatRef::rows(col, patch, len));
    }
}

/// `out = conv(x, weight) + bias`, shape `geometry.out_shape()`, each task's images handed to
/// `finished` once stored.
pub(super) fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    let g = geometry;
    let images = images_per_task::<T>(g);
    let lowering = Lowering::<T>::new(g, images);
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let mut out = huge_pages::zeros(g.out_shape().iter().product());
    let split = Split::for_items(g.batch.div_ceil(images), g.multiply_adds());
    let item_len = g.out_channels * out_vol;
    for_each_chunk(
        &mut out,
        item_len,
        images,
        scratch_len(&lowering, images),
        split,
        |items, out_chunk, scratch| {
            if items.len() > 1 {
                // One GEMM for the whole tile, then each image's block moved into place.
                let width = padded_width(items.len() * out_vol);
                let (col, rest) = scratch.split_at_mut(patch * width);
                let (product, staging) = rest.split_at_mut(cout_g * width);
                for group in 0..g.groups {
                    let first = group * cin_g;
                    lowering.im2col_images(x, items.clone(), first, col, width, staging);
                    let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                    matmul(
                        MatMut::rows(&mut product[..cout_g * width], cout_g, width),
                        MatRef::rows(weight_group, cout_g, patch),
                        MatRef::rows(col, patch, width),
                        false,
                        split.inner,
                    );
                    for (i, out_n) in out_chunk.chunks_mut(item_len).enumerate() {
                        for c in 0..cout_g {
                            let channel = group * cout_g + c;
                            let dst = &mut out_n[channel * out_vol..][..out_vol];
                            let src = &product[c * width + i * out_vol..][..out_vol];
                            let shift = bias.map_or(T::ZERO, |bias| bias[channel]);
                            for (slot, value) in dst.iter_mut().zip(src) {
                                *slot = *value + shift;
                            }
                        }
                    }
                }
                finished.finished(items.start * item_len, out_chunk);
                return;
            }
            let (n, out_n) = (items.start, out_chunk);
            if let Some(bias) = bias {
                for (row, value) in out_n.chunks_mut(out_vol).zip(bias) {
                    row.fill(*value);
                }
            }
            for group in 0..g.groups {
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let out_group = &mut out_n[group * cout_g * out_vol..][..cout_g * out_vol];
                for_each_patch_tile(&lowering, x_group, scratch, |columns, patches| {
                    matmul(
                        MatMut::columns(
                            &mut out_group[columns.start..],
                            cout_g,
                            columns.len(),
                            out_vol,
                        ),
                        MatRef::rows(weight_group, cout_g, patch),
                        patches,
                        bias.is_some(),
                        split.inner,
                    );
                });
            }
            finished.finished(n * item_len, out_n);
        },
    );
    out
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`.
pub(super) fn x_backward<T: Element>(
    geometry: &ConvGeometry,
    weight: &[T],
    out_grad: &[T],
) -> Vec<T> {
    let g = geometry;
    let images = images_per_task::<T>(g);
    let lowering = Lowering::<T>::new(g, images);
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let mut x_grad = huge_pages::zeros(g.in_shape().iter().product());
    let split = Split::for_items(g.batch.div_ceil(images), g.multiply_adds());
    let item_len = g.in_channels * in_vol;
    // A pointwise layer's weight, each group transposed once for the whole batch (its adjoint
    // weight): `gemm` runs faster on a row-major left operand than on the transposed view of
    // the weight (the `resnet50_1x1_reduce` grad_input row).
    let pointwise_t = is_pointwise(g).then(|| adjoint::weight(g, weight));
    for_each_chunk(
        &mut x_grad,
        item_len,
        images,
        scratch_len(&lowering, images),
        split,
        |items, x_grad_chunk, scratch| {
            for group in 0..g.groups {
                let weight_group = &weight[group * cout_g * patch..][..cout_g * patch];
                let weight_t = MatRef::transposed(weight_group, patch, cout_g);
                let channels = group * cout_g..(group + 1) * cout_g;
                if items.len() > 1 {
                    // The tile's output gradient gathered side by side, one GEMM, then each
                    // image's columns scattered back.
                    let width = padded_width(items.len() * out_vol);
                    let (col, gathered, staging) =
                        gathered_tile(g, scratch, out_grad, items.clone(), group, width);
                    let col = &mut col[..patch * width];
                    matmul(
                        MatMut::rows(col, patch, width),
                        weight_t,
                        MatRef::rows(gathered, cout_g, width),
                        false,
                        split.inner,
                    );
                    let first = group * cin_g;
                    lowering.col2im_images(col, width, first, x_grad_chunk, staging);
                    continue;
                }
                let n = items.start;
                let out_grad_group = &out_grad[(n * g.out_channels + channels.start) * out_vol..]
                    [..cout_g * out_vol];
                let x_grad_group = &mut x_grad_chunk[group * cin_g * in_vol..][..cin_g * in_vol];
                if let Some(pointwise_t) = &pointwise_t {
                    matmul(
                        MatMut::rows(x_grad_group, patch, out_vol),
                        MatRef::rows(&pointwise_t[group * patch * cout_g..], patch, cout_g),
                        MatRef::rows(out_grad_group, cout_g, out_vol),
                        false,
                        split.inner,
                    );
                    continue;
                }
                for columns in lowering.tiles() {
                    let len = columns.len();
                    let col = &mut scratch[..patch * len];
                    matmul(
                        MatMut::rows(col, patch, len),
                        weight_t,
                        MatRef::columns(&out_grad_group[columns.start..], cout_g, len, out_vol),
                        false,
                        split.inner,
                    );
                    lowering.col2im(col, len, columns, x_grad_group);
                }
            }
        },
    );
    x_grad
}

/// Output channels per group up to which the weight gradient of a tile of several images is
/// held transposed (see `weight_backward`).
const MAX_TRANSPOSED_ROWS: usize = 64;

/// Gradient of `conv` with respect to `weight`, shape `geometry.weight_shape()`.
///
/// The batch is cut into one contiguous chunk per thread; each chunk accumulates its own
/// partial gradient and the partials are summed in chunk order, so the result does not depend
/// on scheduling.
pub(super) fn weight_backward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    out_grad: &[T],
) -> Vec<T> {
    let g = geometry;
    let (patch, out_vol, in_vol) = (g.patch_len(), g.out_volume(), g.in_volume());
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let weight_len = g.out_channels * patch;
    let chunks = g.batch.clamp(1, rayon::current_num_threads());
    let split = Split::for_items(chunks, g.multiply_adds());
    let per_chunk = g.batch.div_ceil(chunks).max(1);
    let images = images_per_tile(g, size_of::<T>(), per_chunk);
    let lowering = Lowering::<T>::new(g, images);
    // Both operands run along the positions, so `gemm` repacks the one its vectors run down,
    // by default the patch matrix. With each group's block held transposed it repacks the
    // output gradient instead, which pays for tiles of several small images with few output
    // channels (the `example_resnet_*` grad_weight rows) and loses on single-image tiles and
    // wide layers (`resnet_3x3_7`, `resnet50_1x1_reduce`, `video_conv3d_8x28x28`).
    let transposed = images > 1 && cout_g <= MAX_TRANSPOSED_ROWS && cout_g < patch;
    fn held<T>(block: &mut [T], transposed: bool, rows: usize, cols: usize) -> MatMut<'_, T> {
        if transposed {
            MatMut::column_major(block, rows, cols)
        } else {
            MatMut::rows(block, rows, cols)
        }
    }
    let partial = |chunk: usize| {
        let mut weight_grad = vec![T::ZERO; weight_len];
        let mut scratch = vec![T::ZERO; scratch_len(&lowering, images)];
        let items = (chunk * per_chunk)..((chunk + 1) * per_chunk).min(g.batch);
        let mut accumulate = false;
        for first in items.clone().step_by(images) {
            let tile = first..(first + images).min(items.end);
            for group in 0..g.groups {
                let channels = group * cout_g..(group + 1) * cout_g;
                let weight_grad_group =
                    &mut weight_grad[channels.start * patch..][..cout_g * patch];
                if images > 1 {
                    // Unpadded: here the columns are the GEMM's sum, and leftovers would join it.
                    let width = tile.len() * out_vol;
                    let (col, gathered, staging) =
                        gathered_tile(g, &mut scratch, out_grad, tile.clone(), group, width);
                    let col = &mut col[..patch * width];
                    lowering.im2col_images(x, tile.clone(), group * cin_g, col, width, staging);
                    matmul(
                        held(weight_grad_group, transposed, cout_g, patch),
                        MatRef::rows(gathered, cout_g, width),
                        MatRef::rows(col, patch, width).transpose(),
                        accumulate,
                        split.inner,
                    );
                    continue;
                }
                let n = tile.start;
                let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
                let out_grad_group = &out_grad[(n * g.out_channels + channels.start) * out_vol..]
                    [..cout_g * out_vol];
                let mut accumulate = accumulate;
                for_each_patch_tile(&lowering, x_group, &mut scratch, |columns, patches| {
                    matmul(
                        held(weight_grad_group, transposed, cout_g, patch),
                        MatRef::columns(
                            &out_grad_group[columns.start..],
                            cout_g,
                            columns.len(),
                            out_vol,
                        ),
                        patches.transpose(),
                        accumulate,
                        split.inner,
                    );
                    accumulate = true;
                });
            }
            accumulate = true;
        }
        weight_grad
    };
    let mut weight_grad = sum_of_partials(chunks, weight_len, split, partial);
    if transposed {
        for group_block in weight_grad.chunks_exact_mut(cout_g * patch) {
            let held = group_block.to_vec();
            for (p, row) in held.chunks_exact(cout_g).enumerate() {
                for (o, value) in row.iter().enumerate() {
                    group_block[o * patch + p] = *value;
                }
            }
        }
    }
    weight_grad
}
