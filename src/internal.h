/* Internal declarations shared across src/, what every layer may need:
 * size arithmetic, the dropout stream, the dense projections and the entry
 * points between the layers (reference, fused, validation). Not installed.
 * It includes only attn.h: the semantics (base/sem.h), rows of views
 * (base/rows.h) and KV sources (core/kv_src.h) are included where used. */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stddef.h>
#include <stdint.h>

/* Is a call of this much work (flops, 2 per multiply-add of its products)
 * worth the OpenMP team? Below ATTN_PAR_MIN_FLOPS it runs on the calling
 * thread alone: waking threads that slept between calls costs 10-100 us (a
 * small model's decode step, examples/serve.c, took 1.8x the time on 2
 * threads). Results never depend on the thread count: only speed changes. */
#define ATTN_PAR_MIN_FLOPS 4e6
static inline int attn_par_worth(const attn_sdpa_desc *d, double factor) {
    return factor * 2.0 * (double)d->B * (double)d->H * (double)d->Sq * (double)d->Sk * (double)(d->D + d->Dv) >=
           ATTN_PAR_MIN_FLOPS;
}

/* Checked size arithmetic: return 1 on overflow, 0 otherwise. */
/* x rounded up to a multiple of m (x >= 0, m > 0) */
static inline int64_t attn_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static inline int attn_mul_size(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return 1;
    *out = a * b;
    return 0;
}
static inline int attn_mul3_size(size_t a, size_t b, size_t c, size_t *out) {
    size_t t;
    return attn_mul_size(a, b, &t) || attn_mul_size(t, c, out);
}
static inline int attn_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 1;
    *out = a + b;
    return 0;
}
/* Element count of a (B, S, C)-like shape from int64 dims; 1 on overflow or negative. */
int attn_numel(int ndim, const int64_t *shape, size_t *out);

/* Fill keep[0..len) with the dropout keep decisions of flat elements
 * start..start+len (row-major over the dropped tensor). */
void attn_dropout_mask_range(const attn_dropout *d, uint64_t start, size_t len, uint8_t *keep);
/* MKL stream internals for the tiled kernels: x of element i, and T such that
 * element i is kept iff x_i < T (exactly PyTorch's x / (2^31 - 1) < 1 - p). */
uint32_t attn_dropout_mcg_at(const attn_dropout *d, uint64_t i);
uint32_t attn_dropout_mcg_threshold(const attn_dropout *d);
/* a^k mod (2^31 - 1) (k elements ahead in the stream) and x * y mod (2^31 - 1) */
uint32_t attn_mcg_jump(uint64_t k);
uint32_t attn_mcg_mul(uint32_t x, uint32_t y);

/* Dense projections through CBLAS (src/core/linear.c), row-major, explicit
 * leading dimensions:
 *   linear: y (M,N) = x (M,K) @ W^T (+ b), W (N,K)   -- nn.Linear
 *   matmul: y (M,N) = x (M,K) @ W,         W (K,N)   -- SelfAttention_v1
 * Backward accumulates dW/db (+=) and writes dx (or adds when dx_acc). */
void attn_linear_fwd(const float *x, int64_t ldx, const float *W, const float *b, float *y, int64_t ldy, int64_t M,
                     int64_t K, int64_t N);
void attn_linear_bwd(const float *x, int64_t ldx, const float *W, const float *dy, int64_t lddy, float *dx,
                     int64_t lddx, int dx_acc, float *dW, float *db, int64_t M, int64_t K, int64_t N);
void attn_matmul_fwd(const float *x, int64_t ldx, const float *W, float *y, int64_t ldy, int64_t M, int64_t K,
                     int64_t N);
void attn_matmul_bwd(const float *x, int64_t ldx, const float *W, const float *dy, int64_t lddy, float *dx,
                     int64_t lddx, int dx_acc, float *dW, int64_t M, int64_t K, int64_t N);

/* Reference SDPA (src/ref). Same contract as attn_sdpa_forward. */
attn_status attn_sdpa_ref_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                  float *lse);
attn_status attn_sdpa_ref_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                   attn_view dq, attn_view dk, attn_view dv);
attn_status attn_sdpa_ref_weights(const attn_sdpa_desc *d, attn_view q, attn_view k, float *scores, float *weights);
/* Fused tiled path (src/core/flash.c). Same contracts. */
attn_status attn_flash_forward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                               float *lse);
attn_status attn_flash_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out,
                                attn_view dout, const float *lse, attn_view dq, attn_view dk, attn_view dv);
/* The block primitives of attn.h on the fused path (arguments checked). */
attn_status attn_flash_block_stats(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                   float *m, float *l, float *t);
attn_status attn_flash_block_backward(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view dout,
                                      const float *m, const float *l, const float *t, attn_view dq, attn_view dk,
                                      attn_view dv);
/* The calling thread's error detail (attn.h, attn_last_error): attn_fail
 * writes it (printf-style: the argument, its value, what was expected) and
 * returns st; attn_err_clear empties it at an entry point's start. */
attn_status attn_fail(attn_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void attn_err_clear(void);
/* Validation shared by every SDPA entry point (src/base/sdpa_check.c, below
 * both the reference and the fused path). */
attn_status attn_sdpa_check(const attn_sdpa_desc *d, attn_view q, attn_view k, attn_view v, attn_view out, int need_v);
/* fp8 scales (what: "k_scale"): none, or len 1 or Hkv values, finite and > 0 */
attn_status attn_scales_check(const char *what, const float *sc, int64_t len, int64_t Hkv);
/* queries over stored keys (over: "the cache", "the pages"): float32, no
 * dropout, no lengths of their own, the storage's Hkv (or 0), D and Dv */
attn_status attn_kv_query_check(const attn_sdpa_desc *d, int64_t Hkv, int64_t D, int64_t Dv, const char *over);
#endif
