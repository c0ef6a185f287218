//! The direct weight gradient with output points in the vector lanes, for the layers whose
//! forward pass takes the spatial tiles (`spatial.rs`): a tile holds a few output channels by
//! a few reduction steps, one vector of lane-wise sums each. Over every run of output points
//! of a gang of images it loads the channels' output gradients and each step's inputs from
//! the bordered copies, one vector apiece, and multiplies every pair:
//! `sums[c][s] += out_grad[c][run] * copy[run + step s]`. Each sum's lanes are then added
//! together once per gang. The output gradients are first copied into rows a whole number of
//! vectors long, zeros past each row's end, so a run shorter than a vector multiplies the
//! inputs beside its row by zero: exact only for finite inputs, which is where it runs
//! (`direct::weight_backward` checks).

use core::ptr::read_unaligned;

use pulp::{Simd, WithSimd};

use crate::spec::ConvGeometry;

use super::Walk;
use super::gangs::Gangs;
use super::spatial::{Run, runs, vector_lanes};
use super::tiles::wide_registers;
use crate::cpu::kernels::element::{Split, sum_of_partials};

/// Output channels and reduction steps per tile with AVX-512's 32 registers: 20 sums, the
/// channels' 4 output gradient vectors and the steps' 5 input vectors, nine loads per 20
/// FMAs. Six steps spilled sums to the stack; 16 to 16 channels 3x3 on 14x14 and 56x56
/// planes decide it.
const WIDE_TILE: (usize, usize) = (4, 5);

/// The same with 16 registers (AVX2 and narrower): 8 sums, 2 output gradient vectors and an
/// input vector, six loads per eight FMAs.
const NARROW_TILE: (usize, usize) = (2, 4);

/// Output points of a gang: a tile's sums run over all of them in registers before their
/// lanes are added up, so that the horizontal sums cost little.
const GANG_POINTS: usize = 1024;

/// The gradient of `conv` with respect to `weight` in f32 with `simd`'s vectors, into `grad`
/// (the weights' layout), for a shape whose forward pass the spatial tiles fit
/// (`spatial::fits`). The batch is cut into one contiguous chunk per thread and the chunks'
/// partial gradients summed in chunk order, so the result does not depend on scheduling.
#[inline(always)]
pub(super) fn run<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    out_grad: &[f32],
    grad: &mut [f32],
) {
    if wide_registers::<S>() {
        run_in::<S, { WIDE_TILE.0 }, { WIDE_TILE.1 }>(simd, g, x, out_grad, grad);
    } else {
        run_in::<S, { NARROW_TILE.0 }, { NARROW_TILE.1 }>(simd, g, x, out_grad, grad);
    }
}

/// A run of a gang: where it reads in the gang's copies and in its output gradient panel.
#[derive(Clone, Copy)]
struct GangRun {
    /// The run's origin in the gang's copies.
    origin: usize,
    /// Its first point in the panel's plane of the group's first output channel.
    panel: usize,
}

/// A gang's output gradients, each row padded with zeros to a whole number of vectors.
struct Panel {
    values: Vec<f32>,
    /// Elements per padded row.
    pitch: usize,
    /// Elements per padded plane (one channel of one image).
    plane: usize,
}

impl Panel {
    /// Zeros for `gang` images of `channels` planes of `rows` rows, each `lanes`-padded from
    /// `width`.
    fn new(gang: usize, channels: usize, rows: usize, width: usize, lanes: usize) -> Self {
        let pitch = width.div_ceil(lanes) * lanes;
        let plane = rows * pitch;
        Self {
            values: vec![0.0; gang * channels * plane],
            pitch,
            plane,
        }
    }

    /// `planes` (contiguous output planes of `width`-long rows) into the panel from plane
    /// `first`, row by row; the padding stays zero.
    fn fill(&mut self, first: usize, planes: &[f32], width: usize) {
        let rows = planes.chunks_exact(width);
        let padded = self.values[first * self.plane..].chunks_exact_mut(self.pitch);
        for (row, padded) in rows.zip(padded) {
            padded[..width].copy_from_slice(row);
        }
    }
}

/// [`run`] in tiles of `C` output channels by `T` reduction steps.
fn run_in<S: Simd, const C: usize, const T: usize>(
    simd: S,
    g: &ConvGeometry,
    x: &[f32],
    out_grad: &[f32],
    grad: &mut [f32],
) {
    let walk = &Walk::new(g);
    let lanes = vector_lanes::<S>();
    let (cout_g, out_vol, patch) = (g.out_per_group(), g.out_volume(), g.patch_len());
    let image_runs = runs(g, walk, lanes);
    let image_len = walk.copy_len(g);
    let gangs = Gangs::new(g, GANG_POINTS, image_len);
    let gang = gangs.gang;
    let (rows, width) = (out_vol / g.out_size[2], g.out_size[2]);
    let partial = |chunk: usize| {
        let mut partial = vec![0.0; grad.len()];
        // The copies end in a vector of slack: a run's read may pass its row's end.
        let mut copies = vec![0.0; gang * image_len + lanes];
        let mut panel = Panel::new(gang, cout_g, rows, width, lanes);
        let mut gang_runs = Vec::new();
        let images = gangs.images(g, chunk);
        for first_image in images.clone().step_by(gang) {
            let members = first_image..(first_image + gang).min(images.end);
            for group in 0..g.groups {
                gang_runs.clear();
                for (i, n) in members.clone().enumerate() {
                    walk.fill_into(g, x, n, group, &mut copies[i * image_len..][..image_len]);
                    let planes = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..];
                    panel.fill(i * cout_g, &planes[..cout_g * out_vol], width);
                    gang_runs.extend(image_runs.iter().map(|run: &Run| GangRun {
                        origin: i * image_len + run.origin,
                        panel: i * cout_g * panel.plane
                            + run.first / width * panel.pitch
                            + run.first % width,
                    }));
                }
                let group_grad = &mut partial[group * cout_g * patch..][..cout_g * patch];
                simd.vectorize(GangGradient::<S, C, T> {
                    simd,
                    copies: &copies,
                    panel: &panel.values,
                    plane: panel.plane,
                    steps: &walk.steps,
                    runs: &gang_runs,
                    grad: group_grad,
                });
            }
        }
        partial
    };
    let sum = sum_of_partials(
        gangs.chunks,
        grad.len(),
        Split::for_items(gangs.chunks, g.multiply_adds()),
        partial,
    );
    grad.copy_from_slice(&sum);
}

/// One group's gradient over one gang's runs, added to `grad` (`[channel][step]`): tiles of
/// `C` channels by `T` steps. A [`WithSimd`] op, so the tiles compile to `simd`'s vectors.
struct GangGradient<'a, S, const C: usize, const T: usize> {
    simd: S,
    copies: &'a [f32],
    /// The gang's output gradients, rows padded ([`Panel`]).
    panel: &'a [f32],
    /// Elements per padded plane.
    plane: usize,
    /// Per reduction step, its offset in an image's copy.
    steps: &'a [usize],
    runs: &'a [GangRun],
    grad: &'a mut [f32],
}

impl<S: Simd, const C: usize, const T: usize> WithSimd for GangGradient<'_, S, C, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _simd: S2) {
        let Self {
            simd,
            copies,
            panel,
            plane,
            steps,
            runs,
            grad,
        } = self;
        let lanes = vector_lanes::<S>();
        let patch = steps.len();
        let channels = grad.len() / patch.max(1);
        let last_step = steps.last().copied().unwrap_or(0);
        let last_origin = runs.iter().map(|run| run.origin).max().unwrap_or(0);
        let last_panel = runs.iter().map(|run| run.panel).max().unwrap_or(0);
        assert!(
            last_origin + last_step + lanes <= copies.len()
                && (channels == 0 || last_panel + (channels - 1) * plane + lanes <= panel.len()),
            "spatial weight tiles read past their operands"
        );
        let zero = simd.splat_f32s(0.0);
        for first_channel in (0..channels).step_by(C) {
            // A block's channels past the group's last read the last one again; their sums
            // are dropped.
            let channel = |c: usize| (first_channel + c).min(channels - 1);
            for first_step in (0..patch).step_by(T) {
                let step: [usize; T] =
                    core::array::from_fn(|s| steps[(first_step + s).min(patch - 1)]);
                let mut sums = [[zero; T]; C];
                for run in runs {
                    // SAFETY: every run's panel position plus a channel's planes, and its origin
                    // plus a step, are a vector or more inside their slices (checked above).
                    let grads: [S::f32s; C] = core::array::from_fn(|c| unsafe {
                        load::<S>(panel, run.panel + channel(c) * plane)
                    });
                    for (s, &step) in step.iter().enumerate() {
                        // SAFETY: as above.
                        let input = unsafe { load::<S>(copies, run.origin + step) };
                        for (sums, &grad) in sums.iter_mut().zip(&grads) {
                            sums[s] = simd.mul_add_e_f32s(grad, input, sums[s]);
                        }
                    }
                }
                for (c, sums) in sums.iter().enumerate() {
                    let channel = first_channel + c;
                    if channel >= channels {
                        break;
                    }
                    let row = &mut grad[channel * patch..][..patch];
                    for (s, sum) in sums.iter().enumerate() {
                        if let Some(slot) = row.get_mut(first_step + s) {
                            *slot += simd.reduce_sum_f32s(*sum);
                        }
                    }
                }
            }
        }
    }
}

/// The vector of `values` from `at`, unaligned.
///
/// # Safety
/// `at` plus a vector's lanes is at most `values.len()`.
#[inline(always)]
unsafe fn load<S: Simd>(values: &[f32], at: usize) -> S::f32s {
    // SAFETY: the caller's.
    unsafe { read_unaligned(values.as_ptr().add(at).cast::<S::f32s>()) }
}
