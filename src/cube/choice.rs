//! Which kernels a CubeCL device runs: tuned per shape (the default), or pinned.
//!
//! With the `autotune` feature each convolution pass is timed once per shape bucket and device
//! between our schedules and Burn's own kernels, and each pool launch between packed and spread
//! work; the winner is then fixed for the process. Timings differ between processes, so two
//! processes may pick different kernels, whose sums may round differently. Pin the kernels to
//! reproduce results bitwise across processes, to debug one kernel, or to compare them:
//!
//! ```no_run
//! # #[cfg(feature = "wgpu")]
//! # {
//! use burn::tensor::Device;
//! use burn_convpool::cube_kernels::{ConvSchedule, CubeKernels, OurKernels, set_cube_kernels};
//!
//! let device = Device::wgpu(Default::default());
//! set_cube_kernels(&device, CubeKernels::Ours(OurKernels::default()));
//! set_cube_kernels(
//!     &device,
//!     CubeKernels::Ours(OurKernels::default().with_conv(ConvSchedule::Untiled)),
//! );
//! # }
//! ```
//!
//! The choice is read when an operation executes. Burn queues operations lazily, so set it
//! before queuing the work it should apply to, and read that work's results (or sync the
//! device) before changing it again.
//!
//! Whichever kernel wins, a tuned pass computes f32 at the device's [`ConvPrecision`]: exactly
//! unless [`set_conv_precision`] allows TF32, so a timing never changes precision.

use burn::tensor::Device;
use burn_cubecl::CubeDevice;

use super::per_device::PerDevice;
use super::tensor::MAX_CUBES_PER_DIM;

pub use super::precision::{ConvPrecision, conv_precision, set_conv_precision};

/// The kernels a CubeCL device runs for convolutions and pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CubeKernels {
    /// Each convolution pass tuned per shape between [`OurKernels`]' schedules and Burn's own
    /// kernels, and each pool launch between packed and spread work (the default with the
    /// `autotune` feature; without it, `Ours(OurKernels::default())`).
    Tuned,
    /// Our kernels only, as given.
    Ours(OurKernels),
    /// Burn's own convolution kernels wherever they accept the geometry, called as Burn's own
    /// autodiff calls them (`conv_data_backward` for an input gradient), ours elsewhere; pools
    /// as with `Tuned`. They compute at Burn's precision whatever [`ConvPrecision`] says:
    /// on a device with TF32 tensor cores, f32 rounded to TF32; f16 and bf16 summed in their
    /// own type by Burn's direct kernel.
    Burn,
}

impl Default for CubeKernels {
    fn default() -> Self {
        if cfg!(feature = "autotune") {
            Self::Tuned
        } else {
            Self::Ours(OurKernels::default())
        }
    }
}

/// Our kernels' settings. The tiled and untiled schedules add the same products in the same
/// order, so every combination of them computes the same values (only global pooling's sums
/// round differently between packed and spread); cubek's GEMM ([`ConvSchedule::Gemm`]) sums
/// in its own order, within f32 rounding of theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OurKernels {
    /// The schedule of each convolution pass.
    pub conv: ConvSchedule,
    /// How pool kernels and the direct convolution schedule share work among units.
    pub packing: Packing,
    /// Most cubes one launch of the tiled convolution puts along a grid dimension: its row
    /// tiles, and an input gradient's stride phases times groups times splits (at least one
    /// phase's); more run as several launches. The default is what a launch grid holds
    /// ([`Self::MAX_TILES_PER_LAUNCH`]); lower it to run the chunked launches on small tensors.
    pub max_tiles_per_launch: usize,
    /// Who sums a split-k GEMM's partial results.
    pub split_sum: SplitSum,
}

impl OurKernels {
    /// Most cubes a launch grid holds along one dimension on every runtime (WebGPU's minimum
    /// limit), the default [`max_tiles_per_launch`](Self::max_tiles_per_launch).
    pub const MAX_TILES_PER_LAUNCH: usize = MAX_CUBES_PER_DIM;

    /// Tiled double-buffered where the shape suits it, packed, full-sized launches, split-k
    /// sums handed off where the runtime allows ([`SplitSum::Auto`]).
    pub const DEFAULT: Self = Self {
        conv: ConvSchedule::Tiled(Buffering::Double),
        packing: Packing::Packed,
        max_tiles_per_launch: Self::MAX_TILES_PER_LAUNCH,
        split_sum: SplitSum::Auto,
    };

    /// With the convolution schedule `conv`.
    pub fn with_conv(self, conv: ConvSchedule) -> Self {
        Self { conv, ..self }
    }

    /// With the packing `packing`.
    pub fn with_packing(self, packing: Packing) -> Self {
        Self { packing, ..self }
    }

    /// With the split-k sum `split_sum`.
    pub fn with_split_sum(self, split_sum: SplitSum) -> Self {
        Self { split_sum, ..self }
    }

    /// With at most `tiles` row tiles per tiled launch (at least 1).
    pub fn with_max_tiles_per_launch(self, tiles: usize) -> Self {
        Self {
            max_tiles_per_launch: tiles.clamp(1, Self::MAX_TILES_PER_LAUNCH),
            ..self
        }
    }
}

impl Default for OurKernels {
    /// [`OurKernels::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How our kernels compute a convolution pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvSchedule {
    /// The shape's own schedule: a shared-memory tiled GEMM where each tile has enough work,
    /// the direct schedule where a reduction or channel side is shorter than a tile (depthwise
    /// and narrow grouped convs), the split schedule for weight gradients with few outputs.
    Tiled(Buffering),
    /// The untiled schedules on every shape: direct, or split for weight gradients whose kernel
    /// rows are too wide to keep in registers. A reduction too long for one unit's loop on
    /// Mesa's lavapipe (65535 iterations, tens of thousands of channels) still runs tiled.
    Untiled,
    /// cubek-matmul's multi-level GEMM routines, on which Burn's implicit GEMMs run, reading
    /// and writing our tensors in place in their own layouts, for every pass and groups; each
    /// result repaired as Burn's are. On plain-core tiles, a reduction longer than 65535
    /// (lavapipe's loop limit: weight gradients over many positions) runs tiled.
    Gemm(GemmTile),
}

/// The innermost tile of a [`ConvSchedule::Gemm`].
///
/// The tensor-core tiles are **experimental**: CI runs their routine with [`Self::Interleaved`]
/// tiles on a CPU Vulkan driver, but no GPU has run them with tensor cores yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GemmTile {
    /// Each unit multiplies register tiles with plain multiply-adds, in f32 for f32 operands
    /// and f32 accumulators for half ones: runs on every device.
    Register,
    /// Each plane multiplies tiles with plain multiply-adds, its units splitting `k` and
    /// summing across the plane: the tensor-core tiles' routine (planes of a cube sharing
    /// staged operands) on plain cores, on every device with planes. A pass that adds a bias
    /// runs on register tiles: cubek's interleaved tile loads no accumulator.
    Interleaved,
    /// Each plane multiplies tiles on tensor cores through CubeCL's `cmma` (CUDA's `wmma`,
    /// Vulkan's cooperative matrices). Half operands multiply into f32 accumulators; f32
    /// operands run only where [`ConvPrecision::Tf32`] allows and the device has TF32. A pass
    /// the device's tensor cores cannot take is an error naming the reason.
    Cmma,
    /// As [`Self::Cmma`], through CubeCL's manual `mma` instructions (CUDA's `mma.sync`), where
    /// the device reports them.
    Mma,
}

impl GemmTile {
    /// Whether the tile runs on tensor cores, which round f32 to TF32.
    pub fn uses_tensor_cores(self) -> bool {
        matches!(self, Self::Cmma | Self::Mma)
    }
}

/// Who sums the partial results of a tiled GEMM split along its reduction (split-k, where
/// its tiles are too few to fill the device). Both sum each element's splits pairwise in split
/// order, so they agree bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitSum {
    /// [`Self::Handoff`] where the runtime promises that one cube's writes reach another within
    /// a launch (CubeCL's `device_memory_scope`: CUDA, HIP, Metal, Vulkan through SPIR-V),
    /// else [`Self::SecondLaunch`] (WGSL promises nothing across workgroups).
    Auto,
    /// The GEMM's own cubes: the last of each tile's splits to arrive sums them, in the same
    /// launch. On a runtime without the promise it relies on the driver keeping device-scope
    /// barriers (naga lowers WGSL's storage barrier to one on Vulkan; CI pins it on Mesa's
    /// lavapipe).
    Handoff,
    /// A second launch over the result.
    SecondLaunch,
}

/// How the tiled GEMM overlaps its loads with its products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buffering {
    /// Each unit loads the next k step into registers while the current one computes.
    Double,
    /// Loads, then computes: fewer registers.
    Single,
}

/// How a kernel shares its work among units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packing {
    /// A run of positions per unit (a whole plane for global pooling), sharing index
    /// arithmetic and loads.
    Packed,
    /// One position per unit (many lanes per plane for global pooling), so neighbouring units
    /// touch neighbouring addresses.
    Spread,
}

impl core::fmt::Display for Packing {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Packed => "packed",
            Self::Spread => "spread",
        })
    }
}

/// The devices whose kernels were set, and to what; every other device runs the default.
static CHOICES: PerDevice<CubeKernels> = PerDevice::new();

/// Run `kernels` on `device` from now on (see the module docs for when it takes effect).
///
/// # Panics
/// When `device` is not a CubeCL device: the CPU backends have one algorithm per shape.
pub fn set_cube_kernels(device: &Device, kernels: CubeKernels) {
    CHOICES.set_on("set_cube_kernels", device, kernels);
}

/// The kernels `device` runs: what [`set_cube_kernels`] set, else the default. A device that is
/// not a CubeCL device runs its own CPU code and reports the default.
pub fn cube_kernels(device: &Device) -> CubeKernels {
    CHOICES.get_on(device)
}

/// The kernels a CubeCL device runs.
pub(crate) fn kernels_of(device: &CubeDevice) -> CubeKernels {
    CHOICES.get(device)
}
