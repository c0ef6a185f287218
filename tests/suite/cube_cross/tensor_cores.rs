//! Our GEMM on tensor cores (`GemmTile::Cmma` and `GemmTile::Mma`), pinned under
//! `ConvPrecision::Tf32`: each pass of an f32 and an f16 conv within its format's rounding of
//! Flex's result on the same operands, where the device's tensor cores take them; elsewhere a
//! refusal naming why (CI's lavapipe has no tensor cores). Built with `cuda` (the GPU runs' sm_80+
//! devices: TF32, f16, cmma and mma), every pass must run.

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_convpool::cube_kernels::{
    ConvPrecision, ConvSchedule, CubeKernels, GemmTile, OurKernels, set_conv_precision,
};
use burn_convpool::*;

use super::{Layout, Leaf, rng, wgpu};
use crate::common;

/// A conv's operands: input, weight, bias and the output gradient `r` of `sum(out * r)`, with
/// the input and weight dims.
struct Operands {
    x: Vec<f32>,
    weight: Vec<f32>,
    bias: Vec<f32>,
    r: Vec<f32>,
    x_dims: [usize; 4],
    weight_dims: [usize; 4],
}

impl Operands {
    fn random(name: &str, x_dims: [usize; 4], weight_dims: [usize; 4], out_len: usize) -> Self {
        let mut rng = rng(name);
        let mut values =
            |len: usize| -> Vec<f32> { rng.values(len).iter().map(|&v| v as f32).collect() };
        Self {
            x: values(x_dims.iter().product()),
            weight: values(weight_dims.iter().product()),
            bias: values(weight_dims[0]),
            r: values(out_len),
            x_dims,
            weight_dims,
        }
    }

    /// Each value rounded to `dtype` (on Flex) and back to f32.
    fn rounded(&self, dtype: DType) -> Self {
        self.map(|values| {
            let tensor = Tensor::<1>::from_data(
                TensorData::new(values.to_vec(), [values.len()]),
                &Device::flex(),
            );
            read(tensor.cast(dtype))
        })
    }

    /// Every value's magnitude: run through the passes (bilinear in their operands), they bound
    /// each result's sum of absolute products.
    fn magnitudes(&self) -> Self {
        self.map(|values| values.iter().map(|v| v.abs()).collect())
    }

    /// `f` of each operand's values.
    fn map(&self, f: impl Fn(&[f32]) -> Vec<f32>) -> Self {
        Self {
            x: f(&self.x),
            weight: f(&self.weight),
            bias: f(&self.bias),
            r: f(&self.r),
            ..*self
        }
    }
}

fn read<const D: usize>(tensor: Tensor<D>) -> Vec<f32> {
    tensor
        .cast(DType::F32)
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .unwrap()
}

/// The forward values and the input, weight and bias gradients of `sum(conv2d(..) * r)` on
/// `device`, every operand cast to `dtype`, `x` laid out as `x_layout` (its gradient in that
/// layout's memory order).
fn passes(
    device: &Device,
    dtype: DType,
    (operands, x_layout): (&Operands, Layout),
    options: &ConvNdOptions<2>,
) -> [Vec<f32>; 4] {
    let device = &device.clone().autodiff();
    let leaf = |values: &[f32], dims: [usize; 4], layout: Layout| {
        let leaf = Leaf {
            values: values.to_vec(),
            dims,
            layout,
        };
        leaf.on(device)
    };
    let (x, x_view) = leaf(&operands.x, operands.x_dims, x_layout);
    let (weight, _) = leaf(&operands.weight, operands.weight_dims, Layout::Contiguous);
    let bias = Tensor::<1>::from_data(
        TensorData::new(operands.bias.clone(), [operands.bias.len()]),
        device,
    )
    .require_grad();
    let out = conv2d(
        x_view.cast(dtype),
        weight.clone().cast(dtype),
        Some(bias.clone().cast(dtype)),
        options.clone(),
    );
    let r = Tensor::<4>::from_data(TensorData::new(operands.r.clone(), out.dims()), device);
    let values = read(out.clone());
    let grads = (out * r.cast(dtype)).sum().backward();
    let grad = |leaf: Tensor<4>| read(leaf.grad(&grads).expect("a gradient"));
    let bias_grad = read(bias.grad(&grads).expect("a gradient"));
    [values, grad(x), grad(weight), bias_grad]
}

/// Relative rounding each format allows against the sum of absolute products: TF32 rounds
/// both f32 operands to 10 mantissa bits; f16 operands multiply exactly into f32 and only the
/// f16 result rounds.
fn relative_bound(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 2f32.powi(-9),
        _ => 2f32.powi(-10),
    }
}

/// Where the device's tensor cores take a pass, its values are within the format's rounding;
/// where they do not, the pinned tile refuses with the reason rather than running another
/// kernel. The interleaved tile, the same plane routine on plain cores, runs everywhere and so
/// checks this harness on every device, CI's included. The grouped case reads `x`
/// channels-last (its channels loaded as vectors), the strided one contiguous.
#[test]
fn tensor_core_tiles_match_cpu_within_their_format() {
    let gpu = wgpu();
    let _turn = common::pin(CubeKernels::default());
    set_conv_precision(&gpu, ConvPrecision::Tf32);
    // Grouped with padding (forward, weight gradient), and strided (the input gradient's
    // stride phases).
    let cases = [
        (
            "tensor cores 3x3",
            [2, 16, 10, 9],
            [32, 8, 3, 3],
            ConvNdOptions::<2>::default()
                .with_padding([1, 1])
                .with_groups(2),
        ),
        (
            "tensor cores 3x3 stride 2",
            [2, 16, 11, 12],
            [24, 16, 3, 3],
            ConvNdOptions::<2>::default()
                .with_padding([1, 1])
                .with_stride([2, 2]),
        ),
    ];
    let dtypes: Vec<DType> = [DType::F32, DType::F16]
        .into_iter()
        .filter(|&dtype| gpu.supports_dtype(dtype))
        .collect();
    // The grouped case channels-last (8 channels a group: two vectors of f32), the strided
    // one contiguous.
    let layouts = [Layout::ChannelsLast, Layout::Contiguous];
    for tile in [GemmTile::Interleaved, GemmTile::Cmma, GemmTile::Mma] {
        // Built with `cuda`, the GPU runs' sm_80+ devices take every tile.
        let must_run = !tile.uses_tensor_cores() || cfg!(feature = "cuda");
        let ours = OurKernels::default().with_conv(ConvSchedule::Gemm(tile));
        burn_convpool::cube_kernels::set_cube_kernels(&gpu, CubeKernels::Ours(ours));
        let each_case = cases.clone().into_iter();
        for ((name, x_dims, weight_dims, options), x_layout) in
            each_case.zip(layouts.iter().cycle())
        {
            let out = conv2d(
                Tensor::<4>::zeros(x_dims, &Device::flex()),
                Tensor::<4>::zeros(weight_dims, &Device::flex()),
                None,
                options.clone(),
            );
            let operands = Operands::random(name, x_dims, weight_dims, out.dims().iter().product());
            for &dtype in &dtypes {
                let operands = operands.rounded(dtype);
                let what = format!("{name}, {tile:?}, {dtype:?}, x {x_layout:?}");
                let on = |device: &Device, dtype, operands| {
                    passes(device, dtype, (operands, *x_layout), &options)
                };
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    on(&gpu, dtype, &operands)
                }));
                let actual = match ran {
                    Ok(actual) => actual,
                    Err(refusal) => {
                        let message = refusal.downcast::<String>().expect("a formatted panic");
                        if must_run {
                            panic!("{what}: this device must run it: {message}");
                        }
                        assert!(message.contains("tensor cores"), "{what}: {message}");
                        continue;
                    }
                };
                let flex = Device::flex();
                let expected = on(&flex, DType::F32, &operands);
                let bound = on(&flex, DType::F32, &operands.magnitudes());
                let names = ["forward", "x grad", "weight grad", "bias grad"];
                for (pass, ((a, e), m)) in
                    names.iter().zip(actual.iter().zip(&expected).zip(&bound))
                {
                    for (i, ((a, e), m)) in a.iter().zip(e).zip(m).enumerate() {
                        let tolerance = relative_bound(dtype) * m + 1e-5;
                        assert!(
                            (a - e).abs() <= tolerance,
                            "{what}, {pass}[{i}]: gpu {a} vs flex {e} (bound {tolerance})"
                        );
                    }
                }
            }
        }
    }
    set_conv_precision(&gpu, ConvPrecision::Exact);
}
