//! Property-based fuzzing of the `try_` twins (issue 13): random ranks, shapes (0 and 1
//! included), strides, dilations, paddings, groups, ceil modes, output sizes and pool kinds,
//! some parameters near `usize::MAX`, tensors in random memory layouts (`layout.rs`), pool
//! inputs holding NaN and infinities (PyTorch's max and `pow` rules, LP gradients included),
//! fractional pools with samples at and beyond `[0, 1]`'s ends, and max-unpools with repeated,
//! out-of-range indices and explicit output sizes on both sides of the default.
//! Every call must return a typed error exactly when the independent reference
//! (`reference.rs`: PyTorch's definitions as direct f64 loops) rejects the input, and
//! otherwise the reference's output, indices and gradients. A panic fails the case, so does a
//! wrong shape.
//!
//! `FUZZ_CASES` sets the cases per property on Flex (1024 by default, a quarter on NdArray;
//! thousands for a longer run, e.g. `FUZZ_CASES=20000 cargo test --release --test suite fuzz::`);
//! in a build with `wgpu` or `vulkan`, `FUZZ_GPU_CASES` the cases on the CubeCL kernels (24 by
//! default: lavapipe compiles a kernel for each new shape). `FUZZ_TRACE=1` prints each case
//! before it runs. The cases are random per run unless `PROPTEST_RNG_SEED` fixes them (CI does).

mod layout;
mod reference;
mod watchdog;

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_convpool::*;
use layout::{Layout, layout, tensor_in};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reference::{Expected, Mode, Sliding, Window};
use watchdog::Watchdog;

/// Cases per property from `var`, else `default`.
fn cases(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Run `property` over `strategy`, with no failure files written; the property returns
/// whether the case was valid, and the counts are printed (`--nocapture` shows them). Each
/// case runs under a [`Watchdog`]; with `FUZZ_TRACE` set, each is printed before it runs (a
/// case that aborts the process, an allocation that fails, leaves no proptest report).
fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let valid = std::sync::atomic::AtomicUsize::new(0);
    let rejected = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(config);
    let watchdog = Watchdog::new(name);
    let trace = std::env::var_os("FUZZ_TRACE").is_some();
    let result = runner.run(&strategy, |case| {
        let shown = format!("{case:?}");
        if trace {
            eprintln!("{name}: {shown}");
        }
        let counter = if watchdog.watch(shown, || property(case))? {
            &valid
        } else {
            &rejected
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{name}: {failure}");
    }
    println!(
        "{name}: {} cases computed and matched the reference, {} rejected as the reference does",
        valid.into_inner(),
        rejected.into_inner()
    );
}

/// The dtype a case runs in: F64 for one case in four on a CPU device (whose kernels are
/// generic over the element, with their own vector widths and paths for f64), else F32 (a
/// CubeCL device compiles its kernels per dtype, which lavapipe is slow at). Seed 0, the
/// found cases' and where shrinking ends, stays F32.
fn case_dtype(seed: u64, device: &Device) -> DType {
    #[cfg(any(feature = "wgpu", feature = "vulkan"))]
    if matches!(
        device.clone().without_autodiff().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    ) {
        return DType::F32;
    }
    #[cfg(not(any(feature = "wgpu", feature = "vulkan")))]
    let _ = device;
    if seed.is_multiple_of(4) && seed != 0 {
        DType::F64
    } else {
        DType::F32
    }
}

/// A size parameter: mostly in `1..=most`, sometimes 0 or huge (the overflow paths).
fn size_param(most: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        240 => 1..=most,
        3 => Just(0),
        1 => Just(usize::MAX / 2),
        1 => Just(usize::MAX),
        1 => Just(1usize << 40),
    ]
}

/// A length or channel count: mostly `1..=most`, sometimes 0.
fn len_param(most: usize) -> impl Strategy<Value = usize> {
    prop_oneof![30 => 1..=most, 1 => Just(0)]
}

/// Values in `[-1, 1)`, rounded to f32 (the reference computes on the same numbers).
fn data(seed: u64, len: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005) | 1;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
            (unit * 2.0 - 1.0) as f32 as f64
        })
        .collect()
}

/// The output gradient for output dims, from a seed.
fn out_grad(seed: u64) -> impl Fn([usize; 5]) -> Vec<f64> {
    move |dims| data(seed ^ 0x9e37, dims.iter().product())
}

fn floats<const D: usize>(tensor: Tensor<D>) -> Vec<f64> {
    let data = tensor.into_data().convert::<f64>();
    data.try_to_vec::<f64>().expect("f64 data")
}

/// Dims of rank `2 + n` from lifted rank-5 dims (the leading unit axes dropped).
fn user_dims(dims: [usize; 5], n: usize) -> Vec<usize> {
    [&dims[..2], &dims[5 - n..]].concat()
}

/// What an op call gave: output, indices (max pools), gradients of `sum(out * g)`.
struct Got {
    out: Vec<f64>,
    dims: Vec<usize>,
    indices: Option<Vec<i64>>,
    grads: Vec<Vec<f64>>,
}

/// Compare a call with the reference: the same verdict, then the same numbers.
fn check(
    what: &str,
    got: std::thread::Result<Result<Got, SpecError>>,
    expected: Option<Expected>,
    n: usize,
) -> Result<bool, TestCaseError> {
    let got = match got {
        Ok(got) => got,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Err(TestCaseError::fail(format!("{what}: panicked: {message}")));
        }
    };
    let (got, expected) = match (got, expected) {
        (Err(_), None) => return Ok(false),
        // A CubeCL device's documented limit (32-bit kernel arithmetic), not a wrong verdict.
        (Err(error), Some(_)) if matches!(error.kind, SpecErrorKind::DeviceLimit { .. }) => {
            return Ok(false);
        }
        (Err(error), Some(_)) => {
            return Err(TestCaseError::fail(format!(
                "{what}: rejected a valid input: {error}"
            )));
        }
        (Ok(got), None) => {
            return Err(TestCaseError::fail(format!(
                "{what}: accepted an input PyTorch rejects, output dims {:?}",
                got.dims
            )));
        }
        (Ok(got), Some(expected)) => (got, expected),
    };
    prop_assert_eq!(&got.dims, &user_dims(expected.dims, n), "{}: dims", what);
    // Beyond the flat tolerance, the roundoff a cancelling sum amplifies (f32's; f64 cases
    // get the same bound).
    let close = |label: &str, a: &[f64], b: &[f64], roundoff: Option<&Vec<f64>>| {
        prop_assert_eq!(a.len(), b.len(), "{}: {} length", what, label);
        for (i, (&a, &b)) in a.iter().zip(b).enumerate() {
            let slack = roundoff.map_or(0.0, |r| 4.0 * f64::from(f32::EPSILON) * r[i]);
            let same = a == b
                || (a.is_nan() && b.is_nan())
                || (a - b).abs() <= 1e-4 + 1e-4 * b.abs() + slack;
            prop_assert!(same, "{}: {}[{}] is {}, expected {}", what, label, i, a, b);
        }
        Ok(())
    };
    close("out", &got.out, &expected.out, expected.roundoff.first())?;
    if let (Some(got), Some(expected)) = (&got.indices, &expected.indices) {
        prop_assert_eq!(got, expected, "{}: indices", what);
    }
    prop_assert_eq!(got.grads.len(), expected.grads.len(), "{}: gradients", what);
    for (i, (grad, want)) in got.grads.iter().zip(&expected.grads).enumerate() {
        close(
            &format!("grad {i}"),
            grad,
            want,
            expected.roundoff.get(i + 1),
        )?;
    }
    Ok(true)
}

/// Parameters of one convolution or transposed convolution.
#[derive(Debug, Clone)]
struct ConvCase {
    rank: usize,
    batch: usize,
    /// Input channels, and output channels per group.
    channels: (usize, usize),
    groups: usize,
    size: [usize; 3],
    kernel: [usize; 3],
    stride: [usize; 3],
    dilation: [usize; 3],
    padding: [(usize, usize); 3],
    bias: bool,
    transpose: bool,
    output_padding: [usize; 3],
    output_size: Option<[usize; 3]>,
    /// `padding="same"` instead of `padding` (plain convolutions).
    same: bool,
    /// PyTorch's `padding_mode` (plain convolutions).
    mode: Mode,
    seed: u64,
}

/// A convolution's padding on one side: mostly 0 to 2, rarely huge (with a huge stride, one
/// output over a padded copy no machine holds).
fn pad_param() -> impl Strategy<Value = usize> {
    prop_oneof![60 => 0usize..=2, 1 => Just(1usize << 40)]
}

fn padding_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        6 => Just(Mode::Zeros),
        1 => Just(Mode::Reflect),
        1 => Just(Mode::Replicate),
        1 => Just(Mode::Circular),
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
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, groups),
                (size, kernel),
                (stride, dilation, padding),
                (bias, transpose, output_padding),
                (output_size, same, mode, seed),
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

    fn expected(&self, x: &[f64], w: &[f64], b: Option<&[f64]>) -> Option<Expected> {
        let g = out_grad(self.seed);
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
fn run_conv(case: &ConvCase, layout: Layout, device: &Device) -> Result<Got, SpecError> {
    match case.rank {
        1 => run_conv_n::<1, 3>(case, layout, device, try_conv1d, try_conv_transpose1d),
        2 => run_conv_n::<2, 4>(case, layout, device, try_conv2d, try_conv_transpose2d),
        _ => run_conv_n::<3, 5>(case, layout, device, try_conv3d, try_conv_transpose3d),
    }
}

/// The case's inputs: `x`, `weight` and the optional bias.
fn inputs(case: &ConvCase) -> (Vec<f64>, Vec<f64>, Option<Vec<f64>>) {
    let volume = |dims: [usize; 5]| dims.iter().product();
    let x = data(case.seed, volume(case.x_dims()));
    let w = data(case.seed ^ 1, volume(case.w_dims()));
    let b = case.bias.then(|| data(case.seed ^ 2, case.bias_len()));
    (x, w, b)
}

/// The last `N` of three per-axis values.
fn tail<T: Copy, const N: usize>(values: [T; 3]) -> [T; N] {
    core::array::from_fn(|i| values[3 - N + i])
}

/// A gradient's values, zeros when autodiff has none (an input no output depends on).
fn grad_values<const D: usize>(grad: Option<Tensor<D>>, len: usize) -> Vec<f64> {
    grad.map_or_else(|| vec![0.0; len], floats)
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

/// Rank-5 dims from the caller's rank-`2 + n` dims.
fn lifted(dims: &[usize], n: usize) -> [usize; 5] {
    let mut five = [1; 5];
    five[..2].copy_from_slice(&dims[..2]);
    five[5 - n..].copy_from_slice(&dims[2..]);
    five
}

/// The conv property on `device`, for the general cases.
fn fuzz_conv(name: &str, device: Device, cases: u32) {
    fuzz_conv_cases(name, device, cases, conv_case());
}

/// The conv property on `device` for the cases `strategy` draws.
fn fuzz_conv_cases(
    name: &str,
    device: Device,
    cases: u32,
    strategy: impl Strategy<Value = ConvCase>,
) {
    fuzz(name, cases, (strategy, layout()), |(case, layout)| {
        let got = catch_unwind(AssertUnwindSafe(|| run_conv(&case, layout, &device)));
        let (x, w, b) = inputs(&case);
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

/// 3-tap stride-1 convolutions (and their transposes) wide enough for the CPU's Winograd path
/// (64+ channels per group, 8+ outputs per 3-tap axis), which the general strategy's few
/// channels never reach.
fn winograd_case() -> impl Strategy<Value = ConvCase> {
    (
        (
            1usize..=3,
            1usize..=2,
            64usize..=70,
            64usize..=70,
            any::<bool>(),
        ),
        (
            proptest::array::uniform3(8usize..=11),
            proptest::array::uniform3((0usize..=2, 0usize..=2)),
        ),
        (any::<bool>(), any::<bool>(), any::<u64>()),
    )
        .prop_map(
            |((rank, batch, c_in, per_out, grouped), (size, padding), (bias, transpose, seed))| {
                let groups = if grouped { 2 } else { 1 };
                let active = |a: usize| a >= 3 - rank;
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    // 3D planes stay small: every case runs the f64 reference three times.
                    size: core::array::from_fn(|a| match (active(a), rank) {
                        (false, _) => 1,
                        (true, 3) => size[a] - 2,
                        (true, _) => size[a],
                    }),
                    kernel: core::array::from_fn(|a| if active(a) { 3 } else { 1 }),
                    stride: [1; 3],
                    dilation: [1; 3],
                    padding: core::array::from_fn(|a| if active(a) { padding[a] } else { (0, 0) }),
                    bias,
                    transpose,
                    output_padding: [0; 3],
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    seed,
                }
            },
        )
}

#[test]
fn winograd_sized_convs_match_the_reference() {
    fuzz_conv_cases(
        "winograd-sized conv on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024).div_ceil(64),
        winograd_case(),
    );
}

/// Strided convolutions (and their transposes) whose kernel is a whole number of strides on
/// every axis, sized for the CPU's phase-grid path (input channels per group times phases 64+,
/// output channels per group 16+, and outputs long enough on multi-tap axes), which the
/// general strategy's few channels and small planes never reach. In 3D only the last axis
/// has several taps, so the f64 reference stays small.
fn phase_case() -> impl Strategy<Value = ConvCase> {
    (
        (
            1usize..=3,
            1usize..=2,
            32usize..=36,
            16usize..=20,
            any::<bool>(),
        ),
        (
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(0usize..=3),
            proptest::array::uniform3((0usize..=8, 0usize..=8)),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            proptest::array::uniform3(0usize..=2),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, grouped),
                (stride, taps, extra, padding),
                (bias, transpose, output_padding, seed),
            )| {
                let groups = if grouped { 2 } else { 1 };
                let active = |a: usize| a >= 3 - rank;
                // The last axis is strided and has two taps or more; in 3D it is the only one.
                let stride: [usize; 3] = core::array::from_fn(|a| match (active(a), a) {
                    (false, _) => 1,
                    (true, 2) => stride[a].max(2),
                    (true, _) => stride[a],
                });
                let taps: [usize; 3] = core::array::from_fn(|a| match (active(a), a, rank) {
                    (false, _, _) | (true, 0 | 1, 3) => 1,
                    (true, 2, _) => taps[a].max(2),
                    (true, _, _) => taps[a],
                });
                let kernel: [usize; 3] = core::array::from_fn(|a| stride[a] * taps[a]);
                // Outputs: 14 per extra tap keeps the grids within 1.15 points per output
                // with two multi-tap axes; a one-tap axis may be short.
                let out: [usize; 3] = core::array::from_fn(|a| match (active(a), taps[a]) {
                    (false, _) => 1,
                    (true, 1) => 1 + extra[a],
                    (true, t) => 14 * (t - 1) + extra[a],
                });
                let (padding, size) = fitted(out, stride, kernel, padding, rank, transpose);
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    size,
                    kernel,
                    stride,
                    dilation: [1; 3],
                    padding,
                    bias,
                    transpose,
                    output_padding: core::array::from_fn(|a| output_padding[a] % stride[a]),
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    seed,
                }
            },
        )
}

#[test]
fn phase_sized_convs_match_the_reference() {
    fuzz_conv_cases(
        "phase-sized strided conv on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024).div_ceil(64),
        phase_case(),
    );
}

/// The padding and input size of a case of rank `rank` with `out` outputs per axis and kernels
/// spanning `extent` (dilation included), from `drawn` padding: below the extent, symmetric for
/// a transposed conv, and for a conv leaving at least one input (the padded length is
/// `(out - 1) s + extent`); none and unit sizes on the axes below the rank. A transposed conv
/// takes the small side, whose length is the adjoint's output; a conv the input that gives
/// exactly `out`.
fn fitted(
    out: [usize; 3],
    stride: [usize; 3],
    extent: [usize; 3],
    drawn: [(usize, usize); 3],
    rank: usize,
    transpose: bool,
) -> ([(usize, usize); 3], [usize; 3]) {
    let active = |a: usize| a >= 3 - rank;
    let span = |a: usize| (out[a] - 1) * stride[a] + extent[a];
    let padding: [(usize, usize); 3] = core::array::from_fn(|a| {
        let (begin, end) = (drawn[a].0 % extent[a], drawn[a].1 % extent[a]);
        if !active(a) {
            (0, 0)
        } else if transpose {
            (begin, begin)
        } else {
            (begin, end.min(span(a) - 1 - begin))
        }
    });
    let size = core::array::from_fn(|a| {
        if !active(a) || transpose {
            out[a]
        } else {
            span(a) - padding[a].0 - padding[a].1
        }
    });
    (padding, size)
}

/// Small outputs (1 to 8 per axis) over batches of 4 to 9, so that on two threads (as on CI)
/// each task holds several images and the CPU lowers them a tile of several images at a time:
/// "same" ones from channels staged side by side, the others by table. Any stride, dilation
/// (2^40 where never taken), asymmetric padding, groups and transposes, which the general
/// strategy's batches of one or two never tile.
fn tiled_case() -> impl Strategy<Value = ConvCase> {
    const HUGE_STEP: usize = 1 << 40;
    (
        (1usize..=3, 4usize..=9, 1usize..=4, 1usize..=4, 1usize..=2),
        (
            proptest::array::uniform3(1usize..=8),
            proptest::array::uniform3(1usize..=3),
            proptest::array::uniform3(prop_oneof![15 => 1usize..=3, 1 => Just(HUGE_STEP)]),
            proptest::array::uniform3(prop_oneof![15 => 1usize..=2, 1 => Just(HUGE_STEP)]),
            proptest::array::uniform3((0usize..=3, 0usize..=3)),
        ),
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            proptest::array::uniform3(0usize..=2),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, c_in, per_out, groups),
                (out, kernel, stride, dilation, padding),
                (same, bias, transpose, output_padding, seed),
            )| {
                let active = |a: usize| a >= 3 - rank;
                let pick = |values: [usize; 3]| -> [usize; 3] {
                    core::array::from_fn(|a| if active(a) { values[a] } else { 1 })
                };
                // "Same": stride 1 and odd kernels padded by half their dilated extent.
                let (kernel, stride, dilation) = if same {
                    (
                        pick(kernel.map(|k| 2 * (k / 2) + 1)),
                        [1; 3],
                        pick(dilation),
                    )
                } else {
                    (pick(kernel), pick(stride), pick(dilation))
                };
                let out = pick(out);
                // A huge step is valid (as in PyTorch) where it is never taken: a stride over
                // one output, a dilation in a one-tap window; elsewhere it becomes 2.
                let unused_only = |steps: [usize; 3], counts: [usize; 3]| {
                    core::array::from_fn(|a| match (steps[a], counts[a]) {
                        (HUGE_STEP, 1) => HUGE_STEP,
                        (HUGE_STEP, _) => 2,
                        (step, _) => step,
                    })
                };
                let (stride, dilation) = (unused_only(stride, out), unused_only(dilation, kernel));
                let extent: [usize; 3] =
                    core::array::from_fn(|a| (kernel[a] - 1) * dilation[a] + 1);
                // "Same" pads half the (odd) extent on both sides, which `fitted` keeps.
                let padding = if same {
                    extent.map(|e| (e / 2, e / 2))
                } else {
                    padding
                };
                let (padding, size) = fitted(out, stride, extent, padding, rank, transpose);
                ConvCase {
                    rank,
                    batch,
                    channels: (c_in * groups, per_out),
                    groups,
                    size,
                    kernel,
                    stride,
                    dilation,
                    padding,
                    bias,
                    transpose,
                    output_padding: core::array::from_fn(|a| output_padding[a] % stride[a]),
                    output_size: None,
                    same: false,
                    mode: Mode::Zeros,
                    seed,
                }
            },
        )
}

#[test]
fn tiled_small_convs_match_the_reference() {
    fuzz_conv_cases(
        "small conv in tiles of several images on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024).div_ceil(16),
        tiled_case(),
    );
}

/// Which pool a case runs.
#[derive(Debug, Clone, Copy)]
enum PoolKind {
    Sliding(Sliding),
    Adaptive {
        max: bool,
    },
    /// Fractional max pooling (2D and 3D) of `window.kernel` to `output_size`.
    Fractional(Samples),
    /// Max-unpooling by `window` (symmetric padding).
    Unpool(Unpool),
}

/// A max-unpool case: the output size (the default, or explicit at offsets from it) and
/// whether one index lies outside the output plane (an error).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Unpool {
    offsets: Option<[i64; 3]>,
    outside: bool,
}

fn unpool() -> impl Strategy<Value = Unpool> {
    (
        proptest::option::of(proptest::array::uniform3(-3i64..=3)),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(offsets, outside)| Unpool { offsets, outside })
}

/// The samples of a fractional pool case: uniform in `[0, 1)` as PyTorch draws them, with the
/// interval's ends, or with one value outside it (an error).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Samples {
    Uniform,
    Ends,
    Outside(f64),
}

fn samples() -> impl Strategy<Value = Samples> {
    prop_oneof![
        6 => Just(Samples::Uniform),
        2 => Just(Samples::Ends),
        1 => prop_oneof![
            Just(f64::NAN),
            Just(-0.5),
            Just(1.5),
            Just(f64::INFINITY),
            Just(-1e30),
        ]
        .prop_map(Samples::Outside),
    ]
}

/// Parameters of one pooling call.
#[derive(Debug, Clone)]
struct PoolCase {
    rank: usize,
    batch: usize,
    channels: usize,
    size: [usize; 3],
    kind: PoolKind,
    window: Window,
    ceil: bool,
    output_size: [usize; 3],
    /// Non-finite values in the input (PyTorch's NaN and infinity rules).
    specials: Specials,
    seed: u64,
}

/// Which non-finite values a pool case's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Specials {
    /// Finite values only.
    None,
    /// About one value in five NaN, +inf or -inf.
    Sparse,
    /// Mostly -inf (windows of -inf only keep their first tap), some NaN.
    NegInfinity,
}

fn specials() -> impl Strategy<Value = Specials> {
    prop_oneof![
        6 => Just(Specials::None),
        1 => Just(Specials::Sparse),
        1 => Just(Specials::NegInfinity),
    ]
}

fn pool_kind() -> impl Strategy<Value = PoolKind> {
    prop_oneof![
        3 => Just(PoolKind::Sliding(Sliding::Max)),
        3 => (any::<bool>(), proptest::option::weighted(0.2, 0usize..=5)).prop_map(
            |(count_include_pad, divisor_override)| {
                PoolKind::Sliding(Sliding::Avg { count_include_pad, divisor_override })
            }
        ),
        1 => prop_oneof![Just(1.0), Just(2.0), Just(3.0), Just(0.0)]
            .prop_map(|norm_type| PoolKind::Sliding(Sliding::Lp { norm_type })),
        2 => any::<bool>().prop_map(|max| PoolKind::Adaptive { max }),
        2 => samples().prop_map(PoolKind::Fractional),
        2 => unpool().prop_map(PoolKind::Unpool),
    ]
}

fn pool_case() -> impl Strategy<Value = PoolCase> {
    (
        (
            1usize..=3,
            len_param(2),
            len_param(3),
            proptest::array::uniform3(len_param(6)),
            pool_kind(),
        ),
        (
            proptest::array::uniform3(size_param(4)),
            proptest::array::uniform3(size_param(3)),
            proptest::array::uniform3(size_param(2)),
            proptest::array::uniform3(prop_oneof![
                40 => (0usize..=1, 0usize..=1),
                10 => (0usize..=2, 0usize..=2),
                1 => (pad_param(), pad_param()),
            ]),
        ),
        (
            any::<bool>(),
            proptest::array::uniform3(prop_oneof![60 => len_param(7), 1 => Just(1usize << 40)]),
            specials(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, channels, size, kind),
                (kernel, stride, dilation, padding),
                (ceil, output_size, specials, seed),
            )| {
                // PyTorch's fractional pools are 2D and 3D.
                let rank = match kind {
                    PoolKind::Fractional(_) => rank.max(2),
                    _ => rank,
                };
                let unit = |a: usize| a < 3 - rank;
                let lift = |values: [usize; 3], one: usize| {
                    core::array::from_fn(|a| if unit(a) { one } else { values[a] })
                };
                // Average and LP pools have no dilation, LP no padding, unpooling a symmetric
                // one.
                let (dilation, padding) = match kind {
                    PoolKind::Sliding(Sliding::Max) => (dilation, padding),
                    PoolKind::Sliding(Sliding::Avg { .. }) => ([1; 3], padding),
                    PoolKind::Unpool(_) => ([1; 3], padding.map(|(p, _)| (p, p))),
                    _ => ([1; 3], [(0, 0); 3]),
                };
                // A unit axis keeps its default length 1.
                let kind =
                    match kind {
                        PoolKind::Unpool(Unpool {
                            offsets: Some(offsets),
                            outside,
                        }) => PoolKind::Unpool(Unpool {
                            offsets: Some(core::array::from_fn(|a| {
                                if unit(a) { 0 } else { offsets[a] }
                            })),
                            outside,
                        }),
                        kind => kind,
                    };
                PoolCase {
                    rank,
                    batch,
                    channels,
                    size: lift(size, 1),
                    kind,
                    window: Window {
                        kernel: lift(kernel, 1),
                        stride: lift(stride, 1),
                        dilation: lift(dilation, 1),
                        padding: core::array::from_fn(
                            |a| if unit(a) { (0, 0) } else { padding[a] },
                        ),
                    },
                    ceil,
                    output_size: lift(output_size, 1),
                    specials,
                    seed,
                }
            },
        )
}

impl PoolCase {
    fn x_dims(&self) -> [usize; 5] {
        let [d, h, w] = self.size;
        [self.batch, self.channels, d, h, w]
    }

    /// The input's values: the seed's, some replaced by NaN and infinities as `specials` says.
    /// An unpool case's are a function of each element's index, so indices that repeat carry
    /// one value (as from overlapping max-pool windows; others write in any order on a GPU).
    fn input(&self) -> Vec<f64> {
        let mut x = match self.kind {
            PoolKind::Unpool(_) => {
                let in_volume: usize = self.size.iter().product();
                let indices = self.unpool_indices();
                let keys = indices.iter().enumerate().map(|(i, &index)| {
                    let plane = (i / in_volume.max(1)) as u64;
                    (plane << 32) ^ index as u64
                });
                keys.map(|key| data(self.seed ^ key, 1)[0]).collect()
            }
            _ => data(self.seed, self.x_dims().iter().product()),
        };
        let picks = data(self.seed ^ 0x5eed, x.len());
        for (value, pick) in x.iter_mut().zip(picks) {
            // `pick` is uniform in [-1, 1).
            let special = match self.specials {
                Specials::None => None,
                Specials::Sparse if pick < -0.8 => Some(f64::NAN),
                Specials::Sparse if pick < -0.7 => Some(f64::INFINITY),
                Specials::Sparse if pick < -0.6 => Some(f64::NEG_INFINITY),
                Specials::Sparse => None,
                Specials::NegInfinity if pick < -0.9 => Some(f64::NAN),
                Specials::NegInfinity if pick < 0.6 => Some(f64::NEG_INFINITY),
                Specials::NegInfinity => None,
            };
            *value = special.unwrap_or(*value);
        }
        x
    }

    /// An unpool case's output dims, when it has a valid one.
    fn unpool_dims(&self) -> Option<[usize; 5]> {
        let PoolKind::Unpool(unpool) = self.kind else {
            return None;
        };
        reference::unpool_dims(self.x_dims(), &self.window, unpool.offsets)
    }

    /// An unpool case's indices, each in its output plane (repeats included), but for the
    /// first when it is `outside`: one past the plane, or -1.
    fn unpool_indices(&self) -> Vec<i64> {
        let len: usize = self.x_dims().iter().product();
        let plane = self
            .unpool_dims()
            .map_or(1, |dims| dims[2..].iter().product::<usize>().max(1));
        let picks = data(self.seed ^ 0x1d1c, len);
        let mut indices: Vec<i64> = picks
            .iter()
            .map(|pick| (((pick + 1.0) / 2.0 * plane as f64) as i64).min(plane as i64 - 1))
            .collect();
        if let (PoolKind::Unpool(Unpool { outside: true, .. }), Some(first)) =
            (self.kind, indices.first_mut())
        {
            *first = if self.seed.is_multiple_of(2) {
                plane as i64
            } else {
                -1
            };
        }
        indices
    }

    /// The fractional samples `(N, C, rank)`, f32 values as the tensor holds them.
    fn samples(&self) -> Vec<f64> {
        let PoolKind::Fractional(kind) = self.kind else {
            return Vec::new();
        };
        let len = self.batch * self.channels * self.rank;
        let mut samples: Vec<f64> = data(self.seed ^ 0x5a3b, len)
            .iter()
            .map(|v| ((v + 1.0) / 2.0) as f32 as f64)
            .collect();
        let picks = data(self.seed ^ 0x5a3c, len);
        for (sample, pick) in samples.iter_mut().zip(&picks) {
            match kind {
                Samples::Ends if *pick < -0.5 => *sample = 0.0,
                Samples::Ends if *pick > 0.5 => *sample = 1.0,
                _ => {}
            }
        }
        if let (Samples::Outside(value), Some(pick)) = (kind, picks.first()) {
            let at = ((pick + 1.0) / 2.0 * len as f64) as usize;
            samples[at.min(len - 1)] = value as f32 as f64;
        }
        samples
    }

    /// The reference result, with fractional windows placed in f32 math when `f32_math` (an
    /// f32 input's, as PyTorch's), else in f64.
    fn expected(&self, x: &[f64], f32_math: bool) -> Option<Expected> {
        let g = out_grad(self.seed);
        match self.kind {
            PoolKind::Unpool(unpool) => reference::max_unpool(
                x,
                self.x_dims(),
                &self.unpool_indices(),
                &self.window,
                unpool.offsets,
                g,
            ),
            PoolKind::Fractional(_) => reference::fractional_pool(
                x,
                self.x_dims(),
                self.window.kernel,
                self.output_size,
                &self.samples(),
                self.rank,
                f32_math,
                g,
            ),
            PoolKind::Sliding(kind) => {
                reference::sliding_pool(x, self.x_dims(), &self.window, self.ceil, kind, g)
            }
            PoolKind::Adaptive { max } => {
                reference::adaptive_pool(x, self.x_dims(), self.output_size, max, g)
            }
        }
    }
}

/// A pool's output and indices.
type WithIndices<const D: usize> = Result<(Tensor<D>, Tensor<D, Int>), SpecError>;

/// A fractional max pool with indices.
type FractionalFn<const N: usize, const D: usize> =
    fn(Tensor<D>, FractionalMaxPoolOptions<N>, Option<Tensor<3>>) -> WithIndices<D>;

/// A max-unpool.
type UnpoolFn<const N: usize, const D: usize> =
    fn(Tensor<D>, Tensor<D, Int>, MaxUnpoolOptions<N>) -> Result<Tensor<D>, SpecError>;

/// The crate's pools of one rank: (max with indices, avg, lp, adaptive avg, adaptive max,
/// fractional max where the rank has one, max-unpool).
struct PoolFns<const N: usize, const D: usize> {
    max: fn(Tensor<D>, MaxPoolOptions<N>) -> WithIndices<D>,
    avg: fn(Tensor<D>, AvgPoolNdOptions<N>) -> Result<Tensor<D>, SpecError>,
    lp: fn(Tensor<D>, LpPoolOptions<N>) -> Result<Tensor<D>, SpecError>,
    adaptive_avg: fn(Tensor<D>, [usize; N]) -> Result<Tensor<D>, SpecError>,
    adaptive_max: fn(Tensor<D>, [usize; N]) -> WithIndices<D>,
    fractional: Option<FractionalFn<N, D>>,
    unpool: UnpoolFn<N, D>,
}

fn run_pool(case: &PoolCase, layout: Layout, device: &Device) -> Result<Got, SpecError> {
    match case.rank {
        1 => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<1, 3> {
                max: try_max_pool1d_with_indices,
                avg: try_avg_pool1d,
                lp: try_lp_pool1d,
                adaptive_avg: try_adaptive_avg_pool1d,
                adaptive_max: try_adaptive_max_pool1d_with_indices,
                fractional: None,
                unpool: try_max_unpool1d,
            },
        ),
        2 => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<2, 4> {
                max: try_max_pool2d_with_indices,
                avg: try_avg_pool2d,
                lp: try_lp_pool2d,
                adaptive_avg: try_adaptive_avg_pool2d,
                adaptive_max: try_adaptive_max_pool2d_with_indices,
                fractional: Some(try_fractional_max_pool2d_with_indices),
                unpool: try_max_unpool2d,
            },
        ),
        _ => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<3, 5> {
                max: try_max_pool3d_with_indices,
                avg: try_avg_pool3d,
                lp: try_lp_pool3d,
                adaptive_avg: try_adaptive_avg_pool3d,
                adaptive_max: try_adaptive_max_pool3d_with_indices,
                fractional: Some(try_fractional_max_pool3d_with_indices),
                unpool: try_max_unpool3d,
            },
        ),
    }
}

fn run_pool_n<const N: usize, const D: usize>(
    case: &PoolCase,
    layout: Layout,
    device: &Device,
    fns: PoolFns<N, D>,
) -> Result<Got, SpecError> {
    let x_dims = user_dims(case.x_dims(), N);
    let x = case.input();
    let dtype = case_dtype(case.seed, device);
    let x_t: Tensor<D> = tensor_in(layout, &x, &x_dims, device, dtype).require_grad();
    let window = &case.window;
    let (kernel, stride) = (tail(window.kernel), tail(window.stride));
    let (out, indices) = match case.kind {
        PoolKind::Sliding(Sliding::Max) => {
            let options = MaxPoolOptions {
                kernel_size: kernel,
                stride,
                padding: tail(window.padding),
                dilation: tail(window.dilation),
                ceil_mode: case.ceil,
            };
            let (out, indices) = (fns.max)(x_t.clone(), options)?;
            (out, Some(indices))
        }
        PoolKind::Sliding(Sliding::Avg {
            count_include_pad,
            divisor_override,
        }) => {
            let mut options = AvgPoolNdOptions::new(kernel)
                .with_stride(stride)
                .with_padding_pairs(tail(window.padding))
                .with_count_include_pad(count_include_pad)
                .with_ceil_mode(case.ceil);
            options.divisor_override = divisor_override;
            ((fns.avg)(x_t.clone(), options)?, None)
        }
        PoolKind::Sliding(Sliding::Lp { norm_type }) => {
            let options = LpPoolOptions::new(norm_type, kernel)
                .with_stride(stride)
                .with_ceil_mode(case.ceil);
            ((fns.lp)(x_t.clone(), options)?, None)
        }
        PoolKind::Adaptive { max: false } => (
            (fns.adaptive_avg)(x_t.clone(), tail(case.output_size))?,
            None,
        ),
        PoolKind::Adaptive { max: true } => {
            let (out, indices) = (fns.adaptive_max)(x_t.clone(), tail(case.output_size))?;
            (out, Some(indices))
        }
        PoolKind::Fractional(_) => {
            let fractional = fns.fractional.expect("fractional pools are 2D and 3D");
            let options = FractionalMaxPoolOptions::new(
                kernel,
                FractionalOutput::Size(tail(case.output_size)),
            );
            let samples_dims = [case.batch, case.channels, N];
            let samples = tensor_in::<3>(layout, &case.samples(), &samples_dims, device, dtype);
            let (out, indices) = fractional(x_t.clone(), options, Some(samples))?;
            (out, Some(indices))
        }
        PoolKind::Unpool(unpool) => {
            let mut options = MaxUnpoolOptions::new(kernel)
                .with_stride(stride)
                .with_padding(tail(window.padding.map(|(p, _)| p)));
            if let Some(offsets) = unpool.offsets {
                // Sizes that would be negative are out of range anyway; 0 stands for them.
                let default = reference::unpool_default(case.x_dims(), window);
                let sizes: [usize; 3] = core::array::from_fn(|a| {
                    default[a]
                        .saturating_add(offsets[a] as i128)
                        .clamp(0, usize::MAX as i128) as usize
                });
                options = options.with_output_size(tail(sizes));
            }
            let indices = TensorData::new(case.unpool_indices(), x_dims.clone());
            let indices = Tensor::<D, Int>::from_data(indices, device);
            ((fns.unpool)(x_t.clone(), indices, options)?, None)
        }
    };
    let dims = out.dims().to_vec();
    let g = out_grad(case.seed)(lifted(&dims, N));
    let grads = (out.clone() * tensor_in::<D>(layout, &g, &dims, device, dtype))
        .sum()
        .backward();
    let grads = vec![grad_values(x_t.grad(&grads), x.len())];
    let indices = indices.map(|indices| {
        let data = indices.into_data().convert::<i64>();
        data.try_to_vec::<i64>().expect("i64 indices")
    });
    Ok(Got {
        out: floats(out),
        dims,
        indices,
        grads,
    })
}

/// The pool property on `device`.
fn fuzz_pool(name: &str, device: Device, cases: u32) {
    fuzz(name, cases, (pool_case(), layout()), |(case, layout)| {
        let got = catch_unwind(AssertUnwindSafe(|| run_pool(&case, layout, &device)));
        let x = case.input();
        let dtype = case_dtype(case.seed, &device);
        check(
            &format!("{case:?} {layout:?} {dtype:?}"),
            got,
            case.expected(&x, dtype == DType::F32),
            case.rank,
        )
    });
}

#[test]
fn pools_match_the_reference() {
    fuzz_pool(
        "pool on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024),
    );
}

/// NdArray shares the CPU kernels; its own host conversions are what this checks.
#[cfg(feature = "ndarray")]
#[test]
#[allow(deprecated)]
fn ndarray_matches_the_reference() {
    let device = Device::ndarray().autodiff();
    fuzz_conv(
        "conv on ndarray",
        device.clone(),
        cases("FUZZ_CASES", 1024) / 4,
    );
    fuzz_pool("pool on ndarray", device, cases("FUZZ_CASES", 1024) / 4);
}

/// The CubeCL kernels (wgpu: lavapipe in CI; Vulkan on a GPU), with fewer cases: each new
/// shape compiles kernels. Each of our kernels' settings runs the cases pinned in turn.
#[cfg(any(feature = "wgpu", feature = "vulkan"))]
#[test]
fn cubecl_kernels_match_the_reference() {
    use burn_convpool::cube_kernels::CubeKernels;
    let device = crate::common::gpu();
    let cases = cases("FUZZ_GPU_CASES", 24);
    for (kernels, ours) in crate::common::OUR_KERNELS {
        let _pinned = crate::common::pin(CubeKernels::Ours(ours));
        fuzz_conv(
            &format!("conv on cubecl, {kernels}"),
            device.clone().autodiff(),
            cases,
        );
        // Batches of 4-9, which the general strategy's one or two never reach.
        fuzz_conv_cases(
            &format!("small conv in batches of 4-9 on cubecl, {kernels}"),
            device.clone().autodiff(),
            cases.div_ceil(4),
            tiled_case(),
        );
        fuzz_pool(
            &format!("pool on cubecl, {kernels}"),
            device.clone().autodiff(),
            cases,
        );
    }
}

/// The cases this suite found, kept as regressions.
fn found_max_pool() -> PoolCase {
    // A dilated window at the padding whose first tap lies behind its predecessor's: the CPU's
    // run detection took the step as a stride of -1 (wrapping), an overflow panic in debug
    // builds and an out-of-bounds slice in release.
    PoolCase {
        rank: 1,
        batch: 1,
        channels: 1,
        size: [1, 1, 2],
        kind: PoolKind::Sliding(Sliding::Max),
        window: Window {
            kernel: [1, 1, 2],
            stride: [1, 1, 1],
            dilation: [1, 1, 2],
            padding: [(0, 0), (0, 0), (1, 1)],
        },
        ceil: false,
        output_size: [1, 1, 1],
        specials: Specials::None,
        seed: 0,
    }
}

fn found_unused_huge_steps() -> [PoolCase; 2] {
    // A stride over a single output, and a dilation between the taps of a one-tap window,
    // multiply nothing, and validation allows them up to 2^62: the CubeCL sliding max pool
    // passed them raw and failed its 32-bit launch check, an error at the first read.
    let huge = 1 << 40;
    let case = PoolCase {
        rank: 1,
        batch: 1,
        channels: 1,
        size: [1, 1, 5],
        kind: PoolKind::Sliding(Sliding::Max),
        window: Window {
            kernel: [1, 1, 2],
            stride: [1, 1, huge],
            dilation: [1, 1, 1],
            padding: [(0, 0); 3],
        },
        ceil: false,
        output_size: [1, 1, 1],
        specials: Specials::None,
        seed: 8,
    };
    let one_tap = Window {
        kernel: [1, 1, 1],
        stride: [1, 1, 2],
        dilation: [1, 1, huge],
        padding: [(0, 0); 3],
    };
    [
        case.clone(),
        PoolCase {
            window: one_tap,
            ..case
        },
    ]
}

fn found_cancelling_lp_pool() -> PoolCase {
    // An LP pool (p = 3) over a window whose cubes nearly cancel: its gradient takes the sum to
    // the power -2/3, so f32's roundoff in the sum shows 3e-4 off the exact value (PyTorch's
    // f32 is as far). The check allows the roundoff the reference's cancellation measures.
    PoolCase {
        rank: 3,
        batch: 2,
        channels: 1,
        size: [3, 5, 6],
        kind: PoolKind::Sliding(Sliding::Lp { norm_type: 3.0 }),
        window: Window {
            kernel: [1, 1, 3],
            stride: [1; 3],
            dilation: [1; 3],
            padding: [(0, 0); 3],
        },
        ceil: false,
        output_size: [1; 3],
        specials: Specials::None,
        seed: 12982367493194958906,
    }
}

fn found_long_bias_sum() -> ConvCase {
    // The bias gradient sums 20736 output-gradient values per channel; the CPU's running f32
    // sum was 2.6e-4 off (now summed in vector lanes).
    ConvCase {
        rank: 3,
        batch: 9,
        channels: (2, 1),
        groups: 2,
        size: [8, 6, 7],
        kernel: [3, 1, 2],
        stride: [2, 3, 1],
        dilation: [2, 1, 2],
        padding: [(2, 2), (0, 0), (0, 0)],
        bias: true,
        transpose: true,
        output_padding: [1, 0, 0],
        output_size: None,
        same: false,
        mode: Mode::Zeros,
        seed: 2671011927823560721,
    }
}

fn found_empty_batch_conv() -> ConvCase {
    // An empty batch: the weight gradient is a sum over nothing. The CubeCL direct schedule
    // launched no unit for it and returned whatever its buffer held.
    ConvCase {
        rank: 1,
        batch: 0,
        channels: (1, 1),
        groups: 1,
        size: [1, 1, 1],
        kernel: [1, 1, 1],
        stride: [1, 1, 1],
        dilation: [1, 1, 3],
        padding: [(0, 0); 3],
        bias: true,
        transpose: false,
        output_padding: [0; 3],
        output_size: None,
        same: false,
        mode: Mode::Zeros,
        seed: 0,
    }
}

fn found_empty_batch_under_huge_padding() -> ConvCase {
    // An empty batch with one window of 2^39 per image: nothing to compute, but the CPU
    // allocated scratch for each image's output (52 TB) and aborted, in the forward and the
    // weight gradient both. (A CubeCL device rejects the padding: a 32-bit device limit.)
    ConvCase {
        channels: (3, 2),
        size: [1, 1, 3],
        stride: [1, 1, 3],
        dilation: [1; 3],
        padding: [(0, 0), (0, 0), (2, 1 << 40)],
        bias: false,
        ..found_empty_batch_conv()
    }
}

fn found_empty_batch_under_huge_replicate_padding() -> ConvCase {
    // The same under a replicate padding of 2^40: the border copies the edge 2^40 times over
    // an empty batch, and NdArray's `repeat_dim` looped over the count (a hang, not an error).
    ConvCase {
        mode: Mode::Replicate,
        ..found_empty_batch_under_huge_padding()
    }
}

fn check_found(device: &Device) {
    let case = found_max_pool();
    let got = catch_unwind(AssertUnwindSafe(|| {
        run_pool(&case, Layout::Contiguous, device)
    }));
    let x = case.input();
    let verdict = check("dilated max pool", got, case.expected(&x, true), 1);
    assert!(matches!(verdict, Ok(true)), "{verdict:?}");
    let [stride, dilation] = found_unused_huge_steps();
    for (what, case) in [
        ("max pool with an unused huge stride", stride),
        ("max pool with an unused huge dilation", dilation),
        ("cancelling LP pool", found_cancelling_lp_pool()),
    ] {
        let got = catch_unwind(AssertUnwindSafe(|| {
            run_pool(&case, Layout::Contiguous, device)
        }));
        let x = case.input();
        let verdict = check(what, got, case.expected(&x, true), case.rank);
        assert!(matches!(verdict, Ok(true)), "{what}: {verdict:?}");
    }
    // Dirty the device's memory pool first, so an unwritten gradient shows.
    let dirty = ConvCase {
        batch: 2,
        ..found_empty_batch_conv()
    };
    let _ = run_conv(&dirty, Layout::Contiguous, device);
    for case in [
        found_empty_batch_under_huge_padding(),
        found_empty_batch_under_huge_replicate_padding(),
    ] {
        let got = catch_unwind(AssertUnwindSafe(|| {
            run_conv(&case, Layout::Contiguous, device)
        }));
        let (x, w, b) = inputs(&case);
        let verdict = check("huge padding", got, case.expected(&x, &w, b.as_deref()), 1);
        assert!(verdict.is_ok(), "{case:?}: {verdict:?}");
    }
    for (what, case) in [
        ("empty-batch conv", found_empty_batch_conv()),
        ("long bias sum", found_long_bias_sum()),
    ] {
        let got = catch_unwind(AssertUnwindSafe(|| {
            run_conv(&case, Layout::Contiguous, device)
        }));
        let (x, w, b) = inputs(&case);
        let expected = case.expected(&x, &w, b.as_deref());
        let verdict = check(what, got, expected, case.rank);
        assert!(matches!(verdict, Ok(true)), "{what}: {verdict:?}");
    }
}

#[test]
fn cases_found_by_fuzzing_stay_fixed() {
    check_found(&Device::flex().autodiff());
    #[cfg(feature = "ndarray")]
    #[allow(deprecated)]
    check_found(&Device::ndarray().autodiff());
    #[cfg(feature = "wgpu")]
    check_found(&Device::wgpu(Default::default()).autodiff());
}
