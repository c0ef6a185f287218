//! Port a PyTorch CNN: load its state_dict (safetensors and `torch.save`) into the same network
//! built from burn-convpool's modules, and compare the logits with PyTorch's.
//!
//! ```sh
//! python3 examples/port_pytorch/make_checkpoint.py   # optional: the files are committed
//! cargo run --release --example port_pytorch
//! ```

mod checkpoint;
mod model;

use burn::tensor::Device;
use checkpoint::{Expected, Format};
use model::PortNet;

fn main() -> Result<(), String> {
    // PyTorch's logits came from its training mode (the batch norm normalizes with the batch's
    // statistics), which Burn's BatchNorm runs on an autodiff device.
    let device = Device::flex().autodiff();
    let expected = Expected::read()?;
    for format in [Format::Safetensors, Format::Pytorch] {
        let mut model = PortNet::new(&device);
        let result = checkpoint::load(&mut model, format)?;
        println!(
            "{format:?}: {} tensors loaded; keys without a parameter: {:?}; parameters without a key: {:?}",
            result.applied.len(),
            result.unused,
            result
                .missing
                .iter()
                .map(|(path, _)| path)
                .collect::<Vec<_>>()
        );
        let x = expected.x.tensor::<4>(&device).require_grad();
        let logits = model.forward(x.clone());
        let grads = (logits.clone() * expected.grad_output.tensor::<2>(&device))
            .sum()
            .backward();
        let logits: Vec<f32> = logits.into_data().iter().collect();
        let x_grad: Vec<f32> = x.grad(&grads).unwrap().into_data().iter().collect();
        println!(
            "{format:?}: logits {:?}..., largest difference from PyTorch's: logits {:.1e}, input gradient {:.1e} (relative)",
            &logits[..3],
            expected.logits.relative_error(&logits),
            expected.grads["x"].relative_error(&x_grad),
        );
    }
    Ok(())
}
