//! The pointwise path's packed product: `out = left · right + shift`, where the columns of
//! `right` and `out` are the positions of several images side by side. A strip of up to
//! [`strip_vectors`] vectors of columns is copied into a contiguous panel, [`DEPTH_BLOCK`]
//! reduction steps at a time, straight across image boundaries, so the tiles run full vectors
//! wherever an image's own width would leave a ragged edge (a 14 x 14 plane is 12 and a
//! quarter 16-float vectors). Register tiles of [`ROWS`] rows by the strip's vectors sum over
//! the panel, broadcasting `left` from where it lies; the strip's sums are held in scratch
//! and moved into the images' planes once its last block is done.

use core::ops::Range;

use pulp::{Simd, WithSimd};

/// Rows of `left` per register tile: with four vectors of columns that is 24 accumulators
/// beside the four panel vectors (AVX-512 has 32 registers), with two, 12 beside two
/// (AVX2's 16), as `gemm`'s own f32 microkernels.
pub const ROWS: usize = 6;

/// Reduction steps per panel: a 64-column AVX-512 strip of 128 steps is 32 KiB, within the
/// L1 data cache of current x86 cores, so each tile of the strip reads its panel from L1. `conv/flex/resnet50_1x1_reduce/*` decides it.
const DEPTH_BLOCK: usize = 128;

/// Vectors of columns per strip with `S`'s vectors: four where they are 16 lanes wide
/// (AVX-512), else two (see [`ROWS`]).
fn strip_vectors<S: Simd>() -> usize {
    if S::F32_LANES >= 16 { 4 } else { 2 }
}

/// Columns in a full strip with `S`'s vectors.
fn strip_width<S: Simd>() -> usize {
    strip_vectors::<S>() * S::F32_LANES
}

/// Scratch (f32 elements) that [`multiply`] needs for a `left` of `rows` rows: a panel and
/// the strip's sums.
pub fn scratch_len<S: Simd>(rows: usize) -> usize {
    (DEPTH_BLOCK + rows.next_multiple_of(ROWS)) * strip_width::<S>()
}

/// A row-major matrix read where it lies: element `(row, step)` at `data[row * depth + step]`.
#[derive(Clone, Copy, Debug)]
pub struct Left<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub depth: usize,
}

impl<'a> Left<'a> {
    /// Rows `rows` of this matrix.
    pub fn rows(self, rows: Range<usize>) -> Self {
        assert!(rows.end <= self.rows, "left rows out of range");
        Self {
            data: &self.data[rows.start * self.depth..],
            rows: rows.len(),
            ..self
        }
    }

    /// Index of the last element a tile of rows `first..first + rows` over steps
    /// `steps` reads.
    fn last_index(&self, first: usize, rows: usize, steps: &Range<usize>) -> usize {
        (first + rows - 1) * self.depth + steps.end - 1
    }
}

/// Where rows of image planes lie in a slice: position `position` of row `row` of image
/// `image` at `image * image_len + (first_row + row) * positions + position`.
#[derive(Clone, Copy, Debug)]
pub struct Planes {
    pub image_len: usize,
    pub first_row: usize,
    pub positions: usize,
}

impl Planes {
    fn at(&self, image: usize, row: usize, position: usize) -> usize {
        image * self.image_len + (self.first_row + row) * self.positions + position
    }
}

/// A run of columns inside one image: its image, its first position there, its offset in
/// the strip and its length.
#[derive(Clone, Copy)]
struct Segment {
    image: usize,
    position: usize,
    offset: usize,
    len: usize,
}

/// The runs of columns `columns` (numbered across images of `positions` each) cut at image
/// boundaries.
fn segments(columns: Range<usize>, positions: usize) -> impl Iterator<Item = Segment> {
    let first = columns.start;
    let mut at = first;
    core::iter::from_fn(move || {
        (at < columns.end).then(|| {
            let (image, position) = (at / positions, at % positions);
            let len = (positions - position).min(columns.end - at);
            let segment = Segment {
                image,
                position,
                offset: at - first,
                len,
            };
            at += len;
            segment
        })
    })
}

/// The operands of one product: `out`'s planes `out_planes` (its image 0 being
/// `images.start`) = `left` · the planes `right_planes` of `right`, plus `shift[row]` on
/// each row, over every position of `images`.
pub struct Product<'a, 'b> {
    pub left: Left<'a>,
    pub right: &'a [f32],
    pub right_planes: Planes,
    pub images: Range<usize>,
    pub out: &'b mut [f32],
    pub out_planes: Planes,
    pub shift: Option<&'a [f32]>,
}

/// Computes `product` strip by strip with `scratch` ([`scratch_len`] for its rows), in
/// `simd`'s instruction set (called outside it, as from a Rayon task, every vector operation
/// would be a function call).
pub fn multiply<S: Simd>(simd: S, product: Product<'_, '_>, scratch: &mut [f32]) {
    simd.vectorize(Multiply {
        simd,
        product,
        scratch,
    });
}

/// [`multiply`]'s body as a `pulp` op, so that it is compiled inside the instruction set.
struct Multiply<'a, 'b, 's, S> {
    simd: S,
    product: Product<'a, 'b>,
    scratch: &'s mut [f32],
}

impl<S: Simd> WithSimd for Multiply<'_, '_, '_, S> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _: S2) {
        strips(self.simd, self.product, self.scratch);
    }
}

/// [`multiply`], strip by strip.
#[inline(always)]
fn strips<S: Simd>(simd: S, mut product: Product<'_, '_>, scratch: &mut [f32]) {
    let positions = product.right_planes.positions;
    assert_eq!(
        positions, product.out_planes.positions,
        "planes of one size"
    );
    assert!(product.left.depth > 0, "an empty reduction has no panel");
    let (lanes, width) = (S::F32_LANES, strip_width::<S>());
    let columns = product.images.start * positions..product.images.end * positions;
    let strip_at = |first: usize| first..(first + width).min(columns.end);
    let mut first = columns.start;
    while first < columns.end {
        let strip = strip_at(first);
        first = strip.end;
        let next = (first < columns.end).then(|| strip_at(first));
        match strip.len().div_ceil(lanes) {
            1 => run_strip::<S, 1>(simd, &mut product, strip, next, scratch),
            2 => run_strip::<S, 2>(simd, &mut product, strip, next, scratch),
            3 => run_strip::<S, 3>(simd, &mut product, strip, next, scratch),
            _ => run_strip::<S, 4>(simd, &mut product, strip, next, scratch),
        }
    }
}

/// One strip of `V` vectors of columns: its panels packed and summed block by block, then
/// its sums (plus the shift) moved into `out`. While a panel's tiles run, the inputs of the
/// next panel (this strip's next block, or the first of the `next` strip) are fetched.
#[inline(always)]
fn run_strip<S: Simd, const V: usize>(
    simd: S,
    product: &mut Product<'_, '_>,
    columns: Range<usize>,
    next: Option<Range<usize>>,
    scratch: &mut [f32],
) {
    let (left, right, right_planes) = (product.left, product.right, product.right_planes);
    let positions = right_planes.positions;
    let width = V * S::F32_LANES;
    let rows = left.rows;
    let (panel, sums) = scratch.split_at_mut(DEPTH_BLOCK * width);
    let sums = &mut sums[..rows.next_multiple_of(ROWS) * width];
    for first_step in (0..left.depth).step_by(DEPTH_BLOCK) {
        let steps = first_step..(first_step + DEPTH_BLOCK).min(left.depth);
        let panel = &mut panel[..steps.len() * width];
        for segment in segments(columns.clone(), positions) {
            for (row, step) in panel.chunks_exact_mut(width).zip(steps.clone()) {
                let from = right_planes.at(segment.image, step, segment.position);
                copy_run::<S, V>(&right[from..][..segment.len], &mut row[segment.offset..]);
            }
        }
        for row in panel.chunks_exact_mut(width) {
            row[columns.len()..].fill(0.0);
        }
        let next_steps = steps.end..(steps.end + DEPTH_BLOCK).min(left.depth);
        if !next_steps.is_empty() {
            prefetch_panel(right, right_planes, columns.clone(), next_steps);
        } else if let Some(next) = next.clone() {
            prefetch_panel(right, right_planes, next, 0..DEPTH_BLOCK.min(left.depth));
        }
        let panel: &[S::f32s] = bytemuck::cast_slice(panel);
        let sums: &mut [S::f32s] = bytemuck::cast_slice_mut(&mut *sums);
        for (tile, first_row) in sums.chunks_exact_mut(ROWS * V).zip((0..rows).step_by(ROWS)) {
            let tile_rows = ROWS.min(rows - first_row);
            assert!(
                left.last_index(first_row, tile_rows, &steps) < left.data.len(),
                "pointwise tile reads past its left operand"
            );
            // SAFETY: just checked that every element the tile reads lies inside `left.data`.
            unsafe {
                run_tile::<S, V>(simd, left, first_row, tile_rows, steps.clone(), panel, tile)
            };
        }
    }
    let first_image = product.images.start;
    for (row, sums) in sums.chunks_exact(width).take(rows).enumerate() {
        for segment in segments(columns.clone(), positions) {
            let to = product
                .out_planes
                .at(segment.image - first_image, row, segment.position);
            let out = &mut product.out[to..][..segment.len];
            let sums = &sums[segment.offset..][..segment.len];
            match product.shift {
                Some(shift) => {
                    for (slot, &sum) in out.iter_mut().zip(sums) {
                        *slot = sum + shift[row];
                    }
                }
                None => copy_run::<S, V>(sums, out),
            }
        }
    }
}

/// Asks for the lines of `right` that the panel of `steps` over `columns` copies, into the
/// L2 cache: a panel's rows lie a plane apart, each in lines of its own, and its copy waited
/// on them a tenth of the AVX2 forward pass (`conv/flex/resnet50_1x1_reduce/forward`).
#[inline(always)]
fn prefetch_panel(right: &[f32], planes: Planes, columns: Range<usize>, steps: Range<usize>) {
    for segment in segments(columns, planes.positions) {
        for step in steps.clone() {
            let from = planes.at(segment.image, step, segment.position);
            prefetch(&right[from]);
            prefetch(&right[from + segment.len - 1]);
        }
    }
}

/// Asks for `value`'s cache line, into the L2 cache where the machine tells the levels apart.
#[inline(always)]
fn prefetch(value: &f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch of an address inside a live slice; it reads nothing the program sees.
    unsafe {
        use core::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T1>(core::ptr::from_ref(value).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// Copies `from` (at most a strip of `V` vectors) to the start of `to`: a whole strip as `V`
/// vector moves, not a call to `memcpy`, which took a tenth of the AVX2 forward pass, whose
/// strips are a quarter of AVX-512's width (`conv/flex/resnet50_1x1_reduce/forward`).
#[inline(always)]
fn copy_run<S: Simd, const V: usize>(from: &[f32], to: &mut [f32]) {
    let width = V * S::F32_LANES;
    if from.len() == width {
        let vectors: [S::f32s; V] = bytemuck::pod_read_unaligned(bytemuck::cast_slice(from));
        to[..width].copy_from_slice(bytemuck::cast_slice(&vectors));
    } else {
        for (to, &from) in to.iter_mut().zip(from) {
            *to = from;
        }
    }
}

/// Sums rows `first_row..first_row + rows` of `left` (at most [`ROWS`]) over `steps` times
/// the panel's rows, into `sums` (`ROWS * V` vectors, a row's `V` after another): stored on
/// the first block of steps, added after.
///
/// # Safety
/// Every element `(first_row + r, step)` of `left` for `r < rows` and `step` in `steps` lies
/// inside `left.data`.
#[inline(always)]
unsafe fn run_tile<S: Simd, const V: usize>(
    simd: S,
    left: Left<'_>,
    first_row: usize,
    rows: usize,
    steps: Range<usize>,
    panel: &[S::f32s],
    sums: &mut [S::f32s],
) {
    let base = left.data.as_ptr();
    let zero = simd.splat_f32s(0.0);
    let mut acc = [[zero; V]; ROWS];
    let vectors = panel.as_ptr().cast::<[S::f32s; V]>();
    assert!(panel.len() >= steps.len() * V, "a panel row per step");
    // Rows past `rows` repeat the last one, so every tile runs the same unrolled body; their
    // sums are never stored. Each row is read along itself, one pointer per row.
    // SAFETY: each row's first step is inside `left.data` (the caller's contract).
    let row_at: [*const f32; ROWS] = core::array::from_fn(|r| unsafe {
        base.add((first_row + r.min(rows - 1)) * left.depth + steps.start)
    });
    for step in 0..steps.len() {
        // SAFETY: `step` is inside `steps` and the panel holds a row per step.
        let (a, b) = unsafe { (row_at.map(|row| *row.add(step)), *vectors.add(step)) };
        fma_step(simd, &mut acc, a, b);
    }
    let first_block = steps.start == 0;
    for (acc, sums) in acc.iter().zip(sums.chunks_exact_mut(V)).take(rows) {
        for (&value, sum) in acc.iter().zip(sums) {
            *sum = if first_block {
                value
            } else {
                simd.add_f32s(*sum, value)
            };
        }
    }
}

/// One step of a tile: each row's accumulators plus its value of `left` times the step's
/// panel vectors.
#[inline(always)]
fn fma_step<S: Simd, const V: usize>(
    simd: S,
    acc: &mut [[S::f32s; V]; ROWS],
    left: [f32; ROWS],
    panel: [S::f32s; V],
) {
    for (acc, &a) in acc.iter_mut().zip(&left) {
        let a = simd.splat_f32s(a);
        for (slot, &b) in acc.iter_mut().zip(&panel) {
            *slot = simd.mul_add_e_f32s(a, b, *slot);
        }
    }
}
