//! Pooling forward and backward: this crate against Burn's built-in ops on the same device, in
//! the same run. `cargo bench --bench pool` (add `--features wgpu` for the CubeCL kernels);
//! report `burn / ours` per group. Each timed call waits for the device.

use std::hint::black_box;

use burn::backend::Dispatch;
use burn::backend::ops::ModuleOps;
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::ConvPoolBackend;
use burn_convpool::spec::IndexWindows;
use criterion::{Criterion, criterion_group, criterion_main};

mod common;
use common::{devices, synced};

/// ResNet stem max pool: 8x64x112x112, kernel 3, stride 2, padding 1.
fn max_pool_stem(c: &mut Criterion, device_name: &str, device: &Device) {
    let x = Tensor::<4>::random([8, 64, 112, 112], Distribution::Default, device);
    let options = MaxPoolOptions::new([3, 3])
        .with_stride([2, 2])
        .with_padding([1, 1]);

    let mut group = c.benchmark_group(format!(
        "max_pool2d/{device_name}/stem_8x64x112x112_k3s2p1/forward_with_indices"
    ));
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(burn_convpool::max_pool2d_with_indices(
                    x.clone(),
                    options.clone(),
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(burn::tensor::module::max_pool2d_with_indices(
                    x.clone(),
                    options.clone(),
                ))
            })
        })
    });
    group.finish();

    let (out, indices) = burn::tensor::module::max_pool2d_with_indices(x.clone(), options.clone());
    let out_grad = Tensor::<4>::random(out.dims(), Distribution::Default, device);
    let lift = |dims: [usize; 4]| [dims[0], dims[1], 1, dims[2], dims[3]];
    let mut group = c.benchmark_group(format!(
        "max_pool2d/{device_name}/stem_8x64x112x112_k3s2p1/backward"
    ));
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
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
                    IndexWindows::Sliding(
                        MaxPoolOptions::new([1, 3, 3])
                            .with_stride([1, 2, 2])
                            .with_padding([0, 1, 1]),
                    ),
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
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
        })
    });
    group.finish();
}

/// ResNet head: adaptive average pool of 8x512x7x7 to 1x1.
fn adaptive_head(c: &mut Criterion, device_name: &str, device: &Device) {
    let x = Tensor::<4>::random([8, 512, 7, 7], Distribution::Default, device);
    let mut group = c.benchmark_group(format!(
        "adaptive_avg_pool2d/{device_name}/head_8x512x7x7_to_1x1/forward"
    ));
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(burn_convpool::adaptive_avg_pool2d(x.clone(), [1, 1]))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(burn::tensor::module::adaptive_avg_pool2d(x.clone(), [1, 1]))
            })
        })
    });
    group.finish();

    let out_grad = Tensor::<4>::random([8, 512, 1, 1], Distribution::Default, device);
    let mut group = c.benchmark_group(format!(
        "adaptive_avg_pool2d/{device_name}/head_8x512x7x7_to_1x1/backward"
    ));
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ConvPoolBackend>::adaptive_avg_pool_backward(
                    out_grad.clone().reshape([8, 512, 1, 1, 1]).into_dispatch(),
                    [1, 7, 7],
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(
                    <Dispatch as ModuleOps<Dispatch>>::adaptive_avg_pool2d_backward(
                        x.clone().into_dispatch(),
                        out_grad.clone().into_dispatch(),
                    ),
                )
            })
        })
    });
    group.finish();
}

fn pools(c: &mut Criterion) {
    for (device_name, device) in devices() {
        max_pool_stem(c, device_name, &device);
        adaptive_head(c, device_name, &device);
    }
}

criterion_group!(benches, pools);
criterion_main!(benches);
