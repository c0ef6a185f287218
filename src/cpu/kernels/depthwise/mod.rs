//! Depthwise convolution (one input and one output channel per group) as a direct stencil.
//! With unit stride along W (nearly every depthwise layer), each plane is first copied into a
//! zero border (`kernels::bordered`), so every tap of every output reads inside the copy: an output
//! row is then computed a register-sized run of columns at a time, every tap accumulated
//! before the run is stored once, with no edge cases. Otherwise every output row accumulates
//! its `kD * kH * kW` shifted input rows in place. Lowered to a GEMM, each plane would be a
//! `1 x taps` weight times a `taps`-fold copy of the plane, and the copy costs more than the
//! arithmetic.

mod runs;
mod stencil;
#[cfg(test)]
mod tests;
mod weight;

use crate::spec::ConvGeometry;

use super::element::{Element, zeroed_per_plane};
use super::finished::FinishedPlanes;
pub use weight::{serves_weight, weight_backward};

/// True when each group maps one input channel to one output channel, the case the stencil
/// serves. With more output channels per group (a channel multiplier, or a single-channel stem
/// with `groups = 1`) the lowered path wins: it reuses one lowering across all of them.
pub fn is_depthwise(geometry: &ConvGeometry) -> bool {
    geometry.in_per_group() == 1 && geometry.out_per_group() == 1
}

/// `out = conv(x, weight) + bias` for a depthwise geometry, shape `geometry.out_shape()`, each
/// plane handed to `finished` once stored.
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    finished: &dyn FinishedPlanes<T>,
) -> Vec<T> {
    let g = geometry;
    debug_assert!(is_depthwise(g));
    let (in_vol, out_vol, taps) = (g.in_volume(), g.out_volume(), g.patch_len());
    let planes = g.batch * g.out_channels;
    if out_vol == 0 {
        return Vec::new();
    }
    let bordered = runs::unit_w_stride(g);
    let runs = stencil::column_runs(g);
    let arch = pulp::Arch::new();
    zeroed_per_plane(
        planes,
        out_vol,
        out_vol.saturating_mul(taps),
        Vec::new,
        |copy, plane, out_plane| {
            let (n, channel) = (plane / g.out_channels, plane % g.out_channels);
            let bias = bias.map_or(T::ZERO, |bias| bias[channel]);
            let x_plane = &x[(n * g.in_channels + channel) * in_vol..][..in_vol];
            let taps = &weight[channel * taps..][..taps];
            match &bordered {
                Some(bordered) => {
                    bordered.fill(g, x_plane, 1, copy);
                    runs::forward_plane(&arch, g, bordered, copy, taps, bias, out_plane);
                }
                None => {
                    out_plane.fill(bias);
                    stencil::forward_plane(&arch, g, &runs, x_plane, taps, out_plane);
                }
            }
            finished.finished(plane * out_vol, out_plane);
        },
    )
}
