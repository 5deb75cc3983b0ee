/* Reference scaled-dot-product attention: one query row at a time with the
 * row's scores materialized, accumulated in double. Clear rather than fast;
 * the ground truth every other path is tested against. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

static const float *row_of(attn_view t, int64_t b, int64_t h, int64_t s) {
    return t.data + b * t.stride_b + h * t.stride_h + s * t.stride_s;
}

/* Scores of query row (b,h,i) against every key: sc[j] = scale * q.k_j, or
 * -INFINITY where key j is not visible. Returns the number of visible keys. */
static int64_t row_scores(const attn_sdpa_desc *d, attn_view q, attn_view k, int64_t b, int64_t h, int64_t i,
                          double *sc) {
    const float *qi = row_of(q, b, h, i);
    int64_t nvis = 0;
    for (int64_t j = 0; j < d->Sk; j++) {
        if (!attn_visible(d, b, i, j)) {
            sc[j] = -INFINITY;
            continue;
        }
        const float *kj = row_of(k, b, h, j);
        double acc = 0.0;
        for (int64_t c = 0; c < d->D; c++) acc += (double)qi[c] * (double)kj[c];
        sc[j] = (double)d->scale * acc;
        nvis++;
    }
    return nvis;
}

/* In place: scores -> probabilities. Returns the log-sum-exp (-INF when no key
 * is visible, and then every probability is 0). A NaN score propagates. */
static double row_softmax(double *sc, int64_t n, int64_t nvis) {
    if (nvis == 0) {
        for (int64_t j = 0; j < n; j++) sc[j] = 0.0;
        return -INFINITY;
    }
    double m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        if (isnan(sc[j])) { /* NaN in, NaN out (the whole row, as torch.softmax) */
            for (int64_t t = 0; t < n; t++) sc[t] = NAN;
            return NAN;
        }
        if (sc[j] > m) m = sc[j];
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        sc[j] = exp(sc[j] - m);
        sum += sc[j];
    }
    for (int64_t j = 0; j < n; j++) sc[j] /= sum;
    return m + log(sum);
}

attn_status attn_sdpa_ref_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                  float *lse) {
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    size_t nsk = (size_t)d->Sk;
    double *p = malloc((nsk ? nsk : 1) * sizeof *p);
    double *acc = malloc((size_t)d->Dv * sizeof *acc);
    uint8_t *keep = malloc(nsk ? nsk : 1);
    if (!p || !acc || !keep) {
        free(p);
        free(acc);
        free(keep);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++) {
                int64_t nvis = row_scores(d, q, k, b, h, i, p);
                double l = row_softmax(p, d->Sk, nvis);
                if (lse) lse[(b * d->H + h) * d->Sq + i] = (float)l;
                if (d->dropout) {
                    uint64_t base = (uint64_t)(((b * d->H + h) * d->Sq + i) * d->Sk);
                    attn_dropout_mask_range(d->dropout, base, nsk, keep);
                    for (int64_t j = 0; j < d->Sk; j++) p[j] *= keep[j] ? (double)d->dropout->scale : 0.0;
                }
                for (int64_t c = 0; c < d->Dv; c++) acc[c] = 0.0;
                for (int64_t j = 0; j < d->Sk; j++) {
                    if (p[j] == 0.0) continue; /* masked or dropped key: contributes nothing */
                    const float *vj = row_of(v, b, h, j);
                    for (int64_t c = 0; c < d->Dv; c++) acc[c] += p[j] * (double)vj[c];
                }
                float *o = out.data + b * out.stride_b + h * out.stride_h + i * out.stride_s;
                for (int64_t c = 0; c < d->Dv; c++) o[c] = (float)acc[c];
            }
    free(p);
    free(acc);
    free(keep);
    return ATTN_OK;
}

attn_status attn_sdpa_ref_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores,
                                  float *weights) {
    attn_view none = {0};
    attn_status st = attn_sdpa_check(d, q, k, none, none, 0);
    if (st != ATTN_OK) return st;
    size_t nsk = (size_t)d->Sk;
    double *p = malloc((nsk ? nsk : 1) * sizeof *p);
    uint8_t *keep = malloc(nsk ? nsk : 1);
    if (!p || !keep) {
        free(p);
        free(keep);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++) {
                int64_t nvis = row_scores(d, q, k, b, h, i, p);
                size_t base = (size_t)(((b * d->H + h) * d->Sq + i) * d->Sk);
                if (scores)
                    for (int64_t j = 0; j < d->Sk; j++) scores[base + j] = (float)p[j];
                if (!weights) continue;
                row_softmax(p, d->Sk, nvis);
                if (d->dropout) attn_dropout_mask_range(d->dropout, base, nsk, keep);
                for (int64_t j = 0; j < d->Sk; j++) {
                    float w = (float)p[j];
                    if (d->dropout) w *= keep[j] ? d->dropout->scale : 0.0f;
                    weights[base + j] = w;
                }
            }
    free(p);
    free(keep);
    return ATTN_OK;
}
