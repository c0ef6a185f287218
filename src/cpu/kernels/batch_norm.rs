//! Batch normalization over the batch's own statistics, with an activation after it, in two
//! passes each way (PyTorch's CPU kernel's order of work): the forward sums each channel
//! (mean, then squared deviations from it) and writes `activation(x * scale + shift)`; the
//! backward sums each channel's gradient terms and writes the input gradient. Every sum is
//! pairwise over leaves (`sum.rs`), so a channel of millions of values keeps f32 accuracy.
//! Every loop runs in the widest vectors (`in_widest_vectors`, once per channel or plane): a
//! plane longer than a leaf is otherwise summed in the baseline's (SSE2's), as is every
//! normalized value.

use rayon::prelude::*;

use super::activation;
use super::element::{Element, WideBody, in_widest_vectors, min_items_per_task, zeroed_per_plane};
use super::sum::{LANES, LEAF, PairwiseSum, lane_sum, lane_sum_map};
use crate::spec::Activation;

/// `x = (N, C, volume)`, contiguous.
#[derive(Debug, Clone, Copy)]
pub struct Planes {
    /// Batch.
    pub batch: usize,
    /// Channels.
    pub channels: usize,
    /// Values per `(n, c)` plane.
    pub volume: usize,
}

impl Planes {
    /// Values per channel, `N * volume`.
    fn per_channel(&self) -> usize {
        self.batch * self.volume
    }

    /// A value per value of `x`, plane by plane: `body(plane, out)` fills plane `plane`
    /// (batch item times channels plus channel) of the result, `work` per value
    /// ([`zeroed_per_plane`]'s parallel split).
    fn each_plane<T: Element>(
        &self,
        work: usize,
        body: impl Fn(usize, &mut [T]) + Sync + Send,
    ) -> Vec<T> {
        let planes = self.batch * self.channels;
        zeroed_per_plane(
            planes,
            self.volume,
            work * self.volume,
            || (),
            |_, plane, out| body(plane, out),
        )
    }

    /// Channel `c`'s plane of batch item `n`.
    #[inline(always)]
    fn plane<'a, T>(&self, values: &'a [T], n: usize, c: usize) -> &'a [T] {
        &values[(n * self.channels + c) * self.volume..][..self.volume]
    }
}

/// One channel's statistics and the affine map they give: `x * scale + shift` is
/// `(x - mean) * inv_std * gamma + beta`, as PyTorch's CPU kernel folds it.
#[derive(Debug, Clone, Copy)]
struct Channel<T> {
    mean: T,
    inv_std: T,
    scale: T,
    shift: T,
}

impl<T: Element> Channel<T> {
    fn new(mean: T, variance: T, gamma: T, beta: T, epsilon: f64) -> Self {
        let inv_std = T::from_f64(1.0 / (variance.elem::<f64>() + epsilon).sqrt());
        let scale = gamma * inv_std;
        Self {
            mean,
            inv_std,
            scale,
            shift: beta - mean * scale,
        }
    }
}

/// The batch norm's result and each channel's mean and biased variance.
pub struct Forward<T> {
    /// `activation((x - mean) / sqrt(variance + epsilon) * gamma + beta)`, `x`'s shape.
    pub out: Vec<T>,
    /// `(C)`.
    pub mean: Vec<T>,
    /// `(C)`, biased (divided by `N * volume`).
    pub variance: Vec<T>,
}

/// Each channel's mean and biased variance, two passes over it (the squared deviations from
/// the mean, so a large mean costs no accuracy), each plane's leaves in the widest vectors.
fn moments<T: Element>(x: &[T], planes: Planes) -> (Vec<T>, Vec<T>) {
    (0..planes.channels)
        .into_par_iter()
        .with_min_len(min_items_per_task(2 * planes.per_channel()))
        .map(|c| in_widest_vectors(ChannelMoments { x, planes, c }))
        .unzip()
}

/// Channel `c`'s mean and biased variance ([`moments`]).
struct ChannelMoments<'a, T> {
    x: &'a [T],
    planes: Planes,
    c: usize,
}

impl<T: Element> WideBody for ChannelMoments<'_, T> {
    type Output = (T, T);

    #[inline(always)]
    fn run(self) -> (T, T) {
        let Self { x, planes, c } = self;
        let count = T::from_f64(planes.per_channel() as f64);
        let mut sum = PairwiseSum::new();
        for n in 0..planes.batch {
            sum.add(lane_sum(planes.plane(x, n, c)));
        }
        let mean = sum.total().div(count);
        let mut squares = PairwiseSum::new();
        for n in 0..planes.batch {
            squares.add(lane_sum_map(planes.plane(x, n, c), |v| {
                let deviation = v - mean;
                deviation * deviation
            }));
        }
        (mean, squares.total().div(count))
    }
}

/// `out[i] = f(x[i] * scale + shift)` over one plane; `f` is a closure so each activation's
/// loop is compiled on its own (ReLU's vectorizes).
#[inline(always)]
fn affine_into<T: Element>(out: &mut [T], x: &[T], scale: T, shift: T, f: impl Fn(T) -> T) {
    for (out, x) in out.iter_mut().zip(x) {
        *out = f(*x * scale + shift);
    }
}

/// One plane's normalized values, activated: [`affine_into`] with the activation's function.
struct NormalizePlane<'a, T> {
    out: &'a mut [T],
    x: &'a [T],
    channel: Channel<T>,
    activation: Option<Activation>,
}

impl<T: Element> WideBody for NormalizePlane<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Self {
            out,
            x,
            channel,
            activation,
        } = self;
        let (scale, shift) = (channel.scale, channel.shift);
        match activation {
            None => affine_into(out, x, scale, shift, |v| v),
            Some(Activation::Relu) => affine_into(out, x, scale, shift, |v| {
                // `clamp_min(0)`: NaN stays.
                if v <= T::ZERO { T::ZERO } else { v }
            }),
            Some(activation) => {
                affine_into(out, x, scale, shift, |v| activation::apply(activation, v))
            }
        }
    }
}

/// The channels' affine maps from their statistics and parameters.
fn channels<T: Element>(
    mean: &[T],
    variance: &[T],
    gamma: &[T],
    beta: &[T],
    epsilon: f64,
) -> Vec<Channel<T>> {
    (0..mean.len())
        .map(|c| Channel::new(mean[c], variance[c], gamma[c], beta[c], epsilon))
        .collect()
}

/// `activation(batch_norm(x))` with the batch's statistics.
pub fn forward<T: Element>(
    x: &[T],
    planes: Planes,
    gamma: &[T],
    beta: &[T],
    epsilon: f64,
    activation: Option<Activation>,
) -> Forward<T> {
    let (mean, variance) = moments(x, planes);
    let out = normalize(
        x,
        planes,
        [gamma, beta],
        [&mean, &variance],
        epsilon,
        activation,
    );
    Forward {
        out,
        mean,
        variance,
    }
}

/// `activation(batch_norm(x))` with statistics already summed (by the conv that wrote `x`,
/// see `plane_moments.rs`): one pass.
pub fn normalize<T: Element>(
    x: &[T],
    planes: Planes,
    [gamma, beta]: [&[T]; 2],
    [mean, variance]: [&[T]; 2],
    epsilon: f64,
    activation: Option<Activation>,
) -> Vec<T> {
    let channels = channels(mean, variance, gamma, beta, epsilon);
    let volume = planes.volume;
    planes.each_plane(2, |plane, out| {
        let x = &x[plane * volume..][..volume];
        let channel = channels[plane % planes.channels];
        in_widest_vectors(NormalizePlane {
            out,
            x,
            channel,
            activation,
        });
    })
}

/// The gradients of [`forward`].
pub struct Backward<T> {
    /// `x`'s shape.
    pub x_grad: Vec<T>,
    /// `(C)`: the sum of the gradient before the activation times the normalized `x`.
    pub gamma_grad: Vec<T>,
    /// `(C)`: the sum of the gradient before the activation.
    pub beta_grad: Vec<T>,
}

/// The gradient before the activation at one value from the gradient after it: a type per
/// kind, so each backward loop is compiled for one (ReLU's vectorizes) and tests nothing per
/// value.
trait PreActivation<T>: Copy + Send + Sync {
    /// `out_grad` times the activation's derivative at its input `x * scale + shift`,
    /// recomputed here (for ReLU the test `<= 0` on the input is PyTorch's on the output).
    fn grad(self, channel: &Channel<T>, x: T, out_grad: T) -> T;
}

/// No activation: the gradient passes.
#[derive(Clone, Copy)]
struct Identity;

impl<T: Element> PreActivation<T> for Identity {
    #[inline(always)]
    fn grad(self, _: &Channel<T>, _: T, out_grad: T) -> T {
        out_grad
    }
}

/// ReLU: the gradient stops where the input is `<= 0` (a NaN passes it).
#[derive(Clone, Copy)]
struct ReluMask;

impl<T: Element> PreActivation<T> for ReluMask {
    #[inline(always)]
    fn grad(self, channel: &Channel<T>, x: T, out_grad: T) -> T {
        if x * channel.scale + channel.shift <= T::ZERO {
            T::ZERO
        } else {
            out_grad
        }
    }
}

/// Any other activation, through its derivative.
#[derive(Clone, Copy)]
struct Derivative(Activation);

impl<T: Element> PreActivation<T> for Derivative {
    #[inline(always)]
    fn grad(self, channel: &Channel<T>, x: T, out_grad: T) -> T {
        out_grad * activation::derivative(self.0, x * channel.scale + channel.shift)
    }
}

/// A channel's sums of the gradient before the activation, and of it times the normalized
/// input: each leaf of [`LEAF`] values in [`LANES`] interleaved partial sums (as `lane_sum`),
/// the leaves summed pairwise.
struct GradientSums<'a, T, P> {
    x: &'a [T],
    out_grad: &'a [T],
    planes: Planes,
    c: usize,
    channel: &'a Channel<T>,
    pre: P,
}

impl<T: Element, P: PreActivation<T>> WideBody for GradientSums<'_, T, P> {
    type Output = (T, T);

    #[inline(always)]
    fn run(self) -> (T, T) {
        let Self {
            x,
            out_grad,
            planes,
            c,
            channel,
            pre,
        } = self;
        let (mut grad_sum, mut weighted_sum) = (PairwiseSum::new(), PairwiseSum::new());
        for n in 0..planes.batch {
            let (x, out_grad) = (planes.plane(x, n, c), planes.plane(out_grad, n, c));
            for (x, out_grad) in x.chunks(LEAF).zip(out_grad.chunks(LEAF)) {
                let (mut grad, mut weighted) = ([T::ZERO; LANES], [T::ZERO; LANES]);
                let mut add = |lane: usize, x: T, out_grad: T| {
                    let g = pre.grad(channel, x, out_grad);
                    grad[lane] += g;
                    weighted[lane] += g * ((x - channel.mean) * channel.inv_std);
                };
                // Whole blocks of lanes (the loop the compiler vectorizes), then the rest.
                let (blocks, blocks_grad) = (x.chunks_exact(LANES), out_grad.chunks_exact(LANES));
                let (rest, rest_grad) = (blocks.remainder(), blocks_grad.remainder());
                for (x, out_grad) in blocks.zip(blocks_grad) {
                    for lane in 0..LANES {
                        add(lane, x[lane], out_grad[lane]);
                    }
                }
                for (lane, (&x, &out_grad)) in rest.iter().zip(rest_grad).enumerate() {
                    add(lane, x, out_grad);
                }
                let total = |lanes: [T; LANES]| lanes.into_iter().fold(T::ZERO, |sum, v| sum + v);
                grad_sum.add(total(grad));
                weighted_sum.add(total(weighted));
            }
        }
        (grad_sum.total(), weighted_sum.total())
    }
}

/// One plane's input gradient from its channel's gradient sums: PyTorch's
/// `(dy - mean(dy) - x_hat * mean(dy * x_hat)) * inv_std * gamma`.
struct InputGradient<'a, T, P> {
    x_grad: &'a mut [T],
    x: &'a [T],
    out_grad: &'a [T],
    channel: &'a Channel<T>,
    /// `mean(dy)` and `mean(dy * x_hat)`.
    means: [T; 2],
    /// `inv_std * gamma`.
    factor: T,
    pre: P,
}

impl<T: Element, P: PreActivation<T>> WideBody for InputGradient<'_, T, P> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let [grad_mean, weighted_mean] = self.means;
        let channel = self.channel;
        let values = self.x_grad.iter_mut().zip(self.x).zip(self.out_grad);
        for ((x_grad, &x), &out_grad) in values {
            let g = self.pre.grad(channel, x, out_grad);
            let x_hat = (x - channel.mean) * channel.inv_std;
            *x_grad = (g - grad_mean - x_hat * weighted_mean) * self.factor;
        }
    }
}

/// The gradients of [`forward`] from its output's gradient and the statistics it returned.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Element>(
    x: &[T],
    out_grad: &[T],
    planes: Planes,
    [gamma, beta]: [&[T]; 2],
    [mean, variance]: [&[T]; 2],
    epsilon: f64,
    activation: Option<Activation>,
) -> Backward<T> {
    let channels = channels(mean, variance, gamma, beta, epsilon);
    match activation {
        None => backward_with(x, out_grad, planes, gamma, &channels, Identity),
        Some(Activation::Relu) => backward_with(x, out_grad, planes, gamma, &channels, ReluMask),
        Some(activation) => {
            let pre = Derivative(activation);
            backward_with(x, out_grad, planes, gamma, &channels, pre)
        }
    }
}

/// [`backward`] for one kind of activation.
fn backward_with<T: Element>(
    x: &[T],
    out_grad: &[T],
    planes: Planes,
    gamma: &[T],
    channels: &[Channel<T>],
    pre: impl PreActivation<T>,
) -> Backward<T> {
    let (beta_grad, gamma_grad): (Vec<T>, Vec<T>) = (0..planes.channels)
        .into_par_iter()
        .with_min_len(min_items_per_task(2 * planes.per_channel()))
        .map(|c| {
            let channel = &channels[c];
            in_widest_vectors(GradientSums {
                x,
                out_grad,
                planes,
                c,
                channel,
                pre,
            })
        })
        .unzip();
    let count = T::from_f64(planes.per_channel() as f64);
    let volume = planes.volume;
    let x_grad = planes.each_plane(3, |plane, x_grad| {
        let (x, out_grad) = (
            &x[plane * volume..][..volume],
            &out_grad[plane * volume..][..volume],
        );
        let c = plane % planes.channels;
        let channel = &channels[c];
        let grad_mean = beta_grad[c].div(count);
        let weighted_mean = gamma_grad[c].div(count);
        let factor = gamma[c] * channel.inv_std;
        in_widest_vectors(InputGradient {
            x_grad,
            x,
            out_grad,
            channel,
            means: [grad_mean, weighted_mean],
            factor,
            pre,
        });
    });
    Backward {
        x_grad,
        gamma_grad,
        beta_grad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An independent f64 definition of the forward and its gradients: the textbook formulas
    /// on one channel.
    fn reference(x: &[f64], out_grad: &[f64], gamma: f64, beta: f64) -> (Vec<f64>, [f64; 3]) {
        let m = x.len() as f64;
        let mean = x.iter().sum::<f64>() / m;
        let variance = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m;
        let inv_std = 1.0 / (variance + 1e-5).sqrt();
        let x_hat: Vec<f64> = x.iter().map(|v| (v - mean) * inv_std).collect();
        let pre: Vec<f64> = x_hat.iter().map(|h| h * gamma + beta).collect();
        let g: Vec<f64> = pre
            .iter()
            .zip(out_grad)
            .map(|(p, d)| if *p > 0.0 { *d } else { 0.0 })
            .collect();
        let beta_grad = g.iter().sum::<f64>();
        let gamma_grad = g.iter().zip(&x_hat).map(|(g, h)| g * h).sum::<f64>();
        let x_grad = g
            .iter()
            .zip(&x_hat)
            .map(|(g, h)| gamma * inv_std * (g - beta_grad / m - h * gamma_grad / m))
            .collect();
        (x_grad, [mean, gamma_grad, beta_grad])
    }

    #[test]
    fn matches_the_definition_with_relu() {
        // (N, C, volume) = (3, 2, 5): channel 1's planes at offsets 5, 15, 25.
        let planes = Planes {
            batch: 3,
            channels: 2,
            volume: 5,
        };
        let x: Vec<f64> = (0..30).map(|i| ((i * 7) % 11) as f64 * 0.3 - 1.2).collect();
        let out_grad: Vec<f64> = (0..30).map(|i| ((i * 5) % 7) as f64 * 0.25 - 0.6).collect();
        let (gamma, beta) = ([1.5, -0.7], [0.2, 0.1]);
        let forward = forward(&x, planes, &gamma, &beta, 1e-5, Some(Activation::Relu));
        let grads = backward(
            &x,
            &out_grad,
            planes,
            [&gamma, &beta],
            [&forward.mean, &forward.variance],
            1e-5,
            Some(Activation::Relu),
        );
        let channel = |values: &[f64], c: usize| -> Vec<f64> {
            (0..3)
                .flat_map(|n| planes.plane(values, n, c).to_vec())
                .collect()
        };
        for c in 0..2 {
            let (x_grad, [mean, gamma_grad, beta_grad]) =
                reference(&channel(&x, c), &channel(&out_grad, c), gamma[c], beta[c]);
            assert!((forward.mean[c] - mean).abs() < 1e-12);
            assert!((grads.gamma_grad[c] - gamma_grad).abs() < 1e-12);
            assert!((grads.beta_grad[c] - beta_grad).abs() < 1e-12);
            for (ours, theirs) in channel(&grads.x_grad, c).iter().zip(&x_grad) {
                assert!((ours - theirs).abs() < 1e-12, "{ours} vs {theirs}");
            }
            for (out, x) in channel(&forward.out, c).iter().zip(channel(&x, c)) {
                let expected = ((x - mean) / (forward.variance[c] + 1e-5).sqrt() * gamma[c]
                    + beta[c])
                    .max(0.0);
                assert!((out - expected).abs() < 1e-12);
            }
        }
    }

    /// Planes far from zero and from each other: the variance stays that of the f32 values,
    /// where `E[x^2] - E[x]^2` in f32 loses it.
    #[test]
    fn planes_with_large_and_different_means_keep_their_variance() {
        let planes = Planes {
            batch: 5,
            channels: 2,
            volume: 300,
        };
        let x: Vec<f32> = (0..planes.batch * planes.channels * planes.volume)
            .map(|i| {
                let plane = i / planes.volume;
                1000.0 + 10.0 * plane as f32 + 0.01 * ((i * 7 % 13) as f32 - 6.0)
            })
            .collect();
        let result = forward(&x, planes, &[1.0; 2], &[0.0; 2], 1e-5, None);
        for c in 0..2 {
            let values: Vec<f64> = (0..planes.batch)
                .flat_map(|n| planes.plane(&x, n, c).iter().map(|&v| f64::from(v)))
                .collect();
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let variance =
                values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
            let (ours_mean, ours_variance) = (result.mean[c], result.variance[c]);
            assert!(
                (f64::from(ours_mean) / mean - 1.0).abs() < 1e-7,
                "{ours_mean} vs {mean}"
            );
            assert!(
                (f64::from(ours_variance) / variance - 1.0).abs() < 1e-6,
                "{ours_variance} vs {variance}"
            );
        }
    }

    /// PyTorch's statistics of a channel holding an infinity: the mean the sum gives, a NaN
    /// variance; of one holding both infinities or a NaN, NaN for both.
    #[test]
    fn infinities_give_pytorchs_statistics() {
        let planes = Planes {
            batch: 2,
            channels: 3,
            volume: 3,
        };
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        #[rustfmt::skip]
        let x = [
            1.0, 2.0, 3.0,   1.0, -inf, 3.0,  1.0, 2.0, nan,
            4.0, inf, 6.0,   1.0, 2.0, 3.0,   1.0, 2.0, 3.0,
        ];
        let result = forward(&x, planes, &[1.0; 3], &[0.0; 3], 1e-5, None);
        assert_eq!(result.mean[0], inf);
        assert_eq!(result.mean[1], -inf);
        assert!(result.mean[2].is_nan());
        assert!(
            result.variance.iter().all(|v| v.is_nan()),
            "{:?}",
            result.variance
        );
        let both = [inf, 1.0, 2.0, -inf, 1.0, 2.0];
        let planes = Planes {
            batch: 2,
            channels: 1,
            volume: 3,
        };
        let result = forward(&both, planes, &[1.0], &[0.0], 1e-5, None);
        assert!(result.mean[0].is_nan() && result.variance[0].is_nan());
    }

    #[test]
    fn a_long_channel_keeps_f32_accuracy() {
        // 2^22 values of 1 + 0.001 * (i % 3 - 1): a running f32 sum drifts far off the mean.
        let planes = Planes {
            batch: 4,
            channels: 1,
            volume: 1 << 20,
        };
        let x: Vec<f32> = (0..4 << 20)
            .map(|i| 1.0 + 0.001 * ((i % 3) as f32 - 1.0))
            .collect();
        let forward = forward(&x, planes, &[1.0], &[0.0], 1e-5, None);
        assert!((forward.mean[0] - 1.0).abs() < 1e-6, "{}", forward.mean[0]);
        let variance = 2.0 / 3.0 * 1e-6;
        assert!((forward.variance[0] / variance - 1.0).abs() < 1e-3);
    }
}
