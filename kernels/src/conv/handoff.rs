//! The split-k handoff: a split GEMM's cubes sum their partial results in their own launch.
//! Each cube of a tile publishes its split's partial result and counts its arrival; the last
//! of the tile's splits to arrive sums the splits, in split order as [`sum_splits()`] does, and
//! stores the final result. No second launch runs, and the result is the second launch's, bit
//! for bit.
//!
//! It needs a runtime that makes one cube's writes visible to another within a launch
//! (CubeCL's `device_memory_scope`: CUDA, HIP, Metal, Vulkan through SPIR-V); the host takes
//! the second launch elsewhere.
//!
//! [`sum_splits()`]: crate::conv::sum_splits()

use cubecl::prelude::*;

use crate::activation::{ActivationKind, epilogue};

use crate::pairwise::{pairwise_add, pairwise_sum, pairwise_value};

/// What the last cube of a tile to arrive applies to the sum of the splits (comptime): the
/// activation, where the sum is final, and whether it repairs by the definition the sums that
/// are not finite, as `sum_splits_exact` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handoff {
    /// Applied to each sum; `None` where a repair launch follows.
    pub activation: Option<ActivationKind>,
    /// Whether the sums that are not finite are recomputed by the definition.
    pub repair: bool,
}

/// Count this cube's arrival at its tile's counter `arrivals[tile]`, once its partial result is
/// stored, and return whether it is the last of the tile's `splits` cubes: every unit of the
/// cube reaches it, and all get the same answer. The last cube leaves the counter at zero for
/// the next launch.
#[cube]
pub fn last_to_arrive(arrivals: &mut Tensor<Atomic<u32>>, tile: usize, splits: usize) -> bool {
    let mut arrived = Shared::<u32>::new();
    // Release: this cube's partial result is visible to whichever cube arrives last.
    sync_storage();
    if UNIT_POS == 0 {
        *arrived = arrivals[tile].fetch_add(1u32);
    }
    // Acquire: the partial results of the cubes that arrived before are visible here.
    sync_storage();
    let last = *arrived as usize + 1 == splits;
    if last && UNIT_POS == 0 {
        arrivals[tile].store(0u32);
    }
    last
}

/// The final value at flat index `index` of `summed`: the splits' partial results in
/// `partials` (`splits` stacked copies of `summed`'s layout, the GEMM's own output, hence
/// mutable) summed pairwise in split order, as `split_sum` sums them for
/// [`sum_splits()`](crate::conv::sum_splits()), then `activation`.
#[cube]
pub fn finish_sum<F: Float, A: Float>(
    partials: &mut Tensor<F>,
    summed: &mut Tensor<F>,
    splits: usize,
    index: usize,
    slope: f32,
    #[comptime] activation: Option<ActivationKind>,
) {
    let len = summed.len();
    let mut acc = pairwise_sum::<A>();
    for s in 0..splits {
        pairwise_add::<A>(&mut acc, A::cast_from(partials[s * len + index]));
    }
    let sum = F::cast_from(pairwise_value::<A>(&acc));
    summed[index] = epilogue::<F, A>(sum, slope, activation);
}
