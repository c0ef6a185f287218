//! Convolution on the CPU: the three passes of a [`ConvGeometry`] on contiguous NCDHW slices,
//! each by the algorithm `Call::run` picks for its shape, element type and values. Transposed
//! convolutions reuse them through the adjoint geometry (see `ConvGeometry::transpose`).

mod definition;
mod fastest;
#[cfg(test)]
pub(super) mod reference;
#[cfg(test)]
mod tests;

use std::cell::OnceCell;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::element::{Element, all_within, is_f32, min_items_per_task};
use super::finished::{FinishedPlanes, Unwatched};
use super::plane_moments::PlaneMoments;
use super::sum::{PairwiseSum, lane_sum};
use super::{adjoint, depthwise, direct, lowered, phases, pointwise, winograd};
pub use crate::cpu::choice::{Algorithm, Pass};
use crate::cpu::choice::{pinned, run_noted};

/// One call of a pass: what decides which algorithms serve it (the shape, the element type
/// and the two operands' values) and what the rule weighs (the threads it runs on). The
/// operands' value checks run once, on first use.
struct Call<'a, T> {
    geometry: &'a ConvGeometry,
    pass: Pass,
    /// The operands the pass reads, in its argument order: `(x, weight)` forward,
    /// `(weight, out_grad)` for the input gradient, `(x, out_grad)` for the weight gradient.
    operands: [&'a [T]; 2],
    threads: usize,
    winograd_takes: OnceCell<bool>,
    phases_take: OnceCell<bool>,
}

impl<'a, T: Element> Call<'a, T> {
    fn new(geometry: &'a ConvGeometry, pass: Pass, operands: [&'a [T]; 2]) -> Self {
        Self {
            geometry,
            pass,
            operands,
            threads: rayon::current_num_threads(),
            winograd_takes: OnceCell::new(),
            phases_take: OnceCell::new(),
        }
    }

    /// Whether `algorithm` computes this call: its shape, its element type and its values.
    fn serves(&self, algorithm: Algorithm) -> bool {
        let (g, pass) = (self.geometry, self.pass);
        serves_shape(algorithm, g, pass)
            && match algorithm {
                Algorithm::Pointwise | Algorithm::Direct => is_f32::<T>(),
                Algorithm::Winograd => *self
                    .winograd_takes
                    .get_or_init(|| winograd::takes(self.operands)),
                Algorithm::Phases if pass == Pass::Weight => *self
                    .phases_take
                    .get_or_init(|| phases::takes_weight_pass(self.operands[0])),
                _ => true,
            }
    }

    /// The algorithm [`pinned`] on this thread, where it serves the call.
    fn pinned(&self) -> Option<Algorithm> {
        pinned().filter(|&algorithm| self.serves(algorithm))
    }

    /// [`by_rule`]'s algorithm for the shape where it serves the call, else the lowered path.
    fn by_rule(&self) -> Algorithm {
        Some(by_rule(self.geometry, self.pass, self.threads))
            .filter(|&algorithm| self.serves(algorithm))
            .unwrap_or(Algorithm::Lowered)
    }

    /// `run(algorithm)` for this call, noted for `record_conv_algorithms`: the algorithm
    /// [`pinned`] on this thread where it serves the call; else, for a pass large enough to
    /// time, the fastest of those that serve it on this machine (timed on the shape's first
    /// call, see `fastest`); else [`Self::by_rule`]'s. A small pass checks the values of its
    /// rule's algorithm alone: scanning both operands for every candidate took as long as the
    /// `example_resnet_stem_28` weight gradient itself.
    fn run<R>(&self, mut run: impl FnMut(Algorithm) -> R) -> R {
        run_noted(self.pass, || {
            if let Some(algorithm) = self.pinned() {
                return (algorithm, run(algorithm));
            }
            if fastest::worth_timing(self.geometry) {
                let candidates: Vec<Algorithm> = ALGORITHMS
                    .into_iter()
                    .filter(|&algorithm| self.serves(algorithm))
                    .collect();
                if candidates.len() > 1 {
                    let key =
                        fastest::Key::new::<T>(self.geometry, self.pass, self.threads, candidates);
                    return fastest::run_fastest(key, run);
                }
            }
            let algorithm = self.by_rule();
            (algorithm, run(algorithm))
        })
    }
}

/// Whether `algorithm` computes `pass` over `geometry`, fast or not, for some element type
/// and values ([`Call::serves`] answers for the call's own).
fn serves_shape(algorithm: Algorithm, geometry: &ConvGeometry, pass: Pass) -> bool {
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

/// The algorithm that is fastest on most machines for `pass` over `geometry` on `threads`
/// threads: the pointwise product for a 1x1 stride-1 forward pass or input gradient summing
/// enough channels over enough images, Winograd and the phase grids only where they pay, the
/// direct path per stride phase for the input gradient of a strided layer with enough input
/// channels, the adjoint for the input gradient of a stride-1 layer with few output channels.
/// Passes too small to time take it where it serves their element type and values (else the
/// lowered path); larger ones time every algorithm that serves them (see [`Call::run`]).
fn by_rule(geometry: &ConvGeometry, pass: Pass, threads: usize) -> Algorithm {
    let serves = |algorithm| serves_shape(algorithm, geometry, pass);
    match pass {
        _ if serves(Algorithm::Depthwise) => Algorithm::Depthwise,
        // A depthwise input gradient is a depthwise forward pass: the stencil, not a GEMM.
        _ if depthwise::is_depthwise(geometry) && serves(Algorithm::Adjoint) => Algorithm::Adjoint,
        Pass::Forward if pointwise::forward_pays(geometry, threads) => Algorithm::Pointwise,
        Pass::Data if pointwise::data_pays(geometry, threads) => Algorithm::Pointwise,
        _ if winograd::fits(geometry) => Algorithm::Winograd,
        // The phase grids first: they compute every element type, where the direct path
        // computes f32 alone; a pass large enough to time weighs both.
        _ if phases::fits(geometry) => Algorithm::Phases,
        Pass::Data if direct::data_pays(geometry) => Algorithm::Direct,
        Pass::Forward if direct::pays(geometry) => Algorithm::Direct,
        Pass::Weight if direct::weight_pays(geometry) => Algorithm::Direct,
        Pass::Data if adjoint::pays(geometry) => Algorithm::Adjoint,
        _ => Algorithm::Lowered,
    }
}

/// The algorithm a call of `pass` over `geometry` takes by rule, for f32 operands whose values
/// every algorithm takes.
#[cfg(test)]
pub(in crate::cpu::kernels) fn algorithm(geometry: &ConvGeometry, pass: Pass) -> Algorithm {
    let call = Call::<f32>::new(geometry, pass, [&[], &[]]);
    call.pinned().unwrap_or_else(|| call.by_rule())
}

/// `out = conv(x, weight) + bias`, shape `geometry.out_shape()`. A window sums only its taps
/// inside the input, so a weight that is not finite meets no padding (`definition.rs`).
pub fn forward<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    forward_watched(geometry, x, weight, bias, || Unwatched).0
}

/// [`forward`] without bias, and each output channel's mean and biased variance over the
/// batch and space (a training batch norm's statistics), summed from each plane as the pass
/// finishes it ([`PlaneMoments`]) rather than in passes over the output of their own.
pub fn forward_with_moments<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let planes = geometry.batch * geometry.out_channels;
    let new = || PlaneMoments::new(planes, geometry.out_volume());
    let (out, moments) = forward_watched(geometry, x, weight, None, new);
    let (mean, variance) = moments.channels(geometry.batch, geometry.out_channels);
    (out, mean, variance)
}

/// [`forward`], each plane of the output handed to a receiver from `watch` as its algorithm
/// finishes it: a new one for each run, so a timed call keeps the receiver of the run it
/// returns.
fn forward_watched<T: Element, F: FinishedPlanes<T>>(
    geometry: &ConvGeometry,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    watch: impl Fn() -> F,
) -> (Vec<T>, F) {
    if geometry.batch == 0 {
        return (Vec::new(), watch());
    }
    let (mut out, mut finished) =
        Call::new(geometry, Pass::Forward, [x, weight]).run(|algorithm| {
            let finished = watch();
            let out = match algorithm {
                Algorithm::Depthwise => depthwise::forward(geometry, x, weight, bias, &finished),
                Algorithm::Winograd => winograd::forward(geometry, x, weight, bias, &finished),
                Algorithm::Phases => phases::forward(geometry, x, weight, bias, &finished),
                Algorithm::Pointwise => pointwise::forward(geometry, x, weight, bias, &finished),
                Algorithm::Direct => direct::forward(geometry, x, weight, bias, &finished),
                Algorithm::Lowered => lowered::forward(geometry, x, weight, bias, &finished),
                Algorithm::Adjoint => unreachable!("the adjoint serves input gradients alone"),
            };
            (out, finished)
        });
    // Only a weight that is not finite makes NaN of the padding's zeros. The repair rewrites
    // planes the receiver has seen, so it sees the whole output again.
    if geometry.windows_meet_padding() && !all_within(weight, f64::INFINITY) {
        definition::repair_forward(geometry, x, weight, bias, &mut out);
        finished = watch();
        finished.finished(0, &out);
    }
    (out, finished)
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`. An input position sums
/// only the taps that reach an output, so a weight that is not finite meets no padding
/// (`definition.rs`).
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    if geometry.batch == 0 {
        return Vec::new();
    }
    let call = Call::new(geometry, Pass::Data, [weight, out_grad]);
    let mut x_grad = call.run(|algorithm| match algorithm {
        Algorithm::Winograd => winograd::x_backward(geometry, weight, out_grad),
        Algorithm::Phases => phases::x_backward(geometry, weight, out_grad),
        Algorithm::Adjoint => forward(
            &adjoint::geometry(geometry),
            out_grad,
            &adjoint::weight(geometry, weight),
            None,
        ),
        Algorithm::Pointwise => pointwise::x_backward(geometry, weight, out_grad),
        Algorithm::Direct => direct::x_backward(geometry, weight, out_grad),
        Algorithm::Lowered => lowered::x_backward(geometry, weight, out_grad),
        Algorithm::Depthwise => unreachable!("the adjoint runs a depthwise input gradient"),
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
    let call = Call::new(geometry, Pass::Weight, [x, out_grad]);
    let mut weight_grad = call.run(|algorithm| match algorithm {
        Algorithm::Depthwise => depthwise::weight_backward(geometry, x, out_grad),
        Algorithm::Winograd => winograd::weight_backward(geometry, x, out_grad),
        Algorithm::Phases => phases::weight_backward(geometry, x, out_grad),
        Algorithm::Direct => direct::weight_backward(geometry, x, out_grad),
        Algorithm::Lowered => lowered::weight_backward(geometry, x, out_grad),
        Algorithm::Pointwise | Algorithm::Adjoint => {
            unreachable!("{algorithm:?} serves no weight gradient")
        }
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
