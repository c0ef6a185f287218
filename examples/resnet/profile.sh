#!/usr/bin/env bash
# How a training step of the ResNet example splits between this crate's ops and the rest on
# the CPU (Flex): `perf` samples the call stacks of every thread through one epoch of
# mnist10k, and `profile_split.py` counts a sample as ours when any frame is this crate's code
# (our conv and pool kernels, their autodiff steps, and the rayon tasks they spawn), as a
# rayon worker waiting for work when it is idle in rayon's scheduler, and as the rest (Burn's
# batch norm, ReLU, adds, linear layer, loss and Adam, the data pipeline) otherwise.
#
#   bash examples/resnet/profile.sh                  # our modules
#   bash examples/resnet/profile.sh --ops builtin    # the same network on burn::nn
#
# Needs `perf` (Debian: linux-perf) allowed to sample this process. PyTorch's split for the
# twin: `python3 examples/resnet/pytorch_twin.py --dataset mnist10k --epochs 1
# --profile-steps 40`.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release --example resnet
mkdir -p "$target/resnet"
data="$target/resnet/perf.data"
perf record -q -F 499 -e cpu-clock --call-graph dwarf,32768 -o "$data" -- \
    "$target/release/examples/resnet" --dataset mnist10k --epochs 1 "$@"
perf script -i "$data" -F tid,ip,sym | python3 examples/resnet/profile_split.py
