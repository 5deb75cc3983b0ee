/* What the ggml bench programs (ggml_bench.c, ggml_decode.c) share: a
 * monotonic clock, a comparison for qsort of doubles, and the LCG that fills
 * their inputs with values in [-0.5, 0.5). */
#ifndef ATTN_GGML_BENCH_UTIL_H
#define ATTN_GGML_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the next value of the LCG x, in [-0.5, 0.5) */
static float lcg_next(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return (float)((*x >> 8) * (1.0 / 16777216.0)) - 0.5f;
}

#endif
