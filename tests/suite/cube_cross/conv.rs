//! Convolutions on the CubeCL kernels against Flex: every pass of every schedule (direct,
//! tiled, split-k, stride phases, depthwise, wide kernels), 1D, 3D and transposed, chunked
//! launches, f64 sums and empty batches.

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_convpool::cube_kernels::{Buffering, ConvSchedule, CubeKernels, GemmTile, OurKernels};
use burn_convpool::*;

use super::{Layout, Leaf, assert_close, bias_of, cross, cross_pinned, failure, rng, wgpu};
use crate::common::{self, Lcg};

/// A 2D conv case: its name (which seeds its values), input and weight dims, options, and the
/// layout of the input the op gets.
type Conv2dCase = (
    &'static str,
    [usize; 4],
    [usize; 4],
    ConvNdOptions<2>,
    Layout,
);

/// Each case, with a bias, on both devices.
fn conv2d_cases(cases: Vec<Conv2dCase>) {
    for (name, x, weight, options, layout) in cases {
        let mut rng = rng(name);
        let x = Leaf::random(&mut rng, x).laid_out(layout);
        let weight_leaf = Leaf::random(&mut rng, weight);
        let bias = Leaf::random(&mut rng, [weight[0], 1, 1, 1]);
        cross(name, &[x, weight_leaf, bias], |t| {
            conv2d(
                t[0].clone(),
                t[1].clone(),
                Some(bias_of(&t[2])),
                options.clone(),
            )
        });
    }
}

/// Few channels: the direct schedules, on odd sizes with padding, stride, dilation and
/// asymmetric padding.
#[test]
fn direct_convs_match_cpu() {
    let o = ConvNdOptions::<2>::default;
    conv2d_cases(vec![
        (
            "small",
            [2, 3, 7, 9],
            [4, 3, 3, 3],
            o().with_padding([1, 1]),
            Layout::Contiguous,
        ),
        (
            "strided",
            [1, 4, 9, 8],
            [5, 4, 3, 2],
            o().with_stride([2, 3]).with_dilation([2, 1]),
            Layout::Permuted,
        ),
        (
            "asym",
            [1, 2, 6, 7],
            [3, 2, 3, 3],
            o().with_padding([(0, 2), (1, 0)]),
            Layout::Contiguous,
        ),
    ]);
}

/// The tiled GEMM: 16+ channels a side, groups, and long reductions split over k.
#[test]
fn tiled_convs_match_cpu() {
    let o = ConvNdOptions::<2>::default;
    conv2d_cases(vec![
        (
            "tiled",
            [2, 24, 9, 11],
            [40, 24, 3, 3],
            o().with_padding([1, 1]),
            Layout::Permuted,
        ),
        // Channels-last: cubek's GEMM reads each group's 8 channels and writes its 16 as
        // vectors.
        (
            "grouped",
            [2, 32, 8, 8],
            [64, 8, 3, 3],
            o().with_padding([1, 1]).with_groups(4),
            Layout::ChannelsLast,
        ),
        // 32 channels per group on every pass's channel side (ResNeXt's later stages): the tiles
        // narrowed to 32 along it, two groups, with bias.
        (
            "grouped_narrow",
            [2, 64, 6, 7],
            [64, 32, 3, 3],
            o().with_padding([1, 1]).with_groups(2),
            Layout::Permuted,
        ),
        (
            "split_k",
            [2, 16, 32, 33],
            [32, 16, 3, 3],
            o().with_padding(Padding::Same),
            Layout::Contiguous,
        ),
        // A late layer: one tile of positions, long channel x tap reductions, so the forward
        // (k = 576, with bias) and input gradient (k = 432) split k over several cubes.
        (
            "late_layer",
            [2, 64, 3, 3],
            [48, 64, 3, 3],
            o().with_padding([1, 1]),
            Layout::Permuted,
        ),
    ]);
}

/// Strided convolutions, whose input gradient runs one tiled launch per stride phase.
#[test]
fn strided_input_gradients_match_cpu() {
    let o = ConvNdOptions::<2>::default;
    conv2d_cases(vec![
        // Strided input gradients run one tiled launch per stride phase over the taps that reach
        // it: four phases of 1-2 taps a side; a 1x1 stride 2, whose three other phases no tap
        // reaches (zeros); phases of uneven reductions (k = 64 x 1 to 64 x 4) split over k; the
        // same 1x1 with k = 256 split, so the phases without taps write zeros to every split;
        // stride 3 with dilation 2; and 81 phases, more than run as launches of their own (one
        // launch over every position, dividing by the stride).
        (
            "tiled_strided",
            [2, 16, 11, 10],
            [24, 16, 3, 3],
            o().with_stride([2, 2]).with_padding([1, 1]),
            Layout::Permuted,
        ),
        (
            "tiled_1x1_s2",
            [2, 32, 9, 8],
            [16, 32, 1, 1],
            o().with_stride([2, 2]),
            Layout::Contiguous,
        ),
        (
            "tiled_phases_split_k",
            [2, 48, 5, 5],
            [64, 48, 3, 3],
            o().with_stride([2, 2]).with_padding([1, 1]),
            Layout::Contiguous,
        ),
        (
            "tiled_1x1_s2_split_k",
            [1, 16, 4, 4],
            [256, 16, 1, 1],
            o().with_stride([2, 2]),
            Layout::Contiguous,
        ),
        (
            "tiled_dilated_s3",
            [1, 16, 13, 12],
            [20, 16, 3, 3],
            o().with_stride([3, 3])
                .with_dilation([2, 2])
                .with_padding([2, 1]),
            Layout::Contiguous,
        ),
        (
            "tiled_81_phases",
            [1, 16, 12, 12],
            [16, 16, 3, 3],
            o().with_stride([9, 9]),
            Layout::Contiguous,
        ),
    ]);
}

/// A weight leaf with `inf`, `-inf` and NaN among its values: an input gradient sums only the
/// taps that meet an output (as col2im does), so a non-finite weight whose products all fall
/// in the padding leaves the gradient finite, where a GEMM over the padded output gradient
/// multiplies it by a zero (NaN).
fn non_finite_weight(rng: &mut Lcg, dims: [usize; 4]) -> Leaf<4> {
    let mut weight = Leaf::random(rng, dims);
    let len = weight.values.len();
    for (i, value) in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN]
        .into_iter()
        .enumerate()
    {
        weight.values[(i * 7 + 2) % len] = value;
    }
    weight
}

/// Weights and output gradients that are not finite, on every schedule (tiled, its stride
/// phases and split k, direct, depthwise, `conv_transpose`'s forward with a bias) and on
/// Burn's kernels: every pass sums only the taps inside the input, so the same NaN,
/// infinities and finite values as Flex's, whichever kernel the tuner picks.
#[test]
fn non_finite_values_give_cpu_results() {
    let o = ConvNdOptions::<2>::default;
    let cases = [
        (
            "non_finite_tiled",
            [2, 16, 5, 6],
            [16, 16, 3, 3],
            o().with_padding([1, 1]),
        ),
        // Channels-last input, as Burn's convolutions leave theirs: so is every result.
        (
            "non_finite_channels_last",
            [2, 16, 5, 6],
            [16, 16, 3, 3],
            o().with_padding([1, 1]),
        ),
        (
            "non_finite_tiled_strided",
            [2, 16, 7, 6],
            [24, 16, 3, 3],
            o().with_stride([2, 2]).with_padding([1, 1]),
        ),
        (
            "non_finite_split_k",
            [1, 48, 3, 4],
            [64, 48, 3, 3],
            o().with_padding([1, 1]),
        ),
        (
            "non_finite_direct",
            [2, 3, 7, 9],
            [4, 3, 3, 3],
            o().with_padding([1, 2]),
        ),
        (
            "non_finite_depthwise",
            [1, 5, 6, 7],
            [5, 1, 3, 3],
            o().with_padding([1, 1]).with_groups(5),
        ),
    ];
    for (name, x, weight, options) in cases {
        let mut rng = rng(name);
        let layout = match name.ends_with("channels_last") {
            true => Layout::ChannelsLast,
            false => Layout::Contiguous,
        };
        let leaves = [
            Leaf::random(&mut rng, x).laid_out(layout),
            non_finite_weight(&mut rng, weight),
        ];
        let op = |t: Vec<Tensor<4>>| conv2d(t[0].clone(), t[1].clone(), None, options.clone());
        cross(name, &leaves, op);
        cross_pinned(CubeKernels::Burn, "Burn's kernels", name, &leaves, op);
        // An infinite and a NaN scale make the output gradient, and so the weight gradient's
        // products with the padding, non-finite.
        let out_dims = conv2d(
            Tensor::<4>::zeros(x, &wgpu()),
            Tensor::<4>::zeros(weight, &wgpu()),
            None,
            options.clone(),
        )
        .dims();
        let mut scale = Leaf::random(&mut rng, out_dims);
        let last = scale.values.len() - 1;
        (scale.values[1], scale.values[last]) = (f32::INFINITY, f32::NAN);
        let leaves = [
            Leaf::random(&mut rng, x).laid_out(layout),
            Leaf::random(&mut rng, weight),
            scale,
        ];
        let scaled = |t: Vec<Tensor<4>>| {
            conv2d(t[0].clone(), t[1].clone(), None, options.clone()) * t[2].clone()
        };
        let name = &format!("{name}_scaled");
        cross(name, &leaves, scaled);
        cross_pinned(CubeKernels::Burn, "Burn's kernels", name, &leaves, scaled);
    }
    let mut rng = rng("non_finite_transposed");
    let leaves = [
        Leaf::random(&mut rng, [2, 16, 4, 5]),
        non_finite_weight(&mut rng, [16, 8, 3, 3]),
        Leaf::random(&mut rng, [8, 1, 1, 1]),
    ];
    cross("non_finite_transposed", &leaves, |t| {
        let options = ConvTransposeNdOptions::<2>::default().with_padding([1, 1]);
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
}

/// Depthwise convolutions and wide kernel rows: the direct schedules of every pass,
/// the weight gradient's register blocks and its split schedule.
#[test]
fn depthwise_and_wide_kernels_match_cpu() {
    let o = ConvNdOptions::<2>::default;
    conv2d_cases(vec![
        // Depthwise (direct schedules in every pass) with a channel multiplier.
        (
            "depthwise",
            [2, 6, 10, 9],
            [12, 1, 3, 3],
            o().with_padding([1, 1]).with_groups(6).with_stride([2, 2]),
            Layout::Permuted,
        ),
        // A 9-wide kernel row, which the direct weight-gradient schedule keeps in registers, and
        // a 13-wide one, wider than it keeps: the split schedule.
        (
            "wide_kernel",
            [2, 2, 5, 20],
            [3, 2, 1, 9],
            o().with_padding([0, 4]),
            Layout::Contiguous,
        ),
        (
            "widest_kernel",
            [2, 2, 5, 30],
            [3, 2, 1, 13],
            o().with_padding([0, 6]),
            Layout::Contiguous,
        ),
        // The direct weight gradient's blocks, partial on every side: 21 output channels (a block
        // of 16 and one of 5), 13 input channels (blocks of 5 at 3 taps), 2 positions per step
        // over rows of 7 at stride 2 (neighbours sharing a value), and a dilated row (one
        // position per step).
        (
            "weight_blocks",
            [2, 13, 6, 14],
            [21, 13, 3, 3],
            o().with_stride([1, 2]).with_padding([1, 1]),
            Layout::Permuted,
        ),
        (
            "weight_blocks_dilated",
            [1, 13, 5, 11],
            [21, 13, 2, 3],
            o().with_dilation([1, 2]).with_padding([0, 2]),
            Layout::Contiguous,
        ),
        // Long reductions: several k-splits (weight and bias gradients).
        (
            "depthwise_split",
            [2, 4, 32, 33],
            [4, 1, 3, 3],
            o().with_padding([1, 1]).with_groups(4),
            Layout::Contiguous,
        ),
    ]);
}

#[test]
fn conv1d_3d_and_transpose_match_cpu() {
    let mut rng = rng("conv-others");
    let x = Leaf::random(&mut rng, [2, 5, 13]);
    let w = Leaf::random(&mut rng, [6, 5, 4]);
    cross("conv1d", &[x, w], |t| {
        conv1d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default().with_stride([2]).with_padding([3]),
        )
    });
    let x = Leaf::random(&mut rng, [1, 3, 5, 6, 7]);
    let w = Leaf::random(&mut rng, [4, 3, 2, 3, 3]);
    cross("conv3d", &[x.permuted(), w], |t| {
        conv3d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default()
                .with_padding([1, 1, 1])
                .with_dilation([1, 2, 1]),
        )
    });
    // Eight stride phases of a tiled 3D input gradient.
    let x = Leaf::random(&mut rng, [1, 16, 5, 6, 7]);
    let w = Leaf::random(&mut rng, [16, 16, 3, 3, 3]);
    cross("conv3d_tiled_strided", &[x, w], |t| {
        conv3d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default()
                .with_stride([2, 2, 2])
                .with_padding([1, 0, 1]),
        )
    });
    let x = Leaf::random(&mut rng, [2, 4, 5, 6]);
    let w = Leaf::random(&mut rng, [4, 3, 3, 3]);
    let bias = Leaf::random(&mut rng, [6, 1, 1, 1]);
    cross("conv_transpose2d", &[x, w, bias], |t| {
        let options = ConvTransposeNdOptions::<2>::default()
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_padding_out([1, 0])
            .with_groups(2);
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
    // conv_transpose's forward is the input-gradient GEMM: split k (48 x 9) with the bias.
    let x = Leaf::random(&mut rng, [1, 48, 2, 3]);
    let w = Leaf::random(&mut rng, [48, 24, 3, 3]);
    let bias = Leaf::random(&mut rng, [24, 1, 1, 1]);
    cross("conv_transpose2d_split_k", &[x, w, bias], |t| {
        let options = ConvTransposeNdOptions::<2>::default().with_padding([1, 1]);
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
    let x = Leaf::random(&mut rng, [1, 20, 6, 5]);
    let w = Leaf::random(&mut rng, [20, 18, 3, 3]);
    cross("conv_transpose2d_tiled", &[x.permuted(), w], |t| {
        conv_transpose2d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvTransposeNdOptions::<2>::default().with_stride([2, 2]),
        )
    });
}

/// The convolution precision is held per CubeCL device, whichever way the device is named
/// (autodiff or not), and reads back as set; a CPU device always computes exactly and refuses
/// the setting by name.
#[test]
fn conv_precision_is_held_per_device() {
    use burn_convpool::cube_kernels::{ConvPrecision, conv_precision, set_conv_precision};
    // Tuned runs key their rounds by the precision: take the pins' turn so none sees it change.
    let _turn = common::pin(CubeKernels::default());
    assert_eq!(conv_precision(&wgpu()), ConvPrecision::Exact);
    set_conv_precision(&wgpu().autodiff(), ConvPrecision::Tf32);
    assert_eq!(conv_precision(&wgpu()), ConvPrecision::Tf32);
    set_conv_precision(&wgpu(), ConvPrecision::Exact);
    assert_eq!(conv_precision(&wgpu().autodiff()), ConvPrecision::Exact);

    assert_eq!(conv_precision(&Device::flex()), ConvPrecision::Exact);
    let refused = std::panic::catch_unwind(|| {
        set_conv_precision(&Device::flex(), ConvPrecision::Tf32);
    })
    .expect_err("a CPU device has no precision to set");
    let message = refused
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(
        message.contains("set_conv_precision") && message.contains("not a CubeCL device"),
        "{message}"
    );
}

/// Burn's own kernels (pinned: every pass through `builtin.rs`, as Burn's own autodiff calls
/// them), the tuner's choice between them and ours, and cubek's unit routine with register
/// tiles (which `common::OUR_KERNELS` runs only where a bias is added), on each kind of layer:
/// grouped, strided and dilated 2D on channels-last input, depthwise, 1D, 3D and transposed.
/// The golden cases run our kernels and Burn's pinned, so this is where a tuning round runs
/// end to end.
#[test]
fn builtin_tuned_and_register_gemm_kernels_match_cpu() {
    let mut rng = rng("builtin");
    let x = Leaf::random(&mut rng, [2, 4, 9, 8]);
    let w = Leaf::random(&mut rng, [6, 2, 3, 2]);
    let bias = Leaf::random(&mut rng, [6, 1, 1, 1]);
    let grouped = [x.permuted(), w, bias];
    let grouped_op = |t: Vec<Tensor<4>>| {
        let options = ConvNdOptions::<2>::default()
            .with_stride([2, 1])
            .with_padding([1, 1])
            .with_dilation([1, 2])
            .with_groups(2);
        conv2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    };
    let depthwise = [
        Leaf::random(&mut rng, [1, 5, 7, 6]),
        Leaf::random(&mut rng, [5, 1, 3, 3]),
    ];
    let depthwise_op = |t: Vec<Tensor<4>>| {
        let options = ConvNdOptions::<2>::default()
            .with_padding([1, 1])
            .with_groups(5);
        conv2d(t[0].clone(), t[1].clone(), None, options)
    };
    let transposed = [
        Leaf::random(&mut rng, [2, 4, 5, 6]),
        Leaf::random(&mut rng, [4, 3, 3, 3]),
    ];
    let transposed_op = |t: Vec<Tensor<4>>| {
        let options = ConvTransposeNdOptions::<2>::default()
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_padding_out([1, 0]);
        conv_transpose2d(t[0].clone(), t[1].clone(), None, options)
    };
    let line = [
        Leaf::random(&mut rng, [2, 3, 11]),
        Leaf::random(&mut rng, [4, 3, 3]),
    ];
    let line_op = |t: Vec<Tensor<3>>| {
        let options = ConvNdOptions::<1>::default()
            .with_stride([2])
            .with_padding([2]);
        conv1d(t[0].clone(), t[1].clone(), None, options)
    };
    let volume = [
        Leaf::random(&mut rng, [1, 3, 4, 5, 6]),
        Leaf::random(&mut rng, [4, 3, 2, 3, 3]),
    ];
    let volume_op = |t: Vec<Tensor<5>>| {
        let options = ConvNdOptions::<3>::default().with_padding([1, 1, 1]);
        conv3d(t[0].clone(), t[1].clone(), None, options)
    };
    let register = OurKernels::default().with_conv(ConvSchedule::Gemm(GemmTile::Register));
    for (kernels, label) in [
        (CubeKernels::Burn, "Burn's kernels"),
        (CubeKernels::Tuned, "tuned"),
        (CubeKernels::Ours(register), "cubek's GEMM, register tiles"),
    ] {
        cross_pinned(kernels, label, "builtin_grouped", &grouped, grouped_op);
        cross_pinned(
            kernels,
            label,
            "builtin_depthwise",
            &depthwise,
            depthwise_op,
        );
        cross_pinned(
            kernels,
            label,
            "builtin_transposed",
            &transposed,
            transposed_op,
        );
        cross_pinned(kernels, label, "builtin_conv1d", &line, line_op);
        cross_pinned(kernels, label, "builtin_conv3d", &volume, volume_op);
    }
}

/// A tiled launch needing more than 65,535 cubes along `m` (4.2M output positions in 64-row
/// tiles) runs as several launches over consecutive tile ranges and matches Flex everywhere,
/// the last positions included. On a real GPU only (`vulkan` builds): its 268 MB output is
/// more than wgpu binds on lavapipe (128 MiB), so CI checks the chunked launches with a lower
/// per-launch limit instead ([`long_m_runs_as_several_launches`]).
#[cfg(not(feature = "wgpu"))]
#[test]
fn conv_over_65535_tiles_matches_cpu() {
    let mut rng = rng("huge");
    let dims = [1, 2, 2050, 2050];
    let x = rng.values(dims.iter().product());
    let weight = rng.values(16 * 2 * 9);
    let run = |device: &Device| {
        let x = Tensor::<4>::from_data(TensorData::new(x.clone(), dims).convert::<f32>(), device);
        let weight = Tensor::<4>::from_data(
            TensorData::new(weight.clone(), [16, 2, 3, 3]).convert::<f32>(),
            device,
        );
        let out = conv2d(
            x,
            weight,
            None,
            ConvNdOptions::default().with_padding([1, 1]),
        );
        out.into_data().try_to_vec::<f32>().unwrap()
    };
    let expected = run(&Device::flex());
    // 16 output channels; the tiled schedule's tiles hold 64 positions.
    assert!(expected.len() / 16 > 65_535 * 64);
    let _pinned = common::pin(CubeKernels::Ours(OurKernels::default()));
    assert_close("65,535+ tiles forward", &run(&wgpu()), &expected);
}

/// A forward and input gradient whose `m` takes several tiled launches (3 tiles each, where a
/// grid would hold 65,535), and a strided input gradient whose 4 stride phases take two (3
/// phases' cubes, then 1), match Flex, with a bias, every position of the last, partial launch
/// included, single- and double-buffered.
#[test]
fn long_m_runs_as_several_launches() {
    use burn_convpool::cube_launches::{Launch, record};
    let values = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * scale)
            .collect()
    };
    // m = 2 x 17 x 19 = 646 positions: 11 tiles of 64, so 4 launches; 16 and 24 channels.
    // At stride 2, m = 2 x 9 x 10 = 180: 3 tiles, one launch; each stride phase at most 180
    // positions, one launch per 3 phases.
    let (x_dims, w_dims) = ([2, 16, 17, 19], [24, 16, 3, 3]);
    let x = values(x_dims.iter().product(), 0.01);
    let weight = values(w_dims.iter().product(), 0.02);
    let bias = values(24, 0.1);
    for (stride, tiled_launches) in [(1, 4 + 4), (2, 1 + 2)] {
        let run = |device: &Device| {
            let x =
                Tensor::<4>::from_data(TensorData::new(x.clone(), x_dims), device).require_grad();
            let weight = Tensor::<4>::from_data(TensorData::new(weight.clone(), w_dims), device);
            let bias = Tensor::<1>::from_data(TensorData::new(bias.clone(), [24]), device);
            let options = ConvNdOptions::default()
                .with_padding([1, 1])
                .with_stride([stride, stride]);
            let out = conv2d(x.clone(), weight, Some(bias), options);
            let grads = (out.clone() * out.clone()).sum().backward();
            let x_grad = x.grad(&grads).unwrap();
            [out.into_data(), x_grad.into_data()].map(|d| d.try_to_vec::<f32>().unwrap())
        };
        let expected = run(&Device::flex().autodiff());
        for buffering in [Buffering::Double, Buffering::Single] {
            let ours = OurKernels::default()
                .with_conv(ConvSchedule::Tiled(buffering))
                .with_max_tiles_per_launch(3);
            let _pinned = common::pin(CubeKernels::Ours(ours));
            let (actual, launches) = record(|| run(&wgpu().autodiff()));
            let tiled = launches
                .iter()
                .filter(|launch| **launch == Launch::Kernel("conv_gemm_tiled"))
                .count();
            assert_eq!(tiled, tiled_launches, "stride {stride}: {launches:?}");
            for (what, (actual, expected)) in ["forward", "x grad"]
                .iter()
                .zip(actual.iter().zip(&expected))
            {
                assert_close(
                    &format!("{what}, stride {stride}, {buffering:?}"),
                    actual,
                    expected,
                );
            }
        }
    }
}

/// f64 convs sum in f64: over a long reduction (k = 64 x 9, and 48 x 9 for the input
/// gradient) the forward and both gradients agree with Flex's f64 to 1e-11, where sums in f32
/// are off by ~1e-6. A device that does not report f64 gives the typed error instead.
#[test]
fn f64_conv_sums_in_f64() {
    let gpu = wgpu();
    let mut rng = rng("f64");
    let (x_dims, w_dims) = ([2, 64, 5, 6], [48, 64, 3, 3]);
    let x = rng.values(x_dims.iter().product());
    let weight = rng.values(w_dims.iter().product());
    let options = ConvNdOptions::default().with_padding([1, 1]);
    if !gpu.supports_dtype(DType::F64) {
        let message = failure(|| {
            let x = common::f64_tensor(&x, x_dims, &gpu);
            let weight = common::f64_tensor(&weight, w_dims, &gpu);
            conv2d(x, weight, None, options).into_data()
        });
        assert!(message.contains("dtype F64 is not supported"), "{message}");
        return;
    }
    let run = |device: &Device| {
        let x = common::f64_tensor(&x, x_dims, device).require_grad();
        let weight = common::f64_tensor(&weight, w_dims, device).require_grad();
        let out = conv2d(x.clone(), weight.clone(), None, options.clone());
        let r = common::f64_tensor(&Lcg::new(5).values(2 * 48 * 30), [2, 48, 5, 6], device);
        let grads = (out.clone() * r).sum().backward();
        [
            common::f64_values(out),
            common::f64_values(x.grad(&grads).unwrap()),
            common::f64_values(weight.grad(&grads).unwrap()),
        ]
    };
    let expected = run(&Device::flex().autodiff());
    common::each_pinned(|kernels| {
        let actual = run(&gpu.clone().autodiff());
        for (what, (actual, expected)) in ["forward", "x grad", "weight grad"]
            .iter()
            .zip(actual.iter().zip(&expected))
        {
            assert_eq!(actual.len(), expected.len());
            for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
                assert!(
                    (a - e).abs() <= 1e-11 * (1.0 + e.abs()),
                    "f64 {what}[{i}], {kernels}: gpu {a} vs flex {e}"
                );
            }
        }
    });
}

/// An empty batch flows through the CubeCL kernels and their backward (empty out, zero weight
/// gradient), as on the CPU.
#[test]
fn empty_batch_runs_on_wgpu() {
    let device = wgpu().autodiff();
    let x = Tensor::<4>::zeros([0, 3, 8, 8], &device).require_grad();
    let weight = Tensor::<4>::ones([4, 3, 3, 3], &device).require_grad();
    let out = conv2d(x.clone(), weight.clone(), None, ConvNdOptions::default());
    let pooled = max_pool2d(out.clone(), MaxPoolOptions::new([2, 2]));
    let averaged = adaptive_avg_pool2d(out, [1, 1]);
    assert_eq!(pooled.dims(), [0, 4, 3, 3]);
    let grads = (pooled.sum() + averaged.sum()).backward();
    assert_eq!(x.grad(&grads).map(|g| g.dims()), Some([0, 3, 8, 8]));
    let weight_grad = weight.grad(&grads).unwrap();
    assert_eq!(weight_grad.dims(), [4, 3, 3, 3]);
    assert!(weight_grad.into_data().iter::<f32>().all(|v| v == 0.0));
}

/// Reductions too long for a direct unit's loop on lavapipe (65535 iterations): a forward pass
/// and an input gradient over 32,768 channels x 3 kernel rows, which run tiled instead.
#[test]
fn long_direct_walks_run_tiled() {
    let mut rng = rng("long_direct");
    let options = ConvNdOptions::<2>::default().with_padding([1, 1]);
    // Values of a hundredth keep the f32 rounding of 300,000-term sums, which differs with
    // their order, inside the comparison's absolute 1e-4.
    let mut small = |dims: [usize; 4]| {
        let mut leaf = Leaf::random(&mut rng, dims);
        leaf.values.iter_mut().for_each(|v| *v *= 0.01);
        leaf
    };
    let wide_input = [small([1, 32768, 3, 3]), small([1, 32768, 3, 3])];
    let wide_output = [small([1, 1, 3, 3]), small([32768, 1, 3, 3])];
    for (name, leaves) in [("long_forward", wide_input), ("long_data", wide_output)] {
        cross(name, &leaves, |t: Vec<Tensor<4>>| {
            conv2d(t[0].clone(), t[1].clone(), None, options.clone())
        });
    }
}

/// Repairs of sums longer than 65535 terms, where Mesa's lavapipe ends a shader loop: a weight
/// gradient over 90,000 output positions, and a forward pass over 8192 channels x 9 taps.
#[test]
fn long_repairs_sum_every_term() {
    let mut rng = rng("long_repairs");
    let options = ConvNdOptions::<2>::default().with_padding([1, 1]);
    let mut scale = Leaf::random(&mut rng, [1, 2, 300, 300]);
    scale.values[5] = f32::INFINITY;
    let leaves = [
        Leaf::random(&mut rng, [1, 1, 300, 300]),
        Leaf::random(&mut rng, [2, 1, 3, 3]),
        scale,
    ];
    let scaled = |t: Vec<Tensor<4>>| {
        conv2d(t[0].clone(), t[1].clone(), None, options.clone()) * t[2].clone()
    };
    cross("long_weight_repair", &leaves, scaled);
    // Only the first tap is infinite: the outputs whose first tap is in the padding stay finite,
    // the sum of all 73,728 other terms.
    let mut weight = Leaf::random(&mut rng, [1, 8192, 3, 3]);
    weight.values[0] = f32::INFINITY;
    let leaves = [Leaf::random(&mut rng, [1, 8192, 3, 3]), weight];
    cross("long_forward_repair", &leaves, |t: Vec<Tensor<4>>| {
        conv2d(t[0].clone(), t[1].clone(), None, options.clone())
    });
}

/// Fused activations on every schedule against Flex, values and gradients: the tiled kernel's
/// store, the sums of split-k partials, the direct kernel's store, each with its in-kernel
/// repair of a non-finite weight met by the padding, cubek's GEMM and Burn's kernels (an
/// activation pass after them), and `conv_transpose`'s input-gradient pass with its stride
/// phases.
#[test]
fn fused_activations_match_cpu_on_every_schedule() {
    let o = ConvNdOptions::<2>::default;
    let leaky = |negative_slope| Activation::LeakyRelu { negative_slope };
    let cases = [
        // name, x, weight, options, activation, a non-finite weight
        (
            "fused_tiled",
            [2, 24, 9, 11],
            [40, 24, 3, 3],
            Activation::Relu,
            false,
        ),
        (
            "fused_split_k",
            [2, 64, 3, 3],
            [48, 64, 3, 3],
            Activation::Gelu,
            false,
        ),
        (
            "fused_direct",
            [2, 3, 7, 9],
            [4, 3, 3, 3],
            leaky(0.1),
            false,
        ),
        (
            "fused_tiled_non_finite",
            [2, 16, 5, 6],
            [16, 16, 3, 3],
            Activation::Silu,
            true,
        ),
        (
            "fused_split_non_finite",
            [1, 48, 3, 4],
            [64, 48, 3, 3],
            Activation::GeluTanh,
            true,
        ),
        (
            "fused_direct_non_finite",
            [2, 3, 7, 9],
            [4, 3, 3, 3],
            leaky(-0.5),
            true,
        ),
    ];
    for (name, x, weight, activation, non_finite) in cases {
        let mut rng = rng(name);
        let weight_leaf = match non_finite {
            true => non_finite_weight(&mut rng, weight),
            false => Leaf::random(&mut rng, weight),
        };
        let leaves = [
            Leaf::random(&mut rng, x).laid_out(Layout::Permuted),
            weight_leaf,
            Leaf::random(&mut rng, [weight[0], 1, 1, 1]),
        ];
        let options = o().with_padding([1, 1]).with_activation(activation);
        let op = |t: Vec<Tensor<4>>| {
            conv2d(
                t[0].clone(),
                t[1].clone(),
                Some(bias_of(&t[2])),
                options.clone(),
            )
        };
        cross(name, &leaves, op);
        cross_pinned(CubeKernels::Burn, "Burn's kernels", name, &leaves, op);
    }
    let mut rng = rng("fused_transposed");
    let leaves = [
        Leaf::random(&mut rng, [2, 16, 4, 5]),
        non_finite_weight(&mut rng, [16, 8, 3, 3]),
        Leaf::random(&mut rng, [8, 1, 1, 1]),
    ];
    cross("fused_transposed", &leaves, |t| {
        let options = ConvTransposeNdOptions::<2>::default()
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_activation(leaky(0.2));
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
}
