/* Which orders of reading a block of cache rows does this core's memory
 * stream follow? A 1 GiB buffer read whole in each of these orders, the
 * orders alternating round by round (the VM's bandwidth drifts), GB/s
 * medians and ranges; ROW bytes a row, blocks of 128 rows as decode reads
 * them:
 *   seq     every line in address order (the read reference)
 *   keys3   three rows a step, line by line across the three (Q K^T's
 *           order at four rows a kv head)
 *   passes  each row's first half for the block's 128 rows, then each
 *           row's second half (P V's two column passes at three or four
 *           rows)
 *   passes+pf  passes, with a T1 prefetch of the next block's row (all its
 *           lines) in the first pass, as pvi_pass prefetches
 *   passes+touch  passes, the first pass also loading the row's second
 *           half (which the second pass then reads from cache)
 *   shuffled   the lines of each 4 KiB page in a fixed shuffled order; and
 *   shuffled+pf  with a T1 prefetch 16 KiB ahead in the same order
 *   pf-only    T1 prefetches of every line, no loads
 * How docs/PERFORMANCE.md tells which orders the hardware's prefetchers
 * follow and what software prefetch gives back. Not built by make:
 *   gcc -O2 -mavx512f bench/read_patterns.c -o /tmp/read_patterns
 *   /tmp/read_patterns ROW ROUNDS   (one JSON line an order) */
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
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
#define LD(o) acc = _mm512_add_epi32(acc, _mm512_load_si512((const void *)(p + (o))))
enum { SEQ, KEYS3, PASSES, PASSES_PF, PASSES_TOUCH, SHUF, SHUF_PF, PF_ONLY, NMODE };
static const char *names[NMODE] = {"seq",      "keys3",        "passes",      "passes+pf",
                                   "passes+touch", "shuffled", "shuffled+pf", "pf-only"};

/* one read of n bytes at p in order mode (rb bytes a row); the sum's low bit keeps the loads */
__attribute__((noinline)) static int read_once(const char *p, size_t n, size_t rb, int mode) {
    __m512i acc = _mm512_setzero_si512();
    size_t blk = 128 * rb, h = rb / 2;
    if (mode == SEQ)
        for (size_t o = 0; o < n; o += 64) LD(o);
    else if (mode == KEYS3)
        for (size_t s = 0; s + 3 * rb <= n; s += 3 * rb)
            for (size_t l = 0; l < rb; l += 64)
                for (size_t e = 0; e < 3; e++) LD(s + e * rb + l);
    else if (mode == PASSES || mode == PASSES_PF || mode == PASSES_TOUCH)
        for (size_t s = 0; s + blk <= n; s += blk)
            for (size_t c = 0; c < rb; c += h)
                for (size_t j = 0; j < 128; j++) {
                    const char *r = p + s + j * rb;
                    for (size_t l = 0; c == 0 && mode == PASSES_PF && s + blk + j * rb + rb <= n && l < rb; l += 64)
                        _mm_prefetch(r + blk + l, _MM_HINT_T1);
                    for (size_t l = h; c == 0 && mode == PASSES_TOUCH && l < rb; l += 64) LD(s + j * rb + l);
                    for (size_t l = 0; l < h; l += 64) LD(s + j * rb + c + l);
                }
    else if (mode == SHUF || mode == SHUF_PF)
        for (size_t s = 0; s < n; s += 4096)
            for (size_t i = 0; i < 64; i++) {
                size_t o = s + (i * 37 % 64) * 64;
                if (mode == SHUF_PF && o + 16384 < n) _mm_prefetch(p + o + 16384, _MM_HINT_T1);
                LD(o);
            }
    else
        for (size_t o = 0; o < n; o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
    return _mm512_reduce_add_epi32(acc) & 1;
}

int main(int argc, char **argv) {
    size_t rb = argc > 1 ? (size_t)atol(argv[1]) : 128, n = (size_t)1 << 30;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (rb < 128 || rb % 128 || rounds < 1 || rounds > 64)
        return fprintf(stderr, "usage: %s ROW (a multiple of 128) ROUNDS (1..64)\n", argv[0]), 2;
    char *p = aligned_alloc(4096, n);
    if (!p) return 1;
    memset(p, 1, n);
    __asm__ volatile("" : : "r"(p) : "memory"); /* the loads read what memory holds */
    static double gbs[NMODE][64];
    int sink = 0;
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < NMODE; m++) {
            double t0 = now();
            sink += read_once(p, n, rb, m);
            gbs[m][r] = (double)n / (now() - t0) / 1e9;
        }
    for (int m = 0; m < NMODE; m++) {
        qsort(gbs[m], (size_t)rounds, sizeof(double), cmp);
        printf("{\"op\": \"read-patterns\", \"order\": \"%s\", \"row_bytes\": %zu, \"rounds\": %d, \"gbs\": %.1f, "
               "\"gbs_min\": %.1f, \"gbs_max\": %.1f}\n",
               names[m], rb, rounds, gbs[m][rounds / 2], gbs[m][0], gbs[m][rounds - 1]);
    }
    free(p);
    return sink == -1;
}
