//! One window kernel for every pool, and its gather-form backward.
//!
//! A window is the product of one span per axis: `count` taps `start, start + step, ...`, and
//! `padded`, its length clipped to the padded input (the `count_include_pad` divisor). Spans of
//! sliding and adaptive windows come from a host-built table (`[start, count, step, padded]`
//! per output position, the D, H then W axis); fractional windows are computed here from the
//! per-plane samples, in f32 as PyTorch does. The reduction is a comptime choice.
//!
//! The backward runs one unit per input element and loops over the outputs whose windows may
//! cover it, given per axis by a host-built `cover` table (`[lo, hi)` per input position), so
//! it needs no atomics and sums in a fixed order (deterministic).

use cubecl::prelude::*;

use crate::axes::{Axes, Index3, volume};

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

/// Sizes and scalars of one pool.
#[derive(CubeLaunch, CubeType)]
pub struct PoolArgs {
    pub channels: usize,
    pub in_size: Index3,
    pub out_size: Index3,
    /// Window lengths of fractional pooling; `K` (their product) of LP pooling.
    pub kernel: Index3,
    /// Fractional pooling's `(len - kernel) / (out - 1)` per axis, computed on the host.
    pub alpha: Axes<f32>,
    /// `divisor_override`, or 0 for none.
    pub divisor_override: usize,
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
fn not_a_number<F: Float>() -> F {
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

/// The span of output `o` on `axis` (0, 1, 2 = D, H, W) of plane `plane`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn span_of<F: Float>(
    spans: &Tensor<u32>,
    samples: &Tensor<F>,
    args: &PoolArgs,
    plane: usize,
    o: usize,
    #[comptime] axis: u32,
    #[comptime] fractional: bool,
) -> Span {
    if comptime![fractional] {
        let u = f32::cast_from(samples[plane * 3 + axis as usize]);
        if comptime![axis == 0] {
            fractional_span(
                o,
                args.in_size.d,
                args.out_size.d,
                args.kernel.d,
                args.alpha.d,
                u,
            )
        } else if comptime![axis == 1] {
            fractional_span(
                o,
                args.in_size.h,
                args.out_size.h,
                args.kernel.h,
                args.alpha.h,
                u,
            )
        } else {
            fractional_span(
                o,
                args.in_size.w,
                args.out_size.w,
                args.kernel.w,
                args.alpha.w,
                u,
            )
        }
    } else if comptime![axis == 0] {
        table_span(spans, o)
    } else if comptime![axis == 1] {
        table_span(spans, args.out_size.d + o)
    } else {
        table_span(spans, args.out_size.d + args.out_size.h + o)
    }
}

/// `x^y` with C's `pow` semantics for a negative base (GPU `pow` leaves it undefined): signed
/// for an integral `y`, NaN otherwise.
#[cube]
pub fn pow_signed<F: Float>(x: F, y: F, nan: F) -> F {
    let mut result = F::powf(F::abs(x), y);
    if f32::is_nan(f32::cast_from(x)) {
        result = x;
    } else if x == F::new(0.0) {
        result = select(y > F::new(0.0), F::new(0.0), F::new(1.0) / F::abs(x));
        if y == F::new(0.0) {
            result = F::new(1.0);
        }
    } else if x < F::new(0.0) {
        let half = y * F::new(0.5);
        if F::floor(y) != y {
            result = nan;
        } else if F::floor(half) != half {
            result = -result;
        }
    }
    result
}

/// `torch.sign`: -1, 0 or 1, NaN for NaN.
#[cube]
fn sign<F: Float>(x: F) -> F {
    let mut result = x * F::new(0.0);
    if x > F::new(0.0) {
        result = F::new(1.0);
    } else if x < F::new(0.0) {
        result = F::new(-1.0);
    }
    result
}

/// Offset of plane `plane` (batch x channel) of `x`, read through its strides.
#[cube]
fn plane_offset<F: Float>(x: &Tensor<F>, args: &PoolArgs, plane: usize) -> usize {
    (plane / args.channels) * x.stride(0) + (plane % args.channels) * x.stride(1)
}

/// A window's term of a sum: the value (`Avg`) or its signed `p`-th power (`Lp`, `LpShare`).
#[cube]
fn sum_term<F: Float, A: Float>(value: F, args: &PoolArgs, #[comptime] reduction: Reduction) -> A {
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
fn average_divisor(
    args: &PoolArgs,
    count: usize,
    padded: usize,
    #[comptime] count_include_pad: bool,
) -> usize {
    let mut divisor = count;
    if comptime![count_include_pad] {
        divisor = padded;
    }
    if args.divisor_override > 0 {
        divisor = args.divisor_override;
    }
    divisor
}

/// Write output `at` of a sum reduction over `count` taps (`padded`: the window volume
/// clipped to the padded input): the average by the divisor rule, the LP norm, or the LP
/// backward share of `out_grad[at]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_sum<F: Float, A: Float>(
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
    if comptime![reduction == Reduction::Avg] {
        let divisor = average_divisor(args, count, padded, count_include_pad);
        out[at] = F::cast_from(sum / A::cast_from(divisor));
    } else {
        let nan = not_a_number::<F>();
        let kernel_volume = volume(&args.kernel);
        let scale = F::cast_from(kernel_volume) / F::cast_from(count);
        let total = F::cast_from(sum * A::cast_from(kernel_volume) / A::cast_from(count));
        // NaN is tested first: GPU float comparisons with NaN differ between runtimes.
        let mut result = F::new(0.0);
        if f32::is_nan(f32::cast_from(total)) {
            result = nan;
        } else if total != F::new(0.0) {
            if comptime![reduction == Reduction::Lp] {
                result = pow_signed::<F>(total, F::cast_from(args.inv_norm), nan);
            } else {
                let power = pow_signed::<F>(total, F::cast_from(args.inv_norm_minus_one), nan);
                result = out_grad[at] * F::cast_from(args.inv_norm) * power * scale;
            }
        }
        out[at] = result;
    }
}

/// Whether `value` replaces `best` in a max: it is larger, or NaN (the last NaN wins, as in
/// PyTorch). NaN is tested explicitly: float comparisons with NaN are not ordered the same way
/// on every runtime.
#[cube]
pub(crate) fn beats<F: Float>(value: F, best: F) -> bool {
    let value_is_nan = f32::is_nan(f32::cast_from(value));
    value_is_nan || (!f32::is_nan(f32::cast_from(best)) && value > best)
}

/// Reduce the windows of `block_w` consecutive outputs along the last axis per unit (the
/// unit's indices and its D and H spans are worked out once; integer divisions dominate a
/// small window's cost on some devices). `x` is read through strides. `Max` also writes
/// `indices` (flat in the unpadded input plane); `LpShare` reads `out_grad`.
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
    #[comptime] fractional: bool,
    #[comptime] abs: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    let w_blocks = args.out_size.w.div_ceil(block_w);
    let rows = out.len() / args.out_size.w;
    if ABSOLUTE_POS >= rows * w_blocks {
        terminate!();
    }
    let row = ABSOLUTE_POS / w_blocks;
    let ow0 = (ABSOLUTE_POS % w_blocks) * block_w;
    let oh = row % args.out_size.h;
    let od = (row / args.out_size.h) % args.out_size.d;
    let plane = row / (args.out_size.h * args.out_size.d);
    let sd = span_of::<F>(spans, samples, &args, plane, od, 0u32, fractional);
    let sh = span_of::<F>(spans, samples, &args, plane, oh, 1u32, fractional);
    let (stride_d, stride_h, stride_w) = (x.stride(2), x.stride(3), x.stride(4));
    let base = plane_offset::<F>(x, &args, plane);
    let ow_end = min(ow0 + block_w, args.out_size.w);
    for ow in ow0..ow_end {
        let sw = span_of::<F>(spans, samples, &args, plane, ow, 2u32, fractional);
        let at = row * args.out_size.w + ow;
        if comptime![reduction == Reduction::Max] {
            let mut best = neg_infinity::<F>();
            // PyTorch's start: the first tap, kept if every tap is -inf.
            let mut best_index = (sd.start * args.in_size.h + sh.start) * args.in_size.w + sw.start;
            for td in 0..sd.count {
                let d = sd.start + td * sd.step;
                for th in 0..sh.count {
                    let h = sh.start + th * sh.step;
                    let row_at = base + d * stride_d + h * stride_h;
                    let row_index = (d * args.in_size.h + h) * args.in_size.w;
                    for tw in 0..sw.count {
                        let w = sw.start + tw * sw.step;
                        let mut value = x[row_at + w * stride_w];
                        if comptime![abs] {
                            value = F::abs(value);
                        }
                        if beats::<F>(value, best) {
                            best = value;
                            best_index = row_index + w;
                        }
                    }
                }
            }
            out[at] = best;
            indices[at] = I::cast_from(best_index);
        } else {
            // Window sums accumulate in `A` (f32 for half types, as PyTorch does; f64 for
            // f64).
            let mut sum = A::new(0.0);
            for td in 0..sd.count {
                let d = sd.start + td * sd.step;
                for th in 0..sh.count {
                    let h = sh.start + th * sh.step;
                    let row_at = base + d * stride_d + h * stride_h;
                    for tw in 0..sw.count {
                        let w = sw.start + tw * sw.step;
                        sum += sum_term::<F, A>(x[row_at + w * stride_w], &args, reduction);
                    }
                }
            }
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

/// The backward of an average whose one window per plane holds the whole plane (global
/// average pooling): every element of the plane gets `grad / divisor`, `block_w` consecutive
/// elements of the flat plane per unit, with no cover or span walk.
#[cube]
fn average_whole_plane<F: Float, A: Float>(
    grad: &Tensor<F>,
    spans: &Tensor<u32>,
    x_grad: &mut Tensor<F>,
    args: &PoolArgs,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
) {
    let in_volume = volume(&args.in_size);
    let blocks = in_volume.div_ceil(block_w);
    let plane = ABSOLUTE_POS / blocks;
    if plane < x_grad.len() / in_volume {
        let first = (ABSOLUTE_POS % blocks) * block_w;
        let sd = table_span(spans, 0);
        let sh = table_span(spans, 1);
        let sw = table_span(spans, 2);
        let divisor = average_divisor(
            args,
            sd.count * sh.count * sw.count,
            sd.padded * sh.padded * sw.padded,
            count_include_pad,
        );
        let share = F::cast_from(A::cast_from(grad[plane]) / A::cast_from(divisor));
        #[unroll]
        for j in 0..block_w {
            if first + j < in_volume {
                x_grad[plane * in_volume + first + j] = share;
            }
        }
    }
}

/// Per input element, sum the gradient of every output whose window holds it, in output
/// order. A unit takes `block_w` consecutive elements along the last axis and walks the
/// outputs that cover any of them once, adding each output's gradient to every element of the
/// block it covers: indices, spans and gradients are read once per block, not once per
/// element (a global pool's backward reads one gradient per plane). Each element still sums
/// its outputs in output order, so the result is the same as one element at a time.
/// `Max` matches `indices`; `Avg` divides by the divisor rule; `Lp` sums the pre-pass shares
/// and applies `p * x^(p - 1)`; `sign` multiplies by `sign(x)` (LP with `p = inf`).
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn pool_backward<F: Float, I: Int, A: Float>(
    grad: &Tensor<F>,
    indices: &Tensor<I>,
    x: &Tensor<F>,
    spans: &Tensor<u32>,
    cover: &Tensor<u32>,
    x_grad: &mut Tensor<F>,
    args: PoolArgs,
    #[comptime] reduction: Reduction,
    #[comptime] sign_of_x: bool,
    #[comptime] count_include_pad: bool,
    #[comptime] block_w: usize,
    #[comptime] whole_plane: bool,
    #[define(F, I, A)] _dtypes: [ElemType; 3],
) {
    if comptime![whole_plane] {
        average_whole_plane::<F, A>(grad, spans, x_grad, &args, count_include_pad, block_w);
        terminate!();
    }
    let w_blocks = args.in_size.w.div_ceil(block_w);
    let rows = x_grad.len() / args.in_size.w;
    if ABSOLUTE_POS >= rows * w_blocks {
        terminate!();
    }
    let row = ABSOLUTE_POS / w_blocks;
    let iw0 = (ABSOLUTE_POS % w_blocks) * block_w;
    let ih = row % args.in_size.h;
    let id = (row / args.in_size.h) % args.in_size.d;
    let plane = row / (args.in_size.h * args.in_size.d);
    let out_volume = volume(&args.out_size);
    let lo_d = cover[id * 2] as usize;
    let hi_d = cover[id * 2 + 1] as usize;
    let lo_h = cover[(args.in_size.d + ih) * 2] as usize;
    let hi_h = cover[(args.in_size.d + ih) * 2 + 1] as usize;
    let in_block = min(block_w, args.in_size.w - iw0);
    // The outputs along W covering any element of the block: the union of their covers (an
    // element no window holds has the empty cover `(0, 0)`).
    let mut lo_w = args.out_size.w;
    let mut hi_w = 0usize;
    for j in 0..in_block {
        let at = (args.in_size.d + args.in_size.h + iw0 + j) * 2;
        let (lo, hi) = (cover[at] as usize, cover[at + 1] as usize);
        if lo < hi {
            lo_w = min(lo_w, lo);
            hi_w = max(hi_w, hi);
        }
    }
    let grad_base = plane * out_volume;
    let row_index = (id * args.in_size.h + ih) * args.in_size.w + iw0;
    // Gradients accumulate in `A` (f32 for half types, f64 for f64).
    let mut acc = Array::<A>::new(block_w);
    #[unroll]
    for j in 0..block_w {
        acc[j] = A::new(0.0);
    }
    if comptime![reduction == Reduction::Max] {
        for od in lo_d..hi_d {
            for oh in lo_h..hi_h {
                let o_row = grad_base + (od * args.out_size.h + oh) * args.out_size.w;
                for ow in lo_w..hi_w {
                    let index = indices[o_row + ow];
                    if index >= I::new(0) {
                        let flat = usize::cast_from(index);
                        #[unroll]
                        for j in 0..block_w {
                            if flat == row_index + j {
                                acc[j] += A::cast_from(grad[o_row + ow]);
                            }
                        }
                    }
                }
            }
        }
    } else {
        for od in lo_d..hi_d {
            let sd = table_span(spans, od);
            if covers(&sd, id) {
                for oh in lo_h..hi_h {
                    let sh = table_span(spans, args.out_size.d + oh);
                    if covers(&sh, ih) {
                        let o_row = grad_base + (od * args.out_size.h + oh) * args.out_size.w;
                        for ow in lo_w..hi_w {
                            let sw = table_span(spans, args.out_size.d + args.out_size.h + ow);
                            let mut share = A::cast_from(grad[o_row + ow]);
                            if comptime![reduction == Reduction::Avg] {
                                let divisor = average_divisor(
                                    &args,
                                    sd.count * sh.count * sw.count,
                                    sd.padded * sh.padded * sw.padded,
                                    count_include_pad,
                                );
                                share /= A::cast_from(divisor);
                            }
                            #[unroll]
                            for j in 0..block_w {
                                if covers(&sw, iw0 + j) {
                                    acc[j] += share;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let x_row = plane_offset::<F>(x, &args, plane) + id * x.stride(2) + ih * x.stride(3);
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
            x_grad[row * args.in_size.w + iw] = result;
        }
    }
}
