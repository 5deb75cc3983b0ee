/* Portable C kernels (the reference implementation of kernels.h's contract,
 * used on CPUs without AVX2/FMA and when ATTN_ISA=generic). Built with
 * -ffp-contract=off: every rounding is the one written here, so exp_row
 * rounds the scaled score before subtracting m on every CPU. */
#include "../kernels.h"
#include "../../base/half.h"

#include <math.h>

/* C[6x16] (+)= A[6xK] B[Kx16] with A(i, k) at A[i * rs + k * cs]. */
static void gemm_6x16_strided(int64_t K, const float *A, int64_t rs, int64_t cs, const float *B, int64_t ldb, float *C,
                              int64_t ldc, int acc) {
    float c[6][16];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 16; j++) c[i][j] = acc ? C[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        for (int i = 0; i < 6; i++) {
            float a = A[i * rs + k * cs];
            for (int j = 0; j < 16; j++) c[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 16; j++) C[i * ldc + j] = c[i][j];
}

static void gemm_6x16(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                      int acc) {
    gemm_6x16_strided(K, A, lda, 1, B, ldb, C, ldc, acc);
}

static void gemm_6x16_tn(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                         int acc) {
    gemm_6x16_strided(K, A, 1, lda, B, ldb, C, ldc, acc);
}

/* Cephes-style expf: exp(x) = 2^n * p(r), r = x - n ln2 (two-part ln2). */
static float exp_cephes(float x) {
    if (x < -87.33654f) return 0.0f;
    if (x > 88.3762626647949f) x = 88.3762626647949f;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * r * r + r + 1.0f;
    return ldexpf(y, (int)n);
}

static float exp_row(const float *x, float *y, int64_t n, float scale, float m) {
    float lane[8] = {0};
    for (int64_t j = 0; j < n; j++) {
        float e = exp_cephes(x[j] * scale - m);
        y[j] = e;
        lane[j & 7] += e;
    }
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static void dropout_mcg(float *t, int64_t n, uint32_t x, uint32_t thr, float scale) {
    for (int64_t j = 0; j < n; j++) {
        t[j] *= x < thr ? scale : 0.0f;
        x = attn_m31_mul(x, 1132489760u);
    }
}

static float max_row(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

static void scale_row(float *x, int64_t n, float a) {
    for (int64_t j = 0; j < n; j++) x[j] *= a;
}

static float dot_row(const float *x, const float *y, int64_t n) {
    float lane[8] = {0};
    for (int64_t j = 0; j < n; j++) lane[j & 7] += x[j] * y[j];
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static float tanh_rational(float x) {
    if (fabsf(x) < 0.0004f) return x;
    x = fminf(fmaxf(x, -ATTN_TANH_CLAMP), ATTN_TANH_CLAMP);
    float x2 = x * x;
    float p = ATTN_TANH_A13;
    p = p * x2 + ATTN_TANH_A11;
    p = p * x2 + ATTN_TANH_A9;
    p = p * x2 + ATTN_TANH_A7;
    p = p * x2 + ATTN_TANH_A5;
    p = p * x2 + ATTN_TANH_A3;
    p = p * x2 + ATTN_TANH_A1;
    p = p * x;
    float q = ATTN_TANH_B6;
    q = q * x2 + ATTN_TANH_B4;
    q = q * x2 + ATTN_TANH_B2;
    q = q * x2 + ATTN_TANH_B0;
    return p / q;
}

static void softcap_row(float *x, int64_t n, float scale, float cap) {
    float f = scale / cap;
    for (int64_t j = 0; j < n; j++) x[j] = cap * tanh_rational(x[j] * f);
}

static void alibi_row(float *x, int64_t n, float slope, float dist0) {
    for (int64_t j = 0; j < n; j++) x[j] += -slope * fabsf(dist0 - (float)j);
}

static void qk_rows(const float *Q, int64_t R, int64_t D, const float *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                    const float *pre, int64_t ldpre, int64_t wpre) {
    (void)pre, (void)ldpre, (void)wpre;
    for (int64_t j = 0; j < n; j++) {
        const float *k = K + j * ldk;
        for (int64_t r = 0; r < R; r++) {
            const float *q = Q + r * D;
            float lane[8] = {0};
            for (int64_t c = 0; c < D; c++) lane[c & 7] += q[c] * k[c];
            S[r * lds + j] = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        }
    }
}

static void pv_rows(const float *P, int64_t ldp, int64_t R, const float *V, int64_t ldv, int64_t n, int64_t Dv,
                    float *O, int64_t ldo, const float *pre, int64_t ldpre, int64_t wpre) {
    (void)pre, (void)ldpre, (void)wpre;
    for (int64_t r = 0; r < R; r++) {
        float *o = O + r * ldo;
        for (int64_t j = 0; j < n; j++) {
            float p = P[r * ldp + j];
            const float *v = V + j * ldv;
            for (int64_t c = 0; c < Dv; c++) o[c] += p * v[c];
        }
    }
}

/* reduced-precision rows: converted element by element (base/half.h), then as above */
static float kvx(const void *row, int64_t c, int kind) {
    if (kind == ATTN_KV_Q8) return attn_q8_get(row, c);
    uint16_t u = ((const uint16_t *)row)[c];
    return kind == ATTN_KV_BF16 ? attn_bf16_to_f32(u) : attn_f16_to_f32(u);
}

static void qk_rows_x(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                      int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, int kind) {
    (void)pre, (void)ldpre, (void)wpre;
    for (int64_t j = 0; j < n; j++) {
        const void *k = (const char *)K + attn_kv_bytes(kind, j * ldk);
        for (int64_t r = 0; r < R; r++) {
            const float *q = Q + r * D;
            float lane[8] = {0};
            for (int64_t c = 0; c < D; c++) lane[c & 7] += q[c] * kvx(k, c, kind);
            S[r * lds + j] = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        }
    }
}

static void pv_rows_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                      float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, int kind) {
    (void)pre, (void)ldpre, (void)wpre;
    for (int64_t r = 0; r < R; r++) {
        float *o = O + r * ldo;
        for (int64_t j = 0; j < n; j++) {
            float p = P[r * ldp + j];
            const void *v = (const char *)V + attn_kv_bytes(kind, j * ldv);
            for (int64_t c = 0; c < Dv; c++) o[c] += p * kvx(v, c, kind);
        }
    }
}

const attn_kernel_table attn_kernels_generic = {"generic", gemm_6x16, gemm_6x16_tn, exp_row,     dropout_mcg,
                                                max_row,   scale_row, dot_row,      softcap_row, alibi_row,
                                                qk_rows,   pv_rows,   qk_rows_x,    pv_rows_x};
