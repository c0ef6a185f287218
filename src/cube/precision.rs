//! How a CubeCL device's convolutions may round f32: exactly (the default), or on TF32 tensor
//! cores where the user allows it; half-precision operands are always summed in f32. The tuner
//! only offers candidates that compute so, and a pass's precision never depends on which kernel
//! timed faster.

use burn::tensor::{DType, Device};
use burn_cubecl::CubeDevice;
use cubecl::ir::{DeviceProperties, ElemType, FloatKind};
use serde::{Deserialize, Serialize};

use super::per_device::PerDevice;

/// How precisely a CubeCL device's convolutions compute f32 operands. f16 and bf16 operands are
/// summed in f32 under either, and the CPU backends always compute exactly.
///
/// `Exact` is the default because this crate's results match PyTorch's CPU values to f32
/// rounding on every backend. PyTorch's cuDNN convolutions default to TF32
/// (`torch.backends.cudnn.allow_tf32 = True`), and Burn's own convolutions use TF32 on every
/// device that has it. Choose `Tf32` for that speed at TF32's precision: products of operands
/// rounded to 10 mantissa bits (relative error about 1e-3), summed in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ConvPrecision {
    /// Every product and sum in f32. On a device with TF32 tensor cores (CUDA, compute
    /// capability 8.0 and later) the tuner leaves out Burn's kernels, which would round to TF32.
    #[default]
    Exact,
    /// f32 operands may be rounded to TF32 on tensor cores where the device has them: the tuner
    /// also times Burn's kernels there. Elsewhere, the same as `Exact`.
    Tf32,
}

/// The devices whose precision was set; every other device computes exactly.
static PRECISIONS: PerDevice<ConvPrecision> = PerDevice::new();

/// Let `device`'s convolutions compute with `precision` from now on. Set it before queuing the
/// work it should apply to, as with [`set_cube_kernels`](super::choice::set_cube_kernels).
///
/// ```no_run
/// # #[cfg(feature = "cuda")]
/// # {
/// use burn::tensor::Device;
/// use burn_convpool::cube_kernels::{ConvPrecision, set_conv_precision};
///
/// // As PyTorch's default `torch.backends.cudnn.allow_tf32 = True`.
/// set_conv_precision(&Device::cuda(0), ConvPrecision::Tf32);
/// # }
/// ```
///
/// # Panics
/// When `device` is not a CubeCL device: the CPU backends always compute exactly.
pub fn set_conv_precision(device: &Device, precision: ConvPrecision) {
    PRECISIONS.set_on("set_conv_precision", device, precision);
}

/// The precision `device`'s convolutions compute with: what [`set_conv_precision`] set, else
/// [`ConvPrecision::Exact`] (a CPU device always computes exactly).
pub fn conv_precision(device: &Device) -> ConvPrecision {
    PRECISIONS.get_on(device)
}

/// The precision a CubeCL device's convolutions compute with.
pub(crate) fn precision_of(device: &CubeDevice) -> ConvPrecision {
    PRECISIONS.get(device)
}

/// Why `precision` leaves Burn's kernels out of the tuner for operands of `dtype` on a device
/// with `properties`, or `None` where they compute what `precision` allows.
/// - f32: cubek's matmuls, under Burn's implicit GEMMs, round operands to TF32 wherever the
///   device supports the type (`cubek-matmul` `adjust_dtypes`); this asks the same question.
/// - f16 and bf16: Burn's direct kernel (cubek-convolution `direct.rs`) sums in the operand
///   type, where ours sum in f32 as PyTorch's kernels do, whatever the precision.
pub(crate) fn excludes_burn(
    precision: ConvPrecision,
    properties: &DeviceProperties,
    dtype: DType,
) -> Option<String> {
    let tf32 = properties.supports_type(ElemType::Float(FloatKind::TF32));
    match dtype {
        DType::F16 | DType::BF16 => Some(format!(
            "Burn's direct kernel sums {dtype:?} operands in {dtype:?}; ours sum them in f32"
        )),
        DType::F32 if tf32 && precision == ConvPrecision::Exact => Some(
            "Burn's kernels round f32 to TF32 on this device; ConvPrecision::Exact leaves them out"
                .into(),
        ),
        _ => None,
    }
}

/// Why `precision` keeps our tensor-core GEMM tiles (`GemmTile::Cmma` and `GemmTile::Mma`) from
/// operands of `dtype` on a device with `properties`, or `None` where they may run:
/// - f32: only under [`ConvPrecision::Tf32`] on a device with TF32 (cubek's selector rounds f32
///   operands to it there, `adjust_dtypes`); f32 registers have no tensor-core shape.
/// - f16 and bf16: under either precision, multiplied exactly into f32 accumulators, as our
///   plain-core kernels sum them.
/// - Any other type has no tensor-core shape.
///
/// Which shapes the device's tensor cores take is cubek's selector's to decide after this.
pub(crate) fn excludes_tensor_cores(
    precision: ConvPrecision,
    properties: &DeviceProperties,
    dtype: DType,
) -> Option<String> {
    let tf32 = properties.supports_type(ElemType::Float(FloatKind::TF32));
    match dtype {
        DType::F16 | DType::BF16 => None,
        DType::F32 if precision == ConvPrecision::Tf32 && tf32 => None,
        DType::F32 if precision == ConvPrecision::Tf32 => {
            Some("this device has no TF32 tensor cores for f32 operands".into())
        }
        DType::F32 => Some(
            "tensor cores would round f32 to TF32; ConvPrecision::Exact leaves them out".into(),
        ),
        _ => Some(format!("tensor cores take no {dtype:?} operands")),
    }
}

#[cfg(all(test, feature = "wgpu"))]
pub(crate) mod tests {
    use burn::backend::ops::FloatTensorOps;
    use burn::tensor::{DType, Device, TensorData};
    use burn_cubecl::CubeBackend;
    use cubecl::features::TypeUsage;
    use cubecl::ir::{DeviceProperties, ElemType, FloatKind};

    use super::{ConvPrecision, excludes_burn, excludes_tensor_cores};
    use crate::cube::per_device::cube_device;

    /// The properties of CI's wgpu device (lavapipe, no tensor cores), as a tensor on it reports
    /// them.
    pub(crate) fn wgpu_properties() -> DeviceProperties {
        let device = cube_device(&Device::wgpu(Default::default())).expect("a CubeCL device");
        let tensor = CubeBackend::float_from_data(TensorData::new(vec![0f32], [1]), &device);
        tensor.client.properties().clone()
    }

    /// CI's wgpu device's properties with TF32 registered, as CubeCL's CUDA runtime registers
    /// it on compute capability 8.0 and later.
    pub(crate) fn tf32_properties() -> DeviceProperties {
        let mut properties = wgpu_properties();
        properties.register_type_usage(ElemType::Float(FloatKind::TF32), TypeUsage::Conversion);
        properties
    }

    #[test]
    fn exact_leaves_burn_out_only_where_it_would_round_f32_to_tf32() {
        use ConvPrecision::{Exact, Tf32};
        let (plain, tensor_cores) = (wgpu_properties(), tf32_properties());

        assert_eq!(excludes_burn(Exact, &plain, DType::F32), None);
        assert!(
            excludes_burn(Exact, &tensor_cores, DType::F32)
                .is_some_and(|reason| reason.contains("TF32"))
        );
        assert_eq!(excludes_burn(Tf32, &tensor_cores, DType::F32), None);
        assert_eq!(excludes_burn(Exact, &tensor_cores, DType::F64), None);
    }

    #[test]
    fn exact_keeps_f32_off_every_tensor_core_tile() {
        use ConvPrecision::{Exact, Tf32};
        let (plain, tensor_cores) = (wgpu_properties(), tf32_properties());

        assert!(
            excludes_tensor_cores(Exact, &tensor_cores, DType::F32)
                .is_some_and(|reason| reason.contains("Exact"))
        );
        assert_eq!(excludes_tensor_cores(Tf32, &tensor_cores, DType::F32), None);
        assert!(
            excludes_tensor_cores(Tf32, &plain, DType::F32)
                .is_some_and(|reason| reason.contains("no TF32"))
        );
        assert!(excludes_tensor_cores(Tf32, &tensor_cores, DType::F64).is_some());
        for precision in [Exact, Tf32] {
            for dtype in [DType::F16, DType::BF16] {
                // Products of half operands are exact in the f32 accumulators.
                assert_eq!(excludes_tensor_cores(precision, &plain, dtype), None);
            }
        }
    }

    #[test]
    fn half_operands_never_run_burns_kernels() {
        let plain = wgpu_properties();
        for precision in [ConvPrecision::Exact, ConvPrecision::Tf32] {
            for dtype in [DType::F16, DType::BF16] {
                assert!(
                    excludes_burn(precision, &plain, dtype)
                        .is_some_and(|reason| reason.contains("in f32")),
                    "{precision:?} {dtype:?}"
                );
            }
        }
    }
}
