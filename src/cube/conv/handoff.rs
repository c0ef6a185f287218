//! The split-k handoff's host side (`burn_convpool_kernels::conv::handoff`): whether a
//! device runs it, and what the last cube of each tile applies to the sum of the splits.

use burn::tensor::DType;
use burn_convpool_kernels::conv::Handoff;
use burn_cubecl::tensor::CubeTensor;
use cubecl::features::AtomicUsage;
use cubecl::ir::{ElemType, Type, UIntKind};

use crate::cube::choice::SplitSum;
use crate::cube::tensor::LaunchError;
use crate::spec::Activation;

use super::{SplitRepair, activation, repairs_within};

/// Whether a split GEMM writing `out` sums its partial results in its own launch under
/// `split_sum`: pinned, wherever the device adds to u32 atomics (an error elsewhere); by
/// default, where its runtime also promises that one cube's writes reach another within a
/// launch (CubeCL's `device_memory_scope`: CUDA, HIP, Metal, Vulkan through SPIR-V, not WGSL).
pub(super) fn runs(out: &CubeTensor, split_sum: SplitSum) -> Result<bool, LaunchError> {
    let properties = out.client.properties();
    let counter = Type::atomic(ElemType::UInt(UIntKind::U32));
    let counts = properties
        .atomic_type_usage(counter)
        .contains(AtomicUsage::Add);
    match split_sum {
        SplitSum::SecondLaunch => Ok(false),
        SplitSum::Auto => Ok(counts && properties.features.device_memory_scope),
        SplitSum::Handoff if counts => Ok(true),
        SplitSum::Handoff => Err(LaunchError::Unsupported { got: DType::U32 }),
    }
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
