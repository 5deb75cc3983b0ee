/* The one SDPA entry point: validates, then picks the path:
 *   ATTN_IMPL_REF            the reference (src/ref)
 *   Sq <= 16, no dropout     flash-decoding (src/core/decode.c): a few query
 *                            rows per head are bound by reading K and V once
 *   otherwise                the fused tiled kernel (src/core/flash.c) */
#include "internal.h"

attn_status attn_sdpa_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                              float *lse) {
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    if (d->impl == ATTN_IMPL_REF) return attn_sdpa_ref_forward(d, q, k, v, out, lse);
    if (attn_sdpa_wants_decode(d)) { /* a few queries: memory-bound, flash-decoding */
        attn_kv_src src = {.k = k, .v = v, .Hkv = attn_sem_hkv(d), .D = d->D, .Dv = d->Dv, .dtype = d->qkv_dtype};
        return attn_decode_forward(d, q, &src, out, lse);
    }
    return attn_flash_forward(d, q, k, v, out, lse);
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
