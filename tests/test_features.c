/* The inference semantics of attn_sdpa_desc (GQA/MQA, per-sequence key
 * lengths, sliding window, softcap, ALiBi) alone and combined with causal
 * alignment, padding masks, Sq != Sk and Dv != D: forward (out, lse) and
 * backward (dq, dk, dv) of both paths against a float64 oracle written from
 * the definition in attn.h with fully materialized masks (it shares no code
 * with the library). Also: fully-masked rows give zeros and lse -inf, 1 and 2
 * threads give bitwise identical results, and bad descriptors are refused. */
#include "testutil.h"
#include "base/half.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 777u;
static float frand(void) { return tu_frand(&lcg); }
static int irand(int lo, int hi) { return tu_irand(&lcg, lo, hi); }

typedef struct fcase {
    int B, H, Hkv, Sq, Sk, D, Dv, causal, window, wl, wr, seqlens, mask, alibi, chunk, sinks;
    int dmask, dbias; /* dense mask / bias: 0 off, else 1 + a bit per broadcast dim (bit t set: dim t has size 1) */
    float scale, softcap;
    attn_dtype dt; /* element type of q, k, v: 0/F32, F16 or BF16 */
} fcase;

/* round x to the 16-bit type in place and store the 16-bit patterns in u */
static void to16(float *x, uint16_t *u, size_t n, attn_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        u[i] = dt == ATTN_DTYPE_F16 ? attn_f32_to_f16(x[i]) : attn_f32_to_bf16(x[i]);
        x[i] = dt == ATTN_DTYPE_F16 ? attn_f16_to_f32(u[i]) : attn_bf16_to_f32(u[i]);
    }
}

/* q (B,H,Sq,D), k (B,Hkv,Sk,D), v (B,Hkv,Sk,Dv), go (B,H,Sq,Dv) contiguous */
/* the element strides of a dense (B, H, Sq, Sk) tensor broadcast as `bits` says */
static void dense_strides(const fcase *c, int bits, int64_t *st) {
    int64_t dims[4] = {c->B, c->H, c->Sq, c->Sk}, n = 1;
    for (int t = 3; t >= 0; t--) {
        st[t] = (bits >> t) & 1 ? 0 : n;
        n *= (bits >> t) & 1 ? 1 : dims[t];
    }
}
static int64_t dense_at(const int64_t *st, int b, int h, int i, int j) {
    return b * st[0] + h * st[1] + i * st[2] + j * st[3];
}

static void oracle(const fcase *c, const int64_t *sl, const uint8_t *mask, const float *slopes, const float *q,
                   const float *k, const float *v, const float *go, double *out, double *lse, double *dq, double *dk,
                   double *dv, const float *sinks, double *dsinks, const uint8_t *dm, const float *db, double *ddb) {
    int64_t dms[4], dbs[4];
    dense_strides(c, c->dmask - 1, dms), dense_strides(c, c->dbias - 1, dbs);
    int G = c->H / c->Hkv;
    double *t = malloc((size_t)c->Sk * 8), *g = malloc((size_t)c->Sk * 8), *p = malloc((size_t)c->Sk * 8);
    double *dp = malloc((size_t)c->Sk * 8);
    memset(dk, 0, (size_t)c->B * c->Hkv * c->Sk * c->D * 8);
    memset(dv, 0, (size_t)c->B * c->Hkv * c->Sk * c->Dv * 8);
    memset(dsinks, 0, (size_t)c->H * 8);
    memset(ddb, 0, (size_t)c->B * c->H * c->Sq * c->Sk * 8);
    for (int b = 0; b < c->B; b++) {
        int skb = c->seqlens ? (int)sl[b] : c->Sk;
        int off = c->causal == 1 ? 0 : skb - c->Sq;
        for (int h = 0; h < c->H; h++) {
            int hk = h / G;
            for (int i = 0; i < c->Sq; i++) {
                const float *qi = q + (((size_t)b * c->H + h) * c->Sq + i) * c->D;
                double mx = -INFINITY;
                for (int j = 0; j < c->Sk; j++) {
                    int vis = j < skb && !(mask && mask[b * c->Sk + j]);
                    if (c->causal && j > i + off) vis = 0;
                    if (c->window && c->wl >= 0 && j < i + off - c->wl) vis = 0;
                    if (c->window && c->wr >= 0 && j > i + off + c->wr) vis = 0;
                    /* chunks: floor((i + off) / C) == floor(j / C) */
                    if (c->chunk && floor((double)(i + off) / c->chunk) != floor((double)j / c->chunk)) vis = 0;
                    if (c->dmask && !dm[dense_at(dms, b, h, i, j)]) vis = 0; /* dense mask: true takes part */
                    const float *kj = k + (((size_t)b * c->Hkv + hk) * c->Sk + j) * c->D;
                    double s = 0;
                    for (int e = 0; e < c->D; e++) s += (double)qi[e] * kj[e];
                    s *= c->scale;
                    g[j] = c->scale;
                    if (c->softcap > 0) {
                        double th = tanh(s / c->softcap);
                        s = c->softcap * th;
                        g[j] *= 1 - th * th;
                    }
                    if (c->alibi) s -= slopes[h] * fabs((double)(i + off - j));
                    if (c->dbias) s += db[dense_at(dbs, b, h, i, j)];
                    t[j] = vis ? s : -INFINITY;
                    if (t[j] > mx) mx = t[j];
                }
                /* a sink: one more logit in the softmax, without a value */
                double sk = c->sinks ? (double)sinks[h] : -INFINITY;
                if (sk > mx) mx = sk;
                double sum = mx == -INFINITY ? 0 : exp(sk - mx);
                for (int j = 0; j < c->Sk; j++) sum += p[j] = mx == -INFINITY ? 0 : exp(t[j] - mx);
                size_t row = ((size_t)b * c->H + h) * c->Sq + i;
                lse[row] = mx == -INFINITY ? -INFINITY : mx + log(sum);
                double psink = c->sinks ? exp(sk - mx) / sum : 0;
                for (int j = 0; j < c->Sk; j++) p[j] = sum > 0 ? p[j] / sum : 0;
                const float *gi = go + row * c->Dv;
                double di = 0;
                for (int j = 0; j < c->Sk; j++) {
                    const float *vj = v + (((size_t)b * c->Hkv + hk) * c->Sk + j) * c->Dv;
                    double a = 0;
                    for (int e = 0; e < c->Dv; e++) a += (double)gi[e] * vj[e];
                    dp[j] = a;
                    di += p[j] * a;
                }
                for (int e = 0; e < c->Dv; e++) {
                    double o = 0;
                    for (int j = 0; j < c->Sk; j++) o += p[j] * v[(((size_t)b * c->Hkv + hk) * c->Sk + j) * c->Dv + e];
                    out[row * c->Dv + e] = o;
                }
                dsinks[h] -= psink * di; /* d out / d sink = -psink out */
                for (int e = 0; e < c->D; e++) dq[row * c->D + e] = 0;
                for (int j = 0; j < c->Sk; j++) {
                    double ds = p[j] * (dp[j] - di) * g[j];
                    if (c->dbias) ddb[dense_at(dbs, b, h, i, j)] += p[j] * (dp[j] - di); /* summed over broadcasts */
                    size_t kr = ((size_t)b * c->Hkv + hk) * c->Sk + j;
                    for (int e = 0; e < c->D; e++) {
                        dq[row * c->D + e] += ds * k[kr * c->D + e];
                        dk[kr * c->D + e] += ds * qi[e];
                    }
                    for (int e = 0; e < c->Dv; e++) dv[kr * c->Dv + e] += p[j] * gi[e];
                }
            }
        }
    }
    free(t), free(g), free(p), free(dp);
}

static int close_d(const char *what, const fcase *c, int idx, attn_impl impl, const float *a, const double *r, size_t n,
                   double tol) {
    double mag = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(r[i])) mag = fmax(mag, fabs(r[i]));
    for (size_t i = 0; i < n; i++) {
        if (isinf(r[i]) && a[i] == r[i]) continue;
        double e = fabs((double)a[i] - r[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e, at = i;
    }
    int ok = worst <= tol * (1.0 + mag);
    CHECK(ok,
          "case %d %s %s: err %.3g at [%zu] (got %.7g want %.7g, |max| %.3g) B%d H%d Hkv%d Sq%d Sk%d D%d Dv%d "
          "causal%d win%d(%d,%d) seqlens%d mask%d alibi%d cap%g dtype%d chunk%d sinks%d dmask%d dbias%d",
          idx, impl == ATTN_IMPL_REF ? "ref" : "fast", what, worst, at, (double)a[at], r[at], mag, c->B, c->H, c->Hkv,
          c->Sq, c->Sk, c->D, c->Dv, c->causal, c->window, c->wl, c->wr, c->seqlens, c->mask, c->alibi,
          (double)c->softcap, (int)c->dt, c->chunk, c->sinks, c->dmask, c->dbias);
    return ok;
}

static attn_view bhsd(float *p, int H, int S, int D) {
    attn_view v = {p, (int64_t)H * S * D, (int64_t)S * D, D};
    return v;
}

static void run_case(const fcase *c, int idx) {
    size_t nq = (size_t)c->B * c->H * c->Sq * c->D, nk = (size_t)c->B * c->Hkv * c->Sk * c->D;
    size_t nv = (size_t)c->B * c->Hkv * c->Sk * c->Dv, no = (size_t)c->B * c->H * c->Sq * c->Dv;
    size_t nl = (size_t)c->B * c->H * c->Sq;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *go = malloc(no * 4), *sl_f = NULL;
    float slopes[16], sinks[16], dsinks[16];
    double rds[16];
    int64_t sl[8];
    uint8_t *mask = malloc((size_t)c->B * c->Sk);
    for (size_t i = 0; i < nq; i++) q[i] = frand() * 2;
    for (size_t i = 0; i < nk; i++) k[i] = frand() * 2;
    for (size_t i = 0; i < nv; i++) v[i] = frand();
    for (size_t i = 0; i < no; i++) go[i] = frand();
    for (int h = 0; h < c->H; h++) slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)c->H);
    for (int h = 0; h < c->H; h++) sinks[h] = 3.0f * frand(); /* from e^-3 to e^3 of a score's weight */
    for (int b = 0; b < c->B; b++) sl[b] = b == 0 ? c->Sk : irand(0, c->Sk);
    /* 16-bit inputs: the oracle sees the rounded values, the library the 16-bit patterns */
    int h16 = c->dt == ATTN_DTYPE_F16 || c->dt == ATTN_DTYPE_BF16;
    uint16_t *q16 = h16 ? malloc(nq * 2) : NULL, *k16 = h16 ? malloc(nk * 2) : NULL, *v16 = h16 ? malloc(nv * 2) : NULL;
    if (h16) to16(q, q16, nq, c->dt), to16(k, k16, nk, c->dt), to16(v, v16, nv, c->dt);
    for (int i = 0; i < c->B * c->Sk; i++) mask[i] = c->mask && irand(0, 4) == 0;
    (void)sl_f;
    double *ro = malloc(no * 8), *rl = malloc(nl * 8), *rdq = malloc(nq * 8), *rdk = malloc(nk * 8),
           *rdv = malloc(nv * 8);
    /* dense mask and bias, full size (a broadcast one reads a prefix through zero strides) */
    size_t nd = (size_t)c->B * c->H * c->Sq * c->Sk;
    uint8_t *dm = malloc(nd);
    float *db = malloc(nd * 4);
    for (size_t i = 0; i < nd; i++) dm[i] = irand(0, 5) != 0, db[i] = irand(0, 9) == 0 ? -INFINITY : 2 * frand();
    double *rdb = malloc(nd * 8);
    float *gdb = malloc(nd * 4);
    oracle(c, sl, c->mask ? mask : NULL, slopes, q, k, v, go, ro, rl, rdq, rdk, rdv, sinks, rds, dm, db, rdb);
    int64_t dbst[4];
    dense_strides(c, c->dbias - 1, dbst);
    size_t ndb = (size_t)(dense_at(dbst, c->B - 1, c->H - 1, c->Sq - 1, c->Sk - 1) + 1); /* the bias's own size */
    for (int impl = ATTN_IMPL_REF; impl <= ATTN_IMPL_FAST; impl++) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, c->B, c->H, c->Sq, c->Sk, c->D, c->Dv);
        d.Hkv = c->Hkv;
        d.scale = c->scale;
        d.causal = (attn_causal)c->causal;
        d.impl = (attn_impl)impl;
        if (c->seqlens) d.seqlens_k = sl;
        if (c->mask) d.key_mask = mask, d.key_mask_stride_b = c->Sk, d.key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
        d.window = c->window, d.window_left = c->wl, d.window_right = c->wr;
        d.softcap = c->softcap;
        if (c->alibi) d.alibi_slopes = slopes;
        d.attention_chunk = c->chunk;
        if (c->sinks) d.sinks = sinks, d.dsinks = dsinks;
        if (c->dmask) d.attn_mask = dm, dense_strides(c, c->dmask - 1, d.attn_mask_strides);
        if (c->dbias) d.attn_bias = db, d.dbias = gdb, dense_strides(c, c->dbias - 1, d.attn_bias_strides);
        for (size_t i = 0; c->dbias && i < ndb; i++) gdb[i] = NAN; /* every element must be written */
        float *o = malloc(no * 4), *l = malloc(nl * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4),
              *dv = malloc(nv * 4);
        attn_view vq = bhsd(q, c->H, c->Sq, c->D), vk = bhsd(k, c->Hkv, c->Sk, c->D),
                  vv = bhsd(v, c->Hkv, c->Sk, c->Dv);
        attn_view vo = bhsd(o, c->H, c->Sq, c->Dv), vg = bhsd(go, c->H, c->Sq, c->Dv);
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, l));
        CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo, vg, l, bhsd(dq, c->H, c->Sq, c->D),
                                    bhsd(dk, c->Hkv, c->Sk, c->D), bhsd(dv, c->Hkv, c->Sk, c->Dv)));
        double tol = impl == ATTN_IMPL_REF ? 2e-6 : 2e-5;
        close_d("out", c, idx, (attn_impl)impl, o, ro, no, tol);
        close_d("lse", c, idx, (attn_impl)impl, l, rl, nl, tol);
        close_d("dq", c, idx, (attn_impl)impl, dq, rdq, nq, 4 * tol);
        close_d("dk", c, idx, (attn_impl)impl, dk, rdk, nk, 4 * tol);
        close_d("dv", c, idx, (attn_impl)impl, dv, rdv, nv, 4 * tol);
        if (c->sinks) close_d("dsinks", c, idx, (attn_impl)impl, dsinks, rds, (size_t)c->H, 4 * tol * c->B * c->Sq);
        if (c->dbias) close_d("dbias", c, idx, (attn_impl)impl, gdb, rdb, ndb, 4 * tol * (double)nd / (double)ndb);
        if (impl == ATTN_IMPL_FAST && idx % 7 == 0) { /* 1 vs 2 threads: bitwise */
            float *o1 = malloc(no * 4), *dq1 = malloc(nq * 4), *dk1 = malloc(nk * 4), *dv1 = malloc(nv * 4);
            omp_set_num_threads(1);
            CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, bhsd(o1, c->H, c->Sq, c->Dv), NULL));
            CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo, vg, NULL, bhsd(dq1, c->H, c->Sq, c->D),
                                        bhsd(dk1, c->Hkv, c->Sk, c->D), bhsd(dv1, c->Hkv, c->Sk, c->Dv)));
            omp_set_num_threads(2);
            tu_equal("out 1 vs 2 threads", o1, o, no);
            tu_equal("dq 1 vs 2 threads", dq1, dq, nq);
            tu_equal("dk 1 vs 2 threads", dk1, dk, nk);
            tu_equal("dv 1 vs 2 threads", dv1, dv, nv);
            free(o1), free(dq1), free(dk1), free(dv1);
        }
        free(o), free(l), free(dq), free(dk), free(dv);
    }
    free(q), free(k), free(v), free(go), free(mask), free(ro), free(rl), free(rdq), free(rdk), free(rdv);
    free(q16), free(k16), free(v16), free(dm), free(db), free(rdb), free(gdb);
}

static fcase random_case(void) {
    fcase c;
    memset(&c, 0, sizeof c);
    c.B = irand(1, 3);
    c.Hkv = irand(1, 3);
    c.H = c.Hkv * irand(1, 4);
    c.Sq = irand(1, 70);
    c.Sk = irand(1, 200);
    c.D = irand(1, 40);
    c.Dv = irand(0, 1) ? c.D : irand(1, 40);
    c.causal = irand(0, 2);
    c.window = irand(0, 1);
    c.wl = irand(-1, 30);
    c.wr = irand(-1, 12);
    c.seqlens = irand(0, 1);
    c.mask = irand(0, 3) == 0;
    c.alibi = irand(0, 2) == 0;
    c.softcap = irand(0, 2) == 0 ? 5.0f + 10.0f * (frand() + 1) : 0.0f;
    c.scale = attn_default_scale(c.D) * (irand(0, 5) == 0 ? -1.5f : 1.0f);
    c.chunk = irand(0, 3) == 0 ? irand(1, 40) : 0;
    c.sinks = irand(0, 3) == 0;
    c.dmask = irand(0, 3) == 0 ? 1 + irand(0, 15) : 0;
    c.dbias = irand(0, 3) == 0 ? 1 + irand(0, 15) : 0;
    int t = irand(0, 3); /* half the cases in 16-bit inputs */
    c.dt = t == 0 ? ATTN_DTYPE_F16 : t == 1 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    return c;
}

static void bad_descriptors(void) {
    float buf[64] = {0};
    attn_view v = {buf, 16, 16, 4};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 4, 2, 2, 4, 4);
    d.Hkv = 3; /* 4 % 3 != 0 */
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "H not a multiple of Hkv");
    d.Hkv = 8;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "Hkv > H");
    d.Hkv = -1;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "negative Hkv");
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4, 4);
    int64_t sl = 3;
    d.seqlens_k = &sl;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "seqlens beyond Sk");
    sl = -1;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "negative seqlens");
    int32_t sl32 = 2;
    d.seqlens_k = &sl32;
    d.seqlens_k_dtype = ATTN_DTYPE_I32;
    CHECK_OK(attn_sdpa_forward(&d, v, v, v, v, NULL));
    d.seqlens_k_dtype = ATTN_DTYPE_F32;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_DTYPE, "seqlens of a float dtype");
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4, 4);
    d.window = 1, d.window_left = -2;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "window -2");
    d.window_left = -1, d.window_right = -5;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "window right -5");
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4, 4);
    d.softcap = -1.0f;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "negative softcap");
    d.softcap = NAN;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "NaN softcap");
    d.softcap = INFINITY;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "infinite softcap");
    attn_sdpa_desc_init(&d, 1, 1, 2, 2, 4, 4);
    float slope = NAN;
    d.alibi_slopes = &slope;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "NaN ALiBi slope");
}

/* the newer rules' bad values (issue 23): each call returns its status and
 * writes nothing (out, lse, the gradients keep a sentinel), on both paths,
 * forward and backward, and through the KV cache */
static int untouched(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 7.0f) return 0;
    return 1;
}

static void bad_new_rules(void) {
    enum { H = 2, S = 4, D = 4, N = H * S * D };
    float q[N], o[N], l[H * S], g[3][N], sk[H];
    for (int i = 0; i < N; i++) q[i] = frand();
    attn_view vq = {q, N, S * D, D}, vo = {o, N, S * D, D}, vg[3];
    for (int t = 0; t < 3; t++) vg[t] = (attn_view){g[t], N, S * D, D};
    int32_t cu_ok[3] = {0, 1, 4}, cu_bad[3][3] = {{1, 2, 4}, {0, 3, 2}, {0, 1, 3}}; /* start, decrease, end */
    attn_view pq = {q, 0, D, H * D}, po = {o, 0, D, H * D}, pg[3];                  /* packed (T, H, D) */
    for (int t = 0; t < 3; t++) pg[t] = (attn_view){g[t], 0, D, H * D};
    for (int c = 0; c < 9; c++)
        for (int impl = 0; impl < 2; impl++) {
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
            d.impl = impl ? ATTN_IMPL_FAST : ATTN_IMPL_REF;
            attn_status want = ATTN_E_INVALID;
            const char *what = "";
            int packed = 0;
            sk[0] = 0.5f, sk[1] = c == 0 ? NAN : c == 1 ? INFINITY : -1.0f;
            if (c < 2) d.sinks = sk, what = c ? "an infinite sink" : "a NaN sink";
            if (c == 2) d.attention_chunk = -1, what = "chunk -1";
            if (c >= 3 && c < 6) { /* cu_seqlens_q bad in three ways */
                d.cu_seqlens_q = cu_bad[c - 3], d.cu_seqlens_k = cu_ok, d.nseq = 2, packed = 1, want = ATTN_E_SHAPE;
                what = c == 3 ? "cu_seqlens_q not from 0" : c == 4 ? "cu_seqlens_q decreasing" : "cu_seqlens_q short";
            }
            if (c == 6) d.cu_seqlens_q = cu_ok, d.nseq = 2, packed = 1, what = "cu_seqlens_k missing";
            if (c == 7)
                d.sinks = sk, d.k_start = 1, d.Sk_total = S + 1, want = ATTN_E_UNSUPPORTED, what = "block + sinks";
            if (c == 8) {
                static const uint8_t m[S] = {1, 1, 1, 1};
                d.attn_mask = m, d.attn_mask_strides[3] = -1, what = "a negative mask stride";
            }
            for (size_t i = 0; i < N; i++) o[i] = g[0][i] = g[1][i] = g[2][i] = 7.0f;
            for (int i = 0; i < H * S; i++) l[i] = 7.0f;
            attn_view a = packed ? pq : vq, ao = packed ? po : vo;
            attn_status f = attn_sdpa_forward(&d, a, a, a, ao, l);
            attn_status b = attn_sdpa_backward(&d, a, a, a, ao, ao, l, packed ? pg[0] : vg[0], packed ? pg[1] : vg[1],
                                               packed ? pg[2] : vg[2]);
            CHECK(f == want && b == want, "%s (%s): forward %s, backward %s, want %s", what, impl ? "fast" : "ref",
                  attn_status_string(f), attn_status_string(b), attn_status_string(want));
            CHECK(untouched(o, N) && untouched(l, H * S) && untouched(g[0], N) && untouched(g[1], N) &&
                      untouched(g[2], N),
                  "%s (%s): nothing written", what, impl ? "fast" : "ref");
        }
    /* through the KV cache: a NaN sink or a negative chunk, the cache and the output unchanged */
    attn_kv_cache_config cc = {
        .batch = 1, .kv_heads = H, .capacity = 16, .head_dim = D, .v_head_dim = D, .dtype = ATTN_DTYPE_F32};
    attn_kv_cache *kc = NULL;
    CHECK_OK(attn_kv_cache_create(&cc, &kc));
    int64_t n1[1] = {S};
    CHECK_OK(attn_kv_cache_append(kc, n1, vq, vq));
    for (int c = 0; c < 2; c++) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, H, 1, 0, D, D);
        sk[1] = NAN;
        if (c == 0)
            d.sinks = sk;
        else
            d.attention_chunk = -3;
        for (size_t i = 0; i < N; i++) o[i] = 7.0f;
        attn_view q1 = {q, H * D, D, D}, o1 = {o, H * D, D, D};
        CHECK(attn_kv_cache_attend(kc, &d, q1, o1, NULL) == ATTN_E_INVALID && untouched(o, N) &&
                  attn_kv_cache_len(kc, 0) == S,
              "KV cache attend with %s: a status, nothing changed", c ? "chunk -3" : "a NaN sink");
    }
    attn_kv_cache_free(kc);
}

/* a window that leaves some rows with no key: zeros, lse -inf, zero gradients */
static void empty_rows(void) {
    fcase c = {.B = 1,
               .H = 2,
               .Hkv = 1,
               .Sq = 9,
               .Sk = 5,
               .D = 8,
               .Dv = 8,
               .causal = 1,
               .window = 1,
               .wl = 0,
               .wr = 0,
               .scale = 0.3f};
    /* top-left causal with a one-key window: rows 5..8 see key i, which does not exist */
    run_case(&c, 1000);
    c.seqlens = 1; /* sequence lengths 5 and random; B = 1 keeps 5 */
    c.causal = 2;  /* bottom-right: off = -4, rows 0..3 see nothing */
    run_case(&c, 1001);
}

/* Packed variable-length batches: one call over (T, H, D) buffers holding
 * several sequences (a few query rows in all from case 9 on: decode) gives, sequence by sequence, what a separate
 * reference call on that sequence alone gives (forward and backward). */
static void varlen_case(int idx, int causal, int window, int chunk, float softcap, int Hq, int Hkv, int same_len) {
    enum { NS = 5 };
    int32_t cq[NS + 1] = {0}, ck[NS + 1] = {0};
    for (int s = 0; s < NS; s++) {
        int lq = s == 2 ? 0 : irand(1, idx >= 9 ? 3 : 60), lk = same_len ? lq : (s == 3 ? 0 : irand(1, 90));
        cq[s + 1] = cq[s] + lq, ck[s + 1] = ck[s] + lk;
    }
    int64_t Tq = cq[NS], Tk = ck[NS], D = 24, Dv = 16;
    float *q = tu_rand_array((size_t)(Tq * Hq * D) + 1, &lcg, 1.0f),
          *k = tu_rand_array((size_t)(Tk * Hkv * D) + 1, &lcg, 1.0f);
    float *v = tu_rand_array((size_t)(Tk * Hkv * Dv) + 1, &lcg, 1.0f),
          *go = tu_rand_array((size_t)(Tq * Hq * Dv) + 1, &lcg, 1.0f);
    float *o = calloc((size_t)(Tq * Hq * Dv) + 1, 4), *ro = calloc((size_t)(Tq * Hq * Dv) + 1, 4);
    float *dq = calloc((size_t)(Tq * Hq * D) + 1, 4), *rdq = calloc((size_t)(Tq * Hq * D) + 1, 4);
    float *dk = calloc((size_t)(Tk * Hkv * D) + 1, 4), *rdk = calloc((size_t)(Tk * Hkv * D) + 1, 4);
    float *dv = calloc((size_t)(Tk * Hkv * Dv) + 1, 4), *rdv = calloc((size_t)(Tk * Hkv * Dv) + 1, 4);
    float *lse = calloc((size_t)(Tq * Hq) + 1, 4), *rl = calloc((size_t)(Tq * Hq) + 1, 4);
    /* (T, H, D) buffers as (1, H, T, D) views */
#define TV(p, H, n) ((attn_view){(p), 0, (n), (int64_t)(H) * (n)})
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, Hq, Tq, Tk, D, Dv);
    d.Hkv = Hkv, d.causal = (attn_causal)causal, d.softcap = softcap, d.attention_chunk = chunk;
    if (window) d.window = 1, d.window_left = 7, d.window_right = causal ? -1 : 3;
    d.cu_seqlens_q = cq, d.cu_seqlens_k = ck, d.nseq = NS;
    for (int s = 0; s < NS; s++) { /* the reference, one sequence at a time, into ro, rl, rd* */
        attn_sdpa_desc e = d;
        e.cu_seqlens_q = e.cu_seqlens_k = NULL, e.nseq = 0, e.impl = ATTN_IMPL_REF;
        e.Sq = cq[s + 1] - cq[s], e.Sk = ck[s + 1] - ck[s];
        if (e.Sq == 0) continue;
        float *ls = malloc((size_t)(Hq * e.Sq) * 4 + 4);
        CHECK_OK(attn_sdpa_forward(&e, TV(q + cq[s] * Hq * D, Hq, D), TV(k + ck[s] * Hkv * D, Hkv, D),
                                   TV(v + ck[s] * Hkv * Dv, Hkv, Dv), TV(ro + cq[s] * Hq * Dv, Hq, Dv), ls));
        for (int h = 0; h < Hq; h++)
            for (int i = 0; i < e.Sq; i++) rl[h * Tq + cq[s] + i] = ls[h * e.Sq + i];
        CHECK_OK(attn_sdpa_backward(&e, TV(q + cq[s] * Hq * D, Hq, D), TV(k + ck[s] * Hkv * D, Hkv, D),
                                    TV(v + ck[s] * Hkv * Dv, Hkv, Dv), TV(ro + cq[s] * Hq * Dv, Hq, Dv),
                                    TV(go + cq[s] * Hq * Dv, Hq, Dv), NULL, TV(rdq + cq[s] * Hq * D, Hq, D),
                                    TV(rdk + ck[s] * Hkv * D, Hkv, D), TV(rdv + ck[s] * Hkv * Dv, Hkv, Dv)));
        free(ls);
    }
    for (int impl = ATTN_IMPL_REF; impl <= ATTN_IMPL_FAST; impl++) {
        d.impl = (attn_impl)impl;
        CHECK_OK(attn_sdpa_forward(&d, TV(q, Hq, D), TV(k, Hkv, D), TV(v, Hkv, Dv), TV(o, Hq, Dv), lse));
        CHECK_OK(attn_sdpa_backward(&d, TV(q, Hq, D), TV(k, Hkv, D), TV(v, Hkv, Dv), TV(o, Hq, Dv), TV(go, Hq, Dv), lse,
                                    TV(dq, Hq, D), TV(dk, Hkv, D), TV(dv, Hkv, Dv)));
        char lab[96];
        snprintf(lab, sizeof lab, "varlen %d %s: out", idx, impl == ATTN_IMPL_REF ? "ref" : "fast");
        tu_allclose(lab, o, ro, (size_t)(Tq * Hq * Dv), 1e-4, 1e-5);
        snprintf(lab, sizeof lab, "varlen %d %s: lse", idx, impl == ATTN_IMPL_REF ? "ref" : "fast");
        tu_allclose(lab, lse, rl, (size_t)(Tq * Hq), 1e-4, 1e-5);
        snprintf(lab, sizeof lab, "varlen %d %s: dq dk dv", idx, impl == ATTN_IMPL_REF ? "ref" : "fast");
        tu_allclose(lab, dq, rdq, (size_t)(Tq * Hq * D), 5e-4, 5e-5);
        tu_allclose(lab, dk, rdk, (size_t)(Tk * Hkv * D), 5e-4, 5e-5);
        tu_allclose(lab, dv, rdv, (size_t)(Tk * Hkv * Dv), 5e-4, 5e-5);
    }
#undef TV
    int32_t bad = cq[NS];
    cq[NS] = (int32_t)Tq + 1;
    CHECK(attn_sdpa_forward(&d, (attn_view){q, 0, D, Hq * D}, (attn_view){k, 0, D, Hkv * D},
                            (attn_view){v, 0, Dv, Hkv * Dv}, (attn_view){o, 0, Dv, Hq * Dv}, NULL) == ATTN_E_SHAPE,
          "cu_seqlens_q not ending at Sq");
    cq[NS] = bad;
    free(q), free(k), free(v), free(go), free(o), free(ro), free(dq), free(rdq), free(dk), free(rdk), free(dv),
        free(rdv), free(lse), free(rl);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    omp_set_num_threads(2);
    /* each feature alone on one shape, then random combinations */
    fcase base = {.B = 2, .H = 4, .Hkv = 4, .Sq = 37, .Sk = 150, .D = 24, .Dv = 24, .causal = 0, .scale = 0.2f};
    fcase f[14];
    for (int i = 0; i < 14; i++) f[i] = base;
    f[1].Hkv = 2;                                                 /* GQA */
    f[2].Hkv = 1;                                                 /* MQA */
    f[3].seqlens = 1;                                             /* ragged batch */
    f[4].window = 1, f[4].wl = 20, f[4].wr = 3;                   /* window, bottom-right aligned */
    f[5].softcap = 8.0f;                                          /* softcap */
    f[6].alibi = 1;                                               /* ALiBi */
    f[7].causal = 2, f[7].window = 1, f[7].wl = 10, f[7].wr = -1; /* causal sliding window */
    f[8].chunk = 16;                                              /* chunked local attention */
    f[9].causal = 2, f[9].chunk = 7;                              /* chunks, bottom-right */
    f[10].sinks = 1;                                              /* attention sinks */
    f[11].dmask = 1;                                              /* dense bool mask, full */
    f[12].dbias = 1 + 1 + 2;                                      /* bias (1, 1, Sq, Sk) broadcast */
    f[13].dmask = 1 + 2, f[13].dbias = 1 + 4, f[13].causal = 2;   /* (B, 1, Sq, Sk) mask, (B, H, 1, Sk) bias */
    for (int i = 0; i < 14; i++) run_case(&f[i], i);
    for (int i = 0; i < 12; i++)
        varlen_case(i, i % 3, i % 4 == 1, i % 5 == 2 ? 9 : 0, i % 6 == 3 ? 10.0f : 0.0f, i % 2 ? 4 : 2, i % 2 ? 2 : 2,
                    i == 4);
    for (int i = 0; i < 120; i++) {
        fcase c = random_case();
        run_case(&c, 100 + i);
    }
    empty_rows();
    bad_descriptors();
    bad_new_rules();
    return tu_finish("test_features");
}
