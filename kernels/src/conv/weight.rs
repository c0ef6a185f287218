//! The weight gradient's untiled schedules: direct (a unit owns a register block of weights)
//! and split (a unit per weight and range of output rows, for wide kernel rows and the bias
//! gradient).

use cubecl::prelude::*;

use crate::axes::{Index3, offset, unflatten, volume};
use crate::pairwise::{pairwise_add, pairwise_sum, pairwise_value};

use super::direct::{row_value, row_values};
use super::operands::{input_tap, store_weight, tap_along};
use super::repair::{is_finite, repair_weight_flat};
use super::{ConvArgs, GemmArgs, GemmKind};

/// The split schedule of the weight gradient: one unit per (element of `C`, range of output
/// rows), summing its rows in a register, with no divisions in the inner loop; the splits are
/// summed afterwards by [`sum_splits()`](crate::conv::sum_splits()) in a fixed order
/// (deterministic, and no barriers). For long reductions with few outputs: the weight gradient of depthwise and grouped convs, and
/// (with `ones_rhs`, `B = 1`) the bias gradient. `gemm.k_per_split` is a whole number of
/// output rows (`out_w` positions each).
#[allow(clippy::collapsible_if)]
#[cube(launch, address_type = "dynamic")]
pub fn conv_weight_split<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    x: &Tensor<F>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] ones_rhs: bool,
    #[comptime] repair: bool,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let outputs = args.groups * gemm.m_len * gemm.n_len;
    let splits = gemm.k_len.div_ceil(gemm.k_per_split);
    if ABSOLUTE_POS >= outputs * splits {
        terminate!();
    }
    let output = ABSOLUTE_POS % outputs;
    let split = ABSOLUTE_POS / outputs;
    let n = output % gemm.n_len;
    let rest = output / gemm.n_len;
    let m = rest % gemm.m_len;
    let group = rest / gemm.m_len;

    let kernel_volume = volume(&args.kernel);
    let channel = group * args.in_channels + n / kernel_volume;
    let tap = unflatten(n % kernel_volume, &args.kernel);
    let grad_channel = group * args.out_channels + m;
    let row_begin = split * gemm.k_per_split / args.out_size.w;
    let row_end = min(gemm.k_len, (split + 1) * gemm.k_per_split) / args.out_size.w;
    // Pairwise (the bias gradient of a large plane sums millions of terms).
    let mut acc = pairwise_sum::<A>();
    for row in row_begin..row_end {
        let batch = row / (args.out_size.d * args.out_size.h);
        let d = (row / args.out_size.h) % args.out_size.d;
        let h = row % args.out_size.h;
        let grad_row = offset(
            &args.out_layout,
            batch,
            grad_channel,
            &Index3 { d, h, w: 0 },
        );
        for w in 0..args.out_size.w {
            let mut value = A::cast_from(out_grad[grad_row + w * args.out_layout.at.w]);
            if comptime![!ones_rhs] {
                let at = Index3 { d, h, w };
                value *= input_tap::<F, A>(x, &args, batch, channel, &at, &tap);
            }
            pairwise_add::<A>(&mut acc, value);
        }
    }
    let acc = pairwise_value::<A>(&acc);
    store_weight::<F, A>(out, &args, group, split * outputs, m, n, acc);
    // Where the padding met a non-finite output gradient, by the definition (a split's partial
    // sum is repaired after the sum, by `sum_splits_exact`).
    if comptime![repair] {
        if splits == 1 && !is_finite::<A>(acc) {
            let batch = gemm.k_len / volume(&args.out_size);
            let index = (group * gemm.m_len + m) * gemm.n_len + n;
            repair_weight_flat::<F, A>(x, out_grad, out, &args, index, batch);
        }
    }
}

/// The direct schedule of the weight gradient: a unit owns `block_c` input channels, one
/// kernel row `(kd, kh)`, `block_m` output channels and a range of output rows (a split), and
/// sums their `block_m x block_c x kernel_w` weights in registers. It walks each output row
/// `block_w` positions at a time: the block's input values (`stride_w * (block_w - 1) +
/// kernel_w` per channel, neighbouring positions sharing them where the kernel row is wider
/// than the stride) are loaded and bounds-checked once, then each position's `block_m` output
/// gradients are loaded once and multiplied into every input channel's taps. So a loaded
/// gradient serves `block_c x kernel_w` products and an input value up to `block_m x
/// kernel_w`, where one channel and one position at a time gave `kernel_w` and `block_m`.
/// `block_w > 1` needs dilation 1 and stride `stride_w` along W (the host's choice); with
/// `block_w = 1` the stride and dilation are the run-time ones. Taps in the padding multiply a
/// zero, as the GEMM's do, so an infinite gradient there gives NaN as in PyTorch; positions
/// past the row's end are skipped. Partial sums are laid out as the split schedule's, for
/// [`sum_splits()`](crate::conv::sum_splits()); `gemm.k_per_split` is a whole number of
/// output rows.
#[allow(clippy::collapsible_if)]
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn conv_weight_direct<F: Float, A: Float>(
    out_grad: &Tensor<F>,
    x: &Tensor<F>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] block_m: usize,
    #[comptime] block_c: usize,
    #[comptime] kernel_w: usize,
    #[comptime] block_w: usize,
    #[comptime] stride_w: usize,
    #[comptime] repair: bool,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let m_blocks = gemm.m_len.div_ceil(block_m);
    let c_blocks = args.in_channels.div_ceil(block_c);
    let kernel_rows = args.kernel.d * args.kernel.h;
    let units_per_split = args.groups * c_blocks * kernel_rows * m_blocks;
    let splits = gemm.k_len.div_ceil(gemm.k_per_split);
    if ABSOLUTE_POS >= units_per_split * splits {
        terminate!();
    }
    let mut rest = ABSOLUTE_POS;
    let m0 = (rest % m_blocks) * block_m;
    rest /= m_blocks;
    let kernel_row = rest % kernel_rows;
    rest /= kernel_rows;
    let c0 = (rest % c_blocks) * block_c;
    rest /= c_blocks;
    let group = rest % args.groups;
    let split = rest / args.groups;
    let kh = kernel_row % args.kernel.h;
    let kd = kernel_row / args.kernel.h;

    let values_per_channel = comptime![row_values(block_w, kernel_w, stride_w)];
    let mut acc = Array::<A>::new(comptime![block_m * block_c * kernel_w]);
    #[unroll]
    for i in 0..comptime![block_m * block_c * kernel_w] {
        acc[i] = A::new(0.0);
    }
    let mut values = Array::<A>::new(comptime![block_c * values_per_channel]);
    let mut grads = Array::<A>::new(block_m);
    // Channels past a partial block read the block's first and are not stored.
    let mut channel_offsets = Array::<usize>::new(block_c);
    let mut grad_offsets = Array::<usize>::new(block_m);
    #[unroll]
    for c in 0..block_c {
        channel_offsets[c] = select(c0 + c < args.in_channels, c, 0) * args.in_layout.channel;
    }
    #[unroll]
    for i in 0..block_m {
        grad_offsets[i] = select(m0 + i < gemm.m_len, m0 + i, m0) * args.out_layout.channel;
    }
    let row_begin = split * gemm.k_per_split / args.out_size.w;
    let row_end = min(gemm.k_len, (split + 1) * gemm.k_per_split) / args.out_size.w;
    for row in row_begin..row_end {
        let batch = row / (args.out_size.d * args.out_size.h);
        let d = (row / args.out_size.h) % args.out_size.d;
        let h = row % args.out_size.h;
        let (id, d_inside) = tap_along(
            d,
            kd * args.dilation.d,
            args.stride.d,
            args.pad.d,
            args.in_size.d,
            GemmKind::Forward,
            false,
        );
        let (ih, h_inside) = tap_along(
            h,
            kh * args.dilation.h,
            args.stride.h,
            args.pad.h,
            args.in_size.h,
            GemmKind::Forward,
            false,
        );
        let row_inside = d_inside && h_inside;
        let x_row = offset(
            &args.in_layout,
            batch,
            group * args.in_channels + c0,
            &Index3 { d: id, h: ih, w: 0 },
        );
        let grad_row = offset(
            &args.out_layout,
            batch,
            group * args.out_channels,
            &Index3 { d, h, w: 0 },
        );
        for w_block in 0..args.out_size.w.div_ceil(block_w) {
            let w0 = w_block * block_w;
            // Value `t` of a channel is input `w0 * stride + t * dilation - pad`: the tap `t`
            // of position `w0`, and so the tap `t - stride_w * j` of position `w0 + j`.
            #[unroll]
            for t in 0..values_per_channel {
                let (iw, w_inside) = tap_along(
                    w0,
                    t * args.dilation.w,
                    args.stride.w,
                    args.pad.w,
                    args.in_size.w,
                    GemmKind::Forward,
                    false,
                );
                #[unroll]
                for c in 0..block_c {
                    let at = comptime![c * values_per_channel + t];
                    values[at] = A::new(0.0);
                    if row_inside && w_inside {
                        values[at] =
                            A::cast_from(x[x_row + channel_offsets[c] + iw * args.in_layout.at.w]);
                    }
                }
            }
            #[unroll]
            for j in 0..block_w {
                if w0 + j < args.out_size.w {
                    #[unroll]
                    for i in 0..block_m {
                        let at = grad_row + grad_offsets[i] + (w0 + j) * args.out_layout.at.w;
                        grads[i] = A::cast_from(out_grad[at]);
                    }
                    #[unroll]
                    for c in 0..block_c {
                        #[unroll]
                        for kw in 0..kernel_w {
                            let at = comptime![
                                c * values_per_channel
                                    + row_value(GemmKind::Forward, j, kw, kernel_w, stride_w)
                            ];
                            let value = values[at];
                            #[unroll]
                            for i in 0..block_m {
                                acc[comptime![(i * block_c + c) * kernel_w + kw]] +=
                                    grads[i] * value;
                            }
                        }
                    }
                }
            }
        }
    }
    let outputs = args.groups * gemm.m_len * gemm.n_len;
    let kernel_volume = volume(&args.kernel);
    // Whether a stored sum is not finite: where the padding met a non-finite output gradient,
    // it is recomputed below (a split's partial sum is, after the sum, by `sum_splits_exact`).
    let mut suspect = false;
    #[unroll]
    for i in 0..block_m {
        #[unroll]
        for c in 0..block_c {
            #[unroll]
            for kw in 0..kernel_w {
                if m0 + i < gemm.m_len && c0 + c < args.in_channels {
                    let tap = kernel_row * args.kernel.w + kw;
                    let value = acc[comptime![(i * block_c + c) * kernel_w + kw]];
                    if comptime![repair] {
                        suspect = suspect || !is_finite::<A>(value);
                    }
                    store_weight::<F, A>(
                        out,
                        &args,
                        group,
                        split * outputs,
                        m0 + i,
                        (c0 + c) * kernel_volume + tap,
                        value,
                    );
                }
            }
        }
    }
    if comptime![repair] {
        if suspect && splits == 1 {
            // Rarely taken, so one copy of the definition's loop, not one per element.
            let batch = gemm.k_len / volume(&args.out_size);
            for i in 0..block_m {
                for c in 0..block_c {
                    for kw in 0..kernel_w {
                        if m0 + i < gemm.m_len && c0 + c < args.in_channels {
                            let tap = kernel_row * args.kernel.w + kw;
                            let n = (c0 + c) * kernel_volume + tap;
                            let index = (group * gemm.m_len + m0 + i) * gemm.n_len + n;
                            repair_weight_flat::<F, A>(x, out_grad, out, &args, index, batch);
                        }
                    }
                }
            }
        }
    }
}
