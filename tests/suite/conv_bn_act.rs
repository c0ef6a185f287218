//! The conv -> batch norm -> activation block (`nn::ConvBnAct2d`, `batch_norm_act_train`)
//! against the unfused composition on every device: our conv, burn-nn's `BatchNorm` and
//! Burn's activation, in training (outputs, every gradient, running statistics after two steps)
//! and in eval mode (the fold, gradients included); on one image, one channel and a
//! channels-last input; and its errors. The functional block (`conv2d_batch_norm_act_train`)
//! against `conv2d` then `batch_norm_act_train`.

use burn::module::Param;
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::tensor::activation::{leaky_relu, relu, silu};
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use burn_convpool::nn::{Conv2d, Conv2dConfig, ConvBnAct2d};
use burn_convpool::{
    Activation, BatchNormActOptions, ConvNdOptions, Padding, SpecErrorKind, batch_norm_act_train,
    conv2d, conv2d_batch_norm_act_train, try_batch_norm_act_train, try_conv2d_batch_norm_act_train,
};

use crate::common::{Tolerance, assert_tensors_close, autodiff_devices};

/// Burn's function of the same name, or nothing.
fn unfused(activation: Option<Activation>, x: Tensor<4>) -> Tensor<4> {
    match activation {
        None => x,
        Some(Activation::Relu) => relu(x),
        Some(Activation::LeakyRelu { negative_slope }) => leaky_relu(x, negative_slope),
        Some(Activation::Silu) => silu(x),
        Some(other) => panic!("no composition written for {other:?}"),
    }
}

/// Our default kernels on the CubeCL device while a test here runs: these tests check the
/// block against its composition, not the tuner's choice (the golden cases run every
/// kernel), and pinned they take turns with the tests that count launches.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn pin_ours() -> crate::common::Pinned {
    crate::common::pin(burn_convpool::cube_kernels::CubeKernels::Ours(
        Default::default(),
    ))
}

/// Nothing to pin without a CubeCL device.
#[cfg(not(any(feature = "wgpu", feature = "vulkan", feature = "cuda")))]
fn pin_ours() -> impl Sized {}

fn close<const D: usize>(actual: Tensor<D>, expected: Tensor<D>, what: &str) {
    assert_tensors_close(actual, expected, Tolerance::new(2e-5, 1e-4), what);
}

/// Parameters drawn once on Flex, so every device computes from the same values.
struct Operands {
    weight: TensorData,
    gamma: TensorData,
    beta: TensorData,
}

impl Operands {
    fn new(channels: [usize; 2]) -> Self {
        let host = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        Self {
            weight: Tensor::<4>::random([channels[1], channels[0], 3, 3], normal, &host)
                .mul_scalar(0.3)
                .into_data(),
            gamma: Tensor::<1>::random([channels[1]], Distribution::Uniform(0.5, 1.5), &host)
                .into_data(),
            beta: Tensor::<1>::random([channels[1]], normal, &host).into_data(),
        }
    }

    /// The conv and batch norm on `device`, each parameter a fresh leaf.
    fn pair(&self, device: &Device) -> (Conv2d, BatchNorm) {
        let dims = self.weight.shape().to_vec();
        let mut conv = Conv2dConfig::new([dims[1], dims[0]], [3, 3])
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .with_bias(false)
            .init(device);
        conv.weight = Param::from_tensor(Tensor::from_data(self.weight.clone(), device));
        let mut bn = BatchNormConfig::new(dims[0]).init(device);
        bn.gamma = Param::from_tensor(Tensor::from_data(self.gamma.clone(), device));
        bn.beta = Param::from_tensor(Tensor::from_data(self.beta.clone(), device));
        (conv, bn)
    }
}

/// One step of the block and of the composition on the same input: outputs and the gradients
/// of x, the conv weight, gamma and beta.
fn compare_step(block: &ConvBnAct2d, (conv, bn): (&Conv2d, &BatchNorm), x: Tensor<4>, what: &str) {
    let x = x.require_grad();
    let fused = block.forward(x.clone());
    let expected = unfused(block.activation, bn.forward(conv.forward(x.clone())));
    let weights = fused.random_like(Distribution::Normal(0.0, 1.0));
    let fused_grads = (fused.clone() * weights.clone()).sum().backward();
    let grads = (expected.clone() * weights).sum().backward();
    close(fused, expected, &format!("{what}: output"));
    close(
        x.grad(&fused_grads).unwrap(),
        x.grad(&grads).unwrap(),
        &format!("{what}: x gradient"),
    );
    close(
        block.conv.weight.grad(&fused_grads).unwrap(),
        conv.weight.grad(&grads).unwrap(),
        &format!("{what}: weight gradient"),
    );
    for (name, ours, theirs) in [
        ("gamma", &block.bn.gamma, &bn.gamma),
        ("beta", &block.bn.beta, &bn.beta),
    ] {
        close(
            ours.grad(&fused_grads).unwrap(),
            theirs.grad(&grads).unwrap(),
            &format!("{what}: {name} gradient"),
        );
    }
}

/// `x` of `dims` with NHWC memory (a permuted view, as Burn's convs leave their outputs), or
/// contiguous.
fn input(dims: [usize; 4], channels_last: bool, device: &Device) -> Tensor<4> {
    let normal = Distribution::Normal(0.5, 2.0);
    let host = Tensor::<4>::random(dims, normal, &Device::flex()).into_data();
    let x = Tensor::<4>::from_data(host, device);
    if channels_last {
        let nhwc = x.permute([0, 2, 3, 1]).into_data();
        Tensor::<4>::from_data(nhwc, device).permute([0, 3, 1, 2])
    } else {
        x
    }
}

#[test]
fn the_block_matches_conv_then_burns_batch_norm_then_the_activation() {
    let activations = [
        None,
        Some(Activation::Relu),
        Some(Activation::LeakyRelu {
            negative_slope: -0.5,
        }),
        Some(Activation::Silu),
    ];
    // (batch, channels, side, channels-last): ResNet's block, one image, one output channel.
    let shapes = [
        (4, [3, 5], 6, false),
        (1, [3, 4], 5, true),
        (3, [2, 1], 4, false),
    ];
    let _pinned = pin_ours();
    for (batch, channels, side, channels_last) in shapes {
        let operands = Operands::new(channels);
        for activation in activations {
            for (name, device) in autodiff_devices() {
                let what = format!("{name}, {activation:?}, batch {batch}, {channels:?}");
                let (conv, bn) = operands.pair(&device);
                let block = ConvBnAct2d::new(conv.clone(), bn.clone(), activation);
                let (conv, bn) = operands.pair(&device);
                let dims = [batch, channels[0], side, side];
                let x = input(dims, channels_last, &device);
                compare_step(&block, (&conv, &bn), x.clone(), &format!("{what}, step 1"));
                compare_step(
                    &block,
                    (&conv, &bn),
                    x.mul_scalar(0.5),
                    &format!("{what}, step 2"),
                );
                close(
                    block.bn.running_mean.value_sync(),
                    bn.running_mean.value_sync(),
                    &format!("{what}: running mean"),
                );
            }
        }
    }
}

#[test]
fn the_running_variance_is_unbiased_as_pytorchs() {
    let _pinned = pin_ours();
    // burn-nn 0.22.1 blends the biased batch variance in; PyTorch (and the block) the unbiased
    // one: after one step from 1, `0.9 + 0.1 * v * M / (M - 1)` against `0.9 + 0.1 * v`.
    for (name, device) in autodiff_devices() {
        let operands = Operands::new([2, 3]);
        let (conv, bn) = operands.pair(&device);
        let block = ConvBnAct2d::new(conv, bn, Some(Activation::Relu));
        let (conv, bn) = operands.pair(&device);
        let x = input([2, 2, 3, 3], false, &device);
        block.forward(x.clone());
        bn.forward(conv.forward(x));
        let per_channel = 2.0 * 9.0;
        let burn_batch = bn.running_var.value_sync().sub_scalar(0.9);
        let expected = burn_batch
            .mul_scalar(per_channel / (per_channel - 1.0))
            .add_scalar(0.9);
        close(
            block.bn.running_var.value_sync(),
            expected,
            &format!("{name}: running variance"),
        );
    }
}

#[test]
fn in_eval_mode_the_fold_matches_the_composition_and_trains_through() {
    let _pinned = pin_ours();
    for (name, device) in autodiff_devices() {
        let operands = Operands::new([3, 4]);
        let (conv, mut bn) = operands.pair(&device);
        bn.running_mean =
            burn::module::RunningState::new(Tensor::from_floats([0.5, -1.0, 0.25, 2.0], &device));
        bn.running_var =
            burn::module::RunningState::new(Tensor::from_floats([0.5, 2.0, 1.5, 0.75], &device));
        bn.training = Param::from_bool(false);
        let block = ConvBnAct2d::new(conv.clone(), bn.clone(), Some(Activation::Relu));
        let x = input([2, 3, 5, 5], false, &device);
        compare_step(&block, (&conv, &bn), x, &format!("{name}, eval"));
    }
}

#[test]
fn the_block_and_the_functional_op_refuse_what_pytorch_refuses() {
    let device = Device::flex().autodiff();
    let operands = Operands::new([3, 4]);
    let (conv, bn) = operands.pair(&device);
    let block = ConvBnAct2d::new(conv, bn, Some(Activation::Relu));
    let error = block
        .try_forward(Tensor::<3>::ones([3, 5, 5], &device))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "ConvBnAct2d: x must have rank [4], got rank 3"
    );
    let error = block
        .try_forward(Tensor::<4>::ones([1, 3, 1, 1], &device))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "ConvBnAct2d: expected more than 1 value per channel when training, got input \
         [1, 4, 1, 1]"
    );

    let (conv, _) = operands.pair(&device);
    let error =
        ConvBnAct2d::try_new(conv, BatchNormConfig::new(5).init(&device), None).unwrap_err();
    assert_eq!(
        error.kind,
        SpecErrorKind::Mismatch {
            what: "conv out_channels vs batch norm num_features",
            expected: 4,
            actual: 5,
        }
    );
    assert_eq!(error.op, "ConvBnAct2d");
    let (mut conv, bn) = operands.pair(&device);
    conv.activation = Some(Activation::Silu);
    let error = ConvBnAct2d::try_new(conv, bn, None).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::FoldAfterActivation { .. }
    ));

    let x = Tensor::<3>::ones([2, 3, 4], &device);
    let (gamma, beta) = (Tensor::ones([3], &device), Tensor::zeros([3], &device));
    let options = BatchNormActOptions::default().with_epsilon(0.0);
    let error = try_batch_norm_act_train(x.clone(), gamma.clone(), beta.clone(), options);
    assert_eq!(
        error.unwrap_err().to_string(),
        "batch_norm_act_train: epsilon must be finite and positive, got 0"
    );
    let short = Tensor::ones([2], &device);
    let error = try_batch_norm_act_train(x, short, beta, BatchNormActOptions::default());
    assert_eq!(
        error.unwrap_err().to_string(),
        "batch_norm_act_train: gamma.shape[0] vs channels: expected 3, got 2"
    );
}

#[test]
fn an_empty_batch_gives_an_empty_output_and_leaves_the_running_statistics() {
    let _pinned = pin_ours();
    for (name, device) in autodiff_devices() {
        let operands = Operands::new([3, 4]);
        let (conv, bn) = operands.pair(&device);
        let block = ConvBnAct2d::new(conv, bn, Some(Activation::Relu));
        let x = Tensor::<4>::zeros([0, 3, 5, 5], &device).require_grad();
        let out = block.forward(x.clone());
        assert_eq!(out.dims(), [0, 4, 5, 5], "{name}");
        let grads = out.sum().backward();
        let gamma_grad = block.bn.gamma.grad(&grads).unwrap().into_data();
        let gamma_grad: Vec<f32> = gamma_grad.try_to_vec().unwrap();
        assert_eq!(gamma_grad, [0.0; 4], "{name}: gamma gradient");
        let mean: Vec<f32> = block
            .bn
            .running_mean
            .value_sync()
            .into_data()
            .try_to_vec()
            .unwrap();
        assert_eq!(mean, [0.0; 4], "{name}: running mean");
    }
}

/// The functional block, `conv2d_batch_norm_act_train`, against `conv2d` then
/// `batch_norm_act_train` on every device: output, statistics and the gradients of `x`, the
/// weight, `gamma` and `beta`, on a strided and a grouped conv; then what it refuses.
#[test]
fn the_functional_block_matches_conv_then_the_batch_norm() {
    let _pinned = pin_ours();
    let cases = [
        (
            ConvNdOptions::default().with_padding(Padding::Same),
            [4, 6],
            1,
        ),
        (
            ConvNdOptions::default().with_stride([2, 2]).with_groups(2),
            [4, 6],
            2,
        ),
    ];
    for (conv_options, [c_in, c_out], groups) in cases {
        let host = Device::flex();
        let normal = Distribution::Normal(0.0, 1.0);
        let weight = Tensor::<4>::random([c_out, c_in / groups, 3, 3], normal, &host).into_data();
        let x = Tensor::<4>::random([3, c_in, 7, 7], normal, &host).into_data();
        let gamma = Tensor::<1>::random([c_out], Distribution::Uniform(0.5, 1.5), &host);
        let beta = Tensor::<1>::random([c_out], normal, &host);
        let options = BatchNormActOptions::default().with_activation(Activation::Relu);
        for (name, device) in autodiff_devices() {
            let what = |part: &str| format!("{name}, groups {groups}: {part}");
            let leaves = || {
                (
                    Tensor::<4>::from_data(x.clone(), &device).require_grad(),
                    Tensor::<4>::from_data(weight.clone(), &device).require_grad(),
                    Tensor::<1>::from_data(gamma.to_data(), &device).require_grad(),
                    Tensor::<1>::from_data(beta.to_data(), &device).require_grad(),
                )
            };
            let (x1, w1, g1, b1) = leaves();
            let fused = conv2d_batch_norm_act_train(
                x1.clone(),
                w1.clone(),
                g1.clone(),
                b1.clone(),
                conv_options.clone(),
                options,
            );
            let (x2, w2, g2, b2) = leaves();
            let y = conv2d(x2.clone(), w2.clone(), None, conv_options.clone());
            let expected = batch_norm_act_train(y, g2.clone(), b2.clone(), options);
            close(fused.mean.clone(), expected.mean.clone(), &what("mean"));
            close(
                fused.variance.clone(),
                expected.variance.clone(),
                &what("variance"),
            );
            let weights = fused.output.random_like(Distribution::Normal(0.0, 1.0));
            let fused_grads = (fused.output.clone() * weights.clone()).sum().backward();
            let grads = (expected.output.clone() * weights).sum().backward();
            close(fused.output, expected.output, &what("output"));
            close(
                x1.grad(&fused_grads).unwrap(),
                x2.grad(&grads).unwrap(),
                &what("x gradient"),
            );
            close(
                w1.grad(&fused_grads).unwrap(),
                w2.grad(&grads).unwrap(),
                &what("weight gradient"),
            );
            close(
                g1.grad(&fused_grads).unwrap(),
                g2.grad(&grads).unwrap(),
                &what("gamma gradient"),
            );
            close(
                b1.grad(&fused_grads).unwrap(),
                b2.grad(&grads).unwrap(),
                &what("beta gradient"),
            );
        }
    }

    let device = Device::flex();
    let (gamma, beta) = (Tensor::ones([4], &device), Tensor::zeros([4], &device));
    let weight = Tensor::<4>::ones([4, 3, 3, 3], &device);
    let x = Tensor::<4>::ones([2, 3, 5, 5], &device);
    let options = BatchNormActOptions::default();
    let relu_first = ConvNdOptions::default().with_activation(Activation::Relu);
    let error = try_conv2d_batch_norm_act_train(
        x.clone(),
        weight.clone(),
        gamma.clone(),
        beta.clone(),
        relu_first,
        options,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv2d_batch_norm_act_train: the conv options apply relu, but a batch norm follows \
         the conv: set the activation in the batch norm's options"
    );
    let unbatched = Tensor::<3>::ones([3, 5, 5], &device);
    let error = try_conv2d_batch_norm_act_train(
        unbatched,
        weight.clone(),
        gamma.clone(),
        beta.clone(),
        ConvNdOptions::default(),
        options,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv2d_batch_norm_act_train: x must have rank [4], got rank 3"
    );
    let error = try_conv2d_batch_norm_act_train(
        x,
        weight,
        Tensor::ones([5], &device),
        beta,
        ConvNdOptions::default(),
        options,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv2d_batch_norm_act_train: gamma.shape[0] vs channels: expected 4, got 5"
    );
}
