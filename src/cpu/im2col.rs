//! The lowering between an image and its patch matrix: `col[(c, kd, kh, kw), (od, oh, ow)]`
//! holds the input element that kernel tap `(kd, kh, kw)` of channel `c` sees at output
//! position `(od, oh, ow)`, zero in the padding. [`col2im`] is its adjoint (scatter-add).
//!
//! Both work on a tile of output rows (a range of `(od, oh)`), so the patch matrix of a large
//! image is built and consumed a cache-sized piece at a time ([`row_tiles`]).

use core::ops::Range;

use crate::spec::{ConvGeometry, inside};

use super::element::Element;

/// Bytes of patch matrix per tile: well inside one core's L2, so the GEMM reads back what the
/// lowering just wrote from cache instead of memory.
const TILE_BYTES: usize = 1 << 20;

/// Columns below which a tile is not cut further: the GEMM repacks the weight once per tile,
/// which must stay small next to the tile's arithmetic.
const MIN_TILE_COLUMNS: usize = 256;

/// The output rows (flattened `(od, oh)`) cut into tiles of whole rows whose patch matrix
/// (`patch_len x rows * out_w` elements of `element_size` bytes) fits [`TILE_BYTES`].
pub fn row_tiles(
    geometry: &ConvGeometry,
    element_size: usize,
) -> impl Iterator<Item = Range<usize>> {
    let [out_d, out_h, out_w] = geometry.out_size;
    let rows = out_d * out_h;
    let column_bytes = (geometry.patch_len() * element_size).max(1);
    let columns = (TILE_BYTES / column_bytes).max(MIN_TILE_COLUMNS);
    let per_tile = columns.div_ceil(out_w.max(1)).clamp(1, rows.max(1));
    (0..rows)
        .step_by(per_tile)
        .map(move |start| start..(start + per_tile).min(rows))
}

/// The output positions (flattened `(od, oh, ow)`) of a tile of output rows: the columns of
/// its patch matrix.
pub fn tile_columns(geometry: &ConvGeometry, rows: &Range<usize>) -> Range<usize> {
    let out_w = geometry.out_size[2];
    rows.start * out_w..rows.end * out_w
}

/// Walks every (patch row, output row in `rows`) pair and hands `visit` the start of its
/// segment in the tile's patch matrix and the input row segment it maps to. Shared by both
/// directions so the index math exists once.
#[inline]
fn for_each_run(
    geometry: &ConvGeometry,
    rows: Range<usize>,
    mut visit: impl FnMut(usize, usize, Option<(usize, (usize, usize), isize)>),
) {
    let [in_d, in_h, in_w] = geometry.in_size;
    let [_, out_h, out_w] = geometry.out_size;
    let [k_d, k_h, k_w] = geometry.kernel;
    let [s_d, s_h, s_w] = geometry.stride;
    let [d_d, d_h, d_w] = geometry.dilation;
    let [p_d, p_h, p_w] = geometry.pad_begin.map(|p| p as isize);
    let in_volume = geometry.in_volume();
    let tile_len = tile_columns(geometry, &rows).len();
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
                        let col_start = row * tile_len + tile_row * out_w;
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

/// Fill `col` (`patch_len x rows.len() * out_w`) from one group's input channels, for the
/// output rows `rows`.
pub fn im2col<T: Element>(geometry: &ConvGeometry, x: &[T], rows: Range<usize>, col: &mut [T]) {
    let stride = geometry.stride[2];
    for_each_run(geometry, rows, |col_start, out_w, run| {
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

/// Add `col` (`patch_len x rows.len() * out_w`, the tile of output rows `rows`) back into one
/// group's input channels.
pub fn col2im<T: Element>(geometry: &ConvGeometry, col: &[T], rows: Range<usize>, x: &mut [T]) {
    let stride = geometry.stride[2];
    for_each_run(geometry, rows, |col_start, _, run| {
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
