#!/usr/bin/env bash
# Run the benches and write benches/REPORT.md and benches/report.png.
#
#   bash benches/report.sh                      # Flex, quick profile (~10 min a round, 2 cores)
#   BENCH_PROFILE=full bash benches/report.sh   # every shape of benches/catalogue.json
#   BENCH_ROUNDS=5 bash benches/report.sh       # five rounds instead of three
#   bash benches/report.sh --features cuda      # also the CubeCL kernels on CUDA
#
# Extra arguments go to cargo. When $PYTHON (default python3) can import torch,
# benches/pytorch_bench.py times the same catalogue and the report gets a PyTorch column.
#
# A row's time moves between processes and minutes (thread placement, the allocator, other
# load), so every side runs in $BENCH_ROUNDS rounds, PyTorch and the Rust benches alternating
# within each: a noisy minute hits both sides, and the report keeps each side's best round and
# states the spread.
set -euo pipefail
cd "$(dirname "$0")/.."
since=$(date +%s)
python=${PYTHON:-python3}
rounds=${BENCH_ROUNDS:-3}
# Each round's criterion results in a directory of their own; the report reads every one.
round_dir=${CARGO_TARGET_DIR:-target}/criterion-rounds
rm -rf "$round_dir"
torch=false
if "$python" -c "import torch" 2>/dev/null; then torch=true; fi
for round in $(seq 1 "$rounds"); do
    echo "report.sh: round $round of $rounds"
    if $torch; then
        # The first round starts benches/pytorch.json afresh, later ones add their process.
        append=()
        if [ "$round" -gt 1 ]; then append=(--append); fi
        "$python" benches/pytorch_bench.py --processes 1 "${append[@]}"
    fi
    CRITERION_HOME="$round_dir/$round" cargo bench "$@" --bench conv --bench pool --bench network --bench epilogue
done
REPORT_SINCE=$since cargo bench "$@" --bench report
