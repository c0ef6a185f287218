//! The activation a convolution applies to its output as it stores it: PyTorch's `F.relu`,
//! `F.leaky_relu`, `F.silu` and `F.gelu` (exact or tanh), fused into the convolution's pass.

use core::hash::{Hash, Hasher};

/// An activation fused into a convolution (`ConvNdOptions::with_activation`): the convolution
/// returns `activation(conv(x, weight) + bias)`, computed as it stores each output, so no
/// separate pass reads the result back. Values are PyTorch's functions of the same name,
/// NaN propagating as there.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_convpool::{Activation, ConvNdOptions, conv2d};
/// let device = Device::flex();
/// let x = Tensor::<4>::ones([1, 2, 4, 4], &device);
/// let weight = Tensor::<4>::ones([3, 2, 3, 3], &device).neg();
/// let options = ConvNdOptions::default().with_activation(Activation::Relu);
/// let out = conv2d(x, weight, None, options);
/// assert_eq!(out.sum().into_scalar::<f32>(), 0.0);
/// ```
#[derive(burn::config::Config, Debug, Copy)]
pub enum Activation {
    /// `max(x, 0)`, PyTorch's `F.relu` (NaN stays NaN).
    Relu,
    /// `x` where `x > 0`, else `negative_slope * x`: PyTorch's `F.leaky_relu` (its default
    /// slope is 0.01).
    LeakyRelu {
        /// The factor of a value that is not positive.
        negative_slope: f64,
    },
    /// `x * sigmoid(x)`, PyTorch's `F.silu`.
    Silu,
    /// `x * Φ(x)` with the normal distribution's exact CDF: PyTorch's `F.gelu` (its
    /// `approximate="none"`).
    Gelu,
    /// GELU's tanh approximation, `x/2 * (1 + tanh(sqrt(2/π) * (x + 0.044715 x³)))`: PyTorch's
    /// `F.gelu(approximate="tanh")`.
    GeluTanh,
}

impl Activation {
    /// PyTorch's name of the function, as an error or a table names it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Relu => "relu",
            Self::LeakyRelu { .. } => "leaky_relu",
            Self::Silu => "silu",
            Self::Gelu => "gelu",
            Self::GeluTanh => "gelu_tanh",
        }
    }

    /// Whether the derivative at a value follows from the activation's output alone: ReLU's
    /// and a leaky ReLU's with a slope of at least 0, whose output is positive exactly where
    /// its input is. The backward of a fused convolution then keeps the output it returns
    /// instead of the convolution's pre-activation result.
    pub fn derivative_from_output(&self) -> bool {
        match self {
            Self::Relu => true,
            Self::LeakyRelu { negative_slope } => *negative_slope >= 0.0,
            Self::Silu | Self::Gelu | Self::GeluTanh => false,
        }
    }
}

// Options are compared and hashed (a tuner key, a cached plan); a slope compares by its bits,
// so a NaN slope equals itself.
impl PartialEq for Activation {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::LeakyRelu { negative_slope: a }, Self::LeakyRelu { negative_slope: b }) => {
                a.to_bits() == b.to_bits()
            }
            _ => core::mem::discriminant(self) == core::mem::discriminant(other),
        }
    }
}

impl Eq for Activation {}

impl Hash for Activation {
    fn hash<H: Hasher>(&self, state: &mut H) {
        core::mem::discriminant(self).hash(state);
        if let Self::LeakyRelu { negative_slope } = self {
            negative_slope.to_bits().hash(state);
        }
    }
}
