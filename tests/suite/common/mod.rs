//! Shared test machinery: the golden-case format of `tests/fixtures/`, tensor conversion, and
//! closeness checks whose failures name the worst element.

pub mod conv_bn_act_cases;
pub mod conv_cases;
pub mod fuse_cases;
pub mod pool_cases;

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Tensor, TensorData};
use serde::Deserialize;
use serde_json::Value;

/// One JSON number, or PyTorch's spelling of a non-finite one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Num {
    /// A finite number.
    F(f64),
    /// `"NaN"`, `"Infinity"` or `"-Infinity"`.
    S(String),
}

impl Num {
    pub fn value(&self) -> f64 {
        match self {
            Num::F(v) => *v,
            Num::S(s) => match s.as_str() {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                other => panic!("unknown number spelling {other:?}"),
            },
        }
    }
}

/// A stored tensor: `{"shape": [..], "dtype": "f32" | "i64", "data": [..]}`.
#[derive(Debug, Clone, Deserialize)]
pub struct JsonTensor {
    pub shape: Vec<usize>,
    pub dtype: String,
    pub data: Vec<Num>,
}

impl JsonTensor {
    pub fn values(&self) -> Vec<f64> {
        self.data.iter().map(Num::value).collect()
    }

    /// As a float tensor of rank `D`, each value rounded to f32 as the README prescribes; a
    /// tensor stored as another dtype (indices) is a fixture error.
    pub fn float<const D: usize>(&self, device: &Device) -> Tensor<D> {
        assert_eq!(self.dtype, "f32", "a float tensor stored as {}", self.dtype);
        let values: Vec<f32> = self.values().iter().map(|&v| v as f32).collect();
        Tensor::from_data(TensorData::new(values, self.shape.clone()), device)
    }
}

/// One golden case.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub name: String,
    pub op: String,
    pub params: Value,
    #[serde(default)]
    pub inputs: std::collections::BTreeMap<String, JsonTensor>,
    #[serde(default)]
    pub outputs: std::collections::BTreeMap<String, JsonTensor>,
    #[serde(default)]
    pub grads: std::collections::BTreeMap<String, JsonTensor>,
}

impl Case {
    pub fn input(&self, name: &str) -> &JsonTensor {
        self.inputs
            .get(name)
            .unwrap_or_else(|| panic!("case {} has no input {name:?}", self.name))
    }

    /// A per-axis parameter, e.g. `stride`, as `[usize; N]`.
    pub fn axes<const N: usize>(&self, key: &str) -> [usize; N] {
        let list = self.params[key]
            .as_array()
            .unwrap_or_else(|| panic!("case {}: param {key:?} is not a list", self.name));
        assert_eq!(
            list.len(),
            N,
            "case {}: param {key:?} has {} entries",
            self.name,
            list.len()
        );
        core::array::from_fn(|i| list[i].as_u64().expect("integer entry") as usize)
    }

    pub fn usize(&self, key: &str) -> usize {
        self.params[key].as_u64().expect("integer param") as usize
    }

    pub fn flag(&self, key: &str) -> bool {
        self.params[key].as_bool().unwrap_or(false)
    }
}

/// A case file: `{"op": .., "cases": [..]}`.
#[derive(Debug, Deserialize)]
pub struct CaseFile {
    pub op: String,
    pub cases: Vec<Case>,
}

/// The folder of the golden case files.
fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The case file `tests/fixtures/<stem>.json`.
pub fn case_file(stem: &str) -> CaseFile {
    let path = fixtures_dir().join(format!("{stem}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{}: not a case file: {e}", path.display()))
}

/// The stems of the case files under `tests/fixtures/`, sorted (files without a `cases` list,
/// like `index.json`, are not case files); [`case_file`] reads each.
pub fn case_file_stems() -> Vec<String> {
    let dir = fixtures_dir();
    let mut stems: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter(|path| {
            let text = std::fs::read_to_string(path).expect("readable fixture");
            let json: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: invalid JSON: {e}", path.display()));
            json.get("cases").is_some()
        })
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

/// How close a value must be: `|actual - expected| <= atol + rtol * |expected|`; NaN must match
/// NaN and infinities must match exactly.
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Tolerance {
    pub const EXACT: Self = Self {
        atol: 0.0,
        rtol: 0.0,
    };

    pub fn new(atol: f64, rtol: f64) -> Self {
        Self { atol, rtol }
    }
}

/// Compare `actual` with `expected`; on failure the error names what, the worst element and the
/// shape.
pub fn check_close(
    what: &str,
    actual: &[f64],
    actual_shape: &[usize],
    expected: &JsonTensor,
    tolerance: Tolerance,
) -> Result<(), String> {
    if actual_shape != expected.shape.as_slice() {
        return Err(format!(
            "{what}: shape {actual_shape:?}, expected {:?}",
            expected.shape
        ));
    }
    // Stored values are f32 written as shortest decimals: round them back to f32 first.
    let expected: Vec<f64> = expected.values().iter().map(|&v| v as f32 as f64).collect();
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&a, &e)) in actual.iter().zip(&expected).enumerate() {
        let excess = if e.is_nan() || a.is_nan() {
            if e.is_nan() && a.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else if e.is_infinite() || a.is_infinite() {
            if a == e { 0.0 } else { f64::INFINITY }
        } else {
            (a - e).abs() - (tolerance.atol + tolerance.rtol * e.abs())
        };
        if excess > 0.0 && worst.is_none_or(|(_, w)| excess > w) {
            worst = Some((i, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "{what}: worst element {i} is {}, expected {} (atol {}, rtol {})",
            actual[i], expected[i], tolerance.atol, tolerance.rtol
        )),
    }
}

/// Panic unless `actual` has `expected`'s dims and each value is within `tolerance` of it.
pub fn assert_tensors_close<const D: usize>(
    actual: Tensor<D>,
    expected: Tensor<D>,
    tolerance: Tolerance,
    what: &str,
) {
    assert_eq!(actual.dims(), expected.dims(), "{what}: dims");
    let actual: Vec<f32> = actual.into_data().try_to_vec().unwrap();
    let expected: Vec<f32> = expected.into_data().try_to_vec().unwrap();
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        let bound = tolerance.atol + tolerance.rtol * f64::from(e.abs());
        assert!(
            f64::from((a - e).abs()) <= bound,
            "{what}: element {i} is {a}, expected {e}"
        );
    }
}

/// A float tensor's values and dims, for [`check_close`].
pub fn values<const D: usize>(tensor: Tensor<D>) -> (Vec<f64>, Vec<usize>) {
    let dims = tensor.dims().to_vec();
    let data = tensor.into_data().convert::<f64>();
    (data.try_to_vec::<f64>().expect("f64 data"), dims)
}

/// The CubeCL device of the GPU tests: wgpu (WGSL; lavapipe in CI); in a build without
/// `wgpu`, CUDA (CUDA C++ through NVRTC), else Vulkan (SPIR-V), which run only on a GPU.
#[cfg(feature = "wgpu")]
pub fn gpu() -> Device {
    Device::wgpu(Default::default())
}

/// The CubeCL device of the GPU tests (see the `wgpu` build's).
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub fn gpu() -> Device {
    Device::cuda(0)
}

/// The CubeCL device of the GPU tests (see the `wgpu` build's).
#[cfg(all(feature = "vulkan", not(any(feature = "wgpu", feature = "cuda"))))]
pub fn gpu() -> Device {
    Device::vulkan(Default::default())
}

/// Our kernels' settings the CubeCL tests pin in turn. Together they run every schedule the
/// tuner may pick on some device: the tiled GEMM single- and double-buffered, its split-k
/// sums in a second launch (WGSL's) and handed off to its own cubes (every other runtime's),
/// the direct
/// schedule packed and spread, the untiled schedules on every shape, and the pools packed and
/// spread (lavapipe's tuner would keep only the packed launches); and cubek's plane GEMM
/// routine over our layouts with interleaved tiles: the layouts and routine its tensor-core
/// tiles run on a GPU (a pass that adds a bias runs the unit routine with register tiles).
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
pub const OUR_KERNELS: [(&str, burn_convpool::cube_kernels::OurKernels); 4] = {
    use burn_convpool::cube_kernels::{
        Buffering, ConvSchedule, GemmTile, OurKernels, Packing, SplitSum,
    };
    let default = OurKernels::DEFAULT;
    [
        (
            "ours single-buffered, packed",
            OurKernels {
                conv: ConvSchedule::Tiled(Buffering::Single),
                ..default
            },
        ),
        (
            "ours double-buffered, spread, split sums handed off",
            OurKernels {
                packing: Packing::Spread,
                split_sum: SplitSum::Handoff,
                ..default
            },
        ),
        (
            "ours untiled",
            OurKernels {
                conv: ConvSchedule::Untiled,
                ..default
            },
        ),
        (
            "cubek's GEMM, plane routine, interleaved tiles",
            OurKernels {
                conv: ConvSchedule::Gemm(GemmTile::Interleaved),
                ..default
            },
        ),
    ]
};

/// While alive, [`gpu`] runs the kernels it was made with; dropped, the device's default.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
pub struct Pinned {
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// Pin `kernels` on [`gpu`]. Tests that pin take turns, and each reads its results before
/// its guard drops, so every operation it queued ran with its kernels (Burn executes lazily).
/// The others run whatever the device holds: every setting computes the definition within f32
/// rounding, which is what they check.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
pub fn pin(kernels: burn_convpool::cube_kernels::CubeKernels) -> Pinned {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A second pin on the same thread would wait for its own turn forever.
    assert!(
        !HOLDS_TURN.get(),
        "pin called while this thread's earlier pin is alive"
    );
    let turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    HOLDS_TURN.set(true);
    burn_convpool::cube_kernels::set_cube_kernels(&gpu(), kernels);
    Pinned { _turn: turn }
}

#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
thread_local! {
    /// Whether this thread holds [`pin`]'s turn.
    static HOLDS_TURN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `check` once per setting of [`OUR_KERNELS`], each pinned on [`gpu`] while it runs;
/// `check` gets the setting's name for its messages.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
pub fn each_pinned(check: impl FnMut(&str)) {
    pin_each(OUR_KERNELS, check);
}

/// [`each_pinned`] for pools, which read only a setting's packing: the first setting of each
/// packing, so a pool runs each of its launches once.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
pub fn each_packing_pinned(check: impl FnMut(&str)) {
    let first_of_its_packing = |i: usize| {
        let packing = OUR_KERNELS[i].1.packing;
        OUR_KERNELS[..i]
            .iter()
            .all(|(_, earlier)| earlier.packing != packing)
    };
    pin_each(
        (0..OUR_KERNELS.len())
            .filter(|&i| first_of_its_packing(i))
            .map(|i| OUR_KERNELS[i]),
        check,
    );
}

/// Run `check` once per named setting of `settings`, each pinned on [`gpu`] while it runs.
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
fn pin_each(
    settings: impl IntoIterator<Item = (&'static str, burn_convpool::cube_kernels::OurKernels)>,
    mut check: impl FnMut(&str),
) {
    for (name, ours) in settings {
        let _pinned = pin(burn_convpool::cube_kernels::CubeKernels::Ours(ours));
        check(name);
    }
}

#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
impl Drop for Pinned {
    fn drop(&mut self) {
        use burn_convpool::cube_kernels::{CubeKernels, set_cube_kernels};
        set_cube_kernels(&gpu(), CubeKernels::default());
        HOLDS_TURN.set(false);
    }
}

/// The devices each golden case runs on: Flex with autodiff, without and with gradient
/// checkpointing. With the `ndarray` feature, NdArray too; with `wgpu`, `vulkan` or `cuda`,
/// the CubeCL kernels on [`gpu`] (through Fusion), without and with checkpointing.
#[allow(deprecated)]
pub fn autodiff_devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut devices = vec![
        ("flex+autodiff", Device::flex().autodiff()),
        (
            "flex+autodiff+checkpointing",
            Device::flex().autodiff().gradient_checkpointing(),
        ),
    ];
    #[cfg(feature = "ndarray")]
    devices.push(("ndarray+autodiff", Device::ndarray().autodiff()));
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
    devices.extend([
        ("cube+autodiff", gpu().autodiff()),
        (
            "cube+autodiff+checkpointing",
            gpu().autodiff().gradient_checkpointing(),
        ),
    ]);
    devices
}

/// An f64 tensor (for finite-difference checks, which need the precision).
pub fn f64_tensor<const D: usize>(values: &[f64], dims: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), dims),
        (device, burn::tensor::DType::F64),
    )
}

/// A tensor's values as f64.
pub fn f64_values<const D: usize>(tensor: Tensor<D>) -> Vec<f64> {
    tensor.into_data().iter::<f64>().collect()
}

/// Step of the central differences in the gradient checks.
pub const FD_EPS: f64 = 1e-6;

/// Assert that `analytic`, the gradient autodiff gave for `values`, matches central differences
/// of `loss` in every element (relative error below 1e-6): the finite-difference loop of every
/// gradient check. `what` names the op and the input in a failure.
pub fn assert_central_differences(
    what: &str,
    values: &[f64],
    analytic: &[f64],
    loss: impl Fn(&[f64]) -> f64,
) {
    assert_eq!(values.len(), analytic.len(), "{what}: gradient length");
    for i in 0..values.len() {
        let (mut plus, mut minus) = (values.to_vec(), values.to_vec());
        plus[i] += FD_EPS;
        minus[i] -= FD_EPS;
        let numeric = (loss(&plus) - loss(&minus)) / (2.0 * FD_EPS);
        let error = (numeric - analytic[i]).abs() / (1.0 + numeric.abs());
        assert!(
            error < 1e-6,
            "{what}[{i}]: analytic {} vs numeric {numeric}",
            analytic[i]
        );
    }
}

/// A tiny deterministic generator for test data (no `rand` dependency needed).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self(
            seed.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    }

    /// Uniform in `[-1, 1)`.
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    pub fn values(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}
