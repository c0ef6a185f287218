//! The convolution passes on `CubeBackend` for `conv_routing`: each checks that its geometry
//! fits the kernels' 32-bit arithmetic and runs the kernel the tuner picks (`tune.rs`), which
//! launches ours (`conv.rs`) or Burn's (`builtin.rs`) and repairs the result where a
//! non-finite operand met the padding (`conv/repair.rs`). Dependencies run one way:
//! `passes -> tune -> conv`.

use burn_cubecl::tensor::CubeTensor;

use crate::conv_routing::ConvPasses;
use crate::spec::{Activation, ConvGeometry};

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
        activation: Option<Activation>,
    ) -> CubeTensor {
        run(
            "conv",
            Pass::Forward,
            geometry,
            (x, weight, (bias, activation)),
        )
    }

    fn data(
        geometry: &ConvGeometry,
        weight: CubeTensor,
        out_grad: CubeTensor,
        bias: Option<CubeTensor>,
        activation: Option<Activation>,
    ) -> CubeTensor {
        let operands = (weight, out_grad, (bias, activation));
        run("conv_x_backward", Pass::Data, geometry, operands)
    }

    fn weight(geometry: &ConvGeometry, x: CubeTensor, out_grad: CubeTensor) -> CubeTensor {
        run(
            "conv_weight_backward",
            Pass::Weight,
            geometry,
            (x, out_grad, (None, None)),
        )
    }
}

/// `pass` of `geometry` on its operands with the kernels the tuner picks, or a panic naming
/// `op` and the device.
fn run(
    op: &str,
    pass: Pass,
    geometry: &ConvGeometry,
    (a, b, epilogue): (
        CubeTensor,
        CubeTensor,
        (Option<CubeTensor>, Option<Activation>),
    ),
) -> CubeTensor {
    let device = a.device.clone();
    let geometry = expect(op, &device, launch_geometry(geometry));
    expect(op, &device, tune::execute(pass, (geometry, a, b, epilogue)))
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
