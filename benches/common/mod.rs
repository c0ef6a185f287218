//! What every bench shares: the catalogue of shapes, the devices to compare on, random
//! primitives of any rank, and a timed batch of calls that waits for the device once at its end,
//! so asynchronous GPU work is inside the measurement but one sync is not timed per call.

#![allow(dead_code)]

pub mod catalogue;
pub mod peak;

use burn::backend::Dispatch;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::tensor::{Device, Distribution, Shape, Tensor};
use criterion::Criterion;
use std::time::{Duration, Instant};

/// Flex always; the default device of every CubeCL runtime compiled in, running the kernels
/// `BENCH_KERNELS` names.
pub fn devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut devices = vec![("flex", Device::flex())];
    #[cfg(feature = "wgpu")]
    devices.push(("wgpu", Device::wgpu(Default::default())));
    #[cfg(feature = "vulkan")]
    devices.push(("vulkan", Device::vulkan(Default::default())));
    #[cfg(feature = "cuda")]
    devices.push(("cuda", Device::cuda(0)));
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    for (_, device) in &devices[1..] {
        burn_convpool::cube_kernels::set_cube_kernels(device, cube_kernels());
    }
    devices
}

/// `BENCH_KERNELS` = `tuned` (or unset: the tuned choice, as users get it) | `ours` | `spread`
/// (ours, every pool and direct conv launch spread) | `burn`: what the CubeCL devices run.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn cube_kernels() -> burn_convpool::cube_kernels::CubeKernels {
    use burn_convpool::cube_kernels::{CubeKernels, OurKernels, Packing};
    match std::env::var("BENCH_KERNELS").as_deref() {
        Err(_) | Ok("tuned") => CubeKernels::Tuned,
        Ok("ours") => CubeKernels::Ours(OurKernels::default()),
        Ok("spread") => CubeKernels::Ours(OurKernels::default().with_packing(Packing::Spread)),
        Ok("burn") => CubeKernels::Burn,
        Ok(other) => panic!("BENCH_KERNELS={other}: expected tuned, ours, spread or burn"),
    }
}

/// The time of `iters` calls of `op` queued back to back, waiting for the device once after the
/// last: a sync per call would time the sync (about 0.2 ms on wgpu's Vulkan path, more than
/// many kernels take), not the op. Work queued before is drained first, outside the timing.
pub fn batch_time<T, F>(device: &Device, iters: u64, op: &mut F) -> Duration
where
    F: FnMut() -> T + ?Sized,
{
    device.sync().expect("device sync failed");
    let start = Instant::now();
    for _ in 0..iters {
        std::hint::black_box(op());
    }
    device.sync().expect("device sync failed");
    start.elapsed()
}

/// A random `U(0, 1)` float primitive of shape `dims`, any rank.
pub fn random(dims: &[usize], device: &Device) -> FloatTensor<Dispatch> {
    let numel: usize = dims.iter().product();
    let flat = Tensor::<1>::random([numel], Distribution::Default, device).into_dispatch();
    Dispatch::float_reshape(flat, Shape::from(dims.to_vec()))
}

/// A random primitive of shape `dims` `(N, C, *spatial)`, channels-last in memory if asked: a
/// permuted view of an `(N, *spatial, C)` tensor, as Burn's convolutions leave their outputs.
pub fn random_laid_out(
    dims: &[usize],
    channels_last: bool,
    device: &Device,
) -> FloatTensor<Dispatch> {
    if !channels_last {
        return random(dims, device);
    }
    let rank = dims.len();
    let memory: Vec<usize> = [dims[0]]
        .into_iter()
        .chain(dims[2..].iter().copied())
        .chain([dims[1]])
        .collect();
    let axes: Vec<usize> = [0, rank - 1].into_iter().chain(1..rank - 1).collect();
    Dispatch::float_permute(random(&memory, device), &axes)
}

/// `(N, C, *spatial)` with unit axes in front of the spatial ones, to rank 5.
pub fn lifted(dims: &[usize]) -> [usize; 5] {
    let mut out = [1; 5];
    out[..2].copy_from_slice(&dims[..2]);
    let spatial = &dims[2..];
    out[5 - spatial.len()..].copy_from_slice(spatial);
    out
}

/// The last three of [`lifted`]: a rank-N size as the rank-3 size the primitives take.
pub fn lifted3(values: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - values.len()..].copy_from_slice(values);
    out
}

/// A rank-N array from a slice.
pub fn array<const N: usize>(values: &[usize]) -> [usize; N] {
    core::array::from_fn(|i| values[i])
}

/// Short runs: 10 samples over 2 s after 1 s of warm-up keep a default `cargo bench` under 15
/// minutes on 2 cores while the slowest cases still get 10 samples.
pub fn criterion() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_secs(1))
        .measurement_time(std::time::Duration::from_secs(2))
}

/// `ours` and `burn` for one bench id (`{family}/{device}/{case}/{pass}`), each timed in
/// batches by [`batch_time`]; `burn` is skipped where Burn has no such op.
///
/// Before the first of them is timed (and only if the filter selects one), both run once
/// untimed, so that every autotuner either side consults has settled its choice for the shape.
/// Otherwise the side timed first pays the tuning in its warm-up, and criterion, reading
/// seconds per call there, measures it with a few calls per sample, which on lavapipe reads
/// about 5% slower than the same kernel timed second.
pub fn compare<T, U>(
    c: &mut Criterion,
    id: &str,
    device: &Device,
    mut ours: impl FnMut() -> T,
    mut burn: Option<&mut dyn FnMut() -> U>,
) {
    let mut settled = false;
    let mut settle = |ours: &mut dyn FnMut() -> T, burn: &mut Option<&mut dyn FnMut() -> U>| {
        if !core::mem::replace(&mut settled, true) {
            batch_time(device, 1, ours);
            if let Some(burn) = burn {
                batch_time(device, 1, burn);
            }
        }
    };
    let mut group = c.benchmark_group(id);
    group.bench_function("ours", |b| {
        settle(&mut ours, &mut burn);
        b.iter_custom(|iters| batch_time(device, iters, &mut ours))
    });
    if burn.is_some() {
        group.bench_function("burn", |b| {
            settle(&mut ours, &mut burn);
            let burn = burn.as_mut().expect("checked above");
            b.iter_custom(|iters| batch_time(device, iters, burn))
        });
    }
    group.finish();
}
