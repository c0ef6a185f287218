//! The lowering of a small "same" convolution (stride 1, output shaped as the input): the patch
//! row of each tap is the input volume shifted by a constant, with the positions where the tap
//! reads the padding masked to zero. One select per element over the whole volume, vectorized,
//! instead of one short copy per output row: what small late-stage planes (14x14 down to 4x4)
//! need, where the row copies cost more than the GEMM.

use core::ops::Range;
use std::cell::RefCell;
use std::sync::Arc;

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use crate::cpu::kernels::element::Element;

/// Mask elements above which a volume lowers by rows instead (its rows are long enough).
const MAX_MASK_LEN: usize = 1 << 16;

/// Masks a thread keeps, the last it used: a training loop lowers the same few shapes pass
/// after pass, and building a tiny pass's masks took a sixth of its time
/// (`conv/flex/dispatch_conv3x3/grad_input`). Four hold a pass's masks by volume and side by
/// side, forward and backward.
const KEPT: usize = 4;

thread_local! {
    /// The masks this thread used last, by geometry and images, the latest first.
    static RECENT: RefCell<Vec<(ConvGeometry, usize, Arc<TapMasks>)>> =
        const { RefCell::new(Vec::new()) };
}

/// Per tap `(kd, kh, kw)`: its offset in the input and, per output position, whether it reads
/// the input (else the padding).
pub struct TapMasks {
    shifts: Vec<isize>,
    masks: Vec<bool>,
    volume: usize,
}

impl TapMasks {
    /// The masks of `geometry`, if its output is shaped as its input at stride 1 and they are
    /// small.
    pub fn new(geometry: &ConvGeometry) -> Option<Arc<Self>> {
        Self::side_by_side(geometry, 1)
    }

    /// The masks of `images` volumes of `geometry` laid side by side, each tap's mask repeated
    /// per volume (a tap's shift never carries a read it keeps into the neighbouring volume),
    /// for input staged channel by channel, the images of each channel side by side.
    pub fn side_by_side(geometry: &ConvGeometry, images: usize) -> Option<Arc<Self>> {
        let kept = RECENT.with_borrow_mut(|recent| {
            let at = recent
                .iter()
                .position(|(g, n, _)| g == geometry && *n == images)?;
            let entry = recent.remove(at);
            let masks = entry.2.clone();
            recent.insert(0, entry);
            Some(masks)
        });
        if kept.is_some() {
            return kept;
        }
        let masks = Arc::new(Self::build(geometry, images)?);
        RECENT.with_borrow_mut(|recent| {
            recent.truncate(KEPT - 1);
            recent.insert(0, (*geometry, images, masks.clone()));
        });
        Some(masks)
    }

    /// [`TapMasks::side_by_side`], built.
    fn build(geometry: &ConvGeometry, images: usize) -> Option<Self> {
        let taps: usize = geometry.kernel.iter().product();
        let plane = geometry.out_volume();
        let volume = plane.checked_mul(images)?;
        if geometry.stride != [1; 3]
            || geometry.out_size != geometry.in_size
            || volume.saturating_mul(taps) > MAX_MASK_LEN
        {
            return None;
        }
        let size = geometry.in_size;
        let [k_d, k_h, k_w] = geometry.kernel;
        let mut shifts = Vec::with_capacity(taps);
        let mut masks = Vec::with_capacity(taps * volume);
        for tap in
            (0..k_d).flat_map(|d| (0..k_h).flat_map(move |h| (0..k_w).map(move |w| [d, h, w])))
        {
            let shift: [isize; 3] = core::array::from_fn(|axis| {
                (tap[axis] * geometry.dilation[axis]) as isize - geometry.pad_begin[axis] as isize
            });
            shifts.push((shift[0] * size[1] as isize + shift[1]) * size[2] as isize + shift[2]);
            // Per axis, the positions whose shifted read lies inside the input.
            let inside: [Range<usize>; 3] =
                core::array::from_fn(|axis| readable(shift[axis], &(0..size[axis]), size[axis]));
            let first = masks.len();
            // Row by row, each a run of padding, reads and padding.
            for d in 0..size[0] {
                for h in 0..size[1] {
                    let row = masks.len();
                    masks.resize(row + size[2], false);
                    if inside[0].contains(&d) && inside[1].contains(&h) {
                        masks[row..][inside[2].clone()].fill(true);
                    }
                }
            }
            for _ in 1..images {
                masks.extend_from_within(first..first + plane);
            }
        }
        Some(Self {
            shifts,
            masks,
            volume,
        })
    }

    /// Each tap's shift and mask, in weight order `(kd, kh, kw)`.
    pub fn taps(&self) -> impl Iterator<Item = (isize, &[bool])> {
        self.shifts
            .iter()
            .copied()
            .zip(self.masks.chunks_exact(self.volume.max(1)))
    }

    /// For each patch row `(channel, tap)`: its number, the channel's first input element plus
    /// the tap's shift, and the tap's mask.
    fn rows(&self, channels: usize) -> impl Iterator<Item = (usize, isize, &[bool])> {
        let (volume, taps) = (self.volume, self.shifts.len());
        (0..channels).flat_map(move |channel| {
            self.taps().enumerate().map(move |(tap, (shift, mask))| {
                let row = channel * taps + tap;
                (row, (channel * volume) as isize + shift, mask)
            })
        })
    }

    /// [`super::im2col::Lowering::im2col`] for the output positions `positions`.
    pub fn im2col<T: Element>(
        &self,
        x: &[T],
        positions: Range<usize>,
        col: &mut [T],
        row_stride: usize,
    ) {
        pulp::Arch::new().dispatch(Lower {
            masks: self,
            x,
            positions,
            col,
            row_stride,
        });
    }

    /// [`super::im2col::Lowering::col2im`] for the output positions `positions`.
    pub fn col2im<T: Element>(
        &self,
        col: &[T],
        row_stride: usize,
        positions: Range<usize>,
        x: &mut [T],
    ) {
        pulp::Arch::new().dispatch(Scatter {
            masks: self,
            col,
            row_stride,
            positions,
            x,
        });
    }
}

/// [`TapMasks::im2col`] as a `pulp` op, so the masked copies use the CPU's widest vectors.
struct Lower<'a, T> {
    masks: &'a TapMasks,
    x: &'a [T],
    positions: Range<usize>,
    col: &'a mut [T],
    row_stride: usize,
}

impl<T: Element> WithSimd for Lower<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            masks,
            x,
            positions,
            col,
            row_stride,
        } = self;
        let channels = x.len() / masks.volume.max(1);
        for (row, shift, mask) in masks.rows(channels) {
            let dst = &mut col[row * row_stride..][..positions.len()];
            let live = readable(shift, &positions, x.len());
            dst[..live.start - positions.start].fill(T::ZERO);
            dst[live.end - positions.start..].fill(T::ZERO);
            if live.is_empty() {
                continue;
            }
            let src = &x[(live.start as isize + shift) as usize..][..live.len()];
            let dst = &mut dst[live.start - positions.start..live.end - positions.start];
            for ((slot, &value), &keep) in dst.iter_mut().zip(src).zip(&mask[live]) {
                *slot = if keep { value } else { T::ZERO };
            }
        }
    }
}

/// [`TapMasks::col2im`] as a `pulp` op.
struct Scatter<'a, T> {
    masks: &'a TapMasks,
    col: &'a [T],
    row_stride: usize,
    positions: Range<usize>,
    x: &'a mut [T],
}

impl<T: Element> WithSimd for Scatter<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            masks,
            col,
            row_stride,
            positions,
            x,
        } = self;
        let channels = x.len() / masks.volume.max(1);
        for (row, shift, mask) in masks.rows(channels) {
            let live = readable(shift, &positions, x.len());
            if live.is_empty() {
                continue;
            }
            let src = &col[row * row_stride + live.start - positions.start..][..live.len()];
            let dst = &mut x[(live.start as isize + shift) as usize..][..live.len()];
            for ((slot, &value), &keep) in dst.iter_mut().zip(src).zip(&mask[live]) {
                *slot += if keep { value } else { T::ZERO };
            }
        }
    }
}

/// The positions `p` of `positions` whose element `p + shift` lies inside `0..len` (the others
/// are masked: they read the padding). When empty, `start + shift` may lie outside `0..len`:
/// callers skip an empty range rather than slice at it.
pub fn readable(shift: isize, positions: &Range<usize>, len: usize) -> Range<usize> {
    let clamp = |p: isize| p.clamp(positions.start as isize, positions.end as isize) as usize;
    let start = clamp(-shift);
    start..clamp(len as isize - shift).max(start)
}

#[cfg(test)]
mod tests {
    use burn::tensor::ops::ConvOptions;

    use super::*;

    /// "Same" geometries: 1D to 3D, dilated, and an even kernel padded more on one side.
    fn geometries() -> Vec<ConvGeometry> {
        let same = |x: [usize; 5], k: [usize; 3], pad: [usize; 3], dilation: [usize; 3]| {
            let options = ConvOptions::new([1; 3], pad, dilation, 1);
            ConvGeometry::conv(&x, &[2, x[1], k[0], k[1], k[2]], &options)
        };
        let mut even = same([1, 2, 1, 5, 6], [1, 4, 4], [0, 2, 2], [1; 3]);
        even.pad_begin = [0, 1, 2];
        even.out_size = even.in_size;
        vec![
            same([1, 2, 1, 1, 9], [1, 1, 5], [0, 0, 2], [1; 3]),
            same([1, 2, 1, 6, 7], [1, 3, 3], [0, 2, 2], [1, 2, 2]),
            same([1, 2, 4, 3, 5], [3, 3, 3], [1; 3], [1; 3]),
            even,
        ]
    }

    /// Each tap's mask against the definition: position `p` reads where `p + shift` lies
    /// inside the input on every axis, repeated per image.
    #[test]
    fn masks_mark_the_reads_inside_the_input() {
        for g in geometries() {
            assert_eq!(g.out_size, g.in_size, "{g:?} is a same convolution");
            let masks = TapMasks::side_by_side(&g, 2).expect("small same volume");
            let [k_d, k_h, k_w] = g.kernel;
            let taps =
                (0..k_d).flat_map(|d| (0..k_h).flat_map(move |h| (0..k_w).map(move |w| [d, h, w])));
            for (tap, (_, mask)) in taps.zip(masks.taps()) {
                let mut at = 0;
                for _image in 0..2 {
                    for d in 0..g.in_size[0] {
                        for h in 0..g.in_size[1] {
                            for w in 0..g.in_size[2] {
                                let reads = [d, h, w].iter().enumerate().all(|(axis, &p)| {
                                    let read = (p + tap[axis] * g.dilation[axis]) as isize
                                        - g.pad_begin[axis] as isize;
                                    (0..g.in_size[axis] as isize).contains(&read)
                                });
                                assert_eq!(mask[at], reads, "{g:?} tap {tap:?} at {at}");
                                at += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    /// A thread's recent masks are handed out again, by geometry and images, and built afresh
    /// (the same masks) once [`KEPT`] others have been used since.
    #[test]
    fn recent_masks_are_kept() {
        let geometries = geometries();
        let first = TapMasks::new(&geometries[0]).expect("masks");
        let side = TapMasks::side_by_side(&geometries[0], 3).expect("masks");
        assert!(!Arc::ptr_eq(&first, &side), "images are part of the key");
        assert!(Arc::ptr_eq(
            &first,
            &TapMasks::new(&geometries[0]).expect("masks")
        ));
        for g in &geometries[1..] {
            TapMasks::new(g).expect("masks");
        }
        TapMasks::side_by_side(&geometries[1], 2).expect("masks");
        let again = TapMasks::new(&geometries[0]).expect("masks");
        assert!(!Arc::ptr_eq(&first, &again), "pushed out by {KEPT} others");
        assert_eq!((&first.shifts, &first.masks), (&again.shifts, &again.masks));
    }
}
