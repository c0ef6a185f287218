//! What machine a report was measured on, as the report names it.

/// The CPU, its threads and widest vector ISA, and the GPU where `nvidia-smi` names one.
pub fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    // The first line of `info` that starts with `key`, after its colon.
    let field = |key: &str| {
        info.lines()
            .find(|line| line.starts_with(key))
            .and_then(|line| line.split(':').nth(1))
            .map(str::trim)
    };
    let cpu = field("model name").unwrap_or("unknown CPU");
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let gpu = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| {
            format!(
                "; GPU: {} (driver)",
                String::from_utf8_lossy(&out.stdout).trim()
            )
        })
        .unwrap_or_default();
    // The kernel's flags: what it read of the CPU when it booted, before any process could
    // mask its own CPUID.
    format!(
        "{cpu}, {threads} threads, widest vector ISA {}{}{gpu}",
        isa(),
        masked(field("flags").unwrap_or_default())
    )
}

/// A note where the CPU has AVX-512 but this process was shown none
/// (`scripts/isa/avx2_only.sh`) or its kernels' dispatch skips it
/// (`scripts/isa/avx2_forced.sh`): the rows then ran the AVX2 code on an AVX-512 core.
fn masked(flags: &str) -> &'static str {
    let has_avx512 = flags.split_whitespace().any(|flag| flag == "avx512f");
    if !has_avx512 || isa() == "AVX-512" {
        ""
    } else if forced() {
        " (AVX-512 skipped by pulp's and gemm's dispatch under `scripts/isa/avx2_forced.sh`: \
         the AVX2 code on an AVX-512 core)"
    } else {
        " (AVX-512 masked by `scripts/isa/avx2_only.sh`: the AVX2 code on an AVX-512 core)"
    }
}

/// Whether `scripts/isa/avx2_forced.sh` runs this process: its patched pulp and gemm skip
/// AVX-512 when `NO_AVX512` is set.
fn forced() -> bool {
    std::env::var_os("NO_AVX512").is_some()
}

/// The widest x86 vector instruction set the kernels run (what gemm and pulp pick at run time).
fn isa() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") && !forced() {
            return "AVX-512";
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return "AVX2+FMA";
        }
        "SSE2"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH
    }
}
