//! Every float dtype is accepted: f32 and f64 natively, f16 and bf16 computed in f32 and
//! rounded back, each returning its own dtype.

use burn::tensor::{DType, Device, Distribution, Tensor};
use burn_convpool::{ConvNdOptions, ConvTransposeNdOptions, conv_transpose2d, conv2d};

fn max_difference(a: Tensor<4>, b: Tensor<4>) -> f32 {
    (a.cast(DType::F32) - b.cast(DType::F32))
        .abs()
        .max()
        .into_scalar::<f32>()
}

#[test]
fn half_precision_and_f64_match_f32() {
    let device = Device::flex();
    let x = Tensor::<4>::random([2, 4, 7, 6], Distribution::Uniform(-1.0, 1.0), &device);
    let weight = Tensor::<4>::random([6, 2, 3, 3], Distribution::Uniform(-1.0, 1.0), &device);
    let options = ConvNdOptions::default().with_padding([1, 1]).with_groups(2);
    let reference = conv2d(x.clone(), weight.clone(), None, options.clone());
    for (dtype, tolerance) in [(DType::F64, 1e-5), (DType::F16, 2e-2), (DType::BF16, 1e-1)] {
        let out = conv2d(
            x.clone().cast(dtype),
            weight.clone().cast(dtype),
            None,
            options.clone(),
        );
        assert_eq!(out.dtype(), dtype);
        let difference = max_difference(out, reference.clone());
        assert!(
            difference < tolerance,
            "{dtype:?}: max difference {difference}"
        );
    }
    let transpose_options = ConvTransposeNdOptions::default().with_stride([2, 2]);
    let weight_t = Tensor::<4>::random([4, 3, 2, 2], Distribution::Uniform(-1.0, 1.0), &device);
    let reference = conv_transpose2d(x.clone(), weight_t.clone(), None, transpose_options.clone());
    let out = conv_transpose2d(
        x.cast(DType::F16),
        weight_t.cast(DType::F16),
        None,
        transpose_options,
    );
    assert_eq!(out.dtype(), DType::F16);
    assert!(max_difference(out, reference) < 2e-2);
}

/// PyTorch's rule, not a silent cast (issue 13, item 7): the weight, bias and fractional
/// samples share the input's dtype, and the input is a float dtype the ops compute in.
#[test]
fn mixed_and_unsupported_dtypes_are_typed_errors() {
    use burn::tensor::quantization::QuantScheme;
    use burn_convpool::{SpecErrorKind, try_conv2d, try_max_pool2d};
    let device = Device::flex();
    let x = Tensor::<4>::ones([1, 1, 4, 4], &device);
    let weight = Tensor::<4>::ones([1, 1, 2, 2], &device);
    let error = try_conv2d(
        x.clone(),
        weight.clone().cast(DType::F64),
        None,
        ConvNdOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv2d: weight has dtype F64 but the input has F32; cast one of them"
    );
    let bias = Tensor::<1>::ones([1], &device).cast(DType::F16);
    let error = try_conv2d(x.clone(), weight, Some(bias), ConvNdOptions::default()).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::DtypeMismatch { arg: "bias", .. }),
        "{error}"
    );
    let quantized = x.quantize_dynamic(&QuantScheme::default());
    let error =
        try_max_pool2d(quantized, burn::tensor::ops::MaxPoolOptions::new([2, 2])).unwrap_err();
    assert!(matches!(error.kind, SpecErrorKind::Dtype { .. }), "{error}");
}

/// On a CubeCL device every float dtype either computes what the CPU does or, where the
/// runtime does not report the type (lavapipe: BF16), is a typed error: never a panic inside
/// Fusion's device thread, where no `try_` could catch it. The tensors are uploaded in their
/// dtype (a cast would run Burn's own kernel for it first).
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn cubecl_dtypes_compute_or_are_typed_errors() {
    use burn::tensor::{Int, TensorData};
    use burn_convpool::{
        MaxUnpoolOptions, SpecErrorKind, max_unpool2d, try_conv2d, try_max_pool2d, try_max_unpool2d,
    };
    let (gpu, cpu) = (crate::common::gpu(), Device::flex());
    let values: Vec<f32> = (0..16).map(|v| v as f32 / 4.0 - 2.0).collect();
    let x = |device: &Device, dtype: DType| {
        Tensor::<4>::from_data(
            TensorData::new(values.clone(), [1, 1, 4, 4]),
            (device, dtype),
        )
    };
    let w = |device: &Device, dtype: DType| {
        Tensor::<4>::from_data(
            TensorData::new(vec![1.0f32; 9], [1, 1, 3, 3]),
            (device, dtype),
        )
    };
    let options = ConvNdOptions::default();
    let pool = burn::tensor::ops::MaxPoolOptions::new([2, 2]);
    let as_f32 = |t: Tensor<4>| t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap();
    let expect_ok_or_typed =
        |what: &str, got: Result<Tensor<4>, burn_convpool::SpecError>, expected: &[f32]| {
            match got {
                // Every value here is exact in every dtype (sums of quarters below 64).
                Ok(out) => assert_eq!(as_f32(out), expected, "{what}"),
                Err(error) => assert!(
                    matches!(error.kind, SpecErrorKind::DeviceDtype { .. }),
                    "{what}: {error}"
                ),
            }
        };
    let f32 = DType::F32;
    let conv_expected = as_f32(conv2d(x(&cpu, f32), w(&cpu, f32), None, options.clone()));
    // A padding mode copies the input with Burn's kernels first.
    let reflect = options
        .clone()
        .with_padding([1, 1])
        .with_padding_mode(burn_convpool::PaddingMode::Reflect);
    let reflect_expected = as_f32(conv2d(x(&cpu, f32), w(&cpu, f32), None, reflect.clone()));
    let pool_expected = as_f32(burn_convpool::max_pool2d(x(&cpu, f32), pool.clone()));
    for dtype in [DType::F64, DType::F16, DType::BF16] {
        let conv = try_conv2d(x(&gpu, dtype), w(&gpu, dtype), None, options.clone());
        if let Ok(out) = &conv {
            assert_eq!(out.dtype(), dtype);
        }
        expect_ok_or_typed(&format!("conv2d {dtype:?}"), conv, &conv_expected);
        let conv = try_conv2d(x(&gpu, dtype), w(&gpu, dtype), None, reflect.clone());
        expect_ok_or_typed(
            &format!("reflect conv2d {dtype:?}"),
            conv,
            &reflect_expected,
        );
        let max = try_max_pool2d(x(&gpu, dtype), pool.clone());
        expect_ok_or_typed(&format!("max_pool2d {dtype:?}"), max, &pool_expected);
        // Samples drawn on the device, in the input's dtype.
        let fractional = burn_convpool::FractionalMaxPoolOptions::new(
            [2, 2],
            burn_convpool::FractionalOutput::Size([3, 3]),
        );
        match burn_convpool::try_fractional_max_pool2d(x(&gpu, dtype), fractional, None) {
            Ok(out) => assert_eq!(out.dims(), [1, 1, 3, 3]),
            Err(error) => assert!(
                matches!(error.kind, SpecErrorKind::DeviceDtype { .. }),
                "fractional {dtype:?}: {error}"
            ),
        }
    }
    // Max-unpool's indices in any int dtype (lavapipe has no I16 or U8: Burn's own range
    // check, a min and a max on the device, failed on them with a panic).
    let small = |device: &Device| x(device, f32).narrow(2, 0, 2).narrow(3, 0, 2);
    let indices = |device: &Device, dtype: DType| {
        Tensor::<4, Int>::from_data(
            TensorData::new(vec![0i64, 1, 2, 3], [1, 1, 2, 2]),
            (device, dtype),
        )
    };
    let unpool = MaxUnpoolOptions::new([2, 2]);
    let expected = as_f32(max_unpool2d(
        small(&cpu),
        indices(&cpu, DType::I64),
        unpool.clone(),
    ));
    for dtype in [DType::I64, DType::I32, DType::I16, DType::U8] {
        let got = try_max_unpool2d(small(&gpu), indices(&gpu, dtype), unpool.clone());
        expect_ok_or_typed(&format!("max_unpool2d {dtype:?}"), got, &expected);
    }
}

/// Half-precision convolutions on a CubeCL device sum in f32 (as PyTorch's kernels do),
/// whichever kernel the tuner or a pin of ours runs: 3000 products of ones give 3000, where a
/// sum in f16 stops at 2048 (2049 is no f16) and one in bf16 at 256. Burn's direct kernel sums
/// in the operand type, so the tuner leaves Burn's kernels out for half operands.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn cubecl_half_convolutions_sum_in_f32() {
    use burn::tensor::TensorData;
    use burn_convpool::cube_kernels::CubeKernels;
    use burn_convpool::{SpecErrorKind, try_conv1d};
    let gpu = crate::common::gpu();
    let ones = |dtype: DType| {
        Tensor::<3>::from_data(
            TensorData::new(vec![1.0f32; 3000], [1, 1, 3000]),
            (&gpu, dtype),
        )
    };
    // 3000 in each type: exact in f16, 3008 in bf16 (8 significant bits).
    let mut computed = 0;
    for (dtype, expected) in [(DType::F16, 3000.0f32), (DType::BF16, 3008.0)] {
        let mut check = |label: &str| match try_conv1d(
            ones(dtype),
            ones(dtype),
            None,
            ConvNdOptions::default(),
        ) {
            Ok(out) => {
                let got = out
                    .into_data()
                    .convert::<f32>()
                    .try_to_vec::<f32>()
                    .unwrap();
                assert_eq!(got, [expected], "{dtype:?}, {label}");
                computed += 1;
            }
            Err(error) => assert!(
                matches!(error.kind, SpecErrorKind::DeviceDtype { .. }),
                "{dtype:?}, {label}: {error}"
            ),
        };
        check("the device's default (tuned)");
        crate::common::each_pinned(|ours| check(ours));
        let _tuned = crate::common::pin(CubeKernels::Tuned);
        check("tuned");
    }
    // Every CubeCL device CI or a GPU run uses supports f16.
    assert!(computed > 0, "no half-precision dtype ran");
}
