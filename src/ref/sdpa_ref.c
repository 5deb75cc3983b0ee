/* Reference scaled-dot-product attention: one query row at a time with the
 * row's scores materialized, accumulated in double. Clear rather than fast;
 * the ground truth every other path is tested against. */
#include "internal.h"
#include "base/rows.h"
#include "base/sem.h"
#include "base/flex.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const float *row_of(attn_view t, int64_t b, int64_t h, int64_t s) {
    return t.data + b * t.stride_b + h * t.stride_h + s * t.stride_s;
}

/* Scores of query row (b,h,i) against every key: sc[j] is the modified score
 * (scale, softcap, ALiBi, bias; attn.h) or -INFINITY where key j is not visible;
 * dcap[j] (if not NULL) is d(score)/d(q.k_j). Returns the number of visible
 * keys. */
/* row s of (b, h) of view t as float32 rounded to rt (a math mode's operand
 * type, base/sem.h; F32: as stored), in buf (n floats) when it must be copied */
static const float *row_rounded(attn_view t, const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t s, int64_t n,
                                attn_dtype rt, float *buf) {
    const float *r = attn_row_f32(t, d->qkv_dtype, b, h, s, n, buf);
    if (rt == ATTN_DTYPE_F32) return r;
    if (r != buf) memcpy(buf, r, (size_t)n * sizeof(float));
    attn_st_round(rt, buf, n);
    return buf;
}

/* Programmable attention on row i's scores (base/flex.h): score_mod on the
 * row as a 1 x Sk tile of float32 (its derivative into dcap), then the
 * block mask and mask_mod hide keys. fx: flex_scratch's 2 Sk floats, then
 * Sk keep bytes and the Sk bytes row_scores marked visible. Returns the
 * visible keys left. */
static int64_t row_flex(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, double *sc, double *dcap,
                        int64_t nvis, float *fx) {
    int64_t n = d->Sk;
    float *f = fx, *ds = fx + n;
    uint8_t *keep = (uint8_t *)(fx + 2 * n), *vis = keep + n;
    if (d->score_mod) {
        for (int64_t j = 0; j < n; j++) f[j] = (float)sc[j], ds[j] = 0.0f;
        attn_flex_score(d, b, h, i, 1, 0, n, f, n, dcap ? ds : NULL);
        for (int64_t j = 0; j < n; j++) {
            if (!vis[j]) continue; /* hidden: stays so */
            sc[j] = (double)f[j];
            if (dcap) dcap[j] = sc[j] == -INFINITY ? 0.0 : dcap[j] * (double)ds[j];
        }
    }
    if (!attn_flex_masks(d)) return nvis;
    attn_flex_keep(d, b, h, i, 1, 0, n, keep, n);
    for (int64_t j = 0; j < n; j++)
        if (!keep[j] && vis[j]) {
            sc[j] = -INFINITY, nvis--;
            if (dcap) dcap[j] = 0.0;
        }
    return nvis;
}

/* row_flex's scratch (NULL without programmable rules; *fail on no memory) */
static float *flex_scratch(const attn_sdpa_desc *d, int *fail) {
    if (!attn_flex_on(d)) return NULL;
    float *fx = malloc((size_t)(d->Sk ? d->Sk : 1) * (2 * sizeof(float) + 2));
    *fail |= !fx;
    return fx;
}

static int64_t row_scores(const attn_sdpa_desc *d, attn_view q, attn_view k, int64_t b, int64_t h, int64_t i,
                          double *sc, double *dcap, float *tmp /* 2 D floats for 16-bit inputs */, float *fx) {
    attn_dtype vt = attn_view_dtype(d->qkv_dtype), kvt = attn_sem_kv_type(d, vt);
    const float *qi = row_rounded(q, d, b, h, i, d->D, attn_sem_q_type(d, vt), tmp);
    int64_t hk = attn_sem_kvh(d, h), skb = attn_sem_sk(d, b), off = attn_sem_off(d, b), lo, hi, nvis = 0;
    attn_sem_range(d, skb, off, i, &lo, &hi);
    uint8_t *vis = fx ? (uint8_t *)(fx + 2 * d->Sk) + d->Sk : NULL; /* row_flex's record of the built-in rule */
    for (int64_t j = 0; j < d->Sk; j++) {
        int shown = j >= lo && j < hi && !attn_sem_padded(d, b, j) && attn_sem_dense(d, b, h, i, j);
        if (vis) vis[j] = (uint8_t)shown;
        if (!shown) {
            sc[j] = -INFINITY;
            if (dcap) dcap[j] = 0.0;
            continue;
        }
        const float *kj = row_rounded(k, d, b, hk, j, d->D, kvt, tmp + d->D);
        double acc = 0.0;
        for (int64_t c = 0; c < d->D; c++) acc += (double)qi[c] * (double)kj[c];
        double s = (double)d->scale * acc, g = (double)d->scale;
        if (fabs(s) > FLT_MAX) s = s > 0 ? INFINITY : -INFINITY; /* where float32 scores overflow (SEMANTICS.md) */
        if (d->softcap > 0.0f) {
            double t = tanh(s / (double)d->softcap);
            s = (double)d->softcap * t;
            g *= 1.0 - t * t;
        }
        if (d->alibi_slopes) s += attn_sem_alibi(d->alibi_slopes[h], i, off, j);
        if (d->attn_bias) s += (double)attn_sem_bias(d, b, h, i, j);
        sc[j] = s;
        if (dcap) dcap[j] = g;
        nvis++;
    }
    return fx ? row_flex(d, b, h, i, sc, dcap, nvis, fx) : nvis;
}

/* softmax over the scores and a sink logit (a finite number): hidden keys
 * (-inf) get 0, the sink gets *ps; a NaN score makes the row NaN */
static double row_softmax_sink(double *sc, int64_t n, double sink, double *ps) {
    double m = sink;
    for (int64_t j = 0; j < n; j++) {
        if (isnan(sc[j])) {
            for (int64_t t = 0; t < n; t++) sc[t] = NAN;
            if (ps) *ps = NAN;
            return NAN;
        }
        if (sc[j] > m) m = sc[j];
    }
    double sum = exp(sink - m);
    for (int64_t j = 0; j < n; j++) {
        sc[j] = exp(sc[j] - m); /* exp(-inf) = 0; exp(inf - inf) = NaN */
        sum += sc[j];
    }
    for (int64_t j = 0; j < n; j++) sc[j] /= sum;
    if (ps) *ps = exp(sink - m) / sum;
    return m + log(sum);
}

/* In place: scores -> probabilities. Returns the log-sum-exp (-INF when no key
 * is visible or every visible score is -inf, and then every probability is 0:
 * PyTorch's _safe_softmax). A NaN score propagates to the whole row; a +inf
 * score makes it NaN (exp(inf - inf)), as torch.softmax does. With a sink
 * (its logit, or NULL) the softmax runs over the scores and the sink, which
 * takes probability *ps and carries no value (attn.h). */
static double row_softmax(double *sc, int64_t n, int64_t nvis, const float *sink, double *ps) {
    if (ps) *ps = 0.0;
    if (sink) return row_softmax_sink(sc, n, (double)*sink, ps);
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
    if (m == -INFINITY) { /* every visible score is -inf: no key to attend to */
        for (int64_t j = 0; j < n; j++) sc[j] = 0.0;
        return -INFINITY;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        sc[j] = exp(sc[j] - m);
        sum += sc[j];
    }
    for (int64_t j = 0; j < n; j++) sc[j] /= sum;
    return m + log(sum);
}

/* A math mode's P V operand (attn.h, base/sem.h): the row's probabilities p
 * (log-sum-exp *lse) as the unnormalized weights u_j = e^(s_j - m), m the
 * row's max (scores and sink), rounded to pt, then normalized by the sum of
 * the rounded weights and the sink's e^(sink - m); *lse follows. Rows with
 * no key (lse -inf) or NaN keep what they have. */
static void row_round_p(double *p, int64_t n, double *lse, double m, const float *sink, attn_dtype pt) {
    if (!isfinite(*lse) || !isfinite(m)) return;
    double z = exp(*lse - m), sum = sink ? exp((double)*sink - m) : 0.0;
    for (int64_t j = 0; j < n; j++) {
        if (p[j] == 0.0) continue;
        float u = (float)(p[j] * z);
        attn_st_round(pt, &u, 1);
        p[j] = (double)u;
        sum += p[j];
    }
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
    *lse = m + log(sum);
}

/* the row's max over its scores and sink (-inf when none; NaN scores skipped) */
static double row_max(const double *sc, int64_t n, const float *sink) {
    double m = sink ? (double)*sink : -INFINITY;
    for (int64_t j = 0; j < n; j++)
        if (sc[j] > m) m = sc[j];
    return m;
}

attn_status attn_sdpa_ref_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                  float *lse) {
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    size_t nsk = (size_t)d->Sk;
    double *p = malloc((nsk ? nsk : 1) * sizeof *p);
    double *acc = malloc((size_t)d->Dv * sizeof *acc);
    uint8_t *keep = malloc(nsk ? nsk : 1);
    float *tmp = malloc((size_t)(2 * d->D + d->Dv) * sizeof *tmp); /* rows of 16-bit inputs */
    attn_dtype vt = attn_view_dtype(d->qkv_dtype), pt = attn_sem_p_type(d, vt), kvt = attn_sem_kv_type(d, vt);
    int fail = 0;
    float *fx = flex_scratch(d, &fail);
    if (!p || !acc || !keep || !tmp || fail) {
        free(fx);
        free(p);
        free(acc);
        free(keep);
        free(tmp);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++) {
                int64_t nvis = row_scores(d, q, k, b, h, i, p, NULL, tmp, fx);
                const float *sink = d->sinks ? d->sinks + h : NULL;
                double m = pt != ATTN_DTYPE_F32 ? row_max(p, d->Sk, sink) : 0.0;
                double l = row_softmax(p, d->Sk, nvis, sink, NULL);
                if (pt != ATTN_DTYPE_F32) row_round_p(p, d->Sk, &l, m, sink, pt);
                if (lse) lse[(b * d->H + h) * d->Sq + i] = (float)l;
                if (d->dropout) {
                    uint64_t base = (uint64_t)(((b * d->H + h) * d->Sq + i) * d->Sk);
                    attn_dropout_mask_range(d->dropout, base, nsk, keep);
                    for (int64_t j = 0; j < d->Sk; j++) p[j] *= keep[j] ? (double)d->dropout->scale : 0.0;
                }
                for (int64_t c = 0; c < d->Dv; c++) acc[c] = 0.0;
                for (int64_t j = 0; j < d->Sk; j++) {
                    if (p[j] == 0.0) continue; /* masked or dropped key: contributes nothing */
                    const float *vj = row_rounded(v, d, b, attn_sem_kvh(d, h), j, d->Dv, kvt, tmp + 2 * d->D);
                    for (int64_t c = 0; c < d->Dv; c++) acc[c] += p[j] * (double)vj[c];
                }
                float *o = out.data + b * out.stride_b + h * out.stride_h + i * out.stride_s;
                for (int64_t c = 0; c < d->Dv; c++) o[c] = (float)acc[c];
            }
    free(fx);
    free(p);
    free(acc);
    free(keep);
    free(tmp);
    return ATTN_OK;
}

/* Backward, one (b, kv head) at a time over the query heads of its group:
 *   P = softmax(T), T = modified scores, Pd = P * keep * scale_drop, O = Pd V
 *   dV += Pd^T dO;  dPd = dO V^T;  dP = dPd * keep * scale_drop
 *   dT = P * (dP - rowsum(P * dP));  dS = dT * dT/d(q.k)  (scale, softcap)
 *   dQ = dS K;  dK += dS^T Q      (dK, dV summed over the group) */
/* dbias (the bias's strides) = the full gradient summed over the broadcast dims */
static attn_status ref_dbias(const attn_sdpa_desc *d, const double *full, size_t ld) {
    const int64_t *st = d->attn_bias_strides;
    int64_t n[4] = {st[0] ? d->B : 1, st[1] ? d->H : 1, st[2] ? d->Sq : 1, st[3] ? d->Sk : 1};
    double *acc = calloc((size_t)(n[0] * n[1] * n[2] * n[3]) + 1, sizeof *acc);
    if (!acc) return ATTN_E_NOMEM;
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++)
                for (int64_t j = 0; j < d->Sk; j++)
                    acc[(((st[0] ? b : 0) * n[1] + (st[1] ? h : 0)) * n[2] + (st[2] ? i : 0)) * n[3] +
                        (st[3] ? j : 0)] += full[(((size_t)b * d->H + h) * d->Sq + i) * ld + j];
    for (int64_t a = 0; a < n[0] * n[1] * n[2] * n[3]; a++) {
        int64_t jb = a % n[3], ib = a / n[3] % n[2], hb = a / (n[3] * n[2]) % n[1], bb = a / (n[3] * n[2] * n[1]);
        d->dbias[bb * st[0] + hb * st[1] + ib * st[2] + jb * st[3]] = (float)acc[a];
    }
    free(acc);
    return ATTN_OK;
}

attn_status attn_sdpa_ref_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                   attn_view dq, attn_view dk, attn_view dv) {
    size_t nsk = (size_t)(d->Sk ? d->Sk : 1), D = (size_t)d->D, Dv = (size_t)d->Dv;
    size_t nkd, nvd;
    if (attn_mul_size(nsk, D, &nkd) || attn_mul_size(nsk, Dv, &nvd)) return ATTN_E_OVERFLOW;
    int64_t Hkv = attn_sem_hkv(d), G = attn_sem_group(d);
    double *p = malloc(nsk * sizeof *p), *dp = malloc(nsk * sizeof *dp), *g = malloc(nsk * sizeof *g);
    double *gk = malloc(nkd * sizeof *gk), *gv = malloc(nvd * sizeof *gv), *gq = malloc(D * sizeof *gq);
    uint8_t *keep = malloc(nsk);
    float *tmp = malloc((2 * D + 2 * Dv) * sizeof *tmp); /* rows of 16-bit inputs; the rounded dO */
    attn_dtype vt = attn_view_dtype(d->qkv_dtype), qt = attn_sem_q_type(d, vt), kvt = attn_sem_kv_type(d, vt);
    attn_dtype gt = attn_sem_grad_type(d, vt); /* a math mode's dO, P and dS operands (base/sem.h) */
    double *dsk = d->sinks && d->dsinks ? calloc((size_t)(d->H ? d->H : 1), sizeof *dsk) : NULL;
    size_t nfull = (size_t)(d->B * d->H * d->Sq) * nsk; /* d loss / d bias per (b, h, i, j), then reduced */
    double *dbf = d->attn_bias && d->dbias ? calloc(nfull + 1, sizeof *dbf) : NULL;
    attn_status st = ATTN_OK;
    int fail = 0;
    float *fx = flex_scratch(d, &fail);
    if (!p || !dp || !g || !gk || !gv || !gq || !keep || !tmp || (d->sinks && d->dsinks && !dsk) ||
        (d->attn_bias && d->dbias && !dbf) || fail)
        st = ATTN_E_NOMEM;
    for (int64_t b = 0; st == ATTN_OK && b < d->B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++) {
            for (size_t t = 0; t < nkd; t++) gk[t] = 0.0;
            for (size_t t = 0; t < nvd; t++) gv[t] = 0.0;
            for (int64_t h = hk * G; h < (hk + 1) * G; h++)
                for (int64_t i = 0; i < d->Sq; i++) {
                    int64_t nvis = row_scores(d, q, k, b, h, i, p, g, tmp, fx);
                    double ps;
                    row_softmax(p, d->Sk, nvis, d->sinks ? d->sinks + h : NULL, &ps);
                    if (d->dropout) {
                        uint64_t base = (uint64_t)(((b * d->H + h) * d->Sq + i) * d->Sk);
                        attn_dropout_mask_range(d->dropout, base, (size_t)d->Sk, keep);
                    }
                    const float *go = row_of(dout, b, h, i);
                    if (gt != ATTN_DTYPE_F32) { /* dO rounded for dP = dO V^T and dV += P^T dO */
                        memcpy(tmp + 2 * D + Dv, go, Dv * sizeof *tmp);
                        attn_st_round(gt, tmp + 2 * D + Dv, (int64_t)Dv);
                        go = tmp + 2 * D + Dv;
                    }
                    double dsum = 0.0;
                    for (int64_t j = 0; j < d->Sk; j++) {
                        double kd = d->dropout ? (keep[j] ? (double)d->dropout->scale : 0.0) : 1.0;
                        if (p[j] == 0.0 || kd == 0.0) { /* masked or dropped: no gradient flows */
                            dp[j] = 0.0;
                            continue;
                        }
                        const float *vj = row_rounded(v, d, b, hk, j, d->Dv, kvt, tmp + 2 * D);
                        double acc = 0.0, pj = p[j] * kd;
                        if (gt != ATTN_DTYPE_F32) { /* P rounded for dV += P^T dO */
                            float pr = (float)pj;
                            attn_st_round(gt, &pr, 1);
                            pj = pr;
                        }
                        for (int64_t c = 0; c < d->Dv; c++) {
                            acc += (double)go[c] * vj[c];
                            gv[(size_t)j * Dv + (size_t)c] += pj * go[c];
                        }
                        dp[j] = acc * kd;
                        dsum += p[j] * dp[j];
                    }
                    if (dsk) dsk[h] += ps == 0.0 ? 0.0 : -ps * dsum; /* d out / d sink = -ps out */
                    const float *qi = row_rounded(q, d, b, h, i, d->D, qt, tmp);
                    for (size_t c = 0; c < D; c++) gq[c] = 0.0;
                    for (int64_t j = 0; j < d->Sk; j++) {
                        if (p[j] == 0.0) continue;
                        double ds = p[j] * (dp[j] - dsum) * g[j];
                        if (dbf) dbf[(((size_t)b * d->H + h) * d->Sq + i) * nsk + j] = p[j] * (dp[j] - dsum);
                        if (gt != ATTN_DTYPE_F32) { /* dS rounded for dQ += dS K and dK += dS^T Q */
                            float dr = (float)ds;
                            attn_st_round(gt, &dr, 1);
                            ds = dr;
                        }
                        const float *kj = row_rounded(k, d, b, hk, j, d->D, kvt, tmp + D);
                        for (size_t c = 0; c < D; c++) {
                            gq[c] += ds * kj[c];
                            gk[(size_t)j * D + c] += ds * qi[c];
                        }
                    }
                    float *o = dq.data + b * dq.stride_b + h * dq.stride_h + i * dq.stride_s;
                    for (size_t c = 0; c < D; c++) o[c] = (float)gq[c];
                }
            for (int64_t j = 0; j < d->Sk; j++) {
                float *ok = dk.data + b * dk.stride_b + hk * dk.stride_h + j * dk.stride_s;
                float *ov = dv.data + b * dv.stride_b + hk * dv.stride_h + j * dv.stride_s;
                for (size_t c = 0; c < D; c++) ok[c] = (float)gk[(size_t)j * D + c];
                for (size_t c = 0; c < Dv; c++) ov[c] = (float)gv[(size_t)j * Dv + c];
            }
        }
    free(p);
    free(dp);
    free(g);
    free(gk);
    free(gv);
    free(gq);
    free(keep);
    free(tmp);
    free(fx);
    for (int64_t h = 0; !st && dsk && h < d->H; h++) d->dsinks[h] = (float)dsk[h];
    if (!st && dbf) st = ref_dbias(d, dbf, nsk);
    free(dsk), free(dbf);
    return st;
}

attn_status attn_sdpa_ref_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores, float *weights) {
    attn_view none = {0};
    attn_status st = attn_sdpa_check(d, q, k, none, none, 0);
    if (st != ATTN_OK) return st;
    size_t nsk = (size_t)d->Sk;
    double *p = malloc((nsk ? nsk : 1) * sizeof *p);
    uint8_t *keep = malloc(nsk ? nsk : 1);
    float *tmp = malloc((size_t)(2 * d->D) * sizeof *tmp);
    int fail = 0;
    float *fx = flex_scratch(d, &fail);
    if (!p || !keep || !tmp || fail) {
        free(fx);
        free(p);
        free(keep);
        free(tmp);
        return ATTN_E_NOMEM;
    }
    for (int64_t b = 0; b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++) {
                int64_t nvis = row_scores(d, q, k, b, h, i, p, NULL, tmp, fx);
                size_t base = (size_t)(((b * d->H + h) * d->Sq + i) * d->Sk);
                if (scores)
                    for (int64_t j = 0; j < d->Sk; j++) scores[base + j] = (float)p[j];
                if (!weights) continue;
                row_softmax(p, d->Sk, nvis, d->sinks ? d->sinks + h : NULL, NULL);
                if (d->dropout) attn_dropout_mask_range(d->dropout, base, nsk, keep);
                for (int64_t j = 0; j < d->Sk; j++) {
                    float w = (float)p[j];
                    if (d->dropout) w *= keep[j] ? d->dropout->scale : 0.0f;
                    weights[base + j] = w;
                }
            }
    free(fx);
    free(p);
    free(keep);
    free(tmp);
    return ATTN_OK;
}
