use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use super::*;
use crate::cpu::kernels::conv::reference::{check_passes, reference, values};
use crate::cpu::kernels::finished::Unwatched;

fn geometry(
    x: [usize; 5],
    out_channels: usize,
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    groups: usize,
) -> ConvGeometry {
    let weight = [out_channels, x[1] / groups, kernel[0], kernel[1], kernel[2]];
    let options = ConvOptions::new(stride, padding, [1, 1, 1], groups);
    ConvGeometry::conv(&x, &weight, &options)
}

/// All three passes in f64 against the definitions, for a shape the grids serve (whether or
/// not they pay there).
fn check(geometry: &ConvGeometry) {
    let g = geometry.normalised();
    assert!(serves(&g), "{g:?}");
    check_passes(
        &g,
        21,
        |x, weight, bias| run_forward(&g, x, weight, Some(bias), &Unwatched),
        |weight, out_grad| run_x_backward(&g, weight, out_grad),
        |x, out_grad| run_weight_backward(&g, x, out_grad),
    );
}

#[test]
fn dcgan_shapes_every_padding() {
    // 4x4, stride 2: padding 0 to 3 (3 leaves a whole phase row of padding at each end).
    for pad in 0..4 {
        check(&geometry(
            [2, 3, 1, 8, 8],
            4,
            [1, 4, 4],
            [1, 2, 2],
            [0, pad, pad],
            1,
        ));
    }
}

#[test]
fn inputs_past_the_last_window_and_odd_sizes() {
    // 9 and 7 inputs with 4 taps and stride 2: the last input (and with padding 0 also the
    // one before) is read by no window, and gets a zero gradient.
    check(&geometry(
        [1, 2, 1, 9, 7],
        3,
        [1, 4, 4],
        [1, 2, 2],
        [0, 0, 1],
        1,
    ));
    check(&geometry(
        [2, 2, 1, 5, 11],
        2,
        [1, 2, 6],
        [1, 2, 3],
        [0, 1, 2],
        1,
    ));
    // Three taps per axis: a grid row's views run two past its end.
    check(&geometry(
        [1, 2, 1, 13, 17],
        2,
        [1, 6, 9],
        [1, 2, 3],
        [0, 2, 4],
        1,
    ));
    check(&geometry(
        [1, 2, 7, 8, 9],
        2,
        [3, 6, 6],
        [1, 2, 2],
        [1, 1, 0],
        1,
    ));
}

#[test]
fn groups_batches_and_strides_in_every_rank() {
    check(&geometry(
        [3, 4, 1, 6, 6],
        6,
        [1, 4, 4],
        [1, 2, 2],
        [0, 1, 1],
        2,
    ));
    // 1D, and 3D with a stride-1 axis (its two taps are two grid rows of one phase).
    check(&geometry(
        [2, 3, 1, 1, 13],
        2,
        [1, 1, 6],
        [1, 1, 3],
        [0, 0, 2],
        1,
    ));
    check(&geometry(
        [2, 2, 5, 6, 7],
        3,
        [2, 4, 2],
        [1, 2, 2],
        [1, 1, 0],
        1,
    ));
    check(&geometry(
        [1, 2, 8, 5, 5],
        2,
        [4, 2, 2],
        [2, 2, 2],
        [1, 0, 1],
        1,
    ));
}

#[test]
fn transposed_convolutions_with_output_padding() {
    // `conv_transpose` runs as its adjoint: big side 2 * 5 - 2 + 4 + 1 = 13 (output padding
    // 1), which no window of the adjoint reaches at its end.
    let x = [2, 4, 1, 5, 5];
    let weight = [4, 3, 1, 4, 4];
    let options = ConvTransposeOptions::new([1, 2, 2], [0, 1, 1], [0, 1, 1], [1, 1, 1], 1);
    check(&ConvGeometry::transpose(&x, &weight, &options));
}

#[test]
fn shapes_it_does_not_serve() {
    let g = |kernel, stride| geometry([1, 2, 1, 9, 9], 2, kernel, stride, [0, 0, 0], 1);
    assert!(
        !serves(&g([1, 3, 3], [1, 2, 2]).normalised()),
        "3 taps, stride 2"
    );
    assert!(
        !serves(&g([1, 4, 4], [1, 1, 1]).normalised()),
        "stride 1: im2col or Winograd"
    );
    let dilated = ConvGeometry {
        dilation: [1, 2, 2],
        ..g([1, 2, 2], [1, 2, 2])
    };
    assert!(!serves(&dilated.normalised()), "dilation");
}

/// The weight gradient does not take a non-finite input (a dropped column would multiply it
/// by zero; it takes the lowered path); the input gradient runs with any weight
/// (`conv::x_backward` sums again what the padding made of one that is not finite).
#[test]
fn non_finite_inputs_take_the_lowered_path() {
    // DCGAN's down-sampling layer, where the grids pay.
    let g = geometry([2, 64, 1, 32, 32], 32, [1, 4, 4], [1, 2, 2], [0, 1, 1], 1);
    let x = values(g.in_shape().iter().product(), 31);
    let weight = values(g.weight_shape().iter().product(), 32);
    let out_grad = values(g.out_shape().iter().product(), 33);
    assert!(takes_weight_pass(&x));
    assert_eq!(weight_backward(&g, &x, &out_grad).len(), weight.len());
    let mut bad_weight = weight.clone();
    bad_weight[5] = f64::INFINITY;
    assert_eq!(x_backward(&g, &bad_weight, &out_grad).len(), x.len());
    let mut bad_x = x.clone();
    bad_x[7] = f64::NAN;
    assert!(!takes_weight_pass(&bad_x));
    // The forward pass pairs values exactly as the definition does, so it takes them: an
    // infinite input reaches the outputs whose windows hold it, as infinities, and no other.
    let mut inf_x = x.clone();
    inf_x[9] = f64::INFINITY;
    let out = forward(&g, &inf_x, &weight, None, &Unwatched);
    let expected = reference(&g, &inf_x, &weight);
    for (i, (a, b)) in out.iter().zip(&expected).enumerate() {
        let same = (a.is_infinite() && a == b) || (a - b).abs() < 1e-10;
        assert!(same, "forward[{i}]: {a} vs {b}");
    }
    assert!(out.iter().any(|v| v.is_infinite()));
}

#[test]
fn where_it_pays() {
    let transpose = |x: [usize; 5], out_channels: usize| {
        let options = ConvTransposeOptions::new([1, 2, 2], [0, 1, 1], [0, 0, 0], [1, 1, 1], 1);
        ConvGeometry::transpose(&x, &[x[1], out_channels, 1, 4, 4], &options)
    };
    // DCGAN's generator at 16x16 inputs (as its adjoint) and its discriminator at 32x32.
    assert!(fits(&transpose([8, 128, 1, 16, 16], 64)));
    assert!(fits(&geometry(
        [8, 64, 1, 32, 32],
        128,
        [1, 4, 4],
        [1, 2, 2],
        [0, 1, 1],
        1
    )));
    assert!(fits(&geometry(
        [8, 16, 1, 32, 32],
        32,
        [1, 4, 4],
        [1, 2, 2],
        [0, 1, 1],
        1
    )));
    // Too small a plane: at 8x8 outputs the grids compute 1.27 points per output.
    assert!(!fits(&transpose([8, 256, 1, 8, 8], 128)));
    // Its last layer's 3 image channels, its first layer's depth of 3 x 4.
    assert!(!fits(&transpose([8, 64, 1, 32, 32], 3)));
    assert!(!fits(&geometry(
        [8, 3, 1, 64, 64],
        64,
        [1, 4, 4],
        [1, 2, 2],
        [0, 1, 1],
        1
    )));
    // A large volume: its grids would hold the whole image, where im2col works in tiles.
    let volume = geometry(
        [1, 64, 64, 256, 256],
        64,
        [4, 4, 4],
        [2, 2, 2],
        [1, 1, 1],
        1,
    );
    assert!(!fits(&volume));
    assert!(fits(&geometry(
        [1, 32, 32, 64, 64],
        64,
        [4, 4, 4],
        [2, 2, 2],
        [1, 1, 1],
        1
    )));
    // One tap: nothing to save.
    assert!(!fits(&geometry(
        [8, 64, 1, 56, 56],
        128,
        [1, 2, 2],
        [1, 2, 2],
        [0, 0, 0],
        1
    )));
}
