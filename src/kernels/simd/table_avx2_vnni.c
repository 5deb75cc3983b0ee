/* The AVX2 table with AVX-VNNI (VEX VPDPBUSD, VPDPWSSD) for the math modes'
 * int8 Q K^T (qk_rows_q8) and int16 P V (pv_rows_i16): the same kernels
 * otherwise, the same bits. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_avx_epi32
#define ATTN_I16_DPWSSD _mm256_dpwssd_avx_epi32
#define ATTN_SIMD_TABLE attn_kernels_avx2_vnni
#define ATTN_SIMD_NAME "avx2-vnni"
#include "kernels_simd.c"
