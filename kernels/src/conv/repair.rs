//! The repair of each pass's result: a GEMM over a padded operand multiplies a zero of the
//! padding (or of the stride's holes) by a weight or an output gradient, so one that is not
//! finite turns an element the definition leaves finite into NaN (`0 * inf`), where the
//! definition sums only the taps inside the input (as PyTorch's input gradients and oneDNN's
//! convolutions do, and Burn's CubeCL kernels). Every such element is non-finite, and any
//! element with no non-finite product is exact as computed, so one pass per result recomputes
//! by the definition exactly the elements that came out non-finite. A unit checks one element;
//! one that is finite (as every one is where the operands are) costs one load.

use cubecl::prelude::*;

use crate::axes::{offset, unflatten, volume};

use super::operands::{
    read_layout, store_position, tap_position, weight_index, written_layout, written_size,
};
use super::{ConvArgs, GemmKind};

/// Terms a unit sums per loop iteration, unrolled: Mesa's lavapipe (CI's device) ends a loop
/// after 65535 iterations, so a sum of more terms than that would silently stop short; this
/// one reaches 2^20 terms there (a weight gradient over a million output positions).
const TERMS_PER_ITERATION: usize = 16;

/// Whether `value` is neither NaN nor infinite.
#[cube]
fn is_finite<F: Float>(value: F) -> bool {
    let value = f32::cast_from(value);
    !f32::is_nan(value) && !f32::is_inf(value)
}

/// Recompute every non-finite element of `out`, the result of a forward (`kind` `Forward`:
/// `lhs` = x) or input-gradient (`Data`: `lhs` = output gradient) GEMM of `args` over `lhs`
/// and the contiguous weight `rhs`, plus `bias` where it carries one (as `conv_transpose`'s
/// forward pass, an input gradient, does), by the definition. A unit checks one element, in
/// logical order (batch, channel, position) of the side it writes.
#[cube(launch, address_type = "dynamic")]
pub fn repair_gemm<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    elements: usize,
    #[comptime] kind: GemmKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= elements {
        terminate!();
    }
    let side = written_size(&args, kind);
    // The channels of a group on the written side, and those each of its sums runs over.
    let mut written = args.out_channels;
    let mut reduced = args.in_channels;
    if comptime![kind == GemmKind::Data] {
        written = args.in_channels;
        reduced = args.out_channels;
    }
    let positions = volume(&side);
    let at = unflatten(ABSOLUTE_POS % positions, &side);
    let channel = (ABSOLUTE_POS / positions) % (args.groups * written);
    let batch = ABSOLUTE_POS / positions / (args.groups * written);
    if is_finite::<F>(out[offset(&written_layout(&args, kind), batch, channel, &at)]) {
        terminate!();
    }
    let (group, n) = (channel / written, channel % written);
    let layout = read_layout(&args, kind);
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
                let mut w_at = weight_index(&args, channel, c, tap);
                if comptime![kind == GemmKind::Data] {
                    w_at = weight_index(&args, reduced_channel, n, tap);
                }
                let (read_at, inside) =
                    tap_position(&args, &at, &unflatten(tap, &args.kernel), kind);
                if inside {
                    let value = lhs[offset(&layout, batch, reduced_channel, &read_at)];
                    acc += A::cast_from(value) * A::cast_from(rhs[w_at]);
                }
            }
        }
    }
    store_position::<F, A>(out, bias, &args, group, 0, batch, &at, n, acc, kind);
}

/// Recompute every non-finite element of the contiguous `weight_grad` (the weight gradient of
/// `args` over `x` and `out_grad`, `batch` images) by the definition. A unit checks one
/// weight.
#[cube(launch, address_type = "dynamic")]
pub fn repair_weight<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    weight_grad: &mut Tensor<F>,
    args: ConvArgs,
    batch: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let taps = volume(&args.kernel);
    if ABSOLUTE_POS >= args.groups * args.out_channels * args.in_channels * taps {
        terminate!();
    }
    if is_finite::<F>(weight_grad[ABSOLUTE_POS]) {
        terminate!();
    }
    let tap = unflatten(ABSOLUTE_POS % taps, &args.kernel);
    let c = (ABSOLUTE_POS / taps) % args.in_channels;
    let channel = ABSOLUTE_POS / taps / args.in_channels;
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
                let (source, inside) = tap_position(&args, &at, &tap, GemmKind::Forward);
                if inside {
                    let read = x[offset(&args.in_layout, n, in_channel, &source)];
                    let gradient = out_grad[offset(&args.out_layout, n, channel, &at)];
                    acc += A::cast_from(gradient) * A::cast_from(read);
                }
            }
        }
    }
    weight_grad[ABSOLUTE_POS] = F::cast_from(acc);
}
