//! A batch norm's statistics summed as a convolution finishes its output ("ConvGenStats", as
//! cuDNN's fused ResNet blocks name it): each `(n, c)` plane's sum and squared deviations from
//! its own mean while the plane is still in cache, then each channel's mean and biased
//! variance from its planes' (Chan et al.'s merge, in f64, in batch order). A plane's second
//! pass reads it from L1; the conv's output is not read back from memory for them.

use std::sync::atomic::{AtomicU64, Ordering};

use super::element::{Element, WideBody, in_widest_vectors};
use super::finished::FinishedPlanes;
use super::sum::{lane_sum, lane_sum_map};

/// Each plane's sum and sum of squared deviations from its mean, as f64 bits: every plane is
/// stored once, by the task that finished it.
pub struct PlaneMoments {
    volume: usize,
    sums: Vec<AtomicU64>,
    squares: Vec<AtomicU64>,
}

impl PlaneMoments {
    /// Room for `planes` planes of `volume` values.
    pub fn new(planes: usize, volume: usize) -> Self {
        let zeros = || (0..planes).map(|_| AtomicU64::new(0)).collect();
        Self {
            volume,
            sums: zeros(),
            squares: zeros(),
        }
    }

    /// Each channel's mean and biased variance over the `batch` planes it has, `(N, C)` in
    /// row-major order: the planes' sums added, their squared deviations merged with each
    /// plane's distance from the channel's mean. No values (an empty batch or plane) give NaN,
    /// as a mean of nothing does; an infinity gives its mean and a NaN variance, PyTorch's.
    pub fn channels<T: Element>(&self, batch: usize, channels: usize) -> (Vec<T>, Vec<T>) {
        let load = |values: &[AtomicU64], plane: usize| {
            f64::from_bits(values[plane].load(Ordering::Relaxed))
        };
        let volume = self.volume as f64;
        let count = volume * batch as f64;
        (0..channels)
            .map(|c| {
                let planes = (0..batch).map(|n| n * channels + c);
                let mean = planes.clone().map(|p| load(&self.sums, p)).sum::<f64>() / count;
                let squares: f64 = planes
                    .map(|p| {
                        let distance = load(&self.sums, p) / volume - mean;
                        load(&self.squares, p) + volume * distance * distance
                    })
                    .sum();
                (T::from_f64(mean), T::from_f64(squares / count))
            })
            .unzip()
    }
}

impl<T: Element> FinishedPlanes<T> for PlaneMoments {
    fn finished(&self, offset: usize, values: &[T]) {
        if self.volume == 0 {
            return;
        }
        let first = offset / self.volume;
        for (index, plane) in values.chunks_exact(self.volume).enumerate() {
            let (sum, squares) = in_widest_vectors(OnePlane(plane));
            self.sums[first + index].store(sum.to_bits(), Ordering::Relaxed);
            self.squares[first + index].store(squares.to_bits(), Ordering::Relaxed);
        }
    }
}

/// One plane's sum and sum of squared deviations from its mean, pairwise in vector lanes; the
/// second pass reads the plane from L1.
struct OnePlane<'a, T>(&'a [T]);

impl<T: Element> WideBody for OnePlane<'_, T> {
    type Output = (f64, f64);

    #[inline(always)]
    fn run(self) -> (f64, f64) {
        let plane = self.0;
        let sum = lane_sum(plane);
        let mean = sum.div(T::from_f64(plane.len() as f64));
        let squares = lane_sum_map(plane, |v| {
            let deviation = v - mean;
            deviation * deviation
        });
        (sum.elem::<f64>(), squares.elem::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook two-pass statistics of channel `c` in f64.
    fn reference(x: &[f32], batch: usize, channels: usize, c: usize) -> (f64, f64) {
        let volume = x.len() / (batch * channels);
        let values: Vec<f64> = (0..batch)
            .flat_map(|n| &x[(n * channels + c) * volume..][..volume])
            .map(|&v| f64::from(v))
            .collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
        (mean, variance)
    }

    /// Planes handed on in runs of any length and order give each channel's statistics, even
    /// for planes far from zero and from each other (where `E[x^2] - E[x]^2` in f32 fails).
    #[test]
    fn runs_of_planes_in_any_order_give_the_channels_statistics() {
        let (batch, channels, volume) = (5, 3, 37);
        let x: Vec<f32> = (0..batch * channels * volume)
            .map(|i| 1000.0 + 10.0 * (i / volume) as f32 + 0.01 * ((i * 7 % 13) as f32 - 6.0))
            .collect();
        let moments = PlaneMoments::new(batch * channels, volume);
        // Runs of 4, 1 and 10 planes, the last first.
        for (first, planes) in [(5, 10), (4, 1), (0, 4)] {
            let run = &x[first * volume..][..planes * volume];
            moments.finished(first * volume, run);
        }
        let (mean, variance) = moments.channels::<f32>(batch, channels);
        for c in 0..channels {
            let (expected_mean, expected_variance) = reference(&x, batch, channels, c);
            assert!((f64::from(mean[c]) / expected_mean - 1.0).abs() < 1e-7);
            let error = f64::from(variance[c]) / expected_variance - 1.0;
            assert!(
                error.abs() < 1e-5,
                "channel {c}: {} vs {expected_variance}",
                variance[c]
            );
        }
    }

    /// PyTorch's statistics of a channel holding an infinity: the mean the sum gives and a NaN
    /// variance; of one holding both infinities, NaN for both; of no values, NaN.
    #[test]
    fn infinities_and_empty_channels_give_pytorchs_statistics() {
        let inf = f32::INFINITY;
        // (N, C, volume) = (2, 2, 2): channel 0 holds +inf, channel 1 both infinities.
        let x = [1.0, inf, 2.0, -inf, 3.0, 4.0, inf, 5.0];
        let moments = PlaneMoments::new(4, 2);
        moments.finished(0, &x[..]);
        let (mean, variance) = moments.channels::<f32>(2, 2);
        assert_eq!(mean[0], inf);
        assert!(variance[0].is_nan() && mean[1].is_nan() && variance[1].is_nan());
        let (mean, variance) = PlaneMoments::new(0, 4).channels::<f32>(0, 3);
        assert!(mean.iter().chain(&variance).all(|v| v.is_nan()));
    }
}
