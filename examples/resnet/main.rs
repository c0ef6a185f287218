//! Train a small ResNet on real handwritten digits, built from `burn_convpool::nn` modules.
//!
//! ```sh
//! cargo run --release --example resnet                        # 8x8 digits on the CPU (Flex)
//! cargo run --release --example resnet -- --dataset mnist10k  # 28x28 MNIST subset
//! cargo run --release --example resnet -- --ops builtin       # same network on burn::nn
//! cargo run --release --features wgpu --example resnet -- --device wgpu
//! cargo run --release --example resnet -- --trainer learner   # burn-train's Learner
//! ```
//!
//! Prints the train loss, test accuracy and images/s of every epoch, saves the model with Burn's
//! recorder (`<out>/resnet-<dataset>-<ops>.bpk`) and plots the curves (`<out>/...png`). With
//! `--trainer learner`, burn-train runs the epochs instead (same data, Adam and cosine decay),
//! with its metrics, summary and per-epoch checkpoints under `<out>/learner/`.

mod data;
mod learner;
mod model;
mod plot;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};

use model::{ResNet, ResNetConfig};

/// Which operators the network runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ops {
    /// `burn_convpool::nn`.
    Ours,
    /// `burn::nn`, Burn's built-in modules and ops.
    Builtin,
    /// `burn_convpool::nn`, each conv run with its batch norm and ReLU as one block.
    Fused,
}

/// Who runs the epochs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trainer {
    /// This file's loop: a progress bar, images/s per epoch and a plot.
    Loop,
    /// burn-train's `SupervisedTraining` (`learner.rs`).
    Learner,
}

/// What the Rayon workers do between the CPU ops of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workers {
    /// Spin for work (`cpu_kernels::with_spinning_workers`), as PyTorch's OpenMP threads do.
    Spin,
    /// Fall asleep, Rayon's default: each op's loop waits for them to wake.
    Sleep,
}

struct Args {
    dataset: String,
    workers: Workers,
    ops: Ops,
    trainer: Trainer,
    device: String,
    /// On a CubeCL device: our kernels tuned per shape against Burn's (`tuned`), or ours only.
    kernels: String,
    /// On a CubeCL device: f32 convolutions exactly (`exact`), or on TF32 tensor cores where
    /// the device has them (`tf32`, PyTorch's cuDNN default).
    precision: String,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    width: usize,
    blocks: usize,
    seed: u64,
    out: PathBuf,
}

const USAGE: &str = "usage: resnet [--dataset digits|mnist10k] [--ops ours|builtin|fused] \
[--workers spin|sleep] [--trainer loop|learner] [--device flex|wgpu|vulkan|cuda] [--kernels tuned|ours] [--precision exact|tf32] [--epochs N] [--batch-size N] [--lr X] [--width N] [--blocks N] \
[--seed N] [--out DIR]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dataset: "digits".into(),
        ops: Ops::Ours,
        workers: Workers::Spin,
        trainer: Trainer::Loop,
        device: "flex".into(),
        kernels: "tuned".into(),
        precision: "exact".into(),
        epochs: 0,
        batch_size: 64,
        lr: 3e-3,
        width: 16,
        blocks: 1,
        seed: 42,
        out: PathBuf::from("target/resnet"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--dataset" => args.dataset = value,
            "--ops" => {
                args.ops = match value.as_str() {
                    "ours" => Ops::Ours,
                    "builtin" => Ops::Builtin,
                    "fused" => Ops::Fused,
                    other => {
                        return Err(format!("--ops {other}: expected ours, builtin or fused"));
                    }
                }
            }
            "--workers" => {
                args.workers = match value.as_str() {
                    "spin" => Workers::Spin,
                    "sleep" => Workers::Sleep,
                    other => return Err(format!("--workers {other}: expected spin or sleep")),
                }
            }
            "--trainer" => {
                args.trainer = match value.as_str() {
                    "loop" => Trainer::Loop,
                    "learner" => Trainer::Learner,
                    other => return Err(format!("--trainer {other}: expected loop or learner")),
                }
            }
            "--device" => args.device = value,
            "--kernels" => args.kernels = value,
            "--precision" => args.precision = value,
            "--epochs" => args.epochs = number(&value)?,
            "--batch-size" => args.batch_size = number(&value)?,
            "--width" => args.width = number(&value)?,
            "--blocks" => args.blocks = number(&value)?,
            "--seed" => args.seed = number(&value)? as u64,
            "--lr" => args.lr = value.parse().map_err(|e| format!("--lr {value}: {e}"))?,
            "--out" => args.out = PathBuf::from(value),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if args.epochs == 0 {
        args.epochs = if args.dataset == "mnist10k" { 4 } else { 15 };
    }
    Ok(args)
}

/// Pin the kernels `--kernels` names on a CubeCL device (`tuned` leaves the default).
fn pin_kernels(device: &Device, kernels: &str) -> Result<(), String> {
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    {
        use burn_convpool::cube_kernels::{CubeKernels, OurKernels, set_cube_kernels};
        let is_cube = !matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_));
        match kernels {
            "tuned" => Ok(()),
            "ours" if is_cube => {
                set_cube_kernels(device, CubeKernels::Ours(OurKernels::default()));
                Ok(())
            }
            "ours" => Err("--kernels ours: only a CubeCL device has a choice".into()),
            other => Err(format!("--kernels {other}: expected tuned or ours")),
        }
    }
    #[cfg(not(any(feature = "wgpu", feature = "vulkan", feature = "cuda")))]
    {
        let _ = device;
        match kernels {
            "tuned" => Ok(()),
            other => Err(format!(
                "--kernels {other}: only a CubeCL device (--features wgpu|vulkan|cuda) has a choice"
            )),
        }
    }
}

/// Let a CubeCL device's convolutions compute at the precision `--precision` names (`exact`
/// leaves the default; a CPU device always computes exactly).
fn set_precision(device: &Device, precision: &str) -> Result<(), String> {
    let is_cube = !matches!(device.as_dispatch(), burn::backend::DispatchDevice::Flex(_));
    match precision {
        "exact" => Ok(()),
        "tf32" if is_cube => {
            #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
            burn_convpool::cube_kernels::set_conv_precision(
                device,
                burn_convpool::cube_kernels::ConvPrecision::Tf32,
            );
            Ok(())
        }
        "tf32" => Err("--precision tf32: only a CubeCL device rounds to TF32".into()),
        other => Err(format!("--precision {other}: expected exact or tf32")),
    }
}

fn device(name: &str) -> Result<Device, String> {
    match name {
        "flex" | "cpu" => Ok(Device::flex()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Device::wgpu(Default::default())),
        #[cfg(feature = "vulkan")]
        "vulkan" => Ok(Device::vulkan(Default::default())),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Device::cuda(0)),
        other => Err(format!(
            "--device {other}: not available in this build (flex always; wgpu, vulkan and cuda \
             with --features wgpu|vulkan|cuda)"
        )),
    }
}

/// The learning rate `progress` (0 to 1) through training: cosine decay from `peak` to zero,
/// so the last epochs settle instead of bouncing between minima.
fn cosine(peak: f64, progress: f64) -> f64 {
    0.5 * peak * (1.0 + (std::f64::consts::PI * progress).cos())
}

/// Top-1 accuracy in percent, in inference mode (batchnorm running statistics).
fn evaluate(model: &ResNet, split: &data::Split, batch_size: usize, device: &Device) -> f32 {
    let model = model.valid();
    let order: Vec<usize> = (0..split.len()).collect();
    let mut correct = 0;
    for chunk in order.chunks(batch_size) {
        let (images, labels) = split.batch(chunk, device);
        let predicted = model.forward(images).argmax(1).flatten::<1>(0, 1);
        correct += predicted.equal(labels).int().sum().into_scalar::<i64>() as usize;
    }
    100.0 * correct as f32 / split.len() as f32
}

fn main() {
    // Train on a worker of a Rayon pool: the CPU kernels' parallel loops then start on the
    // training thread, and a sleeping worker joins when it wakes. Called from outside a pool,
    // every loop waits for a worker to wake before any of it runs (examples/resnet/README.md).
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .unwrap_or_else(|e| panic!("a Rayon pool: {e}"));
    pool.install(train);
}

/// Parse the arguments and [`run`], with the Rayon workers spinning unless told otherwise.
fn train() {
    let args = parse_args().unwrap_or_else(|message| {
        eprintln!("{message}");
        std::process::exit(2);
    });
    match args.workers {
        Workers::Spin => burn_convpool::cpu_kernels::with_spinning_workers(|| run(args)),
        Workers::Sleep => run(args),
    }
}

/// Load the data, build the network, train it and report, as `args` say.
fn run(args: Args) {
    let (dir, scale) = match args.dataset.as_str() {
        "digits" => ("digits", 16.0),
        "mnist10k" => ("mnist10k", 255.0),
        other => {
            eprintln!("--dataset {other}: expected digits or mnist10k");
            std::process::exit(2);
        }
    };
    let data_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data")
        .join(dir);
    let (train, test) = data::load(&data_dir, scale).unwrap_or_else(|e| panic!("{e}"));
    let test = Arc::new(test);
    let base = device(&args.device).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    pin_kernels(&base, &args.kernels)
        .and_then(|()| set_precision(&base, &args.precision))
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2);
        });
    base.seed(args.seed);
    let device = base.clone().autodiff();
    let ops_name = match args.ops {
        Ops::Ours => "ours",
        Ops::Builtin => "builtin",
        Ops::Fused => "fused",
    };
    let config = ResNetConfig {
        in_channels: 1,
        width: args.width,
        blocks: args.blocks,
        classes: 10,
    };
    let mut model = ResNet::new(config, &device);
    match args.ops {
        Ops::Ours => {}
        Ops::Builtin => model = model.into_builtin(),
        Ops::Fused => model = model.into_fused(),
    }
    println!(
        "{} ({} train / {} test, {}x{}), ops: {ops_name}, device: {}, {} parameters, {} epochs of \
         batch {} with Adam, lr {} with cosine decay",
        args.dataset,
        train.len(),
        test.len(),
        train.height,
        train.width,
        args.device,
        model.num_params(),
        args.epochs,
        args.batch_size,
        args.lr,
    );
    let stem = format!("resnet-{}-{ops_name}", args.dataset);
    std::fs::create_dir_all(&args.out).expect("create the output directory");
    let model = match args.trainer {
        Trainer::Loop => {
            let title = format!(
                "ResNet on {} ({ops_name} ops, {})",
                args.dataset, args.device
            );
            let (model, history) = train_loop(model, &args, &train, &test, &device, title);
            let plot_path = args.out.join(format!("{stem}.png"));
            plot::write_png(&history, &plot_path).expect("write the plot");
            println!("plotted {}", plot_path.display());
            model
        }
        Trainer::Learner => {
            let dir = args.out.join("learner");
            let fit = learner::Fit {
                dir: &dir,
                epochs: args.epochs,
                batch_size: args.batch_size,
                lr: args.lr,
                seed: args.seed,
                devices: Vec::new(),
                experiment_log: true,
            };
            let start = Instant::now();
            let result = learner::fit(model, &Arc::new(train), &test, &fit);
            if let Some(error) = result.error {
                eprintln!("training failed: {error}");
                std::process::exit(1);
            }
            let accuracy = evaluate(&result.model, &test, 256, &base);
            println!(
                "trained in {:.1} s, test accuracy {accuracy:.2}%; metric logs and checkpoints in {}",
                start.elapsed().as_secs_f64(),
                dir.display()
            );
            result.model
        }
    };
    let model_path = args.out.join(format!("{stem}.bpk"));
    model
        .valid()
        .save_file(&model_path)
        .expect("save the model");
    println!("saved {}", model_path.display());
}

/// Run the epochs with this file's loop: Adam with cosine decay, the train loss and images/s of
/// every epoch and its test accuracy. Returns the trained model and the curves to plot.
fn train_loop(
    mut model: ResNet,
    args: &Args,
    train: &data::Split,
    test: &data::Split,
    device: &Device,
    title: String,
) -> (ResNet, plot::History) {
    let mut optimizer = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let mut history = plot::History {
        title,
        step_loss: Vec::new(),
        epoch_loss: Vec::new(),
        test_accuracy: Vec::new(),
    };
    let steps = train.len().div_ceil(args.batch_size);
    let run_start = Instant::now();
    for epoch in 1..=args.epochs {
        let order = data::shuffled(train.len(), args.seed + epoch as u64);
        let bar = ProgressBar::new(steps as u64).with_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} {msg}")
                .expect("valid template"),
        );
        bar.set_prefix(format!("{epoch}/{}", args.epochs));
        let start = Instant::now();
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        for (step, chunk) in order.chunks(args.batch_size).enumerate() {
            let (images, labels) = train.batch(chunk, device);
            let loss = loss_fn.forward(model.forward(images), labels);
            let loss_value = loss.clone().into_scalar::<f32>();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let progress = ((epoch - 1) * steps + step) as f64 / (args.epochs * steps) as f64;
            model = optimizer.step(cosine(args.lr, progress), model, grads);
            loss_sum += loss_value as f64 * chunk.len() as f64;
            seen += chunk.len();
            let x = epoch as f32 - 1.0 + (step + 1) as f32 / steps as f32;
            history.step_loss.push((x, loss_value));
            let rate = seen as f64 / start.elapsed().as_secs_f64();
            bar.set_message(format!("loss {loss_value:.4} | {rate:.0} img/s"));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let seconds = start.elapsed().as_secs_f64();
        let train_loss = (loss_sum / seen as f64) as f32;
        let accuracy = evaluate(&model, test, 256, &device.clone().inner());
        history.epoch_loss.push((epoch as f32, train_loss));
        history.test_accuracy.push((epoch as f32, accuracy));
        println!(
            "epoch {epoch:>2}: train loss {train_loss:.4}, test accuracy {accuracy:.2}%, \
             {:.0} images/s ({seconds:.1} s)",
            seen as f64 / seconds
        );
    }
    println!("trained in {:.1} s", run_start.elapsed().as_secs_f64());
    (model, history)
}
