"""Reads `perf script -F tid,ip,sym` (call stacks, leaf first) on stdin and prints the share of
CPU samples in this crate's code, in rayon's idle workers, and in the rest. Used by
`examples/resnet/profile.sh`."""

import collections
import sys

# Frames of this crate: every op's entry (functional, autodiff, backend) and its kernels,
# also on rayon's worker threads (a task's closure is named after the function that made it).
OURS = "burn_convpool::"
# A rayon worker between tasks: looking for work or going to sleep.
IDLE = ("wait_until_cold", "rayon_core::sleep", "LockLatch::wait")
# Where a thread runs a rayon job: the frames above it (leafward) are the job's, those below
# are what the thread was doing when it took the job (a worker waiting in a join, the
# training thread inside the example's pool among them, may run another op's task).
JOB = ("as rayon_core::job::Job>::execute",)
# Crates whose frames name a job as another library's (Burn's ops, its optimizer).
OTHERS = ("burn_flex::", "burn_autodiff::", "burn_core::", "burn_optim::", "burn_nn::",
          "burn_backend::", "burn_dispatch::", "burn_tensor::", "macerator::")


def kind_of(frames):
    """"idle", "ours" or "rest" for one sample's frames: by the innermost rayon job's own
    frames where they name a library; else (a split of a parallel loop, whose frames are
    rayon's and the kernel's inlined code) by every frame."""
    job = next((i for i, frame in enumerate(frames) if any(j in frame for j in JOB)), None)
    own = frames[:job] if job is not None else frames
    named = any(mark in frame for frame in own for mark in (OURS,) + OTHERS + IDLE)
    judged = own if named else frames
    if any(idle in frame for frame in judged for idle in IDLE):
        return "idle"
    if any(OURS in frame for frame in judged):
        return "ours"
    return "rest"


def samples(lines):
    """Each sample's frames (symbols), leaf first."""
    frames = []
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = []
        elif line.startswith("\t"):
            # `<address> <symbol>`
            frames.append(line.strip().partition(" ")[2])
    if frames:
        yield frames


def main():
    counts = collections.Counter()
    leaves = collections.Counter()
    for frames in samples(sys.stdin):
        kind = kind_of(frames)
        if kind == "rest":
            leaves[frames[0][:90]] += 1
        counts[kind] += 1
    busy = counts["ours"] + counts["rest"]
    if busy == 0:
        sys.exit("no samples: is perf allowed to sample (kernel.perf_event_paranoid)?")
    total = busy + counts["idle"]
    print(
        f"{total} samples: this crate's ops {100 * counts['ours'] / busy:.0f}% of the busy CPU "
        f"time, the rest {100 * counts['rest'] / busy:.0f}% "
        f"(rayon workers idle in another {100 * counts['idle'] / total:.0f}% of all samples)"
    )
    print("the rest's busiest leaf functions:")
    for leaf, n in leaves.most_common(10):
        print(f"  {100 * n / busy:5.1f}%  {leaf}")


if __name__ == "__main__":
    main()
