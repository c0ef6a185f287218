//! The batch-norm primitives for any [`HostTensors`] backend: read the operands as slices, run
//! `kernels/batch_norm.rs`, wrap the results. Any rank from 3 to 5 reads as `(N, C, volume)`.

use crate::spec::Activation;

use super::host::{HostTensors, with_element};
use super::kernels::batch_norm::{self, Planes};

/// `x = (N, C, *spatial)` as `(N, C, volume)`.
fn planes(dims: &[usize]) -> Planes {
    Planes {
        batch: dims[0],
        channels: dims[1],
        volume: dims[2..].iter().product(),
    }
}

/// `(activation(batch_norm(x)), mean, variance)` with the batch's statistics.
pub fn batch_norm_act<H: HostTensors>(
    x: H::Tensor,
    gamma: H::Tensor,
    beta: H::Tensor,
    epsilon: f64,
    activation: Option<Activation>,
) -> (H::Tensor, H::Tensor, H::Tensor) {
    let (dims, dtype) = (H::dims(&x), H::dtype(&x));
    let channels = [dims[1]];
    with_element!("batch_norm_act", dtype, |T| {
        let forward = batch_norm::forward::<T>(
            &H::values(&x),
            planes(&dims),
            &H::values(&gamma),
            &H::values(&beta),
            epsilon,
            activation,
        );
        (
            H::from_values(forward.out, &dims, dtype),
            H::from_values(forward.mean, &channels, dtype),
            H::from_values(forward.variance, &channels, dtype),
        )
    })
}

/// `activation(batch_norm(x))` with the batch's `mean` and `variance` already summed.
pub fn batch_norm_act_given<H: HostTensors>(
    x: H::Tensor,
    [gamma, beta]: [H::Tensor; 2],
    [mean, variance]: [H::Tensor; 2],
    epsilon: f64,
    activation: Option<Activation>,
) -> H::Tensor {
    let (dims, dtype) = (H::dims(&x), H::dtype(&x));
    with_element!("batch_norm_act_given", dtype, |T| {
        let out = batch_norm::normalize::<T>(
            &H::values(&x),
            planes(&dims),
            [&H::values(&gamma), &H::values(&beta)],
            [&H::values(&mean), &H::values(&variance)],
            epsilon,
            activation,
        );
        H::from_values(out, &dims, dtype)
    })
}

/// The gradients of [`batch_norm_act`] with respect to `x`, `gamma` and `beta`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_act_backward<H: HostTensors>(
    x: H::Tensor,
    gamma: H::Tensor,
    beta: H::Tensor,
    mean: H::Tensor,
    variance: H::Tensor,
    out_grad: H::Tensor,
    epsilon: f64,
    activation: Option<Activation>,
) -> (H::Tensor, H::Tensor, H::Tensor) {
    let (dims, dtype) = (H::dims(&x), H::dtype(&x));
    let channels = [dims[1]];
    with_element!("batch_norm_act_backward", dtype, |T| {
        let grads = batch_norm::backward::<T>(
            &H::values(&x),
            &H::values(&out_grad),
            planes(&dims),
            [&H::values(&gamma), &H::values(&beta)],
            [&H::values(&mean), &H::values(&variance)],
            epsilon,
            activation,
        );
        (
            H::from_values(grads.x_grad, &dims, dtype),
            H::from_values(grads.gamma_grad, &channels, dtype),
            H::from_values(grads.beta_grad, &channels, dtype),
        )
    })
}
