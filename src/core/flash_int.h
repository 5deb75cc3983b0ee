/* What the fused path's two files share (not installed): the query blocks,
 * the forward's call and per-thread tiles, the helpers both ways of doing
 * the products use, and the block-product provider's entry points.
 *   flash.c     the drivers (forward, backward), the kernels' products
 *   flash_mm.c  the products through oneDNN (kernels/mm.h): K, V (and the
 *               backward's other B operands) packed once into the
 *               primitive's layout, dense tiles, P and dS written in the
 *               product's type by the pass that computes them
 * The score step (score.h), the online softmax (online.h) and the output
 * are the same code on both. */
#ifndef ATTN_FLASH_INT_H
#define ATTN_FLASH_INT_H

#include "../kernels/kernels.h"
#include "../kernels/mm.h"
#include "internal.h"
#include "score.h"

#include <stdint.h>

/* Tile sizes of the kernels' products. Query rows: a multiple of 12 (gemm's
 * mr: 6 or 12). Keys: forward, a multiple of 16 (N of S = Q K^T); backward,
 * also a multiple of 12 (M of the transposed tiles), so 48k. */
#ifndef BR
#define BR 48 /* query rows per tile, forward and backward */
#endif
#ifndef BC_F
#define BC_F 256 /* keys per forward tile */
#endif
#ifndef BC_B
#define BC_B 96 /* keys per backward tile */
#endif

/* Tile sizes of the provider's forward (flash_mm.c): query blocks of MM_BR
 * rows against key blocks of MM_BC keys, each product one call on dense
 * tiles (S: MM_BR x MM_BC float32). K and V are packed per key block. */
#ifndef MM_BR
#define MM_BR 128
#endif
#ifndef MM_BC
#define MM_BC 256
#endif

/* The query blocks of a call, forward and backward alike: block blk is rows
 * [i0, i0 + rows), rows <= br. Ordinarily br rows from row 0 (start NULL).
 * With chunks or packed sequences, br rows from each segment's start
 * (attn_sem_segment_end: a block straddling two chunks computed the keys
 * of both), short segments packed into one block while they fit (their keys
 * are adjacent: apart they would cost as much). */
typedef struct qblocks {
    int64_t n, Sq, br, *start; /* start: n + 1 rows, or NULL */
} qblocks;

void attn_qb_at(const qblocks *qb, int64_t blk, int64_t *i0, int64_t *rows);
attn_status attn_qb_make(const attn_sdpa_desc *d, int64_t br, qblocks *qb);

/* the MKL dropout stream's constants of a call */
typedef struct mcg_consts {
    int on;
    uint32_t thr, row_step;
} mcg_consts;

/* What every forward block of one call shares. */
typedef struct fwd_call {
    const attn_sdpa_desc *d;
    const attn_kernel_table *kt;
    attn_view q, out;
    float *lse;
    int64_t SkP, DvP;
    float qmul, escale;
    mcg_consts mc;
    qblocks qb;
    attn_dtype qt, pt;     /* the math mode's rounding of Q and of P (base/sem.h) */
    attn_dtype mt;         /* the block products' operand type through oneDNN (kernels/mm.h), Q8_0: the kernels' */
    int64_t br, bc;        /* query rows a block, keys a tile: BR, BC_F (kernels) or MM_BR, MM_BC (oneDNN) */
    attn_mm_shape qk, pv;  /* oneDNN's two products, B packed */
    size_t kbytes, vbytes; /* a key block's packed K^T and V */
} fwd_call;

/* One thread's tiles. */
typedef struct fwd_bufs {
    float *Qp, *S, *O, *add, *m, *l;
    uint8_t *keep;
    int64_t last_b; /* the batch row whose key mask is in add */
    int any_add;
    void *Qm, *Pm;   /* oneDNN's operands: Q (br x D) and P (br x bc) of type mt */
    attn_mm *mm;     /* this thread's oneDNN primitives */
    attn_status err; /* oneDNN's failure, if any */
} fwd_bufs;

/* Row s of (b, h) of view t (element type dt) as float32 rounded to rt (a
 * math mode's operand type, base/sem.h; F32: as stored), in tmp (n floats)
 * when it must be converted or copied */
const float *attn_flash_row_operand(const attn_kernel_table *kt, attn_view t, attn_dtype dt, int64_t b, int64_t h,
                                    int64_t s, int64_t n, attn_dtype rt, float *tmp);

/* A forward block's start, both products' ways: rows [*i0, *i0 + *rows) of
 * query block blk, the batch row's key mask (kept while b stays), Q packed
 * and rounded into t->Qp (br x D), the statistics and O reset; the keys' rule */
attn_score_keys attn_fwd_begin(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, int64_t *i0,
                               int64_t *rows);
/* the rows' out and lse from the block's statistics and accumulator */
void attn_fwd_finish(const fwd_call *c, const fwd_bufs *t, int64_t b, int64_t h, int64_t i0, int64_t rows);

/* ---- the provider's forward (flash_mm.c) ---- */

/* Plan the call's products through oneDNN (c->mt set, c->d, c->DvP known):
 * the two shapes, the packed bytes of a key block; 0 (and c->mt = Q8_0: the
 * kernels' products) when oneDNN cannot take them here, or, under
 * ATTN_PRODUCTS=auto on an AMX host, would not run them on AMX */
int attn_fwd_mm_plan(fwd_call *c);
/* bytes of one kv head's packed K and V (every key block) */
size_t attn_fwd_mm_head_bytes(const fwd_call *c);
/* kv head (b, hk)'s K^T and V blocks packed at panel (tmp: bc x (D + DvP)
 * floats); ATTN_OK or oneDNN's failure */
attn_status attn_fwd_mm_pack(const fwd_call *c, attn_view k, attn_view v, int64_t b, int64_t hk, void *panel,
                             float *tmp);
/* query block blk of head h, batch row b, against its kv head's packed panel */
void attn_fwd_mm_block(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, const void *panel);

/* The implementations oneDNN picks for the fused path's products of bf16
 * operands at D = 128 (or their float32 carriers under ATTN_PRODUCTS=
 * onednn): "forward Q K^T brg:avx512_core_amx_bf16, P V ...; backward ..."
 * into buf; "" when the products do not go through oneDNN here */
void attn_flash_mm_impls(char *buf, size_t n);

/* ---- the provider's backward (flash_mm.c) ---- */

/* Its tiles: query blocks of MMB_BR rows, key tiles of MMB_BC keys, every
 * product of one shape (whole tiles) */
#ifndef MMB_BR
#define MMB_BR 64
#endif
#ifndef MMB_BC
#define MMB_BC 256
#endif

/* The backward's five products through oneDNN, B packed: per key tile of a
 * kv head K^T (for S = Q K^T), V^T (dP = dO V^T) and K (dQ += dS K); per
 * query block dO (dV += P^T dO) and Q (dK += dS^T Q). K dims padded to DP,
 * DvP with zeros. */
typedef struct attn_bwd_mm_plan {
    attn_dtype mt;
    int64_t br, bc, DP, DvP;
    attn_mm_shape s, dp, dv, dk, dq;
    size_t ks, vs, kq, tile; /* a key tile's packed K^T, V^T, K (cache-line multiples) and their sum */
    size_t qo, qq;           /* a query block's packed dO and Q */
} attn_bwd_mm_plan;

/* the plan for operands of type mt; 0 when oneDNN cannot take it here
 * (or, auto on an AMX host, would not run it on AMX) */
int attn_bwd_mm_plan_make(attn_bwd_mm_plan *p, attn_dtype mt, int64_t DP, int64_t DvP);
/* kv head (b, hk)'s nkt key tiles packed at dst (p->tile bytes each; tmp:
 * bc x (DP + DvP) floats and D + Dv more) */
attn_status attn_bwd_mm_pack_keys(const attn_bwd_mm_plan *p, const attn_kernel_table *kt, const attn_sdpa_desc *d,
                                  attn_view k, attn_view v, int64_t b, int64_t hk, int64_t nkt, char *dst, float *tmp);
/* a query block's Q (br x DP) and dO (br x DvP) rows of type mt packed as B
 * operands at Qb (p->qq bytes) and dOb (p->qo) */
attn_status attn_bwd_mm_pack_block(const attn_bwd_mm_plan *p, attn_mm *m, const void *Q, const void *dO, void *Qb,
                                   void *dOb);

#endif
