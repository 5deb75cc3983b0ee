/* The one SDPA entry point: validates, then picks the path:
 *   ATTN_IMPL_REF            the reference (src/ref)
 *   Sq <= 16, no dropout     flash-decoding (src/core/decode.c): a few query
 *                            rows per head are bound by reading K and V once
 *   otherwise                the fused tiled kernel (src/core/flash.c)
 * attn_attend makes that choice for plain tensors and the KV cache alike. */
#include "internal.h"
#include "kernels/kernels.h"
#include "base/rows.h"
#include "base/sem.h"
#include "base/flex.h"
#include "core/kv_src.h"

#include <stdlib.h>
#include <string.h>

/* fused tiles or the reference on float32-addressable views */
static attn_status tiles(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out, float *lse) {
    return d->impl == ATTN_IMPL_REF ? attn_sdpa_ref_forward(d, q, k, v, out, lse)
                                    : attn_flash_forward(d, q, k, v, out, lse);
}

/* the used rows (d->Sk per head, each sequence's own length through
 * seqlens_k) of storage that the tiles cannot read in place, as (B, Hkv,
 * Sk, .) tensors of float32, or, in a math mode over a 16-bit cache, of the
 * cache's own type (the queries then rounded to it, which is the mode's
 * rounding of Q, so that the tiles see K's type); rows past a sequence's
 * length are zeros */
static attn_status gather(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out, float *lse) {
    int64_t B = d->B, H = d->H, Hkv = kv->Hkv, Sk = d->Sk, D = kv->D, Dv = kv->Dv;
    attn_dtype kt = attn_kv_type(kv, 0), vt = attn_kv_type(kv, 1);
    /* the tiles' views share one type: 16-bit kept only when K and V are of one 16-bit type */
    int keep16 = d->math != ATTN_MATH_STRICT && attn_is16(kt) && vt == kt;
    attn_dtype qt = attn_sem_q_type(d, kt);
    int q8 = attn_sem_q_int8(qt); /* the queries rounded to int8 blocks (integer caches) */
    attn_dtype gt = keep16 ? kt : ATTN_DTYPE_F32;
    size_t nk, nv, nq, es = keep16 ? 2 : 4;
    if (attn_mul3_size((size_t)(B * Hkv), (size_t)(Sk ? Sk : 1), (size_t)D, &nk) ||
        attn_mul3_size((size_t)(B * Hkv), (size_t)(Sk ? Sk : 1), (size_t)Dv, &nv) ||
        attn_mul3_size((size_t)(B * H), (size_t)(d->Sq ? d->Sq : 1), (size_t)D, &nq))
        return ATTN_E_OVERFLOW;
    void *gk = calloc(nk, es), *gv = calloc(nv, es), *gq = keep16 || q8 ? malloc(nq * es) : NULL;
    float *row = malloc((size_t)(D > Dv ? D : Dv) * sizeof(float));
    if (!gk || !gv || !row || ((keep16 || q8) && !gq)) {
        free(gk), free(gv), free(gq), free(row);
        return ATTN_E_NOMEM;
    }
    const attn_storage *gs = attn_storage_of(gt);
    for (int64_t b = 0; b < B; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0, len = attn_sem_sk(d, b), run, ld; j < len; j++) {
                size_t ak = (size_t)(((b * Hkv + hk) * Sk + j) * D), av = (size_t)(((b * Hkv + hk) * Sk + j) * Dv);
                if (keep16) { /* the stored bits as they are */
                    memcpy((uint16_t *)gk + ak, attn_kv_rows(kv, 0, b, hk, j, &run, &ld), (size_t)D * 2);
                    memcpy((uint16_t *)gv + av, attn_kv_rows(kv, 1, b, hk, j, &run, &ld), (size_t)Dv * 2);
                } else { /* the rows' values (scales included) */
                    attn_kv_load(kv, 0, b, hk, j, (float *)gk + ak), attn_kv_load(kv, 1, b, hk, j, (float *)gv + av);
                }
            }
    attn_sdpa_desc e = *d;
    attn_view vk = {gk, Hkv * Sk * D, Sk * D, D}, vv = {gv, Hkv * Sk * Dv, Sk * Dv, Dv}, vq = q;
    if (keep16 || q8) { /* the queries rounded to K's type: the tiles' views share one type */
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < d->Sq; i++) {
                    size_t at = (size_t)(((b * H + h) * d->Sq + i) * D);
                    const float *src = attn_row_f32(q, d->qkv_dtype, b, h, i, D, row);
                    if (keep16) {
                        gs->store(src, D, (uint16_t *)gq + at);
                    } else { /* int8 queries: K's values are the rows' values, P stays float32 */
                        memcpy((float *)gq + at, src, (size_t)D * sizeof(float));
                        attn_st_round(qt, (float *)gq + at, D);
                    }
                }
        vq = (attn_view){gq, H * d->Sq * D, d->Sq * D, D};
        e.qkv_dtype = gt;
        if (q8) e.math = ATTN_MATH_STRICT; /* every rounding of the mode is done */
    }
    /* fp8 values (float32 or fp8 beside them) under a mode: its bf16 q and P
     * (base/sem.h), as BF16 mode takes the gathered float32 values */
    int f8k = attn_sem_fp8(kt), f8v = attn_sem_fp8(vt);
    if (d->math != ATTN_MATH_STRICT && (f8k || f8v) && (f8k || kt == ATTN_DTYPE_F32) && (f8v || vt == ATTN_DTYPE_F32))
        e.math = ATTN_MATH_BF16;
    attn_status s = tiles(&e, vq, vk, vv, out, lse);
    free(gk), free(gv), free(gq), free(row);
    return s;
}

/* the descriptor a call runs with: math STRICT when the mode rounds nothing
 * for these K / V types (float32 data in DATA mode is STRICT, bit for bit),
 * or when the kernel table has no faster products than float32 ones for K's
 * type nor for V's (kernels.h, math_types: the rounding would cost and buy
 * nothing; with K and V of different types the mode rounds every operand
 * when the table has products for either) */
static attn_sdpa_desc resolve_math(const attn_sdpa_desc *d, attn_dtype kdt, attn_dtype vdt) {
    attn_sdpa_desc e = *d;
    if (!attn_sem_rounds(d, kdt, vdt) || !(attn_math_rounds(kdt) || attn_math_rounds(vdt))) e.math = ATTN_MATH_STRICT;
    return e;
}

/* a math mode with dropout (a mode rounds P; dropout rescales it) */
static attn_status mode_dropout_fail(void) {
    return attn_fail(ATTN_E_UNSUPPORTED, "dropout with math DATA or BF16: dropout needs math STRICT");
}

/* the gradients' views: data wherever there are rows */
static attn_status grads_check(const attn_sdpa_desc *d, attn_view dq, attn_view dk, attn_view dv) {
    int64_t rows = d->B * d->H * d->Sq, keys = d->B * d->H * d->Sk;
    if ((rows > 0 && !dq.data) || (keys > 0 && (!dk.data || !dv.data)))
        return attn_fail(ATTN_E_INVALID, "%s has no data (NULL)", rows > 0 && !dq.data ? "dq" : !dk.data ? "dk" : "dv");
    return ATTN_OK;
}

attn_status attn_attend(const attn_sdpa_desc *dd, attn_view q, const attn_kv_src *kv, attn_view out, float *lse) {
    attn_sdpa_desc e = resolve_math(dd, attn_kv_type(kv, 0), attn_kv_type(kv, 1));
    const attn_sdpa_desc *d = &e;
    if (d->math != ATTN_MATH_STRICT && d->dropout)
        return mode_dropout_fail(); /* a mode rounds P; dropout rescales it */
    if (d->impl != ATTN_IMPL_REF && d->Sq <= ATTN_DECODE_MAX_SQ && !d->dropout)
        return attn_decode_forward(d, q, kv, out, lse);          /* a few queries: memory-bound, flash-decoding */
    if (!kv->pool_k) return tiles(d, q, kv->k, kv->v, out, lse); /* plain tensors of any qkv_dtype */
    attn_view k, v; /* storage: contiguous float32 is read in place, the rest gathered */
    return attn_kv_src_f32_views(kv, &k, &v) ? tiles(d, q, k, v, out, lse) : gather(d, q, kv, out, lse);
}

attn_status attn_sdpa_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                              float *lse) {
    attn_err_clear();
    attn_status st = attn_sdpa_check(d, q, k, v, out, 1);
    if (st != ATTN_OK) return st;
    attn_kv_src src = {
        .dtype = attn_view_dtype(d->qkv_dtype), .Hkv = attn_sem_hkv(d), .D = d->D, .Dv = d->Dv, .k = k, .v = v};
    return attn_attend(d, q, &src, out, lse);
}

attn_status attn_sdpa_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores, float *weights) {
    attn_err_clear();
    if (!d) return attn_fail(ATTN_E_INVALID, "the descriptor is NULL");
    attn_sdpa_desc e = *d; /* the weights for inspection: strict in every mode */
    e.math = ATTN_MATH_STRICT;
    return attn_sdpa_ref_weights(&e, q, k, scores, weights);
}

attn_status attn_sdpa_backward(const attn_sdpa_desc *dd, attn_view q, attn_view k, attn_view v, attn_view out,
                               attn_view dout, const float *lse, attn_view dq, attn_view dk, attn_view dv) {
    attn_err_clear();
    attn_status st = attn_sdpa_check(dd, q, k, v, dout, 1);
    if (st != ATTN_OK) return st;
    attn_dtype vt = attn_view_dtype(dd->qkv_dtype);
    attn_sdpa_desc e = resolve_math(dd, vt, vt); /* base/sem.h: attn_sem_grad_type */
    const attn_sdpa_desc *d = &e;
    if (d->math != ATTN_MATH_STRICT && d->dropout) return mode_dropout_fail();
    if (d->score_mod && !d->score_mod_grad)
        return attn_fail(ATTN_E_UNSUPPORTED, "score_mod_grad = 0: the backward through score_mod needs its derivative");
    st = grads_check(d, dq, dk, dv);
    if (st) return st;
    if (d->impl == ATTN_IMPL_REF) return attn_sdpa_ref_backward(d, q, k, v, dout, dq, dk, dv);
    return attn_flash_backward(d, q, k, v, out, dout, lse, dq, dk, dv);
}

/* Context-parallel building blocks (attn.h): always the fused path. */
static attn_status block_check(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                               const float *m, const float *l, const float *t) {
    attn_err_clear();
    attn_status st = attn_sdpa_check(d, q, k, v, dout, 1);
    if (st != ATTN_OK) return st;
    if (d->dropout) return attn_fail(ATTN_E_UNSUPPORTED, "dropout in a block of a larger problem");
    if (attn_flex_on(d))
        return attn_fail(ATTN_E_UNSUPPORTED, "score_mod, mask_mod or block_mask in a block of a larger problem");
    if (d->B * d->H * d->Sq > 0 && (!m || !l || !t))
        return attn_fail(ATTN_E_INVALID, "the block's statistic %s is NULL", !m ? "m" : !l ? "l" : "t");
    return ATTN_OK;
}

attn_status attn_sdpa_block_stats(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                  float *m, float *l, float *t) {
    attn_status st = block_check(d, q, k, v, dout, m, l, t);
    attn_sdpa_desc e = *d; /* the backward's statistics: strict, as the backward */
    e.math = ATTN_MATH_STRICT;
    return st != ATTN_OK ? st : attn_flash_block_stats(&e, q, k, v, dout, m, l, t);
}

attn_status attn_sdpa_block_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                     const float *m, const float *l, const float *t, attn_view dq, attn_view dk,
                                     attn_view dv) {
    attn_status st = block_check(d, q, k, v, dout, m, l, t);
    if (st != ATTN_OK) return st;
    st = grads_check(d, dq, dk, dv);
    if (st) return st;
    attn_sdpa_desc e = *d;
    e.math = ATTN_MATH_STRICT;
    return attn_flash_block_backward(&e, q, k, v, dout, m, l, t, dq, dk, dv);
}
