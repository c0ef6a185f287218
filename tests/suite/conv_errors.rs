//! Every validation rule of the conv family: the `try_` twin returns a [`SpecError`] naming the
//! op and the values, and the plain function panics with the same message.

use burn::tensor::{Device, Tensor};
use burn_convpool::*;

fn ones<const D: usize>(dims: [usize; D]) -> Tensor<D> {
    Tensor::ones(dims, &Device::flex())
}

fn conv2d_error(x: [usize; 4], weight: [usize; 4], options: ConvNdOptions<2>) -> String {
    try_conv2d(ones(x), ones(weight), None, options)
        .expect_err("invalid input must be rejected")
        .to_string()
}

#[test]
fn groups_must_divide_in_channels() {
    let message = conv2d_error(
        [1, 4, 5, 5],
        [6, 1, 3, 3],
        ConvNdOptions::default().with_groups(3),
    );
    assert_eq!(
        message,
        "conv2d: in_channels (4) must be divisible by groups (3)"
    );
}

#[test]
fn groups_must_divide_out_channels() {
    let message = conv2d_error(
        [1, 4, 5, 5],
        [3, 2, 3, 3],
        ConvNdOptions::default().with_groups(2),
    );
    assert_eq!(
        message,
        "conv2d: out_channels (weight.shape[0]) (3) must be divisible by groups (2)"
    );
}

#[test]
fn weight_must_match_channels_and_groups() {
    let message = conv2d_error(
        [1, 4, 5, 5],
        [4, 4, 3, 3],
        ConvNdOptions::default().with_groups(2),
    );
    assert_eq!(
        message,
        "conv2d: in_channels (x.shape[1]) vs weight.shape[1] * groups: expected 8, got 4"
    );
}

#[test]
fn bias_must_match_out_channels() {
    let error = try_conv1d(
        ones([1, 2, 5]),
        ones([3, 2, 3]),
        Some(ones([4])),
        ConvNdOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv1d: bias length vs out_channels: expected 3, got 4"
    );
}

#[test]
fn zero_stride_and_dilation() {
    let message = conv2d_error(
        [1, 1, 5, 5],
        [1, 1, 3, 3],
        ConvNdOptions::default().with_stride([0, 1]),
    );
    assert_eq!(message, "conv2d: stride must be non-zero, got [0, 1]");
    let error = try_conv3d(
        ones([1, 1, 4, 4, 4]),
        ones([1, 1, 2, 2, 2]),
        None,
        ConvNdOptions::default().with_dilation([1, 0, 1]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv3d: dilation must be non-zero, got [1, 0, 1]"
    );
    assert!(matches!(
        error.kind,
        SpecErrorKind::Zero {
            param: "dilation",
            ..
        }
    ));
}

#[test]
fn kernel_larger_than_padded_input() {
    let message = conv2d_error(
        [1, 1, 5, 2],
        [1, 1, 3, 3],
        ConvNdOptions::default().with_padding([(0, 0), (0, 0)]),
    );
    assert_eq!(
        message,
        "conv2d: kernel extent 3 (dilation * (kernel - 1) + 1) is larger than the padded input 2 \
         on spatial dim 1"
    );
    // Dilation counts: a 2-tap kernel with dilation 5 spans 6.
    let error = try_conv1d(
        ones([1, 1, 4]),
        ones([1, 1, 2]),
        None,
        ConvNdOptions::default().with_dilation([5]),
    )
    .unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::KernelTooLarge {
            kernel_extent: 6,
            padded_len: 4,
            ..
        }
    ));
}

#[test]
fn wrong_rank() {
    let error = try_conv2d(
        ones([1, 1, 1, 5, 5]),
        ones([1, 1, 3, 3]),
        None,
        ConvNdOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv2d: x must have rank [3, 4], got rank 5"
    );
    let error = try_conv_transpose1d(
        ones([5]),
        ones([1, 1, 3]),
        None,
        ConvTransposeNdOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose1d: x must have rank [2, 3], got rank 1"
    );
}

#[test]
fn same_padding_needs_stride_one() {
    let options = ConvNdOptions::default()
        .with_padding(Padding::Same)
        .with_stride([2, 1]);
    let message = conv2d_error([1, 1, 5, 5], [1, 1, 3, 3], options);
    assert_eq!(
        message,
        "conv2d: padding \"same\" needs stride 1 on every dim, got stride [2, 1]"
    );
}

#[test]
fn output_padding_below_max_of_stride_and_dilation() {
    let options = ConvTransposeNdOptions::default()
        .with_stride([2, 2])
        .with_padding_out([0, 2]);
    let error =
        try_conv_transpose2d(ones([1, 1, 3, 3]), ones([1, 1, 3, 3]), None, options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose2d: output_padding (2) must be smaller than max(stride, dilation) (2) on \
         spatial dim 1"
    );
    // Dilation raises the limit, as in PyTorch.
    let options = ConvTransposeNdOptions::default()
        .with_dilation([3])
        .with_padding_out([2]);
    let out = try_conv_transpose1d(ones([1, 1, 3]), ones([1, 1, 2]), None, options).unwrap();
    assert_eq!(out.dims(), [1, 1, 3 + 3 + 2]);
}

#[test]
fn output_size_must_be_reachable() {
    // min = (4 - 1) * 2 - 2 + 3 = 7, max = min + stride - 1 = 8.
    let x = || ones([1, 2, 4, 4]);
    let weight = || ones([2, 1, 3, 3]);
    let options = |size| {
        ConvTransposeNdOptions::default()
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_output_size([8, size])
    };
    let error = try_conv_transpose2d(x(), weight(), None, options(9)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose2d: output_size 9 on spatial dim 1 is outside the valid range [7, 8]"
    );
    let error = try_conv_transpose2d(x(), weight(), None, options(6)).unwrap_err();
    assert!(matches!(
        error.kind,
        SpecErrorKind::OutputSize {
            requested: 6,
            min: 7,
            max: 8,
            ..
        }
    ));
    let out = try_conv_transpose2d(x(), weight(), None, options(7)).unwrap();
    assert_eq!(out.dims(), [1, 1, 8, 7]);
}

#[test]
fn transpose_channels_must_match_weight() {
    let error = try_conv_transpose2d(
        ones([1, 3, 4, 4]),
        ones([2, 1, 3, 3]),
        None,
        ConvTransposeNdOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose2d: in_channels (x.shape[1]) vs weight.shape[0]: expected 2, got 3"
    );
}

#[test]
fn transpose_output_must_not_be_empty() {
    let options = ConvTransposeNdOptions::default().with_padding([2]);
    let error = try_conv_transpose1d(ones([1, 1, 1]), ones([1, 1, 3]), None, options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose1d: the output would be empty on spatial dim 0"
    );
}

#[test]
#[should_panic(expected = "conv2d: in_channels (4) must be divisible by groups (3)")]
fn panicking_twin_panics_with_the_same_message() {
    conv2d(
        ones([1, 4, 5, 5]),
        ones([6, 1, 3, 3]),
        None,
        ConvNdOptions::default().with_groups(3),
    );
}

#[test]
fn unbatched_input_keeps_its_rank() {
    let out = conv2d(
        ones([3, 6, 6]),
        ones([2, 3, 3, 3]),
        None,
        ConvNdOptions::default(),
    );
    assert_eq!(out.dims(), [2, 4, 4]);
    let values = out.into_data().try_to_vec::<f32>().unwrap();
    assert!(values.iter().all(|&v| v == 27.0));
}

/// An empty batch (or no input channels) computes, as in PyTorch; an empty spatial dim or no
/// output channels is a typed error. These once panicked inside Burn's `reshape`, which reads
/// a 0 as "keep this dim".
#[test]
fn empty_batch_in_empty_out_empty_spatial_rejected() {
    let device = Device::flex().autodiff();
    let x = Tensor::<4>::zeros([0, 3, 8, 8], &device).require_grad();
    let weight = Tensor::<4>::ones([4, 3, 3, 3], &device).require_grad();
    let bias = Tensor::<1>::ones([4], &device).require_grad();
    let out = conv2d(
        x.clone(),
        weight.clone(),
        Some(bias.clone()),
        ConvNdOptions::default(),
    );
    assert_eq!(out.dims(), [0, 4, 6, 6]);
    let grads = out.sum().backward();
    assert_eq!(x.grad(&grads).map(|g| g.dims()), Some([0, 3, 8, 8]));
    let weight_grad = weight.grad(&grads).unwrap();
    assert_eq!(weight_grad.dims(), [4, 3, 3, 3]);
    assert!(weight_grad.into_data().iter::<f32>().all(|v| v == 0.0));
    // No input channels, unbatched: the bias alone (zeros here), shaped as PyTorch's.
    let out = conv2d(
        ones([0, 8, 8]),
        ones([4, 0, 3, 3]),
        None,
        ConvNdOptions::default(),
    );
    assert_eq!(out.dims(), [4, 6, 6]);
    let transposed = conv_transpose2d(
        ones([0, 3, 4, 4]),
        ones([3, 2, 3, 3]),
        None,
        ConvTransposeNdOptions::default(),
    );
    assert_eq!(transposed.dims(), [0, 2, 6, 6]);

    assert_eq!(
        conv2d_error([1, 3, 0, 8], [4, 3, 3, 3], ConvNdOptions::default()),
        "conv2d: input [1, 3, 0, 8] has an empty dim other than the batch (only the batch may \
         be 0)"
    );
    // Padding does not make an empty axis valid.
    let error = try_conv1d(
        ones([1, 2, 0]),
        ones([4, 2, 3]),
        None,
        ConvNdOptions::default().with_padding([1]),
    )
    .unwrap_err();
    assert!(matches!(error.kind, SpecErrorKind::EmptyInput { .. }));
    assert_eq!(
        conv2d_error([1, 3, 8, 8], [0, 3, 3, 3], ConvNdOptions::default()),
        "conv2d: out_channels (weight.shape[0]) must be non-zero, got [0]"
    );
}

/// Sizes near `usize::MAX` never wrap (issue 13, item 3): a parameter past `isize::MAX`, a
/// padded length or an output count past what memory can address is a typed error.
#[test]
fn shape_arithmetic_never_overflows() {
    let huge = usize::MAX / 2 + 1;
    let error = try_conv1d(
        ones([1, 1, 4]),
        ones([1, 1, 2]),
        None,
        ConvNdOptions::default().with_stride([usize::MAX]),
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv1d: stride 18446744073709551615 is above the largest size 9223372036854775807"
    );
    let error = try_conv1d(
        ones([1, 1, 4]),
        ones([1, 1, 2]),
        None,
        ConvNdOptions::default().with_padding([(huge, huge)]),
    )
    .unwrap_err();
    assert_eq!(
        error.kind,
        SpecErrorKind::TooLarge {
            what: "padded length on spatial dim 0".into(),
            value: 2 * huge as u128 + 4,
        }
    );
    // A dilation whose extent would wrap to a small number.
    let error = try_conv1d(
        ones([1, 1, 4]),
        ones([1, 1, 3]),
        None,
        ConvNdOptions::default().with_dilation([huge - 1]),
    )
    .unwrap_err();
    assert!(matches!(error.kind, SpecErrorKind::KernelTooLarge { .. }));
    // A transposed output whose element count overflows usize.
    let options = ConvTransposeNdOptions::<3>::default().with_stride([1 << 21; 3]);
    let error = try_conv_transpose3d(ones([1, 1, 4, 4, 4]), ones([1, 1, 1, 1, 1]), None, options)
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose3d: the output [1, 1, 6291457, 6291457, 6291457] has more elements than \
         memory can address"
    );
    let options = ConvTransposeNdOptions::<1>::default().with_stride([huge]);
    let error = try_conv_transpose1d(ones([1, 1, 4]), ones([1, 1, 1]), None, options).unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::TooLarge { .. }),
        "{error}"
    );
}

/// A huge stride is valid and exact: one window.
#[test]
fn huge_stride_gives_one_window() {
    let x = Tensor::<3>::from_floats([[[1.0, 2.0, 3.0, 4.0]]], &Device::flex());
    let weight = Tensor::<3>::from_floats([[[1.0, 10.0]]], &Device::flex());
    let options = ConvNdOptions::default().with_stride([usize::MAX / 2]);
    let out = conv1d(x, weight, None, options);
    assert_eq!(out.into_data().try_to_vec::<f32>().unwrap(), [21.0]);
}

/// An output that fits the address space but not the machine is a typed error on a CPU
/// device, not an abort in the allocator (issue 13, item 4).
#[test]
fn outputs_beyond_memory_are_typed_errors() {
    let error = try_conv1d(
        ones([1, 1, 4]),
        ones([1, 1, 1]),
        None,
        ConvNdOptions::default().with_padding([1 << 42]),
    )
    .unwrap_err();
    assert!(
        matches!(error.kind, SpecErrorKind::OutOfMemory { bytes, .. } if bytes > 1 << 44),
        "{error}"
    );
    // A padding mode copies the input into its padded form first: a huge padding under a
    // huge stride leaves one output but a padded copy past memory (the allocator aborted).
    let options = ConvNdOptions::default()
        .with_stride([1 << 44])
        .with_padding([(1 << 42, 2)])
        .with_padding_mode(PaddingMode::Replicate);
    let error = try_conv1d(ones([2, 3, 4]), ones([1, 3, 1]), None, options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv1d: padding_mode 'replicate' copies the input into [2, 3, 4398046511110], more \
         than this machine can allocate"
    );
    let options = ConvTransposeNdOptions::<1>::default().with_stride([1 << 42]);
    let error = try_conv_transpose1d(ones([1, 1, 4]), ones([1, 1, 1]), None, options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv_transpose1d: the output [1, 1, 13194139533313] needs 52776558133252 bytes, more \
         than this machine can allocate"
    );
}
