//! The three passes by their definition, for the elements a fast algorithm may have got wrong:
//! every algorithm that pads (im2col, the bordered copies, Winograd's tiles, the adjoint's and
//! the phase paths' bordered output gradient) multiplies the padding's zeros by a weight, an
//! input or an output gradient, and `0 * inf` is NaN where the definition, which sums only the
//! taps inside the input (as PyTorch's oneDNN convolutions and Burn's CubeCL kernels do), has
//! none. Such an element is non-finite and meets the padding, so only those are summed again;
//! every other element is exact as computed.

use core::ops::Range;

use rayon::prelude::*;

use crate::spec::{ConvGeometry, inside, points};

use crate::cpu::kernels::element::{Element, all_within, min_items_per_task};
use crate::cpu::kernels::flat;

fn is_finite<T: Element>(value: T) -> bool {
    all_within(core::slice::from_ref(&value), f64::INFINITY)
}

/// Per axis, the `k` in `0..count` for which `first + k * step` lies in `0..len` (see
/// [`inside`]), and whether that is every `k` on every axis.
fn inside_box(
    first: [i128; 3],
    step: [usize; 3],
    count: [usize; 3],
    len: [usize; 3],
) -> ([Range<usize>; 3], bool) {
    let ranges: [Range<usize>; 3] =
        core::array::from_fn(|a| inside(first[a], step[a], count[a], len[a]));
    let whole = (0..3).all(|a| ranges[a] == (0..count[a]));
    (ranges, whole)
}

/// The taps of output position `at`'s window that are inside the input, per axis, and whether
/// that is all of them.
fn window_taps(g: &ConvGeometry, at: [usize; 3]) -> ([Range<usize>; 3], bool) {
    let first = core::array::from_fn(|a| (at[a] * g.stride[a]) as i128 - g.pad_begin[a] as i128);
    inside_box(first, g.dilation, g.kernel, g.in_size)
}

/// The output positions at which tap `tap` is inside the input, per axis, and whether that is
/// all of them.
fn tap_outputs(g: &ConvGeometry, tap: [usize; 3]) -> ([Range<usize>; 3], bool) {
    let first = core::array::from_fn(|a| (tap[a] * g.dilation[a]) as i128 - g.pad_begin[a] as i128);
    inside_box(first, g.stride, g.out_size, g.in_size)
}

/// Per axis, the taps of input position `at` that reach an output position, with that
/// position (those with `at + pad - tap * dilation` a multiple of the stride, inside the
/// output), and whether that is every tap on every axis.
fn reaching_taps(g: &ConvGeometry, at: [usize; 3]) -> ([Vec<(usize, usize)>; 3], bool) {
    let reaching: [Vec<(usize, usize)>; 3] = core::array::from_fn(|a| {
        let (stride, out_len) = (g.stride[a].max(1) as i128, g.out_size[a] as i128);
        (0..g.kernel[a])
            .filter_map(|tap| {
                let reach =
                    at[a] as i128 + g.pad_begin[a] as i128 - tap as i128 * g.dilation[a] as i128;
                let on_grid = reach >= 0 && reach % stride == 0 && reach / stride < out_len;
                on_grid.then_some((tap, (reach / stride) as usize))
            })
            .collect()
    });
    let whole = (0..3).all(|a| reaching[a].len() == g.kernel[a]);
    (reaching, whole)
}

/// The input position tap `tap` of output position `at` reads (inside the input).
fn source(geometry: &ConvGeometry, at: [usize; 3], tap: [usize; 3]) -> [usize; 3] {
    core::array::from_fn(|a| {
        at[a] * geometry.stride[a] + tap[a] * geometry.dilation[a] - geometry.pad_begin[a]
    })
}

/// Every `[d, h, w]` in the box `ranges`, in order.
fn each_in(ranges: &[Range<usize>; 3], mut visit: impl FnMut([usize; 3])) {
    for d in ranges[0].clone() {
        for h in ranges[1].clone() {
            for w in ranges[2].clone() {
                visit([d, h, w]);
            }
        }
    }
}

/// Sum again, by the definition, each element of `out` (the forward pass of `geometry` over
/// `x` and `weight`, plus `bias`) that is non-finite where its window meets the padding.
pub(super) fn repair_forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let g = geometry;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let (in_vol, out_vol) = (g.in_volume(), g.out_volume());
    let taps: usize = g.kernel.iter().product();
    if out_vol == 0 {
        return;
    }
    out.par_chunks_mut(out_vol)
        .enumerate()
        .with_min_len(min_items_per_task(out_vol))
        .for_each(|(plane, out_plane)| {
            let (n, channel) = (plane / g.out_channels, plane % g.out_channels);
            let first_in = n * g.in_channels + channel / cout_g * cin_g;
            for (at, slot) in points(g.out_size).zip(out_plane.iter_mut()) {
                if is_finite(*slot) {
                    continue;
                }
                let (inside_taps, whole) = window_taps(g, at);
                if whole {
                    continue;
                }
                let mut sum = bias.map_or(T::ZERO, |bias| bias[channel]);
                for c in 0..cin_g {
                    let x_plane = &x[(first_in + c) * in_vol..][..in_vol];
                    let w_taps = &weight[(channel * cin_g + c) * taps..][..taps];
                    each_in(&inside_taps, |tap| {
                        let read = x_plane[flat(source(g, at, tap), g.in_size)];
                        sum += read * w_taps[flat(tap, g.kernel)];
                    });
                }
                *slot = sum;
            }
        });
}

/// Sum again, by the definition, each element of `weight_grad` (the weight gradient of
/// `geometry` over `x` and `out_grad`) that is non-finite where its tap meets the padding.
pub(super) fn repair_weight<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    out_grad: &[T],
    weight_grad: &mut [T],
) {
    let g = geometry;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let (in_vol, out_vol, patch) = (g.in_volume(), g.out_volume(), g.patch_len());
    let taps: usize = g.kernel.iter().product();
    if patch == 0 {
        return;
    }
    weight_grad
        .par_chunks_mut(patch)
        .enumerate()
        .with_min_len(min_items_per_task(patch))
        .for_each(|(channel, row)| {
            let first_in = channel / cout_g * cin_g;
            let tap_slots = row.chunks_mut(taps).enumerate().flat_map(|(c, slots)| {
                points(g.kernel)
                    .zip(slots)
                    .map(move |(tap, slot)| (c, tap, slot))
            });
            for (c, tap, slot) in tap_slots {
                if is_finite(*slot) {
                    continue;
                }
                let (outputs, whole) = tap_outputs(g, tap);
                if whole {
                    continue;
                }
                let mut sum = T::ZERO;
                for n in 0..g.batch {
                    let x_plane = &x[(n * g.in_channels + first_in + c) * in_vol..][..in_vol];
                    let g_plane = &out_grad[(n * g.out_channels + channel) * out_vol..][..out_vol];
                    each_in(&outputs, |at| {
                        let read = x_plane[flat(source(g, at, tap), g.in_size)];
                        sum += g_plane[flat(at, g.out_size)] * read;
                    });
                }
                *slot = sum;
            }
        });
}

/// Sum again, by the definition, each element of `x_grad` (the input gradient of `geometry`
/// over `weight` and `out_grad`) that is non-finite where one of its taps reaches no output
/// (the padding, or the stride's holes).
pub(super) fn repair_data<T: Element>(
    geometry: &ConvGeometry,
    weight: &[T],
    out_grad: &[T],
    x_grad: &mut [T],
) {
    let g = geometry;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let (in_vol, out_vol) = (g.in_volume(), g.out_volume());
    let taps: usize = g.kernel.iter().product();
    if in_vol == 0 {
        return;
    }
    x_grad
        .par_chunks_mut(in_vol)
        .enumerate()
        .with_min_len(min_items_per_task(in_vol))
        .for_each(|(plane, x_plane)| {
            let (n, channel) = (plane / g.in_channels, plane % g.in_channels);
            let (group, c) = (channel / cin_g, channel % cin_g);
            for (at, slot) in points(g.in_size).zip(x_plane.iter_mut()) {
                if is_finite(*slot) {
                    continue;
                }
                let (reaching, whole) = reaching_taps(g, at);
                if whole {
                    continue;
                }
                let mut sum = T::ZERO;
                for o in group * cout_g..(group + 1) * cout_g {
                    let g_plane = &out_grad[(n * g.out_channels + o) * out_vol..][..out_vol];
                    let w_taps = &weight[(o * cin_g + c) * taps..][..taps];
                    for &(td, od) in &reaching[0] {
                        for &(th, oh) in &reaching[1] {
                            for &(tw, ow) in &reaching[2] {
                                let grad = g_plane[flat([od, oh, ow], g.out_size)];
                                sum += grad * w_taps[flat([td, th, tw], g.kernel)];
                            }
                        }
                    }
                }
                *slot = sum;
            }
        });
}
