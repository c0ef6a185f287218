//! The `nn` modules: each equals its functional op, loads records saved from burn-nn's module
//! of the same name (and the other way round), converts to and from it, and validates its
//! config with messages that name the module.

use burn::module::{Module, Param};
use burn::nn::{PaddingConfig1d, PaddingConfig2d, PaddingConfig3d};
use burn::tensor::{Device, Distribution, Int, Tensor};
use burn_convpool::nn::*;
use burn_convpool::*;

use crate::common::{Tolerance, assert_tensors_close};

fn device() -> Device {
    Device::flex()
}

fn random<const D: usize>(dims: [usize; D]) -> Tensor<D> {
    Tensor::random(dims, Distribution::Normal(0.0, 1.0), &device())
}

fn assert_close<const D: usize>(actual: Tensor<D>, expected: Tensor<D>, what: &str) {
    assert_tensors_close(actual, expected, Tolerance::new(1e-5, 1e-5), what);
}

/// Pool indices as a flat list.
fn indices<const D: usize>(indices: Tensor<D, Int>) -> Vec<i64> {
    indices.into_data().iter::<i64>().collect()
}

/// A record file in the temp directory, removed when dropped (also when an assertion fails).
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_file(name: &str) -> TempFile {
    TempFile(std::env::temp_dir().join(format!("burn-convpool-nn-{}-{name}", std::process::id())))
}

#[test]
fn conv_modules_equal_the_functional_ops() {
    let conv = Conv2dConfig::new([4, 6], [3, 2])
        .with_stride([2, 1])
        .with_dilation([1, 2])
        .with_groups(2)
        .with_padding(PaddingConfig2d::Explicit(1, 0, 2, 1))
        .with_padding_mode(PaddingMode::Reflect)
        .init(&device());
    let x = random([2, 4, 9, 8]);
    let options = ConvNdOptions::default()
        .with_stride([2, 1])
        .with_dilation([1, 2])
        .with_groups(2)
        .with_padding([(1, 2), (0, 1)])
        .with_padding_mode(PaddingMode::Reflect);
    let bias = conv.bias.as_ref().map(Param::val);
    let expected = conv2d(x.clone(), conv.weight.val(), bias, options);
    assert_close(conv.forward(x), expected, "Conv2d");

    let up = ConvTranspose1dConfig::new([3, 4], 3)
        .with_stride(2)
        .with_padding(1)
        .with_padding_out(1)
        .init(&device());
    let x = random([2, 3, 5]);
    let options = ConvTransposeNdOptions::default()
        .with_stride([2])
        .with_padding([1])
        .with_padding_out([1]);
    let bias = up.bias.as_ref().map(Param::val);
    let expected = conv_transpose1d(x.clone(), up.weight.val(), bias, options);
    assert_close(up.forward(x), expected, "ConvTranspose1d");
}

#[test]
fn same_padding_keeps_the_size_with_stride_one_and_dilation() {
    let conv = Conv1dConfig::new(2, 3, 4)
        .with_dilation(3)
        .with_padding(PaddingConfig1d::Same)
        .init(&device());
    assert_eq!(conv.forward(random([1, 2, 13])).dims(), [1, 3, 13]);
    let strided = Conv3dConfig::new([2, 2], [3, 3, 3])
        .with_stride([2, 2, 2])
        .with_padding(PaddingConfig3d::Same)
        .init(&device());
    assert_eq!(
        strided.forward(random([1, 2, 5, 6, 7])).dims(),
        [1, 2, 3, 3, 4]
    );
}

#[test]
fn pool_modules_equal_the_functional_ops() {
    let x = random([2, 3, 9, 10]);
    let max = MaxPool2dConfig::new([3, 3])
        .with_strides([2, 2])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_ceil_mode(true)
        .init();
    let options = MaxPoolOptions::new([3, 3])
        .with_stride([2, 2])
        .with_padding([1, 1])
        .with_ceil_mode(true);
    let (out, pool_indices) = max.forward_with_indices(x.clone());
    let (expected, expected_indices) = max_pool2d_with_indices(x.clone(), options);
    assert_close(out, expected, "MaxPool2d");
    assert_eq!(indices(pool_indices), indices(expected_indices));

    let avg = AvgPool2dConfig::new([2, 3])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_divisor_override(Some(5))
        .init();
    let options = AvgPoolNdOptions::new([2, 3])
        .with_padding([1, 1])
        .with_divisor_override(5);
    assert_close(
        avg.forward(x.clone()),
        avg_pool2d(x.clone(), options),
        "AvgPool2d",
    );

    let lp = LpPool2dConfig::new(3.0, [2, 2]).with_stride([1, 2]).init();
    let options = LpPoolOptions::new(3.0, [2, 2]).with_stride([1, 2]);
    // Positive input: with p = 3 a negative window sum has no real cube root (NaN, as PyTorch).
    let positive = x.clone().abs();
    assert_close(
        lp.forward(positive.clone()),
        lp_pool2d(positive, options),
        "LpPool2d",
    );

    let adaptive = AdaptiveMaxPool2dConfig::new([4, 3]).init();
    assert_close(
        adaptive.forward(x.clone()),
        adaptive_max_pool2d(x.clone(), [4, 3]),
        "AdaptiveMaxPool2d",
    );
    let adaptive = AdaptiveAvgPool2dConfig::new([1, 1]).init();
    assert_close(
        adaptive.forward(x.clone()),
        x.clone().mean_dim(3).mean_dim(2),
        "AdaptiveAvgPool2d",
    );

    let samples = Tensor::<3>::from_floats([[[0.3, 0.7]; 3], [[0.1, 0.9]; 3]], &device());
    let fractional = FractionalMaxPool2dConfig::new([2, 2])
        .with_output_size(Some([4, 5]))
        .init();
    let (out, _) = fractional.forward_with_samples(x.clone(), samples.clone());
    let options = FractionalMaxPoolOptions::new([2, 2], FractionalOutput::Size([4, 5]));
    let expected = fractional_max_pool2d(x.clone(), options, Some(samples));
    assert_close(out, expected, "FractionalMaxPool2d");

    let pool = MaxPool2dConfig::new([2, 2]).init();
    let (pooled, indices) = pool.forward_with_indices(x.clone());
    let unpool = MaxUnpool2dConfig::new([2, 2]).init();
    let restored = unpool.forward_with_output_size(pooled.clone(), indices.clone(), [9, 10]);
    let options = MaxUnpoolOptions::new([2, 2]).with_output_size([9, 10]);
    assert_close(
        restored,
        max_unpool2d(pooled, indices, options),
        "MaxUnpool2d",
    );
}

#[test]
fn adaptive_modules_keep_the_dims_given_as_none() {
    // PyTorch's nn.AdaptiveAvgPool2d((None, 7)) and nn.AdaptiveMaxPool3d((2, None, None)).
    let x = random([2, 3, 9, 10]);
    let rows = AdaptiveAvgPool2dConfig::new([None, Some(7)]).init();
    let out = rows.forward(x.clone());
    assert_eq!(out.dims(), [2, 3, 9, 7]);
    assert_close(
        out,
        adaptive_avg_pool2d(x.clone(), [9, 7]),
        "AdaptiveAvgPool2d",
    );
    let columns = AdaptiveMaxPool2dConfig::new([Some(4), None]).init();
    let (out, pool_indices) = columns.forward_with_indices(x.clone());
    let (expected, expected_indices) = adaptive_max_pool2d_with_indices(x, [4, 10]);
    assert_close(out, expected, "AdaptiveMaxPool2d");
    assert_eq!(indices(pool_indices), indices(expected_indices));

    let video = random([1, 2, 4, 5, 6]);
    let pool = AdaptiveMaxPool3dConfig::new([Some(2), None, None]).init();
    assert_close(
        pool.forward(video.clone()),
        adaptive_max_pool3d(video.clone(), [2, 5, 6]),
        "AdaptiveMaxPool3d",
    );
    let pool = AdaptiveAvgPool3dConfig::new([None, Some(1), None]).init();
    assert_eq!(pool.forward(video).dims(), [1, 2, 4, 1, 6]);

    // The config serializes as burn-nn's, with null for a kept dim, and reads back.
    let config = AdaptiveAvgPool2dConfig::new([None, Some(7)]);
    let json: String = config.to_string().split_whitespace().collect();
    assert_eq!(json, r#"{"output_size":[null,7]}"#);
    let theirs = burn::nn::pool::AdaptiveAvgPool2dConfig::new([3, 3]).to_string();
    let read = <AdaptiveAvgPool2dConfig as burn::config::Config>::load_binary(theirs.as_bytes());
    let read = read.unwrap();
    assert_eq!(read.output_size, [Some(3), Some(3)]);
}

#[test]
fn modules_take_unbatched_inputs() {
    let conv = Conv2dConfig::new([3, 4], [3, 3]).init(&device());
    let x = random([3, 6, 6]);
    let batched = conv.forward(x.clone().unsqueeze_dim::<4>(0));
    assert_close(
        conv.forward(x).unsqueeze_dim(0),
        batched,
        "unbatched Conv2d",
    );
    let pool = MaxPool3dConfig::new([2, 2, 2]).init();
    assert_eq!(pool.forward(random([2, 4, 4, 4])).dims(), [2, 2, 2, 2]);
}

/// Save `theirs` with Burn's recorder, load it into `ours` (initialized differently), compare
/// outputs; then the other way round.
macro_rules! round_trip {
    ($name:literal, $theirs:expr, $ours:expr, $x:expr) => {{
        let x = $x;
        let theirs = $theirs;
        let path = temp_file(concat!($name, "-theirs.bpk"));
        theirs
            .clone()
            .save_file(path.0.as_path())
            .expect("save burn-nn module");
        let ours = $ours.load_file(path.0.as_path());
        assert_close(
            ours.forward(x.clone()),
            theirs.forward(x.clone()),
            concat!($name, " burn-nn -> ours"),
        );

        let ours = $ours;
        let path = temp_file(concat!($name, "-ours.bpk"));
        ours.clone()
            .save_file(path.0.as_path())
            .expect("save our module");
        let theirs = $theirs.load_file(path.0.as_path());
        assert_close(
            theirs.forward(x.clone()),
            ours.forward(x),
            concat!($name, " ours -> burn-nn"),
        );
    }};
}

#[test]
fn records_round_trip_between_burn_nn_and_ours() {
    round_trip!(
        "conv1d",
        burn::nn::conv::Conv1dConfig::new(3, 4, 3)
            .with_padding(PaddingConfig1d::Explicit(1, 1))
            .init(&device()),
        Conv1dConfig::new(3, 4, 3)
            .with_padding(PaddingConfig1d::Explicit(1, 1))
            .init(&device()),
        random([2, 3, 10])
    );
    round_trip!(
        "conv2d",
        burn::nn::conv::Conv2dConfig::new([4, 6], [3, 3])
            .with_stride([2, 2])
            .with_groups(2)
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .init(&device()),
        Conv2dConfig::new([4, 6], [3, 3])
            .with_stride([2, 2])
            .with_groups(2)
            .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
            .init(&device()),
        random([2, 4, 9, 9])
    );
    round_trip!(
        "conv3d",
        burn::nn::conv::Conv3dConfig::new([2, 3], [3, 1, 2]).init(&device()),
        Conv3dConfig::new([2, 3], [3, 1, 2]).init(&device()),
        random([1, 2, 4, 3, 5])
    );
    round_trip!(
        "conv_transpose2d",
        burn::nn::conv::ConvTranspose2dConfig::new([4, 2], [3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_padding_out([1, 1])
            .init(&device()),
        ConvTranspose2dConfig::new([4, 2], [3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1])
            .with_padding_out([1, 1])
            .init(&device()),
        random([2, 4, 5, 5])
    );
    round_trip!(
        "conv_transpose3d_no_bias",
        burn::nn::conv::ConvTranspose3dConfig::new([2, 2], [2, 2, 2])
            .with_bias(false)
            .init(&device()),
        ConvTranspose3dConfig::new([2, 2], [2, 2, 2])
            .with_bias(false)
            .init(&device()),
        random([1, 2, 2, 3, 2])
    );
}

#[test]
fn parameters_match_burn_nn_in_name_shape_and_init_range() {
    let theirs = burn::nn::conv::Conv2dConfig::new([6, 8], [3, 5])
        .with_groups(2)
        .init(&device());
    let ours = Conv2dConfig::new([6, 8], [3, 5])
        .with_groups(2)
        .init(&device());
    assert_eq!(ours.weight.dims(), theirs.weight.dims());
    assert_eq!(ours.bias.as_ref().unwrap().dims(), [8]);
    // KaimingUniform(gain 1/sqrt(3)) is PyTorch's U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    let bound = 1.0 / ((6 / 2 * 3 * 5) as f32).sqrt();
    let weight: Vec<f32> = ours.weight.val().into_data().try_to_vec().unwrap();
    assert!(
        weight.iter().all(|w| w.abs() <= bound),
        "weight outside ±{bound}"
    );
    assert!(
        weight.iter().any(|w| w.abs() > bound / 2.0),
        "weight suspiciously small"
    );
    assert_eq!(ours.into_record().len(), 2, "a record of weight and bias");
}

#[test]
fn conversions_to_and_from_burn_nn_keep_the_parameters() {
    let theirs = burn::nn::conv::Conv2dConfig::new([3, 4], [3, 3])
        .with_padding(PaddingConfig2d::Same)
        .init(&device());
    let x = random([1, 3, 7, 7]);
    let expected = theirs.forward(x.clone());
    let ours = Conv2d::from(theirs);
    assert_eq!(ours.padding_mode, PaddingMode::Zeros);
    assert_close(
        ours.forward(x.clone()),
        expected.clone(),
        "From<burn-nn Conv2d>",
    );
    let back = burn::nn::conv::Conv2d::try_from(ours).expect("zeros padding converts back");
    assert_close(back.forward(x), expected, "TryFrom<Conv2d>");

    let config: burn::nn::pool::MaxPool2dConfig =
        MaxPool2dConfig::new([3, 3]).with_strides([2, 2]).into();
    assert_eq!(config.strides, [2, 2]);
    let config = AvgPool1dConfig::from(burn::nn::pool::AvgPool1dConfig::new(4));
    assert_eq!((config.stride, config.divisor_override), (4, None));
}

#[test]
fn settings_burn_nn_lacks_are_refused_not_dropped() {
    let reflect = Conv1dConfig::new(2, 2, 3)
        .with_padding_mode(PaddingMode::Reflect)
        .init(&device());
    let error = burn::nn::conv::Conv1d::try_from(reflect).unwrap_err();
    assert_eq!(
        error.to_string(),
        "Conv1d: burn-nn's module has no padding_mode other than zeros"
    );
    let avg = AvgPool2dConfig::new([2, 2]).with_divisor_override(Some(3));
    let error = burn::nn::pool::AvgPool2dConfig::try_from(avg).unwrap_err();
    assert_eq!(
        error.to_string(),
        "AvgPool2dConfig: burn-nn's module has no divisor_override"
    );
    let kept = AdaptiveAvgPool2dConfig::new([None, Some(7)]).init();
    let error = burn::nn::pool::AdaptiveAvgPool2d::try_from(kept).unwrap_err();
    assert_eq!(
        error.to_string(),
        "AdaptiveAvgPool2d: burn-nn's module has no output_size of None (keep the input size)"
    );
    let sized = AdaptiveAvgPool3dConfig::new([1, 2, 3]);
    let theirs = burn::nn::pool::AdaptiveAvgPool3dConfig::try_from(sized).unwrap();
    assert_eq!(theirs.output_size, [1, 2, 3]);
}

#[test]
#[should_panic(expected = "Conv2d: in_channels (3) must be divisible by groups (2)")]
fn groups_must_divide_the_channels_at_init() {
    Conv2dConfig::new([3, 4], [3, 3])
        .with_groups(2)
        .init(&device());
}

/// Burn draws parameters at the first forward: a weight past memory would abort the process
/// there (a 2^40 kernel: "memory allocation of 4398046511104 bytes failed"), and a kernel whose
/// product overflows wrapped the fan-in. `init` refuses both, naming the module and shape.
#[test]
fn parameters_past_memory_are_refused_at_init() {
    let device = device();
    let message = |init: &dyn Fn()| {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(init))
            .expect_err("init accepted a parameter past memory");
        panic.downcast_ref::<String>().cloned().unwrap_or_default()
    };
    let huge = 1 << 40;
    let cases: [(&dyn Fn(), &str); 4] = [
        (
            &|| drop(Conv1dConfig::new(1, 1, huge).init(&device)),
            "Conv1d: the weight [1, 1, 1099511627776] needs more memory than",
        ),
        (
            &|| drop(Conv2dConfig::new([1, 1], [huge, huge]).init(&device)),
            "Conv2d: the weight [1, 1, 1099511627776, 1099511627776] needs more memory than",
        ),
        (
            // No input channels: the weight is empty, the bias is 4 TB.
            &|| drop(Conv1dConfig::new(0, huge, 3).init(&device)),
            "Conv1d: the bias [1099511627776] needs more memory than",
        ),
        (
            &|| drop(ConvTranspose3dConfig::new([huge, 1], [1, 1, 1]).init(&device)),
            "ConvTranspose3d: the weight [1099511627776, 1, 1, 1, 1] needs more memory than",
        ),
    ];
    for (init, expected) in cases {
        let message = message(init);
        assert!(message.starts_with(expected), "{message}");
    }
    // An empty weight within the limits is still PyTorch's empty layer.
    let empty = Conv2dConfig::new([0, 4], [3, 3]).init(&device);
    assert_eq!(empty.weight.dims(), [4, 0, 3, 3]);
}

#[test]
#[should_panic(expected = "FractionalMaxPool2d: set exactly one of output_size and output_ratio")]
fn fractional_needs_exactly_one_output_setting() {
    FractionalMaxPool2dConfig::new([2, 2]).init();
}

#[test]
fn padding_modes_reject_padding_they_cannot_copy() {
    let options = ConvNdOptions::<1>::default()
        .with_padding([3])
        .with_padding_mode(PaddingMode::Reflect);
    let x = Tensor::<3>::ones([1, 1, 3], &device());
    let weight = Tensor::<3>::ones([1, 1, 3], &device());
    let error = try_conv1d(x.clone(), weight.clone(), None, options).unwrap_err();
    assert_eq!(
        error.to_string(),
        "conv1d: padding_mode \"reflect\" cannot pad 3 on spatial dim 0 of an input of length 3"
    );
    let circular = ConvNdOptions::<1>::default()
        .with_padding([3])
        .with_padding_mode(PaddingMode::Circular);
    assert!(try_conv1d(x.clone(), weight.clone(), None, circular.clone()).is_ok());
    let too_far = circular.with_padding([4]);
    assert!(try_conv1d(x, weight, None, too_far).is_err());
}

#[test]
fn module_gradients_reach_the_parameters() {
    let device = device().autodiff();
    let conv = Conv2dConfig::new([2, 3], [3, 3])
        .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
        .with_padding_mode(PaddingMode::Circular)
        .init(&device);
    let x = Tensor::<4>::ones([1, 2, 4, 4], &device).require_grad();
    let grads = conv.forward(x.clone()).sum().backward();
    // Every tap sees the (circularly padded) all-ones input: d sum / d w = 16 outputs each.
    let weight_grad: Vec<f32> = conv
        .weight
        .grad(&grads)
        .unwrap()
        .into_data()
        .try_to_vec()
        .unwrap();
    assert!(
        weight_grad.iter().all(|&g| (g - 16.0).abs() < 1e-4),
        "{weight_grad:?}"
    );
    // With circular padding every input feeds exactly 9 taps of every output channel.
    let weight_sum: f32 = conv.weight.val().sum_dim(0).sum().into_scalar::<f32>();
    let x_grad: Vec<f32> = x.grad(&grads).unwrap().into_data().try_to_vec().unwrap();
    assert_eq!(x_grad.len(), 32);
    let total: f32 = x_grad.iter().sum();
    assert!(
        (total - 16.0 * weight_sum).abs() < 1e-3,
        "{total} vs {}",
        16.0 * weight_sum
    );
}

/// Bad config fields fail at `init`, naming the module and the field (issue 13, item 6).
#[test]
#[should_panic(expected = "Conv2d: kernel_size must be non-zero, got [0, 3]")]
fn conv_config_rejects_a_zero_kernel() {
    Conv2dConfig::new([3, 4], [0, 3]).init(&device());
}

#[test]
#[should_panic(expected = "ConvTranspose1d: dilation must be non-zero, got [0]")]
fn conv_transpose_config_rejects_a_zero_dilation() {
    ConvTranspose1dConfig::new([3, 4], 3)
        .with_dilation(0)
        .init(&device());
}

#[test]
#[should_panic(expected = "MaxPool2d: stride must be non-zero, got [0, 1]")]
fn max_pool_config_rejects_a_zero_stride() {
    MaxPool2dConfig::new([2, 2]).with_strides([0, 1]).init();
}

#[test]
#[should_panic(expected = "AvgPool1d: kernel_size must be non-zero, got [0]")]
fn avg_pool_config_rejects_a_zero_kernel() {
    AvgPool1dConfig::new(0).init();
}

/// A module built without `init` (a record, a literal) is validated by the op at forward,
/// with the op's message rather than Burn's builder assertion.
#[test]
#[should_panic(expected = "max_pool2d: kernel_size must be non-zero, got [0, 2]")]
fn max_pool_module_without_init_is_validated_at_forward() {
    let pool = MaxPool2d {
        stride: [1, 1],
        kernel_size: [0, 2],
        padding: PaddingConfig2d::Valid,
        dilation: [1, 1],
        ceil_mode: false,
    };
    pool.forward(random([1, 1, 4, 4]));
}

/// No input channels, as PyTorch: an empty weight, a zero bias, and a bias-only output.
#[test]
fn conv_without_input_channels_outputs_its_bias() {
    let conv = Conv2dConfig::new([0, 4], [3, 3]).init(&device());
    assert_eq!(conv.weight.val().dims(), [4, 0, 3, 3]);
    let out = conv.forward(Tensor::<4>::ones([2, 0, 5, 5], &device()));
    assert_eq!(out.dims(), [2, 4, 3, 3]);
    let values: Vec<f32> = out.into_data().try_to_vec().unwrap();
    assert!(values.iter().all(|&v| v == 0.0));
}
