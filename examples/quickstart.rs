//! A ResNet-18 layer (batch 8, 64 -> 64 channels, 56x56, 3x3, padding 1) through
//! `burn_convpool::conv2d` with autodiff: forward, backward, shapes and timings, next to Burn's
//! built-in `burn::tensor::module::conv2d` on the same device.
//!
//! `cargo run --release --example quickstart`

use std::time::{Duration, Instant};

use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::{ConvNdOptions, conv2d};

/// Best of `runs` wall-clock timings of `f` (the first call warms caches and thread pools).
fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = Duration::MAX;
    let mut result = None;
    for _ in 0..runs {
        let start = Instant::now();
        let value = f();
        best = best.min(start.elapsed());
        result = Some(value);
    }
    (result.expect("at least one run"), best)
}

fn main() {
    let device = Device::flex().autodiff();
    let x = Tensor::<4>::random([8, 64, 56, 56], Distribution::Default, &device).require_grad();
    let weight = Tensor::<4>::random([64, 64, 3, 3], Distribution::Default, &device).require_grad();
    let bias = Tensor::<1>::zeros([64], &device).require_grad();
    println!(
        "x {:?}, weight {:?}, bias {:?}",
        x.dims(),
        weight.dims(),
        bias.dims()
    );

    let ours = |x: Tensor<4>, weight: Tensor<4>, bias: Tensor<1>| {
        conv2d(
            x,
            weight,
            Some(bias),
            ConvNdOptions::default().with_padding([1, 1]),
        )
    };
    let builtin = |x: Tensor<4>, weight: Tensor<4>, bias: Tensor<1>| {
        burn::tensor::module::conv2d(
            x,
            weight,
            Some(bias),
            ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
        )
    };

    for (name, op) in [
        ("burn-convpool", &ours as &dyn Fn(_, _, _) -> Tensor<4>),
        ("burn built-in", &builtin),
    ] {
        let (out, forward) = best_of(3, || op(x.clone(), weight.clone(), bias.clone()));
        let (grads, backward) = best_of(3, || {
            op(x.clone(), weight.clone(), bias.clone()).sum().backward()
        });
        let x_grad = x.grad(&grads).expect("x is tracked");
        let weight_grad = weight.grad(&grads).expect("weight is tracked");
        println!(
            "{name:>14}: out {:?} | x_grad {:?} | weight_grad {:?} | forward {:.1} ms | forward+backward {:.1} ms",
            out.dims(),
            x_grad.dims(),
            weight_grad.dims(),
            forward.as_secs_f64() * 1e3,
            backward.as_secs_f64() * 1e3,
        );
    }

    // Same numbers from both: compare the outputs.
    let difference = (ours(x.clone(), weight.clone(), bias.clone()) - builtin(x, weight, bias))
        .abs()
        .max()
        .into_scalar::<f32>();
    println!("max |ours - built-in| = {difference:e}");
}
