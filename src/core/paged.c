/* Attention over caller-owned pages (attn.h, attn_paged_attention; issue 35):
 * FlashInfer's CSR page table read in place through core/kv_src.h, so decode,
 * the gathered long-query path and every option of the KV cache's attend run
 * unchanged; vLLM's slot_mapping for writing rows; and merge_states, the
 * combination of two attention states that cascade attention needs. */
#include "internal.h"
#include "base/sem.h"
#include "base/storage.h"
#include "core/kv_src.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LL(x) ((long long)(x))

/* element strides (page, token, kv head) of rows of dim elements: the
 * caller's, or the layout's packed ones when all three are 0 */
static void page_strides(const attn_paged_kv *kv, int64_t dim, const int64_t *given, int64_t *s) {
    if (given[0] || given[1] || given[2]) {
        s[0] = given[0], s[1] = given[1], s[2] = given[2];
        return;
    }
    int64_t ps = kv->page_size, H = kv->Hkv;
    s[0] = ps * H * dim;
    if (kv->layout == ATTN_KV_NHD)
        s[1] = H * dim, s[2] = dim;
    else
        s[1] = dim, s[2] = ps * dim;
}

/* V's type (v_dtype, or K's) */
static attn_dtype v_type(const attn_paged_kv *kv) { return kv->v_dtype ? kv->v_dtype : kv->dtype; }

/* the (scale, zero) pairs of int8 / int4 pages: given when the type needs
 * them, strides in pairs (the caller's, or the layout's packed ones) */
static attn_status params_check(const char *what, const attn_paged_kv *kv, attn_dtype t, const float *par,
                                const int64_t *given,
                                int64_t *ps) {
    if (attn_storage_of(t)->params != ATTN_ST_ROWPAR) return ATTN_OK;
    if (kv->num_pages > 0 && !par)
        return attn_fail(ATTN_E_INVALID, "%s is NULL: %s pages need their (scale, zero) pairs", what,
                         attn_storage_name(t));
    page_strides(kv, 1, given, ps);
    if (ps[0] < 1 || ps[1] < 1 || ps[2] < 1)
        return attn_fail(ATTN_E_SHAPE, "%s strides (%lld, %lld, %lld): each >= 1 expected", what, LL(ps[0]),
                         LL(ps[1]), LL(ps[2]));
    return ATTN_OK;
}

/* the pages themselves (not the table): types, sizes, strides, scales */
static attn_status pages_check(const attn_paged_kv *kv, int64_t ks[3], int64_t vs[3], int64_t kps[3], int64_t vps[3]) {
    if (!kv) return attn_fail(ATTN_E_INVALID, "kv (the pages) is NULL");
    const attn_storage *tk = attn_storage_of(kv->dtype), *tv = attn_storage_of(v_type(kv));
    if (!tk || !tv)
        return attn_fail(ATTN_E_UNSUPPORTED, "%s = %d is not a KV storage type", tk ? "v_dtype" : "dtype",
                         (int)(tk ? v_type(kv) : kv->dtype));
    if (!kv->v_pages && v_type(kv) != kv->dtype) /* MLA: V is in the K rows */
        return attn_fail(ATTN_E_INVALID, "v_dtype = %s without v_pages: V is read from the K rows (dtype %s)",
                         attn_storage_name(v_type(kv)), attn_storage_name(kv->dtype));
    if (!kv->v_pages && kv->dtype == ATTN_DTYPE_KV_INT4) /* its order needs the row's D */
        return attn_fail(ATTN_E_UNSUPPORTED, "int4 pages without v_pages (V within the K rows)");
    if (kv->layout != ATTN_KV_NHD && kv->layout != ATTN_KV_HND)
        return attn_fail(ATTN_E_INVALID, "layout = %d: ATTN_KV_NHD or ATTN_KV_HND expected", (int)kv->layout);
    if (kv->num_pages < 0 || kv->page_size < 1 || kv->Hkv < 1 || kv->D < 1 || kv->Dv < 1)
        return attn_fail(ATTN_E_SHAPE,
                         "num_pages = %lld, page_size = %lld, Hkv = %lld, D = %lld, Dv = %lld: num_pages >= 0, the "
                         "others >= 1 expected",
                         LL(kv->num_pages), LL(kv->page_size), LL(kv->Hkv), LL(kv->D), LL(kv->Dv));
    if (kv->num_pages > 0 && !kv->k_pages)
        return attn_fail(ATTN_E_INVALID, "k_pages is NULL with num_pages = %lld", LL(kv->num_pages));
    page_strides(kv, kv->D, kv->k_strides, ks);
    if (!kv->v_pages) { /* MLA: V is the first Dv values of each K row */
        if (kv->Dv > kv->D)
            return attn_fail(ATTN_E_SHAPE, "Dv = %lld > D = %lld without v_pages (V is the first Dv of each K row)",
                             LL(kv->Dv), LL(kv->D));
        memcpy(vs, ks, 3 * sizeof *vs);
    } else {
        page_strides(kv, kv->Dv, kv->v_strides, vs);
    }
    for (int t = 0; t < 3; t++)
        if (ks[t] < 1 || vs[t] < 1)
            return attn_fail(ATTN_E_SHAPE, "%s_strides[%d] = %lld: strides are >= 1", ks[t] < 1 ? "k" : "v", t,
                             LL(ks[t] < 1 ? ks[t] : vs[t]));
    /* block types (q8_0, q4_0, int4): whole blocks, rows and strides in blocks */
    if (kv->D % tk->block || kv->Dv % tv->block)
        return attn_fail(ATTN_E_SHAPE, "D = %lld, Dv = %lld: %s rows hold whole blocks of %lld values", LL(kv->D),
                         LL(kv->Dv), attn_storage_name(kv->D % tk->block ? kv->dtype : v_type(kv)),
                         LL(kv->D % tk->block ? tk->block : tv->block));
    for (int t = 0; t < 3; t++)
        if (ks[t] % tk->block || vs[t] % tv->block)
            return attn_fail(ATTN_E_SHAPE, "%s_strides[%d] = %lld: a multiple of the %lld-value block expected",
                             ks[t] % tk->block ? "k" : "v", t, LL(ks[t] % tk->block ? ks[t] : vs[t]),
                             LL(ks[t] % tk->block ? tk->block : tv->block));
    attn_status st = attn_scales_check("k_scale", kv->k_scale, kv->k_scale_len, kv->Hkv);
    if (!st) st = attn_scales_check("v_scale", kv->v_pages ? kv->v_scale : NULL, kv->v_scale_len, kv->Hkv);
    if (!st) st = params_check("k_params", kv, kv->dtype, kv->k_params, kv->kp_strides, kps);
    if (!st && kv->v_pages) st = params_check("v_params", kv, v_type(kv), kv->v_params, kv->vp_strides, vps);
    if (!st && !kv->v_pages) memcpy(vps, kps, 3 * sizeof *vps); /* MLA: V's pairs are K's */
    return st;
}

/* the page table of B sequences: each one's length into len, the longest into *Sk */
static attn_status table_check(const attn_paged_kv *kv, int64_t B, int64_t *len, int64_t *Sk) {
    const int32_t *ip = kv->kv_indptr, *last = kv->kv_last_page_len;
    if (!ip || !last) return attn_fail(ATTN_E_INVALID, "%s is NULL", ip ? "kv_last_page_len" : "kv_indptr");
    if (ip[0] != 0) return attn_fail(ATTN_E_INVALID, "kv_indptr[0] = %d: the table starts at 0", ip[0]);
    *Sk = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t n = (int64_t)ip[b + 1] - ip[b], lp = last[b];
        if (n < 0)
            return attn_fail(ATTN_E_INVALID, "kv_indptr[%lld] = %d is below kv_indptr[%lld] = %d", LL(b + 1),
                             ip[b + 1], LL(b), ip[b]);
        if (n == 0 ? lp != 0 : lp < 1 || lp > kv->page_size)
            return attn_fail(ATTN_E_INVALID, "kv_last_page_len[%lld] = %lld: %s", LL(b), LL(lp),
                             n == 0 ? "0 expected for a sequence of no pages" : "1 .. page_size expected");
        len[b] = n ? (n - 1) * kv->page_size + lp : 0;
        *Sk = len[b] > *Sk ? len[b] : *Sk;
    }
    if (ip[B] > 0 && !kv->kv_indices)
        return attn_fail(ATTN_E_INVALID, "kv_indices is NULL with kv_indptr[B] = %d pages", ip[B]);
    for (int64_t i = 0; i < ip[B]; i++)
        if (kv->kv_indices[i] < 0 || kv->kv_indices[i] >= kv->num_pages)
            return attn_fail(ATTN_E_INVALID, "kv_indices[%lld] = %d is not a page of the pool (num_pages = %lld)",
                             LL(i), kv->kv_indices[i], LL(kv->num_pages));
    return ATTN_OK;
}

/* one call of the KV path over the pages of sequences [b0, b0 + d->B): d's
 * Sk from their lengths (len: the first one's), views for the argument check
 * as the KV cache's stand-ins (their data is not read) */
static attn_status attend_pages(const attn_sdpa_desc *din, attn_view q, const attn_kv_src *src, const int64_t *len,
                                attn_view out, float *lse) {
    attn_sdpa_desc d = *din;
    int64_t Sk = 0;
    for (int64_t b = 0; b < d.B; b++) Sk = len[b] > Sk ? len[b] : Sk;
    d.Hkv = src->Hkv, d.Sk = Sk, d.seqlens_k = len, d.seqlens_k_dtype = ATTN_DTYPE_I64;
    attn_view kk = {q.data, d.Hkv * Sk * d.D, Sk * d.D, d.D}, kv = {q.data, d.Hkv * Sk * d.Dv, Sk * d.Dv, d.Dv};
    attn_status st = attn_sdpa_check(&d, q, kk, kv, out, 1);
    return st != ATTN_OK ? st : attn_attend(&d, q, src, out, lse);
}

attn_status attn_paged_attention(const attn_sdpa_desc *d, attn_view q, const attn_paged_kv *kv,
                                 const int32_t *qo_indptr, attn_view out, float *lse) {
    attn_err_clear();
    if (!d || !kv) return attn_fail(ATTN_E_INVALID, "%s is NULL", d ? "kv" : "the descriptor");
    attn_status st = attn_kv_query_check(d, kv->Hkv, kv->D, kv->Dv, "the pages");
    if (st) return st;
    if (d->B < 0) return attn_fail(ATTN_E_SHAPE, "B = %lld sequences: >= 0 expected", LL(d->B));
    attn_kv_src src = {.dtype = kv->dtype, .Hkv = kv->Hkv, .D = kv->D, .Dv = kv->Dv, .page_size = kv->page_size};
    src.vtype = v_type(kv);
    st = pages_check(kv, src.ks, src.vs, src.kps, src.vps);
    if (st) return st;
    /* scales and pairs; MLA: V's are K's */
    src.kscale = kv->k_scale, src.nks = kv->k_scale_len, src.kpar = kv->k_params;
    src.vscale = kv->v_pages ? kv->v_scale : kv->k_scale, src.nvs = kv->v_pages ? kv->v_scale_len : kv->k_scale_len;
    src.vpar = kv->v_pages ? kv->v_params : kv->k_params;
    int64_t B = d->B, Sk;
    int64_t *len = malloc((size_t)(B ? B : 1) * sizeof *len);
    if (!len) return ATTN_E_NOMEM;
    st = table_check(kv, B, len, &Sk);
    if (!st && qo_indptr) { /* packed queries: from 0, non-decreasing, every row of q */
        if (qo_indptr[0] != 0 || qo_indptr[B] != d->Sq)
            st = attn_fail(ATTN_E_INVALID, "qo_indptr runs %d .. %d: from 0 to Sq = %lld expected", qo_indptr[0],
                           qo_indptr[B], LL(d->Sq));
        for (int64_t b = 0; !st && b < B; b++)
            if (qo_indptr[b + 1] < qo_indptr[b])
                st = attn_fail(ATTN_E_INVALID, "qo_indptr[%lld] = %d is below qo_indptr[%lld] = %d", LL(b + 1),
                               qo_indptr[b + 1], LL(b), qo_indptr[b]);
    }
    /* never read where no row is: a non-NULL stand-in keeps the storage route */
    src.pool_k = kv->k_pages ? kv->k_pages : (const void *)kv;
    src.pool_v = kv->v_pages ? kv->v_pages : src.pool_k; /* NULL: MLA's V within the K rows */
    src.indptr = kv->kv_indptr, src.indices = kv->kv_indices;
    if (st || !qo_indptr) {
        if (!st) st = attend_pages(d, q, &src, len, out, lse);
        free(len);
        return st;
    }
    /* packed queries: one call per sequence over its rows (FlashInfer's
     * prefill); the views' batch dimension is the packed one, lse token-major */
    int64_t maxq = 0, H = d->H;
    for (int64_t b = 0; b < B; b++)
        maxq = qo_indptr[b + 1] - qo_indptr[b] > maxq ? qo_indptr[b + 1] - qo_indptr[b] : maxq;
    float *lb = lse ? malloc((size_t)(H * (maxq ? maxq : 1)) * sizeof *lb) : NULL;
    if (lse && !lb) st = ATTN_E_NOMEM;
    for (int64_t b = 0; !st && b < B; b++) {
        int64_t t0 = qo_indptr[b], nq = qo_indptr[b + 1] - t0;
        if (nq == 0) continue;
        attn_sdpa_desc e = *d;
        e.B = 1, e.Sq = nq;
        if (e.attn_mask) e.attn_mask += t0 * e.attn_mask_strides[2];
        if (e.attn_bias) e.attn_bias += t0 * e.attn_bias_strides[2];
        if (e.key_mask) e.key_mask += b * e.key_mask_stride_b;
        attn_kv_src sb = src;
        sb.indptr = kv->kv_indptr + b;
        attn_view qb = q, ob = out;
        qb.data = q.data ? q.data + t0 * q.stride_s : NULL, ob.data = out.data ? out.data + t0 * out.stride_s : NULL;
        st = attend_pages(&e, qb, &sb, len + b, ob, lb);
        for (int64_t h = 0; !st && lse && h < H; h++)
            for (int64_t i = 0; i < nq; i++) lse[(t0 + i) * H + h] = lb[h * nq + i];
    }
    free(lb), free(len);
    return st;
}

/* x into K's (is_v 0) or V's row of token off of a page, kv head hk: with
 * its scale (fp8), its (scale, zero) pair written (int8 / int4) */
static void row_write(const attn_paged_kv *kv, int is_v, int64_t page, int64_t off, int64_t hk, const int64_t *st,
                      const int64_t *pst, const float *x) {
    attn_dtype t = is_v ? v_type(kv) : kv->dtype;
    const float *sc = is_v ? kv->v_scale : kv->k_scale;
    float par[2] = {1.0f, 0.0f}, *pp = is_v ? kv->v_params : kv->k_params, *at = par;
    if (attn_storage_of(t)->params == ATTN_ST_ROWPAR)
        at = pp + 2 * (page * pst[0] + off * pst[1] + hk * pst[2]);
    else if (sc)
        par[0] = sc[(is_v ? kv->v_scale_len : kv->k_scale_len) > 1 ? hk : 0];
    char *row =
        (char *)(is_v ? kv->v_pages : kv->k_pages) + attn_storage_bytes(t, page * st[0] + off * st[1] + hk * st[2]);
    attn_st_store_row(t, x, is_v ? kv->Dv : kv->D, row, at);
}

attn_status attn_paged_append(const attn_paged_kv *kv, int64_t T, const float *k, const float *v,
                              const int64_t *slot_mapping) {
    int64_t ks[3], vs[3], kps[3] = {0}, vps[3] = {0};
    attn_err_clear();
    attn_status st = pages_check(kv, ks, vs, kps, vps);
    if (st) return st;
    if (T < 0) return attn_fail(ATTN_E_SHAPE, "T = %lld tokens: >= 0 expected", LL(T));
    if (T > 0 && (!k || (!v && kv->v_pages) || !slot_mapping))
        return attn_fail(ATTN_E_INVALID, "%s is NULL with T = %lld", !k ? "k" : !slot_mapping ? "slot_mapping" : "v",
                         LL(T));
    int64_t nslots = kv->num_pages * kv->page_size;
    for (int64_t t = 0; t < T; t++) /* every slot checked before anything is written */
        if (slot_mapping[t] >= nslots)
            return attn_fail(ATTN_E_INVALID,
                             "slot_mapping[%lld] = %lld is past the pool's %lld slots (num_pages x page_size); < 0 "
                             "skips a token",
                             LL(t), LL(slot_mapping[t]), LL(nslots));
    int64_t H = kv->Hkv;
    for (int64_t t = 0; t < T; t++) {
        int64_t slot = slot_mapping[t];
        if (slot < 0) continue; /* vLLM's padding tokens */
        int64_t page = slot / kv->page_size, off = slot % kv->page_size;
        for (int64_t hk = 0; hk < H; hk++) {
            row_write(kv, 0, page, off, hk, ks, kps, k + (t * H + hk) * kv->D);
            if (kv->v_pages) /* MLA (no V pages): the K row holds V */
                row_write(kv, 1, page, off, hk, vs, vps, v + (t * H + hk) * kv->Dv);
        }
    }
    return ATTN_OK;
}

attn_status attn_merge_states(int64_t n, int64_t Dv, const float *out_a, const float *lse_a, const float *out_b,
                              const float *lse_b, float *out, float *lse) {
    attn_err_clear();
    if (n < 0 || Dv < 0) return attn_fail(ATTN_E_SHAPE, "n = %lld, Dv = %lld: >= 0 expected", LL(n), LL(Dv));
    if (n > 0 && (!out_a || !lse_a || !out_b || !lse_b || !out || !lse))
        return attn_fail(ATTN_E_INVALID, "a NULL state with n = %lld rows", LL(n));
    for (int64_t r = 0; r < n; r++) {
        double la = lse_a[r], lb = lse_b[r], m = la > lb ? la : lb;
        const float *a = out_a + r * Dv, *b = out_b + r * Dv;
        float *o = out + r * Dv;
        if (isnan(la) || isnan(lb)) { /* NaN in, NaN out */
            for (int64_t c = 0; c < Dv; c++) o[c] = NAN;
            lse[r] = NAN;
            continue;
        }
        if (m == -INFINITY) { /* both empty */
            for (int64_t c = 0; c < Dv; c++) o[c] = 0.0f;
            lse[r] = -INFINITY;
            continue;
        }
        /* weights relative to the larger lse: an empty side weighs exactly 0 and is not read */
        double wa = la == -INFINITY ? 0.0 : exp(la - m), wb = lb == -INFINITY ? 0.0 : exp(lb - m), z = wa + wb;
        for (int64_t c = 0; c < Dv; c++) {
            double x = (wa > 0 ? wa * a[c] : 0.0) + (wb > 0 ? wb * b[c] : 0.0);
            o[c] = (float)(x / z);
        }
        lse[r] = (float)(m + log(z));
    }
    return ATTN_OK;
}
