//! What each conv pass launches on the CubeCL device with our kernels pinned, for every conv
//! case of the bench catalogue (`benches/catalogue.json`) at batch 1: launches cost a GPU a few
//! microseconds each, which a profile of a whole network hides. A change to the launch graph
//! shows here as a changed table; the table is the one place the counts are written down.
//! Batch 1 keeps the suite's time on lavapipe to seconds (the full batches take two minutes);
//! a batch changes only how a GEMM is split, and `resnet_train` pins the example's step at its
//! own batch. Split-k sums run as second launches here on every runtime; handed off to the
//! GEMM's cubes (`SplitSum::Handoff`), each tiled GEMM's goes (`resnet_train` counts both).

use std::collections::BTreeMap;

use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Dispatch, TensorMetadata};
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Distribution, Shape, Tensor};
use burn_convpool::ConvPoolBackend;
use burn_convpool::cube_kernels::{CubeKernels, OurKernels, SplitSum};
use burn_convpool::cube_launches::{Launch, record};
use serde::Deserialize;

use super::wgpu;
use crate::common;

/// A conv case of the catalogue: the fields that set its launches.
#[derive(Deserialize)]
struct Case {
    name: String,
    x: Vec<usize>,
    out_channels: usize,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    groups: usize,
}

/// Per case and pass (forward, input gradient, weight gradient), our kernels' launches in
/// order, each name with its count.
const EXPECTED: &[(&str, [&str; 3])] = &[
    (
        "audio_conv1d_k9",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
        ],
    ),
    (
        "dispatch_conv3x3",
        [
            "conv_gemm_direct x1",
            "conv_gemm_direct x1",
            "conv_weight_direct x1",
        ],
    ),
    (
        "example_resnet_1x1s2_14",
        [
            "conv_gemm_tiled x1",
            "conv_gemm_tiled x1",
            "conv_weight_direct x1",
        ],
    ),
    (
        "example_resnet_3x3_14",
        [
            "conv_gemm_tiled x1",
            "conv_gemm_tiled x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "example_resnet_3x3_4",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "example_resnet_3x3_7",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "example_resnet_3x3s2_14",
        [
            "conv_gemm_tiled x1",
            "conv_gemm_tiled x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "example_resnet_3x3s2_7",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "example_resnet_stem_28",
        [
            "conv_gemm_direct x1",
            "conv_gemm_direct x1",
            "conv_weight_direct x1, sum_splits_exact x1",
        ],
    ),
    (
        "mobilenet_depthwise_3x3",
        [
            "conv_gemm_direct x1",
            "conv_gemm_direct x1",
            "conv_weight_direct x1, sum_splits_exact x1",
        ],
    ),
    (
        "resnet50_1x1_proj_s2",
        [
            "conv_gemm_tiled x1, sum_splits x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnet50_1x1_reduce",
        [
            "conv_gemm_tiled x1, sum_splits x1",
            "conv_gemm_tiled x1, sum_splits x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnet_3x3_14",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnet_3x3_28",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnet_3x3_56",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
        ],
    ),
    (
        "resnet_3x3_7",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnet_stem_7x7s2",
        [
            "conv_gemm_tiled x1",
            "conv_gemm_direct x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
        ],
    ),
    (
        "resnext50_grouped32_3x3_7",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1",
        ],
    ),
    (
        "resnext_grouped32_3x3",
        [
            "conv_gemm_direct x1",
            "conv_gemm_direct x1",
            "conv_weight_direct x1, sum_splits_exact x1",
        ],
    ),
    (
        "video_conv3d_16x112x112",
        [
            "conv_gemm_tiled x1",
            "conv_gemm_direct x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
        ],
    ),
    (
        "video_conv3d_8x28x28",
        [
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
            "conv_gemm_tiled x1, sum_splits_exact x1",
        ],
    ),
];

/// `values` per spatial axis lifted to rank 3 with `fill`.
fn lifted(values: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - values.len()..].copy_from_slice(values);
    out
}

/// Launches as `name xcount` runs, in order.
fn runs(launches: &[Launch]) -> String {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for launch in launches {
        let name = match launch {
            Launch::Kernel(name) => name.to_string(),
            other => format!("{other:?}"),
        };
        match runs.last_mut() {
            Some((last, count)) if *last == name => *count += 1,
            _ => runs.push((name, 1)),
        }
    }
    runs.iter()
        .map(|(name, count)| format!("{name} x{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each pass of a rank-5 conv (forward, input gradient, weight gradient) over `x`, `weight` and
/// `out_grad`, recorded alone, its launches as [`runs`] names them; `sync` waits for the device.
fn pass_runs(
    (x, weight, out_grad): (
        &FloatTensor<Dispatch>,
        &FloatTensor<Dispatch>,
        &FloatTensor<Dispatch>,
    ),
    options: &ConvOptions<3>,
    sync: &impl Fn(),
) -> [String; 3] {
    type B = Dispatch;
    let spatial = |tensor: &FloatTensor<Dispatch>| -> [usize; 3] {
        let dims = tensor.shape().to_vec();
        [dims[2], dims[3], dims[4]]
    };
    let (x_size, kernel) = (spatial(x), spatial(weight));
    // Run what is queued now, so no record below holds it.
    sync();
    [
        record(|| {
            B::conv(x.clone(), weight.clone(), options.clone(), None);
            sync()
        })
        .1,
        record(|| {
            B::conv_x_backward(weight.clone(), out_grad.clone(), x_size, options.clone());
            sync()
        })
        .1,
        record(|| {
            B::conv_weight_backward(x.clone(), out_grad.clone(), kernel, options.clone());
            sync()
        })
        .1,
    ]
    .map(|launches| runs(&launches))
}

#[test]
fn catalogue_conv_passes_launch_what_the_table_says() {
    type B = Dispatch;
    let catalogue: serde_json::Value =
        serde_json::from_str(include_str!("../../../benches/catalogue.json")).unwrap();
    let cases: Vec<Case> = serde_json::from_value(catalogue["conv"].clone()).unwrap();
    let kernels = OurKernels::default().with_split_sum(SplitSum::SecondLaunch);
    let _pinned = common::pin(CubeKernels::Ours(kernels));
    let device = wgpu();
    let sync = || device.sync().expect("device sync");
    let mut got = BTreeMap::new();
    for case in &cases {
        let spatial = case.x.len() - 2;
        let options = ConvOptions::new(
            lifted(&case.stride, 1),
            lifted(&case.padding, 0),
            [1; 3],
            case.groups,
        );
        let lift = |dims: &[usize]| -> Vec<usize> {
            let mut lifted = dims[..2].to_vec();
            lifted.extend(std::iter::repeat_n(1, 3 - spatial));
            lifted.extend(&dims[2..]);
            lifted
        };
        let tensor = |dims: Vec<usize>| {
            let numel: usize = dims.iter().product();
            let flat = Tensor::<1>::random([numel], Distribution::Default, &device);
            B::float_reshape(flat.into_dispatch(), Shape::from(dims))
        };
        let mut weight_dims = vec![case.out_channels, case.x[1] / case.groups];
        weight_dims.extend(&case.kernel);
        let mut x_dims = lift(&case.x);
        x_dims[0] = 1;
        let x = tensor(x_dims);
        let weight = tensor(lift(&weight_dims));
        let out = B::conv(x.clone(), weight.clone(), options.clone(), None);
        let out_dims = out.shape().to_vec();
        let out_grad = tensor(out_dims);
        got.insert(
            case.name.clone(),
            pass_runs((&x, &weight, &out_grad), &options, &sync),
        );
    }
    let expected: BTreeMap<String, [String; 3]> = EXPECTED
        .iter()
        .map(|(name, passes)| (name.to_string(), passes.map(String::from)))
        .collect();
    let table: String = got
        .iter()
        .map(|(name, [f, d, w])| format!("    (\"{name}\", [\"{f}\", \"{d}\", \"{w}\"]),\n"))
        .collect();
    assert_eq!(got, expected, "the catalogue's launches:\n{table}");
}

/// Pinned, cubek's GEMM routines run every pass of a padded grouped conv (and its repair, as
/// after Burn's kernels): the unit routine for register tiles, the plane routine for
/// interleaved ones. A weight gradient whose reduction passes lavapipe's loop limit runs our
/// schedule instead, as `ConvSchedule::Gemm` says.
#[test]
fn the_gemm_pins_run_cubeks_routines() {
    use burn_convpool::cube_kernels::{ConvSchedule, GemmTile};
    type B = Dispatch;
    let device = wgpu();
    let sync = || device.sync().expect("device sync");
    let tensor = |dims: [usize; 5]| {
        let flat = Tensor::<1>::random(
            [dims.iter().product::<usize>()],
            Distribution::Default,
            &device,
        );
        B::float_reshape(flat.into_dispatch(), Shape::from(dims.to_vec()))
    };
    let passes = |x_dims: [usize; 5], w_dims: [usize; 5], options: ConvOptions<3>| {
        let (x, weight) = (tensor(x_dims), tensor(w_dims));
        let out = B::conv(x.clone(), weight.clone(), options.clone(), None);
        let out_grad = tensor(out.shape().to_vec().try_into().unwrap());
        pass_runs((&x, &weight, &out_grad), &options, &sync)
    };
    for (tile, routine) in [
        (GemmTile::Register, "cubek_gemm_unit"),
        (GemmTile::Interleaved, "cubek_gemm_interleaved"),
    ] {
        let gemm = OurKernels::default().with_conv(ConvSchedule::Gemm(tile));
        let _pinned = common::pin(CubeKernels::Ours(gemm));
        let grouped = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 2);
        let runs_of = passes([2, 4, 1, 9, 8], [6, 2, 1, 3, 3], grouped);
        assert_eq!(
            runs_of,
            [
                format!("{routine} x1, nonfinite_flags x1, repair_gemm x1"),
                format!("{routine} x1, nonfinite_flags x1, repair_gemm x1"),
                format!("{routine} x1, repair_weight x1"),
            ]
        );
        // 298 x 298 output positions: a reduction of 88,804 in the weight gradient.
        let long = passes(
            [1, 1, 1, 300, 300],
            [2, 1, 1, 3, 3],
            ConvOptions::new([1; 3], [0; 3], [1; 3], 1),
        );
        assert!(long[0].starts_with(routine), "{}", long[0]);
        assert!(!long[2].contains("cubek"), "{}", long[2]);
    }
}

/// A fused activation costs our kernels no launch: the tiled kernel, the sum of split-k
/// partials and the direct kernel apply it as they store. After Burn's kernels it is one
/// element-wise pass.
#[test]
fn fused_activations_launch_nothing_more() {
    use burn_convpool::Activation;
    type B = Dispatch;
    let device = wgpu();
    let sync = || device.sync().expect("device sync");
    let tensor = |dims: [usize; 5]| {
        let len: usize = dims.iter().product();
        let flat = Tensor::<1>::random([len], Distribution::Default, &device);
        B::float_reshape(flat.into_dispatch(), Shape::from(dims.to_vec()))
    };
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    // Tiled, split-k, direct.
    let cases = [
        ([2, 24, 1, 9, 11], [40, 24, 1, 3, 3]),
        ([2, 64, 1, 3, 3], [48, 64, 1, 3, 3]),
        ([2, 3, 1, 7, 9], [4, 3, 1, 3, 3]),
    ];
    for (kernels, extra) in [
        (CubeKernels::Ours(OurKernels::default()), ""),
        (CubeKernels::Burn, ", activate_dense x1"),
    ] {
        let _pinned = common::pin(kernels);
        for (x, weight) in cases {
            let (x, weight) = (tensor(x), tensor(weight));
            let launches = |activation| {
                sync();
                let (_, launches) = record(|| {
                    B::conv(x.clone(), weight.clone(), options.clone(), activation);
                    sync()
                });
                runs(&launches)
            };
            let plain = launches(None);
            assert_eq!(
                launches(Some(Activation::Gelu)),
                format!("{plain}{extra}"),
                "{kernels:?}, x {:?}",
                x.shape()
            );
        }
    }
}
