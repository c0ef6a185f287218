//! The CubeCL kernels against the CPU code, on the wgpu device (a CPU Vulkan driver in CI) or,
//! built with `cuda` or `vulkan` alone, on a real GPU:
//! random inputs with odd sizes, permuted (non-contiguous) inputs and every option; forward
//! values, indices and every gradient must agree, and two backward runs must be bitwise equal,
//! with each of our kernels' settings pinned in turn (`common::OUR_KERNELS`; a pool, each
//! packing).
//!
//! One family per file: `conv.rs` (every conv pass and schedule), `pool.rs` (every pool on
//! contiguous and permuted inputs, indices), `layouts.rs` (channels-last inputs and
//! whole-plane windows), `limits.rs` (half precision, 32-bit limits and index dtypes),
//! `tensor_cores.rs` (our GEMM on tensor cores, where the device has them); here
//! the harness that runs an op on both devices and compares.
#![cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]

mod conv;
mod launch_counts;
mod layouts;
mod limits;
mod pool;
mod split_sum;
mod tensor_cores;

use crate::common::{self, Lcg};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_convpool::cube_kernels::CubeKernels;

fn wgpu() -> Device {
    common::gpu()
}

/// One leaf input: its values and dims; `permuted` builds it with its last two axes swapped
/// and swaps them back, so the op sees a non-contiguous view.
struct Leaf<const D: usize> {
    values: Vec<f32>,
    dims: [usize; D],
    layout: Layout,
}

/// How a leaf's values lie in memory under the view the op gets.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Contiguous,
    /// The last two axes swapped: a view no kernel can read as contiguous rows.
    Permuted,
    /// Channels last (`(N, *spatial, C)` in memory), as Burn's convolutions leave outputs.
    ChannelsLast,
}

impl<const D: usize> Leaf<D> {
    fn random(rng: &mut Lcg, dims: [usize; D]) -> Self {
        let values = rng
            .values(dims.iter().product())
            .iter()
            .map(|&v| v as f32)
            .collect();
        Self {
            values,
            dims,
            layout: Layout::Contiguous,
        }
    }

    fn permuted(mut self) -> Self {
        self.layout = Layout::Permuted;
        self
    }

    fn channels_last(mut self) -> Self {
        self.layout = Layout::ChannelsLast;
        self
    }

    /// This leaf with its values laid out as `layout`.
    fn laid_out(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The tracked leaf and the (maybe permuted) view of it the op gets.
    fn on(&self, device: &Device) -> (Tensor<D>, Tensor<D>) {
        let mut dims = self.dims;
        // Per view axis, the stored axis it reads.
        let mut axes: [usize; D] = core::array::from_fn(|a| a);
        match self.layout {
            Layout::Contiguous => {}
            Layout::Permuted => {
                dims.swap(D - 1, D - 2);
                axes.swap(D - 1, D - 2);
            }
            Layout::ChannelsLast => {
                dims[1..].rotate_left(1);
                axes = core::array::from_fn(|a| match a {
                    0 => 0,
                    1 => D - 1,
                    a => a - 1,
                });
            }
        }
        let leaf = Tensor::<D>::from_data(TensorData::new(self.values.clone(), dims), device)
            .require_grad();
        let view = match self.layout {
            Layout::Contiguous => leaf.clone(),
            _ => leaf.clone().permute(axes.map(|a| a as isize)),
        };
        (leaf, view)
    }
}

/// Forward values and the gradient of every leaf, for `sum(op(..) * r)`.
fn run<const D: usize, const O: usize>(
    device: &Device,
    leaves: &[Leaf<D>],
    op: &dyn Fn(Vec<Tensor<D>>) -> Tensor<O>,
    seed: u64,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let (tracked, views): (Vec<_>, Vec<_>) = leaves.iter().map(|leaf| leaf.on(device)).unzip();
    let out = op(views);
    let dims = out.dims();
    let r = Lcg::new(seed)
        .values(dims.iter().product())
        .iter()
        .map(|&v| v as f32)
        .collect::<Vec<_>>();
    let r = Tensor::<O>::from_data(TensorData::new(r, dims), device);
    let values = out.clone().into_data().try_to_vec::<f32>().unwrap();
    let grads = (out * r).sum().backward();
    let leaf_grads = tracked
        .iter()
        .map(|leaf| {
            leaf.grad(&grads)
                .unwrap()
                .into_data()
                .try_to_vec::<f32>()
                .unwrap()
        })
        .collect();
    (values, leaf_grads)
}

fn assert_close(what: &str, actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths differ");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let ok = (a.is_nan() && e.is_nan()) || a == e || (a - e).abs() <= 1e-4 + 1e-4 * e.abs();
        assert!(ok, "{what}[{i}]: wgpu {a} vs flex {e}");
    }
}

/// Compare wgpu (with autodiff) against Flex, and wgpu's backward against itself, with each
/// of our kernels' settings pinned in turn.
fn cross<const D: usize, const O: usize>(
    name: &str,
    leaves: &[Leaf<D>],
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    cross_each(|check| common::each_pinned(check), name, leaves, op);
}

/// [`cross`] for a pool: each packing of ours pinned in turn ([`common::each_packing_pinned`]).
fn cross_pool<const D: usize, const O: usize>(
    name: &str,
    leaves: &[Leaf<D>],
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    cross_each(|check| common::each_packing_pinned(check), name, leaves, op);
}

/// [`compare`] against Flex under each setting `each` pins: `each` runs the comparison it is
/// given once per setting, with the setting's name.
fn cross_each<const D: usize, const O: usize>(
    each: impl FnOnce(&mut dyn FnMut(&str)),
    name: &str,
    leaves: &[Leaf<D>],
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    let expected = on_flex(name, leaves, &op);
    each(&mut |kernels| compare(name, leaves, &op, &expected, kernels));
}

/// [`cross`] with `kernels` pinned (named `label` in messages) instead of each of ours.
fn cross_pinned<const D: usize, const O: usize>(
    kernels: CubeKernels,
    label: &str,
    name: &str,
    leaves: &[Leaf<D>],
    op: impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) {
    let expected = on_flex(name, leaves, &op);
    let _pinned = common::pin(kernels);
    compare(name, leaves, &op, &expected, label);
}

/// The op's values and its leaves' gradients on Flex, seeded by `name`.
fn on_flex<const D: usize, const O: usize>(
    name: &str,
    leaves: &[Leaf<D>],
    op: &impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    run(&Device::flex().autodiff(), leaves, op, seed(name))
}

/// The seed of the backward pass's random output gradient for `name`.
fn seed(name: &str) -> u64 {
    name.len() as u64 * 7919
}

/// wgpu's values and gradients against Flex's (`expected`), and its backward against a
/// second run of itself, bit for bit, under whatever kernels the device holds (`kernels`).
fn compare<const D: usize, const O: usize>(
    name: &str,
    leaves: &[Leaf<D>],
    op: &impl Fn(Vec<Tensor<D>>) -> Tensor<O>,
    (flex_out, flex_grads): &(Vec<f32>, Vec<Vec<f32>>),
    kernels: &str,
) {
    let gpu = wgpu().autodiff();
    let (gpu_out, gpu_grads) = run(&gpu, leaves, op, seed(name));
    assert_close(&format!("{name} forward, {kernels}"), &gpu_out, flex_out);
    for (i, (g, f)) in gpu_grads.iter().zip(flex_grads).enumerate() {
        assert_close(&format!("{name} grad of input {i}, {kernels}"), g, f);
    }
    let (_, again) = run(&gpu, leaves, op, seed(name));
    for (i, (a, b)) in again.iter().zip(&gpu_grads).enumerate() {
        let same = a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "{name}: grad of input {i} differs between two wgpu runs, {kernels}"
        );
    }
}

fn rng(name: &str) -> Lcg {
    Lcg::new(name.bytes().map(u64::from).sum::<u64>() + 17)
}

/// The bias as a rank-D leaf `(C, 1, ..)`, reshaped inside the op so it gets a gradient.
fn bias_of<const D: usize>(bias: &Tensor<D>) -> Tensor<1> {
    let channels = bias.dims()[0];
    bias.clone().reshape([channels])
}

/// A max pool's values and indices, read back.
fn values_and_indices(out: Tensor<4>, indices: Tensor<4, Int>) -> (Vec<f32>, Vec<i64>) {
    let values = out.into_data().try_to_vec::<f32>().unwrap();
    let indices = indices.into_data().convert::<i64>();
    (values, indices.try_to_vec::<i64>().unwrap())
}

/// The panic message of `op`, which must fail (a dtype the device does not report).
fn failure(op: impl FnOnce() -> TensorData + std::panic::UnwindSafe) -> String {
    let err = std::panic::catch_unwind(op).expect_err("an unsupported dtype must fail");
    *err.downcast::<String>().expect("a formatted panic message")
}
