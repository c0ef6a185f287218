//! The operands of the three GEMMs, gathered from (and `C` scattered back into) the activation
//! tensors through their [`Layout`]s and the contiguous weight: the one home of the
//! convolutions' index formulas, which every schedule shares.

use cubecl::prelude::*;

use crate::activation::{ActivationKind, epilogue};
use crate::axes::{Index3, Layout, flat_index, offset, tap_reader, tap_source, unflatten, volume};

use super::{ConvArgs, DATA_DIGITS, FORWARD_DIGITS, GemmKind, Phase};

/// Size of the side whose positions are the rows of a forward (the output) or input-gradient
/// (the input) GEMM.
#[cube]
pub(crate) fn written_size(args: &ConvArgs, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        args.in_size.clone()
    } else {
        args.out_size.clone()
    }
}

/// Size of the side the taps of a forward (the input) or input-gradient (the output) GEMM
/// read.
#[cube]
pub(crate) fn read_size(args: &ConvArgs, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        args.out_size.clone()
    } else {
        args.in_size.clone()
    }
}

/// Where one tap reads, along one axis: the index on the read side for position `at` (`reach`
/// = tap x dilation), and whether there is one: [`tap_source`] for a forward,
/// [`tap_reader`] for an input gradient (`unit_stride` skips its division).
#[cube]
pub(crate) fn tap_along(
    at: usize,
    reach: usize,
    stride: usize,
    pad: usize,
    len: usize,
    #[comptime] kind: GemmKind,
    #[comptime] unit_stride: bool,
) -> (usize, bool) {
    if comptime![kind == GemmKind::Forward] {
        tap_source(at, reach, stride, pad, len)
    } else {
        tap_reader(at, reach, stride, pad, len, unit_stride)
    }
}

/// The read-side position that tap `tap` of position `at` reaches in a GEMM of `kind` (the
/// input for `GemmKind::Forward`, the output for `GemmKind::Data`), and whether there is one.
#[cube]
pub(crate) fn tap_position(
    args: &ConvArgs,
    at: &Index3,
    tap: &Index3,
    #[comptime] kind: GemmKind,
) -> (Index3, bool) {
    let len = read_size(args, kind);
    let (d, d_inside) = tap_along(
        at.d,
        tap.d * args.dilation.d,
        args.stride.d,
        args.pad.d,
        len.d,
        kind,
        false,
    );
    let (h, h_inside) = tap_along(
        at.h,
        tap.h * args.dilation.h,
        args.stride.h,
        args.pad.h,
        len.h,
        kind,
        false,
    );
    let (w, w_inside) = tap_along(
        at.w,
        tap.w * args.dilation.w,
        args.stride.w,
        args.pad.w,
        len.w,
        kind,
        false,
    );
    (Index3 { d, h, w }, d_inside && h_inside && w_inside)
}

/// `x[b, channel]` at the tap `tap` of output position `out`; zero in the padding.
#[cube]
pub(crate) fn input_tap<F: Float, A: Float>(
    x: &Tensor<F>,
    args: &ConvArgs,
    batch: usize,
    channel: usize,
    out: &Index3,
    tap: &Index3,
) -> A {
    let (at, inside) = tap_position(args, out, tap, GemmKind::Forward);
    let mut value = A::new(0.0);
    if inside {
        value = A::cast_from(x[offset(&args.in_layout, batch, channel, &at)]);
    }
    value
}

/// `out_grad[b, channel]` at the output position whose tap `tap` reads input position `at`;
/// zero when no output position does (off the stride grid or outside the output).
#[cube]
fn output_tap<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    args: &ConvArgs,
    batch: usize,
    channel: usize,
    at: &Index3,
    tap: &Index3,
) -> A {
    let (out, inside) = tap_position(args, at, tap, GemmKind::Data);
    let mut value = A::new(0.0);
    if inside {
        value = A::cast_from(out_grad[offset(&args.out_layout, batch, channel, &out)]);
    }
    value
}

/// Row `m` of `A` with its position decomposed once: `(batch, spatial position)` for the
/// forward and input-gradient GEMMs, whose rows are positions (`local`: an input gradient's
/// position within its phase, `pos` for the others); the channel for the weight gradient's.
#[derive(CubeType, Clone)]
pub struct Row {
    pub index: usize,
    pub batch: usize,
    pub pos: Index3,
    pub local: Index3,
}

/// The size of the box a GEMM's rows run over: the output for the forward GEMM, one phase's
/// positions for the input gradient.
#[cube]
fn row_size(args: &ConvArgs, phase: &Phase, #[comptime] kind: GemmKind) -> Index3 {
    if comptime![kind == GemmKind::Data] {
        phase.count.clone()
    } else {
        args.out_size.clone()
    }
}

#[cube]
pub fn row_of(args: &ConvArgs, phase: &Phase, m: usize, #[comptime] kind: GemmKind) -> Row {
    // The weight gradient's rows need no decomposition.
    let size = row_size(args, phase, kind);
    let len = volume(&size);
    let mut batch = 0;
    let mut index = 0;
    if comptime![kind != GemmKind::Weight] {
        batch = m / len;
        index = m % len;
    }
    let at = unflatten(index, &size);
    let mut d = at.d;
    let mut h = at.h;
    let mut w = at.w;
    if comptime![kind == GemmKind::Data] {
        d = phase.first.d + phase.step.d * d;
        h = phase.first.h + phase.step.h * h;
        w = phase.first.w + phase.step.w * w;
    }
    Row {
        index: m,
        batch,
        pos: Index3 { d, h, w },
        local: at,
    }
}

/// Along one axis, the output that a tap of reach `reach` (from an exact phase's `k` table)
/// meets from position `at` of the phase: `at + reach - back` (the forward's tap rule at unit
/// stride, no division), and whether it is inside the output.
#[cube]
fn phase_tap_along(at: usize, reach: usize, back: usize, len: usize) -> (usize, bool) {
    tap_along(at, reach, 1, back, len, GemmKind::Forward, true)
}

/// `out_grad[b, channel]` at the output that a tap of reach `reach` meets from position
/// `local` of `phase`; zero outside the output.
#[cube]
#[allow(clippy::too_many_arguments)]
fn phase_output_tap<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    args: &ConvArgs,
    phase: &Phase,
    batch: usize,
    channel: usize,
    local: &Index3,
    reach: &Index3,
) -> A {
    let (d, d_inside) = phase_tap_along(local.d, reach.d, phase.back.d, args.out_size.d);
    let (h, h_inside) = phase_tap_along(local.h, reach.h, phase.back.h, args.out_size.h);
    let (w, w_inside) = phase_tap_along(local.w, reach.w, phase.back.w, args.out_size.w);
    let mut value = A::new(0.0);
    if d_inside && h_inside && w_inside {
        let at = Index3 { d, h, w };
        value = A::cast_from(out_grad[offset(&args.out_layout, batch, channel, &at)]);
    }
    value
}

/// One `k` of a GEMM, decoded once for every value of a load that shares it. Forward and
/// input gradient: the reduced channel (counted over every group) and its tap, read from
/// `k_table` (built on the host) so the loads need no divisions, plus an `exact` input
/// gradient's reach of the tap. Weight gradient: the batch (in `channel`) and the output
/// position as an index (in `tap`). `inside`: whether `k` is before the split's end (past it,
/// the rest are zeros and the loads that share this `k` are masked to zero).
#[derive(CubeType, Clone)]
pub struct Reduced {
    pub inside: bool,
    pub channel: usize,
    pub tap: Index3,
    pub reach: Index3,
}

/// [`Reduced`] for `k` of group `group`; not `inside`, reading nothing, from `k_end` on.
#[cube]
pub fn reduced_of(
    k_table: &Tensor<u32>,
    args: &ConvArgs,
    group: usize,
    k: usize,
    k_end: usize,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
) -> Reduced {
    let mut channel = 0;
    // Per axis: Index3 values cannot be reassigned in a branch.
    let mut tap_d = 0;
    let mut tap_h = 0;
    let mut tap_w = 0;
    let mut reach_d = 0;
    let mut reach_h = 0;
    let mut reach_w = 0;
    let inside = k < k_end;
    if !inside {
        // Past the split: nothing to read.
    } else if comptime![kind == GemmKind::Weight] {
        let out_volume = volume(&args.out_size);
        channel = k / out_volume;
        let at = unflatten(k % out_volume, &args.out_size);
        tap_d = at.d;
        tap_h = at.h;
        tap_w = at.w;
    } else {
        let mut at = k * FORWARD_DIGITS;
        let mut channels = args.in_channels;
        if comptime![kind == GemmKind::Data] {
            at = k * DATA_DIGITS;
            channels = args.out_channels;
        }
        channel = group * channels + k_table[at] as usize;
        tap_d = k_table[at + 1] as usize;
        tap_h = k_table[at + 2] as usize;
        tap_w = k_table[at + 3] as usize;
        if comptime![kind == GemmKind::Data && exact] {
            reach_d = k_table[at + 4] as usize;
            reach_h = k_table[at + 5] as usize;
            reach_w = k_table[at + 6] as usize;
        }
    }
    Reduced {
        inside,
        channel,
        tap: Index3 {
            d: tap_d,
            h: tap_h,
            w: tap_w,
        },
        reach: Index3 {
            d: reach_d,
            h: reach_h,
            w: reach_w,
        },
    }
}

/// `A[m, k]` of group `group`, for the row `row` of `m` and `reduced` of `k`. An `exact`
/// input gradient (each launch one stride phase) reads its taps' reaches, any other divides
/// by the stride.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn lhs_value<F: Float, A: Float>(
    lhs: &Tensor<F>,
    args: &ConvArgs,
    phase: &Phase,
    group: usize,
    row: &Row,
    reduced: &Reduced,
    #[comptime] kind: GemmKind,
    #[comptime] exact: bool,
) -> A {
    let value: A;
    if comptime![kind == GemmKind::Weight] {
        // The reduced `channel` is the batch, its `tap` the output position.
        let channel = group * args.out_channels + row.index;
        value = A::cast_from(lhs[offset(&args.out_layout, reduced.channel, channel, &reduced.tap)]);
    } else if comptime![kind == GemmKind::Forward] {
        value = input_tap::<F, A>(
            lhs,
            args,
            row.batch,
            reduced.channel,
            &row.pos,
            &reduced.tap,
        );
    } else if comptime![exact] {
        value = phase_output_tap::<F, A>(
            lhs,
            args,
            phase,
            row.batch,
            reduced.channel,
            &row.local,
            &reduced.reach,
        );
    } else {
        value = output_tap::<F, A>(
            lhs,
            args,
            row.batch,
            reduced.channel,
            &row.pos,
            &reduced.tap,
        );
    }
    value
}

/// Flat index of `weight[out_channel, in_channel (within its group), tap]`.
#[cube]
pub(crate) fn weight_index(
    args: &ConvArgs,
    out_channel: usize,
    in_channel: usize,
    tap: usize,
) -> usize {
    (out_channel * args.in_channels + in_channel) * volume(&args.kernel) + tap
}

/// `B[k, n]` of group `group`, `reduced` being `k`'s. The input gradient's taps are those of
/// the launch's phase.
#[cube]
pub fn rhs_value<F: Float, A: Float>(
    rhs: &Tensor<F>,
    args: &ConvArgs,
    group: usize,
    k: usize,
    reduced: &Reduced,
    n: usize,
    #[comptime] kind: GemmKind,
) -> A {
    let kernel_volume = volume(&args.kernel);
    let value: A;
    if comptime![kind == GemmKind::Forward] {
        let out_channel = group * args.out_channels + n;
        value = A::cast_from(rhs[weight_index(args, out_channel, 0, k)]);
    } else if comptime![kind == GemmKind::Data] {
        let tap = flat_index(0, &args.kernel, &reduced.tap);
        value = A::cast_from(rhs[weight_index(args, reduced.channel, n, tap)]);
    } else {
        let tap = unflatten(n % kernel_volume, &args.kernel);
        let channel = group * args.in_channels + n / kernel_volume;
        value = input_tap::<F, A>(rhs, args, reduced.channel, channel, &reduced.tap, &tap);
    }
    value
}

/// Write `C[m, n]` (`row`: `m` as [`row_of()`] decomposes it) of group `group` into the
/// partial result that starts at `split_base` (0 without split-k; a split-k launch writes one
/// result per split, summed afterwards), adding the bias of the output channel to a forward
/// or input-gradient result when there is one (to split 0's only, so it is added once), then
/// the fused `activation` (`slope`: a leaky ReLU's; the launcher passes one only where the
/// stored value is final).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store<F: Float, A: Float>(
    out: &mut Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    row: &Row,
    n: usize,
    value: A,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] kind: GemmKind,
) {
    if comptime![kind == GemmKind::Weight] {
        store_weight::<F, A>(out, args, group, split_base, row.index, n, value);
    } else {
        store_position::<F, A>(
            out, bias, args, group, split_base, row.batch, &row.pos, n, value, slope, activation,
            kind,
        );
    }
}

/// Where [`store()`] puts `C[m, n]` of group `group` (`row` is row `m`), in the written
/// tensor's flat index (a split-k partial result's, less its `split_base`).
#[cube]
pub fn stored_index(
    args: &ConvArgs,
    group: usize,
    row: &Row,
    n: usize,
    #[comptime] kind: GemmKind,
) -> usize {
    if comptime![kind == GemmKind::Weight] {
        weight_row_index(args, group, row.index, n)
    } else {
        let channel = group * written_channels(args, kind) + n;
        offset(&written_layout(args, kind), row.batch, channel, &row.pos)
    }
}

/// The flat index of a contiguous weight gradient's element at output channel `m` of group
/// `group` and flat (input channel, tap) `n`.
#[cube]
pub(crate) fn weight_row_index(args: &ConvArgs, group: usize, m: usize, n: usize) -> usize {
    let row_len = args.in_channels * volume(&args.kernel);
    (group * args.out_channels + m) * row_len + n
}

/// [`store()`] of a weight gradient: `C[m, n]` is the weight of output channel `m` (of group
/// `group`) at the flat (input channel, tap) `n`.
#[cube]
pub fn store_weight<F: Float, A: Float>(
    out: &mut Tensor<F>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    m: usize,
    n: usize,
    value: A,
) {
    out[split_base + weight_row_index(args, group, m, n)] = F::cast_from(value);
}

/// A group's channels on the side a forward (output) or input-gradient (input) GEMM writes.
#[cube]
pub(crate) fn written_channels(args: &ConvArgs, #[comptime] kind: GemmKind) -> usize {
    if comptime![kind == GemmKind::Data] {
        args.in_channels
    } else {
        args.out_channels
    }
}

/// The layout of the side a forward (the output) or input-gradient (the input) GEMM writes.
#[cube]
pub(crate) fn written_layout(args: &ConvArgs, #[comptime] kind: GemmKind) -> Layout {
    if comptime![kind == GemmKind::Data] {
        args.in_layout.clone()
    } else {
        args.out_layout.clone()
    }
}

/// The layout of the side the taps of a forward (the input) or input-gradient (the output)
/// GEMM read.
#[cube]
pub(crate) fn read_layout(args: &ConvArgs, #[comptime] kind: GemmKind) -> Layout {
    if comptime![kind == GemmKind::Data] {
        args.out_layout.clone()
    } else {
        args.in_layout.clone()
    }
}

/// [`store()`] of a forward or input-gradient result whose row `m` is already split into its
/// batch and its position `at` in the output or input volume. A split-k partial result is
/// laid out as the written side, `split_base` elements further on (the written side is dense,
/// so the splits sum element by element).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn store_position<F: Float, A: Float>(
    out: &mut Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    args: &ConvArgs,
    group: usize,
    split_base: usize,
    batch: usize,
    at: &Index3,
    n: usize,
    value: A,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] kind: GemmKind,
) {
    let channel = group * written_channels(args, kind) + n;
    let mut result = F::cast_from(value);
    #[comptime]
    if let ComptimeOption::Some(bias) = bias {
        result += select(split_base == 0, bias[channel], F::new(0.0));
    }
    result = epilogue::<F, A>(result, slope, activation);
    out[split_base + offset(&written_layout(args, kind), batch, channel, at)] = result;
}
