//! `benches/pytorch.json`, written by `benches/pytorch_bench.py`: PyTorch's time for each row
//! of the catalogue, on the CPU or on CUDA.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Deserialize)]
pub struct PyTorchResults {
    pub torch_version: String,
    pub device: String,
    pub device_name: String,
    /// `{family}/{case}/{pass}` to mean seconds (the fastest process's).
    pub results: BTreeMap<String, f64>,
    /// Separate processes that timed every row (1 for files written before the script ran
    /// several).
    #[serde(default = "one_process")]
    pub processes: usize,
    /// Per row, the slowest process's time over the fastest's.
    #[serde(default)]
    pub spread: BTreeMap<String, f64>,
}

fn one_process() -> usize {
    1
}

impl PyTorchResults {
    /// The time and the spread of row `key` for our `device`'s rows: PyTorch's CPU times go
    /// with Flex, its CUDA times with the GPU runtimes (CUDA, and Vulkan, which only runs on a
    /// real GPU).
    pub fn for_device(&self, device: &str, key: &str) -> (Option<f64>, Option<f64>) {
        let same = matches!(
            (self.device.as_str(), device),
            ("cpu", "flex") | ("cuda", "cuda" | "vulkan")
        );
        if !same {
            return (None, None);
        }
        (
            self.results.get(key).copied(),
            self.spread.get(key).copied(),
        )
    }
}
