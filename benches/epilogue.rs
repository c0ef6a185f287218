//! Fused epilogues: `conv2d + bias + ReLU` in one call of this crate's conv
//! (`ConvNdOptions::with_activation`) against the same conv followed by Burn's add and ReLU,
//! and against Burn's built-in conv (with its bias) followed by Burn's ReLU, on the ResNet rows
//! of the catalogue (`benches/catalogue.json`), forward only. And the training step of
//! ResNet's block, `nn::ConvBnAct2d` (the conv summing the batch norm's statistics, then batch
//! norm and ReLU in one pass forward and two backward)
//! against our conv followed by burn-nn's `BatchNorm` and Burn's ReLU: forward and backward.
//!
//! `cargo bench --bench epilogue`. Ids are `conv_epilogue/{device}/{case}/{unfused|builtin}`
//! and `conv_bn_act/{device}/{case}/unfused`, `ours` (fused) against `burn` (the composition
//! named); `benches/report.sh` puts the first in `benches/REPORT.md`'s fused-epilogue table and
//! the second in its block table.

use burn::module::Param;
use burn::nn::{BatchNormConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::module::conv2d as builtin_conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::nn::{Conv2dConfig, ConvBnAct2d};
use burn_convpool::{Activation, ConvNdOptions, conv2d};
use criterion::{Criterion, criterion_group, criterion_main};

mod common {
    pub mod catalogue;
    // Its output sizes serve the conv bench; these rows need the case alone.
    #[allow(dead_code)]
    pub mod conv_case;
    pub mod devices;
    pub mod timing;
}
use common::catalogue::{full_profile, load};
use common::conv_case::ConvCase;
use common::devices::devices;
use common::timing::compare;

/// The rows: the catalogue's ungrouped 2D ResNet convolutions.
fn resnet_rows() -> Vec<ConvCase> {
    let cases: Vec<ConvCase> = load("conv", full_profile());
    cases
        .into_iter()
        .filter(|case| case.name.starts_with("resnet") && case.spatial() == 2 && case.groups == 1)
        .collect()
}

/// The first `N` of a case's values.
fn array<const N: usize>(values: &[usize]) -> [usize; N] {
    core::array::from_fn(|i| values[i])
}

fn bench_case(c: &mut Criterion, device_name: &str, device: &Device, case: &ConvCase) {
    let random = |dims: [usize; 4]| Tensor::<4>::random(dims, Distribution::Default, device);
    let x = random(array(&case.x));
    let weight = random([case.out_channels, case.x[1], case.kernel[0], case.kernel[1]]);
    let bias = Tensor::<1>::random([case.out_channels], Distribution::Default, device);
    let (stride, padding) = (array::<2>(&case.stride), array::<2>(&case.padding));
    let options = ConvNdOptions::default()
        .with_stride(stride)
        .with_padding(padding);
    let fused = || {
        let options = options.clone().with_activation(Activation::Relu);
        conv2d(x.clone(), weight.clone(), Some(bias.clone()), options)
    };
    let channel_bias = bias.clone().reshape([1, case.out_channels, 1, 1]);
    let mut unfused = || {
        let out = conv2d(x.clone(), weight.clone(), None, options.clone());
        relu(out + channel_bias.clone())
    };
    let builtin_options = ConvOptions::new(stride, padding, [1, 1], 1);
    let mut builtin = || {
        let out = builtin_conv2d(
            x.clone(),
            weight.clone(),
            Some(bias.clone()),
            builtin_options.clone(),
        );
        relu(out)
    };
    let id = |against: &str| format!("conv_epilogue/{device_name}/{}/{against}", case.name);
    compare(c, &id("unfused"), device, fused, Some(&mut unfused));
    compare(c, &id("builtin"), device, fused, Some(&mut builtin));
}

/// One training step of ResNet's block (a bias-free conv, batch norm, ReLU) on an autodiff
/// device: the block against the composition, each with its own batch norm.
fn bench_block(c: &mut Criterion, device_name: &str, device: &Device, case: &ConvCase) {
    let device = device.clone().autodiff();
    let [pad_h, pad_w] = array::<2>(&case.padding);
    let conv = Conv2dConfig::new([case.x[1], case.out_channels], array(&case.kernel))
        .with_stride(array(&case.stride))
        .with_padding(PaddingConfig2d::Explicit(pad_h, pad_w, pad_h, pad_w))
        .with_bias(false)
        .init(&device);
    let weight = Tensor::<4>::random(conv.weight.dims(), Distribution::Default, &device);
    let pair = || {
        let mut conv = conv.clone();
        conv.weight = Param::from_tensor(weight.clone());
        (conv, BatchNormConfig::new(case.out_channels).init(&device))
    };
    let x = Tensor::<4>::random(array::<4>(&case.x), Distribution::Default, &device);
    let (conv_b, bn_b) = pair();
    let block = {
        let (conv, bn) = pair();
        ConvBnAct2d::new(conv, bn, Some(Activation::Relu))
    };
    let fused = || block.forward(x.clone()).sum().backward();
    let mut unfused = || {
        relu(bn_b.forward(conv_b.forward(x.clone())))
            .sum()
            .backward()
    };
    let id = format!("conv_bn_act/{device_name}/{}/unfused", case.name);
    compare(c, &id, &device, fused, Some(&mut unfused));
}

fn epilogue(c: &mut Criterion) {
    let cases = resnet_rows();
    for (device_name, device) in devices() {
        for case in &cases {
            bench_case(c, device_name, &device, case);
            bench_block(c, device_name, &device, case);
        }
    }
}

criterion_group! {
    name = benches;
    config = common::timing::criterion();
    targets = epilogue
}
criterion_main!(benches);
