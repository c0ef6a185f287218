//! The default algorithm of a large convolution pass: every algorithm that serves it, timed on
//! its first call and remembered for the process. Which one wins depends on the CPU (its vector
//! width, caches and core count) as much as on the shape, so a fixed rule tuned on one machine
//! picks the slower one on another.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::spec::ConvGeometry;

use super::{Algorithm, Pass};

/// Multiply-adds from which a pass is timed (about a millisecond on one core): below, the
/// timing would be noise and the rule's choice costs little either way.
const MIN_MULTIPLY_ADDS: usize = 1 << 26;

/// Runs of each candidate on the first call; the fastest run counts, so a candidate that ran
/// first, on cold caches, is not judged by that.
const ROUNDS: usize = 3;

/// What a remembered choice is valid for: the pass, its element size and threads, and the
/// algorithms that serve it (which its element type and values narrow).
#[derive(PartialEq, Eq, Hash)]
pub struct Key {
    geometry: ConvGeometry,
    pass: Pass,
    element_size: usize,
    threads: usize,
    candidates: Vec<Algorithm>,
}

impl Key {
    /// The key of `pass` over `geometry` in elements of `T` on `threads` threads, timed among
    /// `candidates`.
    pub fn new<T>(
        geometry: &ConvGeometry,
        pass: Pass,
        threads: usize,
        candidates: Vec<Algorithm>,
    ) -> Self {
        Self {
            geometry: *geometry,
            pass,
            element_size: size_of::<T>(),
            threads,
            candidates,
        }
    }
}

static CHOICES: LazyLock<Mutex<HashMap<Key, Algorithm>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether a pass of `geometry` is large enough to time its candidates.
pub fn worth_timing(geometry: &ConvGeometry) -> bool {
    geometry.multiply_adds() >= MIN_MULTIPLY_ADDS
}

/// The fastest of the key's candidates for its pass and its result by `run`: the remembered
/// one, or, on the first call, each timed [`ROUNDS`] times (the fastest run's result returned).
pub fn run_fastest<R>(key: Key, mut run: impl FnMut(Algorithm) -> R) -> (Algorithm, R) {
    let remembered = CHOICES
        .lock()
        .map_or(None, |choices| choices.get(&key).copied());
    if let Some(algorithm) = remembered {
        return (algorithm, run(algorithm));
    }
    let mut best: Option<(Duration, Algorithm, R)> = None;
    for _ in 0..ROUNDS {
        for &algorithm in &key.candidates {
            let start = Instant::now();
            let out = run(algorithm);
            let time = start.elapsed();
            if best.as_ref().is_none_or(|(fastest, ..)| time < *fastest) {
                best = Some((time, algorithm, out));
            }
        }
    }
    let (_, algorithm, out) = best.expect("at least one candidate");
    if let Ok(mut choices) = CHOICES.lock() {
        choices.insert(key, algorithm);
    }
    (algorithm, out)
}
