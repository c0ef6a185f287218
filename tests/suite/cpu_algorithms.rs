//! The CPU's convolution algorithm as users pin it (`cpu_kernels::with_conv_algorithm`): the pin
//! reaches every pass the op and its backward run, ends with its closure, and runs a pinned
//! algorithm only where it serves the pass (`cpu_kernels::record_conv_algorithms` tells).

use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_convpool::cpu_kernels::{Algorithm, Pass, record_conv_algorithms, with_conv_algorithm};
use burn_convpool::{ConvNdOptions, conv2d};

use crate::common::{Lcg, f64_tensor};

/// The output and both gradients of a 3x3 convolution over 4 channels (the default runs the
/// im2col GEMM there), as f32 bits.
fn passes() -> Vec<Vec<u32>> {
    let device = Device::flex().autodiff();
    let mut rng = Lcg::new(41);
    let mut tensor = |dims: [usize; 4]| {
        let values: Vec<f32> = rng
            .values(dims.iter().product())
            .iter()
            .map(|&v| v as f32)
            .collect();
        Tensor::<4>::from_data(TensorData::new(values, dims), &device).require_grad()
    };
    let (x, weight) = (tensor([2, 4, 12, 11]), tensor([5, 4, 3, 3]));
    let options = ConvNdOptions::<2>::default().with_padding([1, 1]);
    let out = conv2d(x.clone(), weight.clone(), None, options);
    let grads = (out.clone() * out.clone()).sum().backward();
    let bits =
        |t: Tensor<4>| -> Vec<u32> { t.into_data().iter::<f32>().map(f32::to_bits).collect() };
    vec![
        bits(out),
        bits(x.grad(&grads).unwrap()),
        bits(weight.grad(&grads).unwrap()),
    ]
}

#[test]
fn a_pinned_algorithm_computes_every_pass() {
    let default = passes();
    assert_eq!(
        with_conv_algorithm(Algorithm::Lowered, passes),
        default,
        "the default of this shape is the im2col GEMM"
    );
    // Winograd's transforms sum in another order: some bits of each pass differ, all within
    // f32 roundoff of the GEMM's.
    let winograd = with_conv_algorithm(Algorithm::Winograd, passes);
    for (pass, (ours, gemm)) in ["forward", "x grad", "weight grad"]
        .iter()
        .zip(winograd.iter().zip(&default))
    {
        assert_ne!(ours, gemm, "{pass}: Winograd did not run");
        for (a, b) in ours.iter().zip(gemm) {
            let (a, b) = (f32::from_bits(*a), f32::from_bits(*b));
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{pass}: {a} vs {b}"
            );
        }
    }
    assert_eq!(passes(), default, "the pin ends with its closure");
}

/// One convolution an algorithm serves by its shape, and the passes it serves there.
struct Served {
    algorithm: Algorithm,
    x: [usize; 4],
    weight: [usize; 4],
    stride: usize,
    padding: usize,
    groups: usize,
    passes: &'static [Pass],
}

/// The algorithm each pass of a convolution (with both gradients) ran with, `algorithm`
/// pinned, on operands of `dtype` whose values are scaled by `scale`.
fn ran_pinned(case: &Served, dtype: DType, scale: f64) -> Vec<(Pass, Algorithm)> {
    let device = Device::flex().autodiff();
    let mut rng = Lcg::new(7);
    let mut tensor = |dims: [usize; 4]| {
        let values: Vec<f64> = rng
            .values(dims.iter().product())
            .iter()
            .map(|v| v * scale)
            .collect();
        f64_tensor(&values, dims, &device)
            .cast(dtype)
            .require_grad()
    };
    let (x, weight) = (tensor(case.x), tensor(case.weight));
    let options = ConvNdOptions::<2>::default()
        .with_stride([case.stride; 2])
        .with_padding([case.padding; 2])
        .with_groups(case.groups);
    let (_, ran) = record_conv_algorithms(|| {
        with_conv_algorithm(case.algorithm, || {
            let out = conv2d(x.clone(), weight.clone(), None, options);
            let grads = out.sum().backward();
            (x.grad(&grads).unwrap(), weight.grad(&grads).unwrap())
        })
    });
    ran
}

/// The algorithm `ran` names for `pass`, which ran exactly once.
fn ran_for(what: &str, ran: &[(Pass, Algorithm)], pass: Pass) -> Algorithm {
    let of_pass: Vec<Algorithm> = ran
        .iter()
        .filter(|(p, _)| *p == pass)
        .map(|&(_, a)| a)
        .collect();
    assert_eq!(of_pass.len(), 1, "{what}: {pass:?} ran as {ran:?}");
    of_pass[0]
}

/// Each algorithm pinned on f32 and f64 runs exactly the passes it serves under its own name:
/// the direct and pointwise paths (f32 only) never report an f64 pass, Winograd never one
/// whose values its transforms cannot carry, and the phase grids never the weight gradient of
/// a non-finite input.
#[test]
fn a_pinned_algorithm_runs_under_its_name_only_where_it_serves() {
    use Pass::{Data, Forward, Weight};
    let cases = [
        Served {
            algorithm: Algorithm::Depthwise,
            x: [2, 4, 9, 9],
            weight: [4, 1, 3, 3],
            stride: 1,
            padding: 1,
            groups: 4,
            passes: &[Forward, Weight],
        },
        Served {
            algorithm: Algorithm::Winograd,
            x: [2, 4, 10, 9],
            weight: [5, 4, 3, 3],
            stride: 1,
            padding: 1,
            groups: 1,
            passes: &[Forward, Data, Weight],
        },
        Served {
            algorithm: Algorithm::Phases,
            x: [2, 4, 12, 12],
            weight: [6, 4, 4, 4],
            stride: 2,
            padding: 1,
            groups: 1,
            passes: &[Forward, Data, Weight],
        },
        Served {
            algorithm: Algorithm::Pointwise,
            x: [2, 8, 6, 5],
            weight: [4, 8, 1, 1],
            stride: 1,
            padding: 0,
            groups: 1,
            passes: &[Forward, Data],
        },
        Served {
            algorithm: Algorithm::Adjoint,
            x: [2, 4, 9, 8],
            weight: [5, 4, 3, 3],
            stride: 1,
            padding: 1,
            groups: 1,
            passes: &[Data],
        },
        Served {
            algorithm: Algorithm::Direct,
            x: [2, 4, 9, 8],
            weight: [5, 4, 3, 3],
            stride: 2,
            padding: 1,
            groups: 1,
            passes: &[Forward, Data, Weight],
        },
        Served {
            algorithm: Algorithm::Lowered,
            x: [2, 4, 9, 8],
            weight: [5, 4, 3, 2],
            stride: 2,
            padding: 1,
            groups: 1,
            passes: &[Forward, Data, Weight],
        },
    ];
    for case in &cases {
        for dtype in [DType::F32, DType::F64] {
            let what = format!("{:?} on {dtype:?}", case.algorithm);
            let ran = ran_pinned(case, dtype, 1.0);
            let f32_only = matches!(case.algorithm, Algorithm::Direct | Algorithm::Pointwise);
            for &pass in case.passes {
                let algorithm = ran_for(&what, &ran, pass);
                if f32_only && dtype == DType::F64 {
                    assert_ne!(algorithm, case.algorithm, "{what}: {pass:?}");
                } else {
                    assert_eq!(algorithm, case.algorithm, "{what}: {pass:?}");
                }
            }
        }
    }
    // Values past Winograd's safe magnitude take another algorithm, pinned or not.
    let winograd = &cases[1];
    let ran = ran_pinned(winograd, DType::F32, 1e31);
    for &pass in winograd.passes {
        assert_ne!(ran_for("Winograd on 1e31", &ran, pass), Algorithm::Winograd);
    }
    // An infinite input keeps the phase grids off the weight gradient alone.
    let phases = &cases[2];
    let ran = ran_pinned(phases, DType::F64, f64::INFINITY);
    assert_eq!(ran_for("phases on inf", &ran, Forward), Algorithm::Phases);
    assert_ne!(ran_for("phases on inf", &ran, Weight), Algorithm::Phases);
}
