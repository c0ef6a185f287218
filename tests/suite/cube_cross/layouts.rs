//! Pools of channels-last inputs (as Burn's convolutions leave them) and of windows holding a
//! whole plane, on the CubeCL kernels against Flex: values, indices and gradients.

use burn::tensor::{Device, Tensor, TensorData};
use burn_convpool::*;

use super::{Layout, Leaf, assert_close, cross_pool, rng, values_and_indices, wgpu};
use crate::common;

/// A channels-last input (as Burn's convolutions leave their outputs) runs the window kernels
/// with neighbouring units on neighbouring channels and gives a channels-last output: every
/// reduction, the unrolled sliding kernel (channels in vectors of 4 and 2 lanes, and one where
/// the count is odd) and the span walk (a window wider than 7, adaptive windows), global
/// windows, 1D and 3D, and the LP backward's pre-pass below p = 1 (which keeps the plane
/// mapping: it reads the output gradient as its output).
#[test]
fn channels_last_pools_match_cpu() {
    let case = |name: &str, dims: [usize; 4], op: fn(Tensor<4>) -> Tensor<4>| {
        let mut rng = rng(name);
        cross_pool(name, &[Leaf::random(&mut rng, dims).channels_last()], |t| {
            op(t[0].clone())
        });
    };
    case("cl_max", [2, 8, 9, 8], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([3, 2])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_ceil_mode(true),
        )
    });
    case("cl_avg", [2, 3, 9, 8], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 3])
                .with_stride([2, 1])
                .with_padding([1, 1])
                .with_count_include_pad(false),
        )
    });
    case("cl_avg_wide", [2, 4, 12, 11], |x| {
        avg_pool2d(x, AvgPoolNdOptions::new([9, 8]).with_stride([2, 3]))
    });
    case("cl_adaptive_avg", [2, 3, 11, 7], |x| {
        adaptive_avg_pool2d(x, [4, 3])
    });
    case("cl_adaptive_max", [2, 3, 11, 7], |x| {
        adaptive_max_pool2d(x, [5, 2])
    });
    case("cl_global_avg", [2, 6, 7, 7], |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    case("cl_lp2", [2, 4, 9, 8], |x| {
        lp_pool2d(x, LpPoolOptions::new(2.0, [3, 2]).with_ceil_mode(true))
    });
    case("cl_lp_root", [1, 3, 8, 8], |x| {
        lp_pool2d(x.abs() + 0.1, LpPoolOptions::new(0.5, [2, 3]))
    });
    // Outputs permuted to NHWC: their gradients come back channels-last, so the backward
    // gathers channels-last too (with channels-last indices and LP output).
    let nhwc = |name: &str, dims: [usize; 4], op: fn(Tensor<4>) -> Tensor<4>| {
        let mut rng = rng(name);
        cross_pool(name, &[Leaf::random(&mut rng, dims).channels_last()], |t| {
            op(t[0].clone()).permute([0, 2, 3, 1])
        });
    };
    nhwc("cl_back_max", [2, 8, 9, 8], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([3, 3])
                .with_stride([2, 2])
                .with_padding([1, 1]),
        )
    });
    nhwc("cl_back_avg", [2, 3, 9, 8], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 2])
                .with_stride([2, 1])
                .with_padding([1, 1])
                .with_ceil_mode(true),
        )
    });
    nhwc("cl_back_adaptive_max", [2, 4, 11, 7], |x| {
        adaptive_max_pool2d(x, [5, 3])
    });
    nhwc("cl_back_global_avg", [2, 4, 5, 6], |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    nhwc("cl_back_lp2", [2, 4, 9, 8], |x| {
        lp_pool2d(x, LpPoolOptions::new(2.0, [3, 2]).with_stride([2, 1]))
    });
    nhwc("cl_back_lp_inf", [2, 6, 8, 7], |x| {
        lp_pool2d(x, LpPoolOptions::new(f64::INFINITY, [2, 3]))
    });
    let mut rng = rng("cl-others");
    cross_pool(
        "cl_max1d",
        &[Leaf::random(&mut rng, [2, 4, 13]).channels_last()],
        |t| max_pool1d(t[0].clone(), MaxPoolOptions::new([3]).with_stride([2])),
    );
    cross_pool(
        "cl_avg3d",
        &[Leaf::random(&mut rng, [1, 6, 5, 6, 7]).channels_last()],
        |t| {
            avg_pool3d(
                t[0].clone(),
                AvgPoolNdOptions::new([2, 3, 2]).with_padding([1, 1, 0]),
            )
        },
    );
}

/// Max-pool indices of a channels-last input (returned channels-last, 4 channels a vector)
/// equal the CPU's, ties included.
#[test]
fn channels_last_max_indices_match_cpu() {
    let values: Vec<f32> = rng("cl-indices")
        .values(2 * 9 * 10 * 4)
        .iter()
        .map(|&v| (v * 4.0).round() as f32)
        .collect();
    let on = |device: &Device| -> (Vec<f32>, Vec<i64>) {
        let stored = Tensor::<4>::from_data(TensorData::new(values.clone(), [2, 9, 10, 4]), device);
        let x = stored.permute([0, 3, 1, 2]);
        let options = MaxPoolOptions::new([3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1]);
        let (out, indices) = max_pool2d_with_indices(x, options);
        values_and_indices(out, indices)
    };
    let (cpu_values, cpu_indices) = on(&Device::flex());
    common::each_packing_pinned(|kernels| {
        let (gpu_values, gpu_indices) = on(&wgpu());
        assert_eq!(gpu_indices, cpu_indices, "{kernels}");
        assert_close(
            &format!("channels-last max values, {kernels}"),
            &gpu_values,
            &cpu_values,
        );
    });
}

/// Windows holding a whole contiguous plane run the flat whole-plane kernel, and so do those
/// of a channels-last input (a plane's elements `C` apart); a permuted input (planes neither)
/// the span walk.
#[test]
fn whole_plane_pools_match_cpu() {
    let whole = |name: &str, dims: [usize; 4], layout: Layout, op: fn(Tensor<4>) -> Tensor<4>| {
        let mut rng = rng(name);
        let leaf = Leaf::random(&mut rng, dims).laid_out(layout);
        cross_pool(name, &[leaf], |t| op(t[0].clone()));
    };
    whole("whole_avg", [2, 3, 9, 7], Layout::Contiguous, |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    whole("whole_max", [2, 3, 9, 7], Layout::Contiguous, |x| {
        adaptive_max_pool2d(x, [1, 1])
    });
    whole("whole_max_permuted", [2, 3, 9, 7], Layout::Permuted, |x| {
        adaptive_max_pool2d(x, [1, 1])
    });
    whole("whole_avg_divisor", [1, 2, 5, 6], Layout::Contiguous, |x| {
        avg_pool2d(x, AvgPoolNdOptions::new([5, 6]).with_divisor_override(7))
    });
    whole("whole_lp2", [1, 2, 6, 5], Layout::Contiguous, |x| {
        lp_pool2d(x, LpPoolOptions::new(2.0, [6, 5]))
    });
    whole("whole_lp_inf", [1, 2, 6, 5], Layout::Contiguous, |x| {
        lp_pool2d(x, LpPoolOptions::new(f64::INFINITY, [6, 5]))
    });
    // Few long planes: many lanes per plane (up to a cube) combine partial results; more
    // planes than one cube holds, and a last cube partly past the last plane.
    whole("whole_avg_long", [1, 3, 64, 64], Layout::Contiguous, |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    whole("whole_max_long", [1, 3, 33, 31], Layout::Contiguous, |x| {
        adaptive_max_pool2d(x, [1, 1])
    });
    whole("whole_lp3_long", [1, 2, 40, 40], Layout::Contiguous, |x| {
        lp_pool2d(x, LpPoolOptions::new(3.0, [40, 40]))
    });
    whole("whole_avg_many", [5, 17, 9, 7], Layout::Contiguous, |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    // Channels-last: one unit per plane (neighbouring channels on neighbouring units), and
    // long planes where lanes split a plane.
    whole("whole_avg_cl", [2, 6, 9, 7], Layout::ChannelsLast, |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    whole("whole_max_cl", [2, 5, 9, 7], Layout::ChannelsLast, |x| {
        adaptive_max_pool2d(x, [1, 1])
    });
    whole("whole_lp2_cl", [1, 4, 6, 5], Layout::ChannelsLast, |x| {
        lp_pool2d(x, LpPoolOptions::new(2.0, [6, 5]))
    });
    whole(
        "whole_avg_long_cl",
        [1, 3, 64, 64],
        Layout::ChannelsLast,
        |x| adaptive_avg_pool2d(x, [1, 1]),
    );
    whole(
        "whole_max_long_cl",
        [1, 4, 33, 31],
        Layout::ChannelsLast,
        |x| max_pool2d(x, MaxPoolOptions::new([33, 31])),
    );
}

/// Global max pooling's value and index where lanes split a plane: ties across lanes (the
/// earliest element wins, whichever lane holds it), NaNs (the last one wins), all -inf (the
/// first element), one finite value among -inf, against the CPU's in-order scan; on
/// contiguous planes and on the same planes stored channels-last.
#[test]
fn whole_plane_max_indices_match_cpu() {
    let (planes, len) = (8, 37 * 29);
    let mut values: Vec<f32> = rng("whole-max")
        .values(planes * len)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let plane = |p: usize| p * len..(p + 1) * len;
    values[plane(0)].fill(0.25);
    values[plane(1)][len - 1] = 9.0;
    values[plane(1)][3] = 9.0;
    values[plane(1)][9] = 9.0;
    values[plane(2)][17] = f32::NAN;
    values[plane(2)][500] = f32::NAN;
    values[plane(2)][len - 2] = f32::NAN;
    values[plane(3)].fill(f32::NEG_INFINITY);
    values[plane(4)].fill(f32::NEG_INFINITY);
    values[plane(4)][700] = -3.0;
    values[plane(5)][0] = f32::NAN;
    values[plane(6)][len - 1] = 1e30;
    // The same planes stored channels-last (NHWC), as a permuted view.
    let dims = [2, 4, 37, 29];
    let nhwc: Vec<f32> = (0..values.len())
        .map(|i| {
            let (c, hw) = (i % dims[1], i / dims[1] % len);
            values[(i / (dims[1] * len) * dims[1] + c) * len + hw]
        })
        .collect();
    let on = |device: &Device, channels_last: bool| -> (Vec<f32>, Vec<i64>) {
        let x = match channels_last {
            false => Tensor::<4>::from_data(TensorData::new(values.clone(), dims), device),
            true => Tensor::<4>::from_data(TensorData::new(nhwc.clone(), [2, 37, 29, 4]), device)
                .permute([0, 3, 1, 2]),
        };
        let (out, indices) = adaptive_max_pool2d_with_indices(x, [1, 1]);
        values_and_indices(out, indices)
    };
    let (cpu_values, cpu_indices) = on(&Device::flex(), false);
    assert_eq!(
        &cpu_indices[..7],
        &[0, 3, (len - 2) as i64, 0, 700, 0, (len - 1) as i64]
    );
    common::each_packing_pinned(|kernels| {
        for channels_last in [false, true] {
            let (gpu_values, gpu_indices) = on(&wgpu(), channels_last);
            let what = format!("channels-last: {channels_last}, {kernels}");
            assert_eq!(gpu_indices, cpu_indices, "{what}");
            assert_close(
                &format!("global max values, {what}"),
                &gpu_values,
                &cpu_values,
            );
        }
    });
}

/// Through the tensor API (and `Fusion`'s queue) too, a channels-last input gives a
/// channels-last result at the caller's rank, with our GEMM and its repair and no copy: the
/// rank lift and its undoing are views inside the backend, where reshapes queued around the
/// primitive would copy the result back to contiguous memory.
#[cfg(feature = "wgpu")]
#[test]
fn the_tensor_api_keeps_channels_last_without_copies() {
    use burn::backend::{BackendTensor, DispatchTensorKind};
    use burn_convpool::cube_kernels::{CubeKernels, OurKernels};
    use burn_convpool::cube_launches::{Launch, record};
    use burn_cubecl::{CubeBackend, tensor::CubeTensor};

    // The memory behind a result on the wgpu device, once its queued work ran.
    let resolved = |tensor: Tensor<4>| -> CubeTensor {
        match tensor.into_dispatch().kind {
            DispatchTensorKind::Cube(BackendTensor::Float(fusion)) => {
                fusion
                    .client
                    .clone()
                    .resolve_tensor_float::<CubeBackend>(fusion)
            }
            other => panic!("not a CubeCL float tensor: {other:?}"),
        }
    };
    // `(N, C, H, W)` strides of memory laid out `(N, H, W, C)`.
    let channels_last_strides = |what: &str, tensor: &CubeTensor| {
        let dims = tensor.meta.shape().to_vec();
        let [_, c, _, w] = dims[..] else {
            panic!("{what}: rank {} result", dims.len())
        };
        let expected = [dims[2] * w * c, 1, w * c, c];
        let strides = tensor.meta.strides();
        let strides: Vec<usize> = (0..dims.len()).map(|axis| strides[axis]).collect();
        assert_eq!(strides, expected, "{what}: {dims:?}");
    };
    let _pinned = common::pin(CubeKernels::Ours(OurKernels::default()));
    let mut rng = rng("api_channels_last");
    let mut random = |dims: [usize; 4]| {
        let values: Vec<f32> = rng
            .values(dims.iter().product())
            .iter()
            .map(|&v| v as f32)
            .collect();
        Tensor::<4>::from_data(TensorData::new(values, dims), &wgpu())
    };
    let x = random([2, 6, 7, 16]).permute([0, 3, 1, 2]);
    let weight = random([16, 16, 3, 3]);
    let options = ConvNdOptions::default().with_padding(Padding::Same);
    let (out, launches) = record(|| resolved(conv2d(x.clone(), weight, None, options)));
    assert_eq!(launches, [Launch::Kernel("conv_gemm_tiled")]);
    channels_last_strides("conv2d", &out);
    let pool = MaxPoolOptions::new([3, 3]).with_stride([2, 2]);
    let (out, launches) = record(|| resolved(max_pool2d(x, pool)));
    assert!(
        launches
            .iter()
            .all(|launch| matches!(launch, Launch::Kernel(_))),
        "max_pool2d: {launches:?}"
    );
    channels_last_strides("max_pool2d", &out);
}
