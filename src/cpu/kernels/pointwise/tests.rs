use burn::tensor::ops::ConvOptions;
use pulp::Simd;

use super::*;
use crate::cpu::kernels::conv::reference::{reference, reference_grads, values};

/// A 1x1, stride-1, unpadded convolution of `x` (`[N, C, D, H, W]`) to `out_channels`.
fn geometry(x: [usize; 5], out_channels: usize, groups: usize) -> ConvGeometry {
    let options = ConvOptions::new([1; 3], [0; 3], [1; 3], groups);
    ConvGeometry::conv(&x, &[out_channels, x[1] / groups, 1, 1, 1], &options)
}

fn to_f32(values: Vec<f64>) -> Vec<f32> {
    values.into_iter().map(|v| v as f32).collect()
}

fn widen(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

/// Each of `got` within f32 roundoff of a sum of `terms` products, `want` in f64.
fn assert_close<S: Simd>(what: &str, got: &[f32], want: &[f64], terms: usize, g: &ConvGeometry) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let tolerance = 4.0 * f64::from(f32::EPSILON) * (terms + 1) as f64;
    for (i, (&got, &want)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(got) - want).abs() < tolerance,
            "{what}[{i}]: {got} vs {want} ({g:?}, {} lanes)",
            S::F32_LANES
        );
    }
}

/// The forward pass (with a bias and without) and the input gradient in f32 with `simd`'s
/// vectors against the definition in f64 on the same (f32) values.
fn check_with<S: Simd>(simd: S, g: &ConvGeometry) {
    assert!(serves(g), "{g:?}");
    let x = to_f32(values(g.in_shape().iter().product(), 1));
    let weight = to_f32(values(g.out_channels * g.patch_len(), 2));
    let bias = to_f32(values(g.out_channels, 3));
    let out_grad = to_f32(values(g.out_shape().iter().product(), 4));
    let expected = reference(g, &widen(&x), &widen(&weight));
    for bias in [None, Some(&bias[..])] {
        let mut out = vec![f32::NAN; expected.len()];
        let operands = Operands::forward(g, &x, &weight, bias);
        simd.vectorize(|| run(simd, operands, &mut out, &Unwatched));
        let out_vol = g.out_volume();
        let want: Vec<f64> = expected
            .iter()
            .enumerate()
            .map(|(i, &sum)| sum + bias.map_or(0.0, |b| f64::from(b[i / out_vol % b.len()])))
            .collect();
        assert_close::<S>("out", &out, &want, g.in_per_group(), g);
    }
    let zeros = vec![0.0; x.len()];
    let (expected, _) = reference_grads(g, &zeros, &widen(&weight), &widen(&out_grad));
    let mut x_grad = vec![f32::NAN; expected.len()];
    let transposed = transposed_blocks(g, &weight);
    let operands = Operands::data(g, &transposed, &out_grad);
    simd.vectorize(|| run(simd, operands, &mut x_grad, &Unwatched));
    assert_close::<S>("x_grad", &x_grad, &expected, g.out_per_group(), g);
}

/// [`check_with`] on every instruction set this machine has: scalar, AVX2 (forced on an
/// AVX-512 machine too) and AVX-512.
fn check(g: &ConvGeometry) {
    check_with(pulp::Scalar::new(), g);
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(simd) = pulp::x86::V3::try_new() {
            check_with(simd, g);
        }
        if let Some(simd) = pulp::x86::V4::try_new() {
            check_with(simd, g);
        }
    }
}

/// A batch larger than the threads: runs of whole images, strips crossing image boundaries
/// (7 x 7 = 49 positions: no vector width divides it), rows not a multiple of a tile's 6.
#[test]
fn strips_cross_image_boundaries() {
    let threads = rayon::current_num_threads();
    check(&geometry([2 * threads + 1, 5, 1, 7, 7], 13, 1));
    // Single-position images: every column of a strip from another image.
    check(&geometry([3 * threads, 4, 1, 1, 1], 7, 1));
}

/// More input channels than one panel's block of steps: the tiles add block after block.
#[test]
fn reductions_longer_than_a_panel() {
    check(&geometry([2, 300, 1, 3, 5], 20, 1));
}

/// Groups of several channels, and one image on every thread's share of the rows.
#[test]
fn groups_and_a_single_image() {
    check(&geometry([3, 12, 2, 3, 3], 9, 3));
    check(&geometry([1, 40, 1, 9, 11], 70, 2));
}

/// One image with enough work for threads: each group's rows are cut into one run per
/// thread, the last run shorter than the others.
#[test]
fn rows_cut_across_threads() {
    check(&geometry([1, 300, 1, 16, 20], 250, 1));
}

/// The rule takes the pointwise path where the reduction is deep enough and every thread has
/// whole images; the timed choice weighs it everywhere else it serves.
#[test]
fn the_rule_takes_deep_reductions_over_whole_images() {
    let threads = rayon::current_num_threads();
    let deep = geometry([threads, 64, 1, 4, 4], 16, 1);
    assert!(forward_pays(&deep, threads), "64 input channels summed");
    assert!(!data_pays(&deep, threads), "16 output channels summed");
    assert!(data_pays(&geometry([threads, 16, 1, 4, 4], 64, 1), threads));
    if threads > 1 {
        assert!(!forward_pays(
            &geometry([threads - 1, 64, 1, 4, 4], 16, 1),
            threads
        ));
    }
    let strided = ConvOptions::new([1, 2, 2], [0; 3], [1; 3], 1);
    let strided = ConvGeometry::conv(&[threads, 64, 1, 4, 4], &[16, 64, 1, 1, 1], &strided);
    assert!(!serves(&strided) && !forward_pays(&strided, threads));
}
