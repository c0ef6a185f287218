use burn::tensor::ops::ConvOptions;

use crate::cpu::kernels::conv::reference::*;
use crate::cpu::kernels::conv::*;
use crate::spec::ConvGeometry;

use super::im2col::Lowering;
use super::images_per_task;

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
