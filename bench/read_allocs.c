/* How the read yardstick of `attn bench --decode` moves on a VM, one thread:
 *   kernels: the read's sum as float32 adds (its form until 2026-12-07) and
 *            as 32-bit integer adds (tools/attn/readbw.c now), alternating
 *            over one 256 MiB buffer, 12 rounds;
 *   allocs:  N buffers of 256 MiB, each 2 MiB aligned with huge pages
 *            advised (as the library allocates a cache) or refused, each
 *            read 5 times (best), with the huge pages the kernel granted.
 * JSON lines for bench/record.py. AVX-512 hosts:
 *   gcc -O3 -mavx512f -o /tmp/read_allocs bench/read_allocs.c
 *   /tmp/read_allocs kernels | /tmp/read_allocs allocs 12 huge | /tmp/read_allocs allocs 12 none */
#define _GNU_SOURCE
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

#define SUM8(name, vec, zero, load, add)                                                                               \
    static vec name(const char *p, size_t n) {                                      \
        vec a[8];                                                                                                      \
        for (int k = 0; k < 8; k++) a[k] = zero();                                                                     \
        for (size_t i = 0; i + 512 <= n; i += 512)                                                                     \
            for (int k = 0; k < 8; k++) a[k] = add(a[k], load((const void *)(p + i + 64 * k)));                        \
        for (int k = 1; k < 8; k++) a[0] = add(a[0], a[k]);                                                            \
        return a[0];                                                                                                   \
    }
SUM8(sum_f32, __m512, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_add_ps)
SUM8(sum_i32, __m512i, _mm512_setzero_si512, _mm512_loadu_si512, _mm512_add_epi32)
/* the sum's lanes in unsigned arithmetic (_mm512_reduce_add_epi32 adds as int) */
static unsigned lanes(__m512i a) {
    unsigned t[16], s = 0;
    _mm512_storeu_si512((void *)t, a);
    for (int k = 0; k < 16; k++) s += t[k];
    return s;
}

/* kB of huge pages the kernel gave the mapping that holds p */
static long huge_kb(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long lo, hi;
    int in = 0;
    long kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's line (a field's name is not hex-hex) */
            in = (unsigned long)p >= lo && (unsigned long)p < hi;
            continue;
        }
        if (in && !strncmp(line, "AnonHugePages:", 14)) {
            sscanf(line + 14, "%ld", &kb);
            break;
        }
    }
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    const size_t bytes = (size_t)256 << 20;
    volatile float sf = 0;
    volatile unsigned si = 0;
    if (argc > 1 && !strcmp(argv[1], "kernels")) {
        char *p;
        if (posix_memalign((void **)&p, 2 << 20, bytes)) return 1;
        madvise(p, bytes, MADV_HUGEPAGE);
        for (size_t i = 0; i < bytes / 4; i++) ((float *)p)[i] = (float)(i & 255);
        for (int r = 0; r < 12; r++) {
            double t[2];
            for (int s = 0; s < 2; s++) { /* odd rounds: integers first */
                int ints = (r & 1) ^ s;
                double t0 = now();
                if (ints)
                    si += lanes(sum_i32(p, bytes));
                else
                    sf += _mm512_reduce_add_ps(sum_f32(p, bytes));
                t[ints] = now() - t0;
            }
            printf("{\"op\": \"read-kernels\", \"round\": %d, \"f32_gbps\": %.2f, \"i32_gbps\": %.2f, \"i32_over_f32\": "
                   "%.3f}\n",
                   r, (double)bytes / t[0] * 1e-9, (double)bytes / t[1] * 1e-9, t[0] / t[1]);
        }
        return 0;
    }
    if (argc > 3 && !strcmp(argv[1], "allocs")) {
        int n = atoi(argv[2]), huge = !strcmp(argv[3], "huge");
        for (int a = 0; a < n; a++) {
            char *p;
            if (posix_memalign((void **)&p, 2 << 20, bytes)) return 1;
            madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
            memset(p, 1, bytes);
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = now();
                si += lanes(sum_i32(p, bytes));
                double t = now() - t0;
                best = t < best ? t : best;
            }
            printf("{\"op\": \"read-alloc\", \"alloc\": %d, \"advised\": \"%s\", \"huge_kb\": %ld, \"gbps\": %.2f}\n", a,
                   huge ? "huge" : "none", huge_kb(p), (double)bytes / best * 1e-9);
        }
        return 0;
    }
    fprintf(stderr, "usage: read_allocs kernels | allocs N huge|none\n");
    return 2;
}
