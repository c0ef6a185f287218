//! The integer types a max pool's indices are written in.

/// The integer a max pool writes its indices in: i32 or i64, the width the index tensor
/// stores, so an I32 tensor needs no widened copy and no conversion pass.
pub trait PoolIndex: Copy + Default + Send + Sync + 'static {
    /// A flat index into the input plane.
    fn from_flat(index: usize) -> Self;

    /// `self + offset`, where [`Self::from_flat`] accepted the plane's largest index: no check,
    /// so a row of them vectorizes.
    fn plus(self, offset: usize) -> Self;

    /// `self + other`, wrapping: a lane's offset added to a tap's index.
    fn offset_by(self, other: Self) -> Self;
}

impl PoolIndex for i32 {
    fn from_flat(index: usize) -> Self {
        // The ops check that indices fit (`check_index_dtype`); never wrap regardless.
        i32::try_from(index).unwrap_or_else(|_| panic!("index {index} does not fit in I32"))
    }

    fn plus(self, offset: usize) -> Self {
        self.wrapping_add(offset as i32)
    }

    fn offset_by(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

impl PoolIndex for i64 {
    fn from_flat(index: usize) -> Self {
        index as i64
    }

    fn plus(self, offset: usize) -> Self {
        self.wrapping_add(offset as i64)
    }

    fn offset_by(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}
