/* IEEE binary16 and bfloat16 <-> float32, scalar and exact (round to
 * nearest even on the way down; NaN stays NaN, overflow goes to inf). The
 * safetensors reader, the KV cache and the portable kernels use these; the
 * SIMD kernels convert with F16C / shifts and must agree bit for bit. */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float attn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24); /* zero or subnormal */
        return sign ? -f : f;
    }
    uint32_t bits = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    memcpy(&f, &bits, 4);
    return f;
}

static inline float attn_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t attn_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u)); /* inf, NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504: inf */
    if (ax < 0x38800000u) {                                   /* below 2^-14: a subnormal half (or zero) */
        float a;
        memcpy(&a, &ax, 4);
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f)); /* units of 2^-24, ties to even */
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | ((ax & 0x7fffffu) >> 13), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry may move into the exponent: correct */
    return (uint16_t)(sign | h);
}

static inline uint16_t attn_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* q8_0 (llama.cpp's block format): 32 values as one f16 scale d and 32
 * int8 q, x ~ d * q, d = max|x| / 127; 34 bytes a block. */
#define ATTN_Q8_BLOCK 32
#define ATTN_Q8_BYTES 34

static inline size_t attn_q8_row_bytes(int64_t n) { return (size_t)(n / ATTN_Q8_BLOCK) * ATTN_Q8_BYTES; }

/* a code: roundf(r) (ties away from zero) clamped to [-127, 127], for
 * |r| < 2^30, in integers: j = trunc(2 r), then (j + sign j) / 2 truncated
 * is r rounded half away from zero. No float compare and no branch (a
 * rounding whose test of the fraction branched mispredicted on half the
 * values: 4.8% of a decode step over int4 at four rows, T 8192). */
static inline int8_t attn_q8_code_of(float r) {
    int32_t j = (int32_t)(2.0f * r), c = (j + (j > 0) - (j < 0)) / 2;
    return (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
}
/* n (a multiple of 32) floats x into n / 32 q8_0 blocks at o that share
 * one scale d = amax / 127 (stored as f16; the codes round x / d with d
 * unrounded, as llama.cpp, clamped to +-127). bad (a NaN, an infinity, or
 * amax too large for an f16 scale: |x| > 65504 * 127): every block gets a
 * NaN scale and codes 0, so its values read back as NaN. |x / d| <= 127
 * (to a rounding) but where 1 / d overflows (amax below 127 2^-128): then
 * x / d is +-inf (code +-127) or, for x = 0, NaN (code 0). */
static inline void attn_q8_put(const float *x, int64_t n, float amax, int bad, unsigned char *o) {
    float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    uint16_t dh = bad ? (uint16_t)0x7e00 : attn_f32_to_f16(d);
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK, o += ATTN_Q8_BYTES) {
        int8_t c[ATTN_Q8_BLOCK];
        if (!bad && id <= FLT_MAX)
            for (int i = 0; i < ATTN_Q8_BLOCK; i++) c[i] = attn_q8_code_of(x[b0 + i] * id);
        else
            for (int i = 0; i < ATTN_Q8_BLOCK; i++)
                c[i] = (int8_t)(bad ? 0 : x[b0 + i] > 0.0f ? 127 : x[b0 + i] < 0.0f ? -127 : 0);
        memcpy(o, &dh, 2);
        memcpy(o + 2, c, ATTN_Q8_BLOCK);
    }
}
/* *amax: the largest |x| (NaN where one is), by an integer maximum of the
 * bits of |x| (finite values and infinity order as their bits; a NaN's lie
 * above): no float compare, so the loop vectorizes. Returns bad (a NaN, an
 * infinity, or too large for an f16 scale: attn_q8_put) */
static inline int attn_q8_amax(const float *x, int64_t n, float *amax) {
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, x + i, 4);
        b &= 0x7fffffffu;
        m = b > m ? b : m;
    }
    memcpy(amax, &m, 4);
    return !(*amax <= 65504.0f * 127.0f);
}

/* n (a multiple of 32) floats into n / 32 blocks, each with its own scale
 * (a block holding a NaN or an infinity, or too large: a NaN scale) */
static inline void attn_q8_quantize(const float *x, int64_t n, void *dst) {
    unsigned char *o = dst;
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK, o += ATTN_Q8_BYTES) {
        float amax;
        int bad = attn_q8_amax(x + b0, ATTN_Q8_BLOCK, &amax);
        attn_q8_put(x + b0, ATTN_Q8_BLOCK, amax, bad, o);
    }
}

/* the same blocks with one scale for the whole row (amax over the n
 * values): the math modes' q against int8 / int4 keys, whose dot products
 * then sum in integers over the whole row (base/sem.h) */
static inline void attn_q8_quantize_row(const float *x, int64_t n, void *dst) {
    float amax;
    int bad = attn_q8_amax(x, n, &amax);
    attn_q8_put(x, n, amax, bad, dst);
}

/* The math modes' P for P V on int8 / int4 V codes (base/sem.h
 * attn_sem_p_int16): a row of n weights p (P times V's row scales) as
 * 16-bit integers q_j = nearbyint(p_j s * (32767 / (a s))), a the largest
 * |p_j| and s = 2^100 where a < 2^-100 (else 1: 32767 / a stays finite),
 * each standing for u q_j with u = a / 32767 (returned): P V is then
 * u (q . codes), the dot an exact int32 sum over up to 64 keys. a = 0: every
 * q is 0 and u 0; a NaN or infinite weight: every q 0 and u NaN (the row's
 * products are NaN, as its float32 ones would be). The SIMD kernels round
 * the same products (the same bits). */
#define ATTN_P16_MAX 32767.0f
#define ATTN_P16_TINY 0x1p-100f
static inline float attn_p16_quantize(const float *p, int64_t n, int16_t *q) {
    float a = 0.0f;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float x = fabsf(p[i]);
        bad |= !(x <= FLT_MAX);
        a = x > a ? x : a;
    }
    if (bad || a == 0.0f) {
        memset(q, 0, (size_t)n * sizeof *q);
        return bad ? NAN : 0.0f;
    }
    float s = a < ATTN_P16_TINY ? 0x1p100f : 1.0f, inv = ATTN_P16_MAX / (a * s);
    for (int64_t i = 0; i < n; i++) q[i] = (int16_t)nearbyintf(p[i] * s * inv);
    return a / ATTN_P16_MAX;
}

/* element idx of a q8_0 row: its block scale d, its code q (-128..127), and
 * the value as float32 (d * q with d as stored) */
static inline float attn_q8_d(const void *row, int64_t idx) {
    uint16_t dh;
    memcpy(&dh, (const unsigned char *)row + (size_t)(idx / ATTN_Q8_BLOCK) * ATTN_Q8_BYTES, 2);
    return attn_f16_to_f32(dh);
}
static inline int attn_q8_code(const void *row, int64_t idx) {
    const unsigned char *blk = (const unsigned char *)row + (size_t)(idx / ATTN_Q8_BLOCK) * ATTN_Q8_BYTES;
    return (int8_t)blk[2 + idx % ATTN_Q8_BLOCK];
}
static inline float attn_q8_get(const void *row, int64_t idx) {
    return attn_q8_d(row, idx) * (float)attn_q8_code(row, idx);
}

#endif
