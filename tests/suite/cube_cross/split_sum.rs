//! Split-k sums handed off to the tiled GEMM's own cubes against a second launch: the same
//! bits for every pass that splits (a forward pass with a bias and an activation, a strided
//! input gradient's stride phases, weight gradients, groups), finite or not, and fewer sums
//! launched.

use burn::tensor::{Device, Tensor};
use burn_convpool::cube_kernels::{CubeKernels, OurKernels, SplitSum};
use burn_convpool::cube_launches::{Launch, record};
use burn_convpool::*;

use super::{Leaf, run, wgpu};
use crate::common;

/// A conv with a pass that splits its reduction on any device: few outputs, long sums.
struct Case {
    name: &'static str,
    x: [usize; 4],
    weight: [usize; 4],
    options: ConvNdOptions<2>,
    /// Where in the weight to put a non-finite value, if anywhere.
    non_finite: Option<usize>,
    /// Row tiles per tiled launch: fewer than the GEMM's runs it as several launches, which
    /// share the tiles' counters in turn.
    tiles_per_launch: usize,
}

/// Cases with a pass that splits on any device.
fn cases() -> Vec<Case> {
    let same = || ConvNdOptions::default().with_padding(Padding::Explicit([(1, 1), (1, 1)]));
    vec![
        // A forward pass over 576 reduction steps for 32 rows.
        Case {
            name: "long channels",
            x: [2, 64, 4, 4],
            weight: [16, 64, 3, 3],
            options: same(),
            non_finite: None,
            tiles_per_launch: OurKernels::MAX_TILES_PER_LAUNCH,
        },
        // A weight gradient over 8192 positions.
        Case {
            name: "long batch",
            x: [8, 16, 32, 32],
            weight: [64, 16, 3, 3],
            options: same(),
            non_finite: None,
            tiles_per_launch: OurKernels::MAX_TILES_PER_LAUNCH,
        },
        // A stride-2 input gradient's phases, each over up to 4 taps of 128 channels.
        Case {
            name: "strided",
            x: [2, 64, 8, 8],
            weight: [128, 64, 3, 3],
            options: same().with_stride([2, 2]),
            non_finite: None,
            tiles_per_launch: OurKernels::MAX_TILES_PER_LAUNCH,
        },
        // Grouped, so the tiles of each group count their arrivals apart.
        Case {
            name: "grouped",
            x: [8, 128, 32, 32],
            weight: [128, 32, 3, 3],
            options: same().with_groups(4),
            non_finite: None,
            tiles_per_launch: OurKernels::MAX_TILES_PER_LAUNCH,
        },
        // An infinite weight meets the padding: the sum's repair recomputes by the definition.
        Case {
            name: "non-finite weight",
            x: [2, 64, 4, 4],
            weight: [16, 64, 3, 3],
            options: same(),
            non_finite: Some(4),
            tiles_per_launch: OurKernels::MAX_TILES_PER_LAUNCH,
        },
        // Two row tiles, one per launch, each split four ways.
        Case {
            name: "chunked",
            x: [2, 64, 8, 8],
            weight: [16, 64, 3, 3],
            options: same(),
            non_finite: None,
            tiles_per_launch: 1,
        },
    ]
}

/// A run's forward values and the gradient of each input.
type Results = (Vec<f32>, Vec<Vec<f32>>);

/// The case's values and gradients (input, weight, bias) with `split_sum` pinned on the
/// GPU, through `bias + ReLU`, and the kernels launched.
fn run_case(case: &Case, split_sum: SplitSum) -> (Results, Vec<Launch>) {
    let mut rng = super::rng(case.name);
    let x = Leaf::random(&mut rng, case.x);
    let mut weight = Leaf::random(&mut rng, case.weight);
    if let Some(at) = case.non_finite {
        weight.values[at] = f32::INFINITY;
    }
    let bias = Leaf::random(&mut rng, [case.weight[0], 1, 1, 1]);
    let options = case.options.clone().with_activation(Activation::Relu);
    let op = |t: Vec<Tensor<4>>| {
        let bias = super::bias_of(&t[2]);
        conv2d(t[0].clone(), t[1].clone(), Some(bias), options.clone())
    };
    let kernels = OurKernels::default()
        .with_split_sum(split_sum)
        .with_max_tiles_per_launch(case.tiles_per_launch);
    let _pinned = common::pin(CubeKernels::Ours(kernels));
    let device: Device = wgpu().autodiff();
    record(|| run(&device, &[x, weight, bias], &op, 31))
}

fn sums(launches: &[Launch]) -> usize {
    let sum =
        |launch: &&Launch| matches!(launch, Launch::Kernel("sum_splits" | "sum_splits_exact"));
    launches.iter().filter(sum).count()
}

#[test]
fn handed_off_split_sums_match_a_second_launch_bit_for_bit() {
    for case in cases() {
        let (launched, second) = run_case(&case, SplitSum::SecondLaunch);
        let (handed_off, handoff) = run_case(&case, SplitSum::Handoff);
        // The tiled GEMMs' sums are handed off; the direct weight gradients' stay launches.
        assert!(
            sums(&handoff) < sums(&second),
            "{}: {} split sums launched with the handoff pinned, {} without",
            case.name,
            sums(&handoff),
            sums(&second)
        );
        let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&handed_off.0),
            bits(&launched.0),
            "{}: forward",
            case.name
        );
        for (i, (a, b)) in handed_off.1.iter().zip(&launched.1).enumerate() {
            assert_eq!(bits(a), bits(b), "{}: gradient of input {i}", case.name);
        }
    }
}
