/* Math modes (attn.h, attn_math; docs/SEMANTICS.md): DATA and BF16 on every
 * forward path (reference, fused tiles, decode, the KV cache contiguous and
 * paged, 16-bit and q8_0 storage, the gathered long-query path) against
 * PyTorch's CPU flash-attention arithmetic for the type, written here in
 * float: q rounded to K's type (q8_0: quantized per block), float32 dot
 * products, the unnormalized P = e^(s - m) rounded to V's type and summed
 * rounded, float32 accumulation. The rule: each path's max error against a
 * float64 oracle on the stored values (q as given) is at most twice that
 * yardstick's (plus 1e-6 of the output's scale). Also: DATA on float32 data
 * is STRICT bit for bit, a table that rounds for the type (attn_math_rounds:
 * q8_0 everywhere, every type on the avx512-simde test table) changes the
 * answer and one without product kernels for it gives strict's bits, 1 and 2 threads agree bitwise, and bad
 * requests are refused. */
#include "testutil.h"
#include "base/half.h"
#include "base/storage.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 4242u;

/* x rounded to type t as storage would hold it (F32: unchanged) */
static void round_to(attn_dtype t, float *x, int64_t n) {
    for (int64_t i = 0; i < n && (t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16); i++)
        x[i] = t == ATTN_DTYPE_F16 ? attn_f16_to_f32(attn_f32_to_f16(x[i])) : attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
    if (t == ATTN_DTYPE_Q8_0)
        for (int64_t i = 0; i + 32 <= n; i += 32) {
            unsigned char blk[ATTN_Q8_BYTES];
            attn_q8_quantize(x + i, 32, blk);
            for (int c = 0; c < 32; c++) x[i + c] = attn_q8_get(blk, c);
        }
}

/* One problem: q (B, H, Sq, D) float32 as given; k, v (B, Hkv, Sk, D) as
 * stored (already rounded to their type); the causal alignment. */
typedef struct prob {
    int B, H, Hkv, Sq, Sk, D, causal; /* causal: 0 none, 1 bottom-right */
    float *q, *k, *v;
} prob;

static int visible(const prob *p, int i, int j) { return !p->causal || j <= i + p->Sk - p->Sq; }

/* out (B, H, Sq, D) in double: softmax(q k^T / sqrt(D)) v on the values as given */
static void oracle(const prob *p, double *out) {
    int D = p->D, G = p->H / p->Hkv;
    double *s = malloc((size_t)p->Sk * sizeof *s);
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++)
            for (int i = 0; i < p->Sq; i++) {
                const float *q = p->q + (((size_t)b * p->H + h) * p->Sq + i) * D;
                double m = -INFINITY, z = 0;
                for (int j = 0; j < p->Sk; j++) {
                    const float *k = p->k + (((size_t)b * p->Hkv + h / G) * p->Sk + j) * D;
                    double a = 0;
                    for (int c = 0; c < D; c++) a += (double)q[c] * k[c];
                    s[j] = visible(p, i, j) ? a / sqrt((double)D) : -INFINITY;
                    m = fmax(m, s[j]);
                }
                double *o = out + (((size_t)b * p->H + h) * p->Sq + i) * D;
                memset(o, 0, (size_t)D * sizeof *o);
                for (int j = 0; j < p->Sk; j++) {
                    double e = exp(s[j] - m);
                    z += e;
                    for (int c = 0; c < D; c++) o[c] += e * p->v[(((size_t)b * p->Hkv + h / G) * p->Sk + j) * D + c];
                }
                for (int c = 0; c < D; c++) o[c] /= z;
            }
    free(s);
}

/* PyTorch's flash arithmetic in float: q rounded to qt, P rounded to pt */
static void yardstick(const prob *p, attn_dtype qt, attn_dtype pt, double *out) {
    int D = p->D, G = p->H / p->Hkv;
    float *s = malloc((size_t)p->Sk * sizeof *s), *qr = malloc((size_t)D * sizeof *qr), *o = malloc((size_t)D * 4);
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++)
            for (int i = 0; i < p->Sq; i++) {
                memcpy(qr, p->q + (((size_t)b * p->H + h) * p->Sq + i) * D, (size_t)D * sizeof *qr);
                round_to(qt, qr, D);
                float m = -INFINITY, z = 0;
                for (int j = 0; j < p->Sk; j++) {
                    const float *k = p->k + (((size_t)b * p->Hkv + h / G) * p->Sk + j) * D;
                    float a = 0;
                    for (int c = 0; c < D; c++) a += qr[c] * k[c];
                    s[j] = visible(p, i, j) ? a / sqrtf((float)D) : -INFINITY;
                    m = fmaxf(m, s[j]);
                }
                memset(o, 0, (size_t)D * sizeof *o);
                for (int j = 0; j < p->Sk; j++) {
                    float e = expf(s[j] - m);
                    round_to(pt, &e, 1);
                    z += e;
                    for (int c = 0; c < D; c++) o[c] += e * p->v[(((size_t)b * p->Hkv + h / G) * p->Sk + j) * D + c];
                }
                for (int c = 0; c < D; c++) out[(((size_t)b * p->H + h) * p->Sq + i) * D + c] = o[c] / z;
            }
    free(s), free(qr), free(o);
}

static double max_err(const float *a, const double *want, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - want[i]));
    return e;
}

static void make(prob *p, int B, int H, int Hkv, int Sq, int Sk, int D, int causal, attn_dtype kvt) {
    *p = (prob){B, H, Hkv, Sq, Sk, D, causal, NULL, NULL, NULL};
    p->q = tu_rand_array((size_t)B * H * Sq * D, &lcg, 1.5f);
    p->k = tu_rand_array((size_t)B * Hkv * Sk * D, &lcg, 1.5f);
    p->v = tu_rand_array((size_t)B * Hkv * Sk * D, &lcg, 1.0f);
    round_to(kvt, p->k, (int64_t)B * Hkv * Sk * D), round_to(kvt, p->v, (int64_t)B * Hkv * Sk * D);
}

static void unmake(prob *p) { free(p->q), free(p->k), free(p->v); }

static void desc_of(const prob *p, attn_sdpa_desc *d, attn_math math, attn_impl impl) {
    attn_sdpa_desc_init(d, p->B, p->H, p->Sq, p->Sk, p->D, p->D);
    d->Hkv = p->Hkv, d->math = math, d->impl = impl;
    d->causal = p->causal ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
}

/* the rule: err <= 2 x the yardstick's, with 1e-6 of slack */
static void check_rule(const char *what, const float *out, const double *orc, const double *yard, size_t n) {
    double e = max_err(out, orc, n), ey = 0;
    for (size_t i = 0; i < n; i++) ey = fmax(ey, fabs(yard[i] - orc[i]));
    if (getenv("TEST_MATH_VERBOSE")) printf("%-44s error %.3g, PyTorch arithmetic %.3g\n", what, e, ey);
    CHECK(e <= 2.0 * ey + 1e-6, "%s: error %.3g against float64, PyTorch's arithmetic %.3g (bound 2x)", what, e, ey);
}

/* plain tensors of 16-bit type t (q, k, v all t), DATA mode, both paths and decode */
static void views16(attn_dtype t, int Sq, int causal) {
    prob p;
    make(&p, 2, 4, 2, Sq, 300, 64, causal, t);
    round_to(t, p.q, (int64_t)2 * 4 * Sq * 64); /* q is a t tensor too */
    size_t nq = (size_t)2 * 4 * Sq * 64, nk = (size_t)2 * 2 * 300 * 64;
    uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nk * 2);
    for (size_t i = 0; i < nq; i++) q16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.q[i]) : attn_f32_to_bf16(p.q[i]);
    for (size_t i = 0; i < nk; i++) {
        k16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.k[i]) : attn_f32_to_bf16(p.k[i]);
        v16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.v[i]) : attn_f32_to_bf16(p.v[i]);
    }
    double *orc = malloc(nq * sizeof *orc), *yard = malloc(nq * sizeof *yard);
    oracle(&p, orc), yardstick(&p, t, t, yard);
    float *out = malloc(nq * 4), *o1 = malloc(nq * 4), *os = malloc(nq * 4);
    attn_view vq = {(float *)q16, 4 * Sq * 64, Sq * 64, 64}, vk = {(float *)k16, 2 * 300 * 64, 300 * 64, 64};
    attn_view vv = {(float *)v16, 2 * 300 * 64, 300 * 64, 64}, vo = {out, 4 * Sq * 64, Sq * 64, 64};
    attn_view vo1 = {o1, 4 * Sq * 64, Sq * 64, 64}, vos = {os, 4 * Sq * 64, Sq * 64, 64};
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        desc_of(&p, &d, ATTN_MATH_DATA, impl ? ATTN_IMPL_FAST : ATTN_IMPL_REF);
        d.qkv_dtype = t;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
        char what[96];
        snprintf(what, sizeof what, "%s views Sq=%d causal=%d %s data", t == ATTN_DTYPE_F16 ? "f16" : "bf16", Sq,
                 causal, impl ? "fast" : "ref");
        check_rule(what, out, orc, yard, nq);
        d.math = ATTN_MATH_STRICT;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vos, NULL));
        if (attn_math_rounds(t)) /* else the table runs the mode as strict */
            CHECK(memcmp(out, os, nq * 4) != 0, "%s: the mode changes the answer (P is rounded)", what);
        else
            CHECK(!memcmp(out, os, nq * 4), "%s: a table without product kernels runs the mode as strict", what);
        if (impl) { /* 1 vs 2 threads, bitwise */
            d.math = ATTN_MATH_DATA;
            omp_set_num_threads(1);
            CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, NULL));
            omp_set_num_threads(2);
            CHECK(!memcmp(out, o1, nq * 4), "%s: 1 and 2 threads bitwise", what);
        }
    }
    free(q16), free(k16), free(v16), free(orc), free(yard), free(out), free(o1), free(os);
    unmake(&p);
}

/* float32 tensors: DATA is STRICT bit for bit; BF16 rounds q, k, v and P to bf16 */
static void views32(int Sq) {
    prob p;
    make(&p, 1, 4, 4, Sq, 200, 32, 1, ATTN_DTYPE_F32);
    size_t nq = (size_t)4 * Sq * 32;
    float *a = malloc(nq * 4), *s = malloc(nq * 4);
    attn_view vq = {p.q, 4 * Sq * 32, Sq * 32, 32}, vk = {p.k, 4 * 200 * 32, 200 * 32, 32};
    attn_view vv = {p.v, 4 * 200 * 32, 200 * 32, 32}, va = {a, 4 * Sq * 32, Sq * 32, 32},
              vs = {s, 4 * Sq * 32, Sq * 32, 32};
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        desc_of(&p, &d, ATTN_MATH_DATA, impl ? ATTN_IMPL_FAST : ATTN_IMPL_REF);
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, va, NULL));
        d.math = ATTN_MATH_STRICT;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vs, NULL));
        CHECK(!memcmp(a, s, nq * 4), "float32 Sq=%d %s: DATA is STRICT bit for bit", Sq, impl ? "fast" : "ref");
        /* BF16: against the yardstick on the bf16-rounded values */
        prob r = p;
        r.q = malloc(nq * 4), r.k = malloc((size_t)4 * 200 * 32 * 4), r.v = malloc((size_t)4 * 200 * 32 * 4);
        memcpy(r.q, p.q, nq * 4), memcpy(r.k, p.k, (size_t)4 * 200 * 32 * 4),
            memcpy(r.v, p.v, (size_t)4 * 200 * 32 * 4);
        round_to(ATTN_DTYPE_BF16, r.k, 4 * 200 * 32), round_to(ATTN_DTYPE_BF16, r.v, 4 * 200 * 32);
        double *orc = malloc(nq * sizeof *orc), *yard = malloc(nq * sizeof *yard);
        oracle(&r, orc), yardstick(&r, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, yard);
        d.math = ATTN_MATH_BF16;
        CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, va, NULL));
        char what[64];
        snprintf(what, sizeof what, "float32 Sq=%d %s bf16 mode", Sq, impl ? "fast" : "ref");
        check_rule(what, a, orc, yard, nq);
        free(orc), free(yard), unmake(&r);
    }
    free(a), free(s);
    unmake(&p);
}

/* the KV cache of storage t (page 0 or 16), Sq query rows per sequence, in
 * mode (fp8: q and P rounded to bf16, the values exact in it, in DATA and
 * BF16 alike) */
static void cache(attn_dtype t, int page, int Sq, int HKV, attn_math mode) {
    enum { B = 2, H = 8, T = 200, D = 64 };
    prob p;
    make(&p, B, H, HKV, Sq, T, D, 1, t);
    attn_kv_cache_config cc = {
        .batch = B, .kv_heads = HKV, .capacity = T + 8, .head_dim = D, .v_head_dim = D, .dtype = t, .page_size = page};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&cc, &c));
    int64_t n[B] = {T, T};
    attn_view vk = {p.k, HKV * T * D, T * D, D}, vv = {p.v, HKV * T * D, T * D, D};
    CHECK_OK(attn_kv_cache_append(c, n, vk, vv)); /* k, v hold representable values of the 16-bit and q8_0 types */
    for (int b = 0; b < B; b++) /* the values as stored (the row formats' (scale, zero) are the cache's own) */
        for (int hk = 0; hk < HKV; hk++)
            for (int j = 0; j < T; j++) {
                size_t at = (((size_t)b * HKV + hk) * T + j) * D;
                CHECK_OK(attn_kv_cache_read(c, b, hk, j, p.k + at, p.v + at));
            }
    int fp8 = t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2;
    int integer = !fp8 && t != ATTN_DTYPE_F16 && t != ATTN_DTYPE_BF16; /* q quantized as q8_0, P float32 */
    attn_dtype qt = fp8 ? ATTN_DTYPE_BF16 : integer ? ATTN_DTYPE_Q8_0 : t;
    attn_dtype pt = fp8 ? ATTN_DTYPE_BF16 : integer ? ATTN_DTYPE_F32 : t;
    size_t nq = (size_t)B * H * Sq * D;
    double *orc = malloc(nq * sizeof *orc), *yard = malloc(nq * sizeof *yard);
    oracle(&p, orc), yardstick(&p, qt, pt, yard);
    float *out = malloc(nq * 4), *o1 = malloc(nq * 4);
    attn_view vq = {p.q, H * Sq * D, Sq * D, D}, vo = {out, H * Sq * D, Sq * D, D}, vo1 = {o1, H * Sq * D, Sq * D, D};
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        desc_of(&p, &d, mode, impl ? ATTN_IMPL_AUTO : ATTN_IMPL_REF);
        d.Sk = 0;
        CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo, NULL));
        char what[96];
        snprintf(what, sizeof what, "%s cache page %d Sq=%d Hkv=%d %s %s", attn_storage_of(t)->name, page, Sq, HKV,
                 impl ? "auto" : "ref", mode == ATTN_MATH_BF16 ? "bf16" : "data");
        check_rule(what, out, orc, yard, nq);
        d.math = ATTN_MATH_STRICT;
        CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo1, NULL));
        if (attn_math_rounds(t))
            CHECK(memcmp(out, o1, nq * 4) != 0, "%s: the mode changes the answer", what);
        else
            CHECK(!memcmp(out, o1, nq * 4), "%s: a table without product kernels runs the mode as strict", what);
        d.math = mode;
        if (impl) {
            omp_set_num_threads(1);
            CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo1, NULL));
            omp_set_num_threads(2);
            CHECK(!memcmp(out, o1, nq * 4), "%s: 1 and 2 threads bitwise", what);
        }
    }
    attn_kv_cache_free(c);
    free(orc), free(yard), free(out), free(o1);
    unmake(&p);
}

/* an fp8 cache (page 0 or 16) of one kv head holding two keys of D = 16
 * (k, v: 2 x 16 values), K's and V's scale the one given */
enum { FP8_D = 16 };
static attn_kv_cache *fp8_two_keys(attn_dtype t, int page, float scale, const float *k, const float *v) {
    enum { D = FP8_D };
    attn_kv_cache_config cc = {.batch = 1,
                               .kv_heads = 1,
                               .capacity = 8,
                               .head_dim = D,
                               .v_head_dim = D,
                               .dtype = t,
                               .page_size = page,
                               .k_scale = &scale,
                               .v_scale = &scale,
                               .k_scale_len = 1,
                               .v_scale_len = 1};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&cc, &c));
    int64_t n[1] = {2};
    attn_view vk = {(void *)k, 2 * D, 2 * D, D}, vv = {(void *)v, 2 * D, 2 * D, D};
    CHECK_OK(attn_kv_cache_append(c, n, vk, vv));
    return c;
}

/* DATA and BF16 over an fp8 cache round q and P (docs/SEMANTICS.md): two keys,
 * k0 = v0 = x e0, k1 = v1 = 0, q = q0 e0, D = 16 (scale 1/4): the scores s =
 * bf16(q0) x / 4 and 0, so P = (1, e^-s) and out[0] = x / (1 + P1), with q0
 * and P1 rounded to bf16 where the table rounds for fp8 (attn_math_rounds),
 * not where it runs the mode as strict. fp8 scale 1 (q0 = 1, x = 1) and 3
 * (q0 = 2.74, x read back: the products are the rounded q times the stored
 * values; rounding q times 3 instead moves P1 by a bf16 step, and e^-s sits
 * over a third of a step from a rounding boundary); both implementations,
 * contiguous and paged */
static void fp8_p_rounded(attn_dtype t, int page, float scale, attn_math mode) {
    enum { D = FP8_D };
    float q0 = scale == 1.0f ? 1.0f : 2.74f, k[2 * D] = {1.0f}, q[D] = {q0}, o[D], rk[D], rv[D];
    attn_kv_cache *c = fp8_two_keys(t, page, scale, k, k);
    CHECK_OK(attn_kv_cache_read(c, 0, 0, 0, rk, rv));
    int r = attn_math_rounds(t);
    double qr = r ? (double)attn_bf16_to_f32(attn_f32_to_bf16(q0)) : (double)q0, s = qr * rk[0] * 0.25;
    double p1 = r ? (double)attn_bf16_to_f32(attn_f32_to_bf16((float)exp(-s))) : exp(-s), want = rv[0] / (1.0 + p1);
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, 1, 0, D, D);
        d.math = mode, d.impl = impl ? ATTN_IMPL_AUTO : ATTN_IMPL_REF;
        attn_view vq = {q, D, D, D}, vo = {o, D, D, D};
        CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo, NULL));
        CHECK(fabs(o[0] - want) < 2e-6, "%s page %d scale %g %s %s: out %.9g, want %.9g", attn_storage_of(t)->name,
              page, (double)scale, mode == ATTN_MATH_BF16 ? "bf16" : "data", impl ? "auto" : "ref", (double)o[0], want);
    }
    attn_kv_cache_free(c);
}

/* A mode over fp8 keys with a small scale (2^-20) and huge queries (q0 =
 * 1e36): the rounded q times the stored values stays finite (about 1e32),
 * q times the codes would not (448e36). The products must keep the stored
 * values' answer: the key with the larger score, out = its value, on both
 * implementations, contiguous and paged (decode multiplies such rows by
 * the scale before its products: dec_bqk_fits) */
static void fp8_huge_q(attn_dtype t, int page, attn_math mode) {
    enum { D = FP8_D };
    float sc = 0x1p-20f, k[2 * D] = {0}, v[2 * D] = {0}, q[D] = {1e36f}, o[D];
    k[0] = 448.0f * sc, k[D] = 2.0f * sc, v[0] = 3.0f * sc, v[D] = 5.0f * sc;
    attn_kv_cache *c = fp8_two_keys(t, page, sc, k, v);
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, 1, 1, 0, D, D);
        d.math = mode, d.impl = impl ? ATTN_IMPL_AUTO : ATTN_IMPL_REF;
        attn_view vq = {q, D, D, D}, vo = {o, D, D, D};
        CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo, NULL));
        CHECK(o[0] == 3.0f * sc && o[1] == 0.0f, "%s page %d %s %s, q 1e36: out %g, want %g", attn_storage_of(t)->name,
              page, mode == ATTN_MATH_BF16 ? "bf16" : "data", impl ? "auto" : "ref", (double)o[0], 3.0 * sc);
    }
    attn_kv_cache_free(c);
}

/* ---- the backward (base/sem.h, attn_sem_grad_type) ---- */

/* index helpers: row i of head h of a (B, H, S, D) array */
static size_t at4(const prob *p, int b, int h, int nh, int S, int i) {
    return (((size_t)b * (size_t)nh + (size_t)h) * (size_t)S + (size_t)i) * (size_t)p->D;
}

/* the gradients of sum(out * dout) in float64 on the values as given (q as given) */
static void grads_oracle(const prob *p, const float *dout, double *dq, double *dk, double *dv) {
    int D = p->D, G = p->H / p->Hkv;
    double sc = 1.0 / sqrt((double)D), *s = malloc((size_t)p->Sk * sizeof *s), *dp = malloc((size_t)p->Sk * 8);
    memset(dk, 0, (size_t)p->B * p->Hkv * p->Sk * D * 8), memset(dv, 0, (size_t)p->B * p->Hkv * p->Sk * D * 8);
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++)
            for (int i = 0; i < p->Sq; i++) {
                const float *q = p->q + at4(p, b, h, p->H, p->Sq, i), *go = dout + at4(p, b, h, p->H, p->Sq, i);
                double m = -INFINITY, z = 0, di = 0;
                for (int j = 0; j < p->Sk; j++) {
                    const float *k = p->k + at4(p, b, h / G, p->Hkv, p->Sk, j);
                    double a = 0;
                    for (int c = 0; c < D; c++) a += (double)q[c] * k[c];
                    s[j] = visible(p, i, j) ? a * sc : -INFINITY;
                    m = fmax(m, s[j]);
                }
                for (int j = 0; j < p->Sk; j++) s[j] = exp(s[j] - m), z += s[j];
                for (int j = 0; j < p->Sk; j++) {
                    const float *v = p->v + at4(p, b, h / G, p->Hkv, p->Sk, j);
                    double a = 0;
                    for (int c = 0; c < D; c++) a += (double)go[c] * v[c];
                    s[j] /= z, dp[j] = a, di += s[j] * a;
                }
                double *gq = dq + at4(p, b, h, p->H, p->Sq, i);
                memset(gq, 0, (size_t)D * 8);
                for (int j = 0; j < p->Sk; j++) {
                    size_t kj = at4(p, b, h / G, p->Hkv, p->Sk, j);
                    double ds = s[j] * (dp[j] - di) * sc;
                    for (int c = 0; c < D; c++)
                        gq[c] += ds * p->k[kj + c], dk[kj + c] += ds * q[c], dv[kj + c] += s[j] * go[c];
                }
            }
    free(s), free(dp);
}

/* PyTorch's CPU flash backward arithmetic in float: q rounded to qt, dO to
 * gt; P = e^(s - m) / z in float; dP = dO V^T, Di = rowsum(P dP), dS = P (dP
 * - Di); P and dS rounded to gt for the products, the scale applied to the
 * dS products' float sums (as its gemm's alpha); float32 accumulation */
static void grads_yardstick(const prob *p, attn_dtype qt, attn_dtype gt, const float *dout, double *dq, double *dk,
                            double *dv) {
    int D = p->D, G = p->H / p->Hkv;
    float sc = 1.0f / sqrtf((float)D), *s = malloc((size_t)p->Sk * 4), *dp = malloc((size_t)p->Sk * 4);
    float *qr = malloc((size_t)D * 4), *gr = malloc((size_t)D * 4), *gq = malloc((size_t)D * 4);
    size_t nk = (size_t)p->B * p->Hkv * p->Sk * D;
    float *fk = calloc(nk, 4), *fv = calloc(nk, 4);
    for (int b = 0; b < p->B; b++)
        for (int h = 0; h < p->H; h++)
            for (int i = 0; i < p->Sq; i++) {
                memcpy(qr, p->q + at4(p, b, h, p->H, p->Sq, i), (size_t)D * 4), round_to(qt, qr, D);
                memcpy(gr, dout + at4(p, b, h, p->H, p->Sq, i), (size_t)D * 4), round_to(gt, gr, D);
                float m = -INFINITY, z = 0, di = 0;
                for (int j = 0; j < p->Sk; j++) {
                    const float *k = p->k + at4(p, b, h / G, p->Hkv, p->Sk, j);
                    float a = 0;
                    for (int c = 0; c < D; c++) a += qr[c] * k[c];
                    s[j] = visible(p, i, j) ? a * sc : -INFINITY;
                    m = fmaxf(m, s[j]);
                }
                for (int j = 0; j < p->Sk; j++) s[j] = expf(s[j] - m), z += s[j];
                for (int j = 0; j < p->Sk; j++) {
                    const float *v = p->v + at4(p, b, h / G, p->Hkv, p->Sk, j);
                    float a = 0;
                    for (int c = 0; c < D; c++) a += gr[c] * v[c];
                    s[j] /= z, dp[j] = a, di += s[j] * a;
                }
                memset(gq, 0, (size_t)D * 4);
                for (int j = 0; j < p->Sk; j++) {
                    size_t kj = at4(p, b, h / G, p->Hkv, p->Sk, j);
                    float ds = s[j] * (dp[j] - di), pr = s[j];
                    round_to(gt, &ds, 1), round_to(gt, &pr, 1);
                    for (int c = 0; c < D; c++)
                        gq[c] += ds * p->k[kj + c], fk[kj + c] += ds * qr[c], fv[kj + c] += pr * gr[c];
                }
                for (int c = 0; c < D; c++) dq[at4(p, b, h, p->H, p->Sq, i) + c] = gq[c] * sc;
            }
    for (size_t t = 0; t < nk; t++) dk[t] = fk[t] * sc, dv[t] = fv[t];
    free(s), free(dp), free(qr), free(gr), free(gq), free(fk), free(fv);
}

/* The backward in a math mode: t = F16 / BF16 (16-bit tensors, DATA) or F32
 * (float32 tensors, BF16 mode: k, v, q, dO, P, dS rounded to bf16). Both
 * paths against the rule for dq, dk and dv; the fused path 1 vs 2 threads
 * bitwise; strict's bits where the table runs the mode as strict. */
static void grads(attn_dtype t, int Sq, int causal) {
    prob p;
    int B = 2, H = 4, Hkv = 2, Sk = 150, D = 32;
    attn_dtype st = t == ATTN_DTYPE_F32 ? ATTN_DTYPE_BF16 : t; /* the operands' type */
    make(&p, B, H, Hkv, Sq, Sk, D, causal, st);
    size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * Sk * D;
    if (t != ATTN_DTYPE_F32) round_to(t, p.q, (int64_t)nq); /* q is a t tensor too */
    float *dout = tu_rand_array(nq, &lcg, 1.0f);
    void *q = p.q, *k = p.k, *v = p.v; /* float32: as given (BF16 mode rounds k and v as they enter) */
    float *kf = NULL, *vf = NULL;
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL;
    if (t != ATTN_DTYPE_F32) {
        q16 = malloc(nq * 2), k16 = malloc(nk * 2), v16 = malloc(nk * 2);
        for (size_t i = 0; i < nq; i++)
            q16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.q[i]) : attn_f32_to_bf16(p.q[i]);
        for (size_t i = 0; i < nk; i++) {
            k16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.k[i]) : attn_f32_to_bf16(p.k[i]);
            v16[i] = t == ATTN_DTYPE_F16 ? attn_f32_to_f16(p.v[i]) : attn_f32_to_bf16(p.v[i]);
        }
        q = q16, k = k16, v = v16;
    } else { /* float32 k, v off the bf16 grid: the mode rounds them (the oracle takes the rounded ones) */
        kf = malloc(nk * 4), vf = malloc(nk * 4);
        for (size_t i = 0; i < nk; i++) kf[i] = p.k[i] * (1.0f + 1e-3f), vf[i] = p.v[i] * (1.0f - 1e-3f);
        round_to(ATTN_DTYPE_BF16, kf, (int64_t)nk), round_to(ATTN_DTYPE_BF16, vf, (int64_t)nk);
        memcpy(p.k, kf, nk * 4), memcpy(p.v, vf, nk * 4);                             /* stored bf16 values ... */
        for (size_t i = 0; i < nk; i++) kf[i] *= 1.0f + 1e-4f, vf[i] *= 1.0f + 1e-4f; /* ... passed a hair off */
        k = kf, v = vf;
    }
    double *oq = malloc(nq * 8), *ok = malloc(nk * 8), *ov = malloc(nk * 8);
    double *yq = malloc(nq * 8), *yk = malloc(nk * 8), *yv = malloc(nk * 8);
    grads_oracle(&p, dout, oq, ok, ov);
    grads_yardstick(&p, st, st, dout, yq, yk, yv);
    float *out = malloc(nq * 4), *g[3], *g1[3], *gs[3], *rg[3], *rs[3]; /* rg, rs: the reference's mode, strict */
    for (int a = 0; a < 3; a++) {
        size_t n = a ? nk : nq;
        g[a] = malloc(n * 4), g1[a] = malloc(n * 4), gs[a] = malloc(n * 4), rg[a] = malloc(n * 4);
        rs[a] = malloc(n * 4);
    }
    attn_view vq = {q, H * Sq * D, Sq * D, D}, vk = {k, Hkv * Sk * D, Sk * D, D}, vv = {v, Hkv * Sk * D, Sk * D, D};
    attn_view vo = {out, H * Sq * D, Sq * D, D}, vdo = {dout, H * Sq * D, Sq * D, D};
    const char *tn = t == ATTN_DTYPE_F16 ? "f16" : t == ATTN_DTYPE_BF16 ? "bf16" : "float32 bf16-mode";
    for (int impl = 0; impl < 2; impl++) {
        attn_sdpa_desc d;
        desc_of(&p, &d, t == ATTN_DTYPE_F32 ? ATTN_MATH_BF16 : ATTN_MATH_DATA, impl ? ATTN_IMPL_FAST : ATTN_IMPL_REF);
        d.qkv_dtype = t;
        float *grads_out[3][3] = {{g[0], g[1], g[2]}, {g1[0], g1[1], g1[2]}, {gs[0], gs[1], gs[2]}};
        for (int run = 0; run < 3; run++) { /* the mode; the mode on 1 thread; strict */
            d.math = run == 2 ? ATTN_MATH_STRICT : t == ATTN_DTYPE_F32 ? ATTN_MATH_BF16 : ATTN_MATH_DATA;
            omp_set_num_threads(run == 1 ? 1 : 2);
            attn_view dq = {grads_out[run][0], H * Sq * D, Sq * D, D};
            attn_view dk = {grads_out[run][1], Hkv * Sk * D, Sk * D, D},
                      dv = {grads_out[run][2], Hkv * Sk * D, Sk * D, D};
            CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
            CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo, vdo, NULL, dq, dk, dv));
        }
        omp_set_num_threads(2);
        const char *gn[3] = {"dq", "dk", "dv"};
        double *orc[3] = {oq, ok, ov}, *yard[3] = {yq, yk, yv};
        int rounds = attn_math_rounds(t);
        for (int a = 0; a < 3; a++) {
            size_t n = a ? nk : nq;
            char what[96];
            snprintf(what, sizeof what, "backward %s %s Sq=%d causal=%d %s", tn, gn[a], Sq, causal,
                     impl ? "fast" : "ref");
            if (rounds || t != ATTN_DTYPE_F32) check_rule(what, g[a], orc[a], yard[a], n);
            if (impl) CHECK(!memcmp(g[a], g1[a], n * 4), "%s: 1 and 2 threads bitwise", what);
            if (rounds && impl) { /* the fused path rounds what the reference rounds: summed over the
                                   * elements it sits far closer to the reference's mode than the mode
                                   * to strict (only a P or dS on a tie's other side may differ; a
                                   * missing rounding would put it as far as strict) */
                double dfr = 0, dms = 0;
                for (size_t i = 0; i < n; i++)
                    dfr += fabs((double)g[a][i] - rg[a][i]), dms += fabs((double)rg[a][i] - rs[a][i]);
                if (getenv("TEST_MATH_VERBOSE")) printf("%s: |fused - ref| / |mode - strict| %.3f\n", what, dfr / dms);
                CHECK(dfr <= 0.5 * dms, "%s: summed |fused - reference| %.3g, |mode - strict| %.3g", what, dfr, dms);
            }
            if (!impl) memcpy(rg[a], g[a], n * 4), memcpy(rs[a], gs[a], n * 4);
            if (rounds)
                CHECK(memcmp(g[a], gs[a], n * 4) != 0, "%s: the mode changes the answer", what);
            else
                CHECK(!memcmp(g[a], gs[a], n * 4), "%s: a table without product kernels runs the mode as strict", what);
        }
    }
    for (int a = 0; a < 3; a++) free(g[a]), free(g1[a]), free(gs[a]), free(rg[a]), free(rs[a]);
    free(out), free(dout), free(oq), free(ok), free(ov), free(yq), free(yk), free(yv);
    free(q16), free(k16), free(v16), free(kf), free(vf);
    unmake(&p);
}

static void refused(void) {
    float buf[64] = {0};
    uint16_t h[64] = {0};
    attn_view v = {buf, 16, 16, 4}, v16 = {(float *)h, 16, 16, 4};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 4, 2, 2, 4, 4);
    d.math = (attn_math)3;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "an unknown math mode");
    d.math = (attn_math)-1;
    CHECK(attn_sdpa_forward(&d, v, v, v, v, NULL) == ATTN_E_INVALID, "a negative math mode");
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_dropout drop;
    CHECK_OK(attn_dropout_begin(&g, 0.5, 16, &drop));
    d.math = ATTN_MATH_DATA, d.dropout = &drop, d.qkv_dtype = ATTN_DTYPE_BF16;
    CHECK(attn_sdpa_forward(&d, v16, v16, v16, v, NULL) ==
              (attn_math_rounds(ATTN_DTYPE_BF16) ? ATTN_E_UNSUPPORTED : ATTN_OK),
          "dropout where the mode rounds P: refused (a strict table runs it)");
    d.qkv_dtype = ATTN_DTYPE_F32; /* float32 data: DATA is STRICT, dropout runs */
    CHECK_OK(attn_sdpa_forward(&d, v, v, v, v, NULL));
    attn_dropout_end(&drop);
}

/* the query quantization's codes and largest |x| without libm's calls or
 * branches (base/half.h attn_q8_code_of, attn_q8_amax): roundf's value
 * clamped to [-127, 127], fmaxf's; whole blocks against those */
static int8_t q8_code_ref(float r) {
    if (r != r) return 0;
    r = roundf(r);
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}
/* a q8_0 block as attn_q8_quantize's contract says, through roundf and fmaxf */
static void q8_block_ref(const float *x, unsigned char *o) {
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < ATTN_Q8_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i])), bad |= !isfinite(x[i]);
    bad |= !(amax <= 65504.0f * 127.0f);
    float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    uint16_t dh = bad ? (uint16_t)0x7e00 : attn_f32_to_f16(d);
    memcpy(o, &dh, 2);
    for (int i = 0; i < ATTN_Q8_BLOCK; i++) o[2 + i] = (unsigned char)(bad ? 0 : q8_code_ref(x[i] * id));
}
/* an int8 / int4 row as attn_qa_quantize's contract says, through libm's fminf, fmaxf and nearbyintf */
static void qa_row_ref(const float *x, int64_t n, int bits, unsigned char *o, float *par) {
    float lo = INFINITY, hi = -INFINITY;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(x[i]), lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    float qmax = (float)((1 << bits) - 1), scale = (hi - lo) / qmax;
    memset(o, 0, (size_t)(bits == 8 ? n : n / 2));
    if (bad || !isfinite(scale) || n == 0) {
        par[0] = par[1] = NAN;
        return;
    }
    par[0] = scale, par[1] = lo;
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float t = (x[i] - lo) * inv, q = t != t ? 0.0f : nearbyintf(t); /* x = lo, inv = inf: 0 inf, code 0 */
        int c = q > qmax ? (int)qmax : (int)q;
        if (bits == 8 || i < n / 2)
            o[i] = (unsigned char)c;
        else
            o[i - n / 2] = (unsigned char)(o[i - n / 2] | c << 4);
    }
}
/* attn_qa_quantize against it: random rows over scales 2^-150 .. 2^149 (ranges below 2^-128 and past float's),
 * zeros of both signs, ties, constant rows, a NaN or an infinity; int8 and int4, n 2 .. 130 */
static void qa_rows(void) {
    int bad = 0;
    for (int rep = 0; rep < 6000 && !bad; rep++) {
        int64_t n = 2 * (1 + rep % 65), bits = rep % 2 ? 4 : 8;
        float x[130], sc = ldexpf(1.0f, (int)(rep % 300) - 150), par[2], pr[2];
        for (int64_t i = 0; i < n; i++) {
            lcg = lcg * 1664525u + 1013904223u;
            x[i] = rep % 7 == 0 ? sc : sc * ((float)(int)(lcg >> 24) - 128.0f) / (rep % 3 ? 1.0f : 2.0f);
        }
        if (rep % 5 == 0) x[rep % n] = 0.0f, x[(rep + 1) % n] = -0.0f;
        if (rep % 101 == 0) x[rep % n] = rep % 2 ? NAN : -INFINITY;
        unsigned char got[130], want[130];
        attn_qa_quantize(x, n, (int)bits, got, par);
        qa_row_ref(x, n, (int)bits, want, pr);
        bad |= memcmp(got, want, (size_t)(bits == 8 ? n : n / 2)) != 0;
        bad |= !(par[0] == pr[0] || (par[0] != par[0] && pr[0] != pr[0]));
        bad |= !(par[1] == pr[1] || (par[1] != par[1] && pr[1] != pr[1]));
    }
    CHECK(!bad, "attn_qa_quantize: the codes and (scale, zero) of fminf, fmaxf and nearbyintf (int8, int4; scales "
                "2^-150 .. 2^149, zeros, ties, constant rows, NaN, inf)");
}
static void q8_rounding(void) {
    int bad = 0;
    for (int k = -130; k <= 130 && !bad; k++) /* ties, their neighbours and random fractions */
        for (int rep = 0; rep < 8; rep++) {
            float t = (float)k + 0.5f, x[5] = {t, nextafterf(t, 0.0f), nextafterf(t, 2e9f), (float)k, 0.0f};
            lcg = lcg * 1664525u + 1013904223u, x[4] = (float)k + (float)(lcg >> 8) / 16777216.0f - 0.5f;
            for (int e = 0; e < 5; e++)
                bad |= attn_q8_code_of(x[e]) != q8_code_ref(x[e]) || attn_q8_code_of(-x[e]) != q8_code_ref(-x[e]);
        }
    float big[7] = {127.5f, nextafterf(127.5f, 0.0f), 128.0f, 1e6f, 0x1p22f, nextafterf(0x1p30f, 0.0f), 0x1p-140f};
    for (int e = 0; e < 7; e++)
        bad |= attn_q8_code_of(big[e]) != q8_code_ref(big[e]) || attn_q8_code_of(-big[e]) != q8_code_ref(-big[e]);
    CHECK(!bad, "attn_q8_code_of is roundf (ties away from zero) clamped to +-127: ties, their neighbours, the "
                "clamp, up to 2^30");
    /* whole blocks: random scales (down to amax below 127 2^-128, where 1 / d overflows), zeros, ties, a NaN or
     * an infinity, values past the f16 scale's range */
    bad = 0;
    for (int rep = 0; rep < 4000 && !bad; rep++) {
        float x[ATTN_Q8_BLOCK], sc = ldexpf(1.0f, (int)(rep % 300) - 150);
        for (int i = 0; i < ATTN_Q8_BLOCK; i++) {
            lcg = lcg * 1664525u + 1013904223u;
            x[i] = sc * ((float)(int)(lcg >> 24) - 128.0f) / (rep % 3 ? 7.0f : 2.0f); /* ties: halves of 127 / amax */
        }
        if (rep % 17 == 0) x[rep % 32] = 0.0f;
        if (rep % 101 == 0) x[rep % 29] = rep % 2 ? NAN : -INFINITY;
        if (rep % 103 == 0) x[rep % 31] = 65504.0f * 128.0f;
        unsigned char got[ATTN_Q8_BYTES], want[ATTN_Q8_BYTES];
        attn_q8_quantize(x, ATTN_Q8_BLOCK, got);
        q8_block_ref(x, want);
        bad |= memcmp(got, want, sizeof got) != 0;
    }
    CHECK(!bad, "attn_q8_quantize: the blocks of roundf and fmaxf (scales 2^-150 .. 2^149, zeros, ties, NaN, inf)");
    float x[8] = {0.5f, -3.0f, NAN, 2.0f, -0.0f, -7.5f, 1.0f, 7.0f}, m;
    CHECK(attn_q8_amax(x, 8, &m) && m != m, "attn_q8_amax: a NaN flagged, the largest |x| NaN");
    x[2] = 0.25f;
    CHECK(!attn_q8_amax(x, 8, &m) && m == 7.5f, "attn_q8_amax: no NaN, the largest |x|");
    x[2] = -INFINITY;
    CHECK(attn_q8_amax(x, 8, &m) && m == INFINITY, "attn_q8_amax: an infinity flagged, the largest |x| inf");
    x[2] = 65504.0f * 127.0f, x[5] = -nextafterf(x[2], INFINITY);
    CHECK(attn_q8_amax(x, 8, &m) && m == -x[5], "attn_q8_amax: past the f16 scale's range flagged");
    x[5] = 0.0f;
    CHECK(!attn_q8_amax(x, 8, &m) && m == x[2], "attn_q8_amax: the f16 scale's largest range not flagged");
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    q8_rounding();
    qa_rows();
    omp_set_num_threads(2);
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < 2; c++) {
            views16(t ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16, 37, c); /* fused tiles */
            views16(t ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16, 3, c);  /* decode */
        }
    views32(40), views32(2);
    attn_dtype kinds[8] = {ATTN_DTYPE_F16,     ATTN_DTYPE_BF16,    ATTN_DTYPE_Q8_0,     ATTN_DTYPE_Q4_0,
                           ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    for (int t = 0; t < 8; t++)
        for (int m = 0; m < (t >= 6 ? 2 : 1); m++) /* fp8: DATA and BF16 */
            for (int page = 0; page <= 16; page += 16) {
                attn_math mode = m ? ATTN_MATH_BF16 : ATTN_MATH_DATA;
                cache(kinds[t], page, 1, 8, mode); /* one row a kv head (bf16: the float32 kernels on rounded q, P) */
                cache(kinds[t], page, 1, 2, mode); /* four (bf16: the bf16 kernels where the table has them) */
                cache(kinds[t], page, 4, 2, mode);
                cache(kinds[t], page, 4, 1, mode);  /* 32 rows a kv head: the block products (integer caches: not) */
                cache(kinds[t], page, 16, 1, mode); /* 128 rows */
                cache(kinds[t], page, 20, 2, mode); /* the gathered long-query path */
            }
    for (int page = 0; page <= 16; page += 16)
        for (int sc = 1; sc <= 3; sc += 2)
            for (int m = 0; m < 2; m++) {
                attn_math mode = m ? ATTN_MATH_BF16 : ATTN_MATH_DATA;
                fp8_p_rounded(ATTN_DTYPE_FP8_E4M3, page, (float)sc, mode);
                fp8_p_rounded(ATTN_DTYPE_FP8_E5M2, page, (float)sc, mode);
                if (sc == 1) fp8_huge_q(ATTN_DTYPE_FP8_E4M3, page, mode), fp8_huge_q(ATTN_DTYPE_FP8_E5M2, page, mode);
            }
    for (int c = 0; c < 2; c++) {
        grads(ATTN_DTYPE_F16, 37, c), grads(ATTN_DTYPE_BF16, 37, c), grads(ATTN_DTYPE_F32, 37, c);
        grads(ATTN_DTYPE_BF16, 3, c);
    }
    refused();
    return tu_finish("test_math");
}
