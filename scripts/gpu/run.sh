#!/usr/bin/env bash
# Run, on a lent GPU machine, what `bash scripts/gpu/build.sh <runtime>` built (carry the
# step's folder, target/gpu/<runtime>/tests, benches or example, and for vulkan the loader's
# packages in .gl/, as the device tool's README shows). Logs and results go to $OUT (default
# gpu-out/). Each step fits one 10-minute call:
#
#   bash scripts/gpu/run.sh vulkan tests  # golden cases, cube_cross (autotune at its default
#                                         # level, and pinned to our kernels), then fuzz
#   bash scripts/gpu/run.sh cuda sanitize # the golden cases and cube_cross under
#                                         # compute-sanitizer's memcheck (cuda only)
#   bash scripts/gpu/run.sh cuda bench    # every catalogue case, ours vs built-in vs PyTorch
#                                         # (CUDA), the dense rows on f16 operands too, and
#                                         # the report: REPORT-gpu-<runtime>.md and
#                                         # .png in $OUT; then pools and direct convs pinned
#                                         # spread, and the dense rows on our tensor-core
#                                         # tiles pinned
#   bash scripts/gpu/run.sh cuda network  # the network bench alone (whole training steps, ours vs
#                                         # built-in), for a call that carries only network.xz
#   bash scripts/gpu/run.sh cuda resnet   # the example: ours, builtin, and the PyTorch twin
#   bash scripts/gpu/run.sh cuda first-use # where the example's first epoch goes: one epoch of
#                                         # ours tuned, ours pinned to our default kernels, and the
#                                         # built-ins, each with its tuner log and one line per
#                                         # compiled kernel
#   bash scripts/gpu/run.sh cuda quick    # a lent machine's first call, under 8 minutes from
#                                         # `build.sh <runtime> quick`: golden cases and cube_cross,
#                                         # memcheck on a subset (cuda), the dense conv rows, the
#                                         # example's two epochs (ours, built-ins, PyTorch); writes
#                                         # REPORT-gpu-<runtime>.md to $OUT even when cut short
#
# The tuner's choices go to $OUT/autotune.log; on cuda each kernel's PTX goes to $OUT/ptx/ (check
# registers and spills with `ptxas -arch=sm_90a -v`). PYTHON names a Python with torch (default
# python3); CUDA_PATH the CUDA toolkit whose headers NVRTC compiles against (default
# /usr/local/cuda).
set -uo pipefail
cd "$(dirname "$0")/../.."
# Absolute, since the tuner and compiler logs are named in cubecl.toml.
out=$(realpath -m "${OUT:-gpu-out}")
python=${PYTHON:-python3}
runtime=${1:-}
step_name=${2:-}
mkdir -p "$out"
case "$step_name" in
tests | sanitize) bin=target/gpu/$runtime/tests ;;
bench | network) bin=target/gpu/$runtime/benches ;;
resnet | first-use) bin=target/gpu/$runtime/example ;;
quick) bin=target/gpu/$runtime/quick ;;
*)
    echo "usage: run.sh vulkan|cuda tests|sanitize|bench|network|resnet|first-use|quick" >&2
    exit 2
    ;;
esac
if [ "$runtime" = cuda ]; then
    export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
    export CUBECL_CUDA_DUMP_PTX=$out/ptx
    mkdir -p "$CUBECL_CUDA_DUMP_PTX"
fi

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
# working directory. With a second path, one line per compiled kernel goes there.
cubecl_logs() {
    printf '[autotune.logger]\nfile = "%s"\nlevel = "minimal"\n' "$1" >cubecl.toml
    if [ -n "${2:-}" ]; then
        printf '[compilation.logger]\nfile = "%s"\nlevel = "basic"\n' "$2" >>cubecl.toml
    fi
}
cubecl_logs "$out/autotune.log"

case "$step_name" in
tests)
    step "golden cases (tuned) and cube_cross (each of our kernels' settings pinned in turn)"
    "$bin/suite" golden:: cube_cross:: 2>&1 | tee "$out/tests-$runtime.log" | tail -5
    step "fuzz"
    FUZZ_GPU_CASES=${FUZZ_GPU_CASES:-400} "$bin/suite" fuzz:: 2>&1 |
        tee "$out/tests-fuzz-$runtime.log" | tail -5
    ;;
sanitize)
    step "golden cases and cube_cross under compute-sanitizer memcheck"
    sanitizer=$(command -v compute-sanitizer || echo "$CUDA_PATH/bin/compute-sanitizer")
    "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/suite" golden:: cube_cross:: 2>&1 |
        tee "$out/sanitize-$runtime.log" | tail -8
    ;;
bench)
    since=$(date +%s)
    step "PyTorch"
    "$python" benches/pytorch_bench.py --full --processes "${PYTORCH_PROCESSES:-3}" 2>&1 | tail -3
    export BENCH_PROFILE=full CARGO_TARGET_DIR=$PWD/target
    for bench in conv pool network; do
        step "$bench"
        "$bin/$bench" --bench --warm-up-time 0.5 --measurement-time 1 "/$runtime/" 2>&1 |
            tee "$out/bench-$bench-$runtime.log" | grep -c 'time:'
    done
    # The dense rows on f16 operands (device `$runtime-f16` in the report): our tensor-core
    # tiles with f32 accumulation against Burn's kernels.
    step "dense conv rows, f16"
    BENCH_DTYPE=f16 "$bin/conv" --bench --warm-up-time 0.5 --measurement-time 1 \
        "conv/$runtime-f16/(resnet_3x3|resnet50_1x1)" 2>&1 |
        tee "$out/bench-conv-f16-$runtime.log" | grep -c 'time:'
    step report
    REPORT_NAME=REPORT-gpu-$runtime REPORT_SINCE=$since "$bin/report" 2>&1 | tail -3
    cp "benches/REPORT-gpu-$runtime.md" "benches/report-gpu-$runtime.png" "$out/"
    # After the report, which these runs' results would overwrite: the pools and the direct
    # conv schedule (grouped, depthwise) with every launch spread, against the tuned choice.
    step "spread launches, pinned"
    export BENCH_KERNELS=spread
    "$bin/pool" --bench --warm-up-time 0.5 --measurement-time 1 "/$runtime/.*/ours" 2>&1 |
        tee "$out/bench-pool-spread-$runtime.log" | grep -c 'time:'
    "$bin/conv" --bench --warm-up-time 0.5 --measurement-time 1 \
        "/$runtime/(mobilenet|resnext).*(forward|grad_input)/ours" 2>&1 |
        tee "$out/bench-conv-spread-$runtime.log" | grep -c 'time:'
    # Our GEMM on tensor cores, pinned, on the dense rows: TF32 on f32 operands, then f16.
    for tile in cmma mma; do
        step "dense conv rows on $tile tiles, pinned: tf32, then f16"
        BENCH_KERNELS=$tile BENCH_PRECISION=tf32 "$bin/conv" --bench --warm-up-time 0.5 \
            --measurement-time 1 "conv/$runtime/(resnet_3x3|resnet50_1x1)" 2>&1 |
            tee "$out/bench-conv-$tile-tf32-$runtime.log" | grep -c 'time:'
        BENCH_KERNELS=$tile BENCH_DTYPE=f16 "$bin/conv" --bench --warm-up-time 0.5 \
            --measurement-time 1 "conv/$runtime-f16/(resnet_3x3|resnet50_1x1)" 2>&1 |
            tee "$out/bench-conv-$tile-f16-$runtime.log" | grep -c 'time:'
    done
    ;;
network)
    step network
    "$bin/network" --bench --warm-up-time 0.5 --measurement-time 1 "/$runtime/" 2>&1 |
        tee "$out/bench-network-$runtime.log" | grep -B1 'time:'
    ;;
resnet)
    for ops in ours builtin; do
        step "resnet --ops $ops"
        "$bin/resnet" --device "$runtime" --dataset mnist10k --epochs 2 --ops "$ops" 2>&1 |
            tee "$out/resnet-$ops-$runtime.log" | tail -4
    done
    step "PyTorch twin"
    PYTHONUNBUFFERED=1 "$python" examples/resnet/pytorch_twin.py --dataset mnist10k --epochs 2 \
        --device cuda 2>&1 | tee "$out/resnet-pytorch.log" | tail -4
    ;;
quick)
    # Every step gets at most its share of what is left of QUICK_SECONDS (default 450: a
    # 10-minute call, less unpacking and the machine's start) and is cut off at it; the report
    # is written from whatever finished.
    deadline=$((SECONDS + ${QUICK_SECONDS:-450}))
    within() {
        local share=$1
        shift
        local left=$((deadline - SECONDS - 20))
        if [ "$left" -le 5 ]; then
            echo "skipped: no time left" >&2
            return 124
        fi
        timeout --kill-after=5 "$((share < left ? share : left))" "$@"
    }
    export CUBECL_AUTOTUNE_LEVEL=${CUBECL_AUTOTUNE_LEVEL:-minimal}
    since=$(date +%s)
    step "golden cases and cube_cross"
    within 110 "$bin/suite" golden:: cube_cross:: 2>&1 | tee "$out/tests-$runtime.log" | tail -3
    if [ "$runtime" = cuda ]; then
        step "memcheck: conv golden cases and cube_cross::conv"
        sanitizer=$(command -v compute-sanitizer || echo "$CUDA_PATH/bin/compute-sanitizer")
        within 70 "$sanitizer" --tool memcheck --error-exitcode 1 "$bin/suite" \
            golden::conv2d::cube cube_cross::conv::tiled cube_cross::tensor_cores 2>&1 |
            tee "$out/sanitize-$runtime.log" | tail -3
    fi
    step "dense conv rows and dispatch rows"
    # At Burn's precision (TF32 where the GPU has it), so each row compares like with like and
    # the tuner may pick Burn's kernels; the example below runs ours at PyTorch's cuDNN default.
    export BENCH_PROFILE=full CARGO_TARGET_DIR=$PWD/target BENCH_PRECISION=tf32
    within 130 "$bin/conv" --bench --warm-up-time 0.3 --measurement-time 0.7 \
        "conv/$runtime/(resnet_3x3|resnet50_1x1|example_resnet|dispatch)" 2>&1 |
        tee "$out/bench-conv-$runtime.log" | grep -c 'time:'
    for ops in ours builtin; do
        step "resnet --ops $ops, 2 epochs"
        within 55 "$bin/resnet" --device "$runtime" --dataset mnist10k --epochs 2 --ops "$ops" \
            --precision tf32 2>&1 | tee "$out/resnet-$ops-$runtime.log" | tail -3
    done
    step "PyTorch twin, 2 epochs"
    PYTHONUNBUFFERED=1 within 40 "$python" examples/resnet/pytorch_twin.py --dataset mnist10k \
        --epochs 2 --device cuda 2>&1 | tee "$out/resnet-pytorch.log" | tail -3
    step report
    REPORT_NAME=REPORT-gpu-$runtime REPORT_SINCE=$since timeout 30 "$bin/report" 2>&1 | tail -2
    report=benches/REPORT-gpu-$runtime.md
    [ -e "$report" ] || printf '# GPU quick run (%s)\n\nNo bench row finished.\n' "$runtime" >"$report"
    {
        printf '\n## Quick run: tests and the example\n\n'
        printf 'Device: %s\n\n```\n' "$(head -1 "$out/gpu.txt")"
        for log in tests-$runtime sanitize-$runtime resnet-ours-$runtime resnet-builtin-$runtime \
            resnet-pytorch; do
            [ -e "$out/$log.log" ] || continue
            echo "== $log"
            grep -E 'test result|ERROR SUMMARY|epoch|images/s|panicked' "$out/$log.log" | tail -8
        done
        printf '```\n'
    } >>"$report"
    cp "$report" "$out/"
    ;;
first-use)
    # Each run gets its own logs: the tuner's (every candidate's compile-and-bench time) and
    # the compiler's (one line per kernel compiled). NVIDIA's driver keeps compiled pipelines
    # on disk across processes, so without its cache off a run would reuse the kernels an
    # earlier one compiled (Burn's, when ours tuned ran first) and look cheaper than it is.
    export __GL_SHADER_DISK_CACHE=0
    for run in "ours tuned" "ours ours" "builtin tuned"; do
        read -r ops kernels <<<"$run"
        name=$ops-$kernels-$runtime
        cubecl_logs "$out/autotune-$name.log" "$out/compile-$name.log"
        step "resnet --ops $ops --kernels $kernels"
        "$bin/resnet" --device "$runtime" --dataset mnist10k --epochs 1 --ops "$ops" \
            --kernels "$kernels" 2>&1 | tee "$out/resnet-$name.log" | tail -3
        echo "$(wc -l <"$out/compile-$name.log") kernels compiled"
    done
    ;;
esac
