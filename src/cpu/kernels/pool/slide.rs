//! Max pooling of a plane whose windows slide evenly along both axes (every `max_pool2d` and
//! `max_pool1d`, and adaptive windows that happen to be evenly spaced): the plane is copied
//! into a buffer bordered with -inf and split by phase modulo the strides, laid out so that one
//! tap of the kernel, over every output of the plane, is one contiguous slice. The plane's
//! maxima are then one vectorized select loop per tap, with no window clipped at the border
//! (padding is -inf, which never wins a strict comparison) and no call per row.

use crate::spec::Span;

use super::index::PoolIndex;
use crate::cpu::kernels::element::{Element, WideBody};

/// A range of output columns whose windows have the same taps shifted by a constant stride:
/// the interior of a sliding window, where a row can be reduced without per-tap branches.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    /// The run's first output.
    pub(super) lo: usize,
    /// One past its last output.
    pub(super) hi: usize,
    /// The input positions between two of its windows.
    pub(super) stride: usize,
}

/// The run of the widest windows (the first two or more of them that move on by one stride
/// and keep their dilation), if there is one.
pub(super) fn regular_run(spans: &[Span]) -> Option<Run> {
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

/// Lanes (outputs and their slack) of the largest plane the slide computes: 4 KiB of maxima,
/// of winners and of lane offsets, which stay in L1 across the taps. The
/// `max_pool2d_with_indices` rows decide it: at 28x28 (224 lanes) the slide runs 2.3x faster
/// than the row scan, at 112x112 (3000 lanes) 1.5x slower, in bands of rows too.
const MAX_LANES: usize = 1024;

/// The windows along one axis as one slide: output `o` reads the taps `o * stride + k *
/// dilation` (`k < kernel`) of the axis bordered by `pad` values of -inf before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slide {
    stride: usize,
    dilation: usize,
    kernel: usize,
    pad: usize,
}

impl Slide {
    /// The slide whose windows, clipped to an axis of `len`, are `spans`, if they are one:
    /// checked span by span, so what the plane computes is what the spans say.
    fn of(spans: &[Span], len: usize) -> Option<Self> {
        let slide = if spans.len() == 1 {
            // One window: its taps inside the axis, unpadded.
            Self {
                stride: 1,
                dilation: spans[0].step,
                kernel: spans[0].count,
                pad: 0,
            }
        } else {
            let run = regular_run(spans)?;
            let full = &spans[run.lo];
            Self {
                stride: run.stride,
                dilation: full.step,
                kernel: full.count,
                pad: (run.lo * run.stride).checked_sub(full.start)?,
            }
        };
        spans
            .iter()
            .enumerate()
            .all(|(o, span)| slide.clipped(o, len) == Some((span.start, span.count)))
            .then_some(slide)
    }

    /// Output `o`'s first tap inside an axis of `len`, and how many of its taps are inside.
    fn clipped(&self, o: usize, len: usize) -> Option<(usize, usize)> {
        let at = |k: usize| (o * self.stride + k * self.dilation).checked_sub(self.pad);
        let mut inside = (0..self.kernel).filter_map(at).filter(|&i| i < len);
        let start = inside.next()?;
        Some((start, 1 + inside.count()))
    }

    /// Offset `k * dilation` of tap `k` in the bordered axis.
    fn tap(&self, k: usize) -> usize {
        k * self.dilation
    }

    /// Slots per phase of the bordered axis, each tap read `lanes` slots from its first (one
    /// per output and its slack): the last lane's last tap, and the input's last value.
    fn cap(&self, lanes: usize, len: usize) -> usize {
        let last_tap = self.tap(self.kernel.saturating_sub(1));
        (lanes + last_tap / self.stride).max((self.pad + len).div_ceil(self.stride))
    }
}

/// Where a plane with sliding windows on both axes reads and writes: the bordered buffer's
/// layout, each tap's slice and index, each output's lane.
pub struct SlidePlan<I> {
    rows: Slide,
    cols: Slide,
    /// Input columns.
    in_cols: usize,
    /// Output rows and columns.
    out: [usize; 2],
    /// Slots per bordered phase row: the lanes of one output row, at least its columns.
    row_cap: usize,
    /// Bordered phase rows per phase: every output row's taps, one row of slack below.
    rows_cap: usize,
    /// Per tap in row-major order: its slice's start in the buffer, and the flat input
    /// index it reads for the output at lane 0 (wrapped where that lies in the padding).
    taps: Vec<(usize, I)>,
    /// Per lane, its output's flat input index offset from lane 0's.
    lane_offsets: Vec<I>,
    /// Per lane, the index of its window's first tap inside the input: an all -inf box's.
    first_taps: Vec<I>,
}

impl<I: PoolIndex> SlidePlan<I> {
    /// The plan for a plane of `[depth, rows, cols]` with `spans`, if its windows slide on
    /// both axes and its depth is one.
    pub fn new(spans: &[Vec<Span>; 3], [depth, rows, cols]: [usize; 3]) -> Option<Self> {
        let one_deep = depth == 1 && spans[0].len() == 1 && spans[0][0].count == 1;
        if !one_deep || spans[1].is_empty() || spans[2].is_empty() {
            return None;
        }
        let (row_slide, col_slide) = (Slide::of(&spans[1], rows)?, Slide::of(&spans[2], cols)?);
        let out = [spans[1].len(), spans[2].len()];
        let row_cap = col_slide.cap(out[1], cols);
        let rows_cap = row_slide.cap(out[0], rows) + 1;
        if out[0] * row_cap > MAX_LANES {
            return None;
        }
        let mut plan = Self {
            rows: row_slide,
            cols: col_slide,
            in_cols: cols,
            out,
            row_cap,
            rows_cap,
            taps: Vec::new(),
            lane_offsets: Vec::new(),
            first_taps: Vec::new(),
        };
        let pad = row_slide.pad * cols + col_slide.pad;
        for kh in 0..row_slide.kernel {
            for kw in 0..col_slide.kernel {
                let (dh, dw) = (row_slide.tap(kh), col_slide.tap(kw));
                let index = (dh * cols + dw).wrapping_sub(pad);
                plan.taps
                    .push((plan.slot(dh, dw), I::default().plus(index)));
            }
        }
        let lanes = out[0] * row_cap;
        plan.lane_offsets = (0..lanes)
            .map(|lane| {
                let (oh, ow) = (lane / row_cap, lane % row_cap);
                I::default().plus(oh * row_slide.stride * cols + ow * col_slide.stride)
            })
            .collect();
        plan.first_taps = (0..lanes)
            .map(|lane| {
                let (oh, ow) = (lane / row_cap, lane % row_cap);
                spans[2].get(ow).map_or(I::default(), |sw| {
                    I::from_flat(spans[1][oh].start * cols + sw.start)
                })
            })
            .collect();
        Some(plan)
    }

    /// Where bordered position `(v, u)` (input `(v - pad, u - pad)`) lies in the buffer.
    fn slot(&self, v: usize, u: usize) -> usize {
        let (sh, sw) = (self.rows.stride, self.cols.stride);
        let phase = (v % sh) * sw + u % sw;
        (phase * self.rows_cap + v / sh) * self.row_cap + u / sw
    }

    /// Elements of the bordered buffer.
    fn buffer_len(&self) -> usize {
        self.rows.stride * self.cols.stride * self.rows_cap * self.row_cap
    }

    /// Lanes of the plane's maxima: a row of `row_cap` per output row.
    fn lanes(&self) -> usize {
        self.out[0] * self.row_cap
    }
}

/// A task's buffers for [`SlidePlaneMax`]: the bordered plane, whose -inf borders stay from
/// plane to plane of one plan, and the running maxima and winners per lane.
pub struct SlideScratch<T, I> {
    bordered: Vec<T>,
    best: Vec<T>,
    winner: Vec<I>,
}

impl<T, I> Default for SlideScratch<T, I> {
    fn default() -> Self {
        Self {
            bordered: Vec::new(),
            best: Vec::new(),
            winner: Vec::new(),
        }
    }
}

/// The maxima of one plane's windows and their indices by `plan`, with PyTorch's first-max
/// and NaN rules: per output, taps in row-major order, a strictly greater value or a NaN
/// replacing the maximum, and an all -inf box keeping its first tap inside the input. A
/// [`WideBody`], so that the whole plane compiles to the widest vectors.
pub struct SlidePlaneMax<'a, T, I, M> {
    pub plan: &'a SlidePlan<I>,
    pub x_plane: &'a [T],
    pub out: &'a mut [T],
    pub out_index: &'a mut [I],
    pub map: &'a M,
    pub scratch: &'a mut SlideScratch<T, I>,
}

impl<T: Element, I: PoolIndex, M: Fn(T) -> T> WideBody for SlidePlaneMax<'_, T, I, M> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Self {
            plan,
            x_plane,
            out,
            out_index,
            map,
            scratch,
        } = self;
        if scratch.bordered.len() != plan.buffer_len() {
            scratch.bordered.clear();
            scratch.bordered.resize(plan.buffer_len(), T::NEG_INFINITY);
        }
        fill_bordered(plan, x_plane, map, &mut scratch.bordered);
        let lanes = plan.lanes();
        scratch.best.resize(lanes, T::NEG_INFINITY);
        scratch.best.fill(T::NEG_INFINITY);
        scratch.winner.clear();
        scratch.winner.extend_from_slice(&plan.first_taps);
        for &(start, tap) in &plan.taps {
            let values = &scratch.bordered[start..][..lanes];
            let running = scratch.best.iter_mut().zip(scratch.winner.iter_mut());
            for (((best, winner), &value), &lane) in running.zip(values).zip(&plan.lane_offsets) {
                // `|`, not `||`: no branch, so the loop vectorizes.
                #[allow(clippy::eq_op)]
                let better = (value > *best) | (value != value);
                *best = if better { value } else { *best };
                *winner = if better { tap.offset_by(lane) } else { *winner };
            }
        }
        let out_cols = plan.out[1];
        let rows = out
            .chunks_exact_mut(out_cols)
            .zip(out_index.chunks_exact_mut(out_cols));
        let lanes_of_rows = scratch
            .best
            .chunks_exact(plan.row_cap)
            .zip(scratch.winner.chunks_exact(plan.row_cap));
        for ((out, out_index), (best, winner)) in rows.zip(lanes_of_rows) {
            out.copy_from_slice(&best[..out_cols]);
            out_index.copy_from_slice(&winner[..out_cols]);
        }
    }
}

/// `even[i] = map(src[2 * i])` and `odd[i] = map(src[2 * i + 1])`: a row split into its two
/// phases by pairs, which vectorizes where a strided copy would not.
#[inline(always)]
pub(super) fn split_pairs<T: Copy>(src: &[T], even: &mut [T], odd: &mut [T], map: impl Fn(T) -> T) {
    let pairs = src.chunks_exact(2);
    if let [last] = pairs.remainder() {
        even[src.len() / 2] = map(*last);
    }
    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
        *e = map(pair[0]);
        *o = map(pair[1]);
    }
}

/// Writes the plane's values (`map`ped) into their bordered slots; the -inf borders are
/// never written.
#[inline(always)]
fn fill_bordered<T: Element, I: PoolIndex>(
    plan: &SlidePlan<I>,
    x_plane: &[T],
    map: &impl Fn(T) -> T,
    bordered: &mut [T],
) {
    let cols = plan.in_cols;
    let (pad_h, pad_w, sw) = (plan.rows.pad, plan.cols.pad, plan.cols.stride);
    for (h, x_row) in x_plane.chunks_exact(cols).enumerate() {
        let v = h + pad_h;
        match sw {
            1 => {
                let start = plan.slot(v, pad_w);
                for (slot, &value) in bordered[start..][..cols].iter_mut().zip(x_row) {
                    *slot = map(value);
                }
            }
            // Most pools.
            2 => {
                let (even, odd) = (plan.slot(v, pad_w), plan.slot(v, pad_w + 1));
                let (first, second) = if even < odd {
                    let (a, b) = bordered.split_at_mut(odd);
                    (&mut a[even..], b)
                } else {
                    let (a, b) = bordered.split_at_mut(even);
                    (b, &mut a[odd..])
                };
                split_pairs(x_row, first, second, map);
            }
            _ => {
                for (w, &value) in x_row.iter().enumerate() {
                    bordered[plan.slot(v, w + pad_w)] = map(value);
                }
            }
        }
    }
}
