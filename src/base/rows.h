/* Rows of the q/k/v inputs, whatever their element type (attn_sdpa_desc.
 * qkv_dtype: float32, IEEE half or bfloat16): every path reads them through
 * these, converting to float32 as it loads (never a float32 copy of a whole
 * tensor). Strides stay in elements; sizes and conversions are the storage
 * table's (storage.h). */
#ifndef ATTN_ROWS_H
#define ATTN_ROWS_H

#include "attn.h"
#include "storage.h"

#include <stdint.h>

/* the storage type of a q/k/v view's elements (qkv_dtype 0 means float32) */
static inline attn_dtype attn_view_dtype(attn_dtype dt) { return attn_is16(dt) ? dt : ATTN_DTYPE_F32; }

/* address of row (b, h, s) of view t with elements of type dt */
static inline const void *attn_row_addr(attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t s) {
    int64_t at = b * t.stride_b + h * t.stride_h + s * t.stride_s;
    return (const char *)(const void *)t.data + attn_storage_bytes(attn_view_dtype(dt), at);
}

/* n elements of row (b, h, s) as float32: the row itself for float32
 * views, else converted into tmp */
static inline const float *attn_row_f32(attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t s, int64_t n,
                                        float *tmp) {
    const void *p = attn_row_addr(t, dt, b, h, s);
    if (!attn_is16(dt)) return p;
    attn_storage_of(dt)->load(p, n, tmp);
    return tmp;
}

#endif
