/* The SDPA semantics every path shares, below both the reference (src/ref)
 * and the dispatcher/fused path (src/core): argument validation and the
 * default scale and a descriptor's defaults. Visibility and score modifiers
 * are in sem.h. Nothing here
 * calls up into core, ref or modules. */
#include "internal.h"
#include "sem.h"
#include "flex.h"

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

#define LL(x) ((long long)(x))

/* the inference fields: GQA, seqlens, window, softcap, ALiBi */
static attn_status check_features(const attn_sdpa_desc *d) {
    if (d->Hkv < 0 || (d->Hkv > 0 && (d->Hkv > d->H || d->H % d->Hkv != 0)))
        return attn_fail(ATTN_E_SHAPE, "Hkv = %lld kv heads: the %lld query heads must be a multiple of it (GQA)",
                         LL(d->Hkv), LL(d->H));
    if (d->seqlens_k) {
        if (d->seqlens_k_dtype != 0 && d->seqlens_k_dtype != ATTN_DTYPE_I32 && d->seqlens_k_dtype != ATTN_DTYPE_I64)
            return attn_fail(ATTN_E_DTYPE, "seqlens_k_dtype = %d: I32 or I64 expected", (int)d->seqlens_k_dtype);
        for (int64_t b = 0; b < d->B; b++) {
            int64_t n = attn_sem_skg(d, b);
            if (n < 0 || n > attn_sem_sk_total(d))
                return attn_fail(ATTN_E_SHAPE, "seqlens_k[%lld] = %lld is not in [0, Sk = %lld]", LL(b), LL(n),
                                 LL(attn_sem_sk_total(d)));
        }
    }
    if (d->q_start < 0 || d->k_start < 0 || d->Sq_total < 0 || d->Sk_total < 0 ||
        d->q_start > attn_sem_sq_total(d) - d->Sq || d->k_start > attn_sem_sk_total(d) - d->Sk ||
        attn_sem_sq_total(d) > INT32_MAX || attn_sem_sk_total(d) > INT32_MAX)
        return attn_fail(ATTN_E_SHAPE,
                         "block at q_start = %lld, k_start = %lld (Sq = %lld, Sk = %lld) does not lie within "
                         "Sq_total = %lld, Sk_total = %lld",
                         LL(d->q_start), LL(d->k_start), LL(d->Sq), LL(d->Sk), LL(attn_sem_sq_total(d)),
                         LL(attn_sem_sk_total(d)));
    if (attn_sem_is_block(d) && d->dropout)
        return attn_fail(ATTN_E_UNSUPPORTED, "dropout on a block of a larger problem (its stream is per element)");
    if (d->window && (d->window_left < -1 || d->window_right < -1))
        return attn_fail(ATTN_E_INVALID, "window_left = %lld, window_right = %lld: each -1 (unbounded) or >= 0",
                         LL(d->window_left), LL(d->window_right));
    if (!(d->softcap >= 0.0f) || isinf(d->softcap))
        return attn_fail(ATTN_E_INVALID, "softcap = %g: 0 (off) or a finite positive cap expected", (double)d->softcap);
    if (d->qkv_dtype != ATTN_DTYPE_INVALID && d->qkv_dtype != ATTN_DTYPE_F32 && d->qkv_dtype != ATTN_DTYPE_F16 &&
        d->qkv_dtype != ATTN_DTYPE_BF16)
        return attn_fail(ATTN_E_DTYPE, "qkv_dtype = %d: F32, F16 or BF16 expected", (int)d->qkv_dtype);
    if (d->alibi_slopes)
        for (int64_t h = 0; h < d->H; h++)
            if (!isfinite(d->alibi_slopes[h]))
                return attn_fail(ATTN_E_INVALID, "alibi_slopes[%lld] = %g is not finite", LL(h),
                                 (double)d->alibi_slopes[h]);
    if (d->attention_chunk < 0)
        return attn_fail(ATTN_E_INVALID, "attention_chunk = %lld: 0 (off) or a positive chunk expected",
                         LL(d->attention_chunk));
    if (d->math != ATTN_MATH_STRICT && d->math != ATTN_MATH_DATA && d->math != ATTN_MATH_BF16)
        return attn_fail(ATTN_E_INVALID, "math = %d: STRICT, DATA or BF16 expected", (int)d->math);
    if (d->cu_seqlens_q || d->cu_seqlens_k) { /* packed sequences */
        if (!d->cu_seqlens_q || !d->cu_seqlens_k || d->nseq < 1 || d->B != 1)
            return attn_fail(ATTN_E_INVALID,
                             "packed sequences need cu_seqlens_q and cu_seqlens_k, nseq >= 1 (got %lld) and B = 1 "
                             "(got %lld)",
                             LL(d->nseq), LL(d->B));
        if (d->seqlens_k || d->key_mask || d->alibi_slopes)
            return attn_fail(ATTN_E_UNSUPPORTED, "packed sequences with seqlens_k, key_mask or alibi_slopes");
        if (attn_sem_is_block(d)) return attn_fail(ATTN_E_UNSUPPORTED, "packed sequences in a block of a problem");
        const int32_t *cu[2] = {d->cu_seqlens_q, d->cu_seqlens_k};
        int64_t end[2] = {d->Sq, d->Sk};
        for (int t = 0; t < 2; t++) {
            if (cu[t][0] != 0 || cu[t][d->nseq] != end[t])
                return attn_fail(ATTN_E_SHAPE, "cu_seqlens_%c must run from 0 to %s = %lld, got %d .. %d",
                                 t ? 'k' : 'q', t ? "Sk" : "Sq", LL(end[t]), cu[t][0], cu[t][d->nseq]);
            for (int64_t s = 0; s < d->nseq; s++)
                if (cu[t][s + 1] < cu[t][s])
                    return attn_fail(ATTN_E_SHAPE, "cu_seqlens_%c[%lld] = %d is below cu_seqlens_%c[%lld] = %d",
                                     t ? 'k' : 'q', LL(s + 1), cu[t][s + 1], t ? 'k' : 'q', LL(s), cu[t][s]);
        }
    }
    for (int t = 0; t < 4; t++)
        if (d->attn_mask_strides[t] < 0 || d->attn_bias_strides[t] < 0)
            return attn_fail(ATTN_E_INVALID, "attn_%s_strides[%d] = %lld: strides are >= 0 (0 broadcasts)",
                             d->attn_mask_strides[t] < 0 ? "mask" : "bias", t,
                             LL(d->attn_mask_strides[t] < 0 ? d->attn_mask_strides[t] : d->attn_bias_strides[t]));
    if ((d->attn_mask || d->attn_bias) && attn_sem_is_block(d))
        return attn_fail(ATTN_E_UNSUPPORTED, "a dense mask or bias in a block of a larger problem");
    if (d->sinks) {
        if (attn_sem_is_block(d)) return attn_fail(ATTN_E_UNSUPPORTED, "sinks in a block of a larger problem");
        for (int64_t h = 0; h < d->H; h++)
            if (!isfinite(d->sinks[h]))
                return attn_fail(ATTN_E_INVALID, "sinks[%lld] = %g is not finite", LL(h), (double)d->sinks[h]);
    }
    return ATTN_OK;
}

attn_status attn_sdpa_check(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out, int need_v) {
    if (!d) return attn_fail(ATTN_E_INVALID, "the descriptor is NULL");
    if (d->B < 0 || d->H < 0 || d->Sq < 0 || d->Sk < 0 || d->D < 1 || (need_v && d->Dv < 1))
        return attn_fail(ATTN_E_SHAPE, "B = %lld, H = %lld, Sq = %lld, Sk = %lld, D = %lld, Dv = %lld: sizes >= 0, D and "
                                       "Dv >= 1 expected",
                         LL(d->B), LL(d->H), LL(d->Sq), LL(d->Sk), LL(d->D), LL(d->Dv));
    /* each dimension fits an int (BLAS, tiles); every product is checked */
    if (d->B > INT32_MAX || d->H > INT32_MAX || d->Sq > INT32_MAX || d->Sk > INT32_MAX || d->D > INT32_MAX ||
        d->Dv > INT32_MAX)
        return attn_fail(ATTN_E_SHAPE, "a size over 2^31 - 1 (B = %lld, H = %lld, Sq = %lld, Sk = %lld, D = %lld, Dv "
                                       "= %lld)",
                         LL(d->B), LL(d->H), LL(d->Sq), LL(d->Sk), LL(d->D), LL(d->Dv));
    {
        size_t n;
        const int64_t sq[4] = {d->B, d->H, d->Sq, d->D > d->Dv ? d->D : d->Dv};
        const int64_t sk[4] = {d->B, d->H, d->Sk, d->D > d->Dv ? d->D : d->Dv};
        const int64_t ss[4] = {d->B, d->H, d->Sq, d->Sk};
        if (attn_numel(4, sq, &n) || n > SIZE_MAX / 16 || attn_numel(4, sk, &n) || n > SIZE_MAX / 16 ||
            attn_numel(4, ss, &n))
            return attn_fail(ATTN_E_OVERFLOW, "B H Sq Sk = %lld x %lld x %lld x %lld overflows a size", LL(d->B),
                             LL(d->H), LL(d->Sq), LL(d->Sk));
    }
    if (d->causal < ATTN_CAUSAL_NONE || d->causal > ATTN_CAUSAL_BOTTOM_RIGHT)
        return attn_fail(ATTN_E_INVALID, "causal = %d: NONE, TOP_LEFT or BOTTOM_RIGHT expected", (int)d->causal);
    if (d->impl < ATTN_IMPL_AUTO || d->impl > ATTN_IMPL_FAST)
        return attn_fail(ATTN_E_INVALID, "impl = %d: AUTO, REF or FAST expected", (int)d->impl);
    if (!isfinite(d->scale)) return attn_fail(ATTN_E_INVALID, "scale = %g is not finite", (double)d->scale);
    int64_t rows = d->B * d->H * d->Sq;
    if (rows > 0 && d->Sk > 0) {
        if (!view_ok(q) || !view_ok(k))
            return attn_fail(ATTN_E_INVALID, "%s has no data (NULL) for %lld query rows over %lld keys",
                             !view_ok(q) ? "q" : "k", LL(rows), LL(d->Sk));
        if (need_v && (!view_ok(v) || !view_ok(out)))
            return attn_fail(ATTN_E_INVALID, "%s has no data (NULL)", !view_ok(v) ? "v" : "out");
    } else if (need_v && rows > 0 && !view_ok(out)) {
        return attn_fail(ATTN_E_INVALID, "out has no data (NULL) for %lld query rows", LL(rows));
    }
    if (d->key_mask) {
        if (d->key_mask_polarity != ATTN_MASK_TRUE_MEANS_MASKED && d->key_mask_polarity != ATTN_MASK_TRUE_MEANS_KEEP)
            return attn_fail(ATTN_E_INVALID, "key_mask_polarity = %d: say which way the mask reads",
                             (int)d->key_mask_polarity);
    }
    attn_status st = check_features(d);
    if (st == ATTN_OK) st = attn_flex_check(d);
    if (st != ATTN_OK) return st;
    if (d->dropout) {
        size_t n;
        const int64_t dims[4] = {d->B, d->H, d->Sq, d->Sk};
        if (attn_numel(4, dims, &n)) return attn_fail(ATTN_E_OVERFLOW, "the dropout stream's B H Sq Sk overflows");
        if (d->dropout->n != (uint64_t)n && d->dropout->p > 0.0 && d->dropout->p < 1.0)
            return attn_fail(ATTN_E_SHAPE, "dropout->n = %llu elements; the problem has B H Sq Sk = %zu",
                             (unsigned long long)d->dropout->n, n);
    }
    return ATTN_OK;
}

attn_status attn_scales_check(const char *what, const float *sc, int64_t len, int64_t Hkv) {
    if (!sc) return ATTN_OK;
    if (len != 1 && len != Hkv)
        return attn_fail(ATTN_E_SHAPE, "%s_len = %lld: 1 or Hkv = %lld scales expected", what, LL(len), LL(Hkv));
    for (int64_t h = 0; h < len; h++)
        if (!(sc[h] > 0.0f) || !isfinite(sc[h]))
            return attn_fail(ATTN_E_INVALID, "%s[%lld] = %g: a finite scale > 0 expected", what, LL(h), (double)sc[h]);
    return ATTN_OK;
}

attn_status attn_kv_query_check(const attn_sdpa_desc *d, int64_t Hkv, int64_t D, int64_t Dv, const char *over) {
    if (d->dropout) return attn_fail(ATTN_E_UNSUPPORTED, "dropout over %s", over);
    if (d->seqlens_k || d->cu_seqlens_q || d->cu_seqlens_k || attn_sem_is_block(d))
        return attn_fail(ATTN_E_INVALID, "seqlens_k, cu_seqlens or a block over %s: it gives the lengths", over);
    if (d->qkv_dtype == ATTN_DTYPE_F16 || d->qkv_dtype == ATTN_DTYPE_BF16)
        return attn_fail(ATTN_E_UNSUPPORTED, "qkv_dtype = %s over %s: float32 queries expected",
                         d->qkv_dtype == ATTN_DTYPE_F16 ? "F16" : "BF16", over);
    if ((d->Hkv != 0 && d->Hkv != Hkv) || d->D != D || d->Dv != Dv)
        return attn_fail(ATTN_E_SHAPE, "descriptor Hkv = %lld, D = %lld, Dv = %lld against %s's Hkv = %lld, D = %lld, "
                                       "Dv = %lld",
                         LL(d->Hkv), LL(d->D), LL(d->Dv), over, LL(Hkv), LL(D), LL(Dv));
    return ATTN_OK;
}
