//! Fused activations (`ConvNdOptions::with_activation`, the modules' `activation`) against the
//! unfused composition, our convolution then Burn's activation, on every device: outputs and
//! the gradients of input, weight and bias. Also NaN propagation, the modules' records and
//! conversions, and `fuse_conv_bn`'s refusal.

use burn::module::Module;
use burn::tensor::activation::{gelu, gelu_approximate, leaky_relu, relu, silu};
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use burn_convpool::nn::{Conv2dConfig, ConvTranspose1dConfig, try_fuse_conv_bn};
use burn_convpool::{
    Activation, ConvNdOptions, ConvTransposeNdOptions, SpecErrorKind, conv_transpose1d, conv2d,
};

use crate::common::{Tolerance, assert_tensors_close, autodiff_devices};

/// Every activation, the leaky ReLU with a positive slope (its backward reads the output) and
/// a negative one (its backward reads the value before it).
const ACTIVATIONS: [Activation; 6] = [
    Activation::Relu,
    Activation::LeakyRelu {
        negative_slope: 0.01,
    },
    Activation::LeakyRelu {
        negative_slope: -0.5,
    },
    Activation::Silu,
    Activation::Gelu,
    Activation::GeluTanh,
];

/// Burn's function of the same name.
fn unfused<const D: usize>(activation: Activation, x: Tensor<D>) -> Tensor<D> {
    match activation {
        Activation::Relu => relu(x),
        Activation::LeakyRelu { negative_slope } => leaky_relu(x, negative_slope),
        Activation::Silu => silu(x),
        Activation::Gelu => gelu(x),
        Activation::GeluTanh => gelu_approximate(x),
    }
}

/// f32 values of a few units whose convolutions straddle zero, where the activations bend.
fn normal<const D: usize>(dims: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(dims, Distribution::Normal(0.0, 1.0), device)
}

/// `data` on `device` as a leaf that requires a gradient.
fn leaf<const D: usize>(data: &TensorData, device: &Device) -> Tensor<D> {
    Tensor::from_data(data.clone(), device).require_grad()
}

fn close<const D: usize>(actual: Tensor<D>, expected: Tensor<D>, what: &str) {
    assert_tensors_close(actual, expected, Tolerance::new(2e-5, 1e-4), what);
}

/// Values drawn once on Flex, so every device computes from the same ones.
struct Operands {
    x: TensorData,
    weight: TensorData,
    bias: TensorData,
    weights_out: TensorData,
    xt: TensorData,
    weight_t: TensorData,
    weights_out_t: TensorData,
}

impl Operands {
    fn new() -> Self {
        let host = Device::flex();
        Self {
            x: normal([2, 3, 7, 6], &host).into_data(),
            weight: normal([4, 3, 3, 3], &host).into_data(),
            bias: normal([4], &host).into_data(),
            weights_out: normal([2, 4, 4, 3], &host).into_data(),
            xt: normal([2, 4, 5], &host).into_data(),
            weight_t: normal([4, 3, 3], &host).into_data(),
            weights_out_t: normal([2, 3, 11], &host).into_data(),
        }
    }

    /// A strided, padded conv2d with bias, then a strided conv_transpose1d without (its pass
    /// is an input gradient), each with `activation` fused or as Burn's function after it:
    /// their outputs and the gradients of a weighted sum of each, named.
    fn run(
        &self,
        device: &Device,
        activation: Activation,
        fused: bool,
    ) -> Vec<(&'static str, TensorData)> {
        let (x, weight, bias) = (
            leaf::<4>(&self.x, device),
            leaf::<4>(&self.weight, device),
            leaf::<1>(&self.bias, device),
        );
        let options = ConvNdOptions::default()
            .with_stride([2, 2])
            .with_padding([1, 1]);
        let out = if fused {
            let options = options.with_activation(activation);
            conv2d(x.clone(), weight.clone(), Some(bias.clone()), options)
        } else {
            unfused(
                activation,
                conv2d(x.clone(), weight.clone(), Some(bias.clone()), options),
            )
        };
        let weights_out = Tensor::<4>::from_data(self.weights_out.clone(), device);
        let grads = (out.clone() * weights_out).sum().backward();
        let mut results = vec![
            ("conv2d output", out.into_data()),
            ("conv2d x gradient", x.grad(&grads).unwrap().into_data()),
            (
                "conv2d weight gradient",
                weight.grad(&grads).unwrap().into_data(),
            ),
            (
                "conv2d bias gradient",
                bias.grad(&grads).unwrap().into_data(),
            ),
        ];

        let (x, weight) = (
            leaf::<3>(&self.xt, device),
            leaf::<3>(&self.weight_t, device),
        );
        let options = ConvTransposeNdOptions::default().with_stride([2]);
        let out = if fused {
            let options = options.with_activation(activation);
            conv_transpose1d(x.clone(), weight.clone(), None, options)
        } else {
            unfused(
                activation,
                conv_transpose1d(x.clone(), weight.clone(), None, options),
            )
        };
        let weights_out = Tensor::<3>::from_data(self.weights_out_t.clone(), device);
        let grads = (out.clone() * weights_out).sum().backward();
        results.extend([
            ("conv_transpose1d output", out.into_data()),
            (
                "conv_transpose1d x gradient",
                x.grad(&grads).unwrap().into_data(),
            ),
            (
                "conv_transpose1d weight gradient",
                weight.grad(&grads).unwrap().into_data(),
            ),
        ]);
        results
    }
}

#[test]
fn fused_activations_match_the_composition_forward_and_backward() {
    // The composition on Flex is the reference: Burn's own activations differ by backend (its
    // GELU gradient on NdArray is 1e-3 off), ours compute one formula everywhere.
    let operands = Operands::new();
    let reference = Device::flex().autodiff();
    for activation in ACTIVATIONS {
        let expected = operands.run(&reference, activation, false);
        for (name, device) in autodiff_devices() {
            let fused = operands.run(&device, activation, true);
            for ((what, actual), (_, expected)) in fused.into_iter().zip(&expected) {
                let (actual, expected): (Vec<f32>, Vec<f32>) =
                    (actual.try_to_vec().unwrap(), expected.try_to_vec().unwrap());
                for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                    assert!(
                        (a - e).abs() <= 2e-5 + 1e-4 * e.abs(),
                        "{name}, {activation:?}, {what}: element {i} is {a}, expected {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn nan_propagates_through_every_fused_activation() {
    for (name, device) in autodiff_devices() {
        // One NaN input reaches the outputs whose windows hold it, and no other.
        let mut values = vec![1.0f32; 16];
        values[5] = f32::NAN;
        let x = Tensor::<3>::from_data(TensorData::new(values, [1, 1, 16]), &device);
        let weight = Tensor::<3>::from_data(TensorData::new(vec![-1.0f32; 3], [1, 1, 3]), &device);
        for activation in ACTIVATIONS {
            let options = ConvNdOptions::default().with_activation(activation);
            let out = burn_convpool::conv1d(x.clone(), weight.clone(), None, options);
            let out: Vec<f32> = out.into_data().try_to_vec().unwrap();
            for (i, value) in out.iter().enumerate() {
                assert_eq!(
                    value.is_nan(),
                    (3..=5).contains(&i),
                    "{name}, {activation:?}: output {i} is {value}"
                );
            }
        }
    }
}

#[test]
fn modules_apply_their_activation_and_keep_burn_nns_record() {
    let device = Device::flex();
    let plain = Conv2dConfig::new([3, 5], [3, 3]).init(&device);
    let activated = Conv2dConfig::new([3, 5], [3, 3])
        .with_activation(Some(Activation::Silu))
        .init(&device)
        .load_record(plain.clone().into_record());
    let x = normal([2, 3, 6, 6], &device);
    close(
        activated.forward(x.clone()),
        silu(plain.forward(x)),
        "Conv2d with SiLU",
    );

    // burn-nn's module has no activation: converting one that has it fails, naming it.
    let error = burn::nn::conv::Conv2d::try_from(activated).unwrap_err();
    assert_eq!(
        error.kind,
        SpecErrorKind::NotInBurnNn {
            setting: "fused activation"
        }
    );

    let transposed = ConvTranspose1dConfig::new([4, 2], 3)
        .with_activation(Some(Activation::Relu))
        .init(&device);
    let x = normal([1, 4, 5], &device);
    let out = transposed.forward(x.clone());
    let unfused_out = relu(conv_transpose1d(
        x,
        transposed.weight.val(),
        transposed.bias.as_ref().map(|bias| bias.val()),
        ConvTransposeNdOptions::default(),
    ));
    close(out, unfused_out, "ConvTranspose1d with ReLU");
}

#[test]
fn a_batch_norm_does_not_fold_through_an_activation() {
    let device = Device::flex();
    let conv = Conv2dConfig::new([3, 4], [3, 3])
        .with_activation(Some(Activation::Relu))
        .init(&device);
    let bn = burn::nn::BatchNormConfig::new(4).init(&device);
    let error = try_fuse_conv_bn(conv, &bn).unwrap_err();
    assert_eq!(
        error.to_string(),
        "fuse_conv_bn: the conv applies relu before the batch norm, so the batch norm cannot \
         fold into it (fuse first, then set the activation on the fused conv)"
    );
}
