//! The devices every bench compares on: Flex, and each CubeCL runtime compiled in running the
//! kernels `BENCH_KERNELS` names at the precision `BENCH_PRECISION` names.

use burn::tensor::Device;

/// Flex always; the default device of every CubeCL runtime compiled in, running the kernels
/// `BENCH_KERNELS` names at the precision `BENCH_PRECISION` names.
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
        burn_convpool::cube_kernels::set_conv_precision(device, conv_precision());
    }
    devices
}

/// `BENCH_KERNELS` = `tuned` (or unset: the tuned choice, as users get it) | `ours` | `spread`
/// (ours, every pool and direct conv launch spread) | `cmma` | `mma` (our GEMM on tensor
/// cores; f32 needs `BENCH_PRECISION=tf32`) | `burn`: what the CubeCL devices run.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn cube_kernels() -> burn_convpool::cube_kernels::CubeKernels {
    use burn_convpool::cube_kernels::{ConvSchedule, CubeKernels, GemmTile, OurKernels, Packing};
    let gemm = |tile| CubeKernels::Ours(OurKernels::default().with_conv(ConvSchedule::Gemm(tile)));
    match std::env::var("BENCH_KERNELS").as_deref() {
        Err(_) | Ok("tuned") => CubeKernels::Tuned,
        Ok("ours") => CubeKernels::Ours(OurKernels::default()),
        Ok("spread") => CubeKernels::Ours(OurKernels::default().with_packing(Packing::Spread)),
        Ok("cmma") => gemm(GemmTile::Cmma),
        Ok("mma") => gemm(GemmTile::Mma),
        Ok("burn") => CubeKernels::Burn,
        Ok(other) => {
            panic!("BENCH_KERNELS={other}: expected tuned, ours, spread, cmma, mma or burn")
        }
    }
}

/// `BENCH_PRECISION` = `exact` (or unset: the default, as users get it) | `tf32` (Burn's
/// tensor-core kernels allowed where they would round f32 to TF32, the precision of Burn's own
/// rows there): what the CubeCL devices compute with.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn conv_precision() -> burn_convpool::cube_kernels::ConvPrecision {
    use burn_convpool::cube_kernels::ConvPrecision;
    match std::env::var("BENCH_PRECISION").as_deref() {
        Err(_) | Ok("exact") => ConvPrecision::Exact,
        Ok("tf32") => ConvPrecision::Tf32,
        Ok(other) => panic!("BENCH_PRECISION={other}: expected exact or tf32"),
    }
}
