//! The activations a fused convolution applies to its result and their derivatives, as
//! PyTorch computes them (NaN propagating), in the accumulator type `A` (f32 for half
//! precision): [`activate()`] and [`derivative()`] for the kernels that store a result, and
//! element-wise kernels for a result stored by a kernel that does not apply them.

use cubecl::prelude::*;

/// Which activation (a comptime choice; a leaky ReLU's slope is a runtime argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActivationKind {
    /// `max(x, 0)`, NaN kept.
    Relu,
    /// `x` where positive, else `slope * x`.
    LeakyRelu,
    /// `x * sigmoid(x)`.
    Silu,
    /// `x * Φ(x)`, the exact CDF.
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
}

/// `sqrt(2 / π)`, GELU's tanh approximation's scale.
const GELU_TANH_SCALE: f32 = 0.797_884_6;
/// The cubic term's factor of GELU's tanh approximation.
const GELU_TANH_CUBIC: f32 = 0.044715;
/// `1 / sqrt(2)`.
const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
/// `1 / sqrt(2π)`, the normal density's factor.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

/// `kind(x)`; `slope` is a leaky ReLU's negative slope.
#[cube]
pub fn activate<A: Float>(x: A, slope: A, #[comptime] kind: ActivationKind) -> A {
    let mut y = x;
    match comptime![kind] {
        // A NaN is neither `<= 0` nor `> 0`: both ReLUs keep it.
        ActivationKind::Relu => {
            if x <= A::new(0.0) {
                y = A::new(0.0);
            }
        }
        ActivationKind::LeakyRelu => {
            y = x * slope;
            if x > A::new(0.0) {
                y = x;
            }
        }
        ActivationKind::Silu => {
            y = x / (A::new(1.0) + (-x).exp());
        }
        ActivationKind::Gelu => {
            y = A::new(0.5) * x * (A::new(1.0) + (x * A::new(FRAC_1_SQRT_2)).erf());
        }
        ActivationKind::GeluTanh => {
            let inner = A::new(GELU_TANH_SCALE) * (x + A::new(GELU_TANH_CUBIC) * x * x * x);
            y = A::new(0.5) * x * (A::new(1.0) + inner.tanh());
        }
    }
    y
}

/// `kind'` at the value `saved` holds: the activation's output for the ReLUs (a leaky one's
/// with a slope of at least 0; the host saves the input otherwise, where the same test holds),
/// its input for SiLU and GELU.
#[cube]
pub fn derivative<A: Float>(saved: A, slope: A, #[comptime] kind: ActivationKind) -> A {
    let x = saved;
    let mut d = A::new(1.0);
    match comptime![kind] {
        // PyTorch's ReLU backward stops the gradient where the output is `<= 0`, so it passes
        // at a NaN; the leaky one's test is `> 0`, so a NaN takes the slope.
        ActivationKind::Relu => {
            if x <= A::new(0.0) {
                d = A::new(0.0);
            }
        }
        ActivationKind::LeakyRelu => {
            d = slope;
            if x > A::new(0.0) {
                d = A::new(1.0);
            }
        }
        ActivationKind::Silu => {
            let sigmoid = A::new(1.0) / (A::new(1.0) + (-x).exp());
            d = sigmoid * (A::new(1.0) + x * (A::new(1.0) - sigmoid));
        }
        ActivationKind::Gelu => {
            let cdf = A::new(0.5) * (A::new(1.0) + (x * A::new(FRAC_1_SQRT_2)).erf());
            let pdf = A::new(FRAC_1_SQRT_2PI) * (A::new(-0.5) * x * x).exp();
            d = cdf + x * pdf;
        }
        ActivationKind::GeluTanh => {
            let inner = A::new(GELU_TANH_SCALE) * (x + A::new(GELU_TANH_CUBIC) * x * x * x);
            let tanh = inner.tanh();
            let slope_of_inner =
                A::new(GELU_TANH_SCALE) * (A::new(1.0) + A::new(3.0 * GELU_TANH_CUBIC) * x * x);
            d = A::new(0.5) * (A::new(1.0) + tanh)
                + A::new(0.5) * x * (A::new(1.0) - tanh * tanh) * slope_of_inner;
        }
    }
    d
}

/// The offset in `tensor` of the element at row-major index `index` of `dims` (a contiguous
/// tensor of the same shape).
#[cube]
pub(crate) fn offset_of<F: Float>(tensor: &Tensor<F>, dims: &mut Tensor<F>, index: usize) -> usize {
    let mut offset = 0;
    for axis in 0..tensor.rank() {
        offset += (index / dims.stride(axis)) % dims.shape(axis) * tensor.stride(axis);
    }
    offset
}

/// `values[i] = kind(values[i])` for the first `len` values of a dense buffer: a
/// convolution's result stored by a kernel that does not apply the activation.
#[cube(launch, address_type = "dynamic")]
pub fn activate_dense<F: Float, A: Float>(
    values: &mut Tensor<F>,
    len: usize,
    slope: f32,
    #[comptime] kind: ActivationKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= len {
        terminate!();
    }
    let x = A::cast_from(values[ABSOLUTE_POS]);
    values[ABSOLUTE_POS] = F::cast_from(activate::<A>(x, A::cast_from(slope), kind));
}

/// `out = kind(x)`, `x` in any layout, `out` contiguous.
#[cube(launch, address_type = "dynamic")]
pub fn activate_strided<F: Float, A: Float>(
    x: &Tensor<F>,
    out: &mut Tensor<F>,
    slope: f32,
    #[comptime] kind: ActivationKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= out.len() {
        terminate!();
    }
    let value = A::cast_from(x[offset_of::<F>(x, out, ABSOLUTE_POS)]);
    out[ABSOLUTE_POS] = F::cast_from(activate::<A>(value, A::cast_from(slope), kind));
}

/// `grad = out_grad * kind'(saved)`, the operands in any layout, `grad` contiguous.
#[cube(launch, address_type = "dynamic")]
pub fn activation_backward<F: Float, A: Float>(
    saved: &Tensor<F>,
    out_grad: &Tensor<F>,
    grad: &mut Tensor<F>,
    slope: f32,
    #[comptime] kind: ActivationKind,
    #[define(F, A)] _dtypes: [ElemType; 2],
) {
    if ABSOLUTE_POS >= grad.len() {
        terminate!();
    }
    let value = A::cast_from(saved[offset_of::<F>(saved, grad, ABSOLUTE_POS)]);
    let upstream = A::cast_from(out_grad[offset_of::<F>(out_grad, grad, ABSOLUTE_POS)]);
    let d = derivative::<A>(value, A::cast_from(slope), kind);
    grad[ABSOLUTE_POS] = F::cast_from(upstream * d);
}

/// `value` with `activation` applied (computed in `A`), or as it is where there is none: the
/// epilogue of a kernel that stores a convolution's final result.
#[cube]
pub fn epilogue<F: Float, A: Float>(
    value: F,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
) -> F {
    let mut result = value;
    if comptime![activation.is_some()] {
        let kind = comptime![activation.unwrap()];
        result = F::cast_from(activate::<A>(
            A::cast_from(value),
            A::cast_from(slope),
            kind,
        ));
    }
    result
}
