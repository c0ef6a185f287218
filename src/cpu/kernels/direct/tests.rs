use burn::tensor::ops::ConvOptions;

use super::*;
use crate::cpu::kernels::conv::reference::{reference, reference_grads, values};
use crate::cpu::kernels::finished::Unwatched;

/// `x` (`[N, C, D, H, W]`) convolved to `out_channels` with `kernel` and the given options.
fn geometry(
    x: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    options: ConvOptions<3>,
) -> ConvGeometry {
    let weight = [
        out_channels,
        x[1] / options.groups,
        kernel[0],
        kernel[1],
        kernel[2],
    ];
    ConvGeometry::conv(&x, &weight, &options)
}

/// `len` of the reference's values from stream `seed`, in f32.
fn f32_values(len: usize, seed: u64) -> Vec<f32> {
    values(len, seed).into_iter().map(|v| v as f32).collect()
}

/// f32 values in f64, for the definition.
fn widened(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// `got`, a weight gradient of `g` from `x` and `out_grad`, against the definition in f64 on
/// the same values: each weight within f32 roundoff of its sum, or the definition's infinity
/// or NaN where its sum has one.
fn assert_weight_gradient(g: &ConvGeometry, x: &[f32], out_grad: &[f32], got: &[f32]) {
    let weight = vec![0.0; g.out_channels * g.patch_len()];
    let (_, expected) = reference_grads(g, &widened(x), &weight, &widened(out_grad));
    assert_eq!(got.len(), expected.len());
    let terms = g.batch * g.out_volume();
    let tolerance = 4.0 * f64::from(f32::EPSILON) * (terms + 1) as f64;
    for (i, (&got, &want)) in got.iter().zip(&expected).enumerate() {
        let got = f64::from(got);
        assert!(
            (got - want).abs() < tolerance
                || got.to_bits() == want.to_bits()
                || (got.is_nan() && want.is_nan()),
            "grad[{i}]: {got} vs {want} ({g:?})"
        );
    }
}

/// The direct forward pass (and, in [`check`], the weight gradient) in f32 with `simd`'s vectors against the definition in f64 on the
/// same (f32) values, with a bias or without: each output within f32 roundoff of its sum.
fn check_with<S: Simd>(simd: S, g: &ConvGeometry, with_bias: bool) {
    assert!(serves(g), "{g:?}");
    let to_f32 = |values: Vec<f64>| values.into_iter().map(|v| v as f32).collect::<Vec<_>>();
    let x = to_f32(values(g.in_shape().iter().product(), 1));
    let weight = to_f32(values(g.out_channels * g.patch_len(), 2));
    let bias = to_f32(values(g.out_channels, 3));
    let widen = |values: &[f32]| values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let expected = reference(g, &widen(&x), &widen(&weight));
    let mut out = vec![0.0; expected.len()];
    run(
        simd,
        g,
        &x,
        &weight,
        with_bias.then_some(&bias[..]),
        &mut out,
        &Unwatched,
    );
    let out_vol = g.out_volume();
    // Every term is under 1 in magnitude: a sum of `patch_len` of them rounds by less than
    // this in f32.
    let tolerance = 4.0 * f64::from(f32::EPSILON) * (g.patch_len() + 1) as f64;
    for (i, (&got, &sum)) in out.iter().zip(&expected).enumerate() {
        let channel = i / out_vol % g.out_channels;
        let want = sum
            + if with_bias {
                f64::from(bias[channel])
            } else {
                0.0
            };
        assert!(
            (f64::from(got) - want).abs() < tolerance,
            "out[{i}]: {got} vs {want} ({g:?}, {} lanes)",
            size_of::<S::f32s>() / 4
        );
    }
}

/// The direct weight gradient in f32 with `simd`'s vectors against the definition in f64 on
/// the same (f32) values, each weight within f32 roundoff of its sum.
fn check_weight_with<S: Simd>(simd: S, g: &ConvGeometry) {
    let x = f32_values(g.in_shape().iter().product(), 4);
    let out_grad = f32_values(g.out_shape().iter().product(), 5);
    let mut got = vec![0.0; g.out_channels * g.patch_len()];
    weight::run(simd, g, &x, &out_grad, &mut got);
    assert_weight_gradient(g, &x, &out_grad, &got);
}

/// [`check_with`] and [`check_weight_with`] on every instruction set this machine has:
/// scalar (blocks of two channels), AVX2 (blocks of 16, tiles of 6 points) and AVX-512
/// (blocks of 32, tiles of 7) where the CPU has them.
fn check(g: &ConvGeometry) {
    check_with(pulp::Scalar::new(), g, true);
    check_weight_with(pulp::Scalar::new(), g);
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        check_with(simd, g, true);
        check_with(simd, g, false);
        check_weight_with(simd, g);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V4::try_new() {
        check_with(simd, g, true);
        check_weight_with(simd, g);
    }
}

#[test]
fn same_padding_partial_blocks_and_tiles() {
    // 20 output channels: a full block of 16 and one of 4; 35 points: 5 tiles of 6 and 5 more.
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    check(&geometry([2, 3, 1, 5, 7], 20, [1, 3, 3], options));
}

/// A batch of 7 on few points: the weight gradient sums gangs of several images' copies (a
/// full gang and a partial one per thread's chunk).
#[test]
fn gangs_of_images() {
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    check(&geometry([7, 3, 1, 4, 5], 18, [1, 3, 3], options));
}

/// `g`'s forward pass in blocks of `V` of `simd`'s vectors in gangs of `gang` images, as
/// bits.
fn gang_bits<S: Simd, const V: usize>(simd: S, g: &ConvGeometry, gang: usize) -> Vec<u32> {
    let (x, weight, bias) = operands(g);
    let mut out = vec![0.0; g.out_shape().iter().product()];
    let forward = Forward {
        geometry: g,
        x: &x,
        weight: &weight,
        bias: Some(&bias),
        out: &mut out,
        finished: &Unwatched,
    };
    run_in_gangs::<S, V>(simd, forward, &Walk::new(g), gang);
    out.iter().map(|v| v.to_bits()).collect()
}

/// Weights larger than a gang's copies take gangs of images; a gang of one image and gangs
/// of two (the last partial, in two groups whose last blocks are partial) give the same sums
/// bit for bit, and the definition's.
#[test]
fn forward_gangs_of_images_sum_as_single_images() {
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2);
    let g = geometry([5, 6, 1, 4, 6], 74, [1, 3, 3], options);
    assert!(gang_images(&g, &Walk::new(&g)) > 1);
    check(&g);
    let scalar = pulp::Scalar::new();
    assert_eq!(
        gang_bits::<_, 1>(scalar, &g, 1),
        gang_bits::<_, 1>(scalar, &g, 2)
    );
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        assert_eq!(
            gang_bits::<_, 2>(simd, &g, 1),
            gang_bits::<_, 2>(simd, &g, 2)
        );
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V4::try_new() {
        assert_eq!(
            gang_bits::<_, 2>(simd, &g, 1),
            gang_bits::<_, 2>(simd, &g, 2)
        );
    }
}

#[test]
fn strides_dilation_and_wide_padding() {
    let options = ConvOptions::new([1, 2, 3], [0, 2, 2], [1, 2, 1], 1);
    check(&geometry([2, 5, 1, 9, 8], 17, [1, 3, 2], options));
    // Padding past the kernel's reach: outputs that read only padding hold just the bias.
    let options = ConvOptions::new([1; 3], [0, 0, 3], [1; 3], 1);
    check(&geometry([1, 2, 1, 1, 13], 3, [1, 1, 4], options));
}

#[test]
fn groups_of_unequal_widths() {
    let options = ConvOptions::new([1; 3], [0, 0, 1], [1; 3], 3);
    check(&geometry([2, 6, 1, 1, 11], 9, [1, 1, 3], options));
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2);
    check(&geometry([1, 4, 1, 6, 6], 40, [1, 3, 3], options));
}

#[test]
fn volumes_single_channels_and_single_points() {
    let options = ConvOptions::new([1, 2, 1], [1, 1, 0], [1; 3], 1);
    check(&geometry([2, 4, 3, 5, 4], 16, [2, 3, 3], options));
    // A stem: one input channel.
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    check(&geometry([3, 1, 1, 6, 6], 16, [1, 3, 3], options));
    // One output point per channel: a single partial tile.
    let options = ConvOptions::new([1; 3], [0; 3], [1; 3], 1);
    check(&geometry([1, 5, 1, 3, 3], 7, [1, 3, 3], options));
}

/// A reduction of 2160 steps: the forward pass sums it in several passes over the points
/// (9 with AVX2's blocks, 2 with the scalar ones), each tile starting from the last pass's sums.
#[test]
fn long_reductions_in_passes() {
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    check(&geometry([1, 240, 1, 3, 4], 18, [1, 3, 3], options));
}

/// The direct input gradient of a strided convolution in f32 with `simd`'s vectors against
/// the definition in f64 on the same (f32) values, each input within f32 roundoff of its sum.
fn check_data_with<S: Simd>(simd: S, g: &ConvGeometry) {
    assert!(serves_data(g), "{g:?}");
    let to_f32 = |values: Vec<f64>| values.into_iter().map(|v| v as f32).collect::<Vec<_>>();
    let weight = to_f32(values(g.out_channels * g.patch_len(), 6));
    let out_grad = to_f32(values(g.out_shape().iter().product(), 7));
    let widen = |values: &[f32]| values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
    let x = vec![0.0; g.in_shape().iter().product()];
    let (expected, _) = reference_grads(g, &x, &widen(&weight), &widen(&out_grad));
    let mut got = vec![0.0; expected.len()];
    data::run(simd, &g.normalised(), &weight, &out_grad, &mut got);
    let terms = g.out_per_group() * g.kernel.iter().product::<usize>();
    let tolerance = 4.0 * f64::from(f32::EPSILON) * (terms + 1) as f64;
    for (i, (&got, &want)) in got.iter().zip(&expected).enumerate() {
        assert!(
            (f64::from(got) - want).abs() < tolerance,
            "x_grad[{i}]: {got} vs {want} ({g:?}, {} lanes)",
            size_of::<S::f32s>() / 4
        );
    }
}

/// [`check_data_with`] on every instruction set this machine has.
fn check_data(g: &ConvGeometry) {
    check_data_with(pulp::Scalar::new(), g);
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        check_data_with(simd, g);
    }
}

/// DCGAN's 4x4 stride-2 layer: four phases of 2x2 taps, 18 input channels (a block of 16 and
/// one of 2), and a batch of 2.
#[test]
fn data_phases_of_a_whole_number_of_strides() {
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    check_data(&geometry([2, 18, 1, 8, 8], 5, [1, 4, 4], options));
}

/// Phases with different tap counts (3x3 stride 2 on odd sizes), dilation, groups, a stride
/// of 3 past a 2-tap kernel (a phase no tap reaches stays zero), and a 1x1 downsampling.
#[test]
fn data_phases_of_uneven_taps() {
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    check_data(&geometry([1, 17, 1, 7, 9], 6, [1, 3, 3], options));
    let options = ConvOptions::new([1, 2, 3], [0, 2, 1], [1, 2, 1], 2);
    check_data(&geometry([2, 6, 1, 9, 8], 10, [1, 3, 2], options));
    let options = ConvOptions::new([1, 1, 3], [0, 0, 0], [1; 3], 1);
    check_data(&geometry([1, 3, 1, 2, 11], 4, [1, 1, 2], options));
    let options = ConvOptions::new([1, 2, 2], [0; 3], [1; 3], 1);
    check_data(&geometry([2, 20, 1, 6, 7], 8, [1, 1, 1], options));
}

/// Padding past the kernel's reach (every tap of a phase reads after the gradient's start,
/// and some read past its end), a volume strided on two axes, and a reduction of 560 steps a
/// phase (several passes).
#[test]
fn data_phases_wide_padding_volumes_and_long_reductions() {
    let options = ConvOptions::new([1, 1, 2], [0, 0, 3], [1; 3], 1);
    check_data(&geometry([1, 2, 1, 1, 6], 3, [1, 1, 2], options));
    let options = ConvOptions::new([2, 1, 2], [1, 1, 0], [1; 3], 1);
    check_data(&geometry([2, 4, 5, 4, 6], 16, [3, 3, 2], options));
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    check_data(&geometry([1, 3, 1, 6, 6], 140, [1, 4, 4], options));
}

/// A stride of 2^40 under a padding as wide (valid, as in PyTorch): only the phases the taps
/// reach are visited, so the gradient is computed at once.
#[test]
fn data_phases_of_a_huge_stride() {
    let huge = 1 << 40;
    let options = ConvOptions::new([1, 1, huge], [0, 0, huge], [1; 3], 1);
    let g = geometry([1, 16, 1, 2, 3], 4, [1, 1, 2], options);
    assert_eq!(g.out_size, [1, 2, 3]);
    check_data(&g);
    assert!(!data_pays(&g));
}

/// The input gradient runs with a weight that is not finite (`conv::x_backward` sums again
/// what the copy's border made of it).
#[test]
fn data_runs_with_any_weight() {
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    let g = geometry([1, 2, 1, 4, 4], 3, [1, 3, 3], options);
    let to_f32 = |values: &[f64]| values.iter().map(|&v| v as f32).collect::<Vec<_>>();
    let (mut weight, out_grad) = (to_f32(&values(3 * 18, 2)), to_f32(&values(3 * 4, 3)));
    assert_eq!(x_backward(&g, &weight, &out_grad).len(), 2 * 16);
    weight[4] = f32::INFINITY;
    assert_eq!(x_backward(&g, &weight, &out_grad).len(), 2 * 16);
}

/// The kernels compute f32 alone: another element type is refused loudly (`conv`'s choice
/// never sends one, see `Call::serves`), not computed as if it were f32.
#[test]
#[should_panic(expected = "an f32 kernel called on another element type")]
fn other_element_types_are_refused() {
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let g = geometry([1, 2, 1, 4, 4], 16, [1, 3, 3], options);
    let (x, weight) = (values(32, 1), values(16 * 18, 2));
    forward(&g, &x, &weight, None, &Unwatched);
}

/// The rule takes the small layers of `examples/resnet` (3x3 kernels, 16 to 32 channels, any
/// stride) whose output channels fill a block of this machine's vectors or whose points fill
/// the spatial tiles, and leaves 1x1 kernels, narrow outputs and long reductions to the
/// lowered path.
#[test]
fn pays_on_small_layers() {
    let layer = |cin: usize, cout: usize, kernel: usize, stride: usize| {
        let pad = kernel / 2;
        let options = ConvOptions::new([1, stride, stride], [0, pad, pad], [1; 3], 1);
        pays(&geometry(
            [64, cin, 1, 14, 14],
            cout,
            [1, kernel, kernel],
            options,
        ))
    };
    // 16 output channels fill AVX2's block of two vectors, half of AVX-512's, whose spatial
    // tiles take the layer of 144 steps but not the stem's 9.
    let sixteen_fill = min_out_channels() <= 16;
    assert!(layer(16, 16, 3, 1));
    assert_eq!(layer(1, 16, 3, 1), sixteen_fill);
    assert!(layer(16, 32, 3, 2));
    assert!(layer(32, 32, 3, 1));
    assert!(!layer(16, 32, 1, 2));
    assert!(!layer(16, 1, 3, 1));
    assert!(!layer(64, 64, 3, 1));
    // The weight gradient: not for the stem's 9 steps.
    let weight_layer = |cin: usize| {
        let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
        weight_pays(&geometry([64, cin, 1, 14, 14], 32, [1, 3, 3], options))
    };
    assert!(weight_layer(16));
    assert!(!weight_layer(1));
}

/// A block holds two of the widest vectors: 16 channels with AVX2, 32 with AVX-512, and the
/// rule's minimum is at least that and at least 16.
#[test]
fn the_rule_fills_a_block_of_the_machines_vectors() {
    let lanes = super::tiles::machine_lanes();
    #[cfg(target_arch = "x86_64")]
    {
        let expected = if pulp::x86::V4::try_new().is_some() {
            32
        } else if pulp::x86::V3::try_new().is_some() {
            16
        } else {
            lanes
        };
        assert_eq!(lanes, expected);
    }
    assert_eq!(min_out_channels(), lanes.max(16));
}

/// The rule takes the strided input gradients of `examples/resnet` and of DCGAN's 4x4 layers
/// (16 input channels or more), not a strided 1x1 kernel's, a 3-channel input's, or a
/// stride-1 layer's (the adjoint's).
#[test]
fn data_pays_on_strided_layers() {
    let layer = |cin: usize, kernel: usize, stride: usize, pad: usize| {
        let options = ConvOptions::new([1, stride, stride], [0, pad, pad], [1; 3], 1);
        data_pays(&geometry(
            [8, cin, 1, 32, 32],
            64,
            [1, kernel, kernel],
            options,
        ))
    };
    assert!(layer(16, 3, 2, 1));
    assert!(layer(64, 4, 2, 1));
    assert!(!layer(64, 1, 2, 0));
    assert!(!layer(3, 4, 2, 1));
    assert!(!layer(64, 3, 1, 1));
}

/// f32 operands of `g` from the reference's value streams: `(x, weight, bias)`.
fn operands(g: &ConvGeometry) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    (
        f32_values(g.in_shape().iter().product(), 6),
        f32_values(g.out_channels * g.patch_len(), 7),
        f32_values(g.out_channels, 8),
    )
}

/// `g`'s forward pass by the channel tiles in blocks of `V` vectors, and by `run`'s own
/// choice, with `simd`'s vectors: the two bit for bit equal (the same sums in the same
/// order), and `run`'s within roundoff of the definition ([`check_with`]).
fn check_against_channel_tiles<S: Simd, const V: usize>(simd: S, g: &ConvGeometry) {
    check_with(simd, g, true);
    let (x, weight, bias) = operands(g);
    let len = g.out_shape().iter().product();
    let (mut chosen, mut channel_tiles) = (vec![0.0; len], vec![0.0; len]);
    run(simd, g, &x, &weight, Some(&bias), &mut chosen, &Unwatched);
    run_in_blocks::<S, V>(
        simd,
        g,
        &x,
        &weight,
        Some(&bias),
        &mut channel_tiles,
        &Unwatched,
    );
    let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&chosen), bits(&channel_tiles), "{g:?}");
}

/// Geometries for the spatial tiles with `lanes`-wide vectors: rows cut into whole and short
/// runs, tiles of whole and partial runs, partial blocks of channels, dilation, a stride
/// along H, groups and a 3D kernel.
fn spatial_geometries(lanes: usize) -> Vec<ConvGeometry> {
    let same = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let dilated = ConvOptions::new([1, 2, 1], [0, 2, 2], [1, 2, 2], 1);
    let grouped = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2);
    let cubic = ConvOptions::new([1; 3], [1; 3], [1; 3], 1);
    let width = lanes + 5;
    vec![
        geometry([2, 3, 1, 9, width], 7, [1, 3, 3], same.clone()),
        geometry([1, 3, 1, 10, width], 13, [1, 3, 3], same.clone()),
        geometry([1, 2, 1, 5, lanes], 9, [1, 3, 3], same),
        geometry([1, 4, 1, 11, lanes], 5, [1, 3, 3], dilated),
        geometry([2, 6, 1, 8, lanes], 4, [1, 3, 3], grouped),
        geometry([1, 2, 4, 6, lanes], 3, [3, 3, 3], cubic),
    ]
}

/// The spatial tiles (output points in vector lanes) with AVX2 and AVX-512 where the CPU has
/// them: the definition's sums, and the channel tiles' bits.
#[test]
fn spatial_tiles_match_the_channel_tiles() {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V3::try_new() {
            for g in spatial_geometries(8) {
                assert!(spatial::fits::<pulp::x86::V3>(&g), "{g:?}");
                check_against_channel_tiles::<_, BLOCK_VECTORS>(simd, &g);
            }
        }
        if let Some(simd) = pulp::x86::V4::try_new() {
            for g in spatial_geometries(16) {
                assert!(spatial::fits::<pulp::x86::V4>(&g), "{g:?}");
                check_against_channel_tiles::<_, BLOCK_VECTORS>(simd, &g);
            }
        }
    }
}

/// One-vector blocks, where a layer's output channels fit a vector and the spatial tiles do
/// not serve it (a stride along W): row tiles at strides 1 and 2 (rows of up to 14 points
/// and wider ones cut into near-equal tiles), listed points at stride 3, against the
/// definition and bit for bit against two-vector blocks.
#[test]
fn one_vector_blocks_match_two_vector_blocks() {
    let strided = |stride: usize| ConvOptions::new([1, 1, stride], [0, 1, 1], [1; 3], 1);
    let shapes = |lanes: usize| {
        [(2, 15), (2, 40), (2, 59), (3, 23)].map(|(stride, width)| {
            geometry(
                [2, 3, 1, 5, width],
                lanes.min(5),
                [1, 3, 3],
                strided(stride),
            )
        })
    };
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V3::try_new() {
            for g in shapes(8) {
                assert!(!spatial::fits::<pulp::x86::V3>(&g), "{g:?}");
                check_against_channel_tiles::<_, BLOCK_VECTORS>(simd, &g);
            }
        }
        if let Some(simd) = pulp::x86::V4::try_new() {
            for g in shapes(16) {
                check_against_channel_tiles::<_, BLOCK_VECTORS>(simd, &g);
            }
        }
    }
}

/// The rule takes the spatial tiles for a small layer with fewer output channels than two
/// vectors hold, where its rows fill them and it has enough steps; not for the stem of
/// `examples/resnet` (9 steps), nor at a stride along W.
#[test]
fn the_rule_takes_spatial_tiles_for_few_channels() {
    let lanes = super::tiles::machine_lanes() / 2;
    let layer = |cin: usize, cout: usize, stride: usize| {
        let options = ConvOptions::new([1, 1, stride], [0, 1, 1], [1; 3], 1);
        spatial::pays(&geometry([8, cin, 1, 56, 56], cout, [1, 3, 3], options))
    };
    if lanes >= 8 {
        assert!(layer(8, 8, 1));
        assert!(layer(16, 2 * lanes - 1, 1));
        assert!(!layer(16, 2 * lanes, 1));
    }
    assert!(!layer(1, 16, 1));
    assert!(!layer(16, 8, 2));
}

/// The spatial weight gradient in f32 with `simd`'s vectors against the definition in f64 on
/// the same (f32) values, each weight within f32 roundoff of its sum: tiles of whole and
/// partial channel blocks and step blocks, runs cut short, gangs of several images.
fn check_spatial_weight_with<S: Simd>(simd: S, g: &ConvGeometry) {
    assert!(spatial::fits::<S>(g), "{g:?}");
    let x = f32_values(g.in_shape().iter().product(), 9);
    let out_grad = f32_values(g.out_shape().iter().product(), 10);
    let mut got = vec![0.0; g.out_channels * g.patch_len()];
    spatial_weight::run(simd, g, &x, &out_grad, &mut got);
    assert_weight_gradient(g, &x, &out_grad, &got);
}

#[test]
fn spatial_weight_tiles_match_the_definition() {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V3::try_new() {
            for g in spatial_geometries(8) {
                check_spatial_weight_with(simd, &g);
            }
        }
        if let Some(simd) = pulp::x86::V4::try_new() {
            for g in spatial_geometries(16) {
                check_spatial_weight_with(simd, &g);
            }
        }
    }
}

/// An input that is not finite: the spatial tiles would multiply the infinity beside a row's
/// last run by a padding zero, so the weight gradient takes the channel tiles, whose NaN and
/// infinities are the definition's.
#[test]
fn spatial_weight_gradient_leaves_infinite_inputs_to_the_channel_tiles() {
    let lanes = super::tiles::machine_lanes() / 2;
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let g = geometry([3, 2, 1, 6, lanes + 3], 5, [1, 3, 3], options);
    let mut x = f32_values(g.in_shape().iter().product(), 11);
    // The last input column of the first row: a run's lanes past its row read it for the
    // taps left of the kernel's last column.
    x[lanes + 2] = f32::INFINITY;
    let out_grad = f32_values(g.out_shape().iter().product(), 12);
    let got = weight_backward::<f32>(&g, &x, &out_grad);
    assert_weight_gradient(&g, &x, &out_grad, &got);
}
