/* IEEE binary16 and bfloat16 <-> float32, scalar and exact (round to
 * nearest even on the way down; NaN stays NaN, overflow goes to inf). The
 * safetensors reader, the KV cache and the portable kernels use these; the
 * SIMD kernels convert with F16C / shifts and must agree bit for bit. */
#ifndef ATTN_HALF_H
#define ATTN_HALF_H

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

/* n (a multiple of 32) floats into n / 32 blocks. A block holding a NaN, an
 * infinity, or a value too large for its f16 scale (|x| > 65504 * 127) is
 * stored with a NaN scale: all 32 of its values read back as NaN. */
static inline void attn_q8_quantize(const float *x, int64_t n, void *dst) {
    unsigned char *o = dst;
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK, o += ATTN_Q8_BYTES) {
        float amax = 0.0f;
        int nan = 0;
        for (int i = 0; i < ATTN_Q8_BLOCK; i++) amax = fmaxf(amax, fabsf(x[b0 + i])), nan |= x[b0 + i] != x[b0 + i];
        if (nan || !(amax <= 65504.0f * 127.0f)) {
            uint16_t qnan = 0x7e00;
            memcpy(o, &qnan, 2);
            memset(o + 2, 0, ATTN_Q8_BLOCK);
            continue;
        }
        float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = attn_f32_to_f16(d);
        memcpy(o, &dh, 2);
        for (int i = 0; i < ATTN_Q8_BLOCK; i++) {
            float r = roundf(x[b0 + i] * id);
            o[2 + i] = (unsigned char)(int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
        }
    }
}

/* element idx of a q8_0 row, as float32 (d * q with d as stored) */
static inline float attn_q8_get(const void *row, int64_t idx) {
    const unsigned char *blk = (const unsigned char *)row + (size_t)(idx / ATTN_Q8_BLOCK) * ATTN_Q8_BYTES;
    uint16_t dh;
    memcpy(&dh, blk, 2);
    return attn_f16_to_f32(dh) * (float)(int8_t)blk[2 + idx % ATTN_Q8_BLOCK];
}

#endif
