/* attn bench --flex: programmable attention against what it reproduces, in
 * alternating rounds within one process (one forward each, B = 1):
 *   document mask    8 equal documents (mask_mod + block mask) vs the dense forward
 *   sliding window   causal, 512 keys (mask_mod + block mask) vs the dense forward
 *   causal mask_mod  (+ block mask) vs the built-in causal rule
 *   ALiBi score_mod  (a C tile callback) vs the built-in ALiBi
 *   softcap score_mod (a C tile callback: libmvec's tanhf, or the library's
 *                    attn_tile_softcap) vs the built-in softcap
 * Per pair: the medians of each side's time and of the rounds' ratios, with
 * their ranges. The callbacks are written as a C user would: plain loops
 * over the tile. */
#include "cli.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NV = 12, ROUNDS = 32 };

typedef struct flex_ctx {
    int64_t doc_len, window;
    const float *slopes;
    float cap;
} flex_ctx;

static void doc_mask(void *p, const attn_tile *t, uint8_t *keep, int64_t ld) {
    const flex_ctx *c = p;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t j = 0; j < t->cols; j++) keep[r * ld + j] = (t->i0 + r) / c->doc_len == (t->j0 + j) / c->doc_len;
}

static void window_mask(void *p, const attn_tile *t, uint8_t *keep, int64_t ld) {
    const flex_ctx *c = p;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t j = 0; j < t->cols; j++) {
            int64_t dist = t->i0 + r - (t->j0 + j);
            keep[r * ld + j] = dist >= 0 && dist < c->window;
        }
}

static void causal_mask(void *p, const attn_tile *t, uint8_t *keep, int64_t ld) {
    (void)p;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t j = 0; j < t->cols; j++) keep[r * ld + j] = t->j0 + j <= t->i0 + r;
}

/* The callbacks as a C user writes a hot loop: plain C, one clone for
 * AVX2 + FMA hosts and one for any x86-64 (GCC picks at load time). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define HOT __attribute__((target_clones("arch=haswell", "default")))
#else
#define HOT
#endif

/* ALiBi as the built-in: s - slope |i - j| (Sq = Sk: the rows' offset is 0) */
HOT static void alibi_score(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    const flex_ctx *c = p;
    float slope = c->slopes[t->h];
    int n = (int)t->cols;
    for (int64_t r = 0; r < t->rows; r++) {
        float *row = s + r * ld;
        int i = (int)(t->i0 + r - t->j0);
        for (int j = 0; j < n; j++) row[j] -= slope * (float)abs(i - j);
        if (ds)
            for (int64_t j = 0; j < t->cols; j++) ds[r * ld + j] = 1.0f;
    }
}

/* softcap: cap tanh(s / cap) (libmvec's tanhf) */
HOT static void softcap_score(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    const flex_ctx *c = p;
    float inv = 1.0f / c->cap;
    for (int64_t r = 0; r < t->rows; r++) {
        float *row = s + r * ld;
        for (int64_t j = 0; j < t->cols; j++) {
            float th = tanhf(row[j] * inv);
            row[j] = c->cap * th;
            if (ds) ds[r * ld + j] = 1.0f - th * th;
        }
    }
}

/* softcap through the library's vector tanh (attn_tile_softcap) */
static void softcap_lib(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    attn_tile_softcap(s, ld, t->rows, t->cols, ((const flex_ctx *)p)->cap, ds);
}

int cli_bench_flex(int64_t H, int64_t S, int64_t D, double min_time, int json) {
    size_t n = (size_t)(H * S * D);
    float *q = cli_frand_buf(n, 1), *k = cli_frand_buf(n, 2), *v = cli_frand_buf(n, 3), *o = malloc(n * 4);
    float *slopes = malloc((size_t)H * sizeof(float));
    if (!q || !k || !v || !o || !slopes) {
        free(q), free(k), free(v), free(o), free(slopes);
        cli_error("bench --flex: out of memory for H=%lld S=%lld D=%lld", (long long)H, (long long)S, (long long)D);
        return 1;
    }
    for (int64_t h = 0; h < H; h++) slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)H);
    flex_ctx cx = {S / 8 > 0 ? S / 8 : 1, 512, slopes, 20.0f};
    attn_block_mask *bm_doc = NULL, *bm_win = NULL, *bm_causal = NULL;
    int bad = attn_block_mask_from_mod(doc_mask, &cx, 1, 1, S, S, 128, 128, &bm_doc) != ATTN_OK ||
              attn_block_mask_from_mod(window_mask, &cx, 1, 1, S, S, 128, 128, &bm_win) != ATTN_OK ||
              attn_block_mask_from_mod(causal_mask, &cx, 1, 1, S, S, 128, 128, &bm_causal) != ATTN_OK;
    /* the variants: [2p] is the baseline of pair p, [2p + 1] what is compared with it */
    static const char *names[NV] = {"dense",   "document mask (8 docs)", "dense",   "sliding window 512",
                                    "causal",  "causal mask_mod",        "ALiBi",   "ALiBi score_mod",
                                    "softcap", "softcap score_mod",      "softcap", "softcap (attn_tile_softcap)"};
    attn_sdpa_desc d[NV];
    for (int i = 0; i < NV; i++) attn_sdpa_desc_init(&d[i], 1, H, S, S, D, D);
    d[1].mask_mod = doc_mask, d[1].mask_mod_ctx = &cx, d[1].block_mask = bm_doc;
    d[3].mask_mod = window_mask, d[3].mask_mod_ctx = &cx, d[3].block_mask = bm_win;
    d[4].causal = ATTN_CAUSAL_TOP_LEFT;
    d[5].mask_mod = causal_mask, d[5].mask_mod_ctx = &cx, d[5].block_mask = bm_causal;
    d[6].alibi_slopes = slopes;
    d[7].score_mod = alibi_score, d[7].score_mod_ctx = &cx;
    d[8].softcap = cx.cap;
    d[9].score_mod = softcap_score, d[9].score_mod_ctx = &cx;
    d[10].softcap = cx.cap;
    d[11].score_mod = softcap_lib, d[11].score_mod_ctx = &cx;
    attn_view vq = {q, H * S * D, S * D, D}, vk = vq, vv = vq, vo = vq;
    vk.data = k, vv.data = v, vo.data = o;
    static double t[NV][ROUNDS], ratio[NV / 2][ROUNDS];
    int rounds = 0;
    for (int i = 0; i < NV && !bad; i++) bad |= attn_sdpa_forward(&d[i], vq, vk, vv, vo, NULL) != ATTN_OK; /* warm */
    double end = cli_now() + (min_time > 0 ? min_time : 1.0) * NV;
    while (!bad && rounds < ROUNDS && (rounds < 3 || cli_now() < end)) {
        for (int i = 0; i < NV; i++) {
            double t0 = cli_now();
            bad |= attn_sdpa_forward(&d[i], vq, vk, vv, vo, NULL) != ATTN_OK;
            t[i][rounds] = cli_now() - t0;
        }
        for (int p = 0; p < NV / 2; p++) ratio[p][rounds] = t[2 * p][rounds] / t[2 * p + 1][rounds];
        rounds++;
    }
    if (bad) {
        cli_error("bench --flex: a forward failed: %s", attn_last_error());
    } else {
        if (!json)
            printf("programmable attention: B=1 H=%lld S=%lld D=%lld, %d threads, %d rounds (%s kernels); "
                   "speedup = baseline time / time (median of the rounds, range)\n%-24s %10s %-14s %10s %s\n",
                   (long long)H, (long long)S, (long long)D, omp_get_max_threads(), rounds, attn_kernel_name(),
                   "variant", "ms", "baseline", "ms", "speedup");
        for (int p = 0; p < NV / 2; p++) {
            double tb[ROUNDS], tv[ROUNDS], r[ROUNDS];
            memcpy(tb, t[2 * p], sizeof tb), memcpy(tv, t[2 * p + 1], sizeof tv), memcpy(r, ratio[p], sizeof r);
            qsort(tb, (size_t)rounds, sizeof *tb, cli_cmp_double),
                qsort(tv, (size_t)rounds, sizeof *tv, cli_cmp_double);
            qsort(r, (size_t)rounds, sizeof *r, cli_cmp_double);
            if (json)
                printf("{\"bench\": \"flex\", \"variant\": \"%s\", \"baseline\": \"%s\", \"H\": %lld, \"S\": %lld, "
                       "\"D\": %lld, \"threads\": %d, \"rounds\": %d, \"ms\": %.3f, \"baseline_ms\": %.3f, "
                       "\"speedup\": %.3f, \"speedup_min\": %.3f, \"speedup_max\": %.3f, \"kernels\": \"%s\"}\n",
                       names[2 * p + 1], names[2 * p], (long long)H, (long long)S, (long long)D, omp_get_max_threads(),
                       rounds, tv[rounds / 2] * 1e3, tb[rounds / 2] * 1e3, r[rounds / 2], r[0], r[rounds - 1],
                       attn_kernel_name());
            else
                printf("%-24s %10.2f %-14s %10.2f %.2fx (%.2f-%.2f)\n", names[2 * p + 1], tv[rounds / 2] * 1e3,
                       names[2 * p], tb[rounds / 2] * 1e3, r[rounds / 2], r[0], r[rounds - 1]);
        }
    }
    attn_block_mask_free(bm_doc), attn_block_mask_free(bm_win), attn_block_mask_free(bm_causal);
    free(q), free(k), free(v), free(o), free(slopes);
    return bad ? 1 : 0;
}
