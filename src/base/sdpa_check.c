/* The SDPA semantics every path shares, below both the reference (src/ref)
 * and the dispatcher/fused path (src/core): argument validation and the
 * default scale and a descriptor's defaults. Visibility and score modifiers
 * are in sem.h. Nothing here
 * calls up into core, ref or modules. */
#include "internal.h"
#include "sem.h"

#include <math.h>
#include <string.h>

float attn_default_scale(int64_t D) {
    /* Layers compute scores / sqrt(D) (Python double sqrt); multiplying by the
     * float reciprocal is within 1 ulp of that. */
    return D > 0 ? (float)(1.0 / sqrt((double)D)) : 0.0f;
}

static int view_ok(attn_view t) { return t.data != NULL; }

void attn_sdpa_desc_init(attn_sdpa_desc *d, int64_t B, int64_t H, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->B = B, d->H = H, d->Sq = Sq, d->Sk = Sk, d->D = D, d->Dv = Dv;
    d->scale = attn_default_scale(D);
    d->seqlens_k_dtype = ATTN_DTYPE_I64;
    d->window_left = d->window_right = -1;
}

/* the inference fields: GQA, seqlens, window, softcap, ALiBi */
static attn_status check_features(const attn_sdpa_desc *d) {
    if (d->Hkv < 0 || (d->Hkv > 0 && (d->Hkv > d->H || d->H % d->Hkv != 0))) return ATTN_E_SHAPE;
    if (d->seqlens_k) {
        if (d->seqlens_k_dtype != 0 && d->seqlens_k_dtype != ATTN_DTYPE_I32 && d->seqlens_k_dtype != ATTN_DTYPE_I64)
            return ATTN_E_DTYPE;
        for (int64_t b = 0; b < d->B; b++) {
            int64_t n = attn_sem_skg(d, b);
            if (n < 0 || n > attn_sem_sk_total(d)) return ATTN_E_SHAPE;
        }
    }
    if (d->q_start < 0 || d->k_start < 0 || d->Sq_total < 0 || d->Sk_total < 0 ||
        d->q_start > attn_sem_sq_total(d) - d->Sq || d->k_start > attn_sem_sk_total(d) - d->Sk ||
        attn_sem_sq_total(d) > INT32_MAX || attn_sem_sk_total(d) > INT32_MAX)
        return ATTN_E_SHAPE;
    if (attn_sem_is_block(d) && d->dropout) return ATTN_E_UNSUPPORTED; /* keep decisions are per global element */
    if (d->window && (d->window_left < -1 || d->window_right < -1)) return ATTN_E_INVALID;
    if (!(d->softcap >= 0.0f) || isinf(d->softcap)) return ATTN_E_INVALID;
    if (d->qkv_dtype != ATTN_DTYPE_INVALID && d->qkv_dtype != ATTN_DTYPE_F32 && d->qkv_dtype != ATTN_DTYPE_F16 &&
        d->qkv_dtype != ATTN_DTYPE_BF16)
        return ATTN_E_DTYPE;
    if (d->alibi_slopes)
        for (int64_t h = 0; h < d->H; h++)
            if (!isfinite(d->alibi_slopes[h])) return ATTN_E_INVALID;
    if (d->attention_chunk < 0) return ATTN_E_INVALID;
    if (d->math != ATTN_MATH_STRICT && d->math != ATTN_MATH_DATA && d->math != ATTN_MATH_BF16) return ATTN_E_INVALID;
    if (d->cu_seqlens_q || d->cu_seqlens_k) { /* packed sequences */
        if (!d->cu_seqlens_q || !d->cu_seqlens_k || d->nseq < 1 || d->B != 1) return ATTN_E_INVALID;
        if (d->seqlens_k || d->key_mask || d->alibi_slopes) return ATTN_E_UNSUPPORTED;
        if (attn_sem_is_block(d)) return ATTN_E_UNSUPPORTED;
        const int32_t *cu[2] = {d->cu_seqlens_q, d->cu_seqlens_k};
        int64_t end[2] = {d->Sq, d->Sk};
        for (int t = 0; t < 2; t++) {
            if (cu[t][0] != 0 || cu[t][d->nseq] != end[t]) return ATTN_E_SHAPE;
            for (int64_t s = 0; s < d->nseq; s++)
                if (cu[t][s + 1] < cu[t][s]) return ATTN_E_SHAPE;
        }
    }
    for (int t = 0; t < 4; t++)
        if (d->attn_mask_strides[t] < 0 || d->attn_bias_strides[t] < 0) return ATTN_E_INVALID;
    if ((d->attn_mask || d->attn_bias) && attn_sem_is_block(d)) return ATTN_E_UNSUPPORTED; /* indexed by local i, j */
    if (d->sinks) {
        if (attn_sem_is_block(d)) return ATTN_E_UNSUPPORTED; /* a sink joins the whole row's softmax once */
        for (int64_t h = 0; h < d->H; h++)
            if (!isfinite(d->sinks[h])) return ATTN_E_INVALID;
    }
    return ATTN_OK;
}

attn_status attn_sdpa_check(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out, int need_v) {
    if (!d) return ATTN_E_INVALID;
    if (d->B < 0 || d->H < 0 || d->Sq < 0 || d->Sk < 0 || d->D < 1 || (need_v && d->Dv < 1)) return ATTN_E_SHAPE;
    /* each dimension fits an int (BLAS, tiles); every product is checked */
    if (d->B > INT32_MAX || d->H > INT32_MAX || d->Sq > INT32_MAX || d->Sk > INT32_MAX || d->D > INT32_MAX ||
        d->Dv > INT32_MAX)
        return ATTN_E_SHAPE;
    {
        size_t n;
        const int64_t sq[4] = {d->B, d->H, d->Sq, d->D > d->Dv ? d->D : d->Dv};
        const int64_t sk[4] = {d->B, d->H, d->Sk, d->D > d->Dv ? d->D : d->Dv};
        const int64_t ss[4] = {d->B, d->H, d->Sq, d->Sk};
        if (attn_numel(4, sq, &n) || n > SIZE_MAX / 16 || attn_numel(4, sk, &n) || n > SIZE_MAX / 16 ||
            attn_numel(4, ss, &n))
            return ATTN_E_OVERFLOW;
    }
    if (d->causal < ATTN_CAUSAL_NONE || d->causal > ATTN_CAUSAL_BOTTOM_RIGHT) return ATTN_E_INVALID;
    if (d->impl < ATTN_IMPL_AUTO || d->impl > ATTN_IMPL_FAST) return ATTN_E_INVALID;
    if (!isfinite(d->scale)) return ATTN_E_INVALID;
    int64_t rows = d->B * d->H * d->Sq;
    if (rows > 0 && d->Sk > 0) {
        if (!view_ok(q) || !view_ok(k)) return ATTN_E_INVALID;
        if (need_v && (!view_ok(v) || !view_ok(out))) return ATTN_E_INVALID;
    } else if (need_v && rows > 0 && !view_ok(out)) {
        return ATTN_E_INVALID;
    }
    if (d->key_mask) {
        if (d->key_mask_polarity != ATTN_MASK_TRUE_MEANS_MASKED && d->key_mask_polarity != ATTN_MASK_TRUE_MEANS_KEEP)
            return ATTN_E_INVALID;
    }
    attn_status st = check_features(d);
    if (st != ATTN_OK) return st;
    if (d->dropout) {
        size_t n;
        const int64_t dims[4] = {d->B, d->H, d->Sq, d->Sk};
        if (attn_numel(4, dims, &n)) return ATTN_E_OVERFLOW;
        if (d->dropout->n != (uint64_t)n && d->dropout->p > 0.0 && d->dropout->p < 1.0) return ATTN_E_SHAPE;
    }
    return ATTN_OK;
}
