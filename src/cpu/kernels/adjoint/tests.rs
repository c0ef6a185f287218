use burn::tensor::ops::ConvOptions;

use crate::cpu::kernels::adjoint;
use crate::cpu::kernels::conv::reference::*;
use crate::cpu::kernels::conv::*;
use crate::spec::ConvGeometry;

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
    // 16 output channels take the direct path: in a block of AVX2's vectors, in the spatial
    // tiles with AVX-512's (half a block), both passes; 32 fill a block everywhere.
    assert_eq!(rule(16, 16, 1, Pass::Forward), Algorithm::Direct);
    assert_eq!(rule(16, 16, 1, Pass::Weight), Algorithm::Direct);
    assert_eq!(rule(32, 32, 1, Pass::Forward), Algorithm::Direct);
    assert_eq!(rule(32, 32, 1, Pass::Weight), Algorithm::Direct);
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
