//! Direct convolution: the forward pass and the weight gradient read straight from each
//! image's zero-bordered copy (`super::bordered`), with no patch matrix. A register tile holds
//! a few points of a block of output channels, the channels in vector lanes (`tiles.rs`). In
//! the forward pass each step of the reduction (one input channel and kernel tap) loads the
//! block's weights as vectors and broadcasts the tile's inputs from the copy, one FMA per
//! point: the GEMM microkernel with the patch matrix never built, its columns read in place at
//! any stride or dilation. A layer with fewer output channels than such a block holds tiles
//! output points in the lanes instead, where its rows allow (`spatial.rs`); one with a vector's
//! worth or fewer, where they do not, takes blocks of one vector, tiled along output rows.
//! The weight gradient (`weight.rs`) runs the same tiles over taps, summed over output
//! points, or, for the layers of the spatial tiles, tiles of output channels by taps summed
//! over runs of points in the lanes (`spatial_weight.rs`). On small layers (few channels,
//! small planes) the lowered path's patch matrix and `gemm`'s packing of it cost as much as
//! the arithmetic; here only the copy and the output are written.

mod data;
mod gangs;
mod spatial;
mod spatial_weight;
#[cfg(test)]
mod tests;
mod tiles;
mod weight;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::bordered::Bordered;
use super::element::{Element, in_f32, min_items_per_task};
use super::finished::{AsElement, FinishedPlanes};
use super::transpose::transpose;
pub use data::{data_pays, serves_data, x_backward};
use tiles::{BLOCK_VECTORS, Block, Rows, TileAt, block_lanes, to_lanes};
pub use weight::weight_backward;

/// Whether the direct path computes `geometry`'s forward pass and weight gradient: any shape
/// whose output is not empty and whose bordered copy stays near the input's size
/// ([`Bordered::new`]).
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    g.batch > 0
        && g.in_per_group() > 0
        && g.out_per_group() > 0
        && g.in_volume() > 0
        && Bordered::new(g).is_some()
}

/// Reduction steps (input channels per group times kernel taps) up to which the rule takes
/// the direct forward pass: the `example_resnet_3x3s2_7` row (288 steps) runs faster than
/// the lowered path and the `example_resnet_3x3_4` row (576) ties with it. Passes large
/// enough to time (`conv::fastest`) try it at any length.
const MAX_STEPS: usize = 512;

/// Output channels per group from which a block's lanes are busy enough: a one-channel
/// output (the stem's input gradient, through the adjoint) fills one lane in 16 and runs
/// several times slower than the lowered path (the `example_resnet_stem_28` row).
const MIN_OUT_CHANNELS: usize = 16;

/// Output channels per group from which the rule takes the direct path on this machine:
/// [`MIN_OUT_CHANNELS`], and a whole block of its vectors. A block half empty (16 channels
/// in AVX-512's 32 lanes) does half the useful work per FMA, and the lowered path's GEMM,
/// whose tiles are full, wins (the `example_resnet_stem_28` and `example_resnet_3x3_14`
/// rows with AVX-512; with AVX2 a block is 16 channels and the direct path wins there).
pub fn min_out_channels() -> usize {
    MIN_OUT_CHANNELS.max(tiles::machine_lanes())
}

/// Whether, by rule, the direct forward pass beats the lowered one: a small layer whose output
/// channels fill a block's vector lanes ([`fills_blocks`]), or whose points fill the spatial
/// tiles' lanes instead ([`spatial::pays`]).
pub fn pays(geometry: &ConvGeometry) -> bool {
    // Whether it serves the shape is asked last: it sizes the bordered copy, host work that
    // the `dispatch_conv3x3` rows time.
    small_layer(geometry) && (fills_blocks(geometry) || spatial::pays(geometry)) && serves(geometry)
}

/// A kernel of more than one tap (a 1x1 convolution's input is its own patch matrix) and
/// weights per block that stay in cache ([`MAX_STEPS`]): a small layer, where the GEMM would
/// be small.
fn small_layer(g: &ConvGeometry) -> bool {
    g.patch_len() > g.in_per_group() && g.patch_len() <= MAX_STEPS
}

/// Enough output channels per group to fill a block's vector lanes ([`min_out_channels`]).
fn fills_blocks(g: &ConvGeometry) -> bool {
    g.out_per_group() >= min_out_channels()
}

/// Reduction steps from which the weight gradient pays by rule: each gang's output gradient
/// is moved channels-last per block before the tiles of steps sum over it, so a kernel with
/// few steps moves as much as it multiplies (the stem's 9 steps lose to the lowered path in
/// the `example_resnet_stem_28` row).
const MIN_WEIGHT_STEPS: usize = 32;

/// Whether, by rule, the direct weight gradient beats the lowered one: where the forward pass
/// [`pays`], with at least [`MIN_WEIGHT_STEPS`] reduction steps.
pub fn weight_pays(geometry: &ConvGeometry) -> bool {
    pays(geometry) && geometry.patch_len() >= MIN_WEIGHT_STEPS
}

/// `conv(x, weight) + bias` for a shape the direct path [`serves`], in f32 (the tiles are
/// written in f32 vectors). Each image and group is copied
/// into its zero border once; its blocks of output channels are then computed in parallel
/// from the copy (a layer whose weights outweigh its copies passes each block's weights over
/// a gang of images), and each block handed to `finished` as it is stored.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    in_f32(geometry.out_shape().iter().product(), |out| {
        pulp::Arch::new().dispatch(Forward {
            geometry,
            x: bytemuck::cast_slice(x),
            weight: bytemuck::cast_slice(weight),
            bias: bias.map(bytemuck::cast_slice),
            out,
            finished: &AsElement(finished),
        })
    })
}

/// [`forward`] in f32, into `out` (zeros), as a `pulp` op: it picks the instruction set, and
/// so the block width, that every tile then runs in.
struct Forward<'a> {
    geometry: &'a ConvGeometry,
    x: &'a [f32],
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
    out: &'a mut [f32],
    finished: &'a dyn FinishedPlanes<f32>,
}

impl WithSimd for Forward<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        run(
            simd,
            self.geometry,
            self.x,
            self.weight,
            self.bias,
            self.out,
            self.finished,
        );
    }
}

/// Where the reductions of one geometry read in a group's bordered copy.
struct Walk {
    bordered: Bordered,
    /// Per reduction step (input channel, then tap, as the weights are laid out), its offset
    /// in the copy.
    steps: Vec<usize>,
    /// Per output point, its origin in a plane of the copy.
    points: Vec<usize>,
    /// Output points per row of [`Walk::points`].
    row_width: usize,
    /// Elements of the copy between two points of a row: the stride along W.
    row_step: usize,
}

impl Walk {
    fn new(g: &ConvGeometry) -> Self {
        let bordered = Bordered::new(g).expect("a shape the direct path serves");
        let plane_len = bordered.plane_len();
        let steps = (0..g.in_per_group())
            .flat_map(|ci| bordered.offsets().iter().map(move |&o| ci * plane_len + o))
            .collect();
        let points = (0..g.out_size[0] * g.out_size[1])
            .flat_map(|row| {
                let origin = bordered.row_origin(g, row);
                (0..g.out_size[2]).map(move |ow| origin + ow * g.stride[2])
            })
            .collect();
        Self {
            bordered,
            steps,
            points,
            row_width: g.out_size[2],
            row_step: g.stride[2],
        }
    }

    /// How [`Walk::points`] runs: output rows, their points a stride apart in the copy.
    fn rows(&self) -> Option<Rows> {
        (self.row_width > 0).then_some(Rows {
            width: self.row_width,
            step: self.row_step,
        })
    }

    /// Elements of one plane's copy.
    fn plane_len(&self) -> usize {
        self.bordered.plane_len()
    }

    /// Elements of a group's copy: its input channels' planes.
    fn copy_len(&self, g: &ConvGeometry) -> usize {
        g.in_per_group() * self.plane_len()
    }

    /// Image `n`'s group `group` of `x`.
    fn x_group<'x>(g: &ConvGeometry, x: &'x [f32], n: usize, group: usize) -> &'x [f32] {
        let (cin_g, in_vol) = (g.in_per_group(), g.in_volume());
        &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol]
    }

    /// Copy image `n`'s group `group` of `x` into its zero border (`copy`).
    fn fill(&self, g: &ConvGeometry, x: &[f32], n: usize, group: usize, copy: &mut Vec<f32>) {
        let x_group = Self::x_group(g, x, n, group);
        self.bordered.fill(g, x_group, g.in_per_group(), copy);
    }

    /// [`Walk::fill`] into a slice of an image's planes, zero outside the input.
    fn fill_into(&self, g: &ConvGeometry, x: &[f32], n: usize, group: usize, copy: &mut [f32]) {
        self.bordered
            .fill_planes(g, Self::x_group(g, x, n, group), copy);
    }
}

/// [`forward`] in f32 with `simd`'s vectors, into `out` (zeros): in the spatial tiles where
/// they [`spatial::fits`], else in blocks of one vector where that holds a group's output
/// channels (a two-vector block would leave half its lanes idle), else of [`BLOCK_VECTORS`].
/// Each block of output planes goes to `finished` once stored.
fn run<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    finished: &dyn FinishedPlanes<f32>,
) {
    if spatial::fits::<S>(g) {
        spatial::forward(simd, g, x, weight, bias, out, finished);
    } else if g.out_per_group() <= block_lanes::<S, 1>() {
        run_in_blocks::<S, 1>(simd, g, x, weight, bias, out, finished);
    } else {
        run_in_blocks::<S, BLOCK_VECTORS>(simd, g, x, weight, bias, out, finished);
    }
}

/// [`run`] in blocks of `V` vectors, in gangs of [`gang_images`] images.
fn run_in_blocks<S: Simd, const V: usize>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    finished: &dyn FinishedPlanes<f32>,
) {
    let walk = Walk::new(g);
    let gang = gang_images(g, &walk);
    let forward = Forward {
        geometry: g,
        x,
        weight,
        bias,
        out,
        finished,
    };
    run_in_gangs::<S, V>(simd, forward, &walk, gang);
}

/// `forward`'s pass (walked by `walk`) in blocks of `V` vectors: with a `gang` of one, per
/// image and group, its bordered copy, then its blocks of output channels in parallel; with
/// more, every copy first, then per gang of images and block, each pass of the block's weights
/// over every image of the gang. The sums run in the same order either way.
fn run_in_gangs<S: Simd, const V: usize>(simd: S, forward: Forward<'_>, walk: &Walk, gang: usize) {
    let Forward {
        geometry: g,
        x,
        weight,
        bias,
        out,
        finished,
    } = forward;
    let (cout_g, out_vol, lanes) = (g.out_per_group(), g.out_volume(), block_lanes::<S, V>());
    let blocks = cout_g.div_ceil(lanes);
    let packed = pack_weights(g, weight, lanes);
    let block_len = walk.steps.len() * lanes;
    let block_work = (lanes * out_vol).saturating_mul(g.patch_len());
    // Block `block` of group `group` over `images` (copies and planes): its bias (zero past
    // the group's channels) and weights.
    let block_pass = |group: usize, block: usize, images: &mut [(&[f32], &mut [f32])]| {
        let rows = images[0].1.len() / out_vol;
        let first = group * cout_g + block * lanes;
        let bias: Vec<f32> = (0..lanes)
            .map(|c| {
                bias.filter(|_| c < rows)
                    .map_or(0.0, |bias| bias[first + c])
            })
            .collect();
        simd.vectorize(ForwardBlock::<S, V> {
            simd,
            walk,
            weights: &packed[(group * blocks + block) * block_len..][..block_len],
            bias: &bias,
            out_vol,
            images,
        });
    };
    if gang > 1 {
        let copy_len = walk.copy_len(g);
        let mut copies = vec![0.0; g.batch * g.groups * copy_len];
        copies
            .par_chunks_exact_mut(copy_len)
            .enumerate()
            .with_min_len(min_items_per_task(copy_len))
            .for_each(|(item, copy)| {
                walk.fill_into(g, x, item / g.groups, item % g.groups, copy);
            });
        // Each gang's blocks of output planes, by block: `(item, planes)` per image.
        let mut by_block: Vec<Vec<(usize, &mut [f32])>> = Vec::new();
        by_block.resize_with(g.batch.div_ceil(gang) * g.groups * blocks, Vec::new);
        for (item, out_item) in out.chunks_mut(cout_g * out_vol).enumerate() {
            let (n, group) = (item / g.groups, item % g.groups);
            for (block, out_block) in out_item.chunks_mut(lanes * out_vol).enumerate() {
                by_block[((n / gang) * g.groups + group) * blocks + block].push((item, out_block));
            }
        }
        by_block
            .into_par_iter()
            .enumerate()
            .with_min_len(min_items_per_task(gang.saturating_mul(block_work)))
            .for_each(|(index, mut planes)| {
                let (group, block) = ((index / blocks) % g.groups, index % blocks);
                let mut images: Vec<(&[f32], &mut [f32])> = planes
                    .iter_mut()
                    .map(|(item, out)| (&copies[*item * copy_len..][..copy_len], &mut **out))
                    .collect();
                block_pass(group, block, &mut images);
                for (item, out_block) in planes {
                    finished.finished((item * cout_g + block * lanes) * out_vol, out_block);
                }
            });
        return;
    }
    out.par_chunks_mut(cout_g * out_vol)
        .enumerate()
        .with_min_len(min_items_per_task(blocks.saturating_mul(block_work)))
        .for_each_init(Vec::new, |copy, (item, out_item)| {
            let (n, group) = (item / g.groups, item % g.groups);
            walk.fill(g, x, n, group, copy);
            let copy: &[f32] = copy;
            out_item
                .par_chunks_mut(lanes * out_vol)
                .enumerate()
                .with_min_len(min_items_per_task(block_work))
                .for_each(|(block, out_block)| {
                    block_pass(group, block, &mut [(copy, &mut *out_block)]);
                    finished.finished((item * cout_g + block * lanes) * out_vol, out_block);
                });
        });
}

/// Bytes of bordered copies a gang of images holds at most: they stay in a core's L2 cache
/// (beside a block's weights) while every block of output channels passes over them, so
/// each block's weights are read from beyond L2 once per gang, not once per image. The
/// `resnet_3x3_7` forward row decides it.
const GANG_COPY_BYTES: usize = 512 * 1024;

/// Images per gang of [`run_in_blocks`]: as many as [`GANG_COPY_BYTES`] of copies hold, where
/// a group's weights are larger than those copies (else one image's copy at a time, its
/// blocks of output channels reading it while it is in cache, reads less).
fn gang_images(g: &ConvGeometry, walk: &Walk) -> usize {
    let copy_bytes = walk.copy_len(g) * size_of::<f32>();
    let weight_bytes = g.out_per_group() * g.patch_len() * size_of::<f32>();
    let gang = (GANG_COPY_BYTES / copy_bytes.max(1)).min(g.batch);
    if weight_bytes > gang * copy_bytes {
        gang
    } else {
        1
    }
}

/// Bytes of a block's weights that one pass over its output points reads: within half of a
/// 32 KiB L1 cache, so that they stay there beside the inputs the tiles read.
const PASS_WEIGHT_BYTES: usize = 16 * 1024;

/// `steps` and their weights (`lanes` apiece) in passes of [`PASS_WEIGHT_BYTES`] of weights.
fn passes<'a>(
    steps: &'a [usize],
    weights: &'a [f32],
    lanes: usize,
) -> impl Iterator<Item = (&'a [usize], &'a [f32])> {
    let pass_steps = (PASS_WEIGHT_BYTES / (lanes * size_of::<f32>())).max(1);
    steps
        .chunks(pass_steps)
        .zip(weights.chunks(pass_steps * lanes))
}

/// Adds to each of `sums` (one per point of `points`) its point's sum over `steps` (each with
/// its block's weights, `lanes::<S>()` apiece), in passes of [`PASS_WEIGHT_BYTES`] of weights,
/// each tile resuming from the last pass's sums.
#[inline(always)]
fn accumulate_in_passes<S: Simd, const V: usize>(
    simd: S,
    copy: &[f32],
    steps: &[usize],
    weights: &[f32],
    points: &[usize],
    rows: Option<Rows>,
    sums: &mut [Block<S, V>],
) {
    for (steps, weights) in passes(steps, weights, block_lanes::<S, V>()) {
        accumulate_pass(simd, copy, steps, weights, points, rows, sums);
    }
}

/// One pass of [`accumulate_in_passes`]: the tiles of `points` (in `rows`, where they run in
/// rows) summed over `steps`.
#[inline(always)]
fn accumulate_pass<S: Simd, const V: usize>(
    simd: S,
    copy: &[f32],
    steps: &[usize],
    weights: &[f32],
    points: &[usize],
    rows: Option<Rows>,
    sums: &mut [Block<S, V>],
) {
    let tiles = TileAt::<S, V>::new(simd, copy, steps, weights, points);
    match rows {
        Some(rows) => tiles.in_rows(rows).accumulate(sums),
        None => tiles.accumulate(sums),
    }
}

/// One block of output channels over every output point of a gang of images: per image, its
/// sums, one per point, run in passes of a few reduction steps each (each pass's weights read
/// by the tiles of every image of the gang while they are in L1), then stored into the
/// image's block of output planes (`out.len() / out_vol` of them real). A [`WithSimd`] op, so
/// that the tiles compile to the vectors and FMAs of `simd`'s instruction set.
struct ForwardBlock<'a, 'i, 'c, 'o, S, const V: usize> {
    simd: S,
    walk: &'a Walk,
    /// Per reduction step, the block's weights.
    weights: &'a [f32],
    /// Per lane, its channel's bias.
    bias: &'a [f32],
    out_vol: usize,
    /// Per image, its bordered copy and its block of output planes.
    images: &'i mut [(&'c [f32], &'o mut [f32])],
}

impl<S: Simd, const V: usize> WithSimd for ForwardBlock<'_, '_, '_, '_, S, V> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _simd: S2) {
        let Self {
            simd,
            walk,
            weights,
            bias,
            out_vol,
            images,
        } = self;
        let lanes = block_lanes::<S, V>();
        let points = walk.points.len();
        let mut sums = vec![to_lanes::<S, V>(bias); points * images.len()];
        let rows = walk.rows();
        for (steps, weights) in passes(&walk.steps, weights, lanes) {
            for ((copy, _), sums) in images.iter().zip(sums.chunks_exact_mut(points.max(1))) {
                accumulate_pass(simd, copy, steps, weights, &walk.points, rows, sums);
            }
        }
        for ((_, out), sums) in images.iter_mut().zip(sums.chunks_exact(points.max(1))) {
            let sums: &[f32] = bytemuck::cast_slice(sums);
            let rows = out.len() / out_vol;
            if rows == lanes {
                transpose(sums, out_vol, lanes, out);
            } else {
                for (c, plane) in out.chunks_exact_mut(out_vol).enumerate() {
                    for (slot, point) in plane.iter_mut().zip(sums.chunks_exact(lanes)) {
                        *slot = point[c];
                    }
                }
            }
        }
    }
}

/// The weights (`C_out x C_in/groups x kernel`) as `[group][block][step][lane]`: per block of
/// `lanes` output channels, each reduction step's weights side by side, zero past the group's
/// last channel. A full block is its channels' rows transposed in vector blocks: element by
/// element, each write a cache line of its own, the packing took 5% of
/// `conv_transpose/flex/dcgan_up_128x16x16/grad_input` on one thread before the tiles start.
fn pack_weights(g: &ConvGeometry, weight: &[f32], lanes: usize) -> Vec<f32> {
    let (cout_g, patch) = (g.out_per_group(), g.patch_len());
    let blocks = cout_g.div_ceil(lanes);
    let mut packed = vec![0.0; g.groups * blocks * patch * lanes];
    // A block per task: a wide layer's weights are megabytes, moved at memory speed, so one
    // thread packing them all held the pass up by a tenth of its time (`resnet_3x3_7`).
    let block_rows = weight
        .chunks_exact(cout_g * patch)
        .flat_map(|rows| rows.chunks(lanes * patch));
    let block_rows: Vec<&[f32]> = block_rows.collect();
    packed
        .par_chunks_exact_mut(patch * lanes)
        .zip(block_rows)
        .with_min_len(min_items_per_task(patch * lanes))
        .for_each(|(block, rows)| {
            if rows.len() == lanes * patch {
                transpose(rows, lanes, patch, block);
                return;
            }
            for (c, row) in rows.chunks_exact(patch).enumerate() {
                for (slot, &w) in block[c..].iter_mut().step_by(lanes).zip(row) {
                    *slot = w;
                }
            }
        });
    packed
}

/// Where output channel `oc`'s first step lies in the packed `[group][block][step][lane]`
/// order (its later steps `lanes` apart): [`pack_weights`], and the weight gradient's unpacking.
fn packed_row(g: &ConvGeometry, lanes: usize, oc: usize) -> usize {
    let cout_g = g.out_per_group();
    let (group, c) = (oc / cout_g, oc % cout_g);
    let blocks = cout_g.div_ceil(lanes);
    (group * blocks + c / lanes) * g.patch_len() * lanes + c % lanes
}
