//! Depthwise convolution (one input and one output channel per group) as a direct stencil:
//! every output row accumulates its `kD * kH * kW` shifted input rows in place; for a small
//! "same" plane, every tap instead adds the whole plane shifted and masked ([`TapMasks`]), one
//! long vector loop per tap instead of one short loop per row. Lowered to a GEMM, each plane
//! would be a `1 x taps` weight times a `taps`-fold copy of the plane, and the copy costs more
//! than the arithmetic.

use core::ops::Range;

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::{ConvGeometry, inside};

use super::element::Element;
use super::tap_masks::{TapMasks, readable};

/// True when each group maps one input channel to one output channel, the case the stencil
/// serves. With more output channels per group (a channel multiplier, or a single-channel stem
/// with `groups = 1`) the GEMM wins: it reuses one lowering across all of them.
pub fn is_depthwise(geometry: &ConvGeometry) -> bool {
    geometry.in_per_group() == 1 && geometry.out_per_group() == 1
}

/// `out = conv(x, weight) + bias` for a depthwise geometry, shape `geometry.out_shape()`.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    let g = geometry;
    debug_assert!(is_depthwise(g));
    let (in_vol, out_vol, taps) = (g.in_volume(), g.out_volume(), g.patch_len());
    let mut out = vec![T::ZERO; g.out_shape().iter().product()];
    if out_vol == 0 {
        return out;
    }
    let masks = TapMasks::new(g);
    let plan = match &masks {
        Some(masks) => Plan::Masked(MaskedTap::all(masks, out_vol, in_vol)),
        None => Plan::Stencil(column_runs(g)),
    };
    let arch = pulp::Arch::new();
    out.par_chunks_mut(out_vol)
        .enumerate()
        .for_each(|(plane, out_plane)| {
            let (n, channel) = (plane / g.out_channels, plane % g.out_channels);
            out_plane.fill(bias.map_or(T::ZERO, |bias| bias[channel]));
            let x_plane = &x[(n * g.in_channels + channel) * in_vol..][..in_vol];
            let taps = &weight[channel * taps..][..taps];
            match &plan {
                Plan::Masked(rows) => arch.dispatch(MaskedPlane {
                    rows,
                    x_plane,
                    taps,
                    out_plane,
                }),
                Plan::Stencil(runs) => arch.dispatch(PlaneStencil {
                    geometry: g,
                    runs,
                    x_plane,
                    taps,
                    out_plane,
                }),
            }
        });
    out
}

/// How every plane of one call is computed, worked out once: by tap masks for a small "same"
/// plane, else by the row stencil's column runs.
enum Plan<'a> {
    Masked(Vec<MaskedTap<'a>>),
    Stencil(Vec<(Range<usize>, usize)>),
}

/// One tap of a masked plane: its shift, its mask, and the output positions whose shifted
/// element lies inside the plane (the rest read the padding).
struct MaskedTap<'a> {
    shift: isize,
    mask: &'a [bool],
    live: Range<usize>,
}

impl<'a> MaskedTap<'a> {
    /// Every tap of `masks`, in weight order, for planes of `out_len` outputs read from planes
    /// of `in_len` inputs.
    fn all(masks: &'a TapMasks, out_len: usize, in_len: usize) -> Vec<Self> {
        masks
            .taps()
            .map(|(shift, mask)| Self {
                shift,
                mask,
                live: readable(shift, &(0..out_len), in_len),
            })
            .collect()
    }
}

/// One plane of a "same" depthwise convolution: each tap adds `weight * x` shifted, with the
/// input zero where the tap reads the padding (as the GEMM path's zero-filled patch matrix).
struct MaskedPlane<'a, T> {
    rows: &'a [MaskedTap<'a>],
    x_plane: &'a [T],
    taps: &'a [T],
    out_plane: &'a mut [T],
}

impl<T: Element> WithSimd for MaskedPlane<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            rows,
            x_plane,
            taps,
            out_plane,
        } = self;
        // Three taps a pass (a 3-wide kernel row) where all three read the input, so the
        // output is loaded and stored once per three products; single taps elsewhere.
        for (group, weights) in rows.chunks(3).zip(taps.chunks(3)) {
            let shared = match group {
                [a, b, c] => {
                    let start = a.live.start.max(b.live.start).max(c.live.start);
                    start..a.live.end.min(b.live.end).min(c.live.end).max(start)
                }
                _ => 0..0,
            };
            for (row, &tap) in group.iter().zip(weights) {
                let live = row.live.clone();
                let padding = tap * T::ZERO;
                for slot in &mut out_plane[..live.start] {
                    *slot += padding;
                }
                for slot in &mut out_plane[live.end..] {
                    *slot += padding;
                }
                if shared.is_empty() {
                    add_masked(out_plane, x_plane, row, tap, live);
                } else {
                    // `shared` is inside every tap's readable range.
                    add_masked(out_plane, x_plane, row, tap, live.start..shared.start);
                    add_masked(out_plane, x_plane, row, tap, shared.end..live.end);
                }
            }
            if let ([a, b, c], [wa, wb, wc], false) = (group, weights, shared.is_empty()) {
                let at = |row: &MaskedTap<'_>| {
                    let start = (row.shift + shared.start as isize) as usize;
                    start..start + shared.len()
                };
                let (xa, xb, xc) = (&x_plane[at(a)], &x_plane[at(b)], &x_plane[at(c)]);
                let (ma, mb, mc) = (
                    &a.mask[shared.clone()],
                    &b.mask[shared.clone()],
                    &c.mask[shared.clone()],
                );
                for (i, slot) in out_plane[shared.clone()].iter_mut().enumerate() {
                    let pick = |keep: bool, value: T| if keep { value } else { T::ZERO };
                    *slot += *wa * pick(ma[i], xa[i])
                        + *wb * pick(mb[i], xb[i])
                        + *wc * pick(mc[i], xc[i]);
                }
            }
        }
    }
}

/// `out[p] += tap * x[p + shift]` over `range` (inside the tap's readable positions), with the
/// input taken as zero where the tap's mask says it reads the padding.
#[inline(always)]
fn add_masked<T: Element>(
    out: &mut [T],
    x: &[T],
    row: &MaskedTap<'_>,
    tap: T,
    range: Range<usize>,
) {
    // An empty range may sit where `p + shift` is outside the plane (a tap past all of it).
    if range.is_empty() {
        return;
    }
    let src = &x[(range.start as isize + row.shift) as usize..][..range.len()];
    let mask = &row.mask[range.clone()];
    for ((slot, &value), &keep) in out[range].iter_mut().zip(src).zip(mask) {
        *slot += tap * if keep { value } else { T::ZERO };
    }
}

/// For each `kw`: the output columns whose tap lands inside the input row, and the input
/// column of the first of them. The same for every row, so computed once.
fn column_runs(g: &ConvGeometry) -> Vec<(Range<usize>, usize)> {
    let (out_w, in_w, s_w) = (g.out_size[2], g.in_size[2], g.stride[2]);
    (0..g.kernel[2])
        .map(|kw| {
            let offset = (kw * g.dilation[2]) as isize - g.pad_begin[2] as isize;
            let columns = inside(offset as i128, s_w, out_w, in_w);
            let first = (columns.start * s_w) as isize + offset;
            (columns, first.max(0) as usize)
        })
        .collect()
}

/// One output plane's stencil. A [`WithSimd`] op so that `pulp` compiles it once per
/// instruction set and picks at run time: the row updates then use the widest vectors the CPU
/// has, though the crate is built for baseline x86-64.
struct PlaneStencil<'a, T> {
    geometry: &'a ConvGeometry,
    runs: &'a [(Range<usize>, usize)],
    x_plane: &'a [T],
    taps: &'a [T],
    out_plane: &'a mut [T],
}

impl<T: Element> WithSimd for PlaneStencil<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let g = self.geometry;
        let [in_d, in_h, in_w] = g.in_size;
        let [_, out_h, out_w] = g.out_size;
        let [k_d, k_h, k_w] = g.kernel;
        let [s_d, s_h, s_w] = g.stride;
        let [d_d, d_h, _] = g.dilation;
        let [p_d, p_h, _] = g.pad_begin.map(|p| p as isize);
        for (row, out_row) in self.out_plane.chunks_mut(out_w).enumerate() {
            let (od, oh) = (row / out_h, row % out_h);
            for kd in 0..k_d {
                let id = (od * s_d + kd * d_d) as isize - p_d;
                if !(0..in_d as isize).contains(&id) {
                    continue;
                }
                for kh in 0..k_h {
                    let ih = (oh * s_h + kh * d_h) as isize - p_h;
                    if !(0..in_h as isize).contains(&ih) {
                        continue;
                    }
                    let x_row = &self.x_plane[(id as usize * in_h + ih as usize) * in_w..][..in_w];
                    let row_taps = &self.taps[(kd * k_h + kh) * k_w..][..k_w];
                    for ((columns, first), &tap) in self.runs.iter().zip(row_taps) {
                        if !columns.is_empty() {
                            add_scaled(&mut out_row[columns.clone()], &x_row[*first..], s_w, tap);
                        }
                    }
                }
            }
        }
    }
}

/// `dst[i] += tap * src[i * step]`.
#[inline(always)]
fn add_scaled<T: Element>(dst: &mut [T], src: &[T], step: usize, tap: T) {
    if step == 1 {
        for (slot, value) in dst.iter_mut().zip(src) {
            *slot += tap * *value;
        }
    } else {
        for (slot, value) in dst.iter_mut().zip(src.iter().step_by(step)) {
            *slot += tap * *value;
        }
    }
}
