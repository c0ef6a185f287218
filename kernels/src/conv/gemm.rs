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

/// The lhs of a forward (`x`) or input-gradient (output gradient) GEMM: `m` rows of (batch,
/// position written) by `k` columns of (channel read within the group, tap).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmLhs {
    pub args: ConvArgs,
    pub m_len: u32,
    pub k_len: u32,
    #[cube(comptime)]
    pub kind: GemmKind,
}

#[cube]
impl GemmLhs {
    /// The element at `pos` and whether it exists (offset 0 where it does not).
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let kind = comptime![self.kind];
        let (m, k) = (row as usize, col as usize);
        let size = written_size(args, kind);
        let positions = volume(&size);
        let taps = volume(&args.kernel);
        let at = unflatten(m % positions, &size);
        let tap = unflatten(k % taps, &args.kernel);
        let (source, reached) = tap_position(args, &at, &tap, kind);
        let inside = row < self.m_len && col < self.k_len && reached;
        let (read_channels, _) = group_channels(args, kind);
        let channel = group * read_channels + k / taps;
        let element = offset(&read_layout(args, kind), m / positions, channel, &source);
        (select(inside, element, 0), inside)
    }
}

#[cube]
impl ViewLayout for GemmLhs {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        self.locate(pos).0
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        self.locate(pos)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.m_len, self.k_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        self.locate(pos).1
    }
}

/// The rhs of a forward or input-gradient GEMM: the contiguous weight as `k` rows of (channel
/// read within the group, tap) by `n` columns of channels written within the group.
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
impl ViewLayout for GemmRhs {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        let (group, row, col) = pos;
        let args = &self.args;
        let taps = volume(&args.kernel);
        let (k, n) = (row as usize, col as usize);
        let (read, tap) = (k / taps, k % taps);
        let first_out = group * args.out_channels;
        if comptime![self.kind == GemmKind::Data] {
            weight_index(args, first_out + read, n, tap)
        } else {
            weight_index(args, first_out + n, read, tap)
        }
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        let inside = self.is_in_bounds(pos);
        (select(inside, self.to_source_pos(pos), 0), inside)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.k_len, self.n_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        let (_, row, col) = pos;
        row < self.k_len && col < self.n_len
    }
}

/// The result of a forward or input-gradient GEMM: `m` rows of (batch, position written) by
/// `n` columns of channels written within the group, in the written side's layout.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmOut {
    pub args: ConvArgs,
    pub m_len: u32,
    pub n_len: u32,
    #[cube(comptime)]
    pub kind: GemmKind,
}

#[cube]
impl ViewLayout for GemmOut {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        let (group, row, col) = pos;
        let args = &self.args;
        let kind = comptime![self.kind];
        let size = written_size(args, kind);
        let positions = volume(&size);
        let m = row as usize;
        let at = unflatten(m % positions, &size);
        let (_, written_channels) = group_channels(args, kind);
        let channel = group * written_channels + col as usize;
        offset(&written_layout(args, kind), m / positions, channel, &at)
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        let inside = self.is_in_bounds(pos);
        (select(inside, self.to_source_pos(pos), 0), inside)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.m_len, self.n_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        let (_, row, col) = pos;
        row < self.m_len && col < self.n_len
    }
}

/// The bias as the initial accumulator of a forward or input-gradient GEMM: every row of
/// column `n` of group `g` reads `bias[g * n_len + n]`.
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct GemmBias {
    pub m_len: u32,
    pub n_len: u32,
}

#[cube]
impl ViewLayout for GemmBias {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        let (group, _, col) = pos;
        group * self.n_len as usize + col as usize
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        let inside = self.is_in_bounds(pos);
        (select(inside, self.to_source_pos(pos), 0), inside)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.m_len, self.n_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        let (_, row, col) = pos;
        row < self.m_len && col < self.n_len
    }
}

/// The lhs of a weight-gradient GEMM: the output gradient as `m` rows of output channels
/// within the group by `k` columns of (batch, output position).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightLhs {
    pub args: ConvArgs,
    pub m_len: u32,
    pub k_len: u32,
}

#[cube]
impl ViewLayout for WeightLhs {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        let (group, row, col) = pos;
        let args = &self.args;
        let positions = volume(&args.out_size);
        let k = col as usize;
        let at = unflatten(k % positions, &args.out_size);
        let channel = group * args.out_channels + row as usize;
        offset(&args.out_layout, k / positions, channel, &at)
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        let inside = self.is_in_bounds(pos);
        (select(inside, self.to_source_pos(pos), 0), inside)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.m_len, self.k_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        let (_, row, col) = pos;
        row < self.m_len && col < self.k_len
    }
}

/// The rhs of a weight-gradient GEMM: `x` gathered as `k` rows of (batch, output position) by
/// `n` columns of (input channel within the group, tap).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightRhs {
    pub args: ConvArgs,
    pub k_len: u32,
    pub n_len: u32,
}

#[cube]
impl WeightRhs {
    /// The element at `pos` and whether it exists (offset 0 where it does not).
    fn locate(&self, pos: BatchedCoords) -> (usize, bool) {
        let (group, row, col) = pos;
        let args = &self.args;
        let (k, n) = (row as usize, col as usize);
        let positions = volume(&args.out_size);
        let taps = volume(&args.kernel);
        let at = unflatten(k % positions, &args.out_size);
        let tap = unflatten(n % taps, &args.kernel);
        let (source, reached) = tap_position(args, &at, &tap, GemmKind::Forward);
        let inside = row < self.k_len && col < self.n_len && reached;
        let channel = group * args.in_channels + n / taps;
        let element = offset(&args.in_layout, k / positions, channel, &source);
        (select(inside, element, 0), inside)
    }
}

#[cube]
impl ViewLayout for WeightRhs {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        self.locate(pos).0
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        self.locate(pos)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.k_len, self.n_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        self.locate(pos).1
    }
}

/// The result of a weight-gradient GEMM: the contiguous weight gradient as `m` rows of output
/// channels within the group by `n` columns of (input channel within the group, tap).
#[derive(CubeType, CubeLaunch, Clone)]
#[expand(derive(Clone))]
pub struct WeightOut {
    pub args: ConvArgs,
    pub m_len: u32,
    pub n_len: u32,
}

#[cube]
impl ViewLayout for WeightOut {
    type Coordinates = BatchedCoords;
    type SourceCoordinates = Coords1d;

    fn to_source_pos(&self, pos: Self::Coordinates) -> usize {
        let (group, row, col) = pos;
        let taps = volume(&self.args.kernel);
        let n = col as usize;
        weight_index(
            &self.args,
            group * self.args.out_channels + row as usize,
            n / taps,
            n % taps,
        )
    }

    fn to_source_pos_checked(&self, pos: Self::Coordinates) -> (usize, bool) {
        let inside = self.is_in_bounds(pos);
        (select(inside, self.to_source_pos(pos), 0), inside)
    }

    fn shape(&self) -> Self::Coordinates {
        (1, self.m_len, self.n_len)
    }

    fn is_in_bounds(&self, pos: Self::Coordinates) -> bool {
        let (_, row, col) = pos;
        row < self.m_len && col < self.n_len
    }
}
