//! Average pooling (sliding and adaptive windows) and its gradient, with the global average
//! of whole planes as vector sums.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::{AvgPoolNdOptions, Span, Spans};

use super::{box_sum, for_each_box, for_each_tap, per_plane, tap_count};
use crate::cpu::kernels::element::{Element, min_items_per_task};
use crate::cpu::kernels::sum::{LEAF, lane_sum};

/// Planes one task of a global pool reduces: enough that a task is not a few dozen additions.
const PLANES_PER_TASK: usize = 64;

/// The box of a pool with one window covering the whole plane (a global average), if it is one.
pub(super) fn whole_plane(in_size: [usize; 3], spans: &Spans) -> Option<[&Span; 3]> {
    let boxed = [&spans[0], &spans[1], &spans[2]].map(|spans| match spans.as_slice() {
        [span] => Some(span),
        _ => None,
    });
    let boxed = [boxed[0]?, boxed[1]?, boxed[2]?];
    let covers =
        |(span, len): (&Span, usize)| span.start == 0 && span.count == len && span.step == 1;
    boxed
        .iter()
        .copied()
        .zip(in_size)
        .all(covers)
        .then_some(boxed)
}

/// Each plane's sum divided by `divisor`, in tasks of [`PLANES_PER_TASK`] planes, split among
/// threads only when they hold enough work ([`min_items_per_task`]; ResNet's head runs faster
/// on the calling thread than handed to Rayon, `pool/flex/global_avg_pool/forward`).
fn global_avg_pool<T: Element>(x: &[T], in_volume: usize, divisor: T, out: &mut [T]) {
    let means = |x: &[T], out: &mut [T]| {
        pulp::Arch::new().dispatch(PlaneMeans {
            x,
            in_volume,
            divisor,
            out,
        })
    };
    out.par_chunks_mut(PLANES_PER_TASK)
        .enumerate()
        .with_min_len(min_items_per_task(PLANES_PER_TASK * in_volume))
        .for_each(|(task, out_task)| {
            let x_task = &x[task * PLANES_PER_TASK * in_volume..][..out_task.len() * in_volume];
            means(x_task, out_task);
        });
}

/// [`global_avg_pool`]'s planes `x` (each `in_volume` long) into their means `out`, compiled
/// once per instruction set: a plane of up to a [`LEAF`] is one vector sum
/// ([`Element::vector_sum`]), a longer one pairwise ([`lane_sum`]).
struct PlaneMeans<'a, T> {
    x: &'a [T],
    in_volume: usize,
    divisor: T,
    out: &'a mut [T],
}

impl<T: Element> WithSimd for PlaneMeans<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        for (out, plane) in self.out.iter_mut().zip(self.x.chunks_exact(self.in_volume)) {
            let sum = if plane.len() <= LEAF {
                T::vector_sum(simd, plane)
            } else {
                lane_sum(plane)
            };
            *out = sum.div(self.divisor);
        }
    }
}

/// Sum over each box divided by `divisor(box)`: average and adaptive-average pooling.
pub fn avg_pool<T: Element>(
    x: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    divisor: impl Fn([&Span; 3]) -> f64 + Sync,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = x.len().checked_div(in_volume).unwrap_or(0);
    let mut out = vec![T::ZERO; planes * out_volume];
    if let Some(boxed) = whole_plane(in_size, spans) {
        let divisor = T::from_f64(divisor(boxed));
        global_avg_pool(x, in_volume, divisor, &mut out);
        return out;
    }
    per_plane(
        &mut out,
        out_volume,
        in_volume + out_volume,
        |p, out_plane| {
            let x_plane = &x[p * in_volume..][..in_volume];
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                let sum = box_sum(x_plane, in_size, boxed, |x| x);
                out_plane[o] = sum.div(T::from_f64(divisor(boxed)));
            });
        },
    );
    out
}

/// Gradient of [`avg_pool`]: each output's gradient spread evenly over its box's taps.
pub fn avg_pool_backward<T: Element>(
    out_grad: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    divisor: impl Fn([&Span; 3]) -> f64 + Sync,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = out_grad.len().checked_div(out_volume).unwrap_or(0);
    let mut x_grad = vec![T::ZERO; planes * in_volume];
    if let Some(boxed) = whole_plane(in_size, spans) {
        // One share per plane, everywhere in it (what adding it to zero at each tap gives).
        let divisor = T::from_f64(divisor(boxed));
        per_plane(&mut x_grad, in_volume, in_volume, |p, x_grad_plane| {
            x_grad_plane.fill(out_grad[p].div(divisor));
        });
        return x_grad;
    }
    per_plane(
        &mut x_grad,
        in_volume,
        in_volume + out_volume,
        |p, x_grad_plane| {
            let grad_plane = &out_grad[p * out_volume..][..out_volume];
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                let share = grad_plane[o].div(T::from_f64(divisor(boxed)));
                for_each_tap(in_size, boxed, |i| x_grad_plane[i] += share);
            });
        },
    );
    x_grad
}

/// The divisor rule of `avg_pool`: `divisor_override` (of either sign), else the window
/// clipped to the padded input (`count_include_pad`), else the taps inside the input.
pub fn avg_divisor(options: &AvgPoolNdOptions<3>) -> impl Fn([&Span; 3]) -> f64 + Sync + '_ {
    move |boxed| match options.divisor_override {
        Some(divisor) => divisor as f64,
        None if options.count_include_pad => {
            boxed.iter().map(|s| s.padded).product::<usize>() as f64
        }
        None => tap_divisor(boxed),
    }
}

/// The divisor that averages over the taps in the box: adaptive average pooling's, and a
/// sliding window's without `count_include_pad`.
pub fn tap_divisor(boxed: [&Span; 3]) -> f64 {
    tap_count(boxed) as f64
}
