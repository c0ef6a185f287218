//! Whole training steps (forward, loss and backward), our modules against the same network on
//! burn-nn's, on the same device in the same run:
//!
//! - `chain_conv_pool_conv`: a 3x3 conv, a 2x2 max pool and a 3x3 conv on one 16x16 image.
//!   Its arithmetic is a few microseconds of work, so its time is what each call costs to
//!   queue, dispatch and launch: the overhead a small network or a batch of 1 pays per layer.
//! - `network_resnet_example`: the ResNet example's network (`examples/resnet`, width 16, one
//!   block per stage) on a batch of 64 MNIST-sized images, what the example trains.
//!
//! `cargo bench --bench network` (add `--features wgpu`, `vulkan` or `cuda` for the CubeCL
//! devices). Ids are `network/{device}/{case}/step` with `ours` and `burn` per id;
//! `benches/report.sh` puts them in the report. On lavapipe the rows measure host and launch
//! cost, not a GPU's arithmetic.

use burn::nn::PaddingConfig2d;
use burn::tensor::{Device, Distribution, Tensor};
use burn_convpool::nn::{Conv2d, Conv2dConfig, MaxPool2d, MaxPool2dConfig};
use criterion::{Criterion, criterion_group, criterion_main};

mod common {
    pub mod devices;
    pub mod timing;
}
#[path = "../examples/resnet/model.rs"]
#[allow(dead_code)]
mod model;

use common::devices::devices;
use common::timing::compare;
use model::{ResNet, ResNetConfig};

/// The tiny chain on either set of modules.
enum Chain {
    Ours(Conv2d, MaxPool2d, Conv2d),
    Builtin(
        burn::nn::conv::Conv2d,
        burn::nn::pool::MaxPool2d,
        burn::nn::conv::Conv2d,
    ),
}

impl Chain {
    fn new(device: &Device) -> Self {
        let conv = |channels| {
            Conv2dConfig::new(channels, [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        let pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
        Self::Ours(conv([3, 8]), pool, conv([8, 8]))
    }

    /// The same layers, parameters moved, on burn-nn's modules.
    fn into_builtin(self) -> Self {
        match self {
            Self::Ours(first, pool, second) => Self::Builtin(
                first.try_into().expect("zero padding"),
                pool.into(),
                second.try_into().expect("zero padding"),
            ),
            builtin => builtin,
        }
    }

    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        match self {
            Self::Ours(first, pool, second) => second.forward(pool.forward(first.forward(x))),
            Self::Builtin(first, pool, second) => second.forward(pool.forward(first.forward(x))),
        }
    }
}

/// One step of the chain: forward, the sum as the loss, backward.
fn chain_step(chain: &Chain, x: &Tensor<4>) -> impl Sized {
    chain.forward(x.clone()).sum().backward()
}

/// One step of the ResNet: forward, the sum of the logits as the loss (the loss function is
/// the same on both sides), backward.
fn resnet_step(model: &ResNet, images: &Tensor<4>) -> impl Sized {
    model.forward(images.clone()).sum().backward()
}

fn network(c: &mut Criterion) {
    for (device_name, device) in devices() {
        let device = device.autodiff();
        let x = Tensor::<4>::random([1, 3, 16, 16], Distribution::Default, &device);
        let ours = Chain::new(&device);
        let builtin = Chain::new(&device).into_builtin();
        compare(
            c,
            &format!("network/{device_name}/chain_conv_pool_conv/step"),
            &device,
            || chain_step(&ours, &x),
            Some(&mut || chain_step(&builtin, &x)),
        );

        let config = ResNetConfig {
            in_channels: 1,
            width: 16,
            blocks: 1,
            classes: 10,
        };
        let images = Tensor::<4>::random([64, 1, 28, 28], Distribution::Default, &device);
        let ours = ResNet::new(config, &device);
        let builtin = ResNet::new(config, &device).into_builtin();
        compare(
            c,
            &format!("network/{device_name}/network_resnet_example/step"),
            &device,
            || resnet_step(&ours, &images),
            Some(&mut || resnet_step(&builtin, &images)),
        );
    }
}

criterion_group! {
    name = benches;
    config = common::timing::criterion();
    targets = network
}
criterion_main!(benches);
