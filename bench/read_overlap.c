/* Does a stream read from memory overlap with arithmetic that does not
 * depend on it? A 1 GiB read, 256 bytes a step (four 64-byte loads into
 * sums), with W steps of eight independent FMA chains each (8 W FMAs a
 * step, none fed by the loads) and, in mode 1, a software prefetch (T1)
 * of the step's lines DIST bytes ahead; mode 0: the hardware prefetchers
 * alone. How docs/PERFORMANCE.md told the kernels' case (their products
 * consume the loads) from the core's: with the prefetch the read and the
 * FMAs overlap (the time near the larger of the two), without it they add.
 * Not built by make:
 *   gcc -O2 -mavx512f bench/read_overlap.c -o /tmp/read_overlap
 *   /tmp/read_overlap MODE DIST W   (best of 5, GB/s and ns a step) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: %s MODE(0|1) DIST W\n", argv[0]), 2;
    int mode = atoi(argv[1]), work = atoi(argv[3]);
    long dist = atol(argv[2]);
    size_t B = (size_t)1 << 30, pad = (size_t)1 << 20;
    char *p = aligned_alloc(4096, B + pad);
    if (!p || dist < 0 || (size_t)dist > pad - 256) return 1;
    memset(p, 1, B + pad);
    __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a, w = _mm512_set1_ps(0.5f);
    __m512 e0 = w, e1 = w, e2 = w, e3 = w, e4 = w, e5 = w, e6 = w, e7 = w; /* named: an array went to memory */
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (size_t i = 0; i < B; i += 256) {
            if (mode == 1)
                for (int l = 0; l < 4; l++) _mm_prefetch(p + i + dist + 64 * l, _MM_HINT_T1);
            a = _mm512_add_ps(a, _mm512_loadu_ps((const float *)(p + i)));
            b = _mm512_add_ps(b, _mm512_loadu_ps((const float *)(p + i + 64)));
            c = _mm512_add_ps(c, _mm512_loadu_ps((const float *)(p + i + 128)));
            d = _mm512_add_ps(d, _mm512_loadu_ps((const float *)(p + i + 192)));
            for (int k = 0; k < work; k++) {
                e0 = _mm512_fmadd_ps(e0, w, w), e1 = _mm512_fmadd_ps(e1, w, w), e2 = _mm512_fmadd_ps(e2, w, w);
                e3 = _mm512_fmadd_ps(e3, w, w), e4 = _mm512_fmadd_ps(e4, w, w), e5 = _mm512_fmadd_ps(e5, w, w);
                e6 = _mm512_fmadd_ps(e6, w, w), e7 = _mm512_fmadd_ps(e7, w, w);
            }
        }
        double t = now() - t0;
        best = t < best ? t : best;
    }
    printf("{\"op\": \"read-overlap\", \"mode\": %d, \"dist\": %ld, \"fma_per_step\": %d, \"gbps\": %.1f, "
           "\"ns_per_step\": %.2f}\n",
           mode, dist, 8 * work, (double)B / best / 1e9, best * 1e9 / (double)(B / 256));
    __m512 s = _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(e0, e1), _mm512_add_ps(e2, e3)),
                                       _mm512_add_ps(_mm512_add_ps(e4, e5), _mm512_add_ps(e6, e7))));
    return _mm512_reduce_add_ps(s) == 1.0f;
}
