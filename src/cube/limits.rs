//! What every CubeCL launch must stay within, whatever the kernel.

/// Most loop iterations one unit may run: Mesa's lavapipe (CI's device) ends a shader loop
/// after 65535 iterations, counting those of the loops nested in it, so a longer walk would
/// silently stop short of its sum.
pub const MAX_LOOP_ITERATIONS: usize = 65_535;
