//! The files `make_checkpoint.py` writes: PyTorch's weights, loaded into [`PortNet`] with
//! burn-store, and PyTorch's input, logits and gradients to compare with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::store::{
    ApplyResult, ModuleSnapshot, ModuleStore, PyTorchToBurnAdapter, PytorchStore, SafetensorsStore,
};
use burn::tensor::{Device, Tensor, TensorData};
use serde::Deserialize;

use super::model::PortNet;

/// PyTorch names the classifier `fc`; `PortNet` calls it `head`.
const REMAP: (&str, &str) = (r"^fc\.", "head.");

/// The folder of the example's files.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/port_pytorch")
}

/// The two files PyTorch users have: a safetensors state_dict and a `torch.save` one.
#[derive(Debug, Clone, Copy)]
pub enum Format {
    /// `portnet.safetensors`, through `SafetensorsStore` and `PyTorchToBurnAdapter`.
    Safetensors,
    /// `portnet.pt`, through `PytorchStore` (which adapts PyTorch's layouts itself).
    Pytorch,
}

/// Load PyTorch's weights in `format` into `model`; the result lists the keys that named no
/// parameter (`unused`) and the parameters no key named (`missing`).
pub fn load(model: &mut PortNet, format: Format) -> Result<ApplyResult, String> {
    let (pattern, replacement) = REMAP;
    let result = match format {
        Format::Safetensors => apply(
            model,
            SafetensorsStore::from_file(dir().join("portnet.safetensors"))
                .with_from_adapter(PyTorchToBurnAdapter)
                .with_key_remapping(pattern, replacement),
        ),
        Format::Pytorch => apply(
            model,
            PytorchStore::from_file(dir().join("portnet.pt"))
                .with_key_remapping(pattern, replacement),
        ),
    };
    result.map_err(|error| format!("loading {format:?}: {error}"))
}

/// `store`'s tensors loaded into `model`.
fn apply<S: ModuleStore>(model: &mut PortNet, mut store: S) -> Result<ApplyResult, String> {
    model
        .load_from(&mut store)
        .map_err(|error| error.to_string())
}

/// A tensor as `make_checkpoint.py` stores it: dims and row-major f64 values.
#[derive(Debug, Deserialize)]
pub struct Values {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Values {
    /// The values as an f32 tensor of rank `D` on `device`.
    pub fn tensor<const D: usize>(&self, device: &Device) -> Tensor<D> {
        let data: Vec<f32> = self.data.iter().map(|&value| value as f32).collect();
        Tensor::from_data(TensorData::new(data, self.shape.clone()), device)
    }

    /// The largest difference from `actual`, relative to the largest magnitude here (infinite
    /// if `actual` has another length or a value that is not finite).
    pub fn relative_error(&self, actual: &[f32]) -> f64 {
        if actual.len() != self.data.len() || actual.iter().any(|value| !value.is_finite()) {
            return f64::INFINITY;
        }
        let scale = self
            .data
            .iter()
            .fold(0.0f64, |max, value| max.max(value.abs()));
        let worst = self
            .data
            .iter()
            .zip(actual)
            .fold(0.0f64, |max, (&e, &a)| max.max((f64::from(a) - e).abs()));
        worst / scale.max(f64::MIN_POSITIVE)
    }
}

/// What PyTorch computed: logits of `x` and the gradients of `sum(logits * grad_output)`, keyed
/// `x` and by state_dict name.
#[derive(Debug, Deserialize)]
pub struct Expected {
    pub x: Values,
    pub grad_output: Values,
    pub logits: Values,
    pub grads: BTreeMap<String, Values>,
}

impl Expected {
    /// `portnet.json`.
    pub fn read() -> Result<Self, String> {
        let path = dir().join("portnet.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))
    }
}
