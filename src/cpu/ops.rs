//! The backend primitives for any [`HostTensors`] backend: read the inputs as slices, run the
//! shared kernels, wrap the result. `impl_cpu_backend!` turns these into a trait impl; the
//! mapping of the conv primitives onto passes is `conv_routing`'s.

use core::marker::PhantomData;

use crate::conv_routing::ConvPasses;
use crate::spec::ConvGeometry;

use super::conv;
use super::host::{HostTensors, dims5, with_element};

/// The CPU convolution passes of a [`HostTensors`] backend.
pub struct HostConv<H>(PhantomData<H>);

impl<H: HostTensors> ConvPasses for HostConv<H> {
    type Tensor = H::Tensor;

    fn dims(tensor: &H::Tensor) -> [usize; 5] {
        dims5::<H>(tensor)
    }

    fn forward(
        geometry: &ConvGeometry,
        x: H::Tensor,
        weight: H::Tensor,
        bias: Option<H::Tensor>,
    ) -> H::Tensor {
        let dtype = H::dtype(&x);
        with_element!("conv", dtype, |T| {
            let bias = bias.as_ref().map(|bias| H::values::<T>(bias));
            let out = conv::forward::<T>(
                geometry,
                &H::values(&x),
                &H::values(&weight),
                bias.as_deref(),
            );
            H::from_values(out, &geometry.out_shape(), dtype)
        })
    }

    fn data(
        geometry: &ConvGeometry,
        weight: H::Tensor,
        out_grad: H::Tensor,
        bias: Option<H::Tensor>,
    ) -> H::Tensor {
        let dtype = H::dtype(&out_grad);
        with_element!("conv_x_backward", dtype, |T| {
            let mut x_grad =
                conv::x_backward::<T>(geometry, &H::values(&weight), &H::values(&out_grad));
            if let Some(bias) = &bias {
                let volume = geometry.in_volume().max(1);
                let bias = H::values::<T>(bias);
                for (row, value) in x_grad.chunks_mut(volume).zip(bias.iter().cycle()) {
                    row.iter_mut().for_each(|v| *v += *value);
                }
            }
            H::from_values(x_grad, &geometry.in_shape(), dtype)
        })
    }

    fn weight(geometry: &ConvGeometry, x: H::Tensor, out_grad: H::Tensor) -> H::Tensor {
        let dtype = H::dtype(&x);
        with_element!("conv_weight_backward", dtype, |T| {
            let weight_grad =
                conv::weight_backward::<T>(geometry, &H::values(&x), &H::values(&out_grad));
            H::from_values(weight_grad, &geometry.weight_shape(), dtype)
        })
    }
}

/// Gradient of a per-channel bias.
pub fn conv_bias_backward<H: HostTensors>(out_grad: H::Tensor) -> H::Tensor {
    let dims = H::dims(&out_grad);
    let dtype = H::dtype(&out_grad);
    with_element!("conv_bias_backward", dtype, |T| {
        let bias_grad = conv::bias_backward::<T>(&H::values(&out_grad), dims[0], dims[1]);
        H::from_values(bias_grad, &[dims[1]], dtype)
    })
}

/// Implement `ConvPoolBackend` for a CPU backend that implements [`HostTensors`].
macro_rules! impl_cpu_backend {
    ($backend:ty) => {
        impl $crate::backend::ConvPoolBackend for $backend {
            fn conv(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv::<$crate::cpu::ops::HostConv<Self>>(
                    x, weight, None, &options,
                )
            }
            fn conv_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv::<$crate::cpu::ops::HostConv<Self>>(
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
                $crate::conv_routing::conv_x_backward::<$crate::cpu::ops::HostConv<Self>>(
                    weight, out_grad, x_size, &options,
                )
            }
            fn conv_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_weight_backward::<$crate::cpu::ops::HostConv<Self>>(
                    x,
                    out_grad,
                    kernel_size,
                    &options,
                )
            }
            fn conv_bias_backward(
                out_grad: Self::FloatTensorPrimitive,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_bias_backward::<Self>(out_grad)
            }
            fn conv_transpose(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose::<$crate::cpu::ops::HostConv<Self>>(
                    x, weight, None, &options,
                )
            }
            fn conv_transpose_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose::<$crate::cpu::ops::HostConv<Self>>(
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
                $crate::conv_routing::conv_transpose_x_backward::<$crate::cpu::ops::HostConv<Self>>(
                    weight, out_grad, x_size, &options,
                )
            }
            fn conv_transpose_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::conv_routing::conv_transpose_weight_backward::<
                    $crate::cpu::ops::HostConv<Self>,
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
                _windows: $crate::spec::IndexWindows,
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
                out_grad: Self::FloatTensorPrimitive,
                options: $crate::spec::LpPoolOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::pool_ops::lp_pool_backward::<Self>(x, out_grad, &options)
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
