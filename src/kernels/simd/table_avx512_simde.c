/* The AVX-512 table's source at 16 lanes through SIMD Everywhere's
 * emulation, built for AVX2 hosts (ATTN_ISA=avx512-simde): the tests run the
 * AVX-512 kernels on CPUs without AVX-512. Not for speed. */
#define ATTN_VEC_AVX512 1
#define ATTN_VEC_SIMDE 1
#define ATTN_SIMD_TABLE attn_kernels_avx512_simde
#define ATTN_SIMD_NAME "avx512-simde"
#include "kernels_simd.c"
