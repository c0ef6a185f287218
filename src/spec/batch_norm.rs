//! Batch normalization over the batch's own statistics with an activation after it: the
//! options, and the rules PyTorch's `F.batch_norm(training=True)` enforces.

use super::activation::Activation;
use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};

/// Options of a training-mode batch norm followed by an activation
/// ([`batch_norm_act_train`](crate::batch_norm_act_train)): PyTorch's
/// `act(F.batch_norm(x, ..., training=True, eps=epsilon))` in two passes over `x`.
///
/// ```
/// use burn_convpool::{Activation, BatchNormActOptions};
/// let options = BatchNormActOptions::default().with_activation(Activation::Relu);
/// assert_eq!(options.epsilon, 1e-5);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormActOptions {
    /// Added to the variance before its square root (PyTorch's `eps`, default `1e-5`); finite
    /// and positive, as burn-nn's `BatchNormConfig` requires.
    pub epsilon: f64,
    /// Applied to the normalized, scaled and shifted result; none where `None`.
    pub activation: Option<Activation>,
}

impl Default for BatchNormActOptions {
    fn default() -> Self {
        Self {
            epsilon: 1e-5,
            activation: None,
        }
    }
}

impl BatchNormActOptions {
    /// These options with `epsilon`.
    pub fn with_epsilon(self, epsilon: f64) -> Self {
        Self { epsilon, ..self }
    }

    /// These options with `activation` after the batch norm.
    pub fn with_activation(self, activation: Activation) -> Self {
        Self {
            activation: Some(activation),
            ..self
        }
    }
}

/// Check a training-mode batch norm of `x = (N, C, *spatial)` (1 to 3 spatial axes) with
/// `gamma` and `beta` of `params` elements each: PyTorch's rules, one value per channel
/// refused ("Expected more than 1 value per channel when training"); an empty batch passes and
/// gives an empty output. Returns the values per channel, `N * spatial`.
pub fn check_batch_norm_train(
    op: &'static str,
    x: &[usize],
    params: [(&'static str, usize); 2],
    epsilon: f64,
) -> SpecResult<usize> {
    if !(3..=5).contains(&x.len()) {
        return Err(SpecError::new(
            op,
            Kind::Rank {
                arg: "x",
                expected: vec![3, 4, 5],
                actual: x.len(),
            },
        ));
    }
    for (what, len) in params {
        if len != x[1] {
            return Err(SpecError::new(
                op,
                Kind::Mismatch {
                    what,
                    expected: x[1],
                    actual: len,
                },
            ));
        }
    }
    if !(epsilon.is_finite() && epsilon > 0.0) {
        return Err(SpecError::new(op, Kind::Epsilon { epsilon }));
    }
    let per_channel = x[0] * x[2..].iter().product::<usize>();
    if per_channel == 1 {
        return Err(SpecError::new(
            op,
            Kind::OneValuePerChannel { dims: x.to_vec() },
        ));
    }
    Ok(per_channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: [(&str, usize); 2] = [("gamma.shape[0] vs channels", 3), ("beta", 3)];

    #[test]
    fn accepts_pytorchs_shapes_and_refuses_the_rest() {
        let check = |x: &[usize], epsilon| check_batch_norm_train("bn", x, PARAMS, epsilon);
        assert_eq!(check(&[2, 3, 4], 1e-5), Ok(8));
        assert_eq!(check(&[0, 3, 4, 4], 1e-5), Ok(0));
        assert_eq!(check(&[1, 3, 1, 1, 2], 1e-5), Ok(2));
        let message = |result: SpecResult<usize>| result.unwrap_err().to_string();
        assert_eq!(
            message(check(&[1, 3, 1, 1], 1e-5)),
            "bn: expected more than 1 value per channel when training, got input [1, 3, 1, 1]"
        );
        assert_eq!(
            message(check(&[2, 3], 1e-5)),
            "bn: x must have rank [3, 4, 5], got rank 2"
        );
        assert_eq!(
            message(check(&[2, 4, 5], 1e-5)),
            "bn: gamma.shape[0] vs channels: expected 4, got 3"
        );
        for epsilon in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(message(check(&[2, 3, 4], epsilon)).contains("epsilon must be finite"));
        }
    }
}
