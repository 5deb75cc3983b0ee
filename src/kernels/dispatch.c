/* Run-time kernel choice: AVX2+FMA+F16C when the CPU has them, the portable
 * kernels otherwise. ATTN_ISA (read once) forces a set: "generic", "avx2",
 * or "auto" (the default); "avx512" and any set this build or CPU cannot
 * run make attn_kernel_status() an error (ATTN_E_UNSUPPORTED; an unknown
 * name ATTN_E_INVALID) that every fused entry point returns, rather than a
 * silent fallback. */
#include "kernels.h"

#include "attn.h"

#include <stdlib.h>
#include <string.h>

static int have_avx2(void) {
#ifdef ATTN_HAVE_AVX2_BUILD
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

static const attn_kernel_table *choose(attn_status *st) {
    const char *force = getenv("ATTN_ISA");
    *st = ATTN_OK;
#ifdef ATTN_HAVE_AVX2_BUILD
    const attn_kernel_table *best = have_avx2() ? &attn_kernels_avx2 : &attn_kernels_generic;
#else
    const attn_kernel_table *best = &attn_kernels_generic;
#endif
    if (!force || !*force || !strcmp(force, "auto")) return best;
    if (!strcmp(force, "generic")) return &attn_kernels_generic;
    if (!strcmp(force, "avx2")) {
        if (!have_avx2()) *st = ATTN_E_UNSUPPORTED;
        return best;
    }
    *st = !strcmp(force, "avx512") ? ATTN_E_UNSUPPORTED : ATTN_E_INVALID; /* no AVX-512 kernels yet */
    return best;
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
