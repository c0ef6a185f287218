//! A timed batch of calls that waits for the device once at its end, so asynchronous GPU work
//! is inside the measurement but one sync is not timed per call, and the criterion settings
//! and comparison of ours against Burn's every bench shares.

use burn::tensor::Device;
use criterion::Criterion;
use std::time::{Duration, Instant};

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
