/* The avx512-bf16 table's source once more with PREFETCHNTA for its
 * software prefetches (ATTN_PF_LOC 0) rather than PREFETCHT1: dispatch.c
 * takes decode's row kernels from it (Q K^T and P V over stored rows, in
 * float32, integer and bf16 products) below four rows a kv head, and over
 * 16-bit rows in float32 at every row count. That table is the default on
 * AMD's full-width AVX-512 cores (Zen 5); the tables Intel's and Zen 4's
 * cores run keep PREFETCHT1. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32
#define ATTN_I16_DPWSSD _mm256_dpwssd_epi32
#define ATTN_FP8_DPBF16 1
#define ATTN_VEC_AVX512 1
#define ATTN_PF_LOC 0
#define ATTN_SIMD_Q8_Y attn_qk_rows_q8_bf16_nta_y
#define ATTN_SIMD_TABLE attn_kernels_avx512_bf16_nta
#define ATTN_SIMD_NAME "avx512-bf16"
#include "kernels_simd.c"
