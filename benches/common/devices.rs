//! The devices every bench compares on: Flex, and each CubeCL runtime compiled in running the
//! kernels `BENCH_KERNELS` names.

use burn::tensor::Device;

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
