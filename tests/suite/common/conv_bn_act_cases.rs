//! Runs a golden `conv_bn_act` case: our `ConvBnAct{1,2,3}d` holds the case's conv and batch
//! norm; one training step must give PyTorch's output, the gradients of x, the conv's weight
//! and bias and the batch norm's `gamma`/`beta`, and the running statistics after the step;
//! then the block in eval mode (folded into the conv) must give PyTorch's eval output.

use burn::module::Param;
use burn::nn::{PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::{Device, Tensor};
use burn_convpool::nn::*;

use super::conv_cases::activation;
use super::fuse_cases::batch_norm;
use super::{Case, JsonTensor, Tolerance, check_close, values};

/// Against PyTorch's f64 results: the statistics and the normalized values round in f32.
const TOLERANCE: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-4,
};

/// For a conv output of a hundred units beside a unit spread (`*_large_mean`): f32 holds the
/// conv's output to 8e-6, and the normalized values' errors add up in `gamma`'s gradient.
const LARGE_MEAN: Tolerance = Tolerance {
    atol: 1e-3,
    rtol: 1e-3,
};

fn expected<'a>(case: &'a Case, name: &str) -> Result<&'a JsonTensor, String> {
    case.outputs
        .get(name)
        .or_else(|| case.grads.get(name))
        .ok_or_else(|| format!("case {} has no result {name:?}", case.name))
}

fn check<const D: usize>(case: &Case, name: &str, tensor: Option<Tensor<D>>) -> Result<(), String> {
    let tensor = tensor.ok_or_else(|| format!("{name}: no gradient"))?;
    let (actual, dims) = values(tensor);
    let tolerance = if case.name.ends_with("large_mean") {
        LARGE_MEAN
    } else {
        TOLERANCE
    };
    check_close(name, &actual, &dims, expected(case, name)?, tolerance)
}

/// Build the block from `$config` with the case's parameters, run a training step and the
/// eval forward, and check every result.
macro_rules! check_block {
    ($case:ident, $device:ident, $config:expr, $block:ident, rank = $rank:literal) => {{
        let mut conv = $config.with_bias($case.flag("bias")).init($device);
        conv.weight = Param::from_tensor($case.input("weight").float::<$rank>($device));
        conv.bias = $case
            .inputs
            .get("bias")
            .map(|bias| Param::from_tensor(bias.float::<1>($device)));
        let mut block = $block::new(conv, batch_norm($case, $device), activation($case));
        let x = $case.input("x").float::<$rank>($device).require_grad();
        let out = block.forward(x.clone());
        let weights = $case.input("grad_output").float::<$rank>($device);
        let grads = (out.clone() * weights).sum().backward();
        check($case, "out", Some(out))?;
        check($case, "grad_input", x.grad(&grads))?;
        check($case, "grad_weight", block.conv.weight.grad(&grads))?;
        if let Some(bias) = &block.conv.bias {
            check($case, "grad_bias", bias.grad(&grads))?;
        }
        check($case, "grad_bn_weight", block.bn.gamma.grad(&grads))?;
        check($case, "grad_bn_bias", block.bn.beta.grad(&grads))?;
        check(
            $case,
            "running_mean",
            Some(block.bn.running_mean.value_sync()),
        )?;
        check(
            $case,
            "running_var",
            Some(block.bn.running_var.value_sync()),
        )?;
        block.bn.training = Param::from_bool(false);
        check(
            $case,
            "out_eval",
            Some(block.forward($case.input("x").float::<$rank>($device))),
        )
    }};
}

/// Run one `conv_bn_act` case on an autodiff `device`.
pub fn run(case: &Case, device: &Device) -> Result<(), String> {
    let channels = [case.input("x").shape[1], case.input("bn_weight").shape[0]];
    let groups = case.usize("groups");
    match case.params["module"].as_str() {
        Some("Conv1d") => {
            let ([kernel], [stride], [padding]) = (
                case.axes("kernel_size"),
                case.axes("stride"),
                case.axes("padding"),
            );
            let config = Conv1dConfig::new(channels[0], channels[1], kernel)
                .with_stride(stride)
                .with_padding(PaddingConfig1d::Explicit(padding, padding))
                .with_groups(groups);
            check_block!(case, device, config, ConvBnAct1d, rank = 3)
        }
        Some("Conv2d") => {
            let [top, left] = case.axes("padding");
            let config = Conv2dConfig::new(channels, case.axes("kernel_size"))
                .with_stride(case.axes("stride"))
                .with_padding(PaddingConfig2d::Explicit(top, left, top, left))
                .with_groups(groups);
            check_block!(case, device, config, ConvBnAct2d, rank = 4)
        }
        Some("Conv3d") => {
            let [depth, height, width] = case.axes("padding");
            let config = Conv3dConfig::new(channels, case.axes("kernel_size"))
                .with_stride(case.axes("stride"))
                .with_padding(PaddingConfig3d::Explicit(depth, height, width))
                .with_groups(groups);
            check_block!(case, device, config, ConvBnAct3d, rank = 5)
        }
        other => Err(format!("case {}: unknown module {other:?}", case.name)),
    }
}
