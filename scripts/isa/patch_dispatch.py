#!/usr/bin/env python3
"""Copies pulp and gemm-common from cargo's registry into DIR, patched so that NO_AVX512=1
hides AVX-512 from pulp's `Arch::new` and gemm's run-time feature checks: this crate's and
Burn's CPU kernels then run their AVX2 code. See scripts/isa/avx2_forced.sh.

    python3 scripts/isa/patch_dispatch.py DIR   # prints one `name=path` line per crate
"""
import glob
import os
import re
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAG = """
/// `NO_AVX512` set: AVX-512 hidden from the dispatch (scripts/isa/patch_dispatch.py).
pub fn no_avx512() -> bool {
    static FLAG: ::std::sync::OnceLock<bool> = ::std::sync::OnceLock::new();
    *FLAG.get_or_init(|| ::std::env::var_os("NO_AVX512").is_some())
}
"""

# (crate, file, text found exactly once, its replacement); the flag is appended to the file.
PATCHES = [
    ("pulp", "src/x86.rs",
     "\t\t#[cfg(feature = \"x86-v4\")]\n\t\tif let Some(simd) = V4::try_new() {\n\t\t\treturn Self::V4(simd);\n\t\t}",
     "\t\t#[cfg(feature = \"x86-v4\")]\n\t\tif let (false, Some(simd)) = (no_avx512(), V4::try_new()) {\n\t\t\treturn Self::V4(simd);\n\t\t}"),
    ("gemm-common", "src/lib.rs",
     "        ::std::arch::is_x86_feature_detected!($tt)\n",
     "        (!($tt.starts_with(\"avx512\") && $crate::no_avx512())\n"
     "            && ::std::arch::is_x86_feature_detected!($tt))\n"),
]


def locked_version(name):
    with open(os.path.join(ROOT, "Cargo.lock")) as lock:
        found = re.findall(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock.read())
    if len(found) != 1:
        sys.exit(f"patch_dispatch.py: Cargo.lock holds {len(found)} versions of {name}")
    return found[0]


def main():
    out = os.path.abspath(sys.argv[1])
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    for name, path, old, new in PATCHES:
        version = locked_version(name)
        sources = glob.glob(os.path.join(home, "registry/src/*", f"{name}-{version}"))
        if not sources:
            sys.exit(f"patch_dispatch.py: {name} {version} is not in {home}/registry (cargo fetch)")
        dest = os.path.join(out, f"{name}-{version}")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(sources[0], dest)
        with open(os.path.join(dest, path)) as f:
            text = f.read()
        if text.count(old) != 1:
            sys.exit(f"patch_dispatch.py: {name} {version}'s {path} changed; update the patch")
        with open(os.path.join(dest, path), "w") as f:
            f.write(text.replace(old, new) + FLAG)
        print(f"{name}={dest}")


main()
