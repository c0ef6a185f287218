//! Pointwise convolutions (a 1x1 kernel at stride 1, unpadded) in f32: the forward pass and
//! the input gradient as one packed product per thread over the positions of all its images
//! at once (`product.rs`), where the lowered path runs one `gemm` call per image. Each call
//! there packs the whole weight again and computes an image's ragged last vector of
//! positions by itself (a 14 x 14 plane is 12 and a quarter 16-float vectors); here the
//! weight is read where it lies (transposed once for the input gradient), and a strip of
//! positions runs on across image boundaries.

mod product;
#[cfg(test)]
mod tests;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::element::{
    Element, Split, for_each_chunk, in_f32, items_per_thread, min_items_per_task, worth_threads,
};
use super::finished::{AsElement, FinishedPlanes, Unwatched};
use super::lowered::is_pointwise;
use super::transpose::channels_last;
use product::{Left, Planes, Product, ROWS, multiply, scratch_len};

/// Whether the pointwise path computes `geometry`'s forward pass and input gradient: a 1x1
/// kernel at stride 1 with no padding ([`is_pointwise`]) over a non-empty batch, with
/// channels on both sides.
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    is_pointwise(g)
        && g.batch > 0
        && g.in_per_group() > 0
        && g.out_per_group() > 0
        && g.out_volume() > 0
}

/// Channels summed per output (input channels per group in the forward pass, output
/// channels per group in the input gradient) from which the rule takes the pointwise path.
/// Below it each strip's packing and the round trip of its sums through scratch cost more
/// than its few tiles: the lowered path wins at 16 -> 32 channels, they tie at 32 -> 64 and
/// the pointwise path wins at 64 -> 64 (batches of 64 at the ResNet example's late planes,
/// `example_resnet_*` 1x1 rows). Passes large enough to time (`conv::fastest`) weigh it at
/// any depth.
const MIN_DEPTH: usize = 64;

/// Whether, by rule, the pointwise path beats the lowered one for a pass summing `depth`
/// channels per output: at least [`MIN_DEPTH`] of them, and a run of whole images for every
/// thread (with fewer, the rows are cut across threads, and a batch of one at 64 -> 256
/// channels on 56 x 56 loses to the lowered path, whose `gemm` splits each product itself).
fn pays(geometry: &ConvGeometry, depth: usize, threads: usize) -> bool {
    serves(geometry) && depth >= MIN_DEPTH && geometry.batch >= threads
}

/// Whether, by rule, the pointwise forward pass on `threads` threads beats the lowered one
/// ([`MIN_DEPTH`]).
pub fn forward_pays(geometry: &ConvGeometry, threads: usize) -> bool {
    pays(geometry, geometry.in_per_group(), threads)
}

/// Whether, by rule, the pointwise input gradient on `threads` threads beats the lowered one
/// ([`MIN_DEPTH`]).
pub fn data_pays(geometry: &ConvGeometry, threads: usize) -> bool {
    pays(geometry, geometry.out_per_group(), threads)
}

/// `conv(x, weight) + bias` for a shape the pointwise path [`serves`], in f32, each task's
/// planes handed to `finished` once stored.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    in_f32(geometry.out_shape().iter().product(), |out| {
        pulp::Arch::new().dispatch(Pass {
            operands: Operands::forward(
                geometry,
                bytemuck::cast_slice(x),
                bytemuck::cast_slice(weight),
                bias.map(bytemuck::cast_slice),
            ),
            out,
            finished: &AsElement(finished),
        })
    })
}

/// The gradient of `conv` with respect to `x` for a shape the pointwise path [`serves`], in
/// f32: the forward product with each group's weight transposed ([`transposed_blocks`]) and
/// the channels' roles swapped.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    let transposed = transposed_blocks(geometry, bytemuck::cast_slice(weight));
    in_f32(geometry.in_shape().iter().product(), |x_grad| {
        pulp::Arch::new().dispatch(Pass {
            operands: Operands::data(geometry, &transposed, bytemuck::cast_slice(out_grad)),
            out: x_grad,
            finished: &Unwatched,
        })
    })
}

/// Each group's block of `weight` (`out_per_group x in_per_group`) transposed, the input
/// gradient's left operand row-major. Read in place, a tile's step read its rows side by
/// side, a weight row after the last step's: one L1 set for rows of a power-of-two length,
/// and the AVX2 tiles ran 1.2x slower (`conv/flex/resnet50_1x1_reduce/grad_input`).
fn transposed_blocks(g: &ConvGeometry, weight: &[f32]) -> Vec<f32> {
    let (rows, depth) = (g.in_per_group(), g.out_per_group());
    let mut out = vec![0.0; weight.len()];
    if rows * depth == 0 {
        return out;
    }
    let rows_per_task = min_items_per_task(depth).max(1);
    for (block, out) in weight
        .chunks_exact(rows * depth)
        .zip(out.chunks_exact_mut(rows * depth))
    {
        out.par_chunks_mut(rows_per_task * depth)
            .enumerate()
            .for_each(|(task, out)| {
                let first = task * rows_per_task;
                channels_last(block, rows, first..first + out.len() / depth, out);
            });
    }
    out
}

/// One pass as a product per group: each group's `rows` channels of `out` are its `left`
/// times its `depth` channels of `right`, plus `shift`.
#[derive(Clone, Copy)]
struct Operands<'a> {
    /// Per group, its left operand row-major: the weight's block, or its transpose
    /// ([`transposed_blocks`], the input gradient).
    left: &'a [f32],
    right: &'a [f32],
    right_channels: usize,
    out_channels: usize,
    groups: usize,
    /// Channels of `out` per group.
    rows: usize,
    /// Channels of `right` per group.
    depth: usize,
    positions: usize,
    shift: Option<&'a [f32]>,
}

impl<'a> Operands<'a> {
    fn forward(g: &ConvGeometry, x: &'a [f32], weight: &'a [f32], bias: Option<&'a [f32]>) -> Self {
        Self {
            left: weight,
            right: x,
            right_channels: g.in_channels,
            out_channels: g.out_channels,
            groups: g.groups,
            rows: g.out_per_group(),
            depth: g.in_per_group(),
            positions: g.out_volume(),
            shift: bias,
        }
    }

    fn data(g: &ConvGeometry, transposed: &'a [f32], out_grad: &'a [f32]) -> Self {
        Self {
            left: transposed,
            right: out_grad,
            right_channels: g.out_channels,
            out_channels: g.in_channels,
            groups: g.groups,
            rows: g.in_per_group(),
            depth: g.out_per_group(),
            positions: g.out_volume(),
            shift: None,
        }
    }

    /// Group `group`'s left operand.
    fn left(&self, group: usize) -> Left<'a> {
        let (rows, depth) = (self.rows, self.depth);
        Left {
            data: &self.left[group * rows * depth..][..rows * depth],
            rows,
            depth,
        }
    }

    fn right_planes(&self, group: usize) -> Planes {
        Planes {
            image_len: self.right_channels * self.positions,
            first_row: group * self.depth,
            positions: self.positions,
        }
    }

    fn out_planes(&self, group: usize) -> Planes {
        Planes {
            image_len: self.out_channels * self.positions,
            first_row: group * self.rows,
            positions: self.positions,
        }
    }

    fn shift(&self, group: usize) -> Option<&'a [f32]> {
        self.shift
            .map(|shift| &shift[group * self.rows..][..self.rows])
    }

    /// Multiply-adds of the pass over `batch` images.
    fn work(&self, batch: usize) -> usize {
        batch
            .saturating_mul(self.out_channels)
            .saturating_mul(self.positions)
            .saturating_mul(self.depth)
    }
}

/// [`Operands`] computed into `out`, as a `pulp` op: it picks the instruction set, and so the
/// strip width, that every tile then runs in.
struct Pass<'a> {
    operands: Operands<'a>,
    out: &'a mut [f32],
    finished: &'a dyn FinishedPlanes<f32>,
}

impl WithSimd for Pass<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        run(simd, self.operands, self.out, self.finished);
    }
}

/// Computes `operands` into `out` with `simd`'s vectors: with at least a thread's worth of
/// images per thread, one run of whole images per thread (all its positions one product per
/// group); with fewer images than threads, each image's rows of a group cut into one run per
/// thread. Each task's planes go to `finished` once stored.
fn run<S: Simd>(
    simd: S,
    operands: Operands<'_>,
    out: &mut [f32],
    finished: &dyn FinishedPlanes<f32>,
) {
    let ops = operands;
    let image_len = ops.out_channels * ops.positions;
    let batch = out.len().checked_div(image_len).unwrap_or(0);
    let threads = rayon::current_num_threads();
    let scratch = scratch_len::<S>(ops.rows);
    let work = ops.work(batch);
    if batch >= threads || !worth_threads(work) {
        let per_chunk = if worth_threads(work) {
            items_per_thread(batch)
        } else {
            batch
        };
        let split = Split::for_items(batch.div_ceil(per_chunk.max(1)), work);
        for_each_chunk(
            out,
            image_len,
            per_chunk,
            scratch,
            split,
            |images, chunk, scratch| {
                for group in 0..ops.groups {
                    let product = Product {
                        left: ops.left(group),
                        right: ops.right,
                        right_planes: ops.right_planes(group),
                        images: images.clone(),
                        out: &mut *chunk,
                        out_planes: ops.out_planes(group),
                        shift: ops.shift(group),
                    };
                    multiply(simd, product, scratch);
                }
                finished.finished(images.start * image_len, chunk);
            },
        );
        return;
    }
    let rows_per_task = ops.rows.div_ceil(threads).next_multiple_of(ROWS);
    for (image, out_image) in out.chunks_exact_mut(image_len).enumerate() {
        for (group, out_group) in out_image
            .chunks_exact_mut(ops.rows * ops.positions)
            .enumerate()
        {
            out_group
                .par_chunks_mut(rows_per_task * ops.positions)
                .enumerate()
                .for_each_init(
                    || vec![0.0; scratch],
                    |scratch, (task, out_rows)| {
                        let rows = task * rows_per_task..(task + 1) * rows_per_task;
                        let rows = rows.start..rows.end.min(ops.rows);
                        let product = Product {
                            left: ops.left(group).rows(rows.clone()),
                            right: ops.right,
                            right_planes: ops.right_planes(group),
                            images: image..image + 1,
                            out: &mut *out_rows,
                            out_planes: Planes {
                                image_len: 0,
                                first_row: 0,
                                positions: ops.positions,
                            },
                            shift: ops.shift(group).map(|shift| &shift[rows.start..]),
                        };
                        multiply(simd, product, scratch);
                        let first = (image * ops.groups + group) * ops.rows + rows.start;
                        finished.finished(first * ops.positions, out_rows);
                    },
                );
        }
    }
}
