/* The AVX2 + FMA + F16C table: kernels_simd.c at 8 lanes. */
#define ATTN_SIMD_TABLE attn_kernels_avx2
#define ATTN_SIMD_NAME "avx2"
#include "kernels_simd.c"
