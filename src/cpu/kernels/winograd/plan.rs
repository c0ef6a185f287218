//! The tiling of one Winograd convolution and the moves between its three domains: inputs to
//! transformed tiles, filters to transformed filters, products back to outputs. Every move
//! works on vectors holding one point of every tile in a block, so its inner loops run along
//! contiguous memory; the input and output moves are `pulp` ops, compiled for the CPU's widest
//! vectors.

use core::ops::Range;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::super::element::Element;
use super::super::points;
use super::transform::{F2, F4, Matrix, Minimal, Rows, along_axis};

// The input and output moves as `pulp` ops: more `impl Plan` methods.
mod moves;

/// Bytes of transformed inputs and products per block of tiles: inside one core's L2.
const BLOCK_BYTES: usize = 1 << 20;

/// Bytes of transformed inputs and output gradients per block in the weight gradient: its
/// GEMMs sum over the block's tiles, so a wider block is a longer inner dimension, fewer
/// passes over the products and fewer calls.
const WEIGHT_BLOCK_BYTES: usize = 4 << 20;

/// Tiles per block at the least, so each per-point GEMM is wide enough to pay its packing.
const MIN_BLOCK_TILES: usize = 64;

/// Tiles per 512-bit vector of f32.
const VECTOR_TILES: usize = 16;

/// Input channels whose filters are transformed together.
const CHANNEL_BLOCK: usize = 16;

/// Filters moved together in the filters' transpose: one cache line of f32.
const TRANSPOSE_BLOCK: usize = 16;

/// Filters per task in the filter gradient's final transform.
const FILTER_PIECE: usize = 1024;

/// Transformed filter elements from which their transform is spread over threads.
const PARALLEL_FILTERS: usize = 1 << 16;

/// One spatial axis: `tiles` of `m` outputs, read from `padded` inputs, with its algorithm
/// (none for a 1-tap axis, where a tile is one position and no transform is needed).
#[derive(Clone, Copy)]
struct Axis {
    minimal: Option<&'static Minimal>,
    m: usize,
    alpha: usize,
    tiles: usize,
    padded: usize,
}

/// A run of tiles along the last axis of one image: what the gather and the scatter loop over.
pub struct Run {
    image: usize,
    tile: [usize; 3],
    count: usize,
    column: usize,
}

/// Where one point of an output tile lands for a run of tiles: its output row (an offset in a
/// plane), its first column, and how many of the run's tiles put it inside the output (none
/// past an edge, when `row` and `first` are not to be used).
struct OutputPoint {
    row: usize,
    first: usize,
    count: usize,
}

/// The tiling and transforms of one convolution.
///
/// The padded input keeps each row in `m` phases (`x = m * i + phase` at `phase * phase_len +
/// i`), so the inputs one point of a run of tiles reads, `m` apart in the image, are
/// contiguous: gathering a block is a series of copies.
pub struct Plan<'a, T> {
    geometry: &'a ConvGeometry,
    axes: [Axis; 3],
    phase_len: usize,
    input: Vec<(usize, Matrix<T>)>,
    filter: Vec<(usize, Matrix<T>)>,
    output: Vec<(usize, Matrix<T>)>,
    /// Aᵀ's transpose: output gradients to the transformed domain.
    output_adjoint: Vec<(usize, Matrix<T>)>,
    /// G's transpose: products of the transformed domain back to filter gradients.
    filter_adjoint: Vec<(usize, Matrix<T>)>,
}

/// Which pass a block of tiles serves: one whose GEMMs produce tiles (forward, input gradient)
/// or the weight gradient, whose GEMMs sum over them.
#[derive(Clone, Copy, Debug)]
pub enum Pass {
    /// Forward pass or input gradient.
    Data,
    /// Weight gradient.
    Weight,
}

/// How the filters handed to [`Plan::filters`] are laid out.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// `[cout][cin_g][taps]`, as the convolution's weight.
    Conv,
    /// The weight of the convolution whose input gradient this plan computes:
    /// `[cin][cout_g][taps]` with the taps in reverse (the adjoint's in and out channels are
    /// that convolution's out and in channels).
    Adjoint,
}

/// The algorithm for an axis of `out_len` outputs when `active` axes are transformed, in an
/// element of `element_size` bytes. F(4, 3) multiplies 2.25x less than F(2, 3) but its
/// transforms scale by up to 10 and 8 per axis: in f32 a 128-channel 3x3 layer was off by 2.2x
/// the golden cases' tolerance (F(2, 3): 0.12x), so it serves only f64, on 1D and 2D tiles it
/// fills well.
fn minimal_for(out_len: usize, active: usize, element_size: usize) -> &'static Minimal {
    if element_size >= 8 && active <= 2 && out_len >= 6 {
        &F4
    } else {
        &F2
    }
}

impl<'a, T: Element> Plan<'a, T> {
    /// The plan of `geometry`, which `super::serves` accepts.
    pub fn new(geometry: &'a ConvGeometry) -> Self {
        let active = geometry.kernel.iter().filter(|&&k| k == 3).count();
        let axes: [Axis; 3] = core::array::from_fn(|a| {
            let out_len = geometry.out_size[a];
            let minimal =
                (geometry.kernel[a] == 3).then(|| minimal_for(out_len, active, size_of::<T>()));
            let (m, alpha) = minimal.map_or((1, 1), |f| (f.m, f.alpha));
            let tiles = out_len.div_ceil(m);
            Axis {
                minimal,
                m,
                alpha,
                tiles,
                padded: tiles * m + alpha - m,
            }
        });
        let matrices = |pick: fn(&Minimal) -> (usize, usize, &'static [f64]), adjoint: bool| {
            (0..3)
                .filter_map(|a: usize| {
                    let (rows, cols, table) = pick(axes[a].minimal?);
                    let matrix = if adjoint {
                        Matrix::transposed(rows, cols, table)
                    } else {
                        Matrix::new(rows, cols, table)
                    };
                    Some((a, matrix))
                })
                .collect()
        };
        Self {
            geometry,
            axes,
            phase_len: axes[2].padded.div_ceil(axes[2].m),
            input: matrices(|f| (f.alpha, f.alpha, f.input), false),
            filter: matrices(|f| (f.alpha, 3, f.filter), false),
            output: matrices(|f| (f.m, f.alpha, f.output), false),
            output_adjoint: matrices(|f| (f.m, f.alpha, f.output), true),
            filter_adjoint: matrices(|f| (f.alpha, 3, f.filter), true),
        }
    }

    /// Points of the transformed domain: one GEMM each.
    pub fn points(&self) -> usize {
        self.axes.iter().map(|a| a.alpha).product()
    }

    /// Tiles covering one image's output.
    pub fn tiles_per_image(&self) -> usize {
        self.axes.iter().map(|a| a.tiles).product()
    }

    /// One padded row, all its phases.
    fn row_len(&self) -> usize {
        self.phase_len * self.axes[2].m
    }

    fn padded_volume(&self) -> usize {
        self.axes[0].padded * self.axes[1].padded * self.row_len()
    }

    /// The blocks the `total` tiles of a chunk are cut into: about [`BLOCK_BYTES`] of
    /// transformed inputs and products each, at least [`MIN_BLOCK_TILES`], of nearly equal
    /// size, every boundary a multiple of [`VECTOR_TILES`] so the transforms' loops have no
    /// scalar remainder (but in the last block).
    pub fn blocks(&self, total: usize, pass: Pass) -> impl Iterator<Item = Range<usize>> + use<T> {
        let g = self.geometry;
        let per_tile = self.points() * (g.in_per_group() + g.out_per_group()) * size_of::<T>();
        let bytes = match pass {
            Pass::Data => BLOCK_BYTES,
            Pass::Weight => WEIGHT_BLOCK_BYTES,
        };
        let budget = (bytes / per_tile.max(1)).max(MIN_BLOCK_TILES);
        let vectors = total.div_ceil(VECTOR_TILES);
        let count = total.div_ceil(budget).clamp(1, vectors.max(1));
        let boundary = move |i: usize| (VECTOR_TILES * (vectors * i / count)).min(total);
        (0..count).map(move |i| boundary(i)..boundary(i + 1))
    }

    /// The largest of [`Plan::blocks`].
    pub fn largest_block(&self, total: usize, pass: Pass) -> usize {
        self.blocks(total, pass).map(|b| b.len()).max().unwrap_or(0)
    }

    /// The runs of tiles `tiles` (numbered image by image, then in row-major tile order) cut
    /// into, each within one row of tiles.
    fn runs(&self, tiles: Range<usize>) -> impl Iterator<Item = Run> + use<'a, T> {
        let [depth, rows, width] = self.axes.map(|a| a.tiles);
        let per_image = depth * rows * width;
        let mut next = tiles.start;
        core::iter::from_fn(move || {
            if next >= tiles.end {
                return None;
            }
            let (image, index) = (next / per_image, next % per_image);
            let first = index % width;
            let count = (width - first).min(tiles.end - next);
            let run = Run {
                image,
                tile: [index / width / rows, index / width % rows, first],
                count,
                column: next - tiles.start,
            };
            next += count;
            Some(run)
        })
    }

    /// For every point of an output tile (in [`points`] order), where it lands for `run`: the
    /// one home of the output-tile geometry, shared by the scatter of
    /// [`Plan::transform_outputs`] and the gather of its adjoint [`Plan::transform_out_grads`].
    fn output_points(&self, run: &Run) -> impl Iterator<Item = OutputPoint> + use<'a, T> {
        let ms = self.axes.map(|a| a.m);
        let [out_d, out_h, out_w] = self.geometry.out_size;
        let ([td, th, tw], run_count) = (run.tile, run.count);
        points(ms).map(move |[rd, rh, rw]| {
            let (od, oh, first) = (td * ms[0] + rd, th * ms[1] + rh, tw * ms[2] + rw);
            let inside = od < out_d && oh < out_h && first < out_w;
            OutputPoint {
                row: (od * out_h + oh) * out_w,
                first,
                count: if inside {
                    run_count.min((out_w - first).div_ceil(ms[2]))
                } else {
                    0
                },
            }
        })
    }

    /// Vectors of scratch the transforms need for `len`-long vectors: two blocks of the most
    /// points any stage holds.
    pub fn temp_len(&self, len: usize) -> usize {
        2 * self.points() * len
    }

    /// The transformed filters of every group, `[group][cin_g][point][cout_g]`: each point's
    /// matrix is the GEMM's left operand stored column-major (leading dimension `points *
    /// cout_g`), which it reads without packing. One task per [`CHANNEL_BLOCK`] input
    /// channels, which read each filter's taps for those channels as one contiguous run.
    pub fn filters(&self, weight: &[T], layout: Layout) -> Vec<T> {
        let g = self.geometry;
        let (cin_g, cout_g, points) = (g.in_per_group(), g.out_per_group(), self.points());
        let taps: usize = g.kernel.iter().product();
        let per_channel = points * cout_g;
        let mut filters = vec![T::ZERO; g.in_channels * per_channel];
        let transform_block = |(first, dst): (usize, &mut [T])| {
            let channels = dst.len() / per_channel;
            let (group, c0) = (first / cin_g, first % cin_g);
            let mut gathered = vec![T::ZERO; channels * taps * cout_g];
            match layout {
                // A transpose, `TRANSPOSE_BLOCK` filters at a time: the writes fill runs of a
                // cache line, the reads are that many contiguous streams.
                Layout::Conv => {
                    let run = channels * taps;
                    for first_k in (0..cout_g).step_by(TRANSPOSE_BLOCK) {
                        let ks = first_k..(first_k + TRANSPOSE_BLOCK).min(cout_g);
                        let rows: Vec<&[T]> = ks
                            .clone()
                            .map(|k| &weight[((group * cout_g + k) * cin_g + c0) * taps..][..run])
                            .collect();
                        for index in 0..run {
                            let dst = &mut gathered[index * cout_g..][ks.clone()];
                            for (slot, row) in dst.iter_mut().zip(&rows) {
                                *slot = row[index];
                            }
                        }
                    }
                }
                // Each input channel's filters are one contiguous run already.
                Layout::Adjoint => {
                    for (c, dst) in gathered.chunks_mut(taps * cout_g).enumerate() {
                        let src = &weight[(group * cin_g + c0 + c) * cout_g * taps..];
                        for (k, filter) in src[..cout_g * taps].chunks(taps).enumerate() {
                            for (tap, &value) in filter.iter().rev().enumerate() {
                                dst[tap * cout_g + k] = value;
                            }
                        }
                    }
                }
            }
            let mut temp = vec![T::ZERO; self.temp_len(cout_g)];
            let packed = Rows::packed(cout_g);
            for (gathered, dst) in gathered
                .chunks(taps * cout_g)
                .zip(dst.chunks_mut(per_channel))
            {
                transform(
                    &self.filter,
                    g.kernel,
                    cout_g,
                    gathered,
                    packed,
                    dst,
                    packed,
                    &mut temp,
                );
            }
        };
        // Blocks never straddle a group: `CHANNEL_BLOCK` divides `cin_g` or exceeds it.
        let block = if cin_g % CHANNEL_BLOCK == 0 {
            CHANNEL_BLOCK
        } else {
            1
        };
        let blocks = filters.chunks_mut(block * per_channel).enumerate();
        let blocks = blocks.map(|(index, dst)| (index * block, dst));
        if g.in_channels * per_channel >= PARALLEL_FILTERS {
            blocks.par_bridge().for_each(transform_block);
        } else {
            blocks.for_each(transform_block);
        }
        filters
    }

    /// The inputs of `images`, each channel zero-padded to `padded` per axis with the data at
    /// `pad_begin`, rows in phases: tiles then read whole windows without bounds checks.
    pub fn pad(&self, x: &[T], images: Range<usize>) -> Vec<T> {
        let g = self.geometry;
        let [pd, ph, pw] = self.axes.map(|a| a.padded);
        let (m, phase_len, row_len) = (self.axes[2].m, self.phase_len, self.row_len());
        let [in_d, in_h, in_w] = g.in_size;
        let [bd, bh, bw] = g.pad_begin;
        let (copy_d, copy_h, copy_w) = (in_d.min(pd - bd), in_h.min(ph - bh), in_w.min(pw - bw));
        let volume = self.padded_volume();
        let planes = images.len() * g.in_channels;
        let mut padded = vec![T::ZERO; planes * volume];
        let first = images.start * g.in_channels;
        for (plane, dst) in padded.chunks_mut(volume).enumerate() {
            let src = &x[(first + plane) * g.in_volume()..][..g.in_volume()];
            for d in 0..copy_d {
                for h in 0..copy_h {
                    let src = &src[(d * in_h + h) * in_w..][..copy_w];
                    let row = &mut dst[((d + bd) * ph + h + bh) * row_len..][..row_len];
                    for phase in 0..m {
                        // Image columns `x ≡ phase (mod m)` from `first_x` on.
                        let first_x = (phase + m - bw % m) % m;
                        let dst = &mut row[phase * phase_len + (first_x + bw) / m..];
                        for (slot, &value) in
                            dst.iter_mut().zip(src.iter().skip(first_x).step_by(m))
                        {
                            *slot = value;
                        }
                    }
                }
            }
        }
        padded
    }

    /// The filter gradient, shaped as the weight, from the summed products of the transformed
    /// domain `[group][point][cout_g][cin_g]` (the adjoint of [`Plan::filters`]). Parallel
    /// over runs of filters, each a contiguous piece of the result.
    pub fn filter_gradient(&self, products: &[T]) -> Vec<T> {
        let g = self.geometry;
        let (cin_g, cout_g, points) = (g.in_per_group(), g.out_per_group(), self.points());
        let taps: usize = g.kernel.iter().product();
        let alphas = self.axes.map(|a| a.alpha);
        let len = cout_g * cin_g;
        let mut weight_grad = vec![T::ZERO; g.groups * len * taps];
        // Pieces never straddle a group: `piece` divides `len` or is all of it.
        let piece = if len % FILTER_PIECE == 0 {
            FILTER_PIECE
        } else {
            len
        };
        let transform_piece = |(index, dst): (usize, &mut [T])| {
            let (group, first) = (index * piece / len, index * piece % len);
            let mut gathered = vec![T::ZERO; taps * piece];
            let mut temp = vec![T::ZERO; self.temp_len(piece)];
            let src = Rows {
                base: group * points * len + first,
                stride: len,
            };
            let packed = Rows::packed(piece);
            let adjoint = &self.filter_adjoint;
            transform(
                adjoint,
                alphas,
                piece,
                products,
                src,
                &mut gathered,
                packed,
                &mut temp,
            );
            for (filter, at) in dst.chunks_mut(taps).zip(0..) {
                for (slot, tap) in filter.iter_mut().zip(0..) {
                    *slot = gathered[tap * piece + at];
                }
            }
        };
        let parallel = weight_grad.len() >= PARALLEL_FILTERS;
        let pieces = weight_grad.chunks_mut(piece * taps).enumerate();
        if parallel {
            pieces.par_bridge().for_each(transform_piece);
        } else {
            pieces.for_each(transform_piece);
        }
        weight_grad
    }

    /// Scratch `transform_inputs` and `transform_outputs` need for a block of `len` tiles.
    pub fn scratch_len(&self, len: usize) -> usize {
        self.points() * len + self.temp_len(len)
    }
}

/// `steps` applied axis by axis to a block of `len`-long vectors shaped `dims`, read from `src`
/// and left in `dst`, through the two halves of `temp`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn transform<T: Element>(
    steps: &[(usize, Matrix<T>)],
    mut dims: [usize; 3],
    len: usize,
    src: &[T],
    src_rows: Rows,
    dst: &mut [T],
    dst_rows: Rows,
    temp: &mut [T],
) {
    let half = temp.len() / 2;
    let (first, second) = temp.split_at_mut(half);
    let mut buffers = [first, second];
    for (step, (axis, matrix)) in steps.iter().enumerate() {
        debug_assert_eq!(dims[*axis], matrix.cols());
        let outer: usize = dims[..*axis].iter().product();
        let mid: usize = dims[axis + 1..].iter().product();
        let last = step + 1 == steps.len();
        let [even, odd] = &mut buffers;
        let (read, write) = if step % 2 == 0 {
            (&**odd, &mut **even)
        } else {
            (&**even, &mut **odd)
        };
        let (input, input_rows) = if step == 0 {
            (src, src_rows)
        } else {
            (read, Rows::packed(len))
        };
        if last {
            along_axis(matrix, outer, mid, len, input, input_rows, dst, dst_rows);
        } else {
            along_axis(
                matrix,
                outer,
                mid,
                len,
                input,
                input_rows,
                write,
                Rows::packed(len),
            );
        }
        dims[*axis] = matrix.rows();
    }
}
