/* Rows of the q/k/v inputs, whatever their element type (attn_sdpa_desc.
 * qkv_dtype: float32, IEEE half or bfloat16): every path reads them through
 * these, converting to float32 as it loads (never a float32 copy of a whole
 * tensor). Strides stay in elements. */
#ifndef ATTN_ROWS_H
#define ATTN_ROWS_H

#include "attn.h"
#include "half.h"

#include <stdint.h>

static inline int attn_is16(attn_dtype t) { return t == ATTN_DTYPE_F16 || t == ATTN_DTYPE_BF16; }

/* address of row (b, h, s) of view t with elements of type dt */
static inline const void *attn_row_addr(attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t s) {
    int64_t at = b * t.stride_b + h * t.stride_h + s * t.stride_s;
    return attn_is16(dt) ? (const void *)((const uint16_t *)(const void *)t.data + at) : (const void *)(t.data + at);
}

/* n elements of row (b, h, s) as float32: the row itself for float32
 * views, else converted into tmp */
static inline const float *attn_row_f32(attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t s, int64_t n,
                                        float *tmp) {
    const void *p = attn_row_addr(t, dt, b, h, s);
    if (!attn_is16(dt)) return p;
    const uint16_t *u = p;
    if (dt == ATTN_DTYPE_F16)
        for (int64_t c = 0; c < n; c++) tmp[c] = attn_f16_to_f32(u[c]);
    else
        for (int64_t c = 0; c < n; c++) tmp[c] = attn_bf16_to_f32(u[c]);
    return tmp;
}

#endif
