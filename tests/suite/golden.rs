//! Every golden case under `tests/fixtures/`, run by its `op` field on Flex with autodiff, with
//! and without gradient checkpointing (and on NdArray and the CubeCL kernels, where those are
//! built): one test per case file and device family. A case file without its line in
//! `golden!`, or a case whose op has no runner, fails.

use crate::common::{
    Case, autodiff_devices, case_file, case_file_stems, conv_bn_act_cases, conv_cases, fuse_cases,
    pool_cases,
};
use burn::tensor::Device;

macro_rules! conv_fns {
    ($conv:ident, $transpose:ident) => {
        conv_cases::ConvFns {
            conv: |x, weight, bias, options| burn_convpool::$conv(x, weight, bias, options),
            transpose: |x, weight, bias, options| {
                burn_convpool::$transpose(x, weight, bias, options)
            },
        }
    };
}

macro_rules! pool_fns_for {
    ($max:ident, $avg:ident, $adaptive_avg:ident, $adaptive_max:ident, $lp:ident, $unpool:ident, $fractional:expr) => {
        pool_cases::PoolFns {
            max: |x, options| burn_convpool::$max(x, options),
            avg: |x, options| burn_convpool::$avg(x, options),
            adaptive_avg: |x, size| burn_convpool::$adaptive_avg(x, size),
            adaptive_max: |x, size| burn_convpool::$adaptive_max(x, size),
            fractional: $fractional,
            lp: |x, options| burn_convpool::$lp(x, options),
            unpool: |x, indices, options| burn_convpool::$unpool(x, indices, options),
        }
    };
}

fn run_case(case: &Case, device: &Device) -> Result<(), String> {
    match case.op.as_str() {
        "conv1d" | "conv_transpose1d" => {
            conv_cases::run(case, device, conv_fns!(conv1d, conv_transpose1d))
        }
        "conv2d" | "conv_transpose2d" => {
            conv_cases::run(case, device, conv_fns!(conv2d, conv_transpose2d))
        }
        "conv3d" | "conv_transpose3d" => {
            conv_cases::run(case, device, conv_fns!(conv3d, conv_transpose3d))
        }
        op if op.ends_with("pool1d") => pool_cases::run::<1, 3>(
            case,
            device,
            pool_fns_for!(
                max_pool1d_with_indices,
                avg_pool1d,
                adaptive_avg_pool1d,
                adaptive_max_pool1d_with_indices,
                lp_pool1d,
                max_unpool1d,
                None
            ),
        ),
        op if op.ends_with("pool2d") => pool_cases::run::<2, 4>(
            case,
            device,
            pool_fns_for!(
                max_pool2d_with_indices,
                avg_pool2d,
                adaptive_avg_pool2d,
                adaptive_max_pool2d_with_indices,
                lp_pool2d,
                max_unpool2d,
                Some(burn_convpool::fractional_max_pool2d_with_indices)
            ),
        ),
        op if op.ends_with("pool3d") => pool_cases::run::<3, 5>(
            case,
            device,
            pool_fns_for!(
                max_pool3d_with_indices,
                avg_pool3d,
                adaptive_avg_pool3d,
                adaptive_max_pool3d_with_indices,
                lp_pool3d,
                max_unpool3d,
                Some(burn_convpool::fractional_max_pool3d_with_indices)
            ),
        ),
        "fuse_conv_bn" => fuse_cases::run(case, device),
        "conv_bn_act" => conv_bn_act_cases::run(case, device),
        other => Err(format!("no runner for op {other:?}")),
    }
}

/// One test per case file and device family, `golden::<file stem>::<family>`, so that
/// `cargo test --test suite golden::conv2d::flex` runs one op on Flex (with and without
/// gradient checkpointing), and the harness runs the files in parallel.
macro_rules! golden {
    ($($file:ident),* $(,)?) => {
        /// The stems of the case files a test here runs.
        const FILES: &[&str] = &[$(stringify!($file)),*];
        $(
            mod $file {
                #[test]
                fn flex() {
                    super::run_file(stringify!($file), "flex");
                }

                #[cfg(feature = "ndarray")]
                #[test]
                fn ndarray() {
                    super::run_file(stringify!($file), "ndarray");
                }

                #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
                #[test]
                fn cube() {
                    super::run_file(stringify!($file), "cube");
                }
            }
        )*
    };
}

golden!(
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    conv1d,
    conv2d,
    conv3d,
    conv_activation,
    conv_bn_act,
    conv_padding_mode,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    fractional_max_pool2d,
    fractional_max_pool3d,
    fuse_conv_bn,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
);

/// The convolution case files once more on the CubeCL device, with Burn's kernels pinned:
/// every pass then runs as Burn's own autodiff calls it (its tuners choosing among its
/// candidates), and our repair makes padding contribute no product.
/// `golden::burn_kernels::conv2d` runs one file.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
mod burn_kernels {
    macro_rules! golden_burn {
        ($($file:ident),* $(,)?) => {
            /// The stems of the case files a test here runs.
            pub(super) const FILES: &[&str] = &[$(stringify!($file)),*];
            $(
                #[test]
                fn $file() {
                    super::run_file(stringify!($file), "cube_burn");
                }
            )*
        };
    }

    golden_burn!(
        conv1d,
        conv2d,
        conv3d,
        conv_activation,
        conv_bn_act,
        conv_padding_mode,
        conv_transpose1d,
        conv_transpose2d,
        conv_transpose3d,
        fuse_conv_bn,
    );
}

/// A new convolution case file fails here until it has its line in `golden_burn!`.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn every_conv_case_file_runs_on_burns_kernels() {
    let conv_stems: Vec<String> = case_file_stems()
        .into_iter()
        .filter(|stem| {
            let op = case_file(stem).op;
            op.starts_with("conv") || op == "fuse_conv_bn"
        })
        .collect();
    assert_lists(
        &conv_stems,
        burn_kernels::FILES,
        "conv case files against golden_burn!'s",
    );
}

/// A new case file fails here until it has its line in `golden!`.
#[test]
fn every_case_file_has_a_test() {
    assert_lists(
        &case_file_stems(),
        FILES,
        "tests/fixtures/*.json against golden!'s",
    );
}

/// Assert that the sorted `stems` are the stems a macro's list holds, in any order.
fn assert_lists(stems: &[String], listed: &[&str], what: &str) {
    let mut listed = listed.to_vec();
    listed.sort_unstable();
    assert_eq!(stems, listed, "{what} list");
}

/// Every case of `tests/fixtures/<stem>.json` on each device whose name starts with `family`
/// (`cube_burn`: the CubeCL device with Burn's kernels pinned); fails listing every case that
/// failed.
fn run_file(stem: &str, family: &str) {
    let file = case_file(stem);
    assert!(
        !file.cases.is_empty(),
        "{stem}.json ({}) has no cases",
        file.op
    );
    // Burn's kernels run on the CubeCL device without checkpointing alone: checkpointing
    // changes what autodiff recomputes, not which kernels run, and the `cube` family covers
    // it; each case's shapes cost a round of Burn's own tuners.
    let on_family = |name: &str| match family {
        "cube_burn" => name == "cube+autodiff",
        _ => name.starts_with(family),
    };
    let devices: Vec<_> = autodiff_devices()
        .into_iter()
        .filter(|(name, _)| on_family(name))
        .collect();
    assert!(!devices.is_empty(), "no {family} device in this build");
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in &file.cases {
        for (device_name, device) in &devices {
            // On the CubeCL device our kernels run pinned, or Burn's: a tuning round per case
            // would time both for nearly every shape, most of the suite's time on lavapipe.
            // `cube_cross::conv::builtin_tuned_and_register_gemm_kernels_match_cpu` checks the tuner.
            #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
            let _pinned = {
                use burn_convpool::cube_kernels::{CubeKernels, OurKernels};
                match family {
                    "cube" => Some(crate::common::pin(CubeKernels::Ours(OurKernels::DEFAULT))),
                    "cube_burn" => Some(crate::common::pin(CubeKernels::Burn)),
                    _ => None,
                }
            };
            let outcome = std::panic::catch_unwind(|| run_case(case, device))
                .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&panic))));
            if let Err(message) = outcome {
                failures.push(format!("{} [{device_name}]: {message}", case.name));
            }
            ran += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{stem}.json: {} of {ran} case runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}
