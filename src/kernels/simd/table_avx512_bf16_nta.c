/* The avx512-bf16 table's source once more with PREFETCHNTA for its
 * software prefetches (ATTN_PF_LOC 0) rather than PREFETCHT1, built as its
 * two row kernels over stored rows only (qk_rows_x, pv_rows_x; GCC drops
 * the unused static functions): dispatch.c gives them the avx512-bf16
 * table's bf16 and f16 rows (such a cache below four rows a kv head in the
 * math modes, at every row count in strict). That table is the default on
 * AMD's full-width AVX-512 cores (Zen 5); the tables Intel's and Zen 4's
 * cores run keep PREFETCHT1. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32
#define ATTN_I16_DPWSSD _mm256_dpwssd_epi32
#define ATTN_FP8_DPBF16 1
#define ATTN_VEC_AVX512 1
#define ATTN_PF_LOC 0
#define ATTN_SIMD_ROWS_X(k) attn_##k##_rows_x_bf16_nta /* the two kernels, no table */
#pragma GCC diagnostic ignored "-Wunused-function"     /* the rest of the source: not built */
#include "kernels_simd.c"
