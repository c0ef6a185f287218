//! Pooling on the CPU. Every op walks the boxes given by one [`Span`] per axis (see
//! `spec::pool`), one `(n, c)` plane per rayon task, with the reduction as a closure.
//! Backward passes scatter within a plane, sequentially, so results are deterministic.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::{AvgPoolNdOptions, Span, Spans};

use super::element::{Element, min_items_per_task, zeroed_per_plane};
use super::sum::{BLOCK, LEAF, PairwiseSum, lane_sum};

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
    let arch = pulp::Arch::new();
    out.par_chunks_mut(out_volume)
        .zip(indices.par_chunks_mut(out_volume))
        .enumerate()
        .with_min_len(min_items_per_task(in_volume + out_volume))
        .for_each(|(p, (out_plane, index_plane))| {
            let x_plane = &x[p * in_volume..][..in_volume];
            let spans = spans_of(p);
            let row_len = spans[2].len();
            let run = regular_run(&spans[2]);
            // Every index is below the plane's length, which fits the index type (checked
            // once here), so a run's offsets (`PoolIndex::plus`) never wrap.
            I::from_flat(in_volume.saturating_sub(1));
            let mut scratch = RunScratch::default();
            let (lo, hi) = run.map_or((0, 0), |run| (run.lo, run.hi));
            let rows = out_plane
                .chunks_mut(row_len)
                .zip(index_plane.chunks_mut(row_len));
            let boxes = spans[0]
                .iter()
                .flat_map(|sd| spans[1].iter().map(move |sh| (sd, sh)));
            for ((sd, sh), (out_row, index_row)) in boxes.zip(rows) {
                for o in (0..lo).chain(hi..row_len) {
                    let (best, index) = max_of_box(x_plane, in_size, [sd, sh, &spans[2][o]], &map);
                    out_row[o] = best;
                    index_row[o] = I::from_flat(index);
                }
                if let Some(run) = run {
                    arch.dispatch(RowMax {
                        x_plane,
                        in_size,
                        boxed: [sd, sh],
                        w_spans: &spans[2],
                        run,
                        best: &mut out_row[lo..hi],
                        best_index: &mut index_row[lo..hi],
                        map: &map,
                        scratch: &mut scratch,
                    });
                }
            }
        });
    (out, indices)
}

/// The integer a max pool writes its indices in: i32 or i64, the width the index tensor
/// stores, so an I32 tensor needs no widened copy and no conversion pass.
pub trait PoolIndex: Copy + Default + Send + Sync + 'static {
    /// A flat index into the input plane.
    fn from_flat(index: usize) -> Self;

    /// `self + offset`, where [`Self::from_flat`] accepted the plane's largest index: no check,
    /// so a row of them vectorizes.
    fn plus(self, offset: usize) -> Self;
}

impl PoolIndex for i32 {
    fn from_flat(index: usize) -> Self {
        // The ops check that indices fit (`check_index_dtype`); never wrap regardless.
        i32::try_from(index).unwrap_or_else(|_| panic!("index {index} does not fit in I32"))
    }

    fn plus(self, offset: usize) -> Self {
        self.wrapping_add(offset as i32)
    }
}

impl PoolIndex for i64 {
    fn from_flat(index: usize) -> Self {
        index as i64
    }

    fn plus(self, offset: usize) -> Self {
        self.wrapping_add(offset as i64)
    }
}

/// A range of output columns whose windows have the same taps shifted by a constant stride:
/// the interior of a sliding window, where a row can be reduced without per-tap branches.
#[derive(Debug, Clone, Copy)]
struct Run {
    lo: usize,
    hi: usize,
    stride: usize,
}

fn regular_run(spans: &[Span]) -> Option<Run> {
    let full = spans.iter().map(|s| s.count).max()?;
    let lo = spans.iter().position(|s| s.count == full)?;
    // Windows move forward, except where a dilated window's first tap inside the input lies
    // behind its predecessor's (at the padding): no run there.
    let stride = spans
        .get(lo + 1)
        .and_then(|next| next.start.checked_sub(spans[lo].start))
        .unwrap_or(0);
    let mut hi = lo + 1;
    while hi < spans.len()
        && spans[hi].count == full
        && spans[hi].step == spans[lo].step
        && Some(spans[hi].start) == spans[hi - 1].start.checked_add(stride)
    {
        hi += 1;
    }
    (hi - lo > 1 && stride > 0).then_some(Run { lo, hi, stride })
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
    scratch.best.clear();
    scratch.best.resize(lanes, T::NEG_INFINITY);
    // An all -inf box's index is its first tap.
    let first_tap = (sd.start * h_len + sh.start) * w_len + first.start;
    scratch.winner.clear();
    scratch.winner.resize(lanes, I::from_flat(first_tap));
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
/// phase `cap` long. Stride 1 is a copy and stride 2 (most pools) reads pairs, which
/// vectorizes; other strides read strided.
#[inline(always)]
fn split_phases<T: Copy>(src: &[T], stride: usize, phases: &mut [T], cap: usize) {
    if stride == 1 {
        phases[..src.len()].copy_from_slice(src);
        return;
    }
    if stride == 2 {
        let (even, odd) = phases.split_at_mut(cap);
        let pairs = src.chunks_exact(2);
        if let [last] = pairs.remainder() {
            even[src.len() / 2] = *last;
        }
        for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
            *e = pair[0];
            *o = pair[1];
        }
        return;
    }
    for (p, phase) in phases.chunks_mut(cap).enumerate() {
        for (slot, &value) in phase.iter_mut().zip(src[p..].iter().step_by(stride)) {
            *slot = value;
        }
    }
}

/// [`max_of_run`] as a `pulp` op: compiled once per instruction set and picked at run time,
/// so its selects become the widest masked vector operations the CPU has (the crate is built
/// for baseline x86-64, where they would be per-lane branches).
struct RowMax<'a, T, I, M> {
    x_plane: &'a [T],
    in_size: [usize; 3],
    boxed: [&'a Span; 2],
    w_spans: &'a [Span],
    run: Run,
    best: &'a mut [T],
    best_index: &'a mut [I],
    map: &'a M,
    scratch: &'a mut RunScratch<T, I>,
}

impl<T: Element, I: PoolIndex, M: Fn(T) -> T> WithSimd for RowMax<'_, T, I, M> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        max_of_run(
            self.x_plane,
            self.in_size,
            self.boxed,
            self.w_spans,
            self.run,
            self.best,
            self.best_index,
            self.map,
            self.scratch,
        );
    }
}

/// The maximum of one box and its index, scanning row-major: the first tap is the index of an
/// all -inf box, a strictly greater value replaces the maximum, and NaN always does.
#[inline]
fn max_of_box<T: Element>(
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

/// Planes one task of a global pool reduces: enough that a task is not a few dozen additions.
const PLANES_PER_TASK: usize = 64;

/// The box of a pool with one window covering the whole plane (a global average), if it is one.
fn whole_plane(in_size: [usize; 3], spans: &Spans) -> Option<[&Span; 3]> {
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
/// threads only when they hold enough work ([`min_items_per_task`]; 800 KiB of ResNet's head
/// ran in 10.4 µs on the calling thread, 17-24 µs handed to Rayon,
/// `pool/flex/global_avg_pool/forward`).
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
    divisor: impl Fn([&Span; 3]) -> usize + Sync,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = x.len().checked_div(in_volume).unwrap_or(0);
    let mut out = vec![T::ZERO; planes * out_volume];
    if let Some(boxed) = whole_plane(in_size, spans) {
        let divisor = T::from_f64(divisor(boxed) as f64);
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
                out_plane[o] = sum.div(T::from_f64(divisor(boxed) as f64));
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
    divisor: impl Fn([&Span; 3]) -> usize + Sync,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = out_grad.len().checked_div(out_volume).unwrap_or(0);
    let mut x_grad = vec![T::ZERO; planes * in_volume];
    if let Some(boxed) = whole_plane(in_size, spans) {
        // One share per plane, everywhere in it (what adding it to zero at each tap gives).
        let divisor = T::from_f64(divisor(boxed) as f64);
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
                let share = grad_plane[o].div(T::from_f64(divisor(boxed) as f64));
                for_each_tap(in_size, boxed, |i| x_grad_plane[i] += share);
            });
        },
    );
    x_grad
}

/// The divisor rule of `avg_pool`: `divisor_override`, else the window clipped to the padded
/// input (`count_include_pad`), else the taps inside the input.
pub fn avg_divisor(options: &AvgPoolNdOptions<3>) -> impl Fn([&Span; 3]) -> usize + Sync + '_ {
    move |boxed| match options.divisor_override {
        Some(divisor) => divisor,
        None if options.count_include_pad => boxed.iter().map(|s| s.padded).product(),
        None => boxed.iter().map(|s| s.count).product(),
    }
}

/// The taps inside the input: the adaptive-average divisor.
pub fn tap_count(boxed: [&Span; 3]) -> usize {
    boxed.iter().map(|s| s.count).product()
}

/// LP pooling for finite `p`: `(sum x^p * K / count)^(1/p)` with `K` the full kernel volume, as
/// PyTorch computes it through `avg_pool(x^p) * K`.
pub fn lp_pool<T: Element>(
    x: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    p: f64,
    kernel_volume: usize,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let planes = x.len().checked_div(in_volume).unwrap_or(0);
    let (p_t, inv_p) = (T::from_f64(p), T::from_f64(1.0 / p));
    let mut out = vec![T::ZERO; planes * out_volume];
    per_plane(
        &mut out,
        out_volume,
        in_volume + out_volume,
        |plane, out_plane| {
            let x_plane = &x[plane * in_volume..][..in_volume];
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                let total = lp_total(x_plane, in_size, boxed, p_t, kernel_volume);
                out_plane[o] = if total == T::ZERO {
                    T::ZERO
                } else {
                    total.powf(inv_p)
                };
            });
        },
    );
    out
}

/// `K / count`: LP pooling averages a box over its taps inside the input, then multiplies by the
/// full kernel volume `K` (PyTorch's `avg_pool(x^p) * K`).
fn lp_scale<T: Element>(boxed: [&Span; 3], kernel_volume: usize) -> T {
    T::from_f64(kernel_volume as f64 / tap_count(boxed) as f64)
}

/// `sum x^p * K / count` over one box: the value that LP pooling takes the `1/p` root of.
fn lp_total<T: Element>(
    x_plane: &[T],
    in_size: [usize; 3],
    boxed: [&Span; 3],
    p: T,
    kernel_volume: usize,
) -> T {
    box_sum(x_plane, in_size, boxed, |x| x.powf(p)) * lp_scale::<T>(boxed, kernel_volume)
}

/// Gradient of [`lp_pool`]. As in PyTorch's autograd, the chain rule through `x^p` is applied
/// to every element: one outside all windows gets `0 * p * x^(p-1)`, which is NaN for a negative
/// `x` and fractional `p`; a window whose total is 0 passes no gradient. With the forward's
/// `output` (`p >= 1`), a window's `total^(1/p - 1)` is its `y^(1 - p)` and its taps are read
/// once, by the scatter; without, each window is summed again.
pub fn lp_pool_backward<T: Element>(
    x: &[T],
    output: Option<&[T]>,
    out_grad: &[T],
    in_size: [usize; 3],
    spans: &Spans,
    p: f64,
    kernel_volume: usize,
) -> Vec<T> {
    let in_volume: usize = in_size.iter().product();
    let out_volume: usize = spans.iter().map(Vec::len).product();
    let (p_t, inv_p) = (T::from_f64(p), T::from_f64(1.0 / p));
    let (p_minus_one, inv_p_minus_one) = (T::from_f64(p - 1.0), T::from_f64(1.0 / p - 1.0));
    let one_minus_p = T::from_f64(1.0 - p);
    let mut x_grad = vec![T::ZERO; x.len()];
    per_plane(
        &mut x_grad,
        in_volume,
        in_volume + out_volume,
        |plane, x_grad_plane| {
            let x_plane = &x[plane * in_volume..][..in_volume];
            let grad_plane = &out_grad[plane * out_volume..][..out_volume];
            let output_plane = output.map(|output| &output[plane * out_volume..][..out_volume]);
            for_each_box([&spans[0], &spans[1], &spans[2]], |o, boxed| {
                // `total^(1/p - 1)`, the slope of the root; none for an all-zero window.
                let slope = match output_plane {
                    Some(output_plane) if output_plane[o] == T::ZERO => return,
                    // A NaN total passes NaN (PyTorch's chain through `sign(S) * relu(|S|)`
                    // does), also at p = 1, where `y^(1 - p)` is `NaN^0 = 1`.
                    Some(output_plane)
                        if output_plane[o].partial_cmp(&output_plane[o]).is_none() =>
                    {
                        output_plane[o]
                    }
                    Some(output_plane) => output_plane[o].powf(one_minus_p),
                    None => {
                        let total = lp_total(x_plane, in_size, boxed, p_t, kernel_volume);
                        if total == T::ZERO {
                            return;
                        }
                        total.powf(inv_p_minus_one)
                    }
                };
                let share = grad_plane[o] * inv_p * slope * lp_scale::<T>(boxed, kernel_volume);
                for_each_tap(in_size, boxed, |i| x_grad_plane[i] += share);
            });
            for (grad, value) in x_grad_plane.iter_mut().zip(x_plane) {
                *grad = *grad * p_t * value.powf(p_minus_one);
            }
        },
    );
    x_grad
}

/// Gradient routed through indices: `x_grad[index[o]] += out_grad[o]` in every plane. Also the
/// forward pass of max-unpool (with `x` as `out_grad`), where duplicate indices carry equal
/// values.
///
/// # Panics
/// On an index outside the plane, naming `op`.
pub fn scatter_by_index<T: Element, I: Copy + Into<i64> + Sync>(
    op: &str,
    values: &[T],
    indices: &[I],
    value_volume: usize,
    target_volume: usize,
    accumulate: bool,
) -> Vec<T> {
    let planes = values.len().checked_div(value_volume).unwrap_or(0);
    zeroed_per_plane(
        planes,
        target_volume,
        value_volume + target_volume,
        || (),
        |_, p, target_plane| {
            let value_plane = &values[p * value_volume..][..value_volume];
            let index_plane = &indices[p * value_volume..][..value_volume];
            for (value, &index) in value_plane.iter().zip(index_plane) {
                let Some(slot) = plane_slot(index.into(), target_volume) else {
                    bad_index(op, index.into(), target_volume)
                };
                if accumulate {
                    target_plane[slot] += *value;
                } else {
                    target_plane[slot] = *value;
                }
            }
        },
    )
}

/// `out[o] = source[index[o]]` in every plane: the gradient of max-unpool.
///
/// # Panics
/// On an index outside the plane, naming `op`.
pub fn gather_by_index<T: Element, I: Copy + Into<i64> + Sync>(
    op: &str,
    source: &[T],
    indices: &[I],
    source_volume: usize,
    out_volume: usize,
) -> Vec<T> {
    let mut out = vec![T::ZERO; indices.len()];
    per_plane(&mut out, out_volume, out_volume, |p, out_plane| {
        let source_plane = &source[p * source_volume..][..source_volume];
        let index_plane = &indices[p * out_volume..][..out_volume];
        for (slot, &index) in out_plane.iter_mut().zip(index_plane) {
            let Some(at) = plane_slot(index.into(), source_volume) else {
                bad_index(op, index.into(), source_volume)
            };
            *slot = source_plane[at];
        }
    });
    out
}

/// `index` as a position in a plane of `plane` elements, if it is one.
#[inline(always)]
fn plane_slot(index: i64, plane: usize) -> Option<usize> {
    usize::try_from(index).ok().filter(|&i| i < plane)
}

/// The panic of an index outside its plane; out of line, so the loops that check keep their
/// values in registers.
#[cold]
#[inline(never)]
fn bad_index(op: &str, index: i64, plane: usize) -> ! {
    panic!("{op}: index {index} is out of range for a plane of {plane} elements")
}

#[cfg(test)]
mod tests;
