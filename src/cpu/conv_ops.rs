//! The convolution primitives for any [`HostTensors`] backend: read the inputs as slices, run
//! the shared kernels, wrap the result. The mapping of the conv primitives onto passes is
//! `conv_routing`'s; `backend.rs` turns these into the trait impl.

use core::marker::PhantomData;

use crate::conv_routing::ConvPasses;
use crate::spec::ConvGeometry;

use super::host::{HostTensors, dims5, with_element};
use super::kernels::conv;

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
