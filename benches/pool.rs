//! Pools of the catalogue (`benches/catalogue.json`), forward and backward: this crate's
//! primitives against Burn's built-in `ModuleOps` on the same device, in the same run, where
//! Burn has the op (it has no 3D max or average pool and no LP pool; those run ours alone).
//!
//! `cargo bench --bench pool` (quick profile; `BENCH_PROFILE=full` for every case; add
//! `--features wgpu` or `cuda` for the CubeCL kernels). Ids are
//! `pool/{device}/{case}/{forward|backward}`; max pools' forward returns the indices too.

use burn::backend::Dispatch;
use burn::backend::ops::{FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::tensor::ops::MaxPoolOptions;
use burn::tensor::{DType, Device};
use burn_convpool::spec::WindowRule;
use burn_convpool::{AvgPoolNdOptions, ConvPoolBackend, LpPoolOptions};
use criterion::{Criterion, criterion_group, criterion_main};

mod common {
    pub mod catalogue;
    pub mod devices;
    pub mod operands;
    pub mod pool_case;
    pub mod timing;
}
use common::catalogue::{full_profile, load};
use common::devices::devices;
use common::operands::{array, labelled, lifted, lifted3, operand_dtype, random};
use common::pool_case::PoolCase;
use common::timing::compare;

type Prim = FloatTensor<Dispatch>;
type M = Dispatch;

/// A pool case as this bench runs it: the LP norm and the operands' layout besides its shape.
#[derive(serde::Deserialize)]
struct PoolBench {
    #[serde(flatten)]
    case: PoolCase,
    #[serde(default)]
    norm: f64,
    /// Input and output gradient channels-last in memory (NHWC / NDHWC).
    #[serde(default)]
    channels_last: bool,
}

/// A random primitive of shape `dims` `(N, C, *spatial)`, channels-last in memory if asked: a
/// permuted view of an `(N, *spatial, C)` tensor, as Burn's convolutions leave their outputs.
pub fn random_laid_out(
    dims: &[usize],
    channels_last: bool,
    device: &Device,
    dtype: DType,
) -> FloatTensor<Dispatch> {
    if !channels_last {
        return random(dims, device, dtype);
    }
    let rank = dims.len();
    let memory: Vec<usize> = [dims[0]]
        .into_iter()
        .chain(dims[2..].iter().copied())
        .chain([dims[1]])
        .collect();
    let axes: Vec<usize> = [0, rank - 1].into_iter().chain(1..rank - 1).collect();
    Dispatch::float_permute(random(&memory, device, dtype), &axes)
}

fn bench_case(c: &mut Criterion, device_name: &str, device: &Device, bench: &PoolBench) {
    let case = &bench.case;
    let int_dtype = device.settings().int_dtype;
    // Burn's operators take `x` as the case gives it, ours its rank-5 lift: separate tensors of
    // the same layout (reshaping a channels-last view would copy it).
    let dtype = operand_dtype(device_name);
    let laid_out = |dims: &[usize]| random_laid_out(dims, bench.channels_last, device, dtype);
    let (x, out_grad) = (laid_out(&case.x), laid_out(&case.out_dims()));
    let (x5, out_grad5) = (
        laid_out(&lifted(&case.x)),
        laid_out(&lifted(&case.out_dims())),
    );
    let x_size = lifted3(&case.x[2..], 1);
    let label = labelled(device_name);
    let id = |pass: &str| format!("pool/{label}/{}/{pass}", case.name);
    let planar = case.spatial() == 2;
    // Burn's 2D pool arguments (only called for 2D windowed cases).
    let window2 = || {
        let [kernel, stride, padding] = [&case.kernel, &case.stride, &case.padding];
        (array::<2>(kernel), array::<2>(stride), array::<2>(padding))
    };
    match case.op.as_str() {
        "max_pool" => {
            let options = MaxPoolOptions::new(lifted3(&case.kernel, 1))
                .with_stride(lifted3(&case.stride, 1))
                .with_padding(lifted3(&case.padding, 0));
            let (kernel, stride, padding) = window2();
            let mut burn_forward = || {
                M::max_pool2d_with_indices(
                    x.clone(),
                    kernel,
                    stride,
                    padding,
                    [1, 1],
                    false,
                    int_dtype,
                )
            };
            compare(
                c,
                &id("forward"),
                device,
                || M::max_pool_with_indices(x5.clone(), options.clone(), int_dtype),
                planar.then_some(&mut burn_forward as &mut dyn FnMut() -> _),
            );
            let (_, indices5) = M::max_pool_with_indices(x5.clone(), options.clone(), int_dtype);
            let burn_indices = planar.then(|| burn_forward().indices);
            let mut burn_backward = || {
                let indices = burn_indices.clone().expect("2d case");
                M::max_pool2d_with_indices_backward(
                    x.clone(),
                    kernel,
                    stride,
                    padding,
                    [1, 1],
                    false,
                    out_grad.clone(),
                    indices,
                )
                .x_grad
            };
            let windows = WindowRule::Sliding(options.clone());
            compare(
                c,
                &id("backward"),
                device,
                || {
                    M::max_pool_backward(
                        out_grad5.clone(),
                        indices5.clone(),
                        x_size,
                        windows.clone(),
                    )
                },
                planar.then_some(&mut burn_backward as &mut dyn FnMut() -> _),
            );
        }
        "avg_pool" => {
            let options = AvgPoolNdOptions::new(lifted3(&case.kernel, 1))
                .with_stride(lifted3(&case.stride, 1))
                .with_padding(lifted3(&case.padding, 0));
            let (kernel, stride, padding) = window2();
            let mut burn_forward =
                || M::avg_pool2d(x.clone(), kernel, stride, padding, true, false);
            compare(
                c,
                &id("forward"),
                device,
                || M::avg_pool(x5.clone(), options.clone()),
                planar.then_some(&mut burn_forward as &mut dyn FnMut() -> _),
            );
            let mut burn_backward = || {
                M::avg_pool2d_backward(
                    x.clone(),
                    out_grad.clone(),
                    kernel,
                    stride,
                    padding,
                    true,
                    false,
                )
            };
            compare(
                c,
                &id("backward"),
                device,
                || M::avg_pool_backward(out_grad5.clone(), x_size, options.clone()),
                planar.then_some(&mut burn_backward as &mut dyn FnMut() -> _),
            );
        }
        "adaptive_avg_pool" => {
            let output = lifted3(&case.output, 1);
            let mut burn_forward = || match case.spatial() {
                2 => M::adaptive_avg_pool2d(x.clone(), array::<2>(&case.output)),
                _ => M::adaptive_avg_pool3d(x.clone(), array::<3>(&case.output)),
            };
            compare(
                c,
                &id("forward"),
                device,
                || M::adaptive_avg_pool(x5.clone(), output),
                Some(&mut burn_forward as &mut dyn FnMut() -> _),
            );
            let mut burn_backward = || match case.spatial() {
                2 => M::adaptive_avg_pool2d_backward(x.clone(), out_grad.clone()),
                _ => M::adaptive_avg_pool3d_backward(x.clone(), out_grad.clone()),
            };
            compare(
                c,
                &id("backward"),
                device,
                || M::adaptive_avg_pool_backward(out_grad5.clone(), x_size),
                Some(&mut burn_backward as &mut dyn FnMut() -> _),
            );
        }
        "lp_pool" => {
            let options = LpPoolOptions::new(bench.norm, lifted3(&case.kernel, 1))
                .with_stride(lifted3(&case.stride, 1));
            compare(
                c,
                &id("forward"),
                device,
                || M::lp_pool(x5.clone(), options.clone()),
                None::<&mut dyn FnMut() -> Prim>,
            );
            let output5 = M::lp_pool(x5.clone(), options.clone());
            compare(
                c,
                &id("backward"),
                device,
                || {
                    M::lp_pool_backward(
                        x5.clone(),
                        output5.clone(),
                        out_grad5.clone(),
                        options.clone(),
                    )
                },
                None::<&mut dyn FnMut() -> Prim>,
            );
        }
        other => panic!("catalogue: unknown pool op {other:?}"),
    }
}

fn pools(c: &mut Criterion) {
    let cases: Vec<PoolBench> = load("pool", full_profile());
    for (device_name, device) in devices() {
        for case in &cases {
            bench_case(c, device_name, &device, case);
        }
    }
}

criterion_group! {
    name = benches;
    config = common::timing::criterion();
    targets = pools
}
criterion_main!(benches);
