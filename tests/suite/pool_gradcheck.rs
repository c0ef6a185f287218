//! Finite-difference checks, in f64 on tiny shapes, of the pooling gradients that are not a
//! plain routing through indices: average (every divisor rule), adaptive average and LP pooling.

use crate::common::{Lcg, assert_central_differences, f64_tensor, f64_values};
use burn::tensor::{Device, Tensor};
use burn_convpool::*;

/// Compare d(sum(op(x) * r))/dx from autodiff with central differences.
fn gradcheck<const D: usize>(
    name: &str,
    op: impl Fn(Tensor<D>) -> Tensor<D>,
    dims: [usize; D],
    positive: bool,
) {
    let mut rng = Lcg::new(name.len() as u64 * 104729);
    let mut x = rng.values(dims.iter().product());
    if positive {
        x.iter_mut().for_each(|v| *v = v.abs() + 0.1);
    }
    let plain = Device::flex();
    let out_dims = op(f64_tensor(&x, dims, &plain)).dims();
    let r = rng.values(out_dims.iter().product());
    let loss = |x: &[f64]| -> f64 {
        f64_values(op(f64_tensor(x, dims, &plain)))
            .iter()
            .zip(&r)
            .map(|(a, b)| a * b)
            .sum()
    };

    let device = Device::flex().autodiff();
    let x_tracked = f64_tensor(&x, dims, &device).require_grad();
    let grads = (op(x_tracked.clone()) * f64_tensor(&r, out_dims, &device))
        .sum()
        .backward();
    let analytic = f64_values(x_tracked.grad(&grads).unwrap());
    assert_central_differences(&format!("{name}: d/dx"), &x, &analytic, loss);
}

#[test]
fn avg_pool_divisor_rules() {
    let include = AvgPoolNdOptions::new([3, 2])
        .with_stride([2, 2])
        .with_padding([1, 1])
        .with_ceil_mode(true);
    gradcheck::<4>(
        "avg_include_pad",
        |x| avg_pool2d(x, include.clone()),
        [1, 2, 6, 5],
        false,
    );
    let exclude = include.clone().with_count_include_pad(false);
    gradcheck::<4>(
        "avg_exclude_pad",
        |x| avg_pool2d(x, exclude.clone()),
        [1, 2, 6, 5],
        false,
    );
    let divisor = include.with_divisor_override(5);
    gradcheck::<4>(
        "avg_divisor",
        |x| avg_pool2d(x, divisor.clone()),
        [2, 1, 5, 5],
        false,
    );
    let options = AvgPoolNdOptions::new([2, 2, 3])
        .with_stride([1, 2, 2])
        .with_padding([0, 1, 1]);
    gradcheck::<5>(
        "avg3d",
        |x| avg_pool3d(x, options.clone()),
        [1, 1, 3, 4, 5],
        false,
    );
    gradcheck::<3>(
        "avg1d",
        |x| avg_pool1d(x, AvgPoolNdOptions::new([3]).with_stride([2])),
        [2, 2, 7],
        false,
    );
}

#[test]
fn adaptive_avg_pool_overlapping_windows() {
    gradcheck::<3>(
        "adaptive1d",
        |x| adaptive_avg_pool1d(x, [5]),
        [1, 2, 3],
        false,
    );
    gradcheck::<4>(
        "adaptive2d",
        |x| adaptive_avg_pool2d(x, [3, 4]),
        [2, 1, 7, 5],
        false,
    );
    gradcheck::<5>(
        "adaptive3d",
        |x| adaptive_avg_pool3d(x, [2, 3, 2]),
        [1, 1, 3, 5, 4],
        false,
    );
}

#[test]
fn lp_pool_norms() {
    let p2 = LpPoolOptions::new(2.0, [2, 3])
        .with_stride([1, 2])
        .with_ceil_mode(true);
    gradcheck::<4>("lp2", |x| lp_pool2d(x, p2.clone()), [1, 2, 5, 6], false);
    let p1 = LpPoolOptions::new(1.0, [3]).with_stride([2]);
    gradcheck::<3>("lp1_signed", |x| lp_pool1d(x, p1.clone()), [2, 1, 7], false);
    let p_frac = LpPoolOptions::new(1.5, [2, 2, 2]).with_stride([1, 2, 1]);
    gradcheck::<5>(
        "lp1.5",
        |x| lp_pool3d(x, p_frac.clone()),
        [1, 1, 3, 4, 3],
        true,
    );
    let p3 = LpPoolOptions::new(3.0, [2, 2])
        .with_stride([3, 3])
        .with_ceil_mode(true);
    gradcheck::<4>("lp3_ceil", |x| lp_pool2d(x, p3.clone()), [1, 1, 6, 7], true);
    // Below p = 1 the backward sums each window again instead of reading the output.
    let p_root = LpPoolOptions::new(0.5, [2, 2])
        .with_stride([1, 2])
        .with_ceil_mode(true);
    gradcheck::<4>(
        "lp0.5",
        |x| lp_pool2d(x, p_root.clone()),
        [1, 1, 4, 5],
        true,
    );
    let p_inf = LpPoolOptions::new(f64::INFINITY, [2, 2]);
    gradcheck::<4>(
        "lp_inf",
        |x| lp_pool2d(x, p_inf.clone()),
        [1, 2, 4, 4],
        false,
    );
}

#[test]
fn max_family_routes_gradients() {
    let options = MaxPoolOptions::new([3, 2])
        .with_stride([2, 1])
        .with_padding([1, 1])
        .with_dilation([1, 2]);
    gradcheck::<4>(
        "max2d",
        |x| max_pool2d(x, options.clone()),
        [1, 2, 6, 5],
        false,
    );
    gradcheck::<5>(
        "adaptive_max3d",
        |x| adaptive_max_pool3d(x, [2, 3, 2]),
        [1, 1, 3, 5, 4],
        false,
    );
}

/// LP pooling of infinities and NaN, output and gradient, as PyTorch computes them: `x^p` and
/// the root by C's `pow` (`(-inf)^y` is `+inf` for a `y` that is not an odd integer, `x^0` is
/// 1), and autograd's chain through `sign(S) * relu(|S|)` (NaN for a NaN total `S`, 1 for an
/// infinite one). Each row: `p`, the two inputs of one window, PyTorch's output and gradient.
#[test]
fn lp_pool_of_infinities_follows_pytorch() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let cases: [(f64, [f32; 2], f32, [f32; 2]); 8] = [
        (3.0, [-inf, 0.5], inf, [nan, 0.0]),
        (1.0, [-inf, 0.5], -inf, [1.0, 1.0]),
        (1.0, [-inf, inf], nan, [nan, nan]),
        (3.0, [-1.0, -1.0], nan, [nan, nan]),
        (2.0, [-inf, 1.0], inf, [nan, 0.0]),
        (1.5, [-inf, 1.0], inf, [nan, 0.0]),
        (1.5, [inf, 1.0], inf, [nan, 0.0]),
        (0.5, [inf, 1.0], inf, [nan, inf]),
    ];
    let same = |a: f32, b: f32| a == b || (a.is_nan() && b.is_nan());
    #[allow(unused_mut)]
    let mut devices = vec![Device::flex()];
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)]
    devices.push(Device::ndarray());
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    devices.push(crate::common::gpu());
    for device in devices {
        let device = device.autodiff();
        for (p, values, out, grad) in cases {
            let data = burn::tensor::TensorData::new(values.to_vec(), [1, 1, 2]);
            let x = Tensor::<3>::from_data(data, &device).require_grad();
            let y = lp_pool1d(x.clone(), LpPoolOptions::new(p, [2]));
            let grads = y.clone().sum().backward();
            let got_out = y.into_data().try_to_vec::<f32>().unwrap()[0];
            let got_grad = x
                .grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            let what = format!("{device:?}, p = {p}, x = {values:?}");
            assert!(
                same(got_out, out),
                "{what}: output {got_out}, expected {out}"
            );
            for (got, expected) in got_grad.iter().zip(grad) {
                assert!(
                    same(*got, expected),
                    "{what}: gradient {got_grad:?}, expected {grad:?}"
                );
            }
        }
    }
}
