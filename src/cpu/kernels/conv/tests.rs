use burn::tensor::ops::ConvOptions;

use super::reference::*;
use super::*;

/// The bias gradient of a large f32 output against its sum in f64: a running f32 sum of
/// 20736 values in [0, 1) drifts by a few 1e-6 of it; lane sums stay well within 5e-7.
#[test]
fn bias_gradient_of_many_values_is_accurate() {
    let (batch, channels, volume) = (9, 2, 2304);
    let out_grad: Vec<f32> = values(batch * channels * volume, 7)
        .iter()
        .map(|v| (0.5 + 0.5 * v) as f32)
        .collect();
    let got = bias_backward(&out_grad, batch, channels);
    for (c, got) in got.iter().enumerate() {
        let exact: f64 = (0..batch)
            .flat_map(|n| &out_grad[(n * channels + c) * volume..][..volume])
            .map(|&v| v as f64)
            .sum();
        let error = (*got as f64 - exact).abs() / exact;
        assert!(error < 5e-7, "channel {c}: {got} vs {exact} ({error:e})");
    }
}

/// A pinned algorithm runs every pass it serves, also where the default would not pick it
/// (Winograd and the phase grids on 4 channels), computing what the definition does; a pass
/// it does not serve keeps the default; the pin ends with its closure.
#[test]
fn pinned_algorithms_run_where_they_serve() {
    use crate::cpu::choice::with_conv_algorithm;
    let x_shape = [2, 4, 1, 9, 10];
    let (same, strided) = (
        ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1),
    );
    let geometry = |kernel: [usize; 3], options: &ConvOptions<3>| {
        ConvGeometry::conv(&x_shape, &[6, 4, kernel[0], kernel[1], kernel[2]], options)
    };
    let (g3, g4) = (geometry([1, 3, 3], &same), geometry([1, 4, 4], &strided));
    let passes = [Pass::Forward, Pass::Data, Pass::Weight];
    for pass in passes {
        assert_eq!(algorithm(&g3, pass), Algorithm::Lowered);
        assert_eq!(algorithm(&g4, pass), Algorithm::Lowered);
    }
    with_conv_algorithm(Algorithm::Winograd, || {
        for pass in passes {
            assert_eq!(algorithm(&g3, pass), Algorithm::Winograd);
            assert_eq!(algorithm(&g4, pass), Algorithm::Lowered);
        }
        check(x_shape, 6, [1, 3, 3], same.clone());
    });
    with_conv_algorithm(Algorithm::Phases, || {
        for pass in passes {
            assert_eq!(algorithm(&g3, pass), Algorithm::Lowered);
            assert_eq!(algorithm(&g4, pass), Algorithm::Phases);
        }
        check(x_shape, 6, [1, 4, 4], strided.clone());
    });
    with_conv_algorithm(Algorithm::Depthwise, || {
        let depthwise = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4);
        let g = ConvGeometry::conv(&x_shape, &[4, 1, 1, 3, 3], &depthwise);
        assert_eq!(algorithm(&g, Pass::Forward), Algorithm::Depthwise);
        assert_eq!(algorithm(&g, Pass::Data), Algorithm::Adjoint);
        assert_eq!(algorithm(&g3, Pass::Forward), Algorithm::Lowered);
    });
    assert_eq!(algorithm(&g3, Pass::Forward), Algorithm::Lowered);
}

/// A pass large enough to time takes one of the algorithms that serve it and remembers it:
/// its result matches the rule's algorithm to roundoff on every call, also the first (which
/// times the candidates).
#[test]
fn timed_choice_computes_the_pass() {
    // 8 * 64 * 28 * 28 * 64 * 9 multiply-adds: timed.
    let options = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let g = ConvGeometry::conv(&[8, 64, 1, 28, 28], &[64, 64, 1, 3, 3], &options);
    assert!(fastest::worth_timing(&g));
    let x: Vec<f32> = values(g.in_shape().iter().product(), 7)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let weight: Vec<f32> = values(g.weight_shape().iter().product(), 8)
        .iter()
        .map(|v| *v as f32)
        .collect();
    let expected = crate::cpu::choice::with_conv_algorithm(Algorithm::Lowered, || {
        x_backward(&g, &weight, &forward(&g, &x, &weight, None))
    });
    for _ in 0..2 {
        let got = x_backward(&g, &weight, &forward(&g, &x, &weight, None));
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * b.abs().max(1.0),
                "x_grad[{i}]: {a} vs {b}"
            );
        }
    }
}

/// Every algorithm's input gradient keeps the definition's non-finite values: a weight that is
/// infinite (or NaN) reaches only the inputs its tap meets an output from, as in the lowered
/// path (PyTorch's GEMM and col2im), and never turns the others to NaN through a padding zero.
#[test]
fn input_gradients_of_non_finite_weights_match_the_lowered_path() {
    use crate::cpu::choice::with_conv_algorithm;
    let shapes: [([usize; 5], usize, [usize; 3], ConvOptions<3>); 3] = [
        // Stride 1 (the adjoint), padded: an edge input meets only some taps.
        (
            [2, 16, 1, 5, 6],
            16,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ),
        // Stride 2 (the direct phases, the phase grids).
        (
            [2, 16, 1, 8, 8],
            16,
            [1, 4, 4],
            ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1),
        ),
        // Depthwise, stride 1 (the adjoint's depthwise stencil).
        (
            [1, 4, 1, 5, 5],
            4,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4),
        ),
    ];
    for (x_shape, out_channels, kernel, options) in shapes {
        let g = geometry(x_shape, out_channels, kernel, &options);
        let mut weight: Vec<f32> = values(g.out_channels * g.patch_len(), 8)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let taps = g.kernel.iter().product::<usize>();
        weight[0] = f32::INFINITY;
        weight[taps - 1] = f32::NAN;
        let out_grad: Vec<f32> = values(g.out_shape().iter().product(), 9)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        let expected =
            with_conv_algorithm(Algorithm::Lowered, || x_backward(&g, &weight, &out_grad));
        assert!(expected.iter().any(|v| v.is_finite()) && expected.iter().any(|v| v.is_nan()));
        for algorithm in ALGORITHMS {
            let got = with_conv_algorithm(algorithm, || x_backward(&g, &weight, &out_grad));
            for (i, (&got, &want)) in got.iter().zip(&expected).enumerate() {
                let same = match want.is_finite() {
                    true => (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                    false => got == want || (got.is_nan() && want.is_nan()),
                };
                assert!(same, "{algorithm:?} x_grad[{i}]: {got} vs {want} ({g:?})");
            }
        }
    }
}

/// A weight, or an output gradient, that is not finite meets the padding in no algorithm: each
/// pass sums only the taps inside the input (the input gradient, those that reach an output),
/// as the definition (and PyTorch's oneDNN, and Burn's CubeCL kernels) does, where a padded
/// algorithm alone would multiply a zero by it (NaN). Every algorithm, pinned, against the f64
/// definition.
#[test]
fn non_finite_values_meet_no_padding() {
    use crate::cpu::choice::with_conv_algorithm;
    let shapes: [([usize; 5], usize, [usize; 3], ConvOptions<3>); 5] = [
        // 3x3 stride 1 with channels enough for Winograd and the direct tiles.
        (
            [2, 16, 1, 6, 7],
            16,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1),
        ),
        // Stride 2 (the phase grids), asymmetric reach past the end.
        (
            [2, 16, 1, 8, 7],
            8,
            [1, 4, 4],
            ConvOptions::new([1, 2, 2], [0, 1, 2], [1; 3], 1),
        ),
        // Depthwise (the stencil) and grouped, dilated.
        (
            [1, 4, 1, 6, 5],
            4,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4),
        ),
        (
            [2, 4, 1, 7, 7],
            6,
            [1, 3, 3],
            ConvOptions::new([1; 3], [0, 2, 2], [1, 2, 2], 2),
        ),
        // A padded 1x1 and a volume.
        (
            [2, 3, 2, 4, 5],
            5,
            [1, 1, 1],
            ConvOptions::new([1; 3], [1, 1, 1], [1; 3], 1),
        ),
    ];
    let agree = |what: &str, got: &[f32], want: &[f64], g: &ConvGeometry| {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (&got, &want)) in got.iter().zip(want).enumerate() {
            let same = match want.is_finite() {
                true => (f64::from(got) - want).abs() <= 1e-4 * (1.0 + want.abs()),
                false => f64::from(got) == want || (got.is_nan() && want.is_nan()),
            };
            assert!(same, "{what}[{i}]: {got} vs {want} ({g:?})");
        }
    };
    for (x_shape, out_channels, kernel, options) in shapes {
        let g = geometry(x_shape, out_channels, kernel, &options);
        let f32s = |len: usize, seed: u64| -> Vec<f32> {
            values(len, seed).into_iter().map(|v| v as f32).collect()
        };
        let x = f32s(g.in_shape().iter().product(), 10);
        let mut weight = f32s(g.out_channels * g.patch_len(), 11);
        let mut out_grad = f32s(g.out_shape().iter().product(), 12);
        let patch = g.patch_len();
        weight[0] = f32::INFINITY;
        weight[patch + patch / 2] = f32::NAN;
        if let Some(last) = weight.last_mut() {
            *last = f32::NEG_INFINITY;
        }
        out_grad[0] = f32::INFINITY;
        if let Some(last) = out_grad.last_mut() {
            *last = f32::NAN;
        }
        let wide = |values: &[f32]| values.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
        let want_out = reference(&g, &wide(&x), &wide(&weight));
        let clean_weight = f32s(weight.len(), 11);
        let (_, want_weight_grad) =
            reference_grads(&g, &wide(&x), &wide(&clean_weight), &wide(&out_grad));
        let clean_out_grad = f32s(out_grad.len(), 12);
        let (want_x_grad, _) =
            reference_grads(&g, &wide(&x), &wide(&weight), &wide(&clean_out_grad));
        // Each case has elements the padding alone would have made NaN.
        assert!(want_out.iter().any(|v| v.is_finite()));
        assert!(want_weight_grad.iter().any(|v| v.is_finite()));
        // (A 1x1's every input meets every weight of its channel, so none of its input
        // gradient is finite here, nor does padding touch it.)
        assert!(want_x_grad.iter().any(|v| v.is_finite()) || g.kernel == [1; 3]);
        for algorithm in ALGORITHMS {
            let out = with_conv_algorithm(algorithm, || forward(&g, &x, &weight, None));
            agree(&format!("{algorithm:?} forward"), &out, &want_out, &g);
            let weight_grad = with_conv_algorithm(algorithm, || weight_backward(&g, &x, &out_grad));
            agree(
                &format!("{algorithm:?} weight_grad"),
                &weight_grad,
                &want_weight_grad,
                &g,
            );
            let x_grad =
                with_conv_algorithm(algorithm, || x_backward(&g, &weight, &clean_out_grad));
            agree(&format!("{algorithm:?} x_grad"), &x_grad, &want_x_grad, &g);
        }
    }
}

/// Each channel's mean and biased variance of `out` `(N, C, volume)`, two passes in f64.
fn channel_statistics(out: &[f32], batch: usize, channels: usize) -> Vec<(f64, f64)> {
    let volume = out.len() / (batch * channels);
    (0..channels)
        .map(|c| {
            let values: Vec<f64> = (0..batch)
                .flat_map(|n| &out[(n * channels + c) * volume..][..volume])
                .map(|&v| f64::from(v))
                .collect();
            let mean = values.iter().sum::<f64>() / values.len() as f64;
            let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
            (mean, squares / values.len() as f64)
        })
        .collect()
}

/// `algorithm`, pinned, computes `forward_with_moments` over `g`: the output is `forward`'s
/// bit for bit, and the statistics that every plane handed on as it was stored sum to are
/// the output's own (a plane the algorithm never handed on would count as zeros).
fn check_moments(algorithm: Algorithm, g: &ConvGeometry, weight_seed: u64) {
    use crate::cpu::choice::{record_conv_algorithms, with_conv_algorithm};
    let to_f32 = |values: Vec<f64>| values.into_iter().map(|v| v as f32).collect::<Vec<_>>();
    let x = to_f32(values(g.in_shape().iter().product(), 1));
    let weight = to_f32(values(g.weight_shape().iter().product(), weight_seed));
    let ((plain, (out, mean, variance)), ran) = record_conv_algorithms(|| {
        with_conv_algorithm(algorithm, || {
            (
                forward(g, &x, &weight, None),
                forward_with_moments(g, &x, &weight),
            )
        })
    });
    assert_eq!(ran, [(Pass::Forward, algorithm); 2], "{g:?}");
    let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&out), bits(&plain), "{algorithm:?}");
    let expected = channel_statistics(&out, g.batch, g.out_channels);
    for (c, &(mean_c, variance_c)) in expected.iter().enumerate() {
        let close = |ours: f32, theirs: f64| {
            (f64::from(ours) - theirs).abs() <= 1e-5 * theirs.abs().max(1e-2)
                || ours.is_nan() && theirs.is_nan()
        };
        assert!(
            close(mean[c], mean_c) && close(variance[c], variance_c),
            "{algorithm:?} channel {c}: ({}, {}) vs ({mean_c}, {variance_c})",
            mean[c],
            variance[c]
        );
    }
}

#[test]
fn every_forward_algorithm_sums_the_statistics_of_its_output() {
    let same = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let strided = ConvOptions::new([1, 2, 2], [0, 1, 1], [1; 3], 1);
    let unpadded = ConvOptions::new([1; 3], [0; 3], [1; 3], 1);
    let depthwise = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 4);
    let cases = [
        (
            Algorithm::Lowered,
            geometry([3, 4, 1, 9, 10], 6, [1, 3, 3], &same),
        ),
        (
            Algorithm::Winograd,
            geometry([3, 4, 1, 9, 10], 6, [1, 3, 3], &same),
        ),
        (
            Algorithm::Phases,
            geometry([3, 4, 1, 9, 10], 6, [1, 4, 4], &strided),
        ),
        (
            Algorithm::Depthwise,
            geometry([3, 4, 1, 9, 10], 4, [1, 3, 3], &depthwise),
        ),
        (
            Algorithm::Pointwise,
            geometry([3, 8, 1, 6, 7], 12, [1; 3], &unpadded),
        ),
        // Spatial tiles (few output channels), one-vector row tiles (strided), and blocks of
        // several vectors (many output channels).
        (
            Algorithm::Direct,
            geometry([2, 16, 1, 12, 12], 16, [1, 3, 3], &same),
        ),
        (
            Algorithm::Direct,
            geometry([2, 8, 1, 11, 13], 8, [1, 3, 3], &strided),
        ),
        (
            Algorithm::Direct,
            geometry([2, 8, 1, 10, 11], 40, [1, 3, 3], &same),
        ),
    ];
    for (algorithm, g) in cases {
        check_moments(algorithm, &g, 2);
    }
    // One image on two threads: the pointwise path cuts each image's channels into a run per
    // thread.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        let g = geometry([1, 64, 1, 32, 32], 64, [1; 3], &unpadded);
        check_moments(Algorithm::Pointwise, &g, 2);
    });
}

/// A weight that is not finite makes NaN where its windows meet padding until the repair after
/// the algorithm sums those windows by the definition; the statistics are the repaired
/// output's.
#[test]
fn statistics_follow_the_repaired_output() {
    let same = ConvOptions::new([1; 3], [0, 1, 1], [1; 3], 1);
    let g = geometry([2, 3, 1, 5, 6], 4, [1, 3, 3], &same);
    let x: Vec<f32> = (0..g.in_shape().iter().product())
        .map(|i| 0.1 + 0.1 * (i % 7) as f32)
        .collect();
    let mut weight = vec![0.5f32; g.weight_shape().iter().product()];
    // Channel 1's first tap is infinite: by the definition, its outputs are infinite (every
    // input is positive), where the algorithms' padding zeros times infinity give NaN.
    weight[g.patch_len()] = f32::INFINITY;
    let (out, mean, variance) = forward_with_moments(&g, &x, &weight);
    assert!(!out.iter().any(|v| v.is_nan()));
    assert_eq!(mean[1], f32::INFINITY);
    assert!(variance[1].is_nan());
    let expected = channel_statistics(&out, g.batch, g.out_channels);
    for c in [0, 2, 3] {
        let (mean_c, variance_c) = expected[c];
        assert!((f64::from(mean[c]) - mean_c).abs() < 1e-5, "channel {c}");
        assert!(
            (f64::from(variance[c]) - variance_c).abs() < 1e-5,
            "channel {c}"
        );
    }
}
