//! The CubeCL kernels against the CPU code, on the wgpu device (a CPU Vulkan driver in CI) or,
//! built with `vulkan` alone, on a real GPU:
//! random inputs with odd sizes, permuted (non-contiguous) inputs and every option; forward
//! values, indices and every gradient must agree, and two backward runs must be bitwise equal,
//! with each of our kernels' settings pinned in turn (`common::OUR_KERNELS`).
#![cfg(any(feature = "wgpu", feature = "vulkan"))]

use crate::common::{self, Lcg};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_convpool::cube_kernels::{Buffering, ConvSchedule, CubeKernels, OurKernels};
use burn_convpool::*;

fn wgpu() -> Device {
    common::gpu()
}

/// One leaf input: its values and dims; `permuted` builds it with its last two axes swapped
/// and swaps them back, so the op sees a non-contiguous view.
struct Leaf<const D: usize> {
    values: Vec<f32>,
    dims: [usize; D],
    layout: Layout,
}

/// How a leaf's values lie in memory under the view the op gets.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Contiguous,
    /// The last two axes swapped: a view no kernel can read as contiguous rows.
    Permuted,
    /// Channels last (`(N, *spatial, C)` in memory), as Burn's convolutions leave outputs.
    ChannelsLast,
}

impl<const D: usize> Leaf<D> {
    fn random(rng: &mut Lcg, dims: [usize; D]) -> Self {
        let values = rng
            .values(dims.iter().product())
            .iter()
            .map(|&v| v as f32)
            .collect();
        Self {
            values,
            dims,
            layout: Layout::Contiguous,
        }
    }

    fn permuted(mut self) -> Self {
        self.layout = Layout::Permuted;
        self
    }

    fn channels_last(mut self) -> Self {
        self.layout = Layout::ChannelsLast;
        self
    }

    /// The tracked leaf and the (maybe permuted) view of it the op gets.
    fn on(&self, device: &Device) -> (Tensor<D>, Tensor<D>) {
        let mut dims = self.dims;
        // Per view axis, the stored axis it reads.
        let mut axes: [usize; D] = core::array::from_fn(|a| a);
        match self.layout {
            Layout::Contiguous => {}
            Layout::Permuted => {
                dims.swap(D - 1, D - 2);
                axes.swap(D - 1, D - 2);
            }
            Layout::ChannelsLast => {
                dims[1..].rotate_left(1);
                axes = core::array::from_fn(|a| match a {
                    0 => 0,
                    1 => D - 1,
                    a => a - 1,
                });
            }
        }
        let leaf = Tensor::<D>::from_data(TensorData::new(self.values.clone(), dims), device)
            .require_grad();
        let view = match self.layout {
            Layout::Contiguous => leaf.clone(),
            _ => leaf.clone().permute(axes.map(|a| a as isize)),
        };
        (leaf, view)
    }
}

/// Forward values and the gradient of every leaf, for `sum(op(..) * r)`.
fn run<const D: usize, const O: usize>(
    device: &Device,
    leaves: &[Leaf<D>],
    op: &dyn Fn(Vec<Tensor<D>>) -> Tensor<O>,
    seed: u64,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let (tracked, views): (Vec<_>, Vec<_>) = leaves.iter().map(|leaf| leaf.on(device)).unzip();
    let out = op(views);
    let dims = out.dims();
    let r = Lcg::new(seed)
        .values(dims.iter().product())
        .iter()
        .map(|&v| v as f32)
        .collect::<Vec<_>>();
    let r = Tensor::<O>::from_data(TensorData::new(r, dims), device);
    let values = out.clone().into_data().try_to_vec::<f32>().unwrap();
    let grads = (out * r).sum().backward();
    let leaf_grads = tracked
        .iter()
        .map(|leaf| {
            leaf.grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        })
        .collect();
    (values, leaf_grads)
}

fn assert_close(what: &str, actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths differ");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= 1e-4 + 1e-4 * e.abs();
        assert!(ok, "{what}[{i}]: wgpu {a} vs flex {e}");
    }
}

/// Compare wgpu (with autodiff) against Flex, and wgpu's backward against itself, with each
/// of our kernels' settings pinned in turn.
fn cross<const D: usize, const O: usize>(
    name: &str,
    leaves: &[Leaf<D>],
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    let seed = name.len() as u64 * 7919;
    let (flex_out, flex_grads) = run(&Device::flex().autodiff(), leaves, &op, seed);
    let gpu = wgpu().autodiff();
    for (kernels, ours) in common::OUR_KERNELS {
        let _pinned = common::pin(CubeKernels::Ours(ours));
        let (gpu_out, gpu_grads) = run(&gpu, leaves, &op, seed);
        assert_close(&format!("{name} forward, {kernels}"), &gpu_out, &flex_out);
        for (i, (g, f)) in gpu_grads.iter().zip(&flex_grads).enumerate() {
            assert_close(&format!("{name} grad of input {i}, {kernels}"), g, f);
        }
        let (_, again) = run(&gpu, leaves, &op, seed);
        for (i, (a, b)) in again.iter().zip(&gpu_grads).enumerate() {
            let same = a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{name}: grad of input {i} differs between two wgpu runs, {kernels}"
            );
        }
    }
}

fn rng(name: &str) -> Lcg {
    Lcg::new(name.bytes().map(u64::from).sum::<u64>() + 17)
}

/// The bias as a rank-D leaf `(C, 1, ..)`, reshaped inside the op so it gets a gradient.
fn bias_of<const D: usize>(bias: &Tensor<D>) -> Tensor<1> {
    let channels = bias.dims()[0];
    bias.clone().reshape([channels])
}

fn conv2d_case(
    name: &str,
    x: [usize; 4],
    weight: [usize; 4],
    options: ConvNdOptions<2>,
    permuted: bool,
) {
    let mut rng = rng(name);
    let mut x = Leaf::random(&mut rng, x);
    if permuted {
        x = x.permuted();
    }
    let weight_leaf = Leaf::random(&mut rng, weight);
    let bias = Leaf::random(&mut rng, [weight[0], 1, 1, 1]);
    cross(name, &[x, weight_leaf, bias], |t| {
        conv2d(
            t[0].clone(),
            t[1].clone(),
            Some(bias_of(&t[2])),
            options.clone(),
        )
    });
}

#[test]
fn conv2d_matches_cpu() {
    let o = ConvNdOptions::<2>::default;
    // Direct schedule (few channels), odd sizes, padding, stride, dilation, asymmetric padding.
    conv2d_case(
        "small",
        [2, 3, 7, 9],
        [4, 3, 3, 3],
        o().with_padding([1, 1]),
        false,
    );
    conv2d_case(
        "strided",
        [1, 4, 9, 8],
        [5, 4, 3, 2],
        o().with_stride([2, 3]).with_dilation([2, 1]),
        true,
    );
    conv2d_case(
        "asym",
        [1, 2, 6, 7],
        [3, 2, 3, 3],
        o().with_padding([(0, 2), (1, 0)]),
        false,
    );
    // Tiled schedule: >= 16 channels each side; grouped; split-k weight gradient.
    conv2d_case(
        "tiled",
        [2, 24, 9, 11],
        [40, 24, 3, 3],
        o().with_padding([1, 1]),
        true,
    );
    conv2d_case(
        "grouped",
        [2, 32, 8, 8],
        [64, 8, 3, 3],
        o().with_padding([1, 1]).with_groups(4),
        false,
    );
    // 32 channels per group on every pass's channel side (ResNeXt's later stages): the tiles
    // narrowed to 32 along it, two groups, with bias.
    conv2d_case(
        "grouped_narrow",
        [2, 64, 6, 7],
        [64, 32, 3, 3],
        o().with_padding([1, 1]).with_groups(2),
        true,
    );
    conv2d_case(
        "split_k",
        [2, 16, 32, 33],
        [32, 16, 3, 3],
        o().with_padding(Padding::Same),
        false,
    );
    // A late layer: one tile of positions, long channel x tap reductions, so the forward
    // (k = 576, with bias) and input gradient (k = 432) split k over several cubes.
    conv2d_case(
        "late_layer",
        [2, 64, 3, 3],
        [48, 64, 3, 3],
        o().with_padding([1, 1]),
        true,
    );
    // Strided input gradients run one tiled launch per stride phase over the taps that reach
    // it: four phases of 1-2 taps a side; a 1x1 stride 2, whose three other phases no tap
    // reaches (zeros); phases of uneven reductions (k = 64 x 1 to 64 x 4) split over k; the
    // same 1x1 with k = 256 split, so the phases without taps write zeros to every split;
    // stride 3 with dilation 2; and 81 phases, more than run as launches of their own (one
    // launch over every position, dividing by the stride).
    conv2d_case(
        "tiled_strided",
        [2, 16, 11, 10],
        [24, 16, 3, 3],
        o().with_stride([2, 2]).with_padding([1, 1]),
        true,
    );
    conv2d_case(
        "tiled_1x1_s2",
        [2, 32, 9, 8],
        [16, 32, 1, 1],
        o().with_stride([2, 2]),
        false,
    );
    conv2d_case(
        "tiled_phases_split_k",
        [2, 48, 5, 5],
        [64, 48, 3, 3],
        o().with_stride([2, 2]).with_padding([1, 1]),
        false,
    );
    conv2d_case(
        "tiled_1x1_s2_split_k",
        [1, 16, 4, 4],
        [256, 16, 1, 1],
        o().with_stride([2, 2]),
        false,
    );
    conv2d_case(
        "tiled_dilated_s3",
        [1, 16, 13, 12],
        [20, 16, 3, 3],
        o().with_stride([3, 3])
            .with_dilation([2, 2])
            .with_padding([2, 1]),
        false,
    );
    conv2d_case(
        "tiled_81_phases",
        [1, 16, 12, 12],
        [16, 16, 3, 3],
        o().with_stride([9, 9]),
        false,
    );
    // Depthwise (direct schedules in every pass) with a channel multiplier.
    conv2d_case(
        "depthwise",
        [2, 6, 10, 9],
        [12, 1, 3, 3],
        o().with_padding([1, 1]).with_groups(6).with_stride([2, 2]),
        true,
    );
    // A 9-wide kernel row, which the direct weight-gradient schedule keeps in registers, and
    // a 13-wide one, wider than it keeps: the split schedule.
    conv2d_case(
        "wide_kernel",
        [2, 2, 5, 20],
        [3, 2, 1, 9],
        o().with_padding([0, 4]),
        false,
    );
    conv2d_case(
        "widest_kernel",
        [2, 2, 5, 30],
        [3, 2, 1, 13],
        o().with_padding([0, 6]),
        false,
    );
    // The direct weight gradient's blocks, partial on every side: 21 output channels (a block
    // of 16 and one of 5), 13 input channels (blocks of 5 at 3 taps), 2 positions per step
    // over rows of 7 at stride 2 (neighbours sharing a value), and a dilated row (one
    // position per step).
    conv2d_case(
        "weight_blocks",
        [2, 13, 6, 14],
        [21, 13, 3, 3],
        o().with_stride([1, 2]).with_padding([1, 1]),
        true,
    );
    conv2d_case(
        "weight_blocks_dilated",
        [1, 13, 5, 11],
        [21, 13, 2, 3],
        o().with_dilation([1, 2]).with_padding([0, 2]),
        false,
    );
    // Long reductions: several k-splits (weight and bias gradients).
    conv2d_case(
        "depthwise_split",
        [2, 4, 32, 33],
        [4, 1, 3, 3],
        o().with_padding([1, 1]).with_groups(4),
        false,
    );
}

#[test]
fn conv1d_3d_and_transpose_match_cpu() {
    let mut rng = rng("conv-others");
    let x = Leaf::random(&mut rng, [2, 5, 13]);
    let w = Leaf::random(&mut rng, [6, 5, 4]);
    cross("conv1d", &[x, w], |t| {
        conv1d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default().with_stride([2]).with_padding([3]),
        )
    });
    let x = Leaf::random(&mut rng, [1, 3, 5, 6, 7]);
    let w = Leaf::random(&mut rng, [4, 3, 2, 3, 3]);
    cross("conv3d", &[x.permuted(), w], |t| {
        conv3d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default()
                .with_padding([1, 1, 1])
                .with_dilation([1, 2, 1]),
        )
    });
    // Eight stride phases of a tiled 3D input gradient.
    let x = Leaf::random(&mut rng, [1, 16, 5, 6, 7]);
    let w = Leaf::random(&mut rng, [16, 16, 3, 3, 3]);
    cross("conv3d_tiled_strided", &[x, w], |t| {
        conv3d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvNdOptions::default()
                .with_stride([2, 2, 2])
                .with_padding([1, 0, 1]),
        )
    });
    let x = Leaf::random(&mut rng, [2, 4, 5, 6]);
    let w = Leaf::random(&mut rng, [4, 3, 3, 3]);
    let bias = Leaf::random(&mut rng, [6, 1, 1, 1]);
    cross("conv_transpose2d", &[x, w, bias], |t| {
        let options = ConvTransposeNdOptions::<2>::default()
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_padding_out([1, 0])
            .with_groups(2);
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
    // conv_transpose's forward is the input-gradient GEMM: split k (48 x 9) with the bias.
    let x = Leaf::random(&mut rng, [1, 48, 2, 3]);
    let w = Leaf::random(&mut rng, [48, 24, 3, 3]);
    let bias = Leaf::random(&mut rng, [24, 1, 1, 1]);
    cross("conv_transpose2d_split_k", &[x, w, bias], |t| {
        let options = ConvTransposeNdOptions::<2>::default().with_padding([1, 1]);
        conv_transpose2d(t[0].clone(), t[1].clone(), Some(bias_of(&t[2])), options)
    });
    let x = Leaf::random(&mut rng, [1, 20, 6, 5]);
    let w = Leaf::random(&mut rng, [20, 18, 3, 3]);
    cross("conv_transpose2d_tiled", &[x.permuted(), w], |t| {
        conv_transpose2d(
            t[0].clone(),
            t[1].clone(),
            None,
            ConvTransposeNdOptions::<2>::default().with_stride([2, 2]),
        )
    });
}

fn pool_case<const O: usize>(name: &str, dims: [usize; 4], op: impl Fn(Tensor<4>) -> Tensor<O>) {
    let mut rng = rng(name);
    cross(name, &[Leaf::random(&mut rng, dims).permuted()], |t| {
        op(t[0].clone())
    });
}

#[test]
fn pools_match_cpu() {
    pool_case("max", [2, 3, 9, 8], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([3, 2])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_dilation([1, 2])
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_pad", [2, 3, 9, 8], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 3])
                .with_stride([2, 2])
                .with_padding([1, 1])
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_nopad", [1, 2, 7, 10], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([3, 2])
                .with_stride([2, 3])
                .with_padding([1, 1])
                .with_count_include_pad(false)
                .with_ceil_mode(true),
        )
    });
    pool_case("avg_divisor", [1, 2, 7, 7], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([2, 3])
                .with_padding([1, 1])
                .with_divisor_override(5),
        )
    });
    // Windows with more covering outputs than the backward unrolls walk them in loops; a
    // max window over 7 taps runs the general forward.
    pool_case("avg_7x7_s1", [1, 2, 12, 11], |x| {
        avg_pool2d(
            x,
            AvgPoolNdOptions::new([7, 7])
                .with_stride([1, 1])
                .with_padding([3, 3])
                .with_count_include_pad(false),
        )
    });
    pool_case("max_9x9", [1, 2, 12, 11], |x| {
        max_pool2d(
            x,
            MaxPoolOptions::new([9, 9])
                .with_stride([1, 2])
                .with_padding([4, 4]),
        )
    });
    pool_case("adaptive_avg", [2, 3, 11, 7], |x| {
        adaptive_avg_pool2d(x, [4, 3])
    });
    // Global averages take the whole-plane backward; 91 elements leave a partial block.
    pool_case("global_avg", [2, 3, 13, 7], |x| {
        adaptive_avg_pool2d(x, [1, 1])
    });
    pool_case("avg_whole_divisor", [1, 2, 5, 6], |x| {
        avg_pool2d(x, AvgPoolNdOptions::new([5, 6]).with_divisor_override(7))
    });
    pool_case("adaptive_max", [2, 3, 11, 7], |x| {
        adaptive_max_pool2d(x, [5, 4])
    });
    pool_case("lp2", [1, 3, 9, 8], |x| {
        lp_pool2d(
            x,
            LpPoolOptions::new(2.0, [3, 2])
                .with_stride([2, 2])
                .with_ceil_mode(true),
        )
    });
    pool_case("lp3", [1, 2, 8, 8], |x| {
        lp_pool2d(x, LpPoolOptions::new(3.0, [2, 2]))
    });
    pool_case("lp_inf", [1, 2, 8, 7], |x| {
        lp_pool2d(
            x,
            LpPoolOptions::new(f64::INFINITY, [3, 3]).with_stride([2, 2]),
        )
    });
    pool_case("lp_frac", [1, 2, 8, 8], |x| {
        lp_pool2d(x.abs() + 0.1, LpPoolOptions::new(1.5, [2, 3]))
    });
    // Below p = 1 the backward sums the windows again (the output may not give the total's
    // sign); overlapping and partial windows.
    pool_case("lp_root", [1, 2, 9, 8], |x| {
        lp_pool2d(
            x.abs() + 0.1,
            LpPoolOptions::new(0.5, [3, 2])
                .with_stride([2, 1])
                .with_ceil_mode(true),
        )
    });
}

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
        cross(name, &[Leaf::random(&mut rng, dims).channels_last()], |t| {
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
        cross(name, &[Leaf::random(&mut rng, dims).channels_last()], |t| {
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
    cross(
        "cl_max1d",
        &[Leaf::random(&mut rng, [2, 4, 13]).channels_last()],
        |t| max_pool1d(t[0].clone(), MaxPoolOptions::new([3]).with_stride([2])),
    );
    cross(
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
    for (kernels, ours) in common::OUR_KERNELS {
        let _pinned = common::pin(CubeKernels::Ours(ours));
        let (gpu_values, gpu_indices) = on(&wgpu());
        assert_eq!(gpu_indices, cpu_indices, "{kernels}");
        assert_close(
            &format!("channels-last max values, {kernels}"),
            &gpu_values,
            &cpu_values,
        );
    }
}

/// Windows holding a whole contiguous plane run the flat whole-plane kernel, and so do those
/// of a channels-last input (a plane's elements `C` apart); a permuted input (planes neither)
/// the span walk.
#[test]
fn whole_plane_pools_match_cpu() {
    let whole = |name: &str, dims: [usize; 4], layout: Layout, op: fn(Tensor<4>) -> Tensor<4>| {
        let mut rng = rng(name);
        let leaf = Leaf::random(&mut rng, dims);
        let leaf = match layout {
            Layout::Contiguous => leaf,
            Layout::Permuted => leaf.permuted(),
            Layout::ChannelsLast => leaf.channels_last(),
        };
        cross(name, &[leaf], |t| op(t[0].clone()));
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

/// A max pool's values and indices, read back.
fn values_and_indices(out: Tensor<4>, indices: Tensor<4, Int>) -> (Vec<f32>, Vec<i64>) {
    let values = out.into_data().try_to_vec::<f32>().unwrap();
    let indices = indices.into_data().convert::<i64>();
    (values, indices.try_to_vec::<i64>().unwrap())
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
    for (kernels, ours) in common::OUR_KERNELS {
        let _pinned = common::pin(CubeKernels::Ours(ours));
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
    }
}

#[test]
fn pools_3d_1d_fractional_and_unpool_match_cpu() {
    let mut rng = rng("pool-others");
    let x = Leaf::random(&mut rng, [1, 2, 5, 6, 7]);
    cross("max3d", &[x.permuted()], |t| {
        max_pool3d(
            t[0].clone(),
            MaxPoolOptions::new([2, 3, 2])
                .with_stride([1, 2, 2])
                .with_padding([1, 1, 0]),
        )
    });
    let x = Leaf::random(&mut rng, [1, 2, 5, 6, 7]);
    cross("avg3d", &[x], |t| {
        avg_pool3d(
            t[0].clone(),
            AvgPoolNdOptions::new([2, 2, 3])
                .with_padding([1, 0, 1])
                .with_ceil_mode(true),
        )
    });
    let x = Leaf::random(&mut rng, [2, 3, 3, 4, 5]);
    cross("global_avg3d", &[x.permuted()], |t| {
        adaptive_avg_pool3d(t[0].clone(), [1, 1, 1])
    });
    let x = Leaf::random(&mut rng, [2, 3, 17]);
    cross("max1d", &[x], |t| {
        max_pool1d(t[0].clone(), MaxPoolOptions::new([4]).with_stride([3]))
    });
    let x = Leaf::random(&mut rng, [2, 3, 11, 13]);
    let samples: Vec<f32> = rng
        .values(2 * 3 * 2)
        .iter()
        .map(|v| v.abs() as f32)
        .collect();
    cross("fractional", &[x], |t| {
        let samples =
            Tensor::<3>::from_data(TensorData::new(samples.clone(), [2, 3, 2]), &t[0].device());
        let options = FractionalMaxPoolOptions::new([3, 2], FractionalOutput::Size([5, 6]));
        fractional_max_pool2d(t[0].clone(), options, Some(samples))
    });
    let x = Leaf::random(&mut rng, [2, 3, 8, 10]);
    cross("unpool", &[x], |t| {
        let options = MaxPoolOptions::new([2, 2]).with_stride([2, 2]);
        let (values, indices) = max_pool2d_with_indices(t[0].clone(), options);
        max_unpool2d(
            values,
            indices,
            MaxUnpoolOptions::new([2, 2]).with_output_size([8, 10]),
        )
    });
}

#[test]
fn indices_match_cpu() {
    let mut rng = rng("indices");
    let mut values: Vec<f32> = rng
        .values(2 * 3 * 9 * 10)
        .iter()
        .map(|&v| v as f32)
        .collect();
    // Ties, NaN and -inf: first max wins, NaN wins, an all -inf window keeps its first tap.
    // Rows 3 to 5 of the first plane are -inf: output row 2's windows hold nothing else.
    values[..12].fill(0.5);
    values[20] = f32::NAN;
    values[30..60].fill(f32::NEG_INFINITY);
    let indices_on = |device: &Device| -> (Vec<f32>, Vec<i64>) {
        let x = Tensor::<4>::from_data(TensorData::new(values.clone(), [2, 3, 9, 10]), device);
        let options = MaxPoolOptions::new([3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1]);
        let (out, indices) = max_pool2d_with_indices(x, options);
        values_and_indices(out, indices)
    };
    let (cpu_values, cpu_indices) = indices_on(&Device::flex());
    for (kernels, ours) in common::OUR_KERNELS {
        let _pinned = common::pin(CubeKernels::Ours(ours));
        let (gpu_values, gpu_indices) = indices_on(&wgpu());
        assert_eq!(gpu_indices, cpu_indices, "{kernels}");
        assert_close(&format!("max values, {kernels}"), &gpu_values, &cpu_values);
    }
}

/// The panic message of `op`, which must fail (a dtype the device does not report).
fn failure(op: impl FnOnce() -> TensorData + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(op).expect_err("an unsupported dtype must fail");
    *err.downcast::<String>().expect("a formatted panic message")
}

/// A tiled launch needing more than 65,535 cubes along `m` (4.2M output positions in 64-row
/// tiles) runs as several launches over consecutive tile ranges and matches Flex everywhere,
/// the last positions included. On a real GPU only (`vulkan` builds): its 268 MB output is
/// more than wgpu binds on lavapipe (128 MiB), so CI checks the chunked launches with a lower
/// per-launch limit instead ([`long_m_runs_as_several_launches`]).
#[cfg(not(feature = "wgpu"))]
#[test]
fn conv_over_65535_tiles_matches_cpu() {
    let mut rng = rng("huge");
    let dims = [1, 2, 2050, 2050];
    let x = rng.values(dims.iter().product());
    let weight = rng.values(16 * 2 * 9);
    let run = |device: &Device| {
        let x = Tensor::<4>::from_data(TensorData::new(x.clone(), dims).convert::<f32>(), device);
        let weight = Tensor::<4>::from_data(
            TensorData::new(weight.clone(), [16, 2, 3, 3]).convert::<f32>(),
            device,
        );
        let out = conv2d(
            x,
            weight,
            None,
            ConvNdOptions::default().with_padding([1, 1]),
        );
        out.into_data().try_to_vec::<f32>().unwrap()
    };
    let expected = run(&Device::flex());
    // 16 output channels; the tiled schedule's tiles hold 64 positions.
    assert!(expected.len() / 16 > 65_535 * 64);
    let _pinned = common::pin(CubeKernels::Ours(OurKernels::default()));
    assert_close("65,535+ tiles forward", &run(&wgpu()), &expected);
}

/// A forward and input gradient whose `m` takes several tiled launches (3 tiles each, where a
/// grid would hold 65,535) match Flex, with a bias, every position of the last, partial launch
/// included, single- and double-buffered.
#[test]
fn long_m_runs_as_several_launches() {
    let values = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * scale)
            .collect()
    };
    // m = 2 x 17 x 19 = 646 positions: 11 tiles of 64, so 4 launches; 16 and 24 channels.
    let (x_dims, w_dims) = ([2, 16, 17, 19], [24, 16, 3, 3]);
    let x = values(x_dims.iter().product(), 0.01);
    let weight = values(w_dims.iter().product(), 0.02);
    let bias = values(24, 0.1);
    let run = |device: &Device| {
        let x = Tensor::<4>::from_data(TensorData::new(x.clone(), x_dims), device).require_grad();
        let weight = Tensor::<4>::from_data(TensorData::new(weight.clone(), w_dims), device);
        let bias = Tensor::<1>::from_data(TensorData::new(bias.clone(), [24]), device);
        let options = ConvNdOptions::default().with_padding([1, 1]);
        let out = conv2d(x.clone(), weight, Some(bias), options);
        let grads = (out.clone() * out.clone()).sum().backward();
        let x_grad = x.grad(&grads).unwrap();
        [out.into_data(), x_grad.into_data()].map(|d| d.try_to_vec::<f32>().unwrap())
    };
    let expected = run(&Device::flex().autodiff());
    for buffering in [Buffering::Double, Buffering::Single] {
        let ours = OurKernels::default()
            .with_conv(ConvSchedule::Tiled(buffering))
            .with_max_tiles_per_launch(3);
        let _pinned = common::pin(CubeKernels::Ours(ours));
        let actual = run(&wgpu().autodiff());
        for (what, (actual, expected)) in ["forward", "x grad"]
            .iter()
            .zip(actual.iter().zip(&expected))
        {
            assert_close(&format!("{what}, {buffering:?}"), actual, expected);
        }
    }
}

/// f64 convs sum in f64: over a long reduction (k = 64 x 9, and 48 x 9 for the input
/// gradient) the forward and both gradients agree with Flex's f64 to 1e-11, where sums in f32
/// are off by ~1e-6. A device that does not report f64 gives the typed error instead.
#[test]
fn f64_conv_sums_in_f64() {
    let gpu = wgpu();
    let mut rng = rng("f64");
    let (x_dims, w_dims) = ([2, 64, 5, 6], [48, 64, 3, 3]);
    let x = rng.values(x_dims.iter().product());
    let weight = rng.values(w_dims.iter().product());
    let options = ConvNdOptions::default().with_padding([1, 1]);
    if !gpu.supports_dtype(DType::F64) {
        let message = failure(|| {
            let x = common::f64_tensor(&x, x_dims, &gpu);
            let weight = common::f64_tensor(&weight, w_dims, &gpu);
            conv2d(x, weight, None, options).into_data()
        });
        assert!(message.contains("dtype F64 is not supported"), "{message}");
        return;
    }
    let run = |device: &Device| {
        let x = common::f64_tensor(&x, x_dims, device).require_grad();
        let weight = common::f64_tensor(&weight, w_dims, device).require_grad();
        let out = conv2d(x.clone(), weight.clone(), None, options.clone());
        let r = common::f64_tensor(&Lcg::new(5).values(2 * 48 * 30), [2, 48, 5, 6], device);
        let grads = (out.clone() * r).sum().backward();
        [
            common::f64_values(out),
            common::f64_values(x.grad(&grads).unwrap()),
            common::f64_values(weight.grad(&grads).unwrap()),
        ]
    };
    let expected = run(&Device::flex().autodiff());
    for (kernels, ours) in common::OUR_KERNELS {
        let _pinned = common::pin(CubeKernels::Ours(ours));
        let actual = run(&gpu.clone().autodiff());
        for (what, (actual, expected)) in ["forward", "x grad", "weight grad"]
            .iter()
            .zip(actual.iter().zip(&expected))
        {
            assert_eq!(actual.len(), expected.len());
            for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
                assert!(
                    (a - e).abs() <= 1e-11 * (1.0 + e.abs()),
                    "f64 {what}[{i}], {kernels}: gpu {a} vs flex {e}"
                );
            }
        }
    }
}

/// Half-precision average and LP pools sum in f32, as PyTorch's kernels do: over a 16x16
/// window (and a whole 32x32 plane) of values in [0, 1) the result is Flex's f32 result on the same f16 inputs, rounded
/// to f16, within one f16 step (sums in f16 are several steps off). A device that does not
/// report f16 (lavapipe) gives the typed error instead.
#[test]
fn f16_pools_sum_in_f32() {
    let gpu = wgpu();
    let dims = [2, 3, 32, 32];
    let values: Vec<f32> = rng("f16")
        .values(dims.iter().product())
        .iter()
        .map(|v| v.abs() as f32)
        .collect();
    let x_on = |device: &Device| {
        Tensor::<4>::from_data(TensorData::new(values.clone(), dims), device).cast(DType::F16)
    };
    let avg = |x: Tensor<4>| avg_pool2d(x, AvgPoolNdOptions::new([16, 16]).with_stride([8, 8]));
    let lp = |x: Tensor<4>| lp_pool2d(x, LpPoolOptions::new(2.0, [16, 16]).with_stride([8, 8]));
    // A whole 32x32 plane: the whole-plane kernel, whose lanes' partial sums are f32 too.
    let global = |x: Tensor<4>| adaptive_avg_pool2d(x, [1, 1]);
    if !gpu.supports_dtype(DType::F16) {
        let message = failure(|| avg(x_on(&gpu)).into_data());
        assert!(message.contains("dtype F16 is not supported"), "{message}");
        return;
    }
    for (name, pool) in [
        ("avg", &avg as &dyn Fn(Tensor<4>) -> Tensor<4>),
        ("lp", &lp),
        ("global avg", &global),
    ] {
        let expected = pool(x_on(&Device::flex()).cast(DType::F32))
            .cast(DType::F16)
            .cast(DType::F32)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (kernels, ours) in common::OUR_KERNELS {
            let _pinned = common::pin(CubeKernels::Ours(ours));
            let actual = pool(x_on(&gpu))
                .cast(DType::F32)
                .into_data()
                .try_to_vec::<f32>()
                .unwrap();
            for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                // One f16 step at `e`: 2^(exponent - 10).
                let step = 2f32.powi(e.abs().log2().floor() as i32 - 10);
                assert!(
                    (a - e).abs() <= step,
                    "f16 {name}[{i}], {kernels}: gpu {a} vs {e}"
                );
            }
        }
    }
}

/// An empty batch flows through the CubeCL kernels and their backward (empty out, zero weight
/// gradient), as on the CPU.
#[test]
fn empty_batch_runs_on_wgpu() {
    let device = wgpu().autodiff();
    let x = Tensor::<4>::zeros([0, 3, 8, 8], &device).require_grad();
    let weight = Tensor::<4>::ones([4, 3, 3, 3], &device).require_grad();
    let out = conv2d(x.clone(), weight.clone(), None, ConvNdOptions::default());
    let pooled = max_pool2d(out.clone(), MaxPoolOptions::new([2, 2]));
    let averaged = adaptive_avg_pool2d(out, [1, 1]);
    assert_eq!(pooled.dims(), [0, 4, 3, 3]);
    let grads = (pooled.sum() + averaged.sum()).backward();
    assert_eq!(x.grad(&grads).map(|g| g.dims()), Some([0, 3, 8, 8]));
    let weight_grad = weight.grad(&grads).unwrap();
    assert_eq!(weight_grad.dims(), [4, 3, 3, 3]);
    assert!(weight_grad.into_data().iter::<f32>().all(|v| v == 0.0));
}

/// Values above the kernels' 32 bits are a typed error on a CubeCL device, where the launch
/// would panic inside Fusion; the CPU computes them, as PyTorch does.
#[test]
fn values_above_32_bits_are_a_typed_error_on_cubecl() {
    let big = 1usize << 32;
    let call = |device: &Device| {
        let x = Tensor::<3>::from_floats([[[1.0, 2.0, 3.0, 4.0]]], device);
        let weight = Tensor::<3>::ones([1, 1, 1], device);
        // Two outputs: one in the padding, one at x[2].
        let options = ConvNdOptions::default()
            .with_stride([big + 2])
            .with_padding([big]);
        let conv = try_conv1d(x.clone(), weight, None, options);
        // Five windows of 2^33 taps, mostly padding.
        let pooled = try_avg_pool1d(
            x,
            AvgPoolNdOptions::new([2 * big])
                .with_stride([1])
                .with_padding([big]),
        );
        (conv, pooled)
    };
    let (conv, pooled) = call(&Device::flex());
    let conv = conv.expect("the CPU computes it").into_data();
    assert_eq!(conv.try_to_vec::<f32>().unwrap(), [0.0, 3.0]);
    assert_eq!(pooled.expect("the CPU computes it").dims(), [1, 1, 5]);
    let (conv, pooled) = call(&wgpu());
    let conv = conv.unwrap_err();
    assert_eq!(conv.op, "conv1d");
    assert!(
        matches!(conv.kind, SpecErrorKind::DeviceLimit { what: "stride", value, .. } if value == big + 2),
        "{conv}"
    );
    let pooled = pooled.unwrap_err();
    assert!(
        matches!(pooled.kind, SpecErrorKind::DeviceLimit { what: "kernel size", value, .. } if value == 2 * big),
        "{pooled}"
    );
}

/// Pooling indices are written in the device's int dtype; one too narrow for the input plane
/// is a typed error, not indices that wrap (256 x 256 = 65,536 elements overflow I16).
#[cfg(feature = "ndarray")]
#[test]
fn indices_too_wide_for_the_int_dtype_are_a_typed_error() {
    // A device of its own (Flex's settings are fixed by the other tests of this binary); Burn
    // deprecates NdArray but it still runs.
    #[allow(deprecated)]
    let mut device = Device::ndarray();
    device
        .configure(burn::tensor::IntDType::I16)
        .expect("a fresh device");
    let x = Tensor::<4>::ones([1, 1, 256, 256], &device);
    let error = try_max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2])).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::IndexDtype { plane: 65_536, .. }
    ));
    let x = Tensor::<4>::ones([1, 1, 128, 128], &device);
    let (_, indices) = max_pool2d_with_indices(x, MaxPoolOptions::new([2, 2]));
    assert_eq!(indices.dtype(), DType::I16);
}

/// Half-precision pools sum in f32, as PyTorch's kernels do (issue 11, item 5): 4096 values
/// of `1 + 2^-10` pool to the exact f16 values below on both devices. A running f16 sum drops
/// the `2^-10` of every term once past 64; the GPU's lanes split the sum finely enough that the
/// averages survive it, but with an f16 accumulator the LP pool of p = 1 reads inf.
#[test]
fn half_pools_accumulate_in_f32() {
    let gpu = wgpu();
    let x = |device: &Device| {
        let values = vec![1.0f32 + 1.0 / 1024.0; 64 * 64];
        Tensor::<4>::from_data(
            TensorData::new(values, [1, 1, 64, 64]),
            (device, DType::F16),
        )
    };
    let as_f32 = |t: Tensor<4>| {
        assert_eq!(t.dtype(), DType::F16);
        t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
    };
    type Pool = fn(Tensor<4>) -> Result<Tensor<4>, SpecError>;
    let pools: [(&str, Pool, f32); 4] = [
        (
            "avg_pool2d",
            |x| try_avg_pool2d(x, AvgPoolNdOptions::new([64, 64])),
            1.0 + 1.0 / 1024.0,
        ),
        (
            "adaptive_avg_pool2d",
            |x| try_adaptive_avg_pool2d(x, [1, 1]),
            1.0 + 1.0 / 1024.0,
        ),
        // 4096 * (1 + 2^-10) = 4100, exact in f16 (ulp 4).
        (
            "lp_pool2d p=1",
            |x| try_lp_pool2d(x, LpPoolOptions::new(1.0, [64, 64])),
            4100.0,
        ),
        // sqrt(4096 * (1 + 2^-10)^2) = 64.0625 in f16 (ulp 2^-4).
        (
            "lp_pool2d p=2",
            |x| try_lp_pool2d(x, LpPoolOptions::new(2.0, [64, 64])),
            64.0625,
        ),
    ];
    for (what, pool, expected) in pools {
        assert_eq!(
            as_f32(pool(x(&Device::flex())).unwrap()),
            [expected],
            "{what} on flex"
        );
        for (kernels, ours) in common::OUR_KERNELS {
            let _pinned = common::pin(CubeKernels::Ours(ours));
            match pool(x(&gpu)) {
                Ok(out) => assert_eq!(as_f32(out), [expected], "{what} on wgpu, {kernels}"),
                // An adapter without f16 (lavapipe has it, as the Mesa CI installs).
                Err(error) if matches!(error.kind, SpecErrorKind::DeviceDtype { .. }) => {
                    eprintln!("{what}: this adapter has no f16; not checked");
                    return;
                }
                Err(error) => panic!("{what}: {error}"),
            }
        }
    }
}
