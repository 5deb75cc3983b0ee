/* Decode's two streams through the library's kernels alone (no softmax, no
 * driver), in the same process and alternating each round with a plain sum
 * over the same bytes: blocks of 128 keys through qk_rows_x (K) then
 * pv_rows_x (V), R query rows, D = 128, 2^19 keys each (huge pages), with
 * the kernels' software prefetch 128, 32 or 512 rows ahead or none. How
 * docs/PERFORMANCE.md ("What bounds a decode step on one core") found that
 * at four rows the hardware's prefetchers alone follow the kernels at a
 * third of the read and the software prefetch lifts them to about 0.6.
 * Not built by make:
 *   gcc -O2 -mavx512f -Isrc -Iinclude bench/decode_stream_ab.c build/libattn.a \
 *       -o /tmp/stream_ab -lopenblas -ldnnl -fopenmp -lm
 *   /tmp/stream_ab FMT R [ONLY]
 * FMT bf16 | f16 | e5m2 | e4m3 | int8 (int8: its codes as values); ONLY 1: K
 * alone, 2: V alone. Prints ns a key and the step's speed over the read's
 * (median and range of 9 rounds). */
#include "kernels/kernels.h"
#include "base/storage.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static __m512 sum(const char *p, size_t n, __m512 a) {
    __m512 b = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 128)
        a = _mm512_add_ps(a, _mm512_loadu_ps((const float *)(p + i))),
        b = _mm512_add_ps(b, _mm512_loadu_ps((const float *)(p + i + 64)));
    return _mm512_add_ps(a, b);
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s bf16|f16|e5m2|e4m3|int8 R [1|2]\n", argv[0]), 2;
    const char *f = argv[1];
    int R = atoi(argv[2]), only = argc > 3 ? atoi(argv[3]) : 0;
    attn_dtype t = !strcmp(f, "int8")   ? ATTN_DTYPE_KV_INT8
                   : !strcmp(f, "f16")  ? ATTN_DTYPE_F16
                   : !strcmp(f, "e4m3") ? ATTN_DTYPE_FP8_E4M3
                   : !strcmp(f, "e5m2") ? ATTN_DTYPE_FP8_E5M2
                                        : ATTN_DTYPE_BF16;
    if (R < 1 || R > 16) return fprintf(stderr, "R in 1..16\n"), 2;
    const attn_kernel_table *kt = attn_kernels();
    enum { D = 128, NB = 128, NT = 1 << 19, REPS = 9, NM = 5 };
    size_t rb = attn_storage_bytes(t, D), B = rb * (size_t)NT, pad = 2u << 20;
    uint8_t *K, *V;
    if (posix_memalign((void **)&K, 2u << 20, B + pad) || posix_memalign((void **)&V, 2u << 20, B + pad)) return 1;
    madvise(K, B + pad, MADV_HUGEPAGE), madvise(V, B + pad, MADV_HUGEPAGE);
    uint32_t s = 1;
    for (size_t i = 0; i < B + pad; i++) /* finite values of every format: bf16 / f16 high bytes 0x3f / 0x3b */
        s = s * 1664525u + 1013904223u, K[i] = V[i] = (i & 1) && rb == 2 * D ? 0x3b : (uint8_t)((s >> 24) & 0x3f);
    static float Q[16 * D], S[16 * NB], O[16 * D];
    for (int i = 0; i < R * D; i++) Q[i] = (float)(i % 7) * 0.1f - 0.3f;
    for (int i = 0; i < R * NB; i++) S[i] = 0.001f * (float)(i % 5);
    static const char *names[NM] = {"read", "prefetch 128 rows", "no prefetch", "prefetch 32 rows",
                                    "prefetch 512 rows"};
    static const int dist[NM] = {0, 128, 0, 32, 512};
    double tm[NM][REPS];
    __m512 acc = _mm512_setzero_ps();
    for (int rep = 0; rep < REPS; rep++)
        for (int m = 0; m < NM; m++) {
            double t0 = now();
            for (size_t j = 0; j < NT; j += NB) {
                const uint8_t *k = K + j * rb, *v = V + j * rb;
                if (m == 0) {
                    if (only != 2) acc = sum((const char *)k, NB * rb, acc);
                    if (only != 1) acc = sum((const char *)v, NB * rb, acc);
                    continue;
                }
                int d = dist[m];
                if (only != 2) kt->qk_rows_x(Q, R, D, k, D, NB, S, NB, d ? k + d * rb : NULL, D, D, t);
                if (only != 1) kt->pv_rows_x(S, NB, R, v, D, NB, D, O, D, d ? v + d * rb : NULL, D, D, t);
            }
            tm[m][rep] = now() - t0;
        }
    for (int m = 0; m < NM; m++) {
        double r[REPS];
        for (int i = 0; i < REPS; i++) r[i] = tm[0][i] / tm[m][i];
        qsort(r, REPS, sizeof *r, cmpd), qsort(tm[m], REPS, sizeof *tm[m], cmpd);
        printf("%s %s R=%d %-18s %6.2f ns a key, of the read %.2f (%.2f-%.2f)\n", kt->name, f, R, names[m],
               tm[m][REPS / 2] * 1e9 / NT, r[REPS / 2], r[0], r[REPS - 1]);
    }
    return O[0] == 1234.5f && _mm512_reduce_add_ps(acc) == 1.0f;
}
