//! A pooling case of the catalogue and its output shape, which the pool bench and the report
//! (the bytes each pass moves) both need.

use serde::Deserialize;

/// A pooling layer: `op` is `max_pool`, `avg_pool`, `adaptive_avg_pool` or `lp_pool` (which
/// has no padding). The pool bench also reads each case's LP norm and operand layout.
#[derive(Debug, Clone, Deserialize)]
pub struct PoolCase {
    pub name: String,
    pub op: String,
    pub x: Vec<usize>,
    #[serde(default)]
    pub kernel: Vec<usize>,
    #[serde(default)]
    pub stride: Vec<usize>,
    #[serde(default)]
    pub padding: Vec<usize>,
    #[serde(default)]
    pub output: Vec<usize>,
}

impl PoolCase {
    pub fn spatial(&self) -> usize {
        self.x.len() - 2
    }

    /// `(N, C, *out)`.
    pub fn out_dims(&self) -> Vec<usize> {
        let mut dims = self.x[..2].to_vec();
        if self.op == "adaptive_avg_pool" {
            dims.extend(&self.output);
        } else {
            dims.extend((0..self.spatial()).map(|i| {
                (self.x[2 + i] + 2 * self.padding[i] - self.kernel[i]) / self.stride[i] + 1
            }));
        }
        dims
    }
}
