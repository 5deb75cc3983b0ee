/* SIMD primitives for the fused SDPA driver (src/core/flash.c).
 *
 * Contract (both implementations):
 *   gemm        C[mr x 16] = (acc ? C : 0) + A[mr x K] * B[K x 16], mr the
 *               table's gemm_mr (6 or 12: 12 vector accumulators at every
 *               width; 48 and 96, the drivers' tile sizes, are multiples of
 *               both). A rows are lda floats apart, B rows ldb apart, C rows
 *               ldc apart. No alignment required. K >= 0. Every element of
 *               C is one chain of FMAs over k in order.
 *   gemm_tn     the same with A stored transposed: A(i, k) at A[k * lda + i]
 *               (so C = A^T B for a row-major A), no transpose copy needed.
 *   gemm32, gemm32_tn  the same over 32 columns (16-lane tables; NULL on the
 *               others): the bits of two 16-column calls.
 *   exp2_row    y[j] = 2^t_j with t_j = fl(x[j] * scale) - m (the product
 *               rounded before m is subtracted, no fused multiply-subtract;
 *               scale == 1 skips the multiply), for j < n; returns the sum of
 *               the y[j] (accumulated in float lanes of 8, then pairwise).
 *               Base 2: the callers fold log2(e) into the scale (or into the
 *               packed queries) and keep row maxima in base-2 units, so that
 *               the maximal element of a row gives exactly 2^0 = 1.
 *               t is clamped to [-127, 127]: t <= -127 (a masked score, -inf)
 *               gives exactly 0, t in (-127, -126) may give a subnormal; NaN
 *               stays NaN. Relative error below 2^-23 (one ulp of 1; tests/test_kernels.c).
 *   exp2_dot_row  exp2_row without storing y; returns its sum and sets *dot
 *               = dot_row(y, w, n) of the same y: both sums accumulate as
 *               those two kernels do (the same bits, one pass).
 *   softmax_grad_row  p[j] = exp2_row's y[j] * il (as scale_row), then
 *               g[j] = (p[j] * (g[j] - di)) * scale: the backward's P and
 *               dS = P (dP - Di) scale in one pass (g: dP in, dS out), each
 *               element the same operations as the three-pass form.
 *   dropout_mcg t[j] *= (x_j < thr) ? scale : 0 for j < n, where x_0 = x and
 *               x_{j+1} = x_j * 1132489760 mod (2^31 - 1): PyTorch's MKL
 *               dropout stream from element x onward (1 <= x < 2^31 - 1).
 *   max_row     max of x[0..n), -INFINITY for n == 0, when no x[j] is NaN;
 *               with a NaN, any value (-INFINITY included): the drivers then
 *               get NaN from 2^(x - m) or, when it says -INFINITY, look for
 *               NaN themselves (online.h: attn_row_max), so the hot loop pays
 *               nothing for the rule.
 *   scale_row   x[j] *= a for j < n.
 *   dot_row     sum_j x[j] * y[j] (lanes of 8, then pairwise).
 *   softcap_row x[j] = cap * tanh(x[j] * (scale / cap)) for j < n (tanh by
 *               a rational approximation, a few ulp; -inf gives -cap).
 *   alibi_row   x[j] += -slope * |dist0 - j| for j < n (dist0 = i + off - j0,
 *               an integer below 2^24 in magnitude).
 *   qk_rows     S[r * lds + j] = sum_c Q[r * D + c] * K[j * ldk + c] for
 *               r < R, j < n: R packed query rows against n key rows read
 *               in place (decode: K is read once for all R rows).
 *   pv_rows     O[r * ldo + c] += sum_j P[r * ldp + j] * V[j * ldv + c] for
 *               r < R, c < Dv (O has room for round_up(Dv, 8) columns).
 *               Both may prefetch rows pre + t * ldpre (wpre floats each,
 *               t < n) while they work: the memory the caller reads next
 *               (pre may be NULL).
 * The driver pads tiles so that gemm never needs edge handling.
 * Kernels never allocate and never fail. */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include "attn.h"
#include "base/storage.h"

#include <stddef.h>
#include <stdint.h>

typedef struct attn_kernel_table {
    const char *name;
    int gemm_mr; /* rows of C per gemm call: 6 or 12 */
    int lanes;   /* float lanes of the row kernels' vectors (what a pass's cost per score is read against) */
    void (*gemm)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int acc);
    void (*gemm_tn)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                    int acc);
    float (*exp2_row)(const float *x, float *y, int64_t n, float scale, float m);
    float (*exp2_dot_row)(const float *x, const float *w, int64_t n, float scale, float m, float *dot);
    void (*softmax_grad_row)(const float *x, float *p, float *g, int64_t n, float escale, float m, float il, float di,
                             float scale);
    void (*dropout_mcg)(float *t, int64_t n, uint32_t x, uint32_t thr, float scale);
    float (*max_row)(const float *x, int64_t n);
    void (*scale_row)(float *x, int64_t n, float a);
    float (*dot_row)(const float *x, const float *y, int64_t n);
    void (*softcap_row)(float *x, int64_t n, float scale, float cap);
    void (*alibi_row)(float *x, int64_t n, float slope, float dist0);
    void (*qk_rows)(const float *Q, int64_t R, int64_t D, const float *K, int64_t ldk, int64_t n, float *S, int64_t lds,
                    const float *pre, int64_t ldpre, int64_t wpre);
    void (*pv_rows)(const float *P, int64_t ldp, int64_t R, const float *V, int64_t ldv, int64_t n, int64_t Dv,
                    float *O, int64_t ldo, const float *pre, int64_t ldpre, int64_t wpre);
    /* the same on reduced-precision K/V rows, converted to float32 as they
     * are loaded: dt ATTN_DTYPE_F16, ATTN_DTYPE_BF16 or ATTN_DTYPE_Q8_0 (q8_0
     * blocks; D, Dv and every ld a multiple of 32). A q8_0 block's scale may
     * instead multiply the block's partial dot product (qk) or the P value
     * (pv): another rounding of the same float32 product, fixed per table
     * and row count. Strides in elements, bytes as base/storage.h says.
     * pv_rows_x also reads int4 codes and q4_0 values (Dv a multiple of
     * 32); qk_rows_x does not (decode converts those keys, or runs Q K^T in
     * integers). */
    void (*qk_rows_x)(const float *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                      int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt);
    void (*pv_rows_x)(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                      float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt);
    /* x rounded in place to t (ATTN_DTYPE_F16 or BF16: nearest even, NaN
     * stays NaN, as base/half.h), returns the sum of the rounded values
     * (accumulated as exp2_row's): the math modes' P operand and its sum */
    float (*round_row)(float *x, int64_t n, attn_dtype t);
    /* exp2_row's y rounded as round_row rounds, in one pass; returns the sum
     * of the rounded y (the math modes' P and its row sum) */
    float (*exp2_round_row)(const float *x, float *y, int64_t n, float scale, float m, attn_dtype t);
    /* the fused pass that leaves P as a block product's operand: exp2_row's
     * y rounded to rt (F16, BF16; F32: not rounded) and written as st at
     * dst (rt's own 16-bit values, or F32: the rounded values as float32);
     * returns the sum of the written values, accumulated as exp2_round_row
     * (the same bits) */
    float (*exp2_store_row)(const float *x, int64_t n, float scale, float m, attn_dtype rt, attn_dtype st, void *dst);
    /* softmax_grad_row's p and g (g: dP, read) rounded to rt as above and
     * written as st at pd and gd (gd may be g when st is F32): the
     * backward's P and dS as its products' operands in one pass */
    void (*softmax_grad_store_row)(const float *x, const float *g, int64_t n, float escale, float m, float il, float di,
                                   float scale, attn_dtype rt, attn_dtype st, void *pd, void *gd);
    /* x rounded to rt (F16, BF16) and written as st (rt's 16-bit values, or
     * F32); rt F32: written as st, rounded to nearest even where st is 16-bit
     * (as the storage's store): the block products' operand rows (Q, K, V,
     * a softcap's dS) without a scalar conversion loop */
    void (*store_row)(const float *x, int64_t n, attn_dtype rt, attn_dtype st, void *dst);
    /* the math modes' Q K^T in integers: q8_0 query blocks (q quantized as
     * a q8_0 cache stores K, 32 values per block with an f16 scale; rows
     * attn_q8_row_bytes(D) apart, D a multiple of 32) against key rows of
     * type kt, each block's exact int32 dot scaled and summed in float32:
     *   Q8_0        S = sum_b d_q d_k (q . k)
     *   Q4_0        S = sum_b d_q d_k (q . (code - 8))
     *   KV_INT8     S = d_q (q . (code - 128))  (the caller applies the
     *   KV_INT4     S = d_q (q . code)           row's scale and zero;
     *                                            int4: D a multiple of 64)
     * where for int8 / int4 every block of a query row carries the row's
     * one scale d_q (Q8_ROW, base/storage.h: the dot is one int32 sum over
     * the row, converted to float once); K rows ldk elements apart;
     * prefetch as qk_rows */
    void (*qk_rows_q8)(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                       int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt);
    /* the math modes' P V in integers (base/sem.h attn_sem_p_int16): O rows
     * (ldo apart) += u_r (q_r . codes), each of the R rows of P (n values,
     * ldp apart: the weights times V's row scales) rounded to 16-bit q_r
     * with step u_r per 64 keys as attn_p16_quantize rounds them, V's rows
     * of vt (KV_INT8: codes 0..255, Dv a multiple of 16; KV_INT4: codes
     * 0..15, column c in byte c % (Dv / 2), the high nibble from Dv / 2 on,
     * Dv a multiple of 32; Q4_0 and Q8_0, Dv a multiple of 32: the values
     * code - 8 (q4_0) or the signed codes (q8_0), and a row of P for each
     * block of 32 columns, P times each key's block scale, rounded as the
     * others) ldv elements apart; each (row, column) one
     * exact int32 sum over the keys converted to float and added as
     * fmaf(u, sum, O) (the same bits on every table); prefetch as pv_rows */
    void (*pv_rows_i16)(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                        float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype vt);
    /* nb stored rows of n values of a type the products do not read (fp8,
     * int8, int4, q4_0: base/storage.h kernels 0), ld elements apart from
     * src, as float32 rows of n at dst, each exactly as attn_st_load_row
     * reads it: par the first row's scale (fp8) or (scale, zero) pair
     * (int8 / int4), the next row's 2 pld floats on (pld 0: one for all) */
    void (*kv_rows)(const void *src, int64_t ld, int64_t nb, int64_t n, attn_dtype t, const float *par, int64_t pld,
                    float *dst);
    /* the K / V storage types (bit 1 << attn_dtype) for which this table
     * computes the math modes' rounded products (base/sem.h): the types it has
     * product kernels for that beat float32 ones; for the others DATA and
     * BF16 run as STRICT (the rounding would cost and buy nothing) */
    unsigned math_types;
    /* how this table carries the math modes' products (attn_math_products) */
    const char *math_products;
    /* gemm / gemm_tn over 32 columns, C[mr x 32]: B's second 16 columns bs
     * floats after its first (16 for a row-major B, a packed panel's size
     * otherwise); each element of C the same chain of FMAs, so the same bits
     * as two 16-column calls. NULL where the table has none (8 lanes: two
     * panels would leave no registers; attn_gemm_cols then calls gemm). */
    void (*gemm32)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, int64_t bs, float *C,
                   int64_t ldc, int acc);
    void (*gemm32_tn)(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, int64_t bs, float *C,
                      int64_t ldc, int acc);
    /* the math modes' products over fp8 (and bf16) caches (base/sem.h: q
     * and P bf16) with two products an instruction (VDPBF16PS on the values
     * as bf16; NULL where the table has none). qk_rows_bf: S = s (q . k) for
     * R rows of bf16 q (Q's rows ldq values apart, as uint16 bits) against
     * n fp8 rows of kind (codes, ldk apart: their stored values divided by
     * the scale s), or bf16 rows (s 1); pv_rows_bf: O rows += s (P V), P's R rows of n float32
     * values that are bf16 values (the mode rounded them), V n rows of Dv
     * values of kind (fp8 codes, or bf16 values with s 1). Each product exact, the sums float32 in the kernel's order
     * (other bits than qk_rows_x / pv_rows_x: within the modes' rule);
     * prefetch as qk_rows / pv_rows */
    void (*qk_rows_bf)(const void *Q, int64_t ldq, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n,
                       float *S, int64_t lds, float s, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind);
    void (*pv_rows_bf)(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                       float *O, int64_t ldo, float s, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kind);
    /* the K types (bit 1 << attn_dtype) whose Q K^T decode takes through
     * qk_rows_bf: fp8 and bf16 where the table has it (0 on avx512-bf16-fma,
     * whose products are float32 FMAs) */
    unsigned qk_bf_types;
    /* decode's folded products over int8 / int4 rows, par their adjacent
     * (scale, zero) pairs: base/quant.h's attn_rowpar_scores / _p, the same
     * bits, each returning the fold rule; add_row: x += a */
    int (*rowpar_scores)(const float *par, int64_t nb, float off, float lim, int64_t R, const float *qs, float *S,
                         int64_t lds);
    int (*rowpar_p)(const float *par, int64_t nb, float lim, int64_t R, const float *S, int64_t lds, float *P,
                    float *wr);
    void (*add_row)(float *x, int64_t n, float a);
    /* the math modes' query row for the integer Q K^T: x (n floats, a
     * multiple of 32) into q8_0 blocks at dst as attn_q8_quantize (t Q8_0:
     * a scale a block) or attn_q8_quantize_row (Q8_ROW: one scale for the
     * row) writes them, and x replaced by the blocks' values
     * (attn_st_load_q8): the same bytes and bits. Returns the largest |x|
     * of the values, as attn_q8_amax (NaN where one is) */
    float (*q8_row)(float *x, int64_t n, attn_dtype t, void *dst);
} attn_kernel_table;

/* the math_types of the shipped tables: Q K^T in integers for the q8_0,
 * q4_0, int8 and int4 caches (qk_rows_q8); and of the avx512-simde test table: every type, the
 * operands rounded as the modes say and multiplied in float32 where no
 * product kernel exists, so that the tests run every rounded path on any
 * host. attn_math_products says which. */
#define ATTN_MATH_TYPES_Q8                                                                                             \
    ((1u << ATTN_DTYPE_Q8_0) | (1u << ATTN_DTYPE_Q4_0) | (1u << ATTN_DTYPE_KV_INT8) | (1u << ATTN_DTYPE_KV_INT4))
#define ATTN_MATH_TYPES_ALL                                                                                            \
    ((1u << ATTN_DTYPE_F32) | (1u << ATTN_DTYPE_F16) | (1u << ATTN_DTYPE_BF16) | ATTN_MATH_TYPES_Q8)
/* the integer caches' words, the same in every table's sentence */
#define ATTN_MATH_PRODUCTS_INT                                                                                         \
    "q8_0, q4_0, int8, int4 caches: Q K^T and P V in integers (q quantized per block or row, P 16-bit); "
#define ATTN_MATH_PRODUCTS_Q8 ATTN_MATH_PRODUCTS_INT "f16, bf16, float32: strict (no 16-bit product kernels here)"
#define ATTN_MATH_TYPES_FP8 ((1u << ATTN_DTYPE_FP8_E4M3) | (1u << ATTN_DTYPE_FP8_E5M2))
#define ATTN_MATH_PRODUCTS_FP8                                                                                         \
    ATTN_MATH_PRODUCTS_INT "fp8 caches: bf16 q and P, two products an instruction, and bf16 caches' decode from four " \
                           "query rows a kv head so, where the mode rounds for them; f16, bf16, float32 otherwise: "   \
                           "strict (no 16-bit product kernels here)"
#define ATTN_MATH_PRODUCTS_FP8_FMA                                                                                     \
    ATTN_MATH_PRODUCTS_INT "fp8 caches: bf16 q and P, float32 FMAs on the values; f16, bf16, float32 otherwise: "      \
                           "strict (no 16-bit product kernels here)"
#define ATTN_MATH_PRODUCTS_EMULATED                                                                                    \
    "every type rounded as the mode says (int8 Q K^T for q8_0; float32 FMA on rounded 16-bit operands: a test table)"

/* tanh(x) as a rational function (Eigen's fast float tanh): |x| < 4e-4
 * returns x, beyond +-7.9 exactly +-1 (float32's tanh is 1 - 3e-7 there: a
 * saturated softcap then has derivative 0, as PyTorch's float32 tanh gives
 * beyond +-9, so huge scores times huge values do not overflow the
 * backward); NaN stays NaN. Shared coefficients of the generic and SIMD
 * kernels. */
#define ATTN_TANH_CLAMP 7.90531110763549805f
#define ATTN_TANH_A1 4.89352455891786e-03f
#define ATTN_TANH_A3 6.37261928875436e-04f
#define ATTN_TANH_A5 1.48572235717979e-05f
#define ATTN_TANH_A7 5.12229709037114e-08f
#define ATTN_TANH_A9 -8.60467152213735e-11f
#define ATTN_TANH_A11 2.00018790482477e-13f
#define ATTN_TANH_A13 -2.76076847742355e-16f
#define ATTN_TANH_B0 4.89352518554385e-03f
#define ATTN_TANH_B2 2.26843463243900e-03f
#define ATTN_TANH_B4 1.18534705686654e-04f
#define ATTN_TANH_B6 1.19825839466702e-06f

/* 2^f on [-1/2, 1/2] = 1 + C1 f + ... + C6 f^6: minimax (relative error
 * 3.9e-9 in exact arithmetic), shared by every table's exp2_row. */
#define ATTN_EXP2_C1 6.931472421e-1f
#define ATTN_EXP2_C2 2.402265072e-1f
#define ATTN_EXP2_C3 5.550297350e-2f
#define ATTN_EXP2_C4 9.618030861e-3f
#define ATTN_EXP2_C5 1.341000083e-3f
#define ATTN_EXP2_C6 1.546973217e-4f
#define ATTN_LOG2E 1.44269504088896341f
#define ATTN_LN2 0.693147180559945309f

/* x * y mod (2^31 - 1) for x, y < 2^31: fold the 62-bit product (2^31 = 1).
 * Shared by both tables' dropout_mcg. */
static inline uint32_t attn_m31_mul(uint32_t x, uint32_t y) {
    uint64_t p = (uint64_t)x * y;
    uint32_t t = (uint32_t)((p & 0x7fffffffu) + (p >> 31));
    return t >= 0x7fffffffu ? t - 0x7fffffffu : t;
}

/* the columns of one call at column j of N: 32 where the table has gemm32
 * and 32 remain, else 16 */
static inline int64_t attn_gemm_width(const attn_kernel_table *kt, int64_t j, int64_t N) {
    return kt->gemm32 && j + 32 <= N ? 32 : 16;
}

/* one row block of C (gemm_mr rows) over N columns (N % 16 == 0) through
 * gemm (tn 0) or gemm_tn (tn 1), 32 columns a call where the table can:
 * B's 16-column panels bp floats apart (16 for a row-major B; a packed
 * panel's size otherwise), C's columns contiguous */
static inline void attn_gemm_cols(const attn_kernel_table *kt, int tn, int64_t N, int64_t K, const float *A,
                                  int64_t lda, const float *B, int64_t ldb, int64_t bp, float *C, int64_t ldc,
                                  int acc) {
    for (int64_t j = 0, w; j < N; j += w) {
        const float *Bj = B + j / 16 * bp;
        w = attn_gemm_width(kt, j, N);
        if (w == 32)
            (tn ? kt->gemm32_tn : kt->gemm32)(K, A, lda, Bj, ldb, bp, C + j, ldc, acc);
        else
            (tn ? kt->gemm_tn : kt->gemm)(K, A, lda, Bj, ldb, C + j, ldc, acc);
    }
}

/* C (M x N) (+)= A (M x K) B (K x N) through a table's gemm, M % gemm_mr
 * == 0 and N % 16 == 0 (the drivers' tile products: flash.c, decode.c);
 * column strips outer, so a strip of B serves every row block from L1 */
static inline void attn_tile_gemm(const attn_kernel_table *kt, int64_t M, int64_t N, int64_t K, const float *A,
                                  int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc, int acc) {
    for (int64_t j = 0, w; j < N; j += w) {
        w = attn_gemm_width(kt, j, N);
        for (int64_t i = 0; i < M; i += kt->gemm_mr)
            attn_gemm_cols(kt, 0, w, K, A + i * lda, lda, B + j, ldb, 16, C + i * ldc + j, ldc, acc);
    }
}

extern const attn_kernel_table attn_kernels_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const attn_kernel_table attn_kernels_avx2;        /* simd/kernels_simd.c at 8 lanes */
extern const attn_kernel_table attn_kernels_avx512;      /* the same source at 16 lanes */
extern const attn_kernel_table attn_kernels_avx2_vnni;   /* avx2 with AVX-VNNI's int8 dots */
extern const attn_kernel_table attn_kernels_avx512_vnni; /* avx512 with AVX512-VNNI's int8 dots */
extern const attn_kernel_table attn_kernels_avx512_bf16; /* avx512-vnni with AVX512-BF16, VBMI, GFNI: fp8 products */
/* the avx512-bf16 source built with PREFETCHNTA: the avx512-bf16 table's decode row kernels below four rows a kv
 * head, and over 16-bit rows in float32 (dispatch.c); its qk_rows_q8 through q8_0's 256-bit key blocks likewise */
extern const attn_kernel_table attn_kernels_avx512_bf16_nta;
void attn_qk_rows_q8_bf16_nta_y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                                int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt);
/* avx512-vnni's and avx512-bf16's qk_rows_q8 for AVX-512 on 256-bit units
 * (the avx512-256 tables): int8 / int4 keys in groups of three or four
 * rows (eight: two groups) on 256-bit registers, q8_0's key blocks one
 * 256-bit load a block (also avx512-bf16's for q8_0, dispatch.c), the same
 * sums */
void attn_qk_rows_q8_vnni_y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                            int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt);
void attn_qk_rows_q8_bf16_y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                            int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt);
#define ATTN_HAVE_AVX2_BUILD 1
#ifdef ATTN_HAVE_SIMDE
extern const attn_kernel_table attn_kernels_avx512_simde; /* 16 lanes emulated on AVX2 (tests) */
/* its qk_rows_q8 on 256-bit registers (the avx512-256 tables' form; q8_0 through it in the test table, as on
 * avx512-bf16: dispatch.c) */
void attn_qk_rows_q8_simde_y(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,
                             int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype kt);
#endif
#endif

/* The table for this CPU, chosen once: AVX-512 (F/BW/DQ/VL with the OS's
 * ZMM state; "avx512-256" on Zen 4, see dispatch.c) > AVX2+FMA+F16C > the
 * portable C kernels; the environment variable ATTN_ISA forces one
 * ("generic", "avx2", "avx2-vnni", "avx512", "avx512-vnni", "avx512-bf16", "avx512-256",
 * "avx512-256-vnni", "avx512-256-bf16", "avx512-bf16-fma", "avx512-simde" where the build has SIMDe, "auto"). The
 * -vnni tables differ only in the int8 dots of qk_rows_q8 (VPDPBUSD: the
 * same exact sums), chosen where CPUID reports AVX-VNNI / AVX512-VNNI. */
const attn_kernel_table *attn_kernels(void);

/* 1 on CPUs whose AVX-512 runs on 256-bit units (AMD Zen 4: the
 * avx512-256 tables; oneDNN's bf16 matmul there is not taken by auto) */
int attn_cpu_avx512_half_width(void);

/* The table of that name (attn_kernels' names) if
 * this build has it and this CPU and OS run it, else NULL (tests and
 * benchmarks compare tables side by side through this). */
const attn_kernel_table *attn_kernels_lookup(const char *name);
/* The i-th of every table name ATTN_ISA knows (whether or not this build
 * or CPU has it), NULL past the last */
const char *attn_kernel_table_name(int i);

#endif
