//! One tile's transform, a few channels at once: the tile's values are `L`-long vectors (one
//! per position or point, `L` channels each), taken through the transform axis by axis in two
//! small buffers that stay in L1. F(2, 3)'s maps run as straight-line additions, a whole line
//! of the axis per step; any other map runs its nonzero terms.

use super::transform::{F2Map, Matrix};
use crate::cpu::kernels::element::Element;

/// The most points a tile has: F(2, 3) on three axes (4^3), more than F(4, 3) on two (6^2).
pub const MAX_POINTS: usize = 64;

/// One tile's values, `L` channels at each of up to [`MAX_POINTS`] positions or points.
pub type TileLanes<T, const L: usize> = [[T; L]; MAX_POINTS];

/// The two buffers [`in_lanes`] works in.
pub fn buffers<T: Element, const L: usize>() -> [TileLanes<T, L>; 2] {
    [[[T::ZERO; L]; MAX_POINTS]; 2]
}

/// `steps` applied axis by axis to one tile's values shaped `dims` (row-major, as
/// [`points`](crate::cpu::kernels::points) lists them): the first step reads value `i` as `load(i)`,
/// the last hands result `i` to `store(i, _)`, and the steps between work in `buffers`.
#[inline(always)]
pub fn in_lanes<T: Element, const L: usize>(
    steps: &[(usize, Matrix<T>)],
    mut dims: [usize; 3],
    load: impl Fn(usize) -> [T; L],
    mut store: impl FnMut(usize, [T; L]),
    buffers: &mut [TileLanes<T, L>; 2],
) {
    let [even, odd] = buffers;
    let last = steps.len().saturating_sub(1);
    for (step, (axis, matrix)) in steps.iter().enumerate() {
        // Spelled out: an iterator's product here costs more than the step, every tile.
        let (outer, mid) = match axis {
            0 => (1, dims[1] * dims[2]),
            1 => (dims[0], dims[2]),
            _ => (dims[0] * dims[1], 1),
        };
        let (read, write) = if step % 2 == 0 {
            (&*odd, &mut *even)
        } else {
            (&*even, &mut *odd)
        };
        let from_buffer = |i: usize| read[i];
        let mut to_buffer = |i: usize, value: [T; L]| write[i] = value;
        match (step == 0, step == last) {
            (true, true) => apply(matrix, outer, mid, &load, &mut store),
            (true, false) => apply(matrix, outer, mid, &load, &mut to_buffer),
            (false, true) => apply(matrix, outer, mid, &from_buffer, &mut store),
            (false, false) => apply(matrix, outer, mid, &from_buffer, &mut to_buffer),
        }
        dims[*axis] = matrix.rows();
    }
}

/// One axis of a tile shaped `(outer, matrix.cols(), mid)`: value `(o, r, q)` of the result
/// is `Σ_c matrix[r][c] · load((o, c, q))`.
#[inline(always)]
fn apply<T: Element, const L: usize>(
    matrix: &Matrix<T>,
    outer: usize,
    mid: usize,
    load: &impl Fn(usize) -> [T; L],
    store: &mut impl FnMut(usize, [T; L]),
) {
    match matrix.f2_map() {
        Some(F2Map::Input) => lines(outer, mid, load, store, |[x0, x1, x2, x3]: [[T; L]; 4]| {
            [sub(x0, x2), add(x1, x2), sub(x2, x1), sub(x1, x3)]
        }),
        Some(F2Map::Output) => lines(outer, mid, load, store, |[x0, x1, x2, x3]: [[T; L]; 4]| {
            [add(add(x0, x1), x2), sub(sub(x1, x2), x3)]
        }),
        Some(F2Map::OutputAdjoint) => lines(outer, mid, load, store, |[x0, x1]: [[T; L]; 2]| {
            [x0, add(x0, x1), sub(x0, x1), sub([T::ZERO; L], x1)]
        }),
        None => {
            let (rows, cols) = (matrix.rows(), matrix.cols());
            for o in 0..outer {
                for r in 0..rows {
                    let terms = matrix.terms(r);
                    for q in 0..mid {
                        let mut sum = [T::ZERO; L];
                        for &(c, coefficient) in terms {
                            let input = load((o * cols + c) * mid + q);
                            for (sum, input) in sum.iter_mut().zip(input) {
                                *sum += coefficient * input;
                            }
                        }
                        store((o * rows + r) * mid + q, sum);
                    }
                }
            }
        }
    }
}

/// `line` applied to every line of `I` values along the axis of a tile shaped `(outer, I,
/// mid)`, giving lines of `O`.
#[inline(always)]
fn lines<T: Element, const L: usize, const I: usize, const O: usize>(
    outer: usize,
    mid: usize,
    load: &impl Fn(usize) -> [T; L],
    store: &mut impl FnMut(usize, [T; L]),
    line: impl Fn([[T; L]; I]) -> [[T; L]; O],
) {
    for o in 0..outer {
        for q in 0..mid {
            let x = core::array::from_fn(|c| load((o * I + c) * mid + q));
            for (r, y) in line(x).into_iter().enumerate() {
                store((o * O + r) * mid + q, y);
            }
        }
    }
}

/// The lane-wise sum.
#[inline(always)]
pub fn add<T: Element, const L: usize>(a: [T; L], b: [T; L]) -> [T; L] {
    core::array::from_fn(|l| a[l] + b[l])
}

/// The lane-wise difference.
#[inline(always)]
fn sub<T: Element, const L: usize>(a: [T; L], b: [T; L]) -> [T; L] {
    core::array::from_fn(|l| a[l] - b[l])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::kernels::winograd::transform::{F2, F4};

    /// The straight-line F(2, 3) maps and the general path agree with the tables, on a 3D tile
    /// (every axis transformed) and along the middle axis of a 2D one.
    #[test]
    fn straight_lines_match_the_tables() {
        let value = |i: usize, lane: usize| ((i * 7 + lane * 3) % 11) as f64 - 5.0;
        for (minimal, map) in [(&F2, 0), (&F2, 1), (&F2, 2), (&F4, 0), (&F4, 2)] {
            let (m, alpha) = (minimal.m, minimal.alpha);
            let (rows, cols, table, adjoint) = match map {
                0 => (alpha, alpha, minimal.input, false),
                1 => (m, alpha, minimal.output, false),
                _ => (m, alpha, minimal.output, true),
            };
            let matrix = if adjoint {
                Matrix::<f64>::transposed(rows, cols, table)
            } else {
                Matrix::<f64>::new(rows, cols, table)
            };
            let (from, to) = (matrix.cols(), matrix.rows());
            let tile = if from.max(to).pow(3) <= MAX_POINTS {
                [from; 3]
            } else {
                [1, from, from]
            };
            for dims in [tile, [1, from, 1]] {
                let axes: Vec<usize> = (0..3).filter(|&a| dims[a] == from).collect();
                let steps: Vec<(usize, Matrix<f64>)> = axes
                    .iter()
                    .map(|&a| {
                        let copy = if adjoint {
                            Matrix::transposed(rows, cols, table)
                        } else {
                            Matrix::new(rows, cols, table)
                        };
                        (a, copy)
                    })
                    .collect();
                let count: usize = dims.iter().product();
                let mut result = vec![[f64::NAN; 2]; MAX_POINTS];
                in_lanes::<f64, 2>(
                    &steps,
                    dims,
                    |i| [value(i, 0), value(i, 1)],
                    |i, v| result[i] = v,
                    &mut buffers(),
                );
                // The reference: the table applied along each transformed axis in f64.
                let mut shape = dims;
                let mut current: Vec<[f64; 2]> =
                    (0..count).map(|i| [value(i, 0), value(i, 1)]).collect();
                for &a in &axes {
                    let outer: usize = shape[..a].iter().product();
                    let mid: usize = shape[a + 1..].iter().product();
                    let mut next = vec![[0.0; 2]; outer * to * mid];
                    for o in 0..outer {
                        for r in 0..to {
                            for q in 0..mid {
                                for c in 0..from {
                                    let coefficient = if adjoint {
                                        table[c * to + r]
                                    } else {
                                        table[r * from + c]
                                    };
                                    for lane in 0..2 {
                                        next[(o * to + r) * mid + q][lane] +=
                                            coefficient * current[(o * from + c) * mid + q][lane];
                                    }
                                }
                            }
                        }
                    }
                    current = next;
                    shape[a] = to;
                }
                assert_eq!(
                    result[..current.len()],
                    current[..],
                    "map {map}, dims {dims:?}"
                );
            }
        }
    }
}
