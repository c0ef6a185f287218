//! The CPU's convolution algorithm as users pin it (`cpu_kernels::with_conv_algorithm`): the pin
//! reaches every pass the op and its backward run, and ends with its closure.

use burn::tensor::{Device, Tensor, TensorData};
use burn_convpool::cpu_kernels::{Algorithm, with_conv_algorithm};
use burn_convpool::{ConvNdOptions, conv2d};

use crate::common::Lcg;

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
