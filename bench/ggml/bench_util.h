/* What the ggml bench programs (ggml_bench.c, ggml_decode.c) share: a
 * monotonic clock, the median time of a call, a ggml graph run as such a
 * call, and the LCG that fills their inputs with values in [-0.5, 0.5). */
#ifndef ATTN_GGML_BENCH_UTIL_H
#define ATTN_GGML_BENCH_UTIL_H

#include "ggml-cpu.h"
#include "ggml.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
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

/* the median seconds of fn(arg) over at least 3 calls and about 1 s (64 at most) */
static double median_seconds(void (*fn)(void *), void *arg) {
    double t[64];
    int n = 0;
    for (double t0 = now(); n < 64 && (n < 3 || now() - t0 < 1.0); n++) {
        double s = now();
        fn(arg);
        t[n] = now() - s;
    }
    qsort(t, (size_t)n, sizeof t[0], cmp_d);
    return t[n / 2];
}

/* a ggml graph computed on a thread count, for median_seconds */
typedef struct ggml_run {
    struct ggml_context *ctx;
    struct ggml_cgraph *gf;
    int threads;
} ggml_run;
static void ggml_run_graph(void *p) {
    const ggml_run *g = p;
    ggml_graph_compute_with_ctx(g->ctx, g->gf, g->threads);
}

/* the next value of the LCG x, in [-0.5, 0.5) */
static float lcg_next(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return (float)((*x >> 8) * (1.0 / 16777216.0)) - 0.5f;
}

#endif
