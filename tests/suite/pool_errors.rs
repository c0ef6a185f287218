//! Every pooling validation rule: the `try_` twin returns a `SpecError` naming the op and the
//! values; the plain function panics with the same message.

use burn::tensor::{Device, Int, Tensor};
use burn_convpool::*;

fn ones<const D: usize>(dims: [usize; D]) -> Tensor<D> {
    Tensor::ones(dims, &Device::flex())
}

fn indices<const D: usize>(dims: [usize; D], value: i64) -> Tensor<D, Int> {
    Tensor::<D, Int>::zeros(dims, &Device::flex()) + value
}

#[test]
fn kernel_larger_than_padded_input() {
    let error = try_max_pool2d(ones([1, 1, 2, 5]), MaxPoolOptions::new([3, 3])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool2d: kernel extent 3 (dilation * (kernel - 1) + 1) is larger than the padded input 2 on spatial dim 0"
    );
    let error = try_avg_pool1d(ones([1, 1, 2]), AvgPoolNdOptions::new([4])).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::KernelTooLarge {
            kernel_extent: 4,
            padded_len: 2,
            ..
        }
    ));
    let error =
        try_lp_pool3d(ones([1, 1, 4, 4, 1]), LpPoolOptions::new(2.0, [2, 2, 2])).unwrap_err();
    assert_eq!(error.op, "lp_pool3d");
}

#[test]
fn padding_at_most_half_the_kernel() {
    let options = MaxPoolOptions::new([3, 3]).with_padding([1, 2]);
    let error = try_max_pool2d(ones([1, 1, 8, 8]), options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool2d: padding 2 on spatial dim 1 is larger than half the kernel size (1)"
    );
    // PyTorch's limit is half the kernel size whatever the dilation ("max_pool1d() padding
    // should be at most half of kernel size").
    let options = MaxPoolOptions::new([3])
        .with_padding([2])
        .with_dilation([2]);
    let error = try_max_pool1d(ones([1, 1, 8]), options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool1d: padding 2 on spatial dim 0 is larger than half the kernel size (1)"
    );
    let options = MaxPoolOptions::new([3])
        .with_padding([1])
        .with_dilation([2]);
    assert_eq!(max_pool1d(ones([1, 1, 8]), options).dims(), [1, 1, 2]);
    let error = try_avg_pool3d(
        ones([1, 1, 4, 4, 4]),
        AvgPoolNdOptions::new([2, 2, 2]).with_padding([0, 0, 2]),
    )
    .unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::PaddingTooLarge {
            dim: 2,
            padding: 2,
            limit: 1
        }
    ));
}

#[test]
fn dilated_windows_of_padding_only_are_rejected() {
    // A one-element plane, kernel 2, dilation 3, padding 2: once accepted, it gave -inf with
    // index 1 (outside the plane) and a panicking backward.
    let x = Tensor::<3>::from_data([[[5.0f32]]], &Default::default());
    let options = MaxPoolOptions::new([2])
        .with_padding([2])
        .with_dilation([3]);
    let error = try_max_pool1d_with_indices(x, options).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::PaddingTooLarge {
            dim: 0,
            padding: 2,
            limit: 1
        }
    ));
    // Within the padding limit, a dilated window can still step over the whole input: taps
    // at -1 and 2 of a 2-element axis.
    let options = MaxPoolOptions::new([2])
        .with_padding([1])
        .with_dilation([3]);
    let error = try_max_pool1d_with_indices(ones([1, 1, 2]), options.clone()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool1d_with_indices: window 0 on spatial dim 0 holds padding only: its dilated \
         taps step over the whole input"
    );
    assert!(matches!(
        error.kind,
        SpecErrorKind::WindowInPadding { dim: 0, output: 0 }
    ));
    // One more input element gives the window a tap (at 2).
    let (values, indices) = max_pool1d_with_indices(ones([1, 1, 3]), options);
    assert_eq!(values.dims(), [1, 1, 1]);
    let indices = indices
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .unwrap();
    assert_eq!(indices, [2]);
}

#[test]
fn zero_stride_kernel_and_divisor() {
    let options = MaxPoolOptions {
        stride: [0, 1],
        ..MaxPoolOptions::new([2, 2])
    };
    let error = try_max_pool2d(ones([1, 1, 4, 4]), options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool2d: stride must be non-zero, got [0, 1]"
    );
    let error = try_lp_pool1d(
        ones([1, 1, 4]),
        LpPoolOptions::new(2.0, [2]).with_stride([0]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "lp_pool1d: stride must be non-zero, got [0]"
    );
    let error = try_avg_pool2d(
        ones([1, 1, 4, 4]),
        AvgPoolNdOptions::new([2, 2]).with_divisor_override(0),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "avg_pool2d: divisor_override must be non-zero, got [0]"
    );
    let error = try_max_unpool1d(
        ones([1, 1, 2]),
        indices([1, 1, 2], 0),
        MaxUnpoolOptions::new([2]).with_stride([0]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_unpool1d: stride must be non-zero, got [0]"
    );
}

#[test]
fn lp_norm_type_must_be_positive() {
    let error = try_lp_pool2d(ones([1, 1, 4, 4]), LpPoolOptions::new(0.0, [2, 2])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "lp_pool2d: norm_type must be positive, got 0"
    );
}

#[test]
fn output_ratio_in_open_unit_interval() {
    for ratio in [0.0, 1.0, 1.5] {
        let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Ratio([0.5, ratio]));
        let error = try_fractional_max_pool2d(ones([1, 1, 8, 8]), options, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "fractional_max_pool2d: output_ratio {ratio} on spatial dim 1 must lie in (0, 1) and give an output of at least 1"
            )
        );
    }
}

#[test]
fn fractional_kernel_must_fit_the_implied_window() {
    let options = FractionalMaxPoolOptions::new([3, 3, 3], FractionalOutput::Size([4, 4, 7]));
    let error = try_fractional_max_pool3d(ones([1, 1, 8, 8, 8]), options, None).unwrap_err();
    assert_eq!(
        error.to_string(),
        "fractional_max_pool3d: kernel 3 is too large for output size 7 from input length 8 on spatial dim 2 (needs output + kernel - 1 <= input)"
    );
}

#[test]
fn fractional_samples_shape() {
    let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([3, 3]));
    let samples = Tensor::<3>::zeros([1, 2, 3], &Device::flex());
    let error = try_fractional_max_pool2d(ones([1, 2, 8, 8]), options, Some(samples)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "fractional_max_pool2d: samples shape vs (N, C, spatial dims): [1, 2, 2] vs [1, 2, 3]"
    );
}

/// PyTorch draws the samples from [0, 1) and never checks given ones; outside [0, 1] its
/// windows can leave the input (and the CubeCL backward's window bounds would not hold), so
/// they are an error on every device, found by one device-to-host read.
#[test]
fn fractional_samples_in_the_unit_interval() {
    let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([3, 3]));
    for device in [
        Device::flex(),
        #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
        crate::common::gpu(),
    ] {
        let x = Tensor::<4>::ones([2, 2, 8, 8], &device);
        let with = |position: usize, value: f32| {
            let mut values = vec![0.5f32; 8];
            values[position] = value;
            Tensor::<3>::from_data(burn::tensor::TensorData::new(values, [2, 2, 2]), &device)
        };
        for (position, value, shown) in [
            (0, f32::NAN, "NaN at samples[0, 0, 0]"),
            (3, -0.5, "-0.5 at samples[0, 1, 1]"),
            (5, 1.5, "1.5 at samples[1, 0, 1]"),
            (6, f32::INFINITY, "inf at samples[1, 1, 0]"),
            (
                7,
                -f32::MIN_POSITIVE,
                "-0.000000000000000000000000000000000000011754943508222875 at samples[1, 1, 1]",
            ),
        ] {
            let error = try_fractional_max_pool2d(x.clone(), options, Some(with(position, value)))
                .unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("fractional_max_pool2d: samples must lie in [0, 1], got {shown}"),
                "{device:?}"
            );
        }
        for edge in [0.0, -0.0, 1.0] {
            let out = try_fractional_max_pool2d(x.clone(), options, Some(with(2, edge)));
            assert_eq!(out.expect("a sample of ±0 or 1").dims(), [2, 2, 3, 3]);
        }
    }
    let x = Tensor::<5>::ones([1, 1, 6, 6, 6], &Device::flex());
    let samples = Tensor::<3>::from_data([[[0.5f32, 0.5, -0.25]]], &Device::flex());
    let options = FractionalMaxPoolOptions::new([2, 2, 2], FractionalOutput::Size([3, 3, 3]));
    assert_eq!(
        try_fractional_max_pool3d(x, options, Some(samples))
            .unwrap_err()
            .to_string(),
        "fractional_max_pool3d: samples must lie in [0, 1], got -0.25 at samples[0, 0, 2]"
    );
}

#[test]
fn unpool_output_size_in_range() {
    // default = (3 - 1) * 2 + 2 = 6; PyTorch's `_unpool_output_size` takes 4 < size < 8.
    for (size, range) in [(8, "[5, 7]"), (4, "[5, 7]")] {
        let options = MaxUnpoolOptions::new([2, 2]).with_output_size([6, size]);
        let error =
            try_max_unpool2d(ones([1, 1, 3, 3]), indices([1, 1, 3, 3], 0), options).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "max_unpool2d: output_size {size} on spatial dim 1 is outside the valid range {range}"
            )
        );
    }
    let options = MaxUnpoolOptions::new([2, 2]).with_output_size([7, 5]);
    assert_eq!(
        max_unpool2d(ones([1, 1, 3, 3]), indices([1, 1, 3, 3], 0), options).dims(),
        [1, 1, 7, 5]
    );
}

/// SegNet's decoder with ceil-mode pools: 5 -> 3 windows of 2, whose default unpool length is
/// 6; unpooling to the input's 5 (below the default, as PyTorch allows) puts every maximum back.
#[test]
fn unpool_to_a_ceil_mode_pools_input() {
    let device = Device::flex();
    let values: Vec<f32> = (0..25).map(|v| v as f32).collect();
    let x = Tensor::<4>::from_data(burn::tensor::TensorData::new(values, [1, 1, 5, 5]), &device);
    let pool = MaxPoolOptions::new([2, 2])
        .with_stride([2, 2])
        .with_ceil_mode(true);
    let (pooled, at) = max_pool2d_with_indices(x, pool);
    assert_eq!(pooled.dims(), [1, 1, 3, 3]);
    let options = MaxUnpoolOptions::new([2, 2]).with_output_size([5, 5]);
    let out = max_unpool2d(pooled, at, options);
    let mut expected = vec![0.0f32; 25];
    for i in [6, 8, 9, 16, 18, 19, 21, 23, 24] {
        expected[i] = i as f32;
    }
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), expected);
}

#[test]
fn unpool_indices_in_range_and_shaped_like_x() {
    let error = try_max_unpool1d(
        ones([1, 2, 3]),
        indices([1, 2, 3], 6),
        MaxUnpoolOptions::new([2]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_unpool1d: index 6 is out of range for an output plane of 6 elements"
    );
    let error = try_max_unpool1d(
        ones([1, 2, 3]),
        indices([1, 2, 3], -1),
        MaxUnpoolOptions::new([2]),
    )
    .unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::IndexOutOfRange {
            index: -1,
            plane: 6
        }
    ));
    let error = try_max_unpool1d(
        ones([1, 2, 3]),
        indices([1, 2, 2], 0),
        MaxUnpoolOptions::new([2]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_unpool1d: x and indices shapes: [1, 2, 3] vs [1, 2, 2]"
    );
}

#[test]
#[should_panic(
    expected = "max_unpool3d: index 64 is out of range for an output plane of 64 elements"
)]
fn unpool_out_of_range_panics_without_writing() {
    max_unpool3d(
        ones([1, 1, 2, 2, 2]),
        indices([1, 1, 2, 2, 2], 64),
        MaxUnpoolOptions::new([2, 2, 2]),
    );
}

#[test]
fn wrong_rank() {
    let error = try_max_pool2d(ones([4, 4]), MaxPoolOptions::new([2, 2])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool2d: x must have rank [3, 4], got rank 2"
    );
    let error = try_adaptive_avg_pool3d(ones([1, 1, 1, 4, 4, 4]), [2, 2, 2]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "adaptive_avg_pool3d: x must have rank [4, 5], got rank 6"
    );
}

#[test]
fn adaptive_output_size_non_zero_and_input_non_empty() {
    let error = try_adaptive_max_pool2d(ones([1, 1, 4, 4]), [0, 2]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "adaptive_max_pool2d: output_size must be non-zero, got [0, 2]"
    );
    let error = try_adaptive_avg_pool1d(ones([1, 1, 0]), [2]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "adaptive_avg_pool1d: input [1, 1, 0] has an empty dim other than the batch (only the batch may be 0)"
    );
}

#[test]
fn unbatched_pooling_keeps_rank_and_indices_round_trip() {
    let x = Tensor::<3>::from_floats(
        [[[1.0, 5.0, 2.0], [3.0, 0.0, 4.0], [7.0, 6.0, 8.0]]],
        &Device::flex(),
    );
    let (pooled, idx) =
        max_pool2d_with_indices(x.clone(), MaxPoolOptions::new([2, 2]).with_stride([1, 1]));
    assert_eq!(pooled.dims(), [1, 2, 2]);
    assert_eq!(
        idx.clone().into_data().iter::<i64>().collect::<Vec<_>>(),
        [1, 1, 6, 8]
    );
    let restored = max_unpool2d(
        pooled,
        idx,
        MaxUnpoolOptions::new([2, 2]).with_stride([1, 1]),
    );
    assert_eq!(
        restored.into_data().iter::<f32>().collect::<Vec<_>>(),
        [0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 7.0, 0.0, 8.0]
    );
}

/// PyTorch's pools take an empty batch (empty out, empty gradient) and reject any other empty
/// dim; Burn's `reshape` reads a 0 as "keep this dim", so these once panicked in the lift.
#[test]
fn empty_batch_in_empty_out_other_empty_dims_rejected() {
    let device = Device::flex().autodiff();
    let x = Tensor::<4>::zeros([0, 3, 8, 8], &device).require_grad();
    let window = MaxPoolOptions::new([2, 2]);
    let (values, argmax) = max_pool2d_with_indices(x.clone(), window.clone());
    assert_eq!(values.dims(), [0, 3, 4, 4]);
    assert_eq!(argmax.dims(), [0, 3, 4, 4]);
    let total = values.sum()
        + avg_pool2d(x.clone(), AvgPoolNdOptions::new([2, 2])).sum()
        + adaptive_avg_pool2d(x.clone(), [2, 2]).sum()
        + adaptive_max_pool2d(x.clone(), [3, 3]).sum()
        + lp_pool2d(x.clone(), LpPoolOptions::new(2.0, [2, 2])).sum();
    let grads = total.backward();
    assert_eq!(x.grad(&grads).map(|grad| grad.dims()), Some([0, 3, 8, 8]));
    let unpooled = max_unpool2d(
        Tensor::<4>::zeros([0, 3, 4, 4], &Device::flex()),
        indices::<4>([0, 3, 4, 4], 0),
        MaxUnpoolOptions::new([2, 2]),
    );
    assert_eq!(unpooled.dims(), [0, 3, 8, 8]);
    // An empty batch pooled to an output no machine holds per image: still an empty output
    // and gradient (the CPU built a 35 TB window table for it and aborted).
    let huge = 1 << 40;
    let x = Tensor::<3>::zeros([0, 2, 4], &device).require_grad();
    let (values, argmax) = adaptive_max_pool1d_with_indices(x.clone(), [huge]);
    assert_eq!((values.dims(), argmax.dims()), ([0, 2, huge], [0, 2, huge]));
    let grads = (values.sum() + adaptive_avg_pool1d(x.clone(), [huge]).sum()).backward();
    assert_eq!(x.grad(&grads).map(|grad| grad.dims()), Some([0, 2, 4]));

    // No channels (batched or not), or an empty spatial dim: a typed error naming the dims.
    let error = try_max_pool2d(ones([0, 8, 8]), window.clone()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_pool2d: input [1, 0, 8, 8] has an empty dim other than the batch (only the batch \
         may be 0)"
    );
    assert!(try_max_pool2d(ones([0, 0, 8, 8]), window).is_err());
    assert!(try_adaptive_avg_pool2d(ones([0, 8, 8]), [2, 2]).is_err());
    let error = try_max_unpool2d(
        ones([0, 2, 2]),
        indices::<3>([0, 2, 2], 0),
        MaxUnpoolOptions::new([2, 2]),
    )
    .unwrap_err();
    assert!(matches!(error.kind, SpecErrorKind::EmptyInput { .. }));
}

/// Sizes near `usize::MAX` never wrap (issue 13, item 3).
#[test]
fn pool_shape_arithmetic_never_overflows() {
    // A huge stride leaves one exact window (it wrapped to a wrong 0.0 in release builds).
    let x = Tensor::<3>::from_floats([[[1.0, 3.0, 5.0, 7.0, 9.0]]], &Device::flex());
    let options = AvgPoolNdOptions::new([2]).with_stride([usize::MAX / 2]);
    let out = try_avg_pool1d(x.clone(), options).unwrap();
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), [2.0]);
    let options = MaxPoolOptions::new([2])
        .with_stride([usize::MAX / 2])
        .with_ceil_mode(true);
    let out = try_max_pool1d(x.clone(), options).unwrap();
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), [3.0]);
    // A kernel of usize::MAX: no inf or NaN, no slice panic.
    let options = AvgPoolNdOptions::new([usize::MAX]).with_stride([1]);
    let error = try_avg_pool1d(x.clone(), options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "avg_pool1d: kernel volume 18446744073709551615 is above the largest size \
         9223372036854775807"
    );
    let options = LpPoolOptions::new(2.0, [usize::MAX]);
    assert!(matches!(
        try_lp_pool1d(x.clone(), options).unwrap_err().kind,
        SpecErrorKind::TooLarge { .. }
    ));
    let options = MaxPoolOptions {
        kernel_size: [usize::MAX / 4],
        stride: [1],
        padding: [(0, 0)],
        dilation: [1],
        ceil_mode: false,
    };
    assert!(matches!(
        try_max_pool1d(x.clone(), options).unwrap_err().kind,
        SpecErrorKind::KernelTooLarge { .. }
    ));
    // Padding within the kernel/2 rule but past the address space.
    let options = MaxPoolOptions {
        kernel_size: [usize::MAX],
        stride: [1],
        padding: [(usize::MAX / 2, usize::MAX / 2)],
        dilation: [1],
        ceil_mode: false,
    };
    assert!(matches!(
        try_max_pool1d(x.clone(), options).unwrap_err().kind,
        SpecErrorKind::TooLarge { .. }
    ));
    // Fractional output sizes whose sum with the kernel wraps.
    let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([usize::MAX, 4]));
    let error = try_fractional_max_pool2d(ones([1, 1, 8, 8]), options, None).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::FractionalKernel { .. }),
        "{error}"
    );
    // Max-unpool's default size `(in - 1) * stride + kernel` past usize.
    let options = MaxUnpoolOptions::new([MAX_SIZE]);
    let error = try_max_unpool1d(ones([1, 1, 3]), indices([1, 1, 3], 0), options).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::OutputTooLarge { .. }),
        "{error}"
    );
    // Parameters PyTorch's int64 cannot hold, even one the output never multiplies.
    let options = MaxUnpoolOptions::new([2]).with_stride([usize::MAX]);
    let error = try_max_unpool1d(ones([1, 1, 1]), indices([1, 1, 1], 0), options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "max_unpool1d: stride 18446744073709551615 is above the largest size 9223372036854775807"
    );
    let options = MaxUnpoolOptions::new([2]).with_padding([MAX_SIZE + 1]);
    let error = try_max_unpool1d(ones([1, 1, 1]), indices([1, 1, 1], 0), options).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::TooLarge { .. }),
        "{error}"
    );
}

/// Outputs that fit the address space but not the machine are typed errors on a CPU device
/// (issue 13, item 4): the allocator would abort the process.
#[test]
fn pool_outputs_beyond_memory_are_typed_errors() {
    let error = try_adaptive_avg_pool1d(ones([1, 1, 4]), [1 << 40]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "adaptive_avg_pool1d: the output [1, 1, 1099511627776] needs 4398046511104 bytes, more \
         than this machine can allocate"
    );
    let error = try_adaptive_max_pool2d(ones([1, 1, 4, 4]), [1 << 20, 1 << 20]).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::OutOfMemory { .. }),
        "{error}"
    );
    let options = MaxUnpoolOptions::new([2]).with_stride([1 << 42]);
    let error = try_max_unpool1d(ones([1, 1, 2]), indices([1, 1, 2], 0), options).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::OutOfMemory { .. }),
        "{error}"
    );
}
