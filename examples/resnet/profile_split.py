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
        if any(OURS in frame for frame in frames):
            kind = "ours"
        elif any(idle in frame for frame in frames for idle in IDLE):
            kind = "idle"
        else:
            kind = "rest"
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
