//! The porting example's checkpoint (`examples/port_pytorch/`): PyTorch's state_dict, as
//! safetensors and as `torch.save`, loads into the network built from our modules with
//! burn-store, every key but the batch norm's step counter names a parameter, and the logits
//! and every gradient match PyTorch's. Its conv/batch-norm pair (`stem`, `norm`) also loads into
//! a `ConvBnAct2d` block, which then computes what the pair and a ReLU compute.

#[path = "../../examples/port_pytorch/checkpoint.rs"]
mod checkpoint;
#[path = "../../examples/port_pytorch/model.rs"]
mod model;

use burn::module::{Module, Param};
use burn::store::{ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use burn_convpool::Activation;
use burn_convpool::nn::ConvBnAct2d;
use checkpoint::{Expected, Format, Values};
use model::PortNet;

use crate::common::autodiff_devices;

/// Largest difference over the largest magnitude: f32 against PyTorch's f64.
const RELATIVE: f64 = 1e-4;

/// The stem's bias feeds a batch norm that normalizes with the batch's mean, so its exact
/// gradient is zero: PyTorch's holds float64 rounding (1e-17), ours f32 rounding.
const ZERO_GRADIENT: (&str, f32) = ("stem.bias grad", 1e-5);

fn check(what: &str, expected: &Values, actual: Vec<f32>, failures: &mut Vec<String>) {
    if what == ZERO_GRADIENT.0 {
        let bound = ZERO_GRADIENT.1;
        if let Some(value) = actual.iter().find(|v| !v.is_finite() || v.abs() > bound) {
            failures.push(format!(
                "{what}: {value:.2e}, expected 0 (within {bound:.0e})"
            ));
        }
        return;
    }
    let error = expected.relative_error(&actual);
    if error > RELATIVE {
        failures.push(format!("{what}: relative error {error:.2e}"));
    }
}

fn values<const D: usize>(tensor: Tensor<D>) -> Vec<f32> {
    tensor.into_data().iter().collect()
}

/// The gradient of a parameter named by its PyTorch key, in PyTorch's layout.
fn param_grad<const D: usize>(
    param: &Param<Tensor<D>>,
    grads: &burn::tensor::Gradients,
) -> Vec<f32> {
    values(param.grad(grads).expect("the parameter has a gradient"))
}

fn check_port(format: Format, device: &Device, expected: &Expected) -> Vec<String> {
    let mut model = PortNet::new(device);
    let result = checkpoint::load(&mut model, format).unwrap();
    let mut failures = Vec::new();
    if result.unused != ["norm.num_batches_tracked"] {
        failures.push(format!("unused keys {:?}", result.unused));
    }
    if !result.missing.is_empty() || !result.errors.is_empty() {
        failures.push(format!(
            "missing {:?}, errors {:?}",
            result.missing, result.errors
        ));
    }
    let x = expected.x.tensor::<4>(device).require_grad();
    let logits = model.forward(x.clone());
    check(
        "logits",
        &expected.logits,
        values(logits.clone()),
        &mut failures,
    );
    let grads = (logits * expected.grad_output.tensor::<2>(device))
        .sum()
        .backward();
    let grad = |name: &str| &expected.grads[name];
    check(
        "x grad",
        grad("x"),
        values(x.grad(&grads).unwrap()),
        &mut failures,
    );
    for (name, conv) in [
        ("stem", &model.stem),
        ("grouped", &model.grouped),
        ("depthwise", &model.depthwise),
    ] {
        let weight = param_grad(&conv.weight, &grads);
        check(
            &format!("{name}.weight grad"),
            grad(&format!("{name}.weight")),
            weight,
            &mut failures,
        );
        let bias = param_grad(conv.bias.as_ref().unwrap(), &grads);
        check(
            &format!("{name}.bias grad"),
            grad(&format!("{name}.bias")),
            bias,
            &mut failures,
        );
    }
    let named = [
        ("norm.weight", param_grad(&model.norm.gamma, &grads)),
        ("norm.bias", param_grad(&model.norm.beta, &grads)),
        ("up.weight", param_grad(&model.up.weight, &grads)),
        (
            "up.bias",
            param_grad(model.up.bias.as_ref().unwrap(), &grads),
        ),
        (
            "sequence.weight",
            param_grad(&model.sequence.weight, &grads),
        ),
        (
            "sequence.bias",
            param_grad(model.sequence.bias.as_ref().unwrap(), &grads),
        ),
        // Burn's Linear holds its weight as (in, out), PyTorch's as (out, in).
        (
            "fc.weight",
            values(model.head.weight.grad(&grads).unwrap().transpose()),
        ),
        (
            "fc.bias",
            param_grad(model.head.bias.as_ref().unwrap(), &grads),
        ),
    ];
    for (name, actual) in named {
        check(&format!("{name} grad"), grad(name), actual, &mut failures);
    }
    failures
}

#[test]
fn a_pytorch_checkpoint_loads_and_matches_pytorch() {
    // Our default kernels on the CubeCL device: this checks loading, not the tuner's choice
    // (the golden cases and cube_cross cover every kernel), and tuning each of the network's
    // shapes would cost lavapipe minutes.
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    let _pinned = crate::common::pin(burn_convpool::cube_kernels::CubeKernels::Ours(
        Default::default(),
    ));
    let expected = Expected::read().unwrap();
    let mut failures = Vec::new();
    for (device_name, device) in autodiff_devices() {
        for format in [Format::Safetensors, Format::Pytorch] {
            for failure in check_port(format, &device, &expected) {
                failures.push(format!("{format:?} on {device_name}: {failure}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A model whose one field is a conv/batch-norm block, as a port names it.
#[derive(Module, Debug)]
struct Stem {
    block: ConvBnAct2d,
}

#[test]
fn a_pytorch_conv_and_batch_norm_pair_loads_into_the_block() {
    let expected = Expected::read().unwrap();
    for (name, device) in autodiff_devices() {
        let mut net = PortNet::new(&device);
        checkpoint::load(&mut net, Format::Safetensors).unwrap();
        let fresh = PortNet::new(&device);
        let mut stem = Stem {
            block: ConvBnAct2d::new(fresh.stem, fresh.norm, Some(Activation::Relu)),
        };
        let mut store = SafetensorsStore::from_file(checkpoint::dir().join("portnet.safetensors"))
            .with_from_adapter(PyTorchToBurnAdapter)
            .with_key_remapping(r"^stem\.", "block.conv.")
            .with_key_remapping(r"^norm\.", "block.bn.");
        let result = stem.load_from(&mut store).unwrap();
        assert!(
            result.missing.is_empty(),
            "{name}: missing {:?}",
            result.missing
        );
        assert!(result.errors.is_empty(), "{name}: {:?}", result.errors);
        let x = expected.x.tensor::<4>(&device);
        let error = |a: Tensor<4>, e: Tensor<4>| (a - e).abs().max().into_scalar::<f32>();
        // Inference with the loaded running statistics first: a training step then updates
        // them, burn-nn's with the biased variance and the block's with PyTorch's unbiased one.
        let (net_valid, stem_valid, x_valid) = (net.valid(), stem.valid(), x.clone().inner());
        let pair = relu(
            net_valid
                .norm
                .forward(net_valid.stem.forward(x_valid.clone())),
        );
        let block = stem_valid.block.forward(x_valid);
        assert!(error(block, pair) < 1e-4, "{name}: inference");
        // Training, with the batch's statistics.
        let pair = relu(net.norm.forward(net.stem.forward(x.clone())));
        assert!(
            error(stem.block.forward(x), pair) < 1e-4,
            "{name}: training"
        );
    }
}
