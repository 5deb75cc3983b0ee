/* Dense projections through CBLAS, row-major with explicit leading
 * dimensions (so a head's column block of a wider buffer is a valid operand).
 * Forward writes y; backward accumulates parameter gradients (+=) and writes
 * or accumulates dx as asked.
 *
 * Threading: the output rows are cut into fixed blocks of ROWS rows that
 * OpenMP threads claim, each block one single-threaded sgemm over the full
 * reduction. The blocks do not depend on the thread count, so results are
 * bitwise identical for any number of threads (a multi-threaded OpenBLAS call
 * is not), and OpenBLAS never runs its own threads beside OpenMP's. */
#include "internal.h"

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define ROWS 64

/* C (M x N) = alpha op(A) op(B) + beta C, row-major, parallel over row blocks of C. */
static void par_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    int64_t nblk = (M + ROWS - 1) / ROWS;
    if (nblk <= 1) {
        cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
        return;
    }
#pragma omp parallel for schedule(dynamic, 1) if (M * N * K > 32 * 1024)
    for (int64_t blk = 0; blk < nblk; blk++) {
        int64_t m0 = blk * ROWS, mc = M - m0 < ROWS ? M - m0 : ROWS;
        const float *a = ta == CblasNoTrans ? A + m0 * lda : A + m0; /* rows of op(A) */
        cblas_sgemm(CblasRowMajor, ta, tb, (int)mc, (int)N, (int)K, 1.0f, a, (int)lda, B, (int)ldb, beta, C + m0 * ldc,
                    (int)ldc);
    }
}

/* OpenBLAS runs single-threaded inside libattn's projections; the caller's
 * setting is restored afterwards. */
static int blas_enter(void) {
    int prev = openblas_get_num_threads();
    if (prev != 1) openblas_set_num_threads(1);
    return prev;
}
static void blas_leave(int prev) {
    if (prev != 1) openblas_set_num_threads(prev);
}

static void fill_rows(float *y, int64_t ldy, int64_t M, int64_t N, const float *b) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) y[i * ldy + j] = b ? b[j] : 0.0f;
}

/* y (M,N) = x (M,K) @ W^T + b, W (N,K): nn.Linear. */
void attn_linear_fwd(const float *x, int64_t ldx, const float *W, const float *b, float *y, int64_t ldy, int64_t M,
                     int64_t K, int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (b || K <= 0) fill_rows(y, ldy, M, N, b);
    if (K <= 0) return;
    int prev = blas_enter();
    par_sgemm(CblasNoTrans, CblasTrans, M, N, K, x, ldx, W, K, b ? 1.0f : 0.0f, y, ldy);
    blas_leave(prev);
}

/* Backward of attn_linear_fwd given dy (M,N):
 *   dW (N,K) += dy^T x     db (N) += column sums of dy     (accumulated)
 *   dx (M,K)  = dy W       (+= when dx_acc)                  dx may be NULL */
void attn_linear_bwd(const float *x, int64_t ldx, const float *W, const float *dy, int64_t lddy, float *dx,
                     int64_t lddx, int dx_acc, float *dW, float *db, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0 || K <= 0) {
        if (dx && !dx_acc && M > 0 && K > 0) fill_rows(dx, lddx, M, K, NULL);
        return;
    }
    int prev = blas_enter();
    if (dW) par_sgemm(CblasTrans, CblasNoTrans, N, K, M, dy, lddy, x, ldx, 1.0f, dW, K);
    if (db)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) db[j] += dy[i * lddy + j];
    if (dx) par_sgemm(CblasNoTrans, CblasNoTrans, M, K, N, dy, lddy, W, K, dx_acc ? 1.0f : 0.0f, dx, lddx);
    blas_leave(prev);
}

/* y (M,N) = x (M,K) @ W, W (K,N): SelfAttention_v1's parameters. */
void attn_matmul_fwd(const float *x, int64_t ldx, const float *W, float *y, int64_t ldy, int64_t M, int64_t K,
                     int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        fill_rows(y, ldy, M, N, NULL);
        return;
    }
    int prev = blas_enter();
    par_sgemm(CblasNoTrans, CblasNoTrans, M, N, K, x, ldx, W, N, 0.0f, y, ldy);
    blas_leave(prev);
}

/* Backward of attn_matmul_fwd: dW (K,N) += x^T dy (accumulated); dx (M,K) = dy W^T (+= when dx_acc). */
void attn_matmul_bwd(const float *x, int64_t ldx, const float *W, const float *dy, int64_t lddy, float *dx,
                     int64_t lddx, int dx_acc, float *dW, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0 || K <= 0) {
        if (dx && !dx_acc && M > 0 && K > 0) fill_rows(dx, lddx, M, K, NULL);
        return;
    }
    int prev = blas_enter();
    if (dW) par_sgemm(CblasTrans, CblasNoTrans, K, N, M, x, ldx, dy, lddy, 1.0f, dW, N);
    if (dx) par_sgemm(CblasNoTrans, CblasTrans, M, K, N, dy, lddy, W, N, dx_acc ? 1.0f : 0.0f, dx, lddx);
    blas_leave(prev);
}
