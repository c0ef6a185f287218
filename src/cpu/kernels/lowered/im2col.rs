//! The lowering between an image and its patch matrix: `col[(c, kd, kh, kw), (od, oh, ow)]`
//! holds the input element that kernel tap `(kd, kh, kw)` of channel `c` sees at output
//! position `(od, oh, ow)`, zero in the padding. [`col2im`] is its adjoint (scatter-add).
//!
//! Both work on a tile of output positions, so the patch matrix of a large image is built and
//! consumed a cache-sized piece at a time ([`Lowering::tiles`]).

use core::marker::PhantomData;
use core::ops::Range;
use std::sync::Arc;

use crate::spec::{ConvGeometry, inside};

use super::tap_masks::{TapMasks, readable};
use super::tap_table::TapTable;
use crate::cpu::kernels::element::Element;

/// Bytes of patch matrix per tile: well inside one core's L2, so the GEMM reads back what the
/// lowering just wrote from cache instead of memory.
const TILE_BYTES: usize = 1 << 20;

/// Columns below which a tile is not cut further: the GEMM repacks the weight once per tile,
/// which must stay small next to the tile's arithmetic.
const MIN_TILE_COLUMNS: usize = 256;

/// Whole images whose patch matrices sit side by side in one tile: one for an image with at
/// least [`MIN_TILE_COLUMNS`] output positions; for smaller ones (late ResNet stages, small
/// inputs), as many as reach that width, within [`TILE_BYTES`] and at most `limit`, so each
/// GEMM is wide enough to run near its peak instead of paying its packing per tiny image.
pub fn images_per_tile(geometry: &ConvGeometry, element_size: usize, limit: usize) -> usize {
    let positions = geometry.out_volume().max(1);
    if positions >= MIN_TILE_COLUMNS || is_pointwise(geometry) {
        return 1;
    }
    let image_bytes = (geometry.patch_len() * positions * element_size).max(1);
    MIN_TILE_COLUMNS
        .div_ceil(positions)
        .min(TILE_BYTES / image_bytes)
        .clamp(1, limit.max(1))
}

/// Walks every (patch row, output row in `rows`) pair and hands `visit` the start of its
/// segment in the tile's patch matrix and the input row segment it maps to. Shared by both
/// directions so the index math exists once.
#[inline]
fn for_each_run(
    geometry: &ConvGeometry,
    rows: Range<usize>,
    row_stride: usize,
    mut visit: impl FnMut(usize, usize, Option<(usize, (usize, usize), isize)>),
) {
    let [in_d, in_h, in_w] = geometry.in_size;
    let [_, out_h, out_w] = geometry.out_size;
    let [k_d, k_h, k_w] = geometry.kernel;
    let [s_d, s_h, s_w] = geometry.stride;
    let [d_d, d_h, d_w] = geometry.dilation;
    let [p_d, p_h, p_w] = geometry.pad_begin.map(|p| p as isize);
    let in_volume = geometry.in_volume();
    let (first_d, first_h) = (rows.start / out_h.max(1), rows.start % out_h.max(1));
    let mut row = 0;
    for channel in 0..geometry.in_per_group() {
        for kd in 0..k_d {
            for kh in 0..k_h {
                for kw in 0..k_w {
                    let offset_w = (kw * d_w) as isize - p_w;
                    let columns = inside(offset_w as i128, s_w, out_w, in_w);
                    let (w_lo, w_hi) = (columns.start, columns.end);
                    let (mut od, mut oh) = (first_d, first_h);
                    for tile_row in 0..rows.len() {
                        let id = (od * s_d + kd * d_d) as isize - p_d;
                        let ih = (oh * s_h + kh * d_h) as isize - p_h;
                        let col_start = row * row_stride + tile_row * out_w;
                        let inside = (0..in_d as isize).contains(&id)
                            && (0..in_h as isize).contains(&ih)
                            && w_lo < w_hi;
                        let run = inside.then(|| {
                            let x_row =
                                channel * in_volume + (id as usize * in_h + ih as usize) * in_w;
                            (x_row, (w_lo, w_hi), offset_w)
                        });
                        visit(col_start, out_w, run);
                        oh += 1;
                        if oh == out_h {
                            (od, oh) = (od + 1, 0);
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}

/// How one convolution's patch matrices are built and scattered back, prepared once per pass:
/// by tap masks for a small "same" volume ([`TapMasks`]), else by rows.
pub struct Lowering<'a, T> {
    geometry: &'a ConvGeometry,
    masks: Option<Arc<TapMasks>>,
    /// Images per tile of several images ([`Self::im2col_images`]).
    images: usize,
    /// With masks and several images per tile, the masks of a tile's volumes side by side: its
    /// input, staged channel by channel, then lowers in one long row per (channel, tap) instead
    /// of one per image, which at 4x4 is 16 elements long and costs more to set up than to copy.
    tile_masks: Option<Arc<TapMasks>>,
    /// Without them, with several images per tile, the table each image lowers by.
    table: Option<TapTable>,
    /// The element type: its size sets how many columns a tile holds.
    element: PhantomData<T>,
}

impl<'a, T: Element> Lowering<'a, T> {
    /// The lowering of `geometry`, for tiles of `images` whole images when more than one.
    pub fn new(geometry: &'a ConvGeometry, images: usize) -> Self {
        let masks = (!is_pointwise(geometry))
            .then(|| TapMasks::new(geometry))
            .flatten();
        let tile_masks = (images > 1 && masks.is_some())
            .then(|| TapMasks::side_by_side(geometry, images))
            .flatten();
        let table = (images > 1 && tile_masks.is_none() && !is_pointwise(geometry))
            .then(|| TapTable::new(geometry))
            .flatten();
        Self {
            geometry,
            masks,
            images,
            tile_masks,
            table,
            element: PhantomData,
        }
    }

    /// Whether tiles of several images lower by table.
    #[cfg(test)]
    pub fn by_table(&self) -> bool {
        self.table.is_some()
    }

    /// Elements of scratch [`Self::im2col_images`] and [`Self::col2im_images`] stage a tile in:
    /// one group's channels of each image of a tile, side by side (none when they lower image
    /// by image).
    pub fn staging_len(&self) -> usize {
        let g = self.geometry;
        match self.tile_masks {
            Some(_) => g.in_per_group() * self.images * g.in_volume(),
            None => 0,
        }
    }

    /// The patch matrix of a tile of whole `images` (at most the tile size this lowering was
    /// made for), side by side: `patch_len` rows `row_stride` apart, image `i`'s columns from
    /// `i * out_vol`, lowered from one group's channels, from `first_channel` on, of the batch
    /// `x`. `staging` holds [`Self::staging_len`] elements of scratch.
    pub fn im2col_images(
        &self,
        x: &[T],
        images: Range<usize>,
        first_channel: usize,
        col: &mut [T],
        row_stride: usize,
        staging: &mut [T],
    ) {
        let g = self.geometry;
        let (in_vol, out_vol, cin_g) = (g.in_volume(), g.out_volume(), g.in_per_group());
        let channels = first_channel..first_channel + cin_g;
        if let Some(masks) = &self.tile_masks {
            let staged = &mut staging[..self.staging_len()];
            let (count, stride) = (images.len(), self.images * in_vol);
            gather_images(x, images, g.in_channels, channels, in_vol, stride, staged);
            masks.im2col(staged, 0..count * out_vol, col, row_stride);
            return;
        }
        for (i, n) in images.enumerate() {
            let x_group = &x[(n * g.in_channels + channels.start) * in_vol..][..cin_g * in_vol];
            let col = &mut col[i * out_vol..];
            match &self.table {
                Some(table) => table.im2col(x_group, col, row_stride),
                None => self.im2col(x_group, 0..out_vol, col, row_stride),
            }
        }
    }

    /// Add a tile's patch matrix, laid out as [`Self::im2col_images`] writes it, into the
    /// gradients `x_grad` of the tile's images (whole images, one after the other), at one
    /// group's channels from `first_channel` on. `col` is scratch, as for [`Self::col2im`].
    pub fn col2im_images(
        &self,
        col: &mut [T],
        row_stride: usize,
        first_channel: usize,
        x_grad: &mut [T],
        staging: &mut [T],
    ) {
        let g = self.geometry;
        let (in_vol, out_vol, cin_g) = (g.in_volume(), g.out_volume(), g.in_per_group());
        let image_len = g.in_channels * in_vol;
        if let Some(masks) = &self.tile_masks {
            let staged = &mut staging[..self.staging_len()];
            let (count, stride) = (x_grad.len() / image_len.max(1), self.images * in_vol);
            staged.fill(T::ZERO);
            masks.col2im(col, row_stride, 0..count * out_vol, staged);
            for (i, x_grad_n) in x_grad.chunks_mut(image_len).enumerate() {
                for c in 0..cin_g {
                    let dst = &mut x_grad_n[(first_channel + c) * in_vol..][..in_vol];
                    let src = &staged[c * stride + i * in_vol..][..in_vol];
                    dst.iter_mut()
                        .zip(src)
                        .for_each(|(slot, value)| *slot += *value);
                }
            }
            return;
        }
        for (i, x_grad_n) in x_grad.chunks_mut(image_len).enumerate() {
            let x_grad_group = &mut x_grad_n[first_channel * in_vol..][..cin_g * in_vol];
            let col = &mut col[i * out_vol..];
            match &self.table {
                Some(table) => table.col2im(col, row_stride, x_grad_group),
                None => self.col2im(col, row_stride, 0..out_vol, x_grad_group),
            }
        }
    }

    /// The convolution lowered.
    pub fn geometry(&self) -> &'a ConvGeometry {
        self.geometry
    }

    /// The output positions (flattened `(od, oh, ow)`) cut into tiles whose patch matrix fits
    /// [`TILE_BYTES`] (at least [`MIN_TILE_COLUMNS`] wide): whole rows when lowering by rows,
    /// any run of positions with tap masks, so a long 1D signal is cut too.
    pub fn tiles(&self) -> impl Iterator<Item = Range<usize>> + use<T> {
        let g = self.geometry;
        let volume = g.out_volume();
        let column_bytes = (g.patch_len() * size_of::<T>()).max(1);
        let columns = (TILE_BYTES / column_bytes).max(MIN_TILE_COLUMNS);
        let width = if self.masks.is_some() {
            columns
        } else {
            let out_w = g.out_size[2].max(1);
            columns.div_ceil(out_w) * out_w
        };
        let width = width.clamp(1, volume.max(1));
        (0..volume)
            .step_by(width)
            .map(move |start| start..(start + width).min(volume))
    }

    /// Fill the patch matrix of one group's input channels at the output positions
    /// `positions` (a tile of [`Self::tiles`], or all of them): its `patch_len` rows of
    /// `positions.len()` columns, row `r` at `col[r * row_stride..]` (a stride wider than a
    /// row leaves room for other images' columns beside it).
    pub fn im2col(&self, x: &[T], positions: Range<usize>, col: &mut [T], row_stride: usize) {
        match &self.masks {
            Some(masks) => masks.im2col(x, positions, col, row_stride),
            None => im2col(self.geometry, x, self.rows(positions), col, row_stride),
        }
    }

    /// Add the patch matrix of the output positions `positions` (laid out as [`Self::im2col`]
    /// writes it) back into one group's input channels. `col` is scratch: its padding columns
    /// may be zeroed on the way.
    pub fn col2im(&self, col: &mut [T], row_stride: usize, positions: Range<usize>, x: &mut [T]) {
        match &self.masks {
            Some(masks) => masks.col2im(col, row_stride, positions, x),
            None => col2im(self.geometry, col, row_stride, self.rows(positions), x),
        }
    }

    /// The output rows (flattened `(od, oh)`) of positions that are whole rows.
    fn rows(&self, positions: Range<usize>) -> Range<usize> {
        let out_w = self.geometry.out_size[2].max(1);
        debug_assert!(positions.start.is_multiple_of(out_w) && positions.end.is_multiple_of(out_w));
        positions.start / out_w..positions.end / out_w
    }
}

/// The channels `channels` of each image of `images` in an `(N, C, volume)` tensor, placed side
/// by side: row `c` of `dst` (`width` apart) is channel `c` of every image in turn.
pub fn gather_images<T: Copy>(
    src: &[T],
    images: Range<usize>,
    channels_per_image: usize,
    channels: Range<usize>,
    volume: usize,
    width: usize,
    dst: &mut [T],
) {
    for (i, n) in images.enumerate() {
        for (row, c) in channels.clone().enumerate() {
            dst[row * width + i * volume..][..volume]
                .copy_from_slice(&src[(n * channels_per_image + c) * volume..][..volume]);
        }
    }
}

/// True when every patch row is, within one depth slice, the input plane shifted by a constant
/// (stride 1 along h and w, output rows as wide as the input's: a "same" convolution), so it can
/// be lowered with one long copy per block of rows instead of one short copy per row.
fn rows_are_shifts(geometry: &ConvGeometry) -> bool {
    geometry.stride[1..] == [1, 1] && geometry.out_size[2] == geometry.in_size[2]
}

/// A block of one patch row of a tile: `len` consecutive elements from `start` in the patch
/// matrix, zero, or equal to the input from `source` (relative to the group's input, negative
/// or past its end only at columns outside `columns`, which are padding).
enum Block {
    Zero,
    Shifted {
        source: isize,
        columns: Range<usize>,
    },
}

/// Walks every (patch row, depth slice of the tile's output rows) pair of a convolution whose
/// rows are shifts ([`rows_are_shifts`]) and hands `visit` each of its blocks: rows in the
/// padding are one zero block, the rest one shifted block.
#[inline]
fn for_each_block(
    geometry: &ConvGeometry,
    rows: Range<usize>,
    row_stride: usize,
    mut visit: impl FnMut(usize, usize, Block),
) {
    let [in_d, in_h, in_w] = geometry.in_size;
    let [_, out_h, out_w] = geometry.out_size;
    let [k_d, k_h, k_w] = geometry.kernel;
    let [d_d, d_h, d_w] = geometry.dilation;
    let [p_d, p_h, p_w] = geometry.pad_begin.map(|p| p as isize);
    let (in_volume, out_h) = (geometry.in_volume(), out_h.max(1));
    let mut row = 0;
    for channel in 0..geometry.in_per_group() {
        for kd in 0..k_d {
            for kh in 0..k_h {
                let shift_h = (kh * d_h) as isize - p_h;
                for kw in 0..k_w {
                    let shift_w = (kw * d_w) as isize - p_w;
                    let columns = inside(shift_w as i128, 1, out_w, in_w);
                    let mut tile_row = 0;
                    while tile_row < rows.len() {
                        let (od, oh) = (
                            (rows.start + tile_row) / out_h,
                            (rows.start + tile_row) % out_h,
                        );
                        let count = (out_h - oh).min(rows.len() - tile_row);
                        let start = row * row_stride + tile_row * out_w;
                        let id = (od * geometry.stride[0] + kd * d_d) as isize - p_d;
                        let live = if (0..in_d as isize).contains(&id) && !columns.is_empty() {
                            inside(oh as i128 + shift_h as i128, 1, count, in_h)
                        } else {
                            0..0
                        };
                        if live.start > 0 {
                            visit(start, live.start * out_w, Block::Zero);
                        }
                        if !live.is_empty() {
                            let ih = (oh + live.start) as isize + shift_h;
                            let source = channel as isize * in_volume as isize
                                + (id * in_h as isize + ih) * in_w as isize
                                + shift_w;
                            let block = Block::Shifted {
                                source,
                                columns: columns.clone(),
                            };
                            visit(start + live.start * out_w, live.len() * out_w, block);
                        }
                        let end = live.end.max(live.start);
                        if end < count {
                            visit(start + end * out_w, (count - end) * out_w, Block::Zero);
                        }
                        tile_row += count;
                    }
                    row += 1;
                }
            }
        }
    }
}

/// Set the columns of `block` (whole rows of `width`) outside `columns` to zero.
fn zero_padding_columns<T: Element>(block: &mut [T], width: usize, columns: &Range<usize>) {
    if columns.start == 0 && columns.end == width {
        return;
    }
    for row in block.chunks_exact_mut(width) {
        for value in &mut row[..columns.start] {
            *value = T::ZERO;
        }
        for value in &mut row[columns.end..] {
            *value = T::ZERO;
        }
    }
}

/// Fill the patch matrix of one group's input channels at the output rows `rows`: its
/// `patch_len` rows of `rows.len() * out_w` columns, row `r` at `col[r * row_stride..]` (a
/// stride wider than a row leaves room for other images' columns beside it).
fn im2col<T: Element>(
    geometry: &ConvGeometry,
    x: &[T],
    rows: Range<usize>,
    col: &mut [T],
    row_stride: usize,
) {
    if rows_are_shifts(geometry) {
        let out_w = geometry.out_size[2];
        for_each_block(geometry, rows, row_stride, |start, len, block| {
            let dst = &mut col[start..start + len];
            match block {
                Block::Zero => dst.fill(T::ZERO),
                Block::Shifted { source, columns } => {
                    let copied = readable(source, &(0..len), x.len());
                    let from = (source + copied.start as isize) as usize;
                    dst[copied.clone()].copy_from_slice(&x[from..from + copied.len()]);
                    zero_padding_columns(dst, out_w, &columns);
                }
            }
        });
        return;
    }
    let stride = geometry.stride[2];
    for_each_run(geometry, rows, row_stride, |col_start, out_w, run| {
        let dst = &mut col[col_start..col_start + out_w];
        match run {
            None => dst.fill(T::ZERO),
            Some((x_row, (lo, hi), offset)) => {
                dst[..lo].fill(T::ZERO);
                dst[hi..].fill(T::ZERO);
                let first = (lo as isize * stride as isize + offset) as usize;
                let src = &x[x_row + first..];
                match stride {
                    1 => dst[lo..hi].copy_from_slice(&src[..hi - lo]),
                    2 => {
                        let (pairs, last) = strided_pairs(src, hi - lo);
                        let (body, tail) = dst[lo..hi].split_at_mut(hi - lo - 1);
                        for (slot, pair) in body.iter_mut().zip(pairs.chunks_exact(2)) {
                            *slot = pair[0];
                        }
                        tail[0] = *last;
                    }
                    _ => {
                        for (slot, value) in dst[lo..hi].iter_mut().zip(src.iter().step_by(stride))
                        {
                            *slot = *value;
                        }
                    }
                }
            }
        }
    });
}

/// Add the patch matrix of the output rows `rows` (laid out as [`im2col`] writes it) back into
/// one group's input channels. `col` is scratch: its padding columns may be zeroed on the way.
fn col2im<T: Element>(
    geometry: &ConvGeometry,
    col: &mut [T],
    row_stride: usize,
    rows: Range<usize>,
    x: &mut [T],
) {
    if rows_are_shifts(geometry) {
        let out_w = geometry.out_size[2];
        for_each_block(geometry, rows, row_stride, |start, len, block| {
            if let Block::Shifted { source, columns } = block {
                // Padding columns land on a neighbouring row's elements: add zeros there.
                let src = &mut col[start..start + len];
                zero_padding_columns(src, out_w, &columns);
                let added = readable(source, &(0..len), x.len());
                let to = (source + added.start as isize) as usize;
                for (slot, value) in x[to..to + added.len()].iter_mut().zip(&src[added]) {
                    *slot += *value;
                }
            }
        });
        return;
    }
    let stride = geometry.stride[2];
    for_each_run(geometry, rows, row_stride, |col_start, _, run| {
        if let Some((x_row, (lo, hi), offset)) = run {
            let src = &col[col_start + lo..col_start + hi];
            let first = (lo as isize * stride as isize + offset) as usize;
            let dst = &mut x[x_row + first..];
            match stride {
                1 => {
                    for (slot, value) in dst.iter_mut().zip(src) {
                        *slot += *value;
                    }
                }
                2 => {
                    let (pairs, last) = strided_pairs_mut(dst, src.len());
                    let (body, tail) = src.split_at(src.len() - 1);
                    for (pair, value) in pairs.chunks_exact_mut(2).zip(body) {
                        pair[0] += *value;
                    }
                    *last += tail[0];
                }
                _ => {
                    for (slot, value) in dst.iter_mut().step_by(stride).zip(src) {
                        *slot += *value;
                    }
                }
            }
        }
    });
}

/// The `2 * (n - 1)` elements holding the first `n - 1` of `n` stride-2 taps, as pairs whose
/// first element is the tap, and the last tap: pairs vectorize where a stride-2 walk does not.
#[inline(always)]
fn strided_pairs<T>(values: &[T], n: usize) -> (&[T], &T) {
    let (pairs, rest) = values.split_at(2 * (n - 1));
    (pairs, &rest[0])
}

/// [`strided_pairs`] for writing.
#[inline(always)]
fn strided_pairs_mut<T>(values: &mut [T], n: usize) -> (&mut [T], &mut T) {
    let (pairs, rest) = values.split_at_mut(2 * (n - 1));
    (pairs, &mut rest[0])
}

/// True when the patch matrix is the input itself (1x1 kernel, stride 1, no padding), so the
/// lowering can be skipped.
pub fn is_pointwise(geometry: &ConvGeometry) -> bool {
    geometry.kernel == [1; 3]
        && geometry.stride == [1; 3]
        && geometry.pad_begin == [0; 3]
        && geometry.in_size == geometry.out_size
}
