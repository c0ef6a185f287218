//! Launchers of the batch-norm kernels (`burn_convpool_kernels::batch_norm`): the forward sums
//! each channel in one launch (a cube per channel) and normalizes in a second (each on its own
//! for a conv that returns its statistics, `conv_moments`); the backward
//! sums each channel's gradient terms, then writes the input gradient. Operands are rank 5 in
//! any layout (a conv's channels-last result is read in place); results are contiguous.

use burn_convpool_kernels::batch_norm::{
    batch_norm_grad_sums, batch_norm_moments, batch_norm_normalize, batch_norm_x_grad,
};
use burn_cubecl::tensor::CubeTensor;
use cubecl::{CubeCount, CubeDim, calculate_cube_count_elemwise};

use crate::spec::Activation;

use super::conv::stored;
use super::launches::{Launch, note};
use super::tensor::{
    LaunchError, accumulator_type, address_type, contiguous, dims5, elementwise, empty, float_type,
    strided,
};

/// Units per channel's cube: enough lanes to stream a channel at memory speed, and a power of
/// two for the summing tree.
const CHANNEL_UNITS: usize = 256;

/// One cube of units per channel (cubes past the last channel exit at once).
fn per_channel(x: &CubeTensor, channels: usize) -> (CubeCount, CubeDim, usize) {
    let max_units = x.client.properties().hardware.max_units_per_cube as usize;
    let units = 1 << CHANNEL_UNITS.min(max_units.max(1)).ilog2();
    let cube_dim = CubeDim::new_1d(units as u32);
    let count = calculate_cube_count_elemwise(&x.client, channels.max(1) * units, cube_dim);
    (count, cube_dim, units)
}

/// `(activation(batch_norm(x)), mean, variance)` for a rank-5 `x`.
pub fn batch_norm_act(
    x: CubeTensor,
    gamma: CubeTensor,
    beta: CubeTensor,
    epsilon: f64,
    activation: Option<Activation>,
) -> Result<(CubeTensor, CubeTensor, CubeTensor), LaunchError> {
    let x = strided(x);
    let (mean, variance) = moments(x.clone())?;
    let out = normalize(
        x,
        [gamma, beta],
        [mean.clone(), variance.clone()],
        epsilon,
        activation,
    )?;
    Ok((out, mean, variance))
}

/// Each channel's mean and biased variance of a rank-5 `x`, one cube per channel.
pub fn moments(x: CubeTensor) -> Result<(CubeTensor, CubeTensor), LaunchError> {
    let dtype = float_type(&x)?;
    let types = [dtype, accumulator_type(dtype)];
    let x = strided(x);
    let dims = dims5(&x);
    let (mean, variance) = (
        empty(&x, &[dims[1]], x.dtype),
        empty(&x, &[dims[1]], x.dtype),
    );
    if dims[1] == 0 {
        return Ok((mean, variance));
    }
    // An empty batch still gets its statistics: the mean of no values, NaN (0 / 0), as on
    // the CPU.
    let (cube_count, cube_dim, units) = per_channel(&x, dims[1]);
    note(Launch::Kernel("batch_norm_moments"));
    batch_norm_moments::launch(
        &x.client,
        cube_count,
        cube_dim,
        address_type(&[&x]),
        x.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        variance.clone().into_tensor_arg(),
        units,
        types,
    );
    Ok((mean, variance))
}

/// `activation(batch_norm(x))` of a rank-5 `x` from its channels' `mean` and `variance`.
pub fn normalize(
    x: CubeTensor,
    [gamma, beta]: [CubeTensor; 2],
    [mean, variance]: [CubeTensor; 2],
    epsilon: f64,
    activation: Option<Activation>,
) -> Result<CubeTensor, LaunchError> {
    let dtype = float_type(&x)?;
    let types = [dtype, accumulator_type(dtype)];
    let x = strided(x);
    // The kernels index the per-channel vectors by channel, so they are read contiguous.
    let (gamma, beta) = (contiguous(gamma), contiguous(beta));
    let (mean, variance) = (contiguous(mean), contiguous(variance));
    let out = empty(&x, &dims5(&x), x.dtype);
    if out.meta.num_elements() == 0 {
        return Ok(out);
    }
    // Both kernels that apply it store final results.
    let (slope, kind) = stored(activation, true);
    let (cube_count, cube_dim) = elementwise(&out, out.meta.num_elements());
    note(Launch::Kernel("batch_norm_normalize"));
    batch_norm_normalize::launch(
        &x.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out]),
        x.clone().into_tensor_arg(),
        mean.into_tensor_arg(),
        variance.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        epsilon as f32,
        slope,
        kind,
        types,
    );
    Ok(out)
}

/// The gradients of [`batch_norm_act`] with respect to `x`, `gamma` and `beta`.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_act_backward(
    x: CubeTensor,
    gamma: CubeTensor,
    beta: CubeTensor,
    mean: CubeTensor,
    variance: CubeTensor,
    out_grad: CubeTensor,
    epsilon: f64,
    activation: Option<Activation>,
) -> Result<(CubeTensor, CubeTensor, CubeTensor), LaunchError> {
    let dtype = float_type(&x)?;
    let types = [dtype, accumulator_type(dtype)];
    let (x, out_grad) = (strided(x), strided(out_grad));
    let (gamma, beta) = (contiguous(gamma), contiguous(beta));
    let (mean, variance) = (contiguous(mean), contiguous(variance));
    let dims = dims5(&x);
    let gamma_grad = empty(&x, &[dims[1]], x.dtype);
    let beta_grad = empty(&x, &[dims[1]], x.dtype);
    let x_grad = empty(&x, &dims, x.dtype);
    if dims[1] == 0 {
        return Ok((x_grad, gamma_grad, beta_grad));
    }
    // Both kernels that apply it store final results.
    let (slope, kind) = stored(activation, true);
    let (cube_count, cube_dim, units) = per_channel(&x, dims[1]);
    note(Launch::Kernel("batch_norm_grad_sums"));
    batch_norm_grad_sums::launch(
        &x.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out_grad]),
        x.clone().into_tensor_arg(),
        out_grad.clone().into_tensor_arg(),
        mean.clone().into_tensor_arg(),
        variance.clone().into_tensor_arg(),
        gamma.clone().into_tensor_arg(),
        beta.clone().into_tensor_arg(),
        gamma_grad.clone().into_tensor_arg(),
        beta_grad.clone().into_tensor_arg(),
        epsilon as f32,
        slope,
        kind,
        units,
        types,
    );
    // An empty batch's parameter gradients are the sums of no terms, 0, as PyTorch's.
    if x_grad.meta.num_elements() == 0 {
        return Ok((x_grad, gamma_grad, beta_grad));
    }
    let (cube_count, cube_dim) = elementwise(&x_grad, x_grad.meta.num_elements());
    note(Launch::Kernel("batch_norm_x_grad"));
    batch_norm_x_grad::launch(
        &x_grad.client,
        cube_count,
        cube_dim,
        address_type(&[&x, &out_grad, &x_grad]),
        x.into_tensor_arg(),
        out_grad.into_tensor_arg(),
        mean.into_tensor_arg(),
        variance.into_tensor_arg(),
        gamma.into_tensor_arg(),
        beta.into_tensor_arg(),
        gamma_grad.clone().into_tensor_arg(),
        beta_grad.clone().into_tensor_arg(),
        x_grad.clone().into_tensor_arg(),
        epsilon as f32,
        slope,
        kind,
        types,
    );
    Ok((x_grad, gamma_grad, beta_grad))
}
