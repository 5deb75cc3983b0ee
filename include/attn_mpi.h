/* libattn_mpi: ring attention (context parallel) and a sharded KV cache
 * (exact distributed decode) over MPI.
 *
 * A sequence too long for one machine is split across the ranks of a
 * communicator: every rank holds a shard of the query rows and a shard of
 * the keys/values; K/V shards travel around the ring while each rank
 * computes its rows' attention to the block it holds, and the partial
 * results merge by log-sum-exp in a fixed order (results do not depend on
 * timing). Built only when MPI is found; the core library (attn.h) does not
 * depend on it. docs/RING.md. */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include "attn.h"

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a length-S axis is split over n ranks.
 *   CONTIGUOUS: rank r holds chunk r of n;
 *   ZIGZAG:     rank r holds chunks r and 2n-1-r of 2n (in that order): with
 *               causal attention every rank then has the same work.
 * Chunk c of m covers rows [c*S/m, (c+1)*S/m) (integer division), so S need
 * not be divisible by the ranks. */
typedef enum attn_ring_layout { ATTN_RING_CONTIGUOUS = 0, ATTN_RING_ZIGZAG = 1 } attn_ring_layout;

/* The rows rank r of n holds: up to two pieces [start[i], start[i] + len[i]),
 * in this order (len[1] = 0 for CONTIGUOUS). Returns the total, or -1 for
 * bad arguments. */
ATTN_API int64_t attn_ring_shard(int64_t S, int n, int r, attn_ring_layout layout, int64_t start[2], int64_t len[2]);

/* Where the time of one call went, on this rank. */
typedef struct attn_ring_timing {
    double compute_s; /* block kernels and merges */
    double wait_s;    /* blocked waiting for messages */
    double total_s;   /* the whole call */
    int steps;        /* ring steps (passes x ranks) */
    int64_t bytes_sent;
} attn_ring_timing;

/* Forward, collective over comm. d describes the whole problem: global B, H,
 * Hkv, Sq, Sk, D, Dv, scale, causal alignment, window, softcap; key_mask
 * (B, Sk), seqlens_k and alibi_slopes are global and the same on every rank;
 * dropout is refused. q and out (B, H, Sq_local, .) hold this rank's query
 * rows and k, v (B, Hkv, Sk_local, .) its keys, each in shard order (the
 * pieces of attn_ring_shard one after the other); lse (B, H, Sq_local) is
 * optional. q, k, v may be 16-bit (d->qkv_dtype). timing may be NULL. Every
 * rank returns the same status (errors are agreed before returning). */
ATTN_API attn_status attn_ring_forward(MPI_Comm comm, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q,
                                       attn_view k, attn_view v, attn_view out, float *lse, attn_ring_timing *timing);

/* Backward, collective: dq (B, H, Sq_local, D), dk, dv (B, Hkv, Sk_local, .)
 * of this rank's rows, WRITTEN. Two rings: the first folds every row's
 * softmax statistics over all key blocks (attn_sdpa_block_stats), the second
 * carries K, V and their dK, dV accumulators around the ring and home. No
 * rank holds more than two K/V shards at a time. */
ATTN_API attn_status attn_ring_backward(MPI_Comm comm, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q,
                                        attn_view k, attn_view v, attn_view dout, attn_view dq, attn_view dk,
                                        attn_view dv, attn_ring_timing *timing);

/* ------------------------------------------------------------------------ */
/* A KV cache sharded over the ranks (inference beyond one machine;         */
/* docs/RING.md "Sharded KV cache")                                          */
/* ------------------------------------------------------------------------ */

/* Which rank holds global position g of a sequence:
 *   RANGES:      rank g / C (C = the block): rank r holds [r C, (r + 1) C);
 *   ROUND_ROBIN: rank (g / P) % n (P = the block): pages of P tokens dealt
 *                in turn, so that appends spread over the ranks. */
typedef enum attn_shard_policy { ATTN_SHARD_RANGES = 0, ATTN_SHARD_ROUND_ROBIN = 1 } attn_shard_policy;

typedef struct attn_kv_shard attn_kv_shard;

/* Collective. cfg describes the whole cache: batch, kv_heads, capacity
 * (each sequence's tokens over all ranks), head sizes, storage types and
 * fp8 scales as attn_kv_cache_config; page_size / num_pages are each rank's
 * local cache's. block: RANGES, the tokens of a rank's range (0:
 * ceil(capacity / n); n block >= capacity); ROUND_ROBIN, the page (0: 64).
 * Every rank gets the same status (the same configuration everywhere, or
 * ATTN_E_INVALID on all). */
ATTN_API attn_status attn_kv_shard_create(MPI_Comm comm, const attn_kv_cache_config *cfg, attn_shard_policy policy,
                                          int64_t block, attn_kv_shard **out);
ATTN_API void attn_kv_shard_free(attn_kv_shard *s);
/* sequence b's global length (every rank knows it); -1 for a bad b */
ATTN_API int64_t attn_kv_shard_len(const attn_kv_shard *s, int64_t b);
/* the rank holding global position g */
ATTN_API int attn_kv_shard_owner(const attn_kv_shard *s, int64_t g);
/* this rank's cache (its part of every sequence) */
ATTN_API const attn_kv_cache *attn_kv_shard_local(const attn_kv_shard *s);
/* where this rank's local keys sit in the sequences (for
 * attn_kv_cache_attend_at on attn_kv_shard_local: this rank's share alone);
 * global_len points into s (valid until the next append) */
ATTN_API attn_kv_positions attn_kv_shard_positions(const attn_kv_shard *s);

/* Collective append of n[b] new tokens to every sequence b: every rank
 * passes the same float32 rows k (B, Hkv, n_max, D), v (.., Dv) (the new
 * tokens' keys and values, computed on every rank or broadcast); each rank
 * keeps the rows whose positions it holds. All or nothing on every rank:
 * past the capacity ATTN_E_CONTEXT, a rank out of pages ATTN_E_NOMEM (the
 * others undo theirs), different n on different ranks ATTN_E_INVALID. */
ATTN_API attn_status attn_kv_shard_append(attn_kv_shard *s, const int64_t *n, attn_view k, attn_view v);

/* Collective: sequence dst becomes a copy of sequence src on every rank
 * (attn_kv_cache_fork on each rank's cache: a paged local cache shares the
 * pages, copy-on-write); the same status everywhere (indices that differ
 * between ranks: ATTN_E_INVALID). */
ATTN_API attn_status attn_kv_shard_fork(attn_kv_shard *s, int64_t src, int64_t dst);

/* Collective exact decode (tree attention over the shards): every rank
 * passes the same q (B, H, Sq, D), Sq 1 .. 16, and d describing the whole
 * sequences as attn_kv_cache_attend does (d->Sk 0, d->seqlens_k NULL;
 * every option of the single-machine decode: GQA, causal alignments,
 * windows, softcap, ALiBi, chunks, sinks, a key_mask (B, Sk) and dense
 * masks / biases over global key positions, Sk the longest global length,
 * the math modes). Each rank attends its shard (attn_kv_cache_attend_at),
 * one all-gather brings every rank's (out, lse), and every rank merges them
 * in rank order (attn_merge_states, then the sinks): out (B, H, Sq, Dv) and
 * lse (B, H, Sq, or NULL) are the same bits on every rank and on every run,
 * equal within float32 rounding to one process decoding the whole cache.
 * The messages' size does not grow with the context. The same status on
 * every rank (a problem that differs between ranks: ATTN_E_INVALID).
 * timing (may be NULL): compute_s (the shard's attention and the merge),
 * wait_s (the collectives), bytes_sent. */
ATTN_API attn_status attn_shard_decode(attn_kv_shard *s, const attn_sdpa_desc *d, attn_view q, attn_view out,
                                       float *lse, attn_ring_timing *timing);

/* Collective prefill of empty sequences with one prompt each, longer than
 * one machine: ring attention (attn_ring_forward, the same arguments: d the
 * whole prompt, Sq = Sk = its length; q, k, v float32 this rank's rows in
 * the layout's shard order; out, lse its rows' results), then every K/V
 * row moves to the rank the policy names (one all-to-all; no rank holds
 * more than its ring shard and its cache shard) and is appended there in
 * position order. Every sequence must be empty (else ATTN_E_INVALID on
 * every rank); all or nothing. */
ATTN_API attn_status attn_shard_prefill(attn_kv_shard *s, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q,
                                        attn_view k, attn_view v, attn_view out, float *lse, attn_ring_timing *timing);

#ifdef __cplusplus
}
#endif

#endif
