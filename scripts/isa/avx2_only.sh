#!/usr/bin/env bash
# Run a command as on a CPU without AVX-512 (AVX2 and FMA at most), to measure and tune the
# AVX2 code paths on an AVX-512 machine: every CPUID the process and its children read is
# answered without the AVX-512 bits (avx2_only.c), glibc takes its AVX2 string functions,
# and PyTorch's kernels and oneDNN's JIT are capped at AVX2 as well.
#
#   bash scripts/isa/avx2_only.sh target/release/examples/resnet --dataset mnist10k ...
#   BENCH_ROUNDS=3 bash scripts/isa/avx2_only.sh bash benches/report.sh
#
# Needs Linux's CPUID faulting (`cpuid_fault` in /proc/cpuinfo) and gcc. The caches, clock
# and core stay the machine's own: compare sides measured under it, not with another machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! grep -qw cpuid_fault /proc/cpuinfo; then
    echo "avx2_only.sh: this machine offers no CPUID faulting (cpuid_fault)" >&2
    exit 2
fi
lib="${CARGO_TARGET_DIR:-$here/../../target}/isa/avx2_only.so"
mkdir -p "$(dirname "$lib")"
if [ ! -f "$lib" ] || [ "$here/avx2_only.c" -nt "$lib" ]; then
    gcc -O2 -Wall -shared -fPIC -o "$lib" "$here/avx2_only.c" -ldl
fi
export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
export GLIBC_TUNABLES="glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512DQ,-AVX512BW,-AVX512CD"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
exec "$@"
