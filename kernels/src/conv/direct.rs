//! The direct schedule: a unit computes a block of channels at a run of positions, summing all
//! of `k` in registers, for short reductions where a tile would be mostly padding.

use cubecl::prelude::*;

use crate::activation::ActivationKind;
use crate::axes::{Index3, offset, volume};

use super::operands::{
    read_layout, read_size, store_position, tap_along, weight_index, written_size,
};
use super::repair::{is_finite, repair_at};
use super::{ConvArgs, GemmArgs, GemmKind};

/// Which of a direct unit's loaded row values (see [`conv_gemm_direct`]'s `row_taps`) tap
/// `u` of its position `j` reads, `row_stride` apart per position in a forward (and in the
/// weight gradient, which reads the forward's values).
pub(super) fn row_value(
    kind: GemmKind,
    j: usize,
    u: usize,
    row_taps: usize,
    row_stride: usize,
) -> usize {
    if kind == GemmKind::Data {
        j + (row_taps - 1) - u
    } else {
        row_stride * j + u
    }
}

/// How many row values a direct unit (of any pass) loads: the reach of its `block_w`
/// positions through `row_taps` taps, `row_stride` apart.
pub(super) fn row_values(block_w: usize, row_taps: usize, row_stride: usize) -> usize {
    row_stride * (block_w - 1) + row_taps
}

/// The weights of tap `tap` for the direct schedule's `block_n` channels from `n0` of group
/// `group`, against reduced channel `c` (forward: `W[n, c]`, input gradient: `W[c, n]`).
/// Channels past `n_len` (a partial block) read channel 0 and are not stored.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_block_weights<F: Float, A: Float>(
    rhs: &Tensor<F>,
    args: &ConvArgs,
    weights: &mut Array<A>,
    group: usize,
    c: usize,
    n0: usize,
    n_len: usize,
    tap: usize,
    #[comptime] kind: GemmKind,
    #[comptime] block_n: usize,
) {
    #[unroll]
    for i in 0..block_n {
        let n = select(n0 + i < n_len, n0 + i, 0);
        let mut index = weight_index(args, group * args.out_channels + n, c, tap);
        if comptime![kind == GemmKind::Data] {
            index = weight_index(args, group * args.out_channels + c, n, tap);
        }
        weights[i] = A::cast_from(rhs[index]);
    }
}

/// The direct schedule, for short reductions where a tile would be mostly padding (grouped
/// and depthwise convs, and their input gradient): a unit computes `block_n` channels of one
/// group at `block_w` positions along the last axis (consecutive, or one stride phase's),
/// summing all of `k` in registers. Each loaded input value serves `block_n` channels and
/// each weight `block_w` positions, a row's bounds are checked once, and the unit's indices
/// are decomposed once (blocks along the last axis; the spread launch, one position per unit,
/// is the variant whose loads coalesce across units). Forward and input gradient only. `row_taps`
/// (non-zero: the taps along W one position meets, at dilation 1 there) makes the kernel row
/// comptime, so a row's read values are loaded once for the whole block: a forward's at the
/// comptime stride `row_stride` along W (neighbours sharing values where the row is wider);
/// a strided input gradient computes the positions of one stride phase, every stride-th,
/// which all meet the same taps (`row_stride` 1).
#[allow(clippy::collapsible_if)]
#[cube(launch, address_type = "dynamic")]
pub fn conv_gemm_direct<F: Float, A: Float>(
    lhs: &Tensor<F>,
    rhs: &Tensor<F>,
    bias: ComptimeOption<&Tensor<F>>,
    out: &mut Tensor<F>,
    args: ConvArgs,
    gemm: GemmArgs,
    #[comptime] kind: GemmKind,
    #[comptime] block_n: usize,
    #[comptime] block_w: usize,
    #[comptime] unit_stride: bool,
    #[comptime] row_taps: usize,
    #[comptime] row_stride: usize,
    #[comptime] repair: bool,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    // The unit's side (written) and the read side of the GEMM's rows.
    let side = written_size(&args, kind);
    let read = read_size(&args, kind);
    let mut reduced = args.in_channels;
    if comptime![kind == GemmKind::Data] {
        reduced = args.out_channels;
    }
    // A unit's positions along W: `phase + phases * (q0 + j)`. A strided input gradient
    // with a comptime row takes its positions from one stride phase, whose taps are every
    // `phases`-th from `phase_tap` and meet the output at unit stride.
    let mut phases = 1;
    if comptime![kind == GemmKind::Data && row_taps > 0 && !unit_stride] {
        phases = args.stride.w;
    }
    let q_blocks = side.w.div_ceil(phases).div_ceil(block_w);
    let w_blocks = phases * q_blocks;
    let n_blocks = gemm.n_len.div_ceil(block_n);
    let batches = gemm.m_len / volume(&side);
    if ABSOLUTE_POS >= args.groups * n_blocks * batches * side.d * side.h * w_blocks {
        terminate!();
    }
    let mut rest = ABSOLUTE_POS;
    let q0 = (rest % q_blocks) * block_w;
    rest /= q_blocks;
    let phase = rest % phases;
    rest /= phases;
    let h = rest % side.h;
    rest /= side.h;
    let d = rest % side.d;
    rest /= side.d;
    let batch = rest % batches;
    rest /= batches;
    let n0 = (rest % n_blocks) * block_n;
    let group = rest / n_blocks;

    let layout = read_layout(&args, kind);
    let mut acc = Array::<A>::new(comptime![block_n * block_w]);
    #[unroll]
    for i in 0..comptime![block_n * block_w] {
        acc[i] = A::new(0.0);
    }
    let mut weights = Array::<A>::new(block_n);
    // The phase's first tap along W, and the output its first position meets through it
    // (`phase + pad - phase_tap` divides by the stride); a forward's block starts at `q0`.
    let phase_tap = (phase + args.pad.w) % phases;
    let phase_base = (phase + args.pad.w - phase_tap) / phases;
    // With a comptime row, the block's read value `t` is `(q0 + first) * row_stride + t -
    // back`: from input `q0 * stride - pad` for a forward, from output `phase_base + q0 -
    // (row_taps - 1)` for a gradient.
    let mut first = 0;
    let mut back = args.pad.w;
    if comptime![kind == GemmKind::Data] {
        first = phase_base;
        back = comptime![row_taps.saturating_sub(1)];
    }
    for c in 0..reduced {
        let channel = group * reduced + c;
        for kd in 0..args.kernel.d {
            let (rd, d_inside) = tap_along(
                d,
                kd * args.dilation.d,
                args.stride.d,
                args.pad.d,
                read.d,
                kind,
                unit_stride,
            );
            for kh in 0..args.kernel.h {
                let (rh, h_inside) = tap_along(
                    h,
                    kh * args.dilation.h,
                    args.stride.h,
                    args.pad.h,
                    read.h,
                    kind,
                    unit_stride,
                );
                let row_inside = d_inside && h_inside;
                let row = offset(&layout, batch, channel, &Index3 { d: rd, h: rh, w: 0 });
                let tap_row = (kd * args.kernel.h + kh) * args.kernel.w;
                // An input gradient adds only the taps that meet an output (as col2im does),
                // so at a stride it skips the kernel rows off the grid; a forward multiplies
                // the padding's zeros, as im2col does.
                let mut skipped = false;
                if comptime![kind == GemmKind::Data] {
                    skipped = !row_inside;
                }
                if skipped {
                } else if comptime![row_taps > 0] {
                    // Dilation 1 along W: a forward's output `q0 + j` reads input
                    // `(q0 + j) * row_stride + kw - pad`; an input gradient's input
                    // `phase + stride * (q0 + j)` reads, through its phase's tap `u`
                    // (`kw = phase_tap + stride * u`), output `phase_base + q0 + j - u`. So
                    // the block's read values are loaded (and bounds-checked) once and each
                    // serves up to `row_taps` positions. `values[t]` is the one `t` past the
                    // block's first reach (tap 0 for a forward, tap `row_taps - 1` for a
                    // gradient).
                    let mut values =
                        Array::<A>::new(comptime![row_values(block_w, row_taps, row_stride)]);
                    #[unroll]
                    for t in 0..comptime![row_values(block_w, row_taps, row_stride)] {
                        let (rw, w_inside) = tap_along(
                            q0 + first,
                            t,
                            row_stride,
                            back,
                            read.w,
                            GemmKind::Forward,
                            true,
                        );
                        values[t] = A::new(0.0);
                        if row_inside && w_inside {
                            values[t] = A::cast_from(lhs[row + rw * layout.at.w]);
                        }
                    }
                    #[unroll]
                    for u in 0..row_taps {
                        // A phase of a strided gradient may have a tap fewer than the most.
                        let kw = phase_tap + phases * u;
                        if kw < args.kernel.w {
                            load_block_weights::<F, A>(
                                rhs,
                                &args,
                                &mut weights,
                                group,
                                c,
                                n0,
                                gemm.n_len,
                                tap_row + kw,
                                kind,
                                block_n,
                            );
                            #[unroll]
                            for j in 0..block_w {
                                let t = comptime![row_value(kind, j, u, row_taps, row_stride)];
                                #[unroll]
                                for i in 0..block_n {
                                    acc[i * block_w + j] += values[t] * weights[i];
                                }
                            }
                        }
                    }
                } else {
                    for kw in 0..args.kernel.w {
                        load_block_weights::<F, A>(
                            rhs,
                            &args,
                            &mut weights,
                            group,
                            c,
                            n0,
                            gemm.n_len,
                            tap_row + kw,
                            kind,
                            block_n,
                        );
                        #[unroll]
                        for j in 0..block_w {
                            let (rw, w_inside) = tap_along(
                                q0 + j,
                                kw * args.dilation.w,
                                args.stride.w,
                                args.pad.w,
                                read.w,
                                kind,
                                unit_stride,
                            );
                            let mut value = A::new(0.0);
                            if row_inside && w_inside {
                                value = A::cast_from(lhs[row + rw * layout.at.w]);
                            }
                            #[unroll]
                            for i in 0..block_n {
                                acc[i * block_w + j] += value * weights[i];
                            }
                        }
                    }
                }
            }
        }
    }
    // Whether a stored sum is not finite: where the padding met a non-finite operand, it is
    // recomputed below by the definition.
    let mut suspect = false;
    #[unroll]
    for i in 0..block_n {
        #[unroll]
        for j in 0..block_w {
            let w = phase + phases * (q0 + j);
            if n0 + i < gemm.n_len && w < side.w {
                let value = acc[i * block_w + j];
                if comptime![repair] {
                    suspect = suspect || !is_finite::<A>(value);
                }
                let at = Index3 { d, h, w };
                store_position::<F, A>(
                    out,
                    bias,
                    &args,
                    group,
                    0,
                    batch,
                    &at,
                    n0 + i,
                    value,
                    slope,
                    activation,
                    kind,
                );
            }
        }
    }
    if comptime![repair] {
        if suspect {
            // Rarely taken, so one copy of the definition's loop, not one per element.
            let mut channels = args.out_channels;
            if comptime![kind == GemmKind::Data] {
                channels = args.in_channels;
            }
            for i in 0..block_n {
                for j in 0..block_w {
                    let w = phase + phases * (q0 + j);
                    if n0 + i < gemm.n_len && w < side.w {
                        let channel = group * channels + n0 + i;
                        let at = Index3 { d, h, w };
                        repair_at::<F, A>(
                            lhs, rhs, bias, out, &args, batch, channel, &at, slope, activation,
                            kind,
                        );
                    }
                }
            }
        }
    }
}
