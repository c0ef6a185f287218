//! `impl_cpu_backend!`: the `ConvPoolBackend` impl of a CPU backend, every method forwarding to
//! the [`HostTensors`](super::host::HostTensors) adapters (`conv_ops.rs` through
//! `conv_routing`, `pool_ops.rs`).

/// Implement `ConvPoolBackend` for a CPU backend that implements [`HostTensors`](super::host::HostTensors).
macro_rules! impl_cpu_backend {
    ($backend:ty) => {
        impl $crate::backend::ConvPoolBackend for $backend {
            fn conv(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv::<$crate::cpu::conv_ops::HostConv<Self>>(
                    x, weight, None, &options,
                )
            }
            fn conv_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv::<$crate::cpu::conv_ops::HostConv<Self>>(
                    x,
                    weight,
                    Some(bias),
                    &options,
                )
            }
            fn conv_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_x_backward::<$crate::cpu::conv_ops::HostConv<Self>>(
                    weight, out_grad, x_size, &options,
                )
            }
            fn conv_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_weight_backward::<$crate::cpu::conv_ops::HostConv<Self>>(
                    x,
                    out_grad,
                    kernel_size,
                    &options,
                )
            }
            fn conv_bias_backward(
                out_grad: Self::FloatTensorPrimitive,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::conv_ops::conv_bias_backward::<Self>(out_grad)
            }
            fn conv_transpose(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose::<$crate::cpu::conv_ops::HostConv<Self>>(
                    x, weight, None, &options,
                )
            }
            fn conv_transpose_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose::<$crate::cpu::conv_ops::HostConv<Self>>(
                    x,
                    weight,
                    Some(bias),
                    &options,
                )
            }
            fn conv_transpose_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose_x_backward::<
                    $crate::cpu::conv_ops::HostConv<Self>,
                >(weight, out_grad, x_size, &options)
            }
            fn conv_transpose_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose_weight_backward::<
                    $crate::cpu::conv_ops::HostConv<Self>,
                >(x, out_grad, kernel_size, &options)
            }
            fn max_pool_with_indices(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::MaxPoolOptions<3>,
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                $crate::cpu::pool_ops::max_pool_with_indices::<Self>(x, &options, indices_dtype)
            }
            fn max_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
                x_size: [usize; 3],
                _windows: $crate::spec::WindowRule,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::max_pool_backward::<Self>(out_grad, indices, x_size)
            }
            fn avg_pool(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::AvgPoolNdOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::avg_pool::<Self>(x, &options)
            }
            fn avg_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: $crate::spec::AvgPoolNdOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::avg_pool_backward::<Self>(out_grad, x_size, &options)
            }
            fn adaptive_avg_pool(
                x: Self::FloatTensorPrimitive,
                output_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::adaptive_avg_pool::<Self>(x, output_size)
            }
            fn adaptive_avg_pool_backward(
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::adaptive_avg_pool_backward::<Self>(out_grad, x_size)
            }
            fn adaptive_max_pool(
                x: Self::FloatTensorPrimitive,
                output_size: [usize; 3],
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                $crate::cpu::pool_ops::adaptive_max_pool::<Self>(x, output_size, indices_dtype)
            }
            fn fractional_max_pool(
                x: Self::FloatTensorPrimitive,
                samples: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                output_size: [usize; 3],
                indices_dtype: burn::tensor::IntDType,
            ) -> (Self::FloatTensorPrimitive, Self::IntTensorPrimitive) {
                $crate::cpu::pool_ops::fractional_max_pool::<Self>(
                    x,
                    samples,
                    kernel_size,
                    output_size,
                    indices_dtype,
                )
            }
            fn lp_pool(
                x: Self::FloatTensorPrimitive,
                options: $crate::spec::LpPoolOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::lp_pool::<Self>(x, &options)
            }
            fn lp_pool_backward(
                x: Self::FloatTensorPrimitive,
                output: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                options: $crate::spec::LpPoolOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::lp_pool_backward::<Self>(x, output, out_grad, &options)
            }
            fn max_unpool(
                x: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
                output_size: [usize; 3],
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::max_unpool::<Self>(x, indices, output_size)
            }
            fn max_unpool_backward(
                out_grad: Self::FloatTensorPrimitive,
                indices: Self::IntTensorPrimitive,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::max_unpool_backward::<Self>(out_grad, indices)
            }
        }
    };
}
pub(crate) use impl_cpu_backend;
