//! The cases this suite found, kept as regressions, each with the bug it caught.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::Device;

use super::check;
use super::conv::{ConvCase, inputs, run_conv};
use super::layout::Layout;
use super::pool::{PoolCase, PoolKind, Samples, Specials, run_pool};
use super::reference::{Mode, Sliding, Window};

fn found_max_pool() -> PoolCase {
    // A dilated window at the padding whose first tap lies behind its predecessor's: the CPU's
    // run detection took the step as a stride of -1 (wrapping), an overflow panic in debug
    // builds and an out-of-bounds slice in release.
    PoolCase {
        rank: 1,
        batch: 1,
        channels: 1,
        size: [1, 1, 2],
        kind: PoolKind::Sliding(Sliding::Max),
        window: Window {
            kernel: [1, 1, 2],
            stride: [1, 1, 1],
            dilation: [1, 1, 2],
            padding: [(0, 0), (0, 0), (1, 1)],
        },
        ceil: false,
        output_size: [1, 1, 1],
        specials: Specials::None,
        seed: 0,
    }
}

fn found_unused_huge_steps() -> [PoolCase; 2] {
    // A stride over a single output, and a dilation between the taps of a one-tap window,
    // multiply nothing, and validation allows them up to 2^62: the CubeCL sliding max pool
    // passed them raw and failed its 32-bit launch check, an error at the first read.
    let huge = 1 << 40;
    let case = PoolCase {
        rank: 1,
        batch: 1,
        channels: 1,
        size: [1, 1, 5],
        kind: PoolKind::Sliding(Sliding::Max),
        window: Window {
            kernel: [1, 1, 2],
            stride: [1, 1, huge],
            dilation: [1, 1, 1],
            padding: [(0, 0); 3],
        },
        ceil: false,
        output_size: [1, 1, 1],
        specials: Specials::None,
        seed: 8,
    };
    let one_tap = Window {
        kernel: [1, 1, 1],
        stride: [1, 1, 2],
        dilation: [1, 1, huge],
        padding: [(0, 0); 3],
    };
    [
        case.clone(),
        PoolCase {
            window: one_tap,
            ..case
        },
    ]
}

fn found_cancelling_lp_pool() -> PoolCase {
    // An LP pool (p = 3) over a window whose cubes nearly cancel: its gradient takes the sum to
    // the power -2/3, so f32's roundoff in the sum shows 3e-4 off the exact value (PyTorch's
    // f32 is as far). The check allows the roundoff the reference's cancellation measures.
    PoolCase {
        rank: 3,
        batch: 2,
        channels: 1,
        size: [3, 5, 6],
        kind: PoolKind::Sliding(Sliding::Lp { norm_type: 3.0 }),
        window: Window {
            kernel: [1, 1, 3],
            stride: [1; 3],
            dilation: [1; 3],
            padding: [(0, 0); 3],
        },
        ceil: false,
        output_size: [1; 3],
        specials: Specials::None,
        seed: 12982367493194958906,
    }
}

fn found_long_bias_sum() -> ConvCase {
    // The bias gradient sums 20736 output-gradient values per channel; the CPU's running f32
    // sum was 2.6e-4 off (now summed in vector lanes).
    ConvCase {
        rank: 3,
        batch: 9,
        channels: (2, 1),
        groups: 2,
        size: [8, 6, 7],
        kernel: [3, 1, 2],
        stride: [2, 3, 1],
        dilation: [2, 1, 2],
        padding: [(2, 2), (0, 0), (0, 0)],
        bias: true,
        transpose: true,
        output_padding: [1, 0, 0],
        output_size: None,
        same: false,
        mode: Mode::Zeros,
        activation: None,
        seed: 2671011927823560721,
    }
}

fn found_empty_batch_conv() -> ConvCase {
    // An empty batch: the weight gradient is a sum over nothing. The CubeCL direct schedule
    // launched no unit for it and returned whatever its buffer held.
    ConvCase {
        rank: 1,
        batch: 0,
        channels: (1, 1),
        groups: 1,
        size: [1, 1, 1],
        kernel: [1, 1, 1],
        stride: [1, 1, 1],
        dilation: [1, 1, 3],
        padding: [(0, 0); 3],
        bias: true,
        transpose: false,
        output_padding: [0; 3],
        output_size: None,
        same: false,
        mode: Mode::Zeros,
        activation: None,
        seed: 0,
    }
}

fn found_empty_batch_under_huge_padding() -> ConvCase {
    // An empty batch with one window of 2^39 per image: nothing to compute, but the CPU
    // allocated scratch for each image's output (52 TB) and aborted, in the forward and the
    // weight gradient both. (A CubeCL device rejects the padding: a 32-bit device limit.)
    ConvCase {
        channels: (3, 2),
        size: [1, 1, 3],
        stride: [1, 1, 3],
        dilation: [1; 3],
        padding: [(0, 0), (0, 0), (2, 1 << 40)],
        bias: false,
        ..found_empty_batch_conv()
    }
}

fn found_empty_batch_under_huge_replicate_padding() -> ConvCase {
    // The same under a replicate padding of 2^40: the border copies the edge 2^40 times over
    // an empty batch, and NdArray's `repeat_dim` looped over the count (a hang, not an error).
    ConvCase {
        mode: Mode::Replicate,
        ..found_empty_batch_under_huge_padding()
    }
}

fn found_empty_batch_fractional_pool() -> PoolCase {
    // A fractional max pool of an empty batch: reordering its empty samples to (D, H, W) ran
    // Burn's `cat`, whose CubeCL overlap check subtracts 1 from every dim (an overflow panic
    // in debug builds, so the op failed at the first read).
    PoolCase {
        rank: 2,
        batch: 0,
        channels: 1,
        size: [1, 5, 4],
        kind: PoolKind::Fractional(Samples::Uniform),
        window: Window {
            kernel: [1, 1, 1],
            stride: [1, 1, 1],
            dilation: [1, 1, 1],
            padding: [(0, 0); 3],
        },
        ceil: false,
        output_size: [1, 1, 1],
        specials: Specials::None,
        seed: 649,
    }
}

/// A found case.
enum Found {
    Pool(PoolCase),
    Conv(ConvCase),
}

/// What a found case's call must give.
#[derive(Clone, Copy)]
enum Must {
    /// The reference's numbers.
    Match,
    /// The reference's numbers or, where a device cannot hold the case, a typed error.
    MatchOrReject,
}

/// Every found case: what it is, the case, and what its call must give.
fn found_cases() -> Vec<(&'static str, Found, Must)> {
    let [stride, dilation] = found_unused_huge_steps();
    vec![
        (
            "dilated max pool",
            Found::Pool(found_max_pool()),
            Must::Match,
        ),
        (
            "max pool with an unused huge stride",
            Found::Pool(stride),
            Must::Match,
        ),
        (
            "max pool with an unused huge dilation",
            Found::Pool(dilation),
            Must::Match,
        ),
        (
            "cancelling LP pool",
            Found::Pool(found_cancelling_lp_pool()),
            Must::Match,
        ),
        (
            "huge padding over an empty batch",
            Found::Conv(found_empty_batch_under_huge_padding()),
            Must::MatchOrReject,
        ),
        (
            "huge replicate padding over an empty batch",
            Found::Conv(found_empty_batch_under_huge_replicate_padding()),
            Must::MatchOrReject,
        ),
        (
            "empty-batch conv",
            Found::Conv(found_empty_batch_conv()),
            Must::Match,
        ),
        (
            "empty-batch fractional max pool",
            Found::Pool(found_empty_batch_fractional_pool()),
            Must::Match,
        ),
        (
            "long bias sum",
            Found::Conv(found_long_bias_sum()),
            Must::Match,
        ),
    ]
}

fn check_found(device: &Device) {
    // Dirty the device's memory pool first, so an unwritten gradient shows.
    let dirty = ConvCase {
        batch: 2,
        ..found_empty_batch_conv()
    };
    let _ = run_conv(&dirty, Layout::Contiguous, device);
    for (what, case, must) in found_cases() {
        let verdict = match &case {
            Found::Pool(case) => {
                let got = catch_unwind(AssertUnwindSafe(|| {
                    run_pool(case, Layout::Contiguous, device)
                }));
                check(what, got, case.expected(&case.input(), true), case.rank)
            }
            Found::Conv(case) => {
                let got = catch_unwind(AssertUnwindSafe(|| {
                    run_conv(case, Layout::Contiguous, device)
                }));
                let (x, w, b) = inputs(case);
                check(what, got, case.expected(&x, &w, b.as_deref()), case.rank)
            }
        };
        match must {
            Must::Match => assert!(matches!(verdict, Ok(true)), "{what}: {verdict:?}"),
            Must::MatchOrReject => assert!(verdict.is_ok(), "{what}: {verdict:?}"),
        }
    }
}

#[test]
fn cases_found_by_fuzzing_stay_fixed() {
    check_found(&Device::flex().autodiff());
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)]
    check_found(&Device::ndarray().autodiff());
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    check_found(&crate::common::gpu().autodiff());
}
