//! Convolutions and transposed convolutions of every rank: the general strategy (any shape,
//! stride, dilation, padding and mode, a few channels), the call through the crate's `try_`
//! twins, and the property against the reference.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{Device, Tensor};
use burn_convpool::*;
use proptest::prelude::*;

use super::layout::{Layout, layout, tensor_in};
use super::reference::{self, Expected, Mode, Window};
use super::{
    Got, case_dtype, cases, check, data, floats, fuzz, grad_values, len_param, lifted, out_grad,
    pad_param, size_param, tail, user_dims,
};

/// Parameters of one convolution or transposed convolution.
#[derive(Debug, Clone)]
pub(super) struct ConvCase {
    pub(super) rank: usize,
    pub(super) batch: usize,
    /// Input channels, and output channels per group.
    pub(super) channels: (usize, usize),
    pub(super) groups: usize,
    pub(super) size: [usize; 3],
    pub(super) kernel: [usize; 3],
    pub(super) stride: [usize; 3],
    pub(super) dilation: [usize; 3],
    pub(super) padding: [(usize, usize); 3],
    pub(super) bias: bool,
    pub(super) transpose: bool,
    pub(super) output_padding: [usize; 3],
    pub(super) output_size: Option<[usize; 3]>,
    /// `padding="same"` instead of `padding` (plain convolutions).
    pub(super) same: bool,
    /// PyTorch's `padding_mode` (plain convolutions).
    pub(super) mode: Mode,
    /// A fused activation.
    pub(super) activation: Option<Activation>,
    pub(super) seed: u64,
}

fn padding_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        6 => Just(Mode::Zeros),
        1 => Just(Mode::Reflect),
        1 => Just(Mode::Replicate),
        1 => Just(Mode::Circular),
    ]
}

/// Any activation, a leaky ReLU's slope of either sign.
fn activation() -> impl Strategy<Value = Activation> {
    prop_oneof![
        Just(Activation::Relu),
        (-1.0f64..1.0).prop_map(|negative_slope| Activation::LeakyRelu { negative_slope }),
        Just(Activation::Silu),
        Just(Activation::Gelu),
        Just(Activation::GeluTanh),
    ]
}

fn conv_case() -> impl Strategy<Value = ConvCase> {
    let axes = |s: std::ops::RangeInclusive<usize>| proptest::array::uniform3(s);
    (
        (
            1usize..=3,
            len_param(2),
            len_param(4),
            len_param(3),
            prop_oneof![3 => Just(1), 1 => len_param(3)],
        ),
        (
            proptest::array::uniform3(len_param(5)),
            proptest::array::uniform3(len_param(3)),
        ),
        (
            proptest::array::uniform3(size_param(3)),
            proptest::array::uniform3(size_param(3)),
            proptest::array::uniform3((pad_param(), pad_param())),
        ),
        (any::<bool>(), any::<bool>(), axes(0..=2)),
        (
            proptest::option::weighted(0.2, axes(0..=9)),
            proptest::bool::weighted(0.15),
            padding_mode(),
            proptest::option::weighted(0.25, activation()),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, groups),
                (size, kernel),
                (stride, dilation, padding),
                (bias, transpose, output_padding),
                (output_size, same, mode, activation, seed),
            )| {
                // Unit axes below the rank, as the crate lifts them.
                let lift = |values: [usize; 3], unit: usize| {
                    core::array::from_fn(|a| if a < 3 - rank { unit } else { values[a] })
                };
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in, per_out),
                    groups,
                    size: lift(size, 1),
                    kernel: lift(kernel, 1),
                    stride: lift(stride, 1),
                    dilation: lift(dilation, 1),
                    padding: core::array::from_fn(
                        |a| {
                            if a < 3 - rank { (0, 0) } else { padding[a] }
                        },
                    ),
                    bias,
                    transpose,
                    output_padding: lift(output_padding, 0),
                    output_size: output_size.map(|size| lift(size, 1)),
                    same: same && !transpose,
                    mode: if transpose { Mode::Zeros } else { mode },
                    activation,
                    seed,
                }
            },
        )
}

impl ConvCase {
    fn x_dims(&self) -> [usize; 5] {
        let [d, h, w] = self.size;
        [self.batch, self.channels.0, d, h, w]
    }

    /// `(C_out, C_in / groups, *k)`, or `(C_in, C_out / groups, *k)` when transposed; a groups
    /// count that does not divide the channels gives the floor (the op must reject it).
    fn w_dims(&self) -> [usize; 5] {
        let [d, h, w] = self.kernel;
        let (c_in, per_out) = self.channels;
        let groups = self.groups.max(1);
        if self.transpose {
            [c_in, per_out, d, h, w]
        } else {
            [per_out * groups, c_in / groups, d, h, w]
        }
    }

    fn bias_len(&self) -> usize {
        self.channels.1 * self.groups.max(1)
    }

    fn window(&self) -> Window {
        Window {
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
            padding: if self.transpose {
                self.padding.map(|(p, _)| (p, p))
            } else {
                self.padding
            },
        }
    }

    pub(super) fn expected(&self, x: &[f64], w: &[f64], b: Option<&[f64]>) -> Option<Expected> {
        let Some(activation) = self.activation else {
            return self.expected_with(x, w, b, out_grad(self.seed));
        };
        // The convolution's result before the activation sets the activation's derivative,
        // which scales the output gradient the convolution's backward then takes.
        let pre = self.expected_with(x, w, b, out_grad(self.seed))?.out;
        let derivatives: Vec<f64> = pre
            .iter()
            .map(|&v| reference::activation_derivative(activation, v))
            .collect();
        let g = out_grad(self.seed);
        let scaled = move |dims| {
            let g = g(dims);
            g.iter().zip(&derivatives).map(|(g, d)| g * d).collect()
        };
        let mut expected = self.expected_with(x, w, b, scaled)?;
        expected.out = pre
            .iter()
            .map(|&v| reference::activation(activation, v))
            .collect();
        Some(expected)
    }

    /// Whether a ReLU's kink makes the expected gradient depend on roundoff: some result
    /// before it, not 0, lies within f32's roundoff of 0, where the f32 computation and the
    /// f64 reference may take different sides.
    fn straddles_a_kink(&self, x: &[f64], w: &[f64], b: Option<&[f64]>) -> bool {
        let kinked = matches!(
            self.activation,
            Some(Activation::Relu | Activation::LeakyRelu { .. })
        );
        kinked
            && self
                .expected_with(x, w, b, out_grad(self.seed))
                .is_some_and(|pre| pre.out.iter().any(|&v| v != 0.0 && v.abs() < 1e-4))
    }

    /// [`Self::expected`] without the activation, the output gradient `g`.
    fn expected_with(
        &self,
        x: &[f64],
        w: &[f64],
        b: Option<&[f64]>,
        g: impl Fn([usize; 5]) -> Vec<f64>,
    ) -> Option<Expected> {
        if self.transpose {
            reference::conv_transpose(
                x,
                self.x_dims(),
                w,
                self.w_dims(),
                b,
                &self.window(),
                self.output_padding,
                self.output_size,
                self.groups,
                g,
            )
        } else {
            let mut window = self.window();
            if self.same {
                window.padding = reference::same_padding(&window)?;
            }
            reference::conv(
                x,
                self.x_dims(),
                w,
                self.w_dims(),
                b,
                &window,
                self.groups,
                self.mode,
                g,
            )
        }
    }
}

/// A rank-N conv or transposed conv of the crate.
type ConvFn<const N: usize, const D: usize, O> =
    fn(Tensor<D>, Tensor<D>, Option<Tensor<1>>, O) -> Result<Tensor<D>, SpecError>;

/// Call the crate's conv or conv_transpose of the case's rank on `device`.
pub(super) fn run_conv(case: &ConvCase, layout: Layout, device: &Device) -> Result<Got, SpecError> {
    match case.rank {
        1 => run_conv_n::<1, 3>(case, layout, device, try_conv1d, try_conv_transpose1d),
        2 => run_conv_n::<2, 4>(case, layout, device, try_conv2d, try_conv_transpose2d),
        _ => run_conv_n::<3, 5>(case, layout, device, try_conv3d, try_conv_transpose3d),
    }
}

/// The case's inputs: `x`, `weight` and the optional bias.
pub(super) fn inputs(case: &ConvCase) -> (Vec<f64>, Vec<f64>, Option<Vec<f64>>) {
    let volume = |dims: [usize; 5]| dims.iter().product();
    let x = data(case.seed, volume(case.x_dims()));
    let w = data(case.seed ^ 1, volume(case.w_dims()));
    let b = case.bias.then(|| data(case.seed ^ 2, case.bias_len()));
    (x, w, b)
}

fn run_conv_n<const N: usize, const D: usize>(
    case: &ConvCase,
    layout: Layout,
    device: &Device,
    conv: ConvFn<N, D, ConvNdOptions<N>>,
    conv_transpose: ConvFn<N, D, ConvTransposeNdOptions<N>>,
) -> Result<Got, SpecError> {
    let (x_dims, w_dims) = (user_dims(case.x_dims(), N), user_dims(case.w_dims(), N));
    let (x, w, b) = inputs(case);
    let dtype = case_dtype(case.seed, device);
    let x_t: Tensor<D> = tensor_in(layout, &x, &x_dims, device, dtype).require_grad();
    let w_t: Tensor<D> = tensor_in(layout, &w, &w_dims, device, dtype).require_grad();
    let b_t = b
        .as_ref()
        .map(|b| tensor_in::<1>(layout, b, &[b.len()], device, dtype).require_grad());
    let out = if case.transpose {
        let mut options = ConvTransposeNdOptions::<N>::default()
            .with_stride(tail(case.stride))
            .with_dilation(tail(case.dilation))
            .with_padding(tail(case.padding.map(|(p, _)| p)))
            .with_padding_out(tail(case.output_padding))
            .with_groups(case.groups);
        if let Some(size) = case.output_size {
            options = options.with_output_size(tail(size));
        }
        if let Some(activation) = case.activation {
            options = options.with_activation(activation);
        }
        conv_transpose(x_t.clone(), w_t.clone(), b_t.clone(), options)?
    } else {
        let padding = if case.same {
            Padding::Same
        } else {
            Padding::Explicit(tail(case.padding))
        };
        let mode = match case.mode {
            Mode::Zeros => PaddingMode::Zeros,
            Mode::Reflect => PaddingMode::Reflect,
            Mode::Replicate => PaddingMode::Replicate,
            Mode::Circular => PaddingMode::Circular,
        };
        let options = ConvNdOptions::<N>::default()
            .with_stride(tail(case.stride))
            .with_dilation(tail(case.dilation))
            .with_padding(padding)
            .with_padding_mode(mode)
            .with_groups(case.groups);
        let options = ConvNdOptions {
            activation: case.activation,
            ..options
        };
        conv(x_t.clone(), w_t.clone(), b_t.clone(), options)?
    };
    let dims = out.dims().to_vec();
    let g = out_grad(case.seed)(lifted(&dims, N));
    let grads = (out.clone() * tensor_in::<D>(layout, &g, &dims, device, dtype))
        .sum()
        .backward();
    let mut leaf_grads = vec![
        grad_values(x_t.grad(&grads), x.len()),
        grad_values(w_t.grad(&grads), w.len()),
    ];
    if let (Some(b_t), Some(b)) = (&b_t, &b) {
        leaf_grads.push(grad_values(b_t.grad(&grads), b.len()));
    }
    Ok(Got {
        out: floats(out),
        dims,
        indices: None,
        grads: leaf_grads,
    })
}

/// The conv property on `device`, for the general cases.
pub(super) fn fuzz_conv(name: &str, device: Device, cases: u32) {
    fuzz_conv_cases(name, device, cases, conv_case());
}

/// The conv property on `device` for the cases `strategy` draws.
pub(super) fn fuzz_conv_cases(
    name: &str,
    device: Device,
    cases: u32,
    strategy: impl Strategy<Value = ConvCase>,
) {
    fuzz(name, cases, (strategy, layout()), |(case, layout)| {
        let (x, w, b) = inputs(&case);
        if case.straddles_a_kink(&x, &w, b.as_deref()) {
            return Ok(false);
        }
        let got = catch_unwind(AssertUnwindSafe(|| run_conv(&case, layout, &device)));
        let expected = case.expected(&x, &w, b.as_deref());
        let dtype = case_dtype(case.seed, &device);
        check(
            &format!("{case:?} {layout:?} {dtype:?}"),
            got,
            expected,
            case.rank,
        )
    });
}

#[test]
fn conv_and_conv_transpose_match_the_reference() {
    fuzz_conv(
        "conv on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024),
    );
}
