/* The machine's read bandwidth, for `attn bench --decode`: what the memory
 * delivers to a kernel that does nothing but read, on the thread count the
 * decode runs on. It must reach the memory, not be bound by its own
 * arithmetic (a single-accumulator sum is bound by the latency of its adds:
 * 19 GB/s on one Zen 4 thread where the memory gives 28-31), so:
 *   - the widest vectors this CPU has (AVX-512, else AVX2, else plain C),
 *     chosen at run time like the library's kernels (one binary);
 *   - 8 independent accumulators, 8 vectors (512 or 256 bytes) per step;
 *   - streaming order: each thread reads one contiguous slice front to back
 *     (the hardware prefetchers see one stream per thread).
 * The sum is returned so the reads cannot be optimized away. */
#include "readbw.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

/* 32-bit integer adds: any bytes (a KV cache's codes too) are summed at the
 * same rate, with no floating-point special cases on the way. One kernel a
 * vector width: 8 accumulators, 8 vectors of W bytes a step. */
#define SUM_KERNEL(name, isa, vec, W, zero, load, add, reduce)                                                         \
    __attribute__((target(isa))) static unsigned name(const unsigned char *p, size_t n) {                              \
        vec a[8];                                                                                                      \
        for (int k = 0; k < 8; k++) a[k] = zero();                                                                     \
        size_t i = 0;                                                                                                  \
        for (; i + 8 * (W) <= n; i += 8 * (W))                                                                         \
            for (int k = 0; k < 8; k++) a[k] = add(a[k], load(p + i + (W)*k));                                         \
        for (int k = 1; k < 8; k++) a[0] = add(a[0], a[k]);                                                            \
        unsigned s = reduce(a[0]);                                                                                     \
        for (; i < n; i++) s += p[i];                                                                                  \
        return s;                                                                                                      \
    }

__attribute__((target("avx512f"))) static inline __m512i load512(const unsigned char *p) {
    return _mm512_loadu_si512((const void *)p);
}
/* in unsigned arithmetic: GCC's _mm512_reduce_add_epi32 adds as int, whose overflow is undefined */
__attribute__((target("avx512f"))) static inline unsigned reduce512(__m512i a) {
    unsigned t[16], s = 0;
    _mm512_storeu_si512((void *)t, a);
    for (int k = 0; k < 16; k++) s += t[k];
    return s;
}
__attribute__((target("avx2"))) static inline __m256i load256(const unsigned char *p) {
    return _mm256_loadu_si256((const __m256i *)p);
}
__attribute__((target("avx2"))) static inline unsigned reduce256(__m256i a) {
    unsigned t[8], s = 0;
    _mm256_storeu_si256((__m256i *)t, a);
    for (int k = 0; k < 8; k++) s += t[k];
    return s;
}
SUM_KERNEL(sum_avx512, "avx512f", __m512i, 64, _mm512_setzero_si512, load512, _mm512_add_epi32, reduce512)
SUM_KERNEL(sum_avx2, "avx2", __m256i, 32, _mm256_setzero_si256, load256, _mm256_add_epi32, reduce256)
#endif

static unsigned sum_plain(const unsigned char *p, size_t n) {
    uint64_t a[8] = {0};
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 8; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            a[k] += w;
        }
    unsigned s = 0;
    for (int k = 0; k < 8; k++) s += (unsigned)(a[k] ^ a[k] >> 32);
    for (; i < n; i++) s += p[i];
    return s;
}

typedef unsigned (*sum_fn)(const unsigned char *, size_t);

static sum_fn pick(const char **name) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return *name = "avx512", sum_avx512;
    if (__builtin_cpu_supports("avx2")) return *name = "avx2", sum_avx2;
#endif
    return *name = "plain", sum_plain;
}

const char *attn_readbw_kernel(void) {
    const char *name;
    pick(&name);
    return name;
}

void *attn_readbw_buf(size_t bytes) {
    void *p = NULL;
    size_t align = (size_t)2 << 20, all = ((bytes ? bytes : 1) + align - 1) / align * align;
    if (posix_memalign(&p, align, all)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, all, MADV_HUGEPAGE); /* advice only, as the library's attn_big_alloc */
#endif
    unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++) c[i] = (unsigned char)(i & 255);
    return p;
}

unsigned attn_readbw_sum(const void *p, size_t bytes) {
    const char *name;
    sum_fn f = pick(&name);
    unsigned total = 0;
#pragma omp parallel reduction(+ : total)
    {
        /* one contiguous slice per thread, split on 64-byte lines */
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t lines = (bytes + 63) / 64, lo = lines * t / nt * 64, hi = lines * (t + 1) / nt * 64;
        if (hi > bytes) hi = bytes;
        if (lo < hi) total += f((const unsigned char *)p + lo, hi - lo);
    }
    return total;
}

unsigned attn_readbw_sum_regions(const void *const *p, const size_t *bytes, int n) {
    unsigned total = 0;
    for (int i = 0; i < n; i++) total += attn_readbw_sum(p[i], bytes[i]);
    return total;
}
