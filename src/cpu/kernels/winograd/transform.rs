//! The one-dimensional minimal filtering algorithms F(m, 3) (Lavin & Gray, "Fast Algorithms
//! for Convolutional Neural Networks", 2016) and their application along one axis of a block of
//! tile vectors. Applied along each axis in turn they give the 2D and 3D algorithms, so one
//! routine serves every rank.

use crate::cpu::kernels::element::Element;

/// F(m, 3): `m` outputs of a 3-tap correlation from `alpha = m + 2` inputs with `alpha`
/// multiplications, `y = output · ((filter · g) ⊙ (input · d))`.
pub struct Minimal {
    /// Outputs per tile.
    pub m: usize,
    /// Inputs per tile, and points of the transformed domain.
    pub alpha: usize,
    /// The input transform Bᵀ, `alpha x alpha`, row-major.
    pub input: &'static [f64],
    /// The filter transform G, `alpha x 3`.
    pub filter: &'static [f64],
    /// The output transform Aᵀ, `m x alpha`.
    pub output: &'static [f64],
}

/// F(2, 3), interpolating at 0, ±1 and ∞: coefficients 0, ±1 and ½, so it is as accurate as
/// the direct sum.
pub const F2: Minimal = Minimal {
    m: 2,
    alpha: 4,
    #[rustfmt::skip]
    input: &[
        1.0, 0.0, -1.0, 0.0,
        0.0, 1.0, 1.0, 0.0,
        0.0, -1.0, 1.0, 0.0,
        0.0, 1.0, 0.0, -1.0,
    ],
    #[rustfmt::skip]
    filter: &[
        1.0, 0.0, 0.0,
        0.5, 0.5, 0.5,
        0.5, -0.5, 0.5,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    output: &[
        1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, -1.0,
    ],
};

/// F(4, 3), interpolating at 0, ±1, ±2 and ∞: 2.25x fewer multiplications per output than
/// F(2, 3), for coefficients up to 8 and a few bits of extra rounding.
pub const F4: Minimal = Minimal {
    m: 4,
    alpha: 6,
    #[rustfmt::skip]
    input: &[
        4.0, 0.0, -5.0, 0.0, 1.0, 0.0,
        0.0, -4.0, -4.0, 1.0, 1.0, 0.0,
        0.0, 4.0, -4.0, -1.0, 1.0, 0.0,
        0.0, -2.0, -1.0, 2.0, 1.0, 0.0,
        0.0, 2.0, -1.0, -2.0, 1.0, 0.0,
        0.0, 4.0, 0.0, -5.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    filter: &[
        1.0 / 4.0, 0.0, 0.0,
        -1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0,
        -1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0,
        1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0,
        1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0,
        0.0, 0.0, 1.0,
    ],
    #[rustfmt::skip]
    output: &[
        1.0, 1.0, 1.0, 1.0, 1.0, 0.0,
        0.0, 1.0, -1.0, 2.0, -2.0, 0.0,
        0.0, 1.0, 1.0, 4.0, 4.0, 0.0,
        0.0, 1.0, -1.0, 8.0, -8.0, 1.0,
    ],
};

/// A matrix in the element type, kept as its nonzero entries: every transform skips zero
/// coefficients.
pub struct Matrix<T> {
    rows: usize,
    cols: usize,
    /// The nonzero entries as (column, coefficient), row after row; row `r`'s are
    /// `nonzero[row_starts[r]..row_starts[r + 1]]`.
    nonzero: Vec<(usize, T)>,
    row_starts: Vec<usize>,
    /// Which F(2, 3) map it is, if it is one: the tile moves then apply it as straight-line
    /// additions.
    f2_map: Option<F2Map>,
}

/// The maps of F(2, 3) the tile moves apply, each with its own straight-line code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F2Map {
    /// Bᵀ: inputs to the transformed domain.
    Input,
    /// Aᵀ: products back to outputs.
    Output,
    /// A: output gradients to the transformed domain.
    OutputAdjoint,
}

impl F2Map {
    /// The map `table` (or its transpose, for `adjoint`) is, if F(2, 3)'s.
    fn of(table: &[f64], adjoint: bool) -> Option<Self> {
        match adjoint {
            false if table == F2.input => Some(Self::Input),
            false if table == F2.output => Some(Self::Output),
            true if table == F2.output => Some(Self::OutputAdjoint),
            _ => None,
        }
    }
}

impl<T: Element> Matrix<T> {
    /// `rows x cols` from a row-major table of `f64`.
    pub fn new(rows: usize, cols: usize, table: &[f64]) -> Self {
        assert_eq!(table.len(), rows * cols, "transform table size");
        let values: Vec<T> = table.iter().map(|&v| T::from_f64(v)).collect();
        Self::from_values(rows, cols, &values, F2Map::of(table, false))
    }

    /// `rows x cols` from its row-major `values`.
    fn from_values(rows: usize, cols: usize, values: &[T], f2_map: Option<F2Map>) -> Self {
        let mut nonzero = Vec::new();
        let mut row_starts = vec![0];
        for row in values.chunks(cols) {
            let terms = row.iter().enumerate().filter(|&(_, &v)| v != T::ZERO);
            nonzero.extend(terms.map(|(c, &v)| (c, v)));
            row_starts.push(nonzero.len());
        }
        Self {
            rows,
            cols,
            nonzero,
            row_starts,
            f2_map,
        }
    }

    /// Which F(2, 3) map it is, if one.
    pub fn f2_map(&self) -> Option<F2Map> {
        self.f2_map
    }

    /// Row `r`'s nonzero entries, (column, coefficient).
    pub fn terms(&self, r: usize) -> &[(usize, T)] {
        &self.nonzero[self.row_starts[r]..self.row_starts[r + 1]]
    }

    /// The transpose of the `rows x cols` table: the adjoint of its map, which the weight
    /// gradient applies.
    pub fn transposed(rows: usize, cols: usize, table: &[f64]) -> Self {
        assert_eq!(table.len(), rows * cols, "transform table size");
        let values: Vec<T> = (0..cols)
            .flat_map(|c| (0..rows).map(move |r| T::from_f64(table[r * cols + c])))
            .collect();
        Self::from_values(cols, rows, &values, F2Map::of(table, true))
    }

    /// Its column count: the length of the axis it is applied along.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Its row count: the length of that axis afterwards.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// Equal-length vectors in a slice, vector `i` starting at `base + i * stride`.
#[derive(Clone, Copy, Debug)]
pub struct Rows {
    /// Where vector 0 starts.
    pub base: usize,
    /// The distance between consecutive vectors.
    pub stride: usize,
}

impl Rows {
    /// Vectors of `len` elements packed one after another.
    pub fn packed(len: usize) -> Self {
        Self {
            base: 0,
            stride: len,
        }
    }

    pub fn at(self, index: usize) -> usize {
        self.base + index * self.stride
    }
}

/// The most columns a transform matrix has (F(4, 3)'s `alpha`).
const MAX_COLS: usize = 6;

/// One axis of a block of `len`-long vectors indexed `(outer, axis, mid)`: `dst` vector
/// `(o, r, q)` becomes `Σ_c matrix[r][c] · src` vector `(o, c, q)`. Each vector is one point of
/// every tile in the block (or every weight of a filter set), so the inner loop runs along
/// contiguous memory, and each destination is written once from all its terms. Zero
/// coefficients are skipped, so a non-finite value is never multiplied by zero.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn along_axis<T: Element>(
    matrix: &Matrix<T>,
    outer: usize,
    mid: usize,
    len: usize,
    src: &[T],
    src_rows: Rows,
    dst: &mut [T],
    dst_rows: Rows,
) {
    let (rows, cols) = (matrix.rows, matrix.cols);
    assert!(cols <= MAX_COLS, "transform wider than {MAX_COLS}");
    for o in 0..outer {
        for r in 0..rows {
            let row_terms = matrix.terms(r);
            for q in 0..mid {
                let out = &mut dst[dst_rows.at((o * rows + r) * mid + q)..][..len];
                let mut terms = [(T::ZERO, &src[..0]); MAX_COLS];
                for (term, &(c, coefficient)) in terms.iter_mut().zip(row_terms) {
                    let input = &src[src_rows.at((o * cols + c) * mid + q)..][..len];
                    *term = (coefficient, input);
                }
                combine(out, &terms[..row_terms.len()]);
            }
        }
    }
}

/// `out = Σ coefficient · input` over `terms`, in one pass for up to three terms.
#[inline(always)]
fn combine<T: Element>(out: &mut [T], terms: &[(T, &[T])]) {
    match *terms {
        [] => out.fill(T::ZERO),
        [(a, x)] => {
            for (slot, &x) in out.iter_mut().zip(x) {
                *slot = a * x;
            }
        }
        [(a, x), (b, y)] => {
            for ((slot, &x), &y) in out.iter_mut().zip(x).zip(y) {
                *slot = a * x + b * y;
            }
        }
        [(a, x), (b, y), (c, z), ref rest @ ..] => {
            for (((slot, &x), &y), &z) in out.iter_mut().zip(x).zip(y).zip(z) {
                *slot = a * x + b * y + c * z;
            }
            for &(d, w) in rest {
                for (slot, &w) in out.iter_mut().zip(w) {
                    *slot += d * w;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `output · ((filter · g) ⊙ (input · d))` equals the 3-tap correlation of `d` with `g`.
    #[test]
    fn minimal_algorithms_compute_the_correlation() {
        for minimal in [&F2, &F4] {
            let (m, alpha) = (minimal.m, minimal.alpha);
            let d: Vec<f64> = (0..alpha).map(|i| (i as f64 * 0.7 - 1.3).sin()).collect();
            let g = [0.3, -1.1, 0.6];
            let apply = |table: &[f64], rows: usize, v: &[f64]| -> Vec<f64> {
                let cols = v.len();
                (0..rows)
                    .map(|r| (0..cols).map(|c| table[r * cols + c] * v[c]).sum())
                    .collect()
            };
            let product: Vec<f64> = apply(minimal.filter, alpha, &g)
                .iter()
                .zip(apply(minimal.input, alpha, &d))
                .map(|(a, b)| a * b)
                .collect();
            let y = apply(minimal.output, m, &product);
            for (i, value) in y.iter().enumerate() {
                let expected: f64 = (0..3).map(|j| g[j] * d[i + j]).sum();
                assert!((value - expected).abs() < 1e-12, "F({m}, 3) output {i}");
            }
        }
    }

    #[test]
    fn along_the_middle_axis_of_a_strided_block() {
        // A 2 x 2 x 3 block of 2-long vectors, rows 5 apart starting at 1; the matrix sums and
        // differences along the middle axis.
        let matrix = Matrix::<f64>::new(2, 2, &[1.0, 1.0, 1.0, -1.0]);
        let mut src = vec![0.0; 1 + 5 * 12];
        for i in 0..12 {
            src[1 + 5 * i] = i as f64;
            src[2 + 5 * i] = 100.0 + i as f64;
        }
        let mut dst = vec![f64::NAN; 24];
        let src_rows = Rows { base: 1, stride: 5 };
        along_axis(&matrix, 2, 3, 2, &src, src_rows, &mut dst, Rows::packed(2));
        for o in 0..2 {
            for q in 0..3 {
                let (a, b) = ((o * 2) * 3 + q, (o * 2 + 1) * 3 + q);
                let sum = &dst[((o * 2) * 3 + q) * 2..][..2];
                let difference = &dst[((o * 2 + 1) * 3 + q) * 2..][..2];
                assert_eq!(sum, [(a + b) as f64, 200.0 + (a + b) as f64]);
                assert_eq!(difference, [a as f64 - b as f64; 2]);
            }
        }
    }
}
