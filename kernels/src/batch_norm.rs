//! Batch normalization over the batch's own statistics with an activation after it: one cube
//! per channel sums the channel (pairwise in each unit, then a fixed tree across the cube, so
//! the result does not depend on timing), and element-wise kernels normalize, scale, shift and
//! activate, or compute the input gradient. Operands are rank 5 in any layout; results are
//! contiguous.

use cubecl::prelude::*;

use crate::activation::{ActivationKind, activate, derivative, offset_of};
use crate::pairwise::{BLOCK, LEVELS, carry_blocks, pairwise_total};

/// What a channel's sums add for each of its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SumKind {
    /// The values (for the mean).
    Values,
    /// The squared deviations from the mean (for the biased variance).
    Squares,
    /// The gradient before the activation, and it times the normalized value (for `beta`'s
    /// and `gamma`'s gradients).
    Gradients,
}

/// One channel's statistics and affine map: `x * scale + shift` is
/// `(x - mean) * inv_std * gamma + beta`.
#[derive(CubeType, Clone, Copy)]
pub struct ChannelMap<A: Float> {
    mean: A,
    inv_std: A,
    scale: A,
    shift: A,
}

/// Channel `c`'s map from its statistics and parameters.
#[cube]
fn channel_map<F: Float, A: Float>(
    mean: &Tensor<F>,
    variance: &Tensor<F>,
    gamma: &Tensor<F>,
    beta: &Tensor<F>,
    c: usize,
    epsilon: f32,
) -> ChannelMap<A> {
    let m = A::cast_from(mean[c]);
    let inv_std = A::new(1.0) / (A::cast_from(variance[c]) + A::cast_from(epsilon)).sqrt();
    let scale = A::cast_from(gamma[c]) * inv_std;
    ChannelMap::<A> {
        mean: m,
        inv_std,
        scale,
        shift: A::cast_from(beta[c]) - m * scale,
    }
}

/// The offset of value `e` of channel `c` in a rank-5 tensor, `e` counting its `(N, D, H, W)`
/// positions in row-major order.
#[cube]
fn channel_offset<F: Float>(x: &Tensor<F>, c: usize, e: usize) -> usize {
    let w = e % x.shape(4);
    let rest = e / x.shape(4);
    let h = rest % x.shape(3);
    let rest = rest / x.shape(3);
    let d = rest % x.shape(2);
    let n = rest / x.shape(2);
    n * x.stride(0) + c * x.stride(1) + d * x.stride(2) + h * x.stride(3) + w * x.stride(4)
}

/// Values per channel of a rank-5 tensor, `N * D * H * W`.
#[cube]
fn per_channel<F: Float>(x: &Tensor<F>) -> usize {
    x.shape(0) * x.shape(2) * x.shape(3) * x.shape(4)
}

/// The gradient before the activation at `x`: `out_grad` times the derivative at the
/// activation's input `x * scale + shift` (PyTorch's ReLU test `<= 0` on the output is the
/// same test on it).
#[cube]
fn pre_activation_grad<A: Float>(
    x: A,
    out_grad: A,
    map: &ChannelMap<A>,
    slope: A,
    #[comptime] activation: Option<ActivationKind>,
) -> A {
    let mut g = out_grad;
    if comptime![activation.is_some()] {
        let kind = comptime![activation.unwrap()];
        g = out_grad * derivative::<A>(x * map.scale + map.shift, slope, kind);
    }
    g
}

/// This unit's pairwise sums of channel `c`'s terms (every `cube_units`-th value from `unit`):
/// sum 0 (and sum 1 for [`SumKind::Gradients`]).
#[cube]
#[allow(clippy::too_many_arguments)]
fn unit_sums<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    c: usize,
    unit: usize,
    map: &ChannelMap<A>,
    slope: A,
    #[comptime] kind: SumKind,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] cube_units: usize,
) -> Array<A> {
    let width = comptime![if kind == SumKind::Gradients {
        2usize
    } else {
        1usize
    }];
    let count = per_channel::<F>(x);
    let mut block = Array::<A>::new(width);
    let mut levels = Array::<A>::new(comptime![LEVELS * width]);
    #[unroll]
    for v in 0..width {
        block[v] = A::new(0.0);
    }
    let mut blocks = 0u32;
    let mut e = unit;
    // A block per iteration, its reads unrolled: lavapipe ends a loop after 65535 iterations.
    while e < count {
        #[unroll]
        for _ in 0..BLOCK {
            if e < count {
                let value = A::cast_from(x[channel_offset::<F>(x, c, e)]);
                match comptime![kind] {
                    SumKind::Values => {
                        block[0] += value;
                    }
                    SumKind::Squares => {
                        let deviation = value - map.mean;
                        block[0] += deviation * deviation;
                    }
                    SumKind::Gradients => {
                        let upstream = A::cast_from(out_grad[channel_offset::<F>(out_grad, c, e)]);
                        let g = pre_activation_grad::<A>(value, upstream, map, slope, activation);
                        block[0] += g;
                        block[1] += g * ((value - map.mean) * map.inv_std);
                    }
                }
            }
            e += cube_units;
        }
        carry_blocks::<A>(&mut block, &mut levels, blocks, width);
        blocks += 1;
    }
    let mut sums = Array::<A>::new(width);
    #[unroll]
    for v in 0..width {
        sums[v] = pairwise_total::<A>(&block, &levels, blocks, v, width);
    }
    sums
}

/// The cube's total of each unit's `value`, in a fixed tree over `partial`, read by every
/// unit.
#[cube]
fn cube_total<A: Float>(
    partial: &mut Shared<[A]>,
    value: A,
    unit: usize,
    #[comptime] cube_units: usize,
) -> A {
    sync_cube();
    partial[unit] = value;
    #[unroll]
    for step in 0..comptime![cube_units.ilog2() as usize] {
        let half = (cube_units / 2) >> step;
        sync_cube();
        if unit < half {
            partial[unit] = partial[unit] + partial[unit + half];
        }
    }
    sync_cube();
    partial[0]
}

/// Each channel's mean and biased variance (two passes: the values, then the squared
/// deviations from their mean), one cube per channel of `cube_units` units (a power of two).
#[cube(launch, address_type = "dynamic")]
pub fn batch_norm_moments<F: Float, A: Float>(
    x: &Tensor<F>,
    mean: &mut Tensor<F>,
    variance: &mut Tensor<F>,
    #[comptime] cube_units: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let c = CUBE_POS;
    if c >= x.shape(1) {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let count = A::cast_from(per_channel::<F>(x));
    let mut partial = Shared::<[A]>::new_slice(cube_units);
    let mut map = ChannelMap::<A> {
        mean: A::new(0.0),
        inv_std: A::new(1.0),
        scale: A::new(1.0),
        shift: A::new(0.0),
    };
    let sums = unit_sums::<F, A>(
        x,
        x,
        c,
        unit,
        &map,
        A::new(0.0),
        SumKind::Values,
        None,
        cube_units,
    );
    map.mean = cube_total::<A>(&mut partial, sums[0], unit, cube_units) / count;
    let squares = unit_sums::<F, A>(
        x,
        x,
        c,
        unit,
        &map,
        A::new(0.0),
        SumKind::Squares,
        None,
        cube_units,
    );
    let squares = cube_total::<A>(&mut partial, squares[0], unit, cube_units);
    if unit == 0 {
        mean[c] = F::cast_from(map.mean);
        variance[c] = F::cast_from(squares / count);
    }
}

/// `out = activation(x * scale + shift)` with each channel's map; `out` contiguous.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_normalize<F: Float, A: Float>(
    x: &Tensor<F>,
    mean: &Tensor<F>,
    variance: &Tensor<F>,
    gamma: &Tensor<F>,
    beta: &Tensor<F>,
    out: &mut Tensor<F>,
    epsilon: f32,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= out.len() {
        terminate!();
    }
    let c = (ABSOLUTE_POS / out.stride(1)) % out.shape(1);
    let map = channel_map::<F, A>(mean, variance, gamma, beta, c, epsilon);
    let value = A::cast_from(x[offset_of::<F>(x, out, ABSOLUTE_POS)]);
    let mut result = value * map.scale + map.shift;
    if comptime![activation.is_some()] {
        let kind = comptime![activation.unwrap()];
        result = activate::<A>(result, A::cast_from(slope), kind);
    }
    out[ABSOLUTE_POS] = F::cast_from(result);
}

/// Each channel's `beta` gradient (the sum of the gradient before the activation) and `gamma`
/// gradient (that times the normalized value), one cube per channel.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_grad_sums<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    mean: &Tensor<F>,
    variance: &Tensor<F>,
    gamma: &Tensor<F>,
    beta: &Tensor<F>,
    gamma_grad: &mut Tensor<F>,
    beta_grad: &mut Tensor<F>,
    epsilon: f32,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[comptime] cube_units: usize,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    let c = CUBE_POS;
    if c >= x.shape(1) {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let map = channel_map::<F, A>(mean, variance, gamma, beta, c, epsilon);
    let mut partial = Shared::<[A]>::new_slice(cube_units);
    let sums = unit_sums::<F, A>(
        x,
        out_grad,
        c,
        unit,
        &map,
        A::cast_from(slope),
        SumKind::Gradients,
        activation,
        cube_units,
    );
    let grad_sum = cube_total::<A>(&mut partial, sums[0], unit, cube_units);
    let weighted_sum = cube_total::<A>(&mut partial, sums[1], unit, cube_units);
    if unit == 0 {
        beta_grad[c] = F::cast_from(grad_sum);
        gamma_grad[c] = F::cast_from(weighted_sum);
    }
}

/// The input gradient, `(g - mean(g) - x_hat * mean(g * x_hat)) * inv_std * gamma` with `g`
/// the gradient before the activation; `x_grad` contiguous.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_x_grad<F: Float, A: Float>(
    x: &Tensor<F>,
    out_grad: &Tensor<F>,
    mean: &Tensor<F>,
    variance: &Tensor<F>,
    gamma: &Tensor<F>,
    beta: &Tensor<F>,
    gamma_grad: &Tensor<F>,
    beta_grad: &Tensor<F>,
    x_grad: &mut Tensor<F>,
    epsilon: f32,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= x_grad.len() {
        terminate!();
    }
    let c = (ABSOLUTE_POS / x_grad.stride(1)) % x_grad.shape(1);
    let map = channel_map::<F, A>(mean, variance, gamma, beta, c, epsilon);
    let count = A::cast_from(per_channel::<F>(x));
    let value = A::cast_from(x[offset_of::<F>(x, x_grad, ABSOLUTE_POS)]);
    let upstream = A::cast_from(out_grad[offset_of::<F>(out_grad, x_grad, ABSOLUTE_POS)]);
    let g = pre_activation_grad::<A>(value, upstream, &map, A::cast_from(slope), activation);
    let x_hat = (value - map.mean) * map.inv_std;
    let grad_mean = A::cast_from(beta_grad[c]) / count;
    let weighted_mean = A::cast_from(gamma_grad[c]) / count;
    let factor = A::cast_from(gamma[c]) * map.inv_std;
    x_grad[ABSOLUTE_POS] = F::cast_from((g - grad_mean - x_hat * weighted_mean) * factor);
}
