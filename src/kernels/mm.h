/* Block products through oneDNN's matmul: the math modes' Q K^T and P V
 * of the fused forward and the five products of the fused backward, where
 * oneDNN multiplies the operands' 16-bit type fast (AMX, or AVX512-BF16). All oneDNN calls live in mm.c. A build
 * without oneDNN (aarch64, or libdnnl-dev missing) has the same functions: nothing is enabled and attn_mm_new returns
 * NULL.
 *
 * Which types go through oneDNN (read once from ATTN_PRODUCTS):
 *   auto (or unset)  operands of type t (BF16, F16) where oneDNN has a
 *                    t x t -> f32 matmul and its effective ISA has AMX;
 *                    BF16 where it is AVX512-BF16 (Zen 4, Zen 5, Intel
 *                    without AMX)
 *   onednn           wherever oneDNN is built in: t's own matmul where it
 *                    has one, else float32 matmuls on the rounded values
 *                    (the same exact products and float32 sums; no faster:
 *                    how the tests run this path on any host)
 *   kernels          never (libattn's own kernels for every product)
 * Any other value makes attn_mm_status() ATTN_E_INVALID, and "onednn"
 * where oneDNN is not built in or cannot start ATTN_E_UNSUPPORTED; the
 * fused entry points return it (attn_kernel_status). */
#ifndef ATTN_KERNELS_MM_H
#define ATTN_KERNELS_MM_H

#include "attn.h"

#include <stdint.h>

/* ATTN_PRODUCTS's verdict: ATTN_OK, or ATTN_E_INVALID for an unknown value */
attn_status attn_mm_status(void);

/* the element type oneDNN multiplies for the math modes' operands of type
 * t (BF16 or F16): t, F32 (the rounded values as float32: ATTN_PRODUCTS=
 * onednn without a t matmul here), or ATTN_DTYPE_Q8_0 as "not through
 * oneDNN" (no oneDNN, not enabled, or another t) */
attn_dtype attn_mm_type(attn_dtype t);

/* does oneDNN here multiply t x t -> f32 with t's own instructions (t F32,
 * BF16 or F16; 0 without oneDNN or with ATTN_PRODUCTS=kernels): the bench's
 * bf16 line */
int attn_mm_has(attn_dtype t);

/* what runs the products, for attn_math_products: a static string */
const char *attn_mm_describe(void);

/* One thread's oneDNN objects: an engine, a stream and a cache of matmul
 * primitives keyed by shape, strides, type and accumulation. Not shared
 * between threads (one primitive per thread: shared ones measured 3x
 * slower on an AMX host). NULL without oneDNN or memory. */
typedef struct attn_mm attn_mm;
attn_mm *attn_mm_new(void);
void attn_mm_free(attn_mm *m);

/* the calling thread's objects, made on its first call and freed when the
 * thread ends (OpenMP's threads outlive the calls: primitives made once
 * serve every later call); NULL without oneDNN or memory */
attn_mm *attn_mm_thread(void);

/* C (M x N) = (acc ? C : 0) + A (M x K) B (K x N), run on the calling thread
 * (oneDNN's own threads are not used): element A(m, k) at A[m * sam + k *
 * sak], B(k, n) at B[k * sbk + n * sbn] (strides in elements: a row-major
 * or a transposed operand read in place), C float32 with rows ldc apart; A
 * and B of type t (attn_mm_type's answer: F32, BF16 or F16). ATTN_OK, or
 * ATTN_E_NOMEM / ATTN_E_UNSUPPORTED when oneDNN cannot make or run it.
 * A C with ldc != N is slow: oneDNN 2.6 runs its AMX matmul only on a
 * dense C (gemm:jit otherwise); the attention paths use attn_mm_exec. */
attn_status attn_mm_run(attn_mm *m, attn_dtype t, int64_t M, int64_t N, int64_t K, const void *A, int64_t sam,
                        int64_t sak, const void *B, int64_t sbk, int64_t sbn, float *C, int64_t ldc, int acc);

/* One product of the attention paths: C (M x N, float32, dense: rows N
 * apart) (+)= A (M x K) B (K x N), A(m, k) at A[m sam + k sak], B either
 * read in place (B(k, n) at B[k sbk + n sbn]) or, with sbk = sbn = 0,
 * given packed: reordered once by attn_mm_pack into the layout the
 * primitive of this shape reads (oneDNN's "any" weights format: AMX's VNNI
 * blocks), so that every later product with it skips the repacking a
 * strided B costs inside each call. */
typedef struct attn_mm_shape {
    attn_dtype t; /* A's and B's element type (attn_mm_type's answer) */
    int64_t M, N, K, sam, sak, sbk, sbn;
    int acc; /* C += A B; else C = A B */
} attn_mm_shape;

/* Is this product available, and how many bytes a packed B takes (*packed;
 * 0 for a strided B)? ATTN_OK; ATTN_E_UNSUPPORTED when oneDNN has no such
 * primitive, or when ATTN_PRODUCTS is auto and the primitive oneDNN picks
 * does not run on the engine auto chose it for (AMX, AVX512-BF16: the
 * caller then keeps the kernels:
 * never a slow oneDNN path by default); ATTN_E_NOMEM. Made once per thread
 * and shape (cached). */
attn_status attn_mm_prepare(attn_mm *m, const attn_mm_shape *s, size_t *packed);

/* B (K x N, B(k, n) at B[k sbk + n sbn], of s->t) reordered into the packed
 * layout of shape s (s's own sbk, sbn are 0) at dst (attn_mm_prepare's
 * bytes); any thread's objects pack for any other thread's products */
attn_status attn_mm_pack(attn_mm *m, const attn_mm_shape *s, const void *B, int64_t sbk, int64_t sbn, void *dst);

/* the product of shape s (B packed when s->sbk = s->sbn = 0) */
attn_status attn_mm_exec(attn_mm *m, const attn_mm_shape *s, const void *A, const void *B, float *C);

/* The implementation oneDNN picked for shape s ("brg:avx512_core_amx_bf16",
 * "gemm:jit", ...; NULL when none): the name its primitive descriptor gives */
const char *attn_mm_impl(attn_mm *m, const attn_mm_shape *s);

/* Process-wide counts since start, every thread: products run, B operands
 * packed (reorders), primitives made, and primitives made whose
 * implementation is not the matrix engine's with 16-bit operands (not AMX
 * on an AMX host, not AVX512-BF16 on one without AMX: refused by
 * attn_mm_prepare under auto). The tests count reorders and products per
 * block with them; attn bench reports them. */
typedef struct attn_mm_counts {
    int64_t runs, packs, made, non_amx;
} attn_mm_counts;
void attn_mm_counts_get(attn_mm_counts *c);

/* the distinct implementation names of the primitives made so far, with
 * their counts ("brg:avx512_core_amx_bf16 x3, gemm:jit x1"), into buf (n
 * bytes, NUL-terminated; "" when none) */
void attn_mm_impls_seen(char *buf, size_t n);

#endif
