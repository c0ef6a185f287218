//! Pooling on the CPU. Every op walks the boxes given by one [`Span`] per axis (see
//! `spec::pool`), one `(n, c)` plane per rayon task, with the reduction as a closure: max
//! (`max.rs`, and `slide.rs` for a plane whose windows slide evenly on both axes; `index.rs`
//! the widths its indices are written in), average and global average (`average.rs`), LP (`lp.rs`), and the routing of
//! values by index that max pooling's gradient and max-unpooling share (`unpool.rs`).
//! Backward passes scatter within a plane, sequentially, so results are deterministic.

mod average;
mod index;
mod lp;
mod max;
mod slide;
mod unpool;

use rayon::prelude::*;

use crate::spec::Span;

use super::element::{Element, min_items_per_task};
use super::sum::{BLOCK, PairwiseSum};

pub use average::{avg_divisor, avg_pool, avg_pool_backward, tap_divisor};
pub use lp::{lp_pool, lp_pool_backward};
pub use max::max_pool;
pub use unpool::{gather_by_index, scatter_by_index};

/// Call `visit(out_index, [d, h, w] spans)` for every output position, in row-major order.
fn for_each_box(spans: [&[Span]; 3], mut visit: impl FnMut(usize, [&Span; 3])) {
    let mut o = 0;
    for sd in spans[0] {
        for sh in spans[1] {
            for sw in spans[2] {
                visit(o, [sd, sh, sw]);
                o += 1;
            }
        }
    }
}

/// Call `visit(flat_index)` for every tap of a box, row-major (the max-pool scan order).
#[inline]
fn for_each_tap(in_size: [usize; 3], [sd, sh, sw]: [&Span; 3], mut visit: impl FnMut(usize)) {
    let [_, h_len, w_len] = in_size;
    for d in sd.taps() {
        for h in sh.taps() {
            let row = (d * h_len + h) * w_len;
            for w in sw.taps() {
                visit(row + w);
            }
        }
    }
}

/// The sum of `term(x)` over a box's taps, row-major: a running sum for a short box (at most
/// [`BLOCK`] taps, where it rounds as a [`PairwiseSum`] would), else a [`PairwiseSum`], whose
/// error grows with the log of the window (a 4096 x 4096 window of 0.1 within 1e-6 in f32).
#[inline]
fn box_sum<T: Element>(
    x_plane: &[T],
    in_size: [usize; 3],
    boxed: [&Span; 3],
    term: impl Fn(T) -> T,
) -> T {
    if tap_count(boxed) <= BLOCK {
        let mut sum = T::ZERO;
        for_each_tap(in_size, boxed, |i| sum += term(x_plane[i]));
        sum
    } else {
        let mut sum = PairwiseSum::new();
        for_each_tap(in_size, boxed, |i| sum.add(term(x_plane[i])));
        sum.total()
    }
}

/// Run `body(plane, out_plane)` over every plane of `out`, in parallel where the planes hold
/// enough work between them (`plane_work` each, see [`min_items_per_task`]).
fn per_plane<T: Send>(
    out: &mut [T],
    plane_len: usize,
    plane_work: usize,
    body: impl Fn(usize, &mut [T]) + Sync,
) {
    if plane_len == 0 {
        return;
    }
    out.par_chunks_mut(plane_len)
        .enumerate()
        .with_min_len(min_items_per_task(plane_work))
        .for_each(|(p, chunk)| body(p, chunk));
}

/// The taps inside the input: the adaptive-average divisor.
pub fn tap_count(boxed: [&Span; 3]) -> usize {
    boxed.iter().map(|s| s.count).product()
}

#[cfg(test)]
mod tests;
