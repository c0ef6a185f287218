//! Convolution forward, input gradient and weight gradient: this crate's primitives against
//! Burn's built-in `ModuleOps` on the same device, in the same run.
//!
//! `cargo bench --bench conv` (add `--features wgpu` for the CubeCL kernels on wgpu); the ratio
//! to report is `burn / ours` per group. Each timed call waits for the device.

use std::hint::black_box;

use burn::backend::Dispatch;
use burn::backend::ops::ModuleOps;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::ConvPoolBackend;
use criterion::{Criterion, criterion_group, criterion_main};

mod common;
use common::{devices, synced};

/// A 2D convolution layer to measure.
struct Layer {
    name: &'static str,
    batch: usize,
    channels: [usize; 2],
    size: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    groups: usize,
}

const LAYERS: &[Layer] = &[
    Layer {
        name: "resnet18_64x56x56_k3",
        batch: 8,
        channels: [64, 64],
        size: 56,
        kernel: 3,
        stride: 1,
        padding: 1,
        groups: 1,
    },
    Layer {
        name: "resnet18_256x14x14_k3",
        batch: 8,
        channels: [256, 256],
        size: 14,
        kernel: 3,
        stride: 1,
        padding: 1,
        groups: 1,
    },
    Layer {
        name: "grouped32_128x28x28_k3",
        batch: 8,
        channels: [128, 128],
        size: 28,
        kernel: 3,
        stride: 1,
        padding: 1,
        groups: 32,
    },
    Layer {
        name: "depthwise_128x56x56_k3",
        batch: 8,
        channels: [128, 128],
        size: 56,
        kernel: 3,
        stride: 1,
        padding: 1,
        groups: 128,
    },
];

fn bench_layer(c: &mut Criterion, device_name: &str, device: &Device, layer: &Layer) {
    let [c_in, c_out] = layer.channels;
    let out_size = (layer.size + 2 * layer.padding - layer.kernel) / layer.stride + 1;
    let random = |dims: [usize; 4]| Tensor::<4>::random(dims, Distribution::Default, device);
    let x = random([layer.batch, c_in, layer.size, layer.size]);
    let weight = random([c_out, c_in / layer.groups, layer.kernel, layer.kernel]);
    let out_grad = random([layer.batch, c_out, out_size, out_size]);
    let options2 = ConvOptions::new([layer.stride; 2], [layer.padding; 2], [1; 2], layer.groups);
    let options3 = ConvOptions::new(
        [1, layer.stride, layer.stride],
        [0, layer.padding, layer.padding],
        [1; 3],
        layer.groups,
    );
    let lift = |t: &Tensor<4>| {
        let [a, b, h, w] = t.dims();
        t.clone().reshape([a, b, 1, h, w]).into_dispatch()
    };
    let kernel3 = [1, layer.kernel, layer.kernel];
    let x_size = [1, layer.size, layer.size];

    let mut group = c.benchmark_group(format!("conv2d/{device_name}/{}/forward", layer.name));
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ConvPoolBackend>::conv(
                    lift(&x),
                    lift(&weight),
                    options3.clone(),
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(burn::tensor::module::conv2d(
                    x.clone(),
                    weight.clone(),
                    None,
                    options2.clone(),
                ))
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group(format!("conv2d/{device_name}/{}/grad_input", layer.name));
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ConvPoolBackend>::conv_x_backward(
                    lift(&weight),
                    lift(&out_grad),
                    x_size,
                    options3.clone(),
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ModuleOps<Dispatch>>::conv2d_x_backward(
                    x.clone().into_dispatch(),
                    weight.clone().into_dispatch(),
                    out_grad.clone().into_dispatch(),
                    options2.clone(),
                ))
            })
        })
    });
    group.finish();

    let mut group = c.benchmark_group(format!("conv2d/{device_name}/{}/grad_weight", layer.name));
    group.sample_size(10);
    group.bench_function("ours", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ConvPoolBackend>::conv_weight_backward(
                    lift(&x),
                    lift(&out_grad),
                    kernel3,
                    options3.clone(),
                ))
            })
        })
    });
    group.bench_function("burn", |b| {
        b.iter(|| {
            synced(device, || {
                black_box(<Dispatch as ModuleOps<Dispatch>>::conv2d_weight_backward(
                    x.clone().into_dispatch(),
                    weight.clone().into_dispatch(),
                    out_grad.clone().into_dispatch(),
                    options2.clone(),
                ))
            })
        })
    });
    group.finish();
}

fn conv(c: &mut Criterion) {
    for (device_name, device) in devices() {
        for layer in LAYERS {
            bench_layer(c, device_name, &device, layer);
        }
    }
}

criterion_group!(benches, conv);
criterion_main!(benches);
