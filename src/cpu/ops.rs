//! The backend primitives for any [`HostTensors`] backend: read the inputs as slices, run the
//! shared kernels, wrap the result. `impl_cpu_backend!` turns these into a trait impl.

use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};

use crate::spec::ConvGeometry;

use super::conv;
use super::host::{HostTensors, dims5, with_element};

/// Shape of the conv input side given the weight and a spatial size.
fn conv_x_dims(batch: usize, weight: [usize; 5], groups: usize, size: [usize; 3]) -> [usize; 5] {
    [batch, weight[1] * groups, size[0], size[1], size[2]]
}

/// `conv(x, weight) [+ bias]`.
pub fn conv<H: HostTensors>(
    x: H::Tensor,
    weight: H::Tensor,
    bias: Option<H::Tensor>,
    options: &ConvOptions<3>,
) -> H::Tensor {
    let geometry = ConvGeometry::conv(&dims5::<H>(&x), &dims5::<H>(&weight), options);
    forward::<H>(&geometry, &x, &weight, bias.as_ref())
}

/// `conv_transpose(x, weight) [+ bias]`: the input gradient of the adjoint conv.
pub fn conv_transpose<H: HostTensors>(
    x: H::Tensor,
    weight: H::Tensor,
    bias: Option<H::Tensor>,
    options: &ConvTransposeOptions<3>,
) -> H::Tensor {
    let geometry = ConvGeometry::transpose(&dims5::<H>(&x), &dims5::<H>(&weight), options);
    let dtype = H::dtype(&x);
    with_element!("conv_transpose", dtype, |T| {
        let mut out = conv::x_backward::<T>(&geometry, &H::values(&weight), &H::values(&x));
        if let Some(bias) = &bias {
            let volume = geometry.in_volume();
            for (row, value) in out
                .chunks_mut(volume.max(1))
                .zip(H::values::<T>(bias).iter().cycle())
            {
                row.iter_mut().for_each(|v| *v += *value);
            }
        }
        H::from_values(out, &geometry.in_shape(), dtype)
    })
}

fn forward<H: HostTensors>(
    geometry: &ConvGeometry,
    x: &H::Tensor,
    weight: &H::Tensor,
    bias: Option<&H::Tensor>,
) -> H::Tensor {
    let dtype = H::dtype(x);
    with_element!("conv", dtype, |T| {
        let bias = bias.map(|bias| H::values::<T>(bias));
        let out = conv::forward::<T>(geometry, &H::values(x), &H::values(weight), bias.as_deref());
        H::from_values(out, &geometry.out_shape(), dtype)
    })
}

fn x_backward<H: HostTensors>(
    geometry: &ConvGeometry,
    weight: &H::Tensor,
    out_grad: &H::Tensor,
) -> H::Tensor {
    let dtype = H::dtype(out_grad);
    with_element!("conv_x_backward", dtype, |T| {
        let x_grad = conv::x_backward::<T>(geometry, &H::values(weight), &H::values(out_grad));
        H::from_values(x_grad, &geometry.in_shape(), dtype)
    })
}

fn weight_backward<H: HostTensors>(
    geometry: &ConvGeometry,
    x: &H::Tensor,
    out_grad: &H::Tensor,
) -> H::Tensor {
    let dtype = H::dtype(x);
    with_element!("conv_weight_backward", dtype, |T| {
        let weight_grad = conv::weight_backward::<T>(geometry, &H::values(x), &H::values(out_grad));
        H::from_values(weight_grad, &geometry.weight_shape(), dtype)
    })
}

/// Gradient of `conv` with respect to `x`.
pub fn conv_x_backward<H: HostTensors>(
    weight: H::Tensor,
    out_grad: H::Tensor,
    x_size: [usize; 3],
    options: &ConvOptions<3>,
) -> H::Tensor {
    let weight_dims = dims5::<H>(&weight);
    let x_dims = conv_x_dims(
        dims5::<H>(&out_grad)[0],
        weight_dims,
        options.groups,
        x_size,
    );
    let geometry = ConvGeometry::conv(&x_dims, &weight_dims, options);
    x_backward::<H>(&geometry, &weight, &out_grad)
}

/// Gradient of `conv` with respect to `weight`.
pub fn conv_weight_backward<H: HostTensors>(
    x: H::Tensor,
    out_grad: H::Tensor,
    kernel_size: [usize; 3],
    options: &ConvOptions<3>,
) -> H::Tensor {
    let x_dims = dims5::<H>(&x);
    let [k_d, k_h, k_w] = kernel_size;
    let out_channels = dims5::<H>(&out_grad)[1];
    let weight_dims = [out_channels, x_dims[1] / options.groups, k_d, k_h, k_w];
    let geometry = ConvGeometry::conv(&x_dims, &weight_dims, options);
    weight_backward::<H>(&geometry, &x, &out_grad)
}

/// Gradient of `conv_transpose` with respect to `x`: the adjoint conv's forward pass.
pub fn conv_transpose_x_backward<H: HostTensors>(
    weight: H::Tensor,
    out_grad: H::Tensor,
    x_size: [usize; 3],
    options: &ConvTransposeOptions<3>,
) -> H::Tensor {
    let weight_dims = dims5::<H>(&weight);
    let [d, h, w] = x_size;
    let x_dims = [dims5::<H>(&out_grad)[0], weight_dims[0], d, h, w];
    let geometry = ConvGeometry::transpose(&x_dims, &weight_dims, options);
    forward::<H>(&geometry, &out_grad, &weight, None)
}

/// Gradient of `conv_transpose` with respect to `weight`: the adjoint conv's weight gradient,
/// with the roles of input and output gradient swapped.
pub fn conv_transpose_weight_backward<H: HostTensors>(
    x: H::Tensor,
    out_grad: H::Tensor,
    kernel_size: [usize; 3],
    options: &ConvTransposeOptions<3>,
) -> H::Tensor {
    let x_dims = dims5::<H>(&x);
    let [k_d, k_h, k_w] = kernel_size;
    let out_channels = dims5::<H>(&out_grad)[1];
    let weight_dims = [x_dims[1], out_channels / options.groups, k_d, k_h, k_w];
    let geometry = ConvGeometry::transpose(&x_dims, &weight_dims, options);
    weight_backward::<H>(&geometry, &out_grad, &x)
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
                $crate::cpu::ops::conv::<Self>(x, weight, None, &options)
            }
            fn conv_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv::<Self>(x, weight, Some(bias), &options)
            }
            fn conv_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_x_backward::<Self>(weight, out_grad, x_size, &options)
            }
            fn conv_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_weight_backward::<Self>(x, out_grad, kernel_size, &options)
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
                $crate::cpu::ops::conv_transpose::<Self>(x, weight, None, &options)
            }
            fn conv_transpose_with_bias(
                x: Self::FloatTensorPrimitive,
                weight: Self::FloatTensorPrimitive,
                bias: Self::FloatTensorPrimitive,
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_transpose::<Self>(x, weight, Some(bias), &options)
            }
            fn conv_transpose_x_backward(
                weight: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                x_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_transpose_x_backward::<Self>(
                    weight, out_grad, x_size, &options,
                )
            }
            fn conv_transpose_weight_backward(
                x: Self::FloatTensorPrimitive,
                out_grad: Self::FloatTensorPrimitive,
                kernel_size: [usize; 3],
                options: ConvTransposeOptions<3>,
            ) -> Self::FloatTensorPrimitive {
                $crate::cpu::ops::conv_transpose_weight_backward::<Self>(
                    x,
                    out_grad,
                    kernel_size,
                    &options,
                )
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
