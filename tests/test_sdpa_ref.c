/* Reference SDPA: against an independent double-precision computation on
 * random shapes, every mask kind, both causal alignments, both mask
 * polarities, strided layouts, dropout, fully-masked rows and bad arguments. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 12345u;
static float frand(void) { return tu_frand(&lcg); }
static int irand(int lo, int hi) { return tu_irand(&lcg, lo, hi); }

/* independent oracle, BHSD contiguous, mask (B,Sk) with 1 = masked */
static void oracle(int B, int H, int Sq, int Sk, int D, int Dv, float scale, int causal, const uint8_t *mask,
                   const attn_dropout *drop, const float *q, const float *k, const float *v, float *out, float *lse) {
    double *w = malloc((size_t)Sk * sizeof *w);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Sq; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < Sk; j++) {
                    int vis = !(mask && mask[b * Sk + j]);
                    if (causal == 1 && j > i) vis = 0;
                    if (causal == 2 && j > i + Sk - Sq) vis = 0;
                    double s = 0;
                    for (int c = 0; c < D; c++)
                        s += (double)q[(((size_t)b * H + h) * Sq + i) * D + c] *
                             k[(((size_t)b * H + h) * Sk + j) * D + c];
                    w[j] = vis ? s * scale : -INFINITY;
                    if (w[j] > mx) mx = w[j];
                }
                double sum = 0;
                for (int j = 0; j < Sk; j++) sum += w[j] = mx == -INFINITY ? 0.0 : exp(w[j] - mx);
                lse[((size_t)b * H + h) * Sq + i] = mx == -INFINITY ? -INFINITY : (float)(mx + log(sum));
                for (int c = 0; c < Dv; c++) {
                    double acc = 0;
                    for (int j = 0; j < Sk; j++) {
                        double p = sum > 0 ? w[j] / sum : 0.0;
                        if (drop) {
                            uint64_t idx = (((uint64_t)b * H + h) * Sq + i) * Sk + j;
                            p *= attn_dropout_keep(drop, idx) ? drop->scale : 0.0;
                        }
                        acc += p * v[(((size_t)b * H + h) * Sk + j) * Dv + c];
                    }
                    out[(((size_t)b * H + h) * Sq + i) * Dv + c] = (float)acc;
                }
            }
    free(w);
}

static attn_view bhsd(float *p, int H, int S, int D) {
    attn_view v = {p, (int64_t)H * S * D, (int64_t)S * D, D};
    return v;
}

static void random_case(int iter) {
    int B = irand(1, 3), H = irand(1, 4), Sq = irand(1, 40), Sk = irand(1, 40), D = irand(1, 24), Dv = irand(1, 24);
    int causal = irand(0, 2), use_mask = irand(0, 1), use_drop = irand(0, 3) == 0, polarity_keep = irand(0, 1);
    float scale = 1.0f / sqrtf((float)D) * (irand(0, 1) ? 1.0f : 2.5f);
    size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * H * Sk * D, nv = (size_t)B * H * Sk * Dv,
           no = (size_t)B * H * Sq * Dv, nl = (size_t)B * H * Sq;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *o = malloc(no * 4), *ow = malloc(no * 4);
    float *l = malloc(nl * 4), *lw = malloc(nl * 4);
    uint8_t *mask = malloc((size_t)B * Sk), *mask_api = malloc((size_t)B * Sk);
    for (size_t i = 0; i < nq; i++) q[i] = frand() * 2;
    for (size_t i = 0; i < nk; i++) k[i] = frand() * 2;
    for (size_t i = 0; i < nv; i++) v[i] = frand();
    for (int i = 0; i < B * Sk; i++) {
        mask[i] = irand(0, 3) == 0;
        mask_api[i] = polarity_keep ? !mask[i] : mask[i];
    }
    attn_generator g;
    attn_generator_seed(&g, (uint64_t)iter);
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    if (use_drop) CHECK_OK(attn_dropout_begin(&g, 0.3, (uint64_t)B * H * Sq * Sk, &drop));
    attn_sdpa_desc d = {.B = B,
                        .H = H,
                        .Sq = Sq,
                        .Sk = Sk,
                        .D = D,
                        .Dv = Dv,
                        .scale = scale,
                        .causal = (attn_causal)causal,
                        .key_mask = use_mask ? mask_api : NULL,
                        .key_mask_stride_b = Sk,
                        .key_mask_polarity = polarity_keep ? ATTN_MASK_TRUE_MEANS_KEEP : ATTN_MASK_TRUE_MEANS_MASKED,
                        .dropout = use_drop ? &drop : NULL,
                        .impl = ATTN_IMPL_REF};
    CHECK_OK(attn_sdpa_forward(&d, bhsd(q, H, Sq, D), bhsd(k, H, Sk, D), bhsd(v, H, Sk, Dv), bhsd(o, H, Sq, Dv), l));
    oracle(B, H, Sq, Sk, D, Dv, scale, causal, use_mask ? mask : NULL, use_drop ? &drop : NULL, q, k, v, ow, lw);
    char label[160];
    snprintf(label, sizeof label, "iter %d B%d H%d Sq%d Sk%d D%d Dv%d causal%d mask%d drop%d", iter, B, H, Sq, Sk, D,
             Dv, causal, use_mask, use_drop);
    tu_allclose(label, o, ow, no, 1e-5, 1e-6);
    tu_allclose(label, l, lw, nl, 1e-5, 1e-6);
    for (size_t i = 0; i < no; i++)
        if (isnan(o[i])) {
            CHECK(0, "%s: NaN in output", label);
            break;
        }
    /* BSHD layout (heads interleaved in a token row) gives the same result */
    float *qs = malloc(nq * 4), *ks = malloc(nk * 4), *vs = malloc(nv * 4), *os = malloc(no * 4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            for (int s = 0; s < Sq; s++)
                memcpy(qs + (((size_t)b * Sq + s) * H + h) * D, q + (((size_t)b * H + h) * Sq + s) * D, (size_t)D * 4);
            for (int s = 0; s < Sk; s++) {
                memcpy(ks + (((size_t)b * Sk + s) * H + h) * D, k + (((size_t)b * H + h) * Sk + s) * D, (size_t)D * 4);
                memcpy(vs + (((size_t)b * Sk + s) * H + h) * Dv, v + (((size_t)b * H + h) * Sk + s) * Dv,
                       (size_t)Dv * 4);
            }
        }
    attn_view vq = {qs, (int64_t)Sq * H * D, D, (int64_t)H * D}, vk = {ks, (int64_t)Sk * H * D, D, (int64_t)H * D};
    attn_view vv = {vs, (int64_t)Sk * H * Dv, Dv, (int64_t)H * Dv},
              vo = {os, (int64_t)Sq * H * Dv, Dv, (int64_t)H * Dv};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    int same = 1;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int s = 0; s < Sq; s++)
                same &= !memcmp(os + (((size_t)b * Sq + s) * H + h) * Dv, o + (((size_t)b * H + h) * Sq + s) * Dv,
                                (size_t)Dv * 4);
    CHECK(same, "%s: strided BSHD result differs from BHSD", label);
    attn_dropout_end(&drop);
    free(q), free(k), free(v), free(o), free(ow), free(l), free(lw), free(mask), free(mask_api);
    free(qs), free(ks), free(vs), free(os);
}

static void fully_masked_rows(void) {
    /* Sq > Sk bottom-right: the first Sq - Sk rows see no key */
    enum { Sq = 5, Sk = 3, D = 4 };
    float q[Sq * D], k[Sk * D], v[Sk * D], o[Sq * D], l[Sq];
    for (int i = 0; i < Sq * D; i++) q[i] = frand();
    for (int i = 0; i < Sk * D; i++) k[i] = frand(), v[i] = frand();
    attn_sdpa_desc d = {.B = 1,
                        .H = 1,
                        .Sq = Sq,
                        .Sk = Sk,
                        .D = D,
                        .Dv = D,
                        .scale = 0.5f,
                        .causal = ATTN_CAUSAL_BOTTOM_RIGHT,
                        .key_mask = NULL,
                        .key_mask_stride_b = 0,
                        .key_mask_polarity = 0,
                        .dropout = NULL,
                        .impl = ATTN_IMPL_REF};
    attn_view vq = {q, 0, 0, D}, vk = {k, 0, 0, D}, vv = {v, 0, 0, D}, vo = {o, 0, 0, D};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, l));
    for (int i = 0; i < 2; i++) {
        CHECK(isinf(l[i]) && l[i] < 0, "row %d lse is -inf", i);
        for (int c = 0; c < D; c++) CHECK(o[i * D + c] == 0.0f && !signbit(o[i * D + c]), "row %d is +0", i);
    }
    CHECK(isfinite(l[2]), "row 2 sees key 0");
    /* a padding mask that hides every key of a batch row */
    uint8_t all[Sk] = {1, 1, 1};
    attn_sdpa_desc d2 = {.B = 1,
                         .H = 1,
                         .Sq = Sq,
                         .Sk = Sk,
                         .D = D,
                         .Dv = D,
                         .scale = 0.5f,
                         .causal = ATTN_CAUSAL_NONE,
                         .key_mask = all,
                         .key_mask_stride_b = Sk,
                         .key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED,
                         .dropout = NULL,
                         .impl = ATTN_IMPL_REF};
    CHECK_OK(attn_sdpa_forward(&d2, vq, vk, vv, vo, l));
    for (int i = 0; i < Sq * D; i++) CHECK(o[i] == 0.0f, "all keys masked gives zeros");
    /* left padding + top-left causal: row 0 sees only key 0, which is padding */
    uint8_t left[Sk] = {1, 0, 0};
    float w[Sq * Sk];
    attn_sdpa_desc d3 = {.B = 1,
                         .H = 1,
                         .Sq = Sk,
                         .Sk = Sk,
                         .D = D,
                         .Dv = D,
                         .scale = 0.5f,
                         .causal = ATTN_CAUSAL_TOP_LEFT,
                         .key_mask = left,
                         .key_mask_stride_b = Sk,
                         .key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED,
                         .dropout = NULL,
                         .impl = ATTN_IMPL_REF};
    CHECK_OK(attn_sdpa_weights(&d3, vq, vk, NULL, w));
    CHECK(w[0] == 0.0f && w[1] == 0.0f && w[2] == 0.0f, "row 0 weights are zero");
    CHECK(fabsf(w[3 + 1] - 1.0f) < 1e-6f, "row 1 attends key 1 only");
}

static void bad_args(void) {
    float x[4] = {0};
    attn_view v = {x, 0, 0, 2}, none = {0};
    attn_sdpa_desc d = {.B = 1,
                        .H = 1,
                        .Sq = 2,
                        .Sk = 2,
                        .D = 2,
                        .Dv = 2,
                        .scale = 1.0f,
                        .causal = ATTN_CAUSAL_NONE,
                        .key_mask = NULL,
                        .key_mask_stride_b = 0,
                        .key_mask_polarity = 0,
                        .dropout = NULL,
                        .impl = ATTN_IMPL_REF};
    CHECK(attn_sdpa_forward(NULL, v, v, v, v, NULL) == ATTN_E_INVALID, "NULL desc");
    CHECK(attn_sdpa_forward(&d, none, v, v, v, NULL) == ATTN_E_INVALID, "NULL q");
    uint8_t m[2] = {0, 1};
    d.key_mask = m;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "mask without polarity");
    d.key_mask = NULL;
    d.D = 0;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_SHAPE, "D = 0");
    d.D = 2;
    d.causal = (attn_causal)7;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "bad causal enum");
    d.causal = ATTN_CAUSAL_NONE;
    d.scale = NAN;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "NaN scale");
}

static void nan_propagates(void) {
    float q[4] = {NAN, 1, 0, 1}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4}, o[4];
    attn_view vq = {q, 0, 0, 2}, vk = {k, 0, 0, 2}, vv = {v, 0, 0, 2}, vo = {o, 0, 0, 2};
    attn_sdpa_desc d = {.B = 1,
                        .H = 1,
                        .Sq = 2,
                        .Sk = 2,
                        .D = 2,
                        .Dv = 2,
                        .scale = 1.0f,
                        .causal = ATTN_CAUSAL_NONE,
                        .key_mask = NULL,
                        .key_mask_stride_b = 0,
                        .key_mask_polarity = 0,
                        .dropout = NULL,
                        .impl = ATTN_IMPL_REF};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    CHECK(isnan(o[0]) && isnan(o[1]), "NaN query row gives NaN output");
    CHECK(!isnan(o[2]) && !isnan(o[3]), "other rows unaffected");
}

/* double-precision forward for finite differences: BHSD contiguous doubles */
static void oracle_d(int B, int H, int Sq, int Sk, int D, int Dv, double scale, int causal, const uint8_t *mask,
                     const attn_dropout *drop, const double *q, const double *k, const double *v, double *out) {
    double w[64];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Sq; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < Sk; j++) {
                    int vis =
                        !(mask && mask[b * Sk + j]) && !(causal == 1 && j > i) && !(causal == 2 && j > i + Sk - Sq);
                    double s = 0;
                    for (int c = 0; c < D; c++)
                        s += q[((b * H + h) * Sq + i) * D + c] * k[((b * H + h) * Sk + j) * D + c];
                    w[j] = vis ? s * scale : -INFINITY;
                    if (w[j] > mx) mx = w[j];
                }
                double sum = 0;
                for (int j = 0; j < Sk; j++) sum += w[j] = mx == -INFINITY ? 0.0 : exp(w[j] - mx);
                for (int c = 0; c < Dv; c++) {
                    double acc = 0;
                    for (int j = 0; j < Sk; j++) {
                        double pj = sum > 0 ? w[j] / sum : 0.0;
                        if (drop)
                            pj *= attn_dropout_keep(drop, (uint64_t)(((b * H + h) * Sq + i) * Sk + j)) ? drop->scale
                                                                                                       : 0.0;
                        acc += pj * v[((b * H + h) * Sk + j) * Dv + c];
                    }
                    out[((b * H + h) * Sq + i) * Dv + c] = acc;
                }
            }
}

/* Backward against central finite differences of the double forward. */
static void backward_fd(int iter) {
    int B = irand(1, 2), H = irand(1, 2), Sq = irand(1, 6), Sk = irand(1, 6), D = irand(1, 5), Dv = irand(1, 5);
    int causal = irand(0, 2), use_mask = irand(0, 1), use_drop = irand(0, 2) == 0;
    double scale = 0.7;
    int nq = B * H * Sq * D, nk = B * H * Sk * D, nv = B * H * Sk * Dv, no = B * H * Sq * Dv;
    float q[512], k[512], v[512], o[512], go[512], dq[512], dk[512], dv[512];
    double qd[512], kd[512], vd[512], od[512], g[512];
    uint8_t mask[16];
    for (int i = 0; i < nq; i++) qd[i] = q[i] = frand();
    for (int i = 0; i < nk; i++) kd[i] = k[i] = frand();
    for (int i = 0; i < nv; i++) vd[i] = v[i] = frand();
    for (int i = 0; i < no; i++) g[i] = go[i] = frand();
    for (int i = 0; i < B * Sk; i++) mask[i] = irand(0, 3) == 0;
    attn_generator gen;
    attn_generator_seed(&gen, (uint64_t)iter + 1000);
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    if (use_drop) attn_dropout_begin(&gen, 0.4, (uint64_t)B * H * Sq * Sk, &drop);
    attn_sdpa_desc d = {.B = B,
                        .H = H,
                        .Sq = Sq,
                        .Sk = Sk,
                        .D = D,
                        .Dv = Dv,
                        .scale = (float)scale,
                        .causal = (attn_causal)causal,
                        .key_mask = use_mask ? mask : NULL,
                        .key_mask_stride_b = Sk,
                        .key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED,
                        .dropout = use_drop ? &drop : NULL,
                        .impl = ATTN_IMPL_REF};
    attn_view vq = bhsd(q, H, Sq, D), vk = bhsd(k, H, Sk, D), vv = bhsd(v, H, Sk, Dv), vo = bhsd(o, H, Sq, Dv);
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo, bhsd(go, H, Sq, Dv), NULL, bhsd(dq, H, Sq, D), bhsd(dk, H, Sk, D),
                                bhsd(dv, H, Sk, Dv)));
    double sc = (double)(float)scale;
    struct {
        double *x;
        float *grad;
        int n;
        const char *name;
    } t[3] = {{qd, dq, nq, "dq"}, {kd, dk, nk, "dk"}, {vd, dv, nv, "dv"}};
    for (int a = 0; a < 3; a++) {
        float num[512];
        for (int e = 0; e < t[a].n; e++) {
            double keepx = t[a].x[e], hstep = 1e-5, lp = 0, lm = 0;
            t[a].x[e] = keepx + hstep;
            oracle_d(B, H, Sq, Sk, D, Dv, sc, causal, use_mask ? mask : NULL, use_drop ? &drop : NULL, qd, kd, vd, od);
            for (int i = 0; i < no; i++) lp += od[i] * g[i];
            t[a].x[e] = keepx - hstep;
            oracle_d(B, H, Sq, Sk, D, Dv, sc, causal, use_mask ? mask : NULL, use_drop ? &drop : NULL, qd, kd, vd, od);
            for (int i = 0; i < no; i++) lm += od[i] * g[i];
            t[a].x[e] = keepx;
            num[e] = (float)((lp - lm) / (2 * hstep));
        }
        char label[128];
        snprintf(label, sizeof label, "backward FD iter %d %s (B%d H%d Sq%d Sk%d D%d Dv%d causal%d mask%d drop%d)",
                 iter, t[a].name, B, H, Sq, Sk, D, Dv, causal, use_mask, use_drop);
        tu_allclose(label, t[a].grad, num, (size_t)t[a].n, 1e-4, 1e-6);
    }
    attn_dropout_end(&drop);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    for (int it = 0; it < 300; it++) random_case(it);
    fully_masked_rows();
    bad_args();
    nan_propagates();
    for (int it = 0; it < 200; it++) backward_fd(it);
    return tu_finish("test_sdpa_ref");
}
