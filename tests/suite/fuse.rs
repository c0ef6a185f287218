//! `fuse_conv_bn` beyond PyTorch's golden cases (`tests/fixtures/fuse_conv_bn.json`): grouped
//! transposed convs, which PyTorch does not fold, parameter ids, and the error path.

use burn::module::{Param, RunningState};
use burn::nn::{BatchNorm, BatchNormConfig};
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::nn::*;

use crate::common::{Tolerance, assert_tensors_close};

fn device() -> Device {
    Device::flex()
}

/// A batch norm over `features` channels whose statistics and affine parameters are far from
/// the identity, so a fold that skips any of them fails.
fn batch_norm(features: usize) -> BatchNorm {
    batch_norm_on(features, &device())
}

fn batch_norm_on(features: usize, device: &Device) -> BatchNorm {
    let uniform =
        |low, high| Tensor::<1>::random([features], Distribution::Uniform(low, high), device);
    let mut bn = BatchNormConfig::new(features)
        .with_epsilon(1e-3)
        .init(device);
    bn.gamma = Param::from_tensor(uniform(0.5, 2.0));
    bn.beta = Param::from_tensor(uniform(-1.0, 1.0));
    bn.running_mean = RunningState::new(uniform(-1.0, 1.0));
    bn.running_var = RunningState::new(uniform(0.2, 3.0));
    bn
}

fn assert_close<const D: usize>(actual: Tensor<D>, expected: Tensor<D>, what: &str) {
    assert_tensors_close(actual, expected, Tolerance::new(1e-4, 1e-4), what);
}

#[test]
fn grouped_transposed_convs_fold_per_output_channel() {
    // Three groups of 2 -> 4 channels: output channel 4g + j reads weight[.., j, ..] of group g.
    for bias in [true, false] {
        let conv = ConvTranspose2dConfig::new([6, 12], [3, 2])
            .with_stride([2, 1])
            .with_padding([1, 0])
            .with_padding_out([1, 0])
            .with_groups(3)
            .with_bias(bias)
            .init(&device());
        let bn = batch_norm(12);
        let x = Tensor::<4>::random([2, 6, 5, 4], Distribution::Normal(0.0, 1.0), &device());
        let unfused = bn.forward(conv.forward(x.clone()));
        let fused = fuse_conv_bn(conv, &bn);
        assert!(fused.bias.is_some(), "the fused conv has a bias");
        assert_close(fused.forward(x), unfused, "grouped ConvTranspose2d");
    }
    let conv = ConvTranspose1dConfig::new([4, 6], 3)
        .with_groups(2)
        .init(&device());
    let bn = batch_norm(6);
    let x = Tensor::<3>::random([3, 4, 7], Distribution::Normal(0.0, 1.0), &device());
    let unfused = bn.forward(conv.forward(x.clone()));
    assert_close(
        fuse_conv_bn(conv, &bn).forward(x),
        unfused,
        "grouped ConvTranspose1d",
    );
}

#[test]
fn fused_parameters_keep_their_ids_and_train() {
    let conv = Conv2dConfig::new([3, 4], [3, 3]).init(&device());
    let (weight_id, bias_id) = (conv.weight.id, conv.bias.as_ref().unwrap().id);
    let fused = fuse_conv_bn(conv, &batch_norm(4));
    assert_eq!(fused.weight.id, weight_id);
    assert_eq!(fused.bias.as_ref().unwrap().id, bias_id);

    // On an autodiff device the fused weight and bias (a new one where the conv had none) are
    // leaves, as PyTorch's fused parameters are, so fine-tuning after fusing reaches them.
    let device = device().autodiff();
    for bias in [true, false] {
        let conv = Conv2dConfig::new([3, 4], [3, 3])
            .with_bias(bias)
            .init(&device);
        let fused = fuse_conv_bn(conv, &batch_norm_on(4, &device));
        let x = Tensor::<4>::ones([1, 3, 5, 5], &device);
        let grads = fused.forward(x).sum().backward();
        assert!(
            fused.weight.grad(&grads).is_some(),
            "weight gradient (bias: {bias})"
        );
        let fused_bias = fused.bias.as_ref().unwrap();
        assert!(
            fused_bias.grad(&grads).is_some(),
            "bias gradient (bias: {bias})"
        );
    }
}

#[test]
fn a_batch_norm_of_other_width_is_an_error() {
    let conv = Conv3dConfig::new([2, 5], [1, 1, 1]).init(&device());
    let error = try_fuse_conv_bn(conv, &batch_norm(4)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "fuse_conv_bn: conv out_channels vs batch norm num_features: expected 5, got 4"
    );
    let transposed = ConvTranspose2dConfig::new([4, 6], [2, 2])
        .with_groups(2)
        .init(&device());
    assert!(
        try_fuse_conv_bn(transposed, &batch_norm(3)).is_err(),
        "6 channels, not 3"
    );
}

#[test]
#[should_panic(expected = "fuse_conv_bn: conv out_channels vs batch norm num_features")]
fn fuse_conv_bn_panics_with_the_error() {
    let conv = Conv1dConfig::new(2, 3, 3).init(&device());
    fuse_conv_bn(conv, &batch_norm(2));
}
