#!/usr/bin/env bash
# Run the benches and write benches/REPORT.md and benches/report.png.
#
#   bash benches/report.sh                      # Flex, quick profile (~10 min on 2 cores)
#   BENCH_PROFILE=full bash benches/report.sh   # every shape of benches/catalogue.json
#   bash benches/report.sh --features cuda      # also the CubeCL kernels on CUDA
#
# Extra arguments go to cargo. When $PYTHON (default python3) can import torch,
# benches/pytorch_bench.py times the same catalogue first and the report gets a PyTorch column.
set -euo pipefail
cd "$(dirname "$0")/.."
since=$(date +%s)
python=${PYTHON:-python3}
if "$python" -c "import torch" 2>/dev/null; then
    "$python" benches/pytorch_bench.py
fi
cargo bench "$@" --bench conv --bench pool --bench network
REPORT_SINCE=$since cargo bench "$@" --bench report
