//! Pools of every kind and rank: sliding (max, average, LP), adaptive, fractional and
//! max-unpool, with NaN and infinities among the inputs, and the property against the reference.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_convpool::*;
use proptest::prelude::*;

use super::layout::{Layout, layout, tensor_in};
use super::reference::{self, Expected, Sliding, Window};
use super::{
    Got, case_dtype, cases, check, data, floats, fuzz, grad_values, len_param, lifted, out_grad,
    pad_param, size_param, tail, user_dims,
};

/// Which pool a case runs.
#[derive(Debug, Clone, Copy)]
pub(super) enum PoolKind {
    Sliding(Sliding),
    Adaptive {
        max: bool,
    },
    /// Fractional max pooling (2D and 3D) of `window.kernel` to `output_size`.
    Fractional(Samples),
    /// Max-unpooling by `window` (symmetric padding).
    Unpool(Unpool),
}

/// A max-unpool case: the output size (the default, or explicit at offsets from it) and
/// whether one index lies outside the output plane (an error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Unpool {
    offsets: Option<[i64; 3]>,
    outside: bool,
}

fn unpool() -> impl Strategy<Value = Unpool> {
    (
        proptest::option::of(proptest::array::uniform3(-3i64..=3)),
        proptest::bool::weighted(0.1),
    )
        .prop_map(|(offsets, outside)| Unpool { offsets, outside })
}

/// The samples of a fractional pool case: uniform in `[0, 1)` as PyTorch draws them, with the
/// interval's ends, or with one value outside it (an error).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Samples {
    Uniform,
    Ends,
    Outside(f64),
}

fn samples() -> impl Strategy<Value = Samples> {
    prop_oneof![
        6 => Just(Samples::Uniform),
        2 => Just(Samples::Ends),
        1 => prop_oneof![
            Just(f64::NAN),
            Just(-0.5),
            Just(1.5),
            Just(f64::INFINITY),
            Just(-1e30),
        ]
        .prop_map(Samples::Outside),
    ]
}

/// Parameters of one pooling call.
#[derive(Debug, Clone)]
pub(super) struct PoolCase {
    pub(super) rank: usize,
    pub(super) batch: usize,
    pub(super) channels: usize,
    pub(super) size: [usize; 3],
    pub(super) kind: PoolKind,
    pub(super) window: Window,
    pub(super) ceil: bool,
    pub(super) output_size: [usize; 3],
    /// Non-finite values in the input (PyTorch's NaN and infinity rules).
    pub(super) specials: Specials,
    pub(super) seed: u64,
}

/// Which non-finite values a pool case's input holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Specials {
    /// Finite values only.
    None,
    /// About one value in five NaN, +inf or -inf.
    Sparse,
    /// Mostly -inf (windows of -inf only keep their first tap), some NaN.
    NegInfinity,
}

fn specials() -> impl Strategy<Value = Specials> {
    prop_oneof![
        6 => Just(Specials::None),
        1 => Just(Specials::Sparse),
        1 => Just(Specials::NegInfinity),
    ]
}

fn pool_kind() -> impl Strategy<Value = PoolKind> {
    prop_oneof![
        3 => Just(PoolKind::Sliding(Sliding::Max)),
        3 => (any::<bool>(), proptest::option::weighted(0.2, -5i64..=5)).prop_map(
            |(count_include_pad, divisor_override)| {
                PoolKind::Sliding(Sliding::Avg { count_include_pad, divisor_override })
            }
        ),
        1 => prop_oneof![Just(1.0), Just(2.0), Just(3.0), Just(0.0)]
            .prop_map(|norm_type| PoolKind::Sliding(Sliding::Lp { norm_type })),
        2 => any::<bool>().prop_map(|max| PoolKind::Adaptive { max }),
        2 => samples().prop_map(PoolKind::Fractional),
        2 => unpool().prop_map(PoolKind::Unpool),
    ]
}

fn pool_case() -> impl Strategy<Value = PoolCase> {
    (
        (
            1usize..=3,
            len_param(2),
            len_param(3),
            proptest::array::uniform3(len_param(6)),
            pool_kind(),
        ),
        (
            proptest::array::uniform3(size_param(4)),
            proptest::array::uniform3(size_param(3)),
            proptest::array::uniform3(size_param(2)),
            proptest::array::uniform3(prop_oneof![
                40 => (0usize..=1, 0usize..=1),
                10 => (0usize..=2, 0usize..=2),
                1 => (pad_param(), pad_param()),
            ]),
        ),
        (
            any::<bool>(),
            proptest::array::uniform3(prop_oneof![60 => len_param(7), 1 => Just(1usize << 40)]),
            specials(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (rank, batch, channels, size, kind),
                (kernel, stride, dilation, padding),
                (ceil, output_size, specials, seed),
            )| {
                // PyTorch's fractional pools are 2D and 3D.
                let rank = match kind {
                    PoolKind::Fractional(_) => rank.max(2),
                    _ => rank,
                };
                let unit = |a: usize| a < 3 - rank;
                let lift = |values: [usize; 3], one: usize| {
                    core::array::from_fn(|a| if unit(a) { one } else { values[a] })
                };
                // Average and LP pools have no dilation, LP no padding, unpooling a symmetric
                // one.
                let (dilation, padding) = match kind {
                    PoolKind::Sliding(Sliding::Max) => (dilation, padding),
                    PoolKind::Sliding(Sliding::Avg { .. }) => ([1; 3], padding),
                    PoolKind::Unpool(_) => ([1; 3], padding.map(|(p, _)| (p, p))),
                    _ => ([1; 3], [(0, 0); 3]),
                };
                // A unit axis keeps its default length 1.
                let kind =
                    match kind {
                        PoolKind::Unpool(Unpool {
                            offsets: Some(offsets),
                            outside,
                        }) => PoolKind::Unpool(Unpool {
                            offsets: Some(core::array::from_fn(|a| {
                                if unit(a) { 0 } else { offsets[a] }
                            })),
                            outside,
                        }),
                        kind => kind,
                    };
                PoolCase {
                    rank,
                    batch,
                    channels,
                    size: lift(size, 1),
                    kind,
                    window: Window {
                        kernel: lift(kernel, 1),
                        stride: lift(stride, 1),
                        dilation: lift(dilation, 1),
                        padding: core::array::from_fn(
                            |a| if unit(a) { (0, 0) } else { padding[a] },
                        ),
                    },
                    ceil,
                    output_size: lift(output_size, 1),
                    specials,
                    seed,
                }
            },
        )
}

impl PoolCase {
    fn x_dims(&self) -> [usize; 5] {
        let [d, h, w] = self.size;
        [self.batch, self.channels, d, h, w]
    }

    /// The input's values: the seed's, some replaced by NaN and infinities as `specials` says.
    /// An unpool case's are a function of each element's index, so indices that repeat carry
    /// one value (as from overlapping max-pool windows; others write in any order on a GPU).
    pub(super) fn input(&self) -> Vec<f64> {
        let mut x = match self.kind {
            PoolKind::Unpool(_) => {
                let in_volume: usize = self.size.iter().product();
                let indices = self.unpool_indices();
                let keys = indices.iter().enumerate().map(|(i, &index)| {
                    let plane = (i / in_volume.max(1)) as u64;
                    (plane << 32) ^ index as u64
                });
                keys.map(|key| data(self.seed ^ key, 1)[0]).collect()
            }
            _ => data(self.seed, self.x_dims().iter().product()),
        };
        let picks = data(self.seed ^ 0x5eed, x.len());
        for (value, pick) in x.iter_mut().zip(picks) {
            // `pick` is uniform in [-1, 1).
            let special = match self.specials {
                Specials::None => None,
                Specials::Sparse if pick < -0.8 => Some(f64::NAN),
                Specials::Sparse if pick < -0.7 => Some(f64::INFINITY),
                Specials::Sparse if pick < -0.6 => Some(f64::NEG_INFINITY),
                Specials::Sparse => None,
                Specials::NegInfinity if pick < -0.9 => Some(f64::NAN),
                Specials::NegInfinity if pick < 0.6 => Some(f64::NEG_INFINITY),
                Specials::NegInfinity => None,
            };
            *value = special.unwrap_or(*value);
        }
        x
    }

    /// An unpool case's output dims, when it has a valid one.
    fn unpool_dims(&self) -> Option<[usize; 5]> {
        let PoolKind::Unpool(unpool) = self.kind else {
            return None;
        };
        reference::unpool_dims(self.x_dims(), &self.window, unpool.offsets)
    }

    /// An unpool case's indices, each in its output plane (repeats included), but for the
    /// first when it is `outside`: one past the plane, or -1.
    fn unpool_indices(&self) -> Vec<i64> {
        let len: usize = self.x_dims().iter().product();
        let plane = self
            .unpool_dims()
            .map_or(1, |dims| dims[2..].iter().product::<usize>().max(1));
        let picks = data(self.seed ^ 0x1d1c, len);
        let mut indices: Vec<i64> = picks
            .iter()
            .map(|pick| (((pick + 1.0) / 2.0 * plane as f64) as i64).min(plane as i64 - 1))
            .collect();
        if let (PoolKind::Unpool(Unpool { outside: true, .. }), Some(first)) =
            (self.kind, indices.first_mut())
        {
            *first = if self.seed.is_multiple_of(2) {
                plane as i64
            } else {
                -1
            };
        }
        indices
    }

    /// The fractional samples `(N, C, rank)`, f32 values as the tensor holds them.
    fn samples(&self) -> Vec<f64> {
        let PoolKind::Fractional(kind) = self.kind else {
            return Vec::new();
        };
        let len = self.batch * self.channels * self.rank;
        let mut samples: Vec<f64> = data(self.seed ^ 0x5a3b, len)
            .iter()
            .map(|v| ((v + 1.0) / 2.0) as f32 as f64)
            .collect();
        let picks = data(self.seed ^ 0x5a3c, len);
        for (sample, pick) in samples.iter_mut().zip(&picks) {
            match kind {
                Samples::Ends if *pick < -0.5 => *sample = 0.0,
                Samples::Ends if *pick > 0.5 => *sample = 1.0,
                _ => {}
            }
        }
        if let (Samples::Outside(value), Some(pick)) = (kind, picks.first()) {
            let at = ((pick + 1.0) / 2.0 * len as f64) as usize;
            samples[at.min(len - 1)] = value as f32 as f64;
        }
        samples
    }

    /// The reference result, with fractional windows placed in f32 math when `f32_math` (an
    /// f32 input's, as PyTorch's), else in f64.
    pub(super) fn expected(&self, x: &[f64], f32_math: bool) -> Option<Expected> {
        let g = out_grad(self.seed);
        match self.kind {
            PoolKind::Unpool(unpool) => reference::max_unpool(
                x,
                self.x_dims(),
                &self.unpool_indices(),
                &self.window,
                unpool.offsets,
                g,
            ),
            PoolKind::Fractional(_) => reference::fractional_pool(
                x,
                self.x_dims(),
                self.window.kernel,
                self.output_size,
                &self.samples(),
                self.rank,
                f32_math,
                g,
            ),
            PoolKind::Sliding(kind) => {
                reference::sliding_pool(x, self.x_dims(), &self.window, self.ceil, kind, g)
            }
            PoolKind::Adaptive { max } => {
                reference::adaptive_pool(x, self.x_dims(), self.output_size, max, g)
            }
        }
    }
}

/// A pool's output and indices.
type WithIndices<const D: usize> = Result<(Tensor<D>, Tensor<D, Int>), SpecError>;

/// A fractional max pool with indices.
type FractionalFn<const N: usize, const D: usize> =
    fn(Tensor<D>, FractionalMaxPoolOptions<N>, Option<Tensor<3>>) -> WithIndices<D>;

/// A max-unpool.
type UnpoolFn<const N: usize, const D: usize> =
    fn(Tensor<D>, Tensor<D, Int>, MaxUnpoolOptions<N>) -> Result<Tensor<D>, SpecError>;

/// The crate's pools of one rank: (max with indices, avg, lp, adaptive avg, adaptive max,
/// fractional max where the rank has one, max-unpool).
struct PoolFns<const N: usize, const D: usize> {
    max: fn(Tensor<D>, MaxPoolOptions<N>) -> WithIndices<D>,
    avg: fn(Tensor<D>, AvgPoolNdOptions<N>) -> Result<Tensor<D>, SpecError>,
    lp: fn(Tensor<D>, LpPoolOptions<N>) -> Result<Tensor<D>, SpecError>,
    adaptive_avg: fn(Tensor<D>, [usize; N]) -> Result<Tensor<D>, SpecError>,
    adaptive_max: fn(Tensor<D>, [usize; N]) -> WithIndices<D>,
    fractional: Option<FractionalFn<N, D>>,
    unpool: UnpoolFn<N, D>,
}

pub(super) fn run_pool(case: &PoolCase, layout: Layout, device: &Device) -> Result<Got, SpecError> {
    match case.rank {
        1 => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<1, 3> {
                max: try_max_pool1d_with_indices,
                avg: try_avg_pool1d,
                lp: try_lp_pool1d,
                adaptive_avg: try_adaptive_avg_pool1d,
                adaptive_max: try_adaptive_max_pool1d_with_indices,
                fractional: None,
                unpool: try_max_unpool1d,
            },
        ),
        2 => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<2, 4> {
                max: try_max_pool2d_with_indices,
                avg: try_avg_pool2d,
                lp: try_lp_pool2d,
                adaptive_avg: try_adaptive_avg_pool2d,
                adaptive_max: try_adaptive_max_pool2d_with_indices,
                fractional: Some(try_fractional_max_pool2d_with_indices),
                unpool: try_max_unpool2d,
            },
        ),
        _ => run_pool_n(
            case,
            layout,
            device,
            PoolFns::<3, 5> {
                max: try_max_pool3d_with_indices,
                avg: try_avg_pool3d,
                lp: try_lp_pool3d,
                adaptive_avg: try_adaptive_avg_pool3d,
                adaptive_max: try_adaptive_max_pool3d_with_indices,
                fractional: Some(try_fractional_max_pool3d_with_indices),
                unpool: try_max_unpool3d,
            },
        ),
    }
}

fn run_pool_n<const N: usize, const D: usize>(
    case: &PoolCase,
    layout: Layout,
    device: &Device,
    fns: PoolFns<N, D>,
) -> Result<Got, SpecError> {
    let x_dims = user_dims(case.x_dims(), N);
    let x = case.input();
    let dtype = case_dtype(case.seed, device);
    let x_t: Tensor<D> = tensor_in(layout, &x, &x_dims, device, dtype).require_grad();
    let window = &case.window;
    let (kernel, stride) = (tail(window.kernel), tail(window.stride));
    let (out, indices) = match case.kind {
        PoolKind::Sliding(Sliding::Max) => {
            let options = MaxPoolOptions {
                kernel_size: kernel,
                stride,
                padding: tail(window.padding),
                dilation: tail(window.dilation),
                ceil_mode: case.ceil,
            };
            let (out, indices) = (fns.max)(x_t.clone(), options)?;
            (out, Some(indices))
        }
        PoolKind::Sliding(Sliding::Avg {
            count_include_pad,
            divisor_override,
        }) => {
            let mut options = AvgPoolNdOptions::new(kernel)
                .with_stride(stride)
                .with_padding_pairs(tail(window.padding))
                .with_count_include_pad(count_include_pad)
                .with_ceil_mode(case.ceil);
            options.divisor_override = divisor_override;
            ((fns.avg)(x_t.clone(), options)?, None)
        }
        PoolKind::Sliding(Sliding::Lp { norm_type }) => {
            let options = LpPoolOptions::new(norm_type, kernel)
                .with_stride(stride)
                .with_ceil_mode(case.ceil);
            ((fns.lp)(x_t.clone(), options)?, None)
        }
        PoolKind::Adaptive { max: false } => (
            (fns.adaptive_avg)(x_t.clone(), tail(case.output_size))?,
            None,
        ),
        PoolKind::Adaptive { max: true } => {
            let (out, indices) = (fns.adaptive_max)(x_t.clone(), tail(case.output_size))?;
            (out, Some(indices))
        }
        PoolKind::Fractional(_) => {
            let fractional = fns.fractional.expect("fractional pools are 2D and 3D");
            let options = FractionalMaxPoolOptions::new(
                kernel,
                FractionalOutput::Size(tail(case.output_size)),
            );
            let samples_dims = [case.batch, case.channels, N];
            let samples = tensor_in::<3>(layout, &case.samples(), &samples_dims, device, dtype);
            let (out, indices) = fractional(x_t.clone(), options, Some(samples))?;
            (out, Some(indices))
        }
        PoolKind::Unpool(unpool) => {
            let mut options = MaxUnpoolOptions::new(kernel)
                .with_stride(stride)
                .with_padding(tail(window.padding.map(|(p, _)| p)));
            if let Some(offsets) = unpool.offsets {
                // Sizes that would be negative are out of range anyway; 0 stands for them.
                let default = reference::unpool_default(case.x_dims(), window);
                let sizes: [usize; 3] = core::array::from_fn(|a| {
                    default[a]
                        .saturating_add(offsets[a] as i128)
                        .clamp(0, usize::MAX as i128) as usize
                });
                options = options.with_output_size(tail(sizes));
            }
            let indices = TensorData::new(case.unpool_indices(), x_dims.clone());
            let indices = Tensor::<D, Int>::from_data(indices, device);
            ((fns.unpool)(x_t.clone(), indices, options)?, None)
        }
    };
    let dims = out.dims().to_vec();
    let g = out_grad(case.seed)(lifted(&dims, N));
    let grads = (out.clone() * tensor_in::<D>(layout, &g, &dims, device, dtype))
        .sum()
        .backward();
    let grads = vec![grad_values(x_t.grad(&grads), x.len())];
    let indices = indices.map(|indices| {
        let data = indices.into_data().convert::<i64>();
        data.try_to_vec::<i64>().expect("i64 indices")
    });
    Ok(Got {
        out: floats(out),
        dims,
        indices,
        grads,
    })
}

/// The pool property on `device`.
pub(super) fn fuzz_pool(name: &str, device: Device, cases: u32) {
    fuzz(name, cases, (pool_case(), layout()), |(case, layout)| {
        let got = catch_unwind(AssertUnwindSafe(|| run_pool(&case, layout, &device)));
        let x = case.input();
        let dtype = case_dtype(case.seed, &device);
        check(
            &format!("{case:?} {layout:?} {dtype:?}"),
            got,
            case.expected(&x, dtype == DType::F32),
            case.rank,
        )
    });
}

#[test]
fn pools_match_the_reference() {
    fuzz_pool(
        "pool on flex",
        Device::flex().autodiff(),
        cases("FUZZ_CASES", 1024),
    );
}
