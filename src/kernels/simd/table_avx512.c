/* The AVX-512 (F/BW/DQ/VL) table: kernels_simd.c at 16 lanes, native. */
#define ATTN_VEC_AVX512 1
#define ATTN_SIMD_TABLE attn_kernels_avx512
#define ATTN_SIMD_NAME "avx512"
#include "kernels_simd.c"
