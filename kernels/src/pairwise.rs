//! Long sums with a rounding error that grows with the logarithm of their length, as the CPU
//! kernels' `PairwiseSum`: a unit adds [`BLOCK`] terms in a plain running sum, then carries the
//! block up its levels like a binary counter (level `k` holds `2^k` blocks), so each block
//! meets sums of its own size. A whole 4096 x 4096 plane walked by one unit is 16 + 20
//! roundings deep instead of 2^24; a window of at most [`BLOCK`] taps rounds as a running sum.
//! The levels live in a local array of [`LEVELS`] per sum, touched once per block.

use cubecl::prelude::*;

/// Terms in a plain running sum before the block carries.
pub const BLOCK: u32 = 16;

/// Levels per sum: enough for `u32::MAX` blocks.
pub const LEVELS: usize = 32;

/// `width` pairwise sums that take their terms together: `block[v]` is sum `v`'s running block,
/// `levels[level * width + v]` its levels (meaningful where bit `level` of `blocks` is set).
/// Carry every block up its levels; the caller then counts one more block. The levels are
/// walked unrolled and predicated, with no loop: Mesa's lavapipe (CI's device) ends any loop
/// after 65535 iterations, counting the iterations of loops nested in it.
#[cube]
pub fn carry_blocks<A: Float>(
    block: &mut Array<A>,
    levels: &mut Array<A>,
    blocks: u32,
    #[comptime] width: usize,
) {
    // The levels the carry merges with: the trailing ones of `blocks`.
    let merged = (blocks + 1).trailing_zeros();
    #[unroll]
    for v in 0..width {
        let mut sum = block[v];
        block[v] = A::new(0.0);
        #[unroll]
        for level in 0..LEVELS {
            let below = (level as u32) < merged;
            sum = select(below, levels[level * width + v] + sum, sum);
            if level as u32 == merged {
                levels[level * width + v] = sum;
            }
        }
    }
}

/// Sum `v` of [`carry_blocks()`]' sums: its running block, then its levels from the smallest.
#[cube]
pub fn pairwise_total<A: Float>(
    block: &Array<A>,
    levels: &Array<A>,
    blocks: u32,
    v: usize,
    #[comptime] width: usize,
) -> A {
    let mut sum = block[v];
    if blocks != 0 {
        #[unroll]
        for level in 0..LEVELS {
            let set = (blocks >> level as u32) & 1 == 1;
            sum = select(set, sum + levels[level * width + v], sum);
        }
    }
    sum
}

/// One pairwise sum of single terms: its running block, levels and counts, as [`carry_blocks()`]
/// keeps them for `width = 1`, with `counts = [terms in the block, blocks]`.
#[derive(CubeType)]
pub struct PairwiseSum<A: Float> {
    block: Array<A>,
    levels: Array<A>,
    counts: Array<u32>,
}

/// An empty [`PairwiseSum`].
#[cube]
pub fn pairwise_sum<A: Float>() -> PairwiseSum<A> {
    let mut block = Array::<A>::new(1usize);
    let mut counts = Array::<u32>::new(2usize);
    block[0] = A::new(0.0);
    counts[0] = 0;
    counts[1] = 0;
    PairwiseSum::<A> {
        block,
        levels: Array::<A>::new(LEVELS),
        counts,
    }
}

/// Add `value` to `sum`, carrying its block when full.
#[cube]
pub fn pairwise_add<A: Float>(sum: &mut PairwiseSum<A>, value: A) {
    sum.block[0] += value;
    sum.counts[0] += 1;
    if sum.counts[0] == BLOCK {
        carry_blocks::<A>(&mut sum.block, &mut sum.levels, sum.counts[1], 1usize);
        sum.counts[1] += 1;
        sum.counts[0] = 0;
    }
}

/// The value of `sum`.
#[cube]
pub fn pairwise_value<A: Float>(sum: &PairwiseSum<A>) -> A {
    pairwise_total::<A>(&sum.block, &sum.levels, sum.counts[1], 0usize, 1usize)
}
