//! `impl_cpu_backend!`: the `ConvPoolBackend` impl of a CPU backend, every method lifting its
//! operands to rank 5 and forwarding to the [`HostTensors`](super::host::HostTensors) adapters
//! (`conv_ops.rs` through `conv_routing`, `pool_ops.rs`), its results reshaped back to their
//! operands' rank (the host adapters write contiguous tensors, so both reshapes are metadata).

use burn::backend::{
    Backend, TensorMetadata,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::Shape;

use crate::spec::{lifted_dims, lowered_dims};

/// A float operand `(N, C, *spatial)` lifted to rank 5.
pub(crate) fn lift<B: Backend>(tensor: FloatTensor<B>) -> FloatTensor<B> {
    let dims = lifted_dims(&tensor.shape());
    B::float_reshape(tensor, Shape::from(dims.to_vec()))
}

/// An index operand lifted to rank 5.
pub(crate) fn lift_int<B: Backend>(tensor: IntTensor<B>) -> IntTensor<B> {
    let dims = lifted_dims(&tensor.shape());
    B::int_reshape(tensor, Shape::from(dims.to_vec()))
}

/// A rank-5 float result back at `rank`.
pub(crate) fn lower<B: Backend>(tensor: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    let dims = lowered_dims(lifted_dims(&tensor.shape()), rank);
    B::float_reshape(tensor, Shape::from(dims))
}

/// A rank-5 index result back at `rank`.
pub(crate) fn lower_int<B: Backend>(tensor: IntTensor<B>, rank: usize) -> IntTensor<B> {
    let dims = lowered_dims(lifted_dims(&tensor.shape()), rank);
    B::int_reshape(tensor, Shape::from(dims))
}

/// Implement `ConvPoolBackend` for a CPU backend that implements [`HostTensors`](super::host::HostTensors).
macro_rules! impl_cpu_backend {
    ($backend:ty) => {
        impl $crate::backend::ConvPoolBackend for $backend {
            fn conv(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
                activation: Option<$crate::spec::Activation>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::conv_routing::conv::<$crate::cpu::conv_ops::HostConv<Self>>(
                    lift::<Self>(x),
                    lift::<Self>(weight),
                    None,
                    &options,
                    activation,
                );
                lower::<Self>(out, rank)
            }
            fn conv_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
                activation: Option<$crate::spec::Activation>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::conv_routing::conv::<$crate::cpu::conv_ops::HostConv<Self>>(
                    lift::<Self>(x),
                    lift::<Self>(weight),
                    Some(bias),
                    &options,
                    activation,
                );
                lower::<Self>(out, rank)
            }
            fn conv_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = out_grad.shape().num_dims();
                let out =
                    $crate::conv_routing::conv_x_backward::<$crate::cpu::conv_ops::HostConv<Self>>(
                        lift::<Self>(weight),
                        lift::<Self>(out_grad),
                        x_size,
                        &options,
                    );
                lower::<Self>(out, rank)
            }
            fn conv_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::conv_routing::conv_weight_backward::<
                    $crate::cpu::conv_ops::HostConv<Self>,
                >(
                    lift::<Self>(x),
                    lift::<Self>(out_grad),
                    kernel_size,
                    &options,
                );
                lower::<Self>(out, rank)
            }
            fn conv_bias_backward(
                out_grad: Self::FloatTensorPrimitive,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::conv_ops::conv_bias_backward::<Self>(lift::<Self>(out_grad))
            }
            fn conv_transpose(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
                activation: Option<$crate::spec::Activation>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out =
                    $crate::conv_routing::conv_transpose::<$crate::cpu::conv_ops::HostConv<Self>>(
                        lift::<Self>(x),
                        lift::<Self>(weight),
                        None,
                        &options,
                        activation,
                    );
                lower::<Self>(out, rank)
            }
            fn conv_transpose_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
                activation: Option<$crate::spec::Activation>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out =
                    $crate::conv_routing::conv_transpose::<$crate::cpu::conv_ops::HostConv<Self>>(
                        lift::<Self>(x),
                        lift::<Self>(weight),
                        Some(bias),
                        &options,
                        activation,
                    );
                lower::<Self>(out, rank)
            }
            fn activate(
                x: Self::FloatTensorPrimitive,
                activation: $crate::spec::Activation,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::conv_ops::activate::<Self>(x, activation)
            }
            fn activation_backward(
                saved: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                activation: $crate::spec::Activation,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::conv_ops::activation_backward::<Self>(saved, out_grad, activation)
            }
            fn batch_norm_act(
                x: Self::FloatTensorPrimitive,
                gamma: Self::FloatTensorPrimitive,
                beta: Self::FloatTensorPrimitive,
                epsilon: f64,
                activation: Option<$crate::spec::Activation>,
            ) -> (
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
            ) {
                $crate::cpu::norm_ops::batch_norm_act::<Self>(x, gamma, beta, epsilon, activation)
            }
            fn batch_norm_act_backward(
                x: Self::FloatTensorPrimitive,
                gamma: Self::FloatTensorPrimitive,
                beta: Self::FloatTensorPrimitive,
                mean: Self::FloatTensorPrimitive,
                variance: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                epsilon: f64,
                activation: Option<$crate::spec::Activation>,
            ) -> (
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
            ) {
                $crate::cpu::norm_ops::batch_norm_act_backward::<Self>(
                    x, gamma, beta, mean, variance, out_grad, epsilon, activation,
                )
            }
            fn conv_moments(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> (
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
                Self::FloatTensorPrimitive,
            ) {
                let rank = x.shape().num_dims();
                let (out, mean, variance) = $crate::cpu::conv_ops::conv_moments::<Self>(
                    lift::<Self>(x),
                    lift::<Self>(weight),
                    &options,
                );
                (lower::<Self>(out, rank), mean, variance)
            }
            fn batch_norm_act_given(
                x: Self::FloatTensorPrimitive,
                gamma: Self::FloatTensorPrimitive,
                beta: Self::FloatTensorPrimitive,
                mean: Self::FloatTensorPrimitive,
                variance: Self::FloatTensorPrimitive,
                epsilon: f64,
                activation: Option<$crate::spec::Activation>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::norm_ops::batch_norm_act_given::<Self>(
                    x,
                    [gamma, beta],
                    [mean, variance],
                    epsilon,
                    activation,
                )
            }
            fn conv_transpose_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = out_grad.shape().num_dims();
                let out = $crate::conv_routing::conv_transpose_x_backward::<
                    $crate::cpu::conv_ops::HostConv<Self>,
                >(
                    lift::<Self>(weight),
                    lift::<Self>(out_grad),
                    x_size,
                    &options,
                );
                lower::<Self>(out, rank)
            }
            fn conv_transpose_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::conv_routing::conv_transpose_weight_backward::<
                    $crate::cpu::conv_ops::HostConv<Self>,
                >(
                    lift::<Self>(x),
                    lift::<Self>(out_grad),
                    kernel_size,
                    &options,
                );
                lower::<Self>(out, rank)
            }
            fn max_pool_with_indices(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::MaxPoolOptions<3>,
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                let rank = x.shape().num_dims();
                let (out, indices) = $crate::cpu::pool_ops::max_pool_with_indices::<Self>(
                    lift::<Self>(x),
                    &options,
                    indices_dtype,
                );
                (lower::<Self>(out, rank), lower_int::<Self>(indices, rank))
            }
            fn max_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
                x_size: [usize; 3],
                _windows: $crate::spec::WindowRule,
            ) -> Self::FloatTensorPrimitive {
                let rank = out_grad.shape().num_dims();
                let out = $crate::cpu::pool_ops::max_pool_backward::<Self>(
                    lift::<Self>(out_grad),
                    lift_int::<Self>(indices),
                    x_size,
                );
                lower::<Self>(out, rank)
            }
            fn avg_pool(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::AvgPoolNdOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::cpu::pool_ops::avg_pool::<Self>(lift::<Self>(x), &options);
                lower::<Self>(out, rank)
            }
            fn avg_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: $crate::spec::AvgPoolNdOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = out_grad.shape().num_dims();
                let out = $crate::cpu::pool_ops::avg_pool_backward::<Self>(
                    lift::<Self>(out_grad),
                    x_size,
                    &options,
                );
                lower::<Self>(out, rank)
            }
            fn adaptive_avg_pool(
                x: Self::FloatTensorPrimitive,
                output_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out =
                    $crate::cpu::pool_ops::adaptive_avg_pool::<Self>(lift::<Self>(x), output_size);
                lower::<Self>(out, rank)
            }
            fn adaptive_avg_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                let rank = out_grad.shape().num_dims();
                let out = $crate::cpu::pool_ops::adaptive_avg_pool_backward::<Self>(
                    lift::<Self>(out_grad),
                    x_size,
                );
                lower::<Self>(out, rank)
            }
            fn adaptive_max_pool(
                x: Self::FloatTensorPrimitive,
                output_size: [usize; 3],
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                let rank = x.shape().num_dims();
                let (out, indices) = $crate::cpu::pool_ops::adaptive_max_pool::<Self>(
                    lift::<Self>(x),
                    output_size,
                    indices_dtype,
                );
                (lower::<Self>(out, rank), lower_int::<Self>(indices, rank))
            }
            fn fractional_max_pool(
                x: Self::FloatTensorPrimitive,
                samples: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                output_size: [usize; 3],
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                let rank = x.shape().num_dims();
                // `samples` is `(N, C, 3)` at every rank.
                let (out, indices) = $crate::cpu::pool_ops::fractional_max_pool::<Self>(
                    lift::<Self>(x),
                    samples,
                    kernel_size,
                    output_size,
                    indices_dtype,
                );
                (lower::<Self>(out, rank), lower_int::<Self>(indices, rank))
            }
            fn lp_pool(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::LpPoolOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::cpu::pool_ops::lp_pool::<Self>(lift::<Self>(x), &options);
                lower::<Self>(out, rank)
            }
            fn lp_pool_backward(
                x: Self::FloatTensorPrimitive,
                output: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                options: $crate::spec::LpPoolOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::cpu::pool_ops::lp_pool_backward::<Self>(
                    lift::<Self>(x),
                    lift::<Self>(output),
                    lift::<Self>(out_grad),
                    &options,
                );
                lower::<Self>(out, rank)
            }
            fn max_unpool(
                x: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
                output_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                let rank = x.shape().num_dims();
                let out = $crate::cpu::pool_ops::max_unpool::<Self>(
                    lift::<Self>(x),
                    lift_int::<Self>(indices),
                    output_size,
                );
                lower::<Self>(out, rank)
            }
            fn max_unpool_backward(
                out_grad: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
            ) -> Self::FloatTensorPrimitive {
                let rank = indices.shape().num_dims();
                let out = $crate::cpu::pool_ops::max_unpool_backward::<Self>(
                    lift::<Self>(out_grad),
                    lift_int::<Self>(indices),
                );
                lower::<Self>(out, rank)
            }
        }
    };
}
pub(crate) use impl_cpu_backend;
