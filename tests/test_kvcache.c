/* The KV cache: appends in chunks of random sizes to sequences of different
 * lengths, contiguous and paged; attention over the cache (decode, Sq <= 16,
 * and longer query blocks, with and without a dense mask of the capacity's
 * width) against the reference on the same keys held in plain arrays; paged == contiguous (bitwise when the page size
 * is a multiple of the decode block); 1 vs 2 threads bitwise; errors leave the cache unchanged (capacity, exhausted
 * pool, bad arguments); trim and reset give pages back. */
#include "testutil.h"
#include "base/half.h"
#include "core/kv_src.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 99u;
static float frand(void) { return tu_frand(&lcg); }
static int irand(int lo, int hi) { return tu_irand(&lcg, lo, hi); }

/* the same tokens are appended to a contiguous cache, a paged cache and
 * plain (B, Hkv, T, D) arrays */
typedef struct world {
    int B, Hkv, T, D, Dv, ps;
    attn_dtype dt;
    attn_kv_cache *cont, *paged;
    float *k, *v; /* (B, Hkv, T, D|Dv) */
    int64_t len[4];
} world;

static void world_init(world *w, int B, int Hkv, int T, int D, int Dv, int ps, attn_dtype dt) {
    memset(w, 0, sizeof *w);
    w->B = B, w->Hkv = Hkv, w->T = T, w->D = D, w->Dv = Dv, w->ps = ps, w->dt = dt;
    attn_kv_cache_config c = {.batch = B, .kv_heads = Hkv, .capacity = T, .head_dim = D, .v_head_dim = Dv, .dtype = dt};
    CHECK_OK(attn_kv_cache_create(&c, &w->cont));
    c.page_size = ps;
    CHECK_OK(attn_kv_cache_create(&c, &w->paged));
    w->k = calloc((size_t)B * Hkv * T * D, 4);
    w->v = calloc((size_t)B * Hkv * T * Dv, 4);
}

static void world_free(world *w) {
    attn_kv_cache_free(w->cont);
    attn_kv_cache_free(w->paged);
    free(w->k), free(w->v);
}

/* append n[b] random tokens to every copy */
static void world_append(world *w, const int64_t *n) {
    int64_t nmax = 1;
    for (int b = 0; b < w->B; b++) nmax = n[b] > nmax ? n[b] : nmax;
    size_t nk = (size_t)w->B * w->Hkv * nmax * w->D, nv = (size_t)w->B * w->Hkv * nmax * w->Dv;
    float *k = malloc(nk * 4), *v = malloc(nv * 4);
    for (size_t i = 0; i < nk; i++) k[i] = frand() * 2;
    for (size_t i = 0; i < nv; i++) v[i] = frand();
    attn_view vk = {k, w->Hkv * nmax * w->D, nmax * w->D, w->D}, vv = {v, w->Hkv * nmax * w->Dv, nmax * w->Dv, w->Dv};
    CHECK_OK(attn_kv_cache_append(w->cont, n, vk, vv));
    CHECK_OK(attn_kv_cache_append(w->paged, n, vk, vv));
    for (int b = 0; b < w->B; b++) {
        /* the plain arrays hold what the cache holds: the values rounded to its
         * element type (read back; float32 caches must give the input bits) */
        for (int h = 0; h < w->Hkv; h++)
            for (int t = 0; t < n[b]; t++) {
                float *pk = w->k + (((size_t)b * w->Hkv + h) * w->T + w->len[b] + t) * w->D;
                float *pv = w->v + (((size_t)b * w->Hkv + h) * w->T + w->len[b] + t) * w->Dv;
                CHECK_OK(attn_kv_cache_read(w->cont, b, h, w->len[b] + t, pk, pv));
                if (w->dt == ATTN_DTYPE_F32)
                    CHECK(!memcmp(pk, k + (((size_t)b * w->Hkv + h) * nmax + t) * w->D, (size_t)w->D * 4),
                          "a float32 cache returns the appended bits");
            }
        w->len[b] += n[b];
        CHECK(attn_kv_cache_len(w->cont, b) == w->len[b] && attn_kv_cache_len(w->paged, b) == w->len[b],
              "lengths after append");
    }
    free(k), free(v);
}

/* attention of Sq queries per sequence over the cache, three ways; with
 * dmask, a dense mask of the capacity's width (B, 1, Sq, T), as a serving
 * loop keeps one buffer for every step: random where the keys exist, all
 * true past each sequence's length (those positions must never count) */
static void world_attend(world *w, int H, int Sq, int window, int softcap, int dmask, const char *label) {
    size_t nq = (size_t)w->B * H * Sq * w->D, no = (size_t)w->B * H * Sq * w->Dv, nl = (size_t)w->B * H * Sq;
    float *q = malloc(nq * 4), *oc = malloc(no * 4), *op = malloc(no * 4), *orf = malloc(no * 4), *o1 = malloc(no * 4);
    float *lc = malloc(nl * 4), *lp = malloc(nl * 4), *lr = malloc(nl * 4);
    for (size_t i = 0; i < nq; i++) q[i] = frand() * 2;
    attn_view vq = {q, H * Sq * w->D, Sq * w->D, w->D};
    attn_view vc = {oc, H * Sq * w->Dv, Sq * w->Dv, w->Dv}, vp = {op, H * Sq * w->Dv, Sq * w->Dv, w->Dv};
    attn_view vr = {orf, H * Sq * w->Dv, Sq * w->Dv, w->Dv}, v1 = {o1, H * Sq * w->Dv, Sq * w->Dv, w->Dv};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, w->B, H, Sq, 0, w->D, w->Dv);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (window) d.window = 1, d.window_left = window, d.window_right = 0;
    if (softcap) d.softcap = 7.5f;
    uint8_t *m = dmask ? malloc((size_t)w->B * Sq * w->T) : NULL;
    for (int b = 0; m && b < w->B; b++)
        for (int64_t e = 0; e < (int64_t)Sq * w->T; e++) m[b * Sq * w->T + e] = e % w->T >= w->len[b] || frand() < 0.6f;
    if (m) {
        int64_t ms[4] = {(int64_t)Sq * w->T, 0, w->T, 1};
        d.attn_mask = m, memcpy(d.attn_mask_strides, ms, sizeof ms);
    }
    CHECK_OK(attn_kv_cache_attend(w->cont, &d, vq, vc, lc));
    CHECK_OK(attn_kv_cache_attend(w->paged, &d, vq, vp, lp));
    /* the reference on plain arrays with the cache's lengths */
    attn_sdpa_desc r = d;
    r.Sk = w->T, r.Hkv = w->Hkv, r.seqlens_k = w->len, r.impl = ATTN_IMPL_REF;
    attn_view rk = {w->k, w->Hkv * w->T * w->D, w->T * w->D, w->D},
              rv = {w->v, w->Hkv * w->T * w->Dv, w->T * w->Dv, w->Dv};
    CHECK_OK(attn_sdpa_forward(&r, vq, rk, rv, vr, lr));
    char lab[160];
    snprintf(lab, sizeof lab, "%s Sq=%d contiguous vs reference", label, Sq);
    tu_allclose(lab, oc, orf, no, 1e-4, 1e-5);
    snprintf(lab, sizeof lab, "%s Sq=%d paged vs reference", label, Sq);
    tu_allclose(lab, op, orf, no, 1e-4, 1e-5);
    snprintf(lab, sizeof lab, "%s Sq=%d lse vs reference", label, Sq);
    tu_allclose(lab, lp, lr, nl, 1e-5, 1e-5);
    if (Sq <= 16 && w->ps % 128 == 0) {
        snprintf(lab, sizeof lab, "%s Sq=%d paged == contiguous", label, Sq);
        tu_equal(lab, op, oc, no);
    }
    /* decode is bitwise identical for 1 and 2 threads */
    omp_set_num_threads(1);
    CHECK_OK(attn_kv_cache_attend(w->paged, &d, vq, v1, NULL));
    omp_set_num_threads(2);
    snprintf(lab, sizeof lab, "%s Sq=%d paged 1 vs 2 threads", label, Sq);
    tu_equal(lab, o1, op, no);
    /* the cache's reference path agrees too */
    d.impl = ATTN_IMPL_REF;
    CHECK_OK(attn_kv_cache_attend(w->paged, &d, vq, v1, NULL));
    snprintf(lab, sizeof lab, "%s Sq=%d paged ref path", label, Sq);
    tu_allclose(lab, o1, orf, no, 1e-6, 1e-6);
    free(q), free(oc), free(op), free(orf), free(o1), free(lc), free(lp), free(lr), free(m);
}

static void scenario(int B, int Hkv, int G, int T, int D, int Dv, int ps, attn_dtype dt) {
    world w;
    world_init(&w, B, Hkv, T, D, Dv, ps, dt);
    char label[96];
    snprintf(label, sizeof label, "B%d Hkv%d G%d T%d D%d Dv%d page%d %s", B, Hkv, G, T, D, Dv, ps,
             dt == ATTN_DTYPE_F32    ? "f32"
             : dt == ATTN_DTYPE_F16  ? "f16"
             : dt == ATTN_DTYPE_Q8_0 ? "q8_0"
                                     : "bf16");
    /* chunked prefill of different lengths, then decode steps */
    for (int step = 0; step < 6; step++) {
        int64_t n[4] = {0, 0, 0, 0};
        for (int b = 0; b < B; b++) {
            int room = T - (int)w.len[b] - 8;
            n[b] = room > 0 ? irand(0, room < 90 ? room : 90) : 0;
        }
        world_append(&w, n);
        world_attend(&w, Hkv * G, irand(0, 1) ? 1 : irand(2, 40), step % 3 == 1 ? 17 : 0, step == 4, step % 3 == 2,
                     label);
    }
    for (int t = 0; t < 3; t++) {
        int64_t one[4] = {1, 1, 1, 1};
        world_append(&w, one);
        world_attend(&w, Hkv * G, 1, 0, 0, t == 1, label);
    }
    world_free(&w);
}

/* the 16-bit conversions through the cache: every f16 and bf16 value comes
 * back bit for bit, rounding is to nearest even, overflow is inf */
static void conversions(void) {
    attn_kv_cache *h = NULL, *bf = NULL;
    attn_kv_cache_config c = {
        .batch = 1, .kv_heads = 1, .capacity = 4, .head_dim = 8, .v_head_dim = 8, .dtype = ATTN_DTYPE_F16};
    CHECK_OK(attn_kv_cache_create(&c, &h));
    c.dtype = ATTN_DTYPE_BF16;
    CHECK_OK(attn_kv_cache_create(&c, &bf));
    float in[32] = {1.0f / 3.0f,     65504.0f,        65520.0f, -65519.0f, 0x1p-24f,    0x1p-25f, 0x1.8p-25f, 0x1p-14f,
                    1.0f + 0x1p-11f, 1.0f + 0x3p-11f, -0.0f,    INFINITY,  3.14159265f, 1e-8f,    -2.5f,      7.0f};
    /* IEEE half: 1/3 -> 0x3555; ties to even: 2^-25 -> 0, 1+2^-11 -> 1, 1+3*2^-11 -> 1+2^-9; 0.75*2^-24 -> 2^-24 */
    const float want_h[16] = {0.333251953125f, 65504.0f, INFINITY, -65504.0f, 0x1p-24f, 0.0f,  0x1p-24f, 0x1p-14f, 1.0f,
                              1.0f + 0x1p-9f,  -0.0f,    INFINITY, 3.140625f, 0.0f,     -2.5f, 7.0f};
    attn_view vk = {in, 8, 8, 8}, vv = {in + 8, 8, 8, 8};
    int64_t n[1] = {2};
    CHECK_OK(attn_kv_cache_append(h, n, vk, vv));
    CHECK_OK(attn_kv_cache_append(bf, n, vk, vv));
    float k[8], v[8];
    for (int t = 0; t < 2; t++) {
        CHECK_OK(attn_kv_cache_read(h, 0, 0, t, k, v));
        for (int i = 0; i < 8; i++)
            CHECK(k[i] == want_h[t * 8 + i] || (k[i] == 0 && want_h[t * 8 + i] == 0), "f16 of %.9g: got %.9g want %.9g",
                  (double)in[t * 8 + i], (double)k[i], (double)want_h[t * 8 + i]);
        CHECK_OK(attn_kv_cache_read(bf, 0, 0, t, k, v));
        /* bfloat16 keeps 8 bits of mantissa: 1/3 -> 0.333984375, 65520 -> 65536, pi -> 3.140625 */
        if (t == 0)
            CHECK(k[0] == 0.333984375f && k[2] == 65536.0f, "bf16 rounding: %.9g %.9g", (double)k[0], (double)k[2]);
    }
    attn_kv_cache_free(h), attn_kv_cache_free(bf);
    /* every 16-bit pattern survives the round trip (NaNs stay NaN) */
    int bad_h = 0, bad_b = 0;
    for (uint32_t p = 0; p < 65536; p++) {
        float fh = attn_f16_to_f32((uint16_t)p), fb = attn_bf16_to_f32((uint16_t)p);
        bad_h += isnan(fh) ? !isnan(attn_f16_to_f32(attn_f32_to_f16(fh))) : attn_f32_to_f16(fh) != p;
        bad_b += isnan(fb) ? !isnan(attn_bf16_to_f32(attn_f32_to_bf16(fb))) : attn_f32_to_bf16(fb) != p;
    }
    CHECK(bad_h == 0 && bad_b == 0, "16-bit round trips: %d f16 and %d bf16 patterns changed", bad_h, bad_b);
}

/* q8_0: the error bound per element, |x - d q| <= max|x| (1/254 + 2^-11)
 * per block of 32 (rounding to the int8 grid, plus the f16 rounding of d),
 * on random and peaked rows; and the decode error against float32 keys and
 * values on random data, printed for docs/SEMANTICS.md */
/* q8_0: the error bound per element, |x - d q| <= max|x| (1/254 + 2^-11)
 * per block of 32 (rounding to the int8 grid, plus the f16 rounding of d),
 * on random and peaked rows; and the decode error against float32 keys and
 * values (values in [-1, 1)) on random and on peaked keys, printed for
 * docs/SEMANTICS.md */
static double q8_case(int peaked, double *elem_err) {
    attn_kv_cache *c = NULL;
    attn_kv_cache_config cfg = {
        .batch = 1, .kv_heads = 1, .capacity = 256, .head_dim = 64, .v_head_dim = 64, .dtype = ATTN_DTYPE_Q8_0};
    CHECK_OK(attn_kv_cache_create(&cfg, &c));
    float *k = malloc(256 * 64 * 4), *v = malloc(256 * 64 * 4), back[64];
    for (int i = 0; i < 256 * 64; i++) {
        k[i] = tu_frand(&lcg) * (peaked && i % 64 == 5 ? 50.0f : 1.0f); /* one outlier per row */
        v[i] = tu_frand(&lcg);
    }
    attn_view vk = {k, 256 * 64, 64, 64}, vv = {v, 256 * 64, 64, 64};
    int64_t n[1] = {256};
    CHECK_OK(attn_kv_cache_append(c, n, vk, vv));
    double worst = 0.0;
    for (int j = 0; j < 256; j++) {
        CHECK_OK(attn_kv_cache_read(c, 0, 0, j, back, NULL));
        for (int b0 = 0; b0 < 64; b0 += 32) {
            double amax = 0.0;
            for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(k[j * 64 + b0 + i]));
            for (int i = 0; i < 32; i++)
                worst = fmax(worst, fabs((double)back[b0 + i] - k[j * 64 + b0 + i]) / (amax > 0 ? amax : 1.0));
        }
    }
    *elem_err = worst;
    float q[4 * 64], o8[4 * 64], o32[4 * 64];
    for (int i = 0; i < 4 * 64; i++) q[i] = tu_frand(&lcg);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 4, 1, 0, 64, 64);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {q, 4 * 64, 64, 64}, vo = {o8, 4 * 64, 64, 64};
    CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo, NULL));
    attn_sdpa_desc r = d;
    r.Sk = 256, r.Hkv = 1;
    attn_view rk = {k, 256 * 64, 64, 64}, rv = {v, 256 * 64, 64, 64}, ro = {o32, 4 * 64, 64, 64};
    CHECK_OK(attn_sdpa_forward(&r, vq, rk, rv, ro, NULL));
    double e = 0.0;
    for (int i = 0; i < 4 * 64; i++) e = fmax(e, fabs((double)o8[i] - o32[i]));
    free(k), free(v);
    attn_kv_cache_free(c);
    return e;
}

static void q8_error(void) {
    double er, ep, dr = q8_case(0, &er), dp = q8_case(1, &ep);
    printf("q8_0: element error <= %.5f (random) / %.5f (peaked) of the block max; decode output error %.2e "
           "(random keys) / %.2e (peaked keys), values in [-1, 1)\n",
           er, ep, dr, dp);
    CHECK(er <= 1.0 / 254.0 + 0x1p-11 && ep <= 1.0 / 254.0 + 0x1p-11, "q8_0 element error %.6f / %.6f over the bound",
          er, ep);
    CHECK(dr <= 0.01, "q8_0 decode error %.3g on random keys", dr);
    attn_kv_cache_config bad = {
        .batch = 1, .kv_heads = 1, .capacity = 8, .head_dim = 40, .v_head_dim = 40, .dtype = ATTN_DTYPE_Q8_0};
    attn_kv_cache *cb = NULL;
    CHECK(attn_kv_cache_create(&bad, &cb) == ATTN_E_SHAPE, "q8_0 needs head sizes that are multiples of 32");
}

static void errors(void) {
    attn_kv_cache *c = NULL;
    attn_kv_cache_config cfg = {.batch = 2,
                                .kv_heads = 1,
                                .capacity = 8,
                                .head_dim = 4,
                                .dtype = ATTN_DTYPE_F32,
                                .page_size = 4,
                                .num_pages = 3}; /* 3 pages of 4 tokens for 2 x 8 */
    CHECK(attn_kv_cache_create(NULL, &c) == ATTN_E_INVALID, "NULL config");
    attn_kv_cache_config bad = cfg;
    bad.capacity = 0;
    CHECK(attn_kv_cache_create(&bad, &c) == ATTN_E_SHAPE && c == NULL, "zero capacity");
    bad = cfg, bad.dtype = ATTN_DTYPE_U8;
    CHECK(attn_kv_cache_create(&bad, &c) == ATTN_E_UNSUPPORTED, "u8 storage");
    CHECK_OK(attn_kv_cache_create(&cfg, &c));
    float k[2 * 8 * 4], v[2 * 8 * 4], got[4];
    for (int i = 0; i < 64; i++) k[i] = (float)i, v[i] = (float)-i;
    attn_view vk = {k, 32, 32, 4}, vv = {v, 32, 32, 4};
    int64_t n[2] = {6, 1};
    CHECK_OK(attn_kv_cache_append(c, n, vk, vv)); /* 2 + 1 pages */
    CHECK(attn_kv_cache_free_pages(c) == 0, "pool used up: %lld", (long long)attn_kv_cache_free_pages(c));
    int64_t n2[2] = {0, 4}; /* sequence 1 needs a second page: none left */
    CHECK(attn_kv_cache_append(c, n2, vk, vv) == ATTN_E_NOMEM, "exhausted pool");
    CHECK(attn_kv_cache_len(c, 0) == 6 && attn_kv_cache_len(c, 1) == 1, "lengths unchanged after a failed append");
    int64_t n3[2] = {3, 0}; /* 6 + 3 > capacity 8 */
    CHECK(attn_kv_cache_append(c, n3, vk, vv) == ATTN_E_CONTEXT, "capacity");
    CHECK(attn_kv_cache_len(c, 0) == 6, "length unchanged after overflow");
    int64_t n4[2] = {-1, 0};
    CHECK(attn_kv_cache_append(c, n4, vk, vv) == ATTN_E_SHAPE, "negative count");
    CHECK_OK(attn_kv_cache_read(c, 0, 0, 5, got, NULL));
    CHECK(got[0] == 20.0f && got[3] == 23.0f, "read back key 5: %g %g", (double)got[0], (double)got[3]);
    CHECK(attn_kv_cache_read(c, 0, 0, 6, got, NULL) == ATTN_E_SHAPE, "read past the length");
    CHECK_OK(attn_kv_cache_trim(c, 0, 3)); /* frees the second page of sequence 0 */
    CHECK(attn_kv_cache_free_pages(c) == 1, "trim returns a page");
    CHECK(attn_kv_cache_trim(c, 0, 4) == ATTN_E_SHAPE, "trim cannot grow");
    CHECK_OK(attn_kv_cache_append(c, n2, vk, vv)); /* now fits */
    CHECK_OK(attn_kv_cache_read(c, 1, 0, 4, NULL, got));
    CHECK(got[0] == -32.0f - 12.0f, "value 4 of sequence 1 is row 3 of the second append: %g", (double)got[0]);
    CHECK_OK(attn_kv_cache_reset(c, -1));
    CHECK(attn_kv_cache_free_pages(c) == 3 && attn_kv_cache_len(c, 1) == 0, "reset returns every page");
    CHECK(attn_kv_cache_reset(c, 2) == ATTN_E_INVALID, "reset of a missing sequence");
    /* attend: dropout refused, wrong widths refused, empty cache gives zeros */
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 2, 1, 0, 4, 4);
    float q[2 * 2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 1, 1, 1, 1, 2, 2, 2, 2}, o[16], l[4];
    attn_view vq = {q, 8, 4, 4}, vo = {o, 8, 4, 4};
    CHECK_OK(attn_kv_cache_attend(c, &d, vq, vo, l));
    CHECK(o[0] == 0.0f && o[15] == 0.0f && l[0] == -INFINITY, "empty cache: zeros and lse -inf");
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    d.dropout = &drop;
    CHECK(attn_kv_cache_attend(c, &d, vq, vo, l) == ATTN_E_UNSUPPORTED, "dropout over a cache");
    d.dropout = NULL, d.D = 8;
    CHECK(attn_kv_cache_attend(c, &d, vq, vo, l) == ATTN_E_SHAPE, "head size differs from the cache's");
    d.D = 4, d.Hkv = 2;
    CHECK(attn_kv_cache_attend(c, &d, vq, vo, l) == ATTN_E_SHAPE, "Hkv differs from the cache's");
    attn_kv_cache_free(c);
    attn_kv_cache_free(NULL);
}

/* A one-sequence, one-head cache of T rows of K (type kt) and V (vt)
 * from k and v, their stored rows read back into kr and vr; NULL (a check
 * failed) if it cannot be made */
static attn_kv_cache *folded_cache(attn_dtype kt, attn_dtype vt, int T, int D, float *k, float *v, float *kr,
                                   float *vr) {
    attn_kv_cache_config c = {.batch = 1, .kv_heads = 1, .capacity = T, .head_dim = D, .dtype = kt, .v_dtype = vt};
    attn_kv_cache *kc = NULL;
    CHECK_OK(attn_kv_cache_create(&c, &kc));
    if (!kc) return NULL;
    int64_t n[1] = {T};
    attn_view ak = {k, T * D, T * D, D}, av = {v, T * D, T * D, D};
    CHECK_OK(attn_kv_cache_append(kc, n, ak, av));
    for (int j = 0; j < T; j++) CHECK_OK(attn_kv_cache_read(kc, 0, 0, j, kr + j * D, vr + j * D));
    return kc;
}

/* int8 / int4 keys with an infinite query element: the products folded over
 * the codes (scale (q . codes) + zero sum(q)) would give inf - inf = NaN;
 * the rows' own values give one +-inf term a score. With softcap the
 * scores are +-cap and the output finite; without, a +inf score makes the
 * row NaN (the NaN rule, docs/SEMANTICS.md). Against the reference on the
 * rows as stored; decode's row kernels (R 1) and block products (R 32). */
static void folded_special(void) {
    enum { T = 40, D = 64 };
    static float k[T * D], v[T * D], kr[T * D], vr[T * D];
    static float q[32 * D], out[32 * D], ref[32 * D];
    uint32_t s = 77;
    for (int i = 0; i < T * D; i++) k[i] = tu_frand(&s) * 1.5f, v[i] = tu_frand(&s);
    for (int t = 0; t < 2; t++) {
        attn_dtype dt = t ? ATTN_DTYPE_KV_INT4 : ATTN_DTYPE_KV_INT8;
        attn_kv_cache *kc = folded_cache(dt, ATTN_DTYPE_F32, T, D, k, v, kr, vr);
        if (!kc) continue;
        for (int G = 1; G <= 32; G += 31)
            for (int cap = 0; cap < 2; cap++)
                for (int sign = -1; sign <= 1; sign += 2) {
                    for (int i = 0; i < G * D; i++) q[i] = i % D == 3 ? sign * INFINITY : 0.0f;
                    attn_sdpa_desc d;
                    attn_sdpa_desc_init(&d, 1, G, 1, 0, D, D);
                    d.softcap = cap ? 20.0f : 0.0f;
                    attn_view vq = {q, G * D, D, D}, vo = {out, G * D, D, D};
                    CHECK_OK(attn_kv_cache_attend(kc, &d, vq, vo, NULL));
                    d.Sk = T, d.Hkv = 1, d.impl = ATTN_IMPL_REF;
                    attn_view rk = {kr, T * D, T * D, D}, rv = {vr, T * D, T * D, D}, ro = {ref, G * D, D, D};
                    CHECK_OK(attn_sdpa_forward(&d, vq, rk, rv, ro, NULL));
                    int nan_out = 0, nan_ref = 0;
                    for (int i = 0; i < G * D; i++) nan_out += isnan(out[i]), nan_ref += isnan(ref[i]);
                    char what[96];
                    snprintf(what, sizeof what, "%s keys, q[3] = %cinf, %d rows, softcap %d", t ? "int4" : "int8",
                             sign > 0 ? '+' : '-', G, cap ? 20 : 0);
                    CHECK(nan_out == nan_ref && nan_ref == (cap ? 0 : G * D), "%s: %d NaN, the reference %d", what,
                          nan_out, nan_ref);
                    if (cap) tu_allclose(what, out, ref, (size_t)G * D, 1e-5, 1e-6);
                }
        attn_kv_cache_free(kc);
    }
}

/* int8 / int4 values past the fold rule: rows 5..12 hold +-1e38 (both
 * signs in each row, alternating from row to row, so that every column's
 * values cancel in pairs). Folded, P's scale times the top code gives 2e38
 * a row and their zero points -1e38 a row: the sums overflow (inf - inf);
 * the rows' own values stay finite. The decode rows' kernels (R 1 and 4)
 * in each mode (the float32 P V and the integer one) must take the values,
 * as the reference on the rows as stored does. */
static void folded_values(void) {
    enum { T = 40, D = 64 };
    static float k[T * D], v[T * D], kr[T * D], vr[T * D], q[4 * D], out[4 * D], ref[4 * D];
    uint32_t s = 78;
    for (int j = 0; j < T; j++)
        for (int i = 0; i < D; i++) {
            k[j * D + i] = tu_frand(&s), v[j * D + i] = tu_frand(&s);
            if (j >= 5 && j < 13) v[j * D + i] = (i + j) % 2 ? 1e38f : -1e38f;
        }
    for (int i = 0; i < 4 * D; i++) q[i] = 0.0f; /* every key the same score */
    for (int t = 0; t < 2; t++) {
        attn_dtype dt = t ? ATTN_DTYPE_KV_INT4 : ATTN_DTYPE_KV_INT8;
        attn_kv_cache *kc = folded_cache(ATTN_DTYPE_F32, dt, T, D, k, v, kr, vr);
        if (!kc) continue;
        for (int G = 1; G <= 4; G += 3)
            for (int mode = 0; mode < 2; mode++) {
                attn_sdpa_desc d;
                attn_sdpa_desc_init(&d, 1, G, 1, 0, D, D);
                d.math = mode ? ATTN_MATH_DATA : ATTN_MATH_STRICT;
                attn_view vq = {q, G * D, D, D}, vo = {out, G * D, D, D};
                CHECK_OK(attn_kv_cache_attend(kc, &d, vq, vo, NULL));
                d.Sk = T, d.Hkv = 1, d.impl = ATTN_IMPL_REF, d.math = ATTN_MATH_STRICT;
                attn_view rk = {kr, T * D, T * D, D}, rv = {vr, T * D, T * D, D}, ro = {ref, G * D, D, D};
                CHECK_OK(attn_sdpa_forward(&d, vq, rk, rv, ro, NULL));
                int finite = 0;
                for (int i = 0; i < G * D; i++) finite += isfinite(out[i]) != 0;
                char what[96];
                snprintf(what, sizeof what, "%s values of +-1e38, %d rows, %s mode", t ? "int4" : "int8", G,
                         mode ? "data" : "strict");
                CHECK(finite == G * D, "%s: %d of %d outputs finite", what, finite, G * D);
                tu_allclose(what, out, ref, (size_t)G * D, 1e-3, 1e33); /* the +-1e38 pairs cancel to an ulp's order */
            }
        attn_kv_cache_free(kc);
    }
}

/* attn_kv_cache_regions (what `attn bench --decode --formats` reads as the
 * cache's own storage): K's and V's codes, then the int8 / int4 pairs, at the
 * bytes the cache holds (contiguous: B Hkv capacity rows; paged: the pool),
 * every byte readable (the sanitizer build reads them all) */
static void regions(void) {
    static const struct {
        attn_dtype k, v;
        int64_t ps, np;
        int n;
        size_t kb, vb;
    } cases[] = {
        /* B 2, Hkv 3, capacity 40, D 64, Dv 32: 240 rows, or paged 16 a page: 6 pages (or 5) of 48 rows */
        {ATTN_DTYPE_BF16, 0, 0, 0, 2, 240 * 128, 240 * 64},
        {ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4, 0, 0, 4, 240 * 64, 240 * 16},
        {ATTN_DTYPE_Q8_0, ATTN_DTYPE_FP8_E4M3, 16, 0, 2, 288 * 68, 288 * 32},
        {ATTN_DTYPE_KV_INT4, 0, 16, 5, 4, 240 * 32, 240 * 16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_kv_cache_config cfg = {.batch = 2,
                                    .kv_heads = 3,
                                    .capacity = 40,
                                    .head_dim = 64,
                                    .v_head_dim = 32,
                                    .dtype = cases[i].k,
                                    .v_dtype = cases[i].v,
                                    .page_size = cases[i].ps,
                                    .num_pages = cases[i].np};
        attn_kv_cache *c = NULL;
        CHECK(attn_kv_cache_create(&cfg, &c) == ATTN_OK, "regions case %zu: created", i);
        if (!c) continue;
        const void *p[4];
        size_t bytes[4];
        int n = attn_kv_cache_regions(c, p, bytes);
        CHECK(n == cases[i].n && bytes[0] == cases[i].kb && bytes[1] == cases[i].vb,
              "regions case %zu: %d regions of %zu, %zu bytes (want %d, %zu, %zu)", i, n, bytes[0], bytes[1],
              cases[i].n, cases[i].kb, cases[i].vb);
        for (int r = 2; r < n; r++)
            CHECK(bytes[r] == bytes[0] / (cases[i].k == ATTN_DTYPE_KV_INT8 ? 64 : 32) * 8,
                  "regions case %zu: pairs region %d of %zu bytes", i, r, bytes[r]);
        volatile unsigned sum = 0;
        for (int r = 0; r < n; r++)
            for (size_t b = 0; b < bytes[r]; b++) sum += ((const unsigned char *)p[r])[b];
        attn_kv_cache_free(c);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    omp_set_num_threads(2);
    for (int t = 0; t < 3; t++) {
        attn_dtype dt = t == 0 ? ATTN_DTYPE_F32 : t == 1 ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
        scenario(3, 2, 4, 300, 32, 32, 128, dt);  /* GQA, page = decode block */
        scenario(2, 1, 8, 700, 16, 24, 48, dt);   /* MQA, Dv != D, odd page size */
        scenario(4, 3, 1, 200, 40, 40, 128, dt);  /* MHA */
        scenario(1, 2, 2, 2500, 64, 64, 256, dt); /* one long sequence: several decode splits */
        scenario(2, 2, 2, 150, 13, 7, 64, dt);    /* head sizes that are not multiples of 8 */
    }
    scenario(3, 2, 4, 300, 32, 32, 64, ATTN_DTYPE_Q8_0); /* q8_0: head sizes multiples of 32 */
    scenario(2, 1, 8, 700, 64, 32, 48, ATTN_DTYPE_Q8_0);
    scenario(1, 2, 2, 2500, 128, 128, 256, ATTN_DTYPE_Q8_0);
    conversions();
    q8_error();
    errors();
    folded_special();
    folded_values();
    regions();
    return tu_finish("test_kvcache");
}
