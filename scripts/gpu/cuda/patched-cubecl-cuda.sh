#!/usr/bin/env bash
# usage: patched-cubecl-cuda.sh DEST
# Copy cubecl-cuda 0.11.3 from cargo's registry cache into DEST/cubecl-cuda and apply
# cubecl-cuda-0.11.3-no-llvm.patch beside this script, then print the copy's absolute path.
#
# Why: cubecl-cuda 0.11.3 depends unconditionally on cubecl-llvm, whose build script downloads
# an LLVM bundle, and neither the build machines nor the GPU machines reach the internet. The
# patch drops that dependency and its compiler, keeping the CUDA C++/NVRTC one (what
# upstream's `cubecl/cuda-cpp` feature selects). Only scripts/gpu/build.sh uses it, through a
# cargo `--config` override: the crate's manifest never does, so users with internet build
# upstream cubecl-cuda.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: patched-cubecl-cuda.sh DEST}
registry() {
    ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cubecl-cuda-0.11.3 2>/dev/null | head -1
}
src=$(registry)
if [ -z "$src" ]; then
    # Not downloaded yet: a resolution with the `cuda` feature fetches it.
    cargo fetch >/dev/null 2>&1 || true
    src=$(registry)
fi
if [ -z "$src" ]; then
    echo "cubecl-cuda 0.11.3 is not in cargo's registry cache; run 'cargo fetch' first" >&2
    exit 1
fi
mkdir -p "$dest"
# Patch a fresh copy, and keep the previous one where it is the same: cargo fingerprints a
# path dependency by its files' times, so a new copy would rebuild everything above it (CubeCL,
# cubek, Burn's CubeCL crates) in every build.sh step.
rm -rf "$dest/cubecl-cuda.new"
cp -r "$src" "$dest/cubecl-cuda.new"
(cd "$dest/cubecl-cuda.new" && patch -s -p2 <"$here/cubecl-cuda-0.11.3-no-llvm.patch")
if diff -r -q "$dest/cubecl-cuda.new" "$dest/cubecl-cuda" >/dev/null 2>&1; then
    rm -rf "$dest/cubecl-cuda.new"
else
    rm -rf "$dest/cubecl-cuda"
    mv "$dest/cubecl-cuda.new" "$dest/cubecl-cuda"
fi
cd "$dest/cubecl-cuda" && pwd
