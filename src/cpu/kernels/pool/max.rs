//! Max pooling: the box scan with PyTorch's first-max and NaN rules, and the same scan
//! vectorised across the outputs of a row's regular run. A plane whose windows slide evenly
//! on both axes, and is small enough, takes `slide.rs` instead.

use rayon::prelude::*;

use crate::spec::{Span, Spans};

use super::index::PoolIndex;
use super::slide::{Run, SlidePlan, SlidePlaneMax, SlideScratch, regular_run, split_pairs};
use crate::cpu::kernels::element::{Element, WideBody, in_widest_vectors, min_items_per_task};

/// Max over each box of every plane, with PyTorch's first-max and NaN rules; `spans_of(plane)`
/// gives the boxes (the same for all planes except in fractional pooling). `map` is applied to
/// each value first (`abs` for LP pooling with `p = inf`).
pub fn max_pool<'a, T: Element, I: PoolIndex>(
    x: &[T],
    in_size: [usize; 3],
    out_volume: usize,
    spans_of: impl Fn(usize) -> &'a Spans + Sync,
    map: impl Fn(T) -> T + Sync,
) -> (Vec<T>, Vec<I>) {
    let in_volume: usize = in_size.iter().product();
    let planes = x.len().checked_div(in_volume).unwrap_or(0);
    let mut out = vec![T::ZERO; planes * out_volume];
    let mut indices = vec![I::default(); planes * out_volume];
    if out_volume == 0 {
        return (out, indices);
    }
    // Every index is below the plane's length, which fits the index type (checked once here),
    // so a run's offsets (`PoolIndex::plus`) never wrap.
    I::from_flat(in_volume.saturating_sub(1));
    // Planes with the first plane's spans (all but fractional pooling's) share its plan.
    let shared = spans_of(0);
    let plan = SlidePlan::new(shared, in_size);
    let scratch = || (RunScratch::default(), SlideScratch::default());
    out.par_chunks_mut(out_volume)
        .zip(indices.par_chunks_mut(out_volume))
        .enumerate()
        .with_min_len(min_items_per_task(in_volume + out_volume))
        .for_each_init(scratch, |(scratch, slide_scratch), (p, (out, indices))| {
            let (x_plane, spans) = (&x[p * in_volume..][..in_volume], spans_of(p));
            match &plan {
                Some(plan) if core::ptr::eq(spans, shared) => in_widest_vectors(SlidePlaneMax {
                    plan,
                    x_plane,
                    out,
                    out_index: indices,
                    map: &map,
                    scratch: slide_scratch,
                }),
                _ => in_widest_vectors(PlaneMax {
                    x_plane,
                    in_size,
                    spans,
                    out,
                    indices,
                    map: &map,
                    scratch,
                }),
            }
        });
    (out, indices)
}

/// The maxima of one plane's boxes, row by row: each row's regular run vectorized
/// ([`max_of_run`]), the boxes beside it scanned ([`max_of_box`]); all of it compiled for
/// the widest vectors, so a row costs no call.
struct PlaneMax<'a, T, I, M> {
    x_plane: &'a [T],
    in_size: [usize; 3],
    spans: &'a Spans,
    out: &'a mut [T],
    indices: &'a mut [I],
    map: &'a M,
    scratch: &'a mut RunScratch<T, I>,
}

impl<T: Element, I: PoolIndex, M: Fn(T) -> T> WideBody for PlaneMax<'_, T, I, M> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Self {
            x_plane,
            in_size,
            spans,
            out,
            indices,
            map,
            scratch,
        } = self;
        let row_len = spans[2].len();
        let run = regular_run(&spans[2]);
        let (lo, hi) = run.map_or((0, 0), |run| (run.lo, run.hi));
        let rows = out.chunks_mut(row_len).zip(indices.chunks_mut(row_len));
        let boxes = spans[0]
            .iter()
            .flat_map(|sd| spans[1].iter().map(move |sh| (sd, sh)));
        for ((sd, sh), (out_row, index_row)) in boxes.zip(rows) {
            for o in (0..lo).chain(hi..row_len) {
                let (best, index) = max_of_box(x_plane, in_size, [sd, sh, &spans[2][o]], map);
                out_row[o] = best;
                index_row[o] = I::from_flat(index);
            }
            if let Some(run) = run {
                max_of_run(
                    x_plane,
                    in_size,
                    [sd, sh],
                    &spans[2],
                    run,
                    &mut out_row[lo..hi],
                    &mut index_row[lo..hi],
                    map,
                    scratch,
                );
            }
        }
    }
}

/// The lanes a run is computed in, a multiple of this: a whole number of the widest vectors
/// (64 bytes of f32), so the select loop has no scalar remainder. The extra lanes read the
/// phases' slack and their results are dropped.
const RUN_LANES: usize = 16;

/// Reusable buffers of [`max_of_run`].
#[derive(Default)]
struct RunScratch<T, I> {
    /// One tap row split by phase modulo the stride: `phases[p * cap + i]` is the row's input
    /// `p + i * stride` (from the run's first window start), so every tap reads a contiguous
    /// slice, whatever the stride; each phase has [`RUN_LANES`] slots of slack.
    phases: Vec<T>,
    /// Per lane, the running maximum and the flat index of the tap that holds it at the run's
    /// first output (the lane's own is `j * stride` further).
    best: Vec<T>,
    winner: Vec<I>,
}

/// [`max_of_box`] for the columns of a [`Run`] at once, vectorized across the outputs: each tap
/// is a contiguous slice of the row (split by phase; a stride of 1 is one phase), compared
/// against the running maxima with selects that keep the winning tap's index per output.
/// Taps are visited in the same row-major order per output, so the first-max and NaN rules
/// are those of [`max_of_box`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn max_of_run<T: Element, I: PoolIndex>(
    x_plane: &[T],
    [_, h_len, w_len]: [usize; 3],
    [sd, sh]: [&Span; 2],
    w_spans: &[Span],
    run: Run,
    best: &mut [T],
    best_index: &mut [I],
    map: &impl Fn(T) -> T,
    scratch: &mut RunScratch<T, I>,
) {
    let first = &w_spans[run.lo];
    let (n, stride) = (best.len(), run.stride);
    let lanes = n.next_multiple_of(RUN_LANES);
    let span_len = (first.count - 1) * first.step + (n - 1) * stride + 1;
    // A tap's `n` values end within its phase's first `span_len / stride` (rounded up) slots.
    let cap = span_len.div_ceil(stride) + RUN_LANES;
    scratch.phases.resize(stride * cap, T::ZERO);
    // `resize` writes one element at a time; `fill` of the buffers a row leaves is a vector
    // store.
    scratch.best.resize(lanes, T::NEG_INFINITY);
    scratch.best.fill(T::NEG_INFINITY);
    // An all -inf box's index is its first tap.
    let first_tap = I::from_flat((sd.start * h_len + sh.start) * w_len + first.start);
    scratch.winner.resize(lanes, first_tap);
    scratch.winner.fill(first_tap);
    for d in sd.taps() {
        for h in sh.taps() {
            let row = (d * h_len + h) * w_len + first.start;
            split_phases(
                &x_plane[row..row + span_len],
                stride,
                &mut scratch.phases,
                cap,
            );
            for offset in first.taps().map(|w| w - first.start) {
                let values = &scratch.phases[(offset % stride) * cap + offset / stride..][..lanes];
                let tap = I::from_flat(row + offset);
                let running = scratch.best.iter_mut().zip(scratch.winner.iter_mut());
                for ((b, winner), &value) in running.zip(values) {
                    let value = map(value);
                    // `|`, not `||`: no branch, so the loop vectorizes.
                    #[allow(clippy::eq_op)]
                    let better = (value > *b) | (value != value);
                    *b = if better { value } else { *b };
                    *winner = if better { tap } else { *winner };
                }
            }
        }
    }
    best.copy_from_slice(&scratch.best[..n]);
    for (j, (index, &winner)) in best_index.iter_mut().zip(&scratch.winner).enumerate() {
        *index = winner.plus(j * stride);
    }
}

/// `phases[p * cap + i] = src[p + i * stride]`: a row split by phase modulo `stride`, each
/// phase `cap` long. Stride 1 is a copy and stride 2 (most pools) reads pairs
/// ([`split_pairs`]); other strides read strided.
#[inline(always)]
fn split_phases<T: Copy>(src: &[T], stride: usize, phases: &mut [T], cap: usize) {
    if stride == 1 {
        phases[..src.len()].copy_from_slice(src);
        return;
    }
    if stride == 2 {
        let (even, odd) = phases.split_at_mut(cap);
        split_pairs(src, even, odd, |v| v);
        return;
    }
    for (p, phase) in phases.chunks_mut(cap).enumerate() {
        for (slot, &value) in phase.iter_mut().zip(src[p..].iter().step_by(stride)) {
            *slot = value;
        }
    }
}

/// The maximum of one box and its index, scanning row-major: the first tap is the index of an
/// all -inf box, a strictly greater value replaces the maximum, and NaN always does.
#[inline(always)]
pub(super) fn max_of_box<T: Element>(
    x_plane: &[T],
    [_, h_len, w_len]: [usize; 3],
    [sd, sh, sw]: [&Span; 3],
    map: &impl Fn(T) -> T,
) -> (T, usize) {
    let mut best = T::NEG_INFINITY;
    let mut best_index = (sd.start * h_len + sh.start) * w_len + sw.start;
    for d in sd.taps() {
        for h in sh.taps() {
            let row = (d * h_len + h) * w_len;
            let mut scan = |offset: usize, value: T| {
                let value = map(value);
                #[allow(clippy::eq_op)]
                if value > best || value != value {
                    best = value;
                    best_index = row + offset;
                }
            };
            if sw.step == 1 {
                let run = &x_plane[row + sw.start..row + sw.start + sw.count];
                for (k, &value) in run.iter().enumerate() {
                    scan(sw.start + k, value);
                }
            } else {
                for w in sw.taps() {
                    scan(w, x_plane[row + w]);
                }
            }
        }
    }
    (best, best_index)
}
