/* Dense projections through CBLAS, row-major with explicit leading
 * dimensions (so a head's column block of a wider buffer is a valid operand).
 * Forward writes y; backward accumulates parameter gradients (+=) and writes
 * or accumulates dx as asked. */
#include "internal.h"

#include <cblas.h>

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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)ldx, W, (int)K,
                b ? 1.0f : 0.0f, y, (int)ldy);
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
    if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)N, (int)K, (int)M, 1.0f, dy, (int)lddy, x, (int)ldx,
                    1.0f, dW, (int)K);
    if (db)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) db[j] += dy[i * lddy + j];
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)K, (int)N, 1.0f, dy, (int)lddy, W, (int)K,
                    dx_acc ? 1.0f : 0.0f, dx, (int)lddx);
}

/* y (M,N) = x (M,K) @ W, W (K,N): SelfAttention_v1's parameters. */
void attn_matmul_fwd(const float *x, int64_t ldx, const float *W, float *y, int64_t ldy, int64_t M, int64_t K,
                     int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        fill_rows(y, ldy, M, N, NULL);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)ldx, W, (int)N, 0.0f,
                y, (int)ldy);
}

/* Backward of attn_matmul_fwd: dW (K,N) += x^T dy (accumulated); dx (M,K) = dy W^T (+= when dx_acc). */
void attn_matmul_bwd(const float *x, int64_t ldx, const float *W, const float *dy, int64_t lddy, float *dx,
                     int64_t lddx, int dx_acc, float *dW, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0 || K <= 0) {
        if (dx && !dx_acc && M > 0 && K > 0) fill_rows(dx, lddx, M, K, NULL);
        return;
    }
    if (dW)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)N, (int)M, 1.0f, x, (int)ldx, dy, (int)lddy,
                    1.0f, dW, (int)N);
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)K, (int)N, 1.0f, dy, (int)lddy, W, (int)N,
                    dx_acc ? 1.0f : 0.0f, dx, (int)lddx);
}
