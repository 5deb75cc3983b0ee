/* The score step, once for every fused path: a raw q.k tile (rows x
 * columns: query rows i0.., keys j0.., of one head of one sequence) into
 * what the softmax sees. The fused forward (flash.c fwd_block), the fused
 * backward (bwd_scores) and decode (decode.c) all call attn_score_tile; a new
 * rule (a bias, a bool mask, chunks, tree masks) goes into base/sem.h and
 * here, nowhere else.
 *
 * Order (attn.h): scale, then softcap, then ALiBi and the dense bias, then
 * score_mod (programmable attention, base/flex.h), then visibility (the
 * causal/window/chunk/seqlens range of each row, the padding mask, the dense
 * mask, the block mask and mask_mod), hidden keys to -inf.
 *
 * Base 2 (stated once, here): the fused kernels run the softmax in base 2.
 * Without modifiers the packed queries carry scale * log2(e)
 * (attn_score_q_multiplier), so a tile comes out as u = s log2(e) and the
 * exponential kernels take escale = 1; with softcap or ALiBi the packed
 * queries carry only the scale's sign, the tile is modified in natural units
 * here, and the exponential kernels multiply by escale = log2(e). In a math
 * mode that rounds the queries, they carry only the scale's sign and escale
 * is |scale| log2(e). Row maxima and statistics are in base-2 units either
 * way. */
#ifndef ATTN_SCORE_H
#define ATTN_SCORE_H

#include "../kernels/kernels.h"
#include "internal.h"
#include "base/sem.h"
#include "base/flex.h"

#include <math.h>
#include <string.h>

/* The visibility rule of one sequence (base/sem.h): keys that exist and the
 * offset of the query rows on the key axis. Row ranges [lo, hi) are
 * non-decreasing in the row, so a block's keys are [lo(first), hi(last)). */
typedef struct attn_seq {
    int64_t b, skb, off;
} attn_seq;

static inline attn_seq attn_seq_of(const attn_sdpa_desc *d, int64_t b) {
    attn_seq s = {b, attn_sem_sk(d, b), attn_sem_off(d, b)};
    return s;
}

/* score modifiers present: the tile is modified in natural units (the
 * scale applied to it here, then softcap, ALiBi, the bias, score_mod) */
static inline int attn_score_has_mods(const attn_sdpa_desc *d) {
    return d->softcap > 0.0f || d->alibi_slopes != NULL || d->attn_bias != NULL || d->score_mod != NULL;
}

/* does the backward need d s / d(q.k) per score (G of attn_score_tile)
 * rather than the scale alone? */
static inline int attn_score_grad_tile(const attn_sdpa_desc *d) { return d->softcap > 0.0f || d->score_mod != NULL; }

/* the keys of a tile from j0 that exist (bc clamped to Sk - j0) */
static inline int64_t attn_score_cols(const attn_sdpa_desc *d, int64_t j0, int64_t bc) {
    int64_t n = d->Sk - j0 < bc ? d->Sk - j0 : bc;
    return n < 0 ? 0 : n;
}

/* what the packed queries are multiplied by (see the base-2 note above). A
 * math mode that rounds operands (the entry points set math to STRICT when
 * nothing rounds) keeps the scale out of the rounded queries too: they carry
 * its sign only, and the exponential applies |scale| log2(e) (escale). */
static inline float attn_score_q_multiplier(const attn_sdpa_desc *d) {
    return attn_score_has_mods(d) || d->math != ATTN_MATH_STRICT ? (d->scale < 0.0f ? -1.0f : 1.0f)
                                                                 : d->scale * ATTN_LOG2E;
}

/* the exponential kernels' scale */
static inline float attn_score_escale(const attn_sdpa_desc *d) {
    if (attn_score_has_mods(d)) return ATTN_LOG2E;
    return d->math != ATTN_MATH_STRICT ? fabsf(d->scale) * ATTN_LOG2E : 1.0f;
}

/* Additive key mask for batch row b: 0 where visible, -inf where the padding
 * mask hides the key (keys past Sk are cut by the row ranges instead).
 * Returns 1 if the padding mask hides any key (0: the pass can be skipped). */
static inline int attn_score_key_row(const attn_sdpa_desc *d, int64_t b, float *add, int64_t n) {
    int any = 0;
    for (int64_t j = 0; j < n; j++) {
        int vis = j >= d->Sk || !attn_sem_padded(d, b, j);
        add[j] = vis ? 0.0f : -INFINITY;
        any |= !vis;
    }
    return any;
}

/* What hides keys of a tile: the sequence's rule and its padding mask, as an
 * additive key row (add: 0 / -inf for keys from 0, any_add: it hides some
 * key) or, with add NULL, looked up key by key (decode). */
typedef struct attn_score_keys {
    attn_seq sq;
    const float *add;
    int any_add;
} attn_score_keys;

/* Is every mask byte of the tile (rows i0 .. i0 + rows - 1 of head h, keys
 * j0 .. j0 + bc - 1 that exist) nonzero (shown = 1) or zero (shown = 0)?
 * Key-contiguous masks are read 8 bytes at a time; the scan stops at the
 * first byte that says no. */
static inline int attn_score_dense_all(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t rows, int64_t i0,
                                       int64_t j0, int64_t bc, int shown) {
    int64_t nk = d->Sk - j0 < bc ? d->Sk - j0 : bc, sj = d->attn_mask_strides[3];
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *p = attn_sem_dense_row(d, b, h, i0 + r, j0);
        int64_t c = 0;
        if (sj == 1)
            for (uint64_t w; c + 8 <= nk; c += 8) {
                memcpy(&w, p + c, 8);
                if (shown ? ((w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull) != 0 : w != 0)
                    return 0; /* shown: a zero byte; hidden: a nonzero one */
            }
        for (; c < nk; c++)
            if ((p[c * sj] != 0) != shown) return 0;
    }
    return 1;
}

/* Does the tile (rows from i0, keys j0 .. j0 + bc, head h) need masking at all? */
static inline int attn_score_needs_mask(const attn_sdpa_desc *d, const attn_score_keys *k, int64_t h, int64_t bc,
                                        int64_t i0, int64_t rows, int64_t j0) {
    int64_t lo_last, hi_last, lo_first, hi_first;
    attn_sem_range(d, k->sq.skb, k->sq.off, i0, &lo_first, &hi_first);
    attn_sem_range(d, k->sq.skb, k->sq.off, i0 + rows - 1, &lo_last, &hi_last);
    return k->any_add || (!k->add && d->key_mask) || lo_last > j0 || hi_first < j0 + bc ||
           (d->attn_mask && !attn_score_dense_all(d, k->sq.b, h, rows, i0, j0, bc, 1));
}

/* Does the dense mask hide every pair of the tile (rows i0 .. i0 + rows - 1
 * of head h, keys j0 .. j0 + bc - 1 that exist)? Such a tile contributes
 * exactly nothing (P = 0): the fused kernels skip it, so a block-sparse or
 * document mask costs in proportion to what it shows. (A -inf bias is not
 * skipped: as in PyTorch, a NaN score plus -inf stays NaN.) */
static inline int attn_score_tile_hidden(const attn_sdpa_desc *d, const attn_seq *sq, int64_t h, int64_t rows,
                                         int64_t i0, int64_t j0, int64_t bc) {
    return (d->attn_mask && attn_score_dense_all(d, sq->b, h, rows, i0, j0, bc, 0)) ||
           (d->block_mask &&
            attn_flex_tile_state(d, sq->b, h, i0, rows, j0, attn_score_cols(d, j0, bc)) == ATTN_FLEX_EMPTY);
}

/* programmable attention's pieces of a tile: at most ATTN_FLEX_PIECE scores
 * a callback (stack scratch for keep bytes and score derivatives) */
#define ATTN_FLEX_PIECE 4096

/* the pairs the block mask and mask_mod hide (the tile's nk keys that exist) to -inf */
static inline void attn_score_flex_mask(const attn_sdpa_desc *d, int64_t b, int64_t h, float *S, int64_t ld, int64_t nk,
                                        int64_t rows, int64_t i0, int64_t j0) {
    uint8_t keep[ATTN_FLEX_PIECE];
    int64_t cp = nk < ATTN_FLEX_PIECE ? nk : ATTN_FLEX_PIECE, rp = cp > 0 ? ATTN_FLEX_PIECE / cp : 1;
    for (int64_t r0 = 0; r0 < rows; r0 += rp)
        for (int64_t c0 = 0; c0 < nk; c0 += cp) {
            int64_t nr = rows - r0 < rp ? rows - r0 : rp, nc = nk - c0 < cp ? nk - c0 : cp;
            attn_flex_keep(d, b, h, i0 + r0, nr, j0 + c0, nc, keep, nc);
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++)
                    if (!keep[r * nc + c]) S[(r0 + r) * ld + c0 + c] = -INFINITY;
        }
}

/* score_mod on the tile's nk keys that exist; with G (the backward), G *=
 * d new / d old, piece by piece (the piece's scores and derivatives in
 * scratch of the piece's width: the callback's ds shares its s's layout) */
static inline void attn_score_flex_mod(const attn_sdpa_desc *d, int64_t b, int64_t h, float *S, int64_t ld, int64_t nk,
                                       int64_t rows, int64_t i0, int64_t j0, float *G) {
    if (!G) {
        attn_flex_score(d, b, h, i0, rows, j0, nk, S, ld, NULL);
        return;
    }
    float sp[ATTN_FLEX_PIECE], ds[ATTN_FLEX_PIECE];
    int64_t cp = nk < ATTN_FLEX_PIECE ? nk : ATTN_FLEX_PIECE, rp = cp > 0 ? ATTN_FLEX_PIECE / cp : 1;
    for (int64_t r0 = 0; r0 < rows; r0 += rp)
        for (int64_t c0 = 0; c0 < nk; c0 += cp) {
            int64_t nr = rows - r0 < rp ? rows - r0 : rp, nc = nk - c0 < cp ? nk - c0 : cp;
            if (attn_flex_tile_state(d, b, h, i0 + r0, nr, j0 + c0, nc) == ATTN_FLEX_EMPTY) continue; /* masked */
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++) sp[r * nc + c] = S[(r0 + r) * ld + c0 + c], ds[r * nc + c] = 0.0f;
            attn_flex_score(d, b, h, i0 + r0, nr, j0 + c0, nc, sp, nc, ds);
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++) {
                    S[(r0 + r) * ld + c0 + c] = sp[r * nc + c];
                    G[(r0 + r) * ld + c0 + c] *= ds[r * nc + c];
                }
        }
}

/* Keys outside each row's range (causal, window, chunk, seqlens, past Sk),
 * keys the padding mask hides (added from the key row, or assigned key by
 * key without one) and pairs the dense mask hides, to -inf. Row r is query
 * i0 + r, column c is key j0 + c, of head h. */
static inline void attn_score_mask(const attn_sdpa_desc *d, const attn_score_keys *k, int64_t h, float *S, int64_t ld,
                                   int64_t bc, int64_t rows, int64_t i0, int64_t j0) {
    int64_t nk = d->Sk - j0 < bc ? d->Sk - j0 : bc; /* the dense mask exists for keys < Sk (the rest is out of range) */
    for (int64_t r = 0; r < rows; r++) {
        float *s = S + r * ld;
        if (k->any_add)
            for (int64_t c = 0; c < bc; c++) s[c] += k->add[j0 + c];
        int64_t lo, hi;
        attn_sem_range(d, k->sq.skb, k->sq.off, i0 + r, &lo, &hi);
        for (int64_t c = 0; c < bc && c < lo - j0; c++) s[c] = -INFINITY;
        for (int64_t c = hi - j0 < 0 ? 0 : hi - j0; c < bc; c++) s[c] = -INFINITY;
        if (!k->add && d->key_mask)
            for (int64_t c = 0; c < bc; c++)
                if (attn_sem_padded(d, k->sq.b, j0 + c)) s[c] = -INFINITY;
        if (d->attn_mask) { /* the row of the dense mask from key j0 */
            const uint8_t *p = attn_sem_dense_row(d, k->sq.b, h, i0 + r, j0);
            for (int64_t c = 0; c < nk; c++)
                if (!p[c * d->attn_mask_strides[3]]) s[c] = -INFINITY;
        }
    }
}

/* The step: the tile S (rows x bc, row stride ld) of head h from raw q.k
 * (times the packed queries' multiplier) to the scores the softmax sees.
 * With G not NULL (the backward, attn_score_grad_tile), G (same layout)
 * gets d s / d(q.k): scale (1 - tanh^2) with a softcap (exactly 0 where
 * tanh saturates), else the scale, times score_mod's derivative; 0 where
 * the score is -inf. */
static inline void attn_score_tile(const attn_kernel_table *kt, const attn_sdpa_desc *d, const attn_score_keys *k,
                                   int64_t h, float *S, int64_t ld, int64_t bc, int64_t rows, int64_t i0, int64_t j0,
                                   float *G) {
    if (attn_score_has_mods(d)) {
        float scale = fabsf(d->scale); /* Q was packed with the scale's sign */
        for (int64_t r = 0; r < rows; r++) {
            float *s = S + r * ld;
            if (d->softcap > 0.0f) {
                kt->softcap_row(s, bc, scale, d->softcap);
                if (G)
                    for (int64_t c = 0; c < bc; c++) {
                        float t = s[c] / d->softcap; /* exactly +-1 where tanh saturates: G = 0 */
                        G[r * ld + c] = d->scale * (1.0f - t * t);
                    }
            } else {
                kt->scale_row(s, bc, scale);
                if (G)
                    for (int64_t c = 0; c < bc; c++) G[r * ld + c] = d->scale;
            }
            if (d->alibi_slopes) kt->alibi_row(s, bc, d->alibi_slopes[h], (float)(i0 + r + k->sq.off - j0));
            if (d->attn_bias) { /* the bias row from key j0 (keys past Sk: out of range) */
                const float *bias = attn_sem_bias_row(d, k->sq.b, h, i0 + r, j0);
                for (int64_t c = 0; c < bc && j0 + c < d->Sk; c++) s[c] += bias[c * d->attn_bias_strides[3]];
            }
        }
    }
    int64_t nk = attn_score_cols(d, j0, bc);
    int fs = attn_flex_masks(d) ? attn_flex_tile_state(d, k->sq.b, h, i0, rows, j0, nk) : ATTN_FLEX_FULL;
    if (fs == ATTN_FLEX_EMPTY) { /* the block mask hides the tile: no callback */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < bc; c++) S[r * ld + c] = -INFINITY;
        if (G)
            for (int64_t r = 0; r < rows; r++) memset(G + r * ld, 0, (size_t)bc * sizeof(float));
        return;
    }
    if (d->score_mod) attn_score_flex_mod(d, k->sq.b, h, S, ld, nk, rows, i0, j0, G);
    if (attn_score_needs_mask(d, k, h, bc, i0, rows, j0)) attn_score_mask(d, k, h, S, ld, bc, rows, i0, j0);
    if (fs != ATTN_FLEX_FULL) attn_score_flex_mask(d, k->sq.b, h, S, ld, nk, rows, i0, j0);
    if (G && d->score_mod) /* hidden pairs (and -inf scores): P = 0, so dS = 0 whatever score_mod's derivative */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < bc; c++)
                if (S[r * ld + c] == -INFINITY) G[r * ld + c] = 0.0f;
}

#endif
