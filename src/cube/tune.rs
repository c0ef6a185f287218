//! Autotuned choice, per convolution pass and shape, between our kernels and Burn's own.
//!
//! Each pass (forward, input gradient, weight gradient; `conv_transpose` reaches them through
//! `conv_routing`) has one CubeCL [`LocalTuner`] with six candidates: ours (the schedules of
//! `conv.rs`, the tiled one double-buffered), ours with the direct schedule spread one position per
//! unit (`packing.rs`), ours with the tiled schedule single-buffered (fewer registers), ours
//! untiled where the tiled schedule is the default (`conv::untiled_may_win`: forwards, unit-stride
//! input gradients, weight gradients, and narrow groups), each declined where it changes nothing,
//! Burn's (`builtin.rs`, itself autotuned over Burn's tensor-core implicit GEMMs, depthwise, 1x1
//! and direct kernels), and, for input gradients, Burn's transposed conv (what Burn's
//! `conv_transpose2d` runs). The tiled variants add the same products in the same order, as do the
//! untiled ones. The key buckets batch, channels and spatial sizes with CubeCL's `anchor`, so
//! `CUBECL_AUTOTUNE_LEVEL` sets how finely shapes are told apart; the winner is cached per key and
//! device and then fixed, so a process computes each shape with one kernel. Neither side
//! accumulates with atomics, so every candidate is bitwise reproducible and none has to be
//! excluded.
//!
//! Burn's candidate runs its own tuner, and a tuning round cannot run inside another one's
//! measurement (both take the device exclusively). So before our first round for a key, Burn's
//! candidate is run once outside it, which settles Burn's choice for that shape; inside our
//! round it is then a plain launch.

use burn::tensor::DType;
use burn_convpool_kernels::conv as kernels;
use burn_cubecl::{CubeTuneId, tensor::CubeTensor};
use cubecl::AutotuneKey;
use cubecl::tune::{LocalTuner, Tunable, TunableSet, anchor, local_tuner};
use serde::{Deserialize, Serialize};

use crate::spec::ConvGeometry;

use super::conv::Schedule;
use super::packing::{self, Packing};
use super::tensor::{LaunchError, float_type};
use super::{builtin, conv};

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
}

impl ConvPassKey {
    fn of(pass: Pass, geometry: &ConvGeometry, dtype: DType, has_bias: bool) -> Self {
        let bucket = |size: usize| anchor(size, None, None, None);
        Self {
            pass,
            dtype,
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
        }
    }
}

/// The candidates of every set, in the order they are tried (ours first: it accepts every
/// geometry, so it is also the fallback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Candidate {
    /// Ours: the direct schedule packed, the tiled one double-buffered.
    Ours,
    /// Ours with the direct schedule spread ([`super::packing`]); declines where that changes
    /// nothing (the tiled schedule, weight gradients, rows of one position).
    OursSpread,
    /// Ours with the tiled schedule single-buffered (fewer registers); declines where the
    /// pass is not tiled.
    OursSingle,
    /// Ours untiled where the tiled schedule is the default and the untiled one may win
    /// (`conv::untiled_may_win`); declines elsewhere.
    OursDirect,
    Burn,
    /// An input gradient as Burn's transposed conv (`builtin::transposed`: what Burn's own
    /// `conv_transpose2d` runs, where our transposed convs' forward passes land); declines
    /// for the other passes and where Burn's transposed conv cannot express the geometry.
    BurnTransposed,
}

impl core::fmt::Display for Candidate {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Ours => "burn_convpool",
            Self::OursSpread => "burn_convpool_spread",
            Self::OursSingle => "burn_convpool_single_buffered",
            Self::OursDirect => "burn_convpool_direct",
            Self::Burn => "burn_cubecl_autotune",
            Self::BurnTransposed => "burn_cubecl_conv_transpose",
        })
    }
}

/// One pass's operands: geometry, the two inputs in the pass's order, and the bias.
type Inputs = (ConvGeometry, CubeTensor, CubeTensor, Option<CubeTensor>);

/// The pass on one candidate's kernels.
fn run(pass: Pass, candidate: Candidate, inputs: Inputs) -> Result<CubeTensor, String> {
    let default = Schedule::DEFAULT;
    let schedule = match candidate {
        Candidate::Ours => default,
        Candidate::OursSpread if spreads(pass, &inputs.0) => Schedule {
            packing: Packing::Spread,
            ..default
        },
        Candidate::OursSpread => return Err("spreading changes nothing here".into()),
        Candidate::OursSingle if conv::is_tiled(&inputs.0, kind(pass)) => Schedule {
            prefetch: false,
            ..default
        },
        Candidate::OursSingle => return Err("no tiled schedule to single-buffer".into()),
        Candidate::OursDirect if conv::untiled_may_win(&inputs.0, kind(pass)) => Schedule {
            direct: true,
            ..default
        },
        Candidate::OursDirect => return Err("the untiled schedule is the default or slower".into()),
        Candidate::Burn => {
            let (geometry, a, b, bias) = inputs;
            return match pass {
                Pass::Forward => builtin::forward(&geometry, a, b, bias),
                Pass::Data => builtin::data(&geometry, a, b, bias),
                Pass::Weight => builtin::weight(&geometry, a, b),
            };
        }
        Candidate::BurnTransposed => {
            let (geometry, a, b, bias) = inputs;
            return match pass {
                Pass::Data => builtin::transposed(&geometry, a, b, bias),
                _ => Err("Burn's transposed conv only computes input gradients".into()),
            };
        }
    };
    run_ours(pass, inputs, schedule).map_err(|err| err.to_string())
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

fn candidates(pass: Pass) -> Set {
    let key = move |(geometry, a, _, bias): &Inputs| {
        ConvPassKey::of(pass, geometry, a.dtype, bias.is_some())
    };
    [
        Candidate::Ours,
        Candidate::OursSpread,
        Candidate::OursSingle,
        Candidate::OursDirect,
        Candidate::Burn,
        Candidate::BurnTransposed,
    ]
    .into_iter()
    .fold(TunableSet::new_cloning_inputs(key), |set, candidate| {
        set.with(Tunable::identified(candidate, move |inputs: Inputs| {
            run(pass, candidate, inputs)
        }))
    })
}

/// Which kernels the convolution passes run on a CubeCL device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConvKernels {
    /// The tuned choice per shape (the default with the `autotune` feature).
    Tuned,
    /// Ours only (the default without it).
    Ours,
    /// Ours, the tiled schedule single-buffered.
    OursSingle,
    /// Ours, untiled on every shape.
    OursDirect,
    /// Burn's wherever Burn accepts the geometry (an input gradient its transposed conv where
    /// that takes it, else its input-gradient kernel), ours elsewhere.
    Burn,
}

/// `BURN_CONVPOOL_CONV_KERNELS` = `tuned` | `ours` | `ours-single` | `ours-direct` | `burn`,
/// read once:
/// pins the kernels of every process-wide, e.g. to reproduce results bitwise across processes
/// (the tuned choice may differ between runs whose timings differ) or to test one side alone.
fn conv_kernels() -> ConvKernels {
    static CHOICE: std::sync::OnceLock<ConvKernels> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(
        || match std::env::var("BURN_CONVPOOL_CONV_KERNELS").as_deref() {
            Ok("ours") => ConvKernels::Ours,
            Ok("ours-single") => ConvKernels::OursSingle,
            Ok("ours-direct") => ConvKernels::OursDirect,
            Ok("burn") => ConvKernels::Burn,
            Ok("tuned") | Err(_) if cfg!(feature = "autotune") => ConvKernels::Tuned,
            Ok("tuned") | Err(_) => ConvKernels::Ours,
            Ok(other) => {
                panic!(
                    "BURN_CONVPOOL_CONV_KERNELS={other}: expected tuned, ours, ours-single, \
                     ours-direct or burn"
                )
            }
        },
    )
}

/// The fastest kernel for `pass` on these operands, tuned on the first call for their key
/// (or the kernels `BURN_CONVPOOL_CONV_KERNELS` pins). Empty tensors skip the tuner: there is
/// nothing to time.
pub fn execute(pass: Pass, inputs: Inputs) -> Result<CubeTensor, LaunchError> {
    let (geometry, a, b, _) = &inputs;
    // Checked before either side runs, so an unsupported dtype is our typed error whichever
    // kernels would have been chosen.
    float_type(a)?;
    float_type(b)?;
    let empty = [a, b].iter().any(|t| t.meta.num_elements() == 0)
        || geometry.out_volume() == 0
        || geometry.in_volume() == 0;
    match conv_kernels() {
        _ if empty => run_ours(pass, inputs, Schedule::DEFAULT),
        pinned @ (ConvKernels::Ours | ConvKernels::OursSingle | ConvKernels::OursDirect) => {
            let schedule = Schedule {
                direct: pinned == ConvKernels::OursDirect,
                packing: packing::pinned().unwrap_or(Packing::Packed),
                prefetch: pinned != ConvKernels::OursSingle,
            };
            run_ours(pass, inputs, schedule)
        }
        ConvKernels::Burn => run(pass, Candidate::BurnTransposed, inputs.clone())
            .or_else(|_| run(pass, Candidate::Burn, inputs.clone()))
            .or_else(|_| run_ours(pass, inputs, Schedule::DEFAULT)),
        ConvKernels::Tuned => Ok(tuned(pass, inputs)),
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
    if tuner.fastest_identity(&id, &set, &key).is_none() {
        // Let Burn's tuners settle their own choices outside ours (see the module docs); a
        // geometry Burn declines leaves nothing to settle.
        let _ = run(pass, Candidate::Burn, inputs.clone());
        let _ = run(pass, Candidate::BurnTransposed, inputs.clone());
    }
    tuner.execute(&id, &client, set, inputs)
}

/// The pass on our kernels, with their typed error, on the schedule `schedule` picks.
fn run_ours(
    pass: Pass,
    (geometry, a, b, bias): Inputs,
    schedule: Schedule,
) -> Result<CubeTensor, LaunchError> {
    use kernels::GemmKind::{Data, Forward};
    match pass {
        Pass::Forward => conv::gemm(&geometry, Forward, a, b, bias, schedule),
        // The operands come as (weight, output gradient) and (x, output gradient).
        Pass::Data => conv::gemm(&geometry, Data, b, a, bias, schedule),
        Pass::Weight => conv::weight_gemm(&geometry, b, a, schedule),
    }
}
