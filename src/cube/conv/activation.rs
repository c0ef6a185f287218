//! Launchers of the activation kernels (`burn_convpool_kernels::activation`): on a convolution
//! result in place, on any tensor into a new one, and the activation's backward.

use burn_convpool_kernels::activation::{
    self as kernels, ActivationKind, activate_dense, activate_strided,
};
use burn_cubecl::tensor::CubeTensor;

use crate::spec::Activation;

use super::super::launches::{Launch, note};
use super::super::tensor::{
    LaunchError, accumulator_type, address_type, elementwise, empty, float_type,
};

/// The kernels' comptime choice and runtime slope of `activation`.
fn activation_kind(activation: Activation) -> (ActivationKind, f32) {
    match activation {
        Activation::Relu => (ActivationKind::Relu, 0.0),
        Activation::LeakyRelu { negative_slope } => {
            (ActivationKind::LeakyRelu, negative_slope as f32)
        }
        Activation::Silu => (ActivationKind::Silu, 0.0),
        Activation::Gelu => (ActivationKind::Gelu, 0.0),
        Activation::GeluTanh => (ActivationKind::GeluTanh, 0.0),
    }
}

/// The runtime slope and comptime kind a conv kernel takes for `activation`, applied only
/// where what the kernel stores `is_final`: a repair launch after it would recompute values
/// before the activation, so the pass applies the activation after the repair instead.
pub fn stored(activation: Option<Activation>, is_final: bool) -> (f32, Option<ActivationKind>) {
    match activation.filter(|_| is_final).map(activation_kind) {
        Some((kind, slope)) => (slope, Some(kind)),
        None => (0.0, None),
    }
}

/// Whether `tensor`'s elements fill its first `num_elements` places in some order of its axes
/// (contiguous, channels-last, or Burn's NCHW view of NHWC memory), so an element-wise pass
/// can run over them as a flat buffer.
fn dense(tensor: &CubeTensor) -> bool {
    let (shape, strides) = (tensor.meta.shape(), tensor.meta.strides());
    let mut axes: Vec<(usize, usize)> = (0..shape.num_dims())
        .filter(|&axis| shape[axis] > 1)
        .map(|axis| (strides[axis], shape[axis]))
        .collect();
    axes.sort_unstable();
    let mut expected = 1;
    for (stride, size) in axes {
        if stride != expected {
            return false;
        }
        expected *= size;
    }
    true
}

/// `activation` applied to a convolution pass's fresh result, in place where it is dense (as
/// every pass's result is), else into a new tensor.
pub fn activate_result(out: CubeTensor, activation: Activation) -> Result<CubeTensor, LaunchError> {
    if !dense(&out) {
        return activate(out, activation);
    }
    let dtype = float_type(&out)?;
    let len = out.meta.num_elements();
    let (kind, slope) = activation_kind(activation);
    let (cube_count, cube_dim) = elementwise(&out, len);
    note(Launch::Kernel("activate_dense"));
    activate_dense::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&out]),
        out.clone().into_tensor_arg(),
        len,
        slope,
        kind,
        [dtype, accumulator_type(dtype)],
    );
    Ok(out)
}

/// `activation(x)` into a new contiguous tensor, `x` in any layout.
pub fn activate(x: CubeTensor, activation: Activation) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&x)?;
    let out = empty(&x, x.meta.shape(), x.dtype);
    let len = out.meta.num_elements();
    let (kind, slope) = activation_kind(activation);
    let (cube_count, cube_dim) = elementwise(&out, len);
    note(Launch::Kernel("activate_strided"));
    activate_strided::launch(
        &out.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out]),
        x.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        slope,
        kind,
        [dtype, accumulator_type(dtype)],
    );
    Ok(out)
}

/// `out_grad * activation'(saved)` into a new contiguous tensor.
pub fn activation_backward(
    saved: CubeTensor,
    out_grad: CubeTensor,
    activation: Activation,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&out_grad)?;
    let grad = empty(&out_grad, out_grad.meta.shape(), out_grad.dtype);
    let len = grad.meta.num_elements();
    let (kind, slope) = activation_kind(activation);
    let (cube_count, cube_dim) = elementwise(&grad, len);
    note(Launch::Kernel("activation_backward"));
    kernels::activation_backward::launch(
        &grad.client,
        cube_count,
        cube_dim,
        address_type(&[&saved, &out_grad, &grad]),
        saved.into_tensor_arg(),
        out_grad.into_tensor_arg(),
        grad.clone().into_tensor_arg(),
        slope,
        kind,
        [dtype, accumulator_type(dtype)],
    );
    Ok(grad)
}
