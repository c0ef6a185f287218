//! A bounds-checked view over the `gemm` crate's raw-pointer matrix product.

use gemm::Parallelism;

use super::element::Element;

/// A read-only strided matrix over a slice.
#[derive(Clone, Copy)]
pub struct MatRef<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

/// A writable strided matrix over a slice.
pub struct MatMut<'a, T> {
    data: &'a mut [T],
    rows: usize,
    cols: usize,
    row_stride: usize,
    col_stride: usize,
}

fn span(rows: usize, cols: usize, row_stride: usize, col_stride: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * row_stride + (cols - 1) * col_stride + 1
    }
}

impl<'a, T> MatRef<'a, T> {
    /// Row-major `rows x cols` matrix.
    pub fn rows(data: &'a [T], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// `rows x cols`, each row `row_stride` apart: a block of columns of a wider row-major
    /// matrix, `data` starting at its first element.
    pub fn columns(data: &'a [T], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self::strided(data, rows, cols, row_stride, 1)
    }

    /// The transpose of a row-major `cols x rows` matrix, without copying.
    pub fn transposed(data: &'a [T], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, 1, rows)
    }

    /// The transpose of this matrix, without copying.
    pub fn transpose(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    fn strided(
        data: &'a [T],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        assert!(
            span(rows, cols, row_stride, col_stride) <= data.len(),
            "matrix out of bounds"
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }
}

impl<'a, T> MatMut<'a, T> {
    /// Row-major `rows x cols` matrix.
    pub fn rows(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        Self::columns(data, rows, cols, cols)
    }

    /// `rows x cols`, each row `row_stride` apart: a block of columns of a wider row-major
    /// matrix, `data` starting at its first element.
    pub fn columns(data: &'a mut [T], rows: usize, cols: usize, row_stride: usize) -> Self {
        Self::strided(data, rows, cols, row_stride, 1)
    }

    /// `rows x cols` stored column by column (a row-major `cols x rows` matrix, transposed):
    /// `gemm` then runs its vectors down the columns, so it repacks the `lhs` of a product
    /// (`rows` long) rather than its `rhs`.
    pub fn column_major(data: &'a mut [T], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, 1, rows)
    }

    fn strided(
        data: &'a mut [T],
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        assert!(
            span(rows, cols, row_stride, col_stride) <= data.len(),
            "matrix out of bounds"
        );
        Self {
            data,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }
}

/// `dst = lhs * rhs`, or `dst += lhs * rhs` when `accumulate`.
pub fn matmul<T: Element>(
    dst: MatMut<'_, T>,
    lhs: MatRef<'_, T>,
    rhs: MatRef<'_, T>,
    accumulate: bool,
    parallelism: Parallelism,
) {
    assert_eq!(lhs.rows, dst.rows, "matmul: lhs rows vs dst rows");
    assert_eq!(rhs.cols, dst.cols, "matmul: rhs cols vs dst cols");
    assert_eq!(lhs.cols, rhs.rows, "matmul: inner dimensions");
    if dst.rows == 0 || dst.cols == 0 {
        return;
    }
    if lhs.cols == 0 {
        if !accumulate {
            for i in 0..dst.rows {
                for j in 0..dst.cols {
                    dst.data[i * dst.row_stride + j * dst.col_stride] = T::ZERO;
                }
            }
        }
        return;
    }
    // SAFETY: the constructors checked that every strided index of each matrix lies inside its
    // slice, `dst` is borrowed mutably so it cannot alias `lhs` or `rhs`, and `T` is f32 or f64,
    // both of which `gemm` supports.
    unsafe {
        gemm::gemm(
            dst.rows,
            dst.cols,
            lhs.cols,
            dst.data.as_mut_ptr(),
            dst.col_stride as isize,
            dst.row_stride as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.col_stride as isize,
            lhs.row_stride as isize,
            rhs.data.as_ptr(),
            rhs.col_stride as isize,
            rhs.row_stride as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_with_transposed_operand() {
        // lhs = [[1, 2], [3, 4]], rhs = transpose of [[5, 6], [7, 8]] = [[5, 7], [6, 8]].
        let lhs = [1.0f32, 2.0, 3.0, 4.0];
        let rhs = [5.0f32, 6.0, 7.0, 8.0];
        let mut dst = [1.0f32; 4];
        matmul(
            MatMut::rows(&mut dst, 2, 2),
            MatRef::rows(&lhs, 2, 2),
            MatRef::transposed(&rhs, 2, 2),
            true,
            Parallelism::None,
        );
        assert_eq!(dst, [1.0 + 17.0, 1.0 + 23.0, 1.0 + 39.0, 1.0 + 53.0]);
    }

    #[test]
    fn column_major_destination() {
        // dst = [[1, 2, 3], [4, 5, 6]] * I, held column by column; then an empty product.
        let lhs = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let identity = [1.0f64, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let mut dst = [0.0f64; 6];
        matmul(
            MatMut::column_major(&mut dst, 2, 3),
            MatRef::rows(&lhs, 2, 3),
            MatRef::rows(&identity, 3, 3),
            false,
            Parallelism::None,
        );
        assert_eq!(dst, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        matmul(
            MatMut::column_major(&mut dst[..4], 2, 2),
            MatRef::rows(&[], 2, 0),
            MatRef::rows(&[], 0, 2),
            false,
            Parallelism::None,
        );
        assert_eq!(dst, [0.0, 0.0, 0.0, 0.0, 3.0, 6.0]);
    }
}
