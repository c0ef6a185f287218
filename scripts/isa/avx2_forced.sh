#!/usr/bin/env bash
# Run a command with the CPU kernels on their AVX2 code on an AVX-512 machine that offers no
# CPUID faulting (where scripts/isa/avx2_only.sh cannot run): every `cargo` the command calls
# builds, into its own target directory, against copies of pulp and gemm-common whose
# dispatch skips AVX-512 under NO_AVX512=1 (scripts/isa/patch_dispatch.py), and PyTorch's
# kernels and oneDNN's JIT are capped at AVX2.
#
#   bash scripts/isa/avx2_forced.sh bash benches/report.sh
#
# Less complete than avx2_only.sh: only this crate's and gemm's kernels (Burn's convs and
# matmuls on Flex) are held to AVX2; Burn's other element-wise kernels and glibc keep theirs.
# Cargo.lock is restored when the command ends.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}/isa-forced"
mkdir -p "$target/bin"
config=()
while IFS='=' read -r name path; do
    config+=(--config "patch.crates-io.$name.path=\"$path\"")
done < <(python3 "$root/scripts/isa/patch_dispatch.py" "$target/patched")
cp "$root/Cargo.lock" "$target/Cargo.lock.kept"
trap 'cp "$target/Cargo.lock.kept" "$root/Cargo.lock"' EXIT
# A `cargo` first on PATH that passes the patches to the real one.
{
    echo '#!/usr/bin/env bash'
    printf 'exec %q' "$(command -v cargo)"
    printf ' %q' "${config[@]}"
    echo ' "$@"'
} > "$target/bin/cargo"
chmod +x "$target/bin/cargo"
export PATH="$target/bin:$PATH" CARGO_TARGET_DIR="$target" NO_AVX512=1
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
"$@"
