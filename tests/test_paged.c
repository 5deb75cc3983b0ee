/* Attention over caller-owned pages (attn.h, attn_paged_attention; issue
 * 35): rows written with attn_paged_append through a slot mapping into pages
 * of a shuffled page table (NHD and HND, packed and padded strides, page
 * sizes 1, 3, 16 and 64, every storage type), sequences of different lengths
 * including empty ones, decode (Sq 1 and 4) and packed prefill (qo_indptr),
 * GQA, causal, window, softcap, sinks, lse, the math modes: against the
 * reference on each sequence's rows as stored (dense tensors); slots never
 * written hold NaN and must never be read; 1 and 2 threads bitwise; equal to
 * libattn's own KV cache holding the same rows. Bad input: a status and
 * nothing written. merge_states: two halves of the keys merged equal the
 * whole, empty sides, in place, NaN. */
#include "testutil.h"
#include "base/storage.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 35u;

/* fp8 scales: K's per kv head, V's per tensor */
static const float kscales[2] = {0.05f, 0.02f}, vscale1[1] = {0.03f};

/* x (a row of n) as stored and read back (base/storage.h's codecs, which
 * test_formats checks against float64), with fp8's scale */
static void as_stored(attn_dtype t, float *x, int n, float scale) {
    unsigned char buf[4096];
    float par[2] = {scale, 0.0f};
    attn_st_store_row(t, x, n, buf, par);
    attn_st_load_row(t, buf, n, par, x);
}

static int rowpar(attn_dtype t) { return attn_storage_of(t)->params == ATTN_ST_ROWPAR; }
static int scaled(attn_dtype t) { return attn_storage_of(t)->params == ATTN_ST_SCALED; }

/* A paged problem: B sequences of len[b] tokens in pages of the table */
typedef struct pprob {
    attn_paged_kv kv;
    int B, Hkv, D, Dv;
    int64_t len[8];
    int32_t indptr[9], indices[512], last[8];
    float *k, *v;   /* (B, Hkv, maxlen, D|Dv) the rows as given (float32) */
    float *k0, *v0; /* the rows before storage rounded them */
    float *kp, *vp; /* int8 / int4: the (scale, zero) pairs */
    int maxlen;
} pprob;

static size_t page_bytes(const pprob *p, int is_v) {
    const int64_t *s = is_v ? p->kv.v_strides : p->kv.k_strides;
    int64_t dim = is_v ? p->Dv : p->D, ps = p->kv.page_size, H = p->Hkv;
    int64_t per = s[0] ? s[0] : ps * H * dim;
    return attn_storage_bytes(is_v && p->kv.v_dtype ? p->kv.v_dtype : p->kv.dtype, per * p->kv.num_pages);
}

/* pages filled with NaN (f32/f16/bf16: an all-ones pattern; q8_0: NaN scales), then the rows appended; the pools
 * and the pairs end where a page the process may not read begins, and the pool's last page is the last
 * sequence's last (a read past the caller's memory faults) */
static void make(pprob *p, attn_dtype t, attn_dtype vt, attn_kv_layout layout, int ps, int padded, const int *lens,
                 int B, int Hkv, int D) {
    memset(p, 0, sizeof *p);
    p->B = B, p->Hkv = Hkv, p->D = D, p->Dv = D;
    int npages = 0, maxlen = 0;
    for (int b = 0; b < B; b++) {
        p->len[b] = lens[b];
        maxlen = lens[b] > maxlen ? lens[b] : maxlen;
        npages += (lens[b] + ps - 1) / ps;
    }
    p->maxlen = maxlen;
    int total = npages + 3; /* spare pages nobody refers to */
    p->kv = (attn_paged_kv){
        .dtype = t, .layout = layout, .num_pages = total, .page_size = ps, .Hkv = Hkv, .D = D, .Dv = D, .v_dtype = vt};
    if (padded) { /* a gap after each page and each token row: strides of the caller's own */
        int64_t row = layout == ATTN_KV_NHD ? Hkv * D + 32 : D;
        int64_t tok = layout == ATTN_KV_NHD ? row : D, head = layout == ATTN_KV_NHD ? D : ps * D + 32;
        int64_t page = layout == ATTN_KV_NHD ? ps * row + 64 : Hkv * head + 64;
        int64_t s[3] = {page, tok, head};
        memcpy(p->kv.k_strides, s, sizeof s), memcpy(p->kv.v_strides, s, sizeof s);
    }
    size_t kb = page_bytes(p, 0), vb = page_bytes(p, 1);
    p->kv.k_pages = tu_guard_alloc(kb), p->kv.v_pages = tu_guard_alloc(vb);
    memset(p->kv.k_pages, 0xff, kb), memset(p->kv.v_pages, 0xff, vb);
    attn_dtype vtt = vt ? vt : t;
    /* the formats' scales and pairs (pairs NaN until written; padded: the caller's strides) */
    if (scaled(t)) p->kv.k_scale = kscales, p->kv.k_scale_len = Hkv;
    if (scaled(vtt)) p->kv.v_scale = vscale1, p->kv.v_scale_len = 1;
    int64_t np = (int64_t)total * (ps * Hkv + 5);
    for (int is_v = 0; is_v < 2; is_v++) {
        if (!rowpar(is_v ? vtt : t)) continue;
        float *pp = tu_guard_alloc((size_t)np * 2 * sizeof(float));
        for (int64_t i = 0; i < 2 * np; i++) pp[i] = NAN;
        if (padded) {
            int64_t s[3] = {ps * Hkv + 5, Hkv, 1};
            memcpy(is_v ? p->kv.vp_strides : p->kv.kp_strides, s, sizeof s);
        }
        if (is_v)
            p->kv.v_params = p->vp = pp;
        else
            p->kv.k_params = p->kp = pp;
    }
    /* a shuffled page table: page ids in a random order */
    int perm[512];
    for (int i = 0; i < total; i++) perm[i] = i;
    for (int i = total - 1; i > 0; i--) {
        int j = tu_irand(&lcg, 0, i), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (int i = 0; npages && i < total; i++) /* the pool's last page: the last sequence's last */
        if (perm[i] == total - 1) perm[i] = perm[npages - 1], perm[npages - 1] = total - 1;
    int at = 0;
    p->indptr[0] = 0;
    for (int b = 0; b < B; b++) {
        int n = (lens[b] + ps - 1) / ps;
        for (int i = 0; i < n; i++) p->indices[at + i] = perm[at + i];
        at += n;
        p->indptr[b + 1] = at;
        p->last[b] = n ? lens[b] - (n - 1) * ps : 0;
    }
    p->kv.kv_indptr = p->indptr, p->kv.kv_indices = p->indices, p->kv.kv_last_page_len = p->last;
    size_t nr = (size_t)B * Hkv * (maxlen ? maxlen : 1) * D;
    p->k = tu_rand_array(nr, &lcg, 1.5f), p->v = tu_rand_array(nr, &lcg, 1.0f);
    /* append every sequence's rows, token by token in a shuffled order of slots */
    int T = 0;
    for (int b = 0; b < B; b++) T += lens[b];
    float *kr = calloc((size_t)(T + 1) * Hkv * D, 4), *vr = calloc((size_t)(T + 1) * Hkv * D, 4);
    int64_t *slots = malloc((size_t)(T + 1) * sizeof *slots);
    int tok = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < lens[b]; j++, tok++) {
            slots[tok] = (int64_t)p->indices[p->indptr[b] + j / ps] * ps + j % ps;
            for (int h = 0; h < Hkv; h++)
                for (int c = 0; c < D; c++) {
                    size_t src = (((size_t)b * Hkv + h) * maxlen + j) * D + c;
                    kr[((size_t)tok * Hkv + h) * D + c] = p->k[src], vr[((size_t)tok * Hkv + h) * D + c] = p->v[src];
                }
        }
    slots[T] = -1; /* a padding token: skipped */
    CHECK_OK(attn_paged_append(&p->kv, T + 1, kr, vr, slots));
    p->k0 = malloc(nr * 4), p->v0 = malloc(nr * 4);
    memcpy(p->k0, p->k, nr * 4), memcpy(p->v0, p->v, nr * 4);
    /* the reference reads the rows as stored */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hkv; h++)
            for (int j = 0; j < lens[b]; j++) {
                size_t at2 = (((size_t)b * Hkv + h) * maxlen + j) * D;
                as_stored(t, p->k + at2, D, scaled(t) ? kscales[h] : 1.0f);
                as_stored(vtt, p->v + at2, D, vscale1[0]);
            }
    free(kr), free(vr), free(slots);
}

static void unmake(pprob *p) {
    free(p->k), free(p->v), free(p->k0), free(p->v0);
    tu_guard_free(p->kv.k_pages), tu_guard_free(p->kv.v_pages), tu_guard_free(p->kp), tu_guard_free(p->vp);
}

/* the reference of sequence b: q rows (h, i) at q + h qh + i qs, into out (H, nq, D) and lse (H, nq) */
static void reference(const pprob *p, const attn_sdpa_desc *opt, int b, int H, int nq, const float *q, int64_t qh,
                      int64_t qs, float *out, float *lse) {
    attn_sdpa_desc d = *opt;
    int len = (int)p->len[b];
    d.B = 1, d.H = H, d.Sq = nq, d.Sk = len, d.Hkv = p->Hkv, d.D = p->D, d.Dv = p->Dv, d.impl = ATTN_IMPL_REF;
    d.key_mask = NULL;
    int64_t kst = (int64_t)p->maxlen * p->D;
    attn_view vq = {(float *)q, 0, qh, qs}, vo = {out, 0, (int64_t)nq * p->Dv, p->Dv};
    attn_view vk = {p->k + (size_t)b * p->Hkv * kst, p->Hkv * kst, kst, p->D};
    attn_view vv = {p->v + (size_t)b * p->Hkv * kst, p->Hkv * kst, kst, p->D};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, lse));
}

/* does math DATA (variant 3) round an operand: 16-bit or integer K, or P before an fp8 V (bf16) */
static int rounds(attn_dtype t, attn_dtype vt) {
    return t != ATTN_DTYPE_F32 || vt == ATTN_DTYPE_FP8_E4M3 || vt == ATTN_DTYPE_FP8_E5M2;
}

static void options(attn_sdpa_desc *d, int variant, float *sinks) {
    d->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (variant == 1) d->window = 1, d->window_left = 5, d->window_right = -1, d->softcap = 20.0f;
    if (variant == 2) d->sinks = sinks;
    if (variant == 3) d->causal = ATTN_CAUSAL_NONE, d->math = ATTN_MATH_DATA;
}

/* decode: q (B, H, Sq, D) against every sequence's pages, against the reference */
static void decode(attn_dtype t, attn_dtype vt, attn_kv_layout layout, int ps, int padded, int Sq, int variant) {
    static const int lens[5] = {37, 0, 70, 1, 129};
    pprob p;
    int B = 5, Hkv = 2, H = 4, D = 64;
    make(&p, t, vt, layout, ps, padded, lens, B, Hkv, D);
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    size_t nq = (size_t)B * H * Sq * D;
    float *q = tu_rand_array(nq, &lcg, 1.0f), *out = malloc(nq * 4), *o1 = malloc(nq * 4), *ref = malloc(nq * 4);
    float *lse = malloc((size_t)B * H * Sq * 4), *lref = malloc((size_t)B * H * Sq * 4);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, 0, D, D);
    d.Hkv = Hkv;
    options(&d, variant, sinks);
    attn_view vq = {q, H * Sq * D, Sq * D, D}, vo = {out, H * Sq * D, Sq * D, D}, vo1 = {o1, H * Sq * D, Sq * D, D};
    CHECK_OK(attn_paged_attention(&d, vq, &p.kv, NULL, vo, lse));
    omp_set_num_threads(1);
    CHECK_OK(attn_paged_attention(&d, vq, &p.kv, NULL, vo1, NULL));
    omp_set_num_threads(2);
    char what[160];
    snprintf(what, sizeof what, "decode type %d/%d layout %d page %d padded %d Sq %d variant %d", (int)t, (int)vt,
             (int)layout, ps, padded, Sq, variant);
    CHECK(!memcmp(out, o1, nq * 4), "%s: 1 and 2 threads bitwise", what);
    for (int b = 0; b < B; b++)
        reference(&p, &d, b, H, Sq, q + (size_t)b * H * Sq * D, (int64_t)Sq * D, D, ref + (size_t)b * H * Sq * D,
                  lref + (size_t)b * H * Sq);
    double tol = variant == 3 && rounds(t, vt) ? 2e-2 : t == ATTN_DTYPE_F32 ? 2e-5 : 1e-4;
    CHECK(tu_allclose(what, out, ref, nq, tol, tol), "%s: against the reference", what);
    CHECK(tu_allclose(what, lse, lref, (size_t)B * H * Sq, tol, tol), "%s: lse", what);
    /* the empty sequence: zeros, lse -inf (or the sink) */
    for (int h = 0; h < H; h++)
        for (int i = 0; i < Sq; i++) {
            size_t r = ((size_t)1 * H + h) * Sq + i;
            CHECK(out[r * D] == 0.0f && out[r * D + D - 1] == 0.0f, "%s: empty sequence gives zeros", what);
            CHECK(variant == 2 ? lse[r] == sinks[h] : lse[r] == -INFINITY, "%s: empty sequence's lse %g", what,
                  (double)lse[r]);
        }
    /* libattn's own cache holding the same rows (contiguous): the same answer,
     * bit for bit where the pages hold a whole number of decode blocks (128) */
    if (variant != 3) {
        attn_kv_cache_config cfg = {.batch = B,
                                    .kv_heads = Hkv,
                                    .capacity = 256,
                                    .head_dim = D,
                                    .dtype = t,
                                    .v_dtype = vt,
                                    .k_scale = p.kv.k_scale,
                                    .v_scale = p.kv.v_scale,
                                    .k_scale_len = p.kv.k_scale_len,
                                    .v_scale_len = p.kv.v_scale_len};
        attn_kv_cache *c = NULL;
        CHECK_OK(attn_kv_cache_create(&cfg, &c));
        int64_t kst = (int64_t)p.maxlen * D;
        attn_view ak = {p.k0, Hkv * kst, kst, D}, av = {p.v0, Hkv * kst, kst, D};
        CHECK_OK(attn_kv_cache_append(c, p.len, ak, av));
        attn_sdpa_desc dc = d;
        dc.Hkv = 0;
        CHECK_OK(attn_kv_cache_attend(c, &dc, vq, vo1, NULL));
        if (ps == 128)
            CHECK(!memcmp(out, o1, nq * 4), "%s: the cache's bits (whole decode blocks per page)", what);
        else
            CHECK(tu_allclose(what, out, o1, nq, 1e-5, 1e-6), "%s: the cache's answer", what);
        attn_kv_cache_free(c);
    }
    free(q), free(out), free(o1), free(ref), free(lse), free(lref);
    unmake(&p);
}

/* packed prefill: qo_indptr rows per sequence (0 for one), q (1, H, Tq, D) token-major */
static void prefill(attn_dtype t, attn_dtype vt, attn_kv_layout layout, int ps, int variant) {
    static const int lens[4] = {50, 20, 0, 90};
    static const int nqs[4] = {20, 1, 0, 33};
    pprob p;
    int B = 4, Hkv = 1, H = 3, D = 32;
    make(&p, t, vt, layout, ps, 0, lens, B, Hkv, D);
    float sinks[3] = {0.5f, 1.0f, -0.5f};
    int32_t qo[5] = {0};
    for (int b = 0; b < B; b++) qo[b + 1] = qo[b] + nqs[b];
    int Tq = qo[B];
    size_t nq = (size_t)Tq * H * D;
    float *q = tu_rand_array(nq, &lcg, 1.0f), *out = malloc(nq * 4), *ref = malloc((size_t)H * 33 * D * 4);
    float *lse = malloc((size_t)Tq * H * 4), *lref = malloc((size_t)H * 33 * 4);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Tq, 0, D, D);
    d.Hkv = Hkv;
    options(&d, variant, sinks);
    /* token-major packed views: row (t, h) at (t H + h) D */
    attn_view vq = {q, 0, D, (int64_t)H * D}, vo = {out, 0, D, (int64_t)H * D};
    CHECK_OK(attn_paged_attention(&d, vq, &p.kv, qo, vo, lse));
    char what[128];
    snprintf(what, sizeof what, "prefill type %d/%d layout %d page %d variant %d", (int)t, (int)vt, (int)layout, ps,
             variant);
    double tol = variant == 3 && rounds(t, vt) ? 2e-2 : t == ATTN_DTYPE_F32 ? 2e-5 : 1e-4;
    for (int b = 0; b < B; b++) {
        int n = nqs[b];
        if (!n) continue;
        reference(&p, &d, b, H, n, q + (size_t)qo[b] * H * D, D, (int64_t)H * D, ref, lref);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < n; i++) {
                const float *got = out + ((size_t)(qo[b] + i) * H + h) * D, *want = ref + ((size_t)h * n + i) * D;
                char w2[200];
                snprintf(w2, sizeof w2, "%s seq %d head %d row %d", what, b, h, i);
                CHECK(tu_allclose(w2, got, want, (size_t)D, tol, tol), "%s", w2);
                float lg = lse[(qo[b] + i) * H + h], lw = lref[h * n + i];
                CHECK(fabsf(lg - lw) <= tol * (1 + fabsf(lw)) || (lg == lw), "%s lse %g want %g", w2, (double)lg,
                      (double)lw);
            }
    }
    free(q), free(out), free(ref), free(lse), free(lref);
    unmake(&p);
}

/* MLA (v_pages NULL): one latent head of D = 576 values per token, V its
 * first 512; Hq = 16 query heads; decode and packed prefill against the
 * reference with K the rows and V their first 512 values (the pool ends at an
 * unreadable page; its last page holds the first sequence's first tokens) */
static void mla(attn_dtype t, int ps) {
    enum { D = 576, DV = 512, H = 16, B = 2 };
    static const int lens[B] = {70, 3};
    int npages = 0, maxlen = 70;
    for (int b = 0; b < B; b++) npages += (lens[b] + ps - 1) / ps;
    attn_paged_kv kv = {
        .dtype = t, .layout = ATTN_KV_NHD, .num_pages = npages, .page_size = ps, .Hkv = 1, .D = D, .Dv = DV};
    size_t pool = (size_t)npages * ps * attn_storage_bytes(t, D); /* ends at an unreadable page */
    kv.k_pages = tu_guard_alloc(pool);
    memset(kv.k_pages, 0, pool);
    static const float mla_scale[1] = {0.01f}; /* fp8 latent rows: a per-tensor scale */
    if (scaled(t)) kv.k_scale = mla_scale, kv.k_scale_len = 1;
    int32_t indptr[B + 1] = {0}, indices[128], last[B];
    for (int b = 0, at = 0; b < B; b++) {
        int n = (lens[b] + ps - 1) / ps;
        for (int i = 0; i < n; i++) indices[at + i] = npages - 1 - (at + i); /* reversed pages */
        at += n, indptr[b + 1] = at, last[b] = lens[b] - (n - 1) * ps;
    }
    kv.kv_indptr = indptr, kv.kv_indices = indices, kv.kv_last_page_len = last;
    float *rows = tu_rand_array((size_t)B * maxlen * D, &lcg, 1.0f); /* (B, 1, maxlen, D) */
    int64_t slots[140];
    float *app = malloc((size_t)140 * D * 4);
    int T = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < lens[b]; j++, T++) {
            slots[T] = (int64_t)indices[indptr[b] + j / ps] * ps + j % ps;
            memcpy(app + (size_t)T * D, rows + ((size_t)b * maxlen + j) * D, (size_t)D * 4);
        }
    CHECK_OK(attn_paged_append(&kv, T, app, NULL, slots));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < lens[b]; j++) as_stored(t, rows + ((size_t)b * maxlen + j) * D, D, mla_scale[0]);
    float scale = 0.0721f; /* the caller's MLA softmax scale */
    for (int prefill = 0; prefill < 2; prefill++) {
        int nq[B] = {prefill ? 5 : 1, prefill ? 2 : 1};
        int32_t qo[B + 1] = {0, nq[0], nq[0] + nq[1]};
        int Tq = qo[B];
        float *q = tu_rand_array((size_t)Tq * H * D, &lcg, 1.0f), *out = malloc((size_t)Tq * H * DV * 4);
        float *ref = malloc((size_t)H * 5 * DV * 4);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, prefill ? Tq : 1, 0, D, DV);
        d.Hkv = 1, d.scale = scale, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        /* token-major rows (t, h) at (t H + h) D: decode's q (B, H, 1, D) is the same memory */
        attn_view vq = prefill ? (attn_view){q, 0, D, (int64_t)H * D} : (attn_view){q, (int64_t)H * D, D, D};
        attn_view vo = prefill ? (attn_view){out, 0, DV, (int64_t)H * DV} : (attn_view){out, (int64_t)H * DV, DV, DV};
        CHECK_OK(attn_paged_attention(&d, vq, &kv, prefill ? qo : NULL, vo, NULL));
        for (int b = 0; b < B; b++) {
            attn_sdpa_desc r;
            attn_sdpa_desc_init(&r, 1, H, nq[b], lens[b], D, DV);
            r.Hkv = 1, r.scale = scale, r.causal = ATTN_CAUSAL_BOTTOM_RIGHT, r.impl = ATTN_IMPL_REF;
            const float *kb = rows + (size_t)b * maxlen * D;
            attn_view rk = {(float *)kb, 0, 0, D}, rv = {(float *)kb, 0, 0, D}; /* V: the first 512 of each row */
            attn_view rq = {q + (size_t)qo[b] * H * D, 0, D, (int64_t)H * D}, ro = {ref, 0, (int64_t)nq[b] * DV, DV};
            CHECK_OK(attn_sdpa_forward(&r, rq, rk, rv, ro, NULL));
            for (int h = 0; h < H; h++)
                for (int i = 0; i < nq[b]; i++) {
                    char what[96];
                    snprintf(what, sizeof what, "MLA type %d page %d %s seq %d head %d row %d", (int)t, ps,
                             prefill ? "prefill" : "decode", b, h, i);
                    CHECK(tu_allclose(what, out + ((size_t)(qo[b] + i) * H + h) * DV,
                                      ref + ((size_t)h * nq[b] + i) * DV, DV, 1e-4, 1e-5),
                          "%s", what);
                }
        }
        free(q), free(out), free(ref);
    }
    free(rows), free(app);
    tu_guard_free(kv.k_pages);
}

/* bad input: a status and nothing written */
static void refused(void) {
    static const int lens[2] = {10, 5};
    pprob p;
    make(&p, ATTN_DTYPE_F32, 0, ATTN_KV_NHD, 4, 0, lens, 2, 1, 32);
    float q[2 * 32], out[2 * 32];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 2, 1, 1, 0, 32, 32);
    attn_view vq = {q, 32, 32, 32}, vo = {out, 32, 32, 32};
    for (int i = 0; i < 64; i++) q[i] = 0.1f, out[i] = 7.0f;
    CHECK_OK(attn_paged_attention(&d, vq, &p.kv, NULL, vo, NULL));
    struct {
        const char *what;
        int field, value;
        attn_status want;
    } cases[] = {
        {"an index past the pages", 0, 99, ATTN_E_INVALID},    {"a negative index", 0, -1, ATTN_E_INVALID},
        {"indptr not from 0", 1, 1, ATTN_E_INVALID},           {"indptr decreasing", 2, 1, ATTN_E_INVALID},
        {"last page length 0 on pages", 3, 0, ATTN_E_INVALID}, {"last page length past the page", 3, 5, ATTN_E_INVALID},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t ind[8], ip[3], last[2];
        memcpy(ind, p.indices, sizeof ind), memcpy(ip, p.indptr, sizeof ip), memcpy(last, p.last, sizeof last);
        attn_paged_kv kv = p.kv;
        kv.kv_indices = ind, kv.kv_indptr = ip, kv.kv_last_page_len = last;
        if (cases[c].field == 0) ind[1] = cases[c].value;
        if (cases[c].field == 1) ip[0] = cases[c].value;
        if (cases[c].field == 2) ip[1] = 4, ip[2] = 3; /* 3 pages then a negative count */
        if (cases[c].field == 3) last[0] = cases[c].value;
        for (int i = 0; i < 64; i++) out[i] = 7.0f;
        CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == cases[c].want, "%s", cases[c].what);
        CHECK(out[0] == 7.0f && out[63] == 7.0f, "%s: nothing written", cases[c].what);
    }
    attn_paged_kv kv = p.kv;
    int32_t last[2] = {2, 1}, ip[3] = {0, 3, 3};
    kv.kv_indptr = ip, kv.kv_last_page_len = last;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_INVALID, "an empty sequence with a last length");
    kv = p.kv, kv.page_size = 0;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_SHAPE, "page size 0");
    kv = p.kv, kv.D = 16;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_SHAPE, "D other than the call's");
    kv = p.kv, kv.k_strides[0] = -5, kv.k_strides[1] = 1, kv.k_strides[2] = 1;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_SHAPE, "a negative stride");
    kv = p.kv, kv.layout = (attn_kv_layout)7;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_INVALID, "an unknown layout");
    kv = p.kv, kv.dtype = ATTN_DTYPE_I32;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_UNSUPPORTED, "a type that is not storage");
    /* the formats: scales finite and > 0, of length 1 or Hkv; int8 / int4 pairs given */
    float bad_scales[3][2] = {{0.0f, 1.0f}, {-1.0f, 1.0f}, {INFINITY, 1.0f}};
    kv = p.kv, kv.dtype = ATTN_DTYPE_FP8_E4M3, kv.k_strides[0] = kv.k_strides[1] = kv.k_strides[2] = 0;
    kv.v_dtype = ATTN_DTYPE_F32, kv.k_scale_len = 1;
    for (int i = 0; i < 3; i++) {
        kv.k_scale = bad_scales[i];
        CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_INVALID, "fp8 scale %g refused",
              (double)bad_scales[i][0]);
        CHECK(attn_paged_append(&kv, 0, NULL, NULL, NULL) == ATTN_E_INVALID, "fp8 scale %g refused by append",
              (double)bad_scales[i][0]);
    }
    kv.k_scale = bad_scales[0] + 1, kv.k_scale_len = 2; /* Hkv is 1 */
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_SHAPE, "a scale per head of 2 heads for 1");
    kv = p.kv, kv.dtype = ATTN_DTYPE_KV_INT8;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_INVALID, "int8 pages without their pairs");
    kv.k_params = bad_scales[0], kv.kp_strides[0] = -1, kv.kp_strides[1] = kv.kp_strides[2] = 1;
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_SHAPE, "a negative pair stride");
    kv = p.kv, kv.dtype = ATTN_DTYPE_KV_INT4, kv.v_pages = NULL, kv.v_dtype = 0, kv.k_params = bad_scales[0];
    CHECK(attn_paged_attention(&d, vq, &kv, NULL, vo, NULL) == ATTN_E_UNSUPPORTED, "int4 latent rows (MLA)");
    kv = p.kv, kv.dtype = ATTN_DTYPE_Q4_0, kv.D = kv.Dv = 16, kv.k_strides[0] = kv.k_strides[1] = kv.k_strides[2] = 16;
    CHECK(attn_paged_append(&kv, 0, NULL, NULL, NULL) == ATTN_E_SHAPE, "q4_0 rows of 16 values");
    CHECK(out[0] == 7.0f && out[63] == 7.0f, "refused formats: nothing written");
    int32_t qo_bad[3] = {0, 2, 1};
    CHECK(attn_paged_attention(&d, vq, &p.kv, qo_bad, vo, NULL) == ATTN_E_INVALID, "qo_indptr decreasing / short");
    CHECK(attn_paged_attention(NULL, vq, &p.kv, NULL, vo, NULL) == ATTN_E_INVALID, "no descriptor");
    /* append: a slot past the pages writes nothing */
    size_t kb = page_bytes(&p, 0);
    unsigned char *before = malloc(kb);
    memcpy(before, p.kv.k_pages, kb);
    float rows[2 * 32] = {0};
    int64_t slots[2] = {0, (int64_t)p.kv.num_pages * 4};
    CHECK(attn_paged_append(&p.kv, 2, rows, rows, slots) == ATTN_E_INVALID, "a slot past the pages");
    CHECK(!memcmp(before, p.kv.k_pages, kb), "a refused append writes nothing");
    free(before);
    unmake(&p);
}

/* merge_states: the keys split in two, each half's (out, lse) merged = the whole */
static void merge(void) {
    int H = 4, Sk = 90, D = 32;
    float *q = tu_rand_array((size_t)H * D, &lcg, 1.0f), *k = tu_rand_array((size_t)Sk * D, &lcg, 2.0f);
    float *v = tu_rand_array((size_t)Sk * D, &lcg, 1.0f), oa[4 * 32], ob[4 * 32], ow[4 * 32], om[4 * 32];
    float la[4], lb[4], lw[4], lm[4];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, 1, Sk, D, D);
    d.Hkv = 1;
    attn_view vq = {q, H * D, D, D}, vk = {k, Sk * D, D, D}, vv = {v, Sk * D, D, D};
    attn_view vw = {ow, H * D, D, D};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vw, lw));
    d.Sk = 40;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, (attn_view){oa, H * D, D, D}, la));
    d.Sk = Sk - 40;
    CHECK_OK(attn_sdpa_forward(&d, vq, (attn_view){k + 40 * D, Sk * D, D, D}, (attn_view){v + 40 * D, Sk * D, D, D},
                               (attn_view){ob, H * D, D, D}, lb));
    CHECK_OK(attn_merge_states(H, D, oa, la, ob, lb, om, lm));
    CHECK(tu_allclose("merge_states out", om, ow, (size_t)H * D, 1e-5, 1e-6), "two halves merged = the whole");
    CHECK(tu_allclose("merge_states lse", lm, lw, (size_t)H, 1e-6, 1e-6), "lse");
    /* in place, and empty sides */
    CHECK_OK(attn_merge_states(H, D, oa, la, ob, lb, oa, la));
    CHECK(tu_allclose("merge_states in place", oa, om, (size_t)H * D, 0, 0), "in place gives the same bits");
    float e_o[4 * 32], e_l[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    for (int i = 0; i < 4 * 32; i++) e_o[i] = NAN; /* an empty side's out is not read */
    CHECK_OK(attn_merge_states(H, D, ob, lb, e_o, e_l, om, lm));
    CHECK(!memcmp(om, ob, sizeof om) && !memcmp(lm, lb, sizeof lm), "merging an empty state changes nothing");
    CHECK_OK(attn_merge_states(H, D, e_o, e_l, e_o, e_l, om, lm));
    CHECK(om[0] == 0.0f && om[127] == 0.0f && lm[0] == -INFINITY, "two empty states: zeros, -inf");
    lb[1] = NAN;
    CHECK_OK(attn_merge_states(H, D, oa, la, ob, lb, om, lm));
    CHECK(isnan(om[32]) && isnan(lm[1]) && !isnan(om[0]), "NaN propagates to its row only");
    CHECK(attn_merge_states(-1, D, oa, la, ob, lb, om, lm) == ATTN_E_SHAPE, "negative rows");
    CHECK(attn_merge_states(1, D, NULL, la, ob, lb, om, lm) == ATTN_E_INVALID, "a missing input");
    free(q), free(k), free(v);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    omp_set_num_threads(2);
    enum { NT = 9 };
    attn_dtype types[NT] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                            ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                            ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
    int pages[4] = {1, 3, 16, 128};
    for (int ti = 0; ti < NT; ti++)
        for (int layout = 0; layout < 2; layout++)
            for (int pi = 0; pi < 4; pi++) {
                int ps = pages[pi];
                decode(types[ti], 0, (attn_kv_layout)layout, ps, pi & 1, 1, pi % 3);
                decode(types[ti], 0, (attn_kv_layout)layout, ps, 0, 4, (pi + ti) % 4);
                prefill(types[ti], 0, (attn_kv_layout)layout, ps, (pi + layout) % 4);
                /* K and V of different types (V's: another type of the list) */
                attn_dtype vt = types[(ti + 1 + 2 * pi + layout) % NT];
                decode(types[ti], vt, (attn_kv_layout)layout, ps, pi & 1, 1 + 3 * (pi & 1), pi % 4);
                prefill(types[ti], vt, (attn_kv_layout)layout, ps, (pi + 1) % 4);
            }
    for (int ps = 1; ps <= 64; ps *= 64)
        for (int t = 0; t < 6; t++) mla(types[t], ps); /* f32, f16, bf16, q8_0, fp8 e4m3 / e5m2 */
    refused();
    merge();
    return tu_finish("test_paged");
}
