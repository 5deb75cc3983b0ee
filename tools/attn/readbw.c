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
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static float sum_avx512(const float *p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i)), a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32)), a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
        a4 = _mm512_add_ps(a4, _mm512_loadu_ps(p + i + 64)), a5 = _mm512_add_ps(a5, _mm512_loadu_ps(p + i + 80));
        a6 = _mm512_add_ps(a6, _mm512_loadu_ps(p + i + 96)), a7 = _mm512_add_ps(a7, _mm512_loadu_ps(p + i + 112));
    }
    a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                       _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    float s = _mm512_reduce_add_ps(a0);
    for (; i < n; i++) s += p[i];
    return s;
}

__attribute__((target("avx"))) static float sum_avx(const float *p, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i)), a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16)), a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
        a4 = _mm256_add_ps(a4, _mm256_loadu_ps(p + i + 32)), a5 = _mm256_add_ps(a5, _mm256_loadu_ps(p + i + 40));
        a6 = _mm256_add_ps(a6, _mm256_loadu_ps(p + i + 48)), a7 = _mm256_add_ps(a7, _mm256_loadu_ps(p + i + 56));
    }
    a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                       _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float t[8], s = 0.0f;
    _mm256_storeu_ps(t, a0);
    for (int k = 0; k < 8; k++) s += t[k];
    for (; i < n; i++) s += p[i];
    return s;
}
#endif

static float sum_plain(const float *p, size_t n) {
    float a[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += p[i + k];
    float s = 0.0f;
    for (int k = 0; k < 8; k++) s += a[k];
    for (; i < n; i++) s += p[i];
    return s;
}

typedef float (*sum_fn)(const float *, size_t);

static sum_fn pick(const char **name) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return *name = "avx512", sum_avx512;
    if (__builtin_cpu_supports("avx")) return *name = "avx", sum_avx;
#endif
    return *name = "plain", sum_plain;
}

const char *attn_readbw_kernel(void) {
    const char *name;
    pick(&name);
    return name;
}

float *attn_readbw_buf(size_t n) {
    void *p = NULL;
    size_t align = (size_t)2 << 20, bytes = ((n ? n : 1) * sizeof(float) + align - 1) / align * align;
    if (posix_memalign(&p, align, bytes)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE); /* advice only, as the library's attn_big_alloc */
#endif
    float *f = p;
    for (size_t i = 0; i < n; i++) f[i] = (float)(i & 255);
    return f;
}

float attn_readbw_sum(const float *p, size_t n) {
    const char *name;
    sum_fn f = pick(&name);
    float total = 0.0f;
#pragma omp parallel reduction(+ : total)
    {
        /* one contiguous slice per thread, split on 64-byte lines */
        size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
        size_t lines = (n + 15) / 16, lo = lines * t / nt * 16, hi = lines * (t + 1) / nt * 16;
        if (hi > n) hi = n;
        if (lo < hi) total += f(p + lo, hi - lo);
    }
    return total;
}
