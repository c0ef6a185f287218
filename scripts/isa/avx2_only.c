/* Runs a program as on a CPU without AVX-512: loaded with LD_PRELOAD, it turns on CPUID
 * faulting (Linux's ARCH_SET_CPUID, where the CPU and hypervisor offer `cpuid_fault`) and
 * answers each faulting CPUID with the real answer less the AVX-512 and AVX-VNNI bits. Every
 * later reader of CPUID in the process (Rust's `is_x86_feature_detected!`, `pulp`, `gemm`,
 * oneDNN's JIT) then picks its AVX2 code, so one machine can measure both instruction sets.
 * Threads inherit the faulting state; `exec` clears it, so children need LD_PRELOAD too.
 * A program that installs its own SIGSEGV handler (rustc, Rust's stack-overflow guard) gets it
 * through this file's `sigaction`, which keeps ours in place and hands it every fault that is
 * not a CPUID. See `scripts/isa/avx2_only.sh`. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <dlfcn.h>
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

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

/* libc's own `sigaction`, behind the one below. */
static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    static sigaction_fn real;
    if (!real) real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return real(sig, act, old);
}

/* The program's SIGSEGV disposition: what it asked for, which our handler runs for it. */
static struct sigaction program;
static int installed;

static void on_segv(int sig, siginfo_t *info, void *context);

static void install(int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | (flags & SA_ONSTACK);
    sigemptyset(&action.sa_mask);
    real_sigaction(SIGSEGV, &action, NULL);
}

/* The program sets and reads its SIGSEGV disposition here; ours stays installed. */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig != SIGSEGV || !installed) return real_sigaction(sig, act, old);
    if (old) *old = program;
    if (act) {
        program = *act;
        /* Its handler may need the alternate stack (a stack-overflow guard does). */
        install(act->sa_flags);
    }
    return 0;
}

/* A fault that is not a CPUID: what the program asked for, else the default (a crash). */
static void forward(int sig, siginfo_t *info, void *context) {
    if ((program.sa_flags & SA_SIGINFO) && program.sa_sigaction) {
        program.sa_sigaction(sig, info, context);
    } else if (!(program.sa_flags & SA_SIGINFO) && program.sa_handler != SIG_DFL &&
               program.sa_handler != SIG_IGN) {
        program.sa_handler(sig);
    } else {
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        real_sigaction(SIGSEGV, &fallback, NULL);
    }
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const unsigned char *rip = (const unsigned char *)regs[REG_RIP];
    if (info->si_code != SI_KERNEL || rip[0] != 0x0f || rip[1] != 0xa2) {
        forward(sig, info, context);
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
    memset(&program, 0, sizeof program);
    real_sigaction(SIGSEGV, NULL, &program);
    install(0);
    installed = 1;
    if (set_cpuid_faulting(1) != 0) {
        fprintf(stderr, "avx2_only: CPUID faulting is not available here (no cpuid_fault)\n");
        exit(2);
    }
}
