//! The repair of each pass's result: a GEMM over a padded operand multiplies a zero of the
//! padding (or of the stride's holes) by a weight or an output gradient, so one that is not
//! finite turns an element the definition leaves finite into NaN (`0 * inf`), where the
//! definition sums only the taps inside the input (as PyTorch's input gradients and oneDNN's
//! convolutions do, and Burn's CubeCL kernels). Every such element is non-finite, and any
//! element with no non-finite product is exact as computed, so one pass per result recomputes
//! by the definition exactly the elements that came out non-finite. A unit checks one element;
//! one that is finite (as every one is where the operands are) costs one load. Where the
//! result comes from a kernel that is not ours, [`nonfinite_flags()`] first tests the weight, so a
//! finite one costs no pass over the result.

use cubecl::prelude::*;

use crate::activation::{ActivationKind, epilogue};
use crate::axes::{Index3, Layout, offset, unflatten, volume};

use super::operands::{
    read_layout, row_of, store_position, tap_position, weight_index, weight_row_index,
    written_channels, written_layout, written_size,
};
use super::{ConvArgs, GemmArgs, GemmKind, Phase, split_sum};

/// Terms a unit sums per loop iteration, unrolled: Mesa's lavapipe (CI's device) ends a loop
/// after 65535 iterations, so a sum of more terms than that would silently stop short; this
/// one reaches 2^20 terms there (a weight gradient over a million output positions).
pub const TERMS_PER_ITERATION: usize = 16;

/// Whether `value` is neither NaN nor infinite.
#[cube]
pub(crate) fn is_finite<F: Float>(value: F) -> bool {
    let value = f32::cast_from(value);
    !f32::is_nan(value) && !f32::is_inf(value)
}

/// Units per cube of [`nonfinite_flags()`].
pub const SCAN_UNITS: usize = 256;

/// `flags[cube] = 1` where a value of `values` that cube scanned is not finite, else 0: the
/// cheap test over a weight that decides, on the device, whether a GEMM's result needs
/// [`repair_gemm()`] (a finite weight meets the padding's zeros with zeros). Every cube writes
/// its flag, so the flags need no clearing and no atomics; launch [`SCAN_UNITS`] units per cube.
#[cube(launch, address_type = "dynamic")]
pub fn nonfinite_flags<F: Float>(
    values: &Tensor<F>,
    flags: &mut Tensor<u32>,
    #[define(F)] _dtype: ElemType,
) {
    let len = values.len();
    let step = CUBE_COUNT * SCAN_UNITS;
    let mut found = 0u32;
    let mut e = ABSOLUTE_POS;
    while e < len {
        #[unroll]
        for _ in 0..TERMS_PER_ITERATION {
            if e < len && !is_finite::<F>(values[e]) {
                found = 1;
            }
            e += step;
        }
    }
    let mut found_by = Shared::<[u32]>::new_slice(SCAN_UNITS);
    found_by[UNIT_POS as usize] = found;
    sync_cube();
    if UNIT_POS == 0 {
        let mut any = 0u32;
        for unit in 0..SCAN_UNITS {
            any |= found_by[unit];
        }
        flags[CUBE_POS] = any;
    }
}

/// Recompute every non-finite element of `out`, the result of a forward (`kind` `Forward`:
/// `lhs` = x) or input-gradient (`Data`: `lhs` = output gradient) GEMM of `args` over `lhs`
/// and the contiguous weight `rhs`, plus `bias` where it carries one (as `conv_transpose`'s
/// forward pass, an input gradient, does), by the definition, unless no `flags` (the weight's
/// [`nonfinite_flags()`]) is set: then every unit exits at once. Units take elements in logical
/// order (batch, channel, position) of the side written, the launch's whole grid apart. (Our
/// own kernels repair their results as they store them: [`repair_at()`].)
#[cube(launch, address_type = "dynamic")]
pub fn repair_gemm<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    flags: &Tensor<u32>,
    args: ConvArgs,
    elements: usize,
    #[comptime] kind: GemmKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let mut any = 0u32;
    for cube in 0..flags.len() {
        any |= flags[cube];
    }
    if any == 0 {
        terminate!();
    }
    let step = CUBE_COUNT * CUBE_DIM as usize;
    let mut element = ABSOLUTE_POS;
    while element < elements {
        repair_element::<F, A>(lhs, rhs, bias, out, &args, element, kind);
        element += step;
    }
}

/// [`repair_gemm()`] of the element `element` (in logical order).
#[cube]
fn repair_element<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: &ConvArgs,
    element: usize,
    #[comptime] kind: GemmKind,
) {
    let side = written_size(args, kind);
    let channels = args.groups * written_channels(args, kind);
    let positions = volume(&side);
    let at = unflatten(element % positions, &side);
    let channel = (element / positions) % channels;
    let batch = element / positions / channels;
    // Another kernel stored the result; its activation, if any, runs after this repair.
    repair_at::<F, A>(
        lhs, rhs, bias, out, args, batch, channel, &at, 0.0, None, kind,
    );
}

/// Recompute by the definition the element at (`batch`, `channel`, `at`) of `out`, the result
/// of a forward or input-gradient GEMM as [`repair_gemm()`] takes it, if it is not finite, and
/// store it with the fused `activation`. A stored value with the activation applied is tested
/// the same way: the padding only ever makes NaN of a sum, and every activation keeps NaN.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn repair_at<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: &ConvArgs,
    batch: usize,
    channel: usize,
    at: &Index3,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] kind: GemmKind,
) {
    // The channels of a group on the written side, and those each of its sums runs over.
    let written = written_channels(args, kind);
    let mut reduced = args.in_channels;
    if comptime![kind == GemmKind::Data] {
        reduced = args.out_channels;
    }
    if !is_finite::<F>(out[offset(&written_layout(args, kind), batch, channel, at)]) {
        let (group, n) = (channel / written, channel % written);
        let layout = read_layout(args, kind);
        let taps = volume(&args.kernel);
        let terms = reduced * taps;
        let mut acc = A::new(0.0);
        for block in 0..terms.div_ceil(TERMS_PER_ITERATION) {
            #[unroll]
            for i in 0..TERMS_PER_ITERATION {
                let term = block * TERMS_PER_ITERATION + i;
                if term < terms {
                    let (c, tap) = (term / taps, term % taps);
                    let reduced_channel = group * reduced + c;
                    // The weight is `[out channel, in channel of the group, tap]` in either pass.
                    let mut w_at = weight_index(args, channel, c, tap);
                    if comptime![kind == GemmKind::Data] {
                        w_at = weight_index(args, reduced_channel, n, tap);
                    }
                    let (read_at, inside) =
                        tap_position(args, at, &unflatten(tap, &args.kernel), kind);
                    if inside {
                        let value = lhs[offset(&layout, batch, reduced_channel, &read_at)];
                        acc += A::cast_from(value) * A::cast_from(rhs[w_at]);
                    }
                }
            }
        }
        store_position::<F, A>(
            out, bias, args, group, 0, batch, at, n, acc, slope, activation, kind,
        );
    }
}

/// Recompute every non-finite element of `weight_grad` (the weight gradient of `args` over `x`
/// and `out_grad`, `batch` images, laid out as `weight_layout`: output channel, input channel
/// of the group, tap) by the definition. A unit checks one weight, in logical order.
#[cube(launch, address_type = "dynamic")]
pub fn repair_weight<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    weight_grad: &mut Tensor<F>,
    args: ConvArgs,
    weight_layout: Layout,
    batch: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let taps = volume(&args.kernel);
    if ABSOLUTE_POS >= args.groups * args.out_channels * args.in_channels * taps {
        terminate!();
    }
    let tap = ABSOLUTE_POS % taps;
    let c = (ABSOLUTE_POS / taps) % args.in_channels;
    let channel = ABSOLUTE_POS / taps / args.in_channels;
    let at = offset(&weight_layout, channel, c, &unflatten(tap, &args.kernel));
    repair_weight_at::<F, A>(x, out_grad, weight_grad, &args, at, channel, c, tap, batch);
}

/// Recompute by the definition the weight gradient of output channel `channel`, input channel
/// `c` of its group and flat tap `tap`, at `index` of `weight_grad`, if it is not finite.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn repair_weight_at<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    weight_grad: &mut Tensor<F>,
    args: &ConvArgs,
    index: usize,
    channel: usize,
    c: usize,
    tap: usize,
    batch: usize,
) {
    if !is_finite::<F>(weight_grad[index]) {
        let tap = unflatten(tap, &args.kernel);
        let in_channel = channel / args.out_channels * args.in_channels + c;
        let positions = volume(&args.out_size);
        let terms = batch * positions;
        let mut acc = A::new(0.0);
        for block in 0..terms.div_ceil(TERMS_PER_ITERATION) {
            #[unroll]
            for i in 0..TERMS_PER_ITERATION {
                let term = block * TERMS_PER_ITERATION + i;
                if term < terms {
                    let (n, at) = (
                        term / positions,
                        unflatten(term % positions, &args.out_size),
                    );
                    let (source, inside) = tap_position(args, &at, &tap, GemmKind::Forward);
                    if inside {
                        let read = x[offset(&args.in_layout, n, in_channel, &source)];
                        let gradient = out_grad[offset(&args.out_layout, n, channel, &at)];
                        acc += A::cast_from(gradient) * A::cast_from(read);
                    }
                }
            }
        }
        weight_grad[index] = F::cast_from(acc);
    }
}

/// Recompute by the definition the element `C[m, n]` of group `group` that a launch stored in
/// `out`, if it is not finite.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn repair_stored<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: &ConvArgs,
    gemm: &GemmArgs,
    phase: &Phase,
    group: usize,
    m: usize,
    n: usize,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] kind: GemmKind,
) {
    if comptime![kind == GemmKind::Weight] {
        // `lhs` is the output gradient, `rhs` the input; `k` runs over images and positions.
        let index = weight_row_index(args, group, m, n);
        let batch = gemm.k_len / volume(&args.out_size);
        repair_weight_flat::<F, A>(rhs, lhs, out, args, index, batch);
    } else {
        let row = row_of(args, phase, m, kind);
        let channel = group * written_channels(args, kind) + n;
        repair_at::<F, A>(
            lhs, rhs, bias, out, args, row.batch, channel, &row.pos, slope, activation, kind,
        );
    }
}

/// Recompute by the definition the weight gradient at flat index `index` of the contiguous
/// `weight_grad`, if it is not finite.
#[cube]
pub fn repair_weight_flat<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    weight_grad: &mut Tensor<F>,
    args: &ConvArgs,
    index: usize,
    batch: usize,
) {
    let taps = volume(&args.kernel);
    let tap = index % taps;
    let c = (index / taps) % args.in_channels;
    let channel = index / taps / args.in_channels;
    repair_weight_at::<F, A>(
        x,
        out_grad,
        weight_grad,
        args,
        index,
        channel,
        c,
        tap,
        batch,
    );
}

/// `out[i] = sum_s partials[s * len + i]`, summed pairwise in split order as [`sum_splits`]
/// does, then repaired by the definition where it is not finite: the second pass of a split
/// GEMM whose geometry meets padding. `kind` names the GEMM: a forward or input gradient's
/// `out` is dense (contiguous or channels-last) and its operands `lhs`, `rhs`, `bias` as
/// [`repair_gemm()`] takes them, its sum stored with the fused `activation`; a weight
/// gradient's is contiguous, `lhs` the output gradient, `rhs` the input and `batch` the
/// images.
///
/// [`sum_splits`]: crate::conv::sum_splits()
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn sum_splits_exact<F: Float, A: Float>(
    partials: &Tensor<F>,
    out: &mut Tensor<F>,
    splits: usize,
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    args: ConvArgs,
    batch: usize,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] kind: GemmKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= out.len() {
        terminate!();
    }
    let sum = split_sum::<F, A>(partials, splits, out.len(), ABSOLUTE_POS);
    out[ABSOLUTE_POS] = epilogue::<F, A>(sum, slope, activation);
    if comptime![kind == GemmKind::Weight] {
        repair_weight_flat::<F, A>(rhs, lhs, out, &args, ABSOLUTE_POS, batch);
    } else {
        // A dense layout's coordinate along each axis is the index over its stride, modulo
        // its size.
        let layout = written_layout(&args, kind);
        let side = written_size(&args, kind);
        let channels = args.groups * written_channels(&args, kind);
        let at = Index3 {
            d: coordinate(ABSOLUTE_POS, layout.at.d, side.d),
            h: coordinate(ABSOLUTE_POS, layout.at.h, side.h),
            w: coordinate(ABSOLUTE_POS, layout.at.w, side.w),
        };
        let channel = coordinate(ABSOLUTE_POS, layout.channel, channels);
        let batch = coordinate(ABSOLUTE_POS, layout.batch, batch);
        repair_at::<F, A>(
            lhs, rhs, bias, out, &args, batch, channel, &at, slope, activation, kind,
        );
    }
}

/// The coordinate along an axis of `size` and `stride` of the element at `index` of a dense
/// tensor.
#[cube]
fn coordinate(index: usize, stride: usize, size: usize) -> usize {
    let mut coordinate = 0;
    if size > 1 {
        coordinate = (index / stride) % size;
    }
    coordinate
}
