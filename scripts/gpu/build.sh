#!/usr/bin/env bash
# Build, here, what a lent GPU machine runs: that machine reaches no package registry, so the
# binaries travel, and the device tool carries at most 64 MiB a call. Release builds with
# `--features vulkan` (Burn's `cuda` cannot build without internet), stripped, into
# target/gpu/ (carry that path; `bash scripts/gpu/run.sh` runs them there):
#
#   suite               the integration tests (golden cases, cube_cross, fuzz)
#   conv pool report    the benches and the report writer
#   resnet              the ResNet example
#   manifest_dir        the checkout's path here: the binaries read fixtures, data and the
#                       report's files below it, and run.sh links it to the checkout there
#
#   bash scripts/gpu/build.sh          # all of them (~40 minutes cold on 2 cores)
#   bash scripts/gpu/build.sh tests    # or: benches, example
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/gpu
mkdir -p "$out"

# The executables a cargo command built, as "name path" lines.
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"])'
}

build() {
    cargo "$@" --features vulkan --message-format=json-render-diagnostics | executables |
        while read -r name path; do
            cp "$path" "$out/$name"
            strip "$out/$name"
        done
}

what=${1:-all}
if [ "$what" = all ] || [ "$what" = tests ]; then
    build test --release --no-run --test suite
fi
if [ "$what" = all ] || [ "$what" = benches ]; then
    build bench --no-run --bench conv --bench pool --bench report
fi
if [ "$what" = all ] || [ "$what" = example ]; then
    build build --release --example resnet
fi
pwd >"$out/manifest_dir"
ls -l "$out"
du -sh "$out"
