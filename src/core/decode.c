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
 * packed or copied. Dropout is not supported here (inference). */
#include "../kernels/kernels.h"
#include "internal.h"
#include "online.h"
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define DEC_NB 64      /* keys per block (S is R x DEC_NB) */
#define DEC_SPLIT 1024 /* keys per split (a multiple of DEC_NB) */
#define DEC_PF 128     /* rows of software prefetch distance */

typedef struct dec_item {
    int64_t b, hk, j0, j1; /* keys [j0, j1) */
} dec_item;

/* The items (when items is not NULL: first[g] the first of (b, hk) = g,
 * first[B * Hkv] their count); returns the count. Splits depend only on the
 * sequence's key range. */
static size_t dec_items(const attn_sdpa_desc *d, dec_item *items, int64_t *first) {
    int64_t Hkv = attn_sem_hkv(d);
    size_t n = 0;
    for (int64_t b = 0; b < d->B; b++) {
        int64_t skb = attn_sem_sk(d, b), lo, hi;
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
 * R * (DvP + 2) floats) merged in split order into out and lse */
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

attn_status attn_decode_forward(const attn_sdpa_desc *d, attn_view q, const attn_kv_src *kv, attn_view out,
                                float *lse) {
    attn_status ks = attn_kernel_status(); /* ATTN_ISA asks for kernels this CPU cannot run */
    if (ks) return ks;
    const attn_kernel_table *kt = attn_kernels();
    int64_t B = d->B, H = d->H, Sq = d->Sq, D = d->D, Dv = d->Dv, Hkv = attn_sem_hkv(d), G = H / Hkv;
    int64_t R = G * Sq, DvP = attn_round_up(Dv, 8);
    if (B * H * Sq == 0) return ATTN_OK;
    if (d->dropout) return ATTN_E_UNSUPPORTED;
    size_t nitems = dec_items(d, NULL, NULL); /* every (b, hk) key range cut into splits */
    size_t npart;
    if (attn_mul3_size(nitems, (size_t)R, (size_t)(DvP + 2), &npart)) return ATTN_E_OVERFLOW;
    dec_item *items = malloc(nitems * sizeof *items);
    float *part = malloc(npart * sizeof(float)); /* per item and row: m, l, O[DvP] */
    int64_t *first = malloc((size_t)(B * Hkv + 1) * sizeof *first);
    if (!items || !part || !first) {
        free(items), free(part), free(first);
        return ATTN_E_NOMEM;
    }
    size_t n = dec_items(d, items, first);
    /* base 2: see score.h */
    float qmul = attn_score_q_multiplier(d), escale = attn_score_escale(d);
    attn_dtype kind = kv->dtype;
    int h16 = kind != ATTN_DTYPE_F32; /* h16: any reduced-precision rows */
    attn_status st = ATTN_OK;
#pragma omp parallel
    {
        float *Qg = malloc((size_t)(R * D) * sizeof(float));
        float *S = malloc((size_t)(R * DEC_NB) * sizeof(float));
        int ok = Qg && S;
        if (!ok) {
#pragma omp atomic write
            st = ATTN_E_NOMEM;
        }
        int64_t packed_b = -1, packed_hk = -1;
        /* static: each thread streams one contiguous run of items (keys of one head
         * in order), so its prefetches into the next item serve itself; dynamic
         * scheduling interleaved the threads' items: 2 threads 1.15-1.33x slower */
#pragma omp for schedule(static)
        for (size_t it = 0; it < n; it++) {
            if (!ok) continue;
            int64_t b = items[it].b, hk = items[it].hk;
            int64_t skb = attn_sem_sk(d, b), off = attn_sem_off(d, b);
            if (b != packed_b || hk != packed_hk) { /* the group's rows r = g * Sq + i, qmul folded in */
                for (int64_t r = 0; r < R; r++) {
                    float *row = Qg + r * D; /* 16-bit queries are converted in place */
                    const float *src = attn_row_f32(q, d->qkv_dtype, b, hk * G + r / Sq, r % Sq, D, row);
                    for (int64_t c = 0; c < D; c++) row[c] = qmul * src[c];
                }
                packed_b = b, packed_hk = hk;
            }
            float *pm = part + it * (size_t)(R * (DvP + 2)); /* m[R], l[R], O[R x DvP] */
            float *m = pm, *l = pm + R, *O = pm + 2 * R;
            for (int64_t r = 0; r < R; r++) m[r] = -INFINITY, l[r] = 0.0f;
            memset(O, 0, (size_t)(R * DvP) * sizeof(float));
            for (int64_t j0 = items[it].j0; j0 < items[it].j1;) {
                int64_t runk, runv, ldk, ldv;
                const void *K = attn_kv_rows(kv, 0, b, hk, j0, &runk, &ldk);
                const void *V = attn_kv_rows(kv, 1, b, hk, j0, &runv, &ldv);
                /* blocks end at multiples of DEC_NB (and page ends): a paged cache whose
                 * page size is a multiple of DEC_NB computes exactly what a contiguous one does */
                int64_t nb = items[it].j1 - j0;
                nb = nb < DEC_NB - j0 % DEC_NB ? nb : DEC_NB - j0 % DEC_NB;
                nb = nb < runk ? nb : runk;
                nb = nb < runv ? nb : runv;
                /* each kernel prefetches its own stream: the rows of key j0 + DEC_PF on
                 * (through the page table when paged, into the next item's keys too: the
                 * same thread often runs it next; within the sequence's keys, so every
                 * page looked up exists; prefetches never fault) */
                const void *pk = NULL, *pv = NULL;
                int64_t lpk = ldk, lpv = ldv, r2;
                if (j0 + DEC_PF < skb || !kv->table) {
                    int64_t jp = kv->table ? j0 + DEC_PF : j0;
                    pk = attn_kv_rows(kv, 0, b, hk, jp, &r2, &lpk);
                    pv = attn_kv_rows(kv, 1, b, hk, jp, &r2, &lpv);
                    if (!kv->table)
                        pk = (const char *)pk + attn_storage_bytes(kind, DEC_PF * ldk),
                        pv = (const char *)pv + attn_storage_bytes(kind, DEC_PF * ldv);
                }
                if (h16)
                    kt->qk_rows_x(Qg, R, D, K, ldk, nb, S, DEC_NB, pk, lpk, D, kind);
                else
                    kt->qk_rows(Qg, R, D, K, ldk, nb, S, DEC_NB, pk, lpk, D);
                attn_score_keys keys = {{b, skb, off}, NULL, 0}; /* the padding mask key by key */
                for (int64_t r = 0; r < R; r++) {                /* row r: query i of head h */
                    int64_t h = hk * G + r / Sq, i = r % Sq;
                    float *s = S + r * DEC_NB;
                    attn_score_tile(kt, d, &keys, h, s, DEC_NB, nb, 1, i, j0, NULL);
                    attn_online_row(kt, s, nb, escale, &m[r], &l[r], O + r * DvP, DvP);
                }
                if (h16)
                    kt->pv_rows_x(S, DEC_NB, R, V, ldv, nb, Dv, O, DvP, pv, lpv, Dv, kind);
                else
                    kt->pv_rows(S, DEC_NB, R, V, ldv, nb, Dv, O, DvP, pv, lpv, Dv);
                j0 += nb;
            }
        }
        free(Qg), free(S);
        /* merge the splits of each (b, hk) in split order */
#pragma omp for schedule(static)
        for (int64_t g = 0; g < B * Hkv; g++) {
            if (st) continue;
            for (int64_t r = 0; r < R; r++)
                dec_merge_row(d, part + (size_t)first[g] * (size_t)(R * (DvP + 2)), first[g + 1] - first[g], R, DvP, g,
                              r, out, lse);
        }
    }
    free(items), free(part), free(first);
    return st;
}
