use burn::tensor::ops::ConvOptions;

use super::super::im2col::Lowering;
use super::super::points;
use super::lowered::images_per_task;
use super::*;

/// Deterministic values in [-1, 1).
pub(in crate::cpu::kernels) fn values(len: usize, seed: u64) -> Vec<f64> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// The convolution straight from its definition, one output at a time.
pub(in crate::cpu::kernels) fn reference(g: &ConvGeometry, x: &[f64], weight: &[f64]) -> Vec<f64> {
    let [out_d, out_h, out_w] = g.out_size;
    let [k_d, k_h, k_w] = g.kernel;
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    // The input position kernel tap `k` of output `o` reads along `axis`, if not padding.
    let at = |o: usize, k: usize, axis: usize| {
        let pos = (o * g.stride[axis] + k * g.dilation[axis]) as isize - g.pad_begin[axis] as isize;
        usize::try_from(pos).ok().filter(|&p| p < g.in_size[axis])
    };
    let mut out = Vec::new();
    for n in 0..g.batch {
        for oc in 0..g.out_channels {
            for (od, oh, ow) in (0..out_d)
                .flat_map(|d| (0..out_h).flat_map(move |h| (0..out_w).map(move |w| (d, h, w))))
            {
                let mut sum = 0.0;
                for c in 0..cin_g {
                    let ic = oc / cout_g * cin_g + c;
                    for (kd, kh, kw) in (0..k_d)
                        .flat_map(|d| (0..k_h).flat_map(move |h| (0..k_w).map(move |w| (d, h, w))))
                    {
                        let (Some(id), Some(ih), Some(iw)) =
                            (at(od, kd, 0), at(oh, kh, 1), at(ow, kw, 2))
                        else {
                            continue;
                        };
                        let [in_d, in_h, in_w] = g.in_size;
                        let x_at = (((n * g.in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
                        let w_at = (((oc * cin_g + c) * k_d + kd) * k_h + kh) * k_w + kw;
                        sum += x[x_at] * weight[w_at];
                    }
                }
                out.push(sum);
            }
        }
    }
    out
}

/// Both gradients straight from their definitions: every output's gradient scattered back
/// through every tap that read an input, to that input and to that tap's weight.
pub(in crate::cpu::kernels) fn reference_grads(
    g: &ConvGeometry,
    x: &[f64],
    weight: &[f64],
    out_grad: &[f64],
) -> (Vec<f64>, Vec<f64>) {
    let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
    let [in_d, in_h, in_w] = g.in_size;
    let [k_d, k_h, k_w] = g.kernel;
    let at = |o: usize, k: usize, axis: usize| {
        let pos = (o * g.stride[axis] + k * g.dilation[axis]) as isize - g.pad_begin[axis] as isize;
        usize::try_from(pos).ok().filter(|&p| p < g.in_size[axis])
    };
    let mut x_grad = vec![0.0; x.len()];
    let mut weight_grad = vec![0.0; weight.len()];
    let mut index = 0;
    for n in 0..g.batch {
        for oc in 0..g.out_channels {
            for [od, oh, ow] in points(g.out_size) {
                let dy = out_grad[index];
                index += 1;
                for c in 0..cin_g {
                    let ic = oc / cout_g * cin_g + c;
                    for [kd, kh, kw] in points(g.kernel) {
                        let (Some(id), Some(ih), Some(iw)) =
                            (at(od, kd, 0), at(oh, kh, 1), at(ow, kw, 2))
                        else {
                            continue;
                        };
                        let w_at = (((oc * cin_g + c) * k_d + kd) * k_h + kh) * k_w + kw;
                        let x_at = (((n * g.in_channels + ic) * in_d + id) * in_h + ih) * in_w + iw;
                        x_grad[x_at] += weight[w_at] * dy;
                        weight_grad[w_at] += x[x_at] * dy;
                    }
                }
            }
        }
    }
    (x_grad, weight_grad)
}

/// A fast path's three passes of `g` in f64 against the definitions, within 1e-10: the
/// forward pass with a bias (`forward(x, weight, bias)`), `x_backward(weight, out_grad)`
/// and `weight_backward(x, out_grad)`, on values drawn from `seed` on.
pub(in crate::cpu::kernels) fn check_passes(
    g: &ConvGeometry,
    seed: u64,
    forward: impl Fn(&[f64], &[f64], &[f64]) -> Vec<f64>,
    x_backward: impl Fn(&[f64], &[f64]) -> Vec<f64>,
    weight_backward: impl Fn(&[f64], &[f64]) -> Vec<f64>,
) {
    let close = |what: &str, got: &[f64], expected: &[f64]| {
        assert_eq!(got.len(), expected.len(), "{what}: length");
        for (i, (a, b)) in got.iter().zip(expected).enumerate() {
            assert!((a - b).abs() < 1e-10, "{what}[{i}]: {a} vs {b} ({g:?})");
        }
    };
    let x = values(g.in_shape().iter().product(), seed);
    let weight = values(g.weight_shape().iter().product(), seed + 1);
    let bias = values(g.out_channels, seed + 2);
    let out = forward(&x, &weight, &bias);
    let mut expected = reference(g, &x, &weight);
    for (i, value) in expected.iter_mut().enumerate() {
        *value += bias[i / g.out_volume() % g.out_channels];
    }
    close("forward", &out, &expected);
    let out_grad = values(out.len(), seed + 3);
    let (expected_x_grad, expected_weight_grad) = reference_grads(g, &x, &weight, &out_grad);
    close(
        "x_backward",
        &x_backward(&weight, &out_grad),
        &expected_x_grad,
    );
    close(
        "weight_backward",
        &weight_backward(&x, &out_grad),
        &expected_weight_grad,
    );
}

/// The geometry of a convolution of `x_shape` into `out_channels` by a `kernel`.
fn geometry(
    x_shape: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    options: &ConvOptions<3>,
) -> ConvGeometry {
    let [k_d, k_h, k_w] = kernel;
    let weight_shape = [out_channels, x_shape[1] / options.groups, k_d, k_h, k_w];
    ConvGeometry::conv(&x_shape, &weight_shape, options)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// Forward against the definition, and both gradients through the adjoint identities
/// `<conv(x, w), y> = <x, x_grad(w, y)> = <w, w_grad(x, y)>`.
fn check(x_shape: [usize; 5], out_channels: usize, kernel: [usize; 3], options: ConvOptions<3>) {
    let g = geometry(x_shape, out_channels, kernel, &options);
    let weight_shape = g.weight_shape();
    let x = values(x_shape.iter().product(), 1);
    let weight = values(weight_shape.iter().product(), 2);
    let out = forward(&g, &x, &weight, None);
    let expected = reference(&g, &x, &weight);
    assert_eq!(out.len(), expected.len());
    for (i, (a, b)) in out.iter().zip(&expected).enumerate() {
        assert!((a - b).abs() < 1e-9, "forward[{i}]: {a} vs {b} ({g:?})");
    }
    let y = values(out.len(), 3);
    let lhs = dot(&out, &y);
    let x_side = dot(&x, &x_backward(&g, &weight, &y));
    let weight_side = dot(&weight, &weight_backward(&g, &x, &y));
    assert!(
        (lhs - x_side).abs() < 1e-8 * lhs.abs().max(1.0),
        "x_backward: {lhs} vs {x_side}"
    );
    assert!(
        (lhs - weight_side).abs() < 1e-8 * lhs.abs().max(1.0),
        "weight_backward: {lhs} vs {weight_side}"
    );
}

/// Pointwise layers, whose input gradients read the weight transposed (the lowered GEMM's left
/// operand, the adjoint's weight), with groups of unequal input and output widths, 1D to 3D.
#[test]
fn pointwise_transposed_weights() {
    use crate::cpu::choice::with_conv_algorithm;
    for algorithm in [Algorithm::Lowered, Algorithm::Adjoint] {
        with_conv_algorithm(algorithm, || {
            let options = |groups| ConvOptions::new([1; 3], [0; 3], [1; 3], groups);
            check([2, 6, 1, 5, 7], 9, [1, 1, 1], options(3));
            check([1, 17, 1, 1, 6], 19, [1, 1, 1], options(1));
            check([2, 4, 3, 2, 5], 10, [1, 1, 1], options(2));
        });
    }
}

#[test]
fn several_tiles_of_2d_rows() {
    // 144 f64 per column: tiles of 15 rows of 64 (4 full tiles and a remainder); at stride 2,
    // 29 rows of 32.
    let geometry_check = |stride| {
        check(
            [1, 16, 1, 64, 64],
            3,
            [1, 3, 3],
            ConvOptions::new([1, stride, stride], [0, 1, 1], [1; 3], 1),
        )
    };
    geometry_check(1);
    geometry_check(2);
}

#[test]
fn tiles_that_cross_depth_slices() {
    // 216 f64 per column and 20-wide rows: tiles of 31 rows straddle the 20-row depth slices.
    check(
        [2, 8, 6, 20, 20],
        4,
        [3, 3, 3],
        ConvOptions::new([1; 3], [1; 3], [1; 3], 1),
    );
    check(
        [1, 8, 6, 20, 20],
        4,
        [2, 3, 3],
        ConvOptions::new([1, 2, 1], [0, 2, 1], [1, 1, 2], 2),
    );
}

/// "Same" convolutions lowered by tap masks and by shifted blocks of rows, with dilation,
/// with rows partly and wholly in the padding, with output rows fewer than the input's, and
/// with single-row and single-column planes.
#[test]
fn shifted_plane_lowering() {
    let same =
        |padding: [usize; 3], dilation: [usize; 3]| ConvOptions::new([1; 3], padding, dilation, 1);
    check([2, 3, 1, 7, 9], 4, [1, 3, 3], same([0, 2, 2], [1, 2, 2]));
    check([1, 2, 1, 3, 6], 3, [1, 5, 5], same([0, 4, 2], [1, 2, 1]));
    check([1, 2, 1, 9, 5], 2, [1, 5, 3], same([0, 1, 1], [1; 3]));
    check([2, 2, 3, 4, 4], 2, [3, 3, 3], same([2, 1, 1], [1, 1, 1]));
    check([1, 3, 1, 1, 8], 2, [1, 1, 3], same([0, 0, 1], [1; 3]));
    check([1, 3, 1, 6, 1], 2, [1, 3, 1], same([0, 1, 0], [1; 3]));
    // Planes smaller than the kernel: taps shifted past the whole plane (depthwise too).
    check([2, 3, 1, 1, 1], 2, [1, 3, 3], same([0, 1, 1], [1; 3]));
    check([1, 2, 1, 2, 1], 2, [1, 5, 3], same([0, 2, 1], [1; 3]));
    check(
        [1, 2, 1, 1, 1],
        2,
        [1, 3, 3],
        ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2),
    );
    // Tap masks over tiles that cut a long 1D signal, and 2D rows mid-row.
    check([1, 32, 1, 1, 3000], 2, [1, 1, 9], same([0, 0, 4], [1; 3]));
    check([2, 32, 1, 40, 40], 2, [1, 3, 3], same([0, 1, 1], [1; 3]));
    // Too large for tap masks: blocks of rows, several row tiles.
    check([1, 2, 1, 100, 80], 2, [1, 3, 3], same([0, 1, 1], [1; 3]));
}

/// A tap in the padding reads nothing, even where its shifted position lands on a
/// neighbouring row's infinite element (a masked multiply would make NaN there).
#[test]
fn padding_taps_ignore_the_neighbouring_rows() {
    // Two input channels of ones, +inf at channel 0's row 0, column 3 (not depthwise: the
    // patch matrix is built). Weights of ones.
    let same = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    for (height, width) in [(4, 4), (100, 80)] {
        // 4x4 lowers by tap masks, 100x80 (too large for masks) by blocks of rows.
        let g = ConvGeometry::conv(&[1, 2, 1, height, width], &[1, 2, 1, 3, 3], &same);
        let plane = height * width;
        let mut x = vec![1.0f64; 2 * plane];
        x[width - 1] = f64::INFINITY;
        let out = forward(&g, &x, &[1.0; 18], None);
        assert_eq!(out[width], 12.0, "{height}x{width}: row 1, column 0");
        let mut y = vec![1.0f64; plane];
        y[width - 1] = f64::INFINITY;
        let x_grad = x_backward(&g, &[1.0; 18], &y);
        assert_eq!(x_grad[width], 6.0, "{height}x{width}: row 1, column 0");
        assert_eq!(x_grad[plane + width], 6.0, "{height}x{width}: channel 1");
    }
}

/// Small images lowered several to a tile (one GEMM for the tile), with a last tile of
/// fewer images, groups, strides, a 3D window and a bias.
#[test]
fn several_small_images_per_tile() {
    // Two threads, as on CI: a task then owns half the batch, so tiles hold several images.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(several_small_images_per_tile_on_two_threads);
}

fn several_small_images_per_tile_on_two_threads() {
    let options = |stride: [usize; 3], padding: [usize; 3], groups| {
        ConvOptions::new(stride, padding, [1; 3], groups)
    };
    check([9, 4, 1, 5, 6], 6, [1, 3, 3], options([1; 3], [0, 1, 1], 2));
    check(
        [7, 3, 1, 9, 7],
        4,
        [1, 3, 3],
        options([1, 2, 2], [0, 1, 1], 1),
    );
    check([5, 2, 3, 4, 4], 2, [3, 3, 3], options([1; 3], [1; 3], 1));
    check(
        [11, 2, 1, 1, 12],
        3,
        [1, 1, 5],
        options([1; 3], [0, 0, 2], 1),
    );

    let g = ConvGeometry::conv(
        &[9, 4, 1, 5, 6],
        &[6, 2, 1, 3, 3],
        &options([1; 3], [0, 1, 1], 2),
    );
    assert_eq!(images_per_task::<f64>(&g), 5);
    let x = values(9 * 4 * 30, 4);
    let weight = values(6 * 2 * 9, 5);
    let bias = values(6, 6);
    let plain = forward(&g, &x, &weight, None);
    let biased = forward(&g, &x, &weight, Some(&bias));
    for (i, (a, b)) in biased.iter().zip(&plain).enumerate() {
        let expected = b + bias[i / 30 % 6];
        assert!(
            (a - expected).abs() < 1e-12,
            "biased[{i}]: {a} vs {expected}"
        );
    }
}

/// A convolution of `x` `(N, C, D, H, W)` into `out_channels` by `kernel` with `stride`,
/// `padding`, `dilation` and `groups`.
type Case = (
    [usize; 5],
    usize,
    [usize; 3],
    [usize; 3],
    [usize; 3],
    [usize; 3],
    usize,
);

/// Each case on two threads (as on CI, so a task holds several small images), through the
/// three passes against the definitions, after `lowers` confirms that its tiles take the
/// lowering under test.
fn check_tiled(cases: &[Case], lowers: impl Fn(&Lowering<'_, f64>) -> bool + Sync) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        for (seed, &(x, out_channels, kernel, stride, padding, dilation, groups)) in
            (10..).step_by(4).zip(cases)
        {
            let [k_d, k_h, k_w] = kernel;
            let weight = [out_channels, x[1] / groups, k_d, k_h, k_w];
            let options = ConvOptions::new(stride, padding, dilation, groups);
            let g = ConvGeometry::conv(&x, &weight, &options);
            let lowering = Lowering::<f64>::new(&g, images_per_task::<f64>(&g));
            assert!(lowers(&lowering), "{g:?} takes another lowering");
            check_passes(
                &g,
                seed,
                |x, w, b| forward(&g, x, w, Some(b)),
                |w, y| x_backward(&g, w, y),
                |x, y| weight_backward(&g, x, y),
            );
        }
    });
}

/// Small "same" volumes lowered from their channels staged side by side
/// (`Lowering::im2col_images`, `col2im_images`): groups, tiles of unequal sizes, dilation,
/// 1D and 3D.
#[test]
fn same_volumes_staged_side_by_side() {
    let one = [1; 3];
    let cases: [Case; 5] = [
        ([13, 4, 1, 5, 6], 6, [1, 3, 3], one, [0, 1, 1], one, 2),
        ([9, 3, 1, 4, 4], 5, [1, 3, 3], one, [0, 2, 2], [1, 2, 2], 1),
        ([10, 2, 1, 1, 7], 3, [1, 1, 5], one, [0, 0, 2], one, 1),
        ([6, 2, 3, 3, 3], 4, [3, 3, 3], one, one, one, 1),
        ([7, 3, 1, 4, 4], 4, [1, 3, 3], one, [0, 1, 1], one, 1),
    ];
    check_tiled(&cases, |lowering| lowering.staging_len() > 0);
}

/// Small outputs of other shapes lowered by table (`TapTable`): strided with padding,
/// dilated without, one-tap strided, 3D, 1D and grouped over tiles of unequal sizes.
#[test]
fn small_outputs_lowered_by_table() {
    let (one, s2) = ([1; 3], [1, 2, 2]);
    let cases: [Case; 6] = [
        ([8, 3, 1, 7, 7], 4, [1, 3, 3], s2, [0, 1, 1], one, 1),
        ([6, 2, 1, 9, 8], 3, [1, 3, 3], one, [0; 3], s2, 1),
        ([10, 4, 1, 6, 6], 5, one, s2, [0; 3], one, 1),
        ([4, 2, 4, 5, 5], 3, [2, 3, 3], s2, one, one, 1),
        ([9, 2, 1, 1, 20], 3, [1, 1, 4], [1, 1, 3], [0, 0, 2], one, 1),
        ([13, 4, 1, 6, 5], 6, [1, 3, 2], [1, 2, 1], [0, 1, 0], one, 2),
    ];
    check_tiled(&cases, |lowering| lowering.by_table());
}

/// The bias gradient of a large f32 output against its sum in f64: a running f32 sum of
/// 20736 values in [0, 1) drifts by a few 1e-6 of it; lane sums stay well within 5e-7.
#[test]
fn bias_gradient_of_many_values_is_accurate() {
    let (batch, channels, volume) = (9, 2, 2304);
    let out_grad: Vec<f32> = values(batch * channels * volume, 7)
        .iter()
        .map(|v| (0.5 + 0.5 * v) as f32)
        .collect();
    let got = bias_backward(&out_grad, batch, channels);
    for (c, got) in got.iter().enumerate() {
        let exact: f64 = (0..batch)
            .flat_map(|n| &out_grad[(n * channels + c) * volume..][..volume])
            .map(|&v| v as f64)
            .sum();
        let error = (*got as f64 - exact).abs() / exact;
        assert!(error < 5e-7, "channel {c}: {got} vs {exact} ({error:e})");
    }
}

/// The depthwise stencil on rows of 3, 5, 7 and 4 taps, on inputs narrower and wider than
/// the kernel, and dilated.
#[test]
fn depthwise_rows_of_every_width() {
    for (k_w, pad_w) in [(3, 1), (5, 2), (7, 3), (4, 1), (5, 0)] {
        for in_w in [3, 9, 17] {
            if in_w + 2 * pad_w < k_w {
                continue;
            }
            check(
                [2, 3, 1, 4, in_w],
                3,
                [1, 2, k_w],
                ConvOptions::new([1; 3], [0, 1, pad_w], [1; 3], 3),
            );
        }
    }
    check(
        [1, 2, 1, 5, 12],
        2,
        [1, 3, 3],
        ConvOptions::new([1; 3], [0, 1, 2], [1, 1, 2], 2),
    );
    // Output rows around the register runs' widths: under 8, whole runs of 32, and every
    // remainder run (8, 16, 24, 32 columns) overlapping the run before it.
    for out_w in [7, 8, 15, 31, 32, 33, 40, 48, 56, 63, 64, 72, 95] {
        check(
            [2, 2, 1, 3, out_w],
            2,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 2),
        );
    }
}

/// The depthwise weight gradient over rows longer than its leaf of products (several
/// segments a row), a batch of three, a 1D signal, D and H strides (the copy cut short where
/// the stride leaves the last input rows unread), and no padding at all.
#[test]
fn depthwise_weight_gradient_of_long_rows() {
    check(
        [3, 2, 1, 3, 300],
        2,
        [1, 3, 5],
        ConvOptions::new([1; 3], [0, 1, 2], [1, 1, 2], 2),
    );
    check(
        [2, 3, 1, 1, 1000],
        3,
        [1, 1, 9],
        ConvOptions::new([1; 3], [0, 0, 4], [1; 3], 3),
    );
    check(
        [2, 2, 5, 7, 9],
        2,
        [3, 3, 3],
        ConvOptions::new([2, 3, 1], [1, 0, 1], [1; 3], 2),
    );
    check(
        [1, 2, 1, 6, 20],
        2,
        [1, 3, 3],
        ConvOptions::new([1; 3], [0, 0, 0], [1; 3], 2),
    );
}

/// Depthwise (the bordered rows, or the stencil where the W stride is not 1) and channel
/// multipliers (still the GEMM) side by side.
#[test]
fn depthwise_and_channel_multipliers() {
    check(
        [2, 3, 3, 5, 6],
        3,
        [3, 3, 3],
        ConvOptions::new([1; 3], [1, 2, 2], [1, 2, 2], 3),
    );
    check(
        [2, 6, 1, 9, 11],
        6,
        [1, 3, 3],
        ConvOptions::new([1, 1, 1], [0, 1, 1], [1; 3], 6),
    );
    check(
        [1, 3, 1, 9, 11],
        6,
        [1, 3, 2],
        ConvOptions::new([1, 2, 3], [0, 2, 1], [1, 2, 1], 3),
    );
    check(
        [1, 4, 5, 7, 6],
        4,
        [3, 2, 3],
        ConvOptions::new([2, 1, 2], [1, 0, 2], [1, 2, 1], 4),
    );
    check(
        [1, 1, 1, 1, 8],
        2,
        [1, 1, 3],
        ConvOptions::new([1; 3], [0, 0, 5], [1; 3], 1),
    );
}

/// A pinned algorithm runs every pass it serves, also where the default would not pick it
/// (Winograd and the phase grids on 4 channels), computing what the definition does; a pass
/// it does not serve keeps the default; the pin ends with its closure.
#[test]
fn pinned_algorithms_run_where_they_serve() {
    use crate::cpu::choice::with_conv_algorithm;
    let x_shape = [2, 4, 1, 9, 10];
    let (same, strided) = (
        ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1),
    );
    let geometry = |kernel: [usize; 3], options: &ConvOptions<3>| {
        ConvGeometry::conv(&x_shape, &[6, 4, kernel[0], kernel[1], kernel[2]], options)
    };
    let (g3, g4) = (geometry([1, 3, 3], &same), geometry([1, 4, 4], &strided));
    let passes = [Pass::Forward, Pass::Data, Pass::Weight];
    for pass in passes {
        assert_eq!(algorithm(&g3, pass), Algorithm::Lowered);
        assert_eq!(algorithm(&g4, pass), Algorithm::Lowered);
    }
    with_conv_algorithm(Algorithm::Winograd, || {
        for pass in passes {
            assert_eq!(algorithm(&g3, pass), Algorithm::Winograd);
            assert_eq!(algorithm(&g4, pass), Algorithm::Lowered);
        }
        check(x_shape, 6, [1, 3, 3], same.clone());
    });
    with_conv_algorithm(Algorithm::Phases, || {
        for pass in passes {
            assert_eq!(algorithm(&g3, pass), Algorithm::Lowered);
            assert_eq!(algorithm(&g4, pass), Algorithm::Phases);
        }
        check(x_shape, 6, [1, 4, 4], strided.clone());
    });
    with_conv_algorithm(Algorithm::Depthwise, || {
        let depthwise = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4);
        let g = ConvGeometry::conv(&x_shape, &[4, 1, 1, 3, 3], &depthwise);
        assert_eq!(algorithm(&g, Pass::Forward), Algorithm::Depthwise);
        assert_eq!(algorithm(&g, Pass::Data), Algorithm::Adjoint);
        assert_eq!(algorithm(&g3, Pass::Forward), Algorithm::Lowered);
    });
    assert_eq!(algorithm(&g3, Pass::Forward), Algorithm::Lowered);
}

/// By rule, the input gradient of a stride-1 layer with few output channels and at least as
/// many input channels, or whose adjoint takes the direct path, runs as its adjoint; a
/// one-channel stem's, a wide layer's and a strided layer's do not (the last takes the direct
/// path's phases).
#[test]
fn adjoint_input_gradient_by_rule() {
    let rule = |cin: usize, cout: usize, stride: usize, pass: Pass| {
        let options = ConvOptions::new([1, stride, stride], [0, 1, 1], [1; 3], 1);
        algorithm(
            &ConvGeometry::conv(&[64, cin, 1, 14, 14], &[cout, cin, 1, 3, 3], &options),
            pass,
        )
    };
    assert_eq!(rule(16, 16, 1, Pass::Data), Algorithm::Adjoint);
    assert_eq!(rule(32, 16, 1, Pass::Data), Algorithm::Adjoint);
    assert_eq!(rule(16, 16, 1, Pass::Forward), Algorithm::Direct);
    assert_eq!(rule(16, 16, 1, Pass::Weight), Algorithm::Direct);
    assert_eq!(rule(32, 32, 1, Pass::Data), Algorithm::Adjoint);
    assert_eq!(rule(1, 16, 1, Pass::Data), Algorithm::Lowered);
    assert_ne!(rule(64, 64, 1, Pass::Data), Algorithm::Adjoint);
    assert_ne!(rule(16, 16, 2, Pass::Data), Algorithm::Adjoint);
    // A strided layer's input gradient: the direct path per stride phase, unless the phase
    // grids fit it (a 4x4 kernel of stride 2), which serve every element type.
    assert_eq!(rule(16, 32, 2, Pass::Data), Algorithm::Direct);
    let options = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    let dcgan = ConvGeometry::conv(&[8, 64, 1, 32, 32], &[128, 64, 1, 4, 4], &options);
    assert_eq!(algorithm(&dcgan, Pass::Data), Algorithm::Phases);
}

/// The input gradient as the forward convolution of the output gradient (pinned), against the
/// definition through the adjoint identity: groups, dilation, uneven and one-sided padding,
/// 1D/2D/3D, a depthwise layer (whose adjoint runs the depthwise stencil), a batch of two.
#[test]
fn adjoint_input_gradient_matches_the_definition() {
    use crate::cpu::choice::with_conv_algorithm;
    let with_padding = |padding: [(usize, usize); 3], dilation: [usize; 3], groups: usize| {
        let mut options = ConvOptions::new([1; 3], [0; 3], dilation, groups);
        options.padding = padding;
        options
    };
    with_conv_algorithm(Algorithm::Adjoint, || {
        let cases = [
            (
                [2, 4, 1, 7, 9],
                6,
                [1, 3, 3],
                with_padding([(0, 0), (1, 1), (1, 1)], [1; 3], 1),
            ),
            (
                [1, 6, 1, 8, 5],
                4,
                [1, 3, 2],
                with_padding([(0, 0), (2, 0), (0, 1)], [1; 3], 2),
            ),
            (
                [2, 3, 1, 1, 17],
                5,
                [1, 1, 4],
                with_padding([(0, 0), (0, 0), (3, 2)], [1, 1, 2], 1),
            ),
            (
                [1, 4, 4, 5, 6],
                4,
                [3, 2, 3],
                with_padding([(1, 2), (1, 0), (0, 0)], [1, 2, 1], 4),
            ),
            (
                [2, 5, 1, 9, 9],
                5,
                [1, 3, 3],
                with_padding([(0, 0), (2, 2), (2, 2)], [1, 2, 2], 5),
            ),
            // More output channels per group than the weight flip moves per sweep.
            (
                [1, 6, 1, 5, 4],
                40,
                [1, 3, 3],
                with_padding([(0, 0), (1, 1), (1, 1)], [1; 3], 2),
            ),
        ];
        for (x_shape, out_channels, kernel, options) in cases {
            let g = geometry(x_shape, out_channels, kernel, &options);
            assert!(adjoint::serves(&g), "{g:?}");
            assert_eq!(algorithm(&g, Pass::Data), Algorithm::Adjoint);
            check(x_shape, out_channels, kernel, options);
        }
    });
}

/// The adjoint serves stride 1 with padding within the dilated kernel's reach, on both sides;
/// a stride, or padding past the reach (the adjoint would crop), takes another algorithm.
#[test]
fn adjoint_serves_stride_one_within_reach() {
    let geometry = |stride: usize, padding: (usize, usize), dilation: usize| {
        let mut options = ConvOptions::new([1, 1, stride], [0; 3], [1, 1, dilation], 1);
        options.padding[2] = padding;
        ConvGeometry::conv(&[1, 2, 1, 1, 12], &[2, 2, 1, 1, 3], &options)
    };
    assert!(adjoint::serves(&geometry(1, (2, 2), 1)));
    assert!(adjoint::serves(&geometry(1, (4, 0), 2)));
    assert!(!adjoint::serves(&geometry(2, (1, 1), 1)));
    assert!(!adjoint::serves(&geometry(1, (3, 0), 1)));
    assert!(!adjoint::serves(&geometry(1, (0, 3), 1)));
    crate::cpu::choice::with_conv_algorithm(Algorithm::Adjoint, || {
        assert_eq!(
            algorithm(&geometry(2, (1, 1), 1), Pass::Data),
            Algorithm::Lowered
        );
        assert_eq!(
            algorithm(&geometry(1, (1, 1), 1), Pass::Forward),
            Algorithm::Lowered
        );
    });
}

/// A pass large enough to time takes one of the algorithms that serve it and remembers it:
/// its result matches the rule's algorithm to roundoff on every call, also the first (which
/// times the candidates).
#[test]
fn timed_choice_computes_the_pass() {
    // 8 * 64 * 28 * 28 * 64 * 9 multiply-adds: timed.
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let g = ConvGeometry::conv(&[8, 64, 1, 28, 28], &[64, 64, 1, 3, 3], &options);
    assert!(fastest::worth_timing(&g));
    let x: Vec<f32> = values(g.in_shape().iter().product(), 7)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let weight: Vec<f32> = values(g.weight_shape().iter().product(), 8)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let expected = crate::cpu::choice::with_conv_algorithm(Algorithm::Lowered, || {
        x_backward(&g, &weight, &forward(&g, &x, &weight, None))
    });
    for _ in 0..2 {
        let got = x_backward(&g, &weight, &forward(&g, &x, &weight, None));
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs().max(1.0),
                "x_grad[{i}]: {a} vs {b}"
            );
        }
    }
}

/// Every algorithm's input gradient keeps the definition's non-finite values: a weight that is
/// infinite (or NaN) reaches only the inputs its tap meets an output from, as in the lowered
/// path (PyTorch's GEMM and col2im), and never turns the others to NaN through a padding zero.
#[test]
fn input_gradients_of_non_finite_weights_match_the_lowered_path() {
    use crate::cpu::choice::with_conv_algorithm;
    let shapes: [([usize; 5], usize, [usize; 3], ConvOptions<3>); 3] = [
        // Stride 1 (the adjoint), padded: an edge input meets only some taps.
        (
            [2, 16, 1, 5, 6],
            16,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ),
        // Stride 2 (the direct phases, the phase grids).
        (
            [2, 16, 1, 8, 8],
            16,
            [1, 4, 4],
            ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1),
        ),
        // Depthwise, stride 1 (the adjoint's depthwise stencil).
        (
            [1, 4, 1, 5, 5],
            4,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4),
        ),
    ];
    for (x_shape, out_channels, kernel, options) in shapes {
        let g = geometry(x_shape, out_channels, kernel, &options);
        let mut weight: Vec<f32> = values(g.out_channels * g.patch_len(), 8)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let taps = g.kernel.iter().product::<usize>();
        weight[0] = f32::INFINITY;
        weight[taps - 1] = f32::NAN;
        let out_grad: Vec<f32> = values(g.out_shape().iter().product(), 9)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let expected =
            with_conv_algorithm(Algorithm::Lowered, || x_backward(&g, &weight, &out_grad));
        assert!(expected.iter().any(|v| v.is_finite()) && expected.iter().any(|v| v.is_nan()));
        for algorithm in ALGORITHMS {
            let got = with_conv_algorithm(algorithm, || x_backward(&g, &weight, &out_grad));
            for (i, (&got, &want)) in got.iter().zip(&expected).enumerate() {
                let same = match want.is_finite() {
                    true => (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    false => got == want || (got.is_nan() && want.is_nan()),
                };
                assert!(same, "{algorithm:?} x_grad[{i}]: {got} vs {want} ({g:?})");
            }
        }
    }
}

/// A weight, or an output gradient, that is not finite meets the padding in no algorithm: each
/// pass sums only the taps inside the input (the input gradient, those that reach an output),
/// as the definition (and PyTorch's oneDNN, and Burn's CubeCL kernels) does, where a padded
/// algorithm alone would multiply a zero by it (NaN). Every algorithm, pinned, against the f64
/// definition.
#[test]
fn non_finite_values_meet_no_padding() {
    use crate::cpu::choice::with_conv_algorithm;
    let shapes: [([usize; 5], usize, [usize; 3], ConvOptions<3>); 5] = [
        // 3x3 stride 1 with channels enough for Winograd and the direct tiles.
        (
            [2, 16, 1, 6, 7],
            16,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ),
        // Stride 2 (the phase grids), asymmetric reach past the end.
        (
            [2, 16, 1, 8, 7],
            8,
            [1, 4, 4],
            ConvOptions::new([1, 2, 2], [0, 1, 2], [1; 3], 1),
        ),
        // Depthwise (the stencil) and grouped, dilated.
        (
            [1, 4, 1, 6, 5],
            4,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4),
        ),
        (
            [2, 4, 1, 7, 7],
            6,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 2, 2], [1, 2, 2], 2),
        ),
        // A padded 1x1 and a volume.
        (
            [2, 3, 2, 4, 5],
            5,
            [1, 1, 1],
            ConvOptions::new([1; 3], [1, 1, 1], [1; 3], 1),
        ),
    ];
    let agree = |what: &str, got: &[f32], want: &[f64], g: &ConvGeometry| {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (&got, &want)) in got.iter().zip(want).enumerate() {
            let same = match want.is_finite() {
                true => (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                false => f64::from(got) == want || (got.is_nan() && want.is_nan()),
            };
            assert!(same, "{what}[{i}]: {got} vs {want} ({g:?})");
        }
    };
    for (x_shape, out_channels, kernel, options) in shapes {
        let g = geometry(x_shape, out_channels, kernel, &options);
        let f32s = |len: usize, seed: u64| -> Vec<f32> {
            values(len, seed).into_iter().map(|v| v as f32).collect()
        };
        let x = f32s(g.in_shape().iter().product(), 10);
        let mut weight = f32s(g.out_channels * g.patch_len(), 11);
        let mut out_grad = f32s(g.out_shape().iter().product(), 12);
        let patch = g.patch_len();
        weight[0] = f32::INFINITY;
        weight[patch + patch / 2] = f32::NAN;
        if let Some(last) = weight.last_mut() {
            *last = f32::NEG_INFINITY;
        }
        out_grad[0] = f32::INFINITY;
        if let Some(last) = out_grad.last_mut() {
            *last = f32::NAN;
        }
        let wide = |values: &[f32]| values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
        let want_out = reference(&g, &wide(&x), &wide(&weight));
        let clean_weight = f32s(weight.len(), 11);
        let (_, want_weight_grad) =
            reference_grads(&g, &wide(&x), &wide(&clean_weight), &wide(&out_grad));
        let clean_out_grad = f32s(out_grad.len(), 12);
        let (want_x_grad, _) =
            reference_grads(&g, &wide(&x), &wide(&weight), &wide(&clean_out_grad));
        // Each case has elements the padding alone would have made NaN.
        assert!(want_out.iter().any(|v| v.is_finite()));
        assert!(want_weight_grad.iter().any(|v| v.is_finite()));
        // (A 1x1's every input meets every weight of its channel, so none of its input
        // gradient is finite here, nor does padding touch it.)
        assert!(want_x_grad.iter().any(|v| v.is_finite()) || g.kernel == [1; 3]);
        for algorithm in ALGORITHMS {
            let out = with_conv_algorithm(algorithm, || forward(&g, &x, &weight, None));
            agree(&format!("{algorithm:?} forward"), &out, &want_out, &g);
            let weight_grad = with_conv_algorithm(algorithm, || weight_backward(&g, &x, &out_grad));
            agree(
                &format!("{algorithm:?} weight_grad"),
                &weight_grad,
                &want_weight_grad,
                &g,
            );
            let x_grad =
                with_conv_algorithm(algorithm, || x_backward(&g, &weight, &clean_out_grad));
            agree(&format!("{algorithm:?} x_grad"), &x_grad, &want_x_grad, &g);
        }
    }
}
