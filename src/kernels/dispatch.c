/* Run-time kernel choice. The best table this CPU and its OS run:
 *   avx512   AVX-512 F, BW, DQ, VL (CPUID) and the OS saves the ZMM state
 *            (XGETBV: XCR0 has SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM)
 *   avx2     AVX2, FMA, F16C and the OS saves the YMM state
 *   generic  the portable kernels, anywhere
 * ATTN_ISA (read once) forces a set: "auto" (the default), "generic", "avx2",
 * "avx512", or "avx512-simde" (the AVX-512 source through SIMD Everywhere's
 * emulation, where the build has it: for tests on hosts without AVX-512).
 * A set this CPU or build cannot run makes attn_kernel_status() an error
 * (ATTN_E_UNSUPPORTED; an unknown name ATTN_E_INVALID) that every fused
 * entry point returns, rather than a silent fallback. */
#include "kernels.h"

#include "attn.h"

#include <stdlib.h>
#include <string.h>
#ifdef ATTN_HAVE_AVX2_BUILD
#include <cpuid.h>
#endif

#ifdef ATTN_HAVE_AVX2_BUILD
/* XCR0: which register state the OS saves (0 without OSXSAVE) */
static unsigned long long xcr0(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int have_avx2(void) {
    __builtin_cpu_init();
    return (xcr0() & 0x6) == 0x6 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

static int have_avx512(void) {
    __builtin_cpu_init();
    return have_avx2() && (xcr0() & 0xe6) == 0xe6 && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}
#endif

/* the table of that name, if this build has it; *ok = this CPU runs it */
static const attn_kernel_table *lookup(const char *name, int *ok) {
    *ok = 1;
    if (!strcmp(name, "generic")) return &attn_kernels_generic;
#ifdef ATTN_HAVE_AVX2_BUILD
    if (!strcmp(name, "avx2")) return *ok = have_avx2(), &attn_kernels_avx2;
    if (!strcmp(name, "avx512")) return *ok = have_avx512(), &attn_kernels_avx512;
#ifdef ATTN_HAVE_SIMDE
    if (!strcmp(name, "avx512-simde")) return *ok = have_avx2(), &attn_kernels_avx512_simde;
#endif
#endif
    *ok = 0;
    return NULL;
}

static const attn_kernel_table *best(void) {
#ifdef ATTN_HAVE_AVX2_BUILD
    if (have_avx512()) return &attn_kernels_avx512;
    if (have_avx2()) return &attn_kernels_avx2;
#endif
    return &attn_kernels_generic;
}

const attn_kernel_table *attn_kernels_lookup(const char *name) {
    int ok;
    const attn_kernel_table *t = lookup(name, &ok);
    return ok ? t : NULL;
}

static const attn_kernel_table *choose(attn_status *st) {
    const char *force = getenv("ATTN_ISA");
    *st = ATTN_OK;
    if (!force || !*force || !strcmp(force, "auto")) return best();
    int ok;
    const attn_kernel_table *t = lookup(force, &ok);
    if (t && ok) return t;
    /* known names this CPU or build cannot run are unsupported; anything else is invalid */
    int known = t || !strcmp(force, "avx2") || !strcmp(force, "avx512") || !strcmp(force, "avx512-simde");
    *st = known ? ATTN_E_UNSUPPORTED : ATTN_E_INVALID;
    return best();
}

static const attn_kernel_table *table; /* benign race: every thread computes the same pointer */
static attn_status table_status;

const attn_kernel_table *attn_kernels(void) {
    const attn_kernel_table *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t) {
        attn_status st;
        t = choose(&st);
        __atomic_store_n(&table_status, st, __ATOMIC_RELAXED);
        __atomic_store_n(&table, t, __ATOMIC_RELEASE);
    }
    return t;
}

attn_status attn_kernel_status(void) {
    attn_kernels();
    return __atomic_load_n(&table_status, __ATOMIC_RELAXED);
}

const char *attn_kernel_name(void) { return attn_kernels()->name; }
