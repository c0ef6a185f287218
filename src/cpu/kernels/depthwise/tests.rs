use burn::tensor::ops::ConvOptions;

use crate::cpu::kernels::conv::reference::*;

/// The depthwise stencil on rows of 3, 5, 7 and 4 taps, on inputs narrower and wider than
/// the kernel, and dilated.
#[test]
fn depthwise_rows_of_every_width() {
    for (k_w, pad_w) in [(3, 1), (5, 2), (7, 3), (4, 1), (5, 0)] {
        for in_w in [3, 9, 17] {
            if in_w + 2 * pad_w < k_w {
                continue;
            }
            check(
                [2, 3, 1, 4, in_w],
                3,
                [1, 2, k_w],
                ConvOptions::new([1; 3], [0, 1, pad_w], [1; 3], 3),
            );
        }
    }
    check(
        [1, 2, 1, 5, 12],
        2,
        [1, 3, 3],
        ConvOptions::new([1; 3], [0, 1, 2], [1, 1, 2], 2),
    );
    // Output rows around the register runs' widths: under 8, whole runs of 32, and every
    // remainder run (8, 16, 24, 32 columns) overlapping the run before it.
    for out_w in [7, 8, 15, 31, 32, 33, 40, 48, 56, 63, 64, 72, 95] {
        check(
            [2, 2, 1, 3, out_w],
            2,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2),
        );
    }
}

/// The depthwise weight gradient over rows longer than its leaf of products (several
/// segments a row), a batch of three, a 1D signal, D and H strides (the copy cut short where
/// the stride leaves the last input rows unread), and no padding at all.
#[test]
fn depthwise_weight_gradient_of_long_rows() {
    check(
        [3, 2, 1, 3, 300],
        2,
        [1, 3, 5],
        ConvOptions::new([1; 3], [0, 1, 2], [1, 1, 2], 2),
    );
    check(
        [2, 3, 1, 1, 1000],
        3,
        [1, 1, 9],
        ConvOptions::new([1; 3], [0, 0, 4], [1; 3], 3),
    );
    check(
        [2, 2, 5, 7, 9],
        2,
        [3, 3, 3],
        ConvOptions::new([2, 3, 1], [1, 0, 1], [1; 3], 2),
    );
    check(
        [1, 2, 1, 6, 20],
        2,
        [1, 3, 3],
        ConvOptions::new([1; 3], [0, 0, 0], [1; 3], 2),
    );
}

/// Depthwise (the bordered rows, or the stencil where the W stride is not 1) and channel
/// multipliers (still the lowered path) side by side.
#[test]
fn depthwise_and_channel_multipliers() {
    check(
        [2, 3, 3, 5, 6],
        3,
        [3, 3, 3],
        ConvOptions::new([1; 3], [1, 2, 2], [1, 2, 2], 3),
    );
    check(
        [2, 6, 1, 9, 11],
        6,
        [1, 3, 3],
        ConvOptions::new([1, 1, 1], [0, 1, 1], [1; 3], 6),
    );
    check(
        [1, 3, 1, 9, 11],
        6,
        [1, 3, 2],
        ConvOptions::new([1, 2, 3], [0, 2, 1], [1, 2, 1], 3),
    );
    check(
        [1, 4, 5, 7, 6],
        4,
        [3, 2, 3],
        ConvOptions::new([2, 1, 2], [1, 0, 2], [1, 2, 1], 4),
    );
    check(
        [1, 1, 1, 1, 8],
        2,
        [1, 1, 3],
        ConvOptions::new([1; 3], [0, 0, 5], [1; 3], 1),
    );
}
