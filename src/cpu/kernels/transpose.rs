//! Matrix transposes on the CPU: whole blocks of 8 x 8 f32 moved through AVX registers
//! ([`Transposer`]), so every load and store is a vector, where a strided element loop would
//! read or write one element per cache line.

use core::ops::Range;

use pulp::{Simd, WithSimd};

use super::element::Element;

/// Rows and columns of the blocks [`channels_last`] transposes in registers: one 256-bit
/// vector of f32.
const LANES: usize = 8;

/// `dst` (`cols x rows`, row-major) = the transpose of `src` (`rows x cols`, row-major).
pub fn transpose<T: Element>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    debug_assert_eq!(src.len(), rows * cols);
    if rows * cols > 0 {
        channels_last(src, cols, 0..cols, dst);
    }
}

/// Positions `row` of every channel plane in `src` (each `in_volume` long) written
/// channels-last into `dst`, position by position. A `pulp` op: blocks of [`LANES`] channels
/// by [`LANES`] positions are read a vector per channel and transposed, so every load and
/// store is a vector.
pub fn channels_last<T: Element>(src: &[T], in_volume: usize, row: Range<usize>, dst: &mut [T]) {
    pulp::Arch::new().dispatch(ChannelsLast {
        src,
        in_volume,
        row,
        dst,
    });
}

/// [`channels_last`] as a `pulp` op.
struct ChannelsLast<'s, T> {
    src: &'s [T],
    in_volume: usize,
    row: Range<usize>,
    dst: &'s mut [T],
}

impl<T: Element> WithSimd for ChannelsLast<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) {
        let Self {
            src,
            in_volume,
            row,
            dst,
        } = self;
        let channels = src.len() / in_volume;
        let (whole_channels, width) = (channels - channels % LANES, row.len());
        let whole_width = width - width % LANES;
        let at = |c: usize, w: usize| c * in_volume + row.start + w;
        let transposer = Transposer::new();
        for first in (0..whole_channels).step_by(LANES) {
            for w in (0..whole_width).step_by(LANES) {
                let block: [[T; LANES]; LANES] = core::array::from_fn(|i| {
                    src[at(first + i, w)..][..LANES]
                        .try_into()
                        .expect("LANES values")
                });
                for (j, column) in transposer.transpose(block).iter().enumerate() {
                    dst[(w + j) * channels + first..][..LANES].copy_from_slice(column);
                }
            }
            for w in whole_width..width {
                for c in first..first + LANES {
                    dst[w * channels + c] = src[at(c, w)];
                }
            }
        }
        for c in whole_channels..channels {
            for w in 0..width {
                dst[w * channels + c] = src[at(c, w)];
            }
        }
    }
}

/// Transposes blocks of `L` vectors of `L` lanes: lane `j` of vector `i` becomes lane `i` of
/// vector `j` (positions by channel to channels by position). With AVX on x86-64, blocks of 8
/// f32 take 24 shuffles in registers; anything else goes element by element, through memory.
#[derive(Clone, Copy)]
pub struct Transposer {
    #[cfg(target_arch = "x86_64")]
    avx: Option<pulp::x86::V3>,
}

impl Transposer {
    /// The fastest transposer this CPU runs.
    pub fn new() -> Self {
        Self {
            #[cfg(target_arch = "x86_64")]
            avx: pulp::x86::V3::try_new(),
        }
    }

    /// `x` transposed.
    #[inline(always)]
    pub fn transpose<T: Element, const L: usize>(self, x: [[T; L]; L]) -> [[T; L]; L] {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = self.avx
            && L == 8
            && core::any::TypeId::of::<T>() == core::any::TypeId::of::<f32>()
        {
            return bytemuck::cast(transpose_f32x8(simd, bytemuck::cast(x)));
        }
        core::array::from_fn(|i| core::array::from_fn(|j| x[j][i]))
    }
}

/// The 8 x 8 f32 transpose in AVX registers: interleave pairs of rows, then pairs of pairs,
/// then swap 128-bit halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose_f32x8(simd: pulp::x86::V3, rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    use core::arch::x86_64::__m256;
    let avx = simd.avx;
    let r: [__m256; 8] = rows.map(bytemuck::cast);
    let pairs: [__m256; 8] = core::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            avx._mm256_unpacklo_ps(a, b)
        } else {
            avx._mm256_unpackhi_ps(a, b)
        }
    });
    // Quads: (pairs 0, 2) low and high halves, (1, 3), then the same for 4..8.
    let quads: [__m256; 8] = core::array::from_fn(|i| {
        let base = i / 4 * 4 + i % 4 / 2;
        let (a, b) = (pairs[base], pairs[base + 2]);
        if i % 2 == 0 {
            avx._mm256_shuffle_ps::<0x44>(a, b)
        } else {
            avx._mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    let columns: [__m256; 8] = core::array::from_fn(|i| {
        let (a, b) = (quads[i % 4], quads[i % 4 + 4]);
        if i < 4 {
            avx._mm256_permute2f128_ps::<0x20>(a, b)
        } else {
            avx._mm256_permute2f128_ps::<0x31>(a, b)
        }
    });
    columns.map(bytemuck::cast)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_blocks() {
        let transposer = Transposer::new();
        let x: [[f32; 8]; 8] =
            core::array::from_fn(|i| core::array::from_fn(|j| (i * 8 + j) as f32));
        let y = transposer.transpose(x);
        let z: [[f64; 3]; 3] =
            core::array::from_fn(|i| core::array::from_fn(|j| (i * 3 + j) as f64));
        let w = transposer.transpose(z);
        for i in 0..8 {
            for j in 0..8 {
                assert_eq!(y[i][j], x[j][i], "f32 ({i}, {j})");
            }
        }
        for i in 0..3 {
            for j in 0..3 {
                assert_eq!(w[i][j], z[j][i], "f64 ({i}, {j})");
            }
        }
    }

    /// 17 x 35 and 35 x 17: whole 8 x 8 blocks, and leftover rows and columns on both axes,
    /// in f32 (the register blocks) and f64 (element moves).
    #[test]
    fn transposes_matrices() {
        fn check<T: Element>(rows: usize, cols: usize) {
            let source: Vec<T> = (0..rows * cols).map(|i| T::from_f64(i as f64)).collect();
            let mut target = vec![T::from_f64(-1.0); rows * cols];
            transpose(&source, rows, cols, &mut target);
            for row in 0..rows {
                for col in 0..cols {
                    assert_eq!(target[col * rows + row], source[row * cols + col]);
                }
            }
        }
        for (rows, cols) in [(17, 35), (35, 17), (1, 9), (8, 8)] {
            check::<f32>(rows, cols);
            check::<f64>(rows, cols);
        }
    }
}
