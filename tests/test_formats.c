/* The KV formats (issue 35; docs/SEMANTICS.md "KV formats") against float64
 * math written from their definitions, independent of the library's codecs:
 * FP8 e4m3fn / e5m2 values from their bit fields, encoding = the nearest
 * value (ties to an even code), saturation, NaN, every code round-tripped;
 * q4_0 as llama.cpp (a hand-worked block) and its error bound; LMDeploy's
 * int8 / int4 rows (nibble order, error bounds, constant rows exact, NaN
 * rows); then attention over caller pages in every format within the bound
 * the element bounds imply, against float64 attention on the rows before
 * storage. */
#include "testutil.h"
#include "base/storage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 3535u;

/* ---- FP8 ---- */
static double e4m3_value(int c) {
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v = e == 15 && m == 7 ? NAN : e == 0 ? m / 8.0 * pow(2, -6) : (1 + m / 8.0) * pow(2, e - 7);
    return s ? -v : v;
}

static double e5m2_value(int c) {
    int s = c >> 7, e = (c >> 2) & 31, m = c & 3;
    double v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? m / 4.0 * pow(2, -14) : (1 + m / 4.0) * pow(2, e - 15);
    return s ? -v : v;
}

/* the encoder's contract through libm (frexpf, ldexpf, nearbyintf), against the bit form of base/quant.h */
static uint8_t fp8_ref(float x, int man, int bias, float max, uint8_t nan_code) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (a != a) return (uint8_t)(sign | nan_code);
    int emin = 1 - bias, e;
    if (a > max) a = max;
    frexpf(a, &e);
    int q = (a < ldexpf(1.0f, emin) ? emin : e - 1) - man;
    float r = ldexpf(nearbyintf(ldexpf(a, -q)), q);
    if (r > max) r = max;
    if (r < ldexpf(1.0f, emin)) return (uint8_t)(sign | (uint8_t)ldexpf(r, man - emin));
    frexpf(r, &e);
    return (uint8_t)(sign | ((e - 1 + bias) << man) | ((int)ldexpf(r, man - (e - 1)) - (1 << man)));
}
static void fp8_bits(int e5) {
    uint8_t (*enc)(float) = e5 ? attn_f32_to_e5m2 : attn_f32_to_e4m3;
    int man = e5 ? 2 : 3, bias = e5 ? 15 : 7, bad = 0;
    float max = e5 ? 57344.0f : 448.0f;
    uint8_t nan_code = e5 ? 0x7e : 0x7f;
    for (uint32_t i = 0; i < 4000000 && !bad; i++) { /* bit patterns of every exponent, NaN and inf among them */
        uint32_t u = i * 0x9e3779b1u + (i >> 3);
        float x;
        memcpy(&x, &u, 4);
        bad |= enc(x) != fp8_ref(x, man, bias, max, nan_code);
    }
    for (int c = 0; c < 127 && !bad; c++) { /* each code's value, the midpoint to the next, and their neighbours */
        float v = e5 ? attn_e5m2_to_f32((uint8_t)c) : attn_e4m3_to_f32((uint8_t)c);
        float w = e5 ? attn_e5m2_to_f32((uint8_t)(c + 1)) : attn_e4m3_to_f32((uint8_t)(c + 1));
        float m = v + (w - v) / 2,
              x[6] = {v, nextafterf(v, 0.0f), nextafterf(v, 1e30f), m, nextafterf(m, 0.0f), nextafterf(m, 1e30f)};
        for (int e = 0; e < 6; e++)
            bad |= enc(x[e]) != fp8_ref(x[e], man, bias, max, nan_code) ||
                   enc(-x[e]) != fp8_ref(-x[e], man, bias, max, nan_code);
    }
    CHECK(!bad,
          "%s: the encoder's bits are libm's frexpf / ldexpf / nearbyintf form (4M bit patterns, every code's "
          "midpoints and neighbours)",
          e5 ? "e5m2" : "e4m3");
}

static void fp8(int e5) {
    const char *name = e5 ? "e5m2" : "e4m3";
    double (*value)(int) = e5 ? e5m2_value : e4m3_value;
    float (*dec)(uint8_t) = e5 ? attn_e5m2_to_f32 : attn_e4m3_to_f32;
    uint8_t (*enc)(float) = e5 ? attn_f32_to_e5m2 : attn_f32_to_e4m3;
    double max = e5 ? 57344.0 : 448.0;
    for (int c = 0; c < 256; c++) { /* every code: its value, and back */
        double v = value(c);
        float got = dec((uint8_t)c);
        if (isnan(v)) {
            CHECK(isnan(got) && isnan(dec(enc(got))), "%s code %d: NaN stays NaN", name, c);
            continue;
        }
        CHECK((double)got == v && !signbit(got) == !signbit(v), "%s code %d: %g, want %g", name, c, (double)got, v);
        if (isinf(v)) continue;
        CHECK(enc(got) == c, "%s code %d: round trip gives %d", name, c, enc(got));
    }
    CHECK(dec(enc(INFINITY)) == (float)max && dec(enc(-1e30f)) == -(float)max, "%s saturates to +-%g", name, max);
    /* random values across the range and the midpoints between neighbours */
    for (int i = 0; i < 200000; i++) {
        double x;
        if (i % 4 == 3) { /* a midpoint: ties to the even code */
            int c = tu_irand(&lcg, 0, e5 ? 0x7a : 0x7d);
            x = (value(c) + value(c + 1)) / 2;
        } else {
            x = ldexp(tu_frand(&lcg) + 1.5, tu_irand(&lcg, e5 ? -20 : -12, e5 ? 17 : 10));
        }
        x = i & 1 ? -x : x;
        uint8_t g = enc((float)x);
        double gv = value(g), best = INFINITY;
        int tie_even = 1;
        for (int c = 0; c < 256; c++) {
            double v = value(c);
            if (isnan(v) || isinf(v) || (!signbit(v) != !signbit(x) && v != 0)) continue;
            double dist = fabs(v - x);
            if (dist < best) best = dist;
        }
        if (fabs(x) >= max) {
            CHECK(fabs(gv) == max, "%s %g saturates, got %g", name, x, gv);
            continue;
        }
        if (fabs(gv - x) == best && i % 4 == 3) tie_even = (g & 1) == 0;
        CHECK(fabs(gv - x) == best, "%s %.9g encodes to %g, off by %g (nearest %g)", name, x, gv, fabs(gv - x), best);
        CHECK(tie_even, "%s midpoint %.9g: the even code, got %d", name, x, g);
    }
}

/* ---- the element bounds (docs/SEMANTICS.md "KV formats"): of every value
 * of a row x of n stored with fp8 scale s, the largest |x - stored| ---- */
static double row_bound(attn_dtype t, const float *x, int n, double s) {
    double amax = 0, lo = INFINITY, hi = -INFINITY, b = 0;
    for (int i = 0; i < n; i++) amax = fmax(amax, fabs(x[i])), lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    switch (t) {
    case ATTN_DTYPE_F32: return 0;
    case ATTN_DTYPE_F16: return amax * pow(2, -11) + pow(2, -25);
    case ATTN_DTYPE_BF16: return amax * pow(2, -8);
    case ATTN_DTYPE_FP8_E4M3: return amax * pow(2, -4) + s * pow(2, -10);
    case ATTN_DTYPE_FP8_E5M2: return amax * pow(2, -3) + s * pow(2, -17);
    case ATTN_DTYPE_KV_INT8: return (hi - lo) / 510 + 1e-6 * (fabs(hi) + fabs(lo));
    case ATTN_DTYPE_KV_INT4: return (hi - lo) / 30 + 1e-6 * (fabs(hi) + fabs(lo));
    case ATTN_DTYPE_Q8_0:
    case ATTN_DTYPE_Q4_0: /* per block of 32: the largest block's bound */
        for (int b0 = 0; b0 < n; b0 += 32) {
            double am = 0;
            for (int i = 0; i < 32; i++) am = fmax(am, fabs(x[b0 + i]));
            b = fmax(b, t == ATTN_DTYPE_Q8_0 ? am * (1.0 / 254 + pow(2, -11)) : am / 8 * (1 + pow(2, -8)));
        }
        return b;
    default: return NAN;
    }
}

static void roundtrip(attn_dtype t, const float *x, int n, double s, float *y, float *par) {
    unsigned char buf[1024];
    par[0] = (float)s, par[1] = 0;
    attn_st_store_row(t, x, n, buf, par);
    attn_st_load_row(t, buf, n, par, y);
}

/* every value of random rows of every format within its bound; q4_0's block
 * by hand; int4's nibbles; constant and NaN rows */
static void bounds(void) {
    static const attn_dtype all[9] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                      ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                                      ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
    float x[128], y[128], par[2];
    for (int ti = 0; ti < 9; ti++)
        for (int r = 0; r < 400; r++) {
            double amp = ldexp(1, tu_irand(&lcg, -6, 6)), s = ldexp(1, tu_irand(&lcg, -6, 2)) * 0.75;
            if (all[ti] == ATTN_DTYPE_FP8_E4M3)
                s = fmax(s, 1.5 * amp / 448); /* the caller's scale keeps x / s in range */
            for (int i = 0; i < 128; i++) x[i] = (float)(amp * tu_frand(&lcg) + (r & 1 ? amp / 2 : 0));
            roundtrip(all[ti], x, 128, s, y, par);
            double bound = row_bound(all[ti], x, 128, s), worst = 0;
            for (int i = 0; i < 128; i++) worst = fmax(worst, fabs((double)y[i] - x[i]));
            CHECK(worst <= bound, "type %d row %d: error %g past its bound %g", (int)all[ti], r, worst, bound);
        }
    /* q4_0 by hand: x = i - 16: max-magnitude value -16, d = 2; element i gets
     * floor((i - 16) / 2 + 8.5) clamped to 15 */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    unsigned char blk[18];
    attn_q4_quantize(x, 32, blk);
    uint16_t dh;
    memcpy(&dh, blk, 2);
    CHECK(attn_f16_to_f32(dh) == 2.0f, "q4_0 d = max / -8 = 2, got %g", (double)attn_f16_to_f32(dh));
    for (int i = 0; i < 32; i++) {
        int want = (int)floor((i - 16) / 2.0 + 8.5), code = i < 16 ? blk[2 + i] & 15 : blk[2 + i - 16] >> 4;
        want = want > 15 ? 15 : want;
        CHECK(code == want, "q4_0 element %d: code %d, want %d", i, code, want);
    }
    /* int4 nibbles: element d low, d + n/2 high; codes from (x - zero) / scale */
    for (int i = 0; i < 16; i++) x[i] = (float)i * 0.5f - 1.0f, x[i + 16] = (float)(15 - i) * 0.5f - 1.0f;
    unsigned char b4[16];
    attn_st_store_row(ATTN_DTYPE_KV_INT4, x, 32, b4, par);
    CHECK(par[0] == 0.5f && par[1] == -1.0f, "int4 (scale, zero) = (0.5, -1), got (%g, %g)", (double)par[0],
          (double)par[1]);
    for (int i = 0; i < 16; i++)
        CHECK((b4[i] & 15) == i && (b4[i] >> 4) == 15 - i, "int4 byte %d: %#x, want low %d high %d", i, b4[i], i,
              15 - i);
    for (int ti = 6; ti < 8; ti++) {
        for (int i = 0; i < 32; i++) x[i] = 0.3f;
        roundtrip(all[ti], x, 32, 1, y, par);
        CHECK(y[0] == 0.3f && y[31] == 0.3f && par[0] == 0.0f, "type %d: a constant row reads back exactly",
              (int)all[ti]);
        x[5] = NAN;
        roundtrip(all[ti], x, 32, 1, y, par);
        CHECK(isnan(y[0]) && isnan(y[31]), "type %d: a row holding NaN reads NaN", (int)all[ti]);
        x[5] = INFINITY;
        roundtrip(all[ti], x, 32, 1, y, par);
        CHECK(isnan(y[0]), "type %d: a row holding inf reads NaN", (int)all[ti]);
    }
    for (int i = 0; i < 32; i++) x[i] = 1.0f;
    x[3] = NAN;
    roundtrip(ATTN_DTYPE_Q4_0, x, 32, 1, y, par);
    CHECK(isnan(y[0]) && isnan(y[31]), "q4_0: a block holding NaN reads NaN");
    roundtrip(ATTN_DTYPE_FP8_E4M3, x, 32, 1, y, par);
    CHECK(isnan(y[3]) && y[0] == 1.0f, "e4m3: NaN stays in its element");
}

/* float64 attention of one query row over T keys */
static void attend64(const float *q, const float *k, const float *v, int T, int D, double scale, double *out) {
    double m = -INFINITY, l = 0, *s = malloc((size_t)T * sizeof *s);
    for (int j = 0; j < T; j++) {
        double acc = 0;
        for (int c = 0; c < D; c++) acc += (double)q[c] * k[(size_t)j * D + c];
        s[j] = acc * scale, m = fmax(m, s[j]);
    }
    for (int c = 0; c < D; c++) out[c] = 0;
    for (int j = 0; j < T; j++) {
        double p = exp(s[j] - m);
        l += p;
        for (int c = 0; c < D; c++) out[c] += p * v[(size_t)j * D + c];
    }
    for (int c = 0; c < D; c++) out[c] /= l;
    free(s);
}

/* attention over pages of each format against float64 on the rows before
 * storage: |out - out64| <= max_j bv_j + (e^(2 ds) - 1) max|v| + 1e-5, ds =
 * scale max_j sum_c |q_c| bk_j (bk_j, bv_j: the rows' element bounds) */
static void attention(attn_dtype t, attn_dtype vt) {
    enum { T = 300, D = 64, PS = 16, NP = (T + PS - 1) / PS };
    float *k = tu_rand_array((size_t)T * D, &lcg, 2.0f), *v = tu_rand_array((size_t)T * D, &lcg, 1.0f);
    float *q = tu_rand_array(D, &lcg, 1.0f), out[D], ks[1] = {0.01f}, vs[1] = {0.004f};
    void *kp = malloc((size_t)NP * PS * D * 4), *vp = malloc((size_t)NP * PS * D * 4);
    float *kpar = malloc((size_t)NP * PS * 2 * 4), *vpar = malloc((size_t)NP * PS * 2 * 4);
    int32_t indptr[2] = {0, NP}, indices[NP], last[1] = {T - (NP - 1) * PS};
    int64_t slots[T];
    for (int i = 0; i < NP; i++) indices[i] = i;
    for (int j = 0; j < T; j++) slots[j] = j;
    attn_paged_kv kv = {.dtype = t,
                        .v_dtype = vt,
                        .num_pages = NP,
                        .page_size = PS,
                        .Hkv = 1,
                        .D = D,
                        .Dv = D,
                        .k_pages = kp,
                        .v_pages = vp,
                        .kv_indptr = indptr,
                        .kv_indices = indices,
                        .kv_last_page_len = last,
                        .k_scale = ks,
                        .v_scale = vs,
                        .k_scale_len = 1,
                        .v_scale_len = 1,
                        .k_params = kpar,
                        .v_params = vpar};
    CHECK_OK(attn_paged_append(&kv, T, k, v, slots));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 1, 0, D, D);
    CHECK_OK(attn_paged_attention(&d, (attn_view){q, D, D, D}, &kv, NULL, (attn_view){out, D, D, D}, NULL));
    double ref[D], ds = 0, bv = 0, vmax = 0, q1 = 0, scale = 1 / sqrt((double)D), worst = 0;
    attend64(q, k, v, T, D, scale, ref);
    for (int c = 0; c < D; c++) q1 += fabs(q[c]);
    for (int j = 0; j < T; j++) {
        ds = fmax(ds, scale * q1 * row_bound(t, k + (size_t)j * D, D, ks[0]));
        bv = fmax(bv, row_bound(vt, v + (size_t)j * D, D, vs[0]));
    }
    for (int i = 0; i < T * D; i++) vmax = fmax(vmax, fabs(v[i]));
    double bound = bv + expm1(2 * ds) * vmax + 1e-5;
    for (int c = 0; c < D; c++) worst = fmax(worst, fabs(out[c] - ref[c]));
    CHECK(worst <= bound, "K type %d, V type %d: attention off float64 by %g, bound %g", (int)t, (int)vt, worst, bound);
    if (tu_checks % 7 == 0 || worst > bound)
        printf("attention K %d V %d: |out - float64| %.3g (bound %.3g)\n", (int)t, (int)vt, worst, bound);
    free(k), free(v), free(q), free(kp), free(vp), free(kpar), free(vpar);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    fp8(0);
    fp8(1);
    fp8_bits(0);
    fp8_bits(1);
    bounds();
    static const attn_dtype all[9] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                      ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                                      ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
    for (int a = 0; a < 9; a++)
        for (int b = 0; b < 9; b++) attention(all[a], all[b]);
    return tu_finish("test_formats");
}
