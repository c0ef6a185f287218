//! Finite-difference checks of every conv-family gradient on tiny random shapes, in f64.
//!
//! The loss is `sum(op(x, weight, bias) * r)` for a fixed random `r`; each analytic gradient
//! from autodiff must match the central difference of that loss within 1e-6 (relative).

use crate::common::{Lcg, assert_central_differences, f64_tensor, f64_values};
use burn::tensor::{Device, Tensor};
use burn_convpool::*;

/// A conv-family op with fixed options, applied to rank-D tensors.
type Op<const D: usize> = Box<dyn Fn(Tensor<D>, Tensor<D>, Option<Tensor<1>>) -> Tensor<D>>;

/// Check d(loss)/d(x, weight, bias) for one op against central differences.
fn gradcheck<const D: usize>(
    name: &str,
    op: Op<D>,
    x_dims: [usize; D],
    weight_dims: [usize; D],
    bias_len: usize,
) {
    let mut rng = Lcg::new(name.len() as u64 * 7919);
    let x = rng.values(x_dims.iter().product());
    let weight = rng.values(weight_dims.iter().product());
    let bias = rng.values(bias_len);
    let plain = Device::flex();
    let out_dims = op(
        f64_tensor(&x, x_dims, &plain),
        f64_tensor(&weight, weight_dims, &plain),
        Some(f64_tensor(&bias, [bias_len], &plain)),
    )
    .dims();
    let r = rng.values(out_dims.iter().product());
    let loss = |x: &[f64], weight: &[f64], bias: &[f64]| -> f64 {
        let out = op(
            f64_tensor(x, x_dims, &plain),
            f64_tensor(weight, weight_dims, &plain),
            Some(f64_tensor(bias, [bias_len], &plain)),
        );
        f64_values(out).iter().zip(&r).map(|(a, b)| a * b).sum()
    };

    let device = Device::flex().autodiff();
    let x_t = f64_tensor(&x, x_dims, &device).require_grad();
    let weight_t = f64_tensor(&weight, weight_dims, &device).require_grad();
    let bias_t = f64_tensor(&bias, [bias_len], &device).require_grad();
    let out = op(x_t.clone(), weight_t.clone(), Some(bias_t.clone()));
    let grads = (out * f64_tensor(&r, out_dims, &device)).sum().backward();
    let analytic = [
        f64_values(x_t.grad(&grads).unwrap()),
        f64_values(weight_t.grad(&grads).unwrap()),
        f64_values(bias_t.grad(&grads).unwrap()),
    ];

    let inputs = [x, weight, bias];
    for (which, (label, grad)) in ["x", "weight", "bias"].iter().zip(&analytic).enumerate() {
        assert_central_differences(
            &format!("{name}: d/d{label}"),
            &inputs[which],
            grad,
            |values| {
                let mut all = inputs.clone();
                all[which] = values.to_vec();
                loss(&all[0], &all[1], &all[2])
            },
        );
    }
}

#[test]
fn conv1d_strided_dilated_grouped() {
    let options = ConvNdOptions::default()
        .with_stride([2])
        .with_padding([(1, 2)])
        .with_dilation([2])
        .with_groups(2);
    gradcheck::<3>(
        "conv1d",
        Box::new(move |x, w, b| conv1d(x, w, b, options.clone())),
        [2, 4, 9],
        [6, 2, 3],
        6,
    );
}

#[test]
fn conv2d_asymmetric_padding_and_groups() {
    let options = ConvNdOptions::default()
        .with_stride([1, 2])
        .with_padding([(0, 1), (2, 1)])
        .with_groups(3);
    gradcheck::<4>(
        "conv2d",
        Box::new(move |x, w, b| conv2d(x, w, b, options.clone())),
        [2, 3, 5, 6],
        [3, 1, 2, 3],
        3,
    );
}

#[test]
fn conv2d_pointwise_fast_path() {
    gradcheck::<4>(
        "conv2d_1x1",
        Box::new(|x, w, b| conv2d(x, w, b, ConvNdOptions::default())),
        [3, 4, 3, 2],
        [5, 4, 1, 1],
        5,
    );
}

#[test]
fn conv3d_same_padding() {
    let options = ConvNdOptions::default()
        .with_padding(Padding::Same)
        .with_dilation([1, 2, 1]);
    gradcheck::<5>(
        "conv3d",
        Box::new(move |x, w, b| conv3d(x, w, b, options.clone())),
        [1, 2, 3, 4, 3],
        [2, 2, 2, 2, 2],
        2,
    );
}

#[test]
fn conv_transpose1d_with_output_padding() {
    let options = ConvTransposeNdOptions::default()
        .with_stride([3])
        .with_padding([1])
        .with_padding_out([2])
        .with_groups(2);
    gradcheck::<3>(
        "conv_transpose1d",
        Box::new(move |x, w, b| conv_transpose1d(x, w, b, options.clone())),
        [2, 4, 4],
        [4, 1, 3],
        2,
    );
}

#[test]
fn conv_transpose2d_dilated() {
    let options = ConvTransposeNdOptions::default()
        .with_stride([2, 1])
        .with_padding([1, 0])
        .with_dilation([1, 2])
        .with_padding_out([1, 1]);
    gradcheck::<4>(
        "conv_transpose2d",
        Box::new(move |x, w, b| conv_transpose2d(x, w, b, options.clone())),
        [2, 2, 3, 3],
        [2, 3, 2, 2],
        3,
    );
}

#[test]
fn conv_transpose3d_strided() {
    let options = ConvTransposeNdOptions::default()
        .with_stride([1, 2, 2])
        .with_padding([0, 1, 0]);
    gradcheck::<5>(
        "conv_transpose3d",
        Box::new(move |x, w, b| conv_transpose3d(x, w, b, options.clone())),
        [1, 2, 2, 3, 2],
        [2, 2, 2, 3, 2],
        2,
    );
}
