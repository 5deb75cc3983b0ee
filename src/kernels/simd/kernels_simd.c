/* The SIMD kernels of kernels.h, written once against the vector mapping
 * (vec.h) and compiled once per instruction set (CMakeLists.txt):
 *   attn_kernels_avx2          -mavx2 -mfma -mf16c            VL = 8
 *   attn_kernels_avx512        + -mavx512f/bw/dq/vl            VL = 16
 *   attn_kernels_avx512_simde  VL = 16 through SIMD Everywhere on AVX2
 *                              (tests only: the AVX-512 source run anywhere)
 * A table is called only after attn_kernels() has checked the CPU (and the
 * OS's vector state). Every rounding is as written (-ffp-contract=off). */
#include "../kernels.h"
#include "vec.h"
#include "base/quant.h"

#include <math.h>
#include <string.h>

#ifndef ATTN_SIMD_TABLE
#error "ATTN_SIMD_TABLE names the table this build of the source defines"
#endif
#ifndef ATTN_SIMD_MATH_ROUNDS /* the table computes the math modes' rounded products (kernels.h) */
#define ATTN_SIMD_MATH_ROUNDS 0
#endif
#ifndef ATTN_SIMD_NAME
#error "ATTN_SIMD_NAME is the table's name"
#endif

#define INLINE static inline __attribute__((always_inline))

/* ---- tile products ------------------------------------------------------------ */

/* C[MR x 16 P] (+)= A[MR x K] B[K x 16 P] for P = 1 or 2 16-column panels
 * of B, the second bs floats after the first: a 16-column row of C is NV
 * vectors; MR rows give 12 accumulators a panel on both widths (6 x 2 ymm,
 * 12 x 1 zmm), one broadcast of A and NV P loads of B per row and k. P = 2
 * (16 lanes only: 24 zmm accumulators) halves the broadcasts an FMA needs.
 * A(i, k) is at A[i * rs + k * cs]: (lda, 1) for a row-major A, (1, lda)
 * for a transposed one. Each element of C is one chain of FMAs over k: the
 * same bits on every width and panel count. */
#define NV (16 / VL)
#define MR (12 / NV)

INLINE void gemm_strided(int P, int64_t K, const float *A, int64_t rs, int64_t cs, const float *B, int64_t ldb,
                         int64_t bs, float *C, int64_t ldc, int acc) {
    vf c[MR][2 * NV];
    const int W = P * NV;
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++) c[i][w] = acc ? vf_load(C + i * ldc + w * VL) : vf_zero();
#pragma GCC unroll 4
    for (int64_t k = 0; k < K; k++) {
        vf b[2 * NV];
#pragma GCC unroll 4
        for (int w = 0; w < W; w++) b[w] = vf_load(B + k * ldb + w / NV * bs + w % NV * VL);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            vf a = vf_set1(A[i * rs + k * cs]);
#pragma GCC unroll 4
            for (int w = 0; w < W; w++) c[i][w] = vf_fma(a, b[w], c[i][w]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int w = 0; w < W; w++) vf_store(C + i * ldc + w * VL, c[i][w]);
}

static void gemm(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
    gemm_strided(1, K, A, lda, 1, B, ldb, 0, C, ldc, acc);
}

static void gemm_tn(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                    int acc) {
    gemm_strided(1, K, A, 1, lda, B, ldb, 0, C, ldc, acc);
}

#if VL == 16 /* two panels: 24 of the 32 zmm registers accumulate */
static void gemm32(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, int64_t bs, float *C,
                   int64_t ldc, int acc) {
    gemm_strided(2, K, A, lda, 1, B, ldb, bs, C, ldc, acc);
}

static void gemm32_tn(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, int64_t bs, float *C,
                      int64_t ldc, int acc) {
    gemm_strided(2, K, A, 1, lda, B, ldb, bs, C, ldc, acc);
}
#define GEMM32 gemm32
#define GEMM32_TN gemm32_tn
#else /* 8 lanes: 12 accumulators are all two panels' rows would leave room for */
#define GEMM32 NULL
#define GEMM32_TN NULL
#endif

/* ---- exponentials and rows --------------------------------------------------- */

/* 2^t per lane: t clamped to [-127, 127] (NaN stays NaN: the clamps keep a
 * NaN operand second), n = round(t) to nearest even, 2^f for f = t - n in
 * [-1/2, 1/2] by a degree-6 minimax polynomial (relative error 3.9e-9)
 * evaluated in Estrin's scheme (three dependent FMAs instead of six: the
 * chain's latency, not the FMA count, bounds the row loops), times 2^n built
 * in the exponent field; n = -127 gives exactly 0. */
INLINE vf exp2v(vf t) {
    t = vf_min(vf_set1(127.0f), vf_max(vf_set1(-127.0f), t));
    vf n = vf_round(t), f = vf_sub(t, n), f2 = vf_mul(f, f);
    vf p01 = vf_fma(f, vf_set1(ATTN_EXP2_C1), vf_set1(1.0f));
    vf p23 = vf_fma(f, vf_set1(ATTN_EXP2_C3), vf_set1(ATTN_EXP2_C2));
    vf p45 = vf_fma(f, vf_set1(ATTN_EXP2_C5), vf_set1(ATTN_EXP2_C4));
    vf p46 = vf_fma(f2, vf_set1(ATTN_EXP2_C6), p45);
    vf p26 = vf_fma(f2, p46, p23);
    return vf_mul(vf_fma(f2, p26, p01), vf_pow2i(n));
}

/* 2^(fl(x * scale) - m) of VL lanes (the multiply skipped when scale is 1:
 * x * 1 = x) and, masked, of the n - j < VL lanes of a row's tail (zeros past
 * its end): the one argument rule of the exp2 row kernels. */
INLINE vf exp2_at(const float *x, vf vs, int unit, vf vm) {
    vf t = vf_load(x);
    return exp2v(vf_sub(unit ? t : vf_mul(t, vs), vm));
}

INLINE vf exp2_tail(const float *x, vmask mk, vf vs, vf vm) {
    return vf_maskz(mk, exp2v(vf_sub(vf_mul(vf_maskz_load(x, mk), vs), vm)));
}

static float exp2_row(const float *x, float *y, int64_t n, float scale, float m) {
    vf vs = vf_set1(scale), vm = vf_set1(m), acc = vf_zero();
    int unit = scale == 1.0f;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf e = exp2_at(x + j, vs, unit, vm);
        vf_store(y + j, e);
        acc = vf_add(acc, e);
    }
    if (j < n) {
        vmask mk = vm_tail(n - j);
        vf e = exp2_tail(x + j, mk, vs, vm);
        vf_mask_store(y + j, mk, e);
        acc = vf_add(acc, e);
    }
    return vf_sum(acc);
}

/* exp2_row with each y rounded to t (F16 or BF16) before it is stored and
 * summed: the math modes' P in the exponential's own pass */
static float exp2_round_row(const float *x, float *y, int64_t n, float scale, float m, attn_dtype t) {
    vf vs = vf_set1(scale), vm = vf_set1(m), acc = vf_zero();
    int unit = scale == 1.0f, f16 = t == ATTN_DTYPE_F16;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf e = vf_round_to(exp2_at(x + j, vs, unit, vm), f16);
        vf_store(y + j, e);
        acc = vf_add(acc, e);
    }
    if (j < n) {
        vmask mk = vm_tail(n - j);
        vf e = vf_maskz(mk, vf_round_to(exp2_tail(x + j, mk, vs, vm), f16));
        vf_mask_store(y + j, mk, e);
        acc = vf_add(acc, e);
    }
    return vf_sum(acc);
}

/* one vector of P (or dS) rounded to rt and written at y + j as st: 16-bit
 * values (st = rt, or rt F32: rounded to st's own type) or float32 (st
 * F32); r < VL: the first r lanes only */
INLINE vf round_store(vf v, attn_dtype rt, attn_dtype st, void *y, int64_t j, int64_t r) {
    attn_dtype to = rt != ATTN_DTYPE_F32 ? rt : st;
    if (to != ATTN_DTYPE_F32) v = vf_round_to(v, to == ATTN_DTYPE_F16);
    if (st == ATTN_DTYPE_F32) {
        if (r == VL)
            vf_store((float *)y + j, v);
        else
            vf_mask_store((float *)y + j, vm_tail(r), v);
    } else if (r == VL) {
        vf_store16((uint16_t *)y + j, v, st == ATTN_DTYPE_F16);
    } else {
        vf_store16_part((uint16_t *)y + j, v, st == ATTN_DTYPE_F16, r);
    }
    return v;
}

/* exp2_store_row for one (rt, st) pair, constants the compiler folds in;
 * 16-bit P two vectors a step (one packed store) */
INLINE float exp2_store_as(const float *x, int64_t n, float scale, float m, attn_dtype rt, attn_dtype st, void *dst) {
    vf vs = vf_set1(scale), vm = vf_set1(m), acc = vf_zero();
    int unit = scale == 1.0f, f16 = rt == ATTN_DTYPE_F16;
    int64_t j = 0;
    if (st != ATTN_DTYPE_F32)
        for (; j + 2 * VL <= n; j += 2 * VL) { /* summed in order: the bits of one vector a step */
            vf e0 = vf_round_to(exp2_at(x + j, vs, unit, vm), f16);
            vf e1 = vf_round_to(exp2_at(x + j + VL, vs, unit, vm), f16);
            vf_store16_2((uint16_t *)dst + j, e0, e1, f16);
            acc = vf_add(vf_add(acc, e0), e1);
        }
    for (; j + VL <= n; j += VL) acc = vf_add(acc, round_store(exp2_at(x + j, vs, unit, vm), rt, st, dst, j, VL));
    if (j < n) {
        vmask mk = vm_tail(n - j);
        acc = vf_add(acc, vf_maskz(mk, round_store(exp2_tail(x + j, mk, vs, vm), rt, st, dst, j, n - j)));
    }
    return vf_sum(acc);
}

static float exp2_store_row(const float *x, int64_t n, float scale, float m, attn_dtype rt, attn_dtype st, void *dst) {
    if (rt == ATTN_DTYPE_BF16 && st == ATTN_DTYPE_BF16)
        return exp2_store_as(x, n, scale, m, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, dst);
    if (rt == ATTN_DTYPE_F16 && st == ATTN_DTYPE_F16)
        return exp2_store_as(x, n, scale, m, ATTN_DTYPE_F16, ATTN_DTYPE_F16, dst);
    if (rt == ATTN_DTYPE_BF16) return exp2_store_as(x, n, scale, m, ATTN_DTYPE_BF16, ATTN_DTYPE_F32, dst);
    if (rt == ATTN_DTYPE_F16) return exp2_store_as(x, n, scale, m, ATTN_DTYPE_F16, ATTN_DTYPE_F32, dst);
    return exp2_store_as(x, n, scale, m, ATTN_DTYPE_F32, ATTN_DTYPE_F32, dst);
}

static void softmax_grad_store_row(const float *x, const float *g, int64_t n, float escale, float m, float il, float di,
                                   float scale, attn_dtype rt, attn_dtype st, void *pd, void *gd) {
    vf vs = vf_set1(escale), vm = vf_set1(m), vil = vf_set1(il), vdi = vf_set1(di), vsc = vf_set1(scale);
    int unit = escale == 1.0f;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf pv = vf_mul(exp2_at(x + j, vs, unit, vm), vil);
        vf gv = vf_mul(vf_mul(pv, vf_sub(vf_load(g + j), vdi)), vsc);
        round_store(pv, rt, st, pd, j, VL);
        round_store(gv, rt, st, gd, j, VL);
    }
    if (j < n) {
        vmask mk = vm_tail(n - j);
        vf pv = vf_mul(exp2_tail(x + j, mk, vs, vm), vil);
        vf gv = vf_mul(vf_mul(pv, vf_sub(vf_maskz_load(g + j, mk), vdi)), vsc);
        round_store(pv, rt, st, pd, j, n - j);
        round_store(gv, rt, st, gd, j, n - j);
    }
}

static void store_row(const float *x, int64_t n, attn_dtype rt, attn_dtype st, void *dst) {
    int64_t j = 0;
    for (; j + VL <= n; j += VL) round_store(vf_load(x + j), rt, st, dst, j, VL);
    if (j < n) round_store(vf_maskz_load(x + j, vm_tail(n - j)), rt, st, dst, j, n - j);
}

/* x rounded in place to t (F16 or BF16) and the sum of the rounded values,
 * accumulated as exp2_row accumulates */
static float round_row(float *x, int64_t n, attn_dtype t) {
    int f16 = t == ATTN_DTYPE_F16;
    vf acc = vf_zero();
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf r = vf_round_to(vf_load(x + j), f16);
        vf_store(x + j, r);
        acc = vf_add(acc, r);
    }
    if (j < n) {
        vmask mk = vm_tail(n - j);
        vf r = vf_round_to(vf_maskz_load(x + j, mk), f16);
        vf_mask_store(x + j, mk, r);
        acc = vf_add(acc, r);
    }
    return vf_sum(acc);
}

/* exp2_row without storing y, and dot_row(y, w) from the same values: the
 * two sums accumulate exactly as those two kernels do (same bits). */
static float exp2_dot_row(const float *x, const float *w, int64_t n, float scale, float m, float *dot) {
    vf vs = vf_set1(scale), vm = vf_set1(m), acc = vf_zero(), dacc = acc;
    int unit = scale == 1.0f;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf e = exp2_at(x + j, vs, unit, vm);
        acc = vf_add(acc, e);
        dacc = vf_fma(e, vf_load(w + j), dacc);
    }
    float tail[VL], d = vf_sum(dacc);
    if (j < n) {
        vf e = exp2_tail(x + j, vm_tail(n - j), vs, vm);
        acc = vf_add(acc, e);
        vf_store(tail, e);
        for (int64_t i = 0; j + i < n; i++) d += tail[i] * w[j + i];
    }
    *dot = d;
    return vf_sum(acc);
}

/* p = exp2_row(x) * il (scale_row), g = (p * (g - di)) * scale: the backward's
 * P and dS in one pass, elementwise the same operations (same bits). */
static void softmax_grad_row(const float *x, float *p, float *g, int64_t n, float escale, float m, float il, float di,
                             float scale) {
    vf vs = vf_set1(escale), vm = vf_set1(m), vil = vf_set1(il), vdi = vf_set1(di), vsc = vf_set1(scale);
    int unit = escale == 1.0f;
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf pv = vf_mul(exp2_at(x + j, vs, unit, vm), vil);
        vf_store(p + j, pv);
        vf_store(g + j, vf_mul(vf_mul(pv, vf_sub(vf_load(g + j), vdi)), vsc));
    }
    if (j < n) {
        vmask mk = vm_tail(n - j);
        vf pv = vf_mul(exp2_tail(x + j, mk, vs, vm), vil);
        vf gv = vf_mul(vf_mul(pv, vf_sub(vf_maskz_load(g + j, mk), vdi)), vsc);
        vf_mask_store(p + j, mk, pv);
        vf_mask_store(g + j, mk, gv);
    }
}

/* VL stream elements per step: even elements' x in the 64-bit lanes of one
 * register, odd ones' in another, both advanced by a^VL. */
static void dropout_mcg(float *t, int64_t n, uint32_t x, uint32_t thr, float scale) {
    uint64_t ev_[VL / 2], od_[VL / 2];
    uint32_t aN = 1;
    for (int i = 0; i < VL; i++) {
        if (i & 1)
            od_[i / 2] = x;
        else
            ev_[i / 2] = x;
        x = attn_m31_mul(x, 1132489760u);
        aN = attn_m31_mul(aN, 1132489760u);
    }
    vi ev = vi64_load(ev_), od = vi64_load(od_), cN = vi64_set1(aN);
    const vf vs = vf_set1(scale);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) {
        vf_store(t + j, vf_keep(vf_load(t + j), vi_interleave(ev, od), thr, vs));
        ev = vi_mulmod_m31(ev, cN);
        od = vi_mulmod_m31(od, cN);
    }
    if (j < n) {
        uint32_t rest[VL];
        vi_store(rest, vi_interleave(ev, od));
        for (int64_t i = 0; j + i < n; i++) t[j + i] *= rest[i] < thr ? scale : 0.0f;
    }
}

static float max_row(const float *x, int64_t n) {
    vf m = vf_set1(-INFINITY);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) m = vf_max(m, vf_load(x + j));
    float r = vf_hmax(m);
    for (; j < n; j++) r = x[j] > r ? x[j] : r;
    return r;
}

static void scale_row(float *x, int64_t n, float a) {
    vf va = vf_set1(a);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) vf_store(x + j, vf_mul(vf_load(x + j), va));
    for (; j < n; j++) x[j] *= a;
}

static float dot_row(const float *x, const float *y, int64_t n) {
    vf acc = vf_zero();
    int64_t j = 0;
    for (; j + VL <= n; j += VL) acc = vf_fma(vf_load(x + j), vf_load(y + j), acc);
    float r = vf_sum(acc);
    for (; j < n; j++) r += x[j] * y[j];
    return r;
}

/* tanh per lane, the generic kernel's rational function */
INLINE vf tanhv(vf x) {
    vmask tiny = vf_lt(vf_abs(x), vf_set1(0.0004f));
    vf c = vf_min(vf_set1(ATTN_TANH_CLAMP), vf_max(vf_set1(-ATTN_TANH_CLAMP), x));
    vf x2 = vf_mul(c, c);
    vf p = vf_set1(ATTN_TANH_A13);
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A11));
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A9));
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A7));
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A5));
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A3));
    p = vf_add(vf_mul(p, x2), vf_set1(ATTN_TANH_A1));
    p = vf_mul(p, c);
    vf q = vf_set1(ATTN_TANH_B6);
    q = vf_add(vf_mul(q, x2), vf_set1(ATTN_TANH_B4));
    q = vf_add(vf_mul(q, x2), vf_set1(ATTN_TANH_B2));
    q = vf_add(vf_mul(q, x2), vf_set1(ATTN_TANH_B0));
    /* p / q through the reciprocal estimate and one Newton step (~1 ulp; a
     * division would cost more than the whole polynomial) */
    vf r = vf_rcp(q);
    r = vf_mul(r, vf_fnma(q, r, vf_set1(2.0f)));
    vmask big = vf_lt(vf_set1(ATTN_TANH_CLAMP), vf_abs(x)); /* false for NaN */
    return vf_blend(big, vf_blend(tiny, vf_mul(p, r), x), vf_copysign1(x));
}

static void softcap_row(float *x, int64_t n, float scale, float cap) {
    vf vs = vf_set1(scale / cap), vc = vf_set1(cap);
    int64_t j = 0;
    for (; j + VL <= n; j += VL) vf_store(x + j, vf_mul(vc, tanhv(vf_mul(vf_load(x + j), vs))));
    if (j < n) { /* the tail through the same lanes */
        vmask mk = vm_tail(n - j);
        vf_mask_store(x + j, mk, vf_mul(vc, tanhv(vf_mul(vf_maskz_load(x + j, mk), vs))));
    }
}

static void alibi_row(float *x, int64_t n, float slope, float dist0) {
    const vf ns = vf_set1(-slope), step = vf_set1((float)VL);
    vf d = vf_sub(vf_set1(dist0), vf_iota());
    int64_t j = 0;
    for (; j + VL <= n; j += VL, d = vf_sub(d, step)) vf_store(x + j, vf_add(vf_load(x + j), vf_mul(ns, vf_abs(d))));
    for (; j < n; j++) x[j] += -slope * fabsf(dist0 - (float)j);
}

/* ---- decode: K/V rows of every storage kind ----------------------------------- */

/* 8 bytes zero-extended to 8 int32 lanes */
INLINE __m256i u8x8(const uint8_t *p) {
    int64_t w;
    memcpy(&w, p, 8);
    return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(w));
}

/* e4m3fn through F16C: the 7 magnitude bits placed in an IEEE half's
 * exponent (4 of its 5 bits) and mantissa (3 of its 10) give the value
 * times 2^-8 exactly, normals and subnormals alike (no denormal
 * arithmetic: the half's subnormal is converted exactly), so one product by
 * 256 restores it (or the scores after Q K^T: qk_rows_x). The byte
 * sign-extended to 16 bits and shifted by 7 is t: the sign in bits 15 and
 * 14, the magnitude below. Bit 14 must be 0, except for S.1111.111 (NaN,
 * the one magnitude 0x3f80), where every exponent bit set makes a half NaN.
 * t + 0x80 carries into bit 14 exactly for that magnitude, so bit 14 of
 * t + 0x80 differs from the sign's copy exactly when the result's bit 14
 * must be set: t ^ ((t + 0x80) & 0x4000) (AND and XOR: one VPTERNLOG under
 * AVX-512VL). All 256 codes are checked by test_kernels' fp8 case.
 * e4m3_halves: those steps 16 at a time (the 16-lane tables; 8 lanes take
 * e4m3_halves_b). */
INLINE __m256i e4m3_halves(__m256i w) {
    __m256i t = _mm256_slli_epi16(w, 7);
    return _mm256_xor_si256(t,
                            _mm256_and_si256(_mm256_add_epi16(t, _mm256_set1_epi16(0x80)), _mm256_set1_epi16(0x4000)));
}
/* The same halves from 16 codes b in bytes, for 8 lanes: the high byte is
 * the sign and the magnitude m's top six bits, b - ceil(m / 2), where the
 * unsigned average avg(b, 0) = ceil(b / 2) is 64 S + ceil(m / 2), whose six
 * low bits are ceil(m / 2), except 0 for m = 0x7f: that code's high byte
 * stays S.1111111, NaN. The low byte is m's last bit at bit 7. One 128-bit
 * shift for 16 codes, where e4m3_halves widens and takes a 256-bit shift,
 * add, AND and XOR (Zen 1: one shift pipe, 256 bits two operations).
 * lo: codes 0-7 as halves, hi: 8-15 */
INLINE void e4m3_halves_b(__m128i b, __m128i *lo, __m128i *hi) {
    __m128i h = _mm_sub_epi8(b, _mm_and_si128(_mm_avg_epu8(b, _mm_setzero_si128()), _mm_set1_epi8(0x3f)));
    __m128i l = _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi8((char)0x80));
    *lo = _mm_unpacklo_epi8(l, h), *hi = _mm_unpackhi_epi8(l, h);
}
INLINE __m256 e4m3x8_raw(const uint8_t *p) {
    __m128i lo, hi;
    e4m3_halves_b(_mm_loadl_epi64((const __m128i *)(const void *)p), &lo, &hi);
    return _mm256_cvtph_ps(lo);
}
INLINE __m256 e4m3x8(const uint8_t *p) { return _mm256_mul_ps(e4m3x8_raw(p), _mm256_set1_ps(256.0f)); }

/* e5m2: the high byte of an IEEE half (an unpack against a zero: no shift, Zen 1's one shift pipe) */
INLINE __m256 e5m2x8(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)(const void *)p)));
}

/* 8 nibbles (low: hi 0, high: hi 1) of 8 bytes as floats */
INLINE __m256 nib8(const uint8_t *p, int hi) {
    __m256i c = u8x8(p);
    return _mm256_cvtepi32_ps(_mm256_and_si256(hi ? _mm256_srli_epi32(c, 4) : c, _mm256_set1_epi32(15)));
}

/* one body per element type of the K/V rows (KV_F32, KV_F16, KV_BF16,
 * KV_Q8: attn_dtype values, sizes from base/storage.h), specialized at
 * compile time */
#define KV_F32 ATTN_DTYPE_F32
#define KV_F16 ATTN_DTYPE_F16
#define KV_BF16 ATTN_DTYPE_BF16
#define KV_Q8 ATTN_DTYPE_Q8_0
/* the one-byte formats' codes (base/storage.h: fp8 values before their
 * scale, int8's unsigned codes before (scale, zero)); decode applies the
 * scales around the products (kernels.h) */
#define KV_E4M3 ATTN_DTYPE_FP8_E4M3
#define KV_E5M2 ATTN_DTYPE_FP8_E5M2
#define KV_U8 ATTN_DTYPE_KV_INT8
#define KV_U4 ATTN_DTYPE_KV_INT4
#define KV_Q4 ATTN_DTYPE_Q4_0

/* 16 fp8 codes from p as IEEE halves (e4m3: of the value times 2^-8), in
 * 256-bit integer operations: half the count per value of 8 at a time */
INLINE __m256i fp8_halves16(const uint8_t *p, int t) {
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p);
    if (t == KV_E4M3) return e4m3_halves(_mm256_cvtepi8_epi16(b));
    /* e5m2: each byte moved to the high byte of its word by one VPSHUFB (vec.h vf_load_bf16); the 16-lane tables'
     * 256 bits whole for one conversion (fp8_pair_raw takes two 128-bit unpacks for 8 lanes) */
    const __m256i idx = _mm256_setr_epi8(-1, 0, -1, 1, -1, 2, -1, 3, -1, 4, -1, 5, -1, 6, -1, 7, -1, 8, -1, 9, -1, 10,
                                         -1, 11, -1, 12, -1, 13, -1, 14, -1, 15);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(b), idx);
}
/* 16 fp8 values from p: the first 8 in x[0], the next in x[1] (as e4m3x8,
 * e5m2x8; raw: e4m3's times 2^-8, as converted) */
INLINE void fp8_pair_raw(const uint8_t *p, int t, __m256 *x) {
    __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p), lo, hi;
    if (t == KV_E5M2) /* each code the high byte of its half: two 128-bit unpacks against a zero, no shuffle */
        lo = _mm_unpacklo_epi8(_mm_setzero_si128(), b), hi = _mm_unpackhi_epi8(_mm_setzero_si128(), b);
    else
        e4m3_halves_b(b, &lo, &hi);
    x[0] = _mm256_cvtph_ps(lo), x[1] = _mm256_cvtph_ps(hi);
}
INLINE void fp8_pair(const uint8_t *p, int t, __m256 *x) {
    fp8_pair_raw(p, t, x);
    if (t == KV_E4M3)
        x[0] = _mm256_mul_ps(x[0], _mm256_set1_ps(256.0f)), x[1] = _mm256_mul_ps(x[1], _mm256_set1_ps(256.0f));
}
/* 16 fp8 values from p as 16 / VL vectors x (raw: e4m3's times 2^-8) */
INLINE void fp8_ld16(const uint8_t *p, int t, int raw, vf *x) {
#if VL == 8
    if (raw)
        fp8_pair_raw(p, t, x);
    else
        fp8_pair(p, t, x);
#else
    x[0] = vf_cvt_h16(fp8_halves16(p, t));
    if (t == KV_E4M3 && !raw) x[0] = vf_mul(x[0], vf_set1(256.0f));
#endif
}

#if VL == 16 && defined(ATTN_FP8_DPBF16)
#define FP8_X16(F, b)                                                                                                  \
    F(b), F(b + 1), F(b + 2), F(b + 3), F(b + 4), F(b + 5), F(b + 6), F(b + 7), F(b + 8), F(b + 9), F(b + 10),         \
        F(b + 11), F(b + 12), F(b + 13), F(b + 14), F(b + 15)
#define FP8_X128(F)                                                                                                    \
    FP8_X16(F, 0), FP8_X16(F, 16), FP8_X16(F, 32), FP8_X16(F, 48), FP8_X16(F, 64), FP8_X16(F, 80), FP8_X16(F, 96),     \
        FP8_X16(F, 112)
/* the bf16 bits of magnitude c. e4m3: 2^(e-7) (1 + m/8), exponent field e + 120; subnormals m 2^-9; S.1111.111
 * NaN. e5m2: 2^(e-15) (1 + m/4), e + 112; subnormals m 2^-16; exponent 31 inf (m 0) or NaN */
#define E4M3_BF(c)                                                                                                     \
    ((c) == 0x7f ? 0x7fc0                                                                                              \
     : (c) >= 8  ? ((c) << 4) + 0x3c00                                                                                 \
     : (c) >= 4  ? 0x3c00 + 0x20 * ((c)-4)                                                                             \
     : (c) == 3  ? 0x3bc0                                                                                              \
     : (c) == 2  ? 0x3b80                                                                                              \
                 : 0x3b00 * (c))
#define E5M2_BF(c)                                                                                                     \
    ((c) > 0x7c    ? 0x7fc0                                                                                            \
     : (c) == 0x7c ? 0x7f80                                                                                            \
     : (c) >= 4    ? ((c) << 5) + 0x3800                                                                               \
     : (c) == 3    ? 0x3840                                                                                            \
     : (c) == 2    ? 0x3800                                                                                            \
                   : 0x3780 * (c))
#define E4M3_HI(c) (uint8_t)(E4M3_BF(c) >> 8)
#define E4M3_LO(c) (uint8_t)(E4M3_BF(c) & 0xff)
#define E5M2_HI(c) (uint8_t)(E5M2_BF(c) >> 8)
#define E5M2_LO(c) (uint8_t)(E5M2_BF(c) & 0xff)
/* e4m3's raw values (times 2^-8, as fp8_ld16 gives them): the exponent field 8 less, but for 0 and NaN */
#define E4M3R_HI(c) (uint8_t)(((c) == 0 || (c) == 0x7f ? E4M3_BF(c) : E4M3_BF(c) - 0x400) >> 8)
/* [0] e4m3, [1] e5m2, [2] e4m3 raw: the high bytes, the low bytes (raw e4m3's low bytes are e4m3's) */
static const uint8_t fp8_bf_tab[3][2][128] __attribute__((aligned(64))) = {{{FP8_X128(E4M3_HI)}, {FP8_X128(E4M3_LO)}},
                                                                           {{FP8_X128(E5M2_HI)}, {FP8_X128(E5M2_LO)}},
                                                                           {{FP8_X128(E4M3R_HI)}, {FP8_X128(E4M3_LO)}}};

typedef struct fp8_lut {
    __m512i h0, h1, l0, l1, sign;
} fp8_lut;
INLINE fp8_lut fp8_lut_at(const uint8_t (*tb)[128]) {
    fp8_lut l = {_mm512_load_si512(tb[0]), _mm512_load_si512(tb[0] + 64), _mm512_load_si512(tb[1]),
                 _mm512_load_si512(tb[1] + 64), _mm512_set1_epi8((char)0x80)};
    return l;
}
INLINE fp8_lut fp8_lut_of(int t) { return fp8_lut_at(fp8_bf_tab[t == KV_E5M2]); }
/* e4m3's raw values (e5m2's as they are) */
INLINE fp8_lut fp8_lut_raw(int t) { return fp8_lut_at(fp8_bf_tab[t == KV_E5M2 ? 1 : 2]); }
/* 64 codes x as bf16 values: the high and low bytes, in x's order */
INLINE void fp8_bf_bytes(__m512i x, const fp8_lut *l, __m512i *hi, __m512i *lo) {
    *hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(l->h0, x, l->h1), x, l->sign, 0xf8); /* hi | x & sign */
    *lo = _mm512_permutex2var_epi8(l->l0, x, l->l1);
}
/* The float32 route of the same tables (FP8T: the fp8 products as FMAs on
 * these tables, qk_rows_x / pv_rows_x): 64 codes in four vectors, in
 * order, raw (e4m3 times 2^-8, as fp8_ld16). A byte permutation (VPERMB)
 * puts the codes where the two byte interleaves (VPUNPCKL/HBW: bf16 words
 * per 128-bit lane) and a shift and an AND (each word to the high half of
 * its float) leave them in order: x[v] lane 4 L + k is code 16 v + 4 L + k,
 * taken from byte 16 L + 8 (v / 2) + 2 k + v % 2. Ten operations for 64
 * codes, where F16C's route takes six for 16 over e4m3 (VCVTPH2PS two).
 * The same values, exact (each is a bf16 number), in the same order: the
 * same bits. e4m3 only, and not in qk_four: on the Intel core the two
 * table lookups hold port 5 for two cycles each, and e5m2's F16C route
 * (three operations for 16) ran 1.06-1.18x faster than its table route,
 * as did e4m3's Q K^T at four rows (1.07x), where 16 FMAs a key-block share
 * those ports; Q K^T at one and two rows and P V at every count gain
 * (genuineintel-f6-m207/e4m3-table-kernels-ab) */
#define FP8T_ON 1
typedef __m512i fp8t_ix;
/* byte 16 L + 8 h + 2 k + e takes code 16 (2 h + e) + 4 L + k */
static const uint8_t fp8t_ord[64] __attribute__((aligned(64))) = {
    0,  16, 1,  17, 2,  18, 3,  19, 32, 48, 33, 49, 34, 50, 35, 51, 4,  20, 5,  21, 6,  22,
    7,  23, 36, 52, 37, 53, 38, 54, 39, 55, 8,  24, 9,  25, 10, 26, 11, 27, 40, 56, 41, 57,
    42, 58, 43, 59, 12, 28, 13, 29, 14, 30, 15, 31, 44, 60, 45, 61, 46, 62, 47, 63};
INLINE fp8t_ix fp8t_order(void) { return _mm512_load_si512(fp8t_ord); }
INLINE void fp8t_ld64(const uint8_t *p, const fp8_lut *l, fp8t_ix ord, vf *x) {
    __m512i hi, lo, m = _mm512_set1_epi32((int)0xffff0000u);
    fp8_bf_bytes(_mm512_permutexvar_epi8(ord, _mm512_loadu_si512(p)), l, &hi, &lo);
    __m512i w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
    x[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), x[1] = _mm512_castsi512_ps(_mm512_and_si512(w0, m));
    x[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), x[3] = _mm512_castsi512_ps(_mm512_and_si512(w1, m));
}
#else
#define FP8T_ON 0
typedef struct fp8_lut {
    int none;
} fp8_lut;
INLINE fp8_lut fp8_lut_raw(int t) {
    fp8_lut l = {t};
    return l;
}
typedef int fp8t_ix;
INLINE fp8t_ix fp8t_order(void) { return 0; }
INLINE void fp8t_ld64(const uint8_t *p, const fp8_lut *l, fp8t_ix ord, vf *x) { (void)p, (void)l, (void)ord, (void)x; }
#endif
/* the fp8 formats that take the table route (FP8T_ON: the tables with VBMI): Q K^T at one and two rows (qk_dot1),
 * P V (pv_pass) */
#define FP8T(t) (FP8T_ON && (t) == KV_E4M3)

/* VL codes of a one-byte format from p (int4: the low or high nibbles, hi), as floats */
INLINE __m256 byte8(const uint8_t *p, int t, int hi) {
    if (t == KV_E4M3) return e4m3x8(p);
    if (t == KV_E5M2) return e5m2x8(p);
    if (t == KV_U4) return nib8(p, hi);
    return _mm256_cvtepi32_ps(u8x8(p));
}
INLINE vf byte_ld(const uint8_t *p, int t, int hi) {
#if VL == 16
    if (t == KV_E4M3 || t == KV_E5M2) {
        vf x;
        fp8_ld16(p, t, 0, &x);
        return x;
    }
    return vf_join(byte8(p, t, hi), byte8(p + 8, t, hi));
#else
    return byte8(p, t, hi);
#endif
}

/* q8_0 pieces: the f16 scale of the block holding idx, and VL unscaled values
 * from idx (idx a multiple of VL: they never cross a block) */
INLINE vf q8_scale(const void *row, int64_t idx) {
    uint16_t dh;
    memcpy(&dh, (const unsigned char *)row + attn_storage_bytes(KV_Q8, idx), 2);
    return vf_set1(half_to_float(dh));
}
INLINE float q8_scale_f(const void *row, int64_t idx) {
    uint16_t dh;
    memcpy(&dh, (const unsigned char *)row + attn_storage_bytes(KV_Q8, idx), 2);
    return half_to_float(dh);
}
INLINE vf q8_raw(const void *row, int64_t idx) {
    return vf_load_i8((const unsigned char *)row + attn_storage_bytes(KV_Q8, idx) + 2 + idx % ATTN_Q8_BLOCK);
}

/* VL elements of a K/V row from element idx, as floats */
INLINE vf kv_ld(const void *row, int64_t idx, int t) {
    if (t == KV_F32) return vf_load((const float *)row + idx);
    if (t == KV_Q8) return vf_mul(q8_raw(row, idx), q8_scale(row, idx));
    if (t == KV_F16) return vf_load_f16((const uint16_t *)row + idx);
    if (t == KV_E4M3 || t == KV_E5M2 || t == KV_U8) return byte_ld((const uint8_t *)row + idx, t, 0);
    return vf_load_bf16((const uint16_t *)row + idx);
}

/* Q K^T's K loads: kv_ld's, but e4m3's values times 2^-8 (no product a
 * vector: qk_rows_x scales the scores by 256 after, a power of two) */
INLINE vf kq_ld(const void *row, int64_t idx, int t) {
    if (t != KV_E4M3) return kv_ld(row, idx, t);
#if VL == 16
    vf x;
    fp8_ld16((const uint8_t *)row + idx, t, 1, &x);
    return x;
#else
    return e4m3x8_raw((const uint8_t *)row + idx);
#endif
}

/* kq_ld for qk_body's loops of three and four rows, whose 12 accumulators
 * hold every register, and the tails inside them: bf16 widened and shifted,
 * without the shuffle's index register (vec.h vf_load_bf16); the same values */
INLINE vf kq_ld_w(const void *row, int64_t idx, int t) {
    return t == KV_BF16 ? vf_load_bf16_w((const uint16_t *)row + idx) : kq_ld(row, idx, t);
}

/* the first m < VL elements from idx, the rest 0 (no read past the row);
 * qk: as kq_ld loads them */
INLINE vf kv_ld_tail(const void *row, int64_t idx, int64_t m, int t, int qk) {
    if (t == KV_F32) return vf_maskz_load((const float *)row + idx, vm_tail(m));
    if (t == KV_Q8) return vf_zero(); /* q8_0 rows are whole blocks: no tails */
    uint16_t buf[VL] = {0};
    memcpy(buf, (const char *)row + attn_storage_bytes((attn_dtype)t, idx), attn_storage_bytes((attn_dtype)t, m));
    return qk ? kq_ld_w(buf, 0, t) : kv_ld(buf, 0, t);
}

/* the byte address of element idx of a row (q8_0: of its values) */
INLINE const void *kv_elem(const void *row, int64_t idx, int t) {
    if (t == KV_Q8) return (const char *)row + attn_storage_bytes(KV_Q8, idx) + 2 + idx % ATTN_Q8_BLOCK;
    return (const char *)row + attn_storage_bytes((attn_dtype)t, idx);
}

INLINE const void *kv_row(const void *base, int64_t j, int64_t ld, int t) {
    return (const char *)base + attn_storage_bytes((attn_dtype)t, j * ld);
}

/* the software prefetches' locality: 2 (PREFETCHT1 on x86) unless the table's file sets ATTN_PF_LOC (0:
 * PREFETCHNTA, table_avx512_bf16_nta.c: the whole table, from which dispatch.c takes decode's row kernels) */
#ifndef ATTN_PF_LOC
#define ATTN_PF_LOC 2
#endif
static inline void prefetch_bytes(const void *p, int64_t bytes) {
    for (int64_t c = 0; c < bytes; c += 64) __builtin_prefetch((const char *)p + c, 0, ATTN_PF_LOC);
}
/* pb bytes of rows j .. j + nk - 1 (ps apart) from p: rows back to back (pb = ps: a cache head's whole rows) as
 * one range, each line once (a row at a time prefetched the lines rows share twice: q4_0's 72-byte and q8_0's
 * 136-byte rows). In the integer Q K^T's key steps: the step over q4_0 / int4 / q8_0 at four rows 0.92 / 0.88 /
 * 0.94x (Zen 5, zen5/prefetch-rows-ab); P V's passes kept theirs (the same over q4_0 ran 1.13x) */
static inline void prefetch_rows(const void *p, size_t ps, int64_t j, int64_t nk, int64_t pb) {
    if ((int64_t)ps == pb)
        prefetch_bytes((const char *)p + (size_t)j * ps, nk * pb);
    else
        for (int64_t e = 0; e < nk; e++) prefetch_bytes((const char *)p + (size_t)(j + e) * ps, pb);
}

/* Keeps x in a register at the end of a loop step. With an array of 8 or
 * more accumulators GCC spilled one (its loop-carried chain then ran
 * through memory) and copied the others between registers every step;
 * SIMDe's vector types are not register operands */
#ifdef ATTN_VEC_SIMDE
#define KEEP_REG(x) ((void)0)
#else
#define KEEP_REG(x) __asm__("" : "+v"(x))
#endif

/* HEAD128(D): true where a decode kernel takes D = 128, the common head width,
 * as a compile-time constant (its block and key loops unrolled); ONE16:
 * qk_one16's 16-key steps. Both off on the SIMDe table: there each intrinsic
 * inlines SIMDe's emulation, and these copies, built unoptimised under
 * AddressSanitizer, made qk_rows_x's frame 8.7 MB (a stack overflow) */
#ifdef ATTN_VEC_SIMDE
#define HEAD128(D) 0
#define ONE16 0
#else
#define HEAD128(D) ((D) == 128)
#define ONE16 (VL == 16)
#endif

/* VL floats from p, held in a register: a value several FMAs use, which GCC
 * otherwise folds into each as a memory operand (one load an FMA: Q K^T's
 * key steps then ran on the load ports, 15 loads per 12 FMAs) */
INLINE vf vf_load_reg(const float *p) {
    vf y = vf_load(p);
    KEEP_REG(y);
    return y;
}

#if VL == 16
/* 128-bit blocks of a and b as imm picks them (VSHUFF32X4; imm a constant): blocks 0 and 1 from a, 2 and 3 from b.
 * Not VPERMT2PS, which needs an index register and shares more of the pipes VDPBF16PS issues on (Zen 4: 1.21
 * a cycle between the two, 1.31 with VSHUFF32X4; zen4/vec-ports) */
#ifdef ATTN_VEC_SIMDE /* SIMDe 0.7 names this one without the native alias */
#define vf_shuf128(a, b, imm) simde_mm512_shuffle_f32x4((a), (b), (imm))
#else
#define vf_shuf128(a, b, imm) _mm512_shuffle_f32x4((a), (b), (imm))
#endif

/* 128-bit lanes transposed: out[i] lane L = q[L] lane i (through vf_shuf128) */
INLINE void vf_lanes_transpose(const vf q[4], vf out[4]) {
    vf u[4] = {vf_shuf128(q[0], q[1], 0x44), vf_shuf128(q[2], q[3], 0x44), vf_shuf128(q[0], q[1], 0xee),
               vf_shuf128(q[2], q[3], 0xee)};
    out[0] = vf_shuf128(u[0], u[1], 0x88), out[1] = vf_shuf128(u[0], u[1], 0xdd);
    out[2] = vf_shuf128(u[2], u[3], 0x88), out[3] = vf_shuf128(u[2], u[3], 0xdd);
}

/* four vectors' sums within each 128-bit lane: lane 4 L + i the sum of a[i]'s 128-bit lane L */
INLINE vf vf_reduce4_lanes(const vf a[4]) {
    vf s[2];
    for (int h = 0; h < 2; h++) {
        vf x = a[2 * h], y = a[2 * h + 1];
        s[h] = vf_add(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
    }
    __m512d p = _mm512_castps_pd(s[0]), q = _mm512_castps_pd(s[1]);
    return vf_add(_mm512_castpd_ps(_mm512_unpacklo_pd(p, q)), _mm512_castpd_ps(_mm512_unpackhi_pd(p, q)));
}
/* 16 sums a[i] (each a vector of partial sums) into one vector, lane i the sum of a[i] */
INLINE vf vf_reduce16(const vf a[16]) {
    vf u[4];
    for (int g = 0; g < 4; g++) u[g] = vf_reduce4_lanes(a + 4 * g);
    vf pq = vf_add(vf_shuf128(u[0], u[1], 0x44), vf_shuf128(u[0], u[1], 0xee));
    vf rs = vf_add(vf_shuf128(u[2], u[3], 0x44), vf_shuf128(u[2], u[3], 0xee));
    return vf_add(vf_shuf128(pq, rs, 0x88), vf_shuf128(pq, rs, 0xdd));
}
/* 8 vectors' sums over each 256-bit half: lane 8 (i / 4) + 4 h + i % 4 the sum of a[i]'s lanes 8 h .. 8 h + 7
 * (three levels of vf_reduce16's tree: two sums a vector) */
INLINE vf vf_reduce8h(const vf a[8]) {
    vf u0 = vf_reduce4_lanes(a), u1 = vf_reduce4_lanes(a + 4);
    return vf_add(vf_shuf128(u0, u1, 0x88), vf_shuf128(u0, u1, 0xdd));
}

/* 128-bit lane u of v (0..3; the extract's lane is an immediate) */
INLINE __m128 vf_lane(vf v, int u) {
    return u == 0   ? _mm512_castps512_ps128(v)
           : u == 1 ? _mm512_extractf32x4_ps(v, 1)
           : u == 2 ? _mm512_extractf32x4_ps(v, 2)
                    : _mm512_extractf32x4_ps(v, 3);
}
/* four scores a row of nr (<= 4) rows, row u's in 128-bit lane u of v, to S + u lds */
INLINE void vf_store_lanes4(float *S, int64_t lds, vf v, int64_t nr) {
    for (int u = 0; u < 4 && u < nr; u++) _mm_storeu_ps(S + u * lds, vf_lane(v, u));
}
#endif

/* S[r][j] for 4 query rows and 3 keys (q[0..3], k0..k2), each sum over D in
 * VL lanes: 12 accumulators, folded and reduced in one hadd tree. */
INLINE void qk_store3(float *S, int64_t lds, int64_t j, int64_t nr, vf a00, vf a01, vf a02, vf a10, vf a11, vf a12,
                      vf a20, vf a21, vf a22, vf a30, vf a31, vf a32) {
    float s[12];
    _mm256_storeu_ps(s, vh_sum8(vf_fold(a00), vf_fold(a01), vf_fold(a10), vf_fold(a11), vf_fold(a20), vf_fold(a21),
                                vf_fold(a30), vf_fold(a31)));
    _mm_storeu_ps(s + 8, vh_sum4(vf_fold(a02), vf_fold(a12), vf_fold(a22), vf_fold(a32)));
    for (int64_t u = 0; u < nr; u++) {
        float *o = S + u * lds + j;
        o[0] = s[2 * u], o[1] = s[2 * u + 1], o[2] = s[8 + u];
    }
}

/* NR query rows (1 or 2) x NK keys per step (1 x QF1 or 2 x 4), NR NK
 * accumulators over D (a multiple of VL) reduced in one hadd tree: with one
 * or two rows per kv head (MHA, GQA-2) the 4-row step below computed 4 rows
 * for them, 2 or 4 times the arithmetic. QF1: 8 keys ran at 0.83-0.92 of
 * 4's speed (Zen 4). */
#define QF1 4
INLINE void qk_few(const float *const *q, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, int64_t lds,
                   const void *pre, int64_t ldpre, int64_t pb, int NR, int NK, int t) {
    const void *k[8];
    for (int e = 0; e < NK; e++) {
        k[e] = kv_row(K, j + e, ldk, t);
        if (pre) prefetch_bytes(kv_row(pre, j + e, ldpre, t), pb);
    }
    vf a[8], sc[8];
    for (int e = 0; e < 8; e++) a[e] = vf_zero(), sc[e] = a[e];
    if (t == KV_Q8 && NR == 1) /* one row: each key's block scale applied once per block to its sum */
        for (int64_t c0 = 0; c0 < D; c0 += 32) {
            vf b[8];
            for (int e = 0; e < NK; e++) b[e] = vf_zero();
            for (int64_t c = c0; c < c0 + 32; c += VL) {
                vf y = vf_load(q[0] + c);
                for (int e = 0; e < NK; e++) b[e] = vf_fma(y, q8_raw(k[e], c), b[e]);
            }
            for (int e = 0; e < NK; e++) a[e] = vf_fma(b[e], q8_scale(k[e], c0), a[e]);
        }
    else
        for (int64_t c = 0; c < D; c += VL) {
            vf x[8];
            for (int e = 0; e < NK; e++) {
                if (t == KV_Q8) { /* one scale per 32-value block */
                    if ((c & 31) == 0) sc[e] = q8_scale(k[e], c);
                    x[e] = vf_mul(q8_raw(k[e], c), sc[e]);
                } else {
                    x[e] = kq_ld(k[e], c, t);
                }
            }
            for (int u = 0; u < NR; u++) {
                vf y = vf_load(q[u] + c);
                for (int e = 0; e < NK; e++) a[u * NK + e] = vf_fma(y, x[e], a[u * NK + e]);
            }
        }
    float r[8];
    if (NR * NK == 4)
        _mm_storeu_ps(r, vh_sum4(vf_fold(a[0]), vf_fold(a[1]), vf_fold(a[2]), vf_fold(a[3])));
    else
        _mm256_storeu_ps(r, vh_sum8(vf_fold(a[0]), vf_fold(a[1]), vf_fold(a[2]), vf_fold(a[3]), vf_fold(a[4]),
                                    vf_fold(a[5]), vf_fold(a[6]), vf_fold(a[7])));
    for (int u = 0; u < NR; u++)
        for (int e = 0; e < NK; e++) S[u * lds + j + e] = r[u * NK + e];
}

#define QP_MAX 1024 /* the longest bf16 query row permuted on the stack (qk_bf_perm) */
/* query row q (D <= QP_MAX, a multiple of VL) into qp in vf_load_bf16x2's order, whole groups of 2 VL (a last VL
 * in order) */
INLINE void qk_bf_perm(const float *q, int64_t D, float *qp) {
    int64_t c = 0;
    for (; c + 2 * VL <= D; c += 2 * VL) {
        vf lo, hi;
        bf16_split(vf_load(q + c), vf_load(q + c + VL), &lo, &hi);
        vf_store(qp + c, lo), vf_store(qp + c + VL, hi);
    }
    if (c < D) vf_store(qp + c, vf_load(q + c));
}

/* NR query rows (1 or 2) against key row k alone, two accumulators per row
 * over D (a multiple of VL), a row's sum vector in *s0 / *s1 (qk_one
 * reduces them a key, qk_one16 sixteen sums at once): the key rows are
 * read one after another, in address order. Several keys a step (1 x 4, 2 x 4, qk_few)
 * interleave the reads of as many rows a row apart, which the hardware
 * prefetcher follows worse: on Zen 3 (kernel alone, f32, D = 128) one key
 * a step streamed K at 0.93 of the read bandwidth, 2 keys 0.67, 4 keys
 * 0.60-0.69; decode R = 1 / 2 ran 1.03-1.11x faster (docs/PERFORMANCE.md).
 * q8_0 keeps qk_few. NR is a constant at each call: passed as a run-time
 * count, GCC kept the accumulators in memory (Zen 5, the kernel alone over
 * bf16 keys in L1, D = 128: one row 5.7 -> 3.8 ns a key, two 9.6 -> 5.4) */
INLINE void qk_dot1(const float *const *q, int64_t D, const void *k, int NR, int t, int bf2, vf *s0, vf *s1) {
    vf a00 = vf_zero(), a01 = a00, a10 = a00, a11 = a00; /* row, half */
    int64_t c = 0;
    if (FP8T(t)) { /* 64 codes a conversion, the same sums in the same order */
        const fp8_lut l = fp8_lut_raw(t);
        const fp8t_ix ord = fp8t_order();
        for (; c + 4 * VL <= D; c += 4 * VL) {
            vf x[4];
            fp8t_ld64((const uint8_t *)k + c, &l, ord, x);
            for (int h = 0; h < 4; h += 2) {
                a00 = vf_fma(vf_load(q[0] + c + h * VL), x[h], a00);
                a01 = vf_fma(vf_load(q[0] + c + (h + 1) * VL), x[h + 1], a01);
                if (NR == 2)
                    a10 = vf_fma(vf_load(q[1] + c + h * VL), x[h], a10),
                    a11 = vf_fma(vf_load(q[1] + c + (h + 1) * VL), x[h + 1], a11);
            }
        }
    }
    for (; c + 2 * VL <= D; c += 2 * VL) {
        vf x[2];
        if (t == KV_E4M3 || t == KV_E5M2) /* 16 codes a conversion */
            for (int o = 0; o < 2 * VL; o += 16) fp8_ld16((const uint8_t *)k + c + o, t, 1, x + o / VL);
        else if (bf2) /* bf16 against q in vf_load_bf16x2's order (qk_body) */
            vf_load_bf16x2((const uint16_t *)k + c, x, x + 1);
        else
            x[0] = kq_ld(k, c, t), x[1] = kq_ld(k, c + VL, t);
        a00 = vf_fma(vf_load(q[0] + c), x[0], a00), a01 = vf_fma(vf_load(q[0] + c + VL), x[1], a01);
        if (NR == 2) a10 = vf_fma(vf_load(q[1] + c), x[0], a10), a11 = vf_fma(vf_load(q[1] + c + VL), x[1], a11);
    }
    if (c < D) {
        vf x0 = kq_ld(k, c, t);
        a00 = vf_fma(vf_load(q[0] + c), x0, a00);
        if (NR == 2) a10 = vf_fma(vf_load(q[1] + c), x0, a10);
    }
    *s0 = vf_add(a00, a01), *s1 = vf_add(a10, a11);
}
INLINE void qk_one(const float *const *q, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, int64_t lds,
                   const void *pre, int64_t ldpre, int64_t pb, int NR, int t) {
    if (pre) prefetch_bytes(kv_row(pre, j, ldpre, t), pb);
    vf s0, s1;
    qk_dot1(q, D, kv_row(K, j, ldk, t), NR, t, 0, &s0, &s1);
    S[j] = vf_sum(s0);
    if (NR == 2) S[lds + j] = vf_sum(s1);
}

#if ONE16 /* (not under SIMDe: see HEAD128) */
/* qk_one16 at one row over 16-bit keys, eight keys side by side: columns outer, each key's two accumulators
 * qk_dot1's (the same sums in the same order, the same bits), so that eight keys' FMAs are in flight together
 * where qk_dot1's chains ran one key after another and the stream waited on them. Zen 5, bf16, D 128, one row:
 * the kernels alone from L2 3.7-3.9 ns a key against 4.7-4.9; the step from memory 1.04-1.08x the GB/s on one
 * thread (medians of 9 rounds, per-round ranges 0.95-1.12), 1.07x on two. At two rows (four keys side by side) the
 * kernels from L2 took 0.78x the time but the step from memory 0.97x (0.93-1.01): two rows keep one key at a time
 * (zen5/qk-one16i-ab) */
INLINE void qk_one16i(const float *q, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, const void *pre,
                      int64_t ldpre, int64_t pb, int t, int bf2) {
    vf a[16];
    for (int h = 0; h < 16; h += 8) {
        const void *k[8];
        vf a0[8], a1[8];
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++) {
            k[e] = kv_row(K, j + h + e, ldk, t), a0[e] = a1[e] = vf_zero();
            if (pre) prefetch_bytes(kv_row(pre, j + h + e, ldpre, t), pb);
        }
        for (int64_t c = 0; c < D; c += 2 * VL) {
            vf y0 = vf_load(q + c), y1 = vf_load(q + c + VL);
#pragma GCC unroll 8
            for (int e = 0; e < 8; e++) {
                vf x[2];
                if (bf2)
                    vf_load_bf16x2((const uint16_t *)k[e] + c, x, x + 1);
                else
                    x[0] = kq_ld(k[e], c, t), x[1] = kq_ld(k[e], c + VL, t);
                a0[e] = vf_fma(y0, x[0], a0[e]), a1[e] = vf_fma(y1, x[1], a1[e]);
            }
        }
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++) a[h + e] = vf_add(a0[e], a1[e]);
    }
    vf_store(S + j, vf_reduce16(a));
}
/* qk_one's keys 16 / NR a step, each read whole in turn as there (one row over 16-bit keys: qk_one16i), their
 * row sums reduced together in vf_reduce16's transposing tree and stored
 * as vectors (one key's sum took nine dependent operations and a scalar
 * store) */
INLINE void qk_one16(const float *const *q, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, int64_t lds,
                     const void *pre, int64_t ldpre, int64_t pb, int NR, int t, int bf2) {
    if (NR == 1 && (t == KV_BF16 || t == KV_F16) && D % (2 * VL) == 0) {
        qk_one16i(q[0], D, K, ldk, j, S, pre, ldpre, pb, t, bf2);
        return;
    }
    const int NK = 16 / NR;
    vf a[16], none;
    for (int e = 0; e < NK; e++) {
        if (pre) prefetch_bytes(kv_row(pre, j + e, ldpre, t), pb);
        qk_dot1(q, D, kv_row(K, j + e, ldk, t), NR, t, bf2, &a[e], NR == 2 ? &a[NK + e] : &none);
    }
    vf v = vf_reduce16(a); /* lane e: row 0's key j + e; NR 2: lanes 8 + e row 1's */
    if (NR == 1) {
        vf_store(S + j, v);
    } else {
        vf_mask_store(S + j, (vmask)0x00ff, v);
        vf_mask_store(S + lds + j - 8, (vmask)0xff00, v); /* lanes 8 .. 15 to row 1's keys j .. j + 7 */
    }
}

#endif

#if VL == 8 && !defined(ATTN_VEC_SIMDE)
/* 16 values of key row k from column c as two vectors: bf16 in
 * vf_load_bf16x2's in-lane order (q in the same order: qk_one8), fp8 16
 * codes a conversion, else two loads */
INLINE void qk_x16(const void *k, int64_t c, int t, vf *x) {
    if (t == KV_BF16)
        vf_load_bf16x2((const uint16_t *)k + c, x, x + 1);
    else if (t == KV_E4M3 || t == KV_E5M2)
        fp8_ld16((const uint8_t *)k + c, t, 1, x);
    else
        x[0] = kq_ld(k, c, t), x[1] = kq_ld(k, c + VL, t);
}
/* NR (1, 2) rows (q: NR rows D apart), keys j .. j + 8 / NR (AVX2), one
 * key a step read whole in order (qk_one's streaming), two accumulators a
 * row, the eight sums reduced together (vh_sum8) and stored as vectors:
 * qk_one's reduction a key took nine dependent operations and a scalar
 * store. bf16 keys are unpacked in-lane (vf_load_bf16x2) against q in that
 * order (qk_ones8 permutes it); fp8 16 codes a conversion */
INLINE void qk_one8(const float *q, int NR, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, int64_t lds,
                    const void *pre, int64_t ldpre, int64_t pb, int t) {
    const int NK = 8 / NR;
    vf s[8];
    for (int e = 0; e < NK; e++) {
        const void *k = kv_row(K, j + e, ldk, t);
        if (pre) prefetch_bytes(kv_row(pre, j + e, ldpre, t), pb);
        vf a[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()}; /* row u: a[2 u], a[2 u + 1] */
        __asm__("" : "+r"(q)); /* q read by the FMAs, not hoisted out of the keys' loop (and spilled) */
        int64_t c = 0;
        for (; c + 2 * VL <= D; c += 2 * VL) {
            vf x[2];
            qk_x16(k, c, t, x);
            for (int u = 0; u < NR; u++)
                a[2 * u] = vf_fma(vf_load(q + u * D + c), x[0], a[2 * u]),
                      a[2 * u + 1] = vf_fma(vf_load(q + u * D + c + VL), x[1], a[2 * u + 1]);
        }
        if (c < D) {
            vf x = kq_ld(k, c, t);
            for (int u = 0; u < NR; u++) a[2 * u] = vf_fma(vf_load(q + u * D + c), x, a[2 * u]);
        }
        for (int u = 0; u < NR; u++) s[u * NK + e] = vf_add(a[2 * u], a[2 * u + 1]);
    }
    vf v = vh_sum8(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]); /* lane u NK + e: row u, key j + e */
    if (NR == 1) {
        vf_store(S + j, v);
    } else {
        _mm_storeu_ps(S + j, _mm256_castps256_ps128(v));
        _mm_storeu_ps(S + lds + j, _mm256_extractf128_ps(v, 1));
    }
}
/* keys [0, n) at NR (1, 2) rows from q, D apart (qk_body's), by qk_one8's steps; returns the keys taken */
INLINE int64_t qk_ones8(const float *q, int NR, int64_t D, const void *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                        const void *pre, int64_t ldpre, int64_t pb, int t) {
    float qp[t == KV_BF16 ? 2 * QP_MAX : 1] __attribute__((aligned(32))); /* bf16: the rows permuted, D apart */
    if (t == KV_BF16 && D > QP_MAX) return 0;
    if (t == KV_BF16) {
        for (int u = 0; u < NR; u++) qk_bf_perm(q + u * D, D, qp + u * D);
        q = qp;
    }
    int64_t j = 0;
    for (; j + 8 / NR <= n; j += 8 / NR) qk_one8(q, NR, D, K, ldk, j, S, lds, pre, ldpre, pb, t);
    return j;
}

/* bf16 keys j, j + 1 against four query rows (qp: each permuted, D apart;
 * nr of them stored): 16 columns a step, each K load unpacked in-lane
 * (vf_load_bf16x2), 8 accumulators, reduced together (vh_sum8). The 3-key
 * step's widening and 16-bit shift (kq_ld_w) issued beside the FMAs on
 * Zen 1, one shift for every four FMAs; the unpacks pair with them */
INLINE void qk_bf8_pair(const float *qp, int64_t D, const void *k0, const void *k1, float *S, int64_t lds, int64_t j,
                        int64_t nr) {
    vf a[8]; /* row u, key e: a[2 u + e] */
    for (int i = 0; i < 8; i++) a[i] = vf_zero();
    int64_t c = 0;
    for (; c + 16 <= D; c += 16) {
        vf x0[2], x1[2];
        vf_load_bf16x2((const uint16_t *)k0 + c, x0, x0 + 1), vf_load_bf16x2((const uint16_t *)k1 + c, x1, x1 + 1);
        for (int u = 0; u < 4; u++)
            for (int g = 0; g < 2; g++) {
                vf y = vf_load_reg(qp + u * D + c + 8 * g);
                a[2 * u] = vf_fma(y, x0[g], a[2 * u]), a[2 * u + 1] = vf_fma(y, x1[g], a[2 * u + 1]);
            }
        for (int i = 0; i < 8; i++) KEEP_REG(a[i]);
    }
    if (c < D) {
        vf x0 = kq_ld_w(k0, c, KV_BF16), x1 = kq_ld_w(k1, c, KV_BF16);
        for (int u = 0; u < 4; u++) {
            vf y = vf_load_reg(qp + u * D + c);
            a[2 * u] = vf_fma(y, x0, a[2 * u]), a[2 * u + 1] = vf_fma(y, x1, a[2 * u + 1]);
        }
    }
    float r[8];
    vf_store(r, vh_sum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
    for (int64_t u = 0; u < nr; u++) S[u * lds + j] = r[2 * u], S[u * lds + j + 1] = r[2 * u + 1];
}
/* keys [0, n) in pairs at three or four rows q[0..3] (bf16, D <= QP_MAX); returns the keys taken */
INLINE int64_t qk_bf8_rows(const float *const *q, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                           int64_t lds, const void *pre, int64_t ldpre, int64_t pb, int64_t nr) {
    float qp[4 * QP_MAX] __attribute__((aligned(32)));
    for (int u = 0; u < 4; u++) qk_bf_perm(q[u], D, qp + u * D);
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        if (pre)
            prefetch_bytes(kv_row(pre, j, ldpre, KV_BF16), pb), prefetch_bytes(kv_row(pre, j + 1, ldpre, KV_BF16), pb);
        qk_bf8_pair(qp, D, kv_row(K, j, ldk, KV_BF16), kv_row(K, j + 1, ldk, KV_BF16), S, lds, j, nr);
    }
    return j;
}
#endif

/* keys [0, n) at nr (1, 2) rows: qk_one16's steps (16 lanes; 8 lanes: qk_ones8's, bf16 and fp8), qk_one's for the
 * keys left; NR a constant at each call (its accumulators in registers). qp: bf16 rows in vf_load_bf16x2's order
 * for qk_one16 (qk_bf_perm), or NULL */
INLINE int64_t qk_ones_nr(const float *const *q, const float *const *qp, int64_t D, const void *K, int64_t ldk,
                          int64_t n, float *S, int64_t lds, const void *pre, int64_t ldpre, int64_t pb, int NR, int t) {
    int64_t j = 0;
#if ONE16
    for (; j + 16 / NR <= n; j += 16 / NR)
        qk_one16(qp ? qp : q, D, K, ldk, j, S, lds, pre, ldpre, pb, NR, t, qp != NULL);
#elif VL == 8 && !defined(ATTN_VEC_SIMDE)
    if (t == KV_BF16 || t == KV_E4M3 || t == KV_E5M2) /* NR 2: q[1] is q[0] + D (qk_body) */
        j = qk_ones8(q[0], NR, D, K, ldk, n, S, lds, pre, ldpre, pb, t);
#endif
    (void)qp;
    for (; j < n; j++) qk_one(q, D, K, ldk, j, S, lds, pre, ldpre, pb, NR, t);
    return j;
}
INLINE int64_t qk_ones(const float *const *q, const float *const *qp, int64_t D, const void *K, int64_t ldk, int64_t n,
                       float *S, int64_t lds, const void *pre, int64_t ldpre, int64_t pb, int64_t nr, int t) {
    return nr == 1 ? qk_ones_nr(q, qp, D, K, ldk, n, S, lds, pre, ldpre, pb, 1, t)
                   : qk_ones_nr(q, qp, D, K, ldk, n, S, lds, pre, ldpre, pb, 2, t);
}

#if VL == 16
/* S rows 0 .. nr - 1 of keys j .. j + 3 for 4 query rows (q[0..3]) */
INLINE void qk_four(const float *const *q, int64_t D, const void *K, int64_t ldk, int64_t j, float *S, int64_t lds,
                    const void *pre, int64_t ldpre, int64_t pb, int64_t nr, int t, int bf2) {
    const void *k[4];
    for (int e = 0; e < 4; e++) k[e] = kv_row(K, j + e, ldk, t);
    if (pre) prefetch_rows(pre, (size_t)attn_storage_bytes((attn_dtype)t, ldpre), j, 4, pb);
    vf a[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) a[i] = vf_zero();
    int64_t c = 0;
    if (bf2) /* bf16 against q in vf_load_bf16x2's order (qk_body): 32 values a load, two operations */
        for (; c + 2 * VL <= D; c += 2 * VL) {
            vf x[8];
#pragma GCC unroll 4
            for (int e = 0; e < 4; e++) vf_load_bf16x2((const uint16_t *)k[e] + c, x + e, x + 4 + e);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    vf y = vf_load_reg(q[u] + c + h * VL);
#pragma GCC unroll 4
                    for (int e = 0; e < 4; e++) a[4 * u + e] = vf_fma(y, x[4 * h + e], a[4 * u + e]);
                }
        }
    for (; c < D; c += VL) {
        vf x[4];
#pragma GCC unroll 4
        for (int e = 0; e < 4; e++) x[e] = kq_ld(k[e], c, t);
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            vf y = vf_load_reg(q[u] + c);
#pragma GCC unroll 4
            for (int e = 0; e < 4; e++) a[4 * u + e] = vf_fma(y, x[e], a[4 * u + e]);
        }
    }
    vf_store_lanes4(S + j, lds, vf_reduce16(a), nr); /* row u's four scores in 128-bit lane u */
}
#endif

/* qk_body's first keys for nr rows q (D a multiple of VL; qv: the rows in vf_load_bf16x2's order, or NULL): at one
 * or two rows qk_ones' steps (q8_0: qk_few's), on 8 lanes bf16's four-row key pairs; returns the keys taken */
INLINE int64_t qk_lead(const float *const *q, const float *const *qv, int64_t nr, int64_t D, const void *K, int64_t ldk,
                       int64_t n, float *S, int64_t lds, const void *pf, int64_t ldpre, int64_t pb, int t) {
    int64_t j = 0;
    if (nr <= 2) {
        if (t != KV_Q8 && HEAD128(D)) /* the common head width a constant: unrolled */
            j = qk_ones(q, qv, 128, K, ldk, n, S, lds, pf, ldpre, pb, nr, t);
        else if (t != KV_Q8)
            j = qk_ones(q, qv, D, K, ldk, n, S, lds, pf, ldpre, pb, nr, t);
        else if (nr == 1) /* q8_0: 4 keys a step ran 1.4x faster than one (Zen 3: the conversions) */
            for (; j + QF1 <= n; j += QF1) qk_few(q, D, K, ldk, j, S, lds, pf, ldpre, pb, 1, QF1, t);
        else
            for (; j + 4 <= n; j += 4) qk_few(q, D, K, ldk, j, S, lds, pf, ldpre, pb, 2, 4, t);
    }
#if VL == 8 && !defined(ATTN_VEC_SIMDE)
    if (t == KV_BF16 && nr > 2 && D <= QP_MAX)
        j = HEAD128(D) ? qk_bf8_rows(q, 128, K, ldk, n, S, lds, pf, ldpre, pb, nr)
                       : qk_bf8_rows(q, D, K, ldk, n, S, lds, pf, ldpre, pb, nr);
#endif
    return j;
}

/* 4 query rows x 3 keys per step (16 lanes: 4, qk_four; 2 with q8_0 or a D
 * tail), accumulators over D, so each key row is loaded (and converted) once
 * for 4 rows. */
INLINE void qk_body(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                    const void *pre, int64_t ldpre, int64_t wpre, int t) {
    vmask mk = vm_tail(D & (VL - 1));
    int64_t DV = D & ~(int64_t)(VL - 1), pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int64_t nr = R - r0 < 4 ? R - r0 : 4;
        const float *q[4];
        for (int64_t u = 0; u < 4; u++) q[u] = Q + (r0 + (u < nr ? u : 0)) * D;
        int64_t j = 0;
        /* 16 lanes, bf16: the rows in vf_load_bf16x2's order for the key steps (qp; the keys left read q) */
        const float *const *qv = NULL;
#if VL == 16
        const float *qp[4];
        float qpb[t == KV_BF16 ? 4 * QP_MAX : 1] __attribute__((aligned(64)));
        if (t == KV_BF16 && DV == D && D <= QP_MAX) {
            for (int u = 0; u < 4; u++) qk_bf_perm(q[u], D, qpb + u * D), qp[u] = qpb + u * D;
            qv = qp;
        }
#endif
        if (DV == D) j = qk_lead(q, qv, nr, D, K, ldk, n, S + r0 * lds, lds, pre && r0 == 0 ? pre : NULL, ldpre, pb, t);
#if VL == 16
        /* 16 lanes: 4 keys a step, 16 accumulators reduced together in one transposing tree (vf_reduce16: 2.8
         * instructions a score, against the 3-key step's folds and hadds, which took more of its time than the
         * FMAs did) */
        if (t != KV_Q8 && DV == D)
            for (; j + 4 <= n; j += 4)
                qk_four(qv ? qv : q, D, K, ldk, j, S + r0 * lds, lds, pre && r0 == 0 ? pre : NULL, ldpre, pb, nr, t,
                        qv != NULL);
#endif
        /* 3 keys per step: 12 accumulators, 7 loads per 12 FMAs (2 keys: 10 per 8, which bounded the loop by
         * the load ports); e4m3 on 8 lanes takes 2 keys and 16 columns a step below (its conversion's
         * constants beside 12 accumulators spilled one, a store and a load in its chain every step) */
        if (t != KV_Q8 && !(t == KV_E4M3 && VL == 8) && DV == D)
            for (; j + 3 <= n; j += 3) {
                const void *k0 = kv_row(K, j, ldk, t), *k1 = kv_row(K, j + 1, ldk, t), *k2 = kv_row(K, j + 2, ldk, t);
                if (pre && r0 == 0)
                    for (int64_t e = 0; e < 3; e++) prefetch_bytes(kv_row(pre, j + e, ldpre, t), pb);
                vf a00 = vf_zero(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00, a20 = a00, a21 = a00,
                   a22 = a00, a30 = a00, a31 = a00, a32 = a00;
                for (int64_t c = 0; c < D; c += VL) {
                    vf x0 = kq_ld_w(k0, c, t), x1 = kq_ld_w(k1, c, t), x2 = kq_ld_w(k2, c, t), y;
                    y = vf_load_reg(q[0] + c), a00 = vf_fma(y, x0, a00), a01 = vf_fma(y, x1, a01),
                    a02 = vf_fma(y, x2, a02);
                    y = vf_load_reg(q[1] + c), a10 = vf_fma(y, x0, a10), a11 = vf_fma(y, x1, a11),
                    a12 = vf_fma(y, x2, a12);
                    y = vf_load_reg(q[2] + c), a20 = vf_fma(y, x0, a20), a21 = vf_fma(y, x1, a21),
                    a22 = vf_fma(y, x2, a22);
                    y = vf_load_reg(q[3] + c), a30 = vf_fma(y, x0, a30), a31 = vf_fma(y, x1, a31),
                    a32 = vf_fma(y, x2, a32);
                }
                qk_store3(S + r0 * lds, lds, j, nr, a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32);
            }
        for (; j + 2 <= n; j += 2) {
            const void *k0 = kv_row(K, j, ldk, t), *k1 = kv_row(K, j + 1, ldk, t);
            if (pre && r0 == 0)
                prefetch_bytes(kv_row(pre, j, ldpre, t), pb), prefetch_bytes(kv_row(pre, j + 1, ldpre, t), pb);
            vf a00 = vf_zero(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
            int64_t c = 0;
            vf s0 = vf_zero(), s1 = s0; /* q8_0: the current block's scales */
#if VL == 8
            if (t == KV_E4M3) /* 16 codes a conversion (fp8_pair) */
                for (; c + 2 * VL <= DV; c += 2 * VL) {
                    vf x0[2], x1[2], y;
                    fp8_pair_raw((const uint8_t *)k0 + c, t, x0), fp8_pair_raw((const uint8_t *)k1 + c, t, x1);
                    for (int h = 0; h < 2; h++) {
                        y = vf_load(q[0] + c + h * VL), a00 = vf_fma(y, x0[h], a00), a01 = vf_fma(y, x1[h], a01);
                        y = vf_load(q[1] + c + h * VL), a10 = vf_fma(y, x0[h], a10), a11 = vf_fma(y, x1[h], a11);
                        y = vf_load(q[2] + c + h * VL), a20 = vf_fma(y, x0[h], a20), a21 = vf_fma(y, x1[h], a21);
                        y = vf_load(q[3] + c + h * VL), a30 = vf_fma(y, x0[h], a30), a31 = vf_fma(y, x1[h], a31);
                    }
                }
#endif
            for (; c < DV; c += VL) {
                vf x0, x1, y;
                if (t == KV_Q8) {
                    if ((c & 31) == 0) s0 = q8_scale(k0, c), s1 = q8_scale(k1, c);
                    x0 = vf_mul(q8_raw(k0, c), s0), x1 = vf_mul(q8_raw(k1, c), s1);
                } else {
                    x0 = kq_ld_w(k0, c, t), x1 = kq_ld_w(k1, c, t);
                }
                y = vf_load_reg(q[0] + c), a00 = vf_fma(y, x0, a00), a01 = vf_fma(y, x1, a01);
                y = vf_load_reg(q[1] + c), a10 = vf_fma(y, x0, a10), a11 = vf_fma(y, x1, a11);
                y = vf_load_reg(q[2] + c), a20 = vf_fma(y, x0, a20), a21 = vf_fma(y, x1, a21);
                y = vf_load_reg(q[3] + c), a30 = vf_fma(y, x0, a30), a31 = vf_fma(y, x1, a31);
            }
            if (c < D) {
                vf x0 = kv_ld_tail(k0, c, D - c, t, 1), x1 = kv_ld_tail(k1, c, D - c, t, 1), y;
                y = vf_maskz_load(q[0] + c, mk), a00 = vf_fma(y, x0, a00), a01 = vf_fma(y, x1, a01);
                y = vf_maskz_load(q[1] + c, mk), a10 = vf_fma(y, x0, a10), a11 = vf_fma(y, x1, a11);
                y = vf_maskz_load(q[2] + c, mk), a20 = vf_fma(y, x0, a20), a21 = vf_fma(y, x1, a21);
                y = vf_maskz_load(q[3] + c, mk), a30 = vf_fma(y, x0, a30), a31 = vf_fma(y, x1, a31);
            }
            float s[8];
            _mm256_storeu_ps(s, vh_sum8(vf_fold(a00), vf_fold(a01), vf_fold(a10), vf_fold(a11), vf_fold(a20),
                                        vf_fold(a21), vf_fold(a30), vf_fold(a31)));
            for (int64_t u = 0; u < nr; u++) S[(r0 + u) * lds + j] = s[2 * u], S[(r0 + u) * lds + j + 1] = s[2 * u + 1];
        }
        for (; j < n; j++) {
            const void *k0 = kv_row(K, j, ldk, t);
            if (pre && r0 == 0) prefetch_bytes(kv_row(pre, j, ldpre, t), pb);
            for (int64_t u = 0; u < nr; u++) {
                vf a = vf_zero();
                int64_t c = 0;
                for (; c < DV; c += VL) a = vf_fma(vf_load(q[u] + c), kq_ld_w(k0, c, t), a);
                if (c < D) a = vf_fma(vf_maskz_load(q[u] + c, mk), kv_ld_tail(k0, c, D - c, t, 1), a);
                S[(r0 + u) * lds + j] = vf_sum(a);
            }
        }
    }
}

/* int4 rows (attn.h KV_INT4): column c's code in byte c % half (half: the
 * row's width / 2), the high nibble from half on. The byte of column c, and
 * 32 codes from column c (within one half) as bytes. */
INLINE const uint8_t *int4_at(const void *row, int64_t c, int64_t half) {
    return (const uint8_t *)row + (c < half ? c : c - half);
}
INLINE __m256i int4_codes32(const void *row, int64_t c, int64_t half) {
    __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)int4_at(row, c, half));
    return _mm256_and_si256(c < half ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
}

/* VL values of a V row from column col as pv_rows_x reads them: kv_ld's,
 * and the 4-bit formats' (int4: codes, column c in byte c % half, the high
 * nibble from half = Dv / 2 on; q4_0: (code - 8) d per 32-value block, low
 * nibbles first), whose vectors never straddle a half or a block (pv_rows_x:
 * Dv a multiple of 32) */
INLINE vf nib_ld(const uint8_t *p, int hi) { return byte_ld(p, KV_U4, hi); }
/* q4_0 pieces: the scale d of the block holding col, and VL values code - 8 from col */
INLINE float q4_scale_f(const void *row, int64_t col) {
    uint16_t dh;
    memcpy(&dh, (const uint8_t *)row + (size_t)(col / ATTN_Q4_BLOCK) * ATTN_Q4_BYTES, 2);
    return half_to_float(dh);
}
INLINE vf q4_raw(const void *row, int64_t col) {
    const uint8_t *blk = (const uint8_t *)row + (size_t)(col / ATTN_Q4_BLOCK) * ATTN_Q4_BYTES;
    int64_t o = col % ATTN_Q4_BLOCK;
    return vf_sub(nib_ld(blk + 2 + o % 16, o >= 16), vf_set1(8.0f));
}
#if VL == 16
#if !defined(ATTN_VEC_SIMDE)
/* the 16 values code - 8, index = code */
INLINE __m512 q4_tab(void) { return _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8); }
/* a q4_0 block's 32 codes (16 bytes at c) looked up in tab, low nibbles then high */
INLINE void q4_lut2(const uint8_t *c, __m512 tab, __m512 *x) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
    x[0] = _mm512_permutexvar_ps(b, tab), x[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
}
#endif
/* a q4_0 block's 32 values code - 8 from col (a multiple of 32) as two
 * vectors, low nibbles then high, from one 16-byte load (q4_raw's values:
 * two of its loads and joins), each a lookup of the code (the index's low
 * 4 bits) among the 16 values: a mask, a subtraction and a conversion a
 * vector before (P V alone 0.78x the time at one row, 0.91x at four:
 * zen5/q4-lookup-ab; with the block's scale folded into the 16 values
 * four rows ran 0.97x, the scale's product then ahead of the lookups) */
INLINE void q4_raw2(const void *row, int64_t col, vf *x) {
#if defined(ATTN_VEC_SIMDE) /* no 512-bit widening or conversion in SIMDe 0.7.4: q4_raw's steps */
    x[0] = q4_raw(row, col), x[1] = q4_raw(row, col + 16);
#else
    q4_lut2((const uint8_t *)row + (size_t)(col / ATTN_Q4_BLOCK) * ATTN_Q4_BYTES + 2, q4_tab(), x);
#endif
}
#endif
/* NW vectors of a q8_0 / q4_0 row's values from column cc (a multiple of
 * VL) as they are stored (q8_raw, q4_raw: the block's scale not applied),
 * d[w] the scale of vector w's block; a 16-lane q4_0 block from one load */
INLINE void qblk_raw(const void *row, int64_t cc, int NW, int t, vf *x, float *d) {
    for (int w = 0; w < NW; w++) {
        int64_t col = cc + w * VL;
        d[w] = w > 0 && col % 32 ? d[w - 1] : t == KV_Q8 ? q8_scale_f(row, col) : q4_scale_f(row, col);
#if VL == 16
        if (t == KV_Q4 && col % 32 == 0 && w + 1 < NW) {
            q4_raw2(row, col, x + w);
            d[w + 1] = d[w], w++;
            continue;
        }
#endif
        x[w] = t == KV_Q8 ? q8_raw(row, col) : q4_raw(row, col);
    }
}
INLINE vf pv_ld(const void *row, int64_t col, int t, int64_t half) {
    if (t == KV_U4) return nib_ld(int4_at(row, col, half), col >= half);
    if (t == KV_Q4) return vf_mul(q4_raw(row, col), vf_set1(q4_scale_f(row, col)));
    return kv_ld(row, col, t);
}

/* PW: vectors per pass for 4 rows (4 at most with AVX-512's 32 registers:
 * 16 accumulators + 4 V vectors; 2 with AVX2's 16: 8 + 2, more would
 * spill): 4 for converted rows at 16 lanes, else 2 (f32 rows at 16 lanes: a
 * 256-byte pass per row ran at 0.72 of the read bandwidth on one Zen 4
 * thread, 128-byte passes at 0.85; converted rows the other way round).
 * One index for P and one V pointer stepped by the row stride: the front
 * end, not the FMA units, had bounded these loops. */
#define PW(t) (VL == 16 && (t) != KV_F32 ? 4 : 2)
/* PV_BF2(t, NR): bf16 rows read 2 VL values a load in vf_load_bf16x2's
 * order (8 lanes: in-lane unpacks; 16: the even and the odd values), the
 * pass's accumulators kept in that order (bf16_split at its start,
 * bf16_merge at its end): each O element the same chain of FMAs, the same
 * bits. Not at two rows on 8 lanes, whose passes of 32 columns read a
 * cache line a key: there the decode stream ran slower with it (Zen 1,
 * zen1/bf16-unpack-step-ab) */
#if (VL == 8 && !defined(ATTN_VEC_SIMDE)) || VL == 16
#define PV_BF2(t, NR) ((t) == KV_BF16 && (VL == 16 || (NR) != 2))
/* NW vectors of a bf16 row from column cc, in that order */
INLINE void pv_bf2_ld(const char *vp, int64_t cc, int NW, vf *x) {
    for (int w = 0; w < NW; w += 2) vf_load_bf16x2((const uint16_t *)vp + cc + w * VL, x + w, x + w + 1);
}
/* NW accumulators into that order (back: out of it) */
INLINE void pv_bf2_order(vf *a, int NW, int back) {
    for (int w = 0; w < NW; w += 2)
        if (back)
            bf16_merge(a[w], a[w + 1], &a[w], &a[w + 1]);
        else
            bf16_split(a[w], a[w + 1], &a[w], &a[w + 1]);
}
#else
#define PV_BF2(t, NR) 0
INLINE void pv_bf2_ld(const char *vp, int64_t cc, int NW, vf *x) { (void)vp, (void)cc, (void)NW, (void)x; }
INLINE void pv_bf2_order(vf *a, int NW, int back) { (void)a, (void)NW, (void)back; }
#endif
/* One pass over the n keys for NR rows (pr[u]: row u of P; e4m3: P times
 * 256, pv_body) and NW vectors of columns from cc: O rows (from O, ldo
 * apart) += P V, prefetching the pass's bytes of the pre rows (pp, ps
 * bytes apart) as it goes. */
INLINE void pv_pass(const float *const *pr, int NR, int NW, const void *V, size_t vs, int64_t n, float *O, int64_t ldo,
                    int64_t cc, const char *pp, size_t ps, int64_t half, int t) {
    vf c4[4][8], c8[4][8]; /* rows 4-7 apart: fewer rows keep the 4-row layout (c8 unused) */
#define PV_C(u) ((u) < 4 ? c4[(u)] : c8[(u)-4])
    for (int u = 0; u < NR; u++)
        for (int w = 0; w < NW; w++) PV_C(u)[w] = vf_load(O + u * ldo + cc + w * VL);
    for (int u = 0; PV_BF2(t, NR) && u < NR; u++) pv_bf2_order(PV_C(u), NW, 0); /* in vf_load_bf16x2's order */
    const char *vp = (const char *)V;
    int64_t plines = ((int64_t)attn_storage_bytes((attn_dtype)t, NW * VL) + 63) / 64;
    const fp8_lut lut = fp8_lut_raw(t); /* FP8T */
    const fp8t_ix ord = fp8t_order();
    for (int64_t j = 0; j < n; j++, vp += vs) {
        if (pp)
            for (int64_t l = 0; l < plines; l++) __builtin_prefetch(pp + (size_t)j * ps + 64 * l, 0, ATTN_PF_LOC);
        vf x[8];
        if (t == KV_Q8 || t == KV_Q4) { /* one scale per 32-value block, read once */
            float d[8];
            qblk_raw(vp, cc, NW, t, x, d);
            if (NR == 1) { /* the block's scale folded into P: one product a block */
                for (int w = 0; w < NW; w++) c4[0][w] = vf_fma(vf_set1(pr[0][j] * d[w]), x[w], c4[0][w]);
                continue;
            }
            for (int w = 0; w < NW; w++) x[w] = vf_mul(x[w], vf_set1(d[w]));
        } else if (FP8T(t) && NW % 4 == 0) { /* 64 codes a conversion */
            for (int w = 0; w < NW; w += 4) fp8t_ld64((const uint8_t *)vp + cc + w * VL, &lut, ord, x + w);
        } else if (t == KV_E4M3 || t == KV_E5M2) { /* 16 codes a conversion (NW even at 8 lanes) */
            for (int w = 0; w < NW; w += 16 / VL) fp8_ld16((const uint8_t *)vp + cc + w * VL, t, 1, x + w);
        } else if (NR == 1) { /* each vector used as loaded: 8 held for one row spilled on 8 lanes */
            vf p = vf_set1(pr[0][j]);
            for (int w = 0; w < NW; w += 2) {
                if (PV_BF2(t, 1))
                    pv_bf2_ld(vp, cc + w * VL, 2, x);
                else
                    x[0] = pv_ld(vp, cc + w * VL, t, half), x[1] = pv_ld(vp, cc + (w + 1) * VL, t, half);
                c4[0][w] = vf_fma(p, x[0], c4[0][w]), c4[0][w + 1] = vf_fma(p, x[1], c4[0][w + 1]);
            }
            continue;
        } else if (PV_BF2(t, NR)) {
            pv_bf2_ld(vp, cc, NW, x);
        } else {
            for (int w = 0; w < NW; w++) x[w] = pv_ld(vp, cc + w * VL, t, half);
        }
        for (int u = 0; u < NR; u++) {
            vf p = vf_set1(pr[u][j]);
            for (int w = 0; w < NW; w++) PV_C(u)[w] = vf_fma(p, x[w], PV_C(u)[w]);
        }
    }
    for (int u = 0; PV_BF2(t, NR) && u < NR; u++) pv_bf2_order(PV_C(u), NW, 1);
    for (int u = 0; u < NR; u++)
        for (int w = 0; w < NW; w++) vf_store(O + u * ldo + cc + w * VL, PV_C(u)[w]);
#undef PV_C
}

/* O rows += P V for 4 rows at a time, in column passes of pv_pass; edges (a
 * partial vector, or fewer than 4 vectors of columns) through a general
 * loop. q8_0 / q4_0 on the 16-lane tables: 8 rows a pass of 32 columns (16
 * accumulators), so that a key's block is read and decoded once for 8 rows
 * (the step at 8 and 16 rows 0.92x over q8_0, 0.94-0.95x over q4_0, Zen 5:
 * zen5/pv-rows8-ab). Each element of O is one chain of FMAs over the keys
 * in order.
 * One or two rows (MHA, GQA-2) once ran through that general loop: 0.60-0.85
 * of today's time (decode-fewrows-zen4.jsonl). */
#define PV_NC 128 /* e4m3's keys a chunk (decode's blocks: one) */
INLINE void pv_body(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv, float *O,
                    int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, int t) {
    int64_t pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre);
    size_t vs = attn_storage_bytes((attn_dtype)t, ldv), ps = attn_storage_bytes((attn_dtype)t, ldpre);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
#if VL == 16
        if ((t == KV_Q8 || t == KV_Q4) && R - r0 >= 8 && Dv % 32 == 0) { /* 8 rows a pass: a key's codes once */
            const float *p8[8];
            for (int u = 0; u < 8; u++) p8[u] = P + (r0 + u) * ldp;
            for (int64_t c0 = 0; c0 < Dv; c0 += 2 * VL) {
                const char *pp = pre && r0 == 0 && c0 < wpre ? (const char *)kv_elem(pre, c0, t) : NULL;
                pv_pass(p8, 8, 2, V, vs, n, O + r0 * ldo, ldo, c0, pp, ps, Dv / 2, t);
            }
            r0 += 4;
            continue;
        }
#endif
        int64_t nr = R - r0 < 4 ? R - r0 : 4;
        int64_t c0 = 0;
        const float *pr[4];
        for (int u = 0; u < 4; u++) pr[u] = P + (r0 + (u < nr ? u : 0)) * ldp;
        /* vectors per pass: 4 rows PW; fewer rows as many as fit the registers with
         * each V vector used at once, 8 (a 128-column f32 row read whole) where they do */
        int nw = nr == 4 ? PW(t) : nr == 3 ? (VL == 16 ? 4 : 2) : nr == 2 && VL == 8 ? 4 : 8;
        float *o = O + r0 * ldo;
        /* e4m3: the passes take P times 256, PV_NC keys at a time, against the values times 2^-8 as converted (no
         * product a V vector): exact powers of two, the same products (P <= 2^11, online.h), the same bits. Four
         * rows on Zen 1: the kernel 0.89x (zen1/e4m3-p256-ab) */
        float p256[4][PV_NC];
        const float *pc[4] = {pr[0], pr[1], pr[2], pr[3]};
        for (int64_t j0 = 0; j0 == 0 || j0 < n; j0 += PV_NC) {
            int64_t nc = t != KV_E4M3 ? n : n - j0 < PV_NC ? n - j0 : PV_NC;
            for (int u = 0; t == KV_E4M3 && u < nr; u++) {
                for (int64_t j = 0; j < nc; j++) p256[u][j] = pr[u][j0 + j] * 256.0f;
                pc[u] = p256[u];
            }
            const char *vc = (const char *)V + (size_t)j0 * vs;
            for (c0 = 0;;) {
                int w = nw == 8 && c0 + 8 * VL > Dv ? 4 : nw;
                if (c0 + w * VL > Dv) break;
                /* each pass prefetches the bytes it reads, DEC_PF rows ahead */
                const char *pp =
                    pre && r0 == 0 && c0 < wpre ? (const char *)kv_elem(pre, c0, t) + (size_t)j0 * ps : NULL;
                if (nr == 4)
                    pv_pass(pc, 4, PW(t), vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                else if (nr == 3)
                    pv_pass(pc, 3, VL == 16 ? 4 : 2, vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                else if (nr == 2 && w == 8)
                    pv_pass(pc, 2, 8, vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                else if (nr == 2)
                    pv_pass(pc, 2, 4, vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                else if (w == 8)
                    pv_pass(pc, 1, 8, vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                else
                    pv_pass(pc, 1, 4, vc, vs, nc, o, ldo, c0, pp, ps, Dv / 2, t);
                c0 += w * VL;
            }
            if (t != KV_E4M3) break;
        }
        for (; c0 < Dv; c0 += 4 * VL) { /* edges: the columns left, fewer than a pass */
            int64_t nv = (Dv - c0 + VL - 1) / VL < 4 ? (Dv - c0 + VL - 1) / VL : 4; /* vectors in this block */
            vf acc[4][4];
            vmask mw[4]; /* the O columns of each vector: O has room for round_up(Dv, 8) only */
            for (int64_t w = 0; w < 4; w++) {
                int64_t left = Dv - c0 - VL * w;
                mw[w] = vm_tail(left < 0 ? 0 : left < VL ? left : VL);
            }
            for (int64_t u = 0; u < 4; u++)
                for (int64_t w = 0; w < 4; w++)
                    acc[u][w] = (u < nr && w < nv) ? vf_maskz_load(O + (r0 + u) * ldo + c0 + VL * w, mw[w]) : vf_zero();
            for (int64_t j = 0; j < n; j++) {
                const void *v = kv_row(V, j, ldv, t);
                if (pre && r0 == 0 && c0 == 0) prefetch_bytes(kv_row(pre, j, ldpre, t), pb);
                vf x[4];
                for (int64_t w = 0; w < 4; w++) {
                    int64_t left = Dv - c0 - VL * w;
                    x[w] = w >= nv      ? vf_zero()
                           : left >= VL ? pv_ld(v, c0 + VL * w, t, Dv / 2)
                                        : kv_ld_tail(v, c0 + VL * w, left, t, 0);
                }
                for (int64_t u = 0; u < nr; u++) {
                    vf p = vf_set1(P[(r0 + u) * ldp + j]);
                    for (int64_t w = 0; w < 4; w++) acc[u][w] = vf_fma(p, x[w], acc[u][w]);
                }
            }
            for (int64_t u = 0; u < nr; u++)
                for (int64_t w = 0; w < nv; w++) vf_mask_store(O + (r0 + u) * ldo + c0 + VL * w, mw[w], acc[u][w]);
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

/* ---- int8 Q K^T of q8_0 blocks (the math modes, kernels.h qk_rows_q8) -------------- */

/* Unsigned bytes u times signed bytes s, summed in quads to 8 int32 lanes.
 * With VNNI (the table defines ATTN_Q8_DPBUSD: VPDPBUSD, AVX512-VNNI or
 * AVX-VNNI) one instruction; else VPMADDUBSW to pairs (int16: exact here,
 * |pair| <= 2 * 128 * 127) and VPMADDWD to quads. The same exact sums. */
#ifdef ATTN_Q8_DPBUSD
INLINE __m256i q8_quads(__m256i u, __m256i s) { return ATTN_Q8_DPBUSD(_mm256_setzero_si256(), u, s); }
#else
INLINE __m256i q8_quads(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
#endif

INLINE float q8_d(const unsigned char *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return half_to_float(h);
}

/* Block b (32 values) of key row k of type t (q8_0, q4_0) as the dot's K
 * operand: q8_0's signed values x with |x| in *ax (the sign trick), q4_0's
 * unsigned codes 0..15 (the dot takes them as they are, 8 sum(q) taken off
 * after: q8_rows) */
INLINE __m256i key_block(const unsigned char *k, int64_t b, int t, __m256i *ax) {
    if (t == KV_Q4) { /* 16 bytes: values 0..15 in the low nibbles, 16..31 in the high */
        const unsigned char *blk = k + (size_t)b * ATTN_Q4_BYTES;
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2));
        return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
    }
    const unsigned char *blk = k + (size_t)b * ATTN_Q8_BYTES;
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    *ax = _mm256_sign_epi8(x, x);
    return x;
}

/* NR (1..4) query rows against NK keys a step of [0, n) (NR NK <= 8: NK 8, 4, 2 at one, two, three or four rows),
 * blocks [b0, b1) of D, K of type t, in address order. Each (key, block) costs one K operand for all rows and per
 * row a VPMADDUBSW (q8_0: with a sign) and a VPMADDWD (or one VPDPBUSD), 8 int32 lanes; the step's NR NK such
 * vectors are summed across their lanes in one tree of unpacks and adds (vi_sum8's steps: lane u NK + e the block's
 * exact int32 dot of row u and key e), so that a block costs the step one conversion, one product of the two sides'
 * scales (dqv[b - b0]: row u's scale in lanes u NK .. u NK + NK - 1; the keys' by q8_dk) and one FMA for all its
 * (row, key) pairs; q4_0 takes off zq[b - b0] (8 times row u's sum over the block in those lanes), the codes'
 * offset. A conversion, a scale product and an FMA per (row, key, block), each pair's vector reduced once a
 * step, took 1.2x as long (Zen 1, the kernel alone, q8_0 and q4_0 at one, two and four rows: its FMA pipes also
 * run the integer multiplies; zen1/q8-lanes-ab). The block sums are exact, so a score is its blocks' products
 * summed in order, one rounding each. first: store the sums, else add them to S (blocks past the first chunk).
 * Keys past n are computed on key j and not stored. */
/* the NK key rows of a step from key j (keys past n: key j again, not
 * stored), their prefetch rows too */
INLINE void q8_keys(const void *K, size_t kr, int64_t j, int64_t n, int NK, const void *pre, size_t pr, int64_t pb,
                    const unsigned char **k) {
    for (int e = 0; e < NK; e++) k[e] = (const unsigned char *)K + (size_t)(j + e < n ? j + e : j) * kr;
    if (pre) prefetch_rows(pre, pr, j, n - j < NK ? n - j : NK, pb);
}
#define QB 32 /* blocks per chunk of the rows' scales (D = 1024) */
/* the tree's adds in int32 lanes, or (w16) in int16 lanes: the lanes move as
 * 32-bit words, so that each word's two int16 halves stay one vector's */
INLINE __m256i vi_add(__m256i a, __m256i b, int w16) { return w16 ? _mm256_add_epi16(a, b) : _mm256_add_epi32(a, b); }
/* the eight sums of int32 lanes a[0..7] (lane i a[i]'s, exact in any order), in a tree of unpacks and adds: pairs
 * first ([a0+a2, b0+b2, a1+a3, b1+b3 | lanes 4..7 alike]), then quads, then the halves; VPHADDD's tree (a third of
 * an instruction a cycle on Zen 1) ran the int8 / int4 kernels the same (0.94-1.05x) */
INLINE __m256i vi_pair(__m256i a, __m256i b, int w16) {
    return vi_add(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b), w16);
}
/* vi_pair's four results (of a[0..7]) to the eight lane sums */
INLINE __m256i vi_quads(__m256i s0, __m256i s1, __m256i s2, __m256i s3, int w16) {
    __m256i v0 = vi_add(_mm256_unpacklo_epi64(s0, s1), _mm256_unpackhi_epi64(s0, s1), w16);
    __m256i v1 = vi_add(_mm256_unpacklo_epi64(s2, s3), _mm256_unpackhi_epi64(s2, s3), w16);
    return vi_add(_mm256_permute2x128_si256(v0, v1, 0x21), _mm256_blend_epi32(v0, v1, 0xf0), w16);
}
INLINE __m256i vi_sum8(const __m256i *a) {
    return vi_quads(vi_pair(a[0], a[1], 0), vi_pair(a[2], a[3], 0), vi_pair(a[4], a[5], 0), vi_pair(a[6], a[7], 0), 0);
}
/* the block scales of keys k[0 .. NK - 1] (block b), key e's in lanes e, e + NK, ...: the f16 words gathered in a
 * scalar register (NK 8: two) and converted at once */
INLINE __m256 q8_dk(const unsigned char *const *k, int64_t b, int NK, int t) {
    size_t bb = (size_t)b * (t == KV_Q4 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES);
    uint64_t w[2] = {0, 0};
    for (int e = 0; e < NK; e++) {
        uint16_t h;
        memcpy(&h, k[e] + bb, 2);
        w[e / 4] |= (uint64_t)h << 16 * (e % 4);
    }
    if (NK == 2) w[0] |= w[0] << 32;
    if (NK <= 4) w[1] = w[0];
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)w[1], (long long)w[0]));
}
/* block b's int32 dot of a query block y and key e's K operand (q8_0: x and |x| in ax; q4_0: codes, zq taken off
 * after the tree). q4_0 without VNNI (Q4_W16): VPMADDUBSW's int16 pairs (|pair| <= 2 * 15 * 128), summed in int16
 * through the tree's three levels (8 pairs: <= 30720, exact) and widened once after it by a VPMADDWD, where each
 * (row, key) took a VPMADDWD of its own: the same exact sums. Zen 1 runs both multiplies on one pipe: the kernel over
 * q4_0 0.88x / 0.79x / 0.73x at one, two and four rows (zen1/pvi-weights-kernels-ab) */
#ifdef ATTN_Q8_DPBUSD
#define Q4_W16(t) 0
#else
#define Q4_W16(t) ((t) == KV_Q4)
#endif
INLINE __m256i q8_blk_dot(__m256i x, __m256i ax, __m256i y, int t) {
    if (Q4_W16(t)) return _mm256_maddubs_epi16(x, y);
    return t == KV_Q4 ? q8_quads(x, y) : q8_quads(ax, _mm256_sign_epi8(y, x));
}
INLINE void q8_rows(const unsigned char *const *q, const __m256 *dqv, const __m256i *zq, int64_t b0, int64_t b1,
                    const void *K, size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb,
                    int first, int NR, int NK, int t) {
    for (int64_t j = 0; j < n; j += NK) {
        const unsigned char *k[8];
        q8_keys(K, kr, j, n, NK, pre, pr, pb, k);
        __m256 a = _mm256_setzero_ps();
        for (int64_t b = b0; b < b1; b++) {
            __m256i s[4], d[8]; /* s: the pairs of d as they are made (vi_sum8's first step: fewer live vectors) */
            if (NR == 1) {      /* one row: each key's operand used once, made where it is used */
                __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(q[0] + (size_t)b * ATTN_Q8_BYTES + 2));
                for (int e = 0; e < NK; e++) {
                    __m256i ax = _mm256_setzero_si256(), x = key_block(k[e], b, t, &ax);
                    d[e] = q8_blk_dot(x, ax, y, t);
                }
                for (int p = 0; p < 4; p++)
                    s[p] = 2 * p < NK ? vi_pair(d[2 * p], d[2 * p + 1], Q4_W16(t)) : _mm256_setzero_si256();
            } else {
                __m256i x[4], ax[4];
                for (int e = 0; e < NK; e++) ax[e] = _mm256_setzero_si256(), x[e] = key_block(k[e], b, t, &ax[e]);
                for (int u = 0; u < NR; u++) {
                    __m256i y =
                        _mm256_loadu_si256((const __m256i *)(const void *)(q[u] + (size_t)b * ATTN_Q8_BYTES + 2));
                    for (int e = 0; e < NK; e++) d[u * NK + e] = q8_blk_dot(x[e], ax[e], y, t);
                    for (int e = 0; e < NK; e += 2)
                        s[(u * NK + e) / 2] = vi_pair(d[u * NK + e], d[u * NK + e + 1], Q4_W16(t));
                }
                if (NR * NK < 8) s[3] = _mm256_setzero_si256(); /* three rows: lanes 6, 7 unused */
            }
            __m256i dot = vi_quads(s[0], s[1], s[2], s[3], Q4_W16(t));
            if (Q4_W16(t)) dot = _mm256_madd_epi16(dot, _mm256_set1_epi16(1));
            if (t == KV_Q4) dot = _mm256_sub_epi32(dot, zq[b - b0]);
            a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dqv[b - b0], q8_dk(k, b, NK, t)), a);
        }
        float s8[8];
        _mm256_storeu_ps(s8, a);
        for (int u = 0; u < NR; u++)
            for (int e = 0; e < NK && j + e < n; e++) {
                float *o = S + u * lds + j + e;
                *o = first ? s8[u * NK + e] : *o + s8[u * NK + e];
            }
    }
}

/* The int32 sums acc[i] of (row u0 + i / NK, key j + i % NK), i < NR NK
 * <= 8, as scores: minus 128 sum(q) for int8's unsigned codes (uc: the
 * dot took them as they are, VPDPBUSD or VPMADDWD on widened codes), times
 * the row's scale dq, into S (keys before n). tok_consts8: those lanes'
 * zv = 128 sum(q) (or 0) and dv = dq, the same for every key (made once a
 * call); tok_store8 the store. */
INLINE void tok_consts8(int NR, int NK, int u0, const float *dq, const int32_t *qsum, int uc, __m256i *zv, __m256 *dv) {
    int32_t z8[8];
    float d8[8];
    for (int i = 0; i < 8; i++) {
        int u = u0 + (i / NK < NR ? i / NK : 0);
        z8[i] = uc ? 128 * qsum[u] : 0, d8[i] = dq[u];
    }
    *zv = _mm256_loadu_si256((const __m256i *)(void *)z8), *dv = _mm256_loadu_ps(d8);
}
INLINE void tok_store8(const __m256i *acc, int NR, int NK, int u0, __m256i zv, __m256 dv, float *S, int64_t lds,
                       int64_t j, int64_t n) {
    __m256i a[8];
    float s8[8];
    for (int i = 0; i < 8; i++) a[i] = i < NR * NK ? acc[i] : _mm256_setzero_si256();
    _mm256_storeu_ps(s8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(vi_sum8(a), zv)), dv));
    for (int u = 0; u < NR; u++) {
        float *o = S + (u0 + u) * lds + j;
        if (j + NK <= n)
            memcpy(o, s8 + u * NK, (size_t)NK * sizeof(float));
        else
            for (int e = 0; j + e < n; e++) o[e] = s8[u * NK + e];
    }
}

#ifndef ATTN_Q8_DPBUSD
#define U8W_MAX 512
/* int8 keys without VNNI: the unsigned codes widened to int16 (VPMOVZXBW)
 * against the query's int8 values widened (VPMOVSXBW), VPMADDWD to int32
 * lanes: the exact sums of code q (minus 128 sum(q) at the store, as under
 * VPDPBUSD), 16 columns a step; per (row, key) and 16 products one
 * VPMADDWD and an add (the sign trick took VPSIGNB, VPMADDUBSW and
 * VPMADDWD per 32, on the same multiply pipes on Zen 3), each key's
 * widening shared by the rows and each row's by every key (once a call) */
INLINE void q8_rows_u8w(const unsigned char *const *q, const float *dq, const int32_t *qsum, int64_t D, const void *K,
                        size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR,
                        int NK) {
    const unsigned char *qb = q[0] + 2; /* the rows qr apart (qk_tok_body) */
    size_t qr = attn_q8_row_bytes(D);
    __m256i zv;
    __m256 dv;
    tok_consts8(NR, NK, 0, dq, qsum, 1, &zv, &dv);
    /* the rows widened once a call (D <= U8W_MAX), read by the products from L1 (widened at each key step: the kernel
     * 1.14x at four rows, 1.07x at one, Zen 1: zen1/u8w-query-kernels-ab) */
    int16_t yw[4][U8W_MAX];
    int wide = D <= U8W_MAX;
    for (int u = 0; wide && u < NR; u++)
        for (int64_t c = 0; c < D; c += 16)
            _mm256_storeu_si256((__m256i *)(void *)(yw[u] + c),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(
                                    (const __m128i *)(const void *)(qb + u * qr + (c / ATTN_Q8_BLOCK) * 2 + c))));
    for (int64_t j = 0; j < n; j += NK) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, NK, pre, pr, pb, k);
        __m256i acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
        for (int64_t c = 0; c < D; c += 32) /* a block a step: its scale skipped */
            for (int h = 0; h < 32; h += 16) {
                __m256i x[4];
                const unsigned char *yc = qb + (c / ATTN_Q8_BLOCK) * 2 + c + h;
                for (int e = 0; e < NK; e++)
                    x[e] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k[e] + c + h)));
                for (int u = 0; u < NR; u++) {
                    __m256i y =
                        wide ? _mm256_loadu_si256((const __m256i *)(const void *)(yw[u] + c + h))
                             : _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(yc + u * qr)));
                    for (int e = 0; e < NK; e++)
                        acc[u * NK + e] = _mm256_add_epi32(acc[u * NK + e], _mm256_madd_epi16(x[e], y));
                }
                for (int i = 0; i < NR * NK; i++) KEEP_REG(acc[i]);
            }
        tok_store8(acc, NR, NK, 0, zv, dv, S, lds, j, n);
    }
}
#endif

/* int8 / int4 keys (one (scale, zero) a token, applied by the caller)
 * against NR (1..4) query rows with one scale each (Q8_ROW: every block's
 * scale the row's, dq[u]), NK keys a step (NR NK <= 8): each (row, key) dot
 * is one int32 sum over the whole row, S = dq (q . (code - 128)) for int8,
 * dq (q . code) for int4. VNNI: one VPDPBUSD per (row, key, block) on the
 * unsigned codes (int8: minus 128 sum(q), qsum[u]). AVX2: int8 codes
 * widened (q8_rows_u8w); int4 codes VPMADDUBSW and an int16 add (pairs <=
 * 2 * 15 * 127, eight blocks <= 30480: VPMADDWD once per 8 blocks). The
 * same exact sums on every table; one conversion and one product per
 * (row, key). */
INLINE void q8_rows_tok(const unsigned char *const *q, const float *dq, const int32_t *qsum, int64_t D, const void *K,
                        size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR,
                        int NK, int t) {
    int64_t nb = D / ATTN_Q8_BLOCK, half = D / 2;
#ifndef ATTN_Q8_DPBUSD
    if (t == KV_U8) {
        q8_rows_u8w(q, dq, qsum, D, K, kr, n, S, lds, pre, pr, pb, NR, NK);
        return;
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const int64_t nb16 = 8; /* int4: int16 sums over 8 blocks at most */
#else
    const int64_t nb16 = nb;
#endif
    __m256i zv;
    __m256 dv;
    tok_consts8(NR, NK, 0, dq, qsum, t == KV_U8, &zv, &dv);
    for (int64_t j = 0; j < n; j += NK) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, NK, pre, pr, pb, k);
        __m256i acc[8];
        for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_si256();
        for (int64_t b0 = 0; b0 < nb; b0 += nb16) {
            int64_t b1 = nb - b0 < nb16 ? nb : b0 + nb16;
            __m256i a16[8];
            for (int i = 0; i < 8; i++) a16[i] = _mm256_setzero_si256();
            for (int64_t b = b0; b < b1; b++) {
                __m256i x[4];
                for (int e = 0; e < NK; e++)
                    x[e] = t == KV_U4 ? int4_codes32(k[e], b * 32, half)
                                      : _mm256_loadu_si256((const __m256i *)(const void *)(k[e] + b * 32));
                for (int u = 0; u < NR; u++) {
                    const unsigned char *yb = q[u] + (size_t)b * ATTN_Q8_BYTES + 2;
                    __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)yb);
                    for (int e = 0; e < NK; e++) {
                        int i = u * NK + e;
#ifdef ATTN_Q8_DPBUSD
                        a16[i] = ATTN_Q8_DPBUSD(a16[i], x[e], y); /* int32 lanes here */
#else
                        a16[i] = _mm256_add_epi16(a16[i], _mm256_maddubs_epi16(x[e], y));
#endif
                    }
                }
            }
            for (int i = 0; i < NR * NK; i++)
#ifndef ATTN_Q8_DPBUSD
                acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(a16[i], ones));
#else
                acc[i] = _mm256_add_epi32(acc[i], a16[i]);
#endif
        }
        tok_store8(acc, NR, NK, 0, zv, dv, S, lds, j, n);
    }
}

#if VL == 16
/* a 512-bit register of two 256-bit halves */
INLINE __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
#endif

#if VL == 16 && defined(ATTN_Q8_DPBUSD)
/* The 16-lane VNNI tables: two blocks (64 values) a VPDPBUSD zmm, q8_rows_tok's
 * sums otherwise (NR NK <= 16): 64 codes of key row k from column c (int4:
 * one 64-byte load where they lie in one half), and the query row's blocks
 * b, b + 1 (zeros past the row). */
INLINE __m512i tok_codes64(const unsigned char *k, int64_t c, int64_t D, int t) {
    const __m256i z = _mm256_setzero_si256();
    int64_t half = D / 2;
    if (t == KV_U4) { /* D a multiple of 64 (attn_sem): the blocks come in pairs */
        if (c + 64 <= half || c >= half) {
            __m512i v = _mm512_loadu_si512((const void *)int4_at(k, c, half));
            return _mm512_and_si512(c < half ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(15));
        }
        return join256(int4_codes32(k, c, half), int4_codes32(k, c + 32, half));
    }
    if (c + 64 <= D) return _mm512_loadu_si512((const void *)(k + c));
    return join256(_mm256_loadu_si256((const __m256i *)(const void *)(k + c)), z);
}
INLINE __m512i tok_q64(const unsigned char *q, int64_t b, int64_t nb) {
    const unsigned char *y = q + (size_t)b * ATTN_Q8_BYTES + 2;
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)y);
    return join256(lo, b + 1 < nb ? _mm256_loadu_si256((const __m256i *)(const void *)(y + ATTN_Q8_BYTES))
                                  : _mm256_setzero_si256());
}
/* four vectors' int32 lane sums a[0..3] side by side: each 128-bit lane of the result [a0's, a1's, a2's, a3's sum
 * over that lane] (two rounds of unpacks) */
INLINE __m512i kb_sum4(const __m512i *a) {
    __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}
#if ONE16
/* sixteen vectors' int32 lane sums: lane e the sum of a[e] (kb_sum4's unpacks, then the 128-bit lanes', as
 * vf_reduce16) */
INLINE __m512i kb_sum16(const __m512i *a) {
    __m512i v[4];
    for (int i = 0; i < 4; i++) v[i] = kb_sum4(a + 4 * i);
    __m512i t01 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[0], v[1], 0x44), _mm512_shuffle_i32x4(v[0], v[1], 0xee));
    __m512i t23 = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2], v[3], 0x44), _mm512_shuffle_i32x4(v[2], v[3], 0xee));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(t01, t23, 0x88), _mm512_shuffle_i32x4(t01, t23, 0xdd));
}
/* q8_rows_tok512 at one row over int4 keys, 16 keys a step while 16 are left: their VPDPBUSD chains side by side,
 * then one kb_sum16 tree and one 16-float store (four keys a step folded each key's vector to 8 lanes and took a
 * vi_sum8 tree and a store for every four). y: the row's block pairs, dq its scale. Returns the keys done. The same
 * exact int32 sums, conversion and product. The kernel from L1 took 0.55-0.7x the time and the step from memory at
 * one row ran 1.00-1.09x the GB/s on one thread (three runs), 1.03-1.04x on two (Zen 5, zen5/q8-row1-k16-ab); over
 * int8's rows (two lines each) the same loop ran the step 0.94-0.96x on two threads, so int8 keeps four a step. */
INLINE int64_t q8_row1_k16(const __m512i *y, int64_t nb, float dq, const void *K, size_t kr, int64_t n, float *S,
                           const void *pre, size_t pr, int64_t pb, int64_t D) {
    const __m512 dv = _mm512_set1_ps(dq);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const unsigned char *k = (const unsigned char *)K + (size_t)j * kr;
        if (pre) prefetch_rows(pre, pr, j, 16, pb);
        __m512i acc[16];
        for (int e = 0; e < 16; e++) acc[e] = _mm512_setzero_si512();
        for (int64_t b = 0; b < nb; b += 2) {
            const unsigned char *kb = k; /* one pointer walks the rows (opaque: GCC made 16 of it, kept on the stack) */
            for (int e = 0; e < 16; e++) {
                acc[e] = _mm512_dpbusd_epi32(acc[e], tok_codes64(kb, b * 32, D, KV_U4), y[b / 2]);
                kb += kr;
                __asm__("" : "+r"(kb));
            }
        }
        for (int e = 0; e < 16; e++) KEEP_REG(acc[e]);
        _mm512_storeu_ps(S + j, _mm512_mul_ps(_mm512_cvtepi32_ps(kb_sum16(acc)), dv));
    }
    return j;
}
#endif
INLINE void q8_rows_tok512(const unsigned char *const *q, const float *dq, const int32_t *qsum, int64_t D,
                           const void *K, size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr,
                           int64_t pb, int NR, int NK, int t) {
    int64_t nb = D / ATTN_Q8_BLOCK;
    __m512i y[4 * QB / 2]; /* the rows' block pairs, read once a call (D <= 1024; longer rows: per step) */
    int ypre = nb <= QB;
    for (int u = 0; ypre && u < NR; u++)
        for (int64_t b = 0; b < nb; b += 2) y[u * (QB / 2) + b / 2] = tok_q64(q[u], b, nb);
    __m256i zv[2];
    __m256 dv[2];
    for (int u0 = 0; u0 < NR; u0 += 2)
        tok_consts8(NR - u0 < 2 ? NR - u0 : 2, NK, u0, dq, qsum, t == KV_U8, &zv[u0 / 2], &dv[u0 / 2]);
    int64_t j0 = 0;
#if ONE16
    if (NR == 1 && ypre && t == KV_U4) j0 = q8_row1_k16(y, nb, dq[0], K, kr, n, S, pre, pr, pb, D);
#endif
    for (int64_t j = j0; j < n; j += NK) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, NK, pre, pr, pb, k);
        __m512i acc[16];
        for (int i = 0; i < NR * NK; i++) acc[i] = _mm512_setzero_si512();
        for (int64_t b = 0; b < nb; b += 2) {
            __m512i x[4];
            for (int e = 0; e < NK; e++) x[e] = tok_codes64(k[e], b * 32, D, t);
            for (int u = 0; u < NR; u++) {
                __m512i yu = ypre ? y[u * (QB / 2) + b / 2] : tok_q64(q[u], b, nb);
                for (int e = 0; e < NK; e++) acc[u * NK + e] = _mm512_dpbusd_epi32(acc[u * NK + e], x[e], yu);
            }
        }
        __m256i a[16]; /* each folded to 8 lanes; two rows of NK = 4 a store */
        for (int i = 0; i < NR * NK; i++)
            a[i] = _mm256_add_epi32(_mm512_castsi512_si256(acc[i]), _mm512_extracti64x4_epi64(acc[i], 1));
        for (int u0 = 0; u0 < NR; u0 += 2)
            tok_store8(a + u0 * NK, NR - u0 < 2 ? NR - u0 : 2, NK, u0, zv[u0 / 2], dv[u0 / 2], S, lds, j, n);
    }
}

INLINE vf vf_cvt_i32(__m512i v) {
#if defined(ATTN_VEC_SIMDE)
    return vf_join(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v)), _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)));
#else
    return _mm512_cvtepi32_ps(v);
#endif
}
/* Three or four query rows against int8 / int4 keys with no reductions of
 * (row, key) vectors (q8_rows_tok512 gave one row's: 16 lanes of (row, key)
 * to add up after). Each key's row is loaded whole, 64 bytes a load: group
 * g's 128-bit lane l holds the values 64 g + 16 l .. + 15 (int4: its low
 * nibbles those, its high nibbles half + those, split once a group). The
 * four query rows' values at the same positions are rotated across the
 * lanes, qv[4 G + s] lane l = row (l + s) % 4's (kr_rows, once a call), so
 * that one VPDPBUSD gives in lane l four partial sums of row (l + s) % 4;
 * the four rotations' sums turned back (lane u row u's) and added give the
 * key's (row, 4 partials) vector. Four keys a step; their four vectors fold
 * with two rounds of unpacks into one of (row, key): row r's keys j .. j + 3
 * in lane r, as S holds them. The same exact int32 sums as every other
 * table. This form at D 64, 128 and 256 (q8_kr_steps); the other widths
 * broadcast each key's 16-value chunk to the four lanes against the rows'
 * chunks side by side (q8_kb_steps: a load a 16 bytes, int4's nibbles split
 * a 16), as every width did before: Zen 5, 128 keys in L1, Q K^T at three,
 * four and eight rows 0.78-0.83x the time over int4, 0.81-0.85x over int8;
 * the step at four rows on chip 1.02-1.03x the GB/s at D 128, 1.07-1.10x at
 * D 64 and 256 (zen5/q8-rows-kr-ab). */
INLINE __m512i kb_shift4(__m512i v) { /* an arithmetic shift by 4 (SIMDe has none on 512 bits) */
#if defined(ATTN_VEC_SIMDE)
    return join256(_mm256_srai_epi32(_mm512_castsi512_si256(v), 4),
                   _mm256_srai_epi32(_mm512_extracti64x4_epi64(v, 1), 4));
#else
    return _mm512_srai_epi32(v, 4);
#endif
}
INLINE void kb_store(__m512 s, int NR, float *S, int64_t lds, int64_t j, int64_t n) {
    if (j + 4 <= n) {
        vf_store_lanes4(S + j, lds, s, NR);
    } else {
        float s16[16];
        _mm512_storeu_ps(s16, s);
        for (int u = 0; u < NR; u++)
            for (int e = 0; j + e < n; e++) S[u * lds + j + e] = s16[4 * u + e];
    }
}
INLINE __m512i kb_chunk(const unsigned char *k, int64_t c) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)(k + 16 * c)));
}
#define KB_MAXC 64 /* chunks of 16 values a call keeps (D <= 1024) */
/* the four q8_0 rows' 16-value chunks side by side: qc[c], c < nc */
INLINE void kb_rows(const unsigned char *const *q, int64_t nc, __m512i *qc) {
    for (int64_t c = 0; c < nc; c++) {
        __m128i l[4];
        for (int u = 0; u < 4; u++) {
            l[u] = _mm_loadu_si128((const __m128i *)kv_elem(q[u], 16 * c, KV_Q8));
        }
        qc[c] = _mm512_inserti32x4(
            _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(l[0]), l[1], 1), l[2], 2), l[3], 3);
    }
}
/* four keys' (row, key) sums a[e] folded (kb_sum4), less zv, times dv, stored (keys j ..) */
INLINE void kb_fold_store(const __m512i *a, __m512i zv, __m512 dv, int NR, float *S, int64_t lds, int64_t j,
                          int64_t n) {
    kb_store(_mm512_mul_ps(vf_cvt_i32(_mm512_sub_epi32(kb_sum4(a), zv)), dv), NR, S, lds, j, n);
}
/* The broadcast form (each key's 16-value chunk broadcast to the four lanes
 * against the rows' chunks side by side, qc[c] = [row 0's values 16c .. 16c
 * + 15 | row 1's | row 2's | row 3's], kb_rows; int4's high nibbles taken in
 * place, x & 0xf0 = 16 code, into sums of their own shifted down by 4 at the
 * end), for the widths other than 64, 128 and 256 (q8_kr_steps with its
 * group count known only at run time ran the step 0.84x the GB/s at D 64
 * over int8, 0.87x at D 256 over int4, Zen 5): the steps of four keys over
 * nc chunks of qc; each step's fold and store after the next step's
 * products, so that the fold's chain overlaps them
 * (Zen 5, 128 keys in L1: the kernel over int4 0.95x the time at four rows,
 * int8 0.97x, both 0.94-0.95x at three; the step on chip 0.99-1.01x the
 * GB/s, inside the noise: zen5/decode-four-rows-tries) */
INLINE void q8_kb_steps(const __m512i *qc, int64_t nc, __m512i zv, __m512 dv, const void *K, size_t kr, int64_t n,
                        float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR, int t) {
    const __m512i lo4 = _mm512_set1_epi8(15), hi4 = _mm512_set1_epi8(-16);
    int64_t kc = t == KV_U4 ? nc / 2 : nc; /* a key row's 16-byte chunks */
    __m512i prev[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int64_t j = 0; j < n; j += 4) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
        __m512i a[4][4]; /* four chains a key (their latency, not the products, bound one chain a key) */
        for (int e = 0; e < 4; e++)
            for (int i = 0; i < 4; i++) a[e][i] = _mm512_setzero_si512();
        if (t == KV_U4) /* low nibbles into chains 0, 1, high into 2, 3 */
            for (int64_t c = 0; c < kc; c += 2)
                for (int i = 0; i < 2 && c + i < kc; i++)
                    for (int e = 0; e < 4; e++) {
                        __m512i x = kb_chunk(k[e], c + i);
                        a[e][i] = _mm512_dpbusd_epi32(a[e][i], _mm512_and_si512(x, lo4), qc[c + i]);
                        a[e][2 + i] = _mm512_dpbusd_epi32(a[e][2 + i], _mm512_and_si512(x, hi4), qc[c + i + kc]);
                    }
        else
            for (int64_t c = 0; c < kc; c += 4)
                for (int i = 0; i < 4 && c + i < kc; i++)
                    for (int e = 0; e < 4; e++)
                        a[e][i] = _mm512_dpbusd_epi32(a[e][i], kb_chunk(k[e], c + i), qc[c + i]);
        if (j > 0) kb_fold_store(prev, zv, dv, NR, S, lds, j - 4, n);
        for (int e = 0; e < 4; e++) {
            __m512i hi = _mm512_add_epi32(a[e][2], a[e][3]);
            prev[e] = _mm512_add_epi32(_mm512_add_epi32(a[e][0], a[e][1]), t == KV_U4 ? kb_shift4(hi) : hi);
        }
    }
    if (n > 0) kb_fold_store(prev, zv, dv, NR, S, lds, (n - 1) / 4 * 4, n); /* the last step */
}
INLINE __m512i kr_turn(__m512i a, int s) { /* lane u = a's lane (u - s) % 4 */
    return s == 1   ? _mm512_shuffle_i32x4(a, a, 0x93)
           : s == 2 ? _mm512_shuffle_i32x4(a, a, 0x4e)
                    : _mm512_shuffle_i32x4(a, a, 0x39);
}
INLINE __m512i kr_part(const void *p, int64_t n) { /* n < 64 bytes from p, zeros after */
#if defined(ATTN_VEC_SIMDE)
    unsigned char b[64] = {0};
    memcpy(b, p, (size_t)n);
    return _mm512_loadu_si512((const void *)b);
#else
    return _mm512_maskz_loadu_epi8(~0ULL >> (64 - n), p);
#endif
}
/* key row k's (row, 4 partials) vector against qv: ng 64-byte groups (int4: qv's low-nibble groups, then its high
 * ones), the last tail bytes long (0: whole) */
INLINE __m512i kr_key(const __m512i *qv, int64_t ng, int64_t tail, const unsigned char *k, int t) {
    const __m512i lo4 = _mm512_set1_epi8(15);
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int64_t g = 0; g < ng; g++) {
        const void *p = k + 64 * g;
        __m512i x = g == ng - 1 && tail ? kr_part(p, tail) : _mm512_loadu_si512(p);
        if (t == KV_U4) {
            __m512i xh = _mm512_and_si512(_mm512_srli_epi16(x, 4), lo4);
            x = _mm512_and_si512(x, lo4);
            for (int s = 0; s < 4; s++) a[s] = _mm512_dpbusd_epi32(a[s], xh, qv[4 * (ng + g) + s]);
        }
        for (int s = 0; s < 4; s++) a[s] = _mm512_dpbusd_epi32(a[s], x, qv[4 * g + s]);
    }
    return _mm512_add_epi32(_mm512_add_epi32(a[0], kr_turn(a[2], 2)),
                            _mm512_add_epi32(kr_turn(a[1], 1), kr_turn(a[3], 3)));
}
/* the steps of four keys; each step's fold and store after the next step's products, so that the fold's chain
 * overlaps them (ng a constant for the common widths, so that qv stays in registers; prev set before the first
 * step, though it stores nothing: left unset, Q K^T took 1.05-1.07x the time at four rows, Zen 5) */
INLINE void q8_kr_steps(const __m512i *qv, int64_t ng, int64_t tail, __m512i zv, __m512 dv, const void *K, size_t kr,
                        int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR, int t) {
    __m512i prev[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int64_t j = 0; j < n; j += 4) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
        __m512i a[4];
        for (int e = 0; e < 4; e++) a[e] = kr_key(qv, ng, tail, k[e], t);
        if (j > 0) kb_fold_store(prev, zv, dv, NR, S, lds, j - 4, n);
        for (int e = 0; e < 4; e++) prev[e] = a[e];
    }
    if (n > 0) kb_fold_store(prev, zv, dv, NR, S, lds, (n - 1) / 4 * 4, n); /* the last step */
}
/* qv of q8_kr_steps from the four q8_0 rows q (D values; row (l + s) % 4 in lane l of qv[4 G + s]): group G's
 * values from p0 (int8: 64 G; int4: the low nibbles' 64 G, then the high nibbles' half + 64 (G - ng)), zeros from
 * lim on (the codes there are zeros too) */
INLINE void kr_rows(const unsigned char *const *q, int64_t D, int64_t ng, int t, __m512i *qv) {
    int64_t half = D / 2;
    for (int64_t G = 0; G < (t == KV_U4 ? 2 * ng : ng); G++) {
        int64_t p0 = t != KV_U4 ? 64 * G : G < ng ? 64 * G : half + 64 * (G - ng);
        int64_t lim = t == KV_U4 && G < ng ? half : D;
        for (int s = 0; s < 4; s++) {
            __m128i l[4];
            for (int ln = 0; ln < 4; ln++) {
                int64_t p = p0 + 16 * ln;
                l[ln] = _mm_setzero_si128();
                if (p < lim) /* row (ln + s) % 4's values p .. p + 15 (q8_0: 32 a block after its scale) */
                    l[ln] = _mm_loadu_si128((const __m128i *)kv_elem(q[(ln + s) % 4], p, KV_Q8));
            }
            qv[4 * G + s] = _mm512_inserti32x4(
                _mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(l[0]), l[1], 1), l[2], 2), l[3], 3);
        }
    }
}
/* The steps for cores that run AVX-512 on 256-bit units (Zen 4): each
 * key's 16-value chunk broadcast to both lanes of a 256-bit register (the
 * load alone; into a 512-bit one a 128-bit broadcast costs a shuffle beside
 * its load) against two rows' chunks side by side, rows (0, 1) and (2, 3)
 * (qy[2c + h]: rows 2h and 2h + 1's chunk c, kb_rows). int4's high nibbles
 * shifted down (one chain a key and row pair). */
INLINE __m256i kb_sum4y(const __m256i *a) {
    __m256i s01 = vi_pair(a[0], a[1], 0), s23 = vi_pair(a[2], a[3], 0);
    return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}
INLINE void q8_kb_steps_y(const __m256i *qy, int64_t nc, __m512i zv, __m512 dv, const void *K, size_t kr, int64_t n,
                          float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR, int t) {
    const __m256i lo4 = _mm256_set1_epi8(15);
    int64_t kc = t == KV_U4 ? nc / 2 : nc; /* a key row's 16-byte chunks */
    for (int64_t j = 0; j < n; j += 4) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
        /* row pair, key; int4's high nibbles in chains of their own (one chain: 8 VPDPBUSD deep a step, the
         * kernel at three to eight rows 1.06-1.09x the time on Zen 4: zen4/q8-ymm-xor-ab) */
        __m256i a[2][4], b[2][4];
        for (int e = 0; e < 4; e++) a[0][e] = a[1][e] = b[0][e] = b[1][e] = _mm256_setzero_si256();
        for (int64_t c = 0; c < kc; c++)
            for (int e = 0; e < 4; e++) {
                __m256i x =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(k[e] + 16 * c)));
                if (t == KV_U4) {
                    __m256i xh = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
                    x = _mm256_and_si256(x, lo4);
                    for (int h = 0; h < 2; h++) b[h][e] = ATTN_Q8_DPBUSD(b[h][e], xh, qy[2 * (c + kc) + h]);
                }
                for (int h = 0; h < 2; h++) a[h][e] = ATTN_Q8_DPBUSD(a[h][e], x, qy[2 * c + h]);
            }
        for (int h = 0; t == KV_U4 && h < 2; h++)
            for (int e = 0; e < 4; e++) a[h][e] = _mm256_add_epi32(a[h][e], b[h][e]);
        __m512i sum = join256(kb_sum4y(a[0]), kb_sum4y(a[1]));
        kb_store(_mm512_mul_ps(vf_cvt_i32(_mm512_sub_epi32(sum, zv)), dv), NR, S, lds, j, n);
    }
}
/* yw: the steps on 256-bit registers (q8_kb_steps_y); else q8_kr_steps at the common widths, q8_kb_steps at the
 * others */
INLINE void q8_rows_kb(const unsigned char *const *q, const float *dq, const int32_t *qsum, int64_t D, const void *K,
                       size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR,
                       int t, int yw) {
    int64_t nc = D / 16;
    int32_t z16[16];
    float d16[16];
    for (int i = 0; i < 16; i++) z16[i] = t == KV_U8 ? 128 * qsum[i / 4] : 0, d16[i] = dq[i / 4];
    const __m512i zv = _mm512_loadu_si512((const void *)z16);
    const __m512 dv = _mm512_loadu_ps(d16);
    if (yw) { /* the rows' chunks side by side as 256-bit halves: rows (0, 1), (2, 3) (GCC's vector types may alias) */
        __m512i qc[KB_MAXC];
        kb_rows(q, nc, qc);
        const __m256i *qy = (const __m256i *)(const void *)qc;
        if (nc == 8)
            q8_kb_steps_y(qy, 8, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
        else
            q8_kb_steps_y(qy, nc, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
        return;
    }
    /* the common widths: ng and the tail constants, qv an array of the size they take, in registers (at D 128 one of
     * 16 vectors ran Q K^T 1.03x the time over int4, of KB_MAXC 1.1x: Zen 5, four rows) */
    if (D == 256) {
        __m512i qv[16];
        kr_rows(q, D, t == KV_U4 ? 2 : 4, t, qv);
        q8_kr_steps(qv, t == KV_U4 ? 2 : 4, 0, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
        return;
    }
    if (D == 64 || D == 128) {
        __m512i qv[8];
        kr_rows(q, D, t == KV_U4 || D == 64 ? 1 : 2, t, qv);
        if (D == 64)
            q8_kr_steps(qv, 1, t == KV_U4 ? 32 : 0, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
        else
            q8_kr_steps(qv, t == KV_U4 ? 1 : 2, 0, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
        return;
    }
    __m512i qc[KB_MAXC];
    kb_rows(q, nc, qc);
    q8_kb_steps(qc, nc, zv, dv, K, kr, n, S, lds, pre, pr, pb, NR, t);
}

#define TOK_ROWS q8_rows_tok512 /* 4 keys a step for every row count: 32 registers */
#define TOK_NK 4
#else
#define TOK_ROWS q8_rows_tok
#define TOK_NK 2 /* with 3 or 4 rows (AVX2: 16 registers) */
#endif

/* TOK_ROWS at nr rows (NK keys a step as the table's registers allow) */
INLINE void tok_rows_nr(const unsigned char *const *q, const float *dq, const int32_t *qsum, int64_t D, const void *K,
                        size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int nr,
                        int t) {
    if (nr == 4)
        TOK_ROWS(q, dq, qsum, D, K, kr, n, S, lds, pre, pr, pb, 4, TOK_NK, t);
    else if (nr == 3)
        TOK_ROWS(q, dq, qsum, D, K, kr, n, S, lds, pre, pr, pb, 3, TOK_NK, t);
    else if (nr == 2)
        TOK_ROWS(q, dq, qsum, D, K, kr, n, S, lds, pre, pr, pb, 2, 4, t);
    else
        TOK_ROWS(q, dq, qsum, D, K, kr, n, S, lds, pre, pr, pb, 1, 4, t);
}
INLINE void qk_tok_body(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                        int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, int t, int yw) {
    size_t kr = attn_storage_bytes((attn_dtype)t, ldk), qr = attn_q8_row_bytes(D);
    size_t pr = attn_storage_bytes((attn_dtype)t, ldpre);
    int64_t pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int nr = R - r0 < 4 ? (int)(R - r0) : 4;
        const unsigned char *q[4];
        float dq[4];
        int32_t qsum[4] = {0, 0, 0, 0};
        for (int u = 0; u < 4; u++) {
            q[u] = (const unsigned char *)Q + (size_t)(r0 + (u < nr ? u : 0)) * qr;
            dq[u] = q8_d(q[u]);
            for (int64_t b = 0; b < D / ATTN_Q8_BLOCK; b++)
                for (int c = 0; c < ATTN_Q8_BLOCK; c++) qsum[u] += (int8_t)q[u][b * ATTN_Q8_BYTES + 2 + c];
        }
        const void *pf = pre && r0 == 0 ? pre : NULL;
        float *Sr = S + r0 * lds;
#if VL == 16 && defined(ATTN_Q8_DPBUSD)
        if (nr >= 3 && D / 16 <= KB_MAXC)
            q8_rows_kb(q, dq, qsum, D, K, kr, n, Sr, lds, pf, pr, pb, nr, t, yw);
        else
#else
        (void)yw;
#endif
            if (HEAD128(D)) /* the common head width a constant: the blocks' loop unrolled, int4's halves known */
            tok_rows_nr(q, dq, qsum, 128, K, kr, n, Sr, lds, pf, pr, pb, nr, t);
        else
            tok_rows_nr(q, dq, qsum, D, K, kr, n, Sr, lds, pf, pr, pb, nr, t);
    }
}

INLINE void qk_q8_body(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                       int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, int t, int yw) {
    (void)yw; /* one form on every 8-lane table */
    size_t kr = attn_storage_bytes((attn_dtype)t, ldk), qr = attn_q8_row_bytes(D);
    size_t pr = attn_storage_bytes((attn_dtype)t, ldpre);
    int64_t nb = D / ATTN_Q8_BLOCK, pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre);
    __m256 dqv[QB];
    __m256i zq[QB]; /* q4_0: 8 times the rows' sums over each block, the codes' offset (key_block) */
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int nr = R - r0 < 4 ? (int)(R - r0) : 4, NK = nr == 1 ? 8 : nr == 2 ? 4 : 2;
        const unsigned char *q[4];
        for (int u = 0; u < 4; u++) q[u] = (const unsigned char *)Q + (size_t)(r0 + (u < nr ? u : 0)) * qr;
        for (int64_t b0 = 0; b0 < nb; b0 += QB) {
            int64_t b1 = nb - b0 < QB ? nb : b0 + QB;
            for (int64_t b = b0; b < b1; b++) { /* lane i: row i / NK's (q8_rows) */
                float du[4], d8[8];
                int32_t zu[4] = {0, 0, 0, 0}, z8[8];
                for (int u = 0; u < nr; u++) {
                    const unsigned char *y = q[u] + b * ATTN_Q8_BYTES;
                    du[u] = q8_d(y);
                    for (int c = 0; t == KV_Q4 && c < ATTN_Q8_BLOCK; c++) zu[u] += 8 * (int8_t)y[2 + c];
                }
                for (int i = 0; i < 8; i++) d8[i] = du[i / NK < nr ? i / NK : 0], z8[i] = zu[i / NK < nr ? i / NK : 0];
                dqv[b - b0] = _mm256_loadu_ps(d8), zq[b - b0] = _mm256_loadu_si256((const __m256i *)(void *)z8);
            }
            const void *pf = pre && r0 == 0 && b0 == 0 ? pre : NULL;
            float *Sr = S + r0 * lds;
            if (nr == 4)
                q8_rows(q, dqv, zq, b0, b1, K, kr, n, Sr, lds, pf, pr, pb, b0 == 0, 4, 2, t);
            else if (nr == 3)
                q8_rows(q, dqv, zq, b0, b1, K, kr, n, Sr, lds, pf, pr, pb, b0 == 0, 3, 2, t);
            else if (nr == 2)
                q8_rows(q, dqv, zq, b0, b1, K, kr, n, Sr, lds, pf, pr, pb, b0 == 0, 2, 4, t);
            else
                q8_rows(q, dqv, zq, b0, b1, K, kr, n, Sr, lds, pf, pr, pb, b0 == 0, 1, 8, t);
        }
    }
}

#if VL == 16 /* the keys' block scales: Q K^T's four-key steps, P V's weights at one row */
/* the f16 scales of blocks b0 .. b0 + 3 of the four keys, lane 4 e + b:
 * a whole group by two word permutations of 64-byte loads (a gather took
 * 0.6 ns a key more at one row), a partial one (lanes off m: 0; D not a
 * multiple of 128) one by one */
#if !defined(ATTN_VEC_SIMDE) /* SIMDe 0.7.4: no 512-bit conversion of f16 */
/* four q4_0 keys' scales of blocks off / 18 .. + 3 (words 0, 9, 18, 27 of the 64 bytes at k[e] + off) as floats:
 * words 0..7 of the permutation w of keys 0, 1's loads (32 + i: key 1's word i), 8..15 of keys 2, 3's */
INLINE __m512 q4_scales4(const unsigned char *const *k, size_t off, __m512i w) {
    __m512i l[4];
    for (int e = 0; e < 4; e++) l[e] = _mm512_loadu_si512((const void *)(k[e] + off));
    __m512i p01 = _mm512_permutex2var_epi16(l[0], w, l[1]), p23 = _mm512_permutex2var_epi16(l[2], w, l[3]);
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm512_castsi512_si128(p23), _mm512_castsi512_si128(p01)));
}
#endif
INLINE __m512 kl_scales(const unsigned char *const *k, int64_t b0, size_t bb, __mmask16 m) {
#if !defined(ATTN_VEC_SIMDE)                  /* SIMDe 0.7.4: no 512-bit conversion of f16 */
    if (bb == ATTN_Q4_BYTES && m == 0xffff) { /* lane 4 e + b: key e's block b0 + b */
        return q4_scales4(k, (size_t)b0 * bb,
                          _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 59,
                                           50, 41, 32, 27, 18, 9, 0));
    }
    if (bb == ATTN_Q8_BYTES && m == 0xffff) { /* words 0, 17 of each key's first 64 bytes, 2, 19 of the next */
        const __m512i lo = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            0, 49, 32, 0, 0, 17, 0);
        const __m512i hi = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 51,
                                            34, 0, 0, 19, 2, 0, 0);
        __m512i p[2];
        for (int h = 0; h < 2; h++) {
            const unsigned char *a = k[2 * h] + (size_t)b0 * bb, *c = k[2 * h + 1] + (size_t)b0 * bb;
            __m512i x =
                _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)a), lo, _mm512_loadu_si512((const void *)c));
            __m512i y = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)(a + 64)), hi,
                                                  _mm512_loadu_si512((const void *)(c + 64)));
            p[h] = _mm512_mask_blend_epi16(0xcccc, x, y);
        }
        return _mm512_cvtph_ps(_mm256_set_m128i(_mm512_castsi512_si128(p[1]), _mm512_castsi512_si128(p[0])));
    }
#endif
    float d16[16];
    for (int i = 0; i < 16; i++) d16[i] = m >> i & 1 ? q8_d(k[i / 4] + (size_t)(b0 + i % 4) * bb) : 0.0f;
    return _mm512_loadu_ps(d16);
}
#endif

#if VL == 16 && defined(ATTN_Q8_DPBUSD)
/* q8_0 / q4_0 keys on the 16-lane VNNI tables: two blocks (64 values) a
 * VPDPBUSD zmm, so that each (row, key) pays one subtraction, conversion,
 * product and FMA per two blocks (q8_rows: a sign per block; its float
 * work once a block for all pairs of a step, after a lane-summing tree). The
 * codes go unsigned: q8_0's x + 128 (x ^ 0x80), q4_0's 0..15, and each
 * query pair's zq2 (128 or 8 times its quad sums) is taken off, the same
 * exact int32 quad sums. Lanes: q8_0 [block b | b + 1], q4_0 [b's low
 * nibbles | b + 1's | b's high | b + 1's] (two loads a key), the query
 * pairs y2 and the scales laid out alike (pair_scale). */
INLINE __m512 pair_scale(float d0, float d1, int t) {
    if (t == KV_Q8) return vf_join(_mm256_set1_ps(d0), _mm256_set1_ps(d1));
    __m256 h = _mm256_set_m128(_mm_set1_ps(d1), _mm_set1_ps(d0));
    return vf_join(h, h);
}
/* key pair (b, b + 1) of row k; b + 1 == nb (an odd count): zeros, scale 0 */
INLINE __m512i key_pair(const unsigned char *k, int64_t b, int64_t nb, int t, __m512 *dk) {
    int two = b + 1 < nb;
    if (t == KV_Q4) {
        const unsigned char *blk = k + (size_t)b * ATTN_Q4_BYTES;
        __m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)(blk + 2)), v1 = _mm_setzero_si128();
        if (two) v1 = _mm_loadu_si128((const __m128i *)(const void *)(blk + ATTN_Q4_BYTES + 2));
        *dk = pair_scale(q8_d(blk), two ? q8_d(blk + ATTN_Q4_BYTES) : 0.0f, t);
        __m256i w = _mm256_set_m128i(v1, v0);
        return _mm512_and_si512(join256(w, _mm256_srli_epi16(w, 4)), _mm512_set1_epi8(15));
    }
    const unsigned char *blk = k + (size_t)b * ATTN_Q8_BYTES;
    __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2)), x1 = _mm256_set1_epi8(-128);
    if (two) x1 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + ATTN_Q8_BYTES + 2));
    *dk = pair_scale(q8_d(blk), two ? q8_d(blk + ATTN_Q8_BYTES) : 0.0f, t);
    return _mm512_xor_si512(join256(x0, x1), _mm512_set1_epi8(-128));
}
/* query row q's block pair (b, b + 1) in key_pair's lanes, zeros past nb */
INLINE __m512i query_pair(const unsigned char *q, int64_t b, int64_t nb, int t) {
    __m512i y = tok_q64(q, b, nb); /* [b | b + 1] */
    if (t == KV_Q8) return y;
    __m256i y0 = _mm512_castsi512_si256(y), y1 = _mm512_extracti64x4_epi64(y, 1);
    return join256(_mm256_permute2x128_si256(y0, y1, 0x20), _mm256_permute2x128_si256(y0, y1, 0x31));
}
#define QP (QB / 2) /* block pairs per chunk */
INLINE void q8_rows512(const __m512i *y2, const __m512 *dq2, const __m512i *zq2, int64_t b0, int64_t b1, int64_t nb,
                       const void *K, size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr,
                       int64_t pb, int first, int NR, int NK, int t) {
    for (int64_t j = 0; j < n; j += NK) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, NK, pre, pr, pb, k);
        __m512 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm512_setzero_ps();
        for (int64_t b = b0; b < b1; b += 2) {
            __m512i x[4];
            __m512 dk[4];
            for (int e = 0; e < NK; e++) x[e] = key_pair(k[e], b, nb, t, &dk[e]);
            for (int u = 0; u < NR; u++) {
                int64_t i2 = u * QP + (b - b0) / 2;
                for (int e = 0; e < NK; e++) {
                    __m512i d = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), x[e], y2[i2]), zq2[i2]);
                    a[u * NK + e] = vf_fma(vf_cvt_i32(d), vf_mul(dq2[i2], dk[e]), a[u * NK + e]);
                }
            }
        }
        float s8[8];
        _mm256_storeu_ps(s8, vh_sum8(vf_fold(a[0]), vf_fold(a[1]), vf_fold(a[2]), vf_fold(a[3]), vf_fold(a[4]),
                                     vf_fold(a[5]), vf_fold(a[6]), vf_fold(a[7])));
        for (int u = 0; u < NR; u++)
            for (int e = 0; e < NK && j + e < n; e++) {
                float *o = S + u * lds + j + e;
                *o = first ? s8[u * NK + e] : *o + s8[u * NK + e];
            }
    }
}
/* kb_sum4's tree in float32: four vectors of (key, 4 partials) to one of
 * (key, 4 sums) */
INLINE __m512 kb_sum4f(const __m512 *a) {
    __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a[0], a[1]), _mm512_unpackhi_ps(a[0], a[1]));
    __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a[2], a[3]), _mm512_unpackhi_ps(a[2], a[3]));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))));
}
/* q4_0's high nibbles of the code bytes x as bytes 0..15: one GF2P8AFFINEQB (each byte times the bit matrix of a
 * right shift by 4) where the table has GFNI (the avx512-bf16 table: Zen 5, four rows, the kernel 0.90x the time of
 * the shift and the mask: zen5/q4-gfni-ab), else VPSRLW and VPANDD */
INLINE __m512i q4_high(__m512i x, __m512i lo4) {
#if defined(__GFNI__) && !defined(ATTN_VEC_SIMDE)
    (void)lo4;
    return _mm512_gf2p8affine_epi64_epi8(x, _mm512_set1_epi64(0x1020408000000000ll), 0);
#else
    return _mm512_and_si512(_mm512_srli_epi16(x, 4), lo4);
#endif
}
/* q8_0's block of 32 codes at k as two 16-byte chunks, each in every 128-bit lane, unsigned (x ^ 0x80): one
 * 256-bit load and XOR, then two lane shuffles, on the avx512-256 tables (yw). Two 128-bit broadcasts from memory
 * and two 512-bit XORs (the same count of shuffles; VPXORD and VPDPBUSD issue two a cycle together here, so not
 * the XORs' pipes) took Zen 4 1.13x the kernel's time at three and four rows, the step over q8_0 at four rows
 * 0.84x the GB/s (zen4/q8-ymm-xor-ab, vec-ports) */
INLINE void kb_q8_pair(const unsigned char *k, __m512i *x0, __m512i *x1) {
    __m256i y = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)k), _mm256_set1_epi8(-128));
    __m512i z = _mm512_castsi256_si512(y);
    *x0 = _mm512_shuffle_i32x4(z, z, 0x00), *x1 = _mm512_shuffle_i32x4(z, z, 0x55);
}
/* q8_0 / q4_0 keys at three or four rows: q8_rows_kb's layout (the rows'
 * chunks side by side, each key's chunk broadcast) with a block's two
 * chunks into one int32 sum a lane, started at minus the codes' offset
 * (nz[b]: 128 or 8 times the lanes' query sums; q8_0's codes go unsigned
 * as x ^ 0x80 = x + 128, q4_0's are 0..15: low nibbles values 0..15 of the
 * block, high 16..31). A block's four keys fold in int32 (kb_sum4: lane
 * 4 u + e, row u's key e, as S holds them), then one conversion and one
 * product with the rows' block scales times the keys' (dqb[b], and
 * kl_scales' lanes picked to 4 u + e): per four keys and block, one
 * conversion and product where each key had its own (the kernel at four
 * rows 0.83-0.94x, q4_0's step 0.98x: zen5/qk-blk-sum4-ab) */
INLINE void q8_blk_steps(const __m512i *qc, const __m512i *nz, const __m512 *dqb, int64_t nb, int NG, const void *K,
                         size_t kr, int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR,
                         int t, int yw) {
    const __m512i lo4 = _mm512_set1_epi8(15), sgn = _mm512_set1_epi8(-128);
    const __m512i pick = _mm512_set_epi32(12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0, 12, 8, 4, 0); /* 4 u + e -> 4 e */
    size_t bb = t == KV_Q4 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES;
    for (int64_t j = 0; j < n; j += 4) {
        const unsigned char *k[4];
        q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
        __m512 f[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t b0 = 0; b0 < nb; b0 += 4) {
            __mmask16 m = (__mmask16)(nb - b0 >= 4 ? 0xffff : 0x1111 * ((1u << (nb - b0)) - 1));
            __m512 sc = kl_scales(k, b0, bb, m); /* lane 4 e + b - b0 */
            for (int64_t b = b0; b < nb && b < b0 + 4; b++) {
                __m512i a[2][4];
                for (int e = 0; e < 4; e++) {
                    const unsigned char *blk = k[e] + b * bb;
                    __m512i x0, x1; /* the key's chunks, read once for the NG groups */
                    if (t == KV_Q4) {
                        __m512i x = kb_chunk(blk + 2, 0);
                        x0 = _mm512_and_si512(x, lo4), x1 = q4_high(x, lo4);
                    } else if (yw) {
                        kb_q8_pair(blk + 2, &x0, &x1);
                    } else {
                        x0 = _mm512_xor_si512(kb_chunk(blk + 2, 0), sgn),
                        x1 = _mm512_xor_si512(kb_chunk(blk + 2, 1), sgn);
                    }
                    for (int g = 0; g < NG; g++)
                        a[g][e] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nz[g * nb + b], x0, qc[g * 2 * nb + 2 * b]),
                                                      x1, qc[g * 2 * nb + 2 * b + 1]);
                }
                __m512 dk = _mm512_permutexvar_ps(_mm512_add_epi32(pick, _mm512_set1_epi32((int)(b - b0))), sc);
                for (int g = 0; g < NG; g++)
                    f[g] = _mm512_fmadd_ps(vf_cvt_i32(kb_sum4(a[g])), _mm512_mul_ps(dqb[g * nb + b], dk), f[g]);
            }
        }
        for (int g = 0; g < NG; g++) kb_store(f[g], g + 1 < NG ? 4 : NR, S + g * 4 * lds, lds, j, n);
    }
}
/* NG groups of four rows (q[4 g + u]; the last group NR rows): one key
 * chunk read and unpacked, and its block scale converted, for every group
 * (two groups: eight rows a kv head; the kernel 0.87-0.89x the time of two
 * four-row calls, the step at 8 and 16 rows 0.95-0.97x: zen5/qk-rows8-ab) */
INLINE void q8_blk_kb(const unsigned char *const *q, int64_t D, int NG, const void *K, size_t kr, int64_t n, float *S,
                      int64_t lds, const void *pre, size_t pr, int64_t pb, int NR, int t, int yw) {
    __m512i qc[2 * KB_MAXC], nz[KB_MAXC];
    __m512 dqb[KB_MAXC];
    int64_t nb = D / ATTN_Q8_BLOCK;
    const __m512i off = _mm512_set1_epi8(t == KV_Q4 ? 8 : -128);
    for (int g = 0; g < NG; g++) {
        __m512i *c = qc + g * 2 * nb;
        kb_rows(q + 4 * g, 2 * nb, c);
        for (int64_t b = 0; b < nb; b++) {
            __m512i z =
                _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), off, c[2 * b]), off, c[2 * b + 1]);
            nz[g * nb + b] = _mm512_sub_epi32(_mm512_setzero_si512(), z);
            float d16[16];
            for (int i = 0; i < 16; i++) d16[i] = q8_d(q[4 * g + i / 4] + b * ATTN_Q8_BYTES);
            dqb[g * nb + b] = _mm512_loadu_ps(d16);
        }
    }
    if (nb == 4 && NG == 2)
        q8_blk_steps(qc, nz, dqb, 4, 2, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
    else if (nb == 4)
        q8_blk_steps(qc, nz, dqb, 4, 1, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
    else if (NG == 2)
        q8_blk_steps(qc, nz, dqb, nb, 2, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
    else
        q8_blk_steps(qc, nz, dqb, nb, 1, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
}
/* q8_0 / q4_0 keys at one or two rows: four keys side by side, key e's
 * 16-byte chunk in 128-bit lane e against each query chunk broadcast, so
 * that one VPDPBUSD gives four keys' partial sums (q8_rows512 gives one
 * key's, and converts two block scales a key and block pair from scalars:
 * 0.55-0.85x the time here, zen5/qk-keys-lanes-ab). The chunks are
 * broadcast once a call (qb): a broadcast from memory costs a shuffle
 * beside its load, and the steps had one per chunk and key group (Zen 5,
 * 128 keys: the kernel 0.89x at one row, 0.93x at two; q4_0's step 0.97x /
 * 0.95x: zen5/qk-kl-qb-ab). A group
 * of four blocks folds to lanes (key, block) with kb_sum4 (from the offset
 * terms nz, as q8_blk_steps), then one conversion and one product with the
 * four keys' block scales (kl_scales) times the row's (dqg); four steps
 * fold to sixteen keys' scores (kb_sum4f, then a permutation to key order). */
INLINE __m512i kl_keys(const unsigned char *const *k, size_t off) {
    __m512i x = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(k[0] + off)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(k[1] + off)), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(k[2] + off)), 2);
    return _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(k[3] + off)), 3);
}
/* q8_0 on the avx512-256 tables (yw): the four keys' blocks at byte off as kl_keys' two chunks, unsigned
 * (x ^ 0x80): four 256-bit loads, two inserts and two lane shuffles, where two kl_keys took six inserts (Zen 4, the
 * kernel at one and two rows 1.08x the time: zen4/q8-ymm-xor-ab) */
INLINE void kl_q8_pairs(const unsigned char *const *k, size_t off, __m512i *x0, __m512i *x1) {
    __m256i y[4];
    for (int e = 0; e < 4; e++) y[e] = _mm256_loadu_si256((const __m256i *)(const void *)(k[e] + off));
    __m512i t01 = _mm512_inserti64x4(_mm512_castsi256_si512(y[0]), y[1], 1);
    __m512i t23 = _mm512_inserti64x4(_mm512_castsi256_si512(y[2]), y[3], 1);
    const __m512i sgn = _mm512_set1_epi8(-128);
    *x0 = _mm512_xor_si512(_mm512_shuffle_i32x4(t01, t23, 0x88), sgn);
    *x1 = _mm512_xor_si512(_mm512_shuffle_i32x4(t01, t23, 0xdd), sgn);
}
INLINE void q8_kl_steps(const __m512i *qb, const __m512i *nz, const __m512 *dqg, int64_t nb, const void *K, size_t kr,
                        int64_t n, float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR, int t,
                        int yw) {
    const __m512i lo4 = _mm512_set1_epi8(15), sgn = _mm512_set1_epi8(-128);
    const __m512i perm = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    size_t bb = t == KV_Q4 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES;
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __m512 f[2][4];
        for (int s = 0; s < 4; s++) {
            f[0][s] = f[1][s] = _mm512_setzero_ps();
            int64_t j = j0 + 4 * s;
            if (j >= n) continue;
            const unsigned char *k[4];
            q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
            for (int64_t g = 0; g < nb; g += 4) {
                __m512i a[2][4];
                for (int b = 0; b < 4; b++) {
                    if (g + b >= nb) {
                        a[0][b] = a[1][b] = _mm512_setzero_si512();
                        continue;
                    }
                    __m512i x0, x1;
                    size_t o = (size_t)(g + b) * bb + 2;
                    if (t == KV_Q4) {
                        __m512i x = kl_keys(k, o);
                        x0 = _mm512_and_si512(x, lo4), x1 = q4_high(x, lo4);
                    } else if (yw) {
                        kl_q8_pairs(k, o, &x0, &x1);
                    } else {
                        x0 = _mm512_xor_si512(kl_keys(k, o), sgn), x1 = _mm512_xor_si512(kl_keys(k, o + 16), sgn);
                    }
                    for (int u = 0; u < NR; u++) {
                        const __m512i *y = qb + 2 * (u * (KB_MAXC / 2) + g + b);
                        a[u][b] =
                            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nz[u * (KB_MAXC / 2) + g + b], x0, y[0]), x1, y[1]);
                    }
                }
                __mmask16 m = (__mmask16)(nb - g >= 4 ? 0xffff : 0x1111 * ((1u << (nb - g)) - 1));
                __m512 sc = kl_scales(k, g, bb, m);
                for (int u = 0; u < NR; u++)
                    f[u][s] = _mm512_fmadd_ps(vf_cvt_i32(kb_sum4(a[u])),
                                              _mm512_mul_ps(sc, dqg[u * (KB_MAXC / 8) + g / 4]), f[u][s]);
            }
        }
        __mmask16 keep = (__mmask16)(n - j0 >= 16 ? 0xffff : (1u << (n - j0)) - 1);
        for (int u = 0; u < NR; u++) vf_mask_store(S + u * lds + j0, keep, _mm512_permutexvar_ps(perm, kb_sum4f(f[u])));
    }
}
#if defined(__AVX512VBMI__) && !defined(ATTN_VEC_SIMDE)
#define Q4_KEYV 1
/* q4_0 at D 128, one and two rows (VBMI): one key a vector, block b's 16 code bytes in 128-bit lane b by one byte
 * permutation of two loads within the row's 72 bytes, where q8_kl_steps put four keys' block in a vector by three
 * inserts a block (a shuffle each beside its load); q (qv[2 u], qv[2 u + 1]): row u's blocks' two chunks in
 * lane b, nz its offset terms, dq its block scales in lanes 4 b + e. A step's four keys fold to lanes 4 b + e
 * (kb_sum4), take the keys' scales (kl_scales', permuted) in that order, and four steps' 16 keys sum their blocks in
 * q8_kl_steps' order ((b0 + b2) + (b1 + b3), kb_sum4f's) after a lane transpose: the same bits. q4_blk_ix: byte 16 b +
 * i of the permutation from row byte o + i, o = 18 b + 2 (the last block's from the load at row byte 8: its byte 48 +
 * i, index 64 + 48 + i) */
#define Q4B(o)                                                                                                         \
    o, o + 1, o + 2, o + 3, o + 4, o + 5, o + 6, o + 7, o + 8, o + 9, o + 10, o + 11, o + 12, o + 13, o + 14, o + 15
static const uint8_t q4_blk_ix[64] __attribute__((aligned(64))) = {Q4B(2), Q4B(20), Q4B(38), Q4B(112)};
#undef Q4B
INLINE __m512i q4_key_blocks(const unsigned char *k, __m512i ix) {
    return _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)k), ix, _mm512_loadu_si512((const void *)(k + 8)));
}
INLINE void q4_keyv_steps(const __m512i *qv, const __m512i *nz, const __m512 *dq, const void *K, size_t kr, int64_t n,
                          float *S, int64_t lds, const void *pre, size_t pr, int64_t pb, int NR) {
    const __m512i lo4 = _mm512_set1_epi8(15), ix = _mm512_load_si512(q4_blk_ix);
    const __m512i tr = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0); /* 4 e + b -> 4 b + e */
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        __m512 f[2][4];
        for (int s = 0; s < 4; s++) {
            f[0][s] = f[1][s] = _mm512_setzero_ps();
            int64_t j = j0 + 4 * s;
            if (j >= n) continue;
            const unsigned char *k[4];
            q8_keys(K, kr, j, n, 4, pre, pr, pb, k);
            __m512i a[2][4];
            for (int e = 0; e < 4; e++) {
                __m512i x = q4_key_blocks(k[e], ix);
                __m512i x0 = _mm512_and_si512(x, lo4), x1 = q4_high(x, lo4);
                for (int u = 0; u < NR; u++)
                    a[u][e] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nz[u], x0, qv[2 * u]), x1, qv[2 * u + 1]);
            }
            __m512 sc = _mm512_permutexvar_ps(tr, kl_scales(k, 0, ATTN_Q4_BYTES, 0xffff)); /* lane 4 b + e */
            for (int u = 0; u < NR; u++) f[u][s] = _mm512_mul_ps(vf_cvt_i32(kb_sum4(a[u])), _mm512_mul_ps(sc, dq[u]));
        }
        __mmask16 keep = (__mmask16)(n - j0 >= 16 ? 0xffff : (1u << (n - j0)) - 1);
        for (int u = 0; u < NR; u++) {
            vf v[4];
            vf_lanes_transpose(f[u], v); /* v[b]: lane 4 s + e, key 4 s + e's block b */
            vf_mask_store(S + u * lds + j0, keep, vf_add(vf_add(v[0], v[2]), vf_add(v[1], v[3])));
        }
    }
}
INLINE void q4_keyv(const unsigned char *const *q, const void *K, size_t kr, int64_t n, float *S, int64_t lds,
                    const void *pre, size_t pr, int64_t pb, int NR) {
    __m512i qv[4], nz[2];
    __m512 dq[2];
    const __m512i off = _mm512_set1_epi8(8);
    for (int u = 0; u < NR; u++) {
        for (int h = 0; h < 2; h++) {
            uint8_t c[64];
            for (int b = 0; b < 4; b++) memcpy(c + 16 * b, q[u] + (size_t)b * ATTN_Q8_BYTES + 2 + 16 * h, 16);
            qv[2 * u + h] = _mm512_loadu_si512(c);
        }
        nz[u] = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), off, qv[2 * u]), off, qv[2 * u + 1]));
        float d16[16];
        for (int i = 0; i < 16; i++) d16[i] = q8_d(q[u] + (size_t)(i / 4) * ATTN_Q8_BYTES);
        dq[u] = _mm512_loadu_ps(d16);
    }
    q4_keyv_steps(qv, nz, dq, K, kr, n, S, lds, pre, pr, pb, NR);
}
#else
#define Q4_KEYV 0
#endif
INLINE void q8_kl(const unsigned char *const *q, int64_t D, const void *K, size_t kr, int64_t n, float *S, int64_t lds,
                  const void *pre, size_t pr, int64_t pb, int NR, int t, int yw) {
    __m512i nz[2 * (KB_MAXC / 2)], qb[4 * (KB_MAXC / 2)]; /* qb: the rows' chunks broadcast, made once a call */
    __m512 dqg[2 * (KB_MAXC / 8)];
    int64_t nb = D / ATTN_Q8_BLOCK;
    const __m512i off = _mm512_set1_epi8(t == KV_Q4 ? 8 : -128);
    for (int u = 0; u < NR; u++)
        for (int64_t b = 0; b < nb; b++) {
            const unsigned char *y = q[u] + (size_t)b * ATTN_Q8_BYTES + 2;
            __m512i z = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), off, kb_chunk(y, 0)), off,
                                            kb_chunk(y, 1));
            nz[u * (KB_MAXC / 2) + b] = _mm512_sub_epi32(_mm512_setzero_si512(), z);
            qb[2 * (u * (KB_MAXC / 2) + b)] = kb_chunk(y, 0), qb[2 * (u * (KB_MAXC / 2) + b) + 1] = kb_chunk(y, 1);
            if (b % 4) continue;
            float d16[16];
            for (int i = 0; i < 16; i++) d16[i] = b + i % 4 < nb ? q8_d(q[u] + (size_t)(b + i % 4) * ATTN_Q8_BYTES) : 0;
            dqg[u * (KB_MAXC / 8) + b / 4] = _mm512_loadu_ps(d16);
        }
    if (nb == 4)
        q8_kl_steps(qb, nz, dqg, 4, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
    else
        q8_kl_steps(qb, nz, dqg, nb, K, kr, n, S, lds, pre, pr, pb, NR, t, yw);
}
INLINE void qk_q8_body512(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                          int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, int t, int yw) {
    size_t kr = attn_storage_bytes((attn_dtype)t, ldk), qr = attn_q8_row_bytes(D);
    size_t pr = attn_storage_bytes((attn_dtype)t, ldpre);
    int64_t nb = D / ATTN_Q8_BLOCK, pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre);
    __m512i y2[4 * QP], zq2[4 * QP];
    __m512 dq2[4 * QP];
    const __m512i off = _mm512_set1_epi8(t == KV_Q4 ? 8 : -128);
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int nr = R - r0 < 4 ? (int)(R - r0) : 4;
        const void *pf = pre && r0 == 0 ? pre : NULL;
        float *Sr = S + r0 * lds;
        if (nb <= KB_MAXC / 2) { /* the rows' chunks kept whole; eight rows: a key's chunks once for both groups */
            if (R - r0 >= 8) {
                const unsigned char *q8[8];
                for (int u = 0; u < 8; u++) q8[u] = (const unsigned char *)Q + (size_t)(r0 + u) * qr;
                q8_blk_kb(q8, D, 2, K, kr, n, Sr, lds, pf, pr, pb, 4, t, yw);
                r0 += 4;
                continue;
            }
            const unsigned char *q[4];
            for (int u = 0; u < 4; u++) q[u] = (const unsigned char *)Q + (size_t)(r0 + (u < nr ? u : 0)) * qr;
            if (nr >= 3) q8_blk_kb(q, D, 1, K, kr, n, Sr, lds, pf, pr, pb, nr, t, yw);
#if Q4_KEYV
            else if (t == KV_Q4 && D == 128 && nr == 2)
                q4_keyv(q, K, kr, n, Sr, lds, pf, pr, pb, 2);
            else if (t == KV_Q4 && D == 128)
                q4_keyv(q, K, kr, n, Sr, lds, pf, pr, pb, 1);
#endif
            else if (nr == 2)
                q8_kl(q, D, K, kr, n, Sr, lds, pf, pr, pb, 2, t, yw);
            else
                q8_kl(q, D, K, kr, n, Sr, lds, pf, pr, pb, 1, t, yw);
            continue;
        }
        /* longer rows: the query pairs, their offset terms and scales a chunk of QB blocks at a time */
        for (int64_t b0 = 0; b0 < nb; b0 += QB) {
            int64_t b1 = nb - b0 < QB ? nb : b0 + QB;
            for (int u = 0; u < nr; u++) {
                const unsigned char *q = (const unsigned char *)Q + (size_t)(r0 + u) * qr;
                for (int64_t b = b0; b < b1; b += 2) {
                    int64_t i2 = u * QP + (b - b0) / 2;
                    y2[i2] = query_pair(q, b, nb, t);
                    zq2[i2] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, y2[i2]);
                    dq2[i2] = pair_scale(q8_d(q + b * ATTN_Q8_BYTES),
                                         b + 1 < nb ? q8_d(q + (b + 1) * ATTN_Q8_BYTES) : 0.0f, t);
                }
            }
            const void *pfb = b0 == 0 ? pf : NULL;
            if (nr == 4)
                q8_rows512(y2, dq2, zq2, b0, b1, nb, K, kr, n, Sr, lds, pfb, pr, pb, b0 == 0, 4, 2, t);
            else if (nr == 3)
                q8_rows512(y2, dq2, zq2, b0, b1, nb, K, kr, n, Sr, lds, pfb, pr, pb, b0 == 0, 3, 2, t);
            else if (nr == 2)
                q8_rows512(y2, dq2, zq2, b0, b1, nb, K, kr, n, Sr, lds, pfb, pr, pb, b0 == 0, 2, 4, t);
            else
                q8_rows512(y2, dq2, zq2, b0, b1, nb, K, kr, n, Sr, lds, pfb, pr, pb, b0 == 0, 1, 4, t);
        }
    }
}
#define QK_QBLK qk_q8_body512
#else
#define QK_QBLK qk_q8_body
#endif

/* yw: int8 / int4 keys in groups of three or four rows through the 256-bit steps (q8_kb_steps_y) */
INLINE void qk_q8_kinds(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                        int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt, int yw) {
    switch (kt) {
    case ATTN_DTYPE_KV_INT8: qk_tok_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_U8, yw); break;
    case ATTN_DTYPE_KV_INT4: qk_tok_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_U4, yw); break;
    case ATTN_DTYPE_Q4_0: QK_QBLK(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_Q4, yw); break;
    default: QK_QBLK(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_Q8, yw); break;
    }
}
static void qk_rows_q8(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                       int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt) {
    qk_q8_kinds(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, kt, 0);
}
#ifdef ATTN_SIMD_Q8_Y
/* a static function, and the exported name a jump to it: GCC 12 compiled
 * the body as the exported function itself without its software
 * prefetches (none of qk_rows_q8's, the step over int8 at four rows from
 * L3 0.75x) */
static void qk_rows_q8_y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                         int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt) {
    qk_q8_kinds(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, kt, 1);
}
/* the table's qk_rows_q8 for cores that run AVX-512 on 256-bit units (dispatch.c's avx512-256 tables) */
void ATTN_SIMD_Q8_Y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                    const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt) {
    qk_rows_q8_y(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, kt);
}
#endif

/* ---- P V in integers (the math modes on int8 / int4 V, kernels.h pv_rows_i16) ---- */

/* the rounding's factors for a row whose largest |p| is amax (bad: a NaN
 * or an infinity among them): 0 (the row's q all 0, the result NaN for a
 * bad row, else 0: *ret) or 1 with (sc, inv), as attn_p16_quantize */
INLINE int p16_scale(float amax, int bad, int64_t n, int16_t *q, float *sc, float *inv, float *ret) {
    if (bad || amax == 0.0f) {
        memset(q, 0, (size_t)n * sizeof *q);
        *ret = bad ? NAN : 0.0f;
        return 0;
    }
    *sc = amax < ATTN_P16_TINY ? 0x1p100f : 1.0f, *inv = ATTN_P16_MAX / (amax * *sc);
    *ret = amax / ATTN_P16_MAX;
    return 1;
}
/* attn_p16_quantize in vectors, the same bits, of the weights w = p (d NULL)
 * or p d (q4_0 / q8_0: P times the keys' block scales, made in each of the
 * two passes, not stored): the same products, rounded to nearest even; the
 * largest |w| is exact in any order. The NaN and infinity test rides on an
 * integer maximum of the bits of |w| (0x7f800000 or more: a NaN or an
 * infinity; below, the bits order as the values), and a row whose
 * prescale is 1 takes one product (w 1 is w): the kernel over q8_0 at one
 * and four rows 0.97-0.99x (Zen 1). n <= 64 weights into q, with a 0 at
 * q[n] for an odd n (keys go in pairs); returns u */
INLINE __m256 p16_w(const float *p, const float *d, int64_t i) {
    __m256 x = _mm256_loadu_ps(p + i);
    return d ? _mm256_mul_ps(x, _mm256_loadu_ps(d + i)) : x;
}
INLINE float p16_w1(const float *p, const float *d, int64_t i) { return d ? p[i] * d[i] : p[i]; }
INLINE float p16_row_w(const float *p, const float *d, int64_t n, int16_t *q) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i a8 = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) a8 = _mm256_max_epi32(a8, _mm256_and_si256(_mm256_castps_si256(p16_w(p, d, i)), absm));
    int32_t a8s[8], ab = 0;
    _mm256_storeu_si256((__m256i *)(void *)a8s, a8);
    for (int e = 0; e < 8; e++) ab = a8s[e] > ab ? a8s[e] : ab;
    for (; i < n; i++) {
        float x = p16_w1(p, d, i);
        int32_t xb;
        memcpy(&xb, &x, 4);
        ab = (xb & 0x7fffffff) > ab ? xb & 0x7fffffff : ab;
    }
    float a, sc, inv, ret;
    memcpy(&a, &ab, 4);
    q[n] = 0;
    if (!p16_scale(a, ab >= 0x7f800000, n, q, &sc, &inv, &ret)) return ret;
    __m256 sv = _mm256_set1_ps(sc), iv = _mm256_set1_ps(inv);
    for (i = 0; i + 16 <= n; i += 16) {
        __m256 x0 = p16_w(p, d, i), x1 = p16_w(p, d, i + 8);
        if (sc != 1.0f) x0 = _mm256_mul_ps(x0, sv), x1 = _mm256_mul_ps(x1, sv); /* else w 1 is w */
        __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(x0, iv)), hi = _mm256_cvtps_epi32(_mm256_mul_ps(x1, iv));
        _mm256_storeu_si256((__m256i *)(void *)(q + i), _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8));
    }
    for (; i < n; i++) q[i] = (int16_t)nearbyintf(p16_w1(p, d, i) * sc * inv);
    return ret;
}

#if VL == 16
/* p16_row on the 16-lane tables (the same bits): the row in four
 * registers, read once, its largest |p| by one reduction (Zen 5, P V over
 * int4 at four rows in L1: 4.7 -> 4.4 ns a key) */
INLINE float p16_row16(const float *p, int64_t n, int16_t *q) {
    const vf big = vf_set1(FLT_MAX);
    vf x[4], a = vf_zero();
    vmask bad = 0;
    int nk = (int)((n + 15) / 16);
    q[n] = 0;
    for (int k = 0; k < nk; k++) {
        x[k] = vf_maskz_load(p + 16 * k, n - 16 * k >= 16 ? (vmask)0xffff : vm_tail(n - 16 * k));
        vf ab = vf_abs(x[k]);
        bad |= _mm512_cmp_ps_mask(ab, big, _CMP_NLE_UQ), a = vf_max(a, ab);
    }
    float sc, inv, ret;
    if (!p16_scale(vf_hmax(a), bad != 0, n, q, &sc, &inv, &ret)) return ret;
    vf sv = vf_set1(sc), iv = vf_set1(inv);
    for (int k = 0; k < nk; k++) {                               /* the lanes past n: 0 */
        vf y = vf_mul(sc == 1.0f ? x[k] : vf_mul(x[k], sv), iv); /* w 1 is w */
#if defined(ATTN_VEC_SIMDE)
        __m256i lo = _mm256_cvtps_epi32(vf_half(y, 0)), hi = _mm256_cvtps_epi32(vf_half(y, 1));
        _mm256_storeu_si256((__m256i *)(void *)(q + 16 * k),
                            _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xd8));
#else
        _mm256_storeu_si256((__m256i *)(void *)(q + 16 * k), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(y)));
#endif
    }
    return ret;
}
#define P16_ROW p16_row16
#else
#define P16_ROW(p, n, q) p16_row_w(p, NULL, n, q)
#endif

/* acc + the int32 sums of int16 pairs v x p, one sum a 32-bit lane:
 * VNNI's VPDPWSSD where the table defines ATTN_I16_DPWSSD, else VPMADDWD
 * and an add (exact: |pair| <= 2 * 32767 * 255). The 16-lane tables take 16
 * columns of a key pair in one 512-bit register (pvi_t), AVX2 in two
 * 256-bit ones (PVI_N). */
#if VL == 16
typedef __m512i pvi_t;
#define PVI_N 1
#define PVI(op) _mm512_##op
#define PVI_DPWSSD _mm512_dpwssd_epi32
#else
typedef __m256i pvi_t;
#define PVI_N 2
#define PVI(op) _mm256_##op
#define PVI_DPWSSD ATTN_I16_DPWSSD
#endif
#ifdef ATTN_I16_DPWSSD
INLINE pvi_t pv_dot2(pvi_t acc, pvi_t v, pvi_t p) { return PVI_DPWSSD(acc, v, p); }
#else
INLINE pvi_t pv_dot2(pvi_t acc, pvi_t v, pvi_t p) { return PVI(add_epi32)(acc, PVI(madd_epi16)(v, p)); }
#endif

/* the V types whose P is a row of weights a block of 32 columns (P times each key's block scale) */
#define PVI_BLK(t) ((t) == KV_Q4 || (t) == KV_Q8)
/* 16 codes of a V row from column c as bytes (int4: byte c % half, the high nibble from half on; q4_0: c a
 * multiple of 16, the block's bytes, its high nibbles from column 16 of the block on; q8_0: c a multiple of 16,
 * signed) */
INLINE __m128i code16(const uint8_t *v, int64_t c, int64_t half, int t) {
    if (t == KV_U8) return _mm_loadu_si128((const __m128i *)(const void *)(v + c));
    if (t == KV_Q8) return _mm_loadu_si128((const __m128i *)kv_elem(v, c, t));
    const uint8_t *p = t == KV_Q4 ? v + (size_t)(c / 32) * ATTN_Q4_BYTES + 2 : int4_at(v, c, half);
    int hi = t == KV_Q4 ? c % 32 >= 16 : c >= half;
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm_and_si128(hi ? _mm_srli_epi16(x, 4) : x, _mm_set1_epi8(15));
}

/* 16 bytes widened to words: q8_0's signed codes with their sign, the others' unsigned */
INLINE __m256i pvi_w16(__m128i x, int t) { return t == KV_Q8 ? _mm256_cvtepi8_epi16(x) : _mm256_cvtepu8_epi16(x); }
#if VL == 16
/* 32 bytes widened to words (pvi_w16; SIMDe has no VPMOVZXBW zmm: the same values in two halves) */
INLINE __m512i pvi_w32(__m256i x, int t) {
#if defined(ATTN_VEC_SIMDE)
    return join256(pvi_w16(_mm256_castsi256_si128(x), t), pvi_w16(_mm256_extracti128_si256(x, 1), t));
#else
    return t == KV_Q8 ? _mm512_cvtepi8_epi16(x) : _mm512_cvtepu8_epi16(x);
#endif
}
#endif

/* The codes of two keys' rows (v0, v1) at 16 columns from c interleaved
 * column by column to int16 pairs, in column order: x[0] (and on AVX2 x[1],
 * the upper 8 columns) */
INLINE void pvi_codes(const uint8_t *v0, const uint8_t *v1, int64_t c, int64_t half, int t, pvi_t *x) {
    __m128i c0 = code16(v0, c, half, t), c1 = code16(v1, c, half, t);
    __m128i lo = _mm_unpacklo_epi8(c0, c1), hi = _mm_unpackhi_epi8(c0, c1);
#if VL == 16
    x[0] = pvi_w32(_mm256_set_m128i(hi, lo), t);
#else
    x[0] = pvi_w16(lo, t), x[1] = pvi_w16(hi, t);
#endif
}

/* O[0..16) += u times the 16 columns' int32 sums a (fmaf's bits), z taken off them first (q4_0's codes: 8 sum q) */
INLINE void pvi_store(float *o, float u, pvi_t *a, int32_t z) {
    for (int e = 0; z && e < PVI_N; e++) a[e] = PVI(sub_epi32)(a[e], PVI(set1_epi32)(z));
#if VL == 16 && defined(ATTN_VEC_SIMDE)
    vf x = vf_join(_mm256_cvtepi32_ps(_mm512_castsi512_si256(a[0])),
                   _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(a[0], 1)));
    vf_store(o, vf_fma(vf_set1(u), x, vf_load(o)));
#elif VL == 16
    _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_set1_ps(u), _mm512_cvtepi32_ps(a[0]), _mm512_loadu_ps(o)));
#else
    for (int w = 0; w < 2; w++) {
        __m256 x = _mm256_cvtepi32_ps(a[w]);
        _mm256_storeu_ps(o + 8 * w, _mm256_fmadd_ps(_mm256_set1_ps(u), x, _mm256_loadu_ps(o + 8 * w)));
    }
#endif
}

/* pvi_pass's int4 halves (as constants): PVI_LOW, a row's half past every column (each read from the low nibbles);
 * PVI_NIB, the 16-lane tables' pairs of groups over bytes (pvi_codes_nib: the pass from column c covers bytes c / 2
 * .., its even groups the low nibbles' columns, the odd ones the high nibbles' from the half) */
#define PVI_LOW ((int64_t)1 << 40)
#define PVI_NIB ((int64_t)1 << 41)
#if VL == 16
/* 32 columns of two keys' rows from c at once (pvi_codes took 16): two
 * 256-bit loads, byte unpacks within 128-bit lanes and two widenings,
 * x[0] the pairs of columns c + 0..7 and c + 16..23, x[1] of c + 8..15 and
 * c + 24..31 (pvi_pass's store puts them back in order). int4: the 32
 * columns lie in one half (PVI_W32). SIMDe has no VPMOVZXBW zmm: the same
 * values widened in two halves */
#define PVI_W32(G, half, t) ((G) % 2 == 0 && ((t) == KV_U8 || PVI_BLK(t) || (half) % 32 == 0))
INLINE __m256i code32(const uint8_t *v, int64_t c, int64_t half, int t) {
    if (t == KV_U8) return _mm256_loadu_si256((const __m256i *)(const void *)(v + c));
    if (t == KV_Q8) return _mm256_loadu_si256((const __m256i *)kv_elem(v, c, t));
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)int4_at(v, c, half));
    return _mm256_and_si256(c < half ? x : _mm256_srli_epi16(x, 4), _mm256_set1_epi8(15));
}
/* Two keys' 16 bytes of nibbles at p0, p1 interleaved to words: the low nibbles in x[0], the high ones in x[1]
 * (each in byte order; VBMI: one byte permutation into the words' low bytes). q4_0: a block's bytes, columns c ..
 * c + 15 and c + 16 .. c + 31 (pvi_codes32); int4: bytes b .. b + 15, columns b .. and half + b .. (PVI_NIB) */
INLINE void pvi_codes_nib(const uint8_t *p0, const uint8_t *p1, pvi_t *x) {
    __m128i c0 = _mm_loadu_si128((const __m128i *)(const void *)p0);
    __m128i c1 = _mm_loadu_si128((const __m128i *)(const void *)p1);
#if defined(ATTN_FP8_DPBF16) && !defined(ATTN_VEC_SIMDE)
    /* word i: byte i / 2 of key i % 2 (the byte index in the low byte of each word) */
    const __m512i ix = _mm512_set_epi64(0x001f000f001e000e, 0x001d000d001c000c, 0x001b000b001a000a, 0x0019000900180008,
                                        0x0017000700160006, 0x0015000500140004, 0x0013000300120002, 0x0011000100100000);
    __m512i w =
        _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, ix, _mm512_castsi256_si512(_mm256_set_m128i(c1, c0)));
#else
    __m128i lo = _mm_unpacklo_epi8(c0, c1), hi = _mm_unpackhi_epi8(c0, c1);
#if defined(ATTN_VEC_SIMDE)
    __m512i w = join256(_mm256_cvtepu8_epi16(lo), _mm256_cvtepu8_epi16(hi));
#else
    __m512i w = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
#endif
#endif
    x[0] = _mm512_and_si512(w, _mm512_set1_epi16(15)), x[1] = _mm512_srli_epi16(w, 4);
}
INLINE void pvi_codes32(const uint8_t *v0, const uint8_t *v1, int64_t c, int64_t half, int t, pvi_t *x) {
    if (t == KV_Q4 || (t == KV_U4 && half == PVI_NIB)) {
        size_t o = t == KV_Q4 ? (size_t)(c / 32) * ATTN_Q4_BYTES + 2 : (size_t)c / 2;
        pvi_codes_nib(v0 + o, v1 + o, x);
        return;
    }
    __m256i c0 = code32(v0, c, half, t), c1 = code32(v1, c, half, t);
    x[0] = pvi_w32(_mm256_unpacklo_epi8(c0, c1), t), x[1] = pvi_w32(_mm256_unpackhi_epi8(c0, c1), t);
}
#else /* AVX2: 16 columns a step (PVI_W32 0: this stand-in is never called) */
#define PVI_W32(G, half, t) 0
INLINE void pvi_codes32(const uint8_t *v0, const uint8_t *v1, int64_t c, int64_t half, int t, pvi_t *x) {
    pvi_codes(v0, v1, c, half, t, x), pvi_codes(v0, v1, c + 16, half, t, x + PVI_N);
}
#endif

/* the rows of P for row r and the 16 columns of group g of a pass from column c0: q4_0 and q8_0 have a row of
 * weights for each block of 32 columns (the pass's first block at row 4 r), the others one (4 r) */
INLINE int pvi_qrow(int r, int g, int64_t c0, int t) { return 4 * r + (PVI_BLK(t) ? (int)(c0 % 32 + 16 * g) / 32 : 0); }
/* q4_0 and q8_0 on the 16-lane tables: the weights of 4 blocks a 64-key chunk (pvi_blk_lanes), key pair i's at int32
 * lanes 16 i + 4 b + r (block b of the 4, row r; one row, NR 1: lanes 4 i + b, pvi_blk_lanes1), held in q's rows as a
 * flat array; the 4 blocks from column c0 - c0 % 128 */
#define PVI_LANES(t) (VL == 16 && PVI_BLK(t))
INLINE int pvi_lane(int NR, int r, int g, int64_t c0) {
    int b = (int)((c0 % 128 + 16 * g) / 32);
    return NR == 1 ? b : 4 * b + r;
}
/* the int16 pair (keys j, j + 1) of row r's weights for group g of the pass from c0 (q4_0: q and c0 from the
 * pass's first block, pvi_pass) */
INLINE int32_t pvi_weight(int16_t (*q)[66], int NR, int r, int g, int64_t c0, int64_t j, int t) {
    int32_t w;
    if (PVI_LANES(t))
        memcpy(&w, (const int32_t *)(const void *)q + (NR == 1 ? 2 : 8) * j + pvi_lane(NR, r, g, c0), 4);
    else
        memcpy(&w, q[pvi_qrow(r, g, c0, t)] + j, 4);
    return w;
}

#if VL == 16 && defined(ATTN_I16_DPWSSD) && !defined(ATTN_VEC_SIMDE)
/* pvi_pair's int8 / int4 at four rows and four groups: a[r][e] += the int32
 * sums of x[e]'s int16 pairs times row r's weight pair (pvi_weight, key
 * pair j), in two asm statements of eight VPDPWSSD, their accumulators,
 * codes and weights in registers. In C, GCC 12 kept one to three of the 16
 * accumulators of int4's nibble pairs (PVI_NIB) on the stack across the key
 * loop, a store and a reload a key pair on the products' chain: Zen 5,
 * int4's P V at four rows 0.61x the time (4.7 -> 2.9 ns a key; at eight
 * rows 0.61x), the decode step at four rows 1.16x the GB/s on one thread,
 * 1.14x on two; int8 unchanged (zen5/pvi-dots44-ab). The weights as memory
 * operands ({1to16}): int4 0.78x, int8 1.26x (the broadcasts' loads); q4_0
 * and q8_0 (a weight a block and row) through it 1.00-1.02x: not taken */
#define DOTS44_W(r) [w##r] "v"(PVI(set1_epi32)(pvi_weight(q, 4, r, 0, c0, j, t)))
#define DOTS44_A(r, e) [a##r##e] "+v"(a[r][e])
#define DOTS44_D(r, e) "vpdpwssd %[w" #r "], %[x" #e "], %[a" #r #e "]\n\t"
#define DOTS44_ROW(r) DOTS44_D(r, 0) DOTS44_D(r, 1) DOTS44_D(r, 2) DOTS44_D(r, 3)
#define DOTS44_ROWS(r0, r1)                                                                                            \
    __asm__(DOTS44_ROW(r0) DOTS44_ROW(r1)                                                                              \
            : DOTS44_A(r0, 0), DOTS44_A(r0, 1), DOTS44_A(r0, 2), DOTS44_A(r0, 3), DOTS44_A(r1, 0), DOTS44_A(r1, 1),    \
              DOTS44_A(r1, 2), DOTS44_A(r1, 3)                                                                         \
            : [x0] "v"(x[0]), [x1] "v"(x[1]), [x2] "v"(x[2]), [x3] "v"(x[3]), DOTS44_W(r0), DOTS44_W(r1))
INLINE void pvi_dots44(pvi_t (*a)[8], const pvi_t *x, int16_t (*q)[66], int64_t j, int64_t c0, int t) {
    DOTS44_ROWS(0, 1);
    DOTS44_ROWS(2, 3);
}
#define PVI_DOTS44 1
#else
#define PVI_DOTS44 0
#endif

/* One key pair (v0, v1; P at q[qr][j], q[qr][j + 1], qr = pvi_qrow) into the NR x G PVI_N
 * accumulators a of the 16 G columns from c0 */
INLINE void pvi_pair(int16_t (*q)[66], int64_t j, int NR, int G, const uint8_t *v0, const uint8_t *v1, int64_t c0,
                     int64_t half, int t, pvi_t (*a)[8]) {
    if (PVI_W32(G, half, t) && G == 4 && !PVI_BLK(t)) {
        /* int8 / int4 at two to four rows: the pair's four code vectors and the rows' weights made first and held
         * in registers, then the products (interleaved, GCC spilled an accumulator and copied a dozen registers a
         * step; Emerald Rapids, 128 keys in L1: int4's P V 0.93-0.97x the time at two to four rows, int8's unchanged:
         * genuineintel-f6-m207/pv-pair-regs-ab); at four rows on the VNNI 16-lane tables the products are
         * pvi_dots44's asm, where GCC still kept accumulators on the stack */
        pvi_t x[4], pr[4];
        pvi_codes32(v0, v1, c0, half, t, x), pvi_codes32(v0, v1, c0 + 32, half, t, x + 2);
#if PVI_DOTS44
        if (NR == 4) { /* two and three rows: no gain (Zen 5) */
            pvi_dots44(a, x, q, j, c0, t);
            return;
        }
#endif
        for (int r = 0; r < NR; r++) pr[r] = PVI(set1_epi32)(pvi_weight(q, NR, r, 0, c0, j, t));
        for (int e = 0; e < 4; e++) KEEP_REG(x[e]);
        for (int r = 0; r < NR; r++) KEEP_REG(pr[r]);
        for (int r = 0; r < NR; r++)
            for (int e = 0; e < 4; e++) a[r][e] = pv_dot2(a[r][e], x[e], pr[r]);
        for (int r = 0; r < NR; r++)
            for (int w = 0; w < 4; w++) KEEP_REG(a[r][w]);
        return;
    }
    if (PVI_W32(G, half, t)) {
        for (int g = 0; g < G; g += 2) {
            pvi_t x[2 * PVI_N];
            pvi_codes32(v0, v1, c0 + 16 * g, half, t, x);
            for (int r = 0; r < NR; r++) {
                pvi_t pr = PVI(set1_epi32)(pvi_weight(q, NR, r, g, c0, j, t));
                for (int e = 0; e < 2 * PVI_N; e++) a[r][PVI_N * g + e] = pv_dot2(a[r][PVI_N * g + e], x[e], pr);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int w = 0; w < G * PVI_N; w++) KEEP_REG(a[r][w]);
        return;
    }
    for (int g = 0; g < G; g++) {
        pvi_t x[PVI_N];
        pvi_codes(v0, v1, c0 + 16 * g, half, t, x);
        for (int r = 0; r < NR; r++) { /* the pair's P, broadcast from memory where it is used */
            pvi_t pr = PVI(set1_epi32)(pvi_weight(q, NR, r, g, c0, j, t));
            for (int e = 0; e < PVI_N; e++) a[r][PVI_N * g + e] = pv_dot2(a[r][PVI_N * g + e], x[e], pr);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int w = 0; w < G * PVI_N; w++) KEEP_REG(a[r][w]);
}

/* pvi_pass's loop over the n keys, two a step (an odd last key against itself with P 0) */
INLINE void pvi_keys(int16_t (*q)[66], int NR, int G, const uint8_t *V, size_t vs, int64_t n, int64_t c0, int64_t half,
                     const char *pp, size_t ps, int64_t pb, int pw, int t, pvi_t (*a)[8]) {
    int64_t j = 0;
    /* both rows of each pair and back to back (a cache's rows; pw 3: rows under two lines, or a pass of half the
     * row or more): one range, one loop a pair where two loops and two address registers took GCC's last registers
     * (Zen 5, the P V kernel over int4 at one row 0.77-0.87x the time, over q4_0 0.91-0.97x; the int4 step at one
     * row 1.05-1.31x the GB/s, zen5/pvi-pf-pair-ab. int8 so ran its four-row kernel 1.15-1.19x: not taken) */
    if (t != KV_U8 && pp && pw == 3 && (int64_t)ps == pb)
        for (; j + 2 <= n; j += 2) {
            prefetch_bytes(pp + (size_t)j * ps, 2 * pb);
            pvi_pair(q, j, NR, G, V + (size_t)j * vs, V + (size_t)(j + 1) * vs, c0, half, t, a);
        }
    /* one row a pair (pw 1: half the rows, pvi_body), the rows in order from pp: the memory sees one stream,
     * where the first row of each pair in one pass and the second in the next (two strided streams) left P V
     * slower from memory (Zen 5, 128-key blocks streamed, bench/int_kernels_stream.c: P V alone at two and four
     * rows 0.55-0.66x the time over int8, 0.68-0.76x over q8_0; the int8 step at four rows 1.16x the GB/s on one
     * thread, 1.08x on two, q8_0's 1.01x: zen5/pv-prefetch-seq-ab) */
    if (pp && pw == 1)
        for (; j + 2 <= n; j += 2) {
            prefetch_bytes(pp + (size_t)(j / 2) * ps, pb);
            pvi_pair(q, j, NR, G, V + (size_t)j * vs, V + (size_t)(j + 1) * vs, c0, half, t, a);
        }
    if (pp) /* both rows of each pair, spread over the pass (all at its start ran slower) */
        for (; j + 2 <= n; j += 2) {
            prefetch_bytes(pp + (size_t)j * ps, pb);
            prefetch_bytes(pp + (size_t)(j + 1) * ps, pb);
            pvi_pair(q, j, NR, G, V + (size_t)j * vs, V + (size_t)(j + 1) * vs, c0, half, t, a);
        }
    for (; j + 2 <= n; j += 2) pvi_pair(q, j, NR, G, V + (size_t)j * vs, V + (size_t)(j + 1) * vs, c0, half, t, a);
    if (j < n) pvi_pair(q, j, NR, G, V + (size_t)j * vs, V + (size_t)j * vs, c0, half, t, a);
}

/* One pass over n keys (two a step, each pair's P in one 32-bit lane; an
 * odd last key against itself with P 0) for NR rows of q and G groups of 16
 * columns from c0: G PVI_N int32 accumulators a row, then O += u sum (u as q's
 * rows); pp: rows to prefetch (pb bytes, ps apart), both rows of each key
 * pair (pw 3) or one row a pair, in order from pp (pw 1). The
 * stores' loop is unrolled in full, so that a's indices are constants: GCC 12
 * left it rolled over q4_0's four rows, and a then lived in memory, 16
 * 512-bit stores a key pair (the kernel 2x int4's at four rows on Zen 5) */
INLINE void pvi_pass(int16_t (*q)[66], const float *u, const int32_t *z, int NR, int G, const uint8_t *V, size_t vs,
                     int64_t n, float *O, int64_t ldo, int64_t c0, int64_t half, const char *pp, size_t ps, int64_t pb,
                     int pw, int t) {
    pvi_t a[4][8];
    for (int r = 0; r < NR; r++)
        for (int w = 0; w < G * PVI_N; w++) a[r][w] = PVI(set1_epi32)(0);
    /* q4_0, q8_0: the codes and the weights (the 16-lane tables: their lanes) from the pass's first block, cp the
     * column in it (0 where G is even: such passes start at multiples of 32; else 0 or 16), so that the loop
     * addresses each by constant offsets from one base (at four rows on Zen 5: the kernel 0.9x), cp a constant in
     * the loop (a run-time cp left the weights' rows and the codes' offsets to registers, which the loop reloaded
     * from the stack: the kernel at one row 1.2x, Zen 1) */
    int16_t(*qp)[66] = q;
    const uint8_t *Vp = V;
    int64_t cp = c0;
    if (PVI_BLK(t)) {
        Vp = V + attn_storage_bytes((attn_dtype)t, c0 - c0 % 32);
        cp = G % 2 == 0 ? 0 : c0 % 32;
        if (PVI_LANES(t)) qp = (int16_t(*)[66])(void *)((int32_t *)(void *)q + pvi_lane(NR, 0, 0, c0 - c0 % 32));
    }
    /* int4 on the 16-lane tables where the row's passes all pair their groups: 16 bytes a key give two groups,
     * the low and the high nibbles (PVI_NIB), where a group from one half took a load, an unpack and a widening
     * of its own a key pair */
    const int nib = VL == 16 && t == KV_U4 && G % 2 == 0 && (2 * half) % (16 * G) == 0;
    if (PVI_BLK(t) && cp == 0)
        pvi_keys(qp, NR, G, Vp, vs, n, 0, half, pp, ps, pb, pw, t, a);
    else if (PVI_BLK(t))
        pvi_keys(qp, NR, G, Vp, vs, n, 16, half, pp, ps, pb, pw, t, a);
    /* int4's passes below from the pass's first byte, column 0: the codes' offsets constants, where a run-time
     * c0 left GCC a register or a stack slot for each (Zen 5, one row: the P V kernel 0.81-0.88x the time, the
     * step 1.03-1.12x the GB/s, 1.07x on two threads; zen5/pvi-int4-base-ab. int8 so: 0.89-1.01x, not taken) */
    else if (nib)
        pvi_keys(qp, NR, G, V + c0 / 2, vs, n, 0, PVI_NIB, pp, ps, pb, pw, t, a);
    /* int4, a pass within one half of the row: its nibble a constant (half PVI_LOW: every column low; 0 and the
     * columns from the half: every column high), where c < half was a branch for each code load */
    else if (t == KV_U4 && PVI_W32(G, half, t) && c0 + 16 * G <= half)
        pvi_keys(qp, NR, G, V + c0, vs, n, 0, PVI_LOW, pp, ps, pb, pw, t, a);
    else if (t == KV_U4 && PVI_W32(G, half, t) && c0 >= half)
        pvi_keys(qp, NR, G, V + (c0 - half), vs, n, 0, 0, pp, ps, pb, pw, t, a);
    else
        pvi_keys(qp, NR, G, Vp, vs, n, cp, half, pp, ps, pb, pw, t, a);
#if VL == 16
    for (int r = 0; t != KV_Q4 && !nib && PVI_W32(G, half, t) && r < NR; r++)
        for (int g = 0; g < G; g += 2) { /* pvi_codes32's columns back in order (q4_0's and PVI_NIB's are) */
            pvi_t x = a[r][g], y = a[r][g + 1];
            a[r][g] = _mm512_permutex2var_epi64(x, _mm512_set_epi64(11, 10, 9, 8, 3, 2, 1, 0), y);
            a[r][g + 1] = _mm512_permutex2var_epi64(x, _mm512_set_epi64(15, 14, 13, 12, 7, 6, 5, 4), y);
        }
#endif
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
            int k = PVI_LANES(t) ? pvi_lane(NR, r, g, c0) : pvi_qrow(r, g, c0, t);
            int64_t col = nib ? c0 / 2 + 8 * (g - g % 2) + g % 2 * half : c0 + 16 * g;
            pvi_store(O + r * ldo + col, u[k], a[r] + PVI_N * g, t == KV_Q4 ? z[k] : 0);
        }
}

#if VL == 8 /* AVX2's weights (the 16-lane tables': pvi_blk_lanes) */
/* the block scales at byte o of n <= 64 q4_0 / q8_0 rows vs bytes apart as floats */
INLINE void pvi_blk_scales(const uint8_t *V, size_t vs, int64_t n, size_t o, float *d, int t) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) { /* eight at once, as q8_dk (one at a time: 1.2x the P V kernel at one row, Zen 1) */
        const unsigned char *k[8];
        for (int e = 0; e < 8; e++) k[e] = V + (size_t)(j + e) * vs + o;
        _mm256_storeu_ps(d + j, q8_dk(k, 0, 8, t));
    }
    for (; j < n; j++) d[j] = q8_d(V + (size_t)j * vs + o);
}
/* 8 times the sum of q[0..n) (n <= 64): q4_0's zero point in integers */
INLINE int32_t pvi_q4_zero(const int16_t *q, int64_t n) {
    __m256i acc = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(q + j)), _mm256_set1_epi16(1)));
    int32_t a8[8], sum = 0;
    _mm256_storeu_si256((__m256i *)(void *)a8, acc);
    for (int e = 0; e < 8; e++) sum += a8[e];
    for (; j < n; j++) sum += q[j];
    return 8 * sum;
}
/* q4_0, q8_0 on AVX2: rows 4 r + i of q (u, z) for the nr rows of P and the blocks of the G groups of 16 columns
 * from c0: each key's weight P d (d its block scale), rounded as P16_ROW rounds; q4_0's z 8 sum q (weights four
 * blocks by four rows a vector, as the 16-lane tables make them, ran this CPU kind slower: Zen 1, the kernel at
 * one row 1.2x, at four 1.0x) */
INLINE void pvi_blk_weights(const float *P, int64_t ldp, int64_t nr, const uint8_t *V, size_t vs, int64_t n, int64_t c0,
                            int64_t G, int16_t (*q)[66], float *u, int32_t *z, int t) {
    float d[64];
    for (int64_t i = 0; i < (c0 % 32 + 16 * G + 31) / 32; i++) {
        pvi_blk_scales(V, vs, n, attn_storage_bytes((attn_dtype)t, c0 - c0 % 32 + 32 * i), d, t);
        for (int64_t r = 0; r < nr; r++) {
            u[4 * r + i] = p16_row_w(P + r * ldp, d, n, q[4 * r + i]);
            if (t == KV_Q4) z[4 * r + i] = pvi_q4_zero(q[4 * r + i], n);
        }
    }
}
#endif

#if VL == 16
/* words w0 .. w0 + 31 of a q4_0 or q8_0 row from block b0 (bb bytes a block), past the row's nbk blocks 0 */
INLINE __m512i pvi_words(const uint8_t *v, int64_t b0, int64_t nbk, size_t bb, int64_t w0) {
    int64_t words = (nbk - b0) * (int64_t)(bb / 2) - w0;
    const uint8_t *p = v + (size_t)b0 * bb + 2 * (size_t)w0;
    if (words <= 0) return _mm512_setzero_si512();
    if (words >= 32) return _mm512_loadu_si512((const void *)p);
#ifdef ATTN_VEC_SIMDE /* no masked loads of words in SIMDe 0.7.4 */
    uint16_t t[32] = {0};
    memcpy(t, p, (size_t)words * 2);
    return _mm512_loadu_si512(t);
#else
    return _mm512_maskz_loadu_epi16((__mmask32)((1u << words) - 1), p);
#endif
}
/* x's lanes rounded to int32 (nearest even) */
INLINE __m512i pvi_cvt(vf x) {
#ifdef ATTN_VEC_SIMDE
    return join256(_mm256_cvtps_epi32(vf_half(x, 0)), _mm256_cvtps_epi32(vf_half(x, 1)));
#else
    return _mm512_cvtps_epi32(x);
#endif
}
/* the word permutation of pvi_scales4: word 4 b + r (b 0..3) from block b's scale, word 9 b (q4_0) or 17 b (q8_0);
 * one_row (pvi_blk_lanes1): word 4 k + b (k 0..3) from block b's */
INLINE __m512i pvi_scales_idx(int t, int one_row) {
    uint16_t ix[32];
    for (int i = 0; i < 32; i++) ix[i] = (uint16_t)(i < 16 ? (t == KV_Q4 ? 9 : 17) * (one_row ? i % 4 : i / 4) : 0);
    return _mm512_loadu_si512(ix);
}
/* pvi_blk_lanes1's pairs: word 2 (4 i + b) + e (key 2 i + e of the four, block b) from the low word of int32 lane
 * 4 (2 i + e) + b */
static const uint16_t pvi_pair_words[32]
    __attribute__((aligned(64))) = {0, 8, 2, 10, 4, 12, 6, 14, 16, 24, 18, 26, 20, 28, 22, 30};
/* attn_p16_quantize's factors by lane from the lanes' largest |w| as bits (amaxi; from +inf's pattern on: an
 * infinity or a NaN came): a row of zeros or with a NaN / infinity rounds to 0 (u 0, NaN) */
typedef struct pvi_factors {
    vf sc, inv, u;
    vmask live;
} pvi_factors;
INLINE pvi_factors pvi_factors_of(__m512i amaxi) {
    pvi_factors f;
    vmask bad = _mm512_cmpgt_epi32_mask(amaxi, _mm512_set1_epi32(0x7f7fffff));
    vf amax = _mm512_castsi512_ps(amaxi);
    f.live = (vmask)(~bad & _mm512_cmp_ps_mask(amax, vf_zero(), _CMP_NEQ_UQ));
    f.sc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(amax, vf_set1(ATTN_P16_TINY), _CMP_LT_OQ), vf_set1(1.0f),
                                vf_set1(0x1p100f));
    f.inv = _mm512_div_ps(vf_set1(ATTN_P16_MAX), vf_mul(amax, f.sc));
    f.u = _mm512_mask_blend_ps(bad, _mm512_maskz_div_ps(f.live, amax, vf_set1(ATTN_P16_MAX)), vf_set1(NAN));
    return f;
}
/* w's lanes rounded as attn_p16_quantize rounds them (0 where the lane's row is not live); unit: f's prescale is 1
 * in every lane (pvi_unit), whose product is then left out (w 1 is w) */
INLINE __m512i pvi_round(vf w, const pvi_factors *f, int unit) {
    return _mm512_maskz_mov_epi32(f->live, pvi_cvt(vf_mul(unit ? w : vf_mul(w, f->sc), f->inv)));
}
INLINE int pvi_unit(const pvi_factors *f) { return _mm512_cmp_ps_mask(f->sc, vf_set1(1.0f), _CMP_NEQ_UQ) == 0; }
/* pvi_blk_lanes' rounding: the weights w[0 .. n) (w[n] 0 for an odd n) rounded (pvi_round) and paired, key pair
 * i's int16 pairs at int32 lanes 16 i + 4 b + r of q; zs += the rounded values (q4_0's zero point). Two pairs a
 * step, no test for an odd last key inside the loop, and one product a lane where no lane is prescaled (unit):
 * the kernel over q8_0 and q4_0 at two to eight rows 0.95-0.98x the time of this loop as it was (the product
 * alone had run 0.98-0.99x: zen5/pvi-weights-ab, pvi-prescale-one-ab) */
INLINE void pvi_pairs(const vf *w, int64_t n, const pvi_factors *f, int unit, int16_t (*q)[66], __m512i *zs) {
    const __m512i lo16 = _mm512_set1_epi32(0xffff);
    __m512i z = *zs;
#pragma GCC unroll 2
    for (int64_t j = 0; j < n; j += 2) {
        __m512i qa = pvi_round(w[j], f, unit), qb = pvi_round(w[j + 1], f, unit);
        __m512i pr = _mm512_ternarylogic_epi32(_mm512_slli_epi32(qb, 16), qa, lo16, 0xf8); /* qb << 16 | qa's low */
        _mm512_storeu_si512((void *)((int32_t *)(void *)q + 8 * j), pr);
        z = _mm512_add_epi32(z, _mm512_add_epi32(qa, qb));
    }
    *zs = z;
}
/* a key's four block scales from block b0 as words 4 b + r (b 0..3, each four times; idx pvi_scales_idx): q4_0's
 * from one 64-byte load, q8_0's from two */
INLINE __m512i pvi_scales4(const uint8_t *v, int64_t b0, int64_t nbk, __m512i idx, int t) {
    if (t == KV_Q4) return _mm512_permutexvar_epi16(idx, pvi_words(v, b0, nbk, ATTN_Q4_BYTES, 0));
    return _mm512_permutex2var_epi16(pvi_words(v, b0, nbk, ATTN_Q8_BYTES, 0), idx,
                                     pvi_words(v, b0, nbk, ATTN_Q8_BYTES, 32));
}
/* keys j0 .. j0 + m - 1 (m <= 16) of the nr <= 4 rows of P (the rest 0) transposed: key j0 + i's rows at pt[4 i ..
 * 4 i + 3] (a 4 x 4 transpose in each 128-bit lane, then of the lanes) */
INLINE void pvi_p4(const float *P, int64_t ldp, int64_t nr, int64_t j0, int m, float *pt) {
    vf x[4];
    for (int r = 0; r < 4; r++) {
        if (r >= nr) {
            x[r] = vf_zero();
        } else if (m == 16) {
            x[r] = vf_load(P + r * ldp + j0);
        } else { /* the last keys (SIMDe: no masked loads here) */
            float tl[16] = {0};
            memcpy(tl, P + r * ldp + j0, (size_t)m * sizeof(float));
            x[r] = vf_load(tl);
        }
    }
    vf t0 = _mm512_unpacklo_ps(x[0], x[1]), t1 = _mm512_unpackhi_ps(x[0], x[1]);
    vf t2 = _mm512_unpacklo_ps(x[2], x[3]), t3 = _mm512_unpackhi_ps(x[2], x[3]);
    vf u[4], v[4]; /* lane k of u[i]: key 4 k + i; v[k]: keys 4 k .. 4 k + 3 */
    u[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    u[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    u[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    u[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    vf_lanes_transpose(u, v);
    for (int k = 0; k < 4; k++) _mm512_store_ps(pt + 16 * k, v[k]);
}
/* q4_0's and q8_0's weights on the 16-lane tables: blocks b0 .. b0 + 3 (those of the row's nbk) of the nr rows of P
 * over n <= 64 keys, lane 4 b + r of each key's vector P_rj d_j(b0 + b) (the key's four scales by a word permutation
 * of its row, pvi_scales4), the lanes' largest |w| by lane, then rounded as attn_p16_quantize rounds each (r, b) row
 * (the same products, lane by lane) and paired: key pair i's int16 pairs at int32 lane 16 i + 4 b + r of q
 * (pvi_weight); u, q4_0's z by lane (z: 8 sum q) */
INLINE void pvi_blk_lanes(const float *P, int64_t ldp, int64_t nr, const uint8_t *V, size_t vs, int64_t n, int64_t b0,
                          int64_t nbk, int16_t (*q)[66], float *u, int32_t *z, int t) {
    float pt[4 * 64] __attribute__((aligned(64)));
    vf w[65];
    for (int64_t j0 = 0; j0 < n; j0 += 16) pvi_p4(P, ldp, nr, j0, n - j0 < 16 ? (int)(n - j0) : 16, pt + 4 * j0);
    int nb4 = nbk - b0 < 4 ? (int)(nbk - b0) : 4;
    const __m512i idx = pvi_scales_idx(t, 0);
    const vmask ok = (vmask)(((1u << 4 * nb4) - 1) & (0x1111u * ((1u << nr) - 1)));
    /* the largest |w| by lane as the integer max of the bit patterns (sign clear: signed compares order them): the
     * float max where all are finite, from +inf's pattern (0x7f800000) on where an infinity or a NaN came (one
     * integer max a key, no compare) */
    __m512i amaxi = _mm512_setzero_si512();
#pragma GCC unroll 2 /* two keys a step: no counter copy a key (Zen 5, four rows: the kernel 0.92x over q8_0) */
    for (int64_t j = 0; j < n; j++) {
        vf d = vf_cvt_h16(_mm512_castsi512_si256(pvi_scales4(V + (size_t)j * vs, b0, nbk, idx, t)));
        w[j] = _mm512_maskz_mul_ps(ok, _mm512_broadcast_f32x4(_mm_load_ps(pt + 4 * j)), d);
        amaxi = _mm512_max_epi32(amaxi, _mm512_castps_si512(vf_abs(w[j])));
    }
    pvi_factors f = pvi_factors_of(amaxi);
    __m512i zs = _mm512_setzero_si512();
    if (n % 2) w[n] = vf_zero(); /* the odd last key's partner: P 0 */
    if (pvi_unit(&f))
        pvi_pairs(w, n, &f, 1, q, &zs);
    else
        pvi_pairs(w, n, &f, 0, q, &zs);
    vf_store(u, f.u);
    if (t == KV_Q4) _mm512_storeu_si512((void *)z, _mm512_slli_epi32(zs, 3));
}
/* m <= 4 keys' block scales (rows vs bytes apart from v; idx pvi_scales_idx at one row): key k's in words 4 k + b */
INLINE __m512i pvi_scales_keys(const uint8_t *v, size_t vs, int m, int64_t b0, int64_t nbk, __m512i idx, int t) {
    __m512i sw = _mm512_setzero_si512();
    for (int k = 0; k < m; k++)
        sw = _mm512_mask_mov_epi16(sw, (__mmask32)(0xfu << 4 * k), pvi_scales4(v + (size_t)k * vs, b0, nbk, idx, t));
    return sw;
}
/* pvi_blk_lanes1's rounding: the weights of keys 4 i .. 4 i + 3 in w[i] rounded (pvi_round) and their pairs at
 * int32 lanes 4 i + b of q (pix: pvi_pair_words); zs += the rounded values */
INLINE void pvi_quads(const vf *w, int64_t n, const pvi_factors *f, int unit, __m512i pix, int16_t (*q)[66],
                      __m512i *zs) {
    __m512i z = *zs;
    for (int64_t j = 0; j < n; j += 4) {
        __m512i qa = pvi_round(w[j / 4], f, unit);
        _mm256_storeu_si256((__m256i *)(void *)((int32_t *)(void *)q + 2 * j),
                            _mm512_castsi512_si256(_mm512_permutexvar_epi16(pix, qa)));
        z = _mm512_add_epi32(z, qa);
    }
    *zs = z;
}
/* pvi_blk_lanes at one row (R 1, and the rows after each 4 of 5, 9, ...): four keys a vector, lane 4 k + b (key k
 * of the four, block b), where a key took a vector of which a quarter was live; four whole keys' four blocks'
 * scales by kl_scales (two keys a word permutation), a partial group's by a merging permutation a key
 * (pvi_scales_keys); the largest |w| of the four keys' lanes by two lane swaps, and key pair i's int16 pairs at
 * int32 lanes 4 i + b of q (pvi_weight at NR 1) by one word permutation a vector. The same products and rounding,
 * lane by lane. A function of its own, not inlined into pvi_body: there GCC kept this loop's counters on the
 * stack and each key's permutation waited on them (Zen 5, 128 keys in L1, the P V kernel at one row: out of line
 * 0.93x the time over q8_0, 0.87-0.92x over q4_0; kl_scales then 0.86x over q8_0 where inlined it had run 1.06x,
 * 0.96x over q4_0: zen5/pvi-weights-ab) */
static __attribute__((noinline)) void pvi_blk_lanes1(const float *P, const uint8_t *V, size_t vs, int64_t n, int64_t b0,
                                                     int64_t nbk, int16_t (*q)[66], float *u, int32_t *z, int t) {
    vf w[16];
    int nb4 = nbk - b0 < 4 ? (int)(nbk - b0) : 4;
    const __m512i idx = pvi_scales_idx(t, 1);
    const vmask ok = (vmask)(0x1111u * ((1u << nb4) - 1));
    __m512i amaxi = _mm512_setzero_si512();
    for (int64_t j = 0; j < n; j += 4) {
        int m = n - j < 4 ? (int)(n - j) : 4;
        vf d;
        if (m == 4 && nb4 == 4) {
            const unsigned char *k[4];
            for (int e = 0; e < 4; e++) k[e] = V + (size_t)(j + e) * vs;
            d = kl_scales(k, b0, t == KV_Q4 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES, 0xffff);
        } else {
            d = vf_cvt_h16(_mm512_castsi512_si256(pvi_scales_keys(V + (size_t)j * vs, vs, m, b0, nbk, idx, t)));
        }
        float p4[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* the last keys' P (SIMDe has no masked 128-bit load) */
        if (m < 4) memcpy(p4, P + j, (size_t)m * sizeof(float));
        vf pv = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                      _mm512_castps128_ps512(_mm_loadu_ps(m < 4 ? p4 : P + j)));
        w[j / 4] = _mm512_maskz_mul_ps(ok, pv, d);
        amaxi = _mm512_max_epi32(amaxi, _mm512_castps_si512(vf_abs(w[j / 4])));
    }
    /* each block's largest over the four keys' lanes, in every key's lanes */
    amaxi = _mm512_max_epi32(amaxi, _mm512_shuffle_i32x4(amaxi, amaxi, 0x4e));
    amaxi = _mm512_max_epi32(amaxi, _mm512_shuffle_i32x4(amaxi, amaxi, 0xb1));
    pvi_factors f = pvi_factors_of(amaxi);
    const __m512i pix = _mm512_load_si512(pvi_pair_words);
    __m512i zs = _mm512_setzero_si512();
    if (pvi_unit(&f))
        pvi_quads(w, n, &f, 1, pix, q, &zs);
    else
        pvi_quads(w, n, &f, 0, pix, q, &zs);
    zs = _mm512_add_epi32(zs, _mm512_shuffle_i32x4(zs, zs, 0x4e));
    zs = _mm512_add_epi32(zs, _mm512_shuffle_i32x4(zs, zs, 0xb1));
    vf_store(u, f.u);
    if (t == KV_Q4) _mm512_storeu_si512((void *)z, _mm512_slli_epi32(zs, 3));
}
#endif

/* Per 64 keys, per 4 rows: the rows' P rounded (P16_ROW; q4_0, q8_0: a row a block), then column
 * passes of 16 G columns (G = 4 / rows, 3 rows 1, on AVX2: 8 accumulators;
 * twice that on the 16-lane tables, one register a group: 8 of 32, and
 * three or four rows 4 groups: 12 or 16 of 32, the V pairs' codes read in
 * a quarter of the passes: Zen 5, the kernel alone at four rows, int8 3.7
 * -> 3.3 ns a key, int4 4.0 -> 3.85 against two groups; the decode step at
 * three rows in cache 0.82x (int8), 0.84x (int4), 0.81x (q4_0) against one
 * group: zen5/pvi-three-rows-ab), the V rows read from L1 after the first */
#define PVI_G (VL / 8)
#define PVI_G4 (VL == 16 ? 4 : 1)
INLINE void pvi_body(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                     float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, int t) {
    size_t vs = attn_storage_bytes((attn_dtype)t, ldv), ps = attn_storage_bytes((attn_dtype)t, ldpre);
    int64_t pb = (int64_t)attn_storage_bytes((attn_dtype)t, wpre), half = Dv / 2;
    int16_t q[16][66];
    float u[16];
    int32_t z[16];
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t nb = n - j0 < 64 ? n - j0 : 64;
        const uint8_t *Vb = (const uint8_t *)V + (size_t)j0 * vs;
        for (int64_t r0 = 0; r0 < R; r0 += 4) {
            int64_t nr = R - r0 < 4 ? R - r0 : 4, G = nr == 1 ? 4 * PVI_G : nr == 2 ? 2 * PVI_G : PVI_G4;
            int64_t c0 = 0;
            for (int64_t r = 0; !PVI_BLK(t) && r < nr; r++) u[4 * r] = P16_ROW(P + (r0 + r) * ldp + j0, nb, q[4 * r]);
            float *o = O + r0 * ldo;
            /* the next rows' prefetches: over the first pass, or where a row spans two lines or more and the
             * first two passes are whole, over both, half the rows in each (spread over two passes, then one
             * row of each key pair in each, against all in the first: Zen 4, from memory, one thread, the step
             * over int8 1.22x the GB/s at four rows, 1.29x at two, 1.16x on the avx2 table; q8_0 1.11x; rows
             * of one line, int4 and q4_0, 0.97-0.98x: zen4/pvi-prefetch-ab) */
            int spread = pb >= 128 && Dv >= 32 * G;
            for (; c0 < Dv; c0 += 16 * G) {
                if (c0 + 16 * G > Dv) G = 1;
                /* the second pass prefetches the rows from the middle (an odd nb's last row: none) */
                int second = spread && c0 == 16 * G;
                int pw = c0 == 0 ? (spread ? 1 : 3) : second ? 1 : 0; /* rows a key pair: pvi_keys */
                const char *pp = pre && r0 == 0 && pw ? (const char *)pre + (size_t)(j0 + second * nb / 2) * ps : NULL;
#if VL == 16
                if (PVI_LANES(t) && c0 % 128 == 0 && nr == 1) /* once four blocks (their passes reuse them) */
                    pvi_blk_lanes1(P + r0 * ldp + j0, Vb, vs, nb, c0 / 32, Dv / 32, q, u, z, t);
                else if (PVI_LANES(t) && c0 % 128 == 0)
                    pvi_blk_lanes(P + r0 * ldp + j0, ldp, nr, Vb, vs, nb, c0 / 32, Dv / 32, q, u, z, t);
#else
                if (PVI_BLK(t) && c0 % 32 == 0) /* once a block (its second pass of 16 columns reuses them) */
                    pvi_blk_weights(P + r0 * ldp + j0, ldp, nr, Vb, vs, nb, c0, G, q, u, z, t);
#endif
                if (G == 1 && nr == 4) /* the columns left */
                    pvi_pass(q, u, z, 4, 1, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (G == 1 && nr == 3)
                    pvi_pass(q, u, z, 3, 1, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (G == 1 && nr == 2)
                    pvi_pass(q, u, z, 2, 1, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (G == 1 && nr == 1)
                    pvi_pass(q, u, z, 1, 1, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (nr == 3)
                    pvi_pass(q, u, z, 3, PVI_G4, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (nr == 4)
                    pvi_pass(q, u, z, 4, PVI_G4, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else if (nr == 2)
                    pvi_pass(q, u, z, 2, 2 * PVI_G, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
                else
                    pvi_pass(q, u, z, 1, 4 * PVI_G, Vb, vs, nb, o, ldo, c0, half, pp, ps, pb, pw, t);
            }
        }
    }
}

static void pv_rows_i16(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                        float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype vt) {
    if (vt == KV_U8)
        pvi_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_U8);
    else if (vt == KV_Q4)
        pvi_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_Q4);
    else if (vt == KV_Q8)
        pvi_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_Q8);
    else
        pvi_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_U4);
}

static void qk_rows_x(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                      int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind) {
    if (kind == KV_F16)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_F16);
    else if (kind == KV_BF16)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_BF16);
    else if (kind == KV_E4M3) { /* the values times 2^-8 (kq_ld): the scores times 256, exact */
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_E4M3);
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < n; j++) S[r * lds + j] *= 256.0f;
    } else if (kind == KV_E5M2)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_E5M2);
    else if (kind == KV_U8)
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_U8);
    else
        qk_body(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, KV_Q8);
}

static void pv_rows_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                      float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind) {
    if (kind == KV_F16)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_F16);
    else if (kind == KV_BF16)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_BF16);
    else if (kind == KV_E4M3)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_E4M3);
    else if (kind == KV_E5M2)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_E5M2);
    else if (kind == KV_U8)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_U8);
    else if (kind == KV_U4)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_U4);
    else if (kind == KV_Q4)
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_Q4);
    else
        pv_body(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, KV_Q8);
}

/* ---- the serving formats' rows as float32 (kv_rows): 8 values at a time,
 * each as attn_st_load_row computes it (base/storage.h, quant.h): the same
 * bits (NaN payloads aside) ---- */

/* element e of a row of n of type t, as attn_st_load_row reads it (the
 * vector loops' tails) */
INLINE float kv_elem_f32(const void *row, int64_t n, int64_t e, attn_dtype t, const float *par) {
    float c = t == ATTN_DTYPE_KV_INT4 ? (float)attn_q4a_code(row, n, e) : attn_storage_of(t)->get(row, e);
    return t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2 ? c * par[0] : fmaf(c, par[0], par[1]);
}

/* 8 values of a row of type t from byte p (int4: the low or high nibbles), scaled */
INLINE __m256 kv_x8(const uint8_t *p, attn_dtype t, int hi, __m256 s, __m256 z) {
    if (t == ATTN_DTYPE_FP8_E4M3) return _mm256_mul_ps(e4m3x8(p), s);
    if (t == ATTN_DTYPE_FP8_E5M2) return _mm256_mul_ps(e5m2x8(p), s);
    if (t == ATTN_DTYPE_KV_INT8) return _mm256_fmadd_ps(_mm256_cvtepi32_ps(u8x8(p)), s, z);
    return _mm256_fmadd_ps(nib8(p, hi), s, z);
}

/* one row of n values of type t into d (par: its scale or (scale, zero));
 * t a constant where it inlines */
INLINE void kv_row_f32(const void *row, int64_t n, attn_dtype t, const float *par, float *d) {
    const uint8_t *r = row;
#if VL == 16 && !defined(ATTN_VEC_SIMDE)
    if (t == ATTN_DTYPE_Q4_0) { /* a block's codes looked up among its 16 values (q - 8) d (q4_raw2) */
        const __m512 v = q4_tab();
        for (int64_t i = 0; i < n; i += ATTN_Q4_BLOCK, r += ATTN_Q4_BYTES) {
            uint16_t dh;
            memcpy(&dh, r, 2);
            __m512 x[2];
            q4_lut2(r + 2, _mm512_mul_ps(v, _mm512_set1_ps(half_to_float(dh))), x);
            _mm512_storeu_ps(d + i, x[0]), _mm512_storeu_ps(d + i + 16, x[1]);
        }
        return;
    }
#endif
    if (t == ATTN_DTYPE_Q4_0) { /* per block: (q - 8) d, q's low nibbles first */
        for (int64_t i = 0; i < n; i += ATTN_Q4_BLOCK, r += ATTN_Q4_BYTES) {
            uint16_t dh;
            memcpy(&dh, r, 2);
            __m256 sc = _mm256_set1_ps(half_to_float(dh)), eight = _mm256_set1_ps(8.0f);
            for (int h = 0; h < 4; h++)
                _mm256_storeu_ps(d + i + 8 * h,
                                 _mm256_mul_ps(_mm256_sub_ps(nib8(r + 2 + 8 * (h & 1), h >> 1), eight), sc));
        }
        return;
    }
    __m256 s = _mm256_set1_ps(par[0]), z = _mm256_set1_ps(par[1]);
    /* int4: element i in byte i's low nibble for i < n / 2, else in byte i - n / 2's high one */
    int64_t h = t == ATTN_DTYPE_KV_INT4 ? n / 2 : n, i = 0;
    for (; (t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2) && i + 16 <= h; i += 16) {
        __m256 x[2];
        fp8_pair(r + i, t, x);
        _mm256_storeu_ps(d + i, _mm256_mul_ps(x[0], s)), _mm256_storeu_ps(d + i + 8, _mm256_mul_ps(x[1], s));
    }
    for (; i + 8 <= h; i += 8) _mm256_storeu_ps(d + i, kv_x8(r + i, t, 0, s, z));
    for (; i < h; i++) d[i] = kv_elem_f32(row, n, i, t, par);
    for (; t == ATTN_DTYPE_KV_INT4 && i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, kv_x8(r + i - h, t, 1, s, z));
    for (; i < n; i++) d[i] = kv_elem_f32(row, n, i, t, par);
}

/* the rows, one loop per type; the row KV_PF rows ahead prefetched */
#define KV_PF 8
#define KV_ROWS_OF(T)                                                                                                  \
    for (int64_t j = 0; j < nb; j++) {                                                                                 \
        const char *row = (const char *)src + attn_storage_bytes(T, j * ld);                                           \
        for (size_t o = 0; o < attn_storage_bytes(T, n); o += 64)                                                      \
            _mm_prefetch(row + attn_storage_bytes(T, KV_PF * ld) + o, _MM_HINT_T0);                                    \
        kv_row_f32(row, n, T, par + 2 * j * pld, dst + j * n);                                                         \
    }
static void kv_rows(const void *src, int64_t ld, int64_t nb, int64_t n, attn_dtype t, const float *par, int64_t pld,
                    float *dst) {
    switch (t) {
    case ATTN_DTYPE_FP8_E4M3: KV_ROWS_OF(ATTN_DTYPE_FP8_E4M3) break;
    case ATTN_DTYPE_FP8_E5M2: KV_ROWS_OF(ATTN_DTYPE_FP8_E5M2) break;
    case ATTN_DTYPE_KV_INT8: KV_ROWS_OF(ATTN_DTYPE_KV_INT8) break;
    case ATTN_DTYPE_KV_INT4: KV_ROWS_OF(ATTN_DTYPE_KV_INT4) break;
    default: KV_ROWS_OF(ATTN_DTYPE_Q4_0) break;
    }
}

/* ---- fp8 codes against bf16 operands (the math modes over fp8 caches:
 * kernels.h qk_rows_bf, pv_rows_bf). A code's 7 magnitude bits index two
 * 128-entry byte tables (fp8_bf_tab, above), the high and low bytes of its bf16 value (VPERMT2B,
 * 64 codes an instruction: VBMI), its sign joins the high byte, and
 * VDPBF16PS takes two products an instruction against bf16 q or P
 * (AVX512-BF16). Each product is exact in float32; fp8's values are normal
 * bf16 numbers (none for the instruction to flush). ------------------------- */
#if VL == 16 && defined(ATTN_FP8_DPBF16)
INLINE __m512bh bh_of(__m512i x) {
    __m512bh r;
    memcpy(&r, &x, sizeof r);
    return r;
}
/* 64 bytes from p, zeros past left (a row's last, partial block) */
INLINE __m512i bf_load_codes(const uint8_t *p, int64_t left) {
    if (left >= 64) return _mm512_loadu_si512(p);
    if (left <= 0) return _mm512_setzero_si512();
#ifdef ATTN_VEC_SIMDE /* no masked byte loads in SIMDe 0.7.4 */
    uint8_t t[64] = {0};
    for (int i = 0; i < (int)left; i++) t[i] = p[i];
    return _mm512_loadu_si512(t);
#else
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << left) - 1), p);
#endif
}
/* 32 bytes from p, zeros past left (bf_load_codes' half) */
INLINE __m256i bf_load_half(const uint8_t *p, int64_t left) {
    if (left >= 32) return _mm256_loadu_si256((const __m256i *)(const void *)p);
    if (left <= 0) return _mm256_setzero_si256();
#ifdef ATTN_VEC_SIMDE
    uint8_t t[32] = {0};
    for (int i = 0; i < (int)left; i++) t[i] = p[i];
    return _mm256_loadu_si256((const __m256i *)(const void *)t);
#else
    return _mm256_maskz_loadu_epi8((__mmask32)((1u << left) - 1), p);
#endif
}
/* Q K^T over fp8 or bf16 keys, from three rows over fp8 and eight over bf16 (qk_bf_rows): two keys a vector
 * (KV 2), one in each 256-bit half. An accumulator's lanes 0-7 sum one key's products, 8-15 the other's, so
 * that eight accumulators reduce to 16 scores in three levels of the transposing tree (vf_reduce8h), where a
 * key a vector (KV 1) took 16 to 16 in four (vf_reduce16); the query words stand in both halves. Zen 5, 128
 * keys in L1, D 128 (bench/int_kernels_ab.c; zen5/qk-bf-pairs-kernels): fp8 0.63-0.64x the time at three
 * rows, 0.82x at four, 0.97x at eight, bf16 0.82x at eight; decode from memory, T 65536, one thread
 * (zen5/qk-bf-pairs-ab): fp8 at four rows 1.07-1.11x the GB/s (two threads 1.11-1.12x), at three 1.15x, bf16
 * at eight 1.10x (two threads 1.05x). Below those rows the halves' lane inserts, spread over fewer rows' products,
 * cost what the reduction saves: fp8 at two rows and bf16 at four ran 0.98x and 0.99x from memory (alternating
 * rounds in both orders). */
/* q's word orders for fp8 codes ([0]) and bf16 keys ([1]), a key a vector ([.][0]) or two ([.][1]): each a block
 * of 64 words (two vectors) from 64 / KV columns. fp8_bf_words leaves a 128-bit lane's codes 0-7 in the first
 * vector, 8-15 in the second (the byte interleaves' order: in-lane, where code order took two byte permutes a
 * block of every key); bf16 words are in order, 32 or two keys' 16 a vector */
static const uint16_t bf_word_ord[2][2][64] __attribute__((aligned(64))) = {
    {{0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
      38, 39, 48, 49, 50, 51, 52, 53, 54, 55, 8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26, 27,
      28, 29, 30, 31, 40, 41, 42, 43, 44, 45, 46, 47, 56, 57, 58, 59, 60, 61, 62, 63},
     {0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23, 0,  1,  2,  3,  4,  5,
      6,  7,  16, 17, 18, 19, 20, 21, 22, 23, 8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26, 27,
      28, 29, 30, 31, 8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
      22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43,
      44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63},
     {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 0,  1,  2,  3,  4,  5,
      6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
      28, 29, 30, 31, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31}}};
/* 64 codes x as bf16 words, 32 a vector, in bf_word_ord's order */
INLINE void fp8_bf_words(__m512i x, const fp8_lut *l, __m512bh *w0, __m512bh *w1) {
    __m512i hi, lo;
    fp8_bf_bytes(x, l, &hi, &lo);
    *w0 = bh_of(_mm512_unpacklo_epi8(lo, hi)), *w1 = bh_of(_mm512_unpackhi_epi8(lo, hi));
}
/* NR rows of D bf16 values (ldq apart) into qp (ldp apart) in ord's order (bf_word_ord): columns c .. c + 64 /
 * KV in words KV c .. KV c + 63, zeros past D */
INLINE void bf_words_perm(const uint16_t *Q, int64_t ldq, int NR, int64_t D, uint16_t *qp, int64_t ldp, int KV,
                          const uint16_t *ord) {
    __m512i o0 = _mm512_load_si512(ord), o1 = _mm512_load_si512(ord + 32);
    for (int r = 0; r < NR; r++)
        for (int64_t c = 0; c < D; c += 64 / KV) {
            const uint8_t *q = (const uint8_t *)(Q + r * ldq + c);
            __m512i x0 = bf_load_codes(q, 2 * (D - c)), x1 = bf_load_codes(q + 64, 2 * (D - c) - 64);
            _mm512_store_si512(qp + r * ldp + KV * c, _mm512_permutex2var_epi16(x0, o0, x1));
            _mm512_store_si512(qp + r * ldp + KV * c + 32, _mm512_permutex2var_epi16(x0, o1, x1));
        }
}
/* two keys' 32 bytes from offset o (zeros past left: none for a key past nk), one a half */
INLINE __m512i bf_load_pair(const uint8_t *k0, const uint8_t *k1, int64_t o, int64_t left, int in0, int in1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(bf_load_half(k0 + o, in0 ? left : 0)),
                              bf_load_half(k1 + o, in1 ? left : 0), 1);
}
/* at KV 2, NP 2: vf_reduce8h's lane of row 4 g + o / 4's key o % 4 (8 (rl / 2) + 4 h + 2 (rl % 2) + p, key
 * p + 2 h) */
static const int32_t bf_np2_ord[16]
    __attribute__((aligned(64))) = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
/* S rows r0 .. r0 + NR of keys j .. j + nk: s (q . k) over D columns, added to S where acc (a later chunk of
 * columns); qp as bf_words_perm leaves it (NR rows ldp apart). NP slots a step, KV keys a slot (nk <= KV NP;
 * NR NP <= 16; KV 2: NR >= 2, NP 2 or 4, slot p keys p and p + NP). */
INLINE void qk_bf_step(const uint16_t *qp, int64_t ldp, int NR, int KV, int NP, int64_t D, const uint8_t *k, size_t ks,
                       int64_t nk, const fp8_lut *l, float s, float *S, int64_t lds, int acc, int bf) {
    vf a[16];
    for (int i = 0; i < 16; i++) a[i] = vf_zero();
    for (int64_t c = 0; c < D; c += 64 / KV) {
        for (int p = 0; p < NP; p++) {
            /* the slot's rows (a key past nk: the step's first row's pointer, never read) */
            const uint8_t *p0 = p < nk ? k + p * ks : k, *p1 = KV == 2 && p + NP < nk ? k + (p + NP) * ks : k;
            const uint8_t *p0c = p0 + (bf ? 2 : 1) * c;
            const uint16_t *qb = qp + KV * c;
            if (KV == 2 && NR * NP > 8) /* q read again for each slot, a product's memory operand (kept in
                                           registers beside 16 accumulators, it spilled) */
                __asm__("" : "+r"(qb));
            int64_t left = bf ? 2 * (D - c) : D - c; /* bytes of a key from column c */
            __m512bh w0, w1;
            if (KV == 1 && bf) /* bf16 keys: the words as stored */
                w0 = bh_of(p < nk ? bf_load_codes(p0c, left) : _mm512_setzero_si512()),
                w1 = bh_of(p < nk ? bf_load_codes(p0c + 64, left - 64) : _mm512_setzero_si512());
            else if (KV == 1)
                fp8_bf_words(p < nk ? bf_load_codes(p0c, left) : _mm512_setzero_si512(), l, &w0, &w1);
            else if (bf)
                w0 = bh_of(bf_load_pair(p0, p1, 2 * c, left, p < nk, p + NP < nk)),
                w1 = bh_of(bf_load_pair(p0, p1, 2 * c + 32, left - 32, p < nk, p + NP < nk));
            else
                fp8_bf_words(bf_load_pair(p0, p1, c, left, p < nk, p + NP < nk), l, &w0, &w1);
            for (int r = 0; r < NR; r++) {
                const uint16_t *q = qb + r * ldp;
                int i = r * NP + p;
                a[i] = _mm512_dpbf16_ps(a[i], w0, bh_of(_mm512_load_si512(q)));
                a[i] = _mm512_dpbf16_ps(a[i], w1, bh_of(_mm512_load_si512(q + 32)));
            }
        }
        for (int i = 0; i < NR * NP; i++) KEEP_REG(a[i]); /* the accumulators, not the q values, in registers */
    }
    float sum[32];
    if (KV == 1) { /* acc i's sum in lane i */
        vf v = vf_mul(vf_reduce16(a), vf_set1(s));
        if (NR == 4 && nk == 4 && !acc) {
            vf_store_lanes4(S, lds, v, 4);
            return;
        }
        vf_store(sum, v);
        for (int r = 0; r < NR; r++)
            for (int u = 0; u < nk; u++) S[r * lds + u] = (acc ? S[r * lds + u] : 0.0f) + sum[r * NP + u];
        return;
    }
    const int ng = (NR * NP + 7) / 8; /* groups of 8 accumulators (the last padded with zeros) */
    vf v[2];
    for (int g = 0; g < ng; g++) v[g] = vf_mul(vf_reduce8h(a + 8 * g), vf_set1(s));
    /* acc i's half h (key p + NP h) in lane 16 (i / 8) + 8 (i % 8 / 4) + 4 h + i % 4 */
    if (NP == 4 && nk == 8 && !acc) { /* rows 2 g and 2 g + 1 in v[g]'s two halves, their keys in order */
        for (int r = 0; r < NR; r++) _mm256_storeu_ps(S + r * lds, vf_half(v[r / 2], r % 2));
        return;
    } else if (NP == 2 && nk == 4 && !acc) { /* rows 4 g .. 4 g + 3 of v[g], each in a 128-bit lane after a permute */
        for (int g = 0; g < ng; g++)
            vf_store_lanes4(S + 4 * g * lds, lds, _mm512_permutexvar_ps(_mm512_load_si512(bf_np2_ord), v[g]), 4);
        return;
    }
    for (int g = 0; g < ng; g++) vf_store(sum + 16 * g, v[g]);
    for (int r = 0; r < NR; r++)
        for (int p = 0, i = r * NP; p < NP; p++, i++)
            for (int h = 0; h < 2; h++) {
                int64_t u = p + h * NP;
                float x = sum[16 * (i / 8) + 8 * (i % 8 / 4) + 4 * h + i % 4];
                if (u < nk) S[r * lds + u] = (acc ? S[r * lds + u] : 0.0f) + x;
            }
}

/* NR rows, their columns in chunks of up to QB_MAX (one for every head width up to it) permuted into qp, a
 * later chunk's scores added to the first's */
#define QB_MAX 1024
INLINE void qk_bf_chunks(uint16_t *qp, int NR, int KV, int64_t D, const uint16_t *Q, int64_t ldq, const uint8_t *K,
                         size_t ks, int64_t n, float s, float *S, int64_t lds, const uint8_t *pre, size_t ps,
                         int64_t pb, int t, int bf) {
    /* slots a step: up to 16 accumulators (KV 1: 8 at one or two rows, 16 beside the table spilled) */
    const int NP = KV == 2 ? (NR <= 4 ? 4 : 2) : NR <= 2 ? 8 / NR : 16 / NR, NK = KV * NP;
    fp8_lut l = fp8_lut_of(t);
    for (int64_t c0 = 0; c0 < D; c0 += QB_MAX) {
        int64_t w = D - c0 < QB_MAX ? D - c0 : QB_MAX, ldp = KV * ((w + 64 / KV - 1) / (64 / KV) * (64 / KV));
        const uint8_t *kc = K + (bf ? 2 : 1) * c0;
        bf_words_perm(Q + c0, ldq, NR, w, qp, ldp, KV, bf_word_ord[bf][KV - 1]);
        for (int64_t j = 0; j < n; j += NK) {
            for (int64_t u = 0; pre && c0 == 0 && u < NK; u++)
                for (int64_t o = 0; o < pb; o += 64) __builtin_prefetch(pre + (size_t)(j + u) * ps + o, 0, ATTN_PF_LOC);
            if (j + NK <= n) /* whole steps: nk a constant */
                qk_bf_step(qp, ldp, NR, KV, NP, w, kc + j * ks, ks, NK, &l, s, S + j, lds, c0 > 0, bf);
            else
                qk_bf_step(qp, ldp, NR, KV, NP, w, kc + j * ks, ks, n - j, &l, s, S + j, lds, c0 > 0, bf);
        }
    }
}
/* two keys a vector from three rows over fp8, from eight over bf16 (above); q's buffer as large as the layout
 * needs (with twice the stack a call for every row count, bf16's decode step at four rows took 1.05x the time
 * from memory: zen5/qk-bf-pairs-ab, sides v2 and v3) */
INLINE void qk_bf_rows(const uint16_t *Q, int64_t ldq, int NR, int64_t D, const uint8_t *K, size_t ks, int64_t n,
                       float s, float *S, int64_t lds, const uint8_t *pre, size_t ps, int64_t pb, int t, int bf) {
    if (NR >= (bf ? 8 : 3)) {
        uint16_t qp[8 * 2 * QB_MAX] __attribute__((aligned(64)));
        qk_bf_chunks(qp, NR, 2, D, Q, ldq, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    } else {
        uint16_t qp[8 * QB_MAX] __attribute__((aligned(64)));
        qk_bf_chunks(qp, NR, 1, D, Q, ldq, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    }
}

/* qk_bf_rows at nr rows (a constant at each call) */
INLINE void qk_bf_nr(const uint16_t *q, int64_t ldq, int64_t nr, int64_t D, const uint8_t *K, size_t ks, int64_t n,
                     float s, float *S, int64_t lds, const uint8_t *pre, size_t ps, int64_t pb, int t, int bf) {
    if (nr == 8)
        qk_bf_rows(q, ldq, 8, D, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    else if (nr == 4)
        qk_bf_rows(q, ldq, 4, D, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    else if (nr == 3)
        qk_bf_rows(q, ldq, 3, D, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    else if (nr == 2)
        qk_bf_rows(q, ldq, 2, D, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
    else
        qk_bf_rows(q, ldq, 1, D, K, ks, n, s, S, lds, pre, ps, pb, t, bf);
}
/* the rows in groups of 8 (each key converted once for them), then 4, and the 1-3 left */
INLINE void qk_bf_groups(const uint16_t *q, int64_t ldq, int64_t R, int64_t D, const uint8_t *K, size_t ks, int64_t n,
                         float *S, int64_t lds, float s, const uint8_t *pre, size_t ps, int64_t pb, int t, int bf) {
    for (int64_t r0 = 0, nr; r0 < R; r0 += nr) {
        nr = R - r0 >= 8 ? 8 : R - r0 < 4 ? R - r0 : 4;
        const uint8_t *p = r0 == 0 ? pre : NULL;
        if (HEAD128(D)) /* the common head width a constant: no partial block, the blocks' loop unrolled */
            qk_bf_nr(q + r0 * ldq, ldq, nr, 128, K, ks, n, s, S + r0 * lds, lds, p, ps, pb, t, bf);
        else
            qk_bf_nr(q + r0 * ldq, ldq, nr, D, K, ks, n, s, S + r0 * lds, lds, p, ps, pb, t, bf);
    }
}

/* bf16 rows, the words in order. 128 keys in L1, D 128, against
 * qk_rows_x's float32 products on the same values at 1 / 2 / 4 / 8 rows:
 * 0.41-0.78x the time on 256-bit units (Zen 4: zen4/decode-bf16-rows-ab),
 * 0.22-0.54x, 0.31-0.34x, 0.42-0.54x, 0.70-0.86x on full-width ones (Zen 5:
 * zen5/bf16-qk-kernels; an earlier form, before the words were read in
 * order, had measured 14.3 ns a key against 11.0 at four rows there).
 * A function of its own: inlined beside fp8's, fp8's kernel took 1.2-1.4x
 * its time at 4 and 8 rows. */
static __attribute__((noinline)) void qk_rows_bf16(const void *Q, int64_t ldq, int64_t R, int64_t D, const void *K,
                                                   int64_t ldk, int64_t n, float *S, int64_t lds, float s,
                                                   const void *pre, int64_t ldpre, int64_t wpre) {
    qk_bf_groups(Q, ldq, R, D, K, 2 * (size_t)ldk, n, S, lds, s, pre, 2 * (size_t)ldpre, 2 * wpre, KV_BF16, 1);
}
/* fp8 rows (or bf16: qk_rows_bf16) */
static void qk_rows_bf(const void *Q, int64_t ldq, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n,
                       float *S, int64_t lds, float s, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind) {
    if (kind == KV_BF16)
        qk_rows_bf16(Q, ldq, R, D, K, ldk, n, S, lds, s, pre, ldpre, wpre);
    else
        qk_bf_groups(Q, ldq, R, D, K, (size_t)ldk, n, S, lds, s, pre, (size_t)ldpre, wpre, kind, 0);
}

/* P rows (n <= 2 PBN keys, bf16 values) as bf16 pairs of keys (2i, 2i + 1): pp rows PBN pairs apart */
#define PBN 128
INLINE void pv_bf_pairs(const float *P, int64_t ldp, int64_t nr, int64_t n, uint32_t *pp) {
    uint16_t ix[32];
    for (int i = 0; i < 32; i++) ix[i] = (uint16_t)(2 * i + 1); /* each float's high half */
    __m512i idx = _mm512_loadu_si512(ix);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t j = 0; j < n; j += 32) {
            __mmask16 m0 = vm_tail(n - j < 16 ? n - j : 16), m1 = vm_tail(n - j - 16 < 0    ? 0
                                                                          : n - j - 16 < 16 ? n - j - 16
                                                                                            : 16);
            __m512i a = _mm512_castps_si512(vf_maskz_load(P + r * ldp + j, m0));
            __m512i b = _mm512_castps_si512(vf_maskz_load(P + r * ldp + j + 16, m1));
            _mm512_storeu_si512(pp + r * PBN + j / 2, _mm512_permutex2var_epi16(a, idx, b));
        }
}

/* O rows += s P V for NR rows over columns c0 .. c0 + 64 NC (up to Dv), key pairs j = 0, 2, .. < n:
 * accumulator q of a 64-column block holds, in 128-bit lane L, columns 16 L + 4 q + (0..3) */
INLINE void pv_bf_pass(const uint32_t *pp, int NR, int NC, const uint8_t *V, size_t vs, int64_t n, int64_t c0,
                       int64_t Dv, float *O, int64_t ldo, float s, const fp8_lut *l, const uint8_t *pre, size_t ps,
                       int t) {
    const int cb = t == KV_BF16 ? 2 : 1; /* bytes a value */
    vf a[4][8];
    for (int r = 0; r < NR; r++)
        for (int q = 0; q < 4 * NC; q++) a[r][q] = vf_zero();
    for (int64_t j = 0; j < n; j += 2) {
        for (int64_t u = 0; pre && u < 2; u++)
            for (int h = 0; h < NC * cb; h++)
                __builtin_prefetch(pre + (size_t)(j + u) * ps + cb * c0 + 64 * h, 0, ATTN_PF_LOC);
        for (int h = 0; h < NC; h++) {
            int64_t left = cb * (Dv - c0 - 64 * h);
            const uint8_t *v = V + (size_t)j * vs + cb * (c0 + 64 * h);
            __m512i x0 = bf_load_codes(v, left), x1 = j + 1 < n ? bf_load_codes(v + vs, left) : _mm512_setzero_si512();
            __m512i w[4];
            if (t == KV_BF16) { /* columns 0..31 and 32..63 of the two rows, interleaved in lanes */
                __m512i y0 = bf_load_codes(v + 64, left - 64);
                __m512i y1 = j + 1 < n ? bf_load_codes(v + vs + 64, left - 64) : _mm512_setzero_si512();
                w[0] = _mm512_unpacklo_epi16(x0, x1), w[1] = _mm512_unpackhi_epi16(x0, x1);
                w[2] = _mm512_unpacklo_epi16(y0, y1), w[3] = _mm512_unpackhi_epi16(y0, y1);
            } else {
                for (int g = 0; g < 2; g++) {
                    __m512i hi, lo;
                    fp8_bf_bytes(g ? _mm512_unpackhi_epi8(x0, x1) : _mm512_unpacklo_epi8(x0, x1), l, &hi, &lo);
                    w[2 * g] = _mm512_unpacklo_epi8(lo, hi), w[2 * g + 1] = _mm512_unpackhi_epi8(lo, hi);
                }
            }
            for (int r = 0; r < NR; r++) {
                __m512bh p = bh_of(_mm512_set1_epi32((int)pp[r * PBN + j / 2]));
                for (int q = 0; q < 4; q++) a[r][4 * h + q] = _mm512_dpbf16_ps(a[r][4 * h + q], bh_of(w[q]), p);
            }
        }
    }
    vf sv = vf_set1(s);
    for (int r = 0; r < NR; r++)
        for (int h = 0; h < NC; h++) { /* the 128-bit lanes transposed: block L of columns 16 L .. 16 L + 15 */
            vf *q = a[r] + 4 * h, u[4], out[4];
            if (t == KV_BF16) { /* accumulator q, lane L: columns 32 (q / 2) + 8 L + 4 (q % 2) + (0..3) */
                u[0] = vf_shuf128(q[0], q[1], 0x44), u[1] = vf_shuf128(q[0], q[1], 0xee);
                u[2] = vf_shuf128(q[2], q[3], 0x44), u[3] = vf_shuf128(q[2], q[3], 0xee);
                for (int i = 0; i < 4; i++) out[i] = vf_shuf128(u[i], u[i], 0xd8);
            } else
                vf_lanes_transpose(q, out);
            for (int L = 0; L < 4; L++) {
                int64_t col = c0 + 64 * h + 16 * L, left = Dv - col;
                if (left <= 0) break;
                vmask m = vm_tail(left < 16 ? left : 16);
                float *o = O + r * ldo + col;
                vf_mask_store(o, m, vf_fma(sv, out[L], vf_maskz_load(o, m)));
            }
        }
}

INLINE void pv_bf_rows(const uint32_t *pp, int NR, const uint8_t *V, size_t vs, int64_t n, int64_t Dv, float *O,
                       int64_t ldo, float s, const uint8_t *pre, size_t ps, int64_t wpre, int t) {
    fp8_lut l = fp8_lut_of(t);
    const int NC = NR <= 2 ? 2 : 1; /* one or two rows: 128 columns a pass (whole rows, as the prefetchers like) */
    for (int64_t c0 = 0; c0 < Dv; c0 += 64 * NC) {
        const uint8_t *p = pre && c0 < wpre ? pre : NULL;
        if (NC == 2 && Dv - c0 <= 64)
            pv_bf_pass(pp, NR, 1, V, vs, n, c0, Dv, O, ldo, s, &l, p, ps, t);
        else
            pv_bf_pass(pp, NR, NC, V, vs, n, c0, Dv, O, ldo, s, &l, p, ps, t);
    }
}

/* 256 keys at a time (P's pairs on the stack), the rows in groups of 4; t a constant where it inlines */
INLINE void pv_bf_groups(const float *P, int64_t ldp, int64_t R, const uint8_t *V, size_t vs, int64_t n, int64_t Dv,
                         float *O, int64_t ldo, float s, const uint8_t *pre, size_t ps, int64_t wpre, int t) {
    uint32_t pp[4 * PBN] __attribute__((aligned(64)));
    for (int64_t j0 = 0; j0 < n; j0 += 2 * PBN)
        for (int64_t r0 = 0; r0 < R; r0 += 4) {
            int64_t nr = R - r0 < 4 ? R - r0 : 4, nj = n - j0 < 2 * PBN ? n - j0 : 2 * PBN;
            const uint8_t *vj = V + (size_t)j0 * vs, *pj = r0 == 0 && pre ? pre + (size_t)j0 * ps : NULL;
            float *o = O + r0 * ldo;
            pv_bf_pairs(P + r0 * ldp + j0, ldp, nr, nj, pp);
            if (nr == 4)
                pv_bf_rows(pp, 4, vj, vs, nj, Dv, o, ldo, s, pj, ps, wpre, t);
            else if (nr == 3)
                pv_bf_rows(pp, 3, vj, vs, nj, Dv, o, ldo, s, pj, ps, wpre, t);
            else if (nr == 2)
                pv_bf_rows(pp, 2, vj, vs, nj, Dv, o, ldo, s, pj, ps, wpre, t);
            else
                pv_bf_rows(pp, 1, vj, vs, nj, Dv, o, ldo, s, pj, ps, wpre, t);
        }
}

static void pv_rows_bf(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                       float *O, int64_t ldo, float s, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind) {
    size_t vs = attn_storage_bytes(kind, ldv), ps = attn_storage_bytes(kind, ldpre);
    if (kind == KV_BF16)
        pv_bf_groups(P, ldp, R, V, vs, n, Dv, O, ldo, s, pre, ps, wpre, KV_BF16);
    else
        pv_bf_groups(P, ldp, R, V, vs, n, Dv, O, ldo, s, pre, ps, wpre, kind);
}
#define QK_ROWS_BF qk_rows_bf
#define PV_ROWS_BF pv_rows_bf
#define FP8_MATH_TYPES ATTN_MATH_TYPES_FP8
#define FP8_MATH_PRODUCTS ATTN_MATH_PRODUCTS_FP8
/* fp8 and bf16 keys (decode takes a bf16 K's through it from DEC_BF16_ROWS rows; the test table on any host) */
#define QK_BF_TYPES (FP8_MATH_TYPES | 1u << KV_BF16)
#else
#define QK_ROWS_BF NULL
#define PV_ROWS_BF NULL
#define FP8_MATH_TYPES 0u
#define FP8_MATH_PRODUCTS ATTN_MATH_PRODUCTS_Q8
#define QK_BF_TYPES 0u
#endif

/* ---- decode's int8 / int4 rows' (scale, zero) (kernels.h rowpar_*):
 * base/quant.h's loops with the pairs read in place, each step's pairs
 * split into scales and zeros in registers and their rule checked beside
 * (where a split into two arrays first took its own pass: Zen 5, the passes
 * 0.70-0.77x the time at 1-8 rows, the four-row step over int4 and int8 on
 * chip 1.02-1.03x the GB/s, from memory inside the noise:
 * zen5/decode-rowpar-inplace-ab); each key's products and sums in quant.h's
 * order on every table (the same bits): sixteen keys a step in 512 bits
 * where the table has them, eight in 256, the tail in quant.h's loops ---- */
/* eight pairs at par as scales *s and zeros *z; the keys failing the rule (all ones) */
INLINE __m256 rp_pairs8(const float *par, __m256 lim, __m256 *s, __m256 *z) {
    __m256 a = _mm256_loadu_ps(par), b = _mm256_loadu_ps(par + 8);
    /* (s0 s1 s4 s5 | s2 s3 s6 s7), the 64-bit pairs then in order */
    __m256d sd = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), zd = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd));
    *s = _mm256_castpd_ps(_mm256_permute4x64_pd(sd, 0xd8)), *z = _mm256_castpd_ps(_mm256_permute4x64_pd(zd, 0xd8));
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(255.0f), _mm256_and_ps(*s, abs)), _mm256_and_ps(*z, abs));
    return _mm256_cmp_ps(t, lim, _CMP_NLE_UQ); /* not t <= lim: NaN too */
}
#if VL == 16 && !defined(ATTN_VEC_SIMDE)
#define RP_W16 1
/* sixteen pairs likewise; the keys failing the rule */
INLINE __mmask16 rp_pairs16(const float *par, __m512 lim, __m512 *s, __m512 *z) {
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    __m512 a = _mm512_loadu_ps(par), b = _mm512_loadu_ps(par + 16);
    *s = _mm512_permutex2var_ps(a, ev, b),
    *z = _mm512_permutex2var_ps(a, _mm512_add_epi32(ev, _mm512_set1_epi32(1)), b);
    __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(255.0f), _mm512_abs_ps(*s)), _mm512_abs_ps(*z));
    return _mm512_cmp_ps_mask(t, lim, _CMP_NLE_UQ);
}
#endif
static int rowpar_scores(const float *par, int64_t nb, float off, float lim, int64_t R, const float *qs,
                         float *restrict S, int64_t lds) {
    int64_t j = 0;
    int bad = 0;
#ifdef RP_W16
    __mmask16 bw = 0;
    for (; j + 16 <= nb; j += 16) {
        __m512 sv, zv;
        bw |= rp_pairs16(par + 2 * j, _mm512_set1_ps(lim), &sv, &zv);
        if (off != 0.0f) zv = _mm512_add_ps(zv, _mm512_mul_ps(_mm512_set1_ps(off), sv));
        for (int64_t r = 0; r < R; r++) {
            float *s = S + r * lds + j;
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s), sv);
            _mm512_storeu_ps(s, _mm512_add_ps(v, _mm512_mul_ps(zv, _mm512_set1_ps(qs[r]))));
        }
    }
    bad = bw != 0;
#endif
    __m256 bv = _mm256_setzero_ps();
    for (; j + 8 <= nb; j += 8) {
        __m256 sv, zv;
        bv = _mm256_or_ps(bv, rp_pairs8(par + 2 * j, _mm256_set1_ps(lim), &sv, &zv));
        if (off != 0.0f) zv = _mm256_add_ps(zv, _mm256_mul_ps(_mm256_set1_ps(off), sv));
        for (int64_t r = 0; r < R; r++) {
            float *s = S + r * lds + j;
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s), sv);
            _mm256_storeu_ps(s, _mm256_add_ps(v, _mm256_mul_ps(zv, _mm256_set1_ps(qs[r]))));
        }
    }
    bad |= _mm256_movemask_ps(bv) != 0;
    return attn_rowpar_scores(par + 2 * j, nb - j, off, lim, R, qs, S + j, lds) && !bad;
}
/* four rows at a time: their sums in registers, each step's pairs split once for them */
static int rowpar_p(const float *par, int64_t nb, float lim, int64_t R, const float *restrict S, int64_t lds,
                    float *restrict P, float *restrict wr) {
    if (R <= 0) return attn_rowpar_ok(par, nb, lim); /* no row to read the pairs beside */
    int64_t n8 = nb & ~(int64_t)7;
    int bad = 0;
    for (int64_t r0 = 0; r0 < R; r0 += 4) {
        int64_t rn = R - r0 < 4 ? R - r0 : 4;
        const float *s0 = S + r0 * lds;
        float *p0 = P + r0 * lds;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        int64_t j = 0;
#ifdef RP_W16 /* the products 16 wide, the sums in the 8-lane order */
        __mmask16 bw = 0;
        for (; j + 16 <= nb; j += 16) {
            __m512 sv, zv;
            bw |= rp_pairs16(par + 2 * j, _mm512_set1_ps(lim), &sv, &zv);
            for (int u = 0; u < 4 && u < rn; u++) {
                __m512 v = _mm512_loadu_ps(s0 + u * lds + j), pz = _mm512_mul_ps(v, zv);
                acc[u] = _mm256_add_ps(acc[u], _mm512_castps512_ps256(pz));
                acc[u] = _mm256_add_ps(acc[u], _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pz), 1)));
                _mm512_storeu_ps(p0 + u * lds + j, _mm512_mul_ps(v, sv));
            }
        }
        bad |= bw != 0;
#endif
        __m256 bv = _mm256_setzero_ps();
        for (; j < n8; j += 8) {
            __m256 sv, zv;
            bv = _mm256_or_ps(bv, rp_pairs8(par + 2 * j, _mm256_set1_ps(lim), &sv, &zv));
            for (int u = 0; u < 4 && u < rn; u++) {
                __m256 v = _mm256_loadu_ps(s0 + u * lds + j);
                acc[u] = _mm256_add_ps(acc[u], _mm256_mul_ps(v, zv));
                _mm256_storeu_ps(p0 + u * lds + j, _mm256_mul_ps(v, sv));
            }
        }
        bad |= _mm256_movemask_ps(bv) != 0;
        for (int u = 0; u < rn; u++) {
            const float *s = s0 + u * lds;
            float w[8], *p = p0 + u * lds;
            _mm256_storeu_ps(w, acc[u]);
            for (int64_t i = n8; i < nb; i++) w[0] += s[i] * par[2 * i + 1], p[i] = s[i] * par[2 * i];
            wr[r0 + u] = attn_rowpar_sum8(w);
        }
    }
    return attn_rowpar_ok(par + 2 * n8, nb - n8, lim) && !bad; /* the tail's pairs */
}
static void add_row(float *x, int64_t n, float a) {
    vf av = vf_set1(a);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) vf_store(x + i, vf_add(vf_load(x + i), av));
    for (; i < n; i++) x[i] += a;
}

/* ---- the math modes' query rows as q8_0 blocks (kernels.h q8_row) ---- */

/* the largest |x| of n (a multiple of 8) floats as attn_q8_amax: an integer
 * maximum of the bits of |x| (a NaN's above every other) */
INLINE float q8r_amax(const float *x, int64_t n) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    for (int64_t i = 0; i < n; i += 8)
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i)), absm));
    m = _mm256_max_epu32(m, _mm256_permute2x128_si256(m, m, 1));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0x4e));
    m = _mm256_max_epu32(m, _mm256_shuffle_epi32(m, 0xb1));
    uint32_t b = (uint32_t)_mm256_cvtsi256_si32(m);
    float a;
    memcpy(&a, &b, 4);
    return a;
}
/* attn_q8_put's factors for a block's (or row's) largest |x| amax: vec 0 (a
 * NaN scale or an overflowing inverse) sends the block to base/half.h's loop */
typedef struct q8r_scale {
    float amax, id, dv;
    uint16_t dh;
    int bad, vec;
} q8r_scale;
INLINE q8r_scale q8r_scale_of(float amax) {
    q8r_scale f = {amax, 0.0f, 0.0f, 0, !(amax <= 65504.0f * 127.0f), 0};
    float d = amax / 127.0f;
    f.id = d > 0.0f ? 1.0f / d : 0.0f;
    f.vec = !f.bad && f.id <= FLT_MAX;
    if (f.vec) f.dh = attn_f32_to_f16(d), f.dv = attn_f16_to_f32(f.dh);
    return f;
}
/* attn_q8_put on one block of 32 with the factors f, and x the block's
 * values; *m the running integer maximum of their |bits|. Codes as
 * attn_q8_code_of: j = trunc(2 r), (j + sign j) / 2 = sign j ((|j| + 1) >> 1),
 * clamped to +-127 */
INLINE void q8r_block(float *x, const q8r_scale *f, unsigned char *o, __m256i *m) {
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    if (!f->vec) {
        attn_q8_put(x, ATTN_Q8_BLOCK, f->amax, f->bad, o);
        attn_st_load_q8(o, ATTN_Q8_BLOCK, x);
        for (int k = 0; k < 4; k++)
            *m = _mm256_max_epu32(*m, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(void *)(x + 8 * k)), absm));
        return;
    }
    memcpy(o, &f->dh, 2);
    const __m256i one = _mm256_set1_epi32(1), lim = _mm256_set1_epi32(127);
    __m256 iv = _mm256_set1_ps(f->id), two = _mm256_set1_ps(2.0f), dv = _mm256_set1_ps(f->dv);
    __m256i c[4];
    for (int k = 0; k < 4; k++) {
        __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), iv), two));
        __m256i s = _mm256_srai_epi32(j, 31), a = _mm256_srli_epi32(_mm256_add_epi32(_mm256_abs_epi32(j), one), 1);
        __m256i v = _mm256_sub_epi32(_mm256_xor_si256(a, s), s);
        c[k] = _mm256_max_epi32(_mm256_min_epi32(v, lim), _mm256_sub_epi32(_mm256_setzero_si256(), lim));
        __m256 y = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(c[k]));
        _mm256_storeu_ps(x + 8 * k, y);
        *m = _mm256_max_epu32(*m, _mm256_and_si256(_mm256_castps_si256(y), absm));
    }
    /* the packs leave dwords (c0 0..3, c1 0..3, c2, c3 | c0 4..7, ...): back in order */
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256((__m256i *)(void *)(o + 2),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
static float q8_row(float *x, int64_t n, attn_dtype t, void *dst) {
    unsigned char *o = dst;
    q8r_scale f = q8r_scale_of(t == ATTN_DTYPE_Q8_ROW ? q8r_amax(x, n) : 0.0f);
    __m256i m = _mm256_setzero_si256();
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK, o += ATTN_Q8_BYTES) {
        if (t != ATTN_DTYPE_Q8_ROW) f = q8r_scale_of(q8r_amax(x + b0, ATTN_Q8_BLOCK));
        q8r_block(x + b0, &f, o, &m);
    }
    float mv[8];
    _mm256_storeu_si256((__m256i *)(void *)mv, m);
    return q8r_amax(mv, 8);
}

const attn_kernel_table ATTN_SIMD_TABLE = {ATTN_SIMD_NAME,
                                           MR,
                                           VL,
                                           gemm,
                                           gemm_tn,
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
                                           (ATTN_SIMD_MATH_ROUNDS ? ATTN_MATH_TYPES_ALL : ATTN_MATH_TYPES_Q8) |
                                               FP8_MATH_TYPES,
                                           ATTN_SIMD_MATH_ROUNDS ? ATTN_MATH_PRODUCTS_EMULATED : FP8_MATH_PRODUCTS,
                                           GEMM32,
                                           GEMM32_TN,
                                           QK_ROWS_BF,
                                           PV_ROWS_BF,
                                           QK_BF_TYPES,
                                           rowpar_scores,
                                           rowpar_p,
                                           add_row,
                                           q8_row};
