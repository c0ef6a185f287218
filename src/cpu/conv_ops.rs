//! The convolution primitives for any [`HostTensors`] backend: read the inputs as slices, run
//! the shared kernels, wrap the result. The mapping of the conv primitives onto passes is
//! `conv_routing`'s; `backend.rs` turns these into the trait impl.

use core::marker::PhantomData;

use burn::tensor::ops::ConvOptions;

use crate::conv_routing::ConvPasses;
use crate::spec::{Activation, ConvGeometry};

use super::host::{HostTensors, dims5, with_element};
use super::kernels::{activation, conv};

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
        activation: Option<Activation>,
    ) -> H::Tensor {
        let dtype = H::dtype(&x);
        with_element!("conv", dtype, |T| {
            let bias = bias.as_ref().map(|bias| H::values::<T>(bias));
            let mut out = conv::forward::<T>(
                geometry,
                &H::values(&x),
                &H::values(&weight),
                bias.as_deref(),
            );
            if let Some(activation) = activation {
                activation::apply_in_place(&mut out, activation);
            }
            H::from_values(out, &geometry.out_shape(), dtype)
        })
    }

    fn data(
        geometry: &ConvGeometry,
        weight: H::Tensor,
        out_grad: H::Tensor,
        bias: Option<H::Tensor>,
        activation: Option<Activation>,
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
            if let Some(activation) = activation {
                activation::apply_in_place(&mut x_grad, activation);
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

/// `(conv(x, weight), mean, variance)` of rank-5 operands, the statistics per output channel
/// summed as the conv finishes its planes.
pub fn conv_moments<H: HostTensors>(
    x: H::Tensor,
    weight: H::Tensor,
    options: &ConvOptions<3>,
) -> (H::Tensor, H::Tensor, H::Tensor) {
    let geometry = ConvGeometry::conv(&dims5::<H>(&x), &dims5::<H>(&weight), options);
    let dtype = H::dtype(&x);
    let channels = [geometry.out_channels];
    with_element!("conv_moments", dtype, |T| {
        let (out, mean, variance) =
            conv::forward_with_moments::<T>(&geometry, &H::values(&x), &H::values(&weight));
        (
            H::from_values(out, &geometry.out_shape(), dtype),
            H::from_values(mean, &channels, dtype),
            H::from_values(variance, &channels, dtype),
        )
    })
}

/// `activation(x)` element by element.
pub fn activate<H: HostTensors>(x: H::Tensor, activation: Activation) -> H::Tensor {
    let (dims, dtype) = (H::dims(&x), H::dtype(&x));
    with_element!("activate", dtype, |T| {
        let mut values = H::values::<T>(&x).into_owned();
        activation::apply_in_place(&mut values, activation);
        H::from_values(values, &dims, dtype)
    })
}

/// The gradient before `activation`: `out_grad` times its derivative at `saved`.
pub fn activation_backward<H: HostTensors>(
    saved: H::Tensor,
    out_grad: H::Tensor,
    activation: Activation,
) -> H::Tensor {
    let (dims, dtype) = (H::dims(&out_grad), H::dtype(&out_grad));
    with_element!("activation_backward", dtype, |T| {
        let grad = activation::backward::<T>(&H::values(&saved), &H::values(&out_grad), activation);
        H::from_values(grad, &dims, dtype)
    })
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
