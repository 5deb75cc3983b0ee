/* The one SDPA entry point: validates, then picks the path:
 *   ATTN_IMPL_REF            the reference (src/ref)
 *   Sq <= 16, no dropout     flash-decoding (src/core/decode.c): a few query
 *                            rows per head are bound by reading K and V once
 *   otherwise                the fused tiled kernel (src/core/flash.c)
 * attn_attend makes that choice for plain tensors and the KV cache alike. */
#include "internal.h"
#include "base/rows.h"
#include "base/sem.h"
#include "core/kv_src.h"

#include <stdlib.h>

/* fused tiles or the reference on float32-addressable views */
static attn_status tiles(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out, float *lse) {
    return d->impl == ATTN_IMPL_REF ? attn_sdpa_ref_forward(d, q, k, v, out, lse)
                                    : attn_flash_forward(d, q, k, v, out, lse);
}

/* the used rows (d->Sk per head, each sequence's own length through
 * seqlens_k) of storage that the tiles cannot read in place, as float32
 * (B, Hkv, Sk, .) tensors; rows past a sequence's length are zeros */
static attn_status gather(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out, float *lse) {
    int64_t B = d->B, Hkv = kv->Hkv, Sk = d->Sk, D = kv->D, Dv = kv->Dv;
    size_t nk, nv;
    if (attn_mul3_size((size_t)(B * Hkv), (size_t)(Sk ? Sk : 1), (size_t)D, &nk) ||
        attn_mul3_size((size_t)(B * Hkv), (size_t)(Sk ? Sk : 1), (size_t)Dv, &nv))
        return ATTN_E_OVERFLOW;
    float *gk = calloc(nk, sizeof(float)), *gv = calloc(nv, sizeof(float));
    if (!gk || !gv) {
        free(gk), free(gv);
        return ATTN_E_NOMEM;
    }
    const attn_storage *st = attn_storage_of(kv->dtype);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0, len = attn_sem_sk(d, b), run, ld; j < len; j++) {
                st->load(attn_kv_rows(kv, 0, b, hk, j, &run, &ld), D, gk + ((b * Hkv + hk) * Sk + j) * D);
                st->load(attn_kv_rows(kv, 1, b, hk, j, &run, &ld), Dv, gv + ((b * Hkv + hk) * Sk + j) * Dv);
            }
    attn_view vk = {gk, Hkv * Sk * D, Sk * D, D}, vv = {gv, Hkv * Sk * Dv, Sk * Dv, Dv};
    attn_status s = tiles(d, q, vk, vv, out, lse);
    free(gk), free(gv);
    return s;
}

attn_status attn_attend(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out, float *lse) {
    if (d->impl != ATTN_IMPL_REF && d->Sq <= ATTN_DECODE_MAX_SQ && !d->dropout)
        return attn_decode_forward(d, q, kv, out, lse);          /* a few queries: memory-bound, flash-decoding */
    if (!kv->pool_k) return tiles(d, q, kv->k, kv->v, out, lse); /* plain tensors of any qkv_dtype */
    attn_view k, v; /* storage: contiguous float32 is read in place, the rest gathered */
    return attn_kv_src_f32_views(kv, &k, &v) ? tiles(d, q, k, v, out, lse) : gather(d, q, kv, out, lse);
}

attn_status attn_sdpa_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                              float *lse) {
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    attn_kv_src src = {
        .dtype = attn_view_dtype(d->qkv_dtype), .Hkv = attn_sem_hkv(d), .D = d->D, .Dv = d->Dv, .k = k, .v = v};
    return attn_attend(d, q, &src, out, lse);
}

attn_status attn_sdpa_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores, float *weights) {
    return attn_sdpa_ref_weights(d, q, k, scores, weights);
}

attn_status attn_sdpa_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                               attn_view dout, const float *lse, attn_view dq, attn_view dk, attn_view dv) {
    attn_status st = attn_sdpa_check(d, q, k, v, dout, 1);
    if (st != ATTN_OK) return st;
    int64_t rows = d->B * d->H * d->Sq, keys = d->B * d->H * d->Sk;
    if ((rows > 0 && !dq.data) || (keys > 0 && (!dk.data || !dv.data))) return ATTN_E_INVALID;
    if (d->impl == ATTN_IMPL_REF) return attn_sdpa_ref_backward(d, q, k, v, dout, dq, dk, dv);
    return attn_flash_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
}

/* Context-parallel building blocks (attn.h): always the fused path. */
static attn_status block_check(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                               const float *m, const float *l, const float *t) {
    attn_status st = attn_sdpa_check(d, q, k, v, dout, 1);
    if (st != ATTN_OK) return st;
    if (d->dropout) return ATTN_E_UNSUPPORTED;
    if (d->B * d->H * d->Sq > 0 && (!m || !l || !t)) return ATTN_E_INVALID;
    return ATTN_OK;
}

attn_status attn_sdpa_block_stats(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                  float *m, float *l, float *t) {
    attn_status st = block_check(d, q, k, v, dout, m, l, t);
    return st != ATTN_OK ? st : attn_flash_block_stats(d, q, k, v, dout, m, l, t);
}

attn_status attn_sdpa_block_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                     const float *m, const float *l, const float *t, attn_view dq, attn_view dk,
                                     attn_view dv) {
    attn_status st = block_check(d, q, k, v, dout, m, l, t);
    if (st != ATTN_OK) return st;
    int64_t rows = d->B * d->H * d->Sq, keys = d->B * d->H * d->Sk;
    if ((rows > 0 && !dq.data) || (keys > 0 && (!dk.data || !dv.data))) return ATTN_E_INVALID;
    return attn_flash_block_backward(d, q, k, v, dout, m, l, t, dq, dk, dv);
}
