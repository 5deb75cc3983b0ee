/* The AVX-512 table's source at 16 lanes through SIMD Everywhere's
 * emulation, built for AVX2 hosts (ATTN_ISA=avx512-simde): the tests run the
 * AVX-512 kernels on CPUs without AVX-512. Not for speed. It also computes
 * the math modes' rounded operands (DATA, BF16) as a table with bf16 / int8
 * product kernels would, with float32 products, so that the tests run every
 * rounded path on any host, and the int8 dots through VPDPBUSD as the VNNI
 * tables do. */
#define ATTN_SIMD_MATH_ROUNDS 1
#define ATTN_Q8_DPBUSD _mm256_dpbusd_epi32  /* VNNI's int8 dots (SIMDe emulates them): the VNNI tables' code */
#define ATTN_I16_DPWSSD _mm256_dpwssd_epi32 /* and their int16 pairs (P V) */
#define ATTN_FP8_DPBF16 1                   /* and the fp8 products through VDPBF16PS, VPERMT2B (SIMDe emulates them) */
#define ATTN_VEC_AVX512 1
#define ATTN_VEC_SIMDE 1
#define ATTN_SIMD_Q8_Y attn_qk_rows_q8_simde_y /* q8_0's key blocks as avx512-bf16 reads them (dispatch.c) */
#define ATTN_SIMD_TABLE attn_kernels_avx512_simde
#define ATTN_SIMD_NAME "avx512-simde"
#include "kernels_simd.c"
