//! The direct path's register tiles: a block of output channels (vector lanes) at a few points
//! of a list, summed over a second list, each pair of entries reading one input of the copy at
//! the sum of their offsets. The forward pass tiles output points and sums over input channels
//! and taps; the weight gradient tiles input channels and taps and sums over output points.

use pulp::{Simd, WithSimd};

/// Points per register tile of a two-vector block: 12 accumulators, the two block vectors and
/// a broadcast fill AVX2's 16 registers, as in `gemm`'s own 16 x 6 f32 microkernel.
const POINTS: usize = 6;

/// Points per register tile of a two-vector block with AVX-512's 32 registers: 14
/// accumulators, and whole tiles of every ResNet plane (7 x 2^k squared points), where six
/// left one or four points of each plane to a narrow tile (`resnet_3x3_7` forward, and the
/// example's 7x7 layers).
const WIDE_POINTS: usize = 7;

/// Points per register tile of a one-vector block: 8 accumulators, as many as two FMA units
/// of four cycles' latency keep busy, and the points' 8 offsets in general registers (12
/// spill them).
const SINGLE_POINTS: usize = 8;

/// Points per row tile of a one-vector block at most: 14 accumulators, the block's vector and
/// a broadcast fill AVX2's 16 registers; with no offsets held, none spill.
const ROW_POINTS: usize = 14;

/// Vectors per block of output channels (16 f32 channels with AVX2).
pub const BLOCK_VECTORS: usize = 2;

/// Whether `S`'s vectors are AVX-512's, with 32 registers to hold a tile (else 16).
pub fn wide_registers<S: Simd>() -> bool {
    size_of::<S::f32s>() >= 64
}

/// Output channels per block of [`BLOCK_VECTORS`] with `S`'s vectors.
pub fn lanes<S: Simd>() -> usize {
    block_lanes::<S, BLOCK_VECTORS>()
}

/// Output channels per block of `V` of `S`'s vectors.
pub fn block_lanes<S: Simd, const V: usize>() -> usize {
    V * size_of::<S::f32s>() / size_of::<f32>()
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

/// A block's channels at one point: `V` vectors.
pub type Block<S, const V: usize> = [<S as Simd>::f32s; V];

/// A block's channels at one point: [`BLOCK_VECTORS`] vectors.
pub type Lanes<S> = Block<S, BLOCK_VECTORS>;

/// What every tile of one block reads: the bordered copy, the summed list's offsets in it and,
/// per summed entry, the block's vector (weights, or output gradients).
pub struct TileAt<'a, S: Simd, const V: usize = BLOCK_VECTORS> {
    simd: S,
    copy: &'a [f32],
    summed: &'a [usize],
    vectors: &'a [Block<S, V>],
    tiled: &'a [usize],
    rows: Option<Rows>,
}

/// How a tiled list runs in rows: `width` points per row, each `step` after the last in the
/// copy (an output row at its stride), so that a tile of one row reads its points at fixed
/// displacements from one address.
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    /// Points per row.
    pub width: usize,
    /// Elements of the copy between two points of a row.
    pub step: usize,
}

impl<'a, S: Simd, const V: usize> TileAt<'a, S, V> {
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
        let vectors: &[Block<S, V>] = bytemuck::cast_slice(vectors);
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
            rows: None,
        }
    }

    /// The same tiles, over a tiled list of whole [`Rows`]: one-vector blocks then tile row by
    /// row (see [`TileAt::accumulate`]).
    pub fn in_rows(self, rows: Rows) -> Self {
        assert!(
            rows.width > 0 && self.tiled.len().is_multiple_of(rows.width),
            "a tiled list of whole rows"
        );
        Self {
            rows: Some(rows),
            ..self
        }
    }

    /// `visit(first, sums)` for every tile of the tiled list: the sums of its points
    /// `first..first + sums.len()`, each `start` plus, over the summed list, its vector times
    /// the input at the two offsets, in the summed list's order.
    #[inline(always)]
    pub fn for_each_tile(&self, start: Block<S, V>, mut visit: impl FnMut(usize, &[Block<S, V>])) {
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
    pub fn accumulate(&self, sums: &mut [Block<S, V>]) {
        assert_eq!(sums.len(), self.tiled.len(), "a sum per tiled point");
        if V > 1 && wide_registers::<S>() {
            return self.accumulate_in::<WIDE_POINTS>(sums);
        }
        if V > 1 {
            return self.accumulate_in::<POINTS>(sums);
        }
        match self.rows {
            Some(rows) if rows.step == 1 => self.accumulate_rows::<1>(rows.width, sums),
            Some(rows) if rows.step == 2 => self.accumulate_rows::<2>(rows.width, sums),
            _ => self.accumulate_in::<SINGLE_POINTS>(sums),
        }
    }

    /// [`TileAt::accumulate`] row by row, points `D` apart in each: a row in tiles of equal
    /// widths of at most [`ROW_POINTS`], each read at fixed displacements from the row tile's
    /// first point, so no register holds a point's offset.
    #[inline(always)]
    fn accumulate_rows<const D: usize>(&self, width: usize, sums: &mut [Block<S, V>]) {
        let tiles_per_row = width.div_ceil(ROW_POINTS);
        let (tile_width, wide_tiles) = (width / tiles_per_row, width % tiles_per_row);
        for (row, sums) in self
            .tiled
            .chunks_exact(width)
            .zip(sums.chunks_exact_mut(width))
        {
            let mut first = 0;
            // The first `wide_tiles` tiles take one point more, so widths differ by one.
            for tile in 0..tiles_per_row {
                let len = tile_width + usize::from(tile < wide_tiles);
                self.accumulate_row_tile::<D>(row[first], &mut sums[first..first + len]);
                first += len;
            }
        }
    }

    /// The sums of the row tile of `sums.len()` points from the copy's `base`, `D` apart.
    #[inline(always)]
    fn accumulate_row_tile<const D: usize>(&self, base: usize, sums: &mut [Block<S, V>]) {
        macro_rules! widths {
            ($($width:literal)*) => {
                match sums.len() {
                    $($width => {
                        let start = (&*sums).try_into().expect("a sum per point");
                        sums.copy_from_slice(&self.row_tile::<$width, D>(base, start));
                    })*
                    _ => unreachable!("row tiles are at most ROW_POINTS wide"),
                }
            };
        }
        widths!(1 2 3 4 5 6 7 8 9 10 11 12 13 14);
    }

    /// The `W` points `D` apart from the copy's `base`, from `start`, accumulated in
    /// registers.
    #[inline(always)]
    fn row_tile<const W: usize, const D: usize>(
        &self,
        base: usize,
        start: [Block<S, V>; W],
    ) -> [Block<S, V>; W] {
        let simd = self.simd;
        let mut acc = start;
        for (&offset, vectors) in self.summed.iter().zip(self.vectors) {
            // SAFETY: `base + (W - 1) * D` is a point of the tiled list (a row tile lies in
            // its row) and `offset` an entry of the summed list: each at most its sorted
            // list's last, whose sum `new` checked is inside `copy`.
            let at = unsafe { self.copy.as_ptr().add(offset + base) };
            for (point, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as above.
                let x = simd.splat_f32s(unsafe { *at.add(point * D) });
                for (slot, &v) in acc.iter_mut().zip(vectors) {
                    *slot = simd.mul_add_e_f32s(x, v, *slot);
                }
            }
        }
        acc
    }

    /// [`TileAt::accumulate`] in tiles of `P` points, then one of the rest.
    #[inline(always)]
    fn accumulate_in<const P: usize>(&self, sums: &mut [Block<S, V>]) {
        let tiled = self.tiled;
        let full = tiled.len() / P;
        for tile in 0..full {
            let first = tile * P;
            self.accumulate_tile::<P>(&tiled[first..], &mut sums[first..first + P]);
        }
        let first = full * P;
        let (rest, rest_sums) = (&tiled[first..], &mut sums[first..]);
        match rest.len() {
            1 => self.accumulate_tile::<1>(rest, rest_sums),
            2 => self.accumulate_tile::<2>(rest, rest_sums),
            3 => self.accumulate_tile::<3>(rest, rest_sums),
            4 => self.accumulate_tile::<4>(rest, rest_sums),
            5 => self.accumulate_tile::<5>(rest, rest_sums),
            6 => self.accumulate_tile::<6>(rest, rest_sums),
            7 => self.accumulate_tile::<7>(rest, rest_sums),
            _ => {}
        }
    }

    /// [`TileAt::accumulate`] for the tile of the `P` points at `tiled` (their `sums`).
    #[inline(always)]
    fn accumulate_tile<const P: usize>(&self, tiled: &[usize], sums: &mut [Block<S, V>]) {
        let start = (&*sums).try_into().expect("P sums");
        sums.copy_from_slice(&self.tile::<P>(tiled, start));
    }

    /// The `P` points at `tiled` from `start`, accumulated in registers.
    #[inline(always)]
    fn tile<const P: usize>(&self, tiled: &[usize], start: [Block<S, V>; P]) -> [Block<S, V>; P] {
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

/// `V` vectors of values as a block's vectors.
pub fn to_lanes<S: Simd, const V: usize>(values: &[f32]) -> Block<S, V> {
    bytemuck::cast_slice(values)[0]
}

/// A block's vectors as its `lanes` values.
pub fn from_lanes<S: Simd>(lanes: &Lanes<S>) -> &[f32] {
    bytemuck::cast_slice(core::slice::from_ref(lanes))
}
