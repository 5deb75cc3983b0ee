/* The CLI's ring attention (tools/attn/ring.c), present when built with
 * MPI (ATTN_HAVE_MPI). */
#ifndef ATTN_TOOL_CLI_RING_H
#define ATTN_TOOL_CLI_RING_H

#include "attn.h"

/* MPI_Init unless already initialized; this rank and the number of ranks.
 * 0 if MPI cannot start. */
int cli_ring_begin(int *argc, char ***argv, int *rank, int *size);
/* 1 if every rank passes ok != 0 (collective: a rank that failed early
 * must still call it, so that no rank waits forever) */
int cli_ring_sync(int ok);
/* MPI_Finalize if cli_ring_begin started MPI */
void cli_ring_end(void);
/* The whole problem d on whole arrays present on every rank (es-byte q, k,
 * v): each rank runs the ring on its shard (layout: attn_ring_layout), and
 * out, lse (and, with dout, dq, dk, dv) are gathered whole on rank 0.
 * Collective; the same status on every rank. */
attn_status cli_ring_sdpa(const attn_sdpa_desc *d, int layout, int64_t es, const void *q, const void *k, const void *v,
                          float *out, float *lse, const float *dout, float *dq, float *dk, float *dv);

/* attn bench --ring: the ring on random shards of a (B, H, S, D) problem,
 * per-step compute, the K/V message time alone, the exposed wait, printed
 * by rank 0 (layout -1: zigzag when causal). Returns the exit code. */
int cli_ring_bench(int64_t B, int64_t H, int64_t Hkv, int64_t S, int64_t D, int causal, int layout, int backward,
                   double min_time, int json);

/* attn bench --decode --shard: the sharded KV cache (round-robin pages of
 * `page`) filled to n T tokens per sequence, one decode step timed (the
 * slowest rank; compute and collectives), next to every rank reading its
 * shard's bytes at once and, with single, rank 0 decoding the whole cache
 * alone; alternating rounds, printed by rank 0. Returns the exit code. */
int cli_shard_bench(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int dtype, int64_t page, int single,
                    double min_time, int json);

#endif
