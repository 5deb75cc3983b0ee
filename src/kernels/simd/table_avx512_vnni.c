/* The AVX-512 table with AVX512-VNNI (EVEX VPDPBUSD on 256-bit registers)
 * for the math modes' int8 Q K^T (qk_rows_q8): the same kernels otherwise,
 * the same bits. */
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32
#define ATTN_VEC_AVX512 1
#define ATTN_SIMD_TABLE attn_kernels_avx512_vnni
#define ATTN_SIMD_NAME "avx512-vnni"
#include "kernels_simd.c"
