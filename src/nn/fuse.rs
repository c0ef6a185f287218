//! A batch norm folded into the convolution before it, for inference: PyTorch's
//! `torch.nn.utils.fusion.fuse_conv_bn_eval`.
//!
//! In inference a batch norm is a per-channel affine map, `y * scale + shift` with
//! `scale = gamma / sqrt(running_var + epsilon)`, so the conv that feeds it can absorb it: each
//! output channel's weights are multiplied by its `scale`, and its bias becomes
//! `(bias - running_mean) * scale + beta` (PyTorch's formula and order of operations).

use burn::module::Param;
use burn::nn::BatchNorm;
use burn::tensor::Tensor;

use super::{Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d};
use crate::spec::{SpecError, SpecErrorKind, SpecResult};

/// A convolution that can absorb the batch norm after it: [`Conv1d`], [`Conv2d`], [`Conv3d`] and
/// the transposed convolutions, grouped or not.
pub trait FuseBatchNorm: sealed::Fold {}

impl<C: sealed::Fold> FuseBatchNorm for C {}

mod sealed {
    use burn::tensor::Tensor;

    /// What folding needs of a conv; private, so only this crate's convs fold.
    pub trait Fold: Sized {
        /// The weight's dims seen as `[groups, lead, out_per_group, trail]`, where output
        /// channel `g * out_per_group + j` owns the slice `[g, .., j, ..]`.
        fn out_view(&self) -> [usize; 4];

        /// This conv with output channel `o`'s weights multiplied by `scale[o]` and its bias
        /// set to `bias` (the parameters keep their ids).
        fn scaled(self, scale: Tensor<1>, bias: Tensor<1>) -> Self;

        /// The bias, if the conv has one.
        fn bias_value(&self) -> Option<Tensor<1>>;

        /// The activation the conv applies to its output, if any.
        fn activation(&self) -> Option<crate::spec::Activation>;
    }
}

/// `conv` followed by `bn` in inference mode, as one conv with a bias: PyTorch's
/// `fuse_conv_bn_eval` (with `transpose=True` for a transposed conv, which here also folds
/// into grouped transposed convs).
///
/// The fused conv computes `bn.forward(conv.forward(x))` with `bn`'s running statistics, as
/// a batch norm does outside training; train with the two modules and fuse them for export.
///
/// For conv → batch norm → activation in one pass at inference, fuse, then set the fused
/// conv's `activation`.
///
/// # Panics
///
/// If `bn`'s feature count differs from `conv`'s output channels, or `conv` applies an
/// activation; [`try_fuse_conv_bn`] returns the error instead.
///
/// ```
/// use burn::nn::BatchNormConfig;
/// use burn::tensor::{Device, Distribution, Tensor};
/// use burn_convpool::nn::{Conv2dConfig, fuse_conv_bn};
///
/// let device = Device::flex();
/// let conv = Conv2dConfig::new([3, 8], [3, 3]).init(&device);
/// let bn = BatchNormConfig::new(8).init(&device);
/// let x = Tensor::<4>::random([2, 3, 10, 10], Distribution::Default, &device);
/// let unfused = bn.forward(conv.forward(x.clone()));
/// let fused = fuse_conv_bn(conv, &bn);
/// fused.forward(x).into_data().assert_approx_eq::<f32>(&unfused.into_data(), Default::default());
/// ```
pub fn fuse_conv_bn<C: FuseBatchNorm>(conv: C, bn: &BatchNorm) -> C {
    try_fuse_conv_bn(conv, bn).unwrap_or_else(|error| panic!("{error}"))
}

/// [`fuse_conv_bn`], or an error naming the sizes when `bn`'s feature count differs from the
/// conv's output channels, or the activation when the conv applies one (the batch norm comes
/// after it; set the activation on the fused conv instead).
pub fn try_fuse_conv_bn<C: FuseBatchNorm>(conv: C, bn: &BatchNorm) -> SpecResult<C> {
    let [groups, _, out_per_group, _] = conv.out_view();
    check_fold(
        "fuse_conv_bn",
        groups * out_per_group,
        conv.activation(),
        bn,
    )?;
    // Untracked, as PyTorch folds under `no_grad`: the fused conv's parameters are new leaves.
    // (`detach` alone keeps a parameter's value requiring a gradient.)
    let (scale, bias) = folded_affine(
        conv.bias_value().map(untracked),
        untracked(bn.gamma.val()),
        untracked(bn.beta.val()),
        bn,
    );
    Ok(conv.scaled(scale, bias))
}

/// Refuse a conv and batch norm that `op` cannot fold or fuse: a conv that applies an
/// activation (before the batch norm), or output channels other than the batch norm's features.
pub(super) fn check_fold(
    op: &'static str,
    out_channels: usize,
    conv_activation: Option<crate::spec::Activation>,
    bn: &BatchNorm,
) -> SpecResult<()> {
    if let Some(activation) = conv_activation {
        let kind = SpecErrorKind::FoldAfterActivation {
            activation: activation.name(),
        };
        return Err(SpecError::new(op, kind));
    }
    let [features] = bn.gamma.dims();
    if features != out_channels {
        let kind = SpecErrorKind::Mismatch {
            what: "conv out_channels vs batch norm num_features",
            expected: out_channels,
            actual: features,
        };
        return Err(SpecError::new(op, kind));
    }
    Ok(())
}

/// The fold's per-output-channel `scale = gamma / sqrt(running_var + epsilon)` and fused bias
/// `(bias - running_mean) * scale + beta`, from `bias`, `gamma` and `beta` as given (tracked
/// or not; the running statistics never are).
fn folded_affine(
    bias: Option<Tensor<1>>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    bn: &BatchNorm,
) -> (Tensor<1>, Tensor<1>) {
    let device = gamma.device();
    let mean = untracked(bn.running_mean.value());
    let var = untracked(bn.running_var.value());
    let scale = gamma * var.add_scalar(bn.epsilon).sqrt().recip();
    let bias = bias
        .map(|bias| bias.to_device(&device).cast(mean.dtype()))
        .unwrap_or_else(|| mean.zeros_like());
    let bias = (bias - mean) * scale.clone() + beta;
    (scale, bias)
}

/// The weight and bias of `conv` with `bn` (inference mode) folded in, computed from the
/// parameters' tracked values: a batch norm whose statistics are frozen, trained through.
///
/// # Panics
/// Where [`try_fuse_conv_bn`] returns an error; callers check first.
pub(super) fn folded_params<const W: usize, C: FuseBatchNorm>(
    conv: &C,
    weight: Tensor<W>,
    bias: Option<Tensor<1>>,
    bn: &BatchNorm,
) -> (Tensor<W>, Tensor<1>) {
    let (scale, bias) = folded_affine(bias, bn.gamma.val(), bn.beta.val(), bn);
    let bias = bias.to_device(&weight.device()).cast(weight.dtype());
    (scale_out_channels(weight, scale, conv.out_view()), bias)
}

/// `weight * scale` along the output channels, the weight seen as `view` (see
/// [`sealed::Fold::out_view`]).
fn scale_out_channels<const D: usize>(
    weight: Tensor<D>,
    scale: Tensor<1>,
    view: [usize; 4],
) -> Tensor<D> {
    let dims = weight.dims();
    let [groups, _, out_per_group, _] = view;
    let blocks: Tensor<4> = weight.reshape(view);
    let scale = scale.to_device(&blocks.device()).cast(blocks.dtype());
    let scale: Tensor<4> = scale.reshape([groups, 1, out_per_group, 1]);
    (blocks * scale).reshape(dims)
}

/// The conv's bias parameter holding `value`, on the weight's device and in its dtype (a new
/// parameter if the conv had no bias).
fn fused_bias<const D: usize>(
    weight: &Param<Tensor<D>>,
    bias: Option<Param<Tensor<1>>>,
    value: Tensor<1>,
) -> Option<Param<Tensor<1>>> {
    let value = value.to_device(&weight.device()).cast(weight.dtype());
    Some(match bias {
        Some(param) => param.map(|old| value.set_require_grad(old.is_require_grad())),
        None => Param::from_tensor(value),
    })
}

/// `value` out of any autodiff graph, requiring no gradient.
fn untracked<const D: usize>(value: Tensor<D>) -> Tensor<D> {
    value.set_require_grad(false)
}

/// `fold` applied to a parameter's value, the result a leaf that requires a gradient where the
/// value did.
fn refold<const D: usize>(
    value: Tensor<D>,
    fold: impl FnOnce(Tensor<D>) -> Tensor<D>,
) -> Tensor<D> {
    let require_grad = value.is_require_grad();
    fold(untracked(value)).set_require_grad(require_grad)
}

/// `Fold` for convs whose weight, seen as [`sealed::Fold::out_view`], is `$view`.
macro_rules! fold {
    ($($module:ident),* => |$conv:ident| $view:expr) => {$(
        impl sealed::Fold for $module {
            fn out_view(&self) -> [usize; 4] {
                let $conv = self;
                $view
            }

            fn scaled(mut self, scale: Tensor<1>, bias: Tensor<1>) -> Self {
                let view = self.out_view();
                self.bias = fused_bias(&self.weight, self.bias, bias);
                self.weight = self
                    .weight
                    .map(|weight| refold(weight, |weight| scale_out_channels(weight, scale, view)));
                self
            }

            fn bias_value(&self) -> Option<Tensor<1>> {
                self.bias.as_ref().map(Param::val)
            }

            fn activation(&self) -> Option<crate::spec::Activation> {
                self.activation
            }
        }
    )*};
}

// A conv weight is `[out, in / groups, *kernel]`: one block of every output channel.
fold!(Conv1d, Conv2d, Conv3d => |conv| {
    let dims = conv.weight.dims();
    [1, 1, dims[0], dims[1..].iter().product()]
});
// A transposed conv weight is `[in, out / groups, *kernel]`: input channel `i` of group `g`
// feeds output channel `g * out / groups + j` through `weight[i, j]`.
fold!(ConvTranspose1d, ConvTranspose2d, ConvTranspose3d => |conv| {
    let dims = conv.weight.dims();
    let groups = conv.groups;
    [groups, dims[0] / groups, dims[1], dims[2..].iter().product()]
});
