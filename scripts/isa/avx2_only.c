/* Runs a program as on a CPU without AVX-512: loaded with LD_PRELOAD, it turns on CPUID
 * faulting (Linux's ARCH_SET_CPUID, where the CPU and hypervisor offer `cpuid_fault`) and
 * answers each faulting CPUID with the real answer less the AVX-512 and AVX-VNNI bits. Every
 * later reader of CPUID in the process (Rust's `is_x86_feature_detected!`, `pulp`, `gemm`,
 * oneDNN's JIT) then picks its AVX2 code, so one machine can measure both instruction sets.
 * Threads inherit the faulting state; `exec` clears it, so children need LD_PRELOAD too.
 * See `scripts/isa/avx2_only.sh`. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int set_cpuid_faulting(int on) {
    /* ARCH_SET_CPUID's argument is whether CPUID is allowed. */
    return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1);
}

static void real_cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* Leaf 7's AVX-512 bits (and AVX-VNNI, which no AVX2-only part of the CI class has). */
static void mask(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (leaf != 7) return;
    if (sub == 0) {
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
                  (1u << 30) | (1u << 31));
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23));
    } else if (sub == 1) {
        r[0] &= ~((1u << 4) | (1u << 5));
    }
}

static struct sigaction previous;

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const unsigned char *rip = (const unsigned char *)regs[REG_RIP];
    if (rip[0] != 0x0f || rip[1] != 0xa2) {
        /* Not a CPUID: the program's own fault, handled as it would have been. */
        sigaction(SIGSEGV, &previous, NULL);
        if (previous.sa_flags & SA_SIGINFO && previous.sa_sigaction) {
            previous.sa_sigaction(sig, info, context);
        }
        return;
    }
    uint32_t leaf = (uint32_t)regs[REG_RAX], sub = (uint32_t)regs[REG_RCX], r[4];
    set_cpuid_faulting(0);
    real_cpuid(leaf, sub, r);
    set_cpuid_faulting(1);
    mask(leaf, sub, r);
    regs[REG_RAX] = r[0];
    regs[REG_RBX] = r[1];
    regs[REG_RCX] = r[2];
    regs[REG_RDX] = r[3];
    regs[REG_RIP] += 2;
}

__attribute__((constructor)) static void avx2_only(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &previous) != 0 || set_cpuid_faulting(1) != 0) {
        fprintf(stderr, "avx2_only: CPUID faulting is not available here (no cpuid_fault)\n");
        exit(2);
    }
}
