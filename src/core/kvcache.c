/* The KV cache: contiguous ((B, Hkv, T, D) arrays) or paged (a pool of
 * pages, each holding page_size tokens of every kv head, and a page table
 * per sequence; free pages on a stack). Appends are all or nothing; the
 * attention over the cache calls the core paths (decode reads the pages in
 * place). */
#include "../kernels/kernels.h"
#include "internal.h"
#include "../base/sem.h"
#include "base/half.h"

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Large cache arrays: 2 MiB aligned and, on Linux, marked for transparent
 * huge pages (decode streams through them; fewer TLB misses). */
static void *alloc_big(size_t bytes) {
    void *p = NULL;
    size_t align = (size_t)2 << 20;
    if (bytes < align) return malloc(bytes ? bytes : 1);
    if (posix_memalign(&p, align, (bytes + align - 1) / align * align)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

struct attn_kv_cache {
    attn_kv_cache_config cfg;
    int64_t Dv;
    int64_t *len; /* (B) tokens per sequence */
    void *k, *v;  /* contiguous: (B, Hkv, T, D|Dv); paged: the page pool; rows of kbytes / vbytes */
    int kind;     /* the kernels' element kind (ATTN_KV_F32, _F16, _BF16, _Q8) */
    size_t kbytes, vbytes;
    int32_t *table; /* paged: (B, max_pages) page ids, -1 = none */
    int32_t *free_stack;
    int64_t nfree, max_pages, npages;
};

static int paged(const attn_kv_cache *c) { return c->cfg.page_size > 0; }

attn_status attn_kv_cache_create(const attn_kv_cache_config *cfg, attn_kv_cache **out) {
    if (!cfg || !out) return ATTN_E_INVALID;
    *out = NULL;
    attn_kv_cache_config c = *cfg;
    if (c.dtype == ATTN_DTYPE_INVALID) c.dtype = ATTN_DTYPE_F32;
    if (c.dtype != ATTN_DTYPE_F32 && c.dtype != ATTN_DTYPE_F16 && c.dtype != ATTN_DTYPE_BF16 &&
        c.dtype != ATTN_DTYPE_Q8_0)
        return ATTN_E_UNSUPPORTED;
    if (c.v_head_dim == 0) c.v_head_dim = c.head_dim;
    if (c.batch < 1 || c.kv_heads < 1 || c.capacity < 1 || c.head_dim < 1 || c.v_head_dim < 1 || c.page_size < 0 ||
        c.num_pages < 0)
        return ATTN_E_SHAPE;
    if (c.dtype == ATTN_DTYPE_Q8_0 && (c.head_dim % ATTN_Q8_BLOCK || c.v_head_dim % ATTN_Q8_BLOCK))
        return ATTN_E_SHAPE; /* q8_0 rows are whole blocks of 32 */
    if (c.batch > INT32_MAX || c.kv_heads > INT32_MAX || c.capacity > INT32_MAX || c.head_dim > INT32_MAX ||
        c.v_head_dim > INT32_MAX)
        return ATTN_E_SHAPE;
    attn_kv_cache *kc = calloc(1, sizeof *kc);
    if (!kc) return ATTN_E_NOMEM;
    kc->cfg = c;
    kc->Dv = c.v_head_dim;
    kc->kind = attn_kv_kind(c.dtype);
    kc->kbytes = attn_kv_bytes(kc->kind, c.head_dim);
    kc->vbytes = attn_kv_bytes(kc->kind, c.v_head_dim);
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
    if (!st && (attn_mul_size(tokens, kc->kbytes, &nk) || attn_mul_size(tokens, kc->vbytes, &nv))) st = ATTN_E_OVERFLOW;
    if (!st) {
        kc->len = calloc((size_t)c.batch, sizeof *kc->len);
        kc->k = alloc_big(nk);
        kc->v = alloc_big(nv);
        if (!kc->len || !kc->k || !kc->v) st = ATTN_E_NOMEM;
    }
    if (!st && paged(kc)) {
        size_t nt;
        if (attn_mul_size((size_t)c.batch, (size_t)kc->max_pages, &nt)) st = ATTN_E_OVERFLOW;
        kc->table = st ? NULL : malloc(nt * sizeof *kc->table);
        kc->free_stack = st ? NULL : malloc((size_t)kc->npages * sizeof *kc->free_stack);
        if (!st && (!kc->table || !kc->free_stack)) st = ATTN_E_NOMEM;
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
    *out = kc;
    return ATTN_OK;
}

void attn_kv_cache_free(attn_kv_cache *c) {
    if (!c) return;
    free(c->len), free(c->k), free(c->v), free(c->table), free(c->free_stack);
    free(c);
}

const attn_kv_cache_config *attn_kv_cache_get_config(const attn_kv_cache *c) { return c ? &c->cfg : NULL; }

int64_t attn_kv_cache_len(const attn_kv_cache *c, int64_t b) {
    return (c && b >= 0 && b < c->cfg.batch) ? c->len[b] : -1;
}

int64_t attn_kv_cache_free_pages(const attn_kv_cache *c) { return c && paged(c) ? c->nfree : 0; }

/* where key (or value) row j of (b, hk) lives */
static void *slot(const attn_kv_cache *c, int is_v, int64_t b, int64_t hk, int64_t j) {
    int64_t Hkv = c->cfg.kv_heads, row;
    if (!paged(c)) {
        row = (b * Hkv + hk) * c->cfg.capacity + j;
    } else {
        int64_t ps = c->cfg.page_size, page = c->table[b * c->max_pages + j / ps];
        row = (page * Hkv + hk) * ps + j % ps;
    }
    return (char *)(is_v ? c->v : c->k) + (size_t)row * (is_v ? c->vbytes : c->kbytes);
}

/* one row into the cache's storage type (16-bit: round to nearest even; q8_0: blocks) */
static void put_row(const attn_kv_cache *c, void *dst, const float *src, int64_t n) {
    if (c->kind == ATTN_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    if (c->kind == ATTN_KV_Q8) {
        attn_q8_quantize(src, n, dst);
        return;
    }
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = c->kind == ATTN_KV_F16 ? attn_f32_to_f16(src[i]) : attn_f32_to_bf16(src[i]);
}

/* one row out of the cache, as float32 */
static void get_row(const attn_kv_cache *c, float *dst, const void *src, int64_t n) {
    if (c->kind == ATTN_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = c->kind == ATTN_KV_Q8    ? attn_q8_get(src, i)
                 : c->kind == ATTN_KV_F16 ? attn_f16_to_f32(((const uint16_t *)src)[i])
                                          : attn_bf16_to_f32(((const uint16_t *)src)[i]);
}

static int64_t pages_for(const attn_kv_cache *c, int64_t len) {
    return (len + c->cfg.page_size - 1) / c->cfg.page_size;
}

attn_status attn_kv_cache_append(attn_kv_cache *c, const int64_t *n, attn_view k, attn_view v) {
    if (!c || !n) return ATTN_E_INVALID;
    int64_t B = c->cfg.batch, need = 0, any = 0;
    for (int64_t b = 0; b < B; b++) { /* validate everything before changing anything */
        if (n[b] < 0) return ATTN_E_SHAPE;
        if (n[b] > c->cfg.capacity - c->len[b]) return ATTN_E_CONTEXT;
        if (paged(c)) need += pages_for(c, c->len[b] + n[b]) - pages_for(c, c->len[b]);
        any |= n[b] > 0;
    }
    if (any && (!k.data || !v.data)) return ATTN_E_INVALID;
    if (need > c->nfree) return ATTN_E_NOMEM;
    for (int64_t b = 0; b < B; b++) {
        if (paged(c))
            for (int64_t p = pages_for(c, c->len[b]); p < pages_for(c, c->len[b] + n[b]); p++)
                c->table[b * c->max_pages + p] = c->free_stack[--c->nfree];
        for (int64_t hk = 0; hk < c->cfg.kv_heads; hk++)
            for (int64_t t = 0; t < n[b]; t++) {
                const float *ks = k.data + b * k.stride_b + hk * k.stride_h + t * k.stride_s;
                const float *vs = v.data + b * v.stride_b + hk * v.stride_h + t * v.stride_s;
                put_row(c, slot(c, 0, b, hk, c->len[b] + t), ks, c->cfg.head_dim);
                put_row(c, slot(c, 1, b, hk, c->len[b] + t), vs, c->Dv);
            }
        c->len[b] += n[b];
    }
    return ATTN_OK;
}

attn_status attn_kv_cache_trim(attn_kv_cache *c, int64_t b, int64_t len) {
    if (!c || b < 0 || b >= c->cfg.batch) return ATTN_E_INVALID;
    if (len < 0 || len > c->len[b]) return ATTN_E_SHAPE;
    if (paged(c))
        for (int64_t p = pages_for(c, len); p < pages_for(c, c->len[b]); p++) {
            c->free_stack[c->nfree++] = c->table[b * c->max_pages + p];
            c->table[b * c->max_pages + p] = -1;
        }
    c->len[b] = len;
    return ATTN_OK;
}

attn_status attn_kv_cache_reset(attn_kv_cache *c, int64_t b) {
    if (!c || b < -1 || b >= c->cfg.batch) return ATTN_E_INVALID;
    for (int64_t s = b < 0 ? 0 : b; s < (b < 0 ? c->cfg.batch : b + 1); s++) attn_kv_cache_trim(c, s, 0);
    return ATTN_OK;
}

attn_status attn_kv_cache_read(const attn_kv_cache *c, int64_t b, int64_t hk, int64_t j, float *k, float *v) {
    if (!c || b < 0 || b >= c->cfg.batch || hk < 0 || hk >= c->cfg.kv_heads) return ATTN_E_INVALID;
    if (j < 0 || j >= c->len[b]) return ATTN_E_SHAPE;
    if (k) get_row(c, k, slot(c, 0, b, hk, j), c->cfg.head_dim);
    if (v) get_row(c, v, slot(c, 1, b, hk, j), c->Dv);
    return ATTN_OK;
}

attn_status attn_kv_cache_attend(const attn_kv_cache *c, const attn_sdpa_desc *din, attn_view q, attn_view out,
                                 float *lse) {
    if (!c || !din) return ATTN_E_INVALID;
    if (din->dropout) return ATTN_E_UNSUPPORTED;
    if (din->seqlens_k || (din->Hkv != 0 && din->Hkv != c->cfg.kv_heads)) return ATTN_E_INVALID;
    if (attn_sem_is_block(din)) return ATTN_E_INVALID;        /* the cache's keys are the whole problem */
    if (attn_is16(din->qkv_dtype)) return ATTN_E_UNSUPPORTED; /* queries over a cache are float32 */
    if (din->B != c->cfg.batch || din->D != c->cfg.head_dim || din->Dv != c->Dv) return ATTN_E_SHAPE;
    int64_t Sk = 0;
    for (int64_t b = 0; b < c->cfg.batch; b++) Sk = c->len[b] > Sk ? c->len[b] : Sk;
    attn_sdpa_desc d = *din;
    d.Hkv = c->cfg.kv_heads;
    d.Sk = Sk; /* the longest sequence; each one's own length through seqlens */
    d.seqlens_k = c->len;
    d.seqlens_k_dtype = ATTN_DTYPE_I64;
    /* contiguous float32 storage is a (B, Hkv, T, .) view; its first Sk rows per head are used */
    int64_t T = c->cfg.capacity, D = d.D, Dv = d.Dv, Hkv = d.Hkv;
    int f32 = c->cfg.dtype == ATTN_DTYPE_F32;
    attn_view kv_k = {f32 ? c->k : q.data, Hkv * T * D, T * D, D},
              kv_v = {f32 ? c->v : q.data, Hkv * T * Dv, T * Dv, Dv};
    /* (a paged or 16-bit cache passes these views only to the argument check) */
    attn_status st = attn_sdpa_check(&d, q, kv_k, kv_v, out, 1);
    if (st != ATTN_OK) return st;
    if (attn_sdpa_wants_decode(&d)) { /* decode straight from the storage */
        attn_kv_src src = {.k = kv_k, .v = kv_v, .Hkv = Hkv, .D = D, .Dv = Dv, .dtype = c->cfg.dtype};
        if (paged(c) || !f32)
            src.pool_k = c->k, src.pool_v = c->v, src.table = c->table, src.max_pages = c->max_pages,
            src.page_size = c->cfg.page_size, src.capacity = T;
        return attn_decode_forward(&d, q, &src, out, lse);
    }
    if (!paged(c) && f32)
        return d.impl == ATTN_IMPL_REF ? attn_sdpa_ref_forward(&d, q, kv_k, kv_v, out, lse)
                                       : attn_flash_forward(&d, q, kv_k, kv_v, out, lse);
    /* paged or 16-bit, a long query block (or the reference): gather the used rows into float32
     * (B, Hkv, Sk, .) buffers */
    size_t nk, nv;
    if (attn_mul3_size((size_t)(c->cfg.batch * Hkv), (size_t)(Sk ? Sk : 1), (size_t)D, &nk) ||
        attn_mul3_size((size_t)(c->cfg.batch * Hkv), (size_t)(Sk ? Sk : 1), (size_t)Dv, &nv))
        return ATTN_E_OVERFLOW;
    float *gk = malloc(nk * sizeof(float)), *gv = malloc(nv * sizeof(float));
    if (!gk || !gv) {
        free(gk), free(gv);
        return ATTN_E_NOMEM;
    }
    memset(gk, 0, nk * sizeof(float));
    memset(gv, 0, nv * sizeof(float));
    for (int64_t b = 0; b < c->cfg.batch; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0; j < c->len[b]; j++) {
                get_row(c, gk + ((b * Hkv + hk) * Sk + j) * D, slot(c, 0, b, hk, j), D);
                get_row(c, gv + ((b * Hkv + hk) * Sk + j) * Dv, slot(c, 1, b, hk, j), Dv);
            }
    attn_view vk = {gk, Hkv * Sk * D, Sk * D, D}, vv = {gv, Hkv * Sk * Dv, Sk * Dv, Dv};
    st = d.impl == ATTN_IMPL_REF ? attn_sdpa_ref_forward(&d, q, vk, vv, out, lse)
                                 : attn_flash_forward(&d, q, vk, vv, out, lse);
    free(gk), free(gv);
    return st;
}
