//! Runs a golden `conv*` / `conv_transpose*` case, with its fused activation if it names one:
//! forward, then backward of `(out * grad_output).sum()`, checking every gradient the case
//! stores.

use burn::tensor::{Device, Tensor};
use burn_convpool::{Activation, ConvNdOptions, ConvTransposeNdOptions, Padding, PaddingMode};

use super::{Case, Tolerance, check_close, values};

const VALUES: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-4,
};
const SUMS: Tolerance = Tolerance {
    atol: 1e-3,
    rtol: 1e-4,
};

/// `padding` is a list, or `"same"` / `"valid"`.
fn conv_padding<const N: usize>(case: &Case) -> Padding<N> {
    match case.params["padding"].as_str() {
        Some("same") => Padding::Same,
        Some("valid") => Padding::Valid,
        Some(other) => panic!("case {}: unknown padding {other:?}", case.name),
        None => Padding::from(case.axes::<N>("padding")),
    }
}

/// `padding_mode` (PyTorch's module argument; absent means zeros).
fn padding_mode(case: &Case) -> PaddingMode {
    match case
        .params
        .get("padding_mode")
        .and_then(|mode| mode.as_str())
    {
        None | Some("zeros") => PaddingMode::Zeros,
        Some("reflect") => PaddingMode::Reflect,
        Some("replicate") => PaddingMode::Replicate,
        Some("circular") => PaddingMode::Circular,
        Some(other) => panic!("case {}: unknown padding_mode {other:?}", case.name),
    }
}

/// `activation` (`conv_activation.json`): the function PyTorch applies after the conv, by its
/// PyTorch name and arguments; absent means none.
/// The case's `params.activation`, `None` where absent or null.
pub fn activation(case: &Case) -> Option<Activation> {
    let activation = case
        .params
        .get("activation")
        .filter(|value| !value.is_null())?;
    let name = activation["name"].as_str();
    Some(match name {
        Some("relu") => Activation::Relu,
        Some("leaky_relu") => Activation::LeakyRelu {
            negative_slope: activation["negative_slope"]
                .as_f64()
                .unwrap_or_else(|| panic!("case {}: leaky_relu without a slope", case.name)),
        },
        Some("silu") => Activation::Silu,
        Some("gelu") => match activation["approximate"].as_str() {
            Some("none") => Activation::Gelu,
            Some("tanh") => Activation::GeluTanh,
            other => panic!("case {}: unknown gelu approximation {other:?}", case.name),
        },
        other => panic!("case {}: unknown activation {other:?}", case.name),
    })
}

/// The public per-rank functions under test, for one spatial rank `N` (tensor rank `D`).
pub struct ConvFns<const N: usize, const D: usize> {
    pub conv: fn(Tensor<D>, Tensor<D>, Option<Tensor<1>>, ConvNdOptions<N>) -> Tensor<D>,
    pub transpose:
        fn(Tensor<D>, Tensor<D>, Option<Tensor<1>>, ConvTransposeNdOptions<N>) -> Tensor<D>,
}

impl<const N: usize, const D: usize> ConvFns<N, D> {
    /// Apply the case's op with the case's parameters.
    fn apply(
        &self,
        case: &Case,
        x: Tensor<D>,
        weight: Tensor<D>,
        bias: Option<Tensor<1>>,
    ) -> Tensor<D> {
        if case.op.starts_with("conv_transpose") {
            let mut options = ConvTransposeNdOptions::default()
                .with_stride(case.axes("stride"))
                .with_padding(case.axes("padding"))
                .with_padding_out(case.axes("output_padding"))
                .with_dilation(case.axes("dilation"))
                .with_groups(case.usize("groups"));
            options.activation = activation(case);
            (self.transpose)(x, weight, bias, options)
        } else {
            let mut options = ConvNdOptions::default()
                .with_stride(case.axes("stride"))
                .with_padding(conv_padding::<N>(case))
                .with_dilation(case.axes("dilation"))
                .with_groups(case.usize("groups"))
                .with_padding_mode(padding_mode(case));
            options.activation = activation(case);
            (self.conv)(x, weight, bias, options)
        }
    }
}

/// Run one conv-family case on `device` (which must have autodiff enabled).
pub fn run<const N: usize, const D: usize>(
    case: &Case,
    device: &Device,
    fns: ConvFns<N, D>,
) -> Result<(), String> {
    let x = case.input("x").float::<D>(device).require_grad();
    let weight = case.input("weight").float::<D>(device).require_grad();
    let bias = case
        .inputs
        .get("bias")
        .map(|bias| bias.float::<1>(device).require_grad());
    let out = fns.apply(case, x.clone(), weight.clone(), bias.clone());
    let (out_values, out_dims) = values(out.clone());
    let mut failures = Vec::new();
    let mut check = |result: Result<(), String>| {
        if let Err(message) = result {
            failures.push(message);
        }
    };
    check(check_close(
        "out",
        &out_values,
        &out_dims,
        &case.outputs["out"],
        VALUES,
    ));
    let grad_output = case.input("grad_output").float::<D>(device);
    let grads = (out * grad_output).sum().backward();
    let (x_grad, x_dims) = values(x.grad(&grads).expect("x is tracked"));
    check(check_close(
        "grad_input",
        &x_grad,
        &x_dims,
        &case.grads["grad_input"],
        VALUES,
    ));
    let (weight_grad, weight_dims) = values(weight.grad(&grads).expect("weight is tracked"));
    check(check_close(
        "grad_weight",
        &weight_grad,
        &weight_dims,
        &case.grads["grad_weight"],
        SUMS,
    ));
    match (&bias, case.grads.get("grad_bias")) {
        (Some(bias), Some(expected)) => {
            let (bias_grad, bias_dims) = values(bias.grad(&grads).expect("bias is tracked"));
            check(check_close(
                "grad_bias",
                &bias_grad,
                &bias_dims,
                expected,
                SUMS,
            ));
        }
        (None, None) => {}
        _ => check(Err("bias and grad_bias disagree".into())),
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
