//! Long sums with a rounding error that grows with the logarithm of their length: the pooling
//! windows, global pools and bias gradients that add up millions of values. A running sum's
//! error grows with its length instead: 16 interleaved running sums of a 4096 x 4096 plane of
//! 0.1 in f32 came to 0.10099.

use core::mem::MaybeUninit;

use super::element::Element;

/// Partial sums of [`lane_sum`]: one per vector lane, so the additions vectorize.
pub const LANES: usize = 16;

/// Values per leaf of [`lane_sum`]: 16 additions per lane, so a leaf rounds like a 16-term
/// sum, and the leaves' pairwise sum adds one rounding per level above it.
pub const LEAF: usize = LANES * 16;

/// The sum of `values`: leaves of [`LEAF`] values, each summed in [`LANES`] interleaved
/// partial sums (vectorized) added in lane order, the leaves' sums added pairwise
/// ([`PairwiseSum`]): the error grows with the logarithm of the length (a plane of 2^24
/// tenths sums within 1e-6), and the leaves keep the loop at memory speed. It has no recursion,
/// so it inlines whole: inside `element::in_widest_vectors` a plane of any length is summed
/// in the widest vectors (a recursive tree's leaves compiled in the baseline's SSE2).
#[inline(always)]
pub fn lane_sum<T: Element>(values: &[T]) -> T {
    lane_sum_map(values, |value| value)
}

/// [`lane_sum`] of `term(value)` for each of `values` (a batch norm's squared deviations).
#[inline(always)]
pub fn lane_sum_map<T: Element>(values: &[T], term: impl Fn(T) -> T + Copy) -> T {
    if values.len() <= LEAF {
        return leaf_sum(values, term);
    }
    let mut sum = PairwiseSum::new();
    for leaf in values.chunks(LEAF) {
        sum.add(leaf_sum(leaf, term));
    }
    sum.total()
}

/// One leaf of [`lane_sum_map`]: [`LANES`] interleaved partial sums, then the remainder.
#[inline(always)]
fn leaf_sum<T: Element>(values: &[T], term: impl Fn(T) -> T) -> T {
    let mut lanes = [T::ZERO; LANES];
    let blocks = values.chunks_exact(LANES);
    let rest = blocks.remainder();
    for block in blocks {
        for (lane, value) in lanes.iter_mut().zip(block) {
            *lane += term(*value);
        }
    }
    let total = lanes.into_iter().fold(T::ZERO, |sum, lane| sum + lane);
    rest.iter().fold(total, |sum, value| sum + term(*value))
}

/// Terms a [`PairwiseSum`] adds in a plain running sum before carrying it up its levels: a sum
/// of at most this many terms rounds exactly as a running sum does.
pub const BLOCK: usize = 16;

/// Levels of a [`PairwiseSum`]: level `k` holds the sum of `2^k` blocks, enough for any count
/// of terms a `usize` can hold.
const LEVELS: usize = usize::BITS as usize;

/// A sum of values that arrive one at a time (a pooling window's taps, a batch's plane sums)
/// with the accuracy of a pairwise sum: blocks of [`BLOCK`] terms carried up like a binary
/// counter, so each block meets blocks of its own size. `n` terms are `BLOCK + log2(n / BLOCK)`
/// roundings deep; each term costs an add and a count.
pub struct PairwiseSum<T> {
    block: T,
    in_block: usize,
    /// `levels[k]` is written while bit `k` of `blocks` is set, and read only then: a new sum
    /// writes none of them, so one per plane (a batch norm's) costs no clearing.
    levels: [MaybeUninit<T>; LEVELS],
    blocks: usize,
}

impl<T: Element> PairwiseSum<T> {
    /// An empty sum.
    #[inline(always)]
    pub fn new() -> Self {
        Self {
            block: T::ZERO,
            in_block: 0,
            levels: [const { MaybeUninit::uninit() }; LEVELS],
            blocks: 0,
        }
    }

    /// Level `level`'s sum, where bit `level` of `blocks` is set.
    #[inline(always)]
    fn level(&self, level: usize) -> T {
        debug_assert!(self.blocks >> level & 1 == 1);
        // SAFETY: `carry` wrote the level when it set its bit, and no level is read otherwise.
        unsafe { self.levels[level].assume_init() }
    }

    /// Add one term.
    #[inline(always)]
    pub fn add(&mut self, value: T) {
        self.block += value;
        self.in_block += 1;
        if self.in_block == BLOCK {
            self.carry();
        }
    }

    /// Move the full block up: while a level holds a sum of as many blocks, merge with it.
    fn carry(&mut self) {
        let mut sum = core::mem::replace(&mut self.block, T::ZERO);
        self.in_block = 0;
        let mut level = 0;
        while self.blocks >> level & 1 == 1 {
            sum = self.level(level) + sum;
            level += 1;
        }
        self.levels[level].write(sum);
        self.blocks += 1;
    }

    /// The sum of every term added, the smallest partial sums first.
    #[inline(always)]
    pub fn total(&self) -> T {
        // The set bits of `blocks`, lowest first: the levels in use, smallest first.
        let (mut sum, mut blocks) = (self.block, self.blocks);
        while blocks != 0 {
            sum += self.level(blocks.trailing_zeros() as usize);
            blocks &= blocks - 1;
        }
        sum
    }
}

impl<T: Element> Default for PairwiseSum<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The f64 sum of `values`' f32s, as an oracle.
    fn exact(values: &[f32]) -> f64 {
        values.iter().map(|&v| f64::from(v)).sum()
    }

    /// `Element::vector_sum` against an f64 sum for every length around the vector widths, on
    /// every instruction set this machine has (AVX2 forced on an AVX-512 one too).
    #[test]
    fn vector_sums_match_f64_on_every_instruction_set() {
        fn check<S: pulp::Simd>(simd: S) {
            let values: Vec<f32> = (0..70).map(|i| (i * 37 % 23) as f32 - 11.25).collect();
            for len in 0..values.len() {
                let run = &values[..len];
                let got = f64::from(simd.vectorize(|| f32::vector_sum(simd, run)));
                assert!((got - exact(run)).abs() < 1e-4, "len {len}: {got}");
                let run64: Vec<f64> = run.iter().map(|&v| f64::from(v)).collect();
                let got = simd.vectorize(|| f64::vector_sum(simd, &run64));
                assert_eq!(got, exact(run), "f64, len {len}");
            }
        }
        check(pulp::Scalar::new());
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(simd) = pulp::x86::V3::try_new() {
                check(simd);
            }
            if let Some(simd) = pulp::x86::V4::try_new() {
                check(simd);
            }
        }
    }

    #[test]
    fn a_plane_of_2_pow_24_tenths_sums_within_1e_6() {
        let values = vec![0.1f32; 1 << 24];
        let want = exact(&values);
        let lanes = f64::from(lane_sum(&values));
        assert!(
            (lanes - want).abs() / want < 1e-6,
            "lane_sum {lanes} vs {want}"
        );
        let mut pairwise = PairwiseSum::new();
        values.iter().for_each(|&v| pairwise.add(v));
        let pairwise = f64::from(pairwise.total());
        assert!(
            (pairwise - want).abs() / want < 1e-6,
            "PairwiseSum {pairwise} vs {want}"
        );
    }

    #[test]
    fn every_length_and_split_adds_every_term_once() {
        // Integers are exact in f64, so any lost or repeated term shows.
        for len in [0, 1, 15, 16, 17, 255, 256, 257, 511, 4097, 70_001] {
            let values: Vec<f64> = (0..len).map(|i| (i % 7) as f64 + 1.0).collect();
            let want: f64 = values.iter().sum();
            assert_eq!(lane_sum(&values), want, "lane_sum of {len}");
            let mut pairwise = PairwiseSum::new();
            values.iter().for_each(|&v| pairwise.add(v));
            assert_eq!(pairwise.total(), want, "PairwiseSum of {len}");
        }
    }

    #[test]
    fn mixed_magnitudes_stay_near_the_f64_sum() {
        // A deterministic spread of signs and magnitudes over a million terms.
        let values: Vec<f32> = (0..1_000_003u32)
            .map(|i| {
                let x = (i.wrapping_mul(2_654_435_761) >> 8) as f32 / (1 << 24) as f32;
                (x - 0.3) * if i % 3 == 0 { 100.0 } else { 1.0 }
            })
            .collect();
        let want = exact(&values);
        let scale: f64 = values.iter().map(|&v| f64::from(v).abs()).sum();
        for (name, got) in [
            ("lane_sum", lane_sum(&values)),
            ("PairwiseSum", {
                let mut sum = PairwiseSum::new();
                values.iter().for_each(|&v| sum.add(v));
                sum.total()
            }),
        ] {
            let error = (f64::from(got) - want).abs() / scale;
            assert!(
                error < 1e-6,
                "{name}: {got} vs {want}, error {error:e} of the magnitude"
            );
        }
    }
}
