/* The AVX-512 VNNI table with AVX512-BF16, VBMI and GFNI: the math modes'
 * decode products over fp8 caches (and a bf16 cache's P V) two an
 * instruction (qk_rows_bf, pv_rows_bf: fp8 through VPERMT2B tables to bf16,
 * VDPBF16PS), q4_0's high nibbles by one GF2P8AFFINEQB (the build gives
 * this file -mgfni: __GFNI__); the avx512-vnni table otherwise. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32
#define ATTN_I16_DPWSSD _mm256_dpwssd_epi32
#define ATTN_FP8_DPBF16 1
#define ATTN_VEC_AVX512 1
#define ATTN_SIMD_Q8_Y attn_qk_rows_q8_bf16_y /* the avx512-256 tables' qk_rows_q8 */
#define ATTN_SIMD_TABLE attn_kernels_avx512_bf16
#define ATTN_SIMD_NAME "avx512-bf16"
#include "kernels_simd.c"
