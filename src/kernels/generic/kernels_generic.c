/* Portable C kernels (the reference implementation of kernels.h's contract,
 * used on CPUs without AVX2/FMA and when ATTN_ISA=generic). Built with
 * -ffp-contract=off: every rounding is the one written here, so exp2_row
 * rounds the scaled score before subtracting m on every CPU. */
#include "../kernels.h"
#include "base/quant.h"
#include "../../base/half.h"

#include <math.h>
#include <string.h>

/* 4-lane float vectors of the compiler (GCC/Clang vector extensions: SSE on
 * x86-64, NEON on aarch64, scalar code elsewhere): portable C, no intrinsics. */
typedef float v4 __attribute__((vector_size(16)));

static inline v4 v4_load(const float *p) {
    v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void v4_store(float *p, v4 v) { memcpy(p, &v, sizeof v); }

/* C[6x16] (+)= A[6xK] B[Kx16] with A(i, k) at A[i * rs + k * cs], as two
 * 3 x 16 halves: 12 vector accumulators and one broadcast, the B vectors
 * operands from memory (L1). Per k and half 3 broadcasts for 12 vector
 * multiply-adds (6 x 8 halves: 6 for 12; the broadcast shuffles share the
 * pipes of the multiplies and adds). */
static void gemm_6x16_strided(int64_t K, const float *A, int64_t rs, int64_t cs, const float *B, int64_t ldb, float *C,
                              int64_t ldc, int acc) {
    for (int h = 0; h < 6; h += 3) {
        v4 c[3][4];
        for (int i = 0; i < 3; i++)
            for (int w = 0; w < 4; w++) c[i][w] = acc ? v4_load(C + (h + i) * ldc + 4 * w) : (v4){0, 0, 0, 0};
        const float *a = A + h * rs;
        for (int64_t k = 0; k < K; k++) {
            const float *b = B + k * ldb;
            for (int i = 0; i < 3; i++) {
                float s = a[i * rs + k * cs];
                v4 av = {s, s, s, s};
                for (int w = 0; w < 4; w++) c[i][w] += av * v4_load(b + 4 * w);
            }
        }
        for (int i = 0; i < 3; i++)
            for (int w = 0; w < 4; w++) v4_store(C + (h + i) * ldc + 4 * w, c[i][w]);
    }
}

static void gemm_6x16(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                      int acc) {
    gemm_6x16_strided(K, A, lda, 1, B, ldb, C, ldc, acc);
}

static void gemm_6x16_tn(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                         int acc) {
    gemm_6x16_strided(K, A, 1, lda, B, ldb, C, ldc, acc);
}

/* 2^t in the AVX2 kernel's steps, without FMA (one rounding per
 * operation): t clamped to [-127, 127], n = round(t) to nearest even (the
 * 1.5 * 2^23 addition), 2^f for f = t - n in Estrin's scheme, times 2^n
 * built in the exponent field (n = -127 gives exactly 0). NaN stays NaN. */
#define EXP2_MAGIC 12582912.0f
static float exp2_scalar(float t) {
    if (t != t) return t; /* NaN (the conversion below would be undefined) */
    t = t < -127.0f ? -127.0f : t > 127.0f ? 127.0f : t;
    float n = (t + EXP2_MAGIC) - EXP2_MAGIC, f = t - n, f2 = f * f;
    float p01 = f * ATTN_EXP2_C1 + 1.0f, p23 = f * ATTN_EXP2_C3 + ATTN_EXP2_C2, p45 = f * ATTN_EXP2_C5 + ATTN_EXP2_C4;
    float y = f2 * (f2 * (f2 * ATTN_EXP2_C6 + p45) + p23) + p01;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float e;
    memcpy(&e, &bits, sizeof e);
    return y * e;
}

typedef int32_t v4i __attribute__((vector_size(16)));

/* exp2_scalar on 4 lanes, bitwise the same per lane */
static inline v4 v4_exp2(v4 t) {
    const v4 lo = {-127.0f, -127.0f, -127.0f, -127.0f}, hi = {127.0f, 127.0f, 127.0f, 127.0f};
    const v4 magic = {EXP2_MAGIC, EXP2_MAGIC, EXP2_MAGIC, EXP2_MAGIC};
    v4i under = t<lo, over = t> hi, nan = t != t;
    /* every lane stays in range for the integer steps; NaN lanes compute
     * with t = 0 and are made NaN again at the end */
    t = (v4)(((v4i)t & ~(over | under | nan)) | ((v4i)hi & over) | ((v4i)lo & under));
    v4 n = (t + magic) - magic, f = t - n, f2 = f * f;
    v4 p01 = f * ATTN_EXP2_C1 + 1.0f, p23 = f * ATTN_EXP2_C3 + ATTN_EXP2_C2, p45 = f * ATTN_EXP2_C5 + ATTN_EXP2_C4;
    v4 y = f2 * (f2 * (f2 * ATTN_EXP2_C6 + p45) + p23) + p01;
    v4i ni = __builtin_convertvector(n, v4i);
    y = y * (v4)((ni + 127) << 23);
    const v4 qnan = {NAN, NAN, NAN, NAN};
    return (v4)(((v4i)y & ~nan) | ((v4i)qnan & nan));
}

static float exp2_row(const float *x, float *y, int64_t n, float scale, float m) {
    v4 l0 = {0, 0, 0, 0}, l1 = l0; /* lanes j % 8 = 0..3 and 4..7 */
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        v4 e0 = v4_exp2(v4_load(x + j) * scale - m), e1 = v4_exp2(v4_load(x + j + 4) * scale - m);
        v4_store(y + j, e0), v4_store(y + j + 4, e1);
        l0 += e0, l1 += e1;
    }
    float lane[8];
    v4_store(lane, l0), v4_store(lane + 4, l1);
    for (; j < n; j++) {
        float e = exp2_scalar(x[j] * scale - m);
        y[j] = e;
        lane[j & 7] += e;
    }
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static float exp2_dot_row(const float *x, const float *w, int64_t n, float scale, float m, float *dot) {
    v4 l0 = {0, 0, 0, 0}, l1 = l0, d0 = l0, d1 = l0; /* lanes j % 8 = 0..3 and 4..7, as exp2_row / dot_row */
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        v4 e0 = v4_exp2(v4_load(x + j) * scale - m), e1 = v4_exp2(v4_load(x + j + 4) * scale - m);
        l0 += e0, l1 += e1;
        d0 += e0 * v4_load(w + j), d1 += e1 * v4_load(w + j + 4);
    }
    float lane[8], dl[8];
    v4_store(lane, l0), v4_store(lane + 4, l1), v4_store(dl, d0), v4_store(dl + 4, d1);
    for (; j < n; j++) {
        float e = exp2_scalar(x[j] * scale - m);
        lane[j & 7] += e;
        dl[j & 7] += e * w[j];
    }
    *dot = ((dl[0] + dl[4]) + (dl[1] + dl[5])) + ((dl[2] + dl[6]) + (dl[3] + dl[7]));
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

static void softmax_grad_row(const float *x, float *p, float *g, int64_t n, float escale, float m, float il, float di,
                             float scale) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        v4 pv = v4_exp2(v4_load(x + j) * escale - m) * il;
        v4_store(p + j, pv);
        v4_store(g + j, pv * (v4_load(g + j) - di) * scale);
    }
    for (; j < n; j++) {
        p[j] = exp2_scalar(x[j] * escale - m) * il;
        g[j] = p[j] * (g[j] - di) * scale;
    }
}

static void dropout_mcg(float *t, int64_t n, uint32_t x, uint32_t thr, float scale) {
    for (int64_t j = 0; j < n; j++) {
        t[j] *= x < thr ? scale : 0.0f;
        x = attn_m31_mul(x, 1132489760u);
    }
}

static inline v4 v4_max_keep(v4 m, v4 v) { /* per lane v > m ? v : m (a NaN never wins) */
    v4i gt = v > m;
    return (v4)(((v4i)v & gt) | ((v4i)m & ~gt));
}

static float max_row(const float *x, int64_t n) {
    const v4 ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    v4 m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf; /* four chains: the compare-select latency overlaps */
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        m0 = v4_max_keep(m0, v4_load(x + j)), m1 = v4_max_keep(m1, v4_load(x + j + 4));
        m2 = v4_max_keep(m2, v4_load(x + j + 8)), m3 = v4_max_keep(m3, v4_load(x + j + 12));
    }
    for (; j + 4 <= n; j += 4) m0 = v4_max_keep(m0, v4_load(x + j));
    v4 mv = v4_max_keep(v4_max_keep(m0, m1), v4_max_keep(m2, m3));
    float lane[4], m = -INFINITY;
    v4_store(lane, mv);
    for (int l = 0; l < 4; l++) m = lane[l] > m ? lane[l] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
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
    if (fabsf(x) < 0.0004f || x != x) return x; /* NaN stays NaN (fminf/fmaxf would drop it) */
    if (fabsf(x) > ATTN_TANH_CLAMP) return x > 0 ? 1.0f : -1.0f;
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

/* reduced-precision rows: converted element by element (the storage table's
 * get, base/storage.h), then as above; one body per type so that the
 * conversion inlines */
static inline void qk_body_x(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                             int64_t lds, attn_dtype dt) {
    const attn_storage *st = attn_storage_of(dt);
    for (int64_t j = 0; j < n; j++) {
        const void *k = (const char *)K + attn_storage_bytes(dt, j * ldk);
        for (int64_t r = 0; r < R; r++) {
            const float *q = Q + r * D;
            float lane[8] = {0};
            for (int64_t c = 0; c < D; c++) lane[c & 7] += q[c] * st->get(k, c);
            S[r * lds + j] = ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        }
    }
}

static inline void pv_body_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                             float *O, int64_t ldo, attn_dtype dt) {
    const attn_storage *st = attn_storage_of(dt);
    for (int64_t r = 0; r < R; r++) {
        float *o = O + r * ldo;
        for (int64_t j = 0; j < n; j++) {
            float p = P[r * ldp + j];
            const void *v = (const char *)V + attn_storage_bytes(dt, j * ldv);
            if (dt == ATTN_DTYPE_KV_INT4) /* codes (base/quant.h: their order depends on the row's length) */
                for (int64_t c = 0; c < Dv; c++) o[c] += p * (float)attn_q4a_code(v, Dv, c);
            else
                for (int64_t c = 0; c < Dv; c++) o[c] += p * st->get(v, c);
        }
    }
}

static void qk_rows_x(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                      int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt) {
    (void)pre, (void)ldpre, (void)wpre;
    if (dt == ATTN_DTYPE_F16)
        qk_body_x(Q, R, D, K, ldk, n, S, lds, ATTN_DTYPE_F16);
    else if (dt == ATTN_DTYPE_BF16)
        qk_body_x(Q, R, D, K, ldk, n, S, lds, ATTN_DTYPE_BF16);
    else if (dt == ATTN_DTYPE_Q8_0)
        qk_body_x(Q, R, D, K, ldk, n, S, lds, ATTN_DTYPE_Q8_0);
    else /* the one-byte formats' codes (fp8 values, int8 codes) */
        qk_body_x(Q, R, D, K, ldk, n, S, lds, dt);
}

static void pv_rows_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                      float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt) {
    (void)pre, (void)ldpre, (void)wpre;
    if (dt == ATTN_DTYPE_F16)
        pv_body_x(P, ldp, R, V, ldv, n, Dv, O, ldo, ATTN_DTYPE_F16);
    else if (dt == ATTN_DTYPE_BF16)
        pv_body_x(P, ldp, R, V, ldv, n, Dv, O, ldo, ATTN_DTYPE_BF16);
    else if (dt == ATTN_DTYPE_Q8_0)
        pv_body_x(P, ldp, R, V, ldv, n, Dv, O, ldo, ATTN_DTYPE_Q8_0);
    else /* the one-byte formats' codes (fp8 values, int8 codes) */
        pv_body_x(P, ldp, R, V, ldv, n, Dv, O, ldo, dt);
}

/* x rounded in place to t and the sum of the rounded values, in lanes of 8
 * then pairwise (as exp2_row sums) */
static float round_row(float *x, int64_t n, attn_dtype t) {
    attn_st_round(t, x, n);
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; j++) lane[j % 8] += x[j];
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

/* exp2_row, then round_row: the exponentials rounded to t and their sum */
static float exp2_round_row(const float *x, float *y, int64_t n, float scale, float m, attn_dtype t) {
    exp2_row(x, y, n, scale, m);
    return round_row(y, n, t);
}

/* exp2_round_row's values (exp2_row's for rt F32) written as st; the sum
 * in exp2_row's lanes of 8, then pairwise (chunks of 64: lane j % 8 of the
 * whole row) */
static float exp2_store_row(const float *x, int64_t n, float scale, float m, attn_dtype rt, attn_dtype st, void *dst) {
    float part[64], lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < n; j += 64) {
        int64_t k = n - j < 64 ? n - j : 64;
        exp2_row(x + j, part, k, scale, m);
        if (rt != ATTN_DTYPE_F32) attn_st_round(rt, part, k);
        for (int64_t i = 0; i < k; i++) lane[(j + i) % 8] += part[i];
        attn_storage_of(st)->store(part, k, (char *)dst + attn_storage_bytes(st, j));
    }
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

/* softmax_grad_row into float chunks, rounded to rt, written as st */
static void softmax_grad_store_row(const float *x, const float *g, int64_t n, float escale, float m, float il, float di,
                                   float scale, attn_dtype rt, attn_dtype st, void *pd, void *gd) {
    float p[64], q[64];
    const attn_storage *to = attn_storage_of(st);
    for (int64_t j = 0; j < n; j += 64) {
        int64_t k = n - j < 64 ? n - j : 64;
        memcpy(q, g + j, (size_t)k * sizeof(float));
        softmax_grad_row(x + j, p, q, k, escale, m, il, di, scale);
        if (rt != ATTN_DTYPE_F32) attn_st_round(rt, p, k), attn_st_round(rt, q, k);
        to->store(p, k, (char *)pd + attn_storage_bytes(st, j));
        to->store(q, k, (char *)gd + attn_storage_bytes(st, j));
    }
}

/* x rounded to rt, then the storage's store as st (64 at a time) */
static void store_row(const float *x, int64_t n, attn_dtype rt, attn_dtype st, void *dst) {
    float part[64];
    for (int64_t j = 0; j < n; j += 64) {
        int64_t k = n - j < 64 ? n - j : 64;
        memcpy(part, x + j, (size_t)k * sizeof(float));
        if (rt != ATTN_DTYPE_F32) attn_st_round(rt, part, k);
        attn_storage_of(st)->store(part, k, (char *)dst + attn_storage_bytes(st, j));
    }
}

/* int8 Q K^T of q8_0 blocks (kernels.h): per block the exact int32 dot
 * times d_q d_k, summed in float32 in block order */
/* block b (32 values) of a key row of type kt as integers (kernels.h
 * qk_rows_q8: q8_0 values, int8 codes - 128, int4 codes, q4_0 codes - 8)
 * into v; returns the block's scale (1 for the row-scaled formats) */
static float key_block_ints(const unsigned char *k, int64_t D, int64_t b, attn_dtype kt, int32_t *v) {
    uint16_t h;
    if (kt == ATTN_DTYPE_Q8_0 || kt == ATTN_DTYPE_Q4_0) {
        const unsigned char *blk = k + (size_t)b * (kt == ATTN_DTYPE_Q8_0 ? ATTN_Q8_BYTES : ATTN_Q4_BYTES);
        memcpy(&h, blk, 2);
        for (int c = 0; c < 32; c++)
            v[c] = kt == ATTN_DTYPE_Q8_0 ? (int32_t)(int8_t)blk[2 + c]
                                         : (int32_t)(c < 16 ? blk[2 + c] & 15 : blk[2 + c - 16] >> 4) - 8;
        return attn_f16_to_f32(h);
    }
    for (int c = 0; c < 32; c++)
        v[c] = kt == ATTN_DTYPE_KV_INT8 ? (int32_t)k[b * 32 + c] - 128 : attn_q4a_code(k, D, b * 32 + c);
    return 1.0f;
}

static void qk_rows_q8(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                       int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt) {
    (void)pre, (void)ldpre, (void)wpre;
    size_t kr = attn_storage_bytes(kt, ldk), qr = attn_q8_row_bytes(D);
    int32_t v[32];
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < n; j++) {
            const unsigned char *q = (const unsigned char *)Q + (size_t)r * qr,
                                *k = (const unsigned char *)K + (size_t)j * kr;
            float acc = 0.0f;
            for (int64_t b = 0; b < D / ATTN_Q8_BLOCK; b++, q += ATTN_Q8_BYTES) {
                float dk = key_block_ints(k, D, b, kt, v);
                int32_t dot = 0;
                for (int c = 0; c < ATTN_Q8_BLOCK; c++) dot += (int32_t)(int8_t)q[2 + c] * v[c];
                uint16_t hq;
                memcpy(&hq, q, 2);
                acc += (float)dot * (attn_f16_to_f32(hq) * dk);
            }
            S[r * lds + j] = acc;
        }
}

/* P V in integers (kernels.h pv_rows_i16): per 64 keys each row's P (q4_0,
 * q8_0: P d, a row a block of 32 columns) rounded (attn_p16_quantize), each
 * column's exact int32 sum, one fmaf */
static int32_t pvi_code(const unsigned char *v, attn_dtype vt, int64_t Dv, int64_t c) {
    if (vt == ATTN_DTYPE_KV_INT8) return v[c];
    if (vt == ATTN_DTYPE_Q4_0) return attn_q4_code(v, c) - 8;
    return vt == ATTN_DTYPE_Q8_0 ? attn_q8_code(v, c) : attn_q4a_code(v, Dv, c);
}
static void pv_rows_i16(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                        float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype vt) {
    (void)pre, (void)ldpre, (void)wpre;
    size_t vs = attn_storage_bytes(vt, ldv);
    int blk = vt == ATTN_DTYPE_Q4_0 || vt == ATTN_DTYPE_Q8_0;
    int64_t cw = blk ? 32 : Dv; /* columns a row of weights */
    int16_t q[64];
    float w[64];
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t nb = n - j0 < 64 ? n - j0 : 64;
        const unsigned char *Vb = (const unsigned char *)V + (size_t)j0 * vs;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c0 = 0; c0 < Dv; c0 += cw) {
                for (int64_t j = 0; j < nb; j++) {
                    const unsigned char *v = Vb + (size_t)j * vs;
                    float d = !blk ? 1.0f : vt == ATTN_DTYPE_Q4_0 ? attn_q4_d(v, c0) : attn_q8_d(v, c0);
                    w[j] = P[r * ldp + j0 + j] * d;
                }
                float u = attn_p16_quantize(w, nb, q);
                for (int64_t c = c0; c < c0 + cw; c++) {
                    int32_t acc = 0;
                    for (int64_t j = 0; j < nb; j++) acc += (int32_t)q[j] * pvi_code(Vb + (size_t)j * vs, vt, Dv, c);
                    O[r * ldo + c] = fmaf(u, (float)acc, O[r * ldo + c]);
                }
            }
    }
}

/* the serving formats' rows as float32: the storage's own definition */
static void kv_rows(const void *src, int64_t ld, int64_t nb, int64_t n, attn_dtype t, const float *par, int64_t pld,
                    float *dst) {
    for (int64_t j = 0; j < nb; j++)
        attn_st_load_row(t, (const char *)src + attn_storage_bytes(t, j * ld), n, par + 2 * j * pld, dst + j * n);
}

static void add_row(float *x, int64_t n, float a) {
    for (int64_t i = 0; i < n; i++) x[i] += a;
}

static float q8_row(float *x, int64_t n, attn_dtype t, void *dst) {
    if (t == ATTN_DTYPE_Q8_ROW)
        attn_q8_quantize_row(x, n, dst);
    else
        attn_q8_quantize(x, n, dst);
    attn_st_load_q8(dst, n, x);
    float a;
    attn_q8_amax(x, n, &a);
    return a;
}

const attn_kernel_table attn_kernels_generic = {"generic",
                                                6,
                                                4,
                                                gemm_6x16,
                                                gemm_6x16_tn,
                                                exp2_row,
                                                exp2_dot_row,
                                                softmax_grad_row,
                                                dropout_mcg,
                                                max_row,
                                                scale_row,
                                                dot_row,
                                                softcap_row,
                                                alibi_row,
                                                qk_rows,
                                                pv_rows,
                                                qk_rows_x,
                                                pv_rows_x,
                                                round_row,
                                                exp2_round_row,
                                                exp2_store_row,
                                                softmax_grad_store_row,
                                                store_row,
                                                qk_rows_q8,
                                                pv_rows_i16,
                                                kv_rows,
                                                ATTN_MATH_TYPES_Q8,
                                                ATTN_MATH_PRODUCTS_Q8,
                                                NULL,
                                                NULL,
                                                NULL,
                                                NULL,
                                                0,
                                                attn_rowpar_scores,
                                                attn_rowpar_p,
                                                add_row,
                                                q8_row};
