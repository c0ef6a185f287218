//! A record of what our CubeCL launchers start on the calling thread: each of our kernels,
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
//! use burn_convpool::cube_launches::{Launch, record};
//!
//! let device = Device::wgpu(Default::default());
//! let x = Tensor::<4>::ones([8, 16, 32, 32], &device);
//! let weight = Tensor::<4>::ones([16, 16, 3, 3], &device);
//! let (_, launches) = record(|| {
//!     // Read the result inside: Burn queues operations and runs them when one is read.
//!     conv2d(x, weight, None, ConvNdOptions::default()).into_data()
//! });
//! assert!(!launches.contains(&Launch::LayoutCopy));
//! # }
//! ```
//!
//! Operations run when Burn's `Fusion` executes its queue, on the thread that reads a result;
//! read the results inside the closure, and keep other threads' work on the device out of it.

use std::cell::RefCell;

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

thread_local! {
    static RECORD: RefCell<Option<Vec<Launch>>> = const { RefCell::new(None) };
}

/// Run `f`, and return what our launchers did on this thread while it ran, in order. Records
/// nest: an inner record takes what happens inside it.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Vec<Launch>) {
    /// Puts the outer record back when `f` returns or panics.
    struct Restore(Option<Vec<Launch>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            RECORD.with(|record| *record.borrow_mut() = outer);
        }
    }
    let outer = RECORD.with(|record| record.borrow_mut().replace(Vec::new()));
    let restore = Restore(outer);
    let result = f();
    let launches = RECORD.with(|record| record.borrow_mut().take().unwrap_or_default());
    drop(restore);
    (result, launches)
}

/// Note `launch` in this thread's record, if one is open.
pub(crate) fn note(launch: Launch) {
    RECORD.with(|record| {
        if let Some(launches) = record.borrow_mut().as_mut() {
            launches.push(launch);
        }
    });
}
