/* The scalars of a problem every rank must agree on before a collective
 * call of libattn_mpi (ring.c, shard.c): compared over the ranks (their
 * minimum and maximum), a difference is ATTN_E_INVALID on every rank. */
#ifndef ATTN_MPI_FIELDS_H
#define ATTN_MPI_FIELDS_H

#include "attn.h"

#include <stdint.h>
#include <string.h>

#define ATTN_MPI_FIELDS 22

/* d's shapes and options as ATTN_MPI_FIELDS int64 values into f (pointers
 * as present or not: their contents are the caller's to keep equal) */
static inline void attn_mpi_fields(const attn_sdpa_desc *d, int64_t *f) {
    uint32_t cap;
    memcpy(&cap, &d->softcap, sizeof cap);
    int64_t g[ATTN_MPI_FIELDS] = {d->B,
                                  d->H,
                                  d->Hkv,
                                  d->Sq,
                                  d->Sk,
                                  d->D,
                                  d->Dv,
                                  (int64_t)d->causal,
                                  d->window,
                                  d->window_left,
                                  d->window_right,
                                  (int64_t)d->qkv_dtype,
                                  (int64_t)d->impl,
                                  (int64_t)d->math,
                                  d->key_mask != NULL,
                                  d->seqlens_k != NULL,
                                  d->alibi_slopes != NULL,
                                  d->attention_chunk,
                                  d->sinks != NULL,
                                  d->attn_mask != NULL,
                                  d->attn_bias != NULL,
                                  (int64_t)cap};
    memcpy(f, g, sizeof g);
}

#endif
