/* The serving engines' KV formats (issue 35), scalar and exact, beside
 * half.h's 16-bit and q8_0 codecs: FP8 (e4m3fn and e5m2, one byte a value,
 * read as code value * scale), llama.cpp's q4_0 block, and LMDeploy's
 * per-token asymmetric int8 / int4 rows (x = q * scale + zero, q unsigned).
 * Every reader of a stored row goes through these (base/storage.h). */
#ifndef ATTN_QUANT_H
#define ATTN_QUANT_H

#include "half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- FP8 (OCP 8-bit floats, as torch.float8_e4m3fn / float8_e5m2) ----
 * e4m3fn: bias 7, 3 mantissa bits, no infinity, S.1111.111 NaN, max 448;
 * e5m2: bias 15, 2 mantissa bits, IEEE-like (inf, NaN), max 57344. */
#define ATTN_E4M3_MAX 448.0f
#define ATTN_E5M2_MAX 57344.0f

static inline float attn_e4m3_to_f32(uint8_t c) {
    int e = (c >> 3) & 15, m = c & 7;
    float a;
    if (e == 15 && m == 7)
        a = NAN;
    else
        a = e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), e - 10);
    return c & 0x80 ? -a : a;
}

static inline float attn_e5m2_to_f32(uint8_t c) { return attn_f16_to_f32((uint16_t)(c << 8)); }

/* x rounded to nearest even onto an 8-bit float of man mantissa bits and
 * exponent bias, saturated to +-max (infinities too); NaN gives nan_code
 * with x's sign. In the bits, without libm (frexpf and ldexpf took 35 ns a
 * value, most of an fp8 cache's fill): |x| at or above 2^emin keeps its
 * exponent and rounds its mantissa to man bits (add half an ulp less one,
 * plus the kept last bit: ties to even), then the exponent rebiased; below,
 * the subnormal steps of 2^(emin - man): |x| 2^(man - emin) (exact) rounded
 * by adding and taking off 2^23, which is the code (2^man: the smallest
 * normal). |x| <= max rounds to at most max (max is an 8-bit float). */
static inline uint8_t attn_fp8_encode(float x, int man, int bias, float max, uint8_t nan_code) {
    uint32_t b;
    memcpy(&b, &x, 4);
    uint8_t sign = (uint8_t)(b >> 24 & 0x80);
    b &= 0x7fffffffu;
    if (b > 0x7f800000u) return (uint8_t)(sign | nan_code);
    float a;
    memcpy(&a, &b, 4);
    a = a > max ? max : a;
    int emin = 1 - bias;
    if (a < ldexpf(1.0f, emin))
        return (uint8_t)(sign | (uint8_t)(int32_t)((a * ldexpf(1.0f, man - emin) + 0x1p23f) - 0x1p23f));
    memcpy(&b, &a, 4);
    int sh = 23 - man;
    uint32_t r = (b + (1u << (sh - 1)) - 1u + (b >> sh & 1u)) >> sh;
    return (uint8_t)(sign | (uint8_t)(r - ((uint32_t)(127 - bias) << man)));
}

static inline uint8_t attn_f32_to_e4m3(float x) { return attn_fp8_encode(x, 3, 7, ATTN_E4M3_MAX, 0x7f); }
static inline uint8_t attn_f32_to_e5m2(float x) { return attn_fp8_encode(x, 2, 15, ATTN_E5M2_MAX, 0x7e); }

/* ---- q4_0 (llama.cpp): 32 values as an f16 scale d and 16 bytes; byte j
 * holds value j in its low nibble and value j + 16 in its high one; x ~ d
 * (q - 8), d = the block's value of largest magnitude / -8 ---- */
#define ATTN_Q4_BLOCK 32
#define ATTN_Q4_BYTES 18

/* n (a multiple of 32) floats into n / 32 blocks, as llama.cpp's
 * quantize_row_q4_0_ref; a block holding a NaN, an infinity or a value too
 * large for the f16 scale gets a NaN scale (all its values read NaN) */
static inline void attn_q4_quantize(const float *x, int64_t n, void *dst) {
    unsigned char *o = dst;
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q4_BLOCK, o += ATTN_Q4_BYTES) {
        float amax = 0.0f, max = 0.0f;
        int bad = 0;
        for (int i = 0; i < ATTN_Q4_BLOCK; i++) {
            float v = x[b0 + i];
            bad |= !isfinite(v);
            if (amax < fabsf(v)) amax = fabsf(v), max = v;
        }
        if (bad || !(amax <= 65504.0f * 8.0f)) {
            uint16_t qnan = 0x7e00;
            memcpy(o, &qnan, 2);
            memset(o + 2, 0x88, ATTN_Q4_BLOCK / 2);
            continue;
        }
        float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = attn_f32_to_f16(d);
        memcpy(o, &dh, 2);
        for (int j = 0; j < ATTN_Q4_BLOCK / 2; j++) {
            int q0 = (int)(int8_t)(x[b0 + j] * id + 8.5f), q1 = (int)(int8_t)(x[b0 + 16 + j] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0, q1 = q1 > 15 ? 15 : q1;
            o[2 + j] = (unsigned char)(q0 | q1 << 4);
        }
    }
}

/* value idx's block scale d and its code q (0..15: the value is d (q - 8)) */
static inline float attn_q4_d(const void *row, int64_t idx) {
    uint16_t dh;
    memcpy(&dh, (const unsigned char *)row + (size_t)(idx / ATTN_Q4_BLOCK) * ATTN_Q4_BYTES, 2);
    return attn_f16_to_f32(dh);
}
static inline int attn_q4_code(const void *row, int64_t idx) {
    const unsigned char *blk = (const unsigned char *)row + (size_t)(idx / ATTN_Q4_BLOCK) * ATTN_Q4_BYTES;
    int j = (int)(idx % ATTN_Q4_BLOCK);
    return j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
}
static inline float attn_q4_get(const void *row, int64_t idx) {
    return attn_q4_d(row, idx) * (float)(attn_q4_code(row, idx) - 8);
}

/* ---- LMDeploy's per-token, per-head asymmetric int8 / int4 rows: a row's
 * n values as unsigned codes q (8 or 4 bits) with one (scale, zero) pair,
 * scale = (max - min) / (2^bits - 1), zero = min, q = round((x - zero) /
 * scale), read back as fmaf(q, scale, zero). int4: n even, byte i holds
 * value i in its low nibble and value i + n / 2 in its high one. A row with
 * a NaN or an infinity, or whose range overflows, gets (NaN, NaN): all its
 * values read NaN. A constant row reads back exactly (scale 0). ---- */
/* The quantizer's loops in integers where a float compare would branch
 * (GCC keeps a float compare's branch, so the loops did not vectorize and
 * libm's fminf, fmaxf and nearbyintf took 11-13 ns a value): the row's
 * range by an integer min and max of the values' bits made monotone
 * (attn_qa_key: -0 below +0, as the values but for the zeros, whose sign
 * the codes and read values never see), a non-finite value by its
 * exponent, and each code nearbyintf's (ties to even) as (t + 2^23) - 2^23
 * for 0 <= t < 2^23, then the upper clamp. */
static inline int32_t attn_qa_key(uint32_t b) { return (int32_t)(b ^ ((uint32_t)((int32_t)b >> 31) & 0x7fffffffu)); }
static inline float attn_qa_unkey(int32_t k) {
    uint32_t b = (uint32_t)k ^ ((uint32_t)(k >> 31) & 0x7fffffffu);
    float x;
    memcpy(&x, &b, 4);
    return x;
}
/* x's code, t = (x - lo) inv in [0, qmax (1 + 2^-22)] (inv finite) */
static inline uint8_t attn_qa_code(float x, float lo, float inv, int32_t qmax) {
    int32_t q = (int32_t)(((x - lo) * inv + 0x1p23f) - 0x1p23f);
    return (uint8_t)(q > qmax ? qmax : q);
}
static inline void attn_qa_quantize(const float *x, int64_t n, int bits, void *dst, float *par) {
    int32_t kl = INT32_MAX, kh = INT32_MIN, qm = (1 << bits) - 1;
    uint32_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        int32_t k = attn_qa_key(b);
        nonfinite |= (b & 0x7f800000u) == 0x7f800000u;
        kl = k < kl ? k : kl, kh = k > kh ? k : kh;
    }
    float lo = attn_qa_unkey(kl), hi = attn_qa_unkey(kh), qmax = (float)qm, scale = (hi - lo) / qmax;
    unsigned char *o = dst;
    int64_t w = bits == 8 ? n : n / 2;
    if (nonfinite || !isfinite(scale) || n == 0) {
        par[0] = par[1] = NAN;
        memset(o, 0, (size_t)w);
        return;
    }
    par[0] = scale, par[1] = lo;
    float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    if (!(inv <= FLT_MAX)) /* scale below 2^-128: (x - lo) inv is +inf (code qmax) or, for x = lo, NaN (code 0) */
        for (int64_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)(x[i] > lo ? qm : 0);
            if (bits == 8 || i < n / 2)
                o[i] = c;
            else
                o[i - n / 2] = (unsigned char)(o[i - n / 2] | c << 4);
        }
    else if (bits == 8)
        for (int64_t i = 0; i < n; i++) o[i] = attn_qa_code(x[i], lo, inv, qm);
    else
        for (int64_t i = 0; i < n / 2; i++)
            o[i] = (unsigned char)(attn_qa_code(x[i], lo, inv, qm) | attn_qa_code(x[i + n / 2], lo, inv, qm) << 4);
}

/* code i of an int4 row of n values */
static inline int attn_q4a_code(const void *row, int64_t n, int64_t i) {
    const unsigned char *b = row;
    return i < n / 2 ? b[i] & 15 : b[i - n / 2] >> 4;
}

/* ---- decode's folded products over int8 / int4 rows (core/decode.c),
 * the loops the kernel tables run in vectors with the same bits (kernels.h
 * rowpar_*): each a product and a sum, rounded apart. par: nb rows'
 * (scale, zero) pairs, adjacent. Both return the fold rule: whether every
 * 255 |scale| + |zero| <= lim (NaN fails); where it fails, what they wrote
 * is not used. scores: S's R rows (lds apart) of nb dot products of codes
 * become scores, S = S sc + z q_r (qs: each query row's sum; off: the
 * codes' offset in the dot, K's, off times the scale added to each zero
 * first where off is not 0). p: P's R rows (lds apart) are S's times the
 * scales (S unchanged: a block whose rule fails takes S to its converted
 * rows), and wr_r = sum_j S_rj z_j (the zero points' share of every column
 * of P V) in eight partial sums, key j in sum j % 8 (the tail's keys in
 * sum 0), added ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)). ---- */
static inline int attn_rowpar_ok(const float *par, int64_t nb, float lim) {
    int ok = 1;
    for (int64_t j = 0; j < nb; j++) ok &= 255.0f * fabsf(par[2 * j]) + fabsf(par[2 * j + 1]) <= lim;
    return ok;
}
static inline int attn_rowpar_scores(const float *par, int64_t nb, float off, float lim, int64_t R, const float *qs,
                                     float *restrict S, int64_t lds) {
    for (int64_t r = 0; r < R; r++) {
        float *restrict s = S + r * lds, q = qs[r];
        for (int64_t j = 0; j < nb; j++) {
            float a = par[2 * j], z = par[2 * j + 1];
            if (off != 0.0f) z += off * a;
            s[j] = s[j] * a + z * q;
        }
    }
    return attn_rowpar_ok(par, nb, lim);
}
static inline float attn_rowpar_sum8(const float *w) {
    return ((w[0] + w[4]) + (w[2] + w[6])) + ((w[1] + w[5]) + (w[3] + w[7]));
}
static inline int attn_rowpar_p(const float *par, int64_t nb, float lim, int64_t R, const float *S, int64_t lds,
                                float *restrict P, float *restrict wr) {
    for (int64_t r = 0; r < R; r++) {
        float w[8] = {0}, *p = P + r * lds;
        const float *s = S + r * lds;
        int64_t j = 0;
        for (; j + 8 <= nb; j += 8)
            for (int u = 0; u < 8; u++) w[u] += s[j + u] * par[2 * (j + u) + 1];
        for (; j < nb; j++) w[0] += s[j] * par[2 * j + 1];
        for (j = 0; j < nb; j++) p[j] = s[j] * par[2 * j];
        wr[r] = attn_rowpar_sum8(w);
    }
    return attn_rowpar_ok(par, nb, lim);
}

#endif
