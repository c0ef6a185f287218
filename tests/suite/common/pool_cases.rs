//! Runs a golden pooling case: forward (and indices, exactly), then the gradient of
//! `(out * grad_output).sum()` with respect to `x`.

use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_convpool::{
    AdaptiveSize, AvgPoolNdOptions, FractionalMaxPoolOptions, FractionalOutput, LpPoolOptions,
    MaxPoolOptions, MaxUnpoolOptions,
};

use super::{Case, JsonTensor, Tolerance, check_close, values};

type WithIndices<const D: usize> = (Tensor<D>, Tensor<D, Int>);
type FractionalFn<const N: usize, const D: usize> =
    fn(Tensor<D>, FractionalMaxPoolOptions<N>, Option<Tensor<3>>) -> WithIndices<D>;

/// The public per-rank pooling functions under test, for spatial rank `N` (tensor rank `D`).
pub struct PoolFns<const N: usize, const D: usize> {
    pub max: fn(Tensor<D>, MaxPoolOptions<N>) -> WithIndices<D>,
    pub avg: fn(Tensor<D>, AvgPoolNdOptions<N>) -> Tensor<D>,
    pub adaptive_avg: fn(Tensor<D>, AdaptiveSize<N>) -> Tensor<D>,
    pub adaptive_max: fn(Tensor<D>, AdaptiveSize<N>) -> WithIndices<D>,
    pub fractional: Option<FractionalFn<N, D>>,
    pub lp: fn(Tensor<D>, LpPoolOptions<N>) -> Tensor<D>,
    pub unpool: fn(Tensor<D>, Tensor<D, Int>, MaxUnpoolOptions<N>) -> Tensor<D>,
}

const EXACT_GRAD: Tolerance = Tolerance {
    atol: 1e-6,
    rtol: 0.0,
};
const VALUES: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-4,
};

fn int_tensor<const D: usize>(json: &JsonTensor, device: &Device) -> Tensor<D, Int> {
    let values: Vec<i64> = json.values().iter().map(|&v| v as i64).collect();
    Tensor::from_data(TensorData::new(values, json.shape.clone()), device)
}

fn optional_axes<const N: usize>(case: &Case, key: &str) -> [Option<usize>; N] {
    let list = case.params[key].as_array().expect("list param");
    core::array::from_fn(|i| list[i].as_u64().map(|v| v as usize))
}

fn float_axes<const N: usize>(case: &Case, key: &str) -> Option<[f64; N]> {
    let list = case.params[key].as_array()?;
    Some(core::array::from_fn(|i| {
        list[i].as_f64().expect("float entry")
    }))
}

impl<const N: usize, const D: usize> PoolFns<N, D> {
    /// Apply the case's op; returns the output and, for the max family, the indices.
    fn apply(
        &self,
        case: &Case,
        x: Tensor<D>,
        device: &Device,
    ) -> Result<(Tensor<D>, Option<Tensor<D, Int>>), String> {
        let family = case
            .op
            .trim_end_matches(|c: char| c.is_ascii_digit() || c == 'd');
        Ok(match family {
            "max_pool" => {
                let options = MaxPoolOptions {
                    kernel_size: case.axes("kernel_size"),
                    stride: case.axes("stride"),
                    padding: case.axes::<N>("padding").map(|p| (p, p)),
                    dilation: case.axes("dilation"),
                    ceil_mode: case.flag("ceil_mode"),
                };
                let (out, indices) = (self.max)(x, options);
                (out, Some(indices))
            }
            "avg_pool" => {
                let mut options = AvgPoolNdOptions::new(case.axes("kernel_size"))
                    .with_stride(case.axes("stride"))
                    .with_padding(case.axes("padding"))
                    .with_ceil_mode(case.flag("ceil_mode"))
                    .with_count_include_pad(case.flag("count_include_pad"));
                if let Some(divisor) = case.params["divisor_override"].as_i64() {
                    options = options.with_divisor_override(divisor);
                }
                ((self.avg)(x, options), None)
            }
            "adaptive_avg_pool" => (
                (self.adaptive_avg)(x, AdaptiveSize(optional_axes(case, "output_size"))),
                None,
            ),
            "adaptive_max_pool" => {
                let (out, indices) =
                    (self.adaptive_max)(x, AdaptiveSize(optional_axes(case, "output_size")));
                (out, Some(indices))
            }
            "fractional_max_pool" => {
                let fractional = self.fractional.ok_or("no fractional pool at this rank")?;
                let output = match float_axes::<N>(case, "output_ratio") {
                    Some(ratio) => FractionalOutput::Ratio(ratio),
                    None => FractionalOutput::Size(case.axes("output_size")),
                };
                let options = FractionalMaxPoolOptions::new(case.axes("kernel_size"), output);
                let samples = case.input("samples").float::<3>(device);
                let (out, indices) = fractional(x, options, Some(samples));
                (out, Some(indices))
            }
            "lp_pool" => {
                let norm_type = match &case.params["norm_type"] {
                    serde_json::Value::String(s) if s == "inf" => f64::INFINITY,
                    value => value.as_f64().expect("numeric norm_type"),
                };
                let options = LpPoolOptions::new(norm_type, case.axes("kernel_size"))
                    .with_stride(case.axes("stride"))
                    .with_ceil_mode(case.flag("ceil_mode"));
                ((self.lp)(x, options), None)
            }
            "max_unpool" => {
                let mut options = MaxUnpoolOptions::new(case.axes("kernel_size"))
                    .with_stride(case.axes("stride"))
                    .with_padding(case.axes("padding"));
                if let Some(size) = case.params["output_size"].as_array() {
                    // PyTorch also accepts (N, C, *spatial): keep the spatial part.
                    let spatial = &size[size.len() - N..];
                    options = options.with_output_size(core::array::from_fn(|i| {
                        spatial[i].as_u64().unwrap() as usize
                    }));
                }
                let indices = int_tensor::<D>(case.input("indices"), device);
                ((self.unpool)(x, indices, options), None)
            }
            other => return Err(format!("unknown pooling family {other:?}")),
        })
    }
}

/// Run one pooling case on `device` (which must have autodiff enabled).
pub fn run<const N: usize, const D: usize>(
    case: &Case,
    device: &Device,
    fns: PoolFns<N, D>,
) -> Result<(), String> {
    let exact = [
        "max_pool",
        "adaptive_max_pool",
        "fractional_max_pool",
        "max_unpool",
    ]
    .iter()
    .any(|family| case.op.starts_with(family));
    let (value_tolerance, grad_tolerance) = if exact {
        (Tolerance::EXACT, EXACT_GRAD)
    } else {
        (VALUES, VALUES)
    };
    let x = case.input("x").float::<D>(device).require_grad();
    let (out, indices) = fns.apply(case, x.clone(), device)?;
    let mut failures = Vec::new();
    let (out_values, out_dims) = values(out.clone());
    if let Err(message) = check_close(
        "out",
        &out_values,
        &out_dims,
        &case.outputs["out"],
        value_tolerance,
    ) {
        failures.push(message);
    }
    match (indices, case.outputs.get("indices")) {
        (Some(indices), Some(expected)) => {
            let dims = indices.dims().to_vec();
            let actual: Vec<f64> = indices
                .into_data()
                .convert::<i64>()
                .iter::<i64>()
                .map(|v| v as f64)
                .collect();
            if let Err(message) = check_close("indices", &actual, &dims, expected, Tolerance::EXACT)
            {
                failures.push(message);
            }
        }
        (None, Some(_)) => failures.push("the case has indices but the op returned none".into()),
        _ => {}
    }
    let grads = (out * case.input("grad_output").float::<D>(device))
        .sum()
        .backward();
    let (x_grad, x_dims) = values(x.grad(&grads).expect("x is tracked"));
    if let Err(message) = check_close(
        "grad_input",
        &x_grad,
        &x_dims,
        &case.grads["grad_input"],
        grad_tolerance,
    ) {
        failures.push(message);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
