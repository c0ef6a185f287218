//! Pooling forward and backward: this crate against Burn's built-in ops on the same device, in
//! the same run. `cargo bench --bench pool`; report `burn / ours` per group.

use std::hint::black_box;

use burn::backend::Dispatch;
use burn::backend::ops::ModuleOps;
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::ConvPoolBackend;
use criterion::{Criterion, criterion_group, criterion_main};

/// ResNet stem max pool: 8x64x112x112, kernel 3, stride 2, padding 1.
fn max_pool_stem(c: &mut Criterion) {
    let device = Device::flex();
    let x = Tensor::<4>::random([8, 64, 112, 112], Distribution::Default, &device);
    let options = MaxPoolOptions::new([3, 3])
        .with_stride([2, 2])
        .with_padding([1, 1]);

    let mut group = c.benchmark_group("max_pool2d/stem_8x64x112x112_k3s2p1/forward_with_indices");
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            black_box(burn_convpool::max_pool2d_with_indices(
                x.clone(),
                options.clone(),
            ))
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            black_box(burn::tensor::module::max_pool2d_with_indices(
                x.clone(),
                options.clone(),
            ))
        })
    });
    group.finish();

    let (out, indices) = burn::tensor::module::max_pool2d_with_indices(x.clone(), options.clone());
    let out_grad = Tensor::<4>::random(out.dims(), Distribution::Default, &device);
    let lift = |dims: [usize; 4]| [dims[0], dims[1], 1, dims[2], dims[3]];
    let mut group = c.benchmark_group("max_pool2d/stem_8x64x112x112_k3s2p1/backward");
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            black_box(<Dispatch as ConvPoolBackend>::max_pool_backward(
                out_grad
                    .clone()
                    .reshape(lift(out_grad.dims()))
                    .into_dispatch(),
                indices
                    .clone()
                    .reshape(lift(indices.dims()))
                    .into_dispatch(),
                [1, 112, 112],
            ))
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            black_box(burn::tensor::module::max_pool2d_with_indices_backward(
                x.clone(),
                [3, 3],
                [2, 2],
                [1, 1],
                [1, 1],
                false,
                out_grad.clone(),
                indices.clone(),
            ))
        })
    });
    group.finish();
}

/// ResNet head: adaptive average pool of 8x512x7x7 to 1x1.
fn adaptive_head(c: &mut Criterion) {
    let device = Device::flex();
    let x = Tensor::<4>::random([8, 512, 7, 7], Distribution::Default, &device);
    let mut group = c.benchmark_group("adaptive_avg_pool2d/head_8x512x7x7_to_1x1/forward");
    group.bench_function("ours", |b| {
        b.iter(|| black_box(burn_convpool::adaptive_avg_pool2d(x.clone(), [1, 1])))
    });
    group.bench_function("burn", |b| {
        b.iter(|| black_box(burn::tensor::module::adaptive_avg_pool2d(x.clone(), [1, 1])))
    });
    group.finish();

    let out_grad = Tensor::<4>::random([8, 512, 1, 1], Distribution::Default, &device);
    let mut group = c.benchmark_group("adaptive_avg_pool2d/head_8x512x7x7_to_1x1/backward");
    group.bench_function("ours", |b| {
        b.iter(|| {
            black_box(<Dispatch as ConvPoolBackend>::adaptive_avg_pool_backward(
                out_grad.clone().reshape([8, 512, 1, 1, 1]).into_dispatch(),
                [1, 7, 7],
            ))
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            black_box(
                <Dispatch as ModuleOps<Dispatch>>::adaptive_avg_pool2d_backward(
                    x.clone().into_dispatch(),
                    out_grad.clone().into_dispatch(),
                ),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, max_pool_stem, adaptive_head);
criterion_main!(benches);
