//! The float types the CPU kernels compute in, and the batch/GEMM parallelism split.

use core::any::TypeId;
use core::mem::MaybeUninit;
use core::ops::Range;

use gemm::Parallelism;
use pulp::Simd;
use rayon::prelude::*;

use crate::cpu::threads::workers_spin;

use super::huge_pages;

/// A float the CPU kernels compute in (f32 and f64; f16/bf16 are computed in f32).
pub trait Element:
    burn::tensor::Element
    + bytemuck::Pod
    + Default
    + PartialOrd
    + core::ops::Add<Output = Self>
    + core::ops::AddAssign
    + core::ops::Sub<Output = Self>
    + core::ops::Mul<Output = Self>
    + Send
    + Sync
    + 'static
{
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The max-pool padding value.
    const NEG_INFINITY: Self;
    /// From f64 (rounding for f32).
    fn from_f64(value: f64) -> Self;
    /// `self^exponent` as `torch.pow` computes it for a scalar exponent: 0, 1, 2, 3, -1 and -2
    /// by multiplication, 0.5 and -0.5 by a square root, else C's `pow` (NaN for a negative
    /// base and fractional power). Cheaper than `pow`, and the same roundings as PyTorch's.
    fn powf(self, exponent: Self) -> Self;
    /// -1, 0 or 1 (0 for 0, NaN for NaN), as `torch.sign`.
    fn sign(self) -> Self;
    /// `self / other`.
    fn div(self, other: Self) -> Self;
    /// The sum of `values` in `simd`'s vectors, its lanes added once at the end: a short run
    /// (a 7 x 7 plane) is then a few vector additions, not a term-by-term chain.
    fn vector_sum<S: Simd>(simd: S, values: &[Self]) -> Self;
}

macro_rules! float_element {
    ($t:ty, $as_simd:ident, $partial_load:ident, $add:ident, $reduce_sum:ident) => {
        impl Element for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn from_f64(value: f64) -> Self {
                value as $t
            }
            fn powf(self, exponent: Self) -> Self {
                if exponent == 0.0 {
                    1.0
                } else if exponent == 1.0 {
                    self
                } else if exponent == 2.0 {
                    self * self
                } else if exponent == 3.0 {
                    self * self * self
                } else if exponent == 0.5 {
                    self.sqrt()
                } else if exponent == -0.5 {
                    1.0 / self.sqrt()
                } else if exponent == -1.0 {
                    1.0 / self
                } else if exponent == -2.0 {
                    1.0 / (self * self)
                } else {
                    <$t>::powf(self, exponent)
                }
            }
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self * 0.0
                }
            }
            fn div(self, other: Self) -> Self {
                self / other
            }
            #[inline(always)]
            fn vector_sum<S: Simd>(simd: S, values: &[Self]) -> Self {
                let (vectors, tail) = S::$as_simd(values);
                let sum = vectors
                    .iter()
                    .fold(simd.$partial_load(tail), |sum, &v| simd.$add(sum, v));
                simd.$reduce_sum(sum)
            }
        }
    };
}
float_element!(
    f32,
    as_simd_f32s,
    partial_load_f32s,
    add_f32s,
    reduce_sum_f32s
);
float_element!(
    f64,
    as_simd_f64s,
    partial_load_f64s,
    add_f64s,
    reduce_sum_f64s
);

/// Whether `T` is f32, the one element type of the kernels written in f32 vectors (the direct
/// tiles, the pointwise product).
pub fn is_f32<T: 'static>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
}

/// `len` zeros that `fill` writes, seen as f32: the kernels written in f32 vectors cast their
/// operands inside `fill`. Their algorithms serve f32 alone ([`is_f32`]), so `T` is f32.
pub fn in_f32<T: Element>(len: usize, fill: impl FnOnce(&mut [f32])) -> Vec<T> {
    assert!(
        is_f32::<T>(),
        "an f32 kernel called on another element type"
    );
    let mut out = huge_pages::zeros(len);
    fill(bytemuck::cast_slice_mut(&mut out));
    out
}

/// Work (multiply-adds, or values read and written) a Rayon task must hold to be worth handing
/// to another thread. Handing work to the pool from outside it (waking a worker, then waiting
/// to be woken) costs about what one core takes for this much, so a pass with less than two
/// tasks' worth runs on the calling thread. `network/flex/chain_conv_pool_conv/step` and the
/// `global_avg_pool` rows decide it.
pub const TASK_MIN_WORK: usize = 1 << 18;

/// [`TASK_MIN_WORK`] for a pass started inside `cpu_kernels::with_spinning_workers`, whose
/// workers spin for work: a task then costs no wake-up, only its hand-off. The ResNet
/// example's batch norms decide it: on its 14x14 to 4x4 planes they ran 1.15-1.7x faster,
/// forward and backward, in tasks of this much than of [`TASK_MIN_WORK`].
pub const SPINNING_TASK_MIN_WORK: usize = 1 << 15;

/// The work a task must hold now: [`SPINNING_TASK_MIN_WORK`] while workers spin, else
/// [`TASK_MIN_WORK`].
fn task_min_work() -> usize {
    if workers_spin() {
        SPINNING_TASK_MIN_WORK
    } else {
        TASK_MIN_WORK
    }
}

/// Whether a pass of `work` in all is worth more than one thread (two tasks' worth, see
/// [`task_min_work`]).
pub fn worth_threads(work: usize) -> bool {
    work >= 2 * task_min_work()
}

/// Items per Rayon task when each holds `work_per_item` (for `with_min_len`): a task holds at
/// least [`task_min_work`], so a pass too small to split runs on the calling thread.
pub fn min_items_per_task(work_per_item: usize) -> usize {
    task_min_work().div_ceil(work_per_item.max(1))
}

/// A loop body that [`in_widest_vectors`] compiles for the machine's widest vectors. Its
/// [`run`](Self::run), and every function with a loop that it calls, is `#[inline(always)]`:
/// only code inlined into the function `pulp` compiles for those vectors runs in them. A
/// closure cannot stand in: the call to it stays a call, into code compiled for the baseline
/// (SSE2 on x86-64), once its body is larger than the inliner takes.
pub trait WideBody {
    /// What the body returns.
    type Output;

    /// The body.
    fn run(self) -> Self::Output;
}

/// `body.run()` compiled for the machine's widest vectors (`pulp` picks them): a loop in it that
/// the compiler vectorizes runs in them, where outside such a call it runs in the baseline's.
#[inline(always)]
pub fn in_widest_vectors<B: WideBody>(body: B) -> B::Output {
    /// The body as a `pulp` op.
    struct Op<B>(B);

    impl<B: WideBody> pulp::WithSimd for Op<B> {
        type Output = B::Output;

        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _simd: S) -> B::Output {
            self.0.run()
        }
    }

    pulp::Arch::new().dispatch(Op(body))
}

/// Where the threads go: across independent batch items when there are enough of them
/// (each GEMM then runs single-threaded), otherwise inside each GEMM.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    /// Run the outer batch loop on rayon.
    pub outer: bool,
    /// Parallelism handed to each GEMM call.
    pub inner: Parallelism,
}

impl Split {
    /// Choose the split for `items` independent work items holding `work` in all: none for a
    /// pass too small to be worth threads ([`worth_threads`]).
    pub fn for_items(items: usize, work: usize) -> Self {
        let threads = rayon::current_num_threads();
        if !worth_threads(work) {
            Self {
                outer: false,
                inner: Parallelism::None,
            }
        } else if items >= threads || threads == 1 {
            Self {
                outer: threads > 1,
                inner: Parallelism::None,
            }
        } else {
            Self {
                outer: false,
                inner: Parallelism::Rayon(threads),
            }
        }
    }
}

/// Batch items per thread when a batch of `batch` is cut into one contiguous run per thread.
pub fn items_per_thread(batch: usize) -> usize {
    batch.div_ceil(rayon::current_num_threads().max(1))
}

/// Whether every value lies strictly between `-bound` and `bound` (false for NaN): with an
/// infinite bound, whether every value is finite. In the machine's widest vectors: a pass
/// may scan both its operands before it runs.
pub fn all_within<T: Element>(values: &[T], bound: f64) -> bool {
    let (low, high) = (T::from_f64(-bound), T::from_f64(bound));
    let scan = |values| in_widest_vectors(AllWithin { values, low, high });
    // A wide layer's weights are megabytes: scanned on one thread, before every pass, they
    // took a twentieth of the `resnet_3x3_7` forward pass.
    if worth_threads(values.len()) {
        values
            .par_chunks(SCAN_CHUNK)
            .with_min_len(min_items_per_task(SCAN_CHUNK))
            .all(scan)
    } else {
        scan(values)
    }
}

/// Values per piece of a parallel [`all_within`].
const SCAN_CHUNK: usize = 1 << 14;

/// [`all_within`]'s scan.
struct AllWithin<'a, T> {
    values: &'a [T],
    low: T,
    high: T,
}

impl<T: Element> WideBody for AllWithin<'_, T> {
    type Output = bool;

    #[inline(always)]
    fn run(self) -> bool {
        // Branch-free within a chunk (so it vectorizes), stopping at the first chunk out.
        for chunk in self.values.chunks(1024) {
            let mut ok = true;
            for &v in chunk {
                ok &= (v > self.low) & (v < self.high);
            }
            if !ok {
                return false;
            }
        }
        true
    }
}

/// Run `body(items, chunk, scratch)` for every run of `per_chunk` batch items (`chunk` holds
/// their `item_len` elements each), on rayon when `split.outer`, with one scratch buffer per
/// worker.
pub fn for_each_chunk<T: Element>(
    out: &mut [T],
    item_len: usize,
    per_chunk: usize,
    scratch_len: usize,
    split: Split,
    body: impl Fn(Range<usize>, &mut [T], &mut Vec<T>) + Sync + Send,
) {
    // No items, no scratch: an empty batch's scratch may be sized for outputs of any length.
    if item_len == 0 || out.is_empty() {
        return;
    }
    let init = || vec![T::ZERO; scratch_len];
    let items = |index: usize, chunk: &[T]| {
        let first = index * per_chunk;
        first..first + chunk.len() / item_len
    };
    if split.outer {
        out.par_chunks_mut(item_len * per_chunk)
            .enumerate()
            .for_each_init(init, |scratch, (index, chunk)| {
                body(items(index, chunk), chunk, scratch)
            });
    } else {
        let mut scratch = init();
        for (index, chunk) in out.chunks_mut(item_len * per_chunk).enumerate() {
            body(items(index, chunk), chunk, &mut scratch);
        }
    }
}

/// `partial(chunk)` for each of `chunks` chunks (on rayon when `split.outer`), summed in chunk
/// order, so the result does not depend on scheduling; `len` zeros when there are none.
pub fn sum_of_partials<T: Element>(
    chunks: usize,
    len: usize,
    split: Split,
    partial: impl Fn(usize) -> Vec<T> + Sync + Send,
) -> Vec<T> {
    let partials: Vec<Vec<T>> = if split.outer {
        (0..chunks).into_par_iter().map(partial).collect()
    } else {
        (0..chunks).map(partial).collect()
    };
    let mut partials = partials.into_iter();
    let mut sum = partials.next().unwrap_or_else(|| vec![T::ZERO; len]);
    for other in partials {
        sum.iter_mut().zip(&other).for_each(|(a, b)| *a += *b);
    }
    sum
}

/// `planes * plane_len` values, each plane zeroed and then filled by `body(scratch, index,
/// plane)` (`plane_work` each, see [`min_items_per_task`]) on the rayon task that owns it,
/// with one `init()` scratch per worker: the zeroes are written in parallel and are still in
/// cache when `body` writes over them (a `vec![0; n]` is one thread's memset of the whole
/// output, up front: an eighth of a depthwise forward pass's time,
/// `conv/flex/mobilenet_depthwise_3x3/forward`).
pub fn zeroed_per_plane<T: Element, S>(
    planes: usize,
    plane_len: usize,
    plane_work: usize,
    init: impl Fn() -> S + Sync + Send,
    body: impl Fn(&mut S, usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    let total = planes * plane_len;
    let mut out = huge_pages::with_capacity(total);
    if plane_len > 0 {
        out.spare_capacity_mut()[..total]
            .par_chunks_mut(plane_len)
            .enumerate()
            .with_min_len(min_items_per_task(plane_work))
            .for_each_init(init, |scratch, (p, chunk)| body(scratch, p, zeroed(chunk)));
    }
    // SAFETY: `zeroed` initialised each of the first `total` elements (the planes tile them);
    // had `body` panicked, the length would still be 0.
    unsafe { out.set_len(total) };
    out
}

/// Write zeroes over `chunk` and view it as initialised.
fn zeroed<T: Element>(chunk: &mut [MaybeUninit<T>]) -> &mut [T] {
    for slot in chunk.iter_mut() {
        slot.write(T::ZERO);
    }
    // SAFETY: every element was just written, and `MaybeUninit<T>` has the layout of `T`.
    unsafe { &mut *(chunk as *mut [MaybeUninit<T>] as *mut [T]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The passes a thread starts inside `with_spinning_workers` split into tasks of the
    /// smaller minimum work, those after it (and before) into the usual.
    #[test]
    fn passes_started_inside_spinning_workers_split_finer() {
        const { assert!(SPINNING_TASK_MIN_WORK < TASK_MIN_WORK) };
        assert_eq!(min_items_per_task(1), TASK_MIN_WORK);
        let inside = crate::cpu::threads::with_spinning_workers(|| min_items_per_task(1));
        assert_eq!(inside, SPINNING_TASK_MIN_WORK);
        assert_eq!(min_items_per_task(1), TASK_MIN_WORK);
    }

    /// A pass with less than two tasks' worth runs on the calling thread (no hand-off to
    /// Rayon), a larger one on the pool's workers; both fill every plane.
    #[test]
    fn small_passes_stay_on_the_calling_thread() {
        for (planes, plane_work, on_workers) in [
            (64, 16, false),
            (3, TASK_MIN_WORK / 2, false),
            (64, TASK_MIN_WORK, true),
        ] {
            let caller = rayon::current_thread_index();
            assert_eq!(caller, None, "the test runs outside the pool");
            let out: Vec<f32> = zeroed_per_plane(
                planes,
                4,
                plane_work,
                || (),
                |_, p, plane| {
                    let on_worker = rayon::current_thread_index().is_some();
                    plane.fill(if on_worker {
                        p as f32
                    } else {
                        -(p as f32) - 1.0
                    });
                },
            );
            for (p, plane) in out.chunks(4).enumerate() {
                let want = if on_workers {
                    p as f32
                } else {
                    -(p as f32) - 1.0
                };
                assert!(
                    plane.iter().all(|&v| v == want),
                    "{planes} planes of {plane_work}: plane {p} holds {plane:?}"
                );
            }
        }
        let threads = rayon::current_num_threads();
        let split = Split::for_items(threads, 2 * TASK_MIN_WORK - 1);
        assert!(!split.outer && matches!(split.inner, Parallelism::None));
        let split = Split::for_items(threads, 2 * TASK_MIN_WORK);
        assert_eq!(split.outer, threads > 1);
    }
}
