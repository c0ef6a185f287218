//! The direct path's register tiles: a block of output channels (vector lanes) at a few points
//! of a list, summed over a second list, each pair of entries reading one input of the copy at
//! the sum of their offsets. The forward pass tiles output points and sums over input channels
//! and taps; the weight gradient tiles input channels and taps and sums over output points.

use pulp::{Simd, WithSimd};

/// Points per register tile: with a block of two vectors per point, 12 accumulators, the two
/// block vectors and a broadcast fill AVX2's 16 registers, as in `gemm`'s own 16 x 6 f32
/// microkernel.
const POINTS: usize = 6;

/// Vectors per block of output channels (16 f32 channels with AVX2).
const BLOCK_VECTORS: usize = 2;

/// Output channels per block with `S`'s vectors.
pub fn lanes<S: Simd>() -> usize {
    BLOCK_VECTORS * size_of::<S::f32s>() / size_of::<f32>()
}

/// Output channels per block on this machine: [`lanes`] with the widest vectors it runs.
pub fn machine_lanes() -> usize {
    /// [`lanes`] of the instruction set `pulp` picks.
    struct MachineLanes;
    impl WithSimd for MachineLanes {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            lanes::<S>()
        }
    }
    pulp::Arch::new().dispatch(MachineLanes)
}

/// A block's channels at one point: [`BLOCK_VECTORS`] vectors.
pub type Lanes<S> = [<S as Simd>::f32s; BLOCK_VECTORS];

/// What every tile of one block reads: the bordered copy, the summed list's offsets in it and,
/// per summed entry, the block's vector (weights, or output gradients).
pub struct TileAt<'a, S: Simd> {
    simd: S,
    copy: &'a [f32],
    summed: &'a [usize],
    vectors: &'a [Lanes<S>],
    tiled: &'a [usize],
}

impl<'a, S: Simd> TileAt<'a, S> {
    /// Tiles of `tiled` (offsets, sorted) summed over `summed` (offsets, sorted, each with its
    /// block `vectors`, `lanes::<S>()` values apiece), reading `copy`.
    pub fn new(
        simd: S,
        copy: &'a [f32],
        summed: &'a [usize],
        vectors: &'a [f32],
        tiled: &'a [usize],
    ) -> Self {
        // Every read is a summed offset plus a tiled one, each at most the last of its list.
        let (last_summed, last_tiled) = (summed.last(), tiled.last());
        assert!(
            summed.is_sorted()
                && tiled.is_sorted()
                && last_summed
                    .zip(last_tiled)
                    .is_none_or(|(a, b)| a + b < copy.len()),
            "direct tiles read past the copy"
        );
        let vectors: &[Lanes<S>] = bytemuck::cast_slice(vectors);
        assert_eq!(
            vectors.len(),
            summed.len(),
            "a block vector per summed entry"
        );
        Self {
            simd,
            copy,
            summed,
            vectors,
            tiled,
        }
    }

    /// `visit(first, sums)` for every tile of the tiled list: the sums of its points
    /// `first..first + sums.len()`, each `start` plus, over the summed list, its vector times
    /// the input at the two offsets, in the summed list's order.
    #[inline(always)]
    pub fn for_each_tile(&self, start: Lanes<S>, mut visit: impl FnMut(usize, &[Lanes<S>])) {
        let tiled = self.tiled;
        let full = tiled.len() / POINTS;
        // Index loops, not `step_by(..).for_each`, whose fold is compiled outside the
        // caller's target features.
        for tile in 0..full {
            let first = tile * POINTS;
            visit(
                first,
                &self.tile::<POINTS>(&tiled[first..], [start; POINTS]),
            );
        }
        let first = full * POINTS;
        let rest = &tiled[first..];
        match rest.len() {
            1 => visit(first, &self.tile::<1>(rest, [start; 1])),
            2 => visit(first, &self.tile::<2>(rest, [start; 2])),
            3 => visit(first, &self.tile::<3>(rest, [start; 3])),
            4 => visit(first, &self.tile::<4>(rest, [start; 4])),
            5 => visit(first, &self.tile::<5>(rest, [start; 5])),
            _ => {}
        }
    }

    /// Adds to each of `sums` (one per point of the tiled list) its point's sum over the
    /// summed list, tile by tile in registers, in the summed list's order.
    #[inline(always)]
    pub fn accumulate(&self, sums: &mut [Lanes<S>]) {
        let tiled = self.tiled;
        assert_eq!(sums.len(), tiled.len(), "a sum per tiled point");
        let full = tiled.len() / POINTS;
        for tile in 0..full {
            let first = tile * POINTS;
            self.accumulate_tile::<POINTS>(&tiled[first..], &mut sums[first..first + POINTS]);
        }
        let first = full * POINTS;
        let (rest, rest_sums) = (&tiled[first..], &mut sums[first..]);
        match rest.len() {
            1 => self.accumulate_tile::<1>(rest, rest_sums),
            2 => self.accumulate_tile::<2>(rest, rest_sums),
            3 => self.accumulate_tile::<3>(rest, rest_sums),
            4 => self.accumulate_tile::<4>(rest, rest_sums),
            5 => self.accumulate_tile::<5>(rest, rest_sums),
            _ => {}
        }
    }

    /// [`TileAt::accumulate`] for the tile of the `P` points at `tiled` (their `sums`).
    #[inline(always)]
    fn accumulate_tile<const P: usize>(&self, tiled: &[usize], sums: &mut [Lanes<S>]) {
        let start = (&*sums).try_into().expect("P sums");
        sums.copy_from_slice(&self.tile::<P>(tiled, start));
    }

    /// The `P` points at `tiled` from `start`, accumulated in registers.
    #[inline(always)]
    fn tile<const P: usize>(&self, tiled: &[usize], start: [Lanes<S>; P]) -> [Lanes<S>; P] {
        let simd = self.simd;
        let points: [usize; P] = tiled[..P].try_into().expect("P points");
        let mut acc = start;
        for (&offset, vectors) in self.summed.iter().zip(self.vectors) {
            // SAFETY: `offset` and `point` are at most the last entries of their sorted
            // lists, whose sum `new` checked is inside `copy`. One pointer per step, so each
            // point's read is a single addressed load.
            let at = unsafe { self.copy.as_ptr().add(offset) };
            for (acc, &point) in acc.iter_mut().zip(&points) {
                // SAFETY: as above.
                let x = simd.splat_f32s(unsafe { *at.add(point) });
                for (slot, &v) in acc.iter_mut().zip(vectors) {
                    *slot = simd.mul_add_e_f32s(x, v, *slot);
                }
            }
        }
        acc
    }
}

/// `lanes` values as a block's vectors.
pub fn to_lanes<S: Simd>(values: &[f32]) -> Lanes<S> {
    bytemuck::cast_slice(values)[0]
}

/// A block's vectors as its `lanes` values.
pub fn from_lanes<S: Simd>(lanes: &Lanes<S>) -> &[f32] {
    bytemuck::cast_slice(core::slice::from_ref(lanes))
}
