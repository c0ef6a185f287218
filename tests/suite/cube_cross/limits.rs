//! What the CubeCL kernels do at the edges of their number types: half-precision pools sum
//! in f32, values past 32 bits and indices past the int dtype are typed errors.

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_convpool::*;

use super::{failure, rng, wgpu};
use crate::common;

/// Half-precision average and LP pools sum in f32, as PyTorch's kernels do: over a 16x16
/// window (and a whole 32x32 plane) of values in [0, 1) the result is Flex's f32 result on the same f16 inputs, rounded
/// to f16, within one f16 step (sums in f16 are several steps off). A device that does not
/// report f16 (lavapipe) gives the typed error instead.
#[test]
fn f16_pools_sum_in_f32() {
    let gpu = wgpu();
    let dims = [2, 3, 32, 32];
    let values: Vec<f32> = rng("f16")
        .values(dims.iter().product())
        .iter()
        .map(|v| v.abs() as f32)
        .collect();
    let x_on = |device: &Device| {
        Tensor::<4>::from_data(TensorData::new(values.clone(), dims), device).cast(DType::F16)
    };
    let avg = |x: Tensor<4>| avg_pool2d(x, AvgPoolNdOptions::new([16, 16]).with_stride([8, 8]));
    let lp = |x: Tensor<4>| lp_pool2d(x, LpPoolOptions::new(2.0, [16, 16]).with_stride([8, 8]));
    // A whole 32x32 plane: the whole-plane kernel, whose lanes' partial sums are f32 too.
    let global = |x: Tensor<4>| adaptive_avg_pool2d(x, [1, 1]);
    if !gpu.supports_dtype(DType::F16) {
        let message = failure(|| avg(x_on(&gpu)).into_data());
        assert!(message.contains("dtype F16 is not supported"), "{message}");
        return;
    }
    for (name, pool) in [
        ("avg", &avg as &dyn Fn(Tensor<4>) -> Tensor<4>),
        ("lp", &lp),
        ("global avg", &global),
    ] {
        let expected = pool(x_on(&Device::flex()).cast(DType::F32))
            .cast(DType::F16)
            .cast(DType::F32)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        common::each_packing_pinned(|kernels| {
            let actual = pool(x_on(&gpu))
                .cast(DType::F32)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                // One f16 step at `e`: 2^(exponent - 10).
                let step = 2f32.powi(e.abs().log2().floor() as i32 - 10);
                assert!(
                    (a - e).abs() <= step,
                    "f16 {name}[{i}], {kernels}: gpu {a} vs {e}"
                );
            }
        });
    }
}

/// Values above the kernels' 32 bits are a typed error on a CubeCL device, where the launch
/// would panic inside Fusion; the CPU computes them, as PyTorch does.
#[test]
fn values_above_32_bits_are_a_typed_error_on_cubecl() {
    let big = 1usize << 32;
    let call = |device: &Device| {
        let x = Tensor::<3>::from_floats([[[1.0, 2.0, 3.0, 4.0]]], device);
        let weight = Tensor::<3>::ones([1, 1, 1], device);
        // Two outputs: one in the padding, one at x[2].
        let options = ConvNdOptions::default()
            .with_stride([big + 2])
            .with_padding([big]);
        let conv = try_conv1d(x.clone(), weight, None, options);
        // Five windows of 2^33 taps, mostly padding.
        let pooled = try_avg_pool1d(
            x,
            AvgPoolNdOptions::new([2 * big])
                .with_stride([1])
                .with_padding([big]),
        );
        (conv, pooled)
    };
    let (conv, pooled) = call(&Device::flex());
    let conv = conv.expect("the CPU computes it").into_data();
    assert_eq!(conv.try_to_vec::<f32>().unwrap(), [0.0, 3.0]);
    assert_eq!(pooled.expect("the CPU computes it").dims(), [1, 1, 5]);
    let (conv, pooled) = call(&wgpu());
    let conv = conv.unwrap_err();
    assert_eq!(conv.op, "conv1d");
    assert!(
        matches!(conv.kind, SpecErrorKind::DeviceLimit { what: "stride", value, .. } if value == big + 2),
        "{conv}"
    );
    let pooled = pooled.unwrap_err();
    assert!(
        matches!(pooled.kind, SpecErrorKind::DeviceLimit { what: "kernel size", value, .. } if value == 2 * big),
        "{pooled}"
    );
}

/// Pooling indices are written in the device's int dtype; one too narrow for the input plane
/// is a typed error, not indices that wrap (256 x 256 = 65,536 elements overflow I16). A
/// device's int dtype can be set only before any tensor lives on it, and other tests of this
/// binary use every device, so the check runs alone in a child process of this binary.
#[cfg(feature = "ndarray")]
#[test]
fn indices_too_wide_for_the_int_dtype_are_a_typed_error() {
    let test = "cube_cross::limits::indices_too_wide_for_an_i16_device";
    let output = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", test, "--ignored", "--test-threads=1"])
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    // A filter that matched nothing would pass too: the one test must have run and passed.
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{test} alone:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The body of [`indices_too_wide_for_the_int_dtype_are_a_typed_error`], which runs it in a
/// process of its own (NdArray, configured to I16 indices, must be fresh).
#[cfg(feature = "ndarray")]
#[test]
#[ignore = "run alone by indices_too_wide_for_the_int_dtype_are_a_typed_error"]
fn indices_too_wide_for_an_i16_device() {
    // Burn deprecates NdArray but it still runs.
    #[allow(deprecated)]
    let mut device = Device::ndarray();
    device
        .configure(burn::tensor::IntDType::I16)
        .expect("a fresh device");
    let x = Tensor::<4>::ones([1, 1, 256, 256], &device);
    let error = try_max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2])).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::IndexDtype { plane: 65_536, .. }
    ));
    let x = Tensor::<4>::ones([1, 1, 128, 128], &device);
    let (_, indices) = max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2]));
    assert_eq!(indices.dtype(), DType::I16);
}

/// Half-precision pools sum in f32, as PyTorch's kernels do (issue 11, item 5): 4096 values
/// of `1 + 2^-10` pool to the exact f16 values below on both devices. A running f16 sum drops
/// the `2^-10` of every term once past 64; the GPU's lanes split the sum finely enough that the
/// averages survive it, but with an f16 accumulator the LP pool of p = 1 reads inf.
#[test]
fn half_pools_accumulate_in_f32() {
    let gpu = wgpu();
    let x = |device: &Device| {
        let values = vec![1.0f32 + 1.0 / 1024.0; 64 * 64];
        Tensor::<4>::from_data(
            TensorData::new(values, [1, 1, 64, 64]),
            (device, DType::F16),
        )
    };
    let as_f32 = |t: Tensor<4>| {
        assert_eq!(t.dtype(), DType::F16);
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    };
    type Pool = fn(Tensor<4>) -> Result<Tensor<4>, SpecError>;
    let pools: [(&str, Pool, f32); 4] = [
        (
            "avg_pool2d",
            |x| try_avg_pool2d(x, AvgPoolNdOptions::new([64, 64])),
            1.0 + 1.0 / 1024.0,
        ),
        (
            "adaptive_avg_pool2d",
            |x| try_adaptive_avg_pool2d(x, [1, 1]),
            1.0 + 1.0 / 1024.0,
        ),
        // 4096 * (1 + 2^-10) = 4100, exact in f16 (ulp 4).
        (
            "lp_pool2d p=1",
            |x| try_lp_pool2d(x, LpPoolOptions::new(1.0, [64, 64])),
            4100.0,
        ),
        // sqrt(4096 * (1 + 2^-10)^2) = 64.0625 in f16 (ulp 2^-4).
        (
            "lp_pool2d p=2",
            |x| try_lp_pool2d(x, LpPoolOptions::new(2.0, [64, 64])),
            64.0625,
        ),
    ];
    for (what, pool, expected) in pools {
        assert_eq!(
            as_f32(pool(x(&Device::flex())).unwrap()),
            [expected],
            "{what} on flex"
        );
        common::each_packing_pinned(|kernels| {
            match pool(x(&gpu)) {
                Ok(out) => assert_eq!(as_f32(out), [expected], "{what} on wgpu, {kernels}"),
                // An adapter without f16 (lavapipe has it, as the Mesa CI installs).
                Err(error) if matches!(error.kind, SpecErrorKind::DeviceDtype { .. }) => {
                    eprintln!("{what}, {kernels}: this adapter has no f16; not checked");
                }
                Err(error) => panic!("{what}: {error}"),
            }
        });
    }
}
