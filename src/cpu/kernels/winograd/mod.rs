//! Winograd convolution for 3-tap stride-1 kernels (3x3, 3x3x3, and 3-tap 1D): the output is
//! cut into tiles of `m` positions per axis; each tile's `alpha = m + 2` inputs and the filters
//! are taken to a transformed domain where the convolution is one product per point, done for
//! every point as a GEMM over channels (`alpha^d` GEMMs of `cout x cin x tiles`), and brought
//! back. F(2, 3) per axis needs 2.25x fewer multiplications per output and axis than the patch
//! matrix and F(4, 3) 4x; the transforms are a few additions per element. The input gradient of
//! such a convolution is another one (flipped, transposed filters), so it runs here too; the
//! weight gradient is each point's product of transformed output gradients and inputs, summed
//! over tiles and taken back through the filter transform's adjoint.
//!
//! The transforms add and subtract neighbouring inputs, so an infinite or NaN input would turn
//! outputs whose window never saw it into NaN, and large finite ones could overflow where the
//! direct sum does not: inputs and filters outside [`SAFE_MAGNITUDE`] take the lowered path.

mod lanes;
mod plan;
mod transform;

use crate::spec::ConvGeometry;

use super::element::{
    Element, Split, all_within, for_each_chunk, items_per_thread, sum_of_partials,
};
use super::finished::{FinishedPlanes, Unwatched};
use super::gemm::{MatMut, MatRef, matmul};
use super::huge_pages;
use plan::{Layout, Pass, Plan, point_stride};

/// Channels per group (in and out) from which Winograd pays: with fewer, the transforms cost
/// more than the products save; decided by `resnet_3x3_56` (64 channels, Winograd) against
/// `example_resnet_3x3_14` (16 channels, the lowered path).
const MIN_CHANNELS: usize = 64;

/// Outputs along each 3-tap axis from which Winograd pays: F(2, 3)'s tiles cover 7 with 8,
/// wasting an eighth; decided by `resnet_3x3_7` (the lowered path) against `resnet_3x3_14`.
const MIN_OUT_LEN: usize = 8;

/// Inputs and filters at or beyond this magnitude (and NaN) take the lowered path: the F(4, 3)
/// transforms scale by up to 10 per axis, far from f32's overflow below it.
const SAFE_MAGNITUDE: f64 = 1e30;

/// Whether Winograd's algorithm computes `geometry`: stride and dilation 1, every kernel axis
/// 1 or 3 taps with padding that leaves each output a full window's reach
/// (`pad <= taps - 1`, which the input gradient needs), and at least one 3-tap axis.
pub fn serves(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    let axes_fit = (0..3).all(|a| {
        g.stride[a] == 1
            && g.dilation[a] == 1
            && matches!(g.kernel[a], 1 | 3)
            && g.pad_begin[a] < g.kernel[a]
    });
    axes_fit && g.kernel.contains(&3) && g.out_volume() > 0 && g.in_volume() > 0 && g.batch > 0
}

/// Whether it is faster there than the lowered path: enough channels per group, and every 3-tap
/// axis long enough for its tiles not to waste much.
fn pays(geometry: &ConvGeometry) -> bool {
    let g = geometry;
    g.in_per_group() >= MIN_CHANNELS
        && g.out_per_group() >= MIN_CHANNELS
        && (0..3).all(|a| g.kernel[a] != 3 || g.out_size[a] >= MIN_OUT_LEN)
}

/// Whether Winograd's algorithm computes `geometry`'s passes: a shape it [`serves`] and
/// [`pays`] on (each pass still declines values outside [`SAFE_MAGNITUDE`]).
pub fn fits(geometry: &ConvGeometry) -> bool {
    serves(geometry) && pays(geometry)
}

/// Whether Winograd's algorithm may transform a pass's two operands: every value below
/// [`SAFE_MAGNITUDE`] (and not NaN).
pub fn takes<T: Element>(operands: [&[T]; 2]) -> bool {
    operands
        .iter()
        .all(|values| all_within(values, SAFE_MAGNITUDE))
}

/// `conv(x, weight) + bias` by Winograd's algorithm, for a shape it [`serves`] and values it
/// [`takes`], each task's images handed to `finished` once stored.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    run_forward(geometry, x, weight, Layout::Conv, bias, finished)
}

/// The forward pass, for a geometry it [`serves`], the filters in `layout`.
fn run_forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    layout: Layout,
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    let g = geometry;
    let plan = Plan::<T>::new(g);
    let filters = plan.filters(weight, layout);
    let (cin_g, cout_g, points) = (g.in_per_group(), g.out_per_group(), plan.points());
    let mut out = huge_pages::zeros(g.out_shape().iter().product());
    let per_chunk = items_per_thread(g.batch);
    let split = Split::for_items(g.batch.div_ceil(per_chunk), g.multiply_adds());
    let item_len = g.out_channels * g.out_volume();
    for_each_chunk(
        &mut out,
        item_len,
        per_chunk,
        0,
        split,
        |images, out_chunk, _| {
            let padded = plan.pad(x, images.clone());
            let total = images.len() * plan.tiles_per_image();
            let block = plan.largest_block(total, Pass::Data);
            let mut transformed = vec![T::ZERO; points * point_stride(block, cin_g)];
            let mut products = vec![T::ZERO; points * point_stride(block, cout_g)];
            for tiles in plan.blocks(total, Pass::Data) {
                let len = tiles.len();
                for group in 0..g.groups {
                    let transformed = &mut transformed[..points * point_stride(len, cin_g)];
                    let products = &mut products[..points * point_stride(len, cout_g)];
                    plan.transform_inputs(&padded, group, tiles.clone(), transformed);
                    let group_filters = &filters[group * points * cin_g * cout_g..];
                    // Every operand column-major, channels contiguous: `gemm` reads the
                    // transformed inputs in place, and packs the filters only for blocks wider
                    // than its packing threshold.
                    for point in 0..points {
                        matmul(
                            MatMut::column_major(
                                &mut products[point * point_stride(len, cout_g)..],
                                cout_g,
                                len,
                            ),
                            MatRef::transposed(
                                &group_filters[point * cin_g * cout_g..],
                                cout_g,
                                cin_g,
                            ),
                            MatRef::transposed(
                                &transformed[point * point_stride(len, cin_g)..],
                                cin_g,
                                len,
                            ),
                            false,
                            split.inner,
                        );
                    }
                    plan.transform_outputs(products, group, tiles.clone(), bias, out_chunk);
                }
            }
            finished.finished(images.start * item_len, out_chunk);
        },
    );
    out
}

/// The input gradient of `geometry` as a convolution of the output gradient: filters flipped
/// and with in and out channels swapped, padding `taps - 1 - pad`.
fn adjoint(geometry: &ConvGeometry) -> ConvGeometry {
    let g = geometry;
    ConvGeometry {
        in_channels: g.out_channels,
        out_channels: g.in_channels,
        in_size: g.out_size,
        out_size: g.in_size,
        pad_begin: core::array::from_fn(|a| g.kernel[a] - 1 - g.pad_begin[a]),
        ..*g
    }
}

/// The gradient of `conv` with respect to `x` by Winograd's algorithm, for a shape and values
/// as [`forward`]'s.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    run_forward(
        &adjoint(geometry),
        out_grad,
        weight,
        Layout::Adjoint,
        None,
        &Unwatched,
    )
}

/// The gradient of `conv` with respect to `weight` by Winograd's algorithm, for a shape and
/// values as [`forward`]'s: each point's product of transformed output gradients and transformed inputs,
/// summed over tiles by the GEMM, taken back by the filter transform's adjoint.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    run_weight_backward(geometry, x, out_grad)
}

/// The weight gradient, for a geometry it [`serves`]. The batch is cut into one contiguous
/// chunk per thread, whose products are summed in chunk order.
fn run_weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry;
    let plan = Plan::<T>::new(g);
    let (cin_g, cout_g, points) = (g.in_per_group(), g.out_per_group(), plan.points());
    let per_chunk = items_per_thread(g.batch);
    let chunks = g.batch.div_ceil(per_chunk);
    let split = Split::for_items(chunks, g.multiply_adds());
    let item_len = g.out_channels * g.out_volume();
    let products_len = g.groups * points * cout_g * cin_g;
    let partial = |chunk: usize| {
        let images = chunk * per_chunk..((chunk + 1) * per_chunk).min(g.batch);
        let padded = plan.pad(x, images.clone());
        let out_grad = &out_grad[images.start * item_len..images.end * item_len];
        let total = images.len() * plan.tiles_per_image();
        let block = plan.largest_block(total, Pass::Weight);
        let mut products = vec![T::ZERO; products_len];
        let mut transformed = vec![T::ZERO; points * point_stride(block, cin_g)];
        let mut transformed_grad = vec![T::ZERO; points * point_stride(block, cout_g)];
        for (index, tiles) in plan.blocks(total, Pass::Weight).enumerate() {
            let len = tiles.len();
            for group in 0..g.groups {
                let transformed = &mut transformed[..points * point_stride(len, cin_g)];
                let transformed_grad = &mut transformed_grad[..points * point_stride(len, cout_g)];
                plan.transform_inputs(&padded, group, tiles.clone(), transformed);
                plan.transform_out_grads(out_grad, group, tiles.clone(), transformed_grad);
                for point in 0..points {
                    let at = (group * points + point) * cout_g * cin_g;
                    matmul(
                        MatMut::rows(&mut products[at..], cout_g, cin_g),
                        MatRef::transposed(
                            &transformed_grad[point * point_stride(len, cout_g)..],
                            cout_g,
                            len,
                        ),
                        MatRef::rows(&transformed[point * point_stride(len, cin_g)..], len, cin_g),
                        index > 0,
                        split.inner,
                    );
                }
            }
        }
        products
    };
    let products = sum_of_partials(chunks, products_len, split, partial);
    plan.filter_gradient(&products)
}

#[cfg(test)]
mod tests;
