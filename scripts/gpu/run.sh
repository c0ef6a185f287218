#!/usr/bin/env bash
# Run, on a lent GPU machine, what `bash scripts/gpu/build.sh` built (carry the step's folder,
# target/gpu/tests, benches or example, and the Vulkan loader's packages in .gl/, as the device
# tool's README shows). Logs and results go to $OUT (default gpu-out/). Each step fits one
# 10-minute call:
#
#   bash scripts/gpu/run.sh tests     # golden cases, cube_cross (autotune at its default
#                                     # level, and pinned to our kernels), then fuzz
#   bash scripts/gpu/run.sh bench     # every catalogue case, ours vs built-in vs PyTorch
#                                     # (CUDA), and the report: REPORT-gpu.md and .png in $OUT;
#                                     # then pools and direct convs pinned spread
#
# The tuner's choices go to $OUT/autotune.log.
#   bash scripts/gpu/run.sh resnet    # the example: ours, builtin, and the PyTorch twin
#
# PYTHON names a Python with torch (default python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-gpu-out}
python=${PYTHON:-python3}
mkdir -p "$out"
case "${1:-}" in
tests) bin=target/gpu/tests ;;
bench) bin=target/gpu/benches ;;
resnet) bin=target/gpu/example ;;
esac

# Unpack the binaries (python's lzma: the machine may lack xz).
for packed in "$bin"/*.xz; do
    "$python" -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$packed" "${packed%.xz}"
    chmod +x "${packed%.xz}"
done

# The Vulkan loader, if the machine lacks one.
if ! ldconfig -p | grep -q libvulkan; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -e "$icd" ]; then
    export VK_DRIVER_FILES=$icd
fi
# The binaries read files below the checkout they were built in.
manifest=$(cat "$bin/manifest_dir")
if [ ! -e "$manifest" ]; then
    mkdir -p "$(dirname "$manifest")"
    ln -s "$PWD" "$manifest"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt"
lscpu | grep 'Model name' >>"$out/gpu.txt"

step() {
    echo "== $* ($(date +%T))"
}

# CubeCL's tuner logs each choice (per key: ours and its variants or Burn's conv; pools packed or
# spread) with its candidates' times to $out/autotune.log; CubeCL reads cubecl.toml from the
# working directory.
printf '[autotune.logger]\nfile = "%s"\nlevel = "minimal"\n' "$PWD/$out/autotune.log" >cubecl.toml

case "${1:-}" in
tests)
    step "golden cases (tuned) and cube_cross (each of our kernels' settings pinned in turn)"
    "$bin/suite" fixtures:: cube_cross:: 2>&1 | tee "$out/tests.log" | tail -5
    step "fuzz"
    FUZZ_GPU_CASES=${FUZZ_GPU_CASES:-400} "$bin/suite" fuzz:: 2>&1 |
        tee "$out/tests-fuzz.log" | tail -5
    ;;
bench)
    since=$(date +%s)
    step "PyTorch"
    "$python" benches/pytorch_bench.py --full 2>&1 | tail -3
    export BENCH_PROFILE=full CARGO_TARGET_DIR=$PWD/target
    for bench in conv pool; do
        step "$bench"
        "$bin/$bench" --bench --warm-up-time 0.5 --measurement-time 1 '/vulkan/' 2>&1 |
            tee "$out/bench-$bench.log" | grep -c 'time:'
    done
    step report
    REPORT_NAME=REPORT-gpu REPORT_SINCE=$since "$bin/report" 2>&1 | tail -3
    cp benches/REPORT-gpu.md benches/report-gpu.png "$out/"
    # After the report, which these runs' results would overwrite: the pools and the direct
    # conv schedule (grouped, depthwise) with every launch spread, against the tuned choice.
    step "spread launches, pinned"
    export BENCH_KERNELS=spread
    "$bin/pool" --bench --warm-up-time 0.5 --measurement-time 1 '/vulkan/.*/ours' 2>&1 |
        tee "$out/bench-pool-spread.log" | grep -c 'time:'
    "$bin/conv" --bench --warm-up-time 0.5 --measurement-time 1 \
        '/vulkan/(mobilenet|resnext).*(forward|grad_input)/ours' 2>&1 |
        tee "$out/bench-conv-spread.log" | grep -c 'time:'
    ;;
resnet)
    for ops in ours builtin; do
        step "resnet --ops $ops"
        "$bin/resnet" --device vulkan --dataset mnist10k --epochs 2 --ops "$ops" 2>&1 |
            tee "$out/resnet-$ops.log" | tail -4
    done
    step "PyTorch twin"
    PYTHONUNBUFFERED=1 "$python" examples/resnet/pytorch_twin.py --dataset mnist10k --epochs 2 \
        --device cuda 2>&1 | tee "$out/resnet-pytorch.log" | tail -4
    ;;
esac
