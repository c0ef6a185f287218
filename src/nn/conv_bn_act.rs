//! `ConvBnAct1d`, `ConvBnAct2d`, `ConvBnAct3d`: a convolution, a batch norm and an activation
//! as one block, the unit of every ResNet. Training runs the conv, which sums each channel's
//! statistics as it stores its output (cuDNN's "ConvGenStats"; a conv with a bias runs
//! [`batch_norm_act_train`](crate::batch_norm_act_train) after it instead), then the batch
//! norm and the activation in one pass over that output, and their backward in two;
//! inference folds the batch norm into the conv and applies the activation as the conv stores
//! its output: one pass.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{BatchNorm, BatchNormConfig};
use burn::tensor::{Device, Tensor};

use super::fuse::{check_fold, folded_params};
use super::{Conv1d, Conv1dConfig, Conv2d, Conv2dConfig, Conv3d, Conv3dConfig};
use crate::functional::conv::try_conv;
use crate::functional::conv_batch_norm::try_conv_batch_norm_act;
use crate::functional::try_batch_norm_act_train;
use crate::spec::{
    Activation, BatchNormActOptions, SpecError, SpecErrorKind, SpecResult, check_input_rank,
};

/// The running statistics after a training step, as PyTorch's batch norm updates them:
/// `(1 - momentum) * running + momentum * batch`, the batch's variance unbiased
/// (`variance * M / (M - 1)` over `M` values per channel). An empty batch changes nothing.
fn update_running(bn: &BatchNorm, mean: Tensor<1>, variance: Tensor<1>, per_channel: usize) {
    if per_channel == 0 {
        return;
    }
    let momentum = bn.momentum;
    let device = mean.device();
    let unbiased = variance.mul_scalar(per_channel as f64 / (per_channel - 1) as f64);
    let blend = |running: Tensor<1>, batch: Tensor<1>| {
        let running = running.to_device(&device).cast(batch.dtype());
        running
            .mul_scalar(1.0 - momentum)
            .add(batch.mul_scalar(momentum))
            .detach()
    };
    bn.running_mean
        .update(blend(bn.running_mean.value_sync(), mean));
    bn.running_var
        .update(blend(bn.running_var.value_sync(), unbiased));
}

/// Values each channel of a `(N, C, *spatial)` tensor holds: `N * spatial`.
fn values_per_channel(dims: &[usize]) -> usize {
    dims[0] * dims[2..].iter().product::<usize>()
}

macro_rules! conv_bn_act {
    (
        $(#[$doc:meta])*
        $module:ident, $config:ident, $conv:ident, $conv_config:ident, n = $n:literal, w = $w:literal
    ) => {
        #[doc = concat!("Configuration of a [`", stringify!($module), "`]: the conv's, plus the batch norm's epsilon and momentum and the activation.")]
        #[derive(Config, Debug)]
        pub struct $config {
            /// The convolution (its `activation` must be `None`: the block's comes after the
            /// batch norm).
            pub conv: $conv_config,
            /// The batch norm's epsilon (burn-nn's and PyTorch's default).
            #[config(default = 1e-5)]
            pub epsilon: f64,
            /// The batch norm's momentum (burn-nn's and PyTorch's default).
            #[config(default = 0.1)]
            pub momentum: f64,
            /// The activation after the batch norm.
            #[config(default = "Some(Activation::Relu)")]
            pub activation: Option<Activation>,
        }

        impl $config {
            #[doc = concat!("Initialize a [`", stringify!($module), "`] on `device`.")]
            ///
            /// # Panics
            /// Where the conv's or batch norm's config would, or the conv applies an
            /// activation.
            pub fn init(&self, device: &Device) -> $module {
                let conv = self.conv.init(device);
                let channels = conv.weight.dims()[0];
                let bn = BatchNormConfig::new(channels)
                    .with_epsilon(self.epsilon)
                    .with_momentum(self.momentum)
                    .init(device);
                $module::new(conv, bn, self.activation)
            }
        }

        $(#[$doc])*
        #[derive(Module, Debug)]
        pub struct $module {
            /// The convolution (no activation of its own).
            pub conv: $conv,
            /// The batch norm after it (burn-nn's, so records and PyTorch checkpoints of a
            /// `conv`/`bn` pair load as they are).
            pub bn: BatchNorm,
            /// The activation after the batch norm (not part of the record).
            #[module(skip)]
            pub activation: Option<Activation>,
        }

        impl $module {
            /// The block `activation(bn(conv(x)))` from an existing pair.
            ///
            /// # Panics
            /// If `conv` applies an activation or its output channels differ from `bn`'s
            /// features; [`Self::try_new`] returns the error instead.
            pub fn new(conv: $conv, bn: BatchNorm, activation: Option<Activation>) -> Self {
                Self::try_new(conv, bn, activation).unwrap_or_else(|error| panic!("{error}"))
            }

            /// [`Self::new`], returning the error instead of panicking.
            pub fn try_new(
                conv: $conv,
                bn: BatchNorm,
                activation: Option<Activation>,
            ) -> SpecResult<Self> {
                check_fold(stringify!($module), conv.weight.dims()[0], conv.activation, &bn)?;
                Ok(Self {
                    conv,
                    bn,
                    activation,
                })
            }

            /// The conv and the batch norm, for a model that uses them apart.
            pub fn into_parts(self) -> ($conv, BatchNorm) {
                (self.conv, self.bn)
            }

            /// Applies the block to `(batch, channels_in, *spatial)`: in training (an autodiff
            /// device and the batch norm's `training` flag, burn-nn's rule) with the batch's
            /// statistics, updating the running ones; else with the running statistics folded
            /// into the conv, in one pass.
            ///
            /// # Panics
            /// When the input does not fit the block; the message names the block and values.
            pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
                self.try_forward(x).unwrap_or_else(|error| panic!("{error}"))
            }

            /// [`Self::forward`], returning the error instead of panicking.
            pub fn try_forward<const D: usize>(&self, x: Tensor<D>) -> SpecResult<Tensor<D>> {
                Self::try_forward_pair(&self.conv, &self.bn, self.activation, x)
            }

            /// [`Self::forward`] on a conv and a batch norm a model holds apart (burn-nn's
            /// layout, a PyTorch port's field names): the one-line change from
            /// `activation(bn.forward(conv.forward(x)))`.
            ///
            /// # Panics
            /// When the pair or the input does not fit; the message names the block.
            pub fn forward_pair<const D: usize>(
                conv: &$conv,
                bn: &BatchNorm,
                activation: Option<Activation>,
                x: Tensor<D>,
            ) -> Tensor<D> {
                Self::try_forward_pair(conv, bn, activation, x)
                    .unwrap_or_else(|error| panic!("{error}"))
            }

            /// [`Self::forward_pair`], returning the error instead of panicking.
            pub fn try_forward_pair<const D: usize>(
                conv: &$conv,
                bn: &BatchNorm,
                activation: Option<Activation>,
                x: Tensor<D>,
            ) -> SpecResult<Tensor<D>> {
                const OP: &str = stringify!($module);
                check_fold(OP, conv.weight.dims()[0], conv.activation, bn)?;
                // A batch norm needs the batch axis (PyTorch's `BatchNorm2d` refuses a 3D
                // input).
                if !check_input_rank(OP, $n, D)? {
                    let kind = SpecErrorKind::Rank {
                        arg: "x",
                        expected: vec![$n + 2],
                        actual: D,
                    };
                    return Err(SpecError::new(OP, kind));
                }
                let mut options = conv.options(&x);
                let weight = conv.weight.val();
                let bias = conv.bias.as_ref().map(|bias| bias.val());
                if x.device().is_autodiff() && bn.training.is_enabled() {
                    let bn_options = BatchNormActOptions {
                        epsilon: bn.epsilon,
                        activation,
                    };
                    let named = |error: SpecError| SpecError { op: OP, ..error };
                    let (gamma, beta) = (bn.gamma.val(), bn.beta.val());
                    let (output, mean, variance, per_channel) = match bias {
                        // The conv sums the statistics as it stores its output, and the batch
                        // norm reads that output once.
                        None => {
                            let result = try_conv_batch_norm_act::<$n, D, $w>(
                                OP,
                                x,
                                weight,
                                [gamma, beta],
                                options,
                                bn_options,
                            )?;
                            let per_channel = values_per_channel(&result.output.dims());
                            (result.output, result.mean, result.variance, per_channel)
                        }
                        // A bias moves the mean alone; the batch norm sums the biased output.
                        Some(bias) => {
                            let y = try_conv::<$n, D, $w>(OP, x, weight, Some(bias), options)?;
                            let per_channel = values_per_channel(&y.dims());
                            let result = try_batch_norm_act_train(y, gamma, beta, bn_options)
                                .map_err(named)?;
                            (result.output, result.mean, result.variance, per_channel)
                        }
                    };
                    update_running(bn, mean, variance, per_channel);
                    Ok(output)
                } else {
                    let (weight, bias) = folded_params(conv, weight, bias, bn);
                    options.activation = activation;
                    try_conv::<$n, D, $w>(OP, x, weight, Some(bias), options)
                }
            }
        }
    };
}

conv_bn_act!(
    /// A 1D convolution, a batch norm and an activation: PyTorch's
    /// `nn.Sequential(nn.Conv1d(...), nn.BatchNorm1d(...), nn.ReLU())` as one block.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::{Conv1dConfig, ConvBnAct1dConfig};
    /// let device = Device::flex().autodiff();
    /// let block = ConvBnAct1dConfig::new(Conv1dConfig::new(2, 4, 3)).init(&device);
    /// let out = block.forward(Tensor::<3>::ones([2, 2, 9], &device));
    /// assert_eq!(out.dims(), [2, 4, 7]);
    /// ```
    ConvBnAct1d, ConvBnAct1dConfig, Conv1d, Conv1dConfig, n = 1, w = 3
);

conv_bn_act!(
    /// A 2D convolution, a batch norm and an activation: PyTorch's
    /// `nn.Sequential(nn.Conv2d(...), nn.BatchNorm2d(...), nn.ReLU())` as one block, the
    /// record a `conv`/`bn` pair's, so a checkpoint of that pair loads into it.
    ///
    /// ```
    /// use burn::nn::{BatchNormConfig, PaddingConfig2d};
    /// use burn::tensor::{Device, Distribution, Tensor};
    /// use burn_convpool::Activation;
    /// use burn_convpool::nn::{Conv2dConfig, ConvBnAct2d};
    ///
    /// let device = Device::flex().autodiff();
    /// let conv = Conv2dConfig::new([3, 8], [3, 3])
    ///     .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
    ///     .with_bias(false)
    ///     .init(&device);
    /// let bn = BatchNormConfig::new(8).init(&device);
    /// let block = ConvBnAct2d::new(conv, bn, Some(Activation::Relu));
    /// let x = Tensor::<4>::random([4, 3, 8, 8], Distribution::Default, &device);
    /// let out = block.forward(x);
    /// assert_eq!(out.dims(), [4, 8, 8, 8]);
    /// assert!(out.min().into_scalar::<f32>() >= 0.0);
    /// ```
    ConvBnAct2d, ConvBnAct2dConfig, Conv2d, Conv2dConfig, n = 2, w = 4
);

conv_bn_act!(
    /// A 3D convolution, a batch norm and an activation: PyTorch's
    /// `nn.Sequential(nn.Conv3d(...), nn.BatchNorm3d(...), nn.ReLU())` as one block.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::nn::{Conv3dConfig, ConvBnAct3dConfig};
    /// let device = Device::flex().autodiff();
    /// let block = ConvBnAct3dConfig::new(Conv3dConfig::new([2, 4], [3, 3, 3])).init(&device);
    /// let out = block.forward(Tensor::<5>::ones([2, 2, 4, 4, 4], &device));
    /// assert_eq!(out.dims(), [2, 4, 2, 2, 2]);
    /// ```
    ConvBnAct3d, ConvBnAct3dConfig, Conv3d, Conv3dConfig, n = 3, w = 5
);
