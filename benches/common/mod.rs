//! What every bench shares: the devices to compare on, and a timed call that waits for the
//! device, so asynchronous GPU work is inside the measurement.

use burn::tensor::Device;

/// Flex always; the default wgpu device when the `wgpu` feature is on.
pub fn devices() -> Vec<(&'static str, Device)> {
    #[allow(unused_mut)]
    let mut devices = vec![("flex", Device::flex())];
    #[cfg(feature = "wgpu")]
    devices.push(("wgpu", Device::wgpu(Default::default())));
    devices
}

/// Run `op` and wait until the device has finished it.
pub fn synced<T>(device: &Device, op: impl FnOnce() -> T) -> T {
    let out = op();
    device.sync().expect("device sync failed");
    out
}
