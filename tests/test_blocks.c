/* Context-parallel building blocks: a problem cut into query blocks and key
 * blocks (q_start / k_start / Sq_total / Sk_total) gives the whole
 * problem's results. Forward: each block through attn_sdpa_forward (fused
 * and reference paths), merged per row by log-sum-exp, equals the full
 * out and lse. Backward: the row statistics folded over the key blocks
 * (attn_sdpa_block_stats), then attn_sdpa_block_backward per block, summed,
 * equal the full dq, dk, dv. Random shapes with every feature (GQA, both
 * causal alignments, windows, key lengths, padding, softcap, ALiBi, 16-bit
 * inputs), and invalid block descriptors are refused. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct prob {
    attn_sdpa_desc d; /* the whole problem */
    float *q, *k, *v, *dout;
    uint16_t *q16, *k16, *v16;
    int64_t *seqlens;
    uint8_t *mask;
    float *slopes;
} prob;

/* (B, heads, S, W) array from row row0; es = element size (2: bf16 bits) */
static attn_view view(int64_t es, const void *data, int64_t heads, int64_t S, int64_t W, int64_t row0) {
    attn_view v = {(float *)((char *)data + (size_t)(row0 * W * es)), heads * S * W, S * W, W};
    return v;
}

static void make(prob *p, uint32_t *s) {
    memset(p, 0, sizeof *p);
    int64_t B = tu_irand(s, 1, 2), Hkv = tu_irand(s, 1, 2), H = Hkv * tu_irand(s, 1, 3);
    int64_t Sq = tu_irand(s, 1, 90), Sk = tu_irand(s, 1, 110), D = tu_irand(s, 1, 3) * 8, Dv = tu_irand(s, 1, 40);
    attn_sdpa_desc *d = &p->d;
    attn_sdpa_desc_init(d, B, H, Sq, Sk, D, Dv);
    d->Hkv = Hkv;
    d->causal = (attn_causal)tu_irand(s, 0, 2);
    if (tu_irand(s, 0, 3) == 0)
        d->window = 1, d->window_left = tu_irand(s, -1, 20), d->window_right = tu_irand(s, -1, 5);
    if (tu_irand(s, 0, 3) == 0) d->softcap = 3.0f + (float)tu_irand(s, 0, 10);
    if (tu_irand(s, 0, 2) == 0) {
        p->seqlens = malloc((size_t)B * sizeof *p->seqlens);
        for (int64_t b = 0; b < B; b++) p->seqlens[b] = tu_irand(s, 0, (int)Sk);
        d->seqlens_k = p->seqlens;
    }
    if (tu_irand(s, 0, 2) == 0) {
        p->mask = malloc((size_t)(B * Sk));
        for (int64_t i = 0; i < B * Sk; i++) p->mask[i] = tu_irand(s, 0, 4) == 0;
        d->key_mask = p->mask, d->key_mask_stride_b = Sk, d->key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
    }
    if (tu_irand(s, 0, 3) == 0) {
        p->slopes = malloc((size_t)H * sizeof *p->slopes);
        for (int64_t h = 0; h < H; h++) p->slopes[h] = 0.05f * (float)(h + 1);
        d->alibi_slopes = p->slopes;
    }
    p->q = tu_rand_array((size_t)(B * H * Sq * D), s, 1.5f);
    p->k = tu_rand_array((size_t)(B * Hkv * Sk * D), s, 1.5f);
    p->v = tu_rand_array((size_t)(B * Hkv * Sk * Dv), s, 1.0f);
    p->dout = tu_rand_array((size_t)(B * H * Sq * Dv), s, 1.0f);
    if (tu_irand(s, 0, 3) == 0) { /* bf16 inputs */
        d->qkv_dtype = ATTN_DTYPE_BF16;
        float *src[3] = {p->q, p->k, p->v};
        uint16_t **dst[3] = {&p->q16, &p->k16, &p->v16};
        size_t n[3] = {(size_t)(B * H * Sq * D), (size_t)(B * Hkv * Sk * D), (size_t)(B * Hkv * Sk * Dv)};
        for (int t = 0; t < 3; t++) {
            *dst[t] = malloc(n[t] * 2);
            for (size_t i = 0; i < n[t]; i++) (*dst[t])[i] = tu_bf16(src[t][i]);
        }
    }
}

static void release(prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->dout), free(p->q16), free(p->k16), free(p->v16);
    free(p->seqlens), free(p->mask), free(p->slopes);
}

/* cut n into pieces at random points (some pieces may be empty) */
static int cuts(uint32_t *s, int64_t n, int64_t *at) {
    int m = tu_irand(s, 1, 4);
    at[0] = 0;
    for (int i = 1; i < m; i++) at[i] = tu_irand(s, 0, (int)n);
    at[m] = n;
    for (int i = 1; i < m; i++) /* sort */
        for (int j = i; j > 1 && at[j] < at[j - 1]; j--) {
            int64_t t = at[j];
            at[j] = at[j - 1], at[j - 1] = t;
        }
    return m;
}

/* the statistics of query rows [qs, qs + n) of every (b, h): between the
 * whole rows' arrays (B*H rows of Sq) and a block's (B*H rows of n) */
static void stats_rows(float *const whole[3], float *const blk[3], int64_t BH, int64_t Sq, int64_t qs, int64_t n,
                       int to_block) {
    for (int a = 0; a < 3; a++)
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < n; i++) {
                float *w = whole[a] + bh * Sq + qs + i, *k = blk[a] + bh * n + i;
                if (to_block)
                    *k = *w;
                else
                    *w = *k;
            }
}

static void run_case(uint32_t *s, int cid) {
    prob p;
    make(&p, s);
    attn_sdpa_desc *d = &p.d;
    int64_t B = d->B, H = d->H, Hkv = d->Hkv, Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv;
    int64_t es = p.q16 ? 2 : 4;
    const void *Q = p.q16 ? (void *)p.q16 : p.q, *K = p.k16 ? (void *)p.k16 : p.k, *V = p.v16 ? (void *)p.v16 : p.v;
    size_t no = (size_t)(B * H * Sq * Dv), nl = (size_t)(B * H * Sq), nq = (size_t)(B * H * Sq * D);
    size_t nk = (size_t)(B * Hkv * Sk * D), nv = (size_t)(B * Hkv * Sk * Dv);
    float *out = calloc(no, 4), *lse = calloc(nl, 4), *dq = calloc(nq, 4), *dk = calloc(nk, 4), *dv = calloc(nv, 4);
    CHECK_OK(attn_sdpa_forward(d, view(es, Q, H, Sq, D, 0), view(es, K, Hkv, Sk, D, 0), view(es, V, Hkv, Sk, Dv, 0),
                               view(4, out, H, Sq, Dv, 0), lse));
    attn_view none = {0};
    CHECK_OK(attn_sdpa_backward(d, view(es, Q, H, Sq, D, 0), view(es, K, Hkv, Sk, D, 0), view(es, V, Hkv, Sk, Dv, 0),
                                none, view(4, p.dout, H, Sq, Dv, 0), NULL, view(4, dq, H, Sq, D, 0),
                                view(4, dk, Hkv, Sk, D, 0), view(4, dv, Hkv, Sk, Dv, 0)));
    int64_t qa[8], ka[8];
    int mq = cuts(s, Sq, qa), mk = cuts(s, Sk, ka);
    float *bo = calloc(no, 4), *bl = malloc(nl * 4), *bdq = calloc(nq, 4), *bdk = calloc(nk, 4), *bdv = calloc(nv, 4);
    float *po = calloc(no, 4), *pl = malloc(nl * 4), *pdq = calloc(nq, 4), *pdk = calloc(nk, 4), *pdv = calloc(nv, 4);
    float *m = malloc(nl * 4), *l = malloc(nl * 4), *t = malloc(nl * 4);
    float *whole[3] = {m, l, t}, *blk[3] = {malloc(nl * 4 + 4), malloc(nl * 4 + 4), malloc(nl * 4 + 4)};
    for (size_t i = 0; i < nl; i++) m[i] = -INFINITY, l[i] = 0.0f, t[i] = 0.0f;
    for (int impl = ATTN_IMPL_AUTO; impl <= ATTN_IMPL_REF; impl++) {
        memset(bo, 0, no * 4), memset(bdq, 0, nq * 4), memset(bdk, 0, nk * 4), memset(bdv, 0, nv * 4);
        for (size_t i = 0; i < nl; i++) bl[i] = -INFINITY;
        for (int a = 0; a < mq; a++)
            for (int c = 0; c < mk; c++) {
                int64_t qs = qa[a], nqb = qa[a + 1] - qs, ks = ka[c], nkb = ka[c + 1] - ks;
                attn_sdpa_desc e = *d;
                e.Sq = nqb, e.Sk = nkb, e.q_start = qs, e.k_start = ks, e.Sq_total = Sq, e.Sk_total = Sk;
                e.impl = (attn_impl)impl;
                /* the block's rows sit inside the whole arrays: strides of the whole problem */
                attn_view vq = view(es, Q, H, Sq, D, qs), vk = view(es, K, Hkv, Sk, D, ks);
                attn_view vv = view(es, V, Hkv, Sk, Dv, ks), vdo = view(4, p.dout, H, Sq, Dv, qs);
                attn_view vo = view(4, po, H, Sq, Dv, qs);
                /* lse of the block rows: (B, H, nqb) contiguous */
                CHECK_OK(attn_sdpa_forward(&e, vq, vk, vv, vo, pl));
                for (int64_t bh = 0; bh < B * H; bh++)
                    for (int64_t i = 0; i < nqb; i++) { /* merge into bo, bl */
                        size_t r = (size_t)(bh * Sq + qs + i);
                        float lp = pl[bh * nqb + i], la = bl[r];
                        float *oa = bo + r * (size_t)Dv, *op = po + r * (size_t)Dv;
                        if (lp == -INFINITY) continue;
                        if (la == -INFINITY) {
                            memcpy(oa, op, (size_t)Dv * 4), bl[r] = lp;
                            continue;
                        }
                        double M = la > lp ? la : lp, wa = exp(la - M), wp = exp(lp - M);
                        for (int64_t c2 = 0; c2 < Dv; c2++) oa[c2] = (float)((wa * oa[c2] + wp * op[c2]) / (wa + wp));
                        bl[r] = (float)(M + log(wa + wp));
                    }
                if (impl == ATTN_IMPL_AUTO) { /* statistics per block row, then folded */
                    stats_rows(whole, blk, B * H, Sq, qs, nqb, 1);
                    CHECK_OK(attn_sdpa_block_stats(&e, vq, vk, vv, vdo, blk[0], blk[1], blk[2]));
                    stats_rows(whole, blk, B * H, Sq, qs, nqb, 0);
                }
            }
        char label[96];
        snprintf(label, sizeof label, "case %d %s: merged out", cid, impl ? "ref" : "fast");
        tu_allclose(label, bo, out, no, 1e-4, 1e-5);
        snprintf(label, sizeof label, "case %d %s: merged lse", cid, impl ? "ref" : "fast");
        tu_allclose(label, bl, lse, nl, 1e-4, 1e-5);
    }
    /* backward: each block with the whole rows' statistics */
    for (int a = 0; a < mq; a++)
        for (int c = 0; c < mk; c++) {
            int64_t qs = qa[a], nqb = qa[a + 1] - qs, ks = ka[c], nkb = ka[c + 1] - ks;
            attn_sdpa_desc e = *d;
            e.Sq = nqb, e.Sk = nkb, e.q_start = qs, e.k_start = ks, e.Sq_total = Sq, e.Sk_total = Sk;
            stats_rows(whole, blk, B * H, Sq, qs, nqb, 1);
            float *mm = blk[0], *ll = blk[1], *tt = blk[2];
            memset(pdq, 0, nq * 4), memset(pdk, 0, nk * 4), memset(pdv, 0, nv * 4);
            CHECK_OK(attn_sdpa_block_backward(&e, view(es, Q, H, Sq, D, qs), view(es, K, Hkv, Sk, D, ks),
                                              view(es, V, Hkv, Sk, Dv, ks), view(4, p.dout, H, Sq, Dv, qs), mm, ll, tt,
                                              view(4, pdq, H, Sq, D, qs), view(4, pdk, Hkv, Sk, D, ks),
                                              view(4, pdv, Hkv, Sk, Dv, ks)));
            for (size_t i = 0; i < nq; i++) bdq[i] += pdq[i];
            for (size_t i = 0; i < nk; i++) bdk[i] += pdk[i];
            for (size_t i = 0; i < nv; i++) bdv[i] += pdv[i];
        }
    char label[96];
    snprintf(label, sizeof label, "case %d: summed block dq", cid);
    tu_allclose(label, bdq, dq, nq, 2e-4, 2e-5);
    snprintf(label, sizeof label, "case %d: summed block dk", cid);
    tu_allclose(label, bdk, dk, nk, 2e-4, 2e-5);
    snprintf(label, sizeof label, "case %d: summed block dv", cid);
    tu_allclose(label, bdv, dv, nv, 2e-4, 2e-5);
    free(out), free(lse), free(dq), free(dk), free(dv), free(bo), free(bl), free(bdq), free(bdk), free(bdv);
    free(po), free(pl), free(pdq), free(pdk), free(pdv), free(m), free(l), free(t);
    free(blk[0]), free(blk[1]), free(blk[2]);
    release(&p);
}

static void refused(void) {
    float x[64] = {0};
    attn_view v = {x, 16, 16, 4};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4, 4);
    float out[8], lse[2];
    attn_view o = {out, 8, 8, 4};
    d.q_start = -1;
    CHECK(attn_sdpa_forward(&d, v, v, v, o, lse) == ATTN_E_SHAPE, "negative q_start");
    d.q_start = 1; /* Sq_total defaults to Sq = 2: rows 1..2 do not fit */
    CHECK(attn_sdpa_forward(&d, v, v, v, o, lse) == ATTN_E_SHAPE, "block past Sq_total");
    d.q_start = 0, d.Sk_total = 1;
    CHECK(attn_sdpa_forward(&d, v, v, v, o, lse) == ATTN_E_SHAPE, "Sk_total < Sk");
    d.Sk_total = 4, d.k_start = 2;
    CHECK_OK(attn_sdpa_forward(&d, v, v, v, o, lse));
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_dropout dr;
    CHECK_OK(attn_dropout_begin(&g, 0.5, 4, &dr));
    d.dropout = &dr;
    CHECK(attn_sdpa_forward(&d, v, v, v, o, lse) == ATTN_E_UNSUPPORTED, "dropout in a block");
    attn_dropout_end(&dr);
    d.dropout = NULL;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0}, t[2] = {0};
    CHECK(attn_sdpa_block_stats(&d, v, v, v, o, NULL, l, t) == ATTN_E_INVALID, "stats without m");
    CHECK_OK(attn_sdpa_block_stats(&d, v, v, v, o, m, l, t));
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    uint32_t s = 2026;
    for (int c = 0; c < 120; c++) run_case(&s, c);
    refused();
    return tu_finish("test_blocks");
}
