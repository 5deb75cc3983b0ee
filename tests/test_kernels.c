/* The SIMD kernels' elementwise contract (src/kernels/kernels.h) on every
 * table this CPU can run: exp2_row's accuracy against double exp2, its
 * special values and clamps, the scale path, the returned sum, that the
 * vector lanes and the scalar tail give the same bits, and that the one-pass
 * backward kernels (exp2_dot_row, softmax_grad_row) give the bits of the
 * passes they replace. */
#include "base/half.h"
#include "kernels/kernels.h"
#include "testutil.h"
#include "base/quant.h"
#include "base/storage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double ulps(float got, double want) {
    /* relative error in units of 2^-23 (an ulp of 1) */
    return fabs((double)got - want) / (want * 0x1p-23);
}

static void test_exp2_accuracy(const attn_kernel_table *kt, double max_ulp) {
    enum { N = 1003 }; /* not a multiple of 8: the tail path runs too */
    static float x[N], y[N];
    double worst = 0.0, wt = 0.0;
    for (int rep = 0; rep < 400; rep++) {
        for (int j = 0; j < N; j++) /* t in [-126, 12]: every binade the drivers produce, incl. the lazy max */
            x[j] = -126.0f + 138.0f * (float)((rep * N + j) % 400000) / 400000.0f;
        float m = (rep % 3) ? 0.0f : -3.25f; /* t = x - m, exact here */
        float sum = kt->exp2_row(x, y, N, 1.0f, m);
        double ref_sum = 0.0;
        for (int j = 0; j < N; j++) {
            double t = (double)x[j] - m, want = exp2(t);
            ref_sum += want;
            if (t < -126.0 || t > 127.0) continue;
            double e = ulps(y[j], want);
            if (e > worst) worst = e, wt = t;
        }
        CHECK(fabs(sum - ref_sum) <= 1e-5 * ref_sum, "%s: sum %.9g vs %.9g", kt->name, sum, ref_sum);
    }
    printf("%s: exp2_row worst %.3f ulp\n", kt->name, worst);
    CHECK(worst <= max_ulp, "%s: exp2_row error %.2f ulp at t = %.9g (allowed %.1f)", kt->name, worst, wt, max_ulp);
}

static void test_exp2_special(const attn_kernel_table *kt) {
    float x[16] = {-INFINITY, 0.0f,  1.0f, -1.0f,  11.0f,  -127.0f, -200.0f, 5.5f,
                   3.0f,      -0.5f, 0.5f, 126.0f, -1e30f, 1e30f,   127.0f,  -126.0f};
    float y[16];
    kt->exp2_row(x, y, 16, 1.0f, 0.0f);
    CHECK(y[0] == 0.0f, "%s: 2^-inf = %g", kt->name, y[0]);
    CHECK(y[1] == 1.0f, "%s: 2^0 = %.9g (the row max must give exactly 1)", kt->name, y[1]);
    CHECK(y[2] == 2.0f && y[3] == 0.5f && y[4] == 2048.0f && y[8] == 8.0f, "%s: powers of two %.9g %.9g %.9g %.9g",
          kt->name, y[2], y[3], y[4], y[8]);
    CHECK(y[5] == 0.0f && y[6] == 0.0f && y[12] == 0.0f, "%s: t <= -127 gives 0: %g %g %g", kt->name, y[5], y[6],
          y[12]);
    CHECK(y[14] == 0x1p127f && y[13] == 0x1p127f, "%s: t >= 127 clamps to 2^127: %g %g", kt->name, y[14], y[13]);
    CHECK(y[15] == 0x1p-126f && y[11] == 0x1p126f, "%s: 2^-126 %g, 2^126 %g", kt->name, y[15], y[11]);
    float nan_in[9] = {0, 0, 0, NAN, 0, 0, 0, 0, NAN}, out[9];
    kt->exp2_row(nan_in, out, 9, 1.0f, 0.0f);
    CHECK(isnan(out[3]) && isnan(out[8]) && out[0] == 1.0f, "%s: NaN stays NaN (%g %g)", kt->name, out[3], out[8]);
    /* the scale path rounds the product first: 2^(fl(x * s) - m) */
    float xs[11], ys[11];
    for (int j = 0; j < 11; j++) xs[j] = 0.1f * (float)j - 0.7f;
    kt->exp2_row(xs, ys, 11, ATTN_LOG2E, -0.25f);
    for (int j = 0; j < 11; j++) {
        double want = exp2((double)(xs[j] * ATTN_LOG2E) + 0.25);
        CHECK(ulps(ys[j], want) <= 3.0, "%s: scaled element %d: %.9g vs %.9g", kt->name, j, ys[j], want);
    }
}

/* the same input gives the same bits in a vector lane and in the scalar tail */
static void test_exp2_lanes(const attn_kernel_table *kt) {
    float x[15], y[15];
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        float t = -127.5f + 140.0f * (float)i / 20000.0f;
        for (int j = 0; j < 15; j++) x[j] = t;
        kt->exp2_row(x, y, 15, 1.0f, 0.0f);
        for (int j = 1; j < 15; j++) bad += memcmp(&y[0], &y[j], sizeof(float)) != 0;
    }
    CHECK(bad == 0, "%s: %d lanes differ from lane 0", kt->name, bad);
}

/* the one-pass backward kernels give the bits of the passes they replace */
static void test_fused_rows(const attn_kernel_table *kt) {
    enum { N = 203 };
    static float x[N], w[N], y[N], p[N], g[N], g2[N];
    uint32_t seed = 7;
    int bad = 0;
    for (int n = 1; n <= N; n += (n < 20 ? 1 : 17)) {
        for (int j = 0; j < n; j++)
            x[j] = 8.0f * tu_frand(&seed) - (j % 5 == 0 ? INFINITY : 0.0f), w[j] = tu_frand(&seed);
        for (int sc = 0; sc < 2; sc++) {
            float scale = sc ? ATTN_LOG2E : 1.0f, m = 3.0f, dot;
            float sum = kt->exp2_dot_row(x, w, n, scale, m, &dot);
            float sum2 = kt->exp2_row(x, y, n, scale, m), dot2 = kt->dot_row(y, w, n);
            bad += memcmp(&sum, &sum2, sizeof sum) != 0 || memcmp(&dot, &dot2, sizeof dot) != 0;
            memcpy(g, w, sizeof w), memcpy(g2, w, sizeof w);
            kt->softmax_grad_row(x, p, g, n, scale, m, 0.37f, 0.11f, -0.125f);
            kt->scale_row(y, n, 0.37f);
            for (int j = 0; j < n; j++) g2[j] = y[j] * (g2[j] - 0.11f) * -0.125f;
            bad += memcmp(p, y, (size_t)n * sizeof(float)) != 0 || memcmp(g, g2, (size_t)n * sizeof(float)) != 0;
        }
    }
    CHECK(bad == 0, "%s: %d one-pass rows differ from the multi-pass form", kt->name, bad);
}

/* K/V rows of n elements stored as type dt (q8_0: n a multiple of 32) */
static void store_rows(attn_dtype dt, const float *x, int64_t rows, int64_t n, void *dst) {
    size_t rb = attn_storage_bytes(dt, n);
    for (int64_t r = 0; r < rows; r++) attn_storage_of(dt)->store(x + r * n, n, (unsigned char *)dst + (size_t)r * rb);
}

/* decode's qk_rows / pv_rows (every element kind, fp8 as codes) against the portable
 * kernels: the same sums to float32 rounding, nothing written outside S's
 * n columns or O's Dv columns (O rows are round_up(Dv, 8) apart) */
static void test_decode_rows(const attn_kernel_table *kt) {
    /* 1040: past the longest bf16 / fp8 query permuted for one row (QP_MAX); 48, 80: bf16 on 16 lanes, 32 values a
     * load and a last 16 in order */
    static const int64_t dims[] = {8, 16, 24, 32, 40, 48, 64, 72, 80, 96, 128, 136, 256, 1040};
    enum { RMAX = 9, NMAX = 67, DMAX = 1040, LD = 72 };
    static float Q[RMAX * DMAX], X[NMAX * DMAX], S1[RMAX * LD], S2[RMAX * LD], P[RMAX * LD];
    static float O1[RMAX * (DMAX + 8)], O2[RMAX * (DMAX + 8)];
    static unsigned char Kx[NMAX * DMAX * 4];
    uint32_t seed = 11;
    int bad = 0, cases = 0;
    static const attn_dtype kinds[] = {ATTN_DTYPE_F32,  ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                       ATTN_DTYPE_Q8_0, ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            attn_dtype kind = kinds[ki];
            int64_t D = dims[di];
            if (kind == ATTN_DTYPE_Q8_0 && D % 32) continue;
            for (int64_t R = 1; R <= RMAX; R += (R < 5 ? 1 : 4))
                for (int64_t n = 0; n <= NMAX; n += (n < 7 ? 1 : 20)) {
                    for (int64_t i = 0; i < R * D; i++) Q[i] = tu_frand(&seed);
                    for (int64_t i = 0; i < n * D; i++) X[i] = tu_frand(&seed);
                    for (int64_t i = 0; i < R * LD; i++) P[i] = 0.5f + 0.5f * tu_frand(&seed);
                    store_rows(kind, X, n, D, Kx);
                    for (int64_t i = 0; i < R * LD; i++) S1[i] = S2[i] = -7.0f;
                    int64_t ldo = (D + 7) / 8 * 8;
                    for (int64_t i = 0; i < RMAX * (DMAX + 8); i++) O1[i] = O2[i] = 0.25f;
                    if (kind == ATTN_DTYPE_F32) {
                        attn_kernels_generic.qk_rows(Q, R, D, (const float *)Kx, D, n, S1, LD, NULL, 0, 0);
                        kt->qk_rows(Q, R, D, (const float *)Kx, D, n, S2, LD, NULL, 0, 0);
                        attn_kernels_generic.pv_rows(P, LD, R, (const float *)Kx, D, n, D, O1, ldo, NULL, 0, 0);
                        kt->pv_rows(P, LD, R, (const float *)Kx, D, n, D, O2, ldo, NULL, 0, 0);
                    } else {
                        attn_kernels_generic.qk_rows_x(Q, R, D, Kx, D, n, S1, LD, NULL, 0, 0, kind);
                        kt->qk_rows_x(Q, R, D, Kx, D, n, S2, LD, Kx, D, D, kind);
                        attn_kernels_generic.pv_rows_x(P, LD, R, Kx, D, n, D, O1, ldo, NULL, 0, 0, kind);
                        kt->pv_rows_x(P, LD, R, Kx, D, n, D, O2, ldo, Kx, D, D, kind);
                    }
                    cases++;
                    int ok = 1;
                    for (int64_t i = 0; i < R * LD; i++) {
                        double tol = 1e-5 * (double)D + 1e-6;
                        ok &= (i % LD < n) ? fabs((double)S1[i] - S2[i]) <= tol : S2[i] == -7.0f;
                    }
                    for (int64_t i = 0; i < RMAX * (DMAX + 8); i++) {
                        double tol = 1e-5 * (double)(n + 1);
                        ok &= (i < R * ldo && i % ldo < D) ? fabs((double)O1[i] - O2[i]) <= tol : O2[i] == 0.25f;
                    }
                    if (!ok && bad++ < 5)
                        fprintf(stderr, "%s: decode rows differ: %s D %lld R %lld n %lld\n", kt->name,
                                attn_storage_of(kind)->name, (long long)D, (long long)R, (long long)n);
                }
        }
    CHECK(bad == 0, "%s: %d of %d decode row cases differ from the portable kernels", kt->name, bad, cases);
}

/* round_row: every value rounded to f16 / bf16 bit for bit as base/half.h
 * rounds it (ties to even, overflow to inf, subnormals, NaN stays NaN), at
 * every length (vector bodies and tails), and the sum of the rounded values
 * in lanes of 8 then pairwise */
static void test_round_row(const attn_kernel_table *kt) {
    float x[67], y[67];
    uint32_t seed = 5u;
    for (int t = 0; t < 2; t++) {
        attn_dtype dt = t ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F16;
        for (int n = 0; n <= 67; n += n < 20 ? 1 : 23) {
            for (int i = 0; i < n; i++) x[i] = tu_frand(&seed) * 4.0f;
            /* halfway cases, huge, tiny, special values */
            float special[] = {1.0f + 1.0f / 2048,
                               1.0f + 3.0f / 2048,
                               1.0f + 1.0f / 256,
                               65520.0f,
                               1e30f,
                               3e-8f,
                               1e-40f,
                               -0.0f,
                               INFINITY,
                               NAN};
            for (int i = 0; i < n && i < 10; i++) x[(i * 7) % n] = special[i];
            memcpy(y, x, sizeof x);
            float sum = kt->round_row(y, n, dt);
            attn_st_round(dt, x, n);
            int same = 1;
            double want = 0.0;
            for (int i = 0; i < n; i++) {
                same &= (isnan(x[i]) && isnan(y[i])) || !memcmp(&x[i], &y[i], 4);
                want += x[i];
            }
            CHECK(same, "%s round_row %s n=%d: the values base/half.h gives", kt->name, t ? "bf16" : "f16", n);
            /* exp2_round_row: exp2_row's values rounded alike, in one pass */
            float e[67], er[67], xs[67];
            for (int i = 0; i < n; i++) xs[i] = tu_frand(&seed) * 15.0f; /* y up to 2^7.5: finite in f16 */
            kt->exp2_row(xs, e, n, 0.7f, 3.0f);
            float s2 = kt->exp2_round_row(xs, er, n, 0.7f, 3.0f, dt);
            attn_st_round(dt, e, n);
            double w2 = 0.0;
            for (int i = 0; i < n; i++) w2 += e[i];
            CHECK(!memcmp(e, er, (size_t)n * 4) && fabs(s2 - w2) <= 1e-6 * w2 + 1e-30,
                  "%s exp2_round_row %s n=%d: exp2_row's values rounded (sum %g, want %g)", kt->name,
                  t ? "bf16" : "f16", n, (double)s2, w2);
            CHECK(isnan(want)   ? isnan(sum)
                  : isinf(want) ? sum == (float)want
                                : fabs(sum - want) <= 1e-6 * fabs(want) + 1e-30,
                  "%s round_row %s n=%d: sum %g, want %g", kt->name, t ? "bf16" : "f16", n, (double)sum, want);
        }
    }
}

/* exp2_store_row and softmax_grad_store_row: the values and sums of the
 * passes they fuse (exp2_row / exp2_round_row, softmax_grad_row, rounding
 * as base/half.h, the storage's store), bit for bit, for every rounding rt
 * and written type st (16-bit: st = rt; F32), every length (bodies, tails),
 * with -inf (masked), NaN and huge scores in the rows */
static void test_store_rows(const attn_kernel_table *kt) {
    enum { N = 150 };
    static float x[N], g[N], y[N], p[N], q[N], yf[N], pf[N], qf[N];
    static uint16_t y16[N + 1], p16[N + 1], q16[N + 1], w16[N];
    uint32_t seed = 17u;
    int bad = 0;
    attn_dtype rts[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int n = 0; n <= N; n += n < 40 ? 1 : 37)
        for (int ri = 0; ri < 3; ri++)
            for (int sc = 0; sc < 2; sc++) {
                attn_dtype rt = rts[ri];
                float scale = sc ? 0.7f : 1.0f, m = 3.0f;
                for (int j = 0; j < n; j++) {
                    x[j] = tu_frand(&seed) * 12.0f, g[j] = tu_frand(&seed);
                    if (j % 7 == 3) x[j] = -INFINITY;
                }
                if (n > 5) x[5] = NAN, x[n - 1] = 1e30f;
                /* the multi-pass form */
                float want =
                    rt == ATTN_DTYPE_F32 ? kt->exp2_row(x, y, n, scale, m) : kt->exp2_round_row(x, y, n, scale, m, rt);
                memcpy(q, g, sizeof g);
                kt->softmax_grad_row(x, p, q, n, scale, m, 0.37f, 0.11f, -0.125f);
                if (rt != ATTN_DTYPE_F32) attn_st_round(rt, p, n), attn_st_round(rt, q, n);
                /* float32 written */
                float got = kt->exp2_store_row(x, n, scale, m, rt, ATTN_DTYPE_F32, yf);
                kt->softmax_grad_store_row(x, g, n, scale, m, 0.37f, 0.11f, -0.125f, rt, ATTN_DTYPE_F32, pf, qf);
                bad += memcmp(&got, &want, 4) != 0 && !(isnan(got) && isnan(want));
                for (int j = 0; j < n; j++) {
                    bad += memcmp(&yf[j], &y[j], 4) != 0 && !(isnan(yf[j]) && isnan(y[j]));
                    bad += memcmp(&pf[j], &p[j], 4) != 0 && !(isnan(pf[j]) && isnan(p[j]));
                    bad += memcmp(&qf[j], &q[j], 4) != 0 && !(isnan(qf[j]) && isnan(q[j]));
                }
                /* store_row: x rounded and written, the storage's store of the rounded values */
                for (int j = 0; j < n; j++) q[j] = g[j] * 300.0f, p[j] = q[j];
                if (n > 3) p[3] = q[3] = NAN, p[2] = q[2] = 1e30f;
                if (rt != ATTN_DTYPE_F32) attn_st_round(rt, p, n);
                kt->store_row(q, n, rt, ATTN_DTYPE_F32, pf);
                for (int j = 0; j < n; j++) bad += memcmp(&pf[j], &p[j], 4) != 0 && !(isnan(pf[j]) && isnan(p[j]));
                if (rt == ATTN_DTYPE_F32) continue;
                y16[n] = 0xbeef;
                kt->store_row(q, n, rt, rt, y16);
                attn_storage_of(rt)->store(p, n, w16);
                bad += memcmp(w16, y16, (size_t)n * 2) != 0 || y16[n] != 0xbeef;
                kt->store_row(q, n, ATTN_DTYPE_F32, rt, y16); /* unrounded values: st's own rounding */
                attn_storage_of(rt)->store(q, n, w16);
                bad += memcmp(w16, y16, (size_t)n * 2) != 0 || y16[n] != 0xbeef;
                memcpy(q, g, sizeof g);
                kt->softmax_grad_row(x, p, q, n, scale, m, 0.37f, 0.11f, -0.125f);
                attn_st_round(rt, p, n), attn_st_round(rt, q, n);
                /* 16-bit written: the storage's store of the rounded values, nothing past n */
                y16[n] = p16[n] = q16[n] = 0xbeef;
                got = kt->exp2_store_row(x, n, scale, m, rt, rt, y16);
                kt->softmax_grad_store_row(x, g, n, scale, m, 0.37f, 0.11f, -0.125f, rt, rt, p16, q16);
                bad += memcmp(&got, &want, 4) != 0 && !(isnan(got) && isnan(want));
                bad += y16[n] != 0xbeef || p16[n] != 0xbeef || q16[n] != 0xbeef;
                attn_storage_of(rt)->store(y, n, w16);
                bad += memcmp(w16, y16, (size_t)n * 2) != 0;
                attn_storage_of(rt)->store(p, n, w16);
                bad += memcmp(w16, p16, (size_t)n * 2) != 0;
                attn_storage_of(rt)->store(q, n, w16);
                bad += memcmp(w16, q16, (size_t)n * 2) != 0;
            }
    CHECK(bad == 0, "%s: %d values of the store passes differ from the multi-pass form", kt->name, bad);
}

/* the integer value of key element e of a row of type kt as qk_rows_q8
 * multiplies it (q8_0: the int8; q4_0: code - 8; int8: code - 128; int4:
 * the code), and its block's scale (1 for int8 / int4) */
static int key_int(const unsigned char *k, int D, int e, attn_dtype kt, double *dk) {
    *dk = 1.0;
    if (kt == ATTN_DTYPE_Q8_0 || kt == ATTN_DTYPE_Q4_0) {
        const unsigned char *blk = k + (e / 32) * (kt == ATTN_DTYPE_Q8_0 ? ATTN_Q8_BYTES : ATTN_Q4_BYTES);
        *dk = attn_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
        int c = e % 32;
        return kt == ATTN_DTYPE_Q8_0 ? (int8_t)blk[2 + c] : (c < 16 ? blk[2 + c] & 15 : blk[2 + c - 16] >> 4) - 8;
    }
    if (kt == ATTN_DTYPE_KV_INT8) return (int)k[e] - 128;
    return e < D / 2 ? k[e] & 15 : k[e - D / 2] >> 4;
}

/* qk_rows_q8: R q8_0 query rows against n key rows of type kt (R 1..13:
 * one to four row groups of every size, eight rows a pass and the rest; D = 128 and 1088 = 34 blocks: the
 * rows' scales in two chunks; q8_0 / q4_0 also 1-3, 9 and 33 blocks; int4 needs D % 64 = 0: 128 and 1152) equal
 * the per-block int32 dot of the q8_0 values and K's integers times the
 * scales, summed in double, to float32 rounding (1e-6 of the sum of the
 * products' magnitudes: kernels that scale partial sums of a block round
 * each, and partials may cancel); a NaN block scale gives NaN (q8_0, q4_0) */
static void test_qk_q8_d(const attn_kernel_table *kt, int D, attn_dtype ktype) {
    enum { NK = 37, NR = 13, LDS = 40 }; /* keys: 4-key steps and 16-key groups with tails */
    uint32_t seed = 9u;
    size_t qr = attn_q8_row_bytes(D), kr = attn_storage_bytes(ktype, D);
    unsigned char *Q = malloc(NR * qr), *K = malloc(NK * kr);
    float *x = malloc((size_t)D * sizeof *x), S[NR * LDS], par[2];
    for (int r = 0; r < NR; r++) {
        for (int c = 0; c < D; c++) x[c] = tu_frand(&seed) * (r + 1);
        for (int c = 0; r < 2 && c < 32; c++) x[c] = r ? -1.0f : 1.0f;  /* codes of +-127: the largest dots */
        if (ktype == ATTN_DTYPE_KV_INT8 || ktype == ATTN_DTYPE_KV_INT4) /* one scale a row (Q8_ROW) */
            attn_q8_quantize_row(x, D, Q + r * qr);
        else
            attn_q8_quantize(x, D, Q + r * qr);
    }
    for (int j = 0; j < NK; j++) {
        for (int c = 0; c < D; c++) x[c] = tu_frand(&seed) * 3.0f;
        for (int c = 0; j == 3 && c < 32; c++) x[c] = c ? 7.0f : -8.0f; /* q4_0: codes 15 after a 0 */
        if (j == 5 && D > 40 && (ktype == ATTN_DTYPE_Q8_0 || ktype == ATTN_DTYPE_Q4_0))
            x[40] = NAN; /* a NaN block scale */
        if (ktype == ATTN_DTYPE_KV_INT8 || ktype == ATTN_DTYPE_KV_INT4)
            attn_qa_quantize(x, D, ktype == ATTN_DTYPE_KV_INT8 ? 8 : 4, K + j * kr, par);
        else
            attn_storage_of(ktype)->store(x, D, K + j * kr);
    }
    for (int R = 1; R <= NR; R++)
        for (int n = 1; n <= NK; n += 6) {
            kt->qk_rows_q8(Q, R, D, K, D, n, S, LDS, NULL, 0, 0, ktype);
            for (int r = 0; r < R; r++)
                for (int j = 0; j < n; j++) {
                    double want = 0.0, mag = 0.0;
                    for (int b = 0; b < D / 32; b++) {
                        const unsigned char *qb = Q + r * qr + b * ATTN_Q8_BYTES;
                        long dot = 0, adot = 0;
                        double dk = 1.0;
                        for (int c = 0; c < 32; c++) {
                            long p = (long)(int8_t)qb[2 + c] * key_int(K + j * kr, D, b * 32 + c, ktype, &dk);
                            dot += p, adot += labs(p);
                        }
                        double dqk = (double)attn_f16_to_f32((uint16_t)(qb[0] | qb[1] << 8)) * dk;
                        want += (double)dot * dqk, mag += (double)adot * fabs(dqk);
                    }
                    float got = S[r * LDS + j];
                    CHECK(isnan(want) ? isnan(got) : fabs(got - want) <= 1e-6 * mag + 1e-6,
                          "%s qk_rows_q8 %s D=%d R=%d n=%d [%d][%d]: %.9g, want %.9g (mag %g)", kt->name,
                          attn_storage_of(ktype)->name, D, R, n, r, j, (double)got, want, mag);
                }
        }
    free(Q), free(K), free(x);
}

static void test_qk_q8(const attn_kernel_table *kt) {
    attn_dtype types[4] = {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0, ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4};
    for (int t = 0; t < 4; t++) {
        test_qk_q8_d(kt, 128, types[t]);
        test_qk_q8_d(kt, types[t] == ATTN_DTYPE_KV_INT4 ? 1152 : 1088, types[t]);
        /* an odd block count (the 512-bit pairs' tail); int4's halves of 96:
         * a pair of blocks across them */
        test_qk_q8_d(kt, types[t] == ATTN_DTYPE_KV_INT4 ? 192 : 96, types[t]);
        if (types[t] == ATTN_DTYPE_Q8_0 || types[t] == ATTN_DTYPE_Q4_0) { /* 33 blocks: a chunk of one */
            test_qk_q8_d(kt, 1056, types[t]);
            test_qk_q8_d(kt, 288, types[t]); /* 9 blocks: two groups of four and one */
            test_qk_q8_d(kt, 64, types[t]);  /* 2 and 1 blocks: a partial group only */
            test_qk_q8_d(kt, 32, types[t]);
        } else { /* int8 / int4 at three or more rows: each key's row in 64-byte groups at D 64, 128 and 256 (int4
                  * at 64: a group of 32 bytes), the chunks broadcast at the others up to the 1024 values those
                  * kernels take (int4's integer products: D a multiple of 64, base/sem.h) */
            test_qk_q8_d(kt, 256, types[t]);
            test_qk_q8_d(kt, 1024, types[t]);
            test_qk_q8_d(kt, 320, types[t]);
            test_qk_q8_d(kt, 64, types[t]);
            if (types[t] == ATTN_DTYPE_KV_INT8) test_qk_q8_d(kt, 32, types[t]);
        }
    }
}

/* pv_rows_x on the formats decode reads as codes or block values (fp8 and
 * int8 / int4 codes, q4_0 values): O += P V against float64 sums of the
 * values attn_st_load_row gives (scale 1, zero 0: the codes), at 1..9 rows,
 * Dv 32 .. 288 (int4: the high nibbles from Dv / 2 on), every column
 * written and nothing past round_up(Dv, 8) */
static void test_pv_codes(const attn_kernel_table *kt) {
    static const attn_dtype fmts[5] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,
                                       ATTN_DTYPE_Q4_0};
    static const int dvs[3] = {32, 128, 288};
    enum { NM = 150, RM = 9, DM = 288 };
    uint32_t st = 21u;
    unsigned char *V = malloc((size_t)NM * DM * 2);
    float *P = malloc(RM * NM * sizeof(float)), *O = malloc(RM * (DM + 8) * sizeof(float)), row[DM],
          par[2] = {1.0f, 0.0f};
    for (int f = 0; f < 5; f++)
        for (int di = 0; di < 3; di++)
            for (int R = 1; R <= RM; R += 4)
                for (int N = 37; N <= NM; N += NM - 37) { /* 150: past a chunk of 128 keys (e4m3's P times 256) */
                    attn_dtype t = fmts[f];
                    int Dv = dvs[di], ldv = Dv + 32;
                    size_t rb = attn_storage_bytes(t, ldv);
                    for (size_t i = 0; i < (size_t)N * rb; i++) V[i] = (unsigned char)tu_irand(&st, 0, 255);
                    for (int j = 0; j < N; j++) /* finite values: no NaN codes, f16 scales in [0.5, 1) */
                        for (int c = 0; c < Dv; c++) {
                            unsigned char *r = V + j * rb;
                            if (t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2) r[c] &= 0xbf;
                            if (t == ATTN_DTYPE_Q4_0 && c % 32 == 0) {
                                uint16_t dh = attn_f32_to_f16(0.5f + 0.5f * (float)tu_irand(&st, 0, 99) / 100.0f);
                                memcpy(r + (c / 32) * ATTN_Q4_BYTES, &dh, 2);
                            }
                        }
                    for (int i = 0; i < R * N; i++) P[i] = tu_frand(&st);
                    for (int i = 0; i < RM * (DM + 8); i++) O[i] = 0.5f;
                    int ldo = (Dv + 7) / 8 * 8;
                    kt->pv_rows_x(P, N, R, V, ldv, N, Dv, O, ldo, NULL, 0, 0, t);
                    int bad = 0;
                    for (int r = 0; r < R; r++) {
                        double want[DM] = {0}, mag[DM] = {0};
                        for (int j = 0; j < N; j++) {
                            attn_st_load_row(t, V + j * rb, Dv, par, row);
                            for (int c = 0; c < Dv; c++)
                                want[c] += (double)P[r * N + j] * row[c], mag[c] += fabs((double)P[r * N + j] * row[c]);
                        }
                        for (int c = 0; c < ldo; c++) {
                            float got = O[r * ldo + c];
                            bad += c < Dv ? !(fabs(got - 0.5 - want[c]) <= 1e-5 * (mag[c] + 1.0)) : got != 0.5f;
                        }
                    }
                    for (int i = R * ldo; i < RM * (DM + 8); i++) bad += O[i] != 0.5f;
                    CHECK(!bad, "%s pv_rows_x %s Dv=%d R=%d n=%d: %d values wrong", kt->name, attn_storage_of(t)->name,
                          Dv, R, N, bad);
                }
    free(V), free(P), free(O);
}

/* Every fp8 code (NaN included) through the decode kernels' conversions:
 * qk_rows_x (key j holds code j in column j % D, zeros elsewhere, the query
 * all ones: S[r][j] is code j's value, NaN for the NaN codes; the bodies
 * for 1..5 rows, D 128 and 40: whole vectors and a tail), pv_rows_x (one key
 * holding every code, P 1: O = 0 + the values; rows 1..5, the e4m3 P-times-256
 * passes and the plain ones) and kv_rows, against attn_st_load_row */
static int fp8_same(float got, float want) { return isnan(want) ? isnan(got) : got == want; }
/* the 256 codes of fp8 type t in order and their values (scale 1) */
static void fp8_all_codes(attn_dtype t, unsigned char codes[256], float want[256]) {
    const float par[2] = {1.0f, 0.0f};
    for (int j = 0; j < 256; j++) codes[j] = (unsigned char)j;
    attn_st_load_row(t, codes, 256, par, want);
}
static void test_fp8_codes(const attn_kernel_table *kt) {
    static const attn_dtype fmts[2] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    static const int dims[2] = {128, 40};
    enum { N = 256, RM = 5 };
    static unsigned char K[N * 128];
    static float Q[RM * 128], S[RM * N], O[RM * N], P[RM], want[N], F[N];
    const float par[2] = {1.0f, 0.0f};
    for (int f = 0; f < 2; f++) {
        attn_dtype t = fmts[f];
        unsigned char codes[N];
        fp8_all_codes(t, codes, want);
        int bad = 0;
        for (int di = 0; di < 2; di++) {
            int D = dims[di];
            memset(K, 0, sizeof K);
            for (int j = 0; j < N; j++) K[j * D + j % D] = (unsigned char)j;
            for (int i = 0; i < RM * D; i++) Q[i] = 1.0f;
            for (int R = 1; R <= RM; R++) {
                kt->qk_rows_x(Q, R, D, K, D, N, S, N, NULL, 0, 0, t);
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < N; j++) bad += !fp8_same(S[r * N + j], want[j]);
            }
        }
        for (int R = 1; R <= RM; R++) {
            for (int i = 0; i < RM * N; i++) O[i] = 0.0f;
            for (int r = 0; r < R; r++) P[r] = 1.0f;
            kt->pv_rows_x(P, 1, R, codes, N, 1, N, O, N, NULL, 0, 0, t);
            for (int r = 0; r < R; r++)
                for (int c = 0; c < N; c++) bad += !fp8_same(O[r * N + c], want[c]);
        }
        kt->kv_rows(codes, N, 1, N, t, par, 2, F);
        for (int c = 0; c < N; c++) bad += !fp8_same(F[c], want[c]);
        CHECK(!bad, "%s %s: %d of the 256 codes' values wrong", kt->name, attn_storage_of(t)->name, bad);
    }
}

/* the bf16 bits of a float that is a bf16 value */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static float bf16_round(float x) { /* nearest even, as the modes round (finite x) */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + (u >> 16 & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* qk_rows_bf / pv_rows_bf on random finite values of type t (fp8:
 * codes, want their values; bf16: the values) against float64 sums: R 1..9
 * (a key a vector and two keys a vector, qk_bf_rows), D 32..200 (partial
 * blocks of 32 and 64 columns; 128), 1..130 keys, the rows after the last
 * holding NaN (read, they would show), nothing written outside S or O */
static void bf_random(const attn_kernel_table *kt, attn_dtype t, const float *want) {
    enum { N = 130, RM = 9, LD = 216, LS = N + 8 };
    static unsigned char K8[(N + 2) * LD];
    static uint16_t K16[(N + 2) * LD], Qb[RM * LD];
    static float Qf[RM * LD], S[RM * LS], O[RM * LD], P[RM * LS], val[(N + 2) * LD];
    static const int ds[5] = {32, 64, 100, 128, 200}, nsz[5] = {1, 7, 37, 128, 130}; /* 128: the kernels' constant */
    uint32_t st = 71u + (uint32_t)t;
    int bf = t == ATTN_DTYPE_BF16, bq = 0, bp = 0, outside = 0;
    const void *K = bf ? (const void *)K16 : (const void *)K8;
    for (int di = 0; di < 5; di++)
        for (int ni = 0; ni < 5; ni++)
            for (int R = 1; R <= RM; R++) {
                int D = ds[di], n = nsz[ni];
                float sc = ni & 1 && !bf ? 0.75f : 1.0f;
                for (int j = 0; j < n * LD; j++) {
                    if (bf) {
                        val[j] = bf16_round(tu_frand(&st) * 8.0f - 4.0f), K16[j] = bf16_bits(val[j]);
                    } else {
                        unsigned char c = (unsigned char)tu_irand(&st, 0, 255);
                        K8[j] = isfinite(want[c]) && fabsf(want[c]) < 1e4f ? c : 0x38, val[j] = want[K8[j]];
                    }
                }
                memset(K8 + n * LD, 0x7f, 2 * LD); /* NaN in the rows after the last: read, they would show */
                for (int j = n * LD; j < (n + 2) * LD; j++) K16[j] = 0x7fc0;
                for (int i = 0; i < R * LD; i++)
                    Qf[i] = bf16_round(tu_frand(&st) * 2.0f - 1.0f), Qb[i] = bf16_bits(Qf[i]);
                for (int i = 0; i < RM * LS; i++) S[i] = -7.0f, P[i] = bf16_round(tu_frand(&st) * 4.0f - 1.0f);
                kt->qk_rows_bf(Qb, LD, R, D, K, LD, n, S, LS, sc, K, LD, D, t);
                for (int r = 0; r < R; r++) {
                    for (int j = 0; j < n; j++) {
                        double w = 0.0, a = 0.0;
                        for (int c = 0; c < D; c++) {
                            double x = (double)Qf[r * LD + c] * val[j * LD + c];
                            w += x, a += fabs(x);
                        }
                        bq += fabs(S[r * LS + j] - sc * w) > 1e-6 * sc * a + 1e-30;
                    }
                    for (int j = n; j < LS; j++) outside += S[r * LS + j] != -7.0f;
                }
                for (int i = 0; i < RM * LD; i++) O[i] = (float)(i % 7) - 3.0f;
                kt->pv_rows_bf(P, LS, R, K, LD, n, D, O, LD, sc, K, LD, D, t);
                for (int r = 0; r < RM; r++) /* rows past R and columns past D untouched */
                    for (int c = 0; c < LD; c++) {
                        double w = 0.0, a = 0.0, o0 = (double)((r * LD + c) % 7) - 3.0;
                        if (r >= R || c >= D) {
                            outside += O[r * LD + c] != (float)o0;
                            continue;
                        }
                        for (int j = 0; j < n; j++) {
                            double x = (double)P[r * LS + j] * val[j * LD + c];
                            w += x, a += fabs(x);
                        }
                        bp += fabs(O[r * LD + c] - (o0 + sc * w)) > 1e-6 * (sc * a + fabs(o0)) + 1e-30;
                    }
            }
    CHECK(!bq && !bp && !outside, "%s %s: random bf16 products: %d Q K^T, %d P V wrong, %d written outside", kt->name,
          attn_storage_of(t)->name, bq, bp, outside);
}

/* qk_rows_bf over rows longer than the kernel's column chunk (1024: the
 * rows permuted a chunk at a time, later chunks' scores added): D 1100 and
 * 2112 (a partial last block of 64; whole blocks), R 1..9 (groups of
 * eight, four and the rows left), 1..9 keys, random finite codes (t fp8)
 * or values (bf16) against float64 sums; nothing written outside S */
static void bf_wide(const attn_kernel_table *kt, attn_dtype t, const float *want) {
    enum { DM = 2112, N = 9, RM = 9, LS = N + 4 };
    static unsigned char K8[(N + 1) * DM];
    static uint16_t K16[(N + 1) * DM], Qb[RM * DM];
    static float Qf[RM * DM], S[RM * LS], val[(N + 1) * DM];
    uint32_t st = 301u + (uint32_t)t;
    int bad = 0, outside = 0, bf = t == ATTN_DTYPE_BF16;
    const void *K = bf ? (const void *)K16 : (const void *)K8;
    for (int di = 0; di < 2; di++)
        for (int R = 1; R <= RM; R++)
            for (int n = 1; n <= N; n += 4) {
                int D = di ? DM : 1100;
                for (int j = 0; j < (n + 1) * D; j++) {
                    if (bf) { /* NaN in the row after the last: read, it would show */
                        val[j] = j >= n * D ? NAN : bf16_round(tu_frand(&st) * 8.0f - 4.0f);
                        K16[j] = j >= n * D ? 0x7fc0 : bf16_bits(val[j]);
                        continue;
                    }
                    unsigned char c = (unsigned char)tu_irand(&st, 0, 255);
                    K8[j] = j >= n * D ? 0x7f : isfinite(want[c]) && fabsf(want[c]) < 1e4f ? c : 0x38;
                    val[j] = want[K8[j]];
                }
                for (int i = 0; i < R * D; i++)
                    Qf[i] = bf16_round(tu_frand(&st) * 2.0f - 1.0f), Qb[i] = bf16_bits(Qf[i]);
                for (int i = 0; i < RM * LS; i++) S[i] = -7.0f;
                kt->qk_rows_bf(Qb, D, R, D, K, D, n, S, LS, 0.5f, NULL, 0, 0, t);
                for (int r = 0; r < RM; r++)
                    for (int j = 0; j < LS; j++) {
                        if (r >= R || j >= n) {
                            outside += S[r * LS + j] != -7.0f;
                            continue;
                        }
                        double w = 0.0, a = 0.0;
                        for (int c = 0; c < D; c++) {
                            double x = (double)Qf[r * D + c] * val[j * D + c];
                            w += x, a += fabs(x);
                        }
                        bad += fabs(S[r * LS + j] - 0.5 * w) > 1e-6 * 0.5 * a + 1e-30;
                    }
            }
    CHECK(!bad && !outside, "%s %s: wide rows' bf16 products: %d wrong, %d written outside", kt->name,
          attn_storage_of(t)->name, bad, outside);
}

/* qk_rows_bf / pv_rows_bf never read past the last row: the n rows (D codes
 * or bf16 values, D apart) end where a page the process may not read begins
 * (PROT_NONE: a read past them faults), R 1..9 (both Q K^T layouts and
 * their partial steps: a step's missing keys and a pair's second key past
 * the last), D 32..200 (partial blocks of 32 and 64 columns: the last row's
 * tail), n 1..20; the values against float64 sums */
static void bf_guard(const attn_kernel_table *kt, attn_dtype t, const float *want) {
    enum { RM = 9, DM = 200, NM = 20, LS = NM + 4 };
    static uint16_t Qb[RM * DM];
    static float Qf[RM * DM], S[RM * LS], O[RM * DM], P[RM * LS], val[NM * DM];
    static const int ds[6] = {32, 40, 56, 100, 128, 200};
    int bf = t == ATTN_DTYPE_BF16, bad = 0;
    size_t es = bf ? 2 : 1, area = NM * DM * es;
    unsigned char *m = tu_guard_alloc(area);
    CHECK(m != NULL, "%s: guard pages mapped", kt->name);
    if (!m) return;
    uint32_t st = 913u + (uint32_t)t;
    for (int di = 0; di < 6; di++)
        for (int n = 1; n <= NM; n += n < 10 ? 1 : 5)
            for (int R = 1; R <= RM; R++) {
                int D = ds[di];
                unsigned char *K = m + area - (size_t)n * (size_t)D * es; /* the last row ends at the guard */
                for (int j = 0; j < n * D; j++) {
                    if (bf) {
                        val[j] = bf16_round(tu_frand(&st) * 8.0f - 4.0f);
                        uint16_t b = bf16_bits(val[j]);
                        memcpy(K + 2 * j, &b, 2);
                    } else {
                        unsigned char c = (unsigned char)tu_irand(&st, 0, 255);
                        K[j] = isfinite(want[c]) && fabsf(want[c]) < 1e4f ? c : 0x38, val[j] = want[K[j]];
                    }
                }
                for (int i = 0; i < R * D; i++)
                    Qf[i] = bf16_round(tu_frand(&st) * 2.0f - 1.0f), Qb[i] = bf16_bits(Qf[i]);
                for (int i = 0; i < R * LS; i++) P[i] = bf16_round(tu_frand(&st) * 4.0f - 1.0f);
                memset(O, 0, sizeof O);
                kt->qk_rows_bf(Qb, D, R, D, K, D, n, S, LS, 1.0f, NULL, 0, 0, t);
                kt->pv_rows_bf(P, LS, R, K, D, n, D, O, DM, 1.0f, NULL, 0, 0, t);
                for (int r = 0; r < R; r++)
                    for (int j = 0; j < n || j < D; j++) {
                        double w = 0.0, a = 0.0, v = 0.0, b = 0.0;
                        for (int c = 0; j < n && c < D; c++) {
                            double x = (double)Qf[r * D + c] * val[j * D + c];
                            w += x, a += fabs(x);
                        }
                        for (int k = 0; j < D && k < n; k++) {
                            double x = (double)P[r * LS + k] * val[k * D + j];
                            v += x, b += fabs(x);
                        }
                        bad += j < n && fabs(S[r * LS + j] - w) > 1e-6 * a + 1e-30;
                        bad += j < D && fabs(O[r * DM + j] - v) > 1e-6 * b + 1e-30;
                    }
            }
    tu_guard_free(m);
    CHECK(!bad, "%s %s: rows ending at an unreadable page: %d products wrong", kt->name, attn_storage_of(t)->name, bad);
}

/* qk_rows_bf / pv_rows_bf (the modes' fp8 and bf16 products, where a table has them:
 * avx512-bf16 natively, avx512-simde through SIMDe's emulation). Every code
 * (NaN, e5m2's infinities) exactly: one nonzero code a key against q rows
 * of 2^r (S = 2^r v s), one key of every code against P = 2^r (O = 2^r v s),
 * scales 1 and 3; then random bf16 q / P against random finite codes
 * against float64 sums (R 1..9: groups of eight and four rows and the 1-3
 * left, Q K^T a key a vector below three rows over fp8 and eight over bf16,
 * two keys a vector from there; D 32..200 with partial blocks of 32 and 64
 * columns; n 1..130: key steps' tails, an odd last pair, a pair's second key
 * past the last; O accumulated onto, nothing written outside S or O);
 * and rows ending at an unreadable page (bf_guard). */
static void test_fp8_bf(const attn_kernel_table *kt) {
    int want_it =
        !strcmp(kt->name, "avx512-bf16") || !strcmp(kt->name, "avx512-256-bf16") || !strcmp(kt->name, "avx512-simde");
    CHECK(!want_it == !kt->qk_rows_bf && !want_it == !kt->pv_rows_bf, "%s: the fp8 bf16 products %s", kt->name,
          want_it ? "missing" : "where none was built");
    if (!kt->qk_rows_bf) return;
    static const attn_dtype fmts[2] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2};
    enum { N = 256, RM = 5, LD = 200 };
    static unsigned char K[N * LD];
    static uint16_t Qb[RM * LD];
    static float S[RM * (N + 8)], O[RM * (N + 8)], P[RM * 2], want[N];
    for (int f = 0; f < 2; f++) {
        attn_dtype t = fmts[f];
        unsigned char codes[N];
        fp8_all_codes(t, codes, want);
        int bad = 0;
        for (int si = 0; si < 2; si++) {
            float sc = si ? 3.0f : 1.0f;
            for (int di = 0; di < 4; di++) { /* 40, 120, 200: partial blocks of 64; 128 the kernels' constant */
                int D = (int[]){40, 120, 128, 200}[di];
                memset(K, 0, sizeof K);
                for (int j = 0; j < N; j++) K[j * D + j % D] = (unsigned char)j;
                for (int R = 1; R <= 5; R++) {
                    for (int r = 0; r < R; r++)
                        for (int c = 0; c < D; c++) Qb[r * D + c] = bf16_bits(ldexpf(1.0f, r));
                    kt->qk_rows_bf(Qb, D, R, D, K, D, N, S, N + 8, sc, NULL, 0, 0, t);
                    for (int r = 0; r < R; r++)
                        for (int j = 0; j < N; j++) bad += !fp8_same(S[r * (N + 8) + j], ldexpf(want[j], r) * sc);
                }
            }
            for (int R = 1; R <= 5; R++) {
                memset(O, 0, sizeof O);
                for (int r = 0; r < R; r++) P[r * 2] = ldexpf(1.0f, r), P[r * 2 + 1] = 0.0f;
                kt->pv_rows_bf(P, 2, R, codes, N, 1, N, O, N + 8, sc, NULL, 0, 0, t);
                for (int r = 0; r < R; r++)
                    for (int c = 0; c < N; c++) bad += !fp8_same(O[r * (N + 8) + c], ldexpf(want[c], r) * sc);
            }
        }
        CHECK(!bad, "%s %s: %d of the codes' bf16 products wrong", kt->name, attn_storage_of(t)->name, bad);
        bf_random(kt, t, want);
        bf_wide(kt, t, want);
        bf_guard(kt, t, want);
    }
    bf_random(kt, ATTN_DTYPE_BF16, NULL);
    bf_wide(kt, ATTN_DTYPE_BF16, NULL);
    bf_guard(kt, ATTN_DTYPE_BF16, NULL);
}

/* The decode row kernels over rows that end where a page the process may
 * not read begins (PROT_NONE: a read past the last row faults, as it would
 * at the end of a caller's pages), bit for bit what the same kernel gives
 * on the same bytes inside a larger buffer: qk_rows / pv_rows (float32),
 * qk_rows_x / pv_rows_x (16-bit, fp8, int8, q8_0; P V also int4 and q4_0),
 * the integer qk_rows_q8 / pv_rows_i16 (q8_0, q4_0, int8, int4), qk_rows_bf /
 * pv_rows_bf where a table has them, and kv_rows (fp8, int8, int4, q4_0);
 * R 1..9, D 32..256, 1..70 keys */
static void rows_guard_type(const attn_kernel_table *kt, attn_dtype t, unsigned char *g, size_t area, unsigned char *h,
                            int *bad, int *calls) {
    enum { NM = 70, DM = 256, RM = 9, LS = NM + 2 };
    static float x[DM], Qf[RM * DM], P[RM * LS], S[2][3][RM * LS], O[2][3][RM * DM], F[2][NM * DM];
    static unsigned char Qq[RM * DM * 2];
    static uint16_t Qb[RM * DM];
    static const int ds[6] = {32, 64, 96, 128, 192, 256}, ns[8] = {1, 2, 3, 5, 9, 17, 33, 70};
    static const int rs[7] = {1, 2, 3, 4, 5, 8, 9};
    int q8 = t == ATTN_DTYPE_Q8_0 || t == ATTN_DTYPE_Q4_0, pair = t == ATTN_DTYPE_KV_INT8 || t == ATTN_DTYPE_KV_INT4;
    int fp8 = t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2, half = t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16;
    uint32_t st = 5u + (uint32_t)t;
    float par[2] = {0.5f, 3.0f};
    for (int di = 0; di < 6; di++) {
        int D = ds[di];
        size_t kr = attn_storage_bytes(t, D), qr = attn_q8_row_bytes(D);
        for (int r = 0; r < RM; r++) {
            for (int c = 0; c < D; c++) x[c] = tu_frand(&st) * 2.0f - 1.0f;
            if (pair)
                attn_q8_quantize_row(x, D, Qq + r * qr);
            else
                attn_q8_quantize(x, D, Qq + r * qr);
            for (int c = 0; c < D; c++) Qf[r * D + c] = bf16_round(x[c]), Qb[r * D + c] = bf16_bits(Qf[r * D + c]);
            for (int j = 0; j < LS; j++) P[r * LS + j] = bf16_round(tu_frand(&st));
        }
        for (int ni = 0; ni < 8; ni++) {
            int n = ns[ni];
            unsigned char *K[2] = {h, g + area - (size_t)n * kr}; /* inside a buffer; ending at the guard */
            for (int j = 0; j < n; j++) {
                for (int c = 0; c < D; c++) x[c] = tu_frand(&st) * 4.0f - 2.0f;
                if (pair)
                    attn_qa_quantize(x, D, t == ATTN_DTYPE_KV_INT8 ? 8 : 4, h + j * kr, par);
                else
                    attn_storage_of(t)->store(x, D, h + j * kr);
            }
            memcpy(K[1], h, (size_t)n * kr);
            for (int ri = 0; ri < 7; ri++) {
                int R = rs[ri];
                for (int k = 0; k < 2; k++) {
                    memset(S[k], 0, sizeof S[k]), memset(O[k], 0, sizeof O[k]);
                    if (t == ATTN_DTYPE_F32) {
                        kt->qk_rows(Qf, R, D, (const float *)K[k], D, n, S[k][0], LS, NULL, 0, 0);
                        kt->pv_rows(P, LS, R, (const float *)K[k], D, n, D, O[k][0], DM, NULL, 0, 0);
                    } else {
                        if (half || fp8 || t == ATTN_DTYPE_KV_INT8 || t == ATTN_DTYPE_Q8_0)
                            kt->qk_rows_x(Qf, R, D, K[k], D, n, S[k][0], LS, NULL, 0, 0, t);
                        kt->pv_rows_x(P, LS, R, K[k], D, n, D, O[k][0], DM, NULL, 0, 0, t);
                    }
                    if ((q8 || pair) && kt->qk_rows_q8 && (t != ATTN_DTYPE_KV_INT4 || D % 64 == 0))
                        kt->qk_rows_q8(Qq, R, D, K[k], D, n, S[k][1], LS, NULL, 0, 0, t);
                    if ((q8 || pair) && kt->pv_rows_i16)
                        kt->pv_rows_i16(P, LS, R, K[k], D, n, D, O[k][1], DM, NULL, 0, 0, t);
                    if ((fp8 || t == ATTN_DTYPE_BF16) && kt->qk_rows_bf) {
                        kt->qk_rows_bf(Qb, D, R, D, K[k], D, n, S[k][2], LS, 1.0f, NULL, 0, 0, t);
                        kt->pv_rows_bf(P, LS, R, K[k], D, n, D, O[k][2], DM, 1.0f, NULL, 0, 0, t);
                    }
                    if ((fp8 || pair || t == ATTN_DTYPE_Q4_0) && R == 1) kt->kv_rows(K[k], D, n, D, t, par, 0, F[k]);
                }
                *calls += 1;
                *bad += memcmp(S[0], S[1], sizeof S[0]) || memcmp(O[0], O[1], sizeof O[0]) ||
                        (R == 1 && memcmp(F[0], F[1], (size_t)n * D * sizeof(float)));
            }
        }
    }
}
static void test_rows_guard(const attn_kernel_table *kt) {
    static const attn_dtype ts[9] = {ATTN_DTYPE_F32,      ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                     ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_KV_INT8,
                                     ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q8_0,     ATTN_DTYPE_Q4_0};
    size_t area = 70 * 256 * 4;
    unsigned char *g = tu_guard_alloc(area), *h = malloc(area + 4096);
    CHECK(g && h, "%s: guard pages mapped", kt->name);
    if (!g || !h) {
        tu_guard_free(g), free(h);
        return;
    }
    memset(h, 0x5a, area + 4096);
    for (int i = 0; i < 9; i++) {
        int bad = 0, calls = 0;
        rows_guard_type(kt, ts[i], g, area, h, &bad, &calls);
        CHECK(!bad, "%s %s: rows ending at an unreadable page: %d of %d calls gave other bits", kt->name,
              attn_storage_of(ts[i])->name, bad, calls);
    }
    tu_guard_free(g);
    free(h);
}

/* pv_rows_i16: P rounded per row and 64 keys as attn_p16_quantize says
 * (q4_0, q8_0: the weights P d, a row a block of 32 columns), each column's
 * integer sum exact, O += u sum as one fmaf: bit for bit on every table.
 * Keys 1, 37 (odd: the last pair half empty), 64 and 130 (three chunks);
 * rows 1..9 (4-row groups and their tails); int8 Dv 16 .. 208 (a 16-column
 * tail after 32-column passes), int4, q4_0 and q8_0 Dv 32 .. 448 (q8_0's
 * codes of every byte, -128 included); rows of zeros (u 0), of tiny weights
 * (below 2^-100: the prescale), negative weights, a NaN and an infinity (the
 * row NaN); q4_0 and q8_0: one key's block with a NaN scale (its columns NaN
 * in every row of its 64 keys; at 7 and 9 rows: 9's last row takes the
 * 16-lane tables' one-row weights); without and with the next rows'
 * prefetches (whole rows back to back, or part of each) */
static int64_t pv_i16_code(const unsigned char *v, attn_dtype t, int Dv, int c) {
    if (t == ATTN_DTYPE_Q4_0) return attn_q4_code(v, c) - 8;
    if (t == ATTN_DTYPE_Q8_0) return attn_q8_code(v, c);
    return t == ATTN_DTYPE_KV_INT4 ? attn_q4a_code(v, Dv, c) : v[c];
}
static float pv_i16_d(const unsigned char *v, attn_dtype t, int c) {
    return t == ATTN_DTYPE_Q4_0 ? attn_q4_d(v, c) : attn_q8_d(v, c);
}
static void test_pv_i16(const attn_kernel_table *kt) {
    /* int4 on the 16-lane tables: Dv 128 and 192 at two to four rows (passes of 64 columns), 128 at one (128):
     * every pass pairs its groups over bytes (PVI_NIB). At one row 192's pass from 0 runs across the halves; 448's
     * passes of 128 lie in the low half (from 0), across (128) and in the high half (256: from column 32 of it) */
    static const int ns[4] = {1, 37, 64, 130}, dv8[6] = {16, 48, 128, 144, 80, 208},
                     dv4[6] = {32, 96, 128, 288, 192, 448};
    static const attn_dtype ts[4] = {ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4, ATTN_DTYPE_Q4_0, ATTN_DTYPE_Q8_0};
    enum { N = 130, RM = 9, DM = 448 };
    uint32_t st = 33u;
    unsigned char *V = malloc((size_t)N * attn_storage_bytes(ATTN_DTYPE_Q8_0, DM + 32)); /* the widest rows */
    float *P = malloc(RM * N * sizeof(float)), *O = malloc(RM * (DM + 8) * sizeof(float)), w64[64];
    int16_t q[64];
    for (int f = 0; f < 4; f++)
        for (int di = 0; di < 6; di++)
            for (int ni = 0; ni < 4; ni++)
                for (int R = 1; R <= RM; R++) { /* every remainder of 4 rows */
                    attn_dtype t = ts[f];
                    int Dv = f ? dv4[di] : dv8[di], ldv = Dv + 32, n = ns[ni];
                    size_t rb = attn_storage_bytes(t, ldv);
                    for (size_t i = 0; i < (size_t)n * rb; i++) V[i] = (unsigned char)tu_irand(&st, 0, 255);
                    int blk = f >= 2; /* q4_0, q8_0: a row of weights a block of 32 columns */
                    size_t bb = t == ATTN_DTYPE_Q4_0 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES;
                    for (int j = 0; blk && j < n; j++) /* finite scales, one NaN */
                        for (int b = 0; b < ldv / 32; b++) {
                            uint16_t dh = attn_f32_to_f16(tu_frand(&st) * 4.0f - 2.0f);
                            if ((R == 7 || R == 9) && j == n / 3 && b == Dv / 64) dh = 0x7e00;
                            memcpy(V + (size_t)j * rb + (size_t)b * bb, &dh, 2);
                        }
                    for (int r = 0; r < R; r++)
                        for (int j = 0; j < n; j++) {
                            float x = tu_frand(&st) * 2048.0f;
                            P[r * N + j] = r == 1 ? 0.0f : r == 2 ? x * 1e-33f : r == 3 ? x - 1024.0f : x;
                        }
                    if (R > 4) P[4 * N + n / 2] = NAN;
                    if (R > 5) P[5 * N + n - 1] = R % 2 ? INFINITY : -INFINITY; /* the row NaN too */
                    int ldo = Dv + 8;
                    for (int i = 0; i < RM * (DM + 8); i++) O[i] = i / ldo == 2 ? 0.0f : 0.5f; /* row 2: tiny sums */
                    /* the prefetches (hints, the same sums): none, whole rows back to back (ps == pb: one range a
                     * key pair), rows of Dv of each ldv */
                    int pf = (di + ni + R) % 3;
                    kt->pv_rows_i16(P, N, R, V, ldv, n, Dv, O, ldo, pf ? V : NULL, ldv, pf == 1 ? ldv : Dv, t);
                    int bad = 0;
                    for (int r = 0; r < R; r++) {
                        float want[DM];
                        float o0 = r == 2 ? 0.0f : 0.5f;
                        for (int c = 0; c < Dv; c++) want[c] = o0;
                        for (int j0 = 0; j0 < n; j0 += 64) {
                            int nb = n - j0 < 64 ? n - j0 : 64;
                            for (int c0 = 0; c0 < Dv; c0 += blk ? 32 : Dv) {
                                for (int j = 0; j < nb; j++)
                                    w64[j] =
                                        P[r * N + j0 + j] * (blk ? pv_i16_d(V + (size_t)(j0 + j) * rb, t, c0) : 1.0f);
                                float u = attn_p16_quantize(w64, nb, q);
                                for (int c = c0; c < (blk ? c0 + 32 : Dv); c++) {
                                    int64_t sum = 0;
                                    for (int j = 0; j < nb; j++)
                                        sum += (int64_t)q[j] * pv_i16_code(V + (size_t)(j0 + j) * rb, t, Dv, c);
                                    want[c] = fmaf(u, (float)sum, want[c]);
                                }
                            }
                        }
                        for (int c = 0; c < ldo; c++) {
                            float got = O[r * ldo + c], w = c < Dv ? want[c] : o0;
                            bad += !(got == w || (got != got && w != w));
                        }
                        if ((r == 4 && R > 4) || (r == 5 && R > 5)) bad += !isnan(O[r * ldo]); /* NaN rows */
                        if (r == 2) bad += O[r * ldo] == 0.0f && O[r * ldo + 1] == 0.0f;       /* tiny weights count */
                        if (blk && (R == 7 || R == 9) && r != 1)
                            bad += !isnan(O[r * ldo + Dv / 64 * 32 + 5]); /* the block */
                    }
                    for (int i = R * ldo; i < RM * (DM + 8); i++) bad += O[i] != (i / ldo == 2 ? 0.0f : 0.5f);
                    CHECK(!bad, "%s pv_rows_i16 %s Dv=%d n=%d R=%d prefetch %d: %d values wrong", kt->name,
                          attn_storage_of(t)->name, Dv, n, R, pf, bad);
                }
    free(V), free(P), free(O);
}

/* kv_rows: every serving format's rows as float32, bit for bit as the
 * storage's own attn_st_load_row (NaN as NaN), on codes of every value,
 * rows of lengths with vector tails (int4's halves not multiples of 8),
 * scales per row (int8 / int4 pairs) and per call (fp8) */
static void test_kv_rows(const attn_kernel_table *kt) {
    static const attn_dtype fmts[5] = {ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,
                                       ATTN_DTYPE_Q4_0};
    static const int lens[4] = {32, 64, 100, 576};
    uint32_t st = 77u;
    unsigned char *src = malloc(4 * 600 * 4);
    float *got = malloc(4 * 600 * 4), *want = malloc(600 * 4), par[8] = {0.37f, -1.5f, 2.0f, 0.25f, 1e-3f, 3.0f};
    for (int f = 0; f < 5; f++)
        for (int li = 0; li < 4; li++) {
            attn_dtype t = fmts[f];
            int n = lens[li], ld = n + 64; /* rows apart by more than their length */
            if (n % attn_storage_of(t)->block) continue;
            for (int i = 0; i < 4 * 600 * 4; i++) src[i] = (unsigned char)tu_irand(&st, 0, 255);
            if (t == ATTN_DTYPE_Q4_0) /* finite f16 scales */
                for (int j = 0; j < 3; j++)
                    for (int b = 0; b < n / 32; b++) {
                        uint16_t dh = attn_f32_to_f16(tu_frand(&st));
                        memcpy(src + attn_storage_bytes(t, (int64_t)j * ld) + b * 18, &dh, 2);
                    }
            int pld = attn_storage_of(t)->params == ATTN_ST_ROWPAR;
            kt->kv_rows(src, ld, 3, n, t, par, pld, got);
            for (int j = 0; j < 3; j++) {
                attn_st_load_row(t, src + attn_storage_bytes(t, (int64_t)j * ld), n, par + 2 * j * pld, want);
                int bad = 0;
                for (int i = 0; i < n; i++)
                    bad += !(isnan(want[i]) ? isnan(got[j * n + i]) : !memcmp(&want[i], &got[j * n + i], 4));
                CHECK(!bad, "%s kv_rows type %d n %d row %d: %d values differ from the storage's", kt->name, (int)t, n,
                      j, bad);
            }
        }
    free(src), free(got), free(want);
}

static int same_bits(const float *a, const float *b, int64_t n) { return !memcmp(a, b, (size_t)n * sizeof(float)); }

/* rowpar_scores / rowpar_p / add_row: base/quant.h's loops, bit for bit,
 * over block lengths with and without a tail of keys, 1 to 9 rows (groups
 * of four and a rest), with and without the offset, the fold rule passing
 * and failing (a large pair on the last key, a NaN zero mid-block): the
 * rule's answer always, the values where it passes (where it fails they
 * are not used); p leaves S as it was. The pairs, S, P and add_row's row
 * end where an unreadable page begins (tu_guard_alloc): a load or store
 * past them faults (a cache's pairs can end there) */
static void test_rowpar(const attn_kernel_table *kt) {
    enum { LD = 72, NS = 9 * LD };
    static const int lens[6] = {1, 7, 8, 13, 31, 64}; /* 31: 16 a step, then 8, then 7 */
    uint32_t st = 91u;
    float par[2 * 64], S2[NS], P2[NS], X[NS], X2[NS], qs[9], wr[9], wr2[9];
    float *gpar = tu_guard_alloc(sizeof par), *gS = tu_guard_alloc(sizeof S2), *gP = tu_guard_alloc(sizeof P2),
          *grow = tu_guard_alloc(sizeof X);
    CHECK(gpar && gS && gP && grow, "%s: guard pages mapped", kt->name);
    if (!gpar || !gS || !gP || !grow) {
        tu_guard_free(gpar), tu_guard_free(gS), tu_guard_free(gP), tu_guard_free(grow);
        return;
    }
    for (int li = 0; li < 6; li++)
        for (int w = 0; w < 3; w++)
            for (int v = 0; v < 4; v++) {
                int nb = lens[li], R = 1 + (3 * w + v + li) % 9, span = (R - 1) * LD + nb;
                for (int i = 0; i < 2 * nb; i++) par[i] = (tu_frand(&st) - 0.5f) * 8.0f;
                if (v == 2) par[2 * (nb - 1)] = 1e20f; /* the rule fails on the last key */
                if (v == 3) par[2 * (nb / 2) + 1] = NAN;
                float off = v & 1 ? 128.0f : 0.0f;
                float *gp = gpar + 2 * 64 - 2 * nb, *S = gS + NS - span, *P = gP + NS - span;
                memcpy(gp, par, (size_t)(2 * nb) * sizeof(float));
                for (int i = 0; i < span; i++) S[i] = S2[i] = (tu_frand(&st) - 0.3f) * (float)(1 << (i % 12));
                for (int r = 0; r < R; r++) qs[r] = tu_frand(&st) * 50.0f - 20.0f;
                int ok = kt->rowpar_scores(gp, nb, off, 1e6f, R, qs, S, LD);
                int ok2 = attn_rowpar_scores(par, nb, off, 1e6f, R, qs, S2, LD);
                CHECK(ok == ok2 && ok == (v < 2) && (!ok || same_bits(S, S2, span)),
                      "%s rowpar_scores nb %d R %d case %d: rule %d (want %d) or scores differ", kt->name, nb, R, v, ok,
                      ok2);
                memcpy(S2, S, (size_t)span * sizeof(float));
                for (int i = 0; i < span; i++) P[i] = P2[i] = (float)i;
                ok = kt->rowpar_p(gp, nb, 1e6f, R, S, LD, P, wr);
                ok2 = attn_rowpar_p(par, nb, 1e6f, R, S2, LD, P2, wr2);
                CHECK(ok == ok2 && ok == (v < 2) && same_bits(S, S2, span) &&
                          (!ok || (same_bits(P, P2, span) && same_bits(wr, wr2, R))),
                      "%s rowpar_p nb %d R %d case %d: rule %d (want %d), S changed, or P or sums differ", kt->name, nb,
                      R, v, ok, ok2);
                float a = tu_frand(&st) - 0.5f;
                for (int i = 0; i < NS; i++) X[i] = X2[i] = (tu_frand(&st) - 0.3f) * (float)(1 << (i % 12));
                int nr = 5 * nb + 3, bad = 0;
                float *row = grow + NS - nr;
                memcpy(row, X + 1, (size_t)nr * sizeof(float));
                kt->add_row(X + 1, nr, a);
                kt->add_row(row, nr, a);
                for (int i = 0; i < NS; i++) bad += X[i] != (i >= 1 && i < nr + 1 ? X2[i] + a : X2[i]);
                for (int i = 0; i < nr; i++) bad += !same_bits(row + i, X + 1 + i, 1);
                CHECK(!bad, "%s add_row n %d: %d values differ", kt->name, nr, bad);
            }
    for (int v = 0; v < 4; v++) { /* no rows: the rule's answer alone, over every pair */
        int nb = v == 3 ? 13 : 64;
        for (int i = 0; i < 2 * 64; i++) gpar[i] = (tu_frand(&st) - 0.5f) * 8.0f;
        if (v == 1) gpar[2 * 63] = 1e20f; /* the last key's scale */
        if (v == 2) gpar[2 * 3 + 1] = NAN;
        if (v == 3) gpar[2 * 12] = -1e20f; /* in the tail past the 8-key steps */
        CHECK(kt->rowpar_p(gpar, nb, 1e6f, 0, gS, LD, gP, wr) == (v == 0) &&
                  kt->rowpar_scores(gpar, nb, 0.0f, 1e6f, 0, qs, gS, LD) == (v == 0),
              "%s rowpar R 0 nb %d case %d: the rule's answer", kt->name, nb, v);
    }
    tu_guard_free(gpar), tu_guard_free(gS), tu_guard_free(gP), tu_guard_free(grow);
}

/* q8_row: the blocks attn_q8_quantize / attn_q8_quantize_row write, byte
 * for byte, x the values attn_st_load_q8 reads from them and the largest
 * |value| as attn_q8_amax, bit for bit: rows of 32 .. 256 over scales 2^-140
 * .. 2^40, with zeros, values on a code's tie, a NaN, an infinity, one too
 * large for an f16 scale and rows whose scale's inverse overflows */
static void test_q8_row(const attn_kernel_table *kt) {
    enum { N = 256 };
    uint32_t st = 23u;
    float x[N], y[N], want[N];
    unsigned char got[N / 32 * ATTN_Q8_BYTES], ref[N / 32 * ATTN_Q8_BYTES];
    for (int cs = 0; cs < 96; cs++)
        for (int t = 0; t < 2; t++) {
            attn_dtype dt = t ? ATTN_DTYPE_Q8_ROW : ATTN_DTYPE_Q8_0;
            int n = 32 * (1 + cs % 8), v = cs % 12;
            float sc = ldexpf(1.0f, -140 + 15 * (cs % 13));
            for (int i = 0; i < n; i++) x[i] = (tu_frand(&st) - 0.5f) * sc;
            if (v == 1) x[n / 2] = 0.0f, x[n / 3] = -0.0f;
            if (v == 2) /* ties: k + 1/2 times a scale of 1 (amax 127) */
                for (int i = 0; i < n; i++) x[i] = i == 0 ? 127.0f : (float)(i % 50) - 24.5f;
            if (v == 3) x[n - 1] = NAN;
            if (v == 4) x[n / 2] = -INFINITY;
            if (v == 5) x[1] = 65504.0f * 127.0f * 2.0f;
            if (v == 6)
                for (int i = 0; i < n; i++) x[i] = (tu_frand(&st) - 0.5f) * 0x1p-128f; /* 1 / scale overflows */
            if (v == 7) memset(x, 0, sizeof x);
            if (v == 8) x[33 % n] = 0x1p-149f;
            memcpy(y, x, sizeof x), memcpy(want, x, sizeof x);
            float a = kt->q8_row(y, n, dt, got), wa;
            if (t)
                attn_q8_quantize_row(want, n, ref);
            else
                attn_q8_quantize(want, n, ref);
            attn_st_load_q8(ref, n, want);
            attn_q8_amax(want, n, &wa);
            size_t nbytes = (size_t)(n / 32) * ATTN_Q8_BYTES;
            CHECK(!memcmp(got, ref, nbytes), "%s q8_row %s n %d case %d: blocks differ", kt->name, t ? "row" : "q8_0",
                  n, v);
            CHECK(same_bits(y, want, n), "%s q8_row %s n %d case %d: values differ", kt->name, t ? "row" : "q8_0", n,
                  v);
            CHECK(!memcmp(&a, &wa, 4), "%s q8_row %s n %d case %d: largest |value| %g, want %g", kt->name,
                  t ? "row" : "q8_0", n, v, (double)a, (double)wa);
        }
}

/* gemm, gemm_tn and (16-lane tables) gemm32 / gemm32_tn: each element of C
 * the chain fmaf(a_k, b_k, c) over k in order from 0 (acc 0) or from C
 * (acc 1), bit for bit (the portable table: c + a_k b_k, each operation
 * rounded); B's second panel bs floats after its first */
static void test_gemm(const attn_kernel_table *kt) {
    enum { MAXK = 131, LDA = 140, LDB = 40, BS = LDB * MAXK + 8, LDC = 36 };
    static float A[LDA * LDA], B[2 * BS], C0[12 * LDC], C[12 * LDC], W[12 * LDC];
    uint32_t s = 17;
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++) A[i] = tu_frand(&s);
    for (size_t i = 0; i < sizeof B / sizeof B[0]; i++) B[i] = tu_frand(&s);
    for (size_t i = 0; i < sizeof C0 / sizeof C0[0]; i++) C0[i] = tu_frand(&s);
    static const int Ks[] = {0, 1, 7, 64, 131};
    int mr = kt->gemm_mr, fused = strcmp(kt->name, "generic") != 0;
    for (int ki = 0; ki < 5; ki++)
        for (int tn = 0; tn < 2; tn++)
            for (int wide = 0; wide < 2; wide++)
                for (int acc = 0; acc < 2; acc++) {
                    int K = Ks[ki], N = wide ? 32 : 16;
                    if (wide && !kt->gemm32) continue;
                    /* B: row-major 16-column panels, the second BS floats on (wide), ldb LDB */
                    for (int i = 0; i < mr; i++)
                        for (int j = 0; j < N; j++) {
                            float c = acc ? C0[i * LDC + j] : 0.0f;
                            for (int k = 0; k < K; k++) {
                                float a = tn ? A[k * LDA + i] : A[i * LDA + k];
                                float bk = B[j / 16 * BS + k * LDB + j % 16];
                                volatile float ab = a * bk; /* rounded, not fused */
                                c = fused ? fmaf(a, bk, c) : c + ab;
                            }
                            W[i * LDC + j] = c;
                        }
                    memcpy(C, C0, sizeof C);
                    if (wide)
                        (tn ? kt->gemm32_tn : kt->gemm32)(K, A, LDA, B, LDB, BS, C, LDC, acc);
                    else
                        (tn ? kt->gemm_tn : kt->gemm)(K, A, LDA, B, LDB, C, LDC, acc);
                    int bad = 0;
                    for (int i = 0; i < mr; i++)
                        for (int j = 0; j < LDC; j++) {
                            float want = j < N ? W[i * LDC + j] : C0[i * LDC + j]; /* nothing else written */
                            bad += memcmp(&C[i * LDC + j], &want, 4) != 0;
                        }
                    CHECK(!bad, "%s: gemm%s%s K %d acc %d: %d elements differ from the fmaf chain", kt->name,
                          wide ? "32" : "", tn ? "_tn" : "", K, acc, bad);
                }
    if (!strncmp(kt->name, "avx512", 6))
        CHECK(kt->gemm32 && kt->gemm32_tn, "%s: the 16-lane table has 32-column products", kt->name);
}

/* Q K^T over q4_0 and q8_0 gives the same bits on tables that read the key blocks in other ways, where this CPU
 * runs both: q4_0 at one and two rows one key a vector on the VBMI tables, four keys a vector without VBMI; q8_0
 * one 256-bit load and XOR a block on avx512-bf16, the avx512-256 tables and avx512-simde, two 128-bit broadcasts
 * and XORs on avx512-vnni and avx512-bf16-fma (R 1..rmax, the D values of Ds: whole and partial groups of four
 * blocks) */
static void test_qk_same_bits(attn_dtype t, int rmax, const int *Ds, int nd, const char *const (*pairs)[2], int np) {
    enum { NK = 37, DM = 256, RM = 9 };
    uint32_t seed = 5u;
    unsigned char Q[RM * (DM / 32) * ATTN_Q8_BYTES], K[NK * (DM / 32) * ATTN_Q8_BYTES];
    float x[DM], S[2][RM * NK];
    for (int di = 0; di < nd; di++) {
        int D = Ds[di];
        size_t qr = attn_q8_row_bytes(D), kr = attn_storage_bytes(t, D);
        for (int r = 0; r < rmax; r++) {
            for (int c = 0; c < D; c++) x[c] = tu_frand(&seed) * (r + 1);
            attn_q8_quantize(x, D, Q + r * qr);
        }
        for (int j = 0; j < NK; j++) {
            for (int c = 0; c < D; c++) x[c] = tu_frand(&seed) * 3.0f;
            if (j == 5) x[D - 28] = NAN; /* a NaN block scale */
            attn_storage_of(t)->store(x, D, K + j * kr);
        }
        for (int p = 0; p < np; p++) {
            const attn_kernel_table *a = attn_kernels_lookup(pairs[p][0]), *b = attn_kernels_lookup(pairs[p][1]);
            if (!a || !b) continue;
            for (int R = 1; R <= rmax; R++)
                for (int n = 1; n <= NK; n += 6) {
                    a->qk_rows_q8(Q, R, D, K, D, n, S[0], NK, NULL, 0, 0, t);
                    b->qk_rows_q8(Q, R, D, K, D, n, S[1], NK, NULL, 0, 0, t);
                    for (int r = 0; r < R; r++)
                        for (int j = 0; j < n; j++) {
                            float u = S[0][r * NK + j], v = S[1][r * NK + j];
                            CHECK(isnan(u) ? isnan(v) : !memcmp(&u, &v, sizeof u),
                                  "%s qk_rows_q8 %s / %s D=%d R=%d n=%d [%d][%d]: %.9g / %.9g",
                                  attn_storage_of(t)->name, pairs[p][0], pairs[p][1], D, R, n, r, j, (double)u,
                                  (double)v);
                        }
                }
        }
    }
}

static void test_qk_blocks_same_bits(void) {
    static const char *const q4[][2] = {{"avx512-256-vnni", "avx512-256-bf16"}, {"avx512-vnni", "avx512-bf16"}};
    static const char *const q8[][2] = {{"avx512-bf16-fma", "avx512-bf16"}, {"avx512-vnni", "avx512-256-vnni"}};
    static const int d4[] = {128}, d8[] = {32, 96, 128, 256};
#define TQ_N(a) ((int)(sizeof(a) / sizeof((a)[0])))
    test_qk_same_bits(ATTN_DTYPE_Q4_0, 2, d4, TQ_N(d4), q4, TQ_N(q4));
    test_qk_same_bits(ATTN_DTYPE_Q8_0, 9, d8, TQ_N(d8), q8, TQ_N(q8));
#undef TQ_N
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    /* every table this build has and this CPU runs */
    const char *name;
    for (int t = 0; (name = attn_kernel_table_name(t)); t++) {
        const attn_kernel_table *kt = attn_kernels_lookup(name);
        if (!kt) {
            printf("%s: not run here\n", name);
            continue;
        }
        test_exp2_accuracy(kt, 1.5); /* measured 0.99 (2026-11-23) */
        test_exp2_special(kt);
        test_exp2_lanes(kt);
        test_fused_rows(kt);
        test_decode_rows(kt);
        test_round_row(kt);
        test_store_rows(kt);
        test_qk_q8(kt);
        test_pv_codes(kt);
        test_fp8_codes(kt);
        test_fp8_bf(kt);
        test_pv_i16(kt);
        test_kv_rows(kt);
        test_rows_guard(kt);
        test_rowpar(kt);
        test_q8_row(kt);
        test_gemm(kt);
    }
    test_qk_blocks_same_bits();
    return tu_finish("test_kernels");
}
