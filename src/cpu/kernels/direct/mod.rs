//! Direct convolution: the forward pass read straight from each image's zero-bordered copy
//! (`super::bordered`), with no patch matrix. A register tile holds [`POINTS`] output points of
//! a block of output channels, the channels in vector lanes. Each step of the reduction (one
//! input channel and kernel tap) loads the block's weights as vectors and broadcasts the
//! tile's inputs from the copy, one FMA per point. It is the GEMM microkernel with the patch
//! matrix never built: its columns are read in place, at any stride or dilation. On small
//! layers (few channels, small planes) the lowered path's patch matrix and `gemm`'s packing of
//! it cost as much as the arithmetic; here only the copy and the output are written.

use core::any::TypeId;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::bordered::Bordered;
use super::element::Element;

/// Output points per register tile: with a block of two vectors of channels per point, 12
/// accumulators, the two weight vectors and a broadcast fill AVX2's 16 registers, as in
/// `gemm`'s own 16 x 6 f32 microkernel.
const POINTS: usize = 6;

/// Vectors of output channels per block (16 f32 channels with AVX2, 32 with AVX-512).
const BLOCK_VECTORS: usize = 2;

/// Whether the direct path computes `geometry`'s forward pass: any shape whose output is not
/// empty and whose bordered copy stays near the input's size ([`Bordered::new`]).
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    g.batch > 0
        && g.in_per_group() > 0
        && g.out_per_group() > 0
        && g.in_volume() > 0
        && Bordered::new(g).is_some()
}

/// Reduction steps (input channels per group times kernel taps) up to which a block's
/// weights, 64 bytes a step with AVX2, stay in a 32 KiB L1 cache while every tile reads them:
/// `example_resnet_3x3s2_7` (288 steps) runs 15% faster than the lowered path, and
/// `example_resnet_3x3_4` (576) 10% slower.
const MAX_STEPS: usize = 512;

/// Output channels per group from which a block's lanes are busy enough: a one-channel
/// output (the stem's input gradient) fills one lane in 16 and runs 6x slower than the
/// lowered path.
const MIN_OUT_CHANNELS: usize = 16;

/// Whether, by rule, the direct path beats the lowered one: a kernel of more than one tap (a
/// 1x1 convolution's input is its own patch matrix), enough output channels to fill the
/// vector lanes ([`MIN_OUT_CHANNELS`]), and weights per block that stay in cache
/// ([`MAX_STEPS`]): small layers, where the GEMM would be small.
pub fn pays(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    g.patch_len() > g.in_per_group()
        && g.out_per_group() >= MIN_OUT_CHANNELS
        && g.patch_len() <= MAX_STEPS
        && serves(g)
}

/// `conv(x, weight) + bias` for a shape the direct path [`serves`], or `None` for an element
/// type other than f32 (the tiles are written in f32 vectors). Each image and group is copied
/// into its zero border once; its blocks of output channels are then computed in parallel
/// from the copy.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Option<Vec<T>> {
    if TypeId::of::<T>() != TypeId::of::<f32>() {
        return None;
    }
    let mut out = vec![T::ZERO; geometry.out_shape().iter().product()];
    pulp::Arch::new().dispatch(Forward {
        geometry,
        x: bytemuck::cast_slice(x),
        weight: bytemuck::cast_slice(weight),
        bias: bias.map(bytemuck::cast_slice),
        out: bytemuck::cast_slice_mut(&mut out),
    });
    Some(out)
}

/// [`forward`] in f32, into `out` (zeros), as a `pulp` op: it picks the instruction set, and
/// so the block width, that every tile then runs in.
struct Forward<'a> {
    geometry: &'a ConvGeometry,
    x: &'a [f32],
    weight: &'a [f32],
    bias: Option<&'a [f32]>,
    out: &'a mut [f32],
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
        );
    }
}

/// [`forward`] in f32 with `simd`'s vectors, into `out` (zeros).
fn run<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let bordered = Bordered::new(g).expect("a shape the direct path serves");
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let (in_vol, out_vol, plane_len) = (g.in_volume(), g.out_volume(), bordered.plane_len());
    let lanes = BLOCK_VECTORS * size_of::<S::f32s>() / size_of::<f32>();
    let blocks = cout_g.div_ceil(lanes);
    // Per reduction step (input channel, then tap, as the weights are laid out), where it reads
    // in the copy; per output point, its origin in a plane of the copy.
    let offsets: Vec<usize> = (0..cin_g)
        .flat_map(|ci| bordered.offsets().iter().map(move |&o| ci * plane_len + o))
        .collect();
    let origins: Vec<usize> = (0..g.out_size[0] * g.out_size[1])
        .flat_map(|row| {
            let origin = bordered.row_origin(g, row);
            (0..g.out_size[2]).map(move |ow| origin + ow * g.stride[2])
        })
        .collect();
    let packed = pack_weights(g, weight, lanes);
    let steps = offsets.len();
    out.par_chunks_mut(cout_g * out_vol)
        .enumerate()
        .for_each_init(Vec::new, |copy, (item, out_item)| {
            let (n, group) = (item / g.groups, item % g.groups);
            let x_group = &x[(n * g.in_channels + group * cin_g) * in_vol..][..cin_g * in_vol];
            bordered.fill(g, x_group, cin_g, copy);
            let copy: &[f32] = copy;
            out_item
                .par_chunks_mut(lanes * out_vol)
                .enumerate()
                .for_each(|(block, out_block)| {
                    let first = group * cout_g + block * lanes;
                    let rows = out_block.len() / out_vol;
                    let bias: Vec<f32> = (0..lanes)
                        .map(|c| {
                            bias.filter(|_| c < rows)
                                .map_or(0.0, |bias| bias[first + c])
                        })
                        .collect();
                    simd.vectorize(Tiles {
                        copy,
                        offsets: &offsets,
                        origins: &origins,
                        weights: &packed[(group * blocks + block) * steps * lanes..]
                            [..steps * lanes],
                        bias: &bias,
                        out_vol,
                        out: out_block,
                    });
                });
        });
}

/// The weights (`C_out x C_in/groups x kernel`) as `[group][block][step][lane]`: per block of
/// `lanes` output channels, each reduction step's weights side by side, zero past the group's
/// last channel.
fn pack_weights(g: &ConvGeometry, weight: &[f32], lanes: usize) -> Vec<f32> {
    let (cout_g, steps) = (g.out_per_group(), g.patch_len());
    let blocks = cout_g.div_ceil(lanes);
    let mut packed = vec![0.0; g.groups * blocks * steps * lanes];
    for (oc, row) in weight.chunks_exact(steps).enumerate() {
        let (group, c) = (oc / cout_g, oc % cout_g);
        let block = &mut packed[(group * blocks + c / lanes) * steps * lanes..][..steps * lanes];
        for (slot, &w) in block.iter_mut().skip(c % lanes).step_by(lanes).zip(row) {
            *slot = w;
        }
    }
    packed
}

/// One block of output channels ([`BLOCK_VECTORS`] vectors of lanes, `out.len() / out_vol` of
/// them real) over every output point. A [`WithSimd`] op: the tiles are written in the
/// widest f32 vectors and FMAs the CPU has.
struct Tiles<'a> {
    /// The image's group copied into its zero border, one plane per input channel.
    copy: &'a [f32],
    /// Per reduction step, where it reads in `copy`.
    offsets: &'a [usize],
    /// Per output point, its origin in a plane of `copy`.
    origins: &'a [usize],
    /// Per reduction step, the block's weights.
    weights: &'a [f32],
    /// Per lane, its channel's bias.
    bias: &'a [f32],
    out_vol: usize,
    /// The block's output planes.
    out: &'a mut [f32],
}

/// A tile's accumulators for one output point: the block's channels.
type Lanes<S> = [<S as Simd>::f32s; BLOCK_VECTORS];

impl WithSimd for Tiles<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let last_origin = self.origins.last().copied().unwrap_or(0);
        let last_offset = self.offsets.last().copied().unwrap_or(0);
        // Every read of a tile is an offset plus an origin, each at most these.
        assert!(
            last_offset + last_origin < self.copy.len()
                && self.origins.is_sorted()
                && self.offsets.is_sorted(),
            "direct tiles read past the copy"
        );
        let weights: &[Lanes<S>] = bytemuck::cast_slice(self.weights);
        let bias: Lanes<S> = bytemuck::cast_slice(self.bias)[0];
        let at = TileAt {
            simd,
            copy: self.copy,
            offsets: self.offsets,
            weights,
            bias,
        };
        let (origins, out_vol, out) = (self.origins, self.out_vol, self.out);
        let full = origins.len() / POINTS;
        // Index loops, not `step_by(..).for_each`, whose fold is compiled outside this op's
        // target features.
        for tile in 0..full {
            let first = tile * POINTS;
            store(out, out_vol, first, at.tile::<POINTS>(&origins[first..]));
        }
        let first = full * POINTS;
        let rest = &origins[first..];
        match rest.len() {
            1 => store(out, out_vol, first, at.tile::<1>(rest)),
            2 => store(out, out_vol, first, at.tile::<2>(rest)),
            3 => store(out, out_vol, first, at.tile::<3>(rest)),
            4 => store(out, out_vol, first, at.tile::<4>(rest)),
            5 => store(out, out_vol, first, at.tile::<5>(rest)),
            _ => {}
        }
    }
}

/// What a tile reads.
struct TileAt<'a, S: Simd> {
    simd: S,
    copy: &'a [f32],
    offsets: &'a [usize],
    weights: &'a [Lanes<S>],
    bias: Lanes<S>,
}

impl<S: Simd> TileAt<'_, S> {
    /// The `P` output points at `origins`: the bias, plus every step's weights times its
    /// inputs, in step order, accumulated in registers.
    #[inline(always)]
    fn tile<const P: usize>(&self, origins: &[usize]) -> [Lanes<S>; P] {
        let simd = self.simd;
        let points: [usize; P] = origins[..P].try_into().expect("P points");
        let mut acc = [self.bias; P];
        for (&offset, weights) in self.offsets.iter().zip(self.weights) {
            for (acc, &point) in acc.iter_mut().zip(&points) {
                // SAFETY: `offset` and `point` are at most the last offset and origin (both
                // lists are sorted), whose sum `with_simd` checked is inside `copy`.
                let x = simd.splat_f32s(unsafe { *self.copy.get_unchecked(offset + point) });
                for (slot, &w) in acc.iter_mut().zip(weights) {
                    *slot = simd.mul_add_e_f32s(x, w, *slot);
                }
            }
        }
        acc
    }
}

/// A tile's accumulators (`tile[point][vector]`) into the output planes of the block's real
/// channels, at points `first..`.
#[inline(always)]
fn store<V: bytemuck::Pod, const P: usize>(
    out: &mut [f32],
    out_vol: usize,
    first: usize,
    tile: [[V; BLOCK_VECTORS]; P],
) {
    for (c, plane) in out.chunks_exact_mut(out_vol).enumerate() {
        for (slot, point) in plane[first..first + P].iter_mut().zip(&tile) {
            *slot = bytemuck::cast_slice::<V, f32>(point)[c];
        }
    }
}

#[cfg(test)]
mod tests;
