//! A setting held per CubeCL device: what [`super::choice`] pins and
//! [`super::precision`] allows are each one of these.

use std::sync::RwLock;

use burn::backend::DispatchDevice;
use burn::tensor::Device;
use burn_cubecl::CubeDevice;

/// The CubeCL device behind a Burn device, autodiff or not; `None` for a CPU device.
pub(crate) fn cube_device(device: &Device) -> Option<CubeDevice> {
    match device.clone().without_autodiff().as_dispatch() {
        DispatchDevice::Cube(device) => Some(device.clone()),
        _ => None,
    }
}

/// The devices whose setting was changed, and to what; every other device has the default.
pub(crate) struct PerDevice<T> {
    held: RwLock<Vec<(CubeDevice, T)>>,
}

impl<T: Copy + PartialEq + Default> PerDevice<T> {
    /// Every device at the default.
    pub(crate) const fn new() -> Self {
        Self {
            held: RwLock::new(Vec::new()),
        }
    }

    /// `device` has `value` from now on.
    fn set(&self, device: CubeDevice, value: T) {
        let mut held = self
            .held
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.retain(|(known, _)| *known != device);
        if value != T::default() {
            held.push((device, value));
        }
    }

    /// `device` has `value` from now on.
    ///
    /// # Panics
    /// When `device` is not a CubeCL device, naming `setter`, the public call that set it.
    pub(crate) fn set_on(&self, setter: &str, device: &Device, value: T) {
        let cube = cube_device(device).unwrap_or_else(|| {
            panic!("{setter}: {device:?} is not a CubeCL device");
        });
        self.set(cube, value);
    }

    /// What `device` has; a device that is not a CubeCL device has the default.
    pub(crate) fn get_on(&self, device: &Device) -> T {
        cube_device(device).map_or_else(T::default, |device| self.get(&device))
    }

    /// What `device` has.
    pub(crate) fn get(&self, device: &CubeDevice) -> T {
        let held = self
            .held
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        held.iter()
            .find(|(known, _)| known == device)
            .map_or_else(T::default, |&(_, value)| value)
    }
}
