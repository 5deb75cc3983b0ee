/* Dense projections through CBLAS (row-major). */
#include "internal.h"

#include <cblas.h>

/* y (M,N) = x (M,K) @ W^T + b, W (N,K): nn.Linear. Writes y. */
void attn_linear_fwd(const float *x, const float *W, const float *b, float *y, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (b) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) y[i * N + j] = b[j];
    }
    if (K <= 0) {
        if (!b)
            for (int64_t i = 0; i < M * N; i++) y[i] = 0.0f;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, W, (int)K,
                b ? 1.0f : 0.0f, y, (int)N);
}

/* y (M,N) = x (M,K) @ W, W (K,N). Writes y. */
void attn_matmul_fwd(const float *x, const float *W, float *y, int64_t M, int64_t K, int64_t N) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int64_t i = 0; i < M * N; i++) y[i] = 0.0f;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, x, (int)K, W, (int)N, 0.0f,
                y, (int)N);
}
