//! The direct forward pass with output points in the vector lanes: for a layer with fewer
//! output channels than a block of channel lanes holds (16 on AVX-512, whose two-vector blocks
//! are 32 lanes), the channel tiles leave lanes idle or, in one-vector blocks, load an input
//! for every FMA. Here a tile holds a few runs of consecutive output points of a row (one
//! vector each, read straight from the bordered copy at stride 1) for a few output channels:
//! each reduction step loads one vector per run and broadcasts one weight per channel, so the
//! FMAs outnumber the loads about two to one. The tiles write the output planes in place, no
//! transpose, and sum each output in the channel tiles' order (the bias, then every step in
//! weight order), so the two layouts agree bit for bit.

use core::ptr::{read_unaligned, write_unaligned};

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::tiles::{BLOCK_VECTORS, machine_lanes, wide_registers};
use super::{Walk, pack_weights};
use crate::cpu::kernels::element::min_items_per_task;
use crate::cpu::kernels::finished::FinishedPlanes;

/// Runs of points per tile and output channels per tile with AVX-512's 32 registers: 24
/// accumulators, three input vectors and a broadcast weight, eleven loads per 24 FMAs.
const WIDE_TILE: (usize, usize) = (3, 8);

/// The same with 16 registers (AVX2 and narrower): 8 accumulators, two input vectors and a
/// broadcast weight, six loads per eight FMAs. Blocks of 4 channels fill the layers this
/// rule takes there (8 to 15 channels); 6 left a block of 8 channels a third full, and ran
/// slower than the lowered path.
const NARROW_TILE: (usize, usize) = (2, 4);

/// f32 lanes of `S`'s vectors.
pub(super) fn vector_lanes<S: Simd>() -> usize {
    size_of::<S::f32s>() / size_of::<f32>()
}

/// Whether the spatial tiles compute `geometry`'s forward pass with `S`'s vectors, and pay:
/// stride 1 along W (a run of outputs reads consecutive inputs), fewer output channels per
/// group than two vectors of channel lanes hold, and rows at least half a vector wide.
pub fn fits<S: Simd>(geometry: &ConvGeometry) -> bool {
    fits_lanes(geometry, vector_lanes::<S>())
}

/// [`fits`] with vectors of `lanes` f32.
fn fits_lanes(geometry: &ConvGeometry, lanes: usize) -> bool {
    geometry.stride[2] == 1
        && geometry.out_per_group() < 2 * lanes
        && geometry.out_size[2] >= lanes / 2
}

/// Output channels per group from which the rule takes the spatial tiles: a tile's channels
/// with AVX-512; fewer leave its accumulators idle.
const MIN_CHANNELS: usize = 8;

/// Reduction steps from which the rule takes the spatial tiles: the stem of `examples/resnet`
/// (9 steps, `example_resnet_stem_28`) runs faster lowered, its copy costing as much as its
/// arithmetic.
const MIN_STEPS: usize = 32;

/// Whether, by rule, the spatial tiles beat the lowered path on this machine's widest
/// vectors: where they [`fits`], with at least [`MIN_CHANNELS`] output channels per group and
/// [`MIN_STEPS`] reduction steps (16 to 16 channels 3x3 on 56x56 planes, and 8 to 8 on
/// 56x56: 1.2x and 1.3-1.7x the lowered path with AVX-512).
pub fn pays(geometry: &ConvGeometry) -> bool {
    // A block is `BLOCK_VECTORS` of the machine's vectors.
    let vector_lanes = machine_lanes() / BLOCK_VECTORS;
    geometry.out_per_group() >= MIN_CHANNELS
        && geometry.patch_len() >= MIN_STEPS
        && fits_lanes(geometry, vector_lanes)
}

/// A run of up to a vector of consecutive output points of one row.
#[derive(Clone, Copy)]
pub(super) struct Run {
    /// Where the run's first point reads its first tap in a plane's copy.
    pub origin: usize,
    /// The run's first point in an output plane.
    pub first: usize,
    /// Output points in the run (the vector's lanes past them are computed and dropped).
    pub len: usize,
}

/// Every output row of a plane cut into runs of `lanes` points, the last of a row shorter.
pub(super) fn runs(g: &ConvGeometry, walk: &Walk, lanes: usize) -> Vec<Run> {
    let width = g.out_size[2];
    (0..g.out_volume() / width)
        .flat_map(|row| {
            let origin = walk.bordered.row_origin(g, row);
            (0..width).step_by(lanes).map(move |column| Run {
                origin: origin + column,
                first: row * width + column,
                len: (width - column).min(lanes),
            })
        })
        .collect()
}

/// `conv(x, weight) + bias` in f32 with `simd`'s vectors into `out` (zeros), for a geometry
/// the tiles [`fits`]: one task per image and group, split further into blocks of output
/// channels where the batch is small; each block goes to `finished` once stored.
pub fn forward<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    finished: &dyn FinishedPlanes<f32>,
) {
    if wide_registers::<S>() {
        forward_in::<S, { WIDE_TILE.0 }, { WIDE_TILE.1 }>(simd, g, x, weight, bias, out, finished);
    } else {
        forward_in::<S, { NARROW_TILE.0 }, { NARROW_TILE.1 }>(
            simd, g, x, weight, bias, out, finished,
        );
    }
}

/// [`forward`] in tiles of `R` runs by `C` output channels.
fn forward_in<S: Simd, const R: usize, const C: usize>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    finished: &dyn FinishedPlanes<f32>,
) {
    let walk = &Walk::new(g);
    let lanes = vector_lanes::<S>();
    let (cout_g, out_vol) = (g.out_per_group(), g.out_volume());
    let blocks = cout_g.div_ceil(C);
    let packed = pack_weights(g, weight, C);
    let block_len = walk.steps.len() * C;
    let runs = runs(g, walk, lanes);
    // A run's vector reads up to a vector past its row's end: the copy ends in that much
    // slack, so the last plane's last run stays inside it.
    let planes_len = walk.copy_len(g);
    let copy_len = planes_len + lanes;
    let block_work = (C * out_vol).saturating_mul(g.patch_len());
    out.par_chunks_mut(cout_g * out_vol)
        .enumerate()
        .with_min_len(min_items_per_task(blocks.saturating_mul(block_work)))
        .for_each_init(Vec::new, |copy: &mut Vec<f32>, (item, out_item)| {
            let (n, group) = (item / g.groups, item % g.groups);
            if copy.len() != copy_len {
                copy.clear();
                copy.resize(copy_len, 0.0);
            }
            walk.fill_into(g, x, n, group, &mut copy[..planes_len]);
            let copy: &[f32] = copy;
            out_item
                .par_chunks_mut(C * out_vol)
                .enumerate()
                .with_min_len(min_items_per_task(block_work))
                .for_each(|(block, out_block)| {
                    let first = group * cout_g + block * C;
                    let channels = out_block.len() / out_vol;
                    let bias: [f32; C] = core::array::from_fn(|c| {
                        bias.filter(|_| c < channels)
                            .map_or(0.0, |bias| bias[first + c])
                    });
                    simd.vectorize(SpatialBlock::<S, R, C> {
                        simd,
                        copy,
                        steps: &walk.steps,
                        weights: bytemuck::cast_slice(
                            &packed[(group * blocks + block) * block_len..][..block_len],
                        ),
                        bias,
                        runs: &runs,
                        out_vol,
                        out: &mut *out_block,
                    });
                    finished.finished((item * cout_g + block * C) * out_vol, out_block);
                });
        });
}

/// One block of `C` output channels over every run, `R` runs per tile, stored into the
/// block's output planes (`out.len() / out_vol` of them real). A [`WithSimd`] op, so the
/// tiles compile to `simd`'s vectors and FMAs.
struct SpatialBlock<'a, S, const R: usize, const C: usize> {
    simd: S,
    copy: &'a [f32],
    /// Per reduction step, its offset in the copy from a run's origin.
    steps: &'a [usize],
    /// Per reduction step, the block's `C` weights.
    weights: &'a [[f32; C]],
    bias: [f32; C],
    runs: &'a [Run],
    out_vol: usize,
    out: &'a mut [f32],
}

impl<S: Simd, const R: usize, const C: usize> WithSimd for SpatialBlock<'_, S, R, C> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _simd: S2) {
        let Self {
            simd,
            copy,
            steps,
            weights,
            bias,
            runs,
            out_vol,
            out,
        } = self;
        let lanes = vector_lanes::<S>();
        let last_step = steps.last().copied().unwrap_or(0);
        let last_origin = runs.iter().map(|run| run.origin).max().unwrap_or(0);
        assert!(
            last_origin + last_step + lanes <= copy.len() && weights.len() == steps.len(),
            "spatial tiles read past the copy"
        );
        let start: [S::f32s; C] = bias.map(|b| simd.splat_f32s(b));
        let channels = out.len() / out_vol;
        // Whole tiles, then one of the remaining runs; no closure, which would be compiled
        // outside `simd`'s instruction set.
        let whole = runs.len() - runs.len() % R;
        for tile in runs[..whole].chunks_exact(R) {
            let sums = tile_sums::<S, R, C>(simd, copy, steps, weights, tile, start);
            store::<S, C>(simd, &sums, tile, channels, out_vol, out);
        }
        let rest = &runs[whole..];
        match rest.len() {
            0 => {}
            1 => {
                let sums = tile_sums::<S, 1, C>(simd, copy, steps, weights, rest, start);
                store::<S, C>(simd, &sums, rest, channels, out_vol, out);
            }
            2 => {
                let sums = tile_sums::<S, 2, C>(simd, copy, steps, weights, rest, start);
                store::<S, C>(simd, &sums, rest, channels, out_vol, out);
            }
            _ => unreachable!("tiles of at most three runs"),
        }
    }
}

/// The sums of the `P` runs of `tile` for the block's `C` channels, from `start`, in
/// registers.
#[inline(always)]
fn tile_sums<S: Simd, const P: usize, const C: usize>(
    simd: S,
    copy: &[f32],
    steps: &[usize],
    weights: &[[f32; C]],
    tile: &[Run],
    start: [S::f32s; C],
) -> [[S::f32s; C]; P] {
    let origins: [usize; P] = core::array::from_fn(|i| tile[i].origin);
    let mut acc = [start; P];
    let base = copy.as_ptr();
    for (&step, weights) in steps.iter().zip(weights) {
        // SAFETY: every origin plus every step plus a vector is inside `copy`, which
        // `SpatialBlock::with_simd` checked against the largest of each.
        let inputs: [S::f32s; P] = core::array::from_fn(|i| unsafe {
            read_unaligned(base.add(origins[i] + step).cast::<S::f32s>())
        });
        for (c, &w) in weights.iter().enumerate() {
            let w = simd.splat_f32s(w);
            for (acc, &input) in acc.iter_mut().zip(&inputs) {
                acc[c] = simd.mul_add_e_f32s(input, w, acc[c]);
            }
        }
    }
    acc
}

/// Each run's sums into its points of the block's first `channels` planes.
#[inline(always)]
fn store<S: Simd, const C: usize>(
    simd: S,
    sums: &[[S::f32s; C]],
    tile: &[Run],
    channels: usize,
    out_vol: usize,
    out: &mut [f32],
) {
    let lanes = vector_lanes::<S>();
    for (run, sums) in tile.iter().zip(sums) {
        for (c, sum) in sums.iter().enumerate().take(channels) {
            let at = &mut out[c * out_vol + run.first..][..run.len];
            if run.len == lanes {
                // SAFETY: `at` holds a whole vector.
                unsafe { write_unaligned(at.as_mut_ptr().cast::<S::f32s>(), *sum) };
            } else {
                simd.partial_store_f32s(at, *sum);
            }
        }
    }
}
