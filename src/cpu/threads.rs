//! Rayon workers that wait for work spinning, not asleep: OpenMP's active wait policy, which
//! PyTorch's CPU operators run under (libgomp spins before it sleeps). Between two ops of a
//! training step a Rayon worker soon falls asleep, and the next op's parallel loop runs on the
//! calling thread alone until the worker has been woken; on a virtual machine a woken core can
//! take longer than a small op runs.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

thread_local! {
    /// Calls of [`with_spinning_workers`] this thread runs inside now: while there are any, the
    /// passes it starts split into smaller tasks (`element::SPINNING_TASK_MIN_WORK`).
    static SPINNING: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread runs inside [`with_spinning_workers`] now.
pub(crate) fn workers_spin() -> bool {
    SPINNING.get() > 0
}

/// How long a spinner spins before it hands its worker back to Rayon and queues itself again:
/// a spinner that Rayon runs inside another job's wait (a worker that looks for work while it
/// waits for a join) holds that job back at most this long.
const SLICE: Duration = Duration::from_millis(1);

/// Run `f` with the other workers of the current Rayon pool (the global pool outside one)
/// spinning for work between its ops, instead of falling asleep: each op's parallel loop then
/// starts on every thread at once. The workers spin on their cores until `f` returns, as
/// OpenMP's threads do under PyTorch; use it around a training loop on a machine the loop
/// has to itself. `f` runs on the calling thread, which never spins.
///
/// While it runs, the CPU passes that `f`'s thread starts split into smaller tasks: a task no
/// longer waits for a worker to wake. On two cores the ResNet example trains 1.2x
/// faster inside it (`examples/resnet`).
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_convpool::cpu_kernels::with_spinning_workers;
/// use burn_convpool::{ConvNdOptions, conv2d};
///
/// let device = Device::flex();
/// let x = Tensor::<4>::ones([2, 4, 8, 8], &device);
/// let weight = Tensor::<4>::ones([4, 4, 3, 3], &device);
/// let out = with_spinning_workers(|| conv2d(x, weight, None, ConvNdOptions::default()));
/// assert_eq!(out.dims(), [2, 4, 6, 6]);
/// ```
pub fn with_spinning_workers<R>(f: impl FnOnce() -> R) -> R {
    spinning(&Arc::new(Spinners::default()), f)
}

/// What the spinners of one [`with_spinning_workers`] share.
#[derive(Default)]
struct Spinners {
    /// Set when `f` has returned (or panicked): each spinner stops at its next check.
    stop: AtomicBool,
    /// Slices spun so far.
    slices: AtomicUsize,
}

/// [`with_spinning_workers`] with the spinners' shared state `spinners`.
fn spinning<R>(spinners: &Arc<Spinners>, f: impl FnOnce() -> R) -> R {
    /// Tells the spinners to stop when dropped, on a panic too.
    struct Stop<'a>(&'a Spinners);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.stop.store(true, Ordering::Relaxed);
            SPINNING.set(SPINNING.get() - 1);
        }
    }
    SPINNING.set(SPINNING.get() + 1);
    let _stop = Stop(spinners);
    let caller = rayon::current_thread_index();
    let others = rayon::current_num_threads() - usize::from(caller.is_some());
    for _ in 0..others {
        let spinners = spinners.clone();
        rayon::spawn(move || spin(spinners, caller));
    }
    f()
}

/// One spinner's slice: run the pool's pending jobs as they come, spin when there are none,
/// until told to stop or the end of a [`SLICE`]; then queue itself again. On the calling
/// thread (`caller`), which must go on with its own work, it only queues itself again.
fn spin(spinners: Arc<Spinners>, caller: Option<usize>) {
    let start = Instant::now();
    if rayon::current_thread_index() != caller {
        spinners.slices.fetch_add(1, Ordering::Relaxed);
        while !spinners.stop.load(Ordering::Relaxed) && start.elapsed() < SLICE {
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                core::hint::spin_loop();
            }
        }
    }
    if !spinners.stop.load(Ordering::Relaxed) {
        rayon::spawn(move || spin(spinners, caller));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rayon::prelude::*;

    /// Slices spun by `spinners` after `f`, and again a while later.
    fn slices_then_later(spinners: &Spinners) -> [usize; 2] {
        let now = spinners.slices.load(Ordering::Relaxed);
        std::thread::sleep(SLICE * 20);
        [now, spinners.slices.load(Ordering::Relaxed)]
    }

    /// Inside a pool, the other worker spins while `f` runs (and runs `f`'s parallel loops
    /// with it), the calling thread does not, and every spinner stops once `f` returns.
    #[test]
    fn the_other_workers_spin_until_f_returns() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let spinners = Arc::new(Spinners::default());
        let sum = pool.install(|| {
            spinning(&spinners, || {
                std::thread::sleep(SLICE * 10);
                assert!(
                    spinners.slices.load(Ordering::Relaxed) > 0,
                    "no worker spun"
                );
                (0..100_000u64).into_par_iter().sum::<u64>()
            })
        });
        assert_eq!(sum, 4_999_950_000);
        let [now, later] = slices_then_later(&spinners);
        assert_eq!(now, later, "a spinner went on after f returned");
    }

    /// From outside any pool every worker of the global pool spins; nested calls and a
    /// panicking `f` return, and their spinners stop.
    #[test]
    fn nested_and_panicking_calls_stop_their_spinners() {
        let outer = Arc::new(Spinners::default());
        let inner = Arc::new(Spinners::default());
        let value = spinning(&outer, || {
            spinning(&inner, || (1..=10).into_par_iter().sum::<i32>())
        });
        assert_eq!(value, 55);
        let panicked = Arc::new(Spinners::default());
        let result = std::panic::catch_unwind(|| spinning(&panicked, || panic!("in f")));
        assert!(result.is_err());
        for spinners in [&outer, &inner, &panicked] {
            let [now, later] = slices_then_later(spinners);
            assert_eq!(now, later, "a spinner went on after f returned");
        }
    }
}
