//! Convolutions of the catalogue (`benches/catalogue.json`): forward, input gradient and weight
//! gradient of this crate's primitives against Burn's built-in `ModuleOps` on the same device,
//! in the same run.
//!
//! `cargo bench --bench conv` (quick profile; `BENCH_PROFILE=full` for every case; add
//! `--features wgpu` or `cuda` for the CubeCL kernels). Ids are
//! `{conv|conv_transpose}/{device}/{case}/{forward|grad_input|grad_weight}` with `ours` and
//! `burn` per id (`{device}` suffixed `-f16` or `-bf16` for the CubeCL devices' operands under
//! `BENCH_DTYPE`); `benches/report.sh` turns them into `benches/REPORT.md`.

use burn::backend::Dispatch;
use burn::backend::ops::ModuleOps;
use burn::backend::tensor::FloatTensor;
use burn::tensor::Device;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
use burn_convpool::ConvPoolBackend;
use criterion::{Criterion, criterion_group, criterion_main};

mod common {
    pub mod catalogue;
    pub mod conv_case;
    pub mod devices;
    pub mod operands;
    pub mod timing;
}
use common::catalogue::{full_profile, load};
use common::conv_case::ConvCase;
use common::devices::devices;
use common::operands::{array, labelled, lifted, lifted3, operand_dtype, random};
use common::timing::compare;

type Prim = FloatTensor<Dispatch>;
type M = Dispatch;

#[derive(Clone, Copy)]
enum Pass {
    Forward,
    GradInput,
    GradWeight,
}

const PASSES: [(Pass, &str); 3] = [
    (Pass::Forward, "forward"),
    (Pass::GradInput, "grad_input"),
    (Pass::GradWeight, "grad_weight"),
];

/// One pass of Burn's built-in op for the case's rank.
fn burn_pass(
    case: &ConvCase,
    transposed: bool,
    pass: Pass,
    x: Prim,
    weight: Prim,
    out_grad: Prim,
) -> Prim {
    macro_rules! rank {
        ($n:literal, $conv:ident, $x_back:ident, $w_back:ident, $t:ident, $t_x_back:ident, $t_w_back:ident) => {{
            let (stride, padding) = (array::<$n>(&case.stride), array::<$n>(&case.padding));
            let options = ConvOptions::new(stride, padding, [1; $n], case.groups);
            let t_options =
                ConvTransposeOptions::new(stride, padding, [0; $n], [1; $n], case.groups);
            match (transposed, pass) {
                (false, Pass::Forward) => <M as ModuleOps<M>>::$conv(x, weight, None, options),
                (false, Pass::GradInput) => {
                    <M as ModuleOps<M>>::$x_back(x, weight, out_grad, options)
                }
                (false, Pass::GradWeight) => {
                    <M as ModuleOps<M>>::$w_back(x, weight, out_grad, options)
                }
                (true, Pass::Forward) => <M as ModuleOps<M>>::$t(x, weight, None, t_options),
                (true, Pass::GradInput) => {
                    <M as ModuleOps<M>>::$t_x_back(weight, out_grad, t_options)
                }
                (true, Pass::GradWeight) => {
                    <M as ModuleOps<M>>::$t_w_back(x, weight, out_grad, t_options)
                }
            }
        }};
    }
    match case.spatial() {
        1 => rank!(
            1,
            conv1d,
            conv1d_x_backward,
            conv1d_weight_backward,
            conv_transpose1d,
            conv_transpose1d_x_backward,
            conv_transpose1d_weight_backward
        ),
        2 => rank!(
            2,
            conv2d,
            conv2d_x_backward,
            conv2d_weight_backward,
            conv_transpose2d,
            conv_transpose2d_x_backward,
            conv_transpose2d_weight_backward
        ),
        _ => rank!(
            3,
            conv3d,
            conv3d_x_backward,
            conv3d_weight_backward,
            conv_transpose3d,
            conv_transpose3d_x_backward,
            conv_transpose3d_weight_backward
        ),
    }
}

/// One pass of this crate's primitive, on the rank-5 forms of the same tensors.
fn our_pass(
    case: &ConvCase,
    transposed: bool,
    pass: Pass,
    x: Prim,
    weight: Prim,
    out_grad: Prim,
) -> Prim {
    let stride = lifted3(&case.stride, 1);
    let padding = lifted3(&case.padding, 0).map(|p| (p, p));
    let kernel = lifted3(&case.kernel, 1);
    let x_size = lifted3(&case.x[2..], 1);
    if transposed {
        let options = ConvTransposeOptions {
            stride,
            padding: padding.map(|(p, _)| p),
            padding_out: [0; 3],
            dilation: [1; 3],
            groups: case.groups,
        };
        match pass {
            Pass::Forward => M::conv_transpose(x, weight, options, None),
            Pass::GradInput => M::conv_transpose_x_backward(weight, out_grad, x_size, options),
            Pass::GradWeight => M::conv_transpose_weight_backward(x, out_grad, kernel, options),
        }
    } else {
        let options = ConvOptions {
            stride,
            padding,
            dilation: [1; 3],
            groups: case.groups,
        };
        match pass {
            Pass::Forward => M::conv(x, weight, options, None),
            Pass::GradInput => M::conv_x_backward(weight, out_grad, x_size, options),
            Pass::GradWeight => M::conv_weight_backward(x, out_grad, kernel, options),
        }
    }
}

/// `(N, C_out, *out)`.
fn out_dims(case: &ConvCase, transposed: bool) -> Vec<usize> {
    let mut dims = vec![case.x[0], case.out_channels];
    dims.extend(case.out_size(transposed));
    dims
}

/// `(C_out, C_in / groups, *kernel)`, or `(C_in, C_out / groups, *kernel)` transposed.
fn weight_dims(case: &ConvCase, transposed: bool) -> Vec<usize> {
    let (first, second) = if transposed {
        (case.x[1], case.out_channels / case.groups)
    } else {
        (case.out_channels, case.x[1] / case.groups)
    };
    let mut dims = vec![first, second];
    dims.extend(&case.kernel);
    dims
}

fn bench_case(
    c: &mut Criterion,
    device_name: &str,
    device: &Device,
    case: &ConvCase,
    transposed: bool,
) {
    use burn::backend::ops::FloatTensorOps;
    let family = if transposed { "conv_transpose" } else { "conv" };
    let dtype = operand_dtype(device_name);
    let x = random(&case.x, device, dtype);
    let weight = random(&weight_dims(case, transposed), device, dtype);
    let out_grad = random(&out_dims(case, transposed), device, dtype);
    let label = labelled(device_name);
    let lift = |t: &Prim, dims: &[usize]| M::float_reshape(t.clone(), lifted(dims).into());
    let (x5, weight5, out_grad5) = (
        lift(&x, &case.x),
        lift(&weight, &weight_dims(case, transposed)),
        lift(&out_grad, &out_dims(case, transposed)),
    );
    for (pass, pass_name) in PASSES {
        let id = format!("{family}/{label}/{}/{pass_name}", case.name);
        let mut burn = || {
            burn_pass(
                case,
                transposed,
                pass,
                x.clone(),
                weight.clone(),
                out_grad.clone(),
            )
        };
        compare(
            c,
            &id,
            device,
            || {
                our_pass(
                    case,
                    transposed,
                    pass,
                    x5.clone(),
                    weight5.clone(),
                    out_grad5.clone(),
                )
            },
            Some(&mut burn),
        );
    }
}

fn conv(c: &mut Criterion) {
    let (convs, transposed) = (
        load("conv", full_profile()),
        load("conv_transpose", full_profile()),
    );
    for (device_name, device) in devices() {
        for case in &convs {
            bench_case(c, device_name, &device, case, false);
        }
        for case in &transposed {
            bench_case(c, device_name, &device, case, true);
        }
    }
}

criterion_group! {
    name = benches;
    config = common::timing::criterion();
    targets = conv
}
criterion_main!(benches);
