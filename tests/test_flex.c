/* Programmable attention (attn.h: score_mod, mask_mod, block_mask):
 *   - the fused paths (prefill, decode, the backward) against the reference
 *     on random shapes, GQA, built-in rules, math modes, block masks built
 *     from mods and from arrays, 1 and 2 threads bitwise;
 *   - a causal mask_mod gives the built-in causal rule's bits, a document
 *     mask_mod the dense mask's, a score_mod ALiBi the built-in's values;
 *   - the calls: mask_mod only on partial blocks, score_mod never on a tile
 *     of empty blocks only (the fused path skips them: no load, no product);
 *   - block masks: the states from a mod, the arrays round trip, refusals;
 *   - bad input: a status and nothing written; NaN from score_mod: the NaN
 *     rule; a row no key survives: zeros. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 777u;
static int irand(int lo, int hi) { return tu_irand(&lcg, lo, hi); }

/* ---- the mods, written on tiles as a C user would ---- */
typedef struct ctx {
    int score;                 /* 0 none, 1 relative bias table, 2 tanh cap, 3 ALiBi, 4 NaN at (nan_i, nan_j) */
    int mask;                  /* 0 none, 1 document, 2 causal (top-left), 3 sliding window, 4 nothing kept in row 0 */
    const int *docq, *dock;    /* document of each query row / key */
    const float *table;        /* relative bias: table[h * 64 + clamp(i - j + 32)] */
    const float *slopes;       /* ALiBi slopes per head */
    int64_t off;               /* ALiBi's offset of the rows on the key axis */
    int W;                     /* sliding window */
    float cap;                 /* tanh cap */
    int64_t nan_i, nan_j;      /* where mod 4 writes NaN */
    const attn_block_mask *bm; /* to check which blocks the callbacks see */
    int bad_mask, bad_score;   /* calls on blocks they must not see */
} ctx;

static int rel(int64_t d) { return d < -32 ? 0 : d > 31 ? 63 : (int)(d + 32); }

/* which states the blocks of a tile have: bit 1 << state */
static int tile_states(const attn_block_mask *m, const attn_tile *t) {
    attn_block_mask_arrays a;
    if (!m || attn_block_mask_arrays_get(m, &a)) return 0;
    int st = 0;
    for (int64_t qb = t->i0 / a.q_block; qb <= (t->i0 + t->rows - 1) / a.q_block; qb++)
        for (int64_t kb = t->j0 / a.kv_block; kb <= (t->j0 + t->cols - 1) / a.kv_block; kb++)
            st |= 1 << attn_block_mask_block(m, a.B == 1 ? 0 : t->b, a.H == 1 ? 0 : t->h, qb, kb);
    return st;
}

static void score_fn(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    ctx *c = p;
    if (c->bm && !(tile_states(c->bm, t) & 6)) { /* only empty blocks: the fused path must skip it */
#pragma omp atomic
        c->bad_score++;
    }
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t cc = 0; cc < t->cols; cc++) {
            int64_t i = t->i0 + r, j = t->j0 + cc;
            float x = s[r * ld + cc], y = x, g = 1.0f;
            if (c->score == 1) {
                y = x + c->table[t->h * 64 + rel(i - j)];
            } else if (c->score == 2) {
                float th = tanhf(x / c->cap);
                y = c->cap * th, g = 1.0f - th * th;
            } else if (c->score == 3) {
                int64_t dist = i + c->off - j;
                y = x - c->slopes[t->h] * (float)(dist < 0 ? -dist : dist);
            } else if (c->score == 4 && i == c->nan_i && j == c->nan_j) {
                y = NAN;
            }
            s[r * ld + cc] = y;
            if (ds) ds[r * ld + cc] = g;
        }
}

static void mask_fn(void *p, const attn_tile *t, uint8_t *keep, int64_t ld) {
    ctx *c = p;
    if (c->bm && tile_states(c->bm, t) != 1 << 1) { /* a full or empty block: mask_mod is not needed */
#pragma omp atomic
        c->bad_mask++;
    }
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t cc = 0; cc < t->cols; cc++) {
            int64_t i = t->i0 + r, j = t->j0 + cc;
            int k = 1;
            if (c->mask == 1) k = c->docq[i] == c->dock[j];
            if (c->mask == 2) k = j <= i;
            if (c->mask == 3) k = j <= i && i - j < c->W;
            if (c->mask == 4) k = i != 0;
            keep[r * ld + cc] = (uint8_t)k;
        }
}

static attn_view bhsd(float *p, int64_t H, int64_t S, int64_t D) { return (attn_view){p, H * S * D, S * D, D}; }

/* a random block mask over the call from arrays: each block empty / partial / full */
static attn_block_mask *random_arrays(int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t qb, int64_t kb) {
    int64_t nq = (Sq + qb - 1) / qb, nk = (Sk + kb - 1) / kb, rows = B * H * nq;
    int32_t *num = calloc((size_t)rows, 4), *idx = calloc((size_t)(rows * nk), 4);
    int32_t *fnum = calloc((size_t)rows, 4), *fidx = calloc((size_t)(rows * nk), 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = nk - 1; k >= 0; k--) { /* descending: the caller's order is any order */
            int s = irand(0, 3);
            if (s == 1) idx[r * nk + num[r]++] = (int32_t)k;
            if (s >= 2) fidx[r * nk + fnum[r]++] = (int32_t)k;
        }
    attn_block_mask_arrays a = {B, H, Sq, Sk, qb, kb, num, idx, fnum, fidx};
    attn_block_mask *m = NULL;
    CHECK_OK(attn_block_mask_create(&a, &m));
    free(num), free(idx), free(fnum), free(fidx);
    return m;
}

typedef struct cas {
    int B, H, Hkv, Sq, Sk, D, Dv, causal, window, softcap, score, mask, bm, math, bwd;
} cas;

static void run_case(const cas *c, int idx) {
    int64_t B = c->B, H = c->H, Hkv = c->Hkv, Sq = c->Sq, Sk = c->Sk, D = c->D, Dv = c->Dv;
    size_t nq = (size_t)(B * H * Sq * D), nk = (size_t)(B * Hkv * Sk * D), nv = (size_t)(B * Hkv * Sk * Dv);
    size_t no = (size_t)(B * H * Sq * Dv), nl = (size_t)(B * H * Sq);
    float *q = tu_rand_array(nq, &lcg, 2.0f), *k = tu_rand_array(nk, &lcg, 2.0f), *v = tu_rand_array(nv, &lcg, 1.0f);
    float *go = tu_rand_array(no, &lcg, 1.0f), *table = tu_rand_array((size_t)(H * 64), &lcg, 1.0f);
    float *o[3], *l[3], *gq[3], *gk[3], *gv[3];
    for (int t = 0; t < 3; t++) {
        o[t] = calloc(no + 1, 4), l[t] = calloc(nl + 1, 4);
        gq[t] = calloc(nq + 1, 4), gk[t] = calloc(nk + 1, 4), gv[t] = calloc(nv + 1, 4);
    }
    int *docq = malloc((size_t)Sq * sizeof(int)), *dock = malloc((size_t)Sk * sizeof(int));
    int ndoc = irand(1, 4);
    for (int64_t i = 0; i < Sq; i++) docq[i] = (int)(i * ndoc / Sq);
    for (int64_t j = 0; j < Sk; j++) dock[j] = (int)(j * ndoc / Sk);
    float slopes[8];
    for (int h = 0; h < 8; h++) slopes[h] = 0.05f * (float)(h + 1);
    ctx cx = {c->score, c->mask, docq, dock, table, slopes, 0, irand(1, 40), 3.0f, -1, -1, NULL, 0, 0};
    attn_block_mask *bm = NULL;
    int64_t qb = (int64_t[]){16, 32, 48, 128, 7}[irand(0, 4)], kb = (int64_t[]){16, 64, 128, 256, 5}[irand(0, 4)];
    int64_t mB = irand(0, 1) ? B : 1, mH = irand(0, 1) ? H : 1;
    if (c->bm == 1 && c->mask) CHECK_OK(attn_block_mask_from_mod(mask_fn, &cx, mB, mH, Sq, Sk, qb, kb, &bm));
    if (c->bm == 2) bm = random_arrays(mB, mH, Sq, Sk, qb, kb);
    int stored = c->bm == 1 && c->mask && irand(0, 1); /* the partial blocks' bytes kept: no mask_mod in the call */
    if (stored) {
        attn_block_mask_free(bm), bm = NULL;
        CHECK_OK(attn_block_mask_from_mod_stored(mask_fn, &cx, mB, mH, Sq, Sk, qb, kb, 1 << 26, &bm));
    }
    cx.bm = bm;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, Sk, D, Dv);
    d.Hkv = Hkv;
    d.causal = (attn_causal)c->causal;
    if (c->window) d.window = 1, d.window_left = irand(0, 60), d.window_right = irand(-1, 20);
    if (c->softcap) d.softcap = 5.0f;
    d.math = (attn_math)c->math;
    d.score_mod = c->score ? score_fn : NULL, d.score_mod_ctx = &cx, d.score_mod_grad = 1;
    d.mask_mod = c->mask && !stored ? mask_fn : NULL, d.mask_mod_ctx = &cx;
    d.block_mask = bm;
    attn_view vq = bhsd(q, H, Sq, D), vk = bhsd(k, Hkv, Sk, D), vv = bhsd(v, Hkv, Sk, Dv), vg = bhsd(go, H, Sq, Dv);
    char label[256];
    snprintf(label, sizeof label,
             "case %d B%d H%d/%d Sq%d Sk%d D%d Dv%d causal%d window%d softcap%d score%d mask%d bm%d (%lldx%lld, "
             "%lldx%lld) math%d stored%d",
             idx, c->B, c->H, c->Hkv, c->Sq, c->Sk, c->D, c->Dv, c->causal, c->window, c->softcap, c->score, c->mask,
             c->bm, (long long)mB, (long long)mH, (long long)qb, (long long)kb, c->math, stored);
    for (int t = 0; t < 2; t++) { /* t = 0: the reference; 1: the fused path */
        d.impl = t ? ATTN_IMPL_FAST : ATTN_IMPL_REF;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o[t], H, Sq, Dv), l[t]));
        if (c->bwd)
            CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, bhsd(o[t], H, Sq, Dv), vg, t ? l[t] : NULL,
                                        bhsd(gq[t], H, Sq, D), bhsd(gk[t], Hkv, Sk, D), bhsd(gv[t], Hkv, Sk, Dv)));
        if (t == 0) cx.bad_score = 0; /* the reference runs score_mod on whole rows */
    }
    CHECK(cx.bad_mask == 0, "%s: mask_mod called on %d tiles of full or empty blocks", label, cx.bad_mask);
    CHECK(cx.bad_score == 0, "%s: score_mod called on %d tiles of empty blocks only", label, cx.bad_score);
    double rt = c->math ? 2e-2 : 1e-4, at = c->math ? 2e-3 : 2e-6, grt = c->math ? 5e-2 : 1e-3;
    char lb[300];
    snprintf(lb, sizeof lb, "%s out", label), tu_allclose(lb, o[1], o[0], no, rt, at);
    snprintf(lb, sizeof lb, "%s lse", label), tu_allclose(lb, l[1], l[0], nl, c->math ? 1e-2 : 1e-5, 1e-5);
    if (c->bwd) {
        snprintf(lb, sizeof lb, "%s dq", label), tu_allclose(lb, gq[1], gq[0], nq, grt, c->math ? 1e-2 : 2e-5);
        snprintf(lb, sizeof lb, "%s dk", label), tu_allclose(lb, gk[1], gk[0], nk, grt, c->math ? 1e-2 : 2e-5);
        snprintf(lb, sizeof lb, "%s dv", label), tu_allclose(lb, gv[1], gv[0], nv, grt, c->math ? 1e-2 : 2e-5);
    }
    for (size_t i = 0; i < no; i++)
        if (isnan(o[1][i])) {
            CHECK(0, "%s: NaN in the fused output", label);
            break;
        }
    /* 1 and 2 threads: the same bits */
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o[2], H, Sq, Dv), l[2]));
    if (c->bwd)
        CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, bhsd(o[2], H, Sq, Dv), vg, l[2], bhsd(gq[2], H, Sq, D),
                                    bhsd(gk[2], Hkv, Sk, D), bhsd(gv[2], Hkv, Sk, Dv)));
    omp_set_num_threads(nt);
    snprintf(lb, sizeof lb, "%s out 1 vs 2 threads", label), tu_equal(lb, o[2], o[1], no);
    if (c->bwd) snprintf(lb, sizeof lb, "%s dk 1 vs 2 threads", label), tu_equal(lb, gk[2], gk[1], nk);
    attn_block_mask_free(bm);
    for (int t = 0; t < 3; t++) free(o[t]), free(l[t]), free(gq[t]), free(gk[t]), free(gv[t]);
    free(q), free(k), free(v), free(go), free(table), free(docq), free(dock);
}

static void softcap_lib(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    attn_tile_softcap(s, ld, t->rows, t->cols, ((const ctx *)p)->cap, ds);
}

/* A causal mask_mod (with its block mask) gives the built-in causal rule's
 * bits; a document mask_mod gives the dense mask's; a score_mod ALiBi the
 * built-in ALiBi's values. Sq = Sk = S, B = 1. */
static void same_as_builtin(int64_t S, int64_t H, int64_t D) {
    size_t n = (size_t)(H * S * D), nl = (size_t)(H * S);
    float *q = tu_rand_array(n, &lcg, 2.0f), *k = tu_rand_array(n, &lcg, 2.0f), *v = tu_rand_array(n, &lcg, 1.0f);
    float *o1 = malloc(n * 4), *o2 = malloc(n * 4), *l1 = malloc(nl * 4), *l2 = malloc(nl * 4);
    int *doc = malloc((size_t)S * sizeof(int));
    uint8_t *dense = malloc((size_t)(S * S));
    for (int64_t i = 0; i < S; i++) doc[i] = (int)(i * 5 / S);
    for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < S; j++) dense[i * S + j] = doc[i] == doc[j];
    float slopes[8];
    for (int h = 0; h < 8; h++) slopes[h] = 0.125f * (float)(h + 1);
    ctx cx = {0, 2, doc, doc, NULL, slopes, 0, 0, 0.0f, -1, -1, NULL, 0, 0};
    attn_view vq = bhsd(q, H, S, D), vk = bhsd(k, H, S, D), vv = bhsd(v, H, S, D);
    attn_view vo1 = bhsd(o1, H, S, D), vo2 = bhsd(o2, H, S, D);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
    char lb[120];
    for (int blocks = 0; blocks < 3; blocks++) { /* no block mask, one, one with stored partial blocks */
        attn_block_mask *bm = NULL;
        if (blocks == 1) CHECK_OK(attn_block_mask_from_mod(mask_fn, &cx, 1, 1, S, S, 128, 128, &bm));
        if (blocks == 2) CHECK_OK(attn_block_mask_from_mod_stored(mask_fn, &cx, 1, 1, S, S, 128, 128, 1 << 26, &bm));
        d.causal = ATTN_CAUSAL_TOP_LEFT;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
        d.causal = ATTN_CAUSAL_NONE, d.mask_mod = blocks == 2 ? NULL : mask_fn, d.mask_mod_ctx = &cx, d.block_mask = bm;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo2, l2));
        snprintf(lb, sizeof lb, "causal mask_mod S%lld blocks%d: built-in causal's bits", (long long)S, blocks);
        tu_equal(lb, o2, o1, n);
        tu_equal(lb, l2, l1, nl);
        d.mask_mod = NULL, d.block_mask = NULL;
        attn_block_mask_free(bm);
    }
    cx.mask = 1;
    attn_block_mask *bm = NULL;
    CHECK_OK(attn_block_mask_from_mod(mask_fn, &cx, 1, 1, S, S, 64, 64, &bm));
    d.attn_mask = dense, d.attn_mask_strides[2] = S, d.attn_mask_strides[3] = 1;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
    d.attn_mask = NULL, d.mask_mod = mask_fn, d.mask_mod_ctx = &cx, d.block_mask = bm;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo2, l2));
    snprintf(lb, sizeof lb, "document mask_mod S%lld: the dense mask's values", (long long)S);
    tu_allclose(lb, o2, o1, n, 1e-6, 1e-7); /* the block mask's key ranges start the tiles elsewhere */
    d.mask_mod = NULL, d.block_mask = NULL;
    attn_block_mask_free(bm);
    d.alibi_slopes = slopes;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
    d.alibi_slopes = NULL, cx.score = 3, d.score_mod = score_fn, d.score_mod_ctx = &cx;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo2, l2));
    snprintf(lb, sizeof lb, "ALiBi score_mod S%lld: the built-in's values", (long long)S);
    tu_allclose(lb, o2, o1, n, 1e-5, 1e-6);
    /* softcap through attn_tile_softcap: the built-in's values, forward and backward */
    float *g1 = malloc(3 * n * 4), *g2 = malloc(3 * n * 4);
    attn_view go = bhsd(v, H, S, D);
    d.score_mod = NULL, d.softcap = 2.5f;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo1, go, l1, bhsd(g1, H, S, D), bhsd(g1 + n, H, S, D),
                                bhsd(g1 + 2 * n, H, S, D)));
    cx.cap = 2.5f, d.softcap = 0.0f, d.score_mod = softcap_lib, d.score_mod_grad = 1;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo2, l2));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo2, go, l2, bhsd(g2, H, S, D), bhsd(g2 + n, H, S, D),
                                bhsd(g2 + 2 * n, H, S, D)));
    snprintf(lb, sizeof lb, "attn_tile_softcap score_mod S%lld: the built-in softcap", (long long)S);
    tu_allclose(lb, o2, o1, n, 1e-5, 1e-6);
    tu_allclose(lb, g2, g1, 3 * n, 1e-4, 1e-6);
    attn_tile_softcap(NULL, 1, 1, 1, 1.0f, NULL); /* nothing: no tile */
    free(g1), free(g2);
    free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2), free(doc), free(dense);
}

/* the states create_block_mask gives a causal mask_mod, and the arrays */
static void states(void) {
    ctx cx = {0, 2, NULL, NULL, NULL, NULL, 0, 0, 0.0f, -1, -1, NULL, 0, 0};
    attn_block_mask *m = NULL;
    int64_t S = 200, Tk = 250, qb = 32, kb = 64; /* ragged last blocks */
    CHECK_OK(attn_block_mask_from_mod(mask_fn, &cx, 1, 2, S, Tk, qb, kb, &m));
    attn_block_mask_arrays a;
    CHECK_OK(attn_block_mask_arrays_get(m, &a));
    CHECK(a.B == 1 && a.H == 2 && a.q_len == S && a.kv_len == Tk && a.q_block == qb && a.kv_block == kb, "geometry");
    int64_t nq = (S + qb - 1) / qb, nk = (Tk + kb - 1) / kb;
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < nq; i++) {
            int32_t np = 0, nf = 0;
            for (int64_t j = 0; j < nk; j++) {
                int64_t r0 = i * qb, r1 = (i + 1) * qb - 1, k0 = j * kb, k1 = (j + 1) * kb - 1;
                /* full: every pair of the whole block kept (a ragged block is never full) */
                int want = k0 > (r1 < S - 1 ? r1 : S - 1) ? 0 : (k1 <= r0 && r1 < S && k1 < Tk) ? 2 : 1;
                int got = attn_block_mask_block(m, 0, h, i, j);
                CHECK(got == want, "block (%lld, %lld) of head %lld: %d, want %d", (long long)i, (long long)j,
                      (long long)h, got, want);
                int64_t row = h * nq + i;
                if (want == 1) CHECK(a.kv_indices[row * nk + np++] == j, "partial list of row %lld", (long long)row);
                if (want == 2) CHECK(a.full_kv_indices[row * nk + nf++] == j, "full list of row %lld", (long long)row);
            }
            CHECK(a.kv_num_blocks[h * nq + i] == np && a.full_kv_num_blocks[h * nq + i] == nf, "counts of row %lld",
                  (long long)i);
        }
    CHECK(attn_block_mask_block(m, 1, 0, 0, 0) == -1 && attn_block_mask_block(m, 0, 2, 0, 0) == -1 &&
              attn_block_mask_block(m, 0, 0, nq, 0) == -1 && attn_block_mask_block(m, 0, 0, 0, nk) == -1,
          "out-of-range blocks give -1");
    /* the arrays round trip */
    attn_block_mask *m2 = NULL;
    CHECK_OK(attn_block_mask_create(&a, &m2));
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                CHECK(attn_block_mask_block(m2, 0, h, i, j) == attn_block_mask_block(m, 0, h, i, j),
                      "round trip (%lld, %lld)", (long long)i, (long long)j);
    attn_block_mask_free(m2);
    /* stored partial blocks: the same states; within a budget or not at all */
    attn_block_mask *m3 = NULL, *m4 = NULL;
    CHECK_OK(attn_block_mask_from_mod_stored(mask_fn, &cx, 1, 2, S, Tk, qb, kb, 1 << 20, &m3));
    CHECK_OK(attn_block_mask_from_mod_stored(mask_fn, &cx, 1, 2, S, Tk, qb, kb, 100, &m4));
    CHECK(attn_block_mask_stored(m3) && !attn_block_mask_stored(m4) && !attn_block_mask_stored(m) &&
              !attn_block_mask_stored(NULL),
          "stored within the budget only");
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < nq; i++)
            for (int64_t j = 0; j < nk; j++)
                CHECK(attn_block_mask_block(m3, 0, h, i, j) == attn_block_mask_block(m, 0, h, i, j), "stored states");
    attn_block_mask_free(m3), attn_block_mask_free(m4);
    attn_block_mask_free(m);
    attn_block_mask_free(NULL);
}

/* bad input: a status, the detail names the argument, nothing written */
static void refusals(void) {
    int32_t num[2] = {1, 1}, idx[4] = {0, 1, 5, 0}, dup[4] = {0, 0, 1, 1}, fnum[2] = {1, 0}, fidx[4] = {0, 0, 0, 0};
    attn_block_mask *m = (attn_block_mask *)&num; /* a sentinel: set to NULL on refusal */
    attn_block_mask_arrays a = {1, 1, 20, 20, 10, 10, num, idx, NULL, NULL};
    idx[0] = 5;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_SHAPE && !m, "an index past nkv");
    CHECK(strstr(attn_last_error(), "kv_indices[0][0] = 5") != NULL, "detail: %s", attn_last_error());
    idx[0] = 0, num[0] = 3;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_SHAPE, "a count past nkv");
    CHECK(strstr(attn_last_error(), "kv_num_blocks[0] = 3") != NULL, "detail: %s", attn_last_error());
    num[0] = 2, a.kv_indices = dup;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_INVALID, "a block listed twice");
    a.kv_indices = idx, num[0] = 1, a.full_kv_num_blocks = fnum, a.full_kv_indices = fidx;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_INVALID, "a block both partial and full");
    a.full_kv_indices = NULL;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_INVALID, "full counts without indices");
    a.full_kv_num_blocks = NULL, a.q_block = 0;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_SHAPE, "a zero block size");
    CHECK(strstr(attn_last_error(), "q_block = 0") != NULL, "detail: %s", attn_last_error());
    a.q_block = 10, a.kv_num_blocks = NULL;
    CHECK(attn_block_mask_create(&a, &m) == ATTN_E_INVALID, "no kv_num_blocks");
    CHECK(attn_block_mask_create(NULL, &m) == ATTN_E_INVALID, "no arrays");
    CHECK(attn_block_mask_from_mod(NULL, NULL, 1, 1, 4, 4, 2, 2, &m) == ATTN_E_INVALID, "no mask_mod");
    CHECK(attn_block_mask_from_mod(mask_fn, NULL, 0, 1, 4, 4, 2, 2, &m) == ATTN_E_SHAPE, "B = 0");
    a.kv_num_blocks = num, idx[2] = 1;
    attn_block_mask *ok = NULL;
    CHECK_OK(attn_block_mask_create(&a, &ok)); /* 1 x 1, 20 x 20 in 10 x 10 blocks */

    int64_t S = 20, D = 8;
    float *q = tu_rand_array((size_t)(2 * S * D), &lcg, 1.0f), *k = tu_rand_array((size_t)(2 * S * D), &lcg, 1.0f);
    float *v = tu_rand_array((size_t)(2 * S * D), &lcg, 1.0f), out[2 * 20 * 8], g[3][2 * 20 * 8];
    for (int t = 0; t < 2 * 20 * 8; t++) out[t] = 42.0f, g[0][t] = g[1][t] = g[2][t] = 42.0f;
    attn_view vq = bhsd(q, 2, S, D), vk = bhsd(k, 2, S, D), vv = bhsd(v, 2, S, D), vo = bhsd(out, 2, S, D);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 2, S - 1, S, D, D); /* Sq 19 against the mask's q_len 20 */
    d.block_mask = ok;
    CHECK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL) == ATTN_E_SHAPE, "q_len != Sq");
    CHECK(strstr(attn_last_error(), "block_mask q_len = 20") != NULL, "detail: %s", attn_last_error());
    attn_sdpa_desc_init(&d, 1, 2, S, S + 1, D, D), d.block_mask = ok;
    CHECK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL) == ATTN_E_SHAPE, "kv_len < Sk");
    attn_block_mask *m3 = NULL;
    attn_block_mask_arrays a2 = {1, 3, 20, 20, 10, 10, (int32_t[6]){1, 1, 1, 1, 1, 1}, (int32_t[12]){0}, NULL, NULL};
    CHECK_OK(attn_block_mask_create(&a2, &m3));
    attn_sdpa_desc_init(&d, 1, 2, S, S, D, D), d.block_mask = m3;
    CHECK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL) == ATTN_E_SHAPE, "H = 3 against 2 heads");
    for (int t = 0; t < 2 * 20 * 8; t++) CHECK(out[t] == 42.0f, "out written on a refusal");
    /* the backward through score_mod without its derivative */
    ctx cx = {2, 0, NULL, NULL, NULL, NULL, 0, 0, 3.0f, -1, -1, NULL, 0, 0};
    attn_sdpa_desc_init(&d, 1, 2, S, S, D, D);
    d.score_mod = score_fn, d.score_mod_ctx = &cx;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    attn_status st =
        attn_sdpa_backward(&d, vq, vk, vv, vo, vo, NULL, bhsd(g[0], 2, S, D), bhsd(g[1], 2, S, D), bhsd(g[2], 2, S, D));
    CHECK(st == ATTN_E_UNSUPPORTED, "backward without score_mod_grad: %s", attn_status_string(st));
    CHECK(strstr(attn_last_error(), "score_mod_grad") != NULL, "detail: %s", attn_last_error());
    for (int t = 0; t < 2 * 20 * 8; t++) CHECK(g[0][t] == 42.0f && g[1][t] == 42.0f, "gradients written on a refusal");
    /* the block API refuses programmable rules */
    float mm[40], ll[40], tt[40];
    st = attn_sdpa_block_stats(&d, vq, vk, vv, vo, mm, ll, tt);
    CHECK(st == ATTN_E_UNSUPPORTED, "block stats with score_mod: %s", attn_status_string(st));
    attn_block_mask_free(ok), attn_block_mask_free(m3);
    free(q), free(k), free(v);
}

/* NaN from score_mod: the NaN rule (the row is NaN on every path, as the
 * reference); a NaN on a hidden pair is ignored; a row no key survives: 0 */
static void nan_rule(int64_t Sq) {
    int64_t S = 70, H = 2, D = 16;
    size_t nq = (size_t)(H * Sq * D), nk = (size_t)(H * S * D);
    float *q = tu_rand_array(nq, &lcg, 1.0f), *k = tu_rand_array(nk, &lcg, 1.0f), *v = tu_rand_array(nk, &lcg, 1.0f);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4);
    ctx cx = {4, 4, NULL, NULL, NULL, NULL, 0, 0, 0.0f, 1, 5, NULL, 0, 0}; /* NaN at (1, 5); row 0 keeps nothing */
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, Sq, S, D, D);
    d.score_mod = score_fn, d.score_mod_ctx = &cx, d.mask_mod = mask_fn, d.mask_mod_ctx = &cx;
    attn_view vq = bhsd(q, H, Sq, D), vk = bhsd(k, H, S, D), vv = bhsd(v, H, S, D);
    for (int hidden = 0; hidden < 2; hidden++) {
        d.causal = hidden ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE; /* causal: (1, 5) hidden */
        d.impl = ATTN_IMPL_REF;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o1, H, Sq, D), NULL));
        d.impl = ATTN_IMPL_FAST;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o2, H, Sq, D), NULL));
        char lb[80];
        snprintf(lb, sizeof lb, "NaN score_mod Sq%lld hidden%d", (long long)Sq, hidden);
        tu_allclose(lb, o2, o1, nq, 1e-4, 2e-6);
        for (int64_t h = 0; h < H; h++) {
            CHECK(isnan(o2[(h * Sq + 1) * D]) == !hidden, "%s: row 1 NaN iff (1, 5) is visible", lb);
            for (int64_t c = 0; c < D; c++) CHECK(o2[h * Sq * D + c] == 0.0f, "%s: row 0 sees nothing: zeros", lb);
            if (Sq > 2) CHECK(!isnan(o2[(h * Sq + 2) * D]), "%s: row 2 finite", lb);
        }
    }
    free(q), free(k), free(v), free(o1), free(o2);
}

/* The KV cache (contiguous f32 read in place, bf16 gathered, decode rows):
 * a mask_mod, a score_mod and a block mask give what the same call over the
 * cache's rows as tensors gives; strided positions refuse them. */
static void cache_case(attn_dtype dt, int64_t Sq) {
    int64_t Hkv = 2, H = 4, D = 16, T = 70, cap = 100;
    size_t nk = (size_t)(Hkv * T * D), nq = (size_t)(H * Sq * D);
    float *k = tu_rand_array(nk, &lcg, 1.0f), *v = tu_rand_array(nk, &lcg, 1.0f), *q = tu_rand_array(nq, &lcg, 1.0f);
    float *o1 = calloc(nq, 4), *o2 = calloc(nq, 4), *table = tu_rand_array((size_t)(H * 64), &lcg, 1.0f);
    if (dt == ATTN_DTYPE_BF16) /* the tensors hold what the cache stores */
        for (size_t i = 0; i < nk; i++) {
            uint32_t b = (uint32_t)tu_bf16(k[i]) << 16, c = (uint32_t)tu_bf16(v[i]) << 16;
            memcpy(&k[i], &b, 4), memcpy(&v[i], &c, 4);
        }
    int doc[100];
    for (int j = 0; j < 100; j++) doc[j] = j / 23;
    ctx cx = {1, 1, doc, doc, table, NULL, 0, 0, 0.0f, -1, -1, NULL, 0, 0};
    attn_kv_cache_config cfg = {
        .batch = 1, .kv_heads = Hkv, .capacity = cap, .head_dim = D, .v_head_dim = D, .dtype = dt};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&cfg, &c));
    int64_t n = T;
    CHECK_OK(attn_kv_cache_append(c, &n, bhsd(k, Hkv, T, D), bhsd(v, Hkv, T, D)));
    attn_block_mask *bm = NULL;
    CHECK_OK(attn_block_mask_from_mod(mask_fn, &cx, 1, 1, Sq, cap, 8, 16, &bm));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, Sq, 0, D, D);
    d.Hkv = Hkv, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    d.score_mod = score_fn, d.score_mod_ctx = &cx, d.mask_mod = mask_fn, d.mask_mod_ctx = &cx, d.block_mask = bm;
    CHECK_OK(attn_kv_cache_attend(c, &d, bhsd(q, H, Sq, D), bhsd(o1, H, Sq, D), NULL));
    d.Sk = T;
    CHECK_OK(
        attn_sdpa_forward(&d, bhsd(q, H, Sq, D), bhsd(k, Hkv, T, D), bhsd(v, Hkv, T, D), bhsd(o2, H, Sq, D), NULL));
    char lb[80];
    snprintf(lb, sizeof lb, "kv cache %s Sq%lld with mods and a block mask", dt == ATTN_DTYPE_BF16 ? "bf16" : "f32",
             (long long)Sq);
    tu_allclose(lb, o1, o2, nq, 1e-5, 1e-6);
    attn_kv_positions pos = {.global_len = &n, .block = 1, .stride = 1, .offset = 0};
    d.Sk = 0;
    CHECK(attn_kv_cache_attend_at(c, &d, &pos, bhsd(q, H, Sq, D), bhsd(o1, H, Sq, D), NULL) == ATTN_E_UNSUPPORTED,
          "strided positions refuse the mods");
    attn_block_mask_free(bm);
    attn_kv_cache_free(c);
    free(k), free(v), free(q), free(o1), free(o2), free(table);
}

/* Keys that no query row can see are never read: the middle key block of
 * K and V lies on pages the process may not read (PROT_NONE), and the fused
 * forward and decode run over it (a read would fault). */
static void keep_out(void) {
    ctx cx = {0, 0, NULL, NULL, NULL, NULL, 0, 0, 0.0f, -1, -1, NULL, 0, 0};
    long pg = sysconf(_SC_PAGESIZE);
    int64_t D = 16, per = pg / (int64_t)(D * sizeof(float)), S = 3 * per, H = 2; /* a key block per page */
    size_t bytes = (size_t)(3 * pg);
    float *k = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    float *v = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(k != MAP_FAILED && v != MAP_FAILED, "mmap");
    if (k == MAP_FAILED || v == MAP_FAILED) return;
    for (int64_t i = 0; i < S * D; i++) k[i] = 0.01f * (float)(i % 97), v[i] = 0.02f * (float)(i % 89);
    /* key block 1 (keys per .. 2 per - 1) is empty for every query block: a block mask from arrays */
    int64_t nq = (S + 31) / 32;
    int32_t *num = calloc((size_t)nq, 4), *idx = calloc((size_t)(nq * 3), 4);
    for (int64_t i = 0; i < nq; i++) num[i] = 2, idx[i * 3] = 0, idx[i * 3 + 1] = 2;
    attn_block_mask_arrays a = {1, 1, S, S, 32, per, num, idx, NULL, NULL};
    attn_block_mask *bm = NULL;
    CHECK_OK(attn_block_mask_create(&a, &bm));
    float *q = tu_rand_array((size_t)(H * S * D), &lcg, 1.0f), *o1 = calloc((size_t)(H * S * D), 4);
    float *o2 = calloc((size_t)(H * S * D), 4);
    attn_view vk = {k, 0, S * D, D}, vv = {v, 0, S * D, D}; /* one kv head */
    attn_sdpa_desc d;
    for (int64_t Sq = S; Sq >= 1; Sq = Sq == S ? 5 : 0) { /* the fused forward, then decode (5 rows) */
        a.q_len = Sq, nq = (Sq + 31) / 32;
        attn_block_mask *bq = NULL;
        CHECK_OK(attn_block_mask_create(&a, &bq));
        attn_sdpa_desc_init(&d, 1, H, Sq, S, D, D);
        d.Hkv = 1, d.block_mask = bq, d.score_mod = score_fn, d.score_mod_ctx = &cx;
        attn_view vq = bhsd(q, H, Sq, D);
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o1, H, Sq, D), NULL)); /* everything readable */
        mprotect((char *)k + pg, (size_t)pg, PROT_NONE), mprotect((char *)v + pg, (size_t)pg, PROT_NONE);
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o2, H, Sq, D), NULL)); /* a read of block 1 faults */
        mprotect((char *)k + pg, (size_t)pg, PROT_READ | PROT_WRITE),
            mprotect((char *)v + pg, (size_t)pg, PROT_READ | PROT_WRITE);
        char lb[64];
        snprintf(lb, sizeof lb, "a key block no row sees, Sq %lld: not read", (long long)Sq);
        tu_equal(lb, o2, o1, (size_t)(H * Sq * D));
        attn_block_mask_free(bq);
    }
    attn_block_mask_free(bm);
    munmap(k, bytes), munmap(v, bytes);
    free(num), free(idx), free(q), free(o1), free(o2);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    if (!getenv("ATTN_PRODUCTS")) keep_out(); /* oneDNN's products pack every key */
    cache_case(ATTN_DTYPE_F32, 3), cache_case(ATTN_DTYPE_F32, 40), cache_case(ATTN_DTYPE_BF16, 2);
    cache_case(ATTN_DTYPE_BF16, 33);
    states();
    refusals();
    nan_rule(3), nan_rule(40);
    same_as_builtin(300, 2, 32);
    same_as_builtin(97, 1, 64);
    static const int S_odd[] = {1, 2, 7, 16, 47, 49, 65, 97, 129, 200, 300};
    static const int D_odd[] = {8, 16, 33, 64, 80, 128};
    for (int idx = 0; idx < 160; idx++) {
        int H = (int[]){1, 2, 4, 8}[irand(0, 3)], Hkv = H / (int[]){1, 2, 4}[irand(0, 2)];
        if (Hkv < 1) Hkv = 1;
        int D = D_odd[irand(0, 5)];
        cas c = {irand(1, 2),
                 H,
                 Hkv,
                 S_odd[irand(0, 10)],
                 S_odd[irand(0, 10)],
                 D,
                 irand(0, 3) ? D : D_odd[irand(0, 5)],
                 irand(0, 3) == 0 ? irand(1, 2) : 0,
                 irand(0, 5) == 0,
                 irand(0, 5) == 0,
                 irand(0, 3),
                 irand(0, 3),
                 irand(0, 2),
                 irand(0, 7) == 0 ? irand(1, 2) : 0,
                 1};
        if (c.score == 3 || c.score == 4) c.score = 1;
        if (c.mask == 4) c.mask = 1;
        if (c.math) c.bwd = irand(0, 1);
        run_case(&c, idx);
    }
    return tu_finish("test_flex");
}
