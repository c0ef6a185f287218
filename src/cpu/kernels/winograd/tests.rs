use burn::tensor::ops::ConvOptions;

use super::plan::{Pass, Plan};
use super::*;
use crate::cpu::kernels::conv::reference::{check_passes, reference, values};

fn geometry(
    x: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    padding: [usize; 3],
    groups: usize,
) -> ConvGeometry {
    let weight = [out_channels, x[1] / groups, kernel[0], kernel[1], kernel[2]];
    let options = ConvOptions::new([1, 1, 1], padding, [1, 1, 1], groups);
    ConvGeometry::conv(&x, &weight, &options)
}

/// Forward (with bias) and both gradients in f64 against the definitions.
fn check(g: &ConvGeometry) {
    check_passes(
        g,
        11,
        |x, weight, bias| forward(g, x, weight, Some(bias), &Unwatched),
        |weight, out_grad| x_backward(g, weight, out_grad),
        |x, out_grad| weight_backward(g, x, out_grad),
    );
}

#[test]
fn tiles_straddling_the_output_edge() {
    // Odd sizes: the last tile of F(4, 3) (and of F(2, 3) below 6) hangs over the edge.
    for (h, w) in [(7, 5), (6, 9), (3, 3), (1, 4), (13, 2)] {
        check(&geometry([2, 8, 1, h, w], 9, [1, 3, 3], [0, 1, 1], 1));
    }
}

#[test]
fn every_padding_of_a_3_tap_axis() {
    for padding in [0, 1, 2] {
        check(&geometry(
            [1, 8, 1, 8, 7],
            8,
            [1, 3, 3],
            [0, padding, 2 - padding],
            1,
        ));
    }
}

#[test]
fn groups_and_batches() {
    check(&geometry([3, 16, 1, 9, 6], 24, [1, 3, 3], [0, 1, 1], 2));
    // 24 input channels per group: the filters are transformed 42 output channels at a time,
    // so each group's last block is a partial one.
    check(&geometry([2, 48, 1, 6, 5], 96, [1, 3, 3], [0, 1, 1], 2));
}

#[test]
fn fewer_channels_than_a_vector() {
    // One channel at a time in every move, each output tile scattered element by element.
    check(&geometry([2, 3, 1, 7, 6], 5, [1, 3, 3], [0, 1, 1], 1));
    check(&geometry([1, 2, 4, 5, 3], 3, [3, 3, 3], [1, 1, 1], 1));
}

#[test]
fn one_and_three_dimensional_kernels() {
    // 1D along the last axis, 3D with F(2, 3) on every axis, and a (3, 1, 3) mixture.
    check(&geometry([2, 8, 1, 1, 37], 8, [1, 1, 3], [0, 0, 1], 1));
    check(&geometry([2, 8, 5, 6, 7], 10, [3, 3, 3], [1, 1, 1], 1));
    check(&geometry([1, 8, 4, 5, 6], 8, [3, 1, 3], [1, 0, 0], 1));
}

#[test]
fn several_blocks_and_runs_across_images() {
    // 64 channels each way: blocks of 64 tiles at most. On one thread the chunk holds all three
    // 20 x 19 images (25 tiles of F(4, 3) each): blocks of 37 and 38 tiles, the first cut
    // mid-image and partway along a row of tiles, so the weight gradient accumulates over
    // blocks; on two, chunks of two images and one whose weight-gradient products are summed.
    let g = geometry([3, 64, 1, 20, 19], 64, [1, 3, 3], [0, 1, 1], 1);
    let plan = Plan::<f64>::new(&g);
    let total = 3 * plan.tiles_per_image();
    let blocks: Vec<_> = plan.blocks(total, Pass::Data).collect();
    assert_eq!(blocks, [0..37, 37..75]);
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("thread pool");
        pool.install(|| check(&g));
    }
}

#[test]
fn shapes_it_does_not_serve() {
    let g = |kernel, padding, channels| geometry([1, channels, 1, 8, 8], 8, kernel, padding, 1);
    assert!(!serves(&g([1, 3, 5], [0, 1, 2], 8)), "5 taps");
    assert!(!serves(&g([1, 1, 1], [0, 0, 0], 8)), "pointwise");
    assert!(
        !serves(&g([1, 3, 3], [0, 3, 1], 8)),
        "padding past the window"
    );
    let strided = ConvGeometry::conv(
        &[1, 8, 1, 8, 8],
        &[8, 8, 1, 3, 3],
        &ConvOptions::new([1, 2, 2], [0, 1, 1], [1, 1, 1], 1),
    );
    assert!(!serves(&strided), "stride 2");
}

/// Winograd takes finite operands below its safe magnitude, and no others (those take the
/// lowered path).
#[test]
fn non_finite_and_huge_values_are_not_taken() {
    let g = geometry([1, 8, 1, 6, 6], 8, [1, 3, 3], [0, 1, 1], 1);
    let x = vec![0.5f32; g.in_shape().iter().product()];
    let weight = vec![0.25f32; g.weight_shape().iter().product()];
    let out_grad = &x[..g.out_shape().iter().product()];
    assert!(takes([&x, &weight]));
    for hostile in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e35] {
        let mut bad = x.clone();
        bad[17] = hostile;
        assert!(!takes([&bad, &weight]), "x holding {hostile}");
        let mut bad = weight.clone();
        bad[3] = hostile;
        assert!(!takes([&x, &bad]), "weight holding {hostile}");
        assert!(
            !takes([&bad, out_grad]),
            "input gradient, weight holding {hostile}"
        );
    }
}

/// The f32 error against an f64 direct convolution of the same f32 values, on layers the size
/// of a ResNet's, in units of the golden cases' tolerance (`1e-4 + 1e-4 |expected|`), values in
/// [-1, 1). Measured: F(2, 3) 0.124 in 2D and 0.127 in 3D, as accurate as the patch-matrix GEMM
/// (0.114 and 0.151: both are the f32 sum's own rounding); F(4, 3) in 2D would be 2.17, which
/// is why f32 never takes it.
#[test]
fn f32_error_against_f64_on_large_layers() {
    for g in [
        geometry([1, 128, 1, 14, 14], 128, [1, 3, 3], [0, 1, 1], 1),
        geometry([1, 64, 6, 10, 10], 32, [3, 3, 3], [1, 1, 1], 1),
    ] {
        // f32 values, so the reference sees exactly what the f32 path sees.
        let narrow = |v: Vec<f64>| v.into_iter().map(|v| v as f32).collect::<Vec<f32>>();
        let widen = |v: &[f32]| v.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
        let x = narrow(values(g.in_shape().iter().product(), 21));
        let weight = narrow(values(g.weight_shape().iter().product(), 22));
        let expected = reference(&g, &widen(&x), &widen(&weight));
        let out = forward(&g, &x, &weight, None, &Unwatched);
        let worst = out
            .iter()
            .zip(&expected)
            .map(|(&a, &b)| (f64::from(a) - b).abs() / (1e-4 + 1e-4 * b.abs()))
            .fold(0.0, f64::max);
        println!("{:?}: worst error {worst:.4} of the tolerance", g.kernel);
        assert!(
            worst < 0.25,
            "{:?}: worst error {worst} of the tolerance",
            g.kernel
        );
    }
}

/// The rule picks Winograd on the ResNet and video layers where it measured faster, and the
/// lowered path on the example network's small layers and the 7x7 stage where it did not.
#[test]
fn where_it_pays() {
    let same = |x: [usize; 5], kernel| geometry(x, x[1], kernel, kernel.map(|k| k / 2), 1);
    for (x, kernel, expected) in [
        ([8, 64, 1, 56, 56], [1, 3, 3], true),
        ([8, 256, 1, 14, 14], [1, 3, 3], true),
        ([2, 64, 8, 28, 28], [3, 3, 3], true),
        ([8, 512, 1, 7, 7], [1, 3, 3], false),
        ([64, 16, 1, 14, 14], [1, 3, 3], false),
        ([64, 64, 1, 4, 4], [1, 3, 3], false),
    ] {
        assert_eq!(pays(&same(x, kernel)), expected, "{x:?}");
    }
}
