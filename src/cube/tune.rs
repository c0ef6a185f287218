//! Autotuned choice, per convolution pass and shape, between our kernels and Burn's own.
//!
//! Each pass (forward, input gradient, weight gradient; `conv_transpose` reaches them through
//! `conv_routing`) has one CubeCL [`LocalTuner`] whose candidates are our kernels in three
//! settings ([`OURS`]: the shape's schedule double-buffered, its direct schedule spread, and
//! its tiled schedule single-buffered), each declined where it changes nothing; our GEMM on
//! tensor cores ([`TENSOR_CORES`]: cmma and mma tiles), where the precision allows it and the
//! device's tensor cores take the pass; and Burn's (`builtin.rs`: the call Burn's own autodiff
//! makes for the pass, itself autotuned over Burn's tensor-core implicit GEMMs, depthwise, 1x1
//! and direct kernels, and for an input gradient its transposed conv too), except where Burn's would compute less precisely than the device's
//! [`ConvPrecision`] allows: f32 rounded to TF32 under `Exact`, and half-precision operands
//! summed in their own type (`precision.rs`). Each candidate is timed with the repair that
//! makes it exact where a non-finite operand meets the padding (`conv/repair.rs`). The key
//! buckets batch, channels and spatial sizes with CubeCL's `anchor`, so
//! `CUBECL_AUTOTUNE_LEVEL` sets how finely shapes are told apart; the winner is cached per key
//! (the precision included) and device and then fixed, so a process computes each shape with
//! one kernel. Neither side accumulates with atomics, so every candidate is bitwise
//! reproducible. A device whose kernels are pinned ([`super::choice`]) skips the tuner.
//!
//! The set is kept small because a user pays for it in the first epoch: each candidate is
//! compiled on first use, and the compiles, not the timings, are most of a tuning round (the
//! first epoch of `examples/resnet`; its README has the measurements). The untiled schedule
//! where the tiled one is the default won none of the example's keys and was dropped. cubek's
//! GEMM routines over our layouts on plain cores (`GemmTile::Register` and `Interleaved`) are
//! no candidate: they are a second plain-core GEMM beside the tiled one. An input gradient's
//! Burn candidate is `conv_data_backward`, whose own tuner already times Burn's transposed conv
//! among its implicit GEMMs, so a second Burn candidate would pay Burn's tuning twice.
//!
//! Burn's candidate runs its own tuner, and a tuning round cannot run inside another one's
//! measurement (both take the device exclusively). So before our first round for a key, Burn's
//! candidate is run once outside it, which settles Burn's choice for that shape; inside our
//! round it is then a plain launch.

use burn::tensor::DType;
use burn_convpool_kernels::conv as kernels;
use burn_cubecl::{CubeTuneId, tensor::CubeTensor};
use cubecl::AutotuneKey;
use cubecl::ir::DeviceProperties;
use cubecl::tune::{LocalTuner, Tunable, TunableSet, anchor, local_tuner};
use serde::{Deserialize, Serialize};

use crate::spec::{Activation, ConvGeometry};

use super::builtin;
use super::choice::{
    Buffering, ConvSchedule, CubeKernels, GemmTile, OurKernels, Packing, kernels_of,
};
use super::conv;
use super::precision::{ConvPrecision, excludes_burn, excludes_tensor_cores, precision_of};
use super::tensor::{LaunchError, channels_last, float_type};

/// Which pass of a convolution.
#[derive(Hash, Eq, PartialEq, Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Pass {
    /// Input side to output side.
    Forward,
    /// Output gradient to input gradient.
    Data,
    /// Weight gradient.
    Weight,
}

/// What a tuning result is cached under: everything that picks a kernel, sizes bucketed.
#[derive(Hash, Eq, PartialEq, Debug, Clone, Serialize, Deserialize, AutotuneKey)]
pub struct ConvPassKey {
    pass: Pass,
    dtype: DType,
    groups: usize,
    in_per_group: usize,
    out_per_group: usize,
    kernel: [usize; 3],
    stride: [usize; 3],
    dilation: [usize; 3],
    pad_begin: [usize; 3],
    batch: usize,
    in_size: [usize; 3],
    out_size: [usize; 3],
    has_bias: bool,
    /// Whether an activation is fused: ours apply it as they store, Burn's pay a pass for it.
    activated: bool,
    /// What the candidates may round to: it decides whether Burn's are among them.
    precision: ConvPrecision,
    /// Whether the activations arrive channels-last: each layout is timed on its own, since
    /// a kernel's speed, and the copies Burn's kernels make to read NHWC, depend on it.
    channels_last: bool,
}

impl ConvPassKey {
    fn of(
        pass: Pass,
        geometry: &ConvGeometry,
        (a, b): (&CubeTensor, &CubeTensor),
        (has_bias, activated): (bool, bool),
    ) -> Self {
        let bucket = |size: usize| anchor(size, None, None, None);
        Self {
            pass,
            dtype: a.dtype,
            groups: geometry.groups,
            // Channels per group are bucketed like sizes; one channel (depthwise) stays a
            // bucket of its own.
            in_per_group: bucket(geometry.in_per_group()),
            out_per_group: bucket(geometry.out_per_group()),
            kernel: geometry.kernel,
            stride: geometry.stride,
            dilation: geometry.dilation,
            pad_begin: geometry.pad_begin,
            batch: bucket(geometry.batch),
            in_size: geometry.in_size.map(bucket),
            out_size: geometry.out_size.map(bucket),
            has_bias,
            activated,
            precision: precision_of(&a.device),
            channels_last: channels_last(activation(pass, a, b)),
        }
    }
}

/// The activation a pass reads in its own layout: `x` of a forward (`a`), the output gradient
/// of an input gradient (`b`) and of a weight gradient (`b`, beside `x`).
fn activation<'a>(pass: Pass, a: &'a CubeTensor, b: &'a CubeTensor) -> &'a CubeTensor {
    match pass {
        Pass::Forward => a,
        Pass::Data | Pass::Weight => b,
    }
}

/// Our settings among the candidates, in the order they are tried (the default first: it
/// accepts every geometry, so it is also the fallback).
const OURS: [OurKernels; 3] = {
    let default = OurKernels::DEFAULT;
    [
        default,
        OurKernels {
            packing: Packing::Spread,
            ..default
        },
        OurKernels {
            conv: ConvSchedule::Tiled(Buffering::Single),
            ..default
        },
    ]
};

/// Our tensor-core GEMMs among the candidates, each where the device's precision allows it
/// for the operands ([`excluded`]) and its tensor cores take the pass.
const TENSOR_CORES: [OurKernels; 2] = {
    let default = OurKernels::DEFAULT;
    [
        OurKernels {
            conv: ConvSchedule::Gemm(GemmTile::Cmma),
            ..default
        },
        OurKernels {
            conv: ConvSchedule::Gemm(GemmTile::Mma),
            ..default
        },
    ]
};

/// A candidate of every set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Candidate {
    /// Ours with these settings.
    Ours(OurKernels),
    /// Burn's autotuned conv, input gradient (`conv_data_backward`) or weight gradient.
    Burn,
}

impl core::fmt::Display for Candidate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Ours(ours) => match (ours.conv, ours.packing) {
                (ConvSchedule::Tiled(Buffering::Double), Packing::Packed) => "burn_convpool",
                (ConvSchedule::Tiled(Buffering::Double), Packing::Spread) => "burn_convpool_spread",
                (ConvSchedule::Tiled(Buffering::Single), _) => "burn_convpool_single_buffered",
                (ConvSchedule::Untiled, _) => "burn_convpool_direct",
                (ConvSchedule::Gemm(GemmTile::Register), _) => "burn_convpool_gemm_register",
                (ConvSchedule::Gemm(GemmTile::Interleaved), _) => "burn_convpool_gemm_interleaved",
                (ConvSchedule::Gemm(GemmTile::Cmma), _) => "burn_convpool_gemm_cmma",
                (ConvSchedule::Gemm(GemmTile::Mma), _) => "burn_convpool_gemm_mma",
            },
            Self::Burn => "burn_cubecl_autotune",
        })
    }
}

/// One pass's operands: geometry, the two inputs in the pass's order, the bias and the fused
/// activation (a forward pass's, or an input gradient's for `conv_transpose`).
type Inputs = (
    ConvGeometry,
    CubeTensor,
    CubeTensor,
    (Option<CubeTensor>, Option<Activation>),
);

/// Why the tuner skips our setting `ours` for this pass: where it computes exactly what the
/// default setting does, timing it again would only add noise.
fn declines(pass: Pass, geometry: &ConvGeometry, ours: &OurKernels) -> Option<&'static str> {
    let kind = kind(pass);
    match ours.conv {
        ConvSchedule::Tiled(Buffering::Single) if !conv::is_tiled(geometry, kind) => {
            Some("no tiled schedule to single-buffer")
        }
        _ if ours.packing == Packing::Spread && !spreads(pass, geometry) => {
            Some("spreading changes nothing here")
        }
        _ => None,
    }
}

/// The pass on one candidate's kernels, exact where a non-finite operand met the padding (so
/// every candidate computes the definition and is timed with its repair), or why the tuner
/// skips it.
fn run(pass: Pass, candidate: Candidate, inputs: Inputs) -> Result<CubeTensor, String> {
    let (geometry, a, b, bias) = inputs;
    match candidate {
        Candidate::Ours(ours) => match declines(pass, &geometry, &ours) {
            Some(reason) => Err(reason.into()),
            None => run_ours(pass, (geometry, a, b, bias), ours).map_err(|err| err.to_string()),
        },
        Candidate::Burn => run_burn(pass, (geometry, a, b, bias)),
    }
}

/// Why the device's [`ConvPrecision`] keeps `candidate` out of the tuner for a pass whose first
/// operand is `a` ([`excluded_under`]).
fn excluded(candidate: Candidate, a: &CubeTensor) -> Option<String> {
    excluded_under(
        candidate,
        precision_of(&a.device),
        a.client.properties(),
        a.dtype,
    )
}

/// Why `precision` keeps `candidate` out of the tuner for operands of `dtype` on a device with
/// `properties`: our plain-core kernels compute f32 exactly; our tensor-core tiles and Burn's
/// kernels may round it to TF32, and Burn's sum half operands in their own type.
fn excluded_under(
    candidate: Candidate,
    precision: ConvPrecision,
    properties: &DeviceProperties,
    dtype: DType,
) -> Option<String> {
    match candidate {
        Candidate::Ours(OurKernels {
            conv: ConvSchedule::Gemm(tile),
            ..
        }) if tile.uses_tensor_cores() => excludes_tensor_cores(precision, properties, dtype),
        Candidate::Ours(_) => None,
        Candidate::Burn => excludes_burn(precision, properties, dtype),
    }
}

/// The pass on Burn's kernels, as Burn's own call returns it, then repaired and activated.
fn run_burn(
    pass: Pass,
    (geometry, a, b, (bias, activation)): Inputs,
) -> Result<CubeTensor, String> {
    let out = match pass {
        Pass::Forward => builtin::forward(&geometry, a.clone(), b.clone(), bias.clone()),
        Pass::Data => builtin::data(&geometry, a.clone(), b.clone(), bias.clone()),
        Pass::Weight => builtin::weight(&geometry, a.clone(), b.clone()),
    }?;
    let repaired = match pass {
        Pass::Forward => conv::repair_gemm(&geometry, kind(pass), (a, b, bias), out),
        // The operands come as (weight, output gradient).
        Pass::Data => conv::repair_gemm(&geometry, kind(pass), (b, a, bias), out),
        Pass::Weight => conv::repair_weight(&geometry, a, b, out),
    };
    let activated = repaired.and_then(|out| match activation {
        Some(activation) => conv::activate_result(out, activation),
        None => Ok(out),
    });
    activated.map_err(|err| err.to_string())
}

/// The GEMM a pass computes.
fn kind(pass: Pass) -> kernels::GemmKind {
    match pass {
        Pass::Forward => kernels::GemmKind::Forward,
        Pass::Data => kernels::GemmKind::Data,
        Pass::Weight => kernels::GemmKind::Weight,
    }
}

/// Whether our pass has a spread launch that differs from its packed one.
fn spreads(pass: Pass, geometry: &ConvGeometry) -> bool {
    match pass {
        Pass::Weight => false,
        _ => conv::spreads(geometry, kind(pass)),
    }
}

static FORWARD_TUNER: LocalTuner<ConvPassKey, CubeTuneId> = local_tuner!("forward");
static DATA_TUNER: LocalTuner<ConvPassKey, CubeTuneId> = local_tuner!("data");
static WEIGHT_TUNER: LocalTuner<ConvPassKey, CubeTuneId> = local_tuner!("weight");

type Set = TunableSet<ConvPassKey, Inputs, CubeTensor, Candidate>;

/// Every candidate the tuner holds, in its order: ours on plain cores, ours on tensor cores,
/// then Burn's.
fn every_candidate() -> impl Iterator<Item = Candidate> {
    OURS.into_iter()
        .chain(TENSOR_CORES)
        .map(Candidate::Ours)
        .chain([Candidate::Burn])
}

fn candidates(pass: Pass) -> Set {
    let key = move |(geometry, a, b, (bias, activation)): &Inputs| {
        ConvPassKey::of(
            pass,
            geometry,
            (a, b),
            (bias.is_some(), activation.is_some()),
        )
    };
    every_candidate().fold(TunableSet::new_cloning_inputs(key), |set, candidate| {
        set.with(Tunable::identified(
            candidate,
            move |inputs: Inputs| match excluded(candidate, &inputs.1) {
                Some(reason) => Err(reason),
                None => run(pass, candidate, inputs),
            },
        ))
    })
}

/// The kernel for `pass` on these operands that the device's [`CubeKernels`] picks: tuned on
/// the first call for their key, or pinned. Empty tensors skip the tuner: there is nothing to
/// time.
pub fn execute(pass: Pass, inputs: Inputs) -> Result<CubeTensor, LaunchError> {
    let (geometry, a, b, _) = &inputs;
    // Checked before either side runs, so an unsupported dtype is our typed error whichever
    // kernels would have been chosen.
    float_type(a)?;
    float_type(b)?;
    let empty = [a, b].iter().any(|t| t.meta.num_elements() == 0)
        || geometry.out_volume() == 0
        || geometry.in_volume() == 0;
    match kernels_of(&a.device) {
        _ if empty => run_ours(pass, inputs, OurKernels::default()),
        CubeKernels::Ours(ours) => run_ours(pass, inputs, ours),
        CubeKernels::Burn => run(pass, Candidate::Burn, inputs.clone())
            .or_else(|_| run_ours(pass, inputs, OurKernels::default())),
        CubeKernels::Tuned if cfg!(feature = "autotune") => Ok(tuned(pass, inputs)),
        CubeKernels::Tuned => run_ours(pass, inputs, OurKernels::default()),
    }
}

/// The tuned choice: tuned on the first call for the operands' key, then fixed.
fn tuned(pass: Pass, inputs: Inputs) -> CubeTensor {
    let a = &inputs.1;
    let tuner = match pass {
        Pass::Forward => &FORWARD_TUNER,
        Pass::Data => &DATA_TUNER,
        Pass::Weight => &WEIGHT_TUNER,
    };
    let client = a.client.clone();
    let id = CubeTuneId::new(&a.client, &a.device);
    let set = tuner.init(&id, move || candidates(pass));
    let key = set.generate_key(&inputs);
    if tuner.fastest_identity(&id, &set, &key).is_none() && excluded(Candidate::Burn, a).is_none() {
        // Let Burn's tuner settle its own choice outside ours (see the module docs); a
        // geometry Burn declines leaves nothing to settle.
        let _ = run(pass, Candidate::Burn, inputs.clone());
    }
    tuner.execute(&id, &client, set, inputs)
}

/// The pass on our kernels, with their typed error, in the settings `ours` (which repair what
/// they store).
fn run_ours(
    pass: Pass,
    (geometry, a, b, bias): Inputs,
    ours: OurKernels,
) -> Result<CubeTensor, LaunchError> {
    // Only a forward or input gradient has a bias or an activation.
    use kernels::GemmKind::{Data, Forward};
    match pass {
        Pass::Forward => conv::gemm(&geometry, Forward, a, b, bias, ours),
        // The operands come as (weight, output gradient) and (x, output gradient).
        Pass::Data => conv::gemm(&geometry, Data, b, a, bias, ours),
        Pass::Weight => conv::weight_gemm(&geometry, b, a, ours),
    }
}

#[cfg(all(test, feature = "wgpu"))]
mod tests {
    use burn::tensor::DType;

    use super::{Candidate, ConvPrecision, OURS, every_candidate, excluded_under};
    use crate::cube::choice::ConvSchedule;
    use crate::cube::precision::tests::tf32_properties;

    /// The candidates the tuner offers for `dtype` operands under `precision` on a device that
    /// reports TF32, in its order.
    fn offered(precision: ConvPrecision, dtype: DType) -> Vec<Candidate> {
        let properties = tf32_properties();
        every_candidate()
            .filter(|&candidate| excluded_under(candidate, precision, &properties, dtype).is_none())
            .collect()
    }

    /// Whether `candidate` computes f32 on plain cores, exactly.
    fn plain_cores(candidate: Candidate) -> bool {
        match candidate {
            Candidate::Ours(ours) => match ours.conv {
                ConvSchedule::Gemm(tile) => !tile.uses_tensor_cores(),
                _ => true,
            },
            Candidate::Burn => false,
        }
    }

    /// On a device that reports TF32, `Exact` offers only our plain-core kernels for f32
    /// operands (no tensor-core tile of ours, none of Burn's TF32 implicit GEMMs); `Tf32`
    /// offers every candidate.
    #[test]
    fn exact_offers_no_tf32_candidate_on_a_tf32_device() {
        let exact = offered(ConvPrecision::Exact, DType::F32);
        assert_eq!(exact, OURS.map(Candidate::Ours).to_vec());
        assert!(exact.iter().all(|&candidate| plain_cores(candidate)));
        let tf32 = offered(ConvPrecision::Tf32, DType::F32);
        assert_eq!(tf32, every_candidate().collect::<Vec<_>>());
    }

    /// Half operands: our tensor-core tiles multiply them exactly into f32 accumulators under
    /// either precision; Burn's direct kernel, which sums in the operands' type, is never
    /// offered.
    #[test]
    fn half_operands_are_summed_in_f32_by_every_candidate() {
        let ours: Vec<Candidate> = every_candidate()
            .filter(|&candidate| candidate != Candidate::Burn)
            .collect();
        for precision in [ConvPrecision::Exact, ConvPrecision::Tf32] {
            for dtype in [DType::F16, DType::BF16] {
                assert_eq!(offered(precision, dtype), ours, "{precision:?} {dtype:?}");
            }
        }
    }
}
