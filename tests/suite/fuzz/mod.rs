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
//! in a build with a CubeCL runtime, `FUZZ_GPU_CASES` the cases on the CubeCL kernels (24 by
//! default: lavapipe compiles a kernel for each new shape). `FUZZ_TRACE=1` prints each case
//! before it runs. The cases are random per run unless `PROPTEST_RNG_SEED` fixes them (CI does).
//!
//! One family per file: `conv.rs` (the general conv strategy and the property), `conv_shapes.rs`
//! (strategies shaped for one CPU conv path each), `pool.rs`, `found.rs` (the cases this suite
//! found, kept as regressions); here the harness and the runs on NdArray and CubeCL.

mod conv;
mod conv_shapes;
mod found;
mod layout;
mod pool;
mod reference;
mod watchdog;

use burn::tensor::{DType, Device, Tensor};
use burn_convpool::{SpecError, SpecErrorKind};
use conv::{fuzz_conv, fuzz_conv_cases};
use conv_shapes::tiled_case;
use pool::fuzz_pool;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use reference::Expected;
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
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    if matches!(
        device.clone().without_autodiff().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    ) {
        return DType::F32;
    }
    #[cfg(not(any(feature = "wgpu", feature = "vulkan", feature = "cuda")))]
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

/// A convolution's padding on one side: mostly 0 to 2, rarely huge (with a huge stride, one
/// output over a padded copy no machine holds).
fn pad_param() -> impl Strategy<Value = usize> {
    prop_oneof![60 => 0usize..=2, 1 => Just(1usize << 40)]
}

/// The last `N` of three per-axis values.
fn tail<T: Copy, const N: usize>(values: [T; 3]) -> [T; N] {
    core::array::from_fn(|i| values[3 - N + i])
}

/// A gradient's values, zeros when autodiff has none (an input no output depends on).
fn grad_values<const D: usize>(grad: Option<Tensor<D>>, len: usize) -> Vec<f64> {
    grad.map_or_else(|| vec![0.0; len], floats)
}

/// Rank-5 dims from the caller's rank-`2 + n` dims.
fn lifted(dims: &[usize], n: usize) -> [usize; 5] {
    let mut five = [1; 5];
    five[..2].copy_from_slice(&dims[..2]);
    five[5 - n..].copy_from_slice(&dims[2..]);
    five
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
/// shape compiles kernels. Each of our kernels' settings runs the conv cases pinned in turn
/// (each packing the pool cases), then
/// Burn's kernels run a quarter of the conv cases (each new shape is a round of Burn's own
/// tuners).
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn cubecl_kernels_match_the_reference() {
    let device = crate::common::gpu();
    let cases = cases("FUZZ_GPU_CASES", 24);
    crate::common::each_pinned(|kernels| {
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
    });
    crate::common::each_packing_pinned(|kernels| {
        fuzz_pool(
            &format!("pool on cubecl, {kernels}"),
            device.clone().autodiff(),
            cases,
        );
    });
    let _pinned = crate::common::pin(burn_convpool::cube_kernels::CubeKernels::Burn);
    fuzz_conv(
        "conv on cubecl, Burn's kernels",
        device.clone().autodiff(),
        cases.div_ceil(4),
    );
}
