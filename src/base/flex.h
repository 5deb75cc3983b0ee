/* Programmable attention's semantics (attn.h: score_mod, mask_mod,
 * block_mask; docs/SEMANTICS.md, "Programmable attention"), once for every
 * path: the block mask's grid, which pairs of a tile the block mask and
 * mask_mod let take part, and score_mod on a tile. The reference (one row a
 * tile) and the fused score step (score.h) both call these. */
#ifndef ATTN_FLEX_H
#define ATTN_FLEX_H

#include "attn.h"

#include <stdint.h>

/* the block mask (opaque in attn.h): a grid of block states and the
 * FlexAttention arrays it answers attn_block_mask_arrays_get with */
struct attn_block_mask {
    int64_t B, H, q_len, kv_len, q_block, kv_block, nq, nkv;
    uint8_t *grid; /* (B, H, nq, nkv): ATTN_FLEX_EMPTY / _PARTIAL / _FULL */
    int32_t *kv_num, *kv_idx, *full_num, *full_idx;
    /* stored partial blocks (attn_block_mask_from_mod_stored; else NULL):
     * slot[cell] = the block's index in bits or -1, bits = q_block x
     * kv_block keep bytes a block (pairs past the lengths 0) */
    int64_t *slot;
    uint8_t *bits;
};

enum { ATTN_FLEX_EMPTY = 0, ATTN_FLEX_PARTIAL = 1, ATTN_FLEX_FULL = 2 };

/* the descriptor's block mask against the call (q_len = Sq, kv_len >= Sk,
 * B and H 1 or the call's) and no programmable rule in a block of a larger
 * problem (sdpa_check.c) */
attn_status attn_flex_check(const attn_sdpa_desc *d);

/* does the descriptor carry any programmable rule? */
static inline int attn_flex_on(const attn_sdpa_desc *d) {
    return d->score_mod != NULL || d->mask_mod != NULL || d->block_mask != NULL;
}

/* do the block mask or mask_mod hide pairs (a mask stage is needed)? */
static inline int attn_flex_masks(const attn_sdpa_desc *d) { return d->mask_mod != NULL || d->block_mask != NULL; }

/* the grid row of (b, h, query block qb): nkv states */
static inline const uint8_t *attn_flex_grid_row(const attn_block_mask *m, int64_t b, int64_t h, int64_t qb) {
    int64_t bb = m->B == 1 ? 0 : b, hh = m->H == 1 ? 0 : h;
    return m->grid + ((bb * m->H + hh) * m->nq + qb) * m->nkv;
}

/* What the block mask and mask_mod make of the pairs of rows i0 .. i0 +
 * rows - 1 and keys j0 .. j0 + cols - 1 of (b, h) (rows < Sq, keys within
 * the mask's kv_len): ATTN_FLEX_EMPTY when no pair can take part,
 * ATTN_FLEX_FULL when every pair does (no mask_mod call needed), else
 * ATTN_FLEX_PARTIAL. */
int attn_flex_tile_state(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                         int64_t cols);

/* Keys [*lo, *hi) outside which every block of rows i0 .. i0 + rows - 1 of
 * (b, h) is empty, within [lo, hi) given (the whole [*lo, *hi) without a
 * block mask); *hi <= *lo when none. */
void attn_flex_keys(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t *lo, int64_t *hi);

/* live[kb] = 1 if key block kb of the block mask is not empty for some
 * query block of some head h0 .. h1 - 1 of batch row b, else 0 (the keys no
 * row of those heads can see: a kv head's packing skips them) */
void attn_flex_live_keys(const attn_block_mask *m, int64_t b, int64_t h0, int64_t h1, uint8_t *live);

/* keep[r * ld + c] = 1 if the block mask and mask_mod let (i0 + r, j0 + c)
 * of (b, h) take part, else 0 (mask_mod called on the partial blocks'
 * rectangles only) */
void attn_flex_keep(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                    uint8_t *keep, int64_t ld);

/* score_mod on the tile S (rows x cols, row stride ld) of (b, h, i0, j0),
 * and with ds (same layout) its derivative; nothing without score_mod */
static inline void attn_flex_score(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0,
                                   int64_t cols, float *S, int64_t ld, float *ds) {
    if (!d->score_mod || rows <= 0 || cols <= 0) return;
    attn_tile t = {b, h, i0, j0, rows, cols};
    d->score_mod(d->score_mod_ctx, &t, S, ld, ds);
}

#endif
