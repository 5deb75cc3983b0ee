/* The AVX-512 table with AVX512-VNNI (EVEX VPDPBUSD on 256-bit registers,
 * VPDPWSSD on 512-bit ones) for the math modes' int8 Q K^T (qk_rows_q8) and
 * int16 P V (pv_rows_i16): the same kernels otherwise, the same bits. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32
#define ATTN_I16_DPWSSD _mm256_dpwssd_epi32
#define ATTN_VEC_AVX512 1
#define ATTN_SIMD_Q8_Y attn_qk_rows_q8_vnni_y /* the avx512-256 tables' qk_rows_q8 */
#define ATTN_SIMD_TABLE attn_kernels_avx512_vnni
#define ATTN_SIMD_NAME "avx512-vnni"
#include "kernels_simd.c"
