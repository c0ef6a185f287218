//! `conv{1,2,3}d_batch_norm_act_train`: a convolution without bias, then a training-mode batch
//! norm and an activation (PyTorch's `act(F.batch_norm(F.conv2d(x, w), training=True))`), the
//! block of every ResNet. The conv sums the batch norm's statistics as it stores its output
//! (`conv_moments`), and the batch norm reads that output once.

use burn::tensor::Tensor;

use crate::spec::{
    BatchNormActOptions, ConvNdOptions, SpecError, SpecErrorKind, SpecResult, check_input_rank,
};

use super::batch_norm::{BatchNormActOutput, try_batch_norm_act_given};
use super::conv::try_conv_moments;

/// The block over rank `D` with `N` spatial axes and a rank-`W` weight: the conv options'
/// activation must be `None` (the block's is `options.activation`, after the batch norm), and
/// the input batched (a batch norm needs the batch axis).
pub(crate) fn try_conv_batch_norm_act<const N: usize, const D: usize, const W: usize>(
    op: &'static str,
    x: Tensor<D>,
    weight: Tensor<W>,
    [gamma, beta]: [Tensor<1>; 2],
    conv: ConvNdOptions<N>,
    options: BatchNormActOptions,
) -> SpecResult<BatchNormActOutput<D>> {
    if let Some(activation) = conv.activation {
        let kind = SpecErrorKind::ActivationBeforeBatchNorm {
            activation: activation.name(),
        };
        return Err(SpecError::new(op, kind));
    }
    if !check_input_rank(op, N, D)? {
        let kind = SpecErrorKind::Rank {
            arg: "x",
            expected: vec![N + 2],
            actual: D,
        };
        return Err(SpecError::new(op, kind));
    }
    let (y, mean, variance) = try_conv_moments::<N, D, W>(op, x, weight, conv)?;
    let statistics = [mean.clone(), variance.clone()];
    let output = try_batch_norm_act_given(op, y, [gamma, beta], statistics, options)?;
    Ok(BatchNormActOutput {
        output,
        mean,
        variance,
    })
}

macro_rules! conv_batch_norm_op {
    (
        $(#[$doc:meta])*
        $name:ident, $try_name:ident, n = $n:literal, w = $w:literal
    ) => {
        $(#[$doc])*
        ///
        /// # Panics
        /// When the shapes or options are invalid (the conv's, the batch norm's, an activation
        /// in the conv options, an unbatched input); the message names the op and the values.
        /// See the `try_` twin to get a [`SpecError`](crate::SpecError) instead.
        pub fn $name<const D: usize>(
            x: Tensor<D>,
            weight: Tensor<$w>,
            gamma: Tensor<1>,
            beta: Tensor<1>,
            conv: impl Into<ConvNdOptions<$n>>,
            options: BatchNormActOptions,
        ) -> BatchNormActOutput<D> {
            $try_name(x, weight, gamma, beta, conv, options)
                .unwrap_or_else(|error| panic!("{error}"))
        }

        #[doc = concat!("[`", stringify!($name), "`], returning the validation error instead of panicking.")]
        pub fn $try_name<const D: usize>(
            x: Tensor<D>,
            weight: Tensor<$w>,
            gamma: Tensor<1>,
            beta: Tensor<1>,
            conv: impl Into<ConvNdOptions<$n>>,
            options: BatchNormActOptions,
        ) -> SpecResult<BatchNormActOutput<D>> {
            try_conv_batch_norm_act::<$n, D, $w>(
                stringify!($name),
                x,
                weight,
                [gamma, beta],
                conv.into(),
                options,
            )
        }
    };
}

conv_batch_norm_op!(
    /// [`conv1d`](crate::conv1d) without bias, then [`batch_norm_act_train`](crate::batch_norm_act_train)
    /// over its output, the statistics summed as the conv stores it.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, L)`; `weight`: `(C_out, C_in / groups, k)`; `gamma`, `beta`: `(C_out)`
    /// - output: `(N, C_out, L_out)`; mean and variance: `(C_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{BatchNormActOptions, ConvNdOptions, conv1d_batch_norm_act_train};
    /// let device = Device::flex();
    /// let x = Tensor::<3>::ones([2, 3, 9], &device);
    /// let weight = Tensor::<3>::ones([4, 3, 3], &device);
    /// let (gamma, beta) = (Tensor::ones([4], &device), Tensor::zeros([4], &device));
    /// let options = BatchNormActOptions::default();
    /// let result =
    ///     conv1d_batch_norm_act_train(x, weight, gamma, beta, ConvNdOptions::default(), options);
    /// assert_eq!(result.output.dims(), [2, 4, 7]);
    /// assert_eq!(result.mean.into_data().to_vec::<f32>().unwrap(), [9.0; 4]);
    /// ```
    conv1d_batch_norm_act_train, try_conv1d_batch_norm_act_train, n = 1, w = 3
);

conv_batch_norm_op!(
    /// [`conv2d`](crate::conv2d) without bias, then [`batch_norm_act_train`](crate::batch_norm_act_train)
    /// over its output, the statistics summed as the conv stores it: PyTorch's
    /// `act(F.batch_norm(F.conv2d(x, weight, None, ...), None, None, gamma, beta,
    /// training=True, eps=epsilon))`, with the batch's mean and biased variance returned (a
    /// module updates its running statistics from them, as [`nn::ConvBnAct2d`](crate::nn::ConvBnAct2d)
    /// does). Gradients reach `x`, `weight`, `gamma` and `beta`.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, H, W)`; `weight`: `(C_out, C_in / groups, kH, kW)`;
    ///   `gamma`, `beta`: `(C_out)`
    /// - output: `(N, C_out, H_out, W_out)`; mean and variance: `(C_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Distribution, Tensor};
    /// use burn_convpool::{
    ///     Activation, BatchNormActOptions, ConvNdOptions, Padding, conv2d_batch_norm_act_train,
    /// };
    /// let device = Device::flex().autodiff();
    /// let x = Tensor::<4>::random([4, 3, 8, 8], Distribution::Default, &device).require_grad();
    /// let weight = Tensor::<4>::random([8, 3, 3, 3], Distribution::Default, &device);
    /// let (gamma, beta) = (Tensor::ones([8], &device), Tensor::zeros([8], &device));
    /// let conv = ConvNdOptions::default().with_padding(Padding::Same);
    /// let options = BatchNormActOptions::default().with_activation(Activation::Relu);
    /// let result = conv2d_batch_norm_act_train(x.clone(), weight, gamma, beta, conv, options);
    /// assert_eq!(result.output.dims(), [4, 8, 8, 8]);
    /// assert!(result.output.clone().min().into_scalar::<f32>() >= 0.0);
    /// let grads = result.output.sum().backward();
    /// assert_eq!(x.grad(&grads).unwrap().dims(), [4, 3, 8, 8]);
    /// ```
    conv2d_batch_norm_act_train, try_conv2d_batch_norm_act_train, n = 2, w = 4
);

conv_batch_norm_op!(
    /// [`conv3d`](crate::conv3d) without bias, then [`batch_norm_act_train`](crate::batch_norm_act_train)
    /// over its output, the statistics summed as the conv stores it.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, D, H, W)`; `weight`: `(C_out, C_in / groups, kD, kH, kW)`;
    ///   `gamma`, `beta`: `(C_out)`
    /// - output: `(N, C_out, D_out, H_out, W_out)`; mean and variance: `(C_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{BatchNormActOptions, ConvNdOptions, conv3d_batch_norm_act_train};
    /// let device = Device::flex();
    /// let x = Tensor::<5>::ones([2, 2, 4, 4, 4], &device);
    /// let weight = Tensor::<5>::ones([3, 2, 3, 3, 3], &device);
    /// let (gamma, beta) = (Tensor::ones([3], &device), Tensor::zeros([3], &device));
    /// let options = BatchNormActOptions::default();
    /// let result =
    ///     conv3d_batch_norm_act_train(x, weight, gamma, beta, ConvNdOptions::default(), options);
    /// assert_eq!(result.output.dims(), [2, 3, 2, 2, 2]);
    /// ```
    conv3d_batch_norm_act_train, try_conv3d_batch_norm_act_train, n = 3, w = 5
);
