//! The tiling of one Winograd convolution and the moves between its three domains: inputs to
//! transformed tiles, filters to transformed filters, products back to outputs. The input and
//! output moves work tile by tile on a few channels at once, from a channels-last copy of the
//! input, so every load and store of a transformed value is a vector; they are `pulp` ops,
//! compiled for the CPU's widest vectors. The filter moves work on long vectors of filters.

use core::ops::Range;

use rayon::prelude::*;

use crate::spec::ConvGeometry;

use super::transform::{F2, F4, Matrix, Minimal, Rows, along_axis};
use crate::cpu::kernels::element::Element;

// The input and output moves as `pulp` ops: more `impl Plan` methods.
mod moves;

use crate::cpu::kernels::transpose::channels_last;

/// Bytes of transformed inputs and products per block of tiles: inside one core's L2.
const BLOCK_BYTES: usize = 1 << 20;

/// Bytes of transformed inputs and output gradients per block in the weight gradient: its
/// GEMMs sum over the block's tiles, so a wider block is a longer inner dimension, fewer
/// passes over the products and fewer calls.
const WEIGHT_BLOCK_BYTES: usize = 4 << 20;

/// Tiles per block at the least, so each per-point GEMM is wide enough to pay its packing.
const MIN_BLOCK_TILES: usize = 64;

/// Filter elements (output by input channels) whose taps are transformed together: each
/// task's vectors, long enough for the transform's loops, short enough for its scratch
/// (`2 * points` of them) to stay in L2.
const FILTER_BLOCK: usize = 1024;

/// Filters per task in the filter gradient's final transform.
const FILTER_PIECE: usize = 1024;

/// Elements added to the rows of gathered filter taps, so rows a multiple of 4 KiB long do not
/// map every tap's write to the same L1 set.
const ROW_SKEW: usize = 16;

/// Elements between consecutive points' blocks of transformed values: one cache line of f32.
const POINT_SKEW: usize = 16;

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

/// One tile: its image (within the chunk) and its first output position per axis, which is
/// also its window's first position in the padded input.
pub struct Tile {
    image: usize,
    first: [usize; 3],
}

/// The tiling and transforms of one convolution.
pub struct Plan<'a, T> {
    geometry: &'a ConvGeometry,
    axes: [Axis; 3],
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

    /// Positions of one padded channel.
    fn padded_volume(&self) -> usize {
        self.axes.iter().map(|a| a.padded).product()
    }

    /// The blocks the `total` tiles of a chunk are cut into: about [`BLOCK_BYTES`] of
    /// transformed inputs and products each, at least [`MIN_BLOCK_TILES`], of nearly equal
    /// size.
    pub fn blocks(&self, total: usize, pass: Pass) -> impl Iterator<Item = Range<usize>> + use<T> {
        let g = self.geometry;
        let per_tile = self.points() * (g.in_per_group() + g.out_per_group()) * size_of::<T>();
        let bytes = match pass {
            Pass::Data => BLOCK_BYTES,
            Pass::Weight => WEIGHT_BLOCK_BYTES,
        };
        let budget = (bytes / per_tile.max(1)).max(MIN_BLOCK_TILES);
        let count = total.div_ceil(budget).max(1);
        let boundary = move |i: usize| total * i / count;
        (0..count).map(move |i| boundary(i)..boundary(i + 1))
    }

    /// The largest of [`Plan::blocks`].
    pub fn largest_block(&self, total: usize, pass: Pass) -> usize {
        self.blocks(total, pass).map(|b| b.len()).max().unwrap_or(0)
    }

    /// Tile `index` of a chunk, the tiles numbered image by image, then in row-major order.
    fn tile(&self, index: usize) -> Tile {
        let [_, rows, width] = self.axes.map(|a| a.tiles);
        let per_image = self.tiles_per_image();
        let (image, within) = (index / per_image, index % per_image);
        let position = [within / width / rows, within / width % rows, within % width];
        Tile {
            image,
            first: core::array::from_fn(|a| position[a] * self.axes[a].m),
        }
    }

    /// Vectors of scratch the transforms need for `len`-long vectors: two blocks of the most
    /// points any stage holds.
    pub fn temp_len(&self, len: usize) -> usize {
        2 * self.points() * len
    }

    /// The transformed filters of every group, `[group][point][cin_g][cout_g]`: each point's
    /// matrix, read as `cout_g x cin_g` column-major, is the left operand of that point's GEMM
    /// (see [`super::run_forward`]). One task per [`FILTER_BLOCK`] elements of whole filters
    /// (every output channel's taps for some input channels of a group), transformed as one
    /// run of vectors.
    pub fn filters(&self, weight: &[T], layout: Layout) -> Vec<T> {
        let g = self.geometry;
        let (cin_g, cout_g, points) = (g.in_per_group(), g.out_per_group(), self.points());
        let taps: usize = g.kernel.iter().product();
        let matrix_len = cin_g * cout_g;
        let mut filters = vec![T::ZERO; g.groups * points * matrix_len];
        let per_block = (FILTER_BLOCK / cout_g).clamp(1, cin_g);
        let blocks_per_group = cin_g.div_ceil(per_block);
        // Each block's piece of every point's matrix: `per_block` input channels' columns.
        let mut pieces: Vec<Vec<&mut [T]>> = (0..g.groups * blocks_per_group)
            .map(|_| Vec::with_capacity(points))
            .collect();
        for (index, matrix) in filters.chunks_mut(matrix_len).enumerate() {
            let group = index / points;
            for (block, piece) in matrix.chunks_mut(per_block * cout_g).enumerate() {
                pieces[group * blocks_per_group + block].push(piece);
            }
        }
        let longest = per_block * cout_g;
        let scratch = || {
            let buffer = |len: usize| vec![T::ZERO; len];
            [
                taps * (longest + ROW_SKEW),
                points * longest,
                self.temp_len(longest),
            ]
            .map(buffer)
        };
        let transform_block =
            |scratch: &mut [Vec<T>; 3], (index, pieces): (usize, Vec<&mut [T]>)| {
                let (group, first_c) = (
                    index / blocks_per_group,
                    index % blocks_per_group * per_block,
                );
                let len = pieces[0].len();
                let [gathered, transformed, temp] = scratch;
                // Each filter's taps go to `taps` rows at once; the rows are a little longer than
                // `len` (often a multiple of 4 KiB, where such writes would collide in one L1 set).
                let rows = Rows {
                    base: 0,
                    stride: len + ROW_SKEW,
                };
                for at in 0..len {
                    let (c, k) = (first_c + at / cout_g, at % cout_g);
                    let (filter, flipped) = match layout {
                        Layout::Conv => (((group * cout_g + k) * cin_g + c) * taps, false),
                        Layout::Adjoint => (((group * cin_g + c) * cout_g + k) * taps, true),
                    };
                    for (tap, &value) in weight[filter..][..taps].iter().enumerate() {
                        let tap = if flipped { taps - 1 - tap } else { tap };
                        gathered[rows.at(tap) + at] = value;
                    }
                }
                let packed = Rows::packed(len);
                transform(
                    &self.filter,
                    g.kernel,
                    len,
                    gathered,
                    rows,
                    transformed,
                    packed,
                    temp,
                );
                for (piece, point) in pieces.into_iter().zip(transformed.chunks(len)) {
                    piece.copy_from_slice(point);
                }
            };
        if g.groups * points * matrix_len >= PARALLEL_FILTERS {
            let blocks = pieces.into_par_iter().enumerate();
            blocks.for_each_init(scratch, transform_block);
        } else {
            let mut scratch = scratch();
            let blocks = pieces.into_iter().enumerate();
            blocks.for_each(|block| transform_block(&mut scratch, block));
        }
        filters
    }

    /// The inputs of `images`, zero-padded to `padded` per axis with the data at `pad_begin`,
    /// channels last (`[image][d][h][w][channel]`): a tile's window is then the same few
    /// positions of every channel, each position a contiguous run of channels.
    pub fn pad(&self, x: &[T], images: Range<usize>) -> Vec<T> {
        let g = self.geometry;
        let [pd, ph, pw] = self.axes.map(|a| a.padded);
        let [in_d, in_h, in_w] = g.in_size;
        let [bd, bh, bw] = g.pad_begin;
        // Inputs past the last tile's window (a negative end padding) are never read.
        let (copy_d, copy_h, copy_w) = (in_d.min(pd - bd), in_h.min(ph - bh), in_w.min(pw - bw));
        let (channels, in_volume) = (g.in_channels, g.in_volume());
        let volume = self.padded_volume() * channels;
        let mut padded = vec![T::ZERO; images.len() * volume];
        for (image, dst) in images.zip(padded.chunks_mut(volume)) {
            let src = &x[image * channels * in_volume..][..channels * in_volume];
            for d in 0..copy_d {
                for h in 0..copy_h {
                    let row = (d * in_h + h) * in_w;
                    let dst = &mut dst[(((d + bd) * ph + h + bh) * pw + bw) * channels..];
                    channels_last(src, in_volume, row..row + copy_w, dst);
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
}

/// Where point `p` of a block's transformed values starts, `p * point_stride(len, channels)`:
/// `len` tiles of `channels` each, and [`POINT_SKEW`] more, so the moves' writes to every
/// point of a tile fall in different L1 sets even where `len * channels` is a multiple of
/// 4 KiB.
pub fn point_stride(len: usize, channels: usize) -> usize {
    len * channels + POINT_SKEW
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
