/* Decode: a few query rows against a long key cache (flash-decoding).
 *
 * The work is memory-bound: every key and value row must cross the memory
 * bus once per call. So, per (sequence b, kv head), the G query heads of the
 * group and the Sq query positions form R = G * Sq rows that share one pass
 * over K and V (qk_rows / pv_rows read each key row once for all R rows), and
 * the keys are cut into splits of DEC_SPLIT keys so that even one sequence
 * with one kv head keeps every core busy:
 *   item (b, hk, split): for each block of DEC_NB keys in the split
 *     S = Q K^T (R x n), modifiers and masks (base/sem.h), online softmax
 *     with lazy rescaling (as the fused forward), O += P V
 *   merge per (b, hk): the splits' (m, l, O) combined by log-sum-exp in
 *   split order: out = sum_s O_s e^(m_s - M) / sum_s l_s e^(m_s - M).
 * Splits depend only on the sequence's key range, never on the thread
 * count, and the merge order is fixed: results are bitwise identical for any
 * number of threads. Keys are read in place (views or cache pages), never
 * packed or copied. Dropout is not supported here (inference).
 *
 * Many rows a kv head (R >= DEC_GEMM_ROWS: MLA's query heads over one
 * latent head, cascade's shared prefix for every sequence's rows, large GQA
 * groups times speculative rows) make the products a GEMM, not a memory
 * stream: the keys then go in blocks of DEC_GB, their rows gathered as the
 * products' operands (the rows' values, rounded as the mode says), and S =
 * Q K^T and O += P V run as block products: through oneDNN where a math
 * mode's 16-bit operands go there (kernels/mm.h: AMX; P written in the
 * product's type by the exponential's pass), else the kernel table's tile
 * gemm on float32 panels. The score step and the online softmax are the
 * same; the blocks' boundaries depend only on key positions (never on
 * pages), so paged and contiguous caches give the same bits. */
#include "../kernels/kernels.h"
#include "../kernels/mm.h"
#include "internal.h"
#include "base/rows.h"
#include "base/sem.h"
#include "core/kv_src.h"
#include "online.h"
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* keys per block (S is R x DEC_NB): 64 ran 4-8% slower on the one- and half-byte formats (Zen 4); 256 ran int4 at
 * one row 0.79x the GB/s, int8 0.93x (Zen 5, zen5/decode-nb256-ab) */
#define DEC_NB 128
#define DEC_SPLIT 1024 /* keys per split (a multiple of DEC_NB) */
#define DEC_PF 128     /* rows of software prefetch distance */
/* V's, over the block formats (q8_0, q4_0: a scale a 32 values): at 64 rows
 * rather than 128 the step over q8_0 ran 1.12-1.17x the GB/s at four rows a
 * kv head on one thread, 1.14x on two, 1.05x at one row, 1.08x at eight;
 * q4_0 1.04-1.07x. The other formats lost by it (bf16 at one row 0.95x, fp8
 * at four 0.94-0.95x) or stayed within the noise. Measured on Zen 5 alone
 * (avx512-bf16, T 65536, zen5/decode-pf-v64-ab); every table takes it */
#define DEC_PF_VBLK 64
static int64_t dec_pf_v(attn_dtype v) { return v == ATTN_DTYPE_Q8_0 || v == ATTN_DTYPE_Q4_0 ? DEC_PF_VBLK : DEC_PF; }
/* rows a kv head from which the block products run (Zen 3, 2 threads, against
 * the rows' kernels: R = 64 over a 16k contiguous cache 1.1-1.2x faster;
 * MLA's 128 rows over bf16 latents in DATA mode 1.3x, the same in f32) */
#define DEC_GEMM_ROWS 32
#define DEC_GB 256 /* keys per block of the block products (DEC_SPLIT a multiple) */
/* rows a kv head from which a bf16 cache's products take the bf16 kernels
 * (qk_rows_bf, pv_rows_bf): below, the step is bound by memory, and there
 * the float32 kernels on the same rounded values stream faster (Zen 4, one
 * thread, T 65536: the bf16 kernels' step 0.87x at one row, 0.81x at two;
 * 1.10x at four, and 1.15-1.54x at one to four rows from the caches:
 * zen4/decode-bf16-rows-ab; Zen 5, from memory, the bf16 kernels' step at
 * one row 1.09x on one thread, 0.93x on two, at two rows 1.01x / 0.93x,
 * from the caches 1.26-1.36x: zen5/decode-bf16-rows-qk-ab: a serving
 * host's cores all stream, so the rule is kept there too) */
#define DEC_BF16_ROWS 4

typedef struct dec_item {
    int64_t b, hk, j0, j1; /* keys [j0, j1) */
} dec_item;

/* The items (when items is not NULL: first[g] the first of (b, hk) = g,
 * first[B * Hkv] their count); returns the count. Splits depend only on the
 * sequence's key range. */
static size_t dec_items(const attn_sdpa_desc *d, const attn_kv_src *kv, dec_item *items, int64_t *first) {
    int64_t Hkv = attn_sem_hkv(d);
    size_t n = 0;
    for (int64_t b = 0; b < d->B; b++) {
        int64_t skb = attn_sem_sk(d, b), lo = 0, hi = kv->map_len ? kv->map_len[b] : 0;
        if (!kv->map_len) /* a shard: every local key (the rule hides the rest, block by block) */
            attn_sem_rows_range(d, skb, attn_sem_off(d, b), 0, d->Sq, &lo, &hi);
        for (int64_t hk = 0; hk < Hkv; hk++) {
            if (first) first[b * Hkv + hk] = (int64_t)n;
            int64_t j = lo;
            do {
                int64_t j1 = j + DEC_SPLIT < hi ? j + DEC_SPLIT : hi;
                if (items) items[n] = (dec_item){b, hk, j, j1};
                n++;
                j = j1;
            } while (j < hi);
        }
    }
    if (first) first[d->B * Hkv] = (int64_t)n;
    return n;
}

/* Row r of group g = (b, hk): its ns splits' (m, l, O) at part (each split
 * R * (DvP + 2) floats, R the partials' rows a group) merged in split order
 * into out and lse */
static void dec_merge_row(const attn_sdpa_desc *d, const float *part, int64_t ns, int64_t R, int64_t DvP, int64_t g,
                          int64_t r, attn_view out, float *lse) {
    int64_t H = d->H, Sq = d->Sq, Dv = d->Dv, Hkv = attn_sem_hkv(d), G = H / Hkv;
    int64_t b = g / Hkv, hk = g % Hkv, h = hk * G + r / Sq, i = r % Sq;
    size_t stride = (size_t)(R * (DvP + 2));
    float M = -INFINITY;
    for (int64_t it = 0; it < ns; it++) M = attn_max_nan(part[(size_t)it * stride + (size_t)r], M);
    float *o = out.data + b * out.stride_b + h * out.stride_h + i * out.stride_s;
    float L = 0.0f;
    for (int64_t c = 0; c < Dv; c++) o[c] = 0.0f;
    if (M == -INFINITY) { /* no visible key, or only -inf scores: zeros, lse -inf (or the sink) */
        if (lse) lse[(b * H + h) * Sq + i] = d->sinks ? d->sinks[h] : -INFINITY;
        return;
    }
    /* a sink is one more term of the denominator without a value (online.h) */
    float s2 = d->sinks ? d->sinks[h] * ATTN_LOG2E : -INFINITY;
    if (s2 > M) M = s2;
    for (int64_t it = 0; it < ns; it++) {
        const float *pm = part + (size_t)it * stride;
        if (pm[r] == -INFINITY || pm[R + r] == 0.0f) continue;
        float w = exp2f(pm[r] - M);
        L += pm[R + r] * w;
        const float *Oi = pm + 2 * R + r * DvP;
        for (int64_t c = 0; c < Dv; c++) o[c] += Oi[c] * w;
    }
    if (d->sinks) L += exp2f(s2 - M);
    float inv = 1.0f / L;
    for (int64_t c = 0; c < Dv; c++) o[c] *= inv;
    if (lse) lse[(b * H + h) * Sq + i] = (M + log2f(L)) * ATTN_LN2;
}

/* What the blocks of one decode call share. */
typedef struct dec_call {
    const attn_sdpa_desc *d;
    const attn_kernel_table *kt;
    const attn_kv_src *kv;
    int64_t R, DvP;
    float escale;
    attn_dtype qt, kt_k, kt_v, pt; /* the math mode's rounding of Q, of K, of V, of P (base/sem.h) */
    int conv_k, conv_v;            /* K's / V's blocks of rows converted to float32 first (dec_converts) */
    int iqk;                       /* Q K^T in integers: int8 query blocks against K's codes (qk_rows_q8) */
    int ipv;                       /* P V in integers: 16-bit P against V's integer codes (pv_rows_i16) */
    int bqk, bpv;                  /* fp8 K / fp8, bf16 V against the mode's bf16 q / P (qk_rows_bf, pv_rows_bf) */
    int gemm;                      /* the block products (R >= DEC_GEMM_ROWS) */
    int64_t LR;                    /* the partials' rows a group: R, or R rounded up to the kernels' gemm_mr */
    attn_dtype mt;                 /* the block products' operand type through oneDNN, Q8_0: the kernels' gemm */
    attn_mm_shape qk, pv;          /* oneDNN's two products (B read in place from the gathered block) */
} dec_call;

/* BF16 mode on float32 rows: nb rows of width n from X (ldx apart) rounded
 * to t into xb (nb x n), which the products then read */
static void dec_round_rows(const dec_call *c, const void *X, int64_t ldx, int64_t nb, int64_t n, attn_dtype t,
                           float *xb) {
    for (int64_t j = 0; j < nb; j++) {
        memcpy(xb + j * n, (const float *)X + j * ldx, (size_t)n * sizeof(float));
        c->kt->round_row(xb + j * n, n, t);
    }
}

/* The one-byte formats the kernels read as codes (base/storage.h params;
 * kernels.h): K's fp8 scale is folded into the packed queries (dec_pack_q);
 * an int8 K's dot products of codes become scores here, S = s_j S + z_j
 * sum(q) with key j's (scale, zero); a scaled V's P is scaled before P V,
 * P_rj s_j, and an int8 V's zero points add sum_j P_rj z_j to every column
 * (wr, after the products). par: key j0's pair, pld pairs from key to key
 * (0: one pair for all); the kernels take them adjacent (dec_pairs).
 * Another rounding of the same float32 products than the stored values'
 * (attn_st_load_row), as q8_0's block scales.
 *
 * May the block's int8 / int4 rows keep their folded products (K: scale
 * (q . codes) + zero sum(q); V: P scale times the codes, plus sum P zero),
 * or must they be converted to their values first, as the reference reads
 * them? The folded forms meet an infinity or a cancellation of huge terms
 * where the stored values' products may not (q = inf against code 0 gives
 * inf 0 = NaN, the value's q zero does not), so they stand only while every
 * query value is finite and no term can come near float's range: with A =
 * 255 |scale| + |zero| a row's bound on its values' terms, K needs D qmax A
 * and V nb 2^11 A (P <= 2^11, online.h) under 1e30: the fold rule.
 * qmax: the largest |q| of the group's rows (NaN fails). The kernels'
 * rowpar_scores / rowpar_p check the rule as they read the block's pairs;
 * where it fails, the block's K takes Q K^T again on its converted rows,
 * and its V the converted rows against P as the scores left it (rowpar_p
 * writes the scaled P apart). */

/* A shard's block of keys (local j0 .. at global positions from g0) as a
 * block of the global problem d: local key j is global j + ks (ks = g0 -
 * j0), so the rule (causal, window, chunks, ALiBi, lengths, the padding
 * mask) reads global positions (base/sem.h's block fields), and the dense
 * mask and bias, given over global keys, are read from column ks on. */
static const attn_sdpa_desc *dec_frame(const attn_sdpa_desc *d, int64_t ks, attn_sdpa_desc *e) {
    *e = *d;
    e->k_start = ks, e->Sk = d->Sk - ks, e->Sk_total = d->Sk;
    if (e->attn_mask) e->attn_mask += ks * e->attn_mask_strides[3];
    if (e->attn_bias) e->attn_bias += ks * e->attn_bias_strides[3];
    return e;
}

/* Rows of type t with R query rows a kv head converted to float32 a block
 * at a time (kv_rows) rather than read by the products: the formats the
 * products do not read (int4 and q4_0 keys; their values with Dv not a
 * multiple of 32), and fp8 and int8 values from DEC_GEMM_ROWS rows on
 * (which the rows' kernels reach with q8_0 or integer keys in a math mode
 * only, V of another format than K). Below that
 * the products read the codes, once per 4 rows: converted from 8 rows on, a
 * step took 1.1-1.6x as long (Zen 5, one thread: q4_0 at 8 rows 1.4x, fp8
 * and int8 under the float32 mode 1.5-1.6x, 1.16-1.4x at 16 and 24; int4
 * under it 1.12x at 8, 0.98-1.0x from 16; zen5/decode-conv-rows-ab); q4_0's
 * values at 128 and 256 rows 1.1x (zen5/decode-int-rows-ab). is_v: V's
 * rows, n values each. The block products convert every format. */
static int dec_converts(attn_dtype t, int64_t R, int is_v, int64_t n) {
    const attn_storage *s = attn_storage_of(t);
    if (!s->kernels) return !is_v || n % 32; /* int4, q4_0: P V reads them, Q K^T does not */
    return s->params != ATTN_ST_PLAIN && R >= DEC_GEMM_ROWS;
}

/* fp8 K under a mode: may the group's rows (largest |q| qmax, before K's
 * scale) go to qk_rows_bf, K's scale then multiplying the scores? Not where
 * the unscaled products could overflow (qmax D times the format's largest
 * value past 1e30; NaN): there the rows take the scale first, as the stored
 * values would (the same special values), and qk_rows_x multiplies them.
 * A bf16 K has no scale: always. */
static int dec_bqk_fits(const dec_call *c, float qmax) {
    attn_dtype tk = attn_kv_type(c->kv, 0);
    if (tk == ATTN_DTYPE_BF16) return c->bqk;
    float vmax = tk == ATTN_DTYPE_FP8_E4M3 ? 448.0f : 57344.0f;
    return c->bqk && qmax * (float)c->d->D * vmax <= 1e30f;
}

/* Does the block mask leave no pair of keys [j0, j0 + nb) to any query row of
 * kv head hk's group? (the block is then skipped: no load, no product) */
static int dec_flex_empty(const attn_sdpa_desc *d, int64_t b, int64_t hk, int64_t j0, int64_t nb) {
    if (!d->block_mask) return 0;
    int64_t G = d->H / attn_sem_hkv(d);
    for (int64_t h = hk * G; h < (hk + 1) * G; h++)
        if (attn_flex_tile_state(d, b, h, 0, d->Sq, j0, nb) != ATTN_FLEX_EMPTY) return 0;
    return 1;
}

/* Prefetch the (scale, zero) pairs of rows j .. j + n - 1 of (b, hk), K's
 * (is_v 0) or V's (1), where the storage keeps them (int8, int4: arrays
 * beside the codes, which the kernels' prefetches do not reach; the split's
 * loads stalled on them). Contiguous rows' pairs are adjacent, a caller's
 * page's pld pairs apart. dec_block prefetches the next block's K pairs
 * after its Q K^T and V's before its P V, not the two at its start: there
 * the 32 lines (128 keys) came beside the Q K^T kernel's own prefetches of
 * K's rows (Zen 4: int4 at one row 1.08x the GB/s on one thread and two,
 * 1.03x in 64-token pages, int8 1.00-1.04x; both arrays' after Q K^T
 * 1.04x / 0.96x; zen4/decode-par-prefetch-ab). */
static void dec_prefetch_par(const attn_kv_src *kv, int is_v, int64_t b, int64_t hk, int64_t j, int64_t n) {
    if (attn_storage_of(attn_kv_type(kv, is_v))->params != ATTN_ST_ROWPAR) return;
    float tmp[2];
    int64_t pld;
    const float *par = attn_kv_par_run(kv, is_v, b, hk, j, tmp, &pld);
    for (int64_t e = 0; e < n; e += pld == 1 ? 8 : 1) __builtin_prefetch(par + 2 * e * pld);
}

/* nb keys from j0, clipped at multiples of blk, and of a shard's
 * map_block (*d then becomes the shard's frame in *frame: the block's keys
 * as a block of the global problem) and of the block mask's kv_block (a
 * key block it leaves empty is never read) */
static inline int64_t dec_clip(int64_t nb, int64_t j0, int64_t blk) {
    return nb < blk - j0 % blk ? nb : blk - j0 % blk;
}
static int64_t dec_block_keys(const attn_kv_src *kv, int64_t j0, int64_t nb, int64_t blk, const attn_sdpa_desc **d,
                              attn_sdpa_desc *frame) {
    nb = dec_clip(nb, j0, blk);
    if (kv->map_len) {
        nb = dec_clip(nb, j0, kv->map_block);
        *d = dec_frame(*d, attn_kv_src_global(kv, j0) - j0, frame);
    }
    return (*d)->block_mask ? dec_clip(nb, j0, (*d)->block_mask->kv_block) : nb;
}

/* The block's nb (scale, zero) pairs of K (is_v 0) or V from key j0,
 * adjacent: where the cache holds them (contiguous rows' pairs), else
 * gathered into buf (a caller's page's, pld apart; fp8's one for all) */
static const float *dec_pairs(const attn_kv_src *kv, int is_v, int64_t b, int64_t hk, int64_t j0, int64_t nb,
                              float *buf) {
    float tmp[2];
    int64_t pld;
    const float *par = attn_kv_par_run(kv, is_v, b, hk, j0, tmp, &pld);
    if (pld == 1) return par;
    for (int64_t j = 0; j < nb; j++) buf[2 * j] = par[2 * j * pld], buf[2 * j + 1] = par[2 * j * pld + 1];
    return buf;
}

/* The block's nb rows of K (is_v 0) or V at src (ld apart) as their
 * float32 values in buf (D or Dv a row) */
static const float *dec_conv(const dec_call *c, int is_v, int64_t b, int64_t hk, int64_t j0, const void *src,
                             int64_t ld, int64_t nb, float *buf) {
    float tmp[2];
    int64_t pld;
    const float *par = attn_kv_par_run(c->kv, is_v, b, hk, j0, tmp, &pld);
    c->kt->kv_rows(src, ld, nb, is_v ? c->d->Dv : c->d->D, attn_kv_type(c->kv, is_v), par, pld, buf);
    return buf;
}

/* One block of item it from key j0 (to a multiple of DEC_NB, the page's end
 * or the item's end): S = Q K^T (Qg: the group's R packed query rows), the
 * modifiers and masks, the online softmax and O += P V into the item's
 * (m, l, O) at pm. Returns the keys taken. The kernels prefetch the rows of
 * key pf_j of kv head pf_hk (paged: the block that runs next) or, contiguous,
 * DEC_PF rows ahead in their own stream. */
static int64_t dec_block(const dec_call *c, const dec_item *it, const float *Qf, const void *Qq, const float *qs,
                         float qmax, float *S, float *pm, int64_t j0, int64_t pf_hk, int64_t pf_j, float *kvb) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    const attn_kv_src *kv = c->kv;
    int64_t b = it->b, hk = it->hk, R = c->R, DvP = c->DvP, D = d->D, Dv = d->Dv, Sq = d->Sq;
    int64_t G = d->H / attn_sem_hkv(d), skb = kv->map_len ? kv->map_len[b] : attn_sem_sk(d, b);
    attn_dtype kk = attn_kv_type(kv, 0), kvv = attn_kv_type(kv, 1); /* K's and V's storage */
    float *m = pm, *l = pm + R, *O = pm + 2 * R;
    int64_t runk, runv, ldk, ldv;
    const void *K = attn_kv_rows(kv, 0, b, hk, j0, &runk, &ldk);
    const void *V = attn_kv_rows(kv, 1, b, hk, j0, &runv, &ldv);
    /* blocks end at multiples of DEC_NB (and page ends): a paged cache whose
     * page size is a multiple of DEC_NB computes exactly what a contiguous one does */
    attn_sdpa_desc frame;
    int64_t nb = dec_block_keys(kv, j0, it->j1 - j0, DEC_NB, &d, &frame);
    nb = nb < runk ? nb : runk;
    nb = nb < runv ? nb : runv;
    if (dec_flex_empty(d, b, hk, j0, nb)) return nb;
    /* contiguous: each kernel prefetches its own stream DEC_PF rows ahead (V over q8_0 / q4_0: DEC_PF_VBLK; into the
     * next item's keys too: the same thread often runs it next; prefetches never
     * fault); paged: the block that runs next, through the page table (within the
     * sequence's keys, so every page looked up exists) */
    const void *pk = NULL, *pv = NULL;
    int64_t lpk = ldk, lpv = ldv, r2;
    if (!attn_kv_src_paged(kv)) {
        pk = (const char *)K + attn_storage_bytes(kk, DEC_PF * ldk);
        pv = (const char *)V + attn_storage_bytes(kvv, dec_pf_v(kvv) * ldv);
    } else if (pf_j < skb) {
        pk = attn_kv_rows(kv, 0, b, pf_hk, pf_j, &r2, &lpk);
        pv = attn_kv_rows(kv, 1, b, pf_hk, pf_j, &r2, &lpv);
    }
    /* the pairs' prefetch (dec_prefetch_par): contiguous, DEC_PF rows ahead; paged, the block that runs next */
    int paged = attn_kv_src_paged(kv), pp_on = !paged || pf_j < skb;
    int64_t pp_hk = paged ? pf_hk : hk, pp_j = paged ? pf_j : j0 + DEC_PF;
    /* an int8 / int4 K's and a scaled V's (scale, zero) pairs; NULL where the rows are converted (fp8 V in
     * pv_rows_bf: its one pair) */
    float tmp[2], kp[2 * DEC_NB], vp[2 * DEC_NB];
    const float *kpar =
        !c->conv_k && attn_storage_of(kk)->params == ATTN_ST_ROWPAR ? dec_pairs(kv, 0, b, hk, j0, nb, kp) : NULL;
    const float *vpar = !c->conv_v && attn_storage_of(kvv)->params != ATTN_ST_PLAIN
                            ? dec_pairs(kv, 1, b, hk, j0, c->bpv ? 1 : nb, vp)
                            : NULL;
    if (c->conv_k) /* converted a block at a time (dec_converts): the rows' values */
        K = dec_conv(c, 0, b, hk, j0, K, ldk, nb, kvb), ldk = D, pk = NULL, kk = ATTN_DTYPE_F32;
    if (c->conv_v)
        V = dec_conv(c, 1, b, hk, j0, V, ldv, nb, kvb + DEC_NB * D), ldv = Dv, pv = NULL, kvv = ATTN_DTYPE_F32;
    if (c->kt_k != ATTN_DTYPE_F32) { /* float32 rows rounded for the products (BF16 mode) */
        dec_round_rows(c, K, ldk, nb, D, c->kt_k, kvb);
        K = kvb, ldk = D, pk = NULL;
    }
    if (c->kt_v != ATTN_DTYPE_F32) {
        dec_round_rows(c, V, ldv, nb, Dv, c->kt_v, kvb + DEC_NB * D);
        V = kvb + DEC_NB * D, ldv = Dv, pv = NULL;
    }
    if (c->iqk) /* a math mode on an integer K: Qq holds int8 blocks (dec_pack_q) */
        kt->qk_rows_q8(Qq, R, D, K, ldk, nb, S, DEC_NB, pk, lpk, D, kk);
    else if (dec_bqk_fits(c, qmax)) { /* fp8 / bf16 K: Qq holds the rows as bf16, K's scale on the scores */
        attn_kv_par(kv, 0, b, hk, j0, tmp);
        kt->qk_rows_bf(Qq, D, R, D, K, ldk, nb, S, DEC_NB, tmp[0], pk, lpk, D, kk);
    } else if (kk != ATTN_DTYPE_F32)
        kt->qk_rows_x(Qf, R, D, K, ldk, nb, S, DEC_NB, pk, lpk, D, kk);
    else
        kt->qk_rows(Qf, R, D, K, ldk, nb, S, DEC_NB, pk, lpk, D);
    /* int8 / int4 codes: the rows' (scale, zero), the int8 codes' dot in integers taken with code - 128
     * (qk_rows_q8); where the fold rule fails, the block's keys as their values and Q K^T again */
    float koff = c->iqk && kk == ATTN_DTYPE_KV_INT8 ? 128.0f : 0.0f;
    if (kpar && !kt->rowpar_scores(kpar, nb, koff, 1e30f / ((float)D * qmax), R, qs, S, DEC_NB))
        kt->qk_rows(Qf, R, D, dec_conv(c, 0, b, hk, j0, K, ldk, nb, kvb), D, nb, S, DEC_NB, NULL, lpk, D);
    if (pp_on) dec_prefetch_par(kv, 0, b, pp_hk, pp_j, nb);
    attn_score_keys keys = {{b, attn_sem_sk(d, b), attn_sem_off(d, b)}, NULL, 0}; /* the padding mask key by key */
    for (int64_t r = 0; r < R; r++) {                                             /* row r: query i of head h */
        int64_t h = hk * G + r / Sq, i = r % Sq;
        float *s = S + r * DEC_NB;
        attn_score_tile(kt, d, &keys, h, s, DEC_NB, nb, 1, i, j0, NULL);
        attn_online_row(kt, s, nb, c->escale, &m[r], &l[r], O + r * DvP, DvP, c->pt);
    }
    if (pp_on) dec_prefetch_par(kv, 1, b, pp_hk, pp_j, nb);
    /* a scaled V (fp8 in pv_rows_bf: its scale there): P S's rows times the scales, the int8 zero points' share
     * wr (fp8: 0); where an int8 / int4 V's fold rule fails, its rows as their values against S (fp8's stands) */
    int vscaled = vpar && !c->bpv;
    float *P = vscaled ? S + R * DEC_NB : S, *wr = S + 2 * R * DEC_NB; /* R x DEC_NB, then R more floats */
    if (vscaled && !kt->rowpar_p(vpar, nb, 1e30f / (2048.0f * (float)nb), R, S, DEC_NB, P, wr) &&
        attn_storage_of(kvv)->params == ATTN_ST_ROWPAR) {
        V = dec_conv(c, 1, b, hk, j0, V, ldv, nb, kvb + DEC_NB * D), ldv = Dv, pv = NULL, kvv = ATTN_DTYPE_F32;
        P = S, vscaled = 0;
    }
    if (c->bpv)
        kt->pv_rows_bf(P, DEC_NB, R, V, ldv, nb, Dv, O, DvP, attn_sem_fp8(kvv) ? vpar[0] : 1.0f, pv, lpv, Dv, kvv);
    else if (kvv != ATTN_DTYPE_F32 && c->ipv) /* V's codes not converted: the mode's integer P V */
        kt->pv_rows_i16(P, DEC_NB, R, V, ldv, nb, Dv, O, DvP, pv, lpv, Dv, kvv);
    else if (kvv != ATTN_DTYPE_F32)
        kt->pv_rows_x(P, DEC_NB, R, V, ldv, nb, Dv, O, DvP, pv, lpv, Dv, kvv);
    else
        kt->pv_rows(P, DEC_NB, R, V, ldv, nb, Dv, O, DvP, pv, lpv, Dv);
    for (int64_t r = 0; vscaled && r < R; r++) /* int8 V: the zero points' share (fp8: 0) */
        if (wr[r] != 0.0f) kt->add_row(O + r * DvP, Dv, wr[r]);
    return nb;
}

/* One thread's blocks for the block products: the gathered K and V rows
 * (DEC_GB x D, DEC_GB x DvP: float32, or oneDNN's operand type), the
 * kernels' K^T panels (D x DEC_GB), S (LR x DEC_GB), P and the gs heads'
 * Q as oneDNN's operands (LR x DEC_GB, gs x LR x D), a row's values */
typedef struct dec_gbufs {
    char *K, *V, *P, *Q;
    float *KT, *S, *row;
} dec_gbufs;

static int dec_gbufs_init(dec_gbufs *g, const dec_call *c, int64_t gs) {
    int64_t D = c->d->D, GB = DEC_GB;
    memset(g, 0, sizeof *g);
    g->K = malloc((size_t)(GB * D) * 4), g->V = malloc((size_t)(GB * c->DvP) * 4);
    g->KT = malloc((size_t)(GB * D) * 4), g->S = malloc((size_t)(c->LR * GB) * 4);
    g->P = calloc((size_t)(c->LR * GB), 4), g->Q = malloc((size_t)(gs * c->LR * D) * 4);
    g->row = malloc((size_t)(D > c->d->Dv ? D : c->d->Dv) * 4);
    return g->K && g->V && g->KT && g->S && g->P && g->Q && g->row;
}

static void dec_gbufs_free(dec_gbufs *g) {
    free(g->K), free(g->V), free(g->KT), free(g->S), free(g->P), free(g->Q), free(g->row);
}

/* The block's n rows of K (is_v 0) or V (1) from key j0 (n <= DEC_GB), rows
 * np - n on zero, as the products' operands: each row's values (scales
 * applied), rounded to the mode's type t, stored as mt (oneDNN's) or float32
 * (Q8_0: the kernels'), w values a row (zeros past the row's own). Rows
 * DEC_GPF ahead are prefetched (up to key lim: paged rows are a page's
 * worth of kv heads apart, which the hardware's prefetchers do not follow). */
#define DEC_GPF 16
static void dec_prefetch_row(const dec_call *c, int is_v, int64_t b, int64_t hk, int64_t j) {
    int64_t run, ld, bytes = (int64_t)attn_storage_bytes(attn_kv_type(c->kv, is_v), is_v ? c->d->Dv : c->d->D);
    const char *p = attn_kv_rows(c->kv, is_v, b, hk, j, &run, &ld);
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o);
}

/* Row j of K (is_v 0) or V (1) of (b, hk) as its dim float32 values, as
 * attn_kv_load reads it: the formats the kernel table converts in vectors
 * (kv_rows: fp8, int8, int4, q4_0, bit for bit attn_st_load_row) through
 * it (MLA's 576-value fp8 latents read element by element ran 4x slower
 * than bf16's), the others through the storage's loads */
static void dec_load_row(const dec_call *c, int is_v, int64_t b, int64_t hk, int64_t j, int64_t dim, float *dst) {
    attn_dtype t = attn_kv_type(c->kv, is_v);
    const attn_storage *s = attn_storage_of(t);
    if (s->kernels && s->params == ATTN_ST_PLAIN) { /* f32, f16, bf16, q8_0: not kv_rows' */
        attn_kv_load(c->kv, is_v, b, hk, j, dst);
        return;
    }
    int64_t run, ld;
    float par[2];
    const void *src = attn_kv_rows(c->kv, is_v, b, hk, j, &run, &ld);
    attn_kv_par(c->kv, is_v, b, hk, j, par);
    c->kt->kv_rows(src, ld, 1, dim, t, par, 0, dst);
}

static void dec_gather(const dec_call *c, int is_v, int64_t b, int64_t hk, int64_t j0, int64_t n, int64_t np,
                       int64_t lim, int64_t w, char *dst, float *row) {
    int64_t dim = is_v ? c->d->Dv : c->d->D;
    attn_dtype t = is_v ? c->kt_v : c->kt_k, st = c->mt == ATTN_DTYPE_Q8_0 ? ATTN_DTYPE_F32 : c->mt;
    size_t rb = attn_storage_bytes(st, w), used = attn_storage_bytes(st, dim);
    for (int64_t j = 0; j < DEC_GPF && j0 + j < lim; j++) dec_prefetch_row(c, is_v, b, hk, j0 + j);
    for (int64_t j = 0; j < np; j++) {
        char *to = dst + (size_t)j * rb;
        if (j >= n) {
            memset(to, 0, rb);
            continue;
        }
        if (j0 + j + DEC_GPF < lim) dec_prefetch_row(c, is_v, b, hk, j0 + j + DEC_GPF);
        float *f = st == ATTN_DTYPE_F32 && t == ATTN_DTYPE_F32 ? (float *)(void *)to : row; /* loaded in place */
        dec_load_row(c, is_v, b, hk, j0 + j, dim, f);
        if (f != (float *)(void *)to) c->kt->store_row(f, dim, t, st, to); /* rounded to t, written as st */
        memset(to + used, 0, rb - used);
    }
}

/* The block products' block of item it from key j0 (to a multiple of
 * DEC_GB, the item's end, or a shard's map block): S = Q K^T for the
 * group's rows (Qg: float32 packed queries, LR rows; Qm: them as oneDNN's
 * operand), the score step and the online softmax per row, O += P V, into
 * the item's (m, l, O) at pm. Returns the keys taken. */
static int64_t dec_block_gemm(const dec_call *c, const dec_item *it, const float *Qg, const void *Qm, float *pm,
                              int64_t j0, dec_gbufs *gb, attn_status *err) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    const attn_kv_src *kv = c->kv;
    int64_t b = it->b, hk = it->hk, R = c->R, LR = c->LR, DvP = c->DvP, D = d->D, Sq = d->Sq, GB = DEC_GB;
    int64_t G = d->H / attn_sem_hkv(d), nb = it->j1 - j0;
    int mm = c->mt != ATTN_DTYPE_Q8_0;
    attn_sdpa_desc frame;
    nb = dec_block_keys(kv, j0, nb, GB, &d, &frame);
    if (dec_flex_empty(d, b, hk, j0, nb)) return nb;
    int64_t np = mm ? GB : attn_round_up(nb, 16); /* the products' columns: oneDNN's fixed shape, the kernels' panels */
    float *m = pm, *l = pm + LR, *O = pm + 2 * LR, *S = gb->S;
    dec_gather(c, 0, b, hk, j0, nb, np, it->j1, D, gb->K, gb->row);
    dec_gather(c, 1, b, hk, j0, nb, np, it->j1, DvP, gb->V, gb->row);
    if (mm) { /* S (LR x GB) = Q K^T: B(k, n) = K row n, column k */
        *err = attn_mm_exec(attn_mm_thread(), &c->qk, Qm, gb->K, S);
        if (*err) return nb;
    } else { /* K^T in 16-key panels (D x 16 each), the tile gemm's B */
        const float *Kf = (const float *)gb->K;
        for (int64_t p = 0; p < np; p += 16)
            for (int64_t cc = 0; cc < D; cc++)
                for (int64_t jj = 0; jj < 16; jj++) gb->KT[p * D + cc * 16 + jj] = Kf[(p + jj) * D + cc];
        for (int64_t p = 0; p < np; p += 16) attn_tile_gemm(kt, LR, 16, D, Qg, D, gb->KT + p * D, 16, S + p, GB, 0);
    }
    attn_score_keys keys = {{b, attn_sem_sk(d, b), attn_sem_off(d, b)}, NULL, 0}; /* the padding mask key by key */
    size_t prow = attn_storage_bytes(mm ? c->mt : ATTN_DTYPE_F32, GB);
    for (int64_t r = 0; r < R; r++) { /* row r: query i of head h */
        int64_t h = hk * G + r / Sq, i = r % Sq;
        float *s = S + r * GB;
        attn_score_tile(kt, d, &keys, h, s, GB, nb, 1, i, j0, NULL);
        if (mm) {
            char *pr = gb->P + (size_t)r * prow;
            attn_online_row_store(kt, s, nb, c->escale, &m[r], &l[r], O + r * DvP, DvP, c->pt, c->mt, pr);
            memset(pr + attn_storage_bytes(c->mt, nb), 0, prow - attn_storage_bytes(c->mt, nb)); /* padding keys */
        } else {
            attn_online_row(kt, s, nb, c->escale, &m[r], &l[r], O + r * DvP, DvP, c->pt);
            memset(s + nb, 0, (size_t)(np - nb) * sizeof(float));
        }
    }
    if (mm) /* O (LR x DvP) += P V: B(k, n) = V row k, column n */
        *err = attn_mm_exec(attn_mm_thread(), &c->pv, gb->P, gb->V, O);
    else /* the padding rows R .. LR of S are zeros (their queries are) */
        attn_tile_gemm(kt, LR, DvP, np, S, GB, (const float *)gb->V, DvP, O, DvP, 1);
    return nb;
}

/* The block products for this call where they pay (R >= DEC_GEMM_ROWS; not
 * where a mode's Q K^T is in integers: the rows' kernels): oneDNN's
 * products where the mode's operands are of one 16-bit type and oneDNN
 * takes them, else the kernels' tiles (float32 panels; DvP a multiple of
 * 16). Sets c->gemm, mt, LR, DvP. */
static void dec_gemm_plan(dec_call *c) {
    const attn_sdpa_desc *d = c->d;
    c->gemm = 0, c->mt = ATTN_DTYPE_Q8_0, c->LR = c->R;
    if (c->R < DEC_GEMM_ROWS || c->iqk) return;
    c->gemm = 1, c->conv_k = c->conv_v = 1; /* the rows' values: no fp8 scale folded into the queries */
    attn_dtype ot = c->qt != ATTN_DTYPE_F32 && c->qt == c->pt && c->kt_k == c->kt_v ? c->qt : ATTN_DTYPE_F32;
    attn_mm *m = ot != ATTN_DTYPE_F32 ? attn_mm_thread() : NULL;
    size_t none;
    if (m && attn_mm_type(ot) != ATTN_DTYPE_Q8_0) {
        c->mt = attn_mm_type(ot);
        c->qk = (attn_mm_shape){c->mt, c->R, DEC_GB, d->D, d->D, 1, 1, d->D, 0};
        c->pv = (attn_mm_shape){c->mt, c->R, c->DvP, DEC_GB, DEC_GB, 1, c->DvP, 1, 1};
        if (!attn_mm_prepare(m, &c->qk, &none) && !attn_mm_prepare(m, &c->pv, &none)) return;
        c->mt = ATTN_DTYPE_Q8_0; /* oneDNN cannot (or not on AMX): the kernels' tiles */
    }
    c->LR = attn_round_up(c->R, c->kt->gemm_mr), c->DvP = attn_round_up(d->Dv, 16);
}

/* The sum of a query row of n values in eight partial sums, value c in sum
 * c % 8 (the tail's in sum 0), added as attn_rowpar_sum8 adds them: the
 * loop vectorizes, where one sum in order was a chain of n dependent adds */
static float dec_row_sum(const float *x, int64_t n) {
    float w[8] = {0};
    int64_t c = 0;
    for (; c + 8 <= n; c += 8)
        for (int u = 0; u < 8; u++) w[u] += x[c + u];
    for (; c < n; c++) w[0] += x[c];
    return attn_rowpar_sum8(w);
}

/* The group's R query rows of (b, hk) into Qg (qmul folded in, and fp8 K's
 * scale ksc: after the rounding where the mode rounds; 16-bit queries
 * converted; rounded to qt, the math mode's Q operand type) and,
 * given Qq, quantized into q8_0 blocks there too (rows attn_q8_row_bytes(D)
 * apart: the int8 Q K^T's operand; kt->q8_row, which gives the mode's
 * rounded row as those blocks' values); each row's sum into qs, the largest
 * |q| of the rows into *qmax (from 0) */
static void dec_pack_q(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view q, int64_t b, int64_t hk,
                       int64_t R, float qmul, float ksc, attn_dtype qt, float *Qg, void *Qq, float *qs, float *qmax) {
    int64_t D = d->D, Sq = d->Sq, G = d->H / attn_sem_hkv(d);
    for (int64_t r = 0; r < R; r++) {
        float *row = Qg + r * D;
        const float *src = attn_row_f32(q, d->qkv_dtype, b, hk * G + r / Sq, r % Sq, D, row);
        /* fp8 K's scale ksc: folded in after a mode's rounding (the products
         * are rounded q times the stored values) */
        float m1 = qt == ATTN_DTYPE_F32 ? qmul * ksc : qmul;
        for (int64_t c = 0; c < D; c++) row[c] = m1 * src[c];
        float a = 0.0f;         /* the rows' largest |q|, NaN once any is (the fold rule) */
        int has_a = Qq != NULL; /* a is this row's (kt->q8_row) */
        if (Qq)                 /* the int8 blocks the integer Q K^T reads (qt Q8_0 or Q8_ROW, D a multiple of 32:
                                 * attn_sem_q_type); the mode's rounding of the row is those blocks' values */
            a = kt->q8_row(row, D, qt, (char *)Qq + (size_t)r * attn_q8_row_bytes(D));
        else
            attn_st_round(qt, row, D);
        if (qt != ATTN_DTYPE_F32 && ksc != 1.0f) {
            for (int64_t c = 0; c < D; c++) row[c] *= ksc;
            has_a = 0;
        }
        qs[r] = dec_row_sum(row, D); /* the row's sum, as rounded (an int8 / int4 K's zero points) */
        if (!has_a) attn_q8_amax(row, D, &a);
        *qmax = a != a || *qmax != *qmax ? NAN : a > *qmax ? a : *qmax;
    }
}

/* One thread's buffers: the gs heads' packed queries (float32, LR rows a
 * head, rows R .. LR zero; q8_0 blocks for a mode's int8 Q K^T; row sums),
 * a block's scores, converted rows, the block products' blocks, and which
 * heads' queries are packed */
typedef struct dec_tbufs {
    float *Qg, *S, *Qs, *kvb, *qmax; /* qmax: each head's largest |q| (dec_pack_q) */
    char *Qq;
    size_t qqr; /* a head's q8_0 query rows */
    dec_gbufs gb;
    int64_t packed_b, packed_hk;
} dec_tbufs;

static int dec_tbufs_init(dec_tbufs *t, const dec_call *c, int64_t gs) {
    int64_t R = c->R, D = c->d->D;
    memset(t, 0, sizeof *t);
    t->packed_b = t->packed_hk = -1;
    t->Qg = calloc((size_t)(gs * c->LR * D), sizeof(float));
    t->qqr = c->bqk ? (size_t)(R * D) * 2 : (size_t)R * attn_q8_row_bytes(D); /* bf16 rows, or int8 blocks */
    t->Qq = c->iqk || c->bqk ? malloc((size_t)gs * t->qqr) : NULL;
    t->S = malloc((size_t)(R * (2 * DEC_NB + 1)) * sizeof(float)), t->Qs = malloc((size_t)(gs * R) * sizeof(float));
    t->qmax = malloc((size_t)gs * sizeof(float));
    /* rounded or converted rows; int8 / int4 rows are converted where their folded products may not stand */
    int kvbuf = c->kt_k != ATTN_DTYPE_F32 || c->kt_v != ATTN_DTYPE_F32 || c->conv_k || c->conv_v ||
                attn_storage_of(attn_kv_type(c->kv, 0))->params == ATTN_ST_ROWPAR ||
                attn_storage_of(attn_kv_type(c->kv, 1))->params == ATTN_ST_ROWPAR;
    t->kvb = kvbuf ? malloc((size_t)(DEC_NB * (D + c->d->Dv)) * sizeof(float)) : NULL;
    int gok = !c->gemm || dec_gbufs_init(&t->gb, c, gs);
    return t->Qg && t->S && t->Qs && t->qmax && (!kvbuf || t->kvb) && (!(c->iqk || c->bqk) || t->Qq) && gok;
}

static void dec_tbufs_free(dec_tbufs *t, const dec_call *c) {
    free(t->Qg), free(t->Qq), free(t->S), free(t->Qs), free(t->kvb), free(t->qmax);
    if (c->gemm) dec_gbufs_free(&t->gb);
}

/* The group of items grp (the gs kv heads of one (b, split), in address
 * order for pages): its heads' queries packed when the group moves to other
 * heads, its partials reset, its blocks run (each item computes exactly
 * what it computes alone) */
static attn_status dec_group(const dec_call *c, attn_view q, float qmul, const dec_item *items, const size_t *grp,
                             int64_t gs, float *part, size_t pitem, dec_tbufs *t) {
    const attn_sdpa_desc *d = c->d;
    const attn_kv_src *kv = c->kv;
    const dec_item *it0 = &items[grp[0]];
    int64_t R = c->R, LR = c->LR, D = d->D, DvP = c->DvP;
    attn_dtype qm = c->mt == ATTN_DTYPE_Q8_0 ? ATTN_DTYPE_F32 : c->mt; /* the block products' query operand */
    attn_status err = ATTN_OK;
    if (it0->b != t->packed_b || it0->hk != t->packed_hk) { /* the group's rows r = g * Sq + i */
        for (int64_t h = 0; h < gs; h++) {
            float par[2] = {1.0f, 0.0f}; /* fp8 K: the head's scale, folded into its queries */
            if (attn_storage_of(attn_kv_type(kv, 0))->params == ATTN_ST_SCALED && !c->conv_k)
                attn_kv_par(kv, 0, it0->b, it0->hk + h, 0, par);
            t->qmax[h] = 0.0f;
            dec_pack_q(c->kt, d, q, it0->b, it0->hk + h, R, qmul, c->bqk ? 1.0f : par[0], c->qt, t->Qg + h * LR * D,
                       c->iqk ? t->Qq + (size_t)h * t->qqr : NULL, t->Qs + h * R, &t->qmax[h]);
            float *qg = t->Qg + h * LR * D;
            if (dec_bqk_fits(c, t->qmax[h])) /* the rounded rows as bf16 (K's scale on the scores) */
                c->kt->store_row(qg, R * D, ATTN_DTYPE_F32, ATTN_DTYPE_BF16, t->Qq + h * t->qqr);
            else if (c->bqk && par[0] != 1.0f) /* the float32 products, K's scale folded as dec_pack_q folds it */
                for (int64_t e = 0; e < R * D; e++) qg[e] *= par[0];
            if (c->gemm && c->mt != ATTN_DTYPE_Q8_0) /* the queries as oneDNN's operand */
                c->kt->store_row(t->Qg + h * LR * D, LR * D, ATTN_DTYPE_F32, c->mt,
                                 t->gb.Q + attn_storage_bytes(c->mt, h * LR * D));
        }
        t->packed_b = it0->b, t->packed_hk = it0->hk;
    }
    for (int64_t h = 0; h < gs; h++) {
        float *pm = part + grp[h] * pitem; /* m[LR], l[LR], O[LR x DvP] */
        for (int64_t r = 0; r < LR; r++) pm[r] = -INFINITY, pm[LR + r] = 0.0f;
        memset(pm + 2 * LR, 0, (size_t)(LR * DvP) * sizeof(float));
    }
    for (int64_t j0 = it0->j0; j0 < it0->j1 && !err;) { /* the group's items share their keys and blocks */
        int64_t nb = 0;
        for (int64_t h = 0; h < gs && !err; h++) {
            float *pm = part + grp[h] * pitem;
            if (c->gemm) {
                nb = dec_block_gemm(c, &items[grp[h]], t->Qg + h * LR * D, t->gb.Q + attn_storage_bytes(qm, h * LR * D),
                                    pm, j0, &t->gb, &err);
                continue;
            }
            /* prefetch the next head's block, or the next block */
            int64_t pf_hk = it0->hk + (h + 1) % gs, pf_j = h + 1 < gs ? j0 : j0 + nb;
            nb = dec_block(c, &items[grp[h]], t->Qg + h * LR * D, t->Qq ? t->Qq + (size_t)h * t->qqr : NULL,
                           t->Qs + h * R, t->qmax[h], t->S, pm, j0, pf_hk, pf_j, t->kvb);
        }
        j0 += nb;
    }
    return err;
}

attn_status attn_decode_forward(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out,
                                float *lse) {
    attn_status ks = attn_kernel_status(); /* ATTN_ISA asks for kernels this CPU cannot run */
    if (ks) return ks;
    int64_t B = d->B, H = d->H, Sq = d->Sq, Dv = d->Dv, Hkv = attn_sem_hkv(d), G = H / Hkv;
    if (B * H * Sq == 0) return ATTN_OK;
    if (d->dropout) return ATTN_E_UNSUPPORTED;
    /* base 2: see score.h */
    dec_call c = {.d = d,
                  .kt = attn_kernels(),
                  .kv = kv,
                  .R = G * Sq,
                  .DvP = attn_round_up(Dv, 8),
                  .escale = attn_score_escale(d),
                  .qt = attn_sem_q_type(d, attn_kv_type(kv, 0)),
                  .kt_k = attn_sem_kv_type(d, attn_kv_type(kv, 0)),
                  .kt_v = attn_sem_kv_type(d, attn_kv_type(kv, 1)),
                  .pt = attn_sem_p_type(d, attn_kv_type(kv, 1)),
                  .conv_k = dec_converts(attn_kv_type(kv, 0), G * Sq, 0, d->D),
                  .conv_v = dec_converts(attn_kv_type(kv, 1), G * Sq, 1, Dv)};
    /* Q K^T in integers wherever the mode quantizes q, at any R: the rows'
     * kernels then run rather than the block products, which would take K's
     * values as float32 (Zen 5, one thread, D 128, one kv head: at 32 rows
     * the step 0.39x the block products' time over int8 and int4, 0.57x over
     * q4_0; at 128 rows 0.63x, 0.63x, 0.92x; at 256 int8 0.69x, q4_0 1.0x;
     * two threads at 32 rows 0.25x / 0.34x: zen5/decode-int-rows-ab).
     * Zen 3, the kernel alone on 64 keys in L1, D = 128: int8 keys 8.7-9.5 ns
     * a key at R = 1 against 15-26 for the float32 products on their codes,
     * 16-22 against 18-21 at R = 4 (AVX2 has no wider int8 dot; VNNI's
     * VPDPBUSD does a (row, key, block) in one instruction) */
    c.iqk = attn_sem_q_int8(c.qt);
    if (c.iqk) c.conv_k = 0; /* the integer Q K^T reads K's codes */
    /* P V in integers likewise (Zen 3, decode at R = 4 over int8: the float32
     * FMAs on converted codes and VPMADDWD share two ports; VPMADDWD takes two
     * keys a product) */
    c.ipv = attn_sem_p_int16(d, attn_kv_type(kv, 1)) && (c.R < DEC_GEMM_ROWS || c.iqk); /* the rows' kernels */
    if (c.ipv) c.conv_v = 0;
    /* fp8 and bf16 under a mode (q and P bf16): two products an instruction
     * on the values as bf16, where the table has them (kernels.h qk_rows_bf;
     * a bf16 K's Q K^T where the table says it beats the float32 products;
     * a bf16 cache's from DEC_BF16_ROWS rows) */
    attn_dtype tk = attn_kv_type(kv, 0), tv = attn_kv_type(kv, 1);
    c.bqk = c.kt->qk_rows_bf && (c.kt->qk_bf_types >> tk & 1u) && c.qt == ATTN_DTYPE_BF16 && c.R < DEC_GEMM_ROWS &&
            (tk != ATTN_DTYPE_BF16 || c.R >= DEC_BF16_ROWS);
    c.bpv = c.kt->pv_rows_bf && (attn_sem_fp8(tv) || (tv == ATTN_DTYPE_BF16 && c.R >= DEC_BF16_ROWS)) &&
            c.pt == ATTN_DTYPE_BF16 && c.R < DEC_GEMM_ROWS;
    if (c.bqk) c.conv_k = 0;
    if (c.bpv) c.conv_v = 0;
    dec_gemm_plan(&c);
    int64_t R = c.R, LR = c.LR, DvP = c.DvP;
    size_t nitems = dec_items(d, kv, NULL, NULL); /* every (b, hk) key range cut into splits */
    size_t npart;
    if (attn_mul3_size(nitems, (size_t)LR, (size_t)(DvP + 2), &npart)) return ATTN_E_OVERFLOW;
    /* A paged cache holds a page's rows head after head (kv_src.h): its items run
     * in groups of the Hkv heads of one (b, split), block by block, so that the
     * reads walk each page's heads in address order (one head's pages, Hkv heads
     * apart, cost 15% of the bandwidth at 64-token pages; Hkv = 1 did not). The
     * order of the work only: each item computes exactly what it computes alone. */
    int64_t gs = attn_kv_src_paged(kv) ? Hkv : 1;
    dec_item *items = malloc(nitems * sizeof *items);
    size_t *order = malloc(nitems * sizeof *order); /* items in groups of gs */
    float *part = malloc(npart * sizeof(float));    /* per item and row: m, l, O[DvP] */
    int64_t *first = malloc((size_t)(B * Hkv + 1) * sizeof *first);
    if (!items || !order || !part || !first) {
        free(items), free(order), free(part), free(first);
        return ATTN_E_NOMEM;
    }
    size_t n = dec_items(d, kv, items, first), no = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = b * Hkv; g < (b + 1) * Hkv; g += gs)
            for (int64_t s = 0; s < first[g + 1] - first[g]; s++)
                for (int64_t t = 0; t < gs; t++) order[no++] = (size_t)(first[g + t] + s);
    float qmul = attn_score_q_multiplier(d);
    size_t pitem = (size_t)(LR * (DvP + 2)); /* an item's partials */
    attn_status st = ATTN_OK;
#pragma omp parallel if (attn_par_worth(d, 1.0))
    {
        dec_tbufs t;
        attn_status err = dec_tbufs_init(&t, &c, gs) ? ATTN_OK : ATTN_E_NOMEM;
        /* static: each thread streams one contiguous run of groups (keys of one head,
         * or of a page's heads, in order), so its prefetches into the next group serve
         * itself; dynamic scheduling interleaved the threads' items: 2 threads
         * 1.15-1.33x slower */
#pragma omp for schedule(static)
        for (size_t gi = 0; gi < n / (size_t)gs; gi++)
            if (!err) err = dec_group(&c, q, qmul, items, order + gi * (size_t)gs, gs, part, pitem, &t);
        if (err) {
#pragma omp atomic write
            st = err;
        }
        dec_tbufs_free(&t, &c);
#pragma omp barrier
        /* merge the splits of each (b, hk) in split order */
#pragma omp for schedule(static)
        for (int64_t g = 0; g < B * Hkv; g++) {
            if (st) continue;
            for (int64_t r = 0; r < R; r++)
                dec_merge_row(d, part + (size_t)first[g] * pitem, first[g + 1] - first[g], LR, DvP, g, r, out, lse);
        }
    }
    free(items), free(order), free(part), free(first);
    return st;
}
