//! A record of what our CubeCL launchers start while a closure runs: each of our kernels,
//! each call into Burn's convolution kernels, and each copy of an operand into another memory
//! layout. It shows what a pass costs in launches, which a profile of a whole network hides,
//! and that a layout (channels-last, as Burn's convolutions leave their outputs) runs with
//! no copy.
//!
//! ```no_run
//! # #[cfg(feature = "wgpu")]
//! # {
//! use burn::tensor::{Device, Tensor};
//! use burn_convpool::{ConvNdOptions, conv2d};
//! use burn_convpool::cube_kernels::{CubeKernels, OurKernels, set_cube_kernels};
//! use burn_convpool::cube_launches::{Launch, record};
//!
//! let device = Device::wgpu(Default::default());
//! // Our kernels only: tuned, the first call of a shape also times Burn's.
//! set_cube_kernels(&device, CubeKernels::Ours(OurKernels::default()));
//! let x = Tensor::<4>::ones([8, 16, 32, 32], &device);
//! let weight = Tensor::<4>::ones([16, 16, 3, 3], &device);
//! let (_, launches) = record(|| {
//!     // Read the result inside: Burn queues operations and runs them when one is read.
//!     conv2d(x, weight, None, ConvNdOptions::default()).into_data()
//! });
//! assert_eq!(launches, [Launch::Kernel("conv_gemm_tiled")]);
//! # }
//! ```
//!
//! Burn's `Fusion` queues operations and runs them on the device's own thread when a result is
//! read, so the record takes what our launchers do on every thread while `f` runs: read the
//! results inside the closure, and keep other work on the device out of it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One thing our launchers did on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Launch {
    /// One launch of one of our kernels, by its name in `burn-convpool-kernels`.
    Kernel(&'static str),
    /// A call of one of Burn's convolution kernels (it may launch more than one, and tunes its
    /// own choice).
    Burn(&'static str),
    /// A copy of an operand into another memory layout.
    LayoutCopy,
}

/// The open records, innermost last: what each has taken so far.
static RECORDS: Mutex<Vec<Vec<Launch>>> = Mutex::new(Vec::new());

/// How many records are open, so that a launch outside any costs one atomic load.
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn records() -> std::sync::MutexGuard<'static, Vec<Vec<Launch>>> {
    RECORDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Run `f`, and return what our launchers did while it ran, in order. Records nest: an inner
/// record takes what happens inside it.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<Launch>) {
    /// Closes the record when `f` returns or panics.
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            records().pop();
            OPEN.fetch_sub(1, Ordering::SeqCst);
        }
    }
    records().push(Vec::new());
    OPEN.fetch_add(1, Ordering::SeqCst);
    let close = Close;
    let result = f();
    let launches = records()
        .last_mut()
        .map(core::mem::take)
        .unwrap_or_default();
    drop(close);
    (result, launches)
}

/// Note `launch` in the innermost open record, if there is one.
pub(crate) fn note(launch: Launch) {
    if OPEN.load(Ordering::SeqCst) == 0 {
        return;
    }
    if let Some(launches) = records().last_mut() {
        launches.push(launch);
    }
}
