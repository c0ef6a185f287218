//! The gather-form backward of every pool: one unit per block of input elements along W,
//! looping over the outputs whose windows may hold them (per axis: computed for sliding
//! windows, else read from a host-built `cover` table of `[lo, hi)` per input position), so it
//! needs no atomics and sums in a fixed order (deterministic).

use cubecl::prelude::*;

use crate::axes::{along, volume};
use crate::pool::{
    Placement, PoolArgs, Reduction, Span, average_divisor, div_ceil_step, lp_window_share,
    not_a_number, plane_offset, pow_signed, row_block, sign, span_of,
};

/// Whether `span` has input position `i` as a tap.
#[cube]
fn covers(span: &Span, i: usize) -> bool {
    let mut inside = false;
    if i >= span.start {
        let offset = i - span.start;
        // Unit steps (every window but dilated ones) need no division.
        if span.step == 1 {
            inside = offset < span.count;
        } else {
            inside = offset.is_multiple_of(span.step) && offset / span.step < span.count;
        }
    }
    inside
}

/// The outputs `lo..hi` along `axis` whose windows may hold input position `i`: computed for
/// sliding windows (exact up to dilation gaps, which [`covers()`] or the indices rule out),
/// read from the `cover` table otherwise (`(0, 0)` for none).
#[cube]
fn cover_of(
    cover: &Tensor<u32>,
    args: &PoolArgs,
    i: usize,
    #[comptime] axis: usize,
    #[comptime] placement: Placement,
) -> (usize, usize) {
    if comptime![placement == Placement::Sliding] {
        sliding_cover(args, i, axis)
    } else {
        let mut entry = i;
        if comptime![axis >= 1] {
            entry += args.in_size.d;
        }
        if comptime![axis == 2] {
            entry += args.in_size.h;
        }
        (cover[entry * 2] as usize, cover[entry * 2 + 1] as usize)
    }
}

/// [`cover_of()`] a sliding window: output `o` holds `i` when `o * stride <= i + pad <= o *
/// stride + (kernel - 1) * dilation`.
#[cube]
fn sliding_cover(args: &PoolArgs, i: usize, #[comptime] axis: usize) -> (usize, usize) {
    let stride = along(&args.stride, axis);
    let at = i + along(&args.padding, axis);
    let extent = (along(&args.kernel, axis) - 1) * along(&args.dilation, axis);
    let mut lo = 0;
    if at > extent {
        lo = div_ceil_step(at - extent, stride);
    }
    let mut last = at;
    if stride != 1 {
        last = at / stride;
    }
    (lo, min(last + 1, along(&args.out_size, axis)))
}

/// The backward of an average whose one window per plane holds the whole plane (global
/// average pooling): every element of the plane gets `grad / divisor`, `block_w` consecutive
/// elements of the flat plane per unit, with no cover or span walk.
#[cube]
fn average_whole_plane<F: Float, A: Float>(
    grad: &Tensor<F>,
    spans: &Tensor<u32>,
    x_grad: &mut Tensor<F>,
    args: &PoolArgs,
    #[comptime] placement: Placement,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
) {
    let in_volume = volume(&args.in_size);
    let blocks = in_volume.div_ceil(block_w);
    let plane = ABSOLUTE_POS / blocks;
    if plane < x_grad.len() / in_volume {
        let first = (ABSOLUTE_POS % blocks) * block_w;
        let sd = span_of::<F>(spans, grad, args, plane, 0, 0usize, placement);
        let sh = span_of::<F>(spans, grad, args, plane, 0, 1usize, placement);
        let sw = span_of::<F>(spans, grad, args, plane, 0, 2usize, placement);
        let divisor = average_divisor::<A>(
            args,
            sd.count * sh.count * sw.count,
            sd.padded * sh.padded * sw.padded,
            count_include_pad,
        );
        let share = F::cast_from(A::cast_from(grad[plane]) / divisor);
        #[unroll]
        for j in 0..block_w {
            if first + j < in_volume {
                x_grad[plane * in_volume + first + j] = share;
            }
        }
    }
}

/// Add the gradient of output `ow` of the output row starting at `o_row` (its outputs `step`
/// apart) to the elements of the block (from `iw0`, flat `row_index` in the plane) that its
/// window holds, when `ok`.
/// `Max` matches its index; `Avg` and `Lp` test the W span, or for a sliding window (unit
/// dilation) compare against its start (the caller tested D and H; `dh_count`, `dh_padded`
/// are the window's volume factors over them, which the divisor takes).
/// Masked outputs read element 0 and add nothing.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gather_output<F: Float, I: Int, A: Float>(
    grad: &Tensor<F>,
    output: &Tensor<F>,
    indices: &Tensor<I>,
    spans: &Tensor<u32>,
    args: &PoolArgs,
    o_row: usize,
    ow: usize,
    step: usize,
    ok: bool,
    block: &Block,
    dh_count: usize,
    dh_padded: usize,
    acc: &mut Array<A>,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
    #[comptime] count_include_pad: bool,
    #[comptime] shares_from_output: bool,
    #[comptime] block_w: usize,
) {
    let at = select(ok, o_row + ow * step, 0);
    let mut share = A::cast_from(grad[at]);
    if comptime![reduction == Reduction::Max] {
        let index = indices[at];
        let taken = ok && index >= I::new(0);
        let flat = usize::cast_from(index);
        #[unroll]
        for j in 0..block_w {
            acc[j] += select(taken && flat == block.row_index + j, share, A::new(0.0));
        }
    } else {
        let sw = span_of::<F>(spans, grad, args, block.plane, ow, 2usize, placement);
        if comptime![reduction == Reduction::Avg] {
            share /= average_divisor::<A>(
                args,
                dh_count * sw.count,
                dh_padded * sw.padded,
                count_include_pad,
            );
        }
        if comptime![reduction == Reduction::Lp && shares_from_output] {
            share = lp_share::<F, A>(share, output[at], args, dh_count * sw.count);
        }
        if comptime![placement == Placement::Sliding] {
            // Unit dilation (the launcher's condition for a sliding sum): input `i` is a tap
            // of window `ow` when `ow * stride <= i + pad < ow * stride + kernel`.
            let first = ow * args.stride.w;
            let last = first + args.kernel.w;
            let at = block.iw0 + args.padding.w;
            #[unroll]
            for j in 0..block_w {
                let inside = at + j >= first && at + j < last;
                acc[j] += select(ok && inside, share, A::new(0.0));
            }
        } else {
            #[unroll]
            for j in 0..block_w {
                acc[j] += select(ok && covers(&sw, block.iw0 + j), share, A::new(0.0));
            }
        }
    }
}

/// An LP window's share of its output gradient `grad` (`p >= 1`), from its output `y`: the
/// slope `y^(1 - p)` is the `total^(1/p - 1)` that `sum_value`'s `LpShare` takes; none for an
/// all-zero window (`y = 0`), NaN for a NaN total.
#[cube]
fn lp_share<F: Float, A: Float>(grad: A, y: F, args: &PoolArgs, count: usize) -> A {
    let y = A::cast_from(y);
    let mut share = A::new(0.0);
    // NaN is tested first: GPU float comparisons with NaN differ between runtimes.
    if f32::is_nan(f32::cast_from(y)) {
        share = not_a_number::<A>();
    } else if y != A::new(0.0) {
        let one_minus_norm = A::new(0.0) - A::cast_from(args.norm_minus_one);
        let slope = pow_signed::<A>(y, one_minus_norm, not_a_number::<A>());
        share = lp_window_share::<A>(grad, slope, args, count);
    }
    share
}

/// The input elements one unit of the backward computes: `block_w` (or fewer, at a row's end)
/// from `iw0` along W, at `(id, ih)` of plane `plane`, whose flat index in the plane is
/// `row_index` (+ `j`).
#[derive(CubeType)]
struct Block {
    plane: usize,
    id: usize,
    ih: usize,
    iw0: usize,
    row_index: usize,
}

/// The D and H part of output `(od, oh)`'s window for a block: whether it holds the block's
/// row, and its taps inside the input and its padded volume over D and H (`Max` needs none of
/// it: its indices say which input each output took).
#[cube]
#[allow(clippy::too_many_arguments)]
fn dh_window<F: Float>(
    spans: &Tensor<u32>,
    grad: &Tensor<F>,
    args: &PoolArgs,
    block: &Block,
    od: usize,
    oh: usize,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
) -> (bool, usize, usize) {
    let mut holds = true;
    let mut count = 1;
    let mut padded = 1;
    if comptime![reduction != Reduction::Max] {
        let sd = span_of::<F>(spans, grad, args, block.plane, od, 0usize, placement);
        let sh = span_of::<F>(spans, grad, args, block.plane, oh, 1usize, placement);
        if comptime![placement != Placement::Sliding] {
            // A sliding sum's window has unit dilation, so its cover is exact.
            holds = covers(&sd, block.id) && covers(&sh, block.ih);
        }
        count = sd.count * sh.count;
        padded = sd.padded * sh.padded;
    }
    (holds, count, padded)
}

/// Per input element, sum the gradient of every output whose window holds it, in output
/// order. A unit takes `block_w` consecutive elements along the last axis and walks the
/// outputs that cover any of them once, adding each output's gradient to every element of the
/// block it covers: indices, spans and gradients are read once per block, not once per
/// element (a global pool's backward reads one gradient per plane). Each element still sums
/// its outputs in output order, so the result is the same as one element at a time.
/// `Max` matches `indices`; `Avg` divides by the divisor rule; `Lp` sums the windows' shares
/// (from `output`, or with `shares_from_output` off the pre-pass's, in `grad`) and applies `p *
/// x^(p - 1)`; `sign` multiplies by `sign(x)` (LP with `p = inf`).
///
/// With `channels_last`, `grad`, `indices`, `output` and `x_grad` are channels-last (NDHWC in
/// memory) and neighbouring units take neighbouring channels; otherwise they are contiguous.
///
/// `unrolled`, when not all 0 (sliding windows), bounds the outputs that cover a block per
/// axis: the walk is unrolled to it and masks the outputs past the cover, so the loop bounds
/// are comptime (the `resnet_stem_maxpool` backward row).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_backward<F: Float, I: Int, A: Float>(
    grad: &Tensor<F>,
    output: &Tensor<F>,
    indices: &Tensor<I>,
    x: &Tensor<F>,
    spans: &Tensor<u32>,
    cover: &Tensor<u32>,
    x_grad: &mut Tensor<F>,
    args: PoolArgs,
    #[comptime] reduction: Reduction,
    #[comptime] placement: Placement,
    #[comptime] unrolled: [usize; 3],
    #[comptime] sign_of_x: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
    #[comptime] whole_plane: bool,
    #[comptime] shares_from_output: bool,
    #[comptime] channels_last: bool,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    if comptime![whole_plane] {
        average_whole_plane::<F, A>(
            grad,
            spans,
            x_grad,
            &args,
            placement,
            count_include_pad,
            block_w,
        );
        terminate!();
    }
    let w_blocks = args.in_size.w.div_ceil(block_w);
    let rows = x_grad.len() / args.in_size.w;
    if ABSOLUTE_POS >= rows * w_blocks {
        terminate!();
    }
    let unit = row_block(
        &args,
        &args.in_size,
        ABSOLUTE_POS,
        w_blocks,
        block_w,
        channels_last,
        1usize,
    );
    let (plane, id, ih, iw0, step) = (unit.plane, unit.d, unit.h, unit.w0, unit.step);
    // `grad` is laid out as `x_grad`: element `(plane, od, oh, ow)` is `grad_base + ((od *
    // out_h + oh) * out_w + ow) * step`.
    let out_volume = volume(&args.out_size);
    let mut grad_base = plane * out_volume;
    if comptime![channels_last] {
        grad_base = plane_offset(&args, args.channels * out_volume, 1usize, plane);
    }
    let block = Block {
        plane,
        id,
        ih,
        iw0,
        row_index: (id * args.in_size.h + ih) * args.in_size.w + iw0,
    };
    let (lo_d, hi_d) = cover_of(cover, &args, id, 0usize, placement);
    let (lo_h, hi_h) = cover_of(cover, &args, ih, 1usize, placement);
    let in_block = min(block_w, args.in_size.w - iw0);
    // The outputs along W covering any element of the block: the union of their covers.
    let mut lo_w = args.out_size.w;
    let mut hi_w = 0usize;
    if comptime![placement == Placement::Sliding] {
        // Sliding covers move forward with the input position.
        lo_w = cover_of(cover, &args, iw0, 2usize, placement).0;
        hi_w = cover_of(cover, &args, iw0 + in_block - 1, 2usize, placement).1;
    } else {
        // A table cover may be empty (`(0, 0)`) for an element no window holds.
        for j in 0..in_block {
            let (lo, hi) = cover_of(cover, &args, iw0 + j, 2usize, placement);
            if lo < hi {
                lo_w = min(lo_w, lo);
                hi_w = max(hi_w, hi);
            }
        }
    }
    // Gradients accumulate in `A` (f32 for half types, f64 for f64).
    let mut acc = Array::<A>::new(block_w);
    #[unroll]
    for j in 0..block_w {
        acc[j] = A::new(0.0);
    }
    if comptime![unrolled[0] > 0] {
        #[unroll]
        for td in 0..unrolled[0] {
            let od = lo_d + td;
            #[unroll]
            for th in 0..unrolled[1] {
                let oh = lo_h + th;
                let (holds, dh_count, dh_padded) =
                    dh_window::<F>(spans, grad, &args, &block, od, oh, reduction, placement);
                let ok = holds && od < hi_d && oh < hi_h;
                let o_row = grad_base + (od * args.out_size.h + oh) * args.out_size.w * step;
                #[unroll]
                for tw in 0..unrolled[2] {
                    let ow = lo_w + tw;
                    gather_output::<F, I, A>(
                        grad,
                        output,
                        indices,
                        spans,
                        &args,
                        o_row,
                        ow,
                        step,
                        ok && ow < hi_w,
                        &block,
                        dh_count,
                        dh_padded,
                        &mut acc,
                        reduction,
                        placement,
                        count_include_pad,
                        shares_from_output,
                        block_w,
                    );
                }
            }
        }
    } else {
        for od in lo_d..hi_d {
            for oh in lo_h..hi_h {
                let (holds, dh_count, dh_padded) =
                    dh_window::<F>(spans, grad, &args, &block, od, oh, reduction, placement);
                let o_row = grad_base + (od * args.out_size.h + oh) * args.out_size.w * step;
                for ow in lo_w..hi_w {
                    gather_output::<F, I, A>(
                        grad,
                        output,
                        indices,
                        spans,
                        &args,
                        o_row,
                        ow,
                        step,
                        holds,
                        &block,
                        dh_count,
                        dh_padded,
                        &mut acc,
                        reduction,
                        placement,
                        count_include_pad,
                        shares_from_output,
                        block_w,
                    );
                }
            }
        }
    }
    let x_row = plane_offset(&args, x.stride(0), x.stride(1), block.plane)
        + id * x.stride(2)
        + ih * x.stride(3);
    #[unroll]
    for j in 0..block_w {
        if j < in_block {
            let iw = iw0 + j;
            let mut result = F::cast_from(acc[j]);
            if comptime![reduction == Reduction::Lp || sign_of_x] {
                let value = x[x_row + iw * x.stride(4)];
                if comptime![reduction == Reduction::Lp] {
                    let power = pow_signed::<F>(
                        value,
                        F::cast_from(args.norm_minus_one),
                        not_a_number::<F>(),
                    );
                    result = result * F::cast_from(args.norm) * power;
                } else {
                    result *= sign::<F>(value);
                }
            }
            x_grad[unit.first + iw * step] = result;
        }
    }
}
