//! The convolution's GEMM operands as layouts of cubek-matmul's views, so cubek's multi-level
//! GEMM routines (register tiles on any device; tensor-core tiles where the device has them)
//! compute a pass reading and writing our tensors in place, in whatever layout they arrive.
//!
//! Each layout maps a GEMM coordinate `(group, row, col)` to an element of one tensor and says
//! whether it exists: a tap in the padding (or, in a strided input gradient, between the
//! stride's positions), or a row or column past the GEMM's end, is out of bounds, which cubek's
//! loaders read as zero and its writers skip. The rows, columns and reductions are those of
//! the table in [`super`]; the index formulas are [`super::operands`]'.
//!
//! | layout | forward / input gradient | weight gradient |
//! | --- | --- | --- |
//! | lhs | [`GemmLhs`]: `x` / output gradient, gathered per tap | [`WeightLhs`]: output gradient |
//! | rhs | [`GemmRhs`]: the contiguous weight | [`WeightRhs`]: `x`, gathered per tap |
//! | out | [`GemmOut`]: the written side, in its layout | [`WeightOut`]: the contiguous weight gradient |
//! | acc | [`GemmBias`]: the bias, broadcast over rows | none |

use cubecl::prelude::*;
use cubecl::std::tensor::layout::{
    Coords1d, Layout as ViewLayout, LayoutExpand as ViewLayoutExpand,
};
use cubek_matmul::multi_level::args::BatchedCoords;

use crate::axes::{offset, unflatten, volume};

use super::operands::{read_layout, tap_position, weight_index, written_layout, written_size};
use super::{ConvArgs, GemmKind};

/// Channels per group on the side a forward (the input) or input-gradient (the output) GEMM
/// reads, and on the side it writes.
#[cube]
fn group_channels(args: &ConvArgs, #[comptime] kind: GemmKind) -> (usize, usize) {
    if comptime![kind == GemmKind::Data] {
        (args.out_channels, args.in_channels)
    } else {
        (args.in_channels, args.out_channels)
    }
}

/// A GEMM index over (tap, channel) as (channel within the group, tap): a forward or
/// input-gradient GEMM's `k`, a weight gradient's `n`. It runs over taps, each over the group's
/// `channels`, channel fastest, so consecutive indices are consecutive channels, which a
/// channels-last operand holds side by side (cubek's loaders then read them as one vector).
#[cube]
fn channel_and_tap(index: usize, channels: usize) -> (usize, usize) {
    (index % channels, index / channels)
}

/// Whether `(row, col)` lies within a `rows` x `cols` matrix.
#[cube]
fn within(row: u32, col: u32, rows: u32, cols: u32) -> bool {
    row < rows && col < cols
}

/// `element` and `inside`, the element 0 where it is not inside (an address that exists).
#[cube]
fn located(element: usize, inside: bool) -> (usize, bool) {
    (select(inside, element, 0), inside)
}

/// The view layout of `$layout`, whose cube method `locate` gives each coordinate's element
/// and whether it exists, over a `$rows` x `$cols` matrix.
macro_rules! view_layout {
    ($layout:ident, $rows:ident, $cols:ident) => {
        #[cube]
        impl ViewLayout for $layout {
            type Coordinates = BatchedCoords;
            type SourceCoordinates = Coords1d;

            fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
                self.locate(pos).0
            }

            fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
                self.locate(pos)
            }

            fn shape(&self) -> Self::Coordinates {
                (1, self.$rows, self.$cols)
            }

            fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
                self.locate(pos).1
            }
        }
    };
}

/// The lhs of a forward (`x`) or input-gradient (output gradient) GEMM: `m` rows of (batch,
/// position written) by `k` columns of (tap, channel read within the group), read `vector`
/// channels at a time (more than one only where the launcher found them side by side and
/// aligned: channels-last, the group's channels and every other stride a multiple of it).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmLhs {
    pub args: ConvArgs,
    pub m_len: u32,
    pub k_len: u32,
    #[cube(comptime)]
    pub kind: GemmKind,
    #[cube(comptime)]
    pub vector: usize,
}

#[cube]
impl GemmLhs {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let kind = comptime![self.kind];
        let (m, k) = (row as usize, col as usize);
        let size = written_size(args, kind);
        let positions = volume(&size);
        let at = unflatten(m % positions, &size);
        let (read_channels, _) = group_channels(args, kind);
        let (read, tap) = channel_and_tap(k, read_channels);
        let tap = unflatten(tap, &args.kernel);
        let (source, reached) = tap_position(args, &at, &tap, kind);
        let channel = group * read_channels + read;
        let element = offset(&read_layout(args, kind), m / positions, channel, &source);
        let vector = comptime![self.vector];
        located(
            element / vector,
            within(row, col, self.m_len, self.k_len) && reached,
        )
    }
}

view_layout!(GemmLhs, m_len, k_len);

/// The rhs of a forward or input-gradient GEMM: the contiguous weight as `k` rows of (tap,
/// channel read within the group) by `n` columns of channels written within the group.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmRhs {
    pub args: ConvArgs,
    pub k_len: u32,
    pub n_len: u32,
    #[cube(comptime)]
    pub kind: GemmKind,
}

#[cube]
impl GemmRhs {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let (k, n) = (row as usize, col as usize);
        let (read_channels, _) = group_channels(args, comptime![self.kind]);
        let (read, tap) = channel_and_tap(k, read_channels);
        let first_out = group * args.out_channels;
        let element = if comptime![self.kind == GemmKind::Data] {
            weight_index(args, first_out + read, n, tap)
        } else {
            weight_index(args, first_out + n, read, tap)
        };
        located(element, within(row, col, self.k_len, self.n_len))
    }
}

view_layout!(GemmRhs, k_len, n_len);

/// The result of a forward or input-gradient GEMM: `m` rows of (batch, position written) by
/// `n` columns of channels written within the group, in the written side's layout, written
/// `vector` channels at a time (as [`GemmLhs`] reads them).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmOut {
    pub args: ConvArgs,
    pub m_len: u32,
    pub n_len: u32,
    #[cube(comptime)]
    pub kind: GemmKind,
    #[cube(comptime)]
    pub vector: usize,
}

#[cube]
impl GemmOut {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let kind = comptime![self.kind];
        let size = written_size(args, kind);
        let positions = volume(&size);
        let m = row as usize;
        let at = unflatten(m % positions, &size);
        let (_, written_channels) = group_channels(args, kind);
        let channel = group * written_channels + col as usize;
        let element = offset(&written_layout(args, kind), m / positions, channel, &at);
        let vector = comptime![self.vector];
        located(element / vector, within(row, col, self.m_len, self.n_len))
    }
}

view_layout!(GemmOut, m_len, n_len);

/// The bias as the initial accumulator of a forward or input-gradient GEMM: every row of
/// column `n` of group `g` reads `bias[g * n_len + n]`, `vector` columns at a time (as
/// [`GemmOut`] writes them).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmBias {
    pub m_len: u32,
    pub n_len: u32,
    #[cube(comptime)]
    pub vector: usize,
}

#[cube]
impl GemmBias {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let element = group * self.n_len as usize + col as usize;
        let vector = comptime![self.vector];
        located(element / vector, within(row, col, self.m_len, self.n_len))
    }
}

view_layout!(GemmBias, m_len, n_len);

/// The lhs of a weight-gradient GEMM: the output gradient as `m` rows of output channels
/// within the group by `k` columns of (batch, output position), read `vector` channels (rows)
/// at a time, as [`GemmLhs`] reads its.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightLhs {
    pub args: ConvArgs,
    pub m_len: u32,
    pub k_len: u32,
    #[cube(comptime)]
    pub vector: usize,
}

#[cube]
impl WeightLhs {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let positions = volume(&args.out_size);
        let k = col as usize;
        let at = unflatten(k % positions, &args.out_size);
        let channel = group * args.out_channels + row as usize;
        let element = offset(&args.out_layout, k / positions, channel, &at);
        let vector = comptime![self.vector];
        located(element / vector, within(row, col, self.m_len, self.k_len))
    }
}

view_layout!(WeightLhs, m_len, k_len);

/// The rhs of a weight-gradient GEMM: `x` gathered as `k` rows of (batch, output position) by
/// `n` columns of (tap, input channel within the group), channel fastest, read `vector`
/// channels at a time.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightRhs {
    pub args: ConvArgs,
    pub k_len: u32,
    pub n_len: u32,
    #[cube(comptime)]
    pub vector: usize,
}

#[cube]
impl WeightRhs {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let (k, n) = (row as usize, col as usize);
        let positions = volume(&args.out_size);
        let at = unflatten(k % positions, &args.out_size);
        let (read, tap) = channel_and_tap(n, args.in_channels);
        let tap = unflatten(tap, &args.kernel);
        let (source, reached) = tap_position(args, &at, &tap, GemmKind::Forward);
        let channel = group * args.in_channels + read;
        let element = offset(&args.in_layout, k / positions, channel, &source);
        let vector = comptime![self.vector];
        located(
            element / vector,
            within(row, col, self.k_len, self.n_len) && reached,
        )
    }
}

view_layout!(WeightRhs, k_len, n_len);

/// The result of a weight-gradient GEMM: the contiguous weight gradient as `m` rows of output
/// channels within the group by `n` columns of (tap, input channel within the group), as
/// [`WeightRhs`] orders them.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightOut {
    pub args: ConvArgs,
    pub m_len: u32,
    pub n_len: u32,
}

#[cube]
impl WeightOut {
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let (read, tap) = channel_and_tap(col as usize, self.args.in_channels);
        let out_channel = group * self.args.out_channels + row as usize;
        let element = weight_index(&self.args, out_channel, read, tap);
        located(element, within(row, col, self.m_len, self.n_len))
    }
}

view_layout!(WeightOut, m_len, n_len);
