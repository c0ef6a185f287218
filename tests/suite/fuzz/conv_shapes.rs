//! Convolution strategies shaped for one CPU path each (Winograd, the stride phases, tiles of
//! several images), which the general strategy's few channels and small batches never reach,
//! and each CPU algorithm pinned on the shapes it serves.

use std::ops::RangeInclusive;

use burn::tensor::Device;
use burn_convpool::cpu_kernels::{Algorithm, with_conv_algorithm};
use proptest::prelude::*;

use super::cases;
use super::conv::{ConvCase, fuzz_conv_cases};
use super::reference::Mode;

/// Channels per group wide enough for the CPU to pick Winograd (64+ a side).
const WINOGRAD_CHANNELS: Channels = (64..=70, 64..=70);

/// Channels per group wide enough for the CPU to pick the phase grids (input channels times
/// phases 64+, output channels 16+).
const PHASE_CHANNELS: Channels = (32..=36, 16..=20);

/// A few channels per group, where the CPU picks neither unless pinned.
const FEW_CHANNELS: Channels = (1..=6, 1..=6);

/// Input channels per group, and output channels per group.
type Channels = (RangeInclusive<usize>, RangeInclusive<usize>);

/// 3-tap stride-1 convolutions (and their transposes) long enough for the CPU's Winograd path
/// (8+ outputs per 3-tap axis) with `channels` per group: at [`WINOGRAD_CHANNELS`], shapes the
/// general strategy's few channels never reach.
fn winograd_case(channels: Channels) -> impl Strategy<Value = ConvCase> {
    (
        (
            1usize..=3,
            1usize..=2,
            channels.0,
            channels.1,
            any::<bool>(),
        ),
        (
            proptest::array::uniform3(8usize..=11),
            proptest::array::uniform3((0usize..=2, 0usize..=2)),
        ),
        (any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |((rank, batch, c_in, per_out, grouped), (size, padding), (bias, transpose, seed))| {
                let groups = if grouped { 2 } else { 1 };
                let active = |a: usize| a >= 3 - rank;
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    // 3D planes stay small: every case runs the f64 reference three times.
                    size: core::array::from_fn(|a| match (active(a), rank) {
                        (false, _) => 1,
                        (true, 3) => size[a] - 2,
                        (true, _) => size[a],
                    }),
                    kernel: core::array::from_fn(|a| if active(a) { 3 } else { 1 }),
                    stride: [1; 3],
                    dilation: [1; 3],
                    padding: core::array::from_fn(|a| if active(a) { padding[a] } else { (0, 0) }),
                    bias,
                    transpose,
                    output_padding: [0; 3],
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    activation: None,
                    seed,
                }
            },
        )
}

#[test]
fn winograd_sized_convs_match_the_reference() {
    // Pinned: the default for a pass this large is whichever algorithm this machine times
    // fastest, which may be the GEMM.
    fuzz_pinned(
        Algorithm::Winograd,
        "winograd-sized conv on flex",
        cases("FUZZ_CASES", 1024).div_ceil(64),
        winograd_case(WINOGRAD_CHANNELS),
    );
}

/// Strided convolutions (and their transposes) whose kernel is a whole number of strides on
/// every axis, with outputs long enough on multi-tap axes for the CPU's phase-grid path and
/// `channels` per group: at [`PHASE_CHANNELS`], shapes the general strategy's few channels and
/// small planes never reach. In 3D only the last axis has several taps, so the f64 reference
/// stays small.
fn phase_case(channels: Channels) -> impl Strategy<Value = ConvCase> {
    (
        (
            1usize..=3,
            1usize..=2,
            channels.0,
            channels.1,
            any::<bool>(),
        ),
        (
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(0usize..=3),
            proptest::array::uniform3((0usize..=8, 0usize..=8)),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            proptest::array::uniform3(0usize..=2),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, grouped),
                (stride, taps, extra, padding),
                (bias, transpose, output_padding, seed),
            )| {
                let groups = if grouped { 2 } else { 1 };
                let active = |a: usize| a >= 3 - rank;
                // The last axis is strided and has two taps or more; in 3D it is the only one.
                let stride: [usize; 3] = core::array::from_fn(|a| match (active(a), a) {
                    (false, _) => 1,
                    (true, 2) => stride[a].max(2),
                    (true, _) => stride[a],
                });
                let taps: [usize; 3] = core::array::from_fn(|a| match (active(a), a, rank) {
                    (false, _, _) | (true, 0 | 1, 3) => 1,
                    (true, 2, _) => taps[a].max(2),
                    (true, _, _) => taps[a],
                });
                let kernel: [usize; 3] = core::array::from_fn(|a| stride[a] * taps[a]);
                // Outputs: 14 per extra tap keeps the grids within 1.15 points per output
                // with two multi-tap axes; a one-tap axis may be short.
                let out: [usize; 3] = core::array::from_fn(|a| match (active(a), taps[a]) {
                    (false, _) => 1,
                    (true, 1) => 1 + extra[a],
                    (true, t) => 14 * (t - 1) + extra[a],
                });
                let (padding, size) = fitted(out, stride, kernel, padding, rank, transpose);
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    size,
                    kernel,
                    stride,
                    dilation: [1; 3],
                    padding,
                    bias,
                    transpose,
                    output_padding: core::array::from_fn(|a| output_padding[a] % stride[a]),
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    activation: None,
                    seed,
                }
            },
        )
}

#[test]
fn phase_sized_convs_match_the_reference() {
    // Pinned, as the Winograd-sized cases: large passes take the fastest algorithm timed.
    fuzz_pinned(
        Algorithm::Phases,
        "phase-sized strided conv on flex",
        cases("FUZZ_CASES", 1024).div_ceil(64),
        phase_case(PHASE_CHANNELS),
    );
}

/// The padding and input size of a case of rank `rank` with `out` outputs per axis and kernels
/// spanning `extent` (dilation included), from `drawn` padding: below the extent, symmetric for
/// a transposed conv, and for a conv leaving at least one input (the padded length is
/// `(out - 1) s + extent`); none and unit sizes on the axes below the rank. A transposed conv
/// takes the small side, whose length is the adjoint's output; a conv the input that gives
/// exactly `out`.
fn fitted(
    out: [usize; 3],
    stride: [usize; 3],
    extent: [usize; 3],
    drawn: [(usize, usize); 3],
    rank: usize,
    transpose: bool,
) -> ([(usize, usize); 3], [usize; 3]) {
    let active = |a: usize| a >= 3 - rank;
    let span = |a: usize| (out[a] - 1) * stride[a] + extent[a];
    let padding: [(usize, usize); 3] = core::array::from_fn(|a| {
        let (begin, end) = (drawn[a].0 % extent[a], drawn[a].1 % extent[a]);
        if !active(a) {
            (0, 0)
        } else if transpose {
            (begin, begin)
        } else {
            (begin, end.min(span(a) - 1 - begin))
        }
    });
    let size = core::array::from_fn(|a| {
        if !active(a) || transpose {
            out[a]
        } else {
            span(a) - padding[a].0 - padding[a].1
        }
    });
    (padding, size)
}

/// Small outputs (1 to 8 per axis) over batches of 4 to 9, so that on two threads (as on CI)
/// each task holds several images and the CPU lowers them a tile of several images at a time:
/// "same" ones from channels staged side by side, the others by table. Any stride, dilation
/// (2^40 where never taken), asymmetric padding, groups and transposes, which the general
/// strategy's batches of one or two never tile.
pub(super) fn tiled_case() -> impl Strategy<Value = ConvCase> {
    const HUGE_STEP: usize = 1 << 40;
    (
        (1usize..=3, 4usize..=9, 1usize..=4, 1usize..=4, 1usize..=2),
        (
            proptest::array::uniform3(1usize..=8),
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(prop_oneof![15 => 1usize..=3, 1 => Just(HUGE_STEP)]),
            proptest::array::uniform3(prop_oneof![15 => 1usize..=2, 1 => Just(HUGE_STEP)]),
            proptest::array::uniform3((0usize..=3, 0usize..=3)),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            proptest::array::uniform3(0usize..=2),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, groups),
                (out, kernel, stride, dilation, padding),
                (same, bias, transpose, output_padding, seed),
            )| {
                let active = |a: usize| a >= 3 - rank;
                let pick = |values: [usize; 3]| -> [usize; 3] {
                    core::array::from_fn(|a| if active(a) { values[a] } else { 1 })
                };
                // "Same": stride 1 and odd kernels padded by half their dilated extent.
                let (kernel, stride, dilation) = if same {
                    (
                        pick(kernel.map(|k| 2 * (k / 2) + 1)),
                        [1; 3],
                        pick(dilation),
                    )
                } else {
                    (pick(kernel), pick(stride), pick(dilation))
                };
                let out = pick(out);
                // A huge step is valid (as in PyTorch) where it is never taken: a stride over
                // one output, a dilation in a one-tap window; elsewhere it becomes 2.
                let unused_only = |steps: [usize; 3], counts: [usize; 3]| {
                    core::array::from_fn(|a| match (steps[a], counts[a]) {
                        (HUGE_STEP, 1) => HUGE_STEP,
                        (HUGE_STEP, _) => 2,
                        (step, _) => step,
                    })
                };
                let (stride, dilation) = (unused_only(stride, out), unused_only(dilation, kernel));
                let extent: [usize; 3] =
                    core::array::from_fn(|a| (kernel[a] - 1) * dilation[a] + 1);
                // "Same" pads half the (odd) extent on both sides, which `fitted` keeps.
                let padding = if same {
                    extent.map(|e| (e / 2, e / 2))
                } else {
                    padding
                };
                let (padding, size) = fitted(out, stride, extent, padding, rank, transpose);
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    size,
                    kernel,
                    stride,
                    dilation,
                    padding,
                    bias,
                    transpose,
                    output_padding: core::array::from_fn(|a| output_padding[a] % stride[a]),
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    activation: None,
                    seed,
                }
            },
        )
}

/// 1x1 stride-1 unpadded convolutions (and their transposes) for the CPU's pointwise path:
/// batches whose planes (1 to 90 positions) cut its strips of positions at image boundaries,
/// channels enough for several row tiles and for reductions of more than one vector, groups.
fn pointwise_case() -> impl Strategy<Value = ConvCase> {
    (
        (1usize..=3, 1usize..=5, 1usize..=20, 1usize..=20, 1usize..=3),
        (
            proptest::array::uniform3(1usize..=9),
            any::<bool>(),
            any::<bool>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |((rank, batch, c_in, per_out, groups), (size, bias, transpose, seed))| {
                let active = |a: usize| a >= 3 - rank;
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    // 3D planes stay small: every case runs the f64 reference three times.
                    size: core::array::from_fn(|a| match (active(a), rank) {
                        (false, _) => 1,
                        (true, 3) => size[a].min(4),
                        (true, _) => size[a],
                    }),
                    kernel: [1; 3],
                    stride: [1; 3],
                    dilation: [1; 3],
                    padding: [(0, 0); 3],
                    bias,
                    transpose,
                    output_padding: [0; 3],
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    activation: None,
                    seed,
                }
            },
        )
}

#[test]
fn pointwise_convs_match_the_reference() {
    // Pinned: the rule picks it for these shapes, but a pass large enough is timed.
    fuzz_pinned(
        Algorithm::Pointwise,
        "pointwise pinned, 1x1 convs, on flex",
        cases("FUZZ_CASES", 1024).div_ceil(16),
        pointwise_case(),
    );
}

#[test]
fn tiled_small_convs_match_the_reference() {
    fuzz_conv_cases(
        "small conv in tiles of several images on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024).div_ceil(16),
        tiled_case(),
    );
}

/// Winograd and the phase grids pinned on shapes they serve but are not picked for (a few
/// channels), and the adjoint input gradient and the direct path's passes on small shapes of
/// every kind. The im2col GEMM
/// runs the general strategy's shapes, and a depthwise forward always runs the depthwise
/// stencil.
#[test]
fn pinned_cpu_algorithms_match_the_reference() {
    let few = cases("FUZZ_CASES", 1024).div_ceil(8);
    fuzz_pinned(
        Algorithm::Winograd,
        "winograd pinned, few channels, on flex",
        few,
        winograd_case(FEW_CHANNELS),
    );
    fuzz_pinned(
        Algorithm::Phases,
        "phase grids pinned, few channels, on flex",
        few,
        phase_case(FEW_CHANNELS),
    );
    // Stride-1 input gradients (and transposed forwards) as forward convolutions, across the
    // small shapes' paddings, dilations and groups.
    fuzz_pinned(
        Algorithm::Adjoint,
        "adjoint pinned, small convs, on flex",
        few,
        tiled_case(),
    );
    // The direct forward pass (f32) on every small shape, also where its blocks of output
    // channels are mostly empty; its input gradients per stride phase (strided shapes) and,
    // through the adjoint, the stride-1 ones too.
    fuzz_pinned(
        Algorithm::Direct,
        "direct pinned, small convs, on flex",
        few,
        tiled_case(),
    );
}

/// `cases` cases of `strategy` on Flex with autodiff, every pass `algorithm` serves pinned to
/// it.
fn fuzz_pinned(
    algorithm: Algorithm,
    name: &str,
    cases: u32,
    strategy: impl Strategy<Value = ConvCase>,
) {
    with_conv_algorithm(algorithm, || {
        fuzz_conv_cases(name, Device::flex().autodiff(), cases, strategy)
    });
}
