#!/usr/bin/env bash
# Build, here, what a lent GPU machine runs: that machine reaches no package registry, so the
# binaries travel, and the device tool carries at most 64 MiB a call. Release builds for one
# CubeCL runtime, `vulkan` or `cuda`, stripped and packed with xz (the suite is ~100 MB
# stripped, 16 MB packed), one folder per step of `bash scripts/gpu/run.sh` (carry the one
# the step needs):
#
#   target/gpu/<runtime>/tests/suite                the integration tests
#   target/gpu/<runtime>/benches/{conv,pool,network,report} the benches and the report writer
#   target/gpu/<runtime>/example/resnet             the ResNet example
#   target/gpu/<runtime>/quick/{suite,conv,report,resnet} what `run.sh <runtime> quick` runs, in
#                                                   one folder a single call carries
#
# Each folder also holds `manifest_dir`, the checkout's path here: the binaries read
# fixtures, data and the report's files below it, and run.sh links it to the checkout there.
#
#   bash scripts/gpu/build.sh               # vulkan, every step (~20 minutes a step cold on 2 cores)
#   bash scripts/gpu/build.sh cuda          # cuda, every step
#   bash scripts/gpu/build.sh cuda tests    # one step: tests, benches, example or quick
#
# `cuda` builds against cubecl-cuda patched to drop its LLVM compiler (scripts/gpu/cuda/: the
# unpatched crate downloads LLVM at build time), with CUDA 13.0's bindings, the driver and
# NVRTC of the GPU machines; it loads libcuda and libnvrtc at run time, so no CUDA toolkit is
# needed here. Cargo.lock is restored afterwards (the override rewrites its cubecl-cuda entry).
set -euo pipefail
cd "$(dirname "$0")/../.."

runtime=${1:-vulkan}
what=${2:-all}
case "$runtime" in
vulkan | cuda) ;;
*)
    echo "usage: build.sh [vulkan|cuda] [all|tests|benches|example|quick]" >&2
    exit 2
    ;;
esac

config=()
if [ "$runtime" = cuda ]; then
    patched=$(bash scripts/gpu/cuda/patched-cubecl-cuda.sh "$PWD/target/gpu/patched")
    config=(--config "patch.crates-io.cubecl-cuda.path=\"$patched\"")
    export CUDARC_CUDA_VERSION=13000
    cp Cargo.lock target/gpu/Cargo.lock.kept
    trap 'cp target/gpu/Cargo.lock.kept Cargo.lock' EXIT
fi

# The executables a cargo command built, as "name path" lines.
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"])'
}

# Build into target/gpu/$runtime/$1 (emptied first unless $KEEP is set) with the cargo command
# that follows.
build() {
    local out=target/gpu/$runtime/$1
    shift
    if [ -z "${KEEP:-}" ]; then rm -rf "$out"; fi
    mkdir -p "$out"
    cargo "$@" "${config[@]}" --features "$runtime" --message-format=json-render-diagnostics |
        executables |
        while read -r name path; do
            cp "$path" "$out/$name"
            strip "$out/$name"
            xz -T0 -6 -f "$out/$name"
        done
    pwd >"$out/manifest_dir"
    ls -l "$out"
}

if [ "$what" = all ] || [ "$what" = tests ]; then
    build tests test --release --no-run --test suite
fi
if [ "$what" = all ] || [ "$what" = benches ]; then
    build benches bench --no-run --bench conv --bench pool --bench network --bench report
fi
if [ "$what" = all ] || [ "$what" = example ]; then
    # The bench profile, as the benches: the two steps share every dependency.
    build example bench --no-run --example resnet
fi
if [ "$what" = quick ]; then
    # The suite, the conv bench and its report writer, and the example: one call's carry.
    build quick test --release --no-run --test suite
    KEEP=1 build quick bench --no-run --bench conv --bench report
    KEEP=1 build quick bench --no-run --example resnet
fi
du -sh target/gpu/"$runtime"/*
