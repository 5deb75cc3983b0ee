/* The KV cache: contiguous ((B, Hkv, T, D) arrays) or paged (a pool of
 * pages, each holding page_size tokens of every kv head, and a page table
 * per sequence; free pages on a stack). Appends are all or nothing; the
 * attention over the cache calls the core paths (decode reads the pages in
 * place). Paged sequences share pages after a fork: every page counts the
 * table entries that refer to it, returns to the stack when none does, and
 * an append into a shared, partly filled last page copies it first
 * (copy-on-write). */
#include "internal.h"
#include "base/workspace.h"
#include "base/sem.h"
#include "core/kv_src.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct attn_kv_cache {
    attn_kv_cache_config cfg;
    int64_t Dv;
    int64_t *len;               /* (B) tokens per sequence */
    void *k, *v;                /* contiguous: (B, Hkv, T, D|Dv); paged: the page pool */
    float *kpar, *vpar;         /* int8 / int4: a (scale, zero) pair per row, in the rows' order */
    float kscale[1], vscale[1]; /* fp8 per tensor, or: */
    float *kscales, *vscales;   /* per kv head (the config's, copied) */
    attn_kv_src store;          /* the storage as every reader addresses it (core/kv_src.h) */
    int32_t *table;             /* paged: (B, max_pages) page ids, -1 = none */
    int32_t *refs;              /* paged: (npages) table entries referring to each page */
    int32_t *free_stack;
    int64_t nfree, max_pages, npages;
};

static int paged(const attn_kv_cache *c) { return c->cfg.page_size > 0; }

#define LL(x) ((long long)(x))

/* a NULL cache, or a sequence index (what: its argument) out of range */
static attn_status seq_fail(const attn_kv_cache *c, const char *what, int64_t b) {
    if (!c) return attn_fail(ATTN_E_INVALID, "the cache is NULL");
    return attn_fail(ATTN_E_INVALID, "%s = %lld is not a sequence of the cache (batch = %lld)", what, LL(b),
                     LL(c->cfg.batch));
}

/* the descriptor of queries over the cache: the cache's B, Hkv, D and Dv */
static attn_status attend_check(const attn_kv_cache *c, const attn_sdpa_desc *d) {
    if (!c || !d) return attn_fail(ATTN_E_INVALID, "%s is NULL", c ? "the descriptor" : "the cache");
    attn_status st = attn_kv_query_check(d, c->cfg.kv_heads, c->cfg.head_dim, c->Dv, "the cache");
    if (st) return st;
    if (d->B != c->cfg.batch)
        return attn_fail(ATTN_E_SHAPE, "B = %lld: the cache holds batch = %lld sequences", LL(d->B),
                         LL(c->cfg.batch));
    return ATTN_OK;
}

/* an fp8 scale array (len 1 or Hkv, finite, > 0) copied into the cache's
 * own (one: into one, else a new array into *many); NULL: none given */
static attn_status scales_copy(const char *what, const float *sc, int64_t len, int64_t Hkv, float *one, float **many) {
    attn_status st = attn_scales_check(what, sc, len, Hkv);
    if (!sc || st) return st;
    if (len == 1) {
        one[0] = sc[0];
        return ATTN_OK;
    }
    *many = malloc((size_t)len * sizeof **many);
    if (!*many) return ATTN_E_NOMEM;
    memcpy(*many, sc, (size_t)len * sizeof **many);
    return ATTN_OK;
}

/* the cache's scales and per-row pairs as its readers address them */
static void store_scales(attn_kv_cache *kc) {
    attn_kv_cache_config *c = &kc->cfg;
    kc->store.kpar = kc->kpar, kc->store.vpar = kc->vpar;
    if (c->k_scale) c->k_scale = kc->kscales ? kc->kscales : kc->kscale;
    if (c->v_scale) c->v_scale = kc->vscales ? kc->vscales : kc->vscale;
    kc->store.kscale = c->k_scale, kc->store.nks = c->k_scale ? c->k_scale_len : 0;
    kc->store.vscale = c->v_scale, kc->store.nvs = c->v_scale ? c->v_scale_len : 0;
}

attn_status attn_kv_cache_create(const attn_kv_cache_config *cfg, attn_kv_cache **out) {
    attn_err_clear();
    if (!cfg || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", cfg ? "out" : "the config");
    *out = NULL;
    attn_kv_cache_config c = *cfg;
    if (c.dtype == ATTN_DTYPE_INVALID) c.dtype = ATTN_DTYPE_F32;
    if (c.v_dtype == ATTN_DTYPE_INVALID) c.v_dtype = c.dtype;
    const attn_storage *type = attn_storage_of(c.dtype), *vtype = attn_storage_of(c.v_dtype);
    if (!type || !vtype)
        return attn_fail(ATTN_E_UNSUPPORTED, "%s = %d is not a KV storage type", type ? "v_dtype" : "dtype",
                         (int)(type ? c.v_dtype : c.dtype));
    if (c.v_head_dim == 0) c.v_head_dim = c.head_dim;
    if (c.batch < 1 || c.kv_heads < 1 || c.capacity < 1 || c.head_dim < 1 || c.v_head_dim < 1 || c.page_size < 0 ||
        c.num_pages < 0)
        return attn_fail(ATTN_E_SHAPE,
                         "batch = %lld, kv_heads = %lld, capacity = %lld, head_dim = %lld, v_head_dim = %lld, "
                         "page_size = %lld, num_pages = %lld: the first five >= 1, the pages' >= 0 expected",
                         LL(c.batch), LL(c.kv_heads), LL(c.capacity), LL(c.head_dim), LL(c.v_head_dim),
                         LL(c.page_size), LL(c.num_pages));
    if (c.head_dim % type->block || c.v_head_dim % vtype->block) /* rows of whole blocks */
        return attn_fail(ATTN_E_SHAPE, "%s = %lld: %s rows hold whole blocks of %lld values",
                         c.head_dim % type->block ? "head_dim" : "v_head_dim",
                         LL(c.head_dim % type->block ? c.head_dim : c.v_head_dim),
                         c.head_dim % type->block ? type->name : vtype->name,
                         LL(c.head_dim % type->block ? type->block : vtype->block));
    const char *big[5] = {"batch", "kv_heads", "capacity", "head_dim", "v_head_dim"};
    const int64_t bigv[5] = {c.batch, c.kv_heads, c.capacity, c.head_dim, c.v_head_dim};
    for (int i = 0; i < 5; i++)
        if (bigv[i] > INT32_MAX)
            return attn_fail(ATTN_E_SHAPE, "%s = %lld: at most 2^31 - 1 expected", big[i], LL(bigv[i]));
    attn_kv_cache *kc = calloc(1, sizeof *kc);
    if (!kc) return ATTN_E_NOMEM;
    kc->cfg = c;
    kc->Dv = c.v_head_dim;
    size_t tokens, nk, nv;
    attn_status st = ATTN_OK;
    if (c.page_size > 0) {
        kc->max_pages = (c.capacity + c.page_size - 1) / c.page_size;
        kc->npages = c.num_pages ? c.num_pages : c.batch * kc->max_pages;
        if (kc->npages > INT32_MAX ||
            attn_mul3_size((size_t)kc->npages, (size_t)c.page_size, (size_t)c.kv_heads, &tokens))
            st = ATTN_E_OVERFLOW;
    } else if (attn_mul3_size((size_t)c.batch, (size_t)c.capacity, (size_t)c.kv_heads, &tokens)) {
        st = ATTN_E_OVERFLOW;
    }
    if (!st && (attn_mul_size(tokens, attn_storage_bytes(c.dtype, c.head_dim), &nk) ||
                attn_mul_size(tokens, attn_storage_bytes(c.v_dtype, c.v_head_dim), &nv)))
        st = ATTN_E_OVERFLOW;
    if (!st) {
        kc->len = calloc((size_t)c.batch, sizeof *kc->len);
        kc->k = attn_big_alloc(nk);
        kc->v = attn_big_alloc(nv);
        if (!kc->len || !kc->k || !kc->v) st = ATTN_E_NOMEM;
    }
    /* int8 / int4: a pair per row; fp8: the scales */
    if (!st && type->params == ATTN_ST_ROWPAR && !(kc->kpar = malloc(tokens * 2 * sizeof(float)))) st = ATTN_E_NOMEM;
    if (!st && vtype->params == ATTN_ST_ROWPAR && !(kc->vpar = malloc(tokens * 2 * sizeof(float)))) st = ATTN_E_NOMEM;
    if (!st) st = scales_copy("k_scale", c.k_scale, c.k_scale_len, c.kv_heads, kc->kscale, &kc->kscales);
    if (!st) st = scales_copy("v_scale", c.v_scale, c.v_scale_len, c.kv_heads, kc->vscale, &kc->vscales);
    if (!st && paged(kc)) {
        size_t nt;
        if (attn_mul_size((size_t)c.batch, (size_t)kc->max_pages, &nt)) st = ATTN_E_OVERFLOW;
        kc->table = st ? NULL : malloc(nt * sizeof *kc->table);
        kc->free_stack = st ? NULL : malloc((size_t)kc->npages * sizeof *kc->free_stack);
        kc->refs = st ? NULL : calloc((size_t)kc->npages, sizeof *kc->refs);
        if (!st && (!kc->table || !kc->free_stack || !kc->refs)) st = ATTN_E_NOMEM;
        if (!st) {
            for (size_t i = 0; i < nt; i++) kc->table[i] = -1;
            for (int64_t p = 0; p < kc->npages; p++) kc->free_stack[p] = (int32_t)(kc->npages - 1 - p);
            kc->nfree = kc->npages;
        }
    }
    if (st) {
        attn_kv_cache_free(kc);
        return st;
    }
    kc->store = (attn_kv_src){.dtype = c.dtype,
                              .vtype = c.v_dtype,
                              .Hkv = c.kv_heads,
                              .D = c.head_dim,
                              .Dv = c.v_head_dim,
                              .pool_k = kc->k,
                              .pool_v = kc->v,
                              .table = kc->table,
                              .max_pages = kc->max_pages,
                              .page_size = c.page_size,
                              .capacity = c.capacity};
    store_scales(kc);
    *out = kc;
    return ATTN_OK;
}

int attn_kv_cache_regions(const attn_kv_cache *c, const void *p[4], size_t bytes[4]) {
    /* the rows attn_kv_cache_create allocated (their product checked there) */
    size_t tokens =
        (size_t)c->cfg.kv_heads * (size_t)(paged(c) ? c->npages * c->cfg.page_size : c->cfg.batch * c->cfg.capacity);
    int n = 0;
    p[n] = c->k, bytes[n++] = tokens * attn_storage_bytes(attn_kv_type(&c->store, 0), c->cfg.head_dim);
    p[n] = c->v, bytes[n++] = tokens * attn_storage_bytes(attn_kv_type(&c->store, 1), c->Dv);
    if (c->kpar) p[n] = c->kpar, bytes[n++] = tokens * 2 * sizeof(float);
    if (c->vpar) p[n] = c->vpar, bytes[n++] = tokens * 2 * sizeof(float);
    return n;
}

void attn_kv_cache_free(attn_kv_cache *c) {
    if (!c) return;
    free(c->len), free(c->k), free(c->v), free(c->table), free(c->free_stack), free(c->refs);
    free(c->kpar), free(c->vpar), free(c->kscales), free(c->vscales);
    free(c);
}

const attn_kv_cache_config *attn_kv_cache_get_config(const attn_kv_cache *c) { return c ? &c->cfg : NULL; }

int64_t attn_kv_cache_len(const attn_kv_cache *c, int64_t b) {
    return (c && b >= 0 && b < c->cfg.batch) ? c->len[b] : -1;
}

int64_t attn_kv_cache_free_pages(const attn_kv_cache *c) { return c && paged(c) ? c->nfree : 0; }

/* where key (or value) row j of (b, hk) lives */
static void *slot(const attn_kv_cache *c, int is_v, int64_t b, int64_t hk, int64_t j) {
    int64_t run, ld;
    return (void *)(uintptr_t)attn_kv_rows(&c->store, is_v, b, hk, j, &run, &ld);
}

/* x into key (is_v 0) or value (1) row j of (b, hk), with the row's scale
 * (fp8) or into its (scale, zero) pair (int8 / int4) */
static void row_store(attn_kv_cache *c, int is_v, int64_t b, int64_t hk, int64_t j, const float *x) {
    float par[2], *pp = is_v ? c->vpar : c->kpar, *at = par;
    if (pp)
        at = pp + 2 * attn_kv_par_at(&c->store, is_v, b, hk, j);
    else
        attn_kv_par(&c->store, is_v, b, hk, j, par);
    attn_st_store_row(attn_kv_type(&c->store, is_v), x, is_v ? c->Dv : c->cfg.head_dim, slot(c, is_v, b, hk, j), at);
}

static int64_t pages_for(const attn_kv_cache *c, int64_t len) {
    return (len + c->cfg.page_size - 1) / c->cfg.page_size;
}

static int32_t page_take(attn_kv_cache *c) {
    int32_t p = c->free_stack[--c->nfree];
    c->refs[p] = 1;
    return p;
}

/* one table entry fewer refers to page p: free when none does */
static void page_drop(attn_kv_cache *c, int32_t p) {
    if (--c->refs[p] == 0) c->free_stack[c->nfree++] = p;
}

/* the page holding sequence b's next token, when it is partly filled and
 * shared (an append must copy it first), else -1 */
static int32_t shared_tail(const attn_kv_cache *c, int64_t b) {
    if (!paged(c) || c->len[b] % c->cfg.page_size == 0) return -1;
    int32_t p = c->table[b * c->max_pages + c->len[b] / c->cfg.page_size];
    return c->refs[p] > 1 ? p : -1;
}

/* sequence b's last page replaced by a copy of its own (copy-on-write) */
static void page_copy_tail(attn_kv_cache *c, int64_t b, int32_t old) {
    int32_t fresh = page_take(c);
    size_t rk = attn_storage_bytes(c->store.dtype, c->cfg.head_dim), rv = attn_storage_bytes(c->store.vtype, c->Dv);
    size_t rows = (size_t)(c->cfg.kv_heads * c->cfg.page_size); /* a page: (Hkv, page_size) rows */
    memcpy((char *)c->k + (size_t)fresh * rows * rk, (const char *)c->k + (size_t)old * rows * rk, rows * rk);
    memcpy((char *)c->v + (size_t)fresh * rows * rv, (const char *)c->v + (size_t)old * rows * rv, rows * rv);
    if (c->kpar) memcpy(c->kpar + (size_t)fresh * rows * 2, c->kpar + (size_t)old * rows * 2, rows * 2 * sizeof(float));
    if (c->vpar) memcpy(c->vpar + (size_t)fresh * rows * 2, c->vpar + (size_t)old * rows * 2, rows * 2 * sizeof(float));
    c->table[b * c->max_pages + c->len[b] / c->cfg.page_size] = fresh;
    page_drop(c, old);
}

attn_status attn_kv_cache_append(attn_kv_cache *c, const int64_t *n, attn_view k, attn_view v) {
    attn_err_clear();
    if (!c || !n) return attn_fail(ATTN_E_INVALID, "%s is NULL", c ? "n" : "the cache");
    int64_t B = c->cfg.batch, need = 0, any = 0;
    for (int64_t b = 0; b < B; b++) { /* validate everything before changing anything */
        if (n[b] < 0) return attn_fail(ATTN_E_SHAPE, "n[%lld] = %lld tokens: >= 0 expected", LL(b), LL(n[b]));
        if (n[b] > c->cfg.capacity - c->len[b])
            return attn_fail(ATTN_E_CONTEXT, "n[%lld] = %lld tokens after %lld: past the capacity of %lld", LL(b),
                             LL(n[b]), LL(c->len[b]), LL(c->cfg.capacity));
        if (paged(c)) need += pages_for(c, c->len[b] + n[b]) - pages_for(c, c->len[b]);
        any |= n[b] > 0;
    }
    if (any && (!k.data || !v.data)) return attn_fail(ATTN_E_INVALID, "%s has no data (NULL)", k.data ? "v" : "k");
    /* copies of shared last pages: as many as the sequences appending into one, but
     * none for the last of them when every holder appends (it keeps the page) */
    for (int64_t b = 0; b < B; b++) {
        int32_t p = n[b] > 0 ? shared_tail(c, b) : -1;
        if (p < 0) continue;
        int64_t writers = 0, first = B;
        for (int64_t t = 0; t < B; t++)
            if (n[t] > 0 && shared_tail(c, t) == p) writers++, first = t < first ? t : first;
        if (first == b) need += writers - (writers == c->refs[p]);
    }
    if (need > c->nfree)
        return attn_fail(ATTN_E_NOMEM, "the append needs %lld pages; %lld of num_pages = %lld are free", LL(need),
                         LL(c->nfree), LL(c->npages));
    for (int64_t b = 0; b < B; b++) {
        int32_t shared = n[b] > 0 ? shared_tail(c, b) : -1;
        if (shared >= 0) page_copy_tail(c, b, shared);
        if (paged(c))
            for (int64_t p = pages_for(c, c->len[b]); p < pages_for(c, c->len[b] + n[b]); p++)
                c->table[b * c->max_pages + p] = page_take(c);
        for (int64_t hk = 0; hk < c->cfg.kv_heads; hk++)
            for (int64_t t = 0; t < n[b]; t++) {
                const float *ks = k.data + b * k.stride_b + hk * k.stride_h + t * k.stride_s;
                const float *vs = v.data + b * v.stride_b + hk * v.stride_h + t * v.stride_s;
                row_store(c, 0, b, hk, c->len[b] + t, ks);
                row_store(c, 1, b, hk, c->len[b] + t, vs);
            }
        c->len[b] += n[b];
    }
    return ATTN_OK;
}

attn_status attn_kv_cache_trim(attn_kv_cache *c, int64_t b, int64_t len) {
    attn_err_clear();
    if (!c || b < 0 || b >= c->cfg.batch) return seq_fail(c, "b", b);
    if (len < 0 || len > c->len[b])
        return attn_fail(ATTN_E_SHAPE, "len = %lld: 0 .. the sequence's %lld tokens expected", LL(len), LL(c->len[b]));
    if (paged(c))
        for (int64_t p = pages_for(c, len); p < pages_for(c, c->len[b]); p++) {
            page_drop(c, c->table[b * c->max_pages + p]);
            c->table[b * c->max_pages + p] = -1;
        }
    c->len[b] = len;
    return ATTN_OK;
}

attn_status attn_kv_cache_fork(attn_kv_cache *c, int64_t src, int64_t dst) {
    attn_err_clear();
    if (!c || src < 0 || src >= c->cfg.batch) return seq_fail(c, "src", src);
    if (dst < 0 || dst >= c->cfg.batch) return seq_fail(c, "dst", dst);
    if (src == dst) return ATTN_OK;
    attn_kv_cache_trim(c, dst, 0); /* dst's own tokens go first */
    int64_t len = c->len[src];
    if (paged(c)) { /* share src's pages */
        for (int64_t p = 0; p < pages_for(c, len); p++) {
            int32_t page = c->table[src * c->max_pages + p];
            c->table[dst * c->max_pages + p] = page;
            c->refs[page]++;
        }
    } else { /* contiguous: no pages to share, the rows are copied */
        for (int64_t hk = 0; hk < c->cfg.kv_heads && len > 0; hk++) {
            memcpy(slot(c, 0, dst, hk, 0), slot(c, 0, src, hk, 0),
                   attn_storage_bytes(c->store.dtype, len * c->cfg.head_dim));
            memcpy(slot(c, 1, dst, hk, 0), slot(c, 1, src, hk, 0), attn_storage_bytes(c->store.vtype, len * c->Dv));
            for (int is_v = 0; is_v < 2; is_v++) { /* int8 / int4: the rows' pairs */
                float *pp = is_v ? c->vpar : c->kpar;
                if (pp)
                    memcpy(pp + 2 * attn_kv_par_at(&c->store, is_v, dst, hk, 0),
                           pp + 2 * attn_kv_par_at(&c->store, is_v, src, hk, 0), (size_t)len * 2 * sizeof(float));
            }
        }
    }
    c->len[dst] = len;
    return ATTN_OK;
}

attn_status attn_kv_cache_reset(attn_kv_cache *c, int64_t b) {
    attn_err_clear();
    if (!c || b < -1 || b >= c->cfg.batch) return seq_fail(c, "b", b);
    for (int64_t s = b < 0 ? 0 : b; s < (b < 0 ? c->cfg.batch : b + 1); s++) attn_kv_cache_trim(c, s, 0);
    return ATTN_OK;
}

attn_status attn_kv_cache_read(const attn_kv_cache *c, int64_t b, int64_t hk, int64_t j, float *k, float *v) {
    attn_err_clear();
    if (!c || b < 0 || b >= c->cfg.batch) return seq_fail(c, "b", b);
    if (hk < 0 || hk >= c->cfg.kv_heads)
        return attn_fail(ATTN_E_INVALID, "hk = %lld is not a kv head (kv_heads = %lld)", LL(hk), LL(c->cfg.kv_heads));
    if (j < 0 || j >= c->len[b])
        return attn_fail(ATTN_E_SHAPE, "j = %lld: sequence %lld holds %lld tokens", LL(j), LL(b), LL(c->len[b]));
    if (k) attn_kv_load(&c->store, 0, b, hk, j, k);
    if (v) attn_kv_load(&c->store, 1, b, hk, j, v);
    return ATTN_OK;
}

attn_status attn_kv_cache_attend(const attn_kv_cache *c, const attn_sdpa_desc *din, attn_view q, attn_view out,
                                 float *lse) {
    attn_err_clear();
    attn_status st = attend_check(c, din);
    if (st) return st;
    int64_t Sk = 0;
    for (int64_t b = 0; b < c->cfg.batch; b++) Sk = c->len[b] > Sk ? c->len[b] : Sk;
    attn_sdpa_desc d = *din;
    d.Hkv = c->cfg.kv_heads;
    d.Sk = Sk; /* the longest sequence; each one's own length through seqlens */
    d.seqlens_k = c->len;
    d.seqlens_k_dtype = ATTN_DTYPE_I64;
    /* the argument check sees views of the right shape: the storage's own
     * for contiguous float32, else stand-ins (their data pointers are not read) */
    attn_view kv_k, kv_v;
    if (!attn_kv_src_f32_views(&c->store, &kv_k, &kv_v)) {
        int64_t T = c->cfg.capacity;
        kv_k = (attn_view){q.data, d.Hkv * T * d.D, T * d.D, d.D},
        kv_v = (attn_view){q.data, d.Hkv * T * d.Dv, T * d.Dv, d.Dv};
    }
    st = attn_sdpa_check(&d, q, kv_k, kv_v, out, 1);
    return st != ATTN_OK ? st : attn_attend(&d, q, &c->store, out, lse);
}

attn_status attn_kv_cache_attend_at(const attn_kv_cache *c, const attn_sdpa_desc *din, const attn_kv_positions *pos,
                                    attn_view q, attn_view out, float *lse) {
    attn_err_clear();
    if (!pos || !pos->global_len) return attn_fail(ATTN_E_INVALID, "%s is NULL", pos ? "pos->global_len" : "pos");
    attn_status st = attend_check(c, din);
    if (st) return st;
    if (din->score_mod || din->mask_mod || din->block_mask) /* the mods see local keys; these are global */
        return attn_fail(ATTN_E_UNSUPPORTED, "score_mod, mask_mod or block_mask over strided positions");
    if (din->Sq > ATTN_DECODE_MAX_SQ || din->impl == ATTN_IMPL_REF) /* decode's rows only */
        return attn_fail(ATTN_E_UNSUPPORTED, "Sq = %lld%s over strided positions: decode's up to %d rows, not REF",
                         LL(din->Sq), din->impl == ATTN_IMPL_REF ? " with impl REF" : "", ATTN_DECODE_MAX_SQ);
    if (pos->block < 1 || pos->stride < pos->block || pos->offset < 0)
        return attn_fail(ATTN_E_INVALID, "pos block = %lld, stride = %lld, offset = %lld: block >= 1, stride >= block, "
                                         "offset >= 0 expected",
                         LL(pos->block), LL(pos->stride), LL(pos->offset));
    attn_kv_src src = c->store;
    src.map_len = c->len, src.map_block = pos->block, src.map_stride = pos->stride, src.map_off = pos->offset;
    int64_t Sk = 0;
    for (int64_t b = 0; b < c->cfg.batch; b++) { /* every local key inside its sequence */
        if (pos->global_len[b] < 0 ||
            (c->len[b] > 0 && attn_kv_src_global(&src, c->len[b] - 1) >= pos->global_len[b]))
            return attn_fail(ATTN_E_INVALID, "pos->global_len[%lld] = %lld does not hold the %lld local keys' positions",
                             LL(b), LL(pos->global_len[b]), LL(c->len[b]));
        Sk = pos->global_len[b] > Sk ? pos->global_len[b] : Sk;
    }
    if (din->Sk != 0 && din->Sk != Sk)
        return attn_fail(ATTN_E_SHAPE, "Sk = %lld: 0 or the longest global_len, %lld, expected", LL(din->Sk), LL(Sk));
    attn_sdpa_desc d = *din;
    d.Hkv = c->cfg.kv_heads, d.Sk = Sk, d.seqlens_k = pos->global_len, d.seqlens_k_dtype = ATTN_DTYPE_I64;
    attn_view kk = {q.data, d.Hkv * Sk * d.D, Sk * d.D, d.D}, kv = {q.data, d.Hkv * Sk * d.Dv, Sk * d.Dv, d.Dv};
    st = attn_sdpa_check(&d, q, kk, kv, out, 1); /* stand-in views of the global keys (not read) */
    return st != ATTN_OK ? st : attn_attend(&d, q, &src, out, lse);
}
