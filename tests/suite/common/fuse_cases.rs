//! Runs a golden `fuse_conv_bn` case: our conv module and Burn's `BatchNorm` hold the case's
//! parameters; the fused conv's weight and bias must match PyTorch's `fuse_conv_bn_eval`, and
//! its output PyTorch's conv followed by the batch norm in eval mode.

use burn::module::{Param, RunningState};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::Device;
use burn_convpool::nn::*;

use super::{Case, JsonTensor, Tolerance, check_close, values};

/// Both sides fold in f32 with the same formula.
const PARAMETERS: Tolerance = Tolerance {
    atol: 1e-5,
    rtol: 1e-5,
};
/// The output against PyTorch's unfused f64 result.
const OUTPUT: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-4,
};

fn output<'a>(case: &'a Case, name: &str) -> Result<&'a JsonTensor, String> {
    case.outputs
        .get(name)
        .ok_or_else(|| format!("case {} has no output {name:?}", case.name))
}

/// The case's batch norm: its affine parameters, running statistics, epsilon and momentum
/// (burn-nn's default where the case has none).
pub fn batch_norm(case: &Case, device: &Device) -> BatchNorm {
    let features = case.input("bn_weight").shape[0];
    let epsilon = case.params["eps"].as_f64().expect("eps");
    let momentum = case.params["momentum"].as_f64().unwrap_or(0.1);
    let mut bn = BatchNormConfig::new(features)
        .with_epsilon(epsilon)
        .with_momentum(momentum)
        .init(device);
    bn.gamma = Param::from_tensor(case.input("bn_weight").float(device));
    bn.beta = Param::from_tensor(case.input("bn_bias").float(device));
    bn.running_mean = RunningState::new(case.input("running_mean").float(device));
    bn.running_var = RunningState::new(case.input("running_var").float(device));
    bn
}

/// Init `$config` with the case's bias setting, give it the case's weight and bias, fold the
/// batch norm in and check the fused parameters and output.
macro_rules! check_fused {
    ($case:ident, $device:ident, $config:expr, rank = $rank:literal) => {{
        let mut conv = $config.with_bias($case.flag("bias")).init($device);
        conv.weight = Param::from_tensor($case.input("weight").float::<$rank>($device));
        conv.bias = $case
            .inputs
            .get("bias")
            .map(|bias| Param::from_tensor(bias.float::<1>($device)));
        let fused = fuse_conv_bn(conv, &batch_norm($case, $device));
        let (weight, dims) = values(fused.weight.val());
        check_close(
            "fused_weight",
            &weight,
            &dims,
            output($case, "fused_weight")?,
            PARAMETERS,
        )?;
        let bias = fused
            .bias
            .as_ref()
            .ok_or("the fused conv has no bias")?
            .val();
        let (bias, dims) = values(bias);
        check_close(
            "fused_bias",
            &bias,
            &dims,
            output($case, "fused_bias")?,
            PARAMETERS,
        )?;
        let (out, dims) = values(fused.forward($case.input("x").float::<$rank>($device)));
        check_close("out", &out, &dims, output($case, "out")?, OUTPUT)
    }};
}

/// Run one `fuse_conv_bn` case on `device` (on the CubeCL device, the golden-case runner has
/// pinned our default kernels).
pub fn run(case: &Case, device: &Device) -> Result<(), String> {
    let channels = [case.input("x").shape[1], case.input("bn_weight").shape[0]];
    let groups = case.usize("groups");
    // The 2D and 3D transposed configs take the case's lists as they are.
    macro_rules! transposed {
        ($config:ident, rank = $rank:literal) => {{
            let config = $config::new(channels, case.axes("kernel_size"))
                .with_stride(case.axes("stride"))
                .with_padding(case.axes("padding"))
                .with_padding_out(case.axes("output_padding"))
                .with_dilation(case.axes("dilation"))
                .with_groups(groups);
            check_fused!(case, device, config, rank = $rank)
        }};
    }
    match case.params["module"].as_str() {
        Some("Conv1d") => {
            let ([kernel], [stride], [padding], [dilation]) = (
                case.axes("kernel_size"),
                case.axes("stride"),
                case.axes("padding"),
                case.axes("dilation"),
            );
            let config = Conv1dConfig::new(channels[0], channels[1], kernel)
                .with_stride(stride)
                .with_padding(PaddingConfig1d::Explicit(padding, padding))
                .with_dilation(dilation)
                .with_groups(groups);
            check_fused!(case, device, config, rank = 3)
        }
        Some("Conv2d") => {
            let [top, left] = case.axes("padding");
            let config = Conv2dConfig::new(channels, case.axes("kernel_size"))
                .with_stride(case.axes("stride"))
                .with_padding(PaddingConfig2d::Explicit(top, left, top, left))
                .with_dilation(case.axes("dilation"))
                .with_groups(groups);
            check_fused!(case, device, config, rank = 4)
        }
        Some("Conv3d") => {
            let [depth, height, width] = case.axes("padding");
            let config = Conv3dConfig::new(channels, case.axes("kernel_size"))
                .with_stride(case.axes("stride"))
                .with_padding(PaddingConfig3d::Explicit(depth, height, width))
                .with_dilation(case.axes("dilation"))
                .with_groups(groups);
            check_fused!(case, device, config, rank = 5)
        }
        Some("ConvTranspose1d") => {
            let ([kernel], [stride], [padding], [padding_out], [dilation]) = (
                case.axes("kernel_size"),
                case.axes("stride"),
                case.axes("padding"),
                case.axes("output_padding"),
                case.axes("dilation"),
            );
            let config = ConvTranspose1dConfig::new(channels, kernel)
                .with_stride(stride)
                .with_padding(padding)
                .with_padding_out(padding_out)
                .with_dilation(dilation)
                .with_groups(groups);
            check_fused!(case, device, config, rank = 3)
        }
        Some("ConvTranspose2d") => transposed!(ConvTranspose2dConfig, rank = 4),
        Some("ConvTranspose3d") => transposed!(ConvTranspose3dConfig, rank = 5),
        other => Err(format!("case {}: unknown module {other:?}", case.name)),
    }
}
