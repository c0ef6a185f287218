//! Pooling over a regular sliding window with a comptime kernel (up to 7 per axis): window
//! positions are computed in the kernel, the taps are unrolled, and a tap in the padding is
//! masked rather than branched around, so the common pools (the `resnet_stem_maxpool` row)
//! skip the span walk of `pool::pool_forward`, which runs larger windows. Same
//! semantics as that kernel: for `Max`, the first maximum wins, a NaN wins over anything (the
//! last NaN), and a window whose taps are all -inf keeps its first tap inside the input; sums
//! add the taps inside the input, in the same order, and divide or take the norm by
//! `pool::sum_value`.

use cubecl::prelude::*;

use crate::axes::{along, tap_source};
use crate::pool::{
    PoolArgs, Reduction, beats, neg_infinity, plane_offset, row_block, sliding_span, sum_term,
    sum_value,
};

/// One axis's tap of a window, by the sliding-window tap rule ([`tap_source`]): its input position, clamped
/// into the input so that a masked tap still reads a valid address, and whether it lies inside.
#[cube]
fn tap(args: &PoolArgs, o: usize, t: usize, #[comptime] axis: usize) -> (usize, bool) {
    let len = along(&args.in_size, axis);
    let reach = t * along(&args.dilation, axis);
    let (at, inside) = tap_source(
        o,
        reach,
        along(&args.stride, axis),
        along(&args.padding, axis),
        len,
    );
    (min(at, len - 1), inside)
}

/// One unit reduces `block_w` consecutive outputs along W of `N` planes (one unless
/// channels-last: then `N` consecutive channels, read and written as one vector); `kernel` is
/// the window (D, H, W). `out` (and `indices`) is channels-last when `channels_last` (see
/// `pool::RowBlock`). `Max` writes `indices` (flat in the unpadded input plane); `LpShare`
/// reads `out_grad` (laid out as `out`).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_sliding<F: Float, I: Int, A: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    out_grad: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    indices: &mut Tensor<Vector<I, N>>,
    args: PoolArgs,
    #[comptime] kernel: [usize; 3],
    #[comptime] reduction: Reduction,
    #[comptime] abs: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
    #[comptime] channels_last: bool,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let lanes = N::value();
    let out_w = args.out_size.w;
    let (in_h, in_w) = (args.in_size.h, args.in_size.w);
    let w_blocks = out_w.div_ceil(block_w);
    // `out.len()` counts vectors: rows of W outputs over `lanes`, the rows a unit's lanes take.
    if ABSOLUTE_POS >= out.len() / out_w * w_blocks {
        terminate!();
    }
    let unit = row_block(
        &args,
        &args.out_size,
        ABSOLUTE_POS,
        w_blocks,
        block_w,
        channels_last,
        lanes,
    );
    let (plane, od, oh, ow0) = (unit.plane, unit.d, unit.h, unit.w0);
    let base = plane_offset(&args, x.stride(0), x.stride(1), plane);
    let ow_end = min(ow0 + block_w, out_w);
    // The unit's rows of taps (D x H), shared by its outputs: where each starts in `x`, its
    // flat index in the plane, and whether it lies inside the input.
    let rows_per_window = comptime![kernel[0] * kernel[1]];
    let mut row_at = Array::<usize>::new(rows_per_window);
    let mut row_index = Array::<usize>::new(rows_per_window);
    let mut row_inside = Array::<bool>::new(rows_per_window);
    #[unroll]
    for kd in 0..kernel[0] {
        let (d, d_inside) = tap(&args, od, kd, 0usize);
        #[unroll]
        for kh in 0..kernel[1] {
            let (h, h_inside) = tap(&args, oh, kh, 1usize);
            let r = comptime![kd * kernel[1] + kh];
            row_at[r] = base + d * x.stride(2) + h * x.stride(3);
            row_index[r] = (d * in_h + h) * in_w;
            row_inside[r] = d_inside && h_inside;
        }
    }
    for ow in ow0..ow_end {
        // Element offsets are multiples of `lanes` (the launcher's condition for vectors).
        let at = (unit.first + ow * unit.step) / lanes;
        if comptime![reduction == Reduction::Max] {
            let mut best = Vector::<F, N>::broadcast(neg_infinity::<F>());
            let mut best_index = Vector::<I, N>::broadcast(I::new(0));
            let mut found = false;
            #[unroll]
            for r in 0..rows_per_window {
                #[unroll]
                for kw in 0..kernel[2] {
                    let (w, w_inside) = tap(&args, ow, kw, 2usize);
                    let inside = row_inside[r] && w_inside;
                    let values = x[(row_at[r] + w * x.stride(4)) / lanes];
                    let index = I::cast_from(row_index[r] + w);
                    #[unroll]
                    for lane in 0..lanes {
                        let mut value = values.extract(lane);
                        if comptime![abs] {
                            value = F::abs(value);
                        }
                        let kept = best.extract(lane);
                        let take = inside && (!found || beats::<F>(value, kept));
                        best.insert(lane, select(take, value, kept));
                        best_index.insert(lane, select(take, index, best_index.extract(lane)));
                    }
                    found = found || inside;
                }
            }
            out[at] = best;
            indices[at] = best_index;
        } else {
            // Window sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for f64).
            let mut sums = Array::<A>::new(lanes);
            #[unroll]
            for lane in 0..lanes {
                sums[lane] = A::new(0.0);
            }
            #[unroll]
            for r in 0..rows_per_window {
                #[unroll]
                for kw in 0..kernel[2] {
                    let (w, w_inside) = tap(&args, ow, kw, 2usize);
                    let values = x[(row_at[r] + w * x.stride(4)) / lanes];
                    #[unroll]
                    for lane in 0..lanes {
                        let term = sum_term::<F, A>(values.extract(lane), &args, reduction);
                        sums[lane] += select(row_inside[r] && w_inside, term, A::new(0.0));
                    }
                }
            }
            let sd = sliding_span(&args, od, 0usize);
            let sh = sliding_span(&args, oh, 1usize);
            let sw = sliding_span(&args, ow, 2usize);
            let mut grads = Vector::<F, N>::broadcast(F::new(0.0));
            if comptime![reduction == Reduction::LpShare] {
                grads = out_grad[at];
            }
            let mut result = Vector::<F, N>::broadcast(F::new(0.0));
            #[unroll]
            for lane in 0..lanes {
                let value = sum_value::<F, A>(
                    grads.extract(lane),
                    &args,
                    sums[lane],
                    sd.count * sh.count * sw.count,
                    sd.padded * sh.padded * sw.padded,
                    reduction,
                    count_include_pad,
                );
                result.insert(lane, value);
            }
            out[at] = result;
        }
    }
}
