/* attn bench --decode --formats: one decode step over the same rows stored
 * in every KV format, timed in alternating rounds within one process with
 * a plain read of memory: what a smaller cache buys. Per format: the bytes
 * a step reads (K and V as stored, int8 / int4 pairs included), the step's
 * time, the step relative to bf16's in the same round (median of the
 * rounds), and GB/s of its bytes against two reads measured in the same
 * round (medians of the rounds' ratios): of a buffer of its own (the read
 * bandwidth, as `attn bench --decode`), and of the cache's own storage (the
 * very bytes the step reads: on a VM one allocation may read up to 2x
 * faster or slower than another). */
#include "cli.h"
#include "base/storage.h"
#include "core/kv_src.h"
#include "readbw.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cli_cmp_double);
    return x[n / 2];
}

enum { NF = 8, ROUNDS = 64 };
static const attn_dtype formats[NF] = {ATTN_DTYPE_BF16,    ATTN_DTYPE_F16,  ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_FP8_E4M3,
                                       ATTN_DTYPE_KV_INT8, ATTN_DTYPE_Q8_0, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};

/* the median of reps timed decode steps over cache c */
static double time_step(attn_kv_cache *c, const attn_sdpa_desc *d, attn_view q, attn_view o, int reps, int *bad) {
    double t[8];
    for (int i = 0; i < reps; i++) {
        double t0 = cli_now();
        *bad |= attn_kv_cache_attend(c, d, q, o, NULL) != ATTN_OK;
        t[i] = cli_now() - t0;
    }
    return median(t, reps);
}

/* the median of reps reads of the np regions at p (bytes[i] each) */
static double time_read(const void *const *p, const size_t *bytes, int np, int reps, unsigned *sink) {
    double t[8];
    for (int i = 0; i < reps; i++) {
        double t0 = cli_now();
        *sink += attn_readbw_sum_regions(p, bytes, np);
        t[i] = cli_now() - t0;
    }
    return median(t, reps);
}

int cli_bench_formats(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int64_t page, attn_math math,
                      double min_time, int json) {
    if (D % 64) { /* --heads a multiple of --kv-heads: bench's options */
        cli_error("bench --formats: --head-dim must be a multiple of 64 (every format takes it), got %lld",
                  (long long)D);
        return EXIT_USAGE;
    }
    attn_kv_cache *cache[NF] = {0};
    int64_t chunk = T < 1024 ? T : 1024, *n = calloc((size_t)B, sizeof *n);
    size_t nr = (size_t)(B * Hkv * chunk * D), bytes[NF], maxb = 0;
    float *kk = malloc(nr * 4), *vv = malloc(nr * 4), *q = malloc((size_t)(B * H * D) * 4),
          *o = malloc((size_t)(B * H * D) * 4);
    uint32_t s = 11u;
    for (size_t i = 0; kk && vv && i < nr; i++) {
        s = s * 1664525u + 1013904223u, kk[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
        s = s * 1664525u + 1013904223u, vv[i] = (float)(s >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    for (size_t i = 0; q && i < (size_t)(B * H * D); i++)
        s = s * 1664525u + 1013904223u, q[i] = (float)(s >> 8) * 6e-8f;
    int bad = !kk || !vv || !q || !o || !n;
    for (int f = 0; f < NF && !bad; f++) {
        attn_dtype t = formats[f];
        attn_kv_cache_config cfg = {
            .batch = B, .kv_heads = Hkv, .capacity = T, .head_dim = D, .v_head_dim = D, .dtype = t, .page_size = page};
        bad |= attn_kv_cache_create(&cfg, &cache[f]) != ATTN_OK;
        attn_view vk = {kk, Hkv * chunk * D, chunk * D, D}, vv_ = {vv, Hkv * chunk * D, chunk * D, D};
        for (int64_t done = 0; done < T && !bad; done += chunk) {
            for (int64_t b = 0; b < B; b++) n[b] = T - done < chunk ? T - done : chunk;
            bad |= attn_kv_cache_append(cache[f], n, vk, vv_) != ATTN_OK;
        }
        bytes[f] = (size_t)(2 * B * Hkv * T) *
                   (attn_storage_bytes(t, D) + (attn_storage_of(t)->params == ATTN_ST_ROWPAR ? 8 : 0));
        maxb = bytes[f] > maxb ? bytes[f] : maxb;
    }
    void *rd = bad ? NULL : attn_readbw_buf(maxb);
    unsigned sink = 0;
    if (bad || !rd) {
        cli_error("bench --formats: caches of B=%lld Hkv=%lld T=%lld D=%lld: out of memory or refused", (long long)B,
                  (long long)Hkv, (long long)T, (long long)D);
        for (int f = 0; f < NF; f++) attn_kv_cache_free(cache[f]);
        free(kk), free(vv), free(q), free(o), free(n), free(rd);
        return 1;
    }
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, 1, T, D, D);
    d.Hkv = Hkv, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT, d.math = math, d.Sk = 0;
    attn_view vq = {q, H * D, D, D}, vo = {o, H * D, D, D};
    static double tf[NF][ROUNDS], rel[NF][ROUNDS], rr[NF][ROUNDS], ro[NF][ROUNDS];
    int rounds = 0;
    double end = cli_now() + (min_time > 0 ? min_time : 1.0) * NF;
    for (int f = 0; f < NF; f++) time_step(cache[f], &d, vq, vo, 1, &bad); /* warm */
    do { /* a round: each format's step, then the reads of as many bytes and of the cache's own, in turn */
        for (int f = 0; f < NF; f++) {
            tf[f][rounds] = time_step(cache[f], &d, vq, vo, 3, &bad);
            const void *rp[4] = {rd};
            size_t rb[4] = {bytes[f]};
            rr[f][rounds] = time_read(rp, rb, 1, 3, &sink) / tf[f][rounds]; /* (bytes / t_step) / (bytes / t_read) */
            int np = attn_kv_cache_regions(cache[f], rp, rb);               /* a paged pool's rows: up to a page more */
            double own = 0.0;
            for (int r = 0; r < np; r++) own += (double)rb[r];
            ro[f][rounds] = time_read(rp, rb, np, 3, &sink) / own * (double)bytes[f] / tf[f][rounds];
        }
        for (int f = 0; f < NF; f++) rel[f][rounds] = tf[f][rounds] / tf[0][rounds];
        rounds++;
    } while (!bad && rounds < ROUNDS && (rounds < 3 || cli_now() < end));
    if (bad) {
        cli_error("bench --formats: a decode step failed");
        return 1;
    }
    if (!json)
        printf("decode step over every KV format: B=%lld Hq=%lld Hkv=%lld T=%lld D=%lld math=%s, %d threads, %d rounds "
               "(%s kernels)\n%-9s %12s %12s %14s %10s %14s %12s\n",
               (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)D,
               math == ATTN_MATH_STRICT ? "strict"
               : math == ATTN_MATH_DATA ? "data"
                                        : "bf16",
               omp_get_max_threads(), rounds, attn_kernel_name(), "format", "bytes/step", "ms", "step / bf16", "GB/s",
               "of the read", "of its own");
    for (int f = 0; f < NF; f++) {
        double lo = tf[f][0], hi = tf[f][0];
        for (int r = 1; r < rounds; r++) lo = tf[f][r] < lo ? tf[f][r] : lo, hi = tf[f][r] > hi ? tf[f][r] : hi;
        double ms = median(tf[f], rounds) * 1e3, st = median(rel[f], rounds), ra = median(rr[f], rounds),
               rown = median(ro[f], rounds);
        double gbps = (double)bytes[f] / (ms * 1e-3) * 1e-9;
        if (json)
            printf("{\"op\": \"decode-formats\", \"kv_dtype\": \"%s\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": "
                   "%lld, "
                   "\"H\": %lld, \"Hkv\": %lld, \"T\": %lld, \"D\": %lld, \"threads\": %d, \"rounds\": %d, \"bytes\": "
                   "%zu, "
                   "\"ms\": %.4f, \"ms_min\": %.4f, \"ms_max\": %.4f, \"step_to_bf16\": %.3f, \"gbps\": %.2f, "
                   "\"ratio_to_read\": %.3f, \"ratio_to_own_read\": %.3f}\n",
                   attn_storage_of(formats[f])->name,
                   math == ATTN_MATH_STRICT ? "strict"
                   : math == ATTN_MATH_DATA ? "data"
                                            : "bf16",
                   attn_kernel_name(), (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)D,
                   omp_get_max_threads(), rounds, bytes[f], ms, lo * 1e3, hi * 1e3, st, gbps, ra, rown);
        else
            printf("%-9s %12zu %5.2f (%4.1f-%4.1f) %8.3f %10.1f %14.3f %12.3f\n", attn_storage_of(formats[f])->name,
                   bytes[f], ms, lo * 1e3, hi * 1e3, st, gbps, ra, rown);
    }
    for (int f = 0; f < NF; f++) attn_kv_cache_free(cache[f]);
    free(kk), free(vv), free(q), free(o), free(n), free(rd);
    return sink == 12345u; /* keeps the reads */
}
