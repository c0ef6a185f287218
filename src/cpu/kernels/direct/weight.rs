//! The direct path's weight gradient: per image, group and block of output channels, the
//! block's output gradient moved channels-last (a vector of the block's channels per output
//! point), then tiles of reduction steps (input channel and tap), each summed over the output
//! points in registers: `grad[c][step] += out_grad[c][point] * copy[step + point]`.

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use super::gangs::Gangs;
use super::tiles::{Lanes, TileAt, from_lanes, lanes};
use super::{Walk, packed_row, serves, spatial, spatial_weight};
use crate::cpu::kernels::element::{Element, Split, all_within, in_f32, sum_of_partials};
use crate::cpu::kernels::transpose::transpose;

/// Gradient of `conv` with respect to `weight`, shape `geometry.weight_shape()`, for a shape
/// the direct path [`serves`], in f32. The batch is cut into one contiguous chunk per thread;
/// each chunk accumulates its own partial gradient and the partials are summed in chunk
/// order, so the result does not depend on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    in_f32(geometry.out_channels * geometry.patch_len(), |grad| {
        debug_assert!(serves(geometry));
        pulp::Arch::new().dispatch(WeightGradient {
            geometry,
            x: bytemuck::cast_slice(x),
            out_grad: bytemuck::cast_slice(out_grad),
            grad,
        })
    })
}

/// [`weight_backward`] in f32, into `grad`, as a `pulp` op: it picks the instruction set, and
/// so the block width, that every tile then runs in; the spatial tiles where they fit the
/// forward pass (fewer output channels than a block holds) and the input is finite.
struct WeightGradient<'a> {
    geometry: &'a ConvGeometry,
    x: &'a [f32],
    out_grad: &'a [f32],
    grad: &'a mut [f32],
}

impl WithSimd for WeightGradient<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            geometry,
            x,
            out_grad,
            grad,
        } = self;
        // The spatial tiles multiply the inputs beside a row's last run by zero.
        if spatial::fits::<S>(geometry) && all_within(x, f64::INFINITY) {
            spatial_weight::run(simd, geometry, x, out_grad, grad);
        } else {
            run(simd, geometry, x, out_grad, grad);
        }
    }
}

/// Output points (of all the images in a gang) from which a tile's sums are long enough that
/// adding them to the gradient costs little: summed an image at a time, a 7x7 layer's 49
/// points lost to the lowered path, and in gangs they win. The `example_resnet_3x3_7`
/// weight-gradient row decides it.
const MIN_GANG_POINTS: usize = 256;

/// [`weight_backward`] in f32 with `simd`'s vectors, into `grad` (the weights' layout). Each
/// chunk's images go in gangs: their bordered copies side by side and their output gradients
/// in one panel, so each tile sums over every point of the gang before adding to the
/// gradient.
pub(super) fn run<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    out_grad: &[f32],
    grad: &mut [f32],
) {
    let walk = Walk::new(g);
    let (cout_g, out_vol, lanes) = (g.out_per_group(), g.out_volume(), lanes::<S>());
    let blocks = cout_g.div_ceil(lanes);
    let block_len = walk.steps.len() * lanes;
    let image_len = walk.copy_len(g);
    let gangs = Gangs::new(g, MIN_GANG_POINTS, image_len);
    let gang = gangs.gang;
    // Per point of a gang (image-major, so sorted), its origin in the gang's copies.
    let points: Vec<usize> = (0..gang)
        .flat_map(|i| walk.points.iter().map(move |&p| i * image_len + p))
        .collect();
    // The gradient in the forward pass's packed order: `[group][block][step][lane]`.
    let packed_len = g.groups * blocks * block_len;
    let partial = |chunk: usize| {
        let mut packed = vec![0.0; packed_len];
        let mut copies = vec![0.0; gang * image_len];
        let mut panel = vec![0.0; gang * out_vol * lanes];
        let images = gangs.images(g, chunk);
        for first_image in images.clone().step_by(gang) {
            let members = first_image..(first_image + gang).min(images.end);
            let gang_points = &points[..members.len() * out_vol];
            for group in 0..g.groups {
                for (i, n) in members.clone().enumerate() {
                    walk.fill_into(g, x, n, group, &mut copies[i * image_len..][..image_len]);
                }
                for block in 0..blocks {
                    let first = group * cout_g + block * lanes;
                    let rows = lanes.min(cout_g - block * lanes);
                    for (i, n) in members.clone().enumerate() {
                        let src = &out_grad[(n * g.out_channels + first) * out_vol..];
                        let dst = &mut panel[i * out_vol * lanes..][..out_vol * lanes];
                        channels_last(&src[..rows * out_vol], rows, lanes, dst);
                    }
                    simd.vectorize(WeightBlock {
                        simd,
                        copy: &copies,
                        points: gang_points,
                        steps: &walk.steps,
                        panel: &panel[..gang_points.len() * lanes],
                        grad: &mut packed[(group * blocks + block) * block_len..][..block_len],
                    });
                }
            }
        }
        packed
    };
    let packed = sum_of_partials(
        gangs.chunks,
        packed_len,
        Split::for_items(gangs.chunks, g.multiply_adds()),
        partial,
    );
    for (oc, row) in grad.chunks_exact_mut(g.patch_len()).enumerate() {
        let first = packed_row(g, lanes, oc);
        for (slot, &value) in row.iter_mut().zip(packed[first..].iter().step_by(lanes)) {
            *slot = value;
        }
    }
}

/// `rows` planes of `src` (each `panel.len() / lanes` long) as `panel[point][lane]`, lanes
/// past `rows` zero.
fn channels_last(src: &[f32], rows: usize, lanes: usize, panel: &mut [f32]) {
    if rows == lanes {
        return transpose(src, rows, src.len() / rows, panel);
    }
    let points = panel.len() / lanes;
    for (point, slots) in panel.chunks_exact_mut(lanes).enumerate() {
        for (c, slot) in slots.iter_mut().enumerate() {
            *slot = if c < rows {
                src[c * points + point]
            } else {
                0.0
            };
        }
    }
}

/// One block's gradient for one gang of images: tiles of reduction steps, each summed over the
/// gang's output points (the panel's rows) and added to the block's `grad` (`[step][lane]`). A [`WithSimd`]
/// op, so that the tiles compile to the vectors and FMAs of `simd`'s instruction set.
struct WeightBlock<'a, S> {
    simd: S,
    /// A gang's bordered copies.
    copy: &'a [f32],
    /// Per point of the gang, its origin in `copy`.
    points: &'a [usize],
    /// Per reduction step, its offset in an image's copy.
    steps: &'a [usize],
    /// Per point of the gang, the block's output gradients.
    panel: &'a [f32],
    grad: &'a mut [f32],
}

impl<S: Simd> WithSimd for WeightBlock<'_, S> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _simd: S2) {
        let Self {
            simd,
            copy,
            points,
            steps,
            panel,
            grad,
        } = self;
        let tiles = TileAt::new(simd, copy, points, panel, steps);
        let zero: Lanes<S> = core::array::from_fn(|_| simd.splat_f32s(0.0));
        let lanes = lanes::<S>();
        tiles.for_each_tile(zero, |first, sums| {
            let steps = grad[first * lanes..].chunks_exact_mut(lanes);
            for (slots, sum) in steps.zip(sums) {
                for (slot, value) in slots.iter_mut().zip(from_lanes::<S>(sum)) {
                    *slot += value;
                }
            }
        });
    }
}
