//! The convolution passes on `CubeBackend` for `conv_routing`: each checks that its geometry
//! fits the kernels' 32-bit arithmetic and runs the kernel the tuner picks (`tune.rs`), which
//! launches ours (`conv.rs`) or Burn's (`builtin.rs`); where the geometry meets padding, the
//! result is then repaired where a non-finite operand met it (`conv/repair.rs`). Dependencies
//! run one way: `passes -> tune -> conv`.

use burn_cubecl::tensor::CubeTensor;

use crate::conv_routing::ConvPasses;
use crate::spec::ConvGeometry;

use burn_convpool_kernels::conv::GemmKind;

use super::conv::{repair_gemm, repair_weight};
use super::tensor::{LaunchError, contiguous, dims5, entry, expect};
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
        let repair = geometry
            .windows_meet_padding()
            .then(|| (x.clone(), weight.clone(), bias.clone()));
        let result = tune::execute(Pass::Forward, (geometry, x, weight, bias));
        let out = expect("conv", &device, result);
        if let Some((x, weight, bias)) = repair {
            let repaired = repair_gemm(&geometry, GemmKind::Forward, x, weight, bias, &out);
            expect("conv", &device, repaired);
        }
        out
    }

    fn data(
        geometry: &ConvGeometry,
        weight: CubeTensor,
        out_grad: CubeTensor,
        bias: Option<CubeTensor>,
    ) -> CubeTensor {
        let device = out_grad.device.clone();
        let geometry = expect("conv_x_backward", &device, launch_geometry(geometry));
        let repair = geometry
            .inputs_meet_padding()
            .then(|| (weight.clone(), out_grad.clone(), bias.clone()));
        let result = tune::execute(Pass::Data, (geometry, weight, out_grad, bias));
        let x_grad = expect("conv_x_backward", &device, result);
        if let Some((weight, out_grad, bias)) = repair {
            let repaired = repair_gemm(&geometry, GemmKind::Data, out_grad, weight, bias, &x_grad);
            expect("conv_x_backward", &device, repaired);
        }
        x_grad
    }

    fn weight(geometry: &ConvGeometry, x: CubeTensor, out_grad: CubeTensor) -> CubeTensor {
        let device = x.device.clone();
        let geometry = expect("conv_weight_backward", &device, launch_geometry(geometry));
        let repair = geometry
            .windows_meet_padding()
            .then(|| (x.clone(), out_grad.clone()));
        let result = tune::execute(Pass::Weight, (geometry, x, out_grad, None));
        let weight_grad = expect("conv_weight_backward", &device, result);
        let Some((x, out_grad)) = repair else {
            return weight_grad;
        };
        // Every candidate returns the weight's contiguous layout, which the repair indexes.
        let weight_grad = contiguous(weight_grad);
        let repaired = repair_weight(&geometry, x, out_grad, &weight_grad);
        expect("conv_weight_backward", &device, repaired);
        weight_grad
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
