/* Fused, tiled SDPA forward and backward (FlashAttention-2 on the CPU).
 * Scores are in base 2 throughout: the packed queries carry scale * log2(e)
 * (q_multiplier), so a tile S = Q K^T is u = s log2(e) and P = 2^(u - m).
 *
 * Forward, per query block (b, h, BR rows; fwd_block):
 *   for each block of BC_F keys that some row of the block can see:
 *     S = Q K^T                    (gemm on 16-key K^T panels)
 *     mask (causal, padding, keys past Sk) with -inf
 *     online softmax per row: m' = max(m, max S) (lazily, ATTN_LAZY_MAX);
 *       P = 2^(S - m'); l = l 2^(m - m') + sum P; O *= 2^(m - m')
 *     dropout on P (keep decisions from the PyTorch stream, never materialized
 *       for MKL; the normalizer l uses the undropped P, as torch does)
 *     O += P V                     (gemm on 16-column V panels)
 *   out = O / l, lse = (m + log2 l) ln 2; a row that saw no key gives 0, lse -inf.
 * Work items: query blocks of K/V packed up front for every kv head, or with
 * many kv heads per thread whole kv heads packed by the thread that runs them.
 *
 * Backward, per (b, kv head, query chunk), query blocks outer: pass 1 computes
 * and keeps every S and dP = dO V^T (* dropout) tile of the block's rows and
 * folds the row statistics from them (m, l, Di = rowsum(P dP)); pass 2, per
 * tile: P = 2^(S - m) / l and dS = P (dP - Di) scale in one row pass, then
 *   dV += Pd^T dO;  dK += dS^T Q  (the item's partials);  dQ += dS K.
 * dK/dV partials are summed in chunk order, dQ is the item's own: no atomics,
 * every output element computed by one thread in one order, so results are
 * bitwise identical for any thread count.
 *
 * Threads: OpenMP, items claimed dynamically (largest first for causal
 * masks). Tile buffers are allocated once per thread per call; the large
 * buffers come from the scratch cache (base/workspace.h). */
#include "../base/workspace.h"
#include "base/rows.h"
#include "base/sem.h"
#include "flash_int.h"
#include "online.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The kernels' tile sizes (flash_int.h): the forward's 48 x 256 score tile
 * (52 KiB) is touched 12 rows at a time: a chunk of rows and a 16-column
 * panel of K^T or V stay in L1. 256 keys rather than 128: half the softmax
 * row passes and rescales per key (1.5-2% alone; with fwd_block's row chunks
 * 0.96-0.98 of the time, S = 2048-8192, Zen 4, 2026-11-25,
 * archive/fwd-chunks-zen4.jsonl). */
/* Row stride of the forward's score tile: one cache line more than BC_F, so
 * that the rows of a 16-column strip fall into different L1 sets (a stride
 * of 512 bytes put 48 rows into 8 of the 64 sets: conflict misses). */
#define LDS (BC_F + 16)

/* keys [*lo, *hi) that some row of i0 .. i0 + rows - 1 may see (of head
 * h: narrowed to the block mask's non-empty key blocks; h < 0: any head) */
static void block_rng(const attn_sdpa_desc *d, const attn_seq *s, int64_t h, int64_t i0, int64_t rows, int64_t *lo,
                      int64_t *hi) {
    attn_sem_rows_range(d, s->skb, s->off, i0, i0 + rows, lo, hi);
    if (h >= 0) attn_flex_keys(d, s->b, h, i0, rows, lo, hi);
}

void attn_qb_at(const qblocks *qb, int64_t blk, int64_t *i0, int64_t *rows) {
    if (!qb->start) {
        *i0 = blk * qb->br, *rows = qb->Sq - *i0 < qb->br ? qb->Sq - *i0 : qb->br;
        return;
    }
    *i0 = qb->start[blk], *rows = qb->start[blk + 1] - *i0;
}

/* the segmented blocks' first rows into st (NULL: count only); their number */
static int64_t qb_fill(const attn_sdpa_desc *d, int64_t off, int64_t br, int64_t *st) {
    int64_t n = 0, i = 0, Sq = d->Sq;
    while (i < Sq) {
        int64_t e = attn_sem_segment_end(d, off, i), e2;
        if (e - i < br) /* pack the short segments that follow while they fit */
            while (e < Sq && (e2 = attn_sem_segment_end(d, off, e)) - e < br && e2 - i <= br) e = e2;
        for (; i < e; i += br, n++)
            if (st) st[n] = i;
        i = e;
    }
    if (st) st[n] = Sq;
    return n;
}

attn_status attn_qb_make(const attn_sdpa_desc *d, int64_t br, qblocks *qb) {
    qb->Sq = d->Sq, qb->br = br, qb->n = (d->Sq + br - 1) / br, qb->start = NULL;
    if (!d->attention_chunk && !d->cu_seqlens_q) return ATTN_OK;
    int64_t off = attn_sem_off(d, 0);
    qb->n = qb_fill(d, off, br, NULL);
    qb->start = malloc((size_t)(qb->n + 1) * sizeof *qb->start);
    if (!qb->start) return ATTN_E_NOMEM;
    qb_fill(d, off, br, qb->start);
    return ATTN_OK;
}

/* C (M x N) (+)= A^T (M x K) B (K x N), A stored (K x M) row-major, M % gemm_mr == 0, N % 16 == 0. */
static void tile_gemm_tn(const attn_kernel_table *kt, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
    /* row slabs outer: a slab of A^T (K lines) serves every column strip while B (K x N, the
     * backward's 48 x 64 dO or Q) stays in L1; column strips outer re-read all of A per strip */
    for (int64_t i = 0; i < M; i += kt->gemm_mr)
        attn_gemm_cols(kt, 1, N, K, A + i, lda, B, ldb, 16, C + i * ldc, ldc, acc);
}

/* attn_flash_row_operand (flash_int.h) */
const float *attn_flash_row_operand(const attn_kernel_table *kt, attn_view t, attn_dtype dt, int64_t b, int64_t h,
                                    int64_t s, int64_t n, attn_dtype rt, float *tmp) {
    const float *r = attn_row_f32(t, dt, b, h, s, n, tmp);
    if (rt == ATTN_DTYPE_F32) return r;
    if (r != tmp) memcpy(tmp, r, (size_t)n * sizeof(float));
    kt->round_row(tmp, n, rt);
    return tmp;
}

/* Pack K^T of one head as 16-key panels, the micro-kernel's B operand
 * contiguous (panel p: D x 16 at KT + p * D * 16), and V as 16-column
 * panels (panel p: SkP x 16 at Vp + p * SkP * 16: the P V product's B
 * operand contiguous too; V read in place with a power-of-two row stride
 * put a tile's rows of one column panel into a few cache sets), zero-padded;
 * 16-bit inputs are converted here (tmp: D + Dv floats), float32 inputs in
 * BF16 mode rounded to bf16 (base/sem.h). */
static void pack_kv(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view k, attn_view v, int64_t b,
                    int64_t h, int64_t SkP, int64_t DvP, float *KT, float *Vp, float *tmp, const uint8_t *live) {
    int64_t D = d->D, Dv = d->Dv, full = Dv / 16 * 16;
    attn_dtype kvt = attn_sem_kv_type(d, attn_view_dtype(d->qkv_dtype));
    for (int64_t j = 0; j < SkP; j++) {
        float *kp = KT + (j / 16) * D * 16 + j % 16, *vp = Vp + j * 16;
        if (j >= d->Sk || (live && !live[j / d->block_mask->kv_block])) { /* padding keys, keys no row sees: zeros */
            for (int64_t c = 0; c < D; c++) kp[c * 16] = 0.0f;
            for (int64_t p = 0; p < DvP; p += 16) memset(vp + p * SkP, 0, 16 * sizeof(float));
            continue;
        }
        const float *kr = attn_flash_row_operand(kt, k, d->qkv_dtype, b, h, j, D, kvt, tmp);
        for (int64_t c = 0; c < D; c++) kp[c * 16] = kr[c];
        const float *vr = attn_flash_row_operand(kt, v, d->qkv_dtype, b, h, j, Dv, kvt, tmp + D);
        for (int64_t p = 0; p < full; p += 16) memcpy(vp + p * SkP, vr + p, 16 * sizeof(float));
        if (full < DvP) /* the last panel's columns past Dv are zero */
            for (int64_t c = 0; c < 16; c++) vp[full * SkP + c] = full + c < Dv ? vr[full + c] : 0.0f;
    }
}

/* Pack rows i0..i0+rows of a (B,H,S,n) view of element type dt into a
 * (br x ldp) tile, zero padded, multiplied by mul (q_multiplier, or 1). */
static void pack_rows(attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t br, int64_t n,
                      int64_t ldp, float *dst, float mul) {
    for (int64_t r = 0; r < br; r++) {
        float *row = dst + r * ldp;
        int64_t c = 0;
        if (r < rows) {
            const float *src = attn_row_f32(t, dt, b, h, i0 + r, n, row); /* converts in place */
            for (; c < n; c++) row[c] = mul * src[c];
        }
        for (; c < ldp; c++) row[c] = 0.0f;
    }
}

/* The first rows rows (n columns, ldp apart) of a tile rounded to rt (a math
 * mode's operand type; F32: nothing to do) */
static void round_rows(const attn_kernel_table *kt, float *x, int64_t rows, int64_t n, int64_t ldp, attn_dtype rt) {
    for (int64_t r = 0; rt != ATTN_DTYPE_F32 && r < rows; r++) kt->round_row(x + r * ldp, n, rt);
}

/* a product's operand rows: pack_rows, then rounded to the math mode's type rt */
static void pack_operand(const attn_kernel_table *kt, attn_view t, attn_dtype dt, int64_t b, int64_t h, int64_t i0,
                         int64_t rows, int64_t br, int64_t n, int64_t ldp, float *dst, float mul, attn_dtype rt) {
    pack_rows(t, dt, b, h, i0, rows, br, n, ldp, dst, mul);
    round_rows(kt, dst, rows, n, ldp, rt);
}

/* Apply dropout to rows x bc of a tile (row stride ld):
 * T[r][c] *= keep(b, h, i0 + r, j0 + c) ? scale : 0. */
/* The MKL stream's constants for one call (flash_int.h): keep iff x < thr;
 * a^Sk steps one row down (the rows of a (B, H, Sq, Sk) tensor are Sk
 * elements apart). */

static mcg_consts mcg_setup(const attn_sdpa_desc *d) {
    mcg_consts m = {0, 0, 0};
    const attn_dropout *dr = d->dropout;
    if (dr && !dr->keep && dr->p > 0.0 && dr->p < 1.0) {
        m.on = 1;
        m.thr = attn_dropout_mcg_threshold(dr);
        m.row_step = attn_mcg_jump((uint64_t)d->Sk);
    }
    return m;
}

static void dropout_tile(const attn_kernel_table *kt, const attn_sdpa_desc *d, const mcg_consts *mc, float *Tt,
                         int64_t ld, int64_t bc, int64_t rows, int64_t b, int64_t h, int64_t i0, int64_t j0,
                         uint8_t *keep) {
    int64_t cols = d->Sk - j0 < bc ? d->Sk - j0 : bc;
    const attn_dropout *dr = d->dropout;
    uint64_t base = (uint64_t)(((b * d->H + h) * d->Sq + i0) * d->Sk + j0);
    if (mc->on) { /* MKL stream: generated in the tile (one jump per tile, one multiply per row) */
        uint32_t x = attn_dropout_mcg_at(dr, base);
        for (int64_t r = 0; r < rows; r++, x = attn_mcg_mul(x, mc->row_step))
            kt->dropout_mcg(Tt + r * ld, cols, x, mc->thr, dr->scale);
        return;
    }
    for (int64_t r = 0; r < rows; r++, base += (uint64_t)d->Sk) {
        attn_dropout_mask_range(dr, base, (size_t)cols, keep);
        float *t = Tt + r * ld;
        for (int64_t c = 0; c < cols; c++) t[c] *= keep[c] ? dr->scale : 0.0f;
    }
}

/* ---- forward ------------------------------------------------------------- */

typedef struct work {
    int64_t b, h, blk, cost;
} work;

/* Causal order: head by head (K/V panel locality), each head's most
 * expensive query blocks first, so the cheap ones even out the threads' ends. */
static int cmp_causal(const void *a, const void *b) {
    const work *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
    return x->blk < y->blk ? -1 : x->blk > y->blk;
}

static int fwd_bufs_init(fwd_bufs *t, const fwd_call *c) {
    int64_t D = c->d->D, br = c->br;
    int mm = c->mt != ATTN_DTYPE_Q8_0;
    t->Qp = malloc((size_t)(br * D) * sizeof(float));
    t->S = malloc((size_t)(br * (mm ? c->bc : LDS)) * sizeof(float));
    t->O = malloc((size_t)(br * c->DvP) * sizeof(float));
    t->add = malloc((size_t)c->SkP * sizeof(float));
    t->m = malloc((size_t)br * sizeof(float)), t->l = malloc((size_t)br * sizeof(float));
    t->keep = malloc((size_t)c->bc);
    t->last_b = -1, t->any_add = 0, t->err = ATTN_OK;
    t->Qm = mm ? malloc((size_t)(br * D) * sizeof(float)) : NULL; /* mt is at most 4 bytes */
    t->Pm = mm ? malloc((size_t)(br * c->bc) * sizeof(float)) : NULL;
    t->mm = mm ? attn_mm_thread() : NULL;
    return t->Qp && t->S && t->O && t->add && t->m && t->l && t->keep && (!mm || (t->Qm && t->Pm && t->mm));
}

static void fwd_bufs_free(fwd_bufs *t) {
    free(t->Qp), free(t->S), free(t->O), free(t->add), free(t->m), free(t->l), free(t->keep);
    free(t->Qm), free(t->Pm);
}

/* The rows i0 .. i0 + rows - 1 of head h, batch row b, from the block's
 * statistics and accumulator: out and lse. */
void attn_fwd_finish(const fwd_call *c, const fwd_bufs *t, int64_t b, int64_t h, int64_t i0, int64_t rows) {
    const attn_sdpa_desc *d = c->d;
    int64_t DvP = c->DvP;
    for (int64_t r = 0; r < rows; r++) {
        float *o = c->out.data + b * c->out.stride_b + h * c->out.stride_h + (i0 + r) * c->out.stride_s;
        float *lse = c->lse ? c->lse + (b * d->H + h) * d->Sq + i0 + r : NULL;
        float lv, f = attn_row_finish(t->m[r], t->l[r], d->sinks ? d->sinks + h : NULL, &lv);
        if (lse) *lse = lv;
        if (t->m[r] == -INFINITY) { /* no visible key, or only -inf scores: zeros */
            memset(o, 0, (size_t)d->Dv * sizeof(float));
            continue;
        }
        for (int64_t cc = 0; cc < d->Dv; cc++) o[cc] = t->O[r * DvP + cc] * f;
    }
}

/* attn_fwd_begin (flash_int.h) */
attn_score_keys attn_fwd_begin(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, int64_t *i0,
                               int64_t *rows) {
    const attn_sdpa_desc *d = c->d;
    attn_qb_at(&c->qb, blk, i0, rows);
    if (b != t->last_b) {
        t->any_add = attn_score_key_row(d, b, t->add, c->SkP);
        t->last_b = b;
    }
    attn_score_keys keys = {attn_seq_of(d, b), t->add, t->any_add};
    pack_operand(c->kt, c->q, d->qkv_dtype, b, h, *i0, *rows, c->br, d->D, d->D, t->Qp, c->qmul, c->qt);
    memset(t->O, 0, (size_t)(c->br * c->DvP) * sizeof(float));
    for (int64_t r = 0; r < c->br; r++) t->m[r] = -INFINITY, t->l[r] = 0.0f;
    return keys;
}

/* Query block blk of head h, batch row b, against the packed K^T and V
 * panels of its kv head: out and lse of those rows. */
static void fwd_block(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, const float *KT,
                      const float *Vp) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    int64_t D = d->D, SkP = c->SkP, DvP = c->DvP, i0, rows;
    float *Qp = t->Qp, *S = t->S, *O = t->O, *m = t->m, *l = t->l;
    attn_score_keys keys = attn_fwd_begin(c, t, b, h, blk, &i0, &rows);
    attn_seq sq = keys.sq;
    int64_t klo, khi, mr = kt->gemm_mr, nch = (rows + mr - 1) / mr;
    block_rng(d, &sq, h, i0, rows, &klo, &khi);
    int64_t clo[BR / 6], chi[BR / 6]; /* keys each chunk of mr rows may see (mr >= 6) */
    for (int64_t ci = 0; ci < nch; ci++)
        block_rng(d, &sq, h, i0 + ci * mr, rows - ci * mr < mr ? rows - ci * mr : mr, &clo[ci], &chi[ci]);
    for (int64_t j0 = klo / 16 * 16; j0 < khi; j0 += BC_F) {
        /* the block's last tile is trimmed to the keys some row can see */
        int64_t nc = khi - j0 < BC_F ? attn_round_up(khi - j0, 16) : BC_F;
        for (int64_t ci = 0; ci < nch; ci++) {
            /* a chunk of mr rows over the 16-key panels [a, e16) it may see (on the causal
             * diagonal about half the tile): scores, the score step, the online softmax and
             * P V of those columns only, while the chunk's rows of S are in L1 */
            int64_t r0 = ci * mr, nr = rows - r0 < mr ? rows - r0 : mr;
            int64_t a = clo[ci] > j0 ? (clo[ci] - j0) / 16 * 16 : 0;
            int64_t e16 = chi[ci] - j0 < nc ? (chi[ci] > j0 ? attn_round_up(chi[ci] - j0, 16) : 0) : nc;
            if (e16 <= a || attn_score_tile_hidden(d, &sq, h, nr, i0 + r0, j0 + a, e16 - a))
                continue; /* nothing visible, or a dense mask hides it all: P = 0 */
            float *Sc = S + r0 * LDS;
            /* K^T's 16-key panels are 16 D floats apart */
            attn_gemm_cols(kt, 0, e16 - a, D, Qp + r0 * D, D, KT + (j0 + a) * D, 16, 16 * D, Sc + a, LDS, 0);
            attn_score_tile(kt, d, &keys, h, Sc + a, LDS, e16 - a, nr, i0 + r0, j0 + a, NULL);
            for (int64_t r = 0; r < nr; r++)
                attn_online_row(kt, Sc + r * LDS + a, e16 - a, c->escale, &m[r0 + r], &l[r0 + r], O + (r0 + r) * DvP,
                                DvP, c->pt);
            if (d->dropout) dropout_tile(kt, d, &c->mc, Sc + a, LDS, e16 - a, nr, b, h, i0 + r0, j0 + a, t->keep);
            /* P V over the keys the chunk may see (P = 0 elsewhere) */
            int64_t pa = clo[ci] > j0 ? clo[ci] - j0 : 0, pe = chi[ci] - j0 < e16 ? chi[ci] - j0 : e16;
            for (int64_t r = nr; r < mr; r++) /* the block's padding rows (last chunk): P = 0 */
                memset(Sc + r * LDS + pa, 0, (size_t)(pe - pa) * sizeof(float));
            /* V's 16-column panels are 16 SkP floats apart */
            attn_gemm_cols(kt, 0, DvP, pe - pa, Sc + pa, LDS, Vp + (j0 + pa) * 16, 16, 16 * SkP, O + r0 * DvP, DvP, 1);
        }
    }
    attn_fwd_finish(c, t, b, h, i0, rows);
}

/* the bytes of one kv head's packed keys and values */
static size_t fwd_head_bytes(const fwd_call *c) {
    if (c->mt != ATTN_DTYPE_Q8_0) return attn_fwd_mm_head_bytes(c);
    return (size_t)(c->SkP * (c->d->D + c->DvP)) * sizeof(float);
}

/* floats of the scratch rows a thread packs with */
static size_t fwd_tmp_floats(const fwd_call *c) {
    int64_t D = c->d->D, Dv = c->d->Dv;
    return (size_t)((c->mt != ATTN_DTYPE_Q8_0 ? c->bc * (D + c->DvP) : 0) + D + Dv);
}

/* the packing and the block of this call's products: panel holds a kv
 * head's K^T panels then V's (kernels), or its packed key blocks (oneDNN) */
static attn_status fwd_pack(const fwd_call *c, attn_view k, attn_view v, int64_t b, int64_t hk, void *panel,
                            float *tmp) {
    if (c->mt != ATTN_DTYPE_Q8_0) return attn_fwd_mm_pack(c, k, v, b, hk, panel, tmp);
    const attn_sdpa_desc *d = c->d;
    uint8_t *live = NULL; /* a block mask's key blocks no query row of the kv head's group sees: not read */
    if (d->block_mask) {
        int64_t G = attn_sem_group(d);
        if (!(live = malloc((size_t)d->block_mask->nkv + 1))) return ATTN_E_NOMEM;
        attn_flex_live_keys(d->block_mask, b, hk * G, (hk + 1) * G, live);
    }
    pack_kv(c->kt, d, k, v, b, hk, c->SkP, c->DvP, panel, (float *)panel + c->SkP * d->D, tmp, live);
    free(live);
    return ATTN_OK;
}

static void fwd_run(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, const void *panel) {
    if (c->mt != ATTN_DTYPE_Q8_0)
        attn_fwd_mm_block(c, t, b, h, blk, panel);
    else
        fwd_block(c, t, b, h, blk, panel, (const float *)panel + c->SkP * c->d->D);
}

/* Pack every kv head's K^T and V once (read-only afterwards; a GQA group
 * shares them) into panels (head bytes a head) and list the query blocks as
 * work items, the most expensive of a head first. */
static attn_status fwd_pack_items(const fwd_call *c, attn_view k, attn_view v, char *panels, size_t head, work *items) {
    const attn_sdpa_desc *d = c->d;
    int64_t B = d->B, H = d->H, Hkv = attn_sem_hkv(d);
    attn_status st = ATTN_OK;
#pragma omp parallel if (attn_par_worth(d, 1.0))
    {
        float *tmp = malloc(fwd_tmp_floats(c) * sizeof(float));
        attn_status ps = tmp ? ATTN_OK : ATTN_E_NOMEM;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * Hkv; bh++)
            if (!ps) ps = fwd_pack(c, k, v, bh / Hkv, bh % Hkv, panels + (size_t)bh * head, tmp);
        if (ps) {
#pragma omp atomic write
            st = ps;
        }
        free(tmp);
    }
    size_t nw = 0;
    int uneven = d->causal != ATTN_CAUSAL_NONE || d->window || d->seqlens_k || d->attention_chunk || d->cu_seqlens_q ||
                 d->block_mask;
    for (int64_t b = 0; b < B; b++) {
        attn_seq sq = attn_seq_of(d, b);
        for (int64_t h = 0; h < H; h++)
            for (int64_t blk = 0; blk < c->qb.n; blk++) {
                int64_t i0, rows, lo, hi;
                attn_qb_at(&c->qb, blk, &i0, &rows);
                block_rng(d, &sq, h, i0, rows, &lo, &hi);
                items[nw++] = (work){b, h, blk, rows * (hi - lo)};
            }
    }
    if (uneven) qsort(items, nw, sizeof *items, cmp_causal);
    return st;
}

/* Query-block items in runs, one per thread, of about equal cost (first:
 * nt + 1 run starts; items in head order): a thread keeps to its own run,
 * so to its own heads, whose panels stay in its cache (one shared queue
 * put both threads on every head: 8 packed sequences took 1.14x the time
 * of the same batch), then helps the others from their runs' fronts
 * (claims: atomic counters, a cache line apart). Who runs an item never
 * changes its bits. */
static void runs_split(const work *items, size_t n, int nt, int64_t *first, int64_t *next) {
    double total = 0, acc = 0;
    for (size_t w = 0; w < n; w++) total += (double)items[w].cost + 1.0;
    int t = 1;
    first[0] = 0;
    for (size_t w = 0; w < n && t < nt; w++) {
        acc += (double)items[w].cost + 1.0;
        while (t < nt && acc >= total * t / nt) first[t++] = (int64_t)w + 1;
    }
    while (t <= nt) first[t++] = (int64_t)n;
    for (int q = 0; q < nt; q++) next[q * 8] = first[q];
}

/* the next item for thread t: its own run first; -1 when all are taken */
static int64_t runs_claim(int64_t *next, const int64_t *first, int nt, int t) {
    for (int r = 0; r < nt; r++) {
        int q = (t + r) % nt;
        int64_t w;
#pragma omp atomic capture
        w = next[q * 8]++;
        if (w < first[q + 1]) return w;
    }
    return -1;
}

/* Many kv heads for the threads (B * Hkv >= FWD_HEAD_ITEMS per thread, so that
 * the last item, a whole head, leaves the other threads idle briefly; or an
 * even share of at least 2 per thread): a work
 * item is a whole kv head, packed by the thread that takes it into its own
 * panels (they stay in its cache) and run for every query head of its
 * group. Fewer: K^T and V of every head are packed once, up front, and the
 * items are query blocks. Both give the same bits (the same blocks, the same
 * panel values). */
#define FWD_HEAD_ITEMS 8

attn_status attn_flash_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                               float *lse) {
    attn_status ks = attn_kernel_status(); /* ATTN_ISA asks for kernels this CPU cannot run */
    if (ks) return ks;
    int64_t B = d->B, H = d->H, Sq = d->Sq, Sk = d->Sk;
    int64_t Hkv = attn_sem_hkv(d), G = H / Hkv;
    if (B * H * Sq == 0) return ATTN_OK;
    /* base 2: see score.h */
    fwd_call c = {.d = d,
                  .kt = attn_kernels(),
                  .q = q,
                  .out = out,
                  .lse = lse,
                  .DvP = attn_round_up(d->Dv, 16),
                  .qmul = attn_score_q_multiplier(d),
                  .escale = attn_score_escale(d),
                  .mc = mcg_setup(d),
                  .qt = attn_sem_q_type(d, attn_view_dtype(d->qkv_dtype)),
                  .pt = attn_sem_p_type(d, attn_view_dtype(d->qkv_dtype)),
                  .mt = ATTN_DTYPE_Q8_0,
                  .br = BR,
                  .bc = BC_F};
    /* the one choice of the products: a mode's 16-bit operands through oneDNN where kernels/mm.h enables it
     * and oneDNN has the call's two products (under auto on an AMX host: on AMX) */
    if (c.qt != ATTN_DTYPE_F32 && c.qt == c.pt) c.mt = attn_mm_type(c.qt);
    if (c.mt != ATTN_DTYPE_Q8_0) attn_fwd_mm_plan(&c); /* else, or when it cannot: the kernels' tiles */
    c.SkP = attn_round_up(Sk > 0 ? Sk : 1, c.bc);
    if (attn_qb_make(d, c.br, &c.qb)) return ATTN_E_NOMEM;
    int64_t nqb = c.qb.n;
#ifdef _OPENMP
    int64_t nthreads = omp_get_max_threads();
#else
    int64_t nthreads = 1;
#endif
    /* whole kv heads per thread: from FWD_HEAD_ITEMS per thread, or from 2 when they share out evenly
     * (up-front packing of every head cost 2-5%: chunks and packed sequences 3-5%, prefill S = 1024-4096
     * 1.6-2.1%, bench/results/archive/segments-perhead-zen4.jsonl, perhead-prefill-zen4.jsonl) */
    int per_head = B * Hkv >= FWD_HEAD_ITEMS * nthreads || (B * Hkv >= 2 * nthreads && B * Hkv % nthreads == 0);
    size_t head = fwd_head_bytes(&c), npanel, nwork;
    if (!head || attn_mul_size((size_t)(per_head ? nthreads : B * Hkv), head, &npanel) ||
        attn_mul_size((size_t)(B * H), (size_t)nqb, &nwork)) {
        free(c.qb.start);
        return ATTN_E_OVERFLOW;
    }
    char *panels = attn_ws_alloc(npanel);
    work *items = per_head ? NULL : attn_ws_alloc(nwork * sizeof *items);
    /* items: the runs' starts and claim counters (runs_split) */
    int64_t *first = per_head ? NULL : malloc((size_t)(9 * nthreads + 1) * sizeof *first);
    int64_t *next = first ? first + nthreads + 1 : NULL;
    attn_status st = panels && (per_head || (items && first)) ? ATTN_OK : ATTN_E_NOMEM;
    if (!st && !per_head) st = fwd_pack_items(&c, k, v, panels, head, items);
    if (!st) {
#pragma omp parallel if (attn_par_worth(d, 1.0))
        {
            fwd_bufs t;
            float *tmp = per_head ? malloc(fwd_tmp_floats(&c) * sizeof(float)) : NULL; /* rows to pack */
            int ok = fwd_bufs_init(&t, &c) && (tmp || !per_head);
            if (!ok) {
#pragma omp atomic write
                st = ATTN_E_NOMEM;
            }
            if (per_head) {
#ifdef _OPENMP
                char *panel = panels + (size_t)omp_get_thread_num() * head;
#else
                char *panel = panels;
#endif
#pragma omp for schedule(dynamic, 1)
                for (int64_t bhk = 0; bhk < B * Hkv; bhk++) {
                    if (!ok || t.err) continue;
                    int64_t b = bhk / Hkv, hk = bhk % Hkv;
                    t.err = fwd_pack(&c, k, v, b, hk, panel, tmp);
                    for (int64_t h = hk * G; h < (hk + 1) * G && !t.err; h++)
                        for (int64_t blk = 0; blk < nqb; blk++) fwd_run(&c, &t, b, h, blk, panel);
                }
            } else {
                int nt = 1, me = 0;
#ifdef _OPENMP
                nt = omp_get_num_threads(), me = omp_get_thread_num();
#endif
#pragma omp single
                runs_split(items, nwork, nt, first, next);
                for (int64_t w; ok && (w = runs_claim(next, first, nt, me)) >= 0;) {
                    int64_t b = items[w].b, h = items[w].h, hk = attn_sem_kvh(d, h);
                    fwd_run(&c, &t, b, h, items[w].blk, panels + (size_t)(b * Hkv + hk) * head);
                }
            }
            if (ok && t.err) {
#pragma omp atomic write
                st = t.err;
            }
            fwd_bufs_free(&t);
            free(tmp);
        }
    }
    attn_ws_free(panels);
    attn_ws_free(items);
    free(c.qb.start), free(first);
    return st;
}

/* ---- backward ------------------------------------------------------------ */

/* The key rows of each backward item's dK/dV partials: item (bhk, chunk c)
 * covers query blocks [units c / nchunk, units (c + 1) / nchunk) of the
 * group, and its partials the key tiles some row of them may see (rounded
 * to whole tiles: rows past Sk are written, never read). r[2 it], r[2 it + 1]: the keys [lo, hi);
 * r[2 nitem + it]: the item's first row in the packed partials. Returns the
 * partials' total rows. */
static int64_t bwd_part_ranges(const attn_sdpa_desc *d, int64_t nchunk, int64_t units, const qblocks *qb, int64_t bc,
                               int64_t *r) {
    int64_t Hkv = attn_sem_hkv(d), nitem = d->B * Hkv * nchunk, rows = 0;
    for (int64_t it = 0; it < nitem; it++) {
        int64_t b = it / nchunk / Hkv, c = it % nchunk, lo = INT64_MAX, hi = 0;
        attn_seq sq = attn_seq_of(d, b);
        for (int64_t u = units * c / nchunk; u < units * (c + 1) / nchunk; u++) {
            int64_t i0, n, klo, khi;
            attn_qb_at(qb, u % qb->n, &i0, &n);
            block_rng(d, &sq, -1, i0, n, &klo, &khi);
            if (khi <= klo) continue;
            lo = klo / bc * bc < lo ? klo / bc * bc : lo;
            int64_t kend = (khi + bc - 1) / bc * bc; /* whole tiles: the products write them */
            hi = kend > hi ? kend : hi;
        }
        if (lo >= hi) lo = hi = 0;
        r[2 * it] = lo, r[2 * it + 1] = hi, r[2 * nitem + it] = rows;
        rows += hi - lo;
    }
    return rows;
}

/* Work items of the backward: at least this many (b, kv head, query chunk)
 * items, so that few heads still keep every core busy. */
#define BWD_MIN_ITEMS 4

/* Row statistics of the backward, per query row i (one pass over its keys):
 *   m_i  = max_j t_ij over visible keys, t = the modified score (fl(scale * s)
 *          without modifiers: the float row max)
 *   l_i  = sum_j exp(t_ij - m_i)
 *   Di_i = sum_j P_ij dP_ij with P = exp(t - m_i) / l_i and dP = (dO V^T) * dropout
 * computed from the very tiles (same kernels, same tile shapes, same masks)
 * the main pass recomputes. This is PyTorch's softmax backward, dS = P (dP -
 * rowsum(P dP)): when one key takes (almost) all the weight, dP_ij - Di_i
 * cancels as exactly as it does in torch. FlashAttention's shortcut Di = dO.O
 * and P = exp(s - lse) with a float lse cannot: their rounding does not cancel
 * and peaked softmax (logits of 100-1000) lost up to 1000x the precision of
 * float32 PyTorch (issue 9). The backward keeps a query block's S and dP
 * tiles from this fold for its gradient pass, so they are computed once:
 * 5 tile products per tile (flash_bwd). */
typedef struct bwd_panels {
    float *KT, *VT;     /* per kv head: K^T and V^T in tiles of BC_B keys, keys zero-padded: tile t is
                         * (D x BC_B) at KT + t * D * BC_B (V^T likewise with Dv), so that a tile's
                         * rows are contiguous (one long (D x Sk) panel put every row of a tile on
                         * another page: TLB and cache-set misses once tiles are visited by
                         * query block) */
    int64_t ldk, per_h; /* row stride within a tile (BC_B), floats per head */
} bwd_panels;

/* Score tile (BR x BC_B) of query rows i0.. of head h against keys j0.. from
 * packed Q: modified (scale, softcap, ALiBi) when the descriptor asks, then
 * masked. With a softcap, G (if not NULL) gets d t / d(q.k) = scale (1 - tanh^2). */
/* The columns of key tile j0 a query block can need: [c0, c0 + n) of its
 * BC_B in steps of 16 (S = Q K^T, dP = dO V^T, the row passes and dQ += dS
 * K), within [a0, a0 + an) in steps of BC_H (dV += P^T dO and dK += dS^T Q:
 * rows of the transposed products in steps of 12; P and dS are zero in
 * the difference). A tile that starts before the block's first visible key
 * (a sequence or a chunk that starts mid-tile) or ends past its last (the
 * causal diagonal) computes only the part that holds visible keys: the
 * other columns have P = 0 and dS = 0 for every row of the block. */
#define BC_H 48
typedef struct bwd_cols {
    int64_t j0, c0, n, a0, an;
} bwd_cols;

/* A backward call's tiles: br query rows (BR) against bc keys (BC_B), the
 * columns trimmed as above; or, through oneDNN (full), MMB_BR x MMB_BC tiles
 * computed whole (every product one shape; P = 0 and dS = 0 where the score
 * step hid the keys) */
typedef struct bwd_geo {
    int64_t br, bc;
    int full;
} bwd_geo;

static bwd_cols bwd_cols_of(int64_t j0, int64_t klo, int64_t khi, const bwd_geo *g) {
    if (g->full) return (bwd_cols){j0, 0, g->bc, 0, g->bc};
    int64_t c0 = klo > j0 ? (klo - j0) / 16 * 16 : 0, c1 = khi - j0 < BC_B ? attn_round_up(khi - j0, 16) : BC_B;
    int64_t a0 = c0 / BC_H * BC_H, a1 = attn_round_up(c1, BC_H);
    return (bwd_cols){j0, c0, c1 - c0, a0, a1 - a0};
}

/* The backward's five products through oneDNN (flash_mm.c) where the call
 * has a plan (the math modes on AMX; ATTN_PRODUCTS=onednn): one thread's
 * operands of type p->mt: the kv head's packed key tiles, the query block's
 * Q (x qmul) and dO as A operands and, packed as B operands once per query
 * block, Q and dO again; P and dS as the pass writes them. A NULL plan (or
 * a NULL bwd_mm): the kernels carry every product. */
typedef struct bwd_mm {
    const attn_bwd_mm_plan *p;
    attn_mm *mm;
    const char *keys;                /* the kv head's packed key tiles, p->tile bytes each */
    void *Qm, *dOm, *Qum, *Pm, *dSm; /* Q (x qmul), dO, Q, P, dS: br x DP, DvP, DP, bc, bc of p->mt */
    void *Qb, *dOb;                  /* Q and dO packed as the B operands of dK and dV */
    attn_status err;
} bwd_mm;

static int bwd_on_mm(const bwd_mm *x) { return x && x->p; }

/* a key tile's packed operands (oneDNN): K^T for S, V^T for dP, K for dQ */
static const char *bwd_tile_keys(const bwd_mm *x, int64_t j0) { return x->keys + (size_t)(j0 / x->p->bc) * x->p->tile; }

static void bwd_scores(const attn_kernel_table *kt, const attn_sdpa_desc *d, const attn_seq *sq, int64_t h,
                       const float *Qp, int64_t DP, const float *KT, int64_t ldk, float *S, float *G, int64_t rows,
                       int64_t i0, bwd_cols w, const float *add, int any_add, bwd_mm *x, int64_t ld) {
    if (bwd_on_mm(x)) { /* S (br x bc) = Q K^T, whole tiles */
        if (!x->err) x->err = attn_mm_exec(x->mm, &x->p->s, x->Qm, bwd_tile_keys(x, w.j0), S);
    } else {
        attn_tile_gemm(kt, BR, w.n, d->D, Qp, DP, KT + (w.j0 / BC_B) * d->D * BC_B + w.c0, ldk, S + w.c0, BC_B, 0);
    }
    attn_score_keys keys = {*sq, add, any_add};
    attn_score_tile(kt, d, &keys, h, S + w.c0, ld, w.n, rows, i0, w.j0 + w.c0, G ? G + w.c0 : NULL);
}

/* dP tile (BR x BC_B) = dO V^T with the dropout keep decisions applied. */
static void bwd_dp(const attn_kernel_table *kt, const attn_sdpa_desc *d, const mcg_consts *mc, const float *dOp,
                   int64_t DvP, const float *VT, int64_t ldk, float *dP, int64_t rows, int64_t b, int64_t h, int64_t i0,
                   bwd_cols w, uint8_t *keep, bwd_mm *x) {
    if (bwd_on_mm(x)) { /* dP (br x bc) = dO V^T, whole tiles (no dropout in the modes) */
        if (!x->err) x->err = attn_mm_exec(x->mm, &x->p->dp, x->dOm, bwd_tile_keys(x, w.j0) + x->p->ks, dP);
        return;
    } else {
        attn_tile_gemm(kt, BR, w.n, d->Dv, dOp, DvP, VT + (w.j0 / BC_B) * d->Dv * BC_B + w.c0, ldk, dP + w.c0, BC_B, 0);
    }
    if (d->dropout) dropout_tile(kt, d, mc, dP + w.c0, BC_B, w.n, rows, b, h, i0, w.j0 + w.c0, keep);
}

/* Fold one (S, dP) tile into the rows' statistics (base 2: m, l = sum 2^(t -
 * m), acc = sum 2^(t - m) dP with t the base-2 score), one pass a row
 * (exp2_dot_row: the exponentials are not stored; S is kept). */
static void fold_tile(const attn_kernel_table *kt, const float *S, const float *dP, int64_t rows, float escale,
                      bwd_cols w, int64_t ld, float *m, float *l, float *acc) {
    for (int64_t r = 0; r < rows; r++) {
        const float *sr = S + r * ld + w.c0;
        float mt = attn_row_max(kt, sr, w.n) * escale;
        if (mt == -INFINITY) continue; /* no visible key in this tile */
        if (!(mt <= m[r])) {           /* new row max (or NaN): rescale what was summed against the old one */
            float mn = attn_max_nan(mt, m[r]), alpha = m[r] == -INFINITY ? 0.0f : exp2f(m[r] - mn);
            l[r] *= alpha, acc[r] *= alpha, m[r] = mn;
        }
        float dot;
        l[r] += kt->exp2_dot_row(sr, dP + r * ld + w.c0, w.n, escale, m[r], &dot);
        acc[r] += dot;
    }
}

static attn_status bwd_row_stats(const attn_kernel_table *kt, const attn_sdpa_desc *d, const mcg_consts *mc,
                                 attn_view q, attn_view dout, const bwd_panels *pn, float *m_out, float *l_out,
                                 float *t_out) {
    int64_t H = d->H, Sq = d->Sq, BH = d->B * H, DP = attn_round_up(d->D, 16), DvP = attn_round_up(d->Dv, 16);
    int64_t nkb = (d->Sk + BC_B - 1) / BC_B, Hkv = attn_sem_hkv(d);
    float qmul = attn_score_q_multiplier(d), escale = attn_score_escale(d);
    const bwd_geo g = {BR, BC_B, 0};
    qblocks qb;
    attn_status st = attn_qb_make(d, BR, &qb);
    int64_t nqb = qb.n;
    if (st) return st;
#pragma omp parallel if (attn_par_worth(d, 1.0))
    {
        float *Qp = malloc((size_t)(BR * DP) * sizeof(float)), *dOp = malloc((size_t)(BR * DvP) * sizeof(float));
        float *S = malloc((size_t)(BR * BC_B) * sizeof(float)), *dP = malloc((size_t)(BR * BC_B) * sizeof(float));
        float *add = malloc((size_t)(nkb * BC_B) * sizeof(float));
        uint8_t *keep = malloc(BC_B);
        int ok = Qp && dOp && S && dP && add && keep;
        if (!ok) {
#pragma omp atomic write
            st = ATTN_E_NOMEM;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < BH * nqb; item++) {
            if (!ok) continue;
            int64_t bh = item / nqb, b = bh / H, h = bh % H, hk = attn_sem_kvh(d, h), i0, rows;
            attn_qb_at(&qb, item % nqb, &i0, &rows);
            int any_add = attn_score_key_row(d, b, add, nkb * BC_B);
            attn_seq sq = attn_seq_of(d, b);
            const float *KT = pn->KT + (b * Hkv + hk) * pn->per_h, *VT = pn->VT + (b * Hkv + hk) * pn->per_h;
            pack_rows(q, d->qkv_dtype, b, h, i0, rows, BR, d->D, DP, Qp, qmul);
            pack_rows(dout, ATTN_DTYPE_F32, b, h, i0, rows, BR, d->Dv, DvP, dOp, 1.0f);
            float m[BR], l[BR], acc[BR];
            for (int64_t r = 0; r < BR; r++) m[r] = -INFINITY, l[r] = 0.0f, acc[r] = 0.0f;
            int64_t klo, khi;
            block_rng(d, &sq, h, i0, rows, &klo, &khi);
            for (int64_t j0 = klo / BC_B * BC_B; j0 < khi; j0 += BC_B) { /* the main pass's tiles */
                bwd_cols w = bwd_cols_of(j0, klo, khi, &g);
                if (attn_score_tile_hidden(d, &sq, h, rows, i0, j0 + w.c0, w.n)) continue; /* P = 0 */
                bwd_scores(kt, d, &sq, h, Qp, DP, KT, pn->ldk, S, NULL, rows, i0, w, add, any_add, NULL, BC_B);
                bwd_dp(kt, d, mc, dOp, DvP, VT, pn->ldk, dP, rows, b, h, i0, w, keep, NULL);
                fold_tile(kt, S, dP, rows, escale, w, BC_B, m, l, acc);
            }
            for (int64_t r = 0; r < rows; r++) {
                size_t at = (size_t)(bh * Sq + i0 + r);
                m_out[at] = m[r], l_out[at] = l[r], t_out[at] = acc[r];
            }
        }
        free(Qp), free(dOp), free(S), free(dP), free(add), free(keep);
    }
    free(qb.start);
    return st;
}

/* K^T and V^T panels of every kv head (zero-padded keys), for the row
 * statistics and the main pass. */
static attn_status pack_bwd_panels(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view k, attn_view v,
                                   bwd_panels *pn, float *panels) {
    int64_t D = d->D, Dv = d->Dv, Sk = d->Sk, Hkv = attn_sem_hkv(d), BHkv = d->B * Hkv;
    attn_dtype kvt = attn_sem_kv_type(d, attn_view_dtype(d->qkv_dtype)); /* BF16 mode: the products' operands */
    attn_status st = ATTN_OK;
    pn->KT = panels, pn->VT = panels + (size_t)BHkv * (size_t)pn->per_h;
#pragma omp parallel if (attn_par_worth(d, 1.0))
    {
        float *tmp = malloc((size_t)(D + Dv) * sizeof(float)); /* rows of 16-bit inputs */
        if (!tmp) {
#pragma omp atomic write
            st = ATTN_E_NOMEM;
        }
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < BHkv; bh++) {
            float *KT = pn->KT + bh * pn->per_h, *VT = pn->VT + bh * pn->per_h;
            int64_t b = bh / Hkv, hk = bh % Hkv;
            int64_t nkeys = (Sk + BC_B - 1) / BC_B * BC_B;
            for (int64_t j = 0; tmp && j < nkeys; j++) {
                const float *kr = j < Sk ? attn_flash_row_operand(kt, k, d->qkv_dtype, b, hk, j, D, kvt, tmp) : NULL;
                const float *vr =
                    j < Sk ? attn_flash_row_operand(kt, v, d->qkv_dtype, b, hk, j, Dv, kvt, tmp + D) : NULL;
                float *kt_ = KT + (j / BC_B) * D * BC_B + j % BC_B, *vt_ = VT + (j / BC_B) * Dv * BC_B + j % BC_B;
                for (int64_t c = 0; c < D; c++) kt_[c * BC_B] = kr ? kr[c] : 0.0f;
                for (int64_t c = 0; c < Dv; c++) vt_[c * BC_B] = vr ? vr[c] : 0.0f;
            }
        }
        free(tmp);
    }
    return st;
}

/* bytes of the panels; 0 on overflow */
static size_t bwd_panels_size(const attn_sdpa_desc *d, bwd_panels *pn) {
    int64_t D = d->D, Dv = d->Dv, Hkv = attn_sem_hkv(d), nkb = (d->Sk + BC_B - 1) / BC_B;
    size_t n;
    pn->ldk = BC_B;
    pn->per_h = nkb * BC_B * (D > Dv ? D : Dv);
    if (attn_mul_size((size_t)(nkb * BC_B), (size_t)(D > Dv ? D : Dv), &n) ||
        attn_mul3_size(n, (size_t)(d->B * Hkv), 2 * sizeof(float), &n))
        return 0;
    return n;
}

attn_status attn_flash_block_stats(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                   float *m, float *l, float *t) {
    attn_status ks = attn_kernel_status();
    if (ks) return ks;
    size_t nrows, BH = (size_t)(d->B * d->H);
    if (attn_mul_size(BH, (size_t)d->Sq, &nrows)) return ATTN_E_OVERFLOW;
    if (nrows == 0 || d->Sk == 0 || d->B * attn_sem_hkv(d) == 0) return ATTN_OK; /* nothing to fold */
    bwd_panels pn = {NULL, NULL, 0, 0};
    size_t np = bwd_panels_size(d, &pn);
    if (!np) return ATTN_E_OVERFLOW;
    float *panels = attn_ws_alloc(np), *bm = attn_ws_alloc(nrows * sizeof(float));
    float *bl = attn_ws_alloc(nrows * sizeof(float)), *bt = attn_ws_alloc(nrows * sizeof(float));
    attn_status st = panels && bm && bl && bt ? ATTN_OK : ATTN_E_NOMEM;
    const mcg_consts mc = mcg_setup(d);
    if (!st) st = pack_bwd_panels(attn_kernels(), d, k, v, &pn, panels);
    if (!st) st = bwd_row_stats(attn_kernels(), d, &mc, q, dout, &pn, bm, bl, bt);
    for (size_t r = 0; !st && r < nrows; r++) { /* fold this block into the running statistics */
        if (bm[r] == -INFINITY) continue;
        if (m[r] == -INFINITY) {
            m[r] = bm[r], l[r] = bl[r], t[r] = bt[r];
            continue;
        }
        float M = attn_max_nan(m[r], bm[r]), a = exp2f(m[r] - M), c = exp2f(bm[r] - M);
        l[r] = l[r] * a + bl[r] * c, t[r] = t[r] * a + bt[r] * c, m[r] = M;
    }
    attn_ws_free(panels), attn_ws_free(bm), attn_ws_free(bl), attn_ws_free(bt);
    return st;
}

static attn_status flash_bwd(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                             const float *gm, const float *gl, const float *gt, attn_view dq, attn_view dk,
                             attn_view dv);

attn_status attn_flash_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                attn_view dout, const float *lse_in, attn_view dq, attn_view dk, attn_view dv) {
    (void)out, (void)lse_in; /* the row statistics are recomputed (bwd_row_stats) */
    return flash_bwd(d, q, k, v, dout, NULL, NULL, NULL, dq, dk, dv);
}

attn_status attn_flash_block_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                      const float *m, const float *l, const float *t, attn_view dq, attn_view dk,
                                      attn_view dv) {
    return flash_bwd(d, q, k, v, dout, m, l, t, dq, dk, dv);
}

/* The fused backward, query-block outer (FlashAttention-2's order, with
 * the statistics of issue 9). Per query block of a head: pass 1 computes
 * every tile's S = Q K^T and dP = dO V^T once and keeps them (BR x Sk per
 * thread), folding the row statistics (m, l, rowsum(P dP)) from those very
 * tiles; pass 2 turns them into P and dS and accumulates dV += P^T dO and
 * dK += dS^T Q into the work item's partials and dQ += dS K in registers'
 * reach: five tile products per tile instead of seven. Work items are
 * (b, kv head, chunk of the group's query blocks); the chunking depends only
 * on the shape, and the partials are summed in chunk order, so results are
 * bitwise identical for any number of threads. gm, gl, gt: the whole rows'
 * statistics (a block of a larger problem), or NULL to compute them here. */
/* float32 row (b, h, s) of an output view */
static float *attn_row_addr_mut(attn_view t, int64_t b, int64_t h, int64_t s) {
    return t.data + b * t.stride_b + h * t.stride_h + s * t.stride_s;
}

/* What the backward adds for sinks and a bias: the rows' dsinks shares
 * (B H Sq) and the full d loss / d bias (B H Sq Sk, zeros where P = 0),
 * each entry written by the one item that owns its row, reduced at the end
 * in a fixed order (deterministic for any thread count) */
/* The backward's per-row extras: dsinks' row shares (dsr), and where
 * dbias's elements go: db (element (b, h, i, j) at b ld[0] + h ld[1] + i
 * ld[2] + j ld[3]), either dbias itself, when the bias broadcasts over no
 * dim of the problem (each element is one pair's: written in place), or a
 * full (B, H, Sq, Sk) buffer (dbf) summed over the broadcast dims at the end. */
typedef struct bwd_extra {
    float *dsr, *dbf, *db;
    int64_t ld[4];
    int ok;
} bwd_extra;

static bwd_extra bwd_extra_alloc(const attn_sdpa_desc *d) {
    bwd_extra e = {NULL, NULL, NULL, {0, 0, 0, 0}, 1};
    size_t rows = (size_t)(d->B * d->H * d->Sq);
    const int64_t *st = d->attn_bias_strides, dims[4] = {d->B, d->H, d->Sq, d->Sk};
    if (d->sinks && d->dsinks) e.dsr = malloc((rows ? rows : 1) * sizeof(float)), e.ok &= e.dsr != NULL;
    if (!d->attn_bias || !d->dbias) return e;
    int direct = 1;
    for (int t = 0; t < 4; t++) direct &= st[t] != 0 || dims[t] == 1;
    if (direct) { /* every element of dbias is one pair's; the pairs no tile visits stay 0 */
        for (int t = 0; t < 4; t++) e.ld[t] = st[t];
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t h = 0; h < d->H; h++)
                for (int64_t i = 0; i < d->Sq; i++)
                    for (int64_t j = 0; j < d->Sk; j++) d->dbias[b * st[0] + h * st[1] + i * st[2] + j * st[3]] = 0;
        e.db = d->dbias;
        return e;
    }
    e.dbf = e.db = calloc(rows * (size_t)d->Sk + 1, sizeof(float)), e.ok &= e.dbf != NULL;
    e.ld[0] = d->H * d->Sq * d->Sk, e.ld[1] = d->Sq * d->Sk, e.ld[2] = d->Sk, e.ld[3] = 1;
    return e;
}

/* dbias (the bias's strides) = the full gradient summed over its broadcast dims, in (b, h, i, j) order */
static void bwd_dbias(const attn_sdpa_desc *d, const float *full) {
    const int64_t *st = d->attn_bias_strides;
    int64_t n[4] = {st[0] ? d->B : 1, st[1] ? d->H : 1, st[2] ? d->Sq : 1, st[3] ? d->Sk : 1};
    for (int64_t a = 0; a < n[0] * n[1] * n[2] * n[3]; a++) { /* one output element at a time */
        int64_t jb = a % n[3], ib = a / n[3] % n[2], hb = a / (n[3] * n[2]) % n[1], bb = a / (n[3] * n[2] * n[1]);
        double sum = 0.0;
        for (int64_t b = st[0] ? bb : 0; b < (st[0] ? bb + 1 : d->B); b++)
            for (int64_t h = st[1] ? hb : 0; h < (st[1] ? hb + 1 : d->H); h++)
                for (int64_t i = st[2] ? ib : 0; i < (st[2] ? ib + 1 : d->Sq); i++)
                    for (int64_t j = st[3] ? jb : 0; j < (st[3] ? jb + 1 : d->Sk); j++)
                        sum += full ? full[((b * d->H + h) * d->Sq + i) * d->Sk + j] : 0.0;
        d->dbias[bb * st[0] + hb * st[1] + ib * st[2] + jb * st[3]] = (float)sum;
    }
}

/* dsinks[h] = the rows' shares summed over (b, i) in order (double) */
static void bwd_dsinks(const attn_sdpa_desc *d, const float *rows) {
    for (int64_t h = 0; h < d->H; h++) {
        double s = 0.0;
        for (int64_t b = 0; b < d->B; b++)
            for (int64_t i = 0; i < d->Sq; i++) s += rows[(b * d->H + h) * d->Sq + i];
        d->dsinks[h] = (float)s;
    }
}

static void bwd_extra_finish(const attn_sdpa_desc *d, const bwd_extra *e) {
    if (e->dsr) bwd_dsinks(d, e->dsr);
    if (e->dbf) bwd_dbias(d, e->dbf);
}

/* Gradients of a problem with no query or no key: all zeros. */
static attn_status bwd_zero_grads(const attn_sdpa_desc *d, attn_view dq, attn_view dk, attn_view dv) {
    int64_t H = d->H, Hkv = attn_sem_hkv(d);
    for (int64_t h = 0; d->sinks && d->dsinks && h < H; h++) d->dsinks[h] = 0.0f;
    if (d->attn_bias && d->dbias) bwd_dbias(d, NULL);
    for (int64_t bh = 0; bh < d->B * H; bh++)
        for (int64_t i = 0; i < d->Sq; i++)
            memset(dq.data + (bh / H) * dq.stride_b + (bh % H) * dq.stride_h + i * dq.stride_s, 0,
                   (size_t)d->D * sizeof(float));
    for (int64_t bh = 0; bh < d->B * Hkv; bh++)
        for (int64_t j = 0; j < d->Sk; j++) {
            memset(dk.data + (bh / Hkv) * dk.stride_b + (bh % Hkv) * dk.stride_h + j * dk.stride_s, 0,
                   (size_t)d->D * sizeof(float));
            memset(dv.data + (bh / Hkv) * dv.stride_b + (bh % Hkv) * dv.stride_h + j * dv.stride_s, 0,
                   (size_t)d->Dv * sizeof(float));
        }
    return ATTN_OK;
}

/* K row-major (SkP keys x DP, zero padded) for dQ = dS K, when it cannot be read in place */
static void bwd_k_rows(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view k, float *krows, int64_t SkP,
                       int64_t DP) {
    int64_t Hkv = attn_sem_hkv(d), Sk = d->Sk, D = d->D;
    attn_dtype kvt = attn_sem_kv_type(d, attn_view_dtype(d->qkv_dtype));
#pragma omp parallel for schedule(static) if (attn_par_worth(d, 1.0))
    for (int64_t bh = 0; bh < d->B * Hkv; bh++)
        for (int64_t j = 0; j < SkP; j++) {
            float *row = krows + ((size_t)bh * (size_t)SkP + (size_t)j) * (size_t)DP;
            const float *kr =
                j < Sk ? attn_flash_row_operand(kt, k, d->qkv_dtype, bh / Hkv, bh % Hkv, j, D, kvt, row) : NULL;
            for (int64_t c = DP - 1; c >= 0; c--) row[c] = (kr && c < D) ? kr[c] : 0.0f;
        }
}

/* The tile of K rows from key j0 for dQ = dS K: read in place, or (klast
 * given, the tile past Sk) from a copy whose rows past Sk are zeros, as in
 * the padded copy; *ldt its row stride. */
static const float *bwd_k_tile(const float *Kr, int64_t ldkr, int64_t j0, int64_t Sk, int64_t DP, float *klast,
                               int64_t *ldt) {
    const float *kt0 = Kr + j0 * ldkr;
    if (!klast || j0 + BC_B <= Sk) return kt0;
    for (int64_t j = 0; j < BC_B; j++)
        for (int64_t c = 0; c < DP; c++) klast[j * DP + c] = j0 + j < Sk ? kt0[j * ldkr + c] : 0.0f;
    *ldt = DP;
    return klast;
}

/* Pass 1 of the backward on the tile of keys from j0: its scores (and
 * softcap derivative) and dP kept at offset at of Sb, dPb (Gb); folded into
 * the row statistics m, l, acc unless m is NULL (the block API gives them) */
static void bwd_tile_pass1(const attn_kernel_table *kt, const attn_sdpa_desc *d, const attn_seq *sq,
                           const mcg_consts *mc, const bwd_panels *pn, int64_t b, int64_t h, int64_t i0, int64_t rows,
                           bwd_cols w, const float *Qp, const float *KT, const float *VT, const float *dOp, int64_t at,
                           float *Sb, float *dPb, float *Gb, const float *add, int any_add, uint8_t *keep, float *m,
                           float *l, float *acc, bwd_mm *x, int64_t ld) {
    int64_t DP = attn_round_up(d->D, 16), DvP = attn_round_up(d->Dv, 16);
    bwd_scores(kt, d, sq, h, Qp, DP, KT, pn->ldk, Sb + at, Gb ? Gb + at : NULL, rows, i0, w, add, any_add, x, ld);
    bwd_dp(kt, d, mc, dOp, DvP, VT, pn->ldk, dPb + at, rows, b, h, i0, w, keep, x);
    if (m) fold_tile(kt, Sb + at, dPb + at, rows, attn_score_escale(d), w, ld, m, l, acc);
}

/* P after dropout (a copy in Pd) for dV += P^T dO, or P itself without dropout */
static const float *bwd_dropped_p(const attn_kernel_table *kt, const attn_sdpa_desc *d, const mcg_consts *mc,
                                  const float *P, float *Pd, int64_t rows, int64_t b, int64_t h, int64_t i0, bwd_cols w,
                                  uint8_t *keep) {
    if (!d->dropout) return P;
    memcpy(Pd, P, (size_t)(BR * BC_B) * sizeof(float));
    dropout_tile(kt, d, mc, Pd + w.c0, BC_B, w.n, rows, b, h, i0, w.j0 + w.c0, keep);
    return Pd;
}

/* rows from row0 on of a partials buffer of ld floats a row (NULL stays NULL) */
static float *bwd_part(float *p, int64_t row0, int64_t ld) { return p ? p + (size_t)row0 * (size_t)ld : NULL; }

/* The row statistics of a query block (max m, sum l, acc = sum P dP): the
 * block API's given ones (gm, gl, gt at row at0 on) or those folded in pass
 * 1; then 1 / l and Di = acc / l, zeros for rows that see no key (P = 0; NaN
 * rows stay NaN) */
static void bwd_row_finish(const float *gm, const float *gl, const float *gt, size_t at0, int64_t rows, int64_t br,
                           float *m, float *l, float *acc, float *il, float *di, const float *sink, float *dsink) {
    for (int64_t r = 0; r < br; r++) {
        if (gm && r < rows) m[r] = gm[at0 + r], l[r] = gl[at0 + r], acc[r] = gt[at0 + r];
        int dead = r >= rows || m[r] == -INFINITY;
        float L = l[r], ps = 0.0f; /* ps: the sink's probability (online.h: a term without a value) */
        if (sink && !dead) {
            float s2 = *sink * ATTN_LOG2E;
            L = l[r] + exp2f(s2 - m[r]);
            ps = s2 > m[r] ? 1.0f / (1.0f + l[r] * exp2f(m[r] - s2)) : exp2f(s2 - m[r]) / L;
        }
        il[r] = dead ? 0.0f : 1.0f / L;
        di[r] = dead ? 0.0f : acc[r] / L;
        if (dsink && r < rows) dsink[r] = dead ? 0.0f : -ps * di[r]; /* d lse / d sink = ps, d out = -ps out */
    }
}

/* A query block's S / dP (and softcap derivative) buffers, grown to n floats; 0 when out of memory */
static int bwd_item_bufs(size_t n, int capped, float **Sb, float **dPb, float **Gb, size_t *have) {
    if (n <= *have) return 1;
    attn_ws_free(*Sb), attn_ws_free(*dPb), attn_ws_free(*Gb);
    *have = n;
    *Sb = attn_ws_alloc(n * sizeof(float)), *dPb = attn_ws_alloc(n * sizeof(float));
    *Gb = capped ? attn_ws_alloc(n * sizeof(float)) : NULL;
    if (*Sb && *dPb && (!capped || *Gb)) return 1;
    *have = 0;
    return 0;
}

/* P = softmax rows of the tile S (max m, 1 / sum il) and dS = P (dP - di)
 * scale, in place of dP (G: the softcap derivative, which replaces scale);
 * rows past rows and dead rows give zeros */
static void bwd_p_ds(const attn_kernel_table *kt, const attn_sdpa_desc *d, const float *S, float *dS, float *P,
                     const float *G, int64_t rows, float escale, const float *m, const float *il, const float *di,
                     float *db, const int64_t *ld, bwd_cols w, const bwd_geo *g) {
    int64_t n = w.n, nk = d->Sk - (w.j0 + w.c0) < n ? d->Sk - (w.j0 + w.c0) : n, BT = g->bc; /* keys that exist */
    S += w.c0, dS += w.c0, P += w.c0, G = G ? G + w.c0 : NULL, db = db ? db + w.c0 * ld[3] : NULL;
    for (int64_t r = 0; r < g->br; r++) {
        float *pr = P + r * BT, *ds = dS + r * BT;
        if (m[r] == -INFINITY || r >= rows) {
            memset(pr, 0, (size_t)n * sizeof(float));
            memset(ds, 0, (size_t)n * sizeof(float));
            continue;
        }
        if (db) { /* d loss / d bias = P (dP - Di), kept (row r of the block, keys from j0) */
            kt->exp2_row(S + r * BT, pr, n, escale, m[r]);
            kt->scale_row(pr, n, il[r]);
            for (int64_t c = 0; c < n; c++) {
                float t = pr[c] * (ds[c] - di[r]);
                if (c < nk) db[r * ld[2] + c * ld[3]] = t;
                ds[c] = t * (G ? G[r * BT + c] : d->scale);
            }
            continue;
        }
        if (!G) {
            kt->softmax_grad_row(S + r * BT, pr, ds, n, escale, m[r], il[r], di[r], d->scale);
            continue;
        }
        kt->exp2_row(S + r * BT, pr, n, escale, m[r]);
        kt->scale_row(pr, n, il[r]);
        const float *gr = G + r * BT;
        for (int64_t c = 0; c < n; c++) ds[c] = pr[c] * (ds[c] - di[r]) * gr[c];
    }
    int64_t lo = w.c0 - w.a0, hi = w.a0 + w.an - (w.c0 + n); /* the transposed products' extra columns: zero */
    for (int64_t r = 0; (lo || hi) && r < g->br; r++) {
        memset(P + r * BT - lo, 0, (size_t)lo * sizeof(float)), memset(P + r * BT + n, 0, (size_t)hi * 4);
        memset(dS + r * BT - lo, 0, (size_t)lo * sizeof(float)), memset(dS + r * BT + n, 0, (size_t)hi * 4);
    }
}

/* dK, dV = the chunk partials summed in chunk order (inside the parallel
 * region: the rows are shared out); a chunk whose queries cannot see key j
 * adds nothing (its +0 would leave the sum's bits alone: a partial is a sum
 * of products started at +0, never -0) */
static void bwd_sum_partials(const attn_sdpa_desc *d, int64_t nchunk, const int64_t *prng, const float *pk,
                             const float *pv, int64_t DP, int64_t DvP, attn_view dk, attn_view dv) {
    int64_t Hkv = attn_sem_hkv(d), Sk = d->Sk, D = d->D, Dv = d->Dv, nitem = d->B * Hkv * nchunk;
#pragma omp for schedule(static)
    for (int64_t row = 0; row < d->B * Hkv * Sk; row++) {
        int64_t bhk = row / Sk, j = row % Sk;
        float *gk = dk.data + (bhk / Hkv) * dk.stride_b + (bhk % Hkv) * dk.stride_h + j * dk.stride_s;
        float *gv = dv.data + (bhk / Hkv) * dv.stride_b + (bhk % Hkv) * dv.stride_h + j * dv.stride_s;
        int first = 1;
        for (int64_t it = bhk * nchunk; it < (bhk + 1) * nchunk; it++) {
            if (j < prng[2 * it] || j >= prng[2 * it + 1]) continue;
            size_t at = (size_t)(prng[2 * nitem + it] + j - prng[2 * it]);
            const float *kc = pk + at * (size_t)DP, *vc = pv + at * (size_t)DvP;
            for (int64_t c = 0; c < D; c++) gk[c] = first ? kc[c] : gk[c] + kc[c];
            for (int64_t c = 0; c < Dv; c++) gv[c] = first ? vc[c] : gv[c] + vc[c];
            first = 0;
        }
        if (first) { /* no query sees key j */
            memset(gk, 0, (size_t)D * sizeof(float));
            memset(gv, 0, (size_t)Dv * sizeof(float));
        }
    }
}

/* One thread's tiles in the backward (br x bc tiles of its geometry). */
typedef struct bwd_bufs {
    float *Qp, *Qu, *dOp, *dQ, *P, *Pd, *add, *klast; /* klast: K's partial last tile (K read in place) */
    float *Sb, *dPb, *Gb; /* S, dP (, softcap derivative) of a block's tiles: br x its item's partials' keys */
    size_t nbuf;          /* floats of each of Sb, dPb, Gb */
    uint8_t *keep;
    float *m, *il, *di, *l, *acc; /* the block's row statistics, br each */
    bwd_mm x;                     /* oneDNN's operands (x.p NULL without) */
} bwd_bufs;

/* n bytes aligned to a cache line (oneDNN's packed operands), or NULL */
static void *line_alloc(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 64, n ? n : 64) ? NULL : p;
}

static int bwd_bufs_init(bwd_bufs *t, const bwd_geo *g, int64_t DP, int64_t DvP, int64_t SkP, int k_direct,
                         const attn_bwd_mm_plan *p) {
    int64_t br = g->br, bc = g->bc;
    *t = (bwd_bufs){0};
    t->x.p = p;
    if (p) {
        size_t es = attn_storage_bytes(p->mt, 1);
        t->x.mm = attn_mm_thread();
        t->x.Qm = malloc((size_t)(br * DP) * es), t->x.Qum = malloc((size_t)(br * DP) * es);
        t->x.dOm = malloc((size_t)(br * DvP) * es);
        t->x.Pm = malloc((size_t)(br * bc) * es), t->x.dSm = malloc((size_t)(br * bc) * es);
        t->x.Qb = line_alloc(p->qq), t->x.dOb = line_alloc(p->qo);
        if (!t->x.mm || !t->x.Qm || !t->x.Qum || !t->x.dOm || !t->x.Pm || !t->x.dSm || !t->x.Qb || !t->x.dOb) return 0;
    }
    t->Qp = malloc((size_t)(br * DP) * sizeof(float)), t->Qu = malloc((size_t)(br * DP) * sizeof(float));
    t->dOp = malloc((size_t)(br * DvP) * sizeof(float)), t->dQ = malloc((size_t)(br * DP) * sizeof(float));
    t->P = malloc((size_t)(br * bc) * sizeof(float)), t->Pd = malloc((size_t)(br * bc) * sizeof(float));
    t->add = malloc((size_t)SkP * sizeof(float)), t->keep = malloc((size_t)bc);
    t->m = malloc((size_t)(5 * br) * sizeof(float));
    t->klast = k_direct ? malloc((size_t)(bc * DP) * sizeof(float)) : NULL;
    if (!t->m) return 0;
    t->il = t->m + br, t->di = t->il + br, t->l = t->di + br, t->acc = t->l + br;
    return t->Qp && t->Qu && t->dOp && t->dQ && t->P && t->Pd && t->add && t->keep && (t->klast || !k_direct);
}

static void bwd_bufs_free(bwd_bufs *t) {
    free(t->x.Qm), free(t->x.Qum), free(t->x.dOm), free(t->x.Pm), free(t->x.dSm), free(t->x.Qb), free(t->x.dOb);
    free(t->Qp), free(t->Qu), free(t->dOp), free(t->dQ), free(t->P), free(t->Pd), free(t->add), free(t->keep);
    free(t->m), free(t->klast), attn_ws_free(t->Sb), attn_ws_free(t->dPb), attn_ws_free(t->Gb);
}

/* Pass 2's products of one tile (keys from w.j0): dV += P^T dO and dK +=
 * dS^T Q into the item's partials (rows from dVp, dKp: the window [a0, a0 +
 * an)), dQ += dS K (kt0: K's rows of the tile, ldt apart); through oneDNN,
 * whole tiles from the thread's P, dS and packed operands */
static void bwd_tile_products(const attn_kernel_table *kt, const attn_sdpa_desc *d, bwd_mm *x, bwd_cols w,
                              const float *pd, const float *dS, const float *dOp, const float *Qu, float *dVp,
                              float *dKp, const float *kt0, int64_t ldt, float *dQ) {
    int64_t DP = attn_round_up(d->D, 16), DvP = attn_round_up(d->Dv, 16);
    if (!bwd_on_mm(x)) {
        tile_gemm_tn(kt, w.an, DvP, BR, pd + w.a0, BC_B, dOp, DvP, dVp, DvP, 1);
        tile_gemm_tn(kt, w.an, DP, BR, dS + w.a0, BC_B, Qu, DP, dKp, DP, 1);
        attn_tile_gemm(kt, BR, DP, w.n, dS + w.c0, BC_B, kt0 + w.c0 * ldt, ldt, dQ, DP, 1);
        return;
    }
    if (!x->err) x->err = attn_mm_exec(x->mm, &x->p->dv, x->Pm, x->dOb, dVp);
    if (!x->err) x->err = attn_mm_exec(x->mm, &x->p->dk, x->dSm, x->Qb, dKp);
    if (!x->err) x->err = attn_mm_exec(x->mm, &x->p->dq, x->dSm, bwd_tile_keys(x, w.j0) + x->p->ks + x->p->vs, dQ);
}

/* The backward's key operands, packed once: the kernels' K^T and V^T panels
 * (and K as rows for dQ = dS K unless read in place, k_direct), or, when the
 * products go through oneDNN (mmp), every kv head's packed key tiles
 * (attn_bwd_mm_pack_keys: nkt tiles a head) */
typedef struct bwd_keys {
    float *panels, *krows;
    char *mpanels;
} bwd_keys;

static attn_status bwd_pack_mm(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view k, attn_view v,
                               const attn_bwd_mm_plan *p, int64_t nkt, char *mpanels) {
    int64_t Hkv = attn_sem_hkv(d);
    attn_status st = ATTN_OK;
#pragma omp parallel if (attn_par_worth(d, 1.0))
    {
        float *tmp = malloc((size_t)(p->bc * (p->DP + p->DvP) + d->D + d->Dv) * sizeof(float));
        attn_status ps = tmp ? ATTN_OK : ATTN_E_NOMEM;
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < d->B * Hkv; bh++)
            if (!ps)
                ps = attn_bwd_mm_pack_keys(p, kt, d, k, v, bh / Hkv, bh % Hkv, nkt,
                                           mpanels + (size_t)bh * (size_t)nkt * p->tile, tmp);
        if (ps) {
#pragma omp atomic write
            st = ps;
        }
        free(tmp);
    }
    return st;
}

static attn_status bwd_keys_make(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view k, attn_view v,
                                 bwd_panels *pn, size_t npanel, size_t nkrow, int k_direct, const attn_bwd_mm_plan *mmp,
                                 bwd_keys *o) {
    int64_t SkP = (d->Sk + BC_B - 1) / BC_B * BC_B, DP = attn_round_up(d->D, 16);
    if (mmp) {
        int64_t nkt = (d->Sk + mmp->bc - 1) / mmp->bc;
        size_t n;
        if (attn_mul3_size((size_t)(d->B * attn_sem_hkv(d)), (size_t)nkt, mmp->tile, &n)) return ATTN_E_OVERFLOW;
        o->mpanels = attn_ws_alloc(n);
        return o->mpanels ? bwd_pack_mm(kt, d, k, v, mmp, nkt, o->mpanels) : ATTN_E_NOMEM;
    }
    o->panels = attn_ws_alloc(npanel);
    o->krows = k_direct ? NULL : attn_ws_alloc(nkrow * sizeof(float));
    if (!o->panels || (!k_direct && !o->krows)) return ATTN_E_NOMEM;
    attn_status st = pack_bwd_panels(kt, d, k, v, pn, o->panels);
    if (!st && !k_direct) bwd_k_rows(kt, d, k, o->krows, SkP, DP);
    return st;
}

/* What every backward block of one call shares. */
typedef struct bwd_call {
    const attn_sdpa_desc *d;
    const attn_kernel_table *kt;
    const mcg_consts *mc;
    const bwd_panels *pn;
    const qblocks *qb;
    attn_view q, dout, dq;
    const float *gm, *gl, *gt; /* the block API's row statistics, or NULL */
    const bwd_extra *ex;
    float qmul, escale;
    attn_dtype qt, grt;          /* a math mode's Q and dO / P / dS types */
    const attn_bwd_mm_plan *mmp; /* the products through oneDNN, or NULL */
    bwd_geo g;                   /* the tiles */
    int64_t ldkr;                /* row stride of K's rows for dQ = dS K */
    int k_direct, capped;
} bwd_call;

/* One work item's keys: (b, kv head), its dK / dV partials (rows from key
 * plo), the kernels' panels and K rows (or oneDNN's, in the thread's bwd_mm) */
typedef struct bwd_item {
    int64_t b, hk, plo;
    float *dKp, *dVp;
    const float *KT, *VT, *Kr;
    int any_add;
    attn_seq sq;
} bwd_item;

/* Pass 2's P and dS of one tile as oneDNN's operands (whole tiles, of the
 * plan's type): the fused pass (softmax_grad_store_row) where nothing else
 * enters dS, else bwd_p_ds in float32 (softcap derivative, dbias), rounded
 * and written; dead and padding rows zero */
static void bwd_p_ds_mm(const bwd_call *c, bwd_bufs *tb, const float *S, float *dP, const float *G, int64_t rows,
                        float *db, bwd_cols w) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    const attn_bwd_mm_plan *p = c->mmp;
    int64_t br = p->br, bc = p->bc;
    size_t rb = attn_storage_bytes(p->mt, bc);
    char *Pm = tb->x.Pm, *dSm = tb->x.dSm;
    if (G || db) {
        bwd_p_ds(kt, d, S, dP, tb->P, G, rows, c->escale, tb->m, tb->il, tb->di, db, c->ex->ld, w, &c->g);
        for (int64_t r = 0; r < br; r++) {
            kt->store_row(tb->P + r * bc, bc, c->grt, p->mt, Pm + (size_t)r * rb);
            kt->store_row(dP + r * bc, bc, c->grt, p->mt, dSm + (size_t)r * rb);
        }
        return;
    }
    for (int64_t r = 0; r < br; r++) {
        if (r >= rows || tb->m[r] == -INFINITY) {
            memset(Pm + (size_t)r * rb, 0, rb), memset(dSm + (size_t)r * rb, 0, rb);
            continue;
        }
        kt->softmax_grad_store_row(S + r * bc, dP + r * bc, bc, c->escale, tb->m[r], tb->il[r], tb->di[r], d->scale,
                                   c->grt, p->mt, Pm + (size_t)r * rb, dSm + (size_t)r * rb);
    }
}

/* Query unit u of an item (head and query block): pass 1 computes every
 * tile's S and dP and the rows' statistics, pass 2 turns them into P and dS
 * and adds the tile's products; dq of the block's rows written. */
static void bwd_block(const bwd_call *c, bwd_bufs *tb, const bwd_item *it, int64_t u) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    int64_t nqb = c->qb->n, b = it->b, h = it->hk * (d->H / attn_sem_hkv(d)) + u / nqb, bh = b * d->H + h;
    int64_t D = d->D, Dv = d->Dv, Sq = d->Sq, DP = attn_round_up(D, 16), DvP = attn_round_up(Dv, 16), i0, rows, klo,
            khi, br = c->g.br, bc = c->g.bc;
    int mm = c->mmp != NULL;
    const attn_seq *sq = &it->sq;
    const bwd_extra *ex = c->ex;
    float *Sb = tb->Sb, *dPb = tb->dPb, *P = tb->P, *dQ = tb->dQ, *m = tb->m, *l = tb->l, *acc = tb->acc;
    attn_qb_at(c->qb, u % nqb, &i0, &rows);
    block_rng(d, sq, h, i0, rows, &klo, &khi);
    int64_t t0 = klo / bc, t1 = khi > klo ? (khi + bc - 1) / bc : t0;                        /* tiles [t0, t1) */
    pack_operand(kt, c->q, d->qkv_dtype, b, h, i0, rows, br, D, DP, tb->Qp, c->qmul, c->qt); /* base/sem.h */
    pack_operand(kt, c->dout, ATTN_DTYPE_F32, b, h, i0, rows, br, Dv, DvP, tb->dOp, 1.0f, c->grt);
    if (mm) {                                                                 /* oneDNN's operands */
        kt->store_row(tb->Qp, br * DP, ATTN_DTYPE_F32, c->mmp->mt, tb->x.Qm); /* rounded already */
        kt->store_row(tb->dOp, br * DvP, ATTN_DTYPE_F32, c->mmp->mt, tb->x.dOm);
    }
    for (int64_t r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0.0f, acc[r] = 0.0f;
    for (int64_t t = t0; t < t1; t++) /* pass 1: S and dP of every tile, kept; row statistics */
        if (!attn_score_tile_hidden(d, sq, h, rows, i0, t * bc, bc))
            bwd_tile_pass1(kt, d, sq, c->mc, c->pn, b, h, i0, rows, bwd_cols_of(t * bc, klo, khi, &c->g), tb->Qp,
                           it->KT, it->VT, tb->dOp, (t - t0) * br * bc, Sb, dPb, c->capped ? tb->Gb : NULL, tb->add,
                           it->any_add, tb->keep, c->gm ? NULL : m, l, acc, &tb->x, bc);
    bwd_row_finish(c->gm, c->gl, c->gt, (size_t)(bh * Sq + i0), rows, br, m, l, acc, tb->il, tb->di,
                   d->sinks ? d->sinks + h : NULL, ex->dsr ? ex->dsr + bh * Sq + i0 : NULL);
    pack_operand(kt, c->q, d->qkv_dtype, b, h, i0, rows, br, D, DP, tb->Qu, 1.0f, c->qt); /* dK += dS^T Q */
    if (mm && !tb->x.err) { /* Q and dO as dK's and dV's B operands, packed once for the block's tiles */
        kt->store_row(tb->Qu, br * DP, ATTN_DTYPE_F32, c->mmp->mt, tb->x.Qum);
        tb->x.err = attn_bwd_mm_pack_block(c->mmp, tb->x.mm, tb->x.Qum, tb->x.dOm, tb->x.Qb, tb->x.dOb);
    }
    memset(dQ, 0, (size_t)(br * DP) * sizeof(float));
    for (int64_t t = t0; t < t1; t++) { /* pass 2: P, dS; dV += P^T dO, dK += dS^T Q, dQ += dS K */
        const float *S = Sb + (t - t0) * br * bc, *G = c->capped ? tb->Gb + (t - t0) * br * bc : NULL;
        float *dS = dPb + (t - t0) * br * bc;
        int64_t j0 = t * bc, ldt = c->ldkr;
        bwd_cols w = bwd_cols_of(j0, klo, khi, &c->g);
        if (attn_score_tile_hidden(d, sq, h, rows, i0, j0, bc)) continue; /* P = 0: skipped in pass 1 */
        float *db = ex->db ? ex->db + b * ex->ld[0] + h * ex->ld[1] + i0 * ex->ld[2] + j0 * ex->ld[3] : NULL;
        int64_t kc = j0 + w.a0 - it->plo; /* the window's first key in the partials */
        if (mm) {
            bwd_p_ds_mm(c, tb, S, dS, G, rows, db, w);
            bwd_tile_products(kt, d, &tb->x, w, NULL, NULL, NULL, NULL, it->dVp + kc * DvP, it->dKp + kc * DP, NULL, 0,
                              dQ);
            continue;
        }
        bwd_p_ds(kt, d, S, dS, P, G, rows, c->escale, m, tb->il, tb->di, db, ex->ld, w, &c->g);
        round_rows(kt, P + w.c0, rows, w.n, BC_B, c->grt); /* a math mode's P and dS operands */
        round_rows(kt, dS + w.c0, rows, w.n, BC_B, c->grt);
        const float *pd = bwd_dropped_p(kt, d, c->mc, P, tb->Pd, rows, b, h, i0, w, tb->keep);
        const float *kt0 = bwd_k_tile(it->Kr, c->ldkr, j0, d->Sk, DP, c->k_direct ? tb->klast : NULL, &ldt);
        bwd_tile_products(kt, d, &tb->x, w, pd, dS, tb->dOp, tb->Qu, it->dVp + kc * DvP, it->dKp + kc * DP, kt0, ldt,
                          dQ);
    }
    for (int64_t r = 0; r < rows; r++) memcpy(attn_row_addr_mut(c->dq, b, h, i0 + r), dQ + r * DP, (size_t)D * 4);
}

/* How the backward's work is cut: the query blocks; items (b, kv head,
 * chunk of the group's (head, query block) units), nchunk per kv head; each
 * item's partial key rows (bwd_part_ranges). */
typedef struct bwd_plan {
    qblocks qb;
    int64_t units, nchunk, nitem, *prng;
    size_t npart; /* rows of all partials */
} bwd_plan;

static attn_status bwd_plan_make(const attn_sdpa_desc *d, const bwd_geo *g, bwd_plan *p) {
    int64_t BHkv = d->B * attn_sem_hkv(d);
    *p = (bwd_plan){{0, 0, 0, NULL}, 0, 0, 0, NULL, 0};
    if (attn_qb_make(d, g->br, &p->qb)) return ATTN_E_NOMEM;
    p->units = attn_sem_group(d) * p->qb.n;
    int64_t want = (BWD_MIN_ITEMS + BHkv - 1) / BHkv;
    p->nchunk = want < p->units ? want : p->units;
    p->nitem = BHkv * p->nchunk;
    p->prng = malloc((size_t)(3 * p->nitem + 1) * sizeof *p->prng);
    if (!p->prng) return ATTN_E_NOMEM;
    p->npart = (size_t)bwd_part_ranges(d, p->nchunk, p->units, &p->qb, g->bc, p->prng);
    return ATTN_OK;
}

static attn_status flash_bwd(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                             const float *gm, const float *gl, const float *gt, attn_view dq, attn_view dk,
                             attn_view dv) {
    attn_status ks = attn_kernel_status();
    if (ks) return ks;
    const attn_kernel_table *kt = attn_kernels();
    int64_t B = d->B, H = d->H, Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv, BH = B * H;
    int64_t Hkv = attn_sem_hkv(d), BHkv = B * Hkv;
    if (Sk == 0 || Sq == 0 || BH == 0) return bwd_zero_grads(d, dq, dk, dv); /* nothing visible anywhere */
    int64_t DP = attn_round_up(D, 16), DvP = attn_round_up(Dv, 16);
    attn_dtype vt = attn_view_dtype(d->qkv_dtype), qt = attn_sem_q_type(d, vt), grt = attn_sem_grad_type(d, vt);
    /* the one choice of the products: a mode's 16-bit operands through oneDNN where kernels/mm.h enables it
     * and oneDNN has the five products (under auto on an AMX host: on AMX); else the kernels' */
    attn_bwd_mm_plan mmp;
    const attn_bwd_mm_plan *pp = NULL;
    if (qt != ATTN_DTYPE_F32 && qt == grt && attn_mm_type(qt) != ATTN_DTYPE_Q8_0 &&
        attn_bwd_mm_plan_make(&mmp, attn_mm_type(qt), DP, DvP))
        pp = &mmp;
    const bwd_geo g = pp ? (bwd_geo){MMB_BR, MMB_BC, 1} : (bwd_geo){BR, BC_B, 0};
    int64_t nkb = (Sk + g.bc - 1) / g.bc, SkP = nkb * g.bc;
    bwd_panels pn = {NULL, NULL, 0, 0};
    size_t npanel = bwd_panels_size(d, &pn), nkrow; /* (Sk < 2^31: S/dP buffers of br x SkP cannot overflow) */
    if (!npanel || attn_mul3_size((size_t)BHkv, (size_t)SkP, (size_t)DP, &nkrow)) return ATTN_E_OVERFLOW;
    /* each item's dK/dV partial covers only the key tiles its query blocks can see
     * (a causal chunk: the keys up to its last row), rows [plo, phi) of the sequence */
    bwd_plan pl;
    attn_status st = bwd_plan_make(d, &g, &pl);
    int64_t units = pl.units, nchunk = pl.nchunk, nitem = pl.nitem, *prng = pl.prng;
    size_t npart = pl.npart;
    int capped = attn_score_grad_tile(d);
    const mcg_consts mc = mcg_setup(d);
    /* K row-major for dQ = dS K: float32 K with D a multiple of 16 is read in place
     * (whole tiles; the last, partial tile from a padded copy per thread), other K
     * is copied once as SkP x DP rows */
    int k_direct = !pp && d->qkv_dtype == ATTN_DTYPE_F32 && D == DP && attn_sem_kv_type(d, vt) == ATTN_DTYPE_F32;
    bwd_keys ky = {NULL, NULL, NULL};
    float *pk = npart ? attn_ws_alloc(npart * (size_t)DP * sizeof(float)) : NULL;
    float *pv = npart ? attn_ws_alloc(npart * (size_t)DvP * sizeof(float)) : NULL;
    bwd_extra ex = bwd_extra_alloc(d); /* dsinks, dbias */
    if (!st && !(((pk && pv) || !npart) && ex.ok)) st = ATTN_E_NOMEM;
    if (!st) st = bwd_keys_make(kt, d, k, v, &pn, npanel, nkrow, k_direct, pp, &ky);
    if (st) goto out;
    const bwd_call bc = {d,
                         kt,
                         &mc,
                         &pn,
                         &pl.qb,
                         q,
                         dout,
                         dq,
                         gm,
                         gl,
                         gt,
                         &ex,
                         attn_score_q_multiplier(d),
                         attn_score_escale(d),
                         qt,
                         grt,
                         pp,
                         g,
                         k_direct ? k.stride_s : DP,
                         k_direct,
                         capped};
#pragma omp parallel if (attn_par_worth(d, 2.5))
    {
        bwd_bufs tb;
        int ok = bwd_bufs_init(&tb, &g, DP, DvP, SkP, k_direct, pp);
        if (!ok) {
#pragma omp atomic write
            st = ATTN_E_NOMEM;
        }
        /* items last to first: a causal group's later chunks see more keys, so the
         * largest start first and the small ones fill in (the order of the work,
         * not of any sum: the bits do not depend on it) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t rev = 0; rev < BHkv * nchunk; rev++) {
            int64_t item = BHkv * nchunk - 1 - rev;
            if (!ok) continue;
            int64_t bhk = item / nchunk, b = bhk / Hkv, hk = bhk % Hkv, cidx = item % nchunk;
            int64_t u0 = units * cidx / nchunk, u1 = units * (cidx + 1) / nchunk;
            /* the item's partials: row j - plo holds key j, for keys [plo, phi) */
            int64_t plo = prng[2 * item], prows = prng[2 * item + 1] - plo;
            float *dKp = bwd_part(pk, prng[2 * nitem + item], DP), *dVp = bwd_part(pv, prng[2 * nitem + item], DvP);
            if (!bwd_item_bufs((size_t)(g.br * prows), capped, &tb.Sb, &tb.dPb, &tb.Gb, &tb.nbuf)) {
#pragma omp atomic write
                st = ATTN_E_NOMEM;
                ok = 0;
                continue;
            }
            if (prows > 0) /* an item whose rows see no key has no partials (pk may be NULL) */
                memset(dKp, 0, (size_t)(prows * DP) * 4), memset(dVp, 0, (size_t)(prows * DvP) * 4);
            const float *KT = pp ? NULL : pn.KT + bhk * pn.per_h, *VT = pp ? NULL : pn.VT + bhk * pn.per_h;
            const float *Kr = pp         ? NULL
                              : k_direct ? k.data + b * k.stride_b + hk * k.stride_h
                                         : ky.krows + (size_t)bhk * (size_t)(SkP * DP);
            if (pp) tb.x.keys = ky.mpanels + (size_t)bhk * (size_t)nkb * pp->tile;
            int any_add = attn_score_key_row(d, b, tb.add, SkP);
            bwd_item it = {b, hk, plo, dKp, dVp, KT, VT, Kr, any_add, attn_seq_of(d, b)};
            for (int64_t u = u0; u < u1 && !tb.x.err; u++) bwd_block(&bc, &tb, &it, u);
        }
        if (ok && tb.x.err) {
#pragma omp atomic write
            st = tb.x.err;
        }
        bwd_bufs_free(&tb);
#pragma omp barrier
        if (!st) bwd_sum_partials(d, nchunk, prng, pk, pv, DP, DvP, dk, dv);
    }
    if (!st) bwd_extra_finish(d, &ex);
out:
    attn_ws_free(ky.panels), attn_ws_free(ky.krows), attn_ws_free(ky.mpanels), attn_ws_free(pk), attn_ws_free(pv),
        free(prng), free(pl.qb.start), free(ex.dsr), free(ex.dbf);
    return st;
}
