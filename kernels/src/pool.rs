//! One window kernel for every pool (its gather-form backward is [`crate::pool_backward`]).
//!
//! A window is the product of one span per axis: `count` taps `start, start + step, ...`, and
//! `padded`, its length clipped to the padded input (the `count_include_pad` divisor). Where
//! the spans come from is a comptime [`Placement`]: sliding windows (max, average and LP
//! pooling) are computed here from the stride, padding and dilation, fractional windows from
//! the per-plane samples (in f32, as PyTorch does), and adaptive windows are read from a
//! host-built table (`[start, count, step, padded]` per output position, the D, H then W axis).

use cubecl::prelude::*;

use crate::axes::{Axes, Index3, along, volume};
use crate::pairwise::{pairwise_add, pairwise_sum, pairwise_value};

/// What the window kernel reduces (a comptime parameter: each is its own compiled kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Max with PyTorch's indices: first maximum, NaN wins.
    #[default]
    Max,
    /// Sum divided by the divisor rule.
    Avg,
    /// LP pooling for finite `p`: `(sum x^p * K / count)^(1/p)`.
    Lp,
    /// The backward pre-pass of LP pooling: each window's share of its output gradient,
    /// `out_grad / p * total^(1/p - 1) * K / count`.
    LpShare,
}

/// Where a kernel finds its windows (a comptime parameter: each is its own compiled kernel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Spans, and the backward's covers, read from host-built tables (adaptive windows).
    #[default]
    Table,
    /// Sliding windows, computed from [`PoolArgs`]'s kernel, stride, padding and dilation.
    Sliding,
    /// Fractional windows, computed from per-plane samples (forward only).
    Fractional,
}

/// Sizes and scalars of one pool.
#[derive(CubeLaunch, CubeType)]
pub struct PoolArgs {
    pub channels: usize,
    pub in_size: Index3,
    pub out_size: Index3,
    /// Window lengths of sliding and fractional pooling; `K` (their product) of LP pooling.
    pub kernel: Index3,
    /// Sliding windows' stride (1 along an axis with one output).
    pub stride: Index3,
    /// Sliding windows' padding before the first position.
    pub padding: Index3,
    /// Sliding windows' padding after the last position (the `count_include_pad` divisor).
    pub padding_end: Index3,
    /// Sliding windows' dilation (1 along an axis of one tap).
    pub dilation: Index3,
    /// Fractional pooling's `(len - kernel) / (out - 1)` per axis, computed on the host.
    pub alpha: Axes<f32>,
    /// `divisor_override` (any nonzero integer, as a float), or 0 for none.
    pub divisor_override: f32,
    pub norm: f32,
    pub inv_norm: f32,
    pub norm_minus_one: f32,
    pub inv_norm_minus_one: f32,
}

/// -inf and NaN from their bits: WGSL has no literals for them, and a NaN passed as a launch
/// scalar does not survive on every runtime.
#[cube]
pub(crate) fn neg_infinity<F: Float>() -> F {
    F::cast_from(f32::reinterpret(0xff80_0000u32))
}

#[cube]
pub(crate) fn not_a_number<F: Float>() -> F {
    F::cast_from(f32::reinterpret(0x7fc0_0000u32))
}

/// The taps of one window along one axis.
#[derive(CubeType, Clone, Copy)]
pub struct Span {
    pub start: usize,
    pub count: usize,
    pub step: usize,
    pub padded: usize,
}

#[cube]
fn table_span(spans: &Tensor<u32>, entry: usize) -> Span {
    Span {
        start: spans[entry * 4] as usize,
        count: spans[entry * 4 + 1] as usize,
        step: spans[entry * 4 + 2] as usize,
        padded: spans[entry * 4 + 3] as usize,
    }
}

/// PyTorch's `generate_intervals`: `int((o + u) * alpha) - int(u * alpha)`, the last window
/// flush with the input's end.
#[cube]
fn fractional_span(
    o: usize,
    len: usize,
    out_len: usize,
    kernel: usize,
    alpha: f32,
    u: f32,
) -> Span {
    let mut start = len - kernel;
    if o + 1 < out_len {
        let position =
            u32::cast_from((f32::cast_from(o as u32) + u) * alpha) - u32::cast_from(u * alpha);
        start = min(position as usize, len - kernel);
    }
    Span {
        start,
        count: kernel,
        step: 1,
        padded: kernel,
    }
}

/// `value / step`, rounded up; unit steps (every window but dilated ones, every stride-1
/// pool) skip the division.
#[cube]
pub(crate) fn div_ceil_step(value: usize, step: usize) -> usize {
    let mut result = value;
    if step != 1 {
        result = value.div_ceil(step);
    }
    result
}

/// The span of sliding window `o` on `axis`, as `spec::sliding_spans` builds it: its taps
/// inside the input and its length clipped to the padded input. Positions are shifted by the
/// padding before, so none is negative.
#[cube]
pub(crate) fn sliding_span(args: &PoolArgs, o: usize, #[comptime] axis: usize) -> Span {
    let kernel = along(&args.kernel, axis);
    let pad = along(&args.padding, axis);
    let dilation = along(&args.dilation, axis);
    let end = along(&args.in_size, axis) + pad;
    let first = o * along(&args.stride, axis);
    let mut lo = 0;
    if first < pad {
        lo = min(div_ceil_step(pad - first, dilation), kernel);
    }
    let mut hi = lo;
    if first < end {
        hi = max(min(div_ceil_step(end - first, dilation), kernel), lo);
    }
    let count = hi - lo;
    let at = first + lo * dilation;
    let mut start = 0;
    if at > pad {
        start = at - pad;
    }
    let padded_end = min(first + kernel, end + along(&args.padding_end, axis));
    let mut padded = 0;
    if padded_end > first {
        padded = padded_end - first;
    }
    Span {
        start,
        count,
        step: select(count > 1, dilation, 1),
        padded,
    }
}

/// The span of output `o` on `axis` (0, 1, 2 = D, H, W) of plane `plane`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn span_of<F: Float>(
    spans: &Tensor<u32>,
    samples: &Tensor<F>,
    args: &PoolArgs,
    plane: usize,
    o: usize,
    #[comptime] axis: usize,
    #[comptime] placement: Placement,
) -> Span {
    if comptime![placement == Placement::Fractional] {
        let u = f32::cast_from(samples[plane * 3 + axis]);
        fractional_span(
            o,
            along(&args.in_size, axis),
            along(&args.out_size, axis),
            along(&args.kernel, axis),
            along(&args.alpha, axis),
            u,
        )
    } else {
        window_span(spans, args, o, axis, placement)
    }
}

/// The span of output `o` on `axis` of a sliding or tabled placement (the same in every plane).
#[cube]
pub(crate) fn window_span(
    spans: &Tensor<u32>,
    args: &PoolArgs,
    o: usize,
    #[comptime] axis: usize,
    #[comptime] placement: Placement,
) -> Span {
    if comptime![placement == Placement::Sliding] {
        sliding_span(args, o, axis)
    } else if comptime![axis == 0] {
        table_span(spans, o)
    } else if comptime![axis == 1] {
        table_span(spans, args.out_size.d + o)
    } else {
        table_span(spans, args.out_size.d + args.out_size.h + o)
    }
}

/// `x^y` with C's `pow` semantics for a negative base (GPU `pow` leaves it undefined): signed
/// for an integral `y`, NaN otherwise (but `+inf` or `+0` for -inf), and 1 for `y = 0`. The
/// exponents `torch.pow` computes without `pow` (0, 1, 2, 3, -1 and -2 by multiplication, 0.5
/// and -0.5 by a square root, as the CPU backends do) take its arithmetic, which also gets
/// every sign, zero, infinity and NaN right (`sqrt` gives NaN for `-inf` and `-0` for `-0`, as
/// in PyTorch); `y` is uniform across a launch, so those branches do not diverge, and they skip
/// the general path's per-value tests (and GPUs' `pow`, an inexact `exp2(y * log2(x))`).
#[cube]
pub fn pow_signed<F: Float>(x: F, y: F, nan: F) -> F {
    let mut result = x;
    if y == F::new(0.0) {
        // 1 for every base, infinities and NaN included (a GPU's `exp2(0 * log2(inf))` is NaN).
        result = F::new(1.0);
    } else if y == F::new(2.0) {
        result = x * x;
    } else if y == F::new(3.0) {
        result = x * x * x;
    } else if y == F::new(0.5) {
        result = F::sqrt(x);
    } else if y == F::new(-0.5) {
        result = F::new(1.0) / F::sqrt(x);
    } else if y == F::new(-1.0) {
        result = F::new(1.0) / x;
    } else if y == F::new(-2.0) {
        result = F::new(1.0) / (x * x);
    } else if y != F::new(1.0) {
        result = pow_general::<F>(x, y, nan);
    }
    result
}

/// [`pow_signed()`] through `powf` of `|x|` (`y` not 0), with the sign rules applied here.
#[cube]
fn pow_general<F: Float>(x: F, y: F, nan: F) -> F {
    let mut result = F::powf(F::abs(x), y);
    if f32::is_nan(f32::cast_from(x)) {
        result = x;
    } else if x == F::new(0.0) {
        result = select(y > F::new(0.0), F::new(0.0), F::new(1.0) / F::abs(x));
    } else if x < F::new(0.0) {
        // An odd integral `y` keeps the sign; any other `y` gives NaN for a finite base, and
        // `|x|^y` (+inf or +0) for -inf, as C's `pow` (and so PyTorch) does.
        let half = y * F::new(0.5);
        let integral = F::floor(y) == y;
        if integral && F::floor(half) != half {
            result = -result;
        } else if !integral && x != neg_infinity::<F>() {
            result = nan;
        }
    }
    result
}

/// `torch.sign`: -1, 0 or 1, NaN for NaN.
#[cube]
pub(crate) fn sign<F: Float>(x: F) -> F {
    let mut result = x * F::new(0.0);
    if x > F::new(0.0) {
        result = F::new(1.0);
    } else if x < F::new(0.0) {
        result = F::new(-1.0);
    }
    result
}

/// The elements one unit of a pool kernel writes: up to `block_w` consecutive ones along W
/// from `w0`, at `(d, h)` of `plane` (batch x channel) and of the `lanes - 1` planes of the
/// next channels, in a tensor of the spatial size the unit's row runs along; element `w` of
/// `plane` is `first + w * step`. NCDHW tensors (`step` 1, one lane) give a unit's row to
/// consecutive units; channels-last ones (NDHWC in memory, as Burn's convolutions leave
/// theirs; `step` the channel count) give consecutive units consecutive runs of `lanes`
/// channels, so that their reads of channels-last tensors and their writes are contiguous
/// within a unit's vector and across units.
#[derive(CubeType)]
pub(crate) struct RowBlock {
    pub plane: usize,
    pub d: usize,
    pub h: usize,
    pub w0: usize,
    pub first: usize,
    pub step: usize,
}

/// [`RowBlock`] of unit `unit` when rows are `size.w` long and each takes `w_blocks` units.
#[cube]
pub(crate) fn row_block(
    args: &PoolArgs,
    size: &Index3,
    unit: usize,
    w_blocks: usize,
    #[comptime] block_w: usize,
    #[comptime] channels_last: bool,
    #[comptime] lanes: usize,
) -> RowBlock {
    let mut row = unit / w_blocks;
    let mut block = unit % w_blocks;
    let mut step = 1usize;
    let groups = args.channels / lanes;
    if comptime![channels_last] {
        // `row` is `(n, d, h)` here, and the unit's run of channels varies fastest.
        let rest = unit / groups;
        row = rest / w_blocks;
        block = rest % w_blocks;
        step = args.channels;
    }
    let h = row % size.h;
    let d = (row / size.h) % size.d;
    let mut plane = row / (size.h * size.d);
    let mut first = row * size.w;
    if comptime![channels_last] {
        let channel = (unit % groups) * lanes;
        plane = plane * args.channels + channel;
        first = first * args.channels + channel;
    }
    RowBlock {
        plane,
        d,
        h,
        w0: block * block_w,
        first,
        step,
    }
}

/// Offset of plane `plane` (batch x channel) of a tensor whose batch and channel strides
/// are `stride_n` and `stride_c`.
#[cube]
pub(crate) fn plane_offset(
    args: &PoolArgs,
    stride_n: usize,
    stride_c: usize,
    plane: usize,
) -> usize {
    (plane / args.channels) * stride_n + (plane % args.channels) * stride_c
}

/// A window's term of a sum: the value (`Avg`) or its signed `p`-th power (`Lp`, `LpShare`).
#[cube]
pub(crate) fn sum_term<F: Float, A: Float>(
    value: F,
    args: &PoolArgs,
    #[comptime] reduction: Reduction,
) -> A {
    if comptime![reduction == Reduction::Avg] {
        A::cast_from(value)
    } else {
        A::cast_from(pow_signed::<F>(
            value,
            F::cast_from(args.norm),
            not_a_number::<F>(),
        ))
    }
}

/// PyTorch's average divisor: `divisor_override` if set, else the window's taps inside the
/// input (`count`) or, with `count_include_pad`, its volume clipped to the padded input.
#[cube]
pub(crate) fn average_divisor<A: Float>(
    args: &PoolArgs,
    count: usize,
    padded: usize,
    #[comptime] count_include_pad: bool,
) -> A {
    let mut divisor = A::cast_from(count);
    if comptime![count_include_pad] {
        divisor = A::cast_from(padded);
    }
    if args.divisor_override != 0.0 {
        divisor = A::cast_from(args.divisor_override);
    }
    divisor
}

/// Write output `at` of a sum reduction over `count` taps (`padded`: the window volume
/// clipped to the padded input): [`sum_value()`], with `out_grad[at]` for `LpShare`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_sum<F: Float, A: Float>(
    out: &mut Tensor<F>,
    out_grad: &Tensor<F>,
    args: &PoolArgs,
    at: usize,
    sum: A,
    count: usize,
    padded: usize,
    #[comptime] reduction: Reduction,
    #[comptime] count_include_pad: bool,
) {
    let mut grad = F::new(0.0);
    if comptime![reduction == Reduction::LpShare] {
        grad = out_grad[at];
    }
    out[at] = sum_value::<F, A>(grad, args, sum, count, padded, reduction, count_include_pad);
}

/// The output of a sum reduction over `count` taps (`padded`: the window volume clipped to the
/// padded input): the average by the divisor rule, the LP norm, or the LP backward share of
/// the output gradient `grad`.
#[cube]
pub(crate) fn sum_value<F: Float, A: Float>(
    grad: F,
    args: &PoolArgs,
    sum: A,
    count: usize,
    padded: usize,
    #[comptime] reduction: Reduction,
    #[comptime] count_include_pad: bool,
) -> F {
    let mut result = F::new(0.0);
    if comptime![reduction == Reduction::Avg] {
        let divisor = average_divisor::<A>(args, count, padded, count_include_pad);
        result = F::cast_from(sum / divisor);
    } else {
        let nan = not_a_number::<F>();
        let kernel_volume = volume(&args.kernel);
        let total = F::cast_from(sum * A::cast_from(kernel_volume) / A::cast_from(count));
        // NaN is tested first: GPU float comparisons with NaN differ between runtimes.
        if f32::is_nan(f32::cast_from(total)) {
            result = nan;
        } else if total != F::new(0.0) {
            if comptime![reduction == Reduction::Lp] {
                result = pow_signed::<F>(total, F::cast_from(args.inv_norm), nan);
            } else {
                let slope = pow_signed::<F>(total, F::cast_from(args.inv_norm_minus_one), nan);
                result = lp_window_share::<F>(grad, slope, args, count);
            }
        }
    }
    result
}

/// An LP window's share of its output gradient `grad`, given the slope of its root
/// (`total^(1/p - 1)`): `grad / p * slope * K / count` (`K / count` rescales a partial
/// window, as the forward does).
#[cube]
pub(crate) fn lp_window_share<G: Float>(grad: G, slope: G, args: &PoolArgs, count: usize) -> G {
    let scale = G::cast_from(volume(&args.kernel)) / G::cast_from(count);
    grad * G::cast_from(args.inv_norm) * slope * scale
}

/// Whether `value` replaces `best` in a max: it is larger, or NaN (the last NaN wins, as in
/// PyTorch). NaN is tested explicitly: float comparisons with NaN are not ordered the same way
/// on every runtime.
#[cube]
pub(crate) fn beats<F: Float>(value: F, best: F) -> bool {
    let value_is_nan = f32::is_nan(f32::cast_from(value));
    value_is_nan || (!f32::is_nan(f32::cast_from(best)) && value > best)
}

/// Taps of a window [`pool_forward()`] walks per loop iteration, unrolled: Mesa's lavapipe (CI's
/// device) ends a shader loop after 65535 iterations, counting those of the loops nested in it,
/// so a unit's windows may hold up to `65535 * TAPS_PER_ITERATION` taps in all.
pub const TAPS_PER_ITERATION: usize = 16;

/// Where [`pool_forward()`]'s walk over a window stands: the tap's number in row-major order (of
/// `taps`), its D, H and W steps, its W position, and the start of its row in `x` and in the
/// flat index of the unpadded plane; with the window's spans and `x`'s layout, to step on.
#[derive(CubeType)]
pub struct WindowWalk {
    tap: usize,
    taps: usize,
    td: usize,
    th: usize,
    tw: usize,
    w: usize,
    row_at: usize,
    row_index: usize,
    d_start: usize,
    d_step: usize,
    h_start: usize,
    h_step: usize,
    h_count: usize,
    w_start: usize,
    w_step: usize,
    w_count: usize,
    base: usize,
    stride_d: usize,
    stride_h: usize,
    in_h: usize,
    in_w: usize,
}

/// The walk at the first tap of the window of spans `sd`, `sh`, `sw`, over `x` from `base`.
#[cube]
fn window_walk(
    sd: &Span,
    sh: &Span,
    sw: &Span,
    args: &PoolArgs,
    base: usize,
    stride_d: usize,
    stride_h: usize,
) -> WindowWalk {
    let mut walk = WindowWalk {
        tap: 0,
        taps: sd.count * sh.count * sw.count,
        td: 0,
        th: 0,
        tw: 0,
        w: sw.start,
        row_at: 0,
        row_index: 0,
        d_start: sd.start,
        d_step: sd.step,
        h_start: sh.start,
        h_step: sh.step,
        h_count: sh.count,
        w_start: sw.start,
        w_step: sw.step,
        w_count: sw.count,
        base,
        stride_d,
        stride_h,
        in_h: args.in_size.h,
        in_w: args.in_size.w,
    };
    enter_row(&mut walk);
    walk
}

/// Point `walk` at the start of its row `(td, th)`: the only place the row's offsets are
/// multiplied out.
#[cube]
fn enter_row(walk: &mut WindowWalk) {
    let d = walk.d_start + walk.td * walk.d_step;
    let h = walk.h_start + walk.th * walk.h_step;
    walk.row_at = walk.base + d * walk.stride_d + h * walk.stride_h;
    walk.row_index = (d * walk.in_h + h) * walk.in_w;
}

/// Step `walk` to its next tap: along the row, else to the next row's start.
#[cube]
fn next_tap(walk: &mut WindowWalk) {
    walk.tap += 1;
    walk.tw += 1;
    walk.w += walk.w_step;
    if walk.tw == walk.w_count {
        walk.tw = 0;
        walk.w = walk.w_start;
        walk.th += 1;
        if walk.th == walk.h_count {
            walk.th = 0;
            walk.td += 1;
        }
        enter_row(walk);
    }
}

/// Reduce the windows of `block_w` consecutive outputs along the last axis per unit (the
/// unit's indices and its D and H spans are worked out once; integer divisions dominate a
/// small window's cost on some devices). `x` is read through strides; `out` (and `indices`)
/// is channels-last when `channels_last` (see `RowBlock`). `Max` also writes `indices`
/// (flat in the unpadded input plane); `LpShare` reads `out_grad` (laid out as `out`).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_forward<F: Float, I: Int, A: Float>(
    x: &Tensor<F>,
    spans: &Tensor<u32>,
    samples: &Tensor<F>,
    out_grad: &Tensor<F>,
    out: &mut Tensor<F>,
    indices: &mut Tensor<I>,
    args: PoolArgs,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
    #[comptime] abs: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
    #[comptime] channels_last: bool,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let w_blocks = args.out_size.w.div_ceil(block_w);
    let rows = out.len() / args.out_size.w;
    if ABSOLUTE_POS >= rows * w_blocks {
        terminate!();
    }
    let unit = row_block(
        &args,
        &args.out_size,
        ABSOLUTE_POS,
        w_blocks,
        block_w,
        channels_last,
        1usize,
    );
    let (plane, od, oh, ow0) = (unit.plane, unit.d, unit.h, unit.w0);
    let sd = span_of::<F>(spans, samples, &args, plane, od, 0usize, placement);
    let sh = span_of::<F>(spans, samples, &args, plane, oh, 1usize, placement);
    let (stride_d, stride_h, stride_w) = (x.stride(2), x.stride(3), x.stride(4));
    let base = plane_offset(&args, x.stride(0), x.stride(1), plane);
    let ow_end = min(ow0 + block_w, args.out_size.w);
    for ow in ow0..ow_end {
        let sw = span_of::<F>(spans, samples, &args, plane, ow, 2usize, placement);
        let at = unit.first + ow * unit.step;
        if comptime![reduction == Reduction::Max] {
            let mut best = neg_infinity::<F>();
            // PyTorch's start: the first tap, kept if every tap is -inf.
            let mut walk = window_walk(&sd, &sh, &sw, &args, base, stride_d, stride_h);
            let mut best_index = walk.row_index + walk.w;
            while walk.tap < walk.taps {
                #[unroll]
                for _ in 0..TAPS_PER_ITERATION {
                    if walk.tap < walk.taps {
                        let mut value = x[walk.row_at + walk.w * stride_w];
                        if comptime![abs] {
                            value = F::abs(value);
                        }
                        if beats::<F>(value, best) {
                            best = value;
                            best_index = walk.row_index + walk.w;
                        }
                        next_tap(&mut walk);
                    }
                }
            }
            out[at] = best;
            indices[at] = I::cast_from(best_index);
        } else {
            // Window sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for
            // f64), pairwise: this kernel runs the windows too large for `sliding`.
            let mut acc = pairwise_sum::<A>();
            let mut walk = window_walk(&sd, &sh, &sw, &args, base, stride_d, stride_h);
            while walk.tap < walk.taps {
                #[unroll]
                for _ in 0..TAPS_PER_ITERATION {
                    if walk.tap < walk.taps {
                        let read = x[walk.row_at + walk.w * stride_w];
                        pairwise_add::<A>(&mut acc, sum_term::<F, A>(read, &args, reduction));
                        next_tap(&mut walk);
                    }
                }
            }
            let sum = pairwise_value::<A>(&acc);
            let count = sd.count * sh.count * sw.count;
            let padded = sd.padded * sh.padded * sw.padded;
            write_sum::<F, A>(
                out,
                out_grad,
                &args,
                at,
                sum,
                count,
                padded,
                reduction,
                count_include_pad,
            );
        }
    }
}
