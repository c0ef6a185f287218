//! `conv{1,2,3}d` and `conv_transpose{1,2,3}d` over `burn::Tensor`: validate at rank 3 (options
//! and sizes lifted), call the backend at the caller's rank (`lift.rs`).

use burn::backend::Dispatch;
use burn::tensor::Tensor;
use burn::tensor::ops::ConvOptions;

use crate::backend::ConvPoolBackend;
use crate::spec::{
    ConvGeometry, ConvNdOptions, ConvTransposeNdOptions, PaddingMode, SpecResult, check_conv,
    check_conv_transpose, check_float_dtype, check_input_rank, check_same_dtype, lifted_dims,
    shapes,
};

use super::device::{
    check_device_dtype, check_kernel_values, check_output_memory, check_padded_input_memory,
};
use super::lift::{DispatchTensor, InputShape, lift_input};

/// The input in a float dtype the ops compute in, and the weight and bias in the same one.
fn check_dtypes<const D: usize, const W: usize>(
    op: &'static str,
    x: &Tensor<D>,
    weight: &Tensor<W>,
    bias: Option<&Tensor<1>>,
) -> SpecResult<()> {
    let dtype = x.dtype();
    check_float_dtype(op, dtype)?;
    // Before any of Burn's kernels run in it (a padding mode's copy).
    check_device_dtype(op, &x.device(), dtype)?;
    check_same_dtype(op, "weight", dtype, weight.dtype())?;
    match bias {
        Some(bias) => check_same_dtype(op, "bias", dtype, bias.dtype()),
        None => Ok(()),
    }
}

/// A conv call's operands, validated and lifted as the backend's primitives take them.
struct ConvCall<const D: usize> {
    x: DispatchTensor,
    weight: DispatchTensor,
    options: ConvOptions<3>,
    shape: InputShape<D>,
}

/// Validates a conv call (shapes, options, dtypes, memory, the padding mode's copy) and lifts
/// its operands.
fn prepare_conv<const N: usize, const D: usize, const W: usize>(
    op: &'static str,
    x: Tensor<D>,
    weight: Tensor<W>,
    bias: Option<&Tensor<1>>,
    options: &ConvNdOptions<N>,
) -> SpecResult<ConvCall<D>> {
    let batched = check_input_rank(op, N, D)?;
    check_dtypes(op, &x, &weight, bias)?;
    let (x, shape) = lift_input::<N, D>(x, batched);
    let weight_dims = weight.dims();
    let bias_len = bias.map(|bias| bias.dims()[0]);
    let mut lifted = check_conv(op, &shape.dims, &weight_dims, bias_len, options)?;
    let weight_dims = lifted_dims(&weight_dims);
    let out_dims = shapes::conv(&x.dims(), &weight_dims, &lifted);
    check_output_memory(op, &x, &shape, out_dims, None)?;
    let x = match options.padding_mode {
        PaddingMode::Zeros => x,
        mode => {
            check_padded_input_memory(op, &x, &shape, lifted.padding, mode.name())?;
            x.pad(core::mem::take(&mut lifted.padding), mode)
        }
    };
    let geometry = ConvGeometry::conv(&x.dims(), &weight_dims, &lifted);
    check_kernel_values(op, &x.device(), geometry.normalised().named_values())?;
    Ok(ConvCall {
        x: x.into_dispatch(),
        weight: shape.operand(weight),
        options: lifted,
        shape,
    })
}

pub(crate) fn try_conv<const N: usize, const D: usize, const W: usize>(
    op: &'static str,
    x: Tensor<D>,
    weight: Tensor<W>,
    bias: Option<Tensor<1>>,
    options: ConvNdOptions<N>,
) -> SpecResult<Tensor<D>> {
    let call = prepare_conv::<N, D, W>(op, x, weight, bias.as_ref(), &options)?;
    let (x, weight, lifted) = (call.x, call.weight, call.options);
    let activation = options.activation;
    let out = match bias {
        None => <Dispatch as ConvPoolBackend>::conv(x, weight, lifted, activation),
        Some(bias) => <Dispatch as ConvPoolBackend>::conv_with_bias(
            x,
            weight,
            bias.into_dispatch(),
            lifted,
            activation,
        ),
    };
    Ok(call.shape.restore(out))
}

/// A conv without bias or activation and each output channel's mean and biased variance
/// (`conv_moments`): `(out, mean, variance)`, the statistics detached.
pub(crate) fn try_conv_moments<const N: usize, const D: usize, const W: usize>(
    op: &'static str,
    x: Tensor<D>,
    weight: Tensor<W>,
    options: ConvNdOptions<N>,
) -> SpecResult<(Tensor<D>, Tensor<1>, Tensor<1>)> {
    let call = prepare_conv::<N, D, W>(op, x, weight, None, &options)?;
    let (out, mean, variance) =
        <Dispatch as ConvPoolBackend>::conv_moments(call.x, call.weight, call.options);
    Ok((
        call.shape.restore(out),
        Tensor::from_dispatch(mean),
        Tensor::from_dispatch(variance),
    ))
}

pub(crate) fn try_conv_transpose<const N: usize, const D: usize, const W: usize>(
    op: &'static str,
    x: Tensor<D>,
    weight: Tensor<W>,
    bias: Option<Tensor<1>>,
    options: ConvTransposeNdOptions<N>,
) -> SpecResult<Tensor<D>> {
    let batched = check_input_rank(op, N, D)?;
    check_dtypes(op, &x, &weight, bias.as_ref())?;
    let (x, shape) = lift_input::<N, D>(x, batched);
    let weight_dims = weight.dims();
    let bias_len = bias.as_ref().map(|bias| bias.dims()[0]);
    let activation = options.activation;
    let options = check_conv_transpose(op, &shape.dims, &weight_dims, bias_len, &options)?;
    let weight_dims = lifted_dims(&weight_dims);
    let out_dims = shapes::conv_transpose(&x.dims(), &weight_dims, &options);
    check_output_memory(op, &x, &shape, out_dims, None)?;
    let geometry = ConvGeometry::transpose(&x.dims(), &weight_dims, &options);
    check_kernel_values(op, &x.device(), geometry.normalised().named_values())?;
    let weight = shape.operand(weight);
    let out = match bias {
        None => <Dispatch as ConvPoolBackend>::conv_transpose(
            x.into_dispatch(),
            weight,
            options,
            activation,
        ),
        Some(bias) => <Dispatch as ConvPoolBackend>::conv_transpose_with_bias(
            x.into_dispatch(),
            weight,
            bias.into_dispatch(),
            options,
            activation,
        ),
    };
    Ok(shape.restore(out))
}

macro_rules! conv_op {
    (
        $(#[$doc:meta])*
        $name:ident, $try_name:ident, $generic:ident, $options:ident, n = $n:literal, w = $w:literal
    ) => {
        $(#[$doc])*
        ///
        /// # Panics
        /// When the shapes or options are invalid; the message names the op and the values.
        /// See the `try_` twin to get a [`SpecError`](crate::SpecError) instead.
        pub fn $name<const D: usize>(
            x: Tensor<D>,
            weight: Tensor<$w>,
            bias: Option<Tensor<1>>,
            options: impl Into<$options<$n>>,
        ) -> Tensor<D> {
            $try_name(x, weight, bias, options).unwrap_or_else(|error| panic!("{error}"))
        }

        #[doc = concat!("[`", stringify!($name), "`], returning the validation error instead of panicking.")]
        pub fn $try_name<const D: usize>(
            x: Tensor<D>,
            weight: Tensor<$w>,
            bias: Option<Tensor<1>>,
            options: impl Into<$options<$n>>,
        ) -> SpecResult<Tensor<D>> {
            $generic::<$n, D, $w>(stringify!($name), x, weight, bias, options.into())
        }
    };
}

conv_op!(
    /// 1D convolution, as PyTorch's `F.conv1d`.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, L)` or unbatched `(C_in, L)`
    /// - `weight`: `(C_out, C_in / groups, k)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, L_out)` (unbatched: `(C_out, L_out)`)
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvNdOptions, conv1d};
    /// let device = Device::flex();
    /// let x = Tensor::<3>::ones([2, 4, 10], &device);
    /// let weight = Tensor::<3>::ones([6, 2, 3], &device);
    /// let out = conv1d(x, weight, None, ConvNdOptions::default().with_groups(2));
    /// assert_eq!(out.dims(), [2, 6, 8]);
    /// ```
    conv1d, try_conv1d, try_conv, ConvNdOptions, n = 1, w = 3
);

conv_op!(
    /// 2D convolution, as PyTorch's `F.conv2d`, with asymmetric, `"same"` and `"valid"` padding.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, H, W)` or unbatched `(C_in, H, W)`
    /// - `weight`: `(C_out, C_in / groups, kH, kW)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, H_out, W_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvNdOptions, Padding, conv2d};
    /// let device = Device::flex();
    /// let x = Tensor::<4>::ones([1, 3, 8, 8], &device);
    /// let weight = Tensor::<4>::ones([5, 3, 3, 3], &device);
    /// let bias = Tensor::<1>::zeros([5], &device);
    /// let out = conv2d(x, weight, Some(bias), ConvNdOptions::default().with_padding(Padding::Same));
    /// assert_eq!(out.dims(), [1, 5, 8, 8]);
    /// ```
    conv2d, try_conv2d, try_conv, ConvNdOptions, n = 2, w = 4
);

conv_op!(
    /// 3D convolution, as PyTorch's `F.conv3d`, with asymmetric padding.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, D, H, W)` or unbatched `(C_in, D, H, W)`
    /// - `weight`: `(C_out, C_in / groups, kD, kH, kW)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, D_out, H_out, W_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvNdOptions, conv3d};
    /// let device = Device::flex();
    /// let x = Tensor::<5>::ones([1, 2, 4, 4, 4], &device);
    /// let weight = Tensor::<5>::ones([3, 2, 2, 2, 2], &device);
    /// let out = conv3d(x, weight, None, ConvNdOptions::default().with_stride([2, 2, 2]));
    /// assert_eq!(out.dims(), [1, 3, 2, 2, 2]);
    /// ```
    conv3d, try_conv3d, try_conv, ConvNdOptions, n = 3, w = 5
);

conv_op!(
    /// 1D transposed convolution, as PyTorch's `F.conv_transpose1d`.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, L)` or unbatched `(C_in, L)`
    /// - `weight`: `(C_in, C_out / groups, k)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, (L - 1) * stride - 2 * padding + dilation * (k - 1) + padding_out + 1)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvTransposeNdOptions, conv_transpose1d};
    /// let device = Device::flex();
    /// let x = Tensor::<3>::ones([1, 2, 5], &device);
    /// let weight = Tensor::<3>::ones([2, 3, 3], &device);
    /// let out = conv_transpose1d(x, weight, None, ConvTransposeNdOptions::default().with_stride([2]));
    /// assert_eq!(out.dims(), [1, 3, 11]);
    /// ```
    conv_transpose1d, try_conv_transpose1d, try_conv_transpose, ConvTransposeNdOptions, n = 1, w = 3
);

conv_op!(
    /// 2D transposed convolution, as PyTorch's `F.conv_transpose2d`; `output_size` picks the
    /// output padding as `nn.ConvTranspose2d.forward(x, output_size)` does.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, H, W)` or unbatched `(C_in, H, W)`
    /// - `weight`: `(C_in, C_out / groups, kH, kW)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, H_out, W_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvTransposeNdOptions, conv_transpose2d};
    /// let device = Device::flex();
    /// let x = Tensor::<4>::ones([1, 4, 4, 4], &device);
    /// let weight = Tensor::<4>::ones([4, 2, 3, 3], &device);
    /// let options = ConvTransposeNdOptions::default()
    ///     .with_stride([2, 2])
    ///     .with_padding([1, 1])
    ///     .with_output_size([8, 8]);
    /// let out = conv_transpose2d(x, weight, None, options);
    /// assert_eq!(out.dims(), [1, 2, 8, 8]);
    /// ```
    conv_transpose2d, try_conv_transpose2d, try_conv_transpose, ConvTransposeNdOptions, n = 2, w = 4
);

conv_op!(
    /// 3D transposed convolution, as PyTorch's `F.conv_transpose3d`.
    ///
    /// # Shapes
    /// - `x`: `(N, C_in, D, H, W)` or unbatched `(C_in, D, H, W)`
    /// - `weight`: `(C_in, C_out / groups, kD, kH, kW)`; `bias`: `(C_out)`
    /// - output: `(N, C_out, D_out, H_out, W_out)`
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_convpool::{ConvTransposeNdOptions, conv_transpose3d};
    /// let device = Device::flex();
    /// let x = Tensor::<5>::ones([1, 2, 2, 2, 2], &device);
    /// let weight = Tensor::<5>::ones([2, 1, 2, 2, 2], &device);
    /// let out = conv_transpose3d(x, weight, None, ConvTransposeNdOptions::default().with_stride([2, 2, 2]));
    /// assert_eq!(out.dims(), [1, 1, 4, 4, 4]);
    /// ```
    conv_transpose3d, try_conv_transpose3d, try_conv_transpose, ConvTransposeNdOptions, n = 3, w = 5
);
