//! The convolution passes on `CubeBackend` for `conv_routing`: each checks that its geometry
//! fits the kernels' 32-bit arithmetic and runs the kernel the tuner picks (`tune.rs`), which
//! launches ours (`conv.rs`) or Burn's (`builtin.rs`). Dependencies run one way:
//! `passes -> tune -> conv`.

use burn_cubecl::tensor::CubeTensor;

use crate::conv_routing::ConvPasses;
use crate::spec::ConvGeometry;

use super::tensor::{LaunchError, dims5, entry, expect};
use super::tune::{self, Pass};

/// The convolution passes on `CubeBackend`: each is tuned between ours and Burn's kernels.
pub struct CubeConv;

impl ConvPasses for CubeConv {
    type Tensor = CubeTensor;

    fn dims(tensor: &CubeTensor) -> [usize; 5] {
        dims5(tensor)
    }

    fn forward(
        geometry: &ConvGeometry,
        x: CubeTensor,
        weight: CubeTensor,
        bias: Option<CubeTensor>,
    ) -> CubeTensor {
        let device = x.device.clone();
        let geometry = expect("conv", &device, launch_geometry(geometry));
        let result = tune::execute(Pass::Forward, (geometry, x, weight, bias));
        expect("conv", &device, result)
    }

    fn data(
        geometry: &ConvGeometry,
        weight: CubeTensor,
        out_grad: CubeTensor,
        bias: Option<CubeTensor>,
    ) -> CubeTensor {
        let device = out_grad.device.clone();
        let geometry = expect("conv_x_backward", &device, launch_geometry(geometry));
        let result = tune::execute(Pass::Data, (geometry, weight, out_grad, bias));
        expect("conv_x_backward", &device, result)
    }

    fn weight(geometry: &ConvGeometry, x: CubeTensor, out_grad: CubeTensor) -> CubeTensor {
        let device = x.device.clone();
        let geometry = expect("conv_weight_backward", &device, launch_geometry(geometry));
        let result = tune::execute(Pass::Weight, (geometry, x, out_grad, None));
        expect("conv_weight_backward", &device, result)
    }
}

/// The geometry the kernels run ([`ConvGeometry::normalised`]), every value of which must fit
/// the kernels' 32-bit arithmetic, which would otherwise wrap.
fn launch_geometry(geometry: &ConvGeometry) -> Result<ConvGeometry, LaunchError> {
    let g = geometry.normalised();
    for (_, value) in g.named_values() {
        entry(value)?;
    }
    Ok(g)
}
