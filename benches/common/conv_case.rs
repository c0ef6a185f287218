//! A convolution case of the catalogue and its output size, which the conv bench and the
//! report (the work of each pass) both need.

use serde::Deserialize;

/// A convolution (or transposed convolution) layer.
#[derive(Debug, Clone, Deserialize)]
pub struct ConvCase {
    pub name: String,
    pub x: Vec<usize>,
    pub out_channels: usize,
    pub kernel: Vec<usize>,
    pub stride: Vec<usize>,
    pub padding: Vec<usize>,
    pub groups: usize,
}

impl ConvCase {
    pub fn spatial(&self) -> usize {
        self.kernel.len()
    }

    /// Output spatial size: the conv's, or the transposed conv's (no output padding).
    pub fn out_size(&self, transposed: bool) -> Vec<usize> {
        (0..self.spatial())
            .map(|i| {
                let (len, k, s, p) = (
                    self.x[2 + i],
                    self.kernel[i],
                    self.stride[i],
                    self.padding[i],
                );
                if transposed {
                    (len - 1) * s + k - 2 * p
                } else {
                    (len + 2 * p - k) / s + 1
                }
            })
            .collect()
    }
}
