/* Where K and V rows live, described once for every reader: plain q/k/v
 * tensors (strided views) and the KV cache's storage, contiguous or paged.
 * The cache writes and reads its rows through attn_kv_rows, decode streams
 * them through it, and attn_attend (sdpa.c) gathers them through it when the
 * fused kernel needs float32 tensors. Element types, row bytes and
 * conversions are base/storage.h's. */
#ifndef ATTN_KV_SRC_H
#define ATTN_KV_SRC_H

#include "attn.h"
#include "base/storage.h"

#include <stdint.h>
#include <string.h>

/* Either views (pool_k == NULL): k (B, Hkv, Sk, D) and v (.., Dv) with
 * element strides, elements of type dtype (F32, F16, BF16);
 * or storage of type dtype (F32, F16, BF16, Q8_0), rows of D (Dv) elements
 * packed back to back: contiguous (table == NULL: (B, Hkv, capacity, D|Dv)
 * arrays at pool_k, pool_v) or paged (page p holds the rows (Hkv,
 * page_size, .) at row p * Hkv * page_size; sequence b's key j lives in page
 * table[b * max_pages + j / page_size]). */
typedef struct attn_kv_src {
    attn_dtype dtype, vtype; /* K's storage type; V's (0: the same as K's) */
    int64_t Hkv, D, Dv;
    attn_view k, v;
    const void *pool_k, *pool_v;
    const int32_t *table;
    int64_t max_pages, page_size, capacity;
    /* or caller-owned pages (attn_paged_kv, indices != NULL): sequence b's key
     * j in page indices[indptr[b] + j / page_size] at token j % page_size; a
     * row of K at pool_k + ks[0] page + ks[1] token + ks[2] hk elements (V: vs) */
    const int32_t *indptr, *indices;
    int64_t ks[3], vs[3];
    /* fp8 storage (base/storage.h ATTN_ST_SCALED): K's (V's) scale per
     * tensor (nks 1) or per kv head (Hkv); NULL: 1 */
    const float *kscale, *vscale;
    int64_t nks, nvs;
    /* int8 / int4 storage (ATTN_ST_ROWPAR): each row's (scale, zero), float
     * pairs: libattn's cache, pair r of row r (its row numbering above);
     * caller-owned pages, the pair at kpar + 2 (kps[0] page + kps[1] token +
     * kps[2] hk) (V: vpar, vps) */
    const float *kpar, *vpar;
    int64_t kps[3], vps[3];
    /* a shard of each sequence (attn_kv_cache_attend_at): map_len non-NULL,
     * sequence b holds map_len[b] keys here, local key j at global position
     * (j / map_block) * map_stride + map_off + j % map_block; the call's
     * descriptor describes the global problem */
    const int64_t *map_len;
    int64_t map_block, map_stride, map_off;
} attn_kv_src;

/* the global position of local key j of a shard (kv->map_len non-NULL) */
static inline int64_t attn_kv_src_global(const attn_kv_src *s, int64_t j) {
    return j / s->map_block * s->map_stride + s->map_off + j % s->map_block;
}

/* the storage type of K (is_v 0) or V (1) */
static inline attn_dtype attn_kv_type(const attn_kv_src *s, int is_v) { return is_v && s->vtype ? s->vtype : s->dtype; }

/* rows live in pages (libattn's or the caller's): runs end at page ends */
static inline int attn_kv_src_paged(const attn_kv_src *s) { return s->table != NULL || s->indices != NULL; }

/* Up to *run rows of K (is_v 0) or V (1) of (b, hk) from key j on, *ld
 * elements apart: the one addressing function of every form. */
static inline const void *attn_kv_rows(const attn_kv_src *s, int is_v, int64_t b, int64_t hk, int64_t j, int64_t *run,
                                       int64_t *ld) {
    if (!s->pool_k) {
        attn_view t = is_v ? s->v : s->k;
        *run = INT64_MAX, *ld = t.stride_s;
        int64_t at = b * t.stride_b + hk * t.stride_h + j * t.stride_s;
        return (const char *)(const void *)t.data + attn_storage_bytes(attn_kv_type(s, is_v), at);
    }
    int64_t dim = is_v ? s->Dv : s->D, row;
    if (s->indices) { /* caller-owned pages */
        const int64_t *st = is_v ? s->vs : s->ks;
        int64_t ps = s->page_size, page = s->indices[s->indptr[b] + j / ps], t = j % ps;
        *run = ps - t, *ld = st[1];
        return (const char *)(is_v ? s->pool_v : s->pool_k) +
               attn_storage_bytes(attn_kv_type(s, is_v), page * st[0] + t * st[1] + hk * st[2]);
    }
    if (!s->table) {
        *run = INT64_MAX, *ld = dim;
        row = (b * s->Hkv + hk) * s->capacity + j;
    } else {
        int64_t ps = s->page_size, page = s->table[b * s->max_pages + j / ps];
        *run = ps - j % ps, *ld = dim;
        row = (page * s->Hkv + hk) * ps + j % ps;
    }
    return (const char *)(is_v ? s->pool_v : s->pool_k) + attn_storage_bytes(attn_kv_type(s, is_v), row * dim);
}

/* the pair index of row j of (b, hk) in kpar / vpar (int8 / int4 storage) */
static inline int64_t attn_kv_par_at(const attn_kv_src *s, int is_v, int64_t b, int64_t hk, int64_t j) {
    int64_t ps = s->page_size;
    if (s->indices) {
        const int64_t *st = is_v ? s->vps : s->kps;
        return s->indices[s->indptr[b] + j / ps] * st[0] + j % ps * st[1] + hk * st[2];
    }
    if (!s->table) return (b * s->Hkv + hk) * s->capacity + j;
    return (s->table[b * s->max_pages + j / ps] * s->Hkv + hk) * ps + j % ps;
}

/* The (scale, zero) that key (is_v 0) or value (1) row j of (b, hk) is
 * read with (base/storage.h attn_st_load_row): fp8's scale per tensor or
 * kv head, int8 / int4's pair of the row, (1, 0) for the other types */
static inline void attn_kv_par(const attn_kv_src *s, int is_v, int64_t b, int64_t hk, int64_t j, float par[2]) {
    int kind = attn_storage_of(attn_kv_type(s, is_v))->params;
    par[0] = 1.0f, par[1] = 0.0f;
    if (kind == ATTN_ST_SCALED) {
        const float *sc = is_v ? s->vscale : s->kscale;
        if (sc) par[0] = sc[(is_v ? s->nvs : s->nks) > 1 ? hk : 0];
    } else if (kind == ATTN_ST_ROWPAR) {
        memcpy(par, (is_v ? s->vpar : s->kpar) + 2 * attn_kv_par_at(s, is_v, b, hk, j), 2 * sizeof(float));
    }
}

/* the scales of rows j, j + 1, .. (within a run of attn_kv_rows) as the
 * kernels' kv_rows takes them: the first row's pair (int8 / int4: in the
 * storage's pairs, *pld pairs from one token's to the next) or its scale
 * (fp8, in tmp; *pld 0: the same for every row) */
static inline const float *attn_kv_par_run(const attn_kv_src *s, int is_v, int64_t b, int64_t hk, int64_t j,
                                           float tmp[2], int64_t *pld) {
    *pld = 0;
    if (attn_storage_of(attn_kv_type(s, is_v))->params != ATTN_ST_ROWPAR) {
        attn_kv_par(s, is_v, b, hk, j, tmp);
        return tmp;
    }
    *pld = s->indices ? (is_v ? s->vps : s->kps)[1] : 1;
    return (is_v ? s->vpar : s->kpar) + 2 * attn_kv_par_at(s, is_v, b, hk, j);
}

/* key (is_v 0) or value (1) row j of (b, hk) as float32 values into dst:
 * the one read of a stored row (attn_st_load_row with its scale) */
static inline void attn_kv_load(const attn_kv_src *s, int is_v, int64_t b, int64_t hk, int64_t j, float *dst) {
    int64_t run, ld;
    float par[2];
    const void *row = attn_kv_rows(s, is_v, b, hk, j, &run, &ld);
    attn_kv_par(s, is_v, b, hk, j, par);
    attn_st_load_row(attn_kv_type(s, is_v), row, is_v ? s->Dv : s->D, par, dst);
}

/* Storage's rows of K and V as float32 views without copying, when it is
 * contiguous float32 (its first rows per head); returns 0 for anything else
 * (16-bit or q8_0 storage, pages). */
static inline int attn_kv_src_f32_views(const attn_kv_src *s, attn_view *k, attn_view *v) {
    if (!s->pool_k || s->dtype != ATTN_DTYPE_F32 || attn_kv_type(s, 1) != ATTN_DTYPE_F32 || attn_kv_src_paged(s))
        return 0;
    int64_t T = s->capacity;
    *k = (attn_view){(float *)(uintptr_t)s->pool_k, s->Hkv * T * s->D, T * s->D, s->D};
    *v = (attn_view){(float *)(uintptr_t)s->pool_v, s->Hkv * T * s->Dv, T * s->Dv, s->Dv};
    return 1;
}

/* Flash-decoding forward (src/core/decode.c): same contract as
 * attn_sdpa_forward without dropout (ATTN_E_UNSUPPORTED), keys from kv. */
attn_status attn_decode_forward(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out, float *lse);
/* Queries per (sequence, kv head) up to which the fused path uses decode */
#define ATTN_DECODE_MAX_SQ 16
/* The forward over keys from kv, arguments checked (src/core/sdpa.c): the
 * one place that chooses the path, for plain tensors and the KV cache
 * alike. A few query rows without dropout are memory-bound and run
 * flash-decoding straight from the storage; the rest run the fused tiles
 * (the reference when asked) on float32 views of the keys, gathered first
 * when the storage is 16-bit, q8_0 or paged. */
attn_status attn_attend(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out, float *lse);

/* The memory a cache's rows occupy: K's codes, V's, then the int8 / int4
 * (scale, zero) pairs of K and of V where it holds them (paged: the whole
 * pool). Up to four regions and their bytes; returns how many. For a bench
 * that reads the very bytes a step reads: on a VM one allocation may read
 * up to 2x faster or slower than another. */
int attn_kv_cache_regions(const attn_kv_cache *c, const void *p[4], size_t bytes[4]);

#endif
