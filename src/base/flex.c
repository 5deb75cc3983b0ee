/* Programmable attention (attn.h: attn_block_mask, score_mod, mask_mod):
 * the block mask object and the per-tile questions every path asks of it
 * (flex.h). */
#include "flex.h"
#include "internal.h"
#include "sem.h"

#include <stdlib.h>
#include <string.h>

#define LL(x) ((long long)(x))

/* a block's state as a call sees it: without mask_mod (or the mask's stored
 * bytes) a partial block lets every pair take part */
static int seen(const attn_sdpa_desc *d, uint8_t g) {
    return g == ATTN_FLEX_PARTIAL && !d->mask_mod && !d->block_mask->bits ? ATTN_FLEX_FULL : g;
}

void attn_block_mask_free(attn_block_mask *m) {
    if (!m) return;
    free(m->grid), free(m->kv_num), free(m->kv_idx), free(m->full_num), free(m->full_idx);
    free(m->slot), free(m->bits);
    free(m);
}

/* a mask of the given geometry with its grid and arrays allocated (zeros) */
static attn_status mask_new(int64_t B, int64_t H, int64_t q_len, int64_t kv_len, int64_t q_block, int64_t kv_block,
                            attn_block_mask **out) {
    if (B < 1 || H < 1 || q_len < 0 || kv_len < 0)
        return attn_fail(ATTN_E_SHAPE,
                         "block mask B = %lld, H = %lld, q_len = %lld, kv_len = %lld: B, H >= 1 and "
                         "lengths >= 0 expected",
                         LL(B), LL(H), LL(q_len), LL(kv_len));
    if (q_block < 1 || kv_block < 1)
        return attn_fail(ATTN_E_SHAPE, "block mask q_block = %lld, kv_block = %lld: block sizes >= 1 expected",
                         LL(q_block), LL(kv_block));
    int64_t nq = (q_len + q_block - 1) / q_block, nkv = (kv_len + kv_block - 1) / kv_block;
    size_t rows, cells;
    const int64_t r[3] = {B, H, nq}, c[4] = {B, H, nq, nkv};
    if (attn_numel(3, r, &rows) || attn_numel(4, c, &cells) || cells > SIZE_MAX / sizeof(int32_t) || nkv > INT32_MAX)
        return attn_fail(ATTN_E_OVERFLOW, "block mask B H nq nkv = %lld x %lld x %lld x %lld overflows a size", LL(B),
                         LL(H), LL(nq), LL(nkv));
    attn_block_mask *m = calloc(1, sizeof *m);
    if (!m) return ATTN_E_NOMEM;
    *m = (attn_block_mask){B, H, q_len, kv_len, q_block, kv_block, nq, nkv, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nr = rows ? rows : 1, nc = cells ? cells : 1;
    m->grid = calloc(nc, 1);
    m->kv_num = calloc(nr, sizeof(int32_t)), m->full_num = calloc(nr, sizeof(int32_t));
    m->kv_idx = calloc(nc, sizeof(int32_t)), m->full_idx = calloc(nc, sizeof(int32_t));
    if (!m->grid || !m->kv_num || !m->full_num || !m->kv_idx || !m->full_idx) {
        attn_block_mask_free(m);
        return ATTN_E_NOMEM;
    }
    *out = m;
    return ATTN_OK;
}

/* one list of a row (num[row] entries of idx's row) into the grid as state st */
static attn_status mark_row(attn_block_mask *m, const int32_t *num, const int32_t *idx, int64_t row, uint8_t st,
                            const char *what) {
    int64_t n = num[row];
    if (n < 0 || n > m->nkv)
        return attn_fail(ATTN_E_SHAPE, "%s_num_blocks[%lld] = %lld: 0 .. %lld key blocks expected", what, LL(row),
                         LL(n), LL(m->nkv));
    uint8_t *g = m->grid + row * m->nkv;
    for (int64_t t = 0; t < n; t++) {
        int64_t kb = idx[row * m->nkv + t];
        if (kb < 0 || kb >= m->nkv)
            return attn_fail(ATTN_E_SHAPE, "%s_indices[%lld][%lld] = %lld is not a key block (nkv = %lld)", what,
                             LL(row), LL(t), LL(kb), LL(m->nkv));
        if (g[kb] != ATTN_FLEX_EMPTY)
            return attn_fail(ATTN_E_INVALID, "%s_indices[%lld][%lld] = %lld: key block listed twice in the row", what,
                             LL(row), LL(t), LL(kb));
        g[kb] = st;
    }
    return ATTN_OK;
}

attn_status attn_block_mask_create(const attn_block_mask_arrays *a, attn_block_mask **out) {
    attn_err_clear();
    if (!a || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", !a ? "the arrays" : "out");
    *out = NULL;
    if (!a->kv_num_blocks || !a->kv_indices)
        return attn_fail(ATTN_E_INVALID, "%s is NULL", !a->kv_num_blocks ? "kv_num_blocks" : "kv_indices");
    if (!a->full_kv_num_blocks != !a->full_kv_indices)
        return attn_fail(ATTN_E_INVALID, "full_kv_num_blocks and full_kv_indices: both or neither expected");
    attn_block_mask *m;
    attn_status st = mask_new(a->B, a->H, a->q_len, a->kv_len, a->q_block, a->kv_block, &m);
    if (st) return st;
    int64_t rows = m->B * m->H * m->nq;
    for (int64_t r = 0; r < rows && !st; r++) {
        st = mark_row(m, a->kv_num_blocks, a->kv_indices, r, ATTN_FLEX_PARTIAL, "kv");
        if (!st && a->full_kv_num_blocks)
            st = mark_row(m, a->full_kv_num_blocks, a->full_kv_indices, r, ATTN_FLEX_FULL, "full_kv");
    }
    if (st) {
        attn_block_mask_free(m);
        return st;
    }
    size_t cells = (size_t)(rows * m->nkv);
    memcpy(m->kv_num, a->kv_num_blocks, (size_t)rows * sizeof(int32_t));
    memcpy(m->kv_idx, a->kv_indices, cells * sizeof(int32_t));
    if (a->full_kv_num_blocks) {
        memcpy(m->full_num, a->full_kv_num_blocks, (size_t)rows * sizeof(int32_t));
        memcpy(m->full_idx, a->full_kv_indices, cells * sizeof(int32_t));
    }
    *out = m;
    return ATTN_OK;
}

/* mask_mod over block (qb, kb) of row r = (b, h, qb) of m into keep (nr x
 * nc bytes, row stride nc); returns how many pairs it keeps */
static int64_t eval_block(const attn_block_mask *m, attn_mask_mod_fn mask_mod, void *ctx, int64_t r, int64_t kb,
                          uint8_t *keep, int64_t *nr, int64_t *nc) {
    int64_t b = r / (m->H * m->nq), h = r / m->nq % m->H, qb = r % m->nq, i0 = qb * m->q_block, j0 = kb * m->kv_block;
    *nr = m->q_len - i0 < m->q_block ? m->q_len - i0 : m->q_block;
    *nc = m->kv_len - j0 < m->kv_block ? m->kv_len - j0 : m->kv_block;
    attn_tile t = {b, h, i0, j0, *nr, *nc};
    memset(keep, 0, (size_t)(*nr * *nc));
    mask_mod(ctx, &t, keep, *nc);
    int64_t kept = 0;
    for (int64_t c = 0; c < *nr * *nc; c++) kept += keep[c] != 0;
    return kept;
}

/* the states of every block (pass 1) and, with m->slot set, the partial
 * blocks' bytes into m->bits (pass 2); 0 or ATTN_E_NOMEM */
static attn_status eval_blocks(attn_block_mask *m, attn_mask_mod_fn mask_mod, void *ctx, int store) {
    int64_t rows = m->B * m->H * m->nq, qk = m->q_block * m->kv_block;
    int fail = 0;
#pragma omp parallel
    {
        uint8_t *keep = malloc((size_t)qk);
        if (!keep) {
#pragma omp atomic write
            fail = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t kb = 0; keep && kb < m->nkv; kb++) {
                uint8_t *g = m->grid + r * m->nkv + kb;
                int64_t nr, nc;
                if (store) { /* pass 2: the partial blocks' bytes, rows of kv_block */
                    if (m->slot[r * m->nkv + kb] < 0) continue;
                    uint8_t *dst = m->bits + (size_t)m->slot[r * m->nkv + kb] * (size_t)qk;
                    eval_block(m, mask_mod, ctx, r, kb, keep, &nr, &nc);
                    memset(dst, 0, (size_t)qk);
                    for (int64_t i = 0; i < nr; i++) memcpy(dst + i * m->kv_block, keep + i * nc, (size_t)nc);
                    continue;
                }
                int64_t kept = eval_block(m, mask_mod, ctx, r, kb, keep, &nr, &nc);
                /* pairs past q_len / kv_len count as not kept: a ragged last block is never full */
                *g = kept == 0 ? ATTN_FLEX_EMPTY : kept == qk ? ATTN_FLEX_FULL : ATTN_FLEX_PARTIAL;
            }
        }
        free(keep);
    }
    return fail ? ATTN_E_NOMEM : ATTN_OK;
}

/* create_block_mask's work: the states, the arrays, and with max_bytes > 0
 * the partial blocks' bytes when they fit in it */
static attn_status from_mod(attn_mask_mod_fn mask_mod, void *ctx, int64_t B, int64_t H, int64_t q_len, int64_t kv_len,
                            int64_t q_block, int64_t kv_block, size_t max_bytes, attn_block_mask **out) {
    attn_err_clear();
    if (!mask_mod || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", !mask_mod ? "mask_mod" : "out");
    *out = NULL;
    attn_block_mask *m;
    attn_status st = mask_new(B, H, q_len, kv_len, q_block, kv_block, &m);
    if (st) return st;
    if (q_block > (1 << 24) / kv_block) { /* one block's keep bytes */
        attn_block_mask_free(m);
        return attn_fail(ATTN_E_SHAPE, "q_block x kv_block = %lld x %lld: at most 2^24 pairs a block expected",
                         LL(q_block), LL(kv_block));
    }
    int64_t rows = B * H * m->nq, cells = rows * m->nkv, npart = 0;
    st = eval_blocks(m, mask_mod, ctx, 0);
    for (int64_t c = 0; !st && c < cells; c++) npart += m->grid[c] == ATTN_FLEX_PARTIAL;
    size_t qk = (size_t)(q_block * kv_block);
    if (!st && max_bytes > 0 && npart > 0 && (size_t)npart <= max_bytes / qk) { /* the partial blocks, stored */
        m->slot = malloc((size_t)cells * sizeof(int64_t)), m->bits = malloc((size_t)npart * qk);
        if (!m->slot || !m->bits) {
            free(m->slot), free(m->bits), m->slot = NULL, m->bits = NULL;
            st = ATTN_E_NOMEM;
        }
        for (int64_t c = 0, n = 0; !st && c < cells; c++) m->slot[c] = m->grid[c] == ATTN_FLEX_PARTIAL ? n++ : -1;
        if (!st) st = eval_blocks(m, mask_mod, ctx, 1);
    }
    if (st) {
        attn_block_mask_free(m);
        return st;
    }
    for (int64_t r = 0; r < rows; r++) { /* the arrays, ascending */
        const uint8_t *g = m->grid + r * m->nkv;
        int32_t *pi = m->kv_idx + r * m->nkv, *fi = m->full_idx + r * m->nkv, np = 0, nf = 0;
        for (int64_t kb = 0; kb < m->nkv; kb++)
            if (g[kb] == ATTN_FLEX_PARTIAL)
                pi[np++] = (int32_t)kb;
            else if (g[kb] == ATTN_FLEX_FULL)
                fi[nf++] = (int32_t)kb;
        m->kv_num[r] = np, m->full_num[r] = nf;
    }
    *out = m;
    return ATTN_OK;
}

attn_status attn_block_mask_from_mod(attn_mask_mod_fn mask_mod, void *ctx, int64_t B, int64_t H, int64_t q_len,
                                     int64_t kv_len, int64_t q_block, int64_t kv_block, attn_block_mask **out) {
    return from_mod(mask_mod, ctx, B, H, q_len, kv_len, q_block, kv_block, 0, out);
}

attn_status attn_block_mask_from_mod_stored(attn_mask_mod_fn mask_mod, void *ctx, int64_t B, int64_t H, int64_t q_len,
                                            int64_t kv_len, int64_t q_block, int64_t kv_block, size_t max_bytes,
                                            attn_block_mask **out) {
    return from_mod(mask_mod, ctx, B, H, q_len, kv_len, q_block, kv_block, max_bytes, out);
}

int attn_block_mask_stored(const attn_block_mask *m) { return m && m->bits != NULL; }

attn_status attn_block_mask_arrays_get(const attn_block_mask *m, attn_block_mask_arrays *out) {
    attn_err_clear();
    if (!m || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", !m ? "the block mask" : "out");
    *out = (attn_block_mask_arrays){m->B,        m->H,      m->q_len,  m->kv_len,   m->q_block,
                                    m->kv_block, m->kv_num, m->kv_idx, m->full_num, m->full_idx};
    return ATTN_OK;
}

int attn_block_mask_block(const attn_block_mask *m, int64_t b, int64_t h, int64_t qb, int64_t kb) {
    if (!m || b < 0 || b >= m->B || h < 0 || h >= m->H || qb < 0 || qb >= m->nq || kb < 0 || kb >= m->nkv) return -1;
    return m->grid[((b * m->H + h) * m->nq + qb) * m->nkv + kb];
}

attn_status attn_flex_check(const attn_sdpa_desc *d) {
    if (!attn_flex_on(d)) return ATTN_OK;
    if (attn_sem_is_block(d))
        return attn_fail(ATTN_E_UNSUPPORTED, "score_mod, mask_mod or block_mask in a block of a larger problem");
    const attn_block_mask *m = d->block_mask;
    if (!m) return ATTN_OK;
    if (m->q_len != d->Sq || m->kv_len < d->Sk)
        return attn_fail(ATTN_E_SHAPE,
                         "block_mask q_len = %lld, kv_len = %lld: q_len = Sq = %lld and kv_len >= Sk = "
                         "%lld expected",
                         LL(m->q_len), LL(m->kv_len), LL(d->Sq), LL(d->Sk));
    if ((m->B != 1 && m->B != d->B) || (m->H != 1 && m->H != d->H))
        return attn_fail(ATTN_E_SHAPE, "block_mask B = %lld, H = %lld: 1 or the call's B = %lld, H = %lld expected",
                         LL(m->B), LL(m->H), LL(d->B), LL(d->H));
    return ATTN_OK;
}

int attn_flex_tile_state(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                         int64_t cols) {
    if (!attn_flex_masks(d)) return ATTN_FLEX_FULL;
    if (rows <= 0 || cols <= 0) return ATTN_FLEX_EMPTY;
    const attn_block_mask *m = d->block_mask;
    if (!m) return ATTN_FLEX_PARTIAL;
    int64_t k1 = (j0 + cols - 1) / m->kv_block, any = 0, all = 1;
    if (k1 >= m->nkv) k1 = m->nkv - 1;
    for (int64_t qb = i0 / m->q_block; qb <= (i0 + rows - 1) / m->q_block; qb++) {
        const uint8_t *g = attn_flex_grid_row(m, b, h, qb);
        for (int64_t kb = j0 / m->kv_block; kb <= k1; kb++) {
            int s = seen(d, g[kb]);
            any |= s != ATTN_FLEX_EMPTY, all &= s == ATTN_FLEX_FULL;
        }
    }
    return !any ? ATTN_FLEX_EMPTY : all ? ATTN_FLEX_FULL : ATTN_FLEX_PARTIAL;
}

void attn_flex_keys(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t *lo, int64_t *hi) {
    const attn_block_mask *m = d->block_mask;
    if (!m || rows <= 0 || *hi <= *lo) return;
    int64_t e = *hi < m->kv_len ? *hi : m->kv_len, first = -1, last = -1;
    for (int64_t qb = i0 / m->q_block; qb <= (i0 + rows - 1) / m->q_block; qb++) {
        const uint8_t *g = attn_flex_grid_row(m, b, h, qb);
        for (int64_t kb = *lo / m->kv_block; kb * m->kv_block < e; kb++)
            if (g[kb] != ATTN_FLEX_EMPTY) {
                if (first < 0 || kb < first) first = kb;
                if (kb > last) last = kb;
            }
    }
    if (first < 0) {
        *hi = *lo;
        return;
    }
    if (first * m->kv_block > *lo) *lo = first * m->kv_block;
    if ((last + 1) * m->kv_block < *hi) *hi = (last + 1) * m->kv_block;
}

void attn_flex_live_keys(const attn_block_mask *m, int64_t b, int64_t h0, int64_t h1, uint8_t *live) {
    memset(live, 0, (size_t)m->nkv);
    for (int64_t h = h0; h < h1; h++)
        for (int64_t qb = 0; qb < m->nq; qb++) {
            const uint8_t *g = attn_flex_grid_row(m, b, h, qb);
            for (int64_t kb = 0; kb < m->nkv; kb++) live[kb] |= g[kb] != ATTN_FLEX_EMPTY;
        }
}

void attn_flex_keep(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                    uint8_t *keep, int64_t ld) {
    const attn_block_mask *m = d->block_mask;
    if (!m) {
        for (int64_t r = 0; r < rows; r++) memset(keep + r * ld, 1, (size_t)cols);
        if (d->mask_mod && rows > 0 && cols > 0) {
            attn_tile t = {b, h, i0, j0, rows, cols};
            d->mask_mod(d->mask_mod_ctx, &t, keep, ld);
        }
        return;
    }
    for (int64_t ra = 0; ra < rows;) { /* rectangles of one query block and one key block */
        int64_t qb = (i0 + ra) / m->q_block, rb = (qb + 1) * m->q_block - i0;
        if (rb > rows) rb = rows;
        const uint8_t *g = attn_flex_grid_row(m, b, h, qb);
        for (int64_t ca = 0; ca < cols;) {
            int64_t kb = (j0 + ca) / m->kv_block, cb = (kb + 1) * m->kv_block - j0;
            if (cb > cols) cb = cols;
            int s = kb < m->nkv ? seen(d, g[kb]) : ATTN_FLEX_EMPTY;
            for (int64_t r = ra; r < rb; r++) memset(keep + r * ld + ca, s != ATTN_FLEX_EMPTY, (size_t)(cb - ca));
            if (s == ATTN_FLEX_PARTIAL && d->mask_mod) {
                attn_tile t = {b, h, i0 + ra, j0 + ca, rb - ra, cb - ca};
                d->mask_mod(d->mask_mod_ctx, &t, keep + ra * ld + ca, ld);
            } else if (s == ATTN_FLEX_PARTIAL) { /* the mask's stored bytes of the block */
                int64_t cell = g - m->grid + kb;
                const uint8_t *src = m->bits + (size_t)m->slot[cell] * (size_t)(m->q_block * m->kv_block) +
                                     (i0 + ra - qb * m->q_block) * m->kv_block + (j0 + ca - kb * m->kv_block);
                for (int64_t r = ra; r < rb; r++)
                    memcpy(keep + r * ld + ca, src + (r - ra) * m->kv_block, (size_t)(cb - ca));
            }
            ca = cb;
        }
        ra = rb;
    }
}
