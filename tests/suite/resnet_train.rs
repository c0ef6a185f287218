//! The ResNet example's network, trained for a few steps on the shipped digits: the loss falls.
//! It also checks that the `--ops builtin` network is the same network: converted to burn-nn's
//! modules with the same weights, it gives the same logits.

#[path = "../../examples/resnet/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../../examples/resnet/model.rs"]
mod model;

use std::path::Path;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::Device;
use model::{ResNet, ResNetConfig};

const TINY: ResNetConfig = ResNetConfig {
    in_channels: 1,
    width: 4,
    blocks: 1,
    classes: 10,
};

fn digits() -> (data::Split, data::Split) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/digits");
    data::load(&dir, 16.0).expect("the shipped digits load")
}

#[test]
fn a_few_steps_of_training_lower_the_loss() {
    let (train, _) = digits();
    let device = Device::flex().autodiff();
    device.seed(1);
    let mut model = ResNet::new(TINY, &device);
    let mut optimizer = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    // One fixed batch of 64: the loss on it must fall as the model fits it.
    let batch: Vec<usize> = data::shuffled(train.len(), 3)[..64].to_vec();
    let mut losses = Vec::new();
    for _ in 0..12 {
        let (images, labels) = train.batch(&batch, &device);
        let loss = loss_fn.forward(model.forward(images), labels);
        losses.push(loss.clone().into_scalar::<f32>());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(1e-2, model, grads);
    }
    let first = losses[..3].iter().sum::<f32>() / 3.0;
    let last = losses[losses.len() - 3..].iter().sum::<f32>() / 3.0;
    assert!(losses.iter().all(|loss| loss.is_finite()), "{losses:?}");
    assert!(last < 0.7 * first, "loss did not fall: {losses:?}");
}

#[test]
fn the_builtin_network_is_the_same_network() {
    let (_, test) = digits();
    let device = Device::flex();
    device.seed(2);
    let ours = ResNet::new(TINY, &device).valid();
    let builtin = ours.clone().into_builtin();
    let (images, _) = test.batch(&(0..16).collect::<Vec<_>>(), &device);
    let expected: Vec<f32> = ours.forward(images.clone()).into_data().iter().collect();
    let actual: Vec<f32> = builtin.forward(images).into_data().iter().collect();
    for (a, e) in actual.iter().zip(&expected) {
        assert!((a - e).abs() < 1e-4, "builtin {a} vs ours {e}");
    }
}
