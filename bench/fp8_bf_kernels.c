/* The math modes' fp8 products alone (qk_rows_bf / pv_rows_bf of the
 * avx512-bf16 table: the codes' bf16 values through VDPBF16PS) against the
 * float32 products on the same codes (qk_rows_x / pv_rows_x), R query rows
 * against 128 keys in L1, D = 128, alternating in one process: ns a key.
 * How docs/PERFORMANCE.md found Q K^T 7.3 against 9.2 ns a key and P V 3.0
 * against 5.8 at four rows on Zen 5. Not built by make:
 *   gcc -O2 -Isrc -Iinclude bench/fp8_bf_kernels.c build/libattn.a \
 *       -o /tmp/fp8_bf -lopenblas -ldnnl -fopenmp -lm
 *   /tmp/fp8_bf R [4|b]    (4: e4m3; b: bf16 keys and values; otherwise e5m2)
 * Needs a CPU with AVX512-BF16 and VBMI (the avx512-bf16 table). */
#include "kernels/kernels.h"
#include "base/storage.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int R = argc > 1 ? atoi(argv[1]) : 4;
    char kind = argc > 2 ? argv[2][0] : '5';
    attn_dtype t = kind == '4' ? ATTN_DTYPE_FP8_E4M3 : kind == 'b' ? ATTN_DTYPE_BF16 : ATTN_DTYPE_FP8_E5M2;
    const attn_kernel_table *kb = attn_kernels_lookup("avx512-bf16");
    if (!kb || R < 1 || R > 16) {
        fprintf(stderr, "needs the avx512-bf16 table and 1 <= R <= 16\n");
        return 1;
    }
    enum { D = 128, N = 128 };
    static unsigned short K[N * D], V[N * D]; /* codes as bytes, or bf16 values in [0.5, 1) */
    static float Q[16 * D], S[16 * N], O[16 * D];
    static unsigned short Qb[16 * D];
    unsigned char *k8 = (unsigned char *)K, *v8 = (unsigned char *)V;
    for (int i = 0; i < N * D; i++)
        if (t == ATTN_DTYPE_BF16)
            K[i] = (unsigned short)(0x3f00 + (rand() & 0x7f)), V[i] = (unsigned short)(0x3f00 + (rand() & 0x7f));
        else
            k8[i] = (unsigned char)(rand() & 0x3f), v8[i] = (unsigned char)(rand() & 0x3f);
    for (int i = 0; i < 16 * D; i++) Q[i] = 0.5f, Qb[i] = 0x3f00; /* 0.5 as bf16 */
    for (int i = 0; i < 16 * N; i++) S[i] = 0.25f;
    for (int round = 0; round < 5; round++) {
        int it = 20000;
        double t0 = now();
        for (int i = 0; i < it; i++) kb->qk_rows_bf(Qb, D, R, D, K, D, N, S, N, 1.0f, NULL, 0, 0, t);
        double t1 = now();
        for (int i = 0; i < it; i++) kb->qk_rows_x(Q, R, D, K, D, N, S, N, NULL, 0, 0, t);
        double t2 = now();
        for (int i = 0; i < it; i++) kb->pv_rows_bf(S, N, R, V, D, N, D, O, D, 1.0f, NULL, 0, 0, t);
        double t3 = now();
        for (int i = 0; i < it; i++) kb->pv_rows_x(S, N, R, V, D, N, D, O, D, NULL, 0, 0, t);
        double t4 = now(), k = 1e9 / it / N;
        printf("{\"op\": \"fp8-bf-kernels\", \"kv_dtype\": \"%s\", \"R\": %d, \"qk_bf_ns\": %.2f, \"qk_f32_ns\": %.2f, "
               "\"pv_bf_ns\": %.2f, \"pv_f32_ns\": %.2f}\n",
               attn_storage_of(t)->name, R, (t1 - t0) * k, (t2 - t1) * k, (t3 - t2) * k, (t4 - t3) * k);
    }
    return 0;
}
