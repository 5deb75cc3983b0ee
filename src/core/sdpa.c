/* The one SDPA entry point: validates, then picks the path. */
#include "internal.h"

attn_status attn_sdpa_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                              float *lse) {
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    if (d->impl == ATTN_IMPL_REF) return attn_sdpa_ref_forward(d, q, k, v, out, lse);
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
