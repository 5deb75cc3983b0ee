/* libattn_mpi: ring attention (context parallel) over MPI.
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

#ifdef __cplusplus
}
#endif

#endif
