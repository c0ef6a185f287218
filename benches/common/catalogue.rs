//! The named shapes of `benches/catalogue.json`, and the work each pass does (FLOPs for convs,
//! bytes moved for pools), so the benches and the report agree on what a case is.

use serde::Deserialize;

/// Every case of the catalogue.
#[derive(Debug, Deserialize)]
pub struct Catalogue {
    pub conv: Vec<ConvCase>,
    pub conv_transpose: Vec<ConvCase>,
    pub pool: Vec<PoolCase>,
}

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
    pub quick: bool,
}

/// A pooling layer: `op` is `max_pool`, `avg_pool`, `adaptive_avg_pool` or `lp_pool` (norm
/// `norm`, no padding).
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
    #[serde(default)]
    pub norm: f64,
    /// Input and output gradient channels-last in memory (NHWC / NDHWC).
    #[serde(default)]
    pub channels_last: bool,
    pub quick: bool,
}

/// Whether `BENCH_PROFILE=full` asks for every case (default: the quick ones).
pub fn full_profile() -> bool {
    std::env::var("BENCH_PROFILE").is_ok_and(|profile| profile == "full")
}

/// The catalogue, cut to the cases of the profile unless `all`.
pub fn load(all: bool) -> Catalogue {
    let mut catalogue: Catalogue =
        serde_json::from_str(include_str!("../catalogue.json")).expect("valid catalogue.json");
    if !all {
        catalogue.conv.retain(|case| case.quick);
        catalogue.conv_transpose.retain(|case| case.quick);
        catalogue.pool.retain(|case| case.quick);
    }
    catalogue
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

    /// `(N, C_out, *out)`.
    pub fn out_dims(&self, transposed: bool) -> Vec<usize> {
        let mut dims = vec![self.x[0], self.out_channels];
        dims.extend(self.out_size(transposed));
        dims
    }

    /// `(C_out, C_in / groups, *kernel)`, or `(C_in, C_out / groups, *kernel)` transposed.
    pub fn weight_dims(&self, transposed: bool) -> Vec<usize> {
        let (first, second) = if transposed {
            (self.x[1], self.out_channels / self.groups)
        } else {
            (self.out_channels, self.x[1] / self.groups)
        };
        let mut dims = vec![first, second];
        dims.extend(&self.kernel);
        dims
    }

    /// Multiply-adds times two of one pass; forward, input gradient and weight gradient each do
    /// the same work. A transposed conv does the work of the conv it is the adjoint of.
    pub fn flops(&self, transposed: bool) -> f64 {
        let taps: usize = self.kernel.iter().product();
        let (positions, channels_in) = if transposed {
            (self.x[2..].iter().product::<usize>(), self.out_channels)
        } else {
            (self.out_size(false).iter().product::<usize>(), self.x[1])
        };
        let outputs = self.x[0]
            * if transposed {
                self.x[1]
            } else {
                self.out_channels
            }
            * positions;
        2.0 * (outputs * channels_in / self.groups * taps) as f64
    }
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

    /// Bytes a pass must move at least, the same both ways: forward reads x and writes the
    /// output (and, for max, the indices); backward reads those and writes x's gradient. f32
    /// values, 32-bit indices.
    pub fn bytes(&self) -> f64 {
        let input: usize = self.x.iter().product();
        let output: usize = self.out_dims().iter().product();
        let indices = if self.op == "max_pool" { output } else { 0 };
        4.0 * (input + output + indices) as f64
    }
}
