/* Run-time kernel choice: AVX2+FMA+F16C when the CPU has them (and ATTN_ISA is not
 * "generic"), the portable kernels otherwise. */
#include "kernels.h"

#include "attn.h"

#include <stdlib.h>
#include <string.h>

static const attn_kernel_table *choose(void) {
    const char *force = getenv("ATTN_ISA");
    if (force && !strcmp(force, "generic")) return &attn_kernels_generic;
#ifdef ATTN_HAVE_AVX2_BUILD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return &attn_kernels_avx2;
#endif
    return &attn_kernels_generic;
}

const attn_kernel_table *attn_kernels(void) {
    static const attn_kernel_table *table; /* benign race: every thread computes the same pointer */
    const attn_kernel_table *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t) {
        t = choose();
        __atomic_store_n(&table, t, __ATOMIC_RELEASE);
    }
    return t;
}

const char *attn_kernel_name(void) { return attn_kernels()->name; }
