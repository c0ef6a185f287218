//! A device's measured ceilings, so a report row can say how close it runs to the hardware:
//! CubeCL's own throughput probes (`Device::performance_stats`), run on the machine that ran
//! the benches. Flex (and any build without a CubeCL runtime) has none.

use burn::tensor::Device;

/// What one device sustains at best, each `None` where the device has no such unit or the probe
/// could not run.
#[derive(Default, Clone, Copy, Debug)]
pub struct Peaks {
    /// f32 fused multiply-adds on the SIMT cores, in FLOP/s (2 per fma).
    pub f32_flops: Option<f64>,
    /// Tensor cores with TF32 inputs and f32 accumulation (what f32 GEMMs may run on), FLOP/s.
    pub tf32_flops: Option<f64>,
    /// Tensor cores with f16 inputs and f32 accumulation, FLOP/s.
    pub f16_flops: Option<f64>,
    /// A copy's traffic (bytes read plus bytes written) per second.
    pub copy_bytes: Option<f64>,
}

impl Peaks {
    /// `device`'s ceilings, measured now (CubeCL caches them per device).
    #[cfg(feature = "cube")]
    pub fn measure(device: &Device) -> Self {
        use burn::tensor::{MemoryAccess, ThroughputKey, ThroughputMode};
        use cubecl::ir::{ElemType, FloatKind};
        use cubecl::throughput::{CmmaDims, ComputeCmmaConfig, MemorySpec};

        let float = |kind| ElemType::Float(kind);
        let cmma = |input, k| ThroughputMode::ComputeCmma {
            dtype: float(input),
            config: ComputeCmmaConfig {
                accumulator_type: float(FloatKind::F32),
                cmma_dims: CmmaDims { m: 16, n: 16, k },
            },
        };
        // One key per call: each answer is cached per device, and a field reads its own mode.
        let rate = |mode: ThroughputMode| {
            let key = ThroughputKey { mode };
            let value = device.performance_stats(&[key]).pop()?.value.ok()?;
            let rate = match mode {
                ThroughputMode::Memory(_) => value.bytes_per_s(&key),
                _ => value.ops_per_s(),
            };
            rate.is_normal().then_some(rate)
        };
        let copy = MemoryAccess::Copy;
        Self {
            f32_flops: rate(ThroughputMode::ComputeDirect {
                dtype: float(FloatKind::F32),
            }),
            tf32_flops: rate(cmma(FloatKind::TF32, 8)),
            f16_flops: rate(cmma(FloatKind::F16, 16)),
            copy_bytes: rate(ThroughputMode::Memory(MemorySpec::new(
                copy,
                copy.default_working_set(),
            ))),
        }
    }

    /// No CubeCL runtime compiled in: nothing to measure with.
    #[cfg(not(feature = "cube"))]
    pub fn measure(_device: &Device) -> Self {
        Self::default()
    }

    /// One line for the report: every ceiling that was measured.
    pub fn describe(&self) -> Option<String> {
        let giga = |rate: Option<f64>, what: &str, unit: &str| {
            rate.map(|rate| format!("{what} {:.1} {unit}", rate * 1e-9))
        };
        let parts: Vec<String> = [
            giga(self.f32_flops, "f32 fma", "GFLOP/s"),
            giga(self.tf32_flops, "TF32 tensor cores", "GFLOP/s"),
            giga(self.f16_flops, "f16 tensor cores", "GFLOP/s"),
            giga(self.copy_bytes, "memory copy", "GB/s (read + written)"),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The share of the device's ceiling a rate reaches: convolutions against the f32 fma
    /// peak (a tensor-core kernel can pass 100%), pools against the copy bandwidth.
    pub fn share(&self, rate: f64, is_conv: bool) -> Option<f64> {
        let peak = if is_conv {
            self.f32_flops
        } else {
            self.copy_bytes
        }?;
        Some(rate / peak)
    }
}
