//! The activations a fused convolution applies to its result ([`Activation`]) and their
//! derivatives, as PyTorch's CPU kernels compute them: ReLU and the leaky ReLU in the element
//! type, SiLU and GELU in f64 and rounded once (within an f32 rounding of PyTorch's f32
//! vector code).

use rayon::prelude::*;

use super::element::{Element, WideBody, in_widest_vectors, min_items_per_task};
use crate::spec::Activation;

/// `sqrt(2 / π)`, GELU's tanh approximation's scale (PyTorch's `kBeta`).
const GELU_TANH_SCALE: f64 = core::f64::consts::FRAC_2_SQRT_PI * core::f64::consts::FRAC_1_SQRT_2;
/// The cubic term's factor of GELU's tanh approximation (PyTorch's `kKappa`).
const GELU_TANH_CUBIC: f64 = 0.044715;

/// `activation(x)`.
#[inline(always)]
pub fn apply<T: Element>(activation: Activation, x: T) -> T {
    match activation {
        // `clamp_min(0)`: NaN is neither, so it stays.
        Activation::Relu => {
            if x <= T::ZERO {
                T::ZERO
            } else {
                x
            }
        }
        Activation::LeakyRelu { negative_slope } => {
            if x > T::ZERO {
                x
            } else {
                x * T::from_f64(negative_slope)
            }
        }
        Activation::Silu => in_f64(x, |x| x / (1.0 + (-x).exp())),
        Activation::Gelu => in_f64(x, |x| {
            0.5 * x * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2))
        }),
        Activation::GeluTanh => in_f64(x, |x| {
            let inner = GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }),
    }
}

/// The derivative of `activation` at the value `saved` holds: its output where
/// [`Activation::derivative_from_output`] holds, its input otherwise. PyTorch's backward
/// formulas: ReLU's gradient stops where the output is `<= 0` (`threshold_backward`, so it
/// passes at a NaN), the leaky ReLU's passes where the value is `> 0` (a NaN takes the slope).
#[inline(always)]
pub fn derivative<T: Element>(activation: Activation, saved: T) -> T {
    match activation {
        Activation::Relu => {
            if saved <= T::ZERO {
                T::ZERO
            } else {
                T::ONE
            }
        }
        Activation::LeakyRelu { negative_slope } => {
            if saved > T::ZERO {
                T::ONE
            } else {
                T::from_f64(negative_slope)
            }
        }
        Activation::Silu => in_f64(saved, |x| {
            let sigmoid = 1.0 / (1.0 + (-x).exp());
            sigmoid * (1.0 + x * (1.0 - sigmoid))
        }),
        Activation::Gelu => in_f64(saved, |x| {
            let cdf = 0.5 * (1.0 + libm::erf(x * core::f64::consts::FRAC_1_SQRT_2));
            let pdf = 0.5
                * core::f64::consts::FRAC_2_SQRT_PI
                * core::f64::consts::FRAC_1_SQRT_2
                * (-0.5 * x * x).exp();
            cdf + x * pdf
        }),
        Activation::GeluTanh => in_f64(saved, |x| {
            let inner = GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x);
            let tanh = inner.tanh();
            let slope = GELU_TANH_SCALE * (1.0 + 3.0 * GELU_TANH_CUBIC * x * x);
            0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh * tanh) * slope
        }),
    }
}

fn in_f64<T: Element>(x: T, f: impl Fn(f64) -> f64) -> T {
    T::from_f64(f(x.elem::<f64>()))
}

/// Elements per task of an element-wise pass: a task holds about `TASK_MIN_WORK` of work.
fn per_task(len: usize) -> usize {
    min_items_per_task(1).min(len.max(1))
}

/// `values[i] = activation(values[i])`: a convolution's result, while it is still the only
/// copy. Each task's loop runs in the widest vectors, compiled per kind ([`PerKind`]).
pub fn apply_in_place<T: Element>(values: &mut [T], activation: Activation) {
    values
        .par_chunks_mut(per_task(values.len()))
        .for_each(|chunk| in_widest_vectors(PerKind(activation, Apply(chunk))));
}

/// `out_grad[i] * activation'(saved[i])`, the gradient before the activation, each task's
/// loop in the widest vectors (as [`apply_in_place`]).
pub fn backward<T: Element>(saved: &[T], out_grad: &[T], activation: Activation) -> Vec<T> {
    let mut grad = out_grad.to_vec();
    let chunk = per_task(grad.len());
    grad.par_chunks_mut(chunk)
        .zip(saved.par_chunks(chunk))
        .for_each(|(grad, saved)| in_widest_vectors(PerKind(activation, Chain { grad, saved })));
    grad
}

/// A loop over values for one activation, which [`PerKind`] runs with the activation a
/// constant of its kind. `run` is `#[inline(always)]`, as a [`WideBody`]'s.
trait KindLoop {
    fn run(self, activation: Activation);
}

/// `values[i] = activation(values[i])`.
struct Apply<'a, T>(&'a mut [T]);

impl<T: Element> KindLoop for Apply<'_, T> {
    #[inline(always)]
    fn run(self, activation: Activation) {
        for v in self.0.iter_mut() {
            *v = apply(activation, *v);
        }
    }
}

/// `grad[i] *= activation'(saved[i])`.
struct Chain<'a, T> {
    grad: &'a mut [T],
    saved: &'a [T],
}

impl<T: Element> KindLoop for Chain<'_, T> {
    #[inline(always)]
    fn run(self, activation: Activation) {
        for (g, &s) in self.grad.iter_mut().zip(self.saved) {
            *g = *g * derivative(activation, s);
        }
    }
}

/// A loop run with the activation a constant of its own kind in each inlined copy, so it
/// compiles once per kind: the piecewise-linear ones then vectorize, where a loop that matches
/// the kind at every value does not (`activation_backward` with ReLU).
struct PerKind<L>(Activation, L);

impl<L: KindLoop> WideBody for PerKind<L> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let PerKind(activation, body) = self;
        match activation {
            Activation::Relu => body.run(Activation::Relu),
            Activation::LeakyRelu { negative_slope } => {
                body.run(Activation::LeakyRelu { negative_slope })
            }
            other => body.run(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Activation; 6] = [
        Activation::Relu,
        Activation::LeakyRelu {
            negative_slope: 0.01,
        },
        Activation::LeakyRelu {
            negative_slope: -0.5,
        },
        Activation::Silu,
        Activation::Gelu,
        Activation::GeluTanh,
    ];

    #[test]
    fn values_are_pytorchs() {
        // PyTorch's formulas in f64 at -1.5 and 1 (Python's `math`).
        let cases = [
            (Activation::Silu, [-0.2736382857095345, 0.7310585786300049]),
            (Activation::Gelu, [-0.10021080190328713, 0.8413447460685429]),
            (
                Activation::GeluTanh,
                [-0.10042842301976707, 0.8411919906082768],
            ),
            (Activation::Relu, [0.0, 1.0]),
            (
                Activation::LeakyRelu {
                    negative_slope: 0.01,
                },
                [-0.015, 1.0],
            ),
        ];
        for (activation, expected) in cases {
            for (x, expected) in [-1.5f64, 1.0].into_iter().zip(expected) {
                let got = apply(activation, x);
                assert!(
                    (got - expected).abs() < 1e-14,
                    "{activation:?}({x}) = {got}, expected {expected}"
                );
            }
        }
    }

    #[test]
    fn nan_propagates() {
        for activation in ALL {
            assert!(apply(activation, f32::NAN).is_nan(), "{activation:?}");
        }
    }

    /// PyTorch 2.15's `x.grad` after `f(x).backward(ones)` at 0 and at NaN.
    #[test]
    fn derivatives_at_zero_and_nan_are_pytorchs() {
        let leaky = Activation::LeakyRelu {
            negative_slope: 0.01,
        };
        for (activation, at_zero, at_nan) in [
            (Activation::Relu, 0.0, Some(1.0)),
            (leaky, 0.01, Some(0.01)),
            (Activation::Silu, 0.5, None),
            (Activation::Gelu, 0.5, None),
            (Activation::GeluTanh, 0.5, None),
        ] {
            assert_eq!(derivative(activation, 0.0f64), at_zero, "{activation:?}");
            let nan = derivative(activation, f64::NAN);
            match at_nan {
                Some(expected) => assert_eq!(nan, expected, "{activation:?}"),
                None => assert!(nan.is_nan(), "{activation:?}"),
            }
        }
    }

    #[test]
    fn derivatives_match_central_differences() {
        let h = 1e-6;
        for activation in ALL {
            for x in [-2.5f64, -0.7, 0.3, 1.9] {
                let numeric = (apply(activation, x + h) - apply(activation, x - h)) / (2.0 * h);
                let saved = if activation.derivative_from_output() {
                    apply(activation, x)
                } else {
                    x
                };
                let analytic = derivative(activation, saved);
                assert!(
                    (numeric - analytic).abs() < 1e-7,
                    "{activation:?}'({x}) = {analytic}, differences give {numeric}"
                );
            }
        }
    }
}
