//! The direct path's input gradient of a strided convolution, one stride phase of the input at
//! a time. The inputs `phase + stride * j` of an axis meet only the taps aligned with their
//! phase, each reading the output gradient at `j` plus a fixed shift
//! ([`ConvGeometry::data_phase`]): per phase, a stride-1 convolution of the output gradient.
//! The forward pass's tiles run every phase over one bordered copy of the output gradient,
//! input channels in the vector lanes, and each phase's sums are stored straight into its
//! strided places: no patch matrix, no col2im, and no phase grid computed and dropped.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::spec::{ConvGeometry, DataPhase, points};

use super::accumulate_in_passes;
use super::tiles::{BLOCK_VECTORS, lanes, to_lanes};
use crate::cpu::kernels::element::{Element, in_f32, min_items_per_task};
use crate::cpu::kernels::flat;
use crate::cpu::kernels::transpose::transpose;

/// Whether the direct path computes `geometry`'s input gradient: a strided convolution (a
/// stride-1 one is a forward pass, `Algorithm::Adjoint`) with inputs, outputs and channels,
/// whose copy of the output gradient stays near the larger side's size.
pub fn serves_data(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    g.stride.iter().any(|&s| s > 1)
        && g.batch > 0
        && g.in_per_group() > 0
        && g.out_per_group() > 0
        && g.in_volume() > 0
        && g.out_volume() > 0
        && GradientCopy::new(&g).is_some()
}

/// Input channels per group from which the rule takes the direct input gradient: they are
/// its vector lanes, as the output channels are the forward pass's (`MIN_OUT_CHANNELS`); a
/// 3-channel input (a DCGAN discriminator's first layer) ran 3x slower than the lowered path.
const MIN_IN_CHANNELS: usize = 16;

/// Whether, by rule, the direct input gradient beats the lowered one (where the phase grids
/// fit, the rule takes them, and a pass large enough to time picks between the two): a
/// phase of more than one tap (a strided 1x1 convolution's gradient is one GEMM and a
/// scatter, and faster) and enough input channels to fill the lanes. The
/// `dcgan_up_128x16x16` forward row and the `example_resnet_3x3s2_*` input-gradient rows
/// decide it: there it beats the phase grids and the lowered path. A long 1D layer runs
/// slower than the phase grids, but it is a pass large enough for `conv::fastest` to time.
pub fn data_pays(geometry: &ConvGeometry) -> bool {
    let g = geometry.normalised();
    // The phases are found last: the rule asks every call, and a small call's host work is
    // what the `dispatch_conv3x3` input-gradient row times.
    let longest = || {
        (0..3)
            .map(|a| {
                let taps = reached_phases(&g, a).into_iter().map(|(_, p)| p.taps.len());
                taps.max().unwrap_or(0)
            })
            .product::<usize>()
    };
    g.in_per_group() >= MIN_IN_CHANNELS && serves_data(&g) && longest() > 1
}

/// Gradient of `conv` with respect to `x`, shape `geometry.in_shape()`, for a shape the
/// direct path [`serves_data`], in f32. The copy's border multiplies every weight by zero, so
/// a weight that is not finite leaves NaN there for `conv::x_backward` to sum again by the
/// definition.
pub fn x_backward<T: Element>(geometry: &ConvGeometry, weight: &[T], out_grad: &[T]) -> Vec<T> {
    let g = geometry.normalised();
    in_f32(g.in_shape().iter().product(), |x_grad| {
        pulp::Arch::new().dispatch(DataGradient {
            geometry: &g,
            weight: bytemuck::cast_slice(weight),
            out_grad: bytemuck::cast_slice(out_grad),
            x_grad,
        })
    })
}

/// [`x_backward`] in f32, into `x_grad` (zeros), as a `pulp` op: it picks the instruction
/// set, and so the block width, that every tile then runs in.
struct DataGradient<'a> {
    geometry: &'a ConvGeometry,
    weight: &'a [f32],
    out_grad: &'a [f32],
    x_grad: &'a mut [f32],
}

impl WithSimd for DataGradient<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        run(simd, self.geometry, self.weight, self.out_grad, self.x_grad);
    }
}

/// The region of an output-gradient plane that the phases read: output position
/// `low + p` at the copy's position `p` on each axis, zero where that is not an output.
struct GradientCopy {
    size: [usize; 3],
    low: [i128; 3],
}

impl GradientCopy {
    /// `None` where the copy would be much larger than both sides' planes (a padding far
    /// wider than the kernel) or past `usize`.
    fn new(g: &ConvGeometry) -> Option<Self> {
        let mut size = [0; 3];
        let mut low = [0; 3];
        for axis in 0..3 {
            let phases = reached_phases(g, axis);
            let shifts = || {
                phases
                    .iter()
                    .flat_map(|(_, p)| p.taps.iter().map(|&(_, s)| s))
            };
            // No phase of this axis is reached: the gradient is zero, and nothing is read.
            let Some(first) = shifts().min() else {
                return Some(Self { size: [0; 3], low });
            };
            let last = phases
                .iter()
                .filter_map(|(_, p)| Some(p.count as i128 - 1 + p.taps.iter().map(|t| t.1).max()?))
                .max()?;
            size[axis] = usize::try_from(last - first + 1).ok()?;
            low[axis] = first;
        }
        let volume = size.iter().try_fold(1usize, |v, &len| v.checked_mul(len))?;
        let bound = g
            .in_volume()
            .max(g.out_volume())
            .saturating_mul(2)
            .saturating_add(4096);
        (volume <= bound).then_some(Self { size, low })
    }

    fn plane_len(&self) -> usize {
        self.size.iter().product()
    }

    /// Copy the planes of `out_grad` into `copy` (a plane each), zeros outside the output
    /// gradient; a `copy` already of that size holds them from an earlier fill.
    fn fill(&self, g: &ConvGeometry, out_grad: &[f32], copy: &mut Vec<f32>) {
        let (plane_len, out_vol) = (self.plane_len(), g.out_volume());
        let planes = out_grad.len() / out_vol;
        if copy.len() != planes * plane_len {
            copy.clear();
            copy.resize(planes * plane_len, 0.0);
        }
        let [_, size_h, size_w] = self.size;
        let [out_d, out_h, out_w] = g.out_size.map(|len| len as i128);
        // The copy's columns that hold outputs, from output column `low_w + columns.start`.
        let inside = |p: usize, low: i128, len: i128| (0..len).contains(&(p as i128 + low));
        let columns: Vec<usize> = (0..size_w)
            .filter(|&p| inside(p, self.low[2], out_w))
            .collect();
        let (Some(&first), Some(&last)) = (columns.first(), columns.last()) else {
            return;
        };
        let column = (first as i128 + self.low[2]) as usize;
        for (plane, copy_plane) in out_grad
            .chunks_exact(out_vol)
            .zip(copy.chunks_exact_mut(plane_len))
        {
            for (row, copy_row) in copy_plane.chunks_exact_mut(size_w).enumerate() {
                let (d, h) = (row / size_h, row % size_h);
                if inside(d, self.low[0], out_d) && inside(h, self.low[1], out_h) {
                    let (od, oh) = (d as i128 + self.low[0], h as i128 + self.low[1]);
                    let start = ((od * out_h + oh) * out_w) as usize + column;
                    copy_row[first..=last].copy_from_slice(&plane[start..][..=last - first]);
                }
            }
        }
    }
}

/// The phases of `axis` that hold inputs and that some tap reaches, each with its phase:
/// found from the taps (tap `k` reaches phase `(k * dilation - pad) mod stride`), so a stride
/// far wider than the kernel (a huge padding's) costs no more than the kernel.
fn reached_phases(g: &ConvGeometry, axis: usize) -> Vec<(usize, DataPhase)> {
    let (stride, pad, dilation) = (
        g.stride[axis] as i128,
        g.pad_begin[axis] as i128,
        g.dilation[axis] as i128,
    );
    let mut phases: Vec<usize> = (0..g.kernel[axis])
        .map(|tap| (tap as i128 * dilation - pad).rem_euclid(stride) as usize)
        .collect();
    phases.sort_unstable();
    phases.dedup();
    phases
        .into_iter()
        .map(|phase| (phase, g.data_phase(axis, phase)))
        .filter(|(_, p)| p.count > 0 && !p.taps.is_empty())
        .collect()
}

/// One phase of the input on every axis: a stride-1 convolution over the copy.
struct Phase {
    /// Per reduction step (output channel of a group, then tap), its offset in the copy:
    /// ascending, the taps ordered by shift.
    steps: Vec<usize>,
    /// Per tap of a step's channel, in the steps' order, its flat index in the kernel.
    taps: Vec<usize>,
    /// Per point (input position of the phase, in order), its origin in a plane of the copy.
    origins: Vec<usize>,
    /// Per point, its flat index in an input plane.
    targets: Vec<usize>,
}

impl Phase {
    /// The phase `first` of each axis, with its reaching taps (`axes`: `(first, phase)`),
    /// over `copy`.
    fn new(g: &ConvGeometry, copy: &GradientCopy, axes: [&(usize, DataPhase); 3]) -> Self {
        // Each axis's taps by shift, so that the steps' offsets ascend.
        let by_shift = axes.map(|(_, phase)| {
            let mut taps = phase.taps.clone();
            taps.sort_by_key(|&(_, shift)| shift);
            taps
        });
        let (mut offsets, mut taps) = (Vec::new(), Vec::new());
        for at in points(by_shift.each_ref().map(Vec::len)) {
            let tap: [(usize, i128); 3] = core::array::from_fn(|a| by_shift[a][at[a]]);
            let at = core::array::from_fn(|a| (tap[a].1 - copy.low[a]) as usize);
            offsets.push(flat(at, copy.size));
            taps.push(flat(tap.map(|(k, _)| k), g.kernel));
        }
        let plane_len = copy.plane_len();
        let steps = (0..g.out_per_group())
            .flat_map(|c| offsets.iter().map(move |&o| c * plane_len + o))
            .collect();
        let count = axes.map(|(_, phase)| phase.count);
        let origins = points(count).map(|m| flat(m, copy.size)).collect();
        let targets = points(count)
            .map(|m| {
                let i = core::array::from_fn(|a| axes[a].0 + g.stride[a] * m[a]);
                flat(i, g.in_size)
            })
            .collect();
        Self {
            steps,
            taps,
            origins,
            targets,
        }
    }
}

/// Every phase with a reaching tap on each axis, over one copy.
struct Walk {
    copy: GradientCopy,
    phases: Vec<Phase>,
}

impl Walk {
    fn new(g: &ConvGeometry) -> Self {
        let copy = GradientCopy::new(g).expect("a shape the direct input gradient serves");
        let axes: [Vec<(usize, DataPhase)>; 3] = core::array::from_fn(|a| reached_phases(g, a));
        let phases = points(axes.each_ref().map(Vec::len))
            .map(|[d, h, w]| Phase::new(g, &copy, [&axes[0][d], &axes[1][h], &axes[2][w]]))
            .collect();
        Self { copy, phases }
    }

    /// Reduction steps over every phase.
    fn steps(&self) -> usize {
        self.phases.iter().map(|p| p.steps.len()).sum()
    }

    /// The weights (`C_out x C_in/groups x kernel`) as `[group][block][phase][step][lane]`:
    /// per block of `lanes` input channels, each phase's steps' weights side by side, zero
    /// past the group's last channel. Each output channel's row is moved taps-major once, so
    /// that a step's lanes are a contiguous run of it.
    fn pack_weights(&self, g: &ConvGeometry, weight: &[f32], lanes: usize) -> Vec<f32> {
        let (cin_g, cout_g) = (g.in_per_group(), g.out_per_group());
        let taps = g.kernel.iter().product::<usize>();
        let (blocks, block_steps) = (cin_g.div_ceil(lanes), self.steps());
        let mut packed = vec![0.0; g.groups * blocks * block_steps * lanes];
        let mut by_tap = vec![0.0; taps * cin_g];
        for (oc, row) in weight.chunks_exact(cin_g * taps).enumerate() {
            let (group, c) = (oc / cout_g, oc % cout_g);
            transpose(row, cin_g, taps, &mut by_tap);
            for block in 0..blocks {
                let channels = block * lanes..((block + 1) * lanes).min(cin_g);
                let mut step = (group * blocks + block) * block_steps;
                for phase in &self.phases {
                    for (i, &tap) in phase.taps.iter().enumerate() {
                        let at = (step + c * phase.taps.len() + i) * lanes;
                        packed[at..][..channels.len()]
                            .copy_from_slice(&by_tap[tap * cin_g..][channels.clone()]);
                    }
                    step += phase.steps.len();
                }
            }
        }
        packed
    }
}

/// [`x_backward`] in f32 with `simd`'s vectors, into `x_grad` (zeros). Each image and group's
/// output gradient is copied into its border once; its blocks of input channels are then
/// computed in parallel from the copy.
pub(super) fn run<S: Simd>(
    simd: S,
    g: &ConvGeometry,
    weight: &[f32],
    out_grad: &[f32],
    x_grad: &mut [f32],
) {
    let walk = Walk::new(g);
    if walk.phases.is_empty() {
        return;
    }
    let (cin_g, cout_g, lanes) = (g.in_per_group(), g.out_per_group(), lanes::<S>());
    let (in_vol, out_vol) = (g.in_volume(), g.out_volume());
    let blocks = cin_g.div_ceil(lanes);
    let packed = walk.pack_weights(g, weight, lanes);
    let block_len = walk.steps() * lanes;
    // Each block's input channels take every output channel's taps: the forward pass's work.
    let taps: usize = g.kernel.iter().product();
    let block_work = (lanes * in_vol).saturating_mul(cout_g.saturating_mul(taps));
    x_grad
        .par_chunks_mut(cin_g * in_vol)
        .enumerate()
        .with_min_len(min_items_per_task(blocks.saturating_mul(block_work)))
        .for_each_init(Vec::new, |copy, (item, x_item)| {
            let (n, group) = (item / g.groups, item % g.groups);
            let out_grad = &out_grad[(n * g.out_channels + group * cout_g) * out_vol..];
            walk.copy.fill(g, &out_grad[..cout_g * out_vol], copy);
            let copy: &[f32] = copy;
            x_item
                .par_chunks_mut(lanes * in_vol)
                .enumerate()
                .with_min_len(min_items_per_task(block_work))
                .for_each(|(block, x_block)| {
                    simd.vectorize(DataBlock {
                        simd,
                        copy,
                        walk: &walk,
                        weights: &packed[(group * blocks + block) * block_len..][..block_len],
                        in_vol,
                        x_grad: x_block,
                    });
                });
        });
}

/// One block of input channels over every phase: each phase's sums, one per point, run in
/// passes of a few reduction steps (as the forward pass's `ForwardBlock`), then are stored
/// into the phase's places of the block's planes (`x_grad.len() / in_vol` of them real).
struct DataBlock<'a, S> {
    simd: S,
    copy: &'a [f32],
    walk: &'a Walk,
    /// Per phase and reduction step, the block's weights.
    weights: &'a [f32],
    in_vol: usize,
    x_grad: &'a mut [f32],
}

impl<S: Simd> WithSimd for DataBlock<'_, S> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S2: Simd>(self, _simd: S2) {
        let Self {
            simd,
            copy,
            walk,
            mut weights,
            in_vol,
            x_grad,
        } = self;
        let lanes = lanes::<S>();
        let zero = to_lanes::<S, BLOCK_VECTORS>(&vec![0.0; lanes]);
        let mut sums = Vec::new();
        for phase in &walk.phases {
            let phase_weights;
            (phase_weights, weights) = weights.split_at(phase.steps.len() * lanes);
            sums.clear();
            sums.resize(phase.origins.len(), zero);
            let (steps, origins) = (&phase.steps, &phase.origins);
            accumulate_in_passes(simd, copy, steps, phase_weights, origins, None, &mut sums);
            let sums: &[f32] = bytemuck::cast_slice(&sums);
            for (c, plane) in x_grad.chunks_exact_mut(in_vol).enumerate() {
                for (&target, point) in phase.targets.iter().zip(sums.chunks_exact(lanes)) {
                    plane[target] = point[c];
                }
            }
        }
    }
}
