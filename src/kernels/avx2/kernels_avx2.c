/* AVX2 + FMA (+ F16C) kernels. This is the only file built with -mavx2
 * -mfma -mf16c; it is called only after attn_kernels() has checked the CPU. */
#include "../kernels.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* C[6x16] (+)= A[6xK] B[Kx16]: 12 accumulators, 6 broadcasts and 2 loads per
 * k. A(i, k) is at A[i * rs + k * cs]: (lda, 1) for a row-major A, (1, lda)
 * for a transposed one. */
static inline __attribute__((always_inline)) void gemm_6x16_strided(int64_t K, const float *A, int64_t rs, int64_t cs,
                                                                    const float *B, int64_t ldb, float *C, int64_t ldc,
                                                                    int acc) {
    __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (acc) {
        c00 = _mm256_loadu_ps(C + 0 * ldc), c01 = _mm256_loadu_ps(C + 0 * ldc + 8);
        c10 = _mm256_loadu_ps(C + 1 * ldc), c11 = _mm256_loadu_ps(C + 1 * ldc + 8);
        c20 = _mm256_loadu_ps(C + 2 * ldc), c21 = _mm256_loadu_ps(C + 2 * ldc + 8);
        c30 = _mm256_loadu_ps(C + 3 * ldc), c31 = _mm256_loadu_ps(C + 3 * ldc + 8);
        c40 = _mm256_loadu_ps(C + 4 * ldc), c41 = _mm256_loadu_ps(C + 4 * ldc + 8);
        c50 = _mm256_loadu_ps(C + 5 * ldc), c51 = _mm256_loadu_ps(C + 5 * ldc + 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_ps();
    }
    const float *a0 = A, *a1 = A + rs, *a2 = A + 2 * rs, *a3 = A + 3 * rs, *a4 = A + 4 * rs, *a5 = A + 5 * rs;
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; k++) {
        __m256 b0 = _mm256_loadu_ps(B + k * ldb), b1 = _mm256_loadu_ps(B + k * ldb + 8);
        __m256 a;
        a = _mm256_broadcast_ss(a0 + k * cs);
        c00 = _mm256_fmadd_ps(a, b0, c00), c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(a1 + k * cs);
        c10 = _mm256_fmadd_ps(a, b0, c10), c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(a2 + k * cs);
        c20 = _mm256_fmadd_ps(a, b0, c20), c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(a3 + k * cs);
        c30 = _mm256_fmadd_ps(a, b0, c30), c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(a4 + k * cs);
        c40 = _mm256_fmadd_ps(a, b0, c40), c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(a5 + k * cs);
        c50 = _mm256_fmadd_ps(a, b0, c50), c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    _mm256_storeu_ps(C + 0 * ldc, c00), _mm256_storeu_ps(C + 0 * ldc + 8, c01);
    _mm256_storeu_ps(C + 1 * ldc, c10), _mm256_storeu_ps(C + 1 * ldc + 8, c11);
    _mm256_storeu_ps(C + 2 * ldc, c20), _mm256_storeu_ps(C + 2 * ldc + 8, c21);
    _mm256_storeu_ps(C + 3 * ldc, c30), _mm256_storeu_ps(C + 3 * ldc + 8, c31);
    _mm256_storeu_ps(C + 4 * ldc, c40), _mm256_storeu_ps(C + 4 * ldc + 8, c41);
    _mm256_storeu_ps(C + 5 * ldc, c50), _mm256_storeu_ps(C + 5 * ldc + 8, c51);
}

/* the two contract entries, each a specialization of the strided kernel */
static void gemm_6x16(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                      int acc) {
    gemm_6x16_strided(K, A, lda, 1, B, ldb, C, ldc, acc);
}

static void gemm_6x16_tn(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                         int acc) {
    gemm_6x16_strided(K, A, 1, lda, B, ldb, C, ldc, acc);
}

/* 2^t on 8 lanes: t clamped to [-127, 127] (NaN stays NaN: the clamps
 * keep a NaN operand second), n = round(t) (vroundps, to nearest even),
 * 2^f for f = t - n in [-1/2, 1/2] by a degree-6 minimax polynomial
 * (relative error 3.9e-9) evaluated in Estrin's scheme (three dependent
 * FMAs instead of six: the chain's latency, not the FMA count, bounds this
 * loop), times 2^n built in the exponent field; n = -127 gives exactly 0. */
static inline __m256 exp2_8(__m256 t) {
    t = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), t));
    __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(t, n), f2 = _mm256_mul_ps(f, f);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 p01 = _mm256_fmadd_ps(f, _mm256_set1_ps(ATTN_EXP2_C1), _mm256_set1_ps(1.0f));
    __m256 p23 = _mm256_fmadd_ps(f, _mm256_set1_ps(ATTN_EXP2_C3), _mm256_set1_ps(ATTN_EXP2_C2));
    __m256 p45 = _mm256_fmadd_ps(f, _mm256_set1_ps(ATTN_EXP2_C5), _mm256_set1_ps(ATTN_EXP2_C4));
    __m256 p46 = _mm256_fmadd_ps(f2, _mm256_set1_ps(ATTN_EXP2_C6), p45);
    __m256 p26 = _mm256_fmadd_ps(f2, p46, p23);
    __m256 y = _mm256_fmadd_ps(f2, p26, p01);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 tail_mask(int64_t r) {
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* 2^(fl(x * scale) - m) of 8 lanes (the multiply skipped when scale is 1:
 * x * 1 = x) and, masked, of the n - j < 8 lanes of a row's tail (zeros past
 * its end): the one argument rule of the exp2 row kernels. */
static inline __m256 exp2_at(const float *x, __m256 vs, int unit, __m256 vm) {
    __m256 t = _mm256_loadu_ps(x);
    return exp2_8(_mm256_sub_ps(unit ? t : _mm256_mul_ps(t, vs), vm));
}

static inline __m256 exp2_tail(const float *x, __m256i mk, __m256 vs, __m256 vm) {
    __m256 e = exp2_8(_mm256_sub_ps(_mm256_mul_ps(_mm256_maskload_ps(x, mk), vs), vm));
    return _mm256_and_ps(e, _mm256_castsi256_ps(mk));
}

static float exp2_row(const float *x, float *y, int64_t n, float scale, float m) {
    __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int unit = scale == 1.0f;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp2_at(x + j, vs, unit, vm);
        _mm256_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    if (j < n) {
        __m256i mk = _mm256_castps_si256(tail_mask(n - j));
        __m256 e = exp2_tail(x + j, mk, vs, vm);
        _mm256_maskstore_ps(y + j, mk, e);
        acc = _mm256_add_ps(acc, e);
    }
    return hsum8(acc);
}

/* exp2_row without storing y, and dot_row(y, w) from the same values: the
 * two sums accumulate exactly as those two kernels do (same bits). */
static float exp2_dot_row(const float *x, const float *w, int64_t n, float scale, float m, float *dot) {
    __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps(), dacc = acc;
    int unit = scale == 1.0f;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp2_at(x + j, vs, unit, vm);
        acc = _mm256_add_ps(acc, e);
        dacc = _mm256_fmadd_ps(e, _mm256_loadu_ps(w + j), dacc);
    }
    float tail[8], d = hsum8(dacc);
    if (j < n) {
        __m256 e = exp2_tail(x + j, _mm256_castps_si256(tail_mask(n - j)), vs, vm);
        acc = _mm256_add_ps(acc, e);
        _mm256_storeu_ps(tail, e);
        for (int64_t i = 0; j + i < n; i++) d += tail[i] * w[j + i];
    }
    *dot = d;
    return hsum8(acc);
}

/* p = exp2_row(x) * il (scale_row), g = (p * (g - di)) * scale: the backward's
 * P and dS in one pass, elementwise the same operations (same bits). */
static void softmax_grad_row(const float *x, float *p, float *g, int64_t n, float escale, float m, float il, float di,
                             float scale) {
    __m256 vs = _mm256_set1_ps(escale), vm = _mm256_set1_ps(m), vil = _mm256_set1_ps(il);
    __m256 vdi = _mm256_set1_ps(di), vsc = _mm256_set1_ps(scale);
    int unit = escale == 1.0f;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 pv = _mm256_mul_ps(exp2_at(x + j, vs, unit, vm), vil);
        _mm256_storeu_ps(p + j, pv);
        _mm256_storeu_ps(g + j, _mm256_mul_ps(_mm256_mul_ps(pv, _mm256_sub_ps(_mm256_loadu_ps(g + j), vdi)), vsc));
    }
    if (j < n) {
        __m256i mk = _mm256_castps_si256(tail_mask(n - j));
        __m256 pv = _mm256_mul_ps(exp2_tail(x + j, mk, vs, vm), vil);
        __m256 gv = _mm256_mul_ps(_mm256_mul_ps(pv, _mm256_sub_ps(_mm256_maskload_ps(g + j, mk), vdi)), vsc);
        _mm256_maskstore_ps(p + j, mk, pv);
        _mm256_maskstore_ps(g + j, mk, gv);
    }
}

/* 4 lanes of x * c mod (2^31 - 1), x and c in the low 32 bits of 64-bit lanes */
static inline __m256i mulmod_m31_4(__m256i x, __m256i c) {
    const __m256i m = _mm256_set1_epi64x(0x7fffffff);
    __m256i p = _mm256_mul_epu32(x, c);
    __m256i t = _mm256_add_epi64(_mm256_and_si256(p, m), _mm256_srli_epi64(p, 31));
    __m256i ge = _mm256_cmpgt_epi64(t, _mm256_sub_epi64(m, _mm256_set1_epi64x(1)));
    return _mm256_sub_epi64(t, _mm256_and_si256(ge, m));
}

/* 8 stream elements per step: lanes hold x_j .. x_{j+7} (even lanes in one
 * register, odd in another) and advance by a^8. */
static void dropout_mcg(float *t, int64_t n, uint32_t x, uint32_t thr, float scale) {
    uint32_t xs[8], a8 = 1;
    for (int i = 0; i < 8; i++) {
        xs[i] = x;
        x = attn_m31_mul(x, 1132489760u);
        a8 = attn_m31_mul(a8, 1132489760u);
    }
    __m256i ev = _mm256_setr_epi64x(xs[0], xs[2], xs[4], xs[6]), od = _mm256_setr_epi64x(xs[1], xs[3], xs[5], xs[7]);
    const __m256i c8 = _mm256_set1_epi64x(a8), vthr = _mm256_set1_epi32((int)thr);
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        /* interleave even and odd lanes back into element order x_j .. x_{j+7} */
        __m256i xv = _mm256_or_si256(ev, _mm256_slli_epi64(od, 32));
        __m256i keep = _mm256_cmpgt_epi32(vthr, xv); /* x < thr (both < 2^31) */
        __m256 f = _mm256_and_ps(_mm256_castsi256_ps(keep), vs);
        _mm256_storeu_ps(t + j, _mm256_mul_ps(_mm256_loadu_ps(t + j), f));
        ev = mulmod_m31_4(ev, c8);
        od = mulmod_m31_4(od, c8);
    }
    if (j < n) {
        uint32_t rest[8];
        __m256i xv = _mm256_or_si256(ev, _mm256_slli_epi64(od, 32));
        _mm256_storeu_si256((__m256i *)rest, xv);
        for (int64_t i = 0; j + i < n; i++) t[j + i] *= rest[i] < thr ? scale : 0.0f;
    }
}

static float max_row(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    float r = _mm_cvtss_f32(s);
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}

static void scale_row(float *x, int64_t n, float a) {
    __m256 va = _mm256_set1_ps(a);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), va));
    for (; j < n; j++) x[j] *= a;
}

static float dot_row(const float *x, const float *y, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + j), _mm256_loadu_ps(y + j), acc);
    float r = hsum8(acc);
    for (; j < n; j++) r += x[j] * y[j];
    return r;
}

/* tanh on 8 lanes, the generic kernel's rational function */
static inline __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 tiny = _mm256_cmp_ps(ax, _mm256_set1_ps(0.0004f), _CMP_LT_OQ);
    __m256 c = _mm256_min_ps(_mm256_set1_ps(ATTN_TANH_CLAMP), _mm256_max_ps(_mm256_set1_ps(-ATTN_TANH_CLAMP), x));
    __m256 x2 = _mm256_mul_ps(c, c);
    __m256 p = _mm256_set1_ps(ATTN_TANH_A13);
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A11));
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A9));
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A7));
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A5));
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A3));
    p = _mm256_add_ps(_mm256_mul_ps(p, x2), _mm256_set1_ps(ATTN_TANH_A1));
    p = _mm256_mul_ps(p, c);
    __m256 q = _mm256_set1_ps(ATTN_TANH_B6);
    q = _mm256_add_ps(_mm256_mul_ps(q, x2), _mm256_set1_ps(ATTN_TANH_B4));
    q = _mm256_add_ps(_mm256_mul_ps(q, x2), _mm256_set1_ps(ATTN_TANH_B2));
    q = _mm256_add_ps(_mm256_mul_ps(q, x2), _mm256_set1_ps(ATTN_TANH_B0));
    /* p / q through the reciprocal estimate and one Newton step (~1 ulp; a
     * division would cost more than the whole polynomial) */
    __m256 r = _mm256_rcp_ps(q);
    r = _mm256_mul_ps(r, _mm256_fnmadd_ps(q, r, _mm256_set1_ps(2.0f)));
    return _mm256_blendv_ps(_mm256_mul_ps(p, r), x, tiny);
}

static void softcap_row(float *x, int64_t n, float scale, float cap) {
    __m256 vs = _mm256_set1_ps(scale / cap), vc = _mm256_set1_ps(cap);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 t = tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + j), vs));
        _mm256_storeu_ps(x + j, _mm256_mul_ps(vc, t));
    }
    for (; j < n; j++) { /* the tail through the same lanes */
        float buf[8] = {0};
        buf[0] = x[j];
        __m256 t = tanh8(_mm256_mul_ps(_mm256_loadu_ps(buf), vs));
        _mm256_storeu_ps(buf, _mm256_mul_ps(vc, t));
        x[j] = buf[0];
    }
}

static void alibi_row(float *x, int64_t n, float slope, float dist0) {
    const __m256 sign = _mm256_set1_ps(-0.0f), ns = _mm256_set1_ps(-slope);
    __m256 d = _mm256_sub_ps(_mm256_set1_ps(dist0), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t j = 0;
    for (; j + 8 <= n; j += 8, d = _mm256_sub_ps(d, _mm256_set1_ps(8.0f)))
        _mm256_storeu_ps(x + j, _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_mul_ps(ns, _mm256_andnot_ps(sign, d))));
    for (; j < n; j++) x[j] += -slope * fabsf(dist0 - (float)j);
}

/* Decode kernels, one body for each element type of the K/V rows (KV_F32,
 * KV_F16 through F16C, KV_BF16 by a shift), specialized at compile time. */
enum { KV_F32 = ATTN_KV_F32, KV_F16 = ATTN_KV_F16, KV_BF16 = ATTN_KV_BF16, KV_Q8 = ATTN_KV_Q8 };

/* 8 elements of a K/V row from element idx, as floats */
static inline __attribute__((always_inline)) __m256 kv_ld8(const void *row, int64_t idx, int t) {
    if (t == KV_F32) return _mm256_loadu_ps((const float *)row + idx);
    if (t == KV_Q8) { /* 8 int8 of the block holding idx, times its f16 scale */
        const unsigned char *blk = (const unsigned char *)row + (size_t)(idx >> 5) * 34;
        uint16_t dh;
        memcpy(&dh, blk, 2);
        __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + (idx & 31)))));
        return _mm256_mul_ps(q, _mm256_set1_ps(_cvtsh_ss(dh)));
    }
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + idx));
    if (t == KV_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* q8_0 pieces: the scale of the block holding idx, and 8 unscaled values */
static inline __attribute__((always_inline)) __m256 q8_scale(const void *row, int64_t idx) {
    uint16_t dh;
    memcpy(&dh, (const unsigned char *)row + (size_t)(idx >> 5) * 34, 2);
    return _mm256_set1_ps(_cvtsh_ss(dh));
}
static inline __attribute__((always_inline)) __m256 q8_raw(const void *row, int64_t idx) {
    const unsigned char *p = (const unsigned char *)row + (size_t)(idx >> 5) * 34 + 2 + (idx & 31);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* the first m < 8 elements from idx, the rest 0 (no read past the row) */
static inline __attribute__((always_inline)) __m256 kv_ld_tail(const void *row, int64_t idx, int64_t m, int t) {
    if (t == KV_F32) return _mm256_maskload_ps((const float *)row + idx, _mm256_castps_si256(tail_mask(m)));
    if (t == KV_Q8) return _mm256_setzero_ps(); /* q8_0 rows are whole blocks: no tails */
    uint16_t buf[8] = {0};
    memcpy(buf, (const uint16_t *)row + idx, (size_t)m * 2);
    return kv_ld8(buf, 0, t);
}

/* the byte address of element idx of a row (q8_0: of its 8 values) */
static inline __attribute__((always_inline)) const void *kv_elem(const void *row, int64_t idx, int t) {
    if (t == KV_Q8) return (const char *)row + (size_t)(idx >> 5) * 34 + 2 + (idx & 31);
    return (const char *)row + attn_kv_bytes(t, idx);
}

static inline __attribute__((always_inline)) const void *kv_row(const void *base, int64_t j, int64_t ld, int t) {
    return (const char *)base + attn_kv_bytes(t, j * ld);
}

static inline void prefetch_bytes(const void *p, int64_t bytes) {
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)p + c, 0, 2);
}

/* 4 query rows x 2 keys per step, 8 accumulators over D (lanes of 8, D tail
 * masked), so each key row is loaded (and converted) once for 4 rows. */
static inline __attribute__((always_inline)) void qk_body(const float *Q, int64_t R, int64_t D, const void *K,
                                                          int64_t ldk, int64_t n, float *S, int64_t lds,
                                                          const void *pre, int64_t ldpre, int64_t wpre, int t) {
    __m256 tm = tail_mask(D & 7);
    __m256i mk = _mm256_castps_si256(tm);
    int64_t D8 = D & ~(int64_t)7, pb = (int64_t)attn_kv_bytes(t, wpre);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int64_t nr = R - r0 < 4 ? R - r0 : 4;
        const float *q[4];
        for (int64_t u = 0; u < 4; u++) q[u] = Q + (r0 + (u < nr ? u : 0)) * D;
        int64_t j = 0;
        if (t != KV_Q8 && D8 == D) /* 3 keys per step: 12 accumulators, 7 loads per 12 FMAs (2 keys: 10 per 8,
                                    * which bounded the loop by the load ports) */
            for (; j + 3 <= n; j += 3) {
                const void *k0 = kv_row(K, j, ldk, t), *k1 = kv_row(K, j + 1, ldk, t), *k2 = kv_row(K, j + 2, ldk, t);
                if (pre && r0 == 0)
                    for (int64_t e = 0; e < 3; e++) prefetch_bytes(kv_row(pre, j + e, ldpre, t), pb);
                __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00, a20 = a00,
                       a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
                for (int64_t c = 0; c < D; c += 8) {
                    __m256 x0 = kv_ld8(k0, c, t), x1 = kv_ld8(k1, c, t), x2 = kv_ld8(k2, c, t), y;
                    y = _mm256_loadu_ps(q[0] + c), a00 = _mm256_fmadd_ps(y, x0, a00);
                    a01 = _mm256_fmadd_ps(y, x1, a01), a02 = _mm256_fmadd_ps(y, x2, a02);
                    y = _mm256_loadu_ps(q[1] + c), a10 = _mm256_fmadd_ps(y, x0, a10);
                    a11 = _mm256_fmadd_ps(y, x1, a11), a12 = _mm256_fmadd_ps(y, x2, a12);
                    y = _mm256_loadu_ps(q[2] + c), a20 = _mm256_fmadd_ps(y, x0, a20);
                    a21 = _mm256_fmadd_ps(y, x1, a21), a22 = _mm256_fmadd_ps(y, x2, a22);
                    y = _mm256_loadu_ps(q[3] + c), a30 = _mm256_fmadd_ps(y, x0, a30);
                    a31 = _mm256_fmadd_ps(y, x1, a31), a32 = _mm256_fmadd_ps(y, x2, a32);
                }
                __m256 t0 = _mm256_hadd_ps(a00, a01), t1 = _mm256_hadd_ps(a10, a11);
                __m256 t2 = _mm256_hadd_ps(a20, a21), t3 = _mm256_hadd_ps(a30, a31);
                __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
                __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
                __m256 v0 = _mm256_hadd_ps(a02, a12), v1 = _mm256_hadd_ps(a22, a32);
                __m256 w = _mm256_hadd_ps(v0, v1);
                __m128 s3 = _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
                float s[12];
                _mm256_storeu_ps(s, sums), _mm_storeu_ps(s + 8, s3);
                for (int64_t u = 0; u < nr; u++) {
                    float *o = S + (r0 + u) * lds + j;
                    o[0] = s[2 * u], o[1] = s[2 * u + 1], o[2] = s[8 + u];
                }
            }
        for (; j + 2 <= n; j += 2) {
            const void *k0 = kv_row(K, j, ldk, t), *k1 = kv_row(K, j + 1, ldk, t);
            if (pre && r0 == 0)
                prefetch_bytes(kv_row(pre, j, ldpre, t), pb), prefetch_bytes(kv_row(pre, j + 1, ldpre, t), pb);
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
                   a31 = a00;
            int64_t c = 0;
            __m256 s0 = _mm256_setzero_ps(), s1 = s0; /* q8_0: the current block's scales */
            for (; c < D8; c += 8) {
                __m256 x0, x1, y;
                if (t == KV_Q8) {
                    if ((c & 31) == 0) s0 = q8_scale(k0, c), s1 = q8_scale(k1, c);
                    x0 = _mm256_mul_ps(q8_raw(k0, c), s0), x1 = _mm256_mul_ps(q8_raw(k1, c), s1);
                } else {
                    x0 = kv_ld8(k0, c, t), x1 = kv_ld8(k1, c, t);
                }
                y = _mm256_loadu_ps(q[0] + c), a00 = _mm256_fmadd_ps(y, x0, a00), a01 = _mm256_fmadd_ps(y, x1, a01);
                y = _mm256_loadu_ps(q[1] + c), a10 = _mm256_fmadd_ps(y, x0, a10), a11 = _mm256_fmadd_ps(y, x1, a11);
                y = _mm256_loadu_ps(q[2] + c), a20 = _mm256_fmadd_ps(y, x0, a20), a21 = _mm256_fmadd_ps(y, x1, a21);
                y = _mm256_loadu_ps(q[3] + c), a30 = _mm256_fmadd_ps(y, x0, a30), a31 = _mm256_fmadd_ps(y, x1, a31);
            }
            if (c < D) {
                __m256 x0 = kv_ld_tail(k0, c, D - c, t), x1 = kv_ld_tail(k1, c, D - c, t), y;
                y = _mm256_maskload_ps(q[0] + c, mk), a00 = _mm256_fmadd_ps(y, x0, a00),
                a01 = _mm256_fmadd_ps(y, x1, a01);
                y = _mm256_maskload_ps(q[1] + c, mk), a10 = _mm256_fmadd_ps(y, x0, a10),
                a11 = _mm256_fmadd_ps(y, x1, a11);
                y = _mm256_maskload_ps(q[2] + c, mk), a20 = _mm256_fmadd_ps(y, x0, a20),
                a21 = _mm256_fmadd_ps(y, x1, a21);
                y = _mm256_maskload_ps(q[3] + c, mk), a30 = _mm256_fmadd_ps(y, x0, a30),
                a31 = _mm256_fmadd_ps(y, x1, a31);
            }
            /* the 8 horizontal sums at once: an hadd tree, then the two 128-bit halves */
            __m256 t0 = _mm256_hadd_ps(a00, a01), t1 = _mm256_hadd_ps(a10, a11);
            __m256 t2 = _mm256_hadd_ps(a20, a21), t3 = _mm256_hadd_ps(a30, a31);
            __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
            __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
            float s[8];
            _mm256_storeu_ps(s, sums);
            for (int64_t u = 0; u < nr; u++) S[(r0 + u) * lds + j] = s[2 * u], S[(r0 + u) * lds + j + 1] = s[2 * u + 1];
        }
        for (; j < n; j++) {
            const void *k0 = kv_row(K, j, ldk, t);
            if (pre && r0 == 0) prefetch_bytes(kv_row(pre, j, ldpre, t), pb);
            for (int64_t u = 0; u < nr; u++) {
                __m256 a = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c < D8; c += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q[u] + c), kv_ld8(k0, c, t), a);
                if (c < D) a = _mm256_fmadd_ps(_mm256_maskload_ps(q[u] + c, mk), kv_ld_tail(k0, c, D - c, t), a);
                S[(r0 + u) * lds + j] = hsum8(a);
            }
        }
    }
}

/* O rows += P V: 4 rows x 32 columns of O in 16 registers, one load of 4 V
 * vectors per key serves the 4 rows. */
static inline __attribute__((always_inline)) void pv_body(const float *P, int64_t ldp, int64_t R, const void *V,
                                                          int64_t ldv, int64_t n, int64_t Dv, float *O, int64_t ldo,
                                                          const void *pre, int64_t ldpre, int64_t wpre, int t) {
    int64_t pb = (int64_t)attn_kv_bytes(t, wpre);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int64_t nr = R - r0 < 4 ? R - r0 : 4;
        int64_t c0 = 0;
        const float *p0 = P + r0 * ldp, *p1 = p0 + ldp, *p2 = p1 + ldp, *p3 = p2 + ldp;
        size_t vs = attn_kv_bytes(t, ldv), ps = attn_kv_bytes(t, ldpre);
        if (nr == 4 && t == KV_F32) /* float32: 4 rows x 32 columns in 16 registers (V loads fold into the FMAs) */
            for (; c0 + 32 <= Dv; c0 += 32) {
                float *o0 = O + r0 * ldo + c0, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
                __m256 c00 = _mm256_loadu_ps(o0), c01 = _mm256_loadu_ps(o0 + 8), c02 = _mm256_loadu_ps(o0 + 16),
                       c03 = _mm256_loadu_ps(o0 + 24);
                __m256 c10 = _mm256_loadu_ps(o1), c11 = _mm256_loadu_ps(o1 + 8), c12 = _mm256_loadu_ps(o1 + 16),
                       c13 = _mm256_loadu_ps(o1 + 24);
                __m256 c20 = _mm256_loadu_ps(o2), c21 = _mm256_loadu_ps(o2 + 8), c22 = _mm256_loadu_ps(o2 + 16),
                       c23 = _mm256_loadu_ps(o2 + 24);
                __m256 c30 = _mm256_loadu_ps(o3), c31 = _mm256_loadu_ps(o3 + 8), c32 = _mm256_loadu_ps(o3 + 16),
                       c33 = _mm256_loadu_ps(o3 + 24);
                const float *v = (const float *)V + c0;
                /* each pass prefetches the bytes it reads (two lines), DEC_PF rows ahead */
                const char *pp = pre && r0 == 0 && c0 < wpre ? (const char *)((const float *)pre + c0) : NULL;
                for (int64_t j = 0; j < n; j++, v += ldv) {
                    if (pp)
                        __builtin_prefetch(pp + (size_t)j * ps, 0, 3),
                            __builtin_prefetch(pp + (size_t)j * ps + 64, 0, 2);
                    __m256 x0 = _mm256_loadu_ps(v), x1 = _mm256_loadu_ps(v + 8), x2 = _mm256_loadu_ps(v + 16),
                           x3 = _mm256_loadu_ps(v + 24), p;
                    p = _mm256_broadcast_ss(p0 + j);
                    c00 = _mm256_fmadd_ps(p, x0, c00), c01 = _mm256_fmadd_ps(p, x1, c01);
                    c02 = _mm256_fmadd_ps(p, x2, c02), c03 = _mm256_fmadd_ps(p, x3, c03);
                    p = _mm256_broadcast_ss(p1 + j);
                    c10 = _mm256_fmadd_ps(p, x0, c10), c11 = _mm256_fmadd_ps(p, x1, c11);
                    c12 = _mm256_fmadd_ps(p, x2, c12), c13 = _mm256_fmadd_ps(p, x3, c13);
                    p = _mm256_broadcast_ss(p2 + j);
                    c20 = _mm256_fmadd_ps(p, x0, c20), c21 = _mm256_fmadd_ps(p, x1, c21);
                    c22 = _mm256_fmadd_ps(p, x2, c22), c23 = _mm256_fmadd_ps(p, x3, c23);
                    p = _mm256_broadcast_ss(p3 + j);
                    c30 = _mm256_fmadd_ps(p, x0, c30), c31 = _mm256_fmadd_ps(p, x1, c31);
                    c32 = _mm256_fmadd_ps(p, x2, c32), c33 = _mm256_fmadd_ps(p, x3, c33);
                }
                _mm256_storeu_ps(o0, c00), _mm256_storeu_ps(o0 + 8, c01), _mm256_storeu_ps(o0 + 16, c02);
                _mm256_storeu_ps(o0 + 24, c03);
                _mm256_storeu_ps(o1, c10), _mm256_storeu_ps(o1 + 8, c11), _mm256_storeu_ps(o1 + 16, c12);
                _mm256_storeu_ps(o1 + 24, c13);
                _mm256_storeu_ps(o2, c20), _mm256_storeu_ps(o2 + 8, c21), _mm256_storeu_ps(o2 + 16, c22);
                _mm256_storeu_ps(o2 + 24, c23);
                _mm256_storeu_ps(o3, c30), _mm256_storeu_ps(o3 + 8, c31), _mm256_storeu_ps(o3 + 16, c32);
                _mm256_storeu_ps(o3 + 24, c33);
            }
        if (nr == 4 && t != KV_F32) { /* converted rows: 4 rows x 16 columns, 8 accumulators; with the two
                                       * converted V vectors and the broadcast this fits the 16 ymm registers
                                       * (32 columns spilled). Lean loops: one index for P, one V pointer
                                       * stepped by the row stride (the front end, not the FMA units, had
                                       * bounded these loops). */
            for (; c0 + 32 <= Dv; c0 += 32)
                for (int64_t h2 = 0; h2 < 32; h2 += 16) {
                    int64_t cc = c0 + h2;
                    float *o0 = O + r0 * ldo + cc, *o1 = o0 + ldo, *o2 = o1 + ldo, *o3 = o2 + ldo;
                    __m256 c00 = _mm256_loadu_ps(o0), c01 = _mm256_loadu_ps(o0 + 8);
                    __m256 c10 = _mm256_loadu_ps(o1), c11 = _mm256_loadu_ps(o1 + 8);
                    __m256 c20 = _mm256_loadu_ps(o2), c21 = _mm256_loadu_ps(o2 + 8);
                    __m256 c30 = _mm256_loadu_ps(o3), c31 = _mm256_loadu_ps(o3 + 8);
                    const char *vp = (const char *)V;
                    /* each pass prefetches the bytes it reads, DEC_PF rows ahead */
                    const char *pp = pre && r0 == 0 && cc < wpre ? (const char *)kv_elem(pre, cc, t) : NULL;
                    for (int64_t j = 0; j < n; j++, vp += vs) {
                        if (pp) __builtin_prefetch(pp + (size_t)j * ps, 0, 2);
                        __m256 x0, x1, p;
                        if (t == KV_Q8) {
                            __m256 d = q8_scale(vp, cc);
                            x0 = _mm256_mul_ps(q8_raw(vp, cc), d), x1 = _mm256_mul_ps(q8_raw(vp, cc + 8), d);
                        } else {
                            x0 = kv_ld8(vp, cc, t), x1 = kv_ld8(vp, cc + 8, t);
                        }
                        p = _mm256_broadcast_ss(p0 + j);
                        c00 = _mm256_fmadd_ps(p, x0, c00), c01 = _mm256_fmadd_ps(p, x1, c01);
                        p = _mm256_broadcast_ss(p1 + j);
                        c10 = _mm256_fmadd_ps(p, x0, c10), c11 = _mm256_fmadd_ps(p, x1, c11);
                        p = _mm256_broadcast_ss(p2 + j);
                        c20 = _mm256_fmadd_ps(p, x0, c20), c21 = _mm256_fmadd_ps(p, x1, c21);
                        p = _mm256_broadcast_ss(p3 + j);
                        c30 = _mm256_fmadd_ps(p, x0, c30), c31 = _mm256_fmadd_ps(p, x1, c31);
                    }
                    _mm256_storeu_ps(o0, c00), _mm256_storeu_ps(o0 + 8, c01);
                    _mm256_storeu_ps(o1, c10), _mm256_storeu_ps(o1 + 8, c11);
                    _mm256_storeu_ps(o2, c20), _mm256_storeu_ps(o2 + 8, c21);
                    _mm256_storeu_ps(o3, c30), _mm256_storeu_ps(o3 + 8, c31);
                }
        }
        for (; c0 < Dv; c0 += 32) { /* edges: fewer rows or a partial column block */
            int64_t nv = (Dv - c0 + 7) / 8 < 4 ? (Dv - c0 + 7) / 8 : 4; /* vectors in this column block */
            __m256 acc[4][4];
            for (int64_t u = 0; u < 4; u++)
                for (int64_t w = 0; w < 4; w++)
                    acc[u][w] =
                        (u < nr && w < nv) ? _mm256_loadu_ps(O + (r0 + u) * ldo + c0 + 8 * w) : _mm256_setzero_ps();
            for (int64_t j = 0; j < n; j++) {
                const void *v = kv_row(V, j, ldv, t);
                if (pre && r0 == 0 && c0 == 0) prefetch_bytes(kv_row(pre, j, ldpre, t), pb);
                __m256 x[4];
                for (int64_t w = 0; w < 4; w++) {
                    int64_t left = Dv - c0 - 8 * w;
                    x[w] = w >= nv     ? _mm256_setzero_ps()
                           : left >= 8 ? kv_ld8(v, c0 + 8 * w, t)
                                       : kv_ld_tail(v, c0 + 8 * w, left, t);
                }
                for (int64_t u = 0; u < nr; u++) {
                    __m256 p = _mm256_broadcast_ss(P + (r0 + u) * ldp + j);
                    for (int64_t w = 0; w < 4; w++) acc[u][w] = _mm256_fmadd_ps(p, x[w], acc[u][w]);
                }
            }
            for (int64_t u = 0; u < nr; u++)
                for (int64_t w = 0; w < nv; w++) _mm256_storeu_ps(O + (r0 + u) * ldo + c0 + 8 * w, acc[u][w]);
        }
    }
}

static void qk_rows(const float *Q, int64_t R, int64_t D, const float *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                    const float *pre, int64_t ldpre, int64_t wpre) {
    qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_F32);
}

static void pv_rows(const float *P, int64_t ldp, int64_t R, const float *V, int64_t ldv, int64_t n, int64_t Dv,
                    float *O, int64_t ldo, const float *pre, int64_t ldpre, int64_t wpre) {
    pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_F32);
}

static void qk_rows_x(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                      int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, int kind) {
    if (kind == KV_F16)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_F16);
    else if (kind == KV_BF16)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_BF16);
    else
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_Q8);
}

static void pv_rows_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                      float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, int kind) {
    if (kind == KV_F16)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_F16);
    else if (kind == KV_BF16)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_BF16);
    else
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_Q8);
}

const attn_kernel_table attn_kernels_avx2 = {
    "avx2",    gemm_6x16, gemm_6x16_tn, exp2_row,  exp2_dot_row, softmax_grad_row, dropout_mcg, max_row,
    scale_row, dot_row,   softcap_row,  alibi_row, qk_rows,      pv_rows,          qk_rows_x,   pv_rows_x};
