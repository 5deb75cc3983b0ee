/* The element types that rows are stored as, described once: q/k/v views
 * (float32, IEEE half, bfloat16) and KV-cache storage (those and q8_0).
 * One entry per type: block layout (elements and bytes per block), a row's
 * bytes, load-as-float32 and store-from-float32. Everything that sizes,
 * addresses or converts a stored row goes through here: the KV cache
 * (append, read, gather), decode's addressing (core/kv_src.h), the packing
 * of q/k/v rows by the fused kernel and the reference (base/rows.h), and
 * the kernels' byte arithmetic on reduced-precision K/V rows. The element
 * codecs themselves are base/half.h (scalar, exact); the SIMD kernels'
 * vector loads must agree with them bit for bit (tests/test_kernels.c).
 *
 * A new storage type is an entry here plus its vector load in
 * kernels/simd/kernels_simd.c (kv_ld). The element type's enum is attn.h's
 * attn_dtype: there is no second one. */
#ifndef ATTN_STORAGE_H
#define ATTN_STORAGE_H

#include "attn.h"
#include "half.h"
#include "quant.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct attn_storage {
    const char *name;   /* NULL: not a storage type */
    int64_t block;      /* elements per block: 1, or ATTN_Q8_BLOCK */
    size_t block_bytes; /* bytes per block */
    /* n elements (a multiple of block) of a stored row as float32, from element 0 */
    void (*load)(const void *src, int64_t n, float *dst);
    /* n floats into storage: round to nearest even (16-bit), blocks (q8_0: see half.h) */
    void (*store)(const float *src, int64_t n, void *dst);
    /* element i of a stored row as float32 (the portable kernels' loads;
     * NULL for int4, whose element order depends on the row's length) */
    float (*get)(const void *row, int64_t i);
    /* how the loaded values become the row's: ATTN_ST_PLAIN as they are,
     * ATTN_ST_SCALED times a scale per tensor or kv head (fp8), ATTN_ST_ROWPAR
     * q * scale + zero with one pair per row (int8 / int4) */
    int params;
    /* the kernel tables' qk_rows_x / pv_rows_x read it (kernels.h: fp8 and
     * int8 as their codes, decode applying the scales around the products);
     * the others (int4, q4_0) only pv_rows_x reads, and K rows of them are
     * loaded to float32 rows first (kv_rows) */
    int kernels;
} attn_storage;

enum { ATTN_ST_PLAIN = 0, ATTN_ST_SCALED = 1, ATTN_ST_ROWPAR = 2 };

static inline void attn_st_load_f32(const void *s, int64_t n, float *d) { memcpy(d, s, (size_t)n * sizeof(float)); }
static inline void attn_st_store_f32(const float *s, int64_t n, void *d) { memcpy(d, s, (size_t)n * sizeof(float)); }
static inline float attn_st_get_f32(const void *r, int64_t i) { return ((const float *)r)[i]; }
static inline float attn_st_get_f16(const void *r, int64_t i) { return attn_f16_to_f32(((const uint16_t *)r)[i]); }
static inline float attn_st_get_bf16(const void *r, int64_t i) { return attn_bf16_to_f32(((const uint16_t *)r)[i]); }
static inline void attn_st_load_f16(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_st_get_f16(s, i);
}
static inline void attn_st_load_bf16(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_st_get_bf16(s, i);
}
static inline void attn_st_store_f16(const float *s, int64_t n, void *d) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i] = attn_f32_to_f16(s[i]);
}
static inline void attn_st_store_bf16(const float *s, int64_t n, void *d) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)d)[i] = attn_f32_to_bf16(s[i]);
}
static inline void attn_st_load_q8(const void *s, int64_t n, float *d) {
    for (int64_t b0 = 0; b0 < n; b0 += ATTN_Q8_BLOCK) { /* attn_q8_get's products, the block's scale read once */
        const unsigned char *blk = (const unsigned char *)s + (size_t)(b0 / ATTN_Q8_BLOCK) * ATTN_Q8_BYTES;
        float sc = attn_q8_d(blk, 0);
        int64_t m = n - b0 < ATTN_Q8_BLOCK ? n - b0 : ATTN_Q8_BLOCK;
        for (int64_t i = 0; i < m; i++) d[b0 + i] = sc * (float)(int8_t)blk[2 + i];
    }
}

static inline float attn_st_get_e4m3(const void *r, int64_t i) { return attn_e4m3_to_f32(((const uint8_t *)r)[i]); }
static inline float attn_st_get_e5m2(const void *r, int64_t i) { return attn_e5m2_to_f32(((const uint8_t *)r)[i]); }
static inline float attn_st_get_u8(const void *r, int64_t i) { return (float)((const uint8_t *)r)[i]; }
static inline void attn_st_load_e4m3(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_st_get_e4m3(s, i);
}
static inline void attn_st_load_e5m2(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_st_get_e5m2(s, i);
}
static inline void attn_st_store_e4m3(const float *s, int64_t n, void *d) {
    for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i] = attn_f32_to_e4m3(s[i]);
}
static inline void attn_st_store_e5m2(const float *s, int64_t n, void *d) {
    for (int64_t i = 0; i < n; i++) ((uint8_t *)d)[i] = attn_f32_to_e5m2(s[i]);
}
static inline void attn_st_load_q4(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_q4_get(s, i);
}
static inline void attn_st_load_u8(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = attn_st_get_u8(s, i);
}
static inline void attn_st_load_u4(const void *s, int64_t n, float *d) {
    for (int64_t i = 0; i < n; i++) d[i] = (float)attn_q4a_code(s, n, i);
}
/* the int8 / int4 rows' stores need the row's (scale, zero): attn_st_store_row */
static inline void attn_st_store_none(const float *s, int64_t n, void *d) { (void)s, (void)n, (void)d; }

/* the entry of type t, or NULL when t is not a storage type */
static inline const attn_storage *attn_storage_of(attn_dtype t) {
    enum { P = ATTN_ST_PLAIN, SC = ATTN_ST_SCALED, RP = ATTN_ST_ROWPAR };
    static const attn_storage types[ATTN_DTYPE_Q4_0 + 1] = {
        [ATTN_DTYPE_F32] = {"float32", 1, 4, attn_st_load_f32, attn_st_store_f32, attn_st_get_f32, P, 1},
        [ATTN_DTYPE_F16] = {"float16", 1, 2, attn_st_load_f16, attn_st_store_f16, attn_st_get_f16, P, 1},
        [ATTN_DTYPE_BF16] = {"bfloat16", 1, 2, attn_st_load_bf16, attn_st_store_bf16, attn_st_get_bf16, P, 1},
        [ATTN_DTYPE_Q8_0] = {"q8_0", ATTN_Q8_BLOCK, ATTN_Q8_BYTES, attn_st_load_q8, attn_q8_quantize, attn_q8_get, P,
                             1},
        [ATTN_DTYPE_FP8_E4M3] = {"fp8_e4m3", 1, 1, attn_st_load_e4m3, attn_st_store_e4m3, attn_st_get_e4m3, SC, 1},
        [ATTN_DTYPE_FP8_E5M2] = {"fp8_e5m2", 1, 1, attn_st_load_e5m2, attn_st_store_e5m2, attn_st_get_e5m2, SC, 1},
        [ATTN_DTYPE_KV_INT8] = {"int8", 1, 1, attn_st_load_u8, attn_st_store_none, attn_st_get_u8, RP, 1},
        [ATTN_DTYPE_KV_INT4] = {"int4", 2, 1, attn_st_load_u4, attn_st_store_none, NULL, RP, 0},
        [ATTN_DTYPE_Q4_0] = {"q4_0", ATTN_Q4_BLOCK, ATTN_Q4_BYTES, attn_st_load_q4, attn_q4_quantize, attn_q4_get, P,
                             0},
    };
    return (int)t >= 0 && t <= ATTN_DTYPE_Q4_0 && types[t].name ? &types[t] : NULL;
}

/* a storage type's name ("q8_0"), or "?" for any other value */
static inline const char *attn_storage_name(attn_dtype t) {
    const attn_storage *s = attn_storage_of(t);
    return s ? s->name : "?";
}

/* A stored row of n elements as float32 (n: the row's whole length, which
 * int4's element order depends on): the loaded values, times par[0] for
 * fp8, fmaf(q, par[0], par[1]) for int8 / int4 (par: the row's scale and
 * zero; NULL or unused for the other types). The one definition of a stored
 * row's values: decode, the gathered path and reads all load through it. */
static inline void attn_st_load_row(attn_dtype t, const void *row, int64_t n, const float *par, float *dst) {
    const attn_storage *s = attn_storage_of(t);
    s->load(row, n, dst);
    if (s->params == ATTN_ST_SCALED)
        for (int64_t i = 0; i < n; i++) dst[i] *= par[0];
    else if (s->params == ATTN_ST_ROWPAR)
        for (int64_t i = 0; i < n; i++) dst[i] = fmaf(dst[i], par[0], par[1]);
}

/* n floats x into a stored row: fp8 stores x / par[0] (par[0]: the scale,
 * read), int8 / int4 quantize the row and write its (scale, zero) to par,
 * the others round as their store does (par unused) */
static inline void attn_st_store_row(attn_dtype t, const float *x, int64_t n, void *row, float *par) {
    const attn_storage *s = attn_storage_of(t);
    if (s->params == ATTN_ST_ROWPAR) {
        attn_qa_quantize(x, n, t == ATTN_DTYPE_KV_INT8 ? 8 : 4, row, par);
    } else if (s->params == ATTN_ST_SCALED) {
        uint8_t *o = row;
        for (int64_t i = 0; i < n; i++)
            o[i] = t == ATTN_DTYPE_FP8_E4M3 ? attn_f32_to_e4m3(x[i] / par[0]) : attn_f32_to_e5m2(x[i] / par[0]);
    } else {
        s->store(x, n, row);
    }
}

/* bytes of n elements of type t (n a multiple of its block): a row's size,
 * or the offset of element n of a row (q8_0: of the block holding it when n
 * is a block boundary). t must be a storage type. */
static inline size_t attn_storage_bytes(attn_dtype t, int64_t n) {
    const attn_storage *s = attn_storage_of(t);
    return s->block == 1 ? (size_t)n * s->block_bytes
                         : (size_t)(n / s->block) * s->block_bytes; /* no division for the common case */
}

/* is t a 16-bit floating type (a q/k/v view of half or bfloat16 elements)? */
static inline int attn_is16(attn_dtype t) { return t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16; }

/* not a storage type (attn_storage_of gives NULL): the math modes'
 * rounding of q against int8 / int4 keys, q8_0 blocks that share one scale
 * for the whole row (half.h attn_q8_quantize_row) */
#define ATTN_DTYPE_Q8_ROW ((attn_dtype)(ATTN_DTYPE_Q4_0 + 1))

/* x[0..n) rounded in place to type t as a store and a load would round it
 * (f16, bf16: nearest even; q8_0: quantized per 32-value block, n a multiple
 * of 32, then read back; Q8_ROW: as q8_0 with the row's one scale; F32 or
 * any other type: unchanged). The math modes'
 * operand rounding (base/sem.h), one definition for every path. */
static inline void attn_st_round(attn_dtype t, float *x, int64_t n) {
    if (t == ATTN_DTYPE_F16)
        for (int64_t i = 0; i < n; i++) x[i] = attn_f16_to_f32(attn_f32_to_f16(x[i]));
    else if (t == ATTN_DTYPE_BF16)
        for (int64_t i = 0; i < n; i++) x[i] = attn_bf16_to_f32(attn_f32_to_bf16(x[i]));
    else if (t == ATTN_DTYPE_Q8_0)
        for (int64_t i = 0; i + ATTN_Q8_BLOCK <= n; i += ATTN_Q8_BLOCK) {
            unsigned char blk[ATTN_Q8_BYTES];
            attn_q8_quantize(x + i, ATTN_Q8_BLOCK, blk);
            attn_st_load_q8(blk, ATTN_Q8_BLOCK, x + i);
        }
    else if (t == ATTN_DTYPE_Q8_ROW && n % ATTN_Q8_BLOCK == 0) {
        float amax;
        int bad = attn_q8_amax(x, n, &amax);
        for (int64_t i = 0; i < n; i += ATTN_Q8_BLOCK) { /* one scale for the row, block by block */
            unsigned char blk[ATTN_Q8_BYTES];
            attn_q8_put(x + i, ATTN_Q8_BLOCK, amax, bad, blk);
            attn_st_load_q8(blk, ATTN_Q8_BLOCK, x + i);
        }
    }
}

#endif
