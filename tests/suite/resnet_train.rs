//! The ResNet example's network, trained for a few steps on the shipped digits: the loss falls,
//! by hand and under burn-train's `Learner` (on one device and data-parallel on two), whose
//! checkpoint reloads into the same network. It also checks that the `--ops builtin` network is
//! the same network: converted to burn-nn's modules with the same weights, it gives the same
//! logits; and so is the `--ops fused` one, in training (logits, loss gradients, the running
//! statistics after the step) and in inference.

#[path = "../../examples/resnet/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../../examples/resnet/learner.rs"]
mod learner;
#[path = "../../examples/resnet/model.rs"]
mod model;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::store::ModuleRecord;
use burn::tensor::Device;
use burn::train::LearnerSummary;
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

#[test]
fn the_fused_network_is_the_same_network() {
    let (train, _) = digits();
    let device = Device::flex().autodiff();
    // The same weights (the record copied), each network its own running statistics.
    device.seed(6);
    let ours = ResNet::new(TINY, &device);
    let fused = ResNet::new(TINY, &device)
        .load_record(ours.clone().into_record())
        .into_fused();
    let mut models = [ours, fused];
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let (images, labels) = train.batch(&(0..32).collect::<Vec<_>>(), &device);
    let close = |a: &[f32], e: &[f32], what: &str| {
        assert_eq!(a.len(), e.len(), "{what}");
        for (a, e) in a.iter().zip(e) {
            assert!(
                (a - e).abs() <= 1e-4 + 1e-3 * e.abs(),
                "{what}: fused {a} vs {e}"
            );
        }
    };
    // A training step: the logits, then (through Adam's update and the running statistics)
    // the inference logits after it.
    let mut logits = Vec::new();
    for model in &mut models {
        let out = model.forward(images.clone());
        logits.push(out.clone().into_data().iter::<f32>().collect::<Vec<f32>>());
        let grads =
            GradientsParams::from_grads(loss_fn.forward(out, labels.clone()).backward(), &*model);
        *model = AdamConfig::new().init().step(1e-2, model.clone(), grads);
    }
    close(&logits[1], &logits[0], "training logits");
    let (images, _) = train.batch(&(32..48).collect::<Vec<_>>(), &Device::flex());
    let [ours, fused] = models.map(|model| {
        let out = model.valid().forward(images.clone());
        out.into_data().iter::<f32>().collect::<Vec<f32>>()
    });
    close(&fused, &ours, "inference logits after the step");
}

/// Mean cross-entropy of `model` (in inference mode) over every image of `split`.
fn split_loss(model: &ResNet, split: &data::Split) -> f32 {
    let order: Vec<usize> = (0..split.len()).collect();
    let (images, labels) = split.batch(&order, &Device::flex());
    let batch = learner::DigitBatch { images, labels };
    model.valid().classify(batch).loss.into_scalar::<f32>()
}

/// An empty folder for one Learner run's checkpoints and metric logs.
fn run_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("clear the previous run's folder");
    }
    dir
}

/// Train the tiny ResNet with burn-train for `epochs`, on the model's device or on `devices`,
/// and check that it learned: the test loss at most half the untrained network's, and one
/// logged validation loss per epoch. Returns the trained model (inference mode) and its folder.
fn fit_digits(name: &str, epochs: usize, devices: Vec<Device>) -> (ResNet, PathBuf) {
    let (train, test) = digits();
    let (train, test) = (Arc::new(train), Arc::new(test));
    let device = Device::flex().autodiff();
    device.seed(4);
    let model = ResNet::new(TINY, &device);
    let untrained = split_loss(&model, &test);
    let dir = run_dir(name);
    let fit = learner::Fit {
        dir: &dir,
        epochs,
        batch_size: 32,
        lr: 1e-2,
        seed: 5,
        devices,
        experiment_log: false,
    };
    let result = learner::fit(model, &train, &test, &fit);
    assert!(
        result.error.is_none(),
        "training failed: {:?}",
        result.error
    );
    assert!(result.interrupted.is_none(), "{:?}", result.interrupted);
    let trained = split_loss(&result.model, &test);
    assert!(
        trained < 0.5 * untrained,
        "test loss {untrained} before training, {trained} after"
    );
    let summary = LearnerSummary::new(&dir, &["Loss"]).expect("the metric logs read back");
    let valid_loss = summary
        .metrics
        .valid
        .iter()
        .find(|metric| metric.name == "Loss")
        .expect("a validation loss was logged");
    assert_eq!(valid_loss.entries.len(), epochs, "{:?}", valid_loss.entries);
    assert!(
        valid_loss
            .entries
            .iter()
            .all(|entry| entry.value.is_finite()),
        "{:?}",
        valid_loss.entries
    );
    (result.model, dir)
}

#[test]
fn burn_train_learns_and_its_checkpoint_reloads() {
    let epochs = 3;
    let (trained, dir) = fit_digits("learner-one-device", epochs, Vec::new());
    let checkpoint = dir.join(format!("checkpoint/model-{epochs}.bpk"));
    let record =
        ModuleRecord::load(&checkpoint).unwrap_or_else(|e| panic!("{}: {e}", checkpoint.display()));
    // A differently initialised network, so only a complete load makes the logits agree.
    let device = Device::flex();
    device.seed(6);
    let reloaded = ResNet::new(TINY, &device).load_record(record);
    let (_, test) = digits();
    let (images, _) = test.batch(&(0..32).collect::<Vec<_>>(), &device);
    let expected: Vec<f32> = trained.forward(images.clone()).into_data().iter().collect();
    let actual: Vec<f32> = reloaded.forward(images).into_data().iter().collect();
    assert_eq!(
        actual, expected,
        "the reloaded checkpoint is another network"
    );
}

#[test]
fn burn_train_learns_data_parallel_on_two_devices() {
    // Flex has one device, named twice: burn-train runs a worker thread per entry, so our ops
    // run concurrently on both, and sums the gradients on the first.
    fit_digits(
        "learner-two-devices",
        2,
        vec![Device::flex(), Device::flex()],
    );
}

/// One training step of the example's network as the example runs it (width 16, one block per
/// stage, a batch of 64 images of 28x28) on the CubeCL device with our kernels pinned, each
/// split GEMM's partial results summed by a second launch: what our launchers start, per
/// kernel, as the table says. The 9 convs' passes are most of it.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn a_training_step_on_the_gpu_launches_what_the_table_says() {
    use burn_convpool::cube_kernels::{OurKernels, SplitSum};

    /// Launches per kernel of one step: the convs' 38 (9 forward passes, 8 input gradients, a
    /// strided one's stride phases in one launch, and 9 weight gradients; each repairs what
    /// padding met in its own launch, a split GEMM in its sum), then the pools' 4.
    const EXPECTED: &[(&str, usize)] = &[
        ("conv_gemm_direct", 1),
        ("conv_gemm_tiled", 23),
        ("conv_weight_direct", 2),
        ("sum_splits", 1),
        ("sum_splits_exact", 11),
        ("pool_backward", 2),
        ("pool_sliding", 1),
        ("pool_whole_plane", 1),
    ];
    let kernels = OurKernels::default().with_split_sum(SplitSum::SecondLaunch);
    assert_step_launches(kernels, EXPECTED);
}

/// [`a_training_step_on_the_gpu_launches_what_the_table_says`] with the tiled GEMMs' cubes
/// summing their own splits (as CUDA, HIP, Metal and Vulkan through SPIR-V do by default):
/// no second launch for them.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
#[test]
fn a_training_step_with_split_sums_handed_off_launches_fewer() {
    use burn_convpool::cube_kernels::{OurKernels, SplitSum};

    /// The convs' 28: one launch per pass, but for the sums of the two direct weight
    /// gradients' splits.
    const EXPECTED: &[(&str, usize)] = &[
        ("conv_gemm_direct", 1),
        ("conv_gemm_tiled", 23),
        ("conv_weight_direct", 2),
        ("sum_splits", 1),
        ("sum_splits_exact", 1),
        ("pool_backward", 2),
        ("pool_sliding", 1),
        ("pool_whole_plane", 1),
    ];
    let kernels = OurKernels::default().with_split_sum(SplitSum::Handoff);
    assert_step_launches(kernels, EXPECTED);
}

/// Run one training step of the example's network with `kernels` pinned and check that our
/// launchers start `expected` (kernel name, launches).
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn assert_step_launches(
    kernels: burn_convpool::cube_kernels::OurKernels,
    expected: &[(&str, usize)],
) {
    use burn::tensor::{Distribution, Int, Tensor, TensorData};
    use burn_convpool::cube_kernels::CubeKernels;
    use burn_convpool::cube_launches::{Launch, record};
    use std::collections::BTreeMap;

    let device = crate::common::gpu().autodiff();
    let config = ResNetConfig {
        in_channels: 1,
        width: 16,
        blocks: 1,
        classes: 10,
    };
    let model = ResNet::new(config, &device);
    let images = Tensor::<4>::random([64, 1, 28, 28], Distribution::Default, &device);
    let labels: Vec<i64> = (0..64).map(|i| i % 10).collect();
    let labels = Tensor::<1, Int>::from_data(TensorData::new(labels, [64]), &device);
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    let _pinned = crate::common::pin(CubeKernels::Ours(kernels));
    let step = || {
        let (_, launches) = record(|| {
            let loss = loss_fn.forward(model.forward(images.clone()), labels.clone());
            let grads = loss.backward();
            device.sync().expect("device sync");
            drop(grads);
        });
        let mut got: BTreeMap<String, usize> = BTreeMap::new();
        for launch in launches {
            let name = match launch {
                Launch::Kernel(name) => name.to_string(),
                other => format!("{other:?}"),
            };
            *got.entry(name).or_default() += 1;
        }
        got
    };
    let expected: BTreeMap<String, usize> = expected
        .iter()
        .map(|&(name, count)| (name.to_string(), count))
        .collect();
    // The record takes every launch on the device while the step runs, and tests that do not
    // pin kernels share it: their launches only add, so the step's own are the fewest of up
    // to three steps.
    let total = |got: &BTreeMap<String, usize>| got.values().sum::<usize>();
    let mut got = step();
    for _ in 0..2 {
        if got == expected {
            break;
        }
        let again = step();
        if total(&again) < total(&got) {
            got = again;
        }
    }
    let total = total(&got);
    assert_eq!(got, expected, "{total} launches");
}
