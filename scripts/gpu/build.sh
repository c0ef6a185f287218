#!/usr/bin/env bash
# Build, here, what a lent GPU machine runs: that machine reaches no package registry, so the
# binaries travel, and the device tool carries at most 64 MiB a call. Release builds with
# `--features vulkan` (Burn's `cuda` cannot build without internet), stripped and packed
# with xz (the suite is ~100 MB stripped, 16 MB packed), one folder per step of
# `bash scripts/gpu/run.sh` (carry the one the step needs):
#
#   target/gpu/tests/suite                          the integration tests
#   target/gpu/benches/{conv,pool,report}           the benches and the report writer
#   target/gpu/example/resnet                       the ResNet example
#
# Each folder also holds `manifest_dir`, the checkout's path here: the binaries read
# fixtures, data and the report's files below it, and run.sh links it to the checkout there.
#
#   bash scripts/gpu/build.sh          # all of them (~20 minutes per step cold on 2 cores)
#   bash scripts/gpu/build.sh tests    # or: benches, example
set -euo pipefail
cd "$(dirname "$0")/../.."

# The executables a cargo command built, as "name path" lines.
executables() {
    python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["target"]["name"], message["executable"])'
}

# Build into target/gpu/$1 with the cargo command that follows.
build() {
    local out=target/gpu/$1
    shift
    rm -rf "$out"
    mkdir -p "$out"
    cargo "$@" --features vulkan --message-format=json-render-diagnostics | executables |
        while read -r name path; do
            cp "$path" "$out/$name"
            strip "$out/$name"
            xz -T0 -6 -f "$out/$name"
        done
    pwd >"$out/manifest_dir"
    ls -l "$out"
}

what=${1:-all}
if [ "$what" = all ] || [ "$what" = tests ]; then
    build tests test --release --no-run --test suite
fi
if [ "$what" = all ] || [ "$what" = benches ]; then
    build benches bench --no-run --bench conv --bench pool --bench report
fi
if [ "$what" = all ] || [ "$what" = example ]; then
    build example build --release --example resnet
fi
du -sh target/gpu/*
