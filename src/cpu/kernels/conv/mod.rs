//! Convolution on the CPU: the three passes of a [`ConvGeometry`] on contiguous NCDHW slices,
//! each by the algorithm [`run_pass`] picks for its shape. Transposed convolutions reuse them
//! through the adjoint geometry (see `ConvGeometry::transpose`).

mod adjoint;
mod definition;
mod fastest;
mod lowered;
#[cfg(test)]
pub(super) mod tests;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::element::{Element, all_within, min_items_per_task};
use super::sum::{PairwiseSum, lane_sum};
use super::{depthwise, direct, phases, pointwise, winograd};
pub use crate::cpu::choice::Algorithm;
use crate::cpu::choice::pinned;

/// A pass of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pass {
    /// `out = conv(x, weight) + bias`.
    Forward,
    /// The gradient with respect to `x`.
    Data,
    /// The gradient with respect to `weight`.
    Weight,
}

/// Whether `algorithm` computes `pass` over `geometry`, fast or not.
fn serves(algorithm: Algorithm, geometry: &ConvGeometry, pass: Pass) -> bool {
    match algorithm {
        Algorithm::Depthwise => match pass {
            Pass::Forward => depthwise::is_depthwise(geometry),
            Pass::Weight => depthwise::serves_weight(geometry),
            // The adjoint runs the depthwise forward pass for it.
            Pass::Data => false,
        },
        Algorithm::Winograd => winograd::serves(geometry),
        Algorithm::Phases => phases::serves(geometry),
        Algorithm::Pointwise => pass != Pass::Weight && pointwise::serves(geometry),
        Algorithm::Adjoint => pass == Pass::Data && adjoint::serves(geometry),
        Algorithm::Direct => match pass {
            Pass::Data => direct::serves_data(geometry),
            Pass::Forward | Pass::Weight => direct::serves(geometry),
        },
        Algorithm::Lowered => true,
    }
}

/// Every algorithm, in the order a tie between timings goes.
const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::Depthwise,
    Algorithm::Winograd,
    Algorithm::Phases,
    Algorithm::Pointwise,
    Algorithm::Adjoint,
    Algorithm::Direct,
    Algorithm::Lowered,
];

/// `run(algorithm)` for `pass` over `geometry`: the algorithm [`pinned`] on this thread where
/// it serves the shape; else, for a pass large enough to time, the fastest of those that serve
/// it on this machine (timed on the shape's first call, see `fastest`); else [`algorithm`]'s
/// rule.
fn run_pass<T>(
    geometry: &ConvGeometry,
    pass: Pass,
    mut run: impl FnMut(Algorithm) -> Vec<T>,
) -> Vec<T> {
    if let Some(algorithm) = pinned().filter(|&algorithm| serves(algorithm, geometry, pass)) {
        return run(algorithm);
    }
    let candidates: Vec<Algorithm> = ALGORITHMS
        .into_iter()
        .filter(|&algorithm| serves(algorithm, geometry, pass))
        .collect();
    if candidates.len() > 1 && fastest::worth_timing(geometry) {
        return fastest::run_fastest(geometry, pass, &candidates, run);
    }
    run(algorithm(geometry, pass))
}

/// The algorithm for `pass` over `geometry` by rule: the one [`pinned`] on this thread where
/// it serves the shape, else the one that is fastest on most machines (the pointwise product
/// for a 1x1 stride-1 forward pass or input gradient summing enough channels over enough
/// images, Winograd and the phase grids only where they pay, the direct path per stride phase for the input gradient of a
/// strided layer with enough input channels, the adjoint for the input gradient of a
/// stride-1 layer with few output channels). Passes too small to time take it; larger ones
/// time every algorithm that serves them (see [`run_pass`]). Winograd's transforms and the
/// phase grids' weight gradient still refuse values they cannot carry (past Winograd's safe
/// magnitude, a non-finite input that a dropped column would multiply); those calls take the
/// lowered path. What padding makes of a non-finite value elsewhere, `definition.rs` sums
/// again.
pub fn algorithm(geometry: &ConvGeometry, pass: Pass) -> Algorithm {
    match pinned() {
        Some(algorithm) if serves(algorithm, geometry, pass) => algorithm,
        _ if serves(Algorithm::Depthwise, geometry, pass) => Algorithm::Depthwise,
        // A depthwise input gradient is a depthwise forward pass: the stencil, not a GEMM.
        _ if depthwise::is_depthwise(geometry) && serves(Algorithm::Adjoint, geometry, pass) => {
            Algorithm::Adjoint
        }
        _ if pass == Pass::Forward && pointwise::forward_pays(geometry) => Algorithm::Pointwise,
        _ if pass == Pass::Data && pointwise::data_pays(geometry) => Algorithm::Pointwise,
        _ if winograd::fits(geometry) => Algorithm::Winograd,
        // The phase grids first: they compute every element type, where the direct path
        // leaves all but f32 to the lowered one; a pass large enough to time weighs both.
        _ if phases::fits(geometry) => Algorithm::Phases,
        _ if pass == Pass::Data && direct::data_pays(geometry) => Algorithm::Direct,
        _ if pass == Pass::Forward && direct::pays(geometry) => Algorithm::Direct,
        _ if pass == Pass::Weight && direct::weight_pays(geometry) => Algorithm::Direct,
        _ if pass == Pass::Data && adjoint::pays(geometry) => Algorithm::Adjoint,
        _ => Algorithm::Lowered,
    }
}

/// `out = conv(x, weight) + bias`, shape `geometry.out_shape()`. A window sums only its taps
/// inside the input, so a weight that is not finite meets no padding (`definition.rs`).
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    if geometry.batch == 0 {
        return Vec::new();
    }
    let mut out = run_pass(geometry, Pass::Forward, |algorithm| {
        let out = match algorithm {
            Algorithm::Depthwise => Some(depthwise::forward(geometry, x, weight, bias)),
            Algorithm::Winograd => winograd::forward(geometry, x, weight, bias),
            Algorithm::Phases => Some(phases::forward(geometry, x, weight, bias)),
            Algorithm::Pointwise => pointwise::forward(geometry, x, weight, bias),
            Algorithm::Direct => direct::forward(geometry, x, weight, bias),
            Algorithm::Adjoint | Algorithm::Lowered => None,
        };
        out.unwrap_or_else(|| lowered::forward(geometry, x, weight, bias))
    });
    // Only a weight that is not finite makes NaN of the padding's zeros.
    if geometry.windows_meet_padding() && !all_within(weight, f64::INFINITY) {
        definition::repair_forward(geometry, x, weight, bias, &mut out);
    }
    out
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`. An input position sums
/// only the taps that reach an output, so a weight that is not finite meets no padding
/// (`definition.rs`).
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    if geometry.batch == 0 {
        return Vec::new();
    }
    let mut x_grad = run_pass(geometry, Pass::Data, |algorithm| {
        let x_grad = match algorithm {
            Algorithm::Winograd => winograd::x_backward(geometry, weight, out_grad),
            Algorithm::Phases => Some(phases::x_backward(geometry, weight, out_grad)),
            Algorithm::Adjoint => Some(forward(
                &adjoint::geometry(geometry),
                out_grad,
                &adjoint::weight(geometry, weight),
                None,
            )),
            Algorithm::Pointwise => pointwise::x_backward(geometry, weight, out_grad),
            Algorithm::Direct => direct::x_backward(geometry, weight, out_grad),
            Algorithm::Depthwise | Algorithm::Lowered => None,
        };
        x_grad.unwrap_or_else(|| lowered::x_backward(geometry, weight, out_grad))
    });
    // Only a weight that is not finite makes NaN of the bordered output gradient's zeros.
    if geometry.inputs_meet_padding() && !all_within(weight, f64::INFINITY) {
        definition::repair_data(geometry, weight, out_grad, &mut x_grad);
    }
    x_grad
}

/// Gradient of `conv` with respect to `weight`, shape `geometry.weight_shape()`. A tap sums
/// only the positions where it is inside the input, so an output gradient that is not finite
/// meets no padding (`definition.rs`).
///
/// The batch is cut into one contiguous chunk per thread; each chunk accumulates its own
/// partial gradient and the partials are summed in chunk order, so an algorithm's result does
/// not depend on scheduling.
pub fn weight_backward<T: Element>(geometry: &ConvGeometry, x: &[T], out_grad: &[T]) -> Vec<T> {
    // An empty batch sums nothing; its scratch would still be sized for each image's output,
    // which may be any length (a huge padding under a huge stride's one window per image).
    if geometry.batch == 0 {
        return vec![T::ZERO; geometry.out_channels * geometry.patch_len()];
    }
    let mut weight_grad = run_pass(geometry, Pass::Weight, |algorithm| {
        let weight_grad = match algorithm {
            Algorithm::Depthwise => Some(depthwise::weight_backward(geometry, x, out_grad)),
            Algorithm::Winograd => winograd::weight_backward(geometry, x, out_grad),
            Algorithm::Phases => phases::weight_backward(geometry, x, out_grad),
            Algorithm::Direct => direct::weight_backward(geometry, x, out_grad),
            Algorithm::Pointwise | Algorithm::Adjoint | Algorithm::Lowered => None,
        };
        weight_grad.unwrap_or_else(|| lowered::weight_backward(geometry, x, out_grad))
    });
    // The weight gradient is small next to the output gradient that would say the same.
    if geometry.windows_meet_padding() && !all_within(&weight_grad, f64::INFINITY) {
        definition::repair_weight(geometry, x, out_grad, &mut weight_grad);
    }
    weight_grad
}

/// Gradient of a per-channel bias: `out_grad` summed over batch and space, for a contiguous
/// `(N, C, volume)` gradient: each plane pairwise in vector lanes ([`lane_sum`]), the planes'
/// sums pairwise over the batch ([`PairwiseSum`]).
pub fn bias_backward<T: Element>(out_grad: &[T], batch: usize, channels: usize) -> Vec<T> {
    let volume = out_grad.len().checked_div(batch * channels).unwrap_or(0);
    (0..channels)
        .into_par_iter()
        .with_min_len(min_items_per_task(batch * volume))
        .map(|c| {
            let mut sum = PairwiseSum::new();
            for n in 0..batch {
                sum.add(lane_sum(&out_grad[(n * channels + c) * volume..][..volume]));
            }
            sum.total()
        })
        .collect()
}
