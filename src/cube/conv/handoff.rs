//! The split-k handoff's host side (`burn_convpool_kernels::conv::handoff`): whether a
//! device runs it, and what the last cube of each tile applies to the sum of the splits.

use burn_convpool_kernels::conv::Handoff;
use burn_cubecl::tensor::CubeTensor;
use cubecl::features::AtomicUsage;
use cubecl::ir::{DeviceProperties, ElemType, Type, UIntKind};

use crate::cube::choice::SplitSum;
use crate::cube::tensor::LaunchError;
use crate::spec::Activation;

use super::{SplitRepair, activation, repairs_within};

/// Whether a split GEMM writing `out` sums its partial results in its own launch under
/// `split_sum` ([`runs_on`] its device's properties).
pub(super) fn runs(out: &CubeTensor, split_sum: SplitSum) -> Result<bool, LaunchError> {
    runs_on(out.client.properties(), split_sum)
}

/// Whether a device with `properties` runs the handoff under `split_sum`: pinned, wherever it
/// adds to u32 atomics (a [`LaunchError::Atomic`] elsewhere); by default, where its runtime
/// also promises that one cube's writes reach another within a launch (CubeCL's
/// `device_memory_scope`: CUDA, HIP, Metal, Vulkan through SPIR-V, not WGSL).
fn runs_on(properties: &DeviceProperties, split_sum: SplitSum) -> Result<bool, LaunchError> {
    let counts = properties
        .atomic_type_usage(counter_type())
        .contains(AtomicUsage::Add);
    match split_sum {
        SplitSum::SecondLaunch => Ok(false),
        SplitSum::Auto => Ok(counts && properties.features.device_memory_scope),
        SplitSum::Handoff if counts => Ok(true),
        SplitSum::Handoff => Err(LaunchError::Atomic {
            operation: "an atomic add on u32",
            needed_by: "SplitSum::Handoff",
        }),
    }
}

/// The type of the tiles' arrival counters.
fn counter_type() -> Type {
    Type::atomic(ElemType::UInt(UIntKind::U32))
}

/// What the last cube of each tile applies to the sum of `splits` partial results, as the
/// second launch would (`with_splits`): the repair of a sum that is not finite where the
/// padding may meet a non-finite operand (`repair`) and each unit's loop budget allows it
/// (`own` iterations of its GEMM, `elements` sums per unit), and `activation` where the sum
/// is final. Returns the rule, its activation's slope, and whether it repairs.
pub(super) fn rule(
    repair: Option<&SplitRepair<'_>>,
    activation: Option<Activation>,
    splits: usize,
    own: usize,
    elements: usize,
) -> (Handoff, f32, bool) {
    let own = own.saturating_add(splits.saturating_mul(elements));
    let repaired =
        repair.is_some_and(|repair| repairs_within(repair.geometry, repair.kind, own, elements));
    let (slope, activation) = activation::stored(activation, repaired || repair.is_none());
    let handoff = Handoff {
        activation,
        repair: repaired,
    };
    (handoff, slope, repaired)
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use super::{SplitSum, counter_type, runs_on};
    use crate::cube::precision::tests::wgpu_properties;
    use crate::cube::tensor::LaunchError;

    #[test]
    fn the_default_hands_off_only_where_the_runtime_promises_it() {
        // CI's wgpu device compiles WGSL, which promises nothing across workgroups.
        let mut properties = wgpu_properties();
        assert!(!properties.features.device_memory_scope);
        assert_eq!(runs_on(&properties, SplitSum::Auto), Ok(false));
        assert_eq!(runs_on(&properties, SplitSum::Handoff), Ok(true));
        assert_eq!(runs_on(&properties, SplitSum::SecondLaunch), Ok(false));

        // As CUDA's, HIP's, Metal's and SPIR-V Vulkan's runtimes report it.
        properties.features.device_memory_scope = true;
        assert_eq!(runs_on(&properties, SplitSum::Auto), Ok(true));
        assert_eq!(runs_on(&properties, SplitSum::SecondLaunch), Ok(false));

        // Without atomic adds on u32 no counter runs: the default launches a sum, a pin fails.
        properties.features.types.atomic.remove(&counter_type());
        assert_eq!(runs_on(&properties, SplitSum::Auto), Ok(false));
        let error = runs_on(&properties, SplitSum::Handoff).unwrap_err();
        assert!(matches!(error, LaunchError::Atomic { .. }));
        assert_eq!(
            error.to_string(),
            "SplitSum::Handoff needs an atomic add on u32, which this device does not report"
        );
    }
}
